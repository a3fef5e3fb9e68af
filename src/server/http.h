// moestream serve's HTTP side: the OpenAI routes (POST /v1/chat/completions,
// POST /v1/completions, GET /v1/models), GET /health, GET /metrics
// (Prometheus text) and the chat page at /; API-key checks, OpenAI-style JSON
// errors, SSE streaming. cpp-httplib runs each connection on a pool thread,
// which renders and tokenizes the prompt and then waits on its Job while the
// Engine generates.
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
    int idle_timeout_s = 30;          // an idle keep-alive connection, or a request arriving slowly
    size_t max_body_bytes = size_t(8) << 20;
    int http_threads = 32;
    SamplerParams sampling;           // defaults for fields a request leaves out
    std::string chat_template;        // Jinja source used instead of the model's ("": the model's)
};

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
