// HTTP/1.1 on raw sockets, in front of serve's routes: one poll thread
// accepts connections and reads every request under whole-request deadlines
// (headers, then body: a client that sends a byte every few seconds still
// runs out of time) and byte limits, refusing bad framing at once (400, 408,
// 411, 413, 414, 431, 505 with an OpenAI-style JSON body, then the
// connection closes). A complete request goes to a worker thread, or is
// answered on the poll thread itself when the route is cheap and never waits
// (/health, CORS preflights), so those stay answerable whatever the workers
// and other clients are doing. Connections are bounded: past the bound the one that has waited
// longest without a request in service is dropped. Pipelined requests are
// answered in order, one at a time per connection. Bodies come with
// Content-Length or chunked (Transfer-Encoding: chunked, under the same
// deadline and size limit). Request bodies draw on a byte budget (reserved
// from --mem by serve); a body that does not fit now gets 503.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ms {

struct HttpRequest {
    std::string method, target, path, query;  // path: target up to '?'
    std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
    std::string body;
    bool http10 = false;
    int fd = -1;  // the connection, for seeing its client leave (never read or written by a handler)
    double received = 0;  // steady seconds when the request was complete
    // The value of a header (name in lower case); "" when absent.
    std::string header(const std::string& name) const;
};

// Writes one piece of a streamed reply; false once the client is gone or
// too slow to take it.
using StreamWrite = std::function<bool(const std::string& bytes)>;

struct HttpResponse {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
    bool head_only = false;  // HEAD: the headers (Content-Length the body's), not the body
    // Set for a streamed reply (body unused): called until it returns false.
    std::function<bool(const StreamWrite&)> stream;
};

struct FrontOptions {
    int max_connections = 128;
    int workers = 32;                 // threads running requests that are not cheap
    double idle_timeout_s = 30;       // keep-alive connection with no request
    double header_timeout_s = 10;     // first byte of a request to the end of its headers
    double body_timeout_s = 60;       // end of headers to the end of the body
    double write_timeout_s = 30;      // longest wait for a client to take more bytes of a reply
    size_t max_body_bytes = size_t(8) << 20;
    size_t body_budget_bytes = size_t(8) << 20;  // bodies in flight at once, all together
};

// Bytes outside the bodies the front can hold at most (header buffers of
// every connection), for the memory plan.
size_t front_buffer_bytes(const FrontOptions& o);

class HttpFront {
public:
    using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
    // handle: the routes; cheap(req): answer on the poll thread (must not
    // block); refused(method, path, status): a request the front answered
    // itself (for logs and counters).
    HttpFront(const FrontOptions& o, Handler handle, std::function<bool(const HttpRequest&)> cheap,
              std::function<void(const std::string&, const std::string&, int)> refused);
    ~HttpFront();
    // Throws naming the address when it cannot bind.
    void bind(const std::string& host, int port);
    int port() const;
    // Serves until stop().
    void run();
    void stop();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The JSON error body the front sends ({"error": {...}}), for tests.
std::string http_error_body(int status, const std::string& message);

}  // namespace ms
