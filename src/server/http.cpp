#include "server/http.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/chat_prompt.h"
#include "server/chat_page.h"
#include "server/http_front.h"
#include "server/tool_calls.h"
#include "telemetry/system.h"

namespace ms {

namespace {

// False once the peer has closed or reset the connection. A client does not
// send while it waits for its reply, so readable-with-no-data is the close.
bool client_alive(int fd) {
    pollfd p{fd, short(POLLIN | POLLRDHUP), 0};
    if (poll(&p, 1, 0) <= 0) return true;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return false;
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
}

// Bytes of text in a chat's messages (their string contents).
size_t content_bytes(const Json& messages) {
    size_t n = 0;
    if (!messages.is_array()) return 0;
    for (const Json& m : messages.as_array()) {
        const Json* c = m.is_object() ? m.find("content") : nullptr;
        if (c && c->is_string()) n += c->as_string().size();
    }
    return n;
}

// Compares in time independent of where the strings differ.
bool same_secret(const std::string& given, const std::string& key) {
    if (given.size() != key.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < key.size(); i++) diff |= static_cast<unsigned char>(given[i] ^ key[i]);
    return diff == 0;
}

void send_json(HttpResponse& res, int status, const Json& body) {
    res.status = status;
    res.content_type = "application/json";
    res.body = body.dump() + "\n";
}

void send_error(HttpResponse& res, const ApiError& e) {
    if (e.status == 503) res.headers.emplace_back("Retry-After", "1");
    send_json(res, e.status, error_json(e));
}

Json usage_json(const Usage& u) {
    Json j = Json::object();
    j["prompt_tokens"] = u.prompt_tokens;
    j["completion_tokens"] = u.completion_tokens;
    j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
    Json details = Json::object();
    details["cached_tokens"] = u.cached_tokens;
    j["prompt_tokens_details"] = details;
    return j;
}

// OpenAI's tool_calls: ids from the response's, and in a stream chunk each
// call's index.
Json tool_calls_json(const std::vector<ToolCall>& calls, const std::string& id, bool indexed) {
    Json out = Json::array();
    for (size_t i = 0; i < calls.size(); i++) {
        Json fn = Json::object();
        fn["name"] = calls[i].name;
        fn["arguments"] = calls[i].arguments;
        Json c = Json::object();
        if (indexed) c["index"] = int64_t(i);
        c["id"] = "call_" + id + "_" + std::to_string(i);
        c["type"] = "function";
        c["function"] = fn;
        out.push_back(std::move(c));
    }
    return out;
}

// A token as text: its bytes where they are valid UTF-8, U+FFFD for a
// piece of a character (the bytes field has them exactly).
std::string token_string(const Tokenizer& tok, int32_t id) {
    StreamDecoder d(tok, true);
    std::string s = d.push(id);
    return s + d.flush();
}

Json token_bytes(const Tokenizer& tok, int32_t id) {
    Json b = Json::array();
    for (unsigned char c : tok.piece(id)) b.push_back(int64_t(c));
    return b;
}

// OpenAI's logprobs object: chat {"content": [{token, logprob, bytes,
// top_logprobs}]}; completions {tokens, token_logprobs, top_logprobs,
// text_offset} (offsets into the choice's text, carried in *offset).
Json logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, bool chat, size_t* offset) {
    Json j = Json::object();
    if (chat) {
        Json content = Json::array();
        for (const TokenLogprob& lp : lps) {
            Json e = Json::object();
            e["token"] = token_string(tok, lp.token);
            e["logprob"] = double(lp.logprob);
            e["bytes"] = token_bytes(tok, lp.token);
            Json top = Json::array();
            for (const auto& [t, l] : lp.top) {
                Json a = Json::object();
                a["token"] = token_string(tok, t);
                a["logprob"] = double(l);
                a["bytes"] = token_bytes(tok, t);
                top.push_back(std::move(a));
            }
            e["top_logprobs"] = std::move(top);
            content.push_back(std::move(e));
        }
        j["content"] = std::move(content);
        j["refusal"] = Json();
        return j;
    }
    Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
    for (const TokenLogprob& lp : lps) {
        tokens.push_back(token_string(tok, lp.token));
        // echo: the prompt's first token has nothing before it.
        const bool none = std::isnan(lp.logprob);
        token_logprobs.push_back(none ? Json() : Json(double(lp.logprob)));
        Json alts = Json::object();
        for (const auto& [t, l] : lp.top) alts[token_string(tok, t)] = double(l);
        top.push_back(none ? Json() : std::move(alts));
        offsets.push_back(int64_t(*offset));
        *offset += tok.piece(lp.token).size();
    }
    j["tokens"] = std::move(tokens);
    j["token_logprobs"] = std::move(token_logprobs);
    j["top_logprobs"] = std::move(top);
    j["text_offset"] = std::move(offsets);
    return j;
}

}  // namespace

FrontOptions front_options(const ServerOptions& o);

struct HttpServer::Impl {
    Engine& engine;
    ServerOptions options;
    RequestDefaults defaults;
    std::unique_ptr<ChatPrompt> chat;  // null when the model has no chat template
    ToolFormat tools = ToolFormat::None;  // how the template has the model write tool calls
    size_t max_piece_bytes = 0;  // the vocabulary's longest token text
    std::unique_ptr<HttpFront> front;
    std::atomic<uint64_t> next_id{1};
    std::atomic<uint64_t> rejected{0};
    // Bytes of the grammars of requests in service (ServerOptions::
    // grammar_budget_bytes). Shared: a job may outlive the server.
    struct GrammarBudget {
        std::mutex mu;
        size_t used = 0;
    };
    std::shared_ptr<GrammarBudget> grammar_budget = std::make_shared<GrammarBudget>();
    std::mutex count_mu;
    std::map<std::pair<std::string, int>, uint64_t> counts;  // (route, status) -> responses

    Impl(Engine& e, const ServerOptions& o) : engine(e), options(o) {
        const Session& s = engine.session();
        defaults.model_id = o.model_id;
        defaults.n_ctx = s.n_ctx();
        defaults.n_vocab = s.config().n_vocab;
        defaults.sampling = o.sampling;
        for (size_t id = 0; id < s.tokenizer().n_vocab(); id++) {
            max_piece_bytes = std::max(max_piece_bytes, s.tokenizer().piece(int32_t(id)).size());
        }
        max_piece_bytes = std::max<size_t>(max_piece_bytes, 16);  // byte fallbacks, control tokens
        try {
            chat = std::make_unique<ChatPrompt>(s, o.chat_template);
            tools = tool_format(chat->source());
        } catch (const std::exception& ex) {
            // The details (with the model's path) are the operator's; clients get a plain refusal.
            fprintf(stderr, "note: chat completions are off: %s\n", ex.what());
        }
        front = std::make_unique<HttpFront>(
            front_options(o), [this](const HttpRequest& req, HttpResponse& res) { handle(req, res); },
            // Answered on the poll thread: never waits on anything. (/metrics
            // waits for the forward pass in flight, so it goes to a worker.)
            [](const HttpRequest& req) {
                return req.method == "OPTIONS" || ((req.method == "GET" || req.method == "HEAD") && req.path == "/health");
            },
            [this](const std::string& method, const std::string& path, int status) {
                count(path, status);
                log_line(method, path.empty() ? "-" : path, status, nullptr, 0);
            });
    }

    void handle(const HttpRequest& req, HttpResponse& res);
    void route(const HttpRequest& req, HttpResponse& res, std::shared_ptr<Job>* job);
    void generate(const HttpRequest& req, HttpResponse& res, bool is_chat, std::shared_ptr<Job>* job_out);
    void tokenize(const HttpRequest& req, HttpResponse& res);
    void detokenize(const HttpRequest& req, HttpResponse& res);
    void apply_template(const HttpRequest& req, HttpResponse& res);
    Json props();
    Json slots();
    std::string metrics();
    Json model() const;
    Json models() const;
    void count(const std::string& path, int status);
    // An engine error for a client: the model file named without its
    // directories (the server's paths are the operator's).
    std::string without_dirs(std::string message) const {
        const std::string& file = engine.session().file().path();
        const size_t slash = file.rfind('/');
        if (slash == std::string::npos) return message;
        const std::string dir = file.substr(0, slash + 1);
        for (size_t at; (at = message.find(dir)) != std::string::npos;) message.erase(at, dir.size());
        return message;
    }
    void log_line(const std::string& method, const std::string& path, int status, const Job* job, double ms);
};

FrontOptions front_options(const ServerOptions& o) {
    FrontOptions f;
    f.max_connections = o.max_connections;
    f.workers = o.http_threads;
    f.idle_timeout_s = o.idle_timeout_s;
    f.header_timeout_s = o.header_timeout_s;
    f.body_timeout_s = o.body_timeout_s;
    f.write_timeout_s = o.idle_timeout_s;
    f.max_body_bytes = o.max_body_bytes;
    f.body_budget_bytes = o.body_budget_bytes;
    return f;
}

size_t request_memory_bytes(const ServerOptions& o) {
    // A body in flight costs itself, its parsed JSON and its prompt text:
    // 3.4x the body, measured with 8 MiB completion prompts (peak RSS 82
    // MiB for two at once over 28 MiB idle), rounded up.
    return o.body_budget_bytes / 2 * 7 + front_buffer_bytes(front_options(o));
}

size_t grammar_memory_bytes(const ServerOptions& o, const TokenTrie& trie, int slots) {
    return trie.memory_bytes() + size_t(slots) * GrammarMatcher::memory_bound(trie) + o.grammar_budget_bytes;
}

void HttpServer::Impl::count(const std::string& path, int status) {
    static const char* known[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics",
                                  "/",  "/tokenize", "/detokenize", "/props", "/slots", "/apply-template"};
    std::string route = "other";
    for (const char* k : known)
        if (path == k) route = k;
    if (path.compare(0, 11, "/v1/models/") == 0) route = "/v1/models/{id}";
    std::lock_guard<std::mutex> lk(count_mu);
    counts[{route, status}]++;
}

// One line a request on stderr: method, path, status, tokens, milliseconds.
void HttpServer::Impl::log_line(const std::string& method, const std::string& path, int status, const Job* job,
                                double ms) {
    std::string p = path.substr(0, 128);
    for (char& c : p)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    char buf[400];
    if (job) {
        snprintf(buf, sizeof buf, "%s %s %d prompt=%lld generated=%lld %.0fms\n", method.substr(0, 16).c_str(),
                 p.c_str(), status, (long long)job->usage.prompt_tokens, (long long)job->usage.completion_tokens, ms);
    } else {
        snprintf(buf, sizeof buf, "%s %s %d %.0fms\n", method.substr(0, 16).c_str(), p.c_str(), status, ms);
    }
    fputs(buf, stderr);
}

void HttpServer::Impl::handle(const HttpRequest& req, HttpResponse& res) {
    std::shared_ptr<Job> job;
    try {
        route(req, res, &job);
    } catch (const ApiError& e) {
        res = HttpResponse();
        send_error(res, e);
    } catch (const std::exception& e) {
        // The operator's log gets the details; the client a plain 500 (no paths).
        fprintf(stderr, "error: %s %s: %s\n", req.method.c_str(), req.path.c_str(), e.what());
        res = HttpResponse();
        send_error(res, ApiError(500, "internal error (the server's log has the details)", "", "server_error"));
    }
    if (!options.cors.empty()) {
        res.headers.emplace_back("Access-Control-Allow-Origin", options.cors);
        if (options.cors != "*") res.headers.emplace_back("Vary", "Origin");
    }
    res.head_only = req.method == "HEAD";
    count(req.path, res.status);
    const double started = req.received;
    if (!res.stream) {
        log_line(req.method, req.path, res.status, job.get(), (steady_seconds() - started) * 1000);
        return;
    }
    // A stream is over when its provider says so: log it then.
    auto provider = std::move(res.stream);
    res.stream = [this, provider, job, method = req.method, path = req.path, started, status = res.status](
                     const StreamWrite& write) {
        const bool more = provider(write);
        if (!more) log_line(method, path, status, job.get(), (steady_seconds() - started) * 1000);
        return more;
    };
}

void HttpServer::Impl::route(const HttpRequest& req, HttpResponse& res, std::shared_ptr<Job>* job) {
    const std::string& m = req.method;
    const std::string& path = req.path;
    if (m == "OPTIONS") {
        // CORS preflight: allowed only with --cors.
        if (options.cors.empty()) throw ApiError(404, "no route OPTIONS " + path + " (start serve with --cors ORIGIN)");
        res.status = 204;
        res.content_type.clear();
        res.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.headers.emplace_back("Access-Control-Max-Age", "86400");
        return;
    }
    const bool get = m == "GET" || m == "HEAD";
    if (get && path == "/health") {
        Json j = Json::object();
        j["status"] = "ok";
        return send_json(res, 200, j);
    }
    if (get && path == "/") {
        res.content_type = "text/html; charset=utf-8";
        res.body = kChatPage;
        return;
    }
    if (!options.api_key.empty()) {
        const std::string auth = req.header("authorization");
        const std::string prefix = "Bearer ";
        if (auth.compare(0, prefix.size(), prefix) != 0 || !same_secret(auth.substr(prefix.size()), options.api_key)) {
            res.headers.emplace_back("WWW-Authenticate", "Bearer");
            throw ApiError(401, auth.empty() ? "no API key: send Authorization: Bearer <key>" : "invalid API key", "",
                           "invalid_request_error", "invalid_api_key");
        }
    }
    if (get && path == "/metrics") {
        res.content_type = "text/plain; version=0.0.4";
        res.body = metrics();
        return;
    }
    if (get && path == "/v1/models") return send_json(res, 200, models());
    if (get && path.compare(0, 11, "/v1/models/") == 0) {
        const std::string id = path.substr(11);
        if (id != options.model_id) {
            throw ApiError(404, "The model '" + id.substr(0, 200) + "' does not exist; this server serves '" +
                                    options.model_id + "'", "model", "invalid_request_error", "model_not_found");
        }
        return send_json(res, 200, model());
    }
    if (get && path == "/props") return send_json(res, 200, props());
    if (get && path == "/slots") return send_json(res, 200, slots());
    if (m == "POST") {
        if (path == "/v1/chat/completions" || path == "/chat/completions") return generate(req, res, true, job);
        if (path == "/v1/completions" || path == "/completions") return generate(req, res, false, job);
        if (path == "/tokenize") return tokenize(req, res);
        if (path == "/detokenize") return detokenize(req, res);
        if (path == "/apply-template") return apply_template(req, res);
    }
    throw ApiError(404, "no route " + m.substr(0, 16) + " " + path.substr(0, 200));
}

// llama-server's POST /tokenize: {"content", "add_special"?, "with_pieces"?}
// -> {"tokens": [id...]} or [{"id", "piece"}...].
void HttpServer::Impl::tokenize(const HttpRequest& req, HttpResponse& res) {
    const Json body = parse_body(req.body, options.max_body_bytes);
    if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
    const Json* content = body.find("content");
    if (!content || !content->is_string()) throw ApiError(400, "'content' must be a string", "content");
    auto flag = [&](const char* name) {
        const Json* v = body.find(name);
        if (v && !v->is_null() && !v->is_bool()) throw ApiError(400, std::string("'") + name + "' must be a boolean", name);
        return v && v->is_bool() && v->as_bool();
    };
    const bool add_special = flag("add_special"), with_pieces = flag("with_pieces");
    const Session& s = engine.session();
    const std::vector<int32_t> ids = s.tokenize(content->as_string(), add_special);
    Json tokens = Json::array();
    for (int32_t id : ids) {
        if (!with_pieces) {
            tokens.push_back(Json(int64_t(id)));
            continue;
        }
        Json t = Json::object();
        t["id"] = int64_t(id);
        t["piece"] = s.tokenizer().decode({id});
        tokens.push_back(std::move(t));
    }
    Json j = Json::object();
    j["tokens"] = tokens;
    send_json(res, 200, j);
}

// llama-server's POST /detokenize: {"tokens": [id...]} -> {"content"}.
void HttpServer::Impl::detokenize(const HttpRequest& req, HttpResponse& res) {
    const Json body = parse_body(req.body, options.max_body_bytes);
    if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
    const Json* tokens = body.find("tokens");
    if (!tokens || !tokens->is_array()) throw ApiError(400, "'tokens' must be an array of token ids", "tokens");
    const Session& s = engine.session();
    const double n_vocab = double(s.tokenizer().n_vocab());
    std::vector<int32_t> ids;
    for (const Json& t : tokens->as_array()) {
        const double x = t.is_number() ? t.as_number() : -1;
        if (!t.is_number() || x != std::floor(x) || x < 0 || x >= n_vocab) {
            throw ApiError(400, "'tokens' must hold token ids from 0 to " + std::to_string(int64_t(n_vocab) - 1), "tokens");
        }
        ids.push_back(int32_t(x));
    }
    Json j = Json::object();
    j["content"] = s.tokenizer().decode(ids);
    send_json(res, 200, j);
}

// llama-server's POST /apply-template: {"messages"} -> {"prompt"}: the text
// the chat template makes of them, generation prompt included.
void HttpServer::Impl::apply_template(const HttpRequest& req, HttpResponse& res) {
    const Json body = parse_body(req.body, options.max_body_bytes);
    if (!chat) throw ApiError(400, "the model has no chat template; use /v1/completions", "messages");
    const GenerationRequest r = parse_chat_request(body, defaults);
    Json j = Json::object();
    try {
        j["prompt"] = chat->text(r.messages, r.tools);
    } catch (const TemplateError& e) {
        throw ApiError(400, std::string("the chat template refused the messages: ") + e.what(), "messages");
    }
    send_json(res, 200, j);
}

// llama-server's GET /props, the parts that apply here.
Json HttpServer::Impl::props() {
    const Session& s = engine.session();
    const SamplerParams& p = defaults.sampling;
    Json params = Json::object();
    params["temperature"] = double(p.temp);
    params["top_k"] = int64_t(p.top_k);
    params["top_p"] = double(p.top_p);
    params["min_p"] = double(p.min_p);
    params["repeat_penalty"] = double(p.repeat_penalty);
    params["repeat_last_n"] = int64_t(p.repeat_last_n);
    params["presence_penalty"] = double(p.presence_penalty);
    params["frequency_penalty"] = double(p.frequency_penalty);
    Json gen = Json::object();
    gen["n_ctx"] = s.n_ctx();
    gen["params"] = params;
    Json j = Json::object();
    j["default_generation_settings"] = gen;
    j["total_slots"] = int64_t(engine.stats().slots);
    j["model_alias"] = options.model_id;
    j["chat_template"] = chat ? Json(chat->source()) : Json();
    Json mod = Json::object();
    mod["vision"] = false;
    mod["audio"] = false;
    j["modalities"] = mod;
    j["build_info"] = "moestream";
    return j;
}

// llama-server's GET /slots: each slot and whether it is generating.
Json HttpServer::Impl::slots() {
    const EngineStats st = engine.stats();
    const int64_t n_ctx = engine.session().n_ctx();
    Json out = Json::array();
    for (size_t i = 0; i < st.slot_busy.size(); i++) {
        Json s = Json::object();
        s["id"] = int64_t(i);
        s["n_ctx"] = n_ctx;
        s["is_processing"] = bool(st.slot_busy[i]);
        out.push_back(std::move(s));
    }
    return out;
}

Json HttpServer::Impl::model() const {
    const Session& s = engine.session();
    Json m = Json::object();
    m["id"] = options.model_id;
    m["object"] = "model";
    m["created"] = int64_t(0);
    m["owned_by"] = "moestream";
    Json meta = Json::object();
    meta["arch"] = s.config().arch;
    meta["n_ctx"] = s.n_ctx();
    meta["n_vocab"] = s.config().n_vocab;
    m["meta"] = meta;
    return m;
}

Json HttpServer::Impl::models() const {
    Json data = Json::array();
    data.push_back(model());
    Json j = Json::object();
    j["object"] = "list";
    j["data"] = data;
    return j;
}

void HttpServer::Impl::generate(const HttpRequest& req, HttpResponse& res, bool is_chat, std::shared_ptr<Job>* job_out) {
    std::shared_ptr<Job> job;
    {
        const Json body = parse_body(req.body, options.max_body_bytes);
        GenerationRequest r = is_chat ? parse_chat_request(body, defaults) : parse_completion_request(body, defaults);
        // Text longer than the context can hold at the longest piece per
        // token is refused before tokenizing (which would take seconds and
        // many times the text's bytes for a body of megabytes).
        const size_t text_bytes = is_chat ? content_bytes(r.messages) : r.prompt.size();
        if (text_bytes > size_t(defaults.n_ctx) * max_piece_bytes) {
            throw ApiError(400, "the prompt is " + std::to_string(text_bytes) + " bytes; the context holds " +
                                    std::to_string(defaults.n_ctx) + " tokens", is_chat ? "messages" : "prompt",
                           "invalid_request_error", "context_length_exceeded");
        }
        std::vector<int32_t> prompt;
        if (is_chat) {
            if (!chat) throw ApiError(400, "the model has no chat template; use /v1/completions", "messages");
            if (!r.tools.is_null()) {
                if (tools == ToolFormat::None) {
                    throw ApiError(400, "the model's chat template has no tool-call format this server knows", "tools");
                }
                r.show_control = tool_markers_are_control(tools);
            }
            try {
                prompt = chat->tokens(r.messages, r.tools);
            } catch (const TemplateError& e) {
                throw ApiError(400, std::string("the chat template refused the messages: ") + e.what(), "messages");
            }
        } else {
            prompt = engine.session().tokenize(r.prompt, true);
            if (prompt.empty()) throw ApiError(400, "'prompt' is empty", "prompt");
        }
        if (engine.session().draft().mode != DraftMode::Off) {
            // Speculation samples inside the session, out of reach of the mask and the per-token records.
            const char* off = r.grammar ? "response_format" : r.logprobs >= 0 ? "logprobs" : r.n > 1 ? "n" : nullptr;
            if (off) throw ApiError(400, std::string("'") + off + "' is not available with --draft", off);
        }
        const int64_t n_ctx = defaults.n_ctx;
        if (int64_t(prompt.size()) >= n_ctx) {
            throw ApiError(400, "the prompt is " + std::to_string(prompt.size()) + " tokens; the context holds " +
                                    std::to_string(n_ctx) + " (prompt and reply together)",
                           is_chat ? "messages" : "prompt", "invalid_request_error", "context_length_exceeded");
        }
        // As llama-server: more than the context has left is capped (the
        // reply then ends with finish_reason "length").
        if (r.max_tokens > 0 && int64_t(prompt.size()) + r.max_tokens > n_ctx) {
            r.max_tokens = n_ctx - int64_t(prompt.size());
        }
        std::shared_ptr<void> held;
        if (r.grammar) {
            // The grammar counts in --mem: it takes its bytes from the budget while the request lives.
            const size_t need = r.grammar->bytes(), budget = options.grammar_budget_bytes;
            auto kib = [](size_t b) { return std::to_string((b + 1023) / 1024) + " KiB"; };
            if (need > budget) {
                throw ApiError(400, "the grammar of '" + r.grammar_field + "' takes " + kib(need) +
                                        " compiled; the server holds at most " + kib(budget) +
                                        " of grammars (--grammar-mem): simplify it", r.grammar_field);
            }
            std::shared_ptr<GrammarBudget> g = grammar_budget;
            {
                std::lock_guard<std::mutex> lk(g->mu);
                if (g->used + need > budget) {
                    rejected++;
                    throw ApiError(503, "the grammars of the requests in service fill --grammar-mem; retry later",
                                   r.grammar_field, "server_error", "overloaded");
                }
                g->used += need;
            }
            held = std::shared_ptr<void>(nullptr, [g, need](void*) {
                std::lock_guard<std::mutex> lk(g->mu);
                g->used -= need;
            });
        }
        job = std::make_shared<Job>(std::move(r), std::move(prompt), options.timeout_s);
        job->held = std::move(held);
        if (const int fd = req.fd; fd >= 0) job->client_alive = [fd] { return client_alive(fd); };
        if (!engine.submit(job)) {
            rejected++;
            throw ApiError(503, "the server is busy: every slot is generating and the queue is full; retry later",
                           "", "server_error", "overloaded");
        }
        *job_out = job;
    }

    const std::string id = (is_chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const int64_t created = int64_t(time(nullptr));
    const GenerationRequest& r = job->request;
    // The fields every response and stream chunk of this request starts with.
    auto envelope = [this, id, created](const char* object) {
        Json j = Json::object();
        j["id"] = id;
        j["object"] = object;
        j["created"] = created;
        j["model"] = options.model_id;
        return j;
    };
    const Tokenizer& tok = engine.session().tokenizer();
    auto chunk = [envelope, is_chat, &tok](int choice_index, const std::string& text, const std::string& reason, bool first,
                                            const std::vector<TokenLogprob>* lp, size_t* offset) {
        Json c = envelope(is_chat ? "chat.completion.chunk" : "text_completion");
        Json choice = Json::object();
        choice["index"] = choice_index;
        if (is_chat) {
            Json delta = Json::object();
            if (first) delta["role"] = "assistant";
            if (!text.empty() || first) delta["content"] = text;
            choice["delta"] = delta;
        } else {
            choice["text"] = text;
        }
        choice["logprobs"] = lp ? logprobs_json(tok, *lp, is_chat, offset) : Json();
        choice["finish_reason"] = reason.empty() ? Json() : Json(reason);
        Json choices = Json::array();
        choices.push_back(choice);
        c["choices"] = choices;
        return c;
    };

    const ToolFormat format = r.tools.is_null() ? ToolFormat::None : tools;
    const bool want_logprobs = r.logprobs >= 0;
    if (!r.stream) {
        std::vector<JobOutput> out;
        while (!job->wait(&out, 1.0)) {
        }
        if (!job->error.empty()) {
            if (job->error != "cancelled") {
                fprintf(stderr, "error: %s: %s\n", req.path.c_str(), job->error.c_str());
                send_error(res, ApiError(500, without_dirs(job->error), "", "server_error"));
            }
            return;
        }
        std::vector<JobOutput> per(size_t(r.n));
        for (JobOutput& o : out) {
            JobOutput& p = per[size_t(o.choice)];
            p.text += o.text;
            p.logprobs.insert(p.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
            if (!o.finish_reason.empty()) p.finish_reason = o.finish_reason;
        }
        Json j = envelope(is_chat ? "chat.completion" : "text_completion");
        Json choices = Json::array();
        for (int i = 0; i < r.n; i++) {
            const JobOutput& p = per[size_t(i)];
            Json choice = Json::object();
            choice["index"] = i;
            std::string reason = p.finish_reason;
            if (is_chat) {
                const ParsedReply reply = parse_tool_calls(format, p.text, r.tools);
                Json msg = Json::object();
                msg["role"] = "assistant";
                msg["content"] = reply.calls.empty() || !reply.content.empty() ? Json(reply.content) : Json();
                if (!reply.calls.empty()) {
                    msg["tool_calls"] = tool_calls_json(reply.calls, id, false);
                    reason = "tool_calls";
                }
                choice["message"] = msg;
            } else {
                choice["text"] = p.text;
            }
            size_t offset = 0;
            choice["logprobs"] = want_logprobs ? logprobs_json(tok, p.logprobs, is_chat, &offset) : Json();
            choice["finish_reason"] = reason;
            choices.push_back(std::move(choice));
        }
        j["choices"] = choices;
        j["usage"] = usage_json(job->usage);
        send_json(res, 200, j);
        return;
    }

    res.headers.emplace_back("Cache-Control", "no-cache");
    res.headers.emplace_back("X-Accel-Buffering", "no");  // proxies: pass each event on at once
    res.content_type = "text/event-stream";
    // Per choice: whether its first chunk went out, and with tools the reply
    // so far and how much of it went out as content (up to where a tool call
    // begins; the calls go out parsed when the choice ends); the text offset
    // of completions' logprobs.
    struct ChoiceStream {
        bool sent_first = false;
        std::string reply;
        size_t sent = 0, offset = 0;
    };
    auto streams = std::make_shared<std::vector<ChoiceStream>>(size_t(r.n));
    // Called until it returns false; a write that fails (the client left)
    // cancels the job.
    res.stream = [this, job, chunk, format, streams, id, want_logprobs, path = req.path](const StreamWrite& write) {
            auto send = [&](const Json& j) { return write("data: " + j.dump() + "\n\n"); };
            std::vector<JobOutput> out;
            const bool done = job->wait(&out, 0.5);
            const bool include_usage = job->request.include_usage;
            auto with_usage = [&](Json c) {
                if (include_usage) c["usage"] = Json();
                return c;
            };
            if (out.empty() && !done) {
                // Nothing new: the first chunk of choice 0 still tells the
                // client the reply has begun.
                ChoiceStream& cs = (*streams)[0];
                if (cs.sent_first) return true;
                JobOutput o;
                out.push_back(o);
            }
            for (const JobOutput& o : out) {
                ChoiceStream& cs = (*streams)[size_t(o.choice)];
                std::string text = o.text;
                const bool ended = !o.finish_reason.empty();
                ParsedReply parsed;
                if (format != ToolFormat::None) {
                    cs.reply += text;
                    const size_t free = tool_free_prefix(format, cs.reply);
                    if (ended) parsed = parse_tool_calls(format, cs.reply, job->request.tools);
                    const size_t upto = ended && parsed.calls.empty() ? cs.reply.size() : std::max(free, cs.sent);
                    text = cs.reply.substr(cs.sent, upto - cs.sent);
                    cs.sent = upto;
                }
                if (!cs.sent_first || !text.empty() || !o.logprobs.empty()) {
                    const std::vector<TokenLogprob>* lp = want_logprobs ? &o.logprobs : nullptr;
                    if (!send(with_usage(chunk(o.choice, text, "", !cs.sent_first, lp, &cs.offset)))) {
                        job->cancelled = true;
                        return false;
                    }
                    cs.sent_first = true;
                }
                if (!ended) continue;
                std::string reason = o.finish_reason;
                if (!parsed.calls.empty()) {
                    Json c = chunk(o.choice, "", "", false, nullptr, nullptr);
                    Json delta = Json::object();
                    delta["tool_calls"] = tool_calls_json(parsed.calls, id, true);
                    c["choices"].as_array()[0]["delta"] = delta;
                    send(with_usage(c));
                    reason = "tool_calls";
                }
                send(with_usage(chunk(o.choice, "", reason, false, nullptr, nullptr)));
            }
            if (!done) return true;
            if (!job->error.empty()) {
                if (job->error != "cancelled") {
                    fprintf(stderr, "error: %s: %s\n", path.c_str(), job->error.c_str());
                    send(error_json(ApiError(500, without_dirs(job->error), "", "server_error")));
                }
                return false;
            }
            if (include_usage) {
                Json u = chunk(0, "", "", false, nullptr, nullptr);
                u["choices"] = Json::array();
                u["usage"] = usage_json(job->usage);
                send(u);
            }
            write("data: [DONE]\n\n");
            return false;
        };
}

std::string HttpServer::Impl::metrics() {
    const EngineStats s = engine.stats();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help) {
        out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    };
    auto value = [&](const std::string& name, double v) {
        char buf[64];
        snprintf(buf, sizeof buf, " %.17g\n", v);
        out += name + buf;
    };
    metric("moestream_http_responses_total", "counter", "HTTP responses by route and status");
    {
        std::lock_guard<std::mutex> lk(count_mu);
        for (const auto& [key, n] : counts) {
            value("moestream_http_responses_total{route=\"" + key.first + "\",status=\"" +
                      std::to_string(key.second) + "\"}",
                  double(n));
        }
    }
    metric("moestream_requests_total", "counter", "generation requests by outcome");
    value("moestream_requests_total{outcome=\"done\"}", double(s.requests_done));
    value("moestream_requests_total{outcome=\"cancelled\"}", double(s.requests_cancelled));
    value("moestream_requests_total{outcome=\"failed\"}", double(s.requests_failed));
    value("moestream_requests_total{outcome=\"rejected\"}", double(rejected.load()));
    metric("moestream_queue_depth", "gauge", "requests waiting for a slot");
    value("moestream_queue_depth", s.queued);
    metric("moestream_slots_busy", "gauge", "slots generating");
    value("moestream_slots_busy", s.busy_slots);
    metric("moestream_slots", "gauge", "slots (--parallel)");
    value("moestream_slots", s.slots);
    metric("moestream_prompt_tokens_total", "counter", "prompt tokens of finished requests");
    value("moestream_prompt_tokens_total", double(s.prompt_tokens));
    metric("moestream_prompt_tokens_cached_total", "counter", "prompt tokens found in a slot's KV cache (not evaluated)");
    value("moestream_prompt_tokens_cached_total", double(s.cached_prompt_tokens));
    metric("moestream_prefill_tokens_total", "counter", "prompt tokens evaluated");
    value("moestream_prefill_tokens_total", double(s.prefilled_tokens));
    metric("moestream_generated_tokens_total", "counter", "tokens generated");
    value("moestream_generated_tokens_total", double(s.generated_tokens));
    metric("moestream_prefill_seconds_total", "counter", "seconds spent evaluating prompts");
    value("moestream_prefill_seconds_total", s.prefill_seconds);
    metric("moestream_decode_seconds_total", "counter", "seconds spent generating tokens");
    value("moestream_decode_seconds_total", s.decode_seconds);
    metric("moestream_decode_tokens_per_second", "gauge", "generated tokens per second of decoding, all slots together");
    value("moestream_decode_tokens_per_second", s.decode_seconds > 0 ? double(s.generated_tokens) / s.decode_seconds : 0);
    metric("moestream_decode_passes_total", "counter", "decode forward passes (with --draft, or several slots decoding together, each may give several tokens)");
    value("moestream_decode_passes_total", double(s.decode_passes));
    metric("moestream_draft_tokens_total", "counter", "tokens drafted for speculative decoding");
    value("moestream_draft_tokens_total", double(s.drafted_tokens));
    metric("moestream_draft_accepted_tokens_total", "counter", "drafted tokens the model accepted");
    value("moestream_draft_accepted_tokens_total", double(s.accepted_tokens));
    metric("moestream_tokens_per_decode_pass", "gauge", "generated tokens per decode forward pass");
    value("moestream_tokens_per_decode_pass", s.decode_passes > 0 ? double(s.generated_tokens) / double(s.decode_passes) : 0);
    metric("moestream_prefill_tokens_per_second", "gauge", "prompt tokens evaluated per second of prefill");
    value("moestream_prefill_tokens_per_second", s.prefill_seconds > 0 ? double(s.prefilled_tokens) / s.prefill_seconds : 0);
    metric("moestream_expert_cache_hits_total", "counter", "expert uses found in the cache");
    value("moestream_expert_cache_hits_total", double(s.hits));
    metric("moestream_expert_cache_misses_total", "counter", "expert uses read from the drive");
    value("moestream_expert_cache_misses_total", double(s.misses));
    metric("moestream_expert_cache_hit_rate", "gauge", "hits / (hits + misses) since start");
    value("moestream_expert_cache_hit_rate", s.hits + s.misses ? double(s.hits) / double(s.hits + s.misses) : 0);
    // Each family's samples follow its own HELP and TYPE (the text format
    // does not allow them to interleave with another family's).
    metric("moestream_bytes_needed_total", "counter", "bytes the model needed, by reason");
    uint64_t needed = 0;
    for (int r = 0; r < kReadReasons; r++) {
        value("moestream_bytes_needed_total{reason=\"" + std::string(read_reason_name(ReadReason(r))) + "\"}",
              double(s.needed[r]));
        needed += s.needed[r];
    }
    metric("moestream_bytes_read_total", "counter", "bytes requested from the drive (aligned), by reason");
    for (int r = 0; r < kReadReasons; r++) {
        value("moestream_bytes_read_total{reason=\"" + std::string(read_reason_name(ReadReason(r))) + "\"}",
              double(s.read[r]));
    }
    if (s.gpu_tier) {
        // --gpu with experts streamed: where each expert use was served.
        // A miss is computed by the host (--gpu-ram-tier cpu), read by the
        // kernels over the bus (map), or else copied into VRAM on demand.
        const uint64_t bus = s.gpu.mapped ? s.gpu.misses : 0;
        metric("moestream_gpu_expert_uses_total", "counter", "expert uses on the GPU path, by where they ran from");
        value("moestream_gpu_expert_uses_total{source=\"vram\"}", double(s.gpu.hits));
        value("moestream_gpu_expert_uses_total{source=\"copied\"}", double(s.gpu.misses - s.gpu.host_computed - bus));
        value("moestream_gpu_expert_uses_total{source=\"host\"}", double(s.gpu.host_computed));
        value("moestream_gpu_expert_uses_total{source=\"bus\"}", double(bus));
        metric("moestream_gpu_prefetch_copies_total", "counter", "next-layer predicted experts copied to VRAM ahead");
        value("moestream_gpu_prefetch_copies_total", double(s.gpu.prefetch_copies));
        metric("moestream_gpu_expert_bytes_total", "counter", "expert bytes by tier: copied host to VRAM, read by the host's cores, read by kernels over the bus");
        value("moestream_gpu_expert_bytes_total{tier=\"copied\"}", double(s.gpu.copied_bytes));
        value("moestream_gpu_expert_bytes_total{tier=\"host\"}", double(s.gpu.host_bytes));
        value("moestream_gpu_expert_bytes_total{tier=\"bus\"}", double(s.gpu.bus_read_bytes));
    }
    const uint64_t process_read = proc_io_read_bytes();
    metric("moestream_process_read_bytes_total", "counter", "bytes this process caused to be read from storage");
    value("moestream_process_read_bytes_total", double(process_read));
    metric("moestream_read_amplification", "gauge", "bytes read from storage per byte the model needed");
    value("moestream_read_amplification", needed ? double(process_read) / double(needed) : 0);
    metric("moestream_rss_bytes", "gauge", "resident set size");
    value("moestream_rss_bytes", double(rss_bytes()));
    metric("moestream_peak_rss_bytes", "gauge", "peak resident set size");
    value("moestream_peak_rss_bytes", double(peak_rss_bytes()));
    return out;
}

HttpServer::HttpServer(Engine& engine, const ServerOptions& options)
    : impl_(std::make_unique<Impl>(engine, options)) {}

HttpServer::~HttpServer() = default;

void HttpServer::bind() { impl_->front->bind(impl_->options.host, impl_->options.port); }

int HttpServer::port() const { return impl_->front->port(); }

void HttpServer::listen() { impl_->front->run(); }

void HttpServer::stop() { impl_->front->stop(); }

}  // namespace ms
