// moestream chat: an interactive conversation rendered with the model's own
// chat template. The conversation stays in the KV cache: each turn only the
// tokens after the longest common prefix with the cache are evaluated.
// Ctrl-C stops the current reply; /exit or end of input quits. With --tools,
// the calls a reply writes in the template's own format are shown and kept in
// the conversation as tool_calls; `/tool RESULT` answers the last one.
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/session_flags.h"
#include "runtime/chat_prompt.h"
#include "server/tool_calls.h"

namespace ms {

namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted.store(true); }

// One line from stdin without its newline. Returns false at end of input;
// a Ctrl-C while waiting gives an empty line with *interrupted set.
bool read_line(std::string* out, bool* interrupted) {
    char* buf = nullptr;
    size_t cap = 0;
    errno = 0;
    const ssize_t n = getline(&buf, &cap, stdin);
    *interrupted = n < 0 && errno == EINTR;
    if (n >= 0) out->assign(buf, size_t(n));
    free(buf);
    if (*interrupted) clearerr(stdin);
    if (n < 0) return *interrupted;
    while (!out->empty() && (out->back() == '\n' || out->back() == '\r')) out->pop_back();
    return true;
}

Json message(const char* role, const std::string& content) {
    Json m = Json::object();
    m["role"] = role;
    m["content"] = content;
    return m;
}

}  // namespace

int cmd_chat(int argc, char** argv) {
    Args a("moestream chat -m MODEL [--system TEXT]",
           "Interactive chat. Each turn renders the whole conversation with the model's own chat template "
           "(tokenizer.chat_template) and evaluates only what the KV cache does not already hold; replies stream "
           "as they are generated. Ctrl-C stops the current reply (the conversation goes on); /exit or end of "
           "input (Ctrl-D) quits. Timings are printed at the end.");
    SessionFlags flags;
    std::string system;
    int n_predict = -1;
    a.option("--system", &system, "TEXT", "a system message that opens the conversation");
    a.option("-n,--n-predict", &n_predict, "N", "most tokens per reply (-1: until the end of the turn)");
    std::string think, tools_file, template_file;
    bool verbose_prompt = false;
    a.option("--think", &think, "on|off",
             "the template's enable_thinking: on lets the model reason in its thinking channel first (Gemma 4's "
             "<|channel>thought, Qwen3's <think>), off asks it not to; unset, the template's default");
    a.option("--tools", &tools_file, "FILE.json",
             "function definitions (a JSON array, OpenAI style) the template lists for the model; its tool calls "
             "come back in its own format (Gemma 4: <|tool_call>call:NAME{...}<tool_call|>) and stay in the "
             "conversation (shown as `tool call: NAME ARGUMENTS`); a line `/tool RESULT` answers the last call");
    a.option("--chat-template-file", &template_file, "FILE", "a Jinja chat template to use instead of the model's");
    a.flag("--verbose-prompt", &verbose_prompt, "print each turn's rendered prompt to stderr before the reply");
    flags.declare(a, true);
    if (!a.parse(argc, argv)) return 0;
    if (n_predict < -1 || n_predict == 0) throw std::runtime_error("-n must be -1 or > 0");
    if (!think.empty() && think != "on" && think != "off") throw std::runtime_error("--think must be on or off");
    Json tools;
    if (!tools_file.empty()) {
        tools = Json::parse_file(tools_file);
        if (!tools.is_array()) throw std::runtime_error(tools_file + ": --tools expects a JSON array");
    }

    const std::string template_source = template_file.empty() ? "" : read_chat_template(template_file);

    auto s = flags.open();
    const ChatPrompt prompt(*s, tools, think.empty() ? -1 : think == "on", template_source);
    const ToolFormat tool_calls = tools.is_null() ? ToolFormat::None : tool_format(prompt.source());
    std::string last_call;  // the name of the last tool call, which /tool answers
    const Tokenizer& tok = s->tokenizer();

    // No SA_RESTART: a Ctrl-C at the prompt interrupts the read instead of
    // waiting for Enter.
    struct sigaction sa = {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);

    Json messages = Json::array();
    if (!system.empty()) messages.push_back(message("system", system));
    fprintf(stderr, "chat with %s (%s); Ctrl-C stops a reply, /exit or Ctrl-D quits\n", flags.model.c_str(),
            s->config().arch.c_str());
    for (;;) {
        fputs("> ", stdout);
        fflush(stdout);
        std::string line;
        bool interrupted = false;
        if (!read_line(&line, &interrupted)) break;
        if (interrupted) {
            fputs("\n(Ctrl-C stops a reply; /exit or Ctrl-D quits)\n", stdout);
            continue;
        }
        if (line == "/exit" || line == "/quit") break;
        if (line.empty()) continue;

        if (line.rfind("/tool ", 0) == 0) {
            if (last_call.empty()) {
                fputs("error: /tool answers a tool call, and there is none yet\n", stderr);
                continue;
            }
            Json m = message("tool", line.substr(6));
            m["name"] = last_call;
            messages.push_back(m);
        } else {
            messages.push_back(message("user", line));
        }
        std::vector<int32_t> tokens;
        try {
            if (verbose_prompt) {
                const std::string text = prompt.text(messages);
                fprintf(stderr, "prompt (%zu bytes):\n%s\n", text.size(), text.c_str());
            }
            tokens = prompt.tokens(messages);
            if (tokens.size() >= size_t(s->n_ctx())) {
                throw std::runtime_error("the conversation (" + std::to_string(tokens.size()) +
                                         " tokens) fills the context of " + std::to_string(s->n_ctx()) +
                                         "; start again with a larger -c");
            }
        } catch (const std::exception& e) {
            fprintf(stderr, "error: %s\n", e.what());
            messages.as_array().pop_back();
            continue;
        }

        s->prefill_context(tokens);

        g_interrupted.store(false);
        StreamDecoder text(tok, false);
        std::vector<int32_t> reply;
        const int limit = n_predict < 0 ? int(s->n_ctx()) : n_predict;
        s->generate(
            limit,
            [&](int32_t t) {
                if (!tok.is_eog(t)) reply.push_back(t);
                const std::string piece = text.push(t);
                fwrite(piece.data(), 1, piece.size(), stdout);
                fflush(stdout);
                return true;
            },
            &g_interrupted);
        fputs((text.flush() + "\n").c_str(), stdout);
        if (g_interrupted.load()) fputs("[stopped]\n", stderr);
        // The reply's exact bytes, so the next rendering re-tokenizes to what
        // the cache holds; its tool calls as the template writes them back.
        Json said = assistant_message(tool_calls, tok.decode(reply), tools);
        if (const Json* calls = said.find("tool_calls")) {
            for (const Json& c : calls->as_array()) {
                last_call = c.at("function").at("name").as_string();
                printf("tool call: %s %s\n", last_call.c_str(), c.at("function").at("arguments").dump().c_str());
            }
        }
        messages.push_back(said);
    }
    fputc('\n', stdout);
    flags.finish("chat", *s);
    return 0;
}

}  // namespace ms
