// moestream serve: an OpenAI-compatible HTTP server (src/server/) over
// --parallel slots that share one model and expert store. Loads the model,
// binds, prints the address it listens on, serves until SIGINT/SIGTERM, then
// prints the totals (and writes --report).
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/session_flags.h"
#include "gguf/gguf.h"
#include "model/summary.h"
#include "server/http.h"
#include "tokenizer/tokenizer.h"

namespace ms {

namespace {

std::string model_name(const std::string& path) {
    std::string name = path.substr(path.find_last_of('/') + 1);
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) name.resize(name.size() - 5);
    return name;
}

std::string read_key_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error(path + ": cannot read the API key file");
    std::string key;
    std::getline(f, key);
    while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
    if (key.empty()) throw std::runtime_error(path + ": the API key file's first line is empty");
    return key;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
    Args a("moestream serve -m MODEL [--host ADDR] [--port N] [--parallel N] [--api-key KEY]",
           "Serves the model over HTTP with the OpenAI API: POST /v1/chat/completions (the model's own chat "
           "template; \"stream\": true for server-sent events), POST /v1/completions, GET /v1/models; and "
           "GET /health, GET /metrics (Prometheus text) and a chat page at /. --parallel slots each keep a "
           "conversation's KV cache, so a follow-up turn only evaluates its new tokens; the slots that are "
           "generating decode together, one forward pass a token for all of them (each MoE layer reads the "
           "union of their experts once). Requests beyond the slots "
           "wait in a queue of --queue; beyond that they get 503 at once. The sampling flags are the defaults "
           "for fields a request leaves out. Without -c each slot's context is the model's training context, at "
           "most 4096 tokens. Stops on SIGINT/SIGTERM.");
    SessionFlags flags;
    ServerOptions so;
    std::string key_file, alias, template_file;
    int parallel = 1, queue = 16;
    uint64_t max_body = so.max_body_bytes, request_mem = 0, grammar_mem = so.grammar_budget_bytes;
    a.option("--host", &so.host, "ADDR", "address to listen on (0.0.0.0: every interface; mind --api-key then)");
    a.option("--port", &so.port, "N", "TCP port (0: any free port; the one taken is printed)");
    a.option("--api-key", &so.api_key, "KEY",
             "require Authorization: Bearer KEY on every route but /health and the page at / (answered 401)");
    a.option("--api-key-file", &key_file, "FILE", "read the API key from FILE's first line (keeps it out of ps)");
    a.option("--alias", &alias, "NAME", "the model's id in the API (default: the file name without .gguf)");
    a.option("-np,--parallel", &parallel, "N",
             "slots: conversations held at once, each with its own KV cache of -c tokens inside --mem");
    a.option("--queue", &queue, "N", "requests that may wait for a slot; more get 503 at once");
    a.option("--timeout", &so.timeout_s, "S",
             "a request's longest life in seconds, queue included; past it the reply ends (finish_reason "
             "\"length\")");
    a.option("--idle-timeout", &so.idle_timeout_s, "S",
             "seconds an idle keep-alive connection stays open, and the longest a reply waits for its client to "
             "take more bytes");
    a.option("--header-timeout", &so.header_timeout_s, "S",
             "seconds from a request's first byte to the end of its headers (a slow client is cut off: 408)");
    a.option("--body-timeout", &so.body_timeout_s, "S", "seconds from the end of a request's headers to the end of "
             "its body (408 past it)");
    a.option("--max-connections", &so.max_connections, "N",
             "open connections at most; a new one beyond them closes the one idle or slow the longest");
    a.option("--cors", &so.cors, "ORIGIN",
             "answer CORS preflights (OPTIONS) and send Access-Control-Allow-Origin: ORIGIN (\"*\": any site)");
    a.option("--chat-template-file", &template_file, "FILE",
             "a Jinja chat template to use instead of the model's (e.g. one that offers tools)");
    a.size_option("--max-body", &max_body, "SIZE", "largest request body (e.g. 8M); larger gets 413 at once");
    a.size_option("--request-mem", &request_mem, "SIZE",
                  "request bodies held at once, all together (default: --max-body); one that does not fit "
                  "now gets 503. 3.5 times this (bodies, their parsed JSON and prompt) plus the connections' "
                  "header buffers are reserved inside --mem");
    a.size_option("--grammar-mem", &grammar_mem, "SIZE",
                  "the compiled grammars (response_format, grammar, json_schema) of the requests in service, all "
                  "together; one that does not fit now gets 503, one larger than this 400. Reserved inside --mem "
                  "with the vocabulary's token trie and each slot's mask cache");
    flags.declare(a, true);
    a.show_default("--ctx", "the model's training context, at most 4096");
    if (!a.parse(argc, argv)) return 0;
    // Without -c a slot holds what the model was trained on, up to 4096
    // tokens: more would be advertised and never worked (the demo model was
    // trained at 512).
    if (flags.model.empty()) throw std::runtime_error("no model given (-m MODEL)");
    std::shared_ptr<const TokenTrie> trie;
    {
        const GgufFile file = GgufFile::open(flags.model);
        if (!a.given("--ctx")) flags.ctx = summarize_model(file, 0).mem.ctx;
        // Grammars are matched over the vocabulary's trie: made now, so that
        // it counts in the memory plan.
        trie = vocabulary_trie(Tokenizer::from_gguf(file));
    }
    malloc_trim(0);  // the tokenizer read for the trie is gone: its pages go back before the plan measures RSS
    if (parallel < 1 || parallel > 256) throw std::runtime_error("--parallel must be 1..256");
    if (queue < 0 || queue > 100000) throw std::runtime_error("--queue must be 0..100000");
    if (so.port < 0 || so.port > 65535) throw std::runtime_error("--port must be 0..65535");
    if (!(so.timeout_s > 0)) throw std::runtime_error("--timeout must be > 0");
    if (so.idle_timeout_s < 1) throw std::runtime_error("--idle-timeout must be >= 1");
    if (!(so.header_timeout_s > 0) || !(so.body_timeout_s > 0)) {
        throw std::runtime_error("--header-timeout and --body-timeout must be > 0");
    }
    if (so.max_connections < 4 || so.max_connections > 100000) throw std::runtime_error("--max-connections must be 4..100000");
    if (max_body < 1024) throw std::runtime_error("--max-body must be at least 1K");
    if (!key_file.empty()) {
        if (!so.api_key.empty()) throw std::runtime_error("give --api-key or --api-key-file, not both");
        so.api_key = read_key_file(key_file);
    }
    if (!template_file.empty()) {
        so.chat_template = read_chat_template(template_file);
    }
    so.max_body_bytes = size_t(max_body);
    so.body_budget_bytes = size_t(request_mem ? request_mem : max_body);
    if (so.body_budget_bytes < so.max_body_bytes) throw std::runtime_error("--request-mem must be at least --max-body");
    so.grammar_budget_bytes = size_t(grammar_mem);
    so.model_id = alias.empty() ? model_name(flags.model) : alias;
    so.sampling = flags.options().sampling;
    // Requests beyond the slots and the queue still get a worker for a 503
    // (idle connections and /health hold none).
    so.http_threads = parallel + queue + 8;

    // Signals go to one thread that stops the server; every other thread
    // (httplib's, the engine's, the store's) is created with them blocked.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a kill

    EngineOptions eo;
    eo.queue = queue;
    eo.prefill_chunk = flags.batch;
    eo.trie = trie;
    const size_t reserve = request_memory_bytes(so) + grammar_memory_bytes(so, *trie, parallel);
    auto open_slots = [&] { return flags.open_slots(parallel, reserve, so.sampling); };
    Engine engine(open_slots, eo, &flags.store.counters());
    const Session& base = engine.session();
    HttpServer server(engine, so);
    server.bind();
    printf("moestream serve: %s on http://%s:%d (%d slot%s of %lld tokens, queue %d)\n", so.model_id.c_str(),
           so.host.c_str(), server.port(), parallel, parallel == 1 ? "" : "s", (long long)base.n_ctx(), queue);
    fprintf(stderr, "reserved in --mem for requests: %s for bodies, %s for grammars (token trie %s)\n",
            format_bytes(double(request_memory_bytes(so))).c_str(),
            format_bytes(double(grammar_memory_bytes(so, *trie, parallel))).c_str(),
            format_bytes(double(trie->memory_bytes())).c_str());
    fflush(stdout);

    std::thread waiter([&] {
        int sig = 0;
        sigwait(&stop_signals, &sig);
        server.stop();
    });
    server.listen();
    // listen() also returns when the socket fails; wake the waiter either way.
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();

    const EngineStats st = engine.stats();
    fprintf(stderr, "served %llu requests (%llu cancelled, %llu failed): %llu prompt tokens (%llu from the cache), "
                    "%llu generated in %.2f s of decoding (%.2f tok/s)\n",
            (unsigned long long)st.requests_done, (unsigned long long)st.requests_cancelled,
            (unsigned long long)st.requests_failed, (unsigned long long)st.prompt_tokens,
            (unsigned long long)st.cached_prompt_tokens, (unsigned long long)st.generated_tokens, st.decode_seconds,
            st.decode_seconds > 0 ? double(st.generated_tokens) / st.decode_seconds : 0.0);
    flags.finish("serve", engine.session());
    return 0;
}

}  // namespace ms
