// moestream serve's routes: the OpenAI API (POST /v1/chat/completions,
// POST /v1/completions, GET /v1/models[/ID]), llama-server's utilities
// (POST /tokenize, /detokenize, /apply-template; GET /props, /slots),
// GET /health, GET /metrics (Prometheus text) and the chat page at /; API-key
// checks, CORS, OpenAI-style JSON errors, SSE streaming, a log line a request.
// HttpFront (http_front.h) reads requests; a generation runs on one of its
// workers, which renders and tokenizes the prompt and then waits on its Job
// while the Engine generates.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "sampling/sampler.h"
#include "server/engine.h"

namespace ms {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                  // 0: any free port (see HttpServer::port)
    std::string api_key;              // "": no authentication
    std::string model_id;
    double timeout_s = 600;           // a request's whole life, queue included
    int idle_timeout_s = 30;          // an idle keep-alive connection; a reply the client stops taking
    double header_timeout_s = 10;     // a request's headers, from its first byte
    double body_timeout_s = 60;       // a request's body, from the end of its headers
    size_t max_body_bytes = size_t(8) << 20;
    size_t body_budget_bytes = size_t(8) << 20;  // all bodies in flight together (more wait: 503)
    int max_connections = 128;
    int http_threads = 32;            // workers: requests in service at once (not /health, /metrics)
    std::string cors;                 // Access-Control-Allow-Origin ("": no CORS)
    SamplerParams sampling;           // defaults for fields a request leaves out
    std::string chat_template;        // Jinja source used instead of the model's ("": the model's)
    // The compiled grammars of the requests in service, all together: one
    // that does not fit now gets 503, one larger than all of it 400.
    size_t grammar_budget_bytes = size_t(4) << 20;
};

// What requests can hold at once (bodies, their parsed JSON, header
// buffers): serve reserves it from --mem.
size_t request_memory_bytes(const ServerOptions& o);
// What grammars can hold at once: the vocabulary's trie, each slot's
// matcher (its mask cache) and the grammar budget; also reserved from --mem.
size_t grammar_memory_bytes(const ServerOptions& o, const TokenTrie& trie, int slots);

class HttpServer {
public:
    HttpServer(Engine& engine, const ServerOptions& options);
    ~HttpServer();
    // Binds host:port; throws naming the address when it cannot.
    void bind();
    int port() const;
    // Serves until stop() (from another thread or a signal handler's thread).
    void listen();
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace ms
