#include "server/http_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "server/request.h"

namespace ms {

namespace {

constexpr size_t kMaxRequestLine = 8 << 10;
constexpr size_t kMaxHeaderBytes = 16 << 10;
constexpr size_t kMaxHeaders = 100;
constexpr size_t kMaxChunkLine = 1 << 10;  // a chunk size line with its extensions

int hex_value(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

constexpr double kLingerSeconds = 1.0;  // after an error: reading what the client still sends, so it sees the answer

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* reason_phrase(int status) {
    switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 204: return "No Content";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 411: return "Length Required";
        case 413: return "Content Too Large";
        case 414: return "URI Too Long";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 505: return "HTTP Version Not Supported";
        default: return status < 400 ? "OK" : "Error";
    }
}

bool is_token_char(char c) {
    return isalnum(static_cast<unsigned char>(c)) || strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

std::string lower(std::string s) {
    for (char& c : s) c = char(tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string trim(const std::string& s) {
    size_t a = 0, b = s.size();
    while (a < b && (s[a] == ' ' || s[a] == '\t')) a++;
    while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) b--;
    return s.substr(a, b - a);
}

// Sends everything, waiting up to timeout_s in all for the socket to take it.
bool send_all(int fd, const char* p, size_t n, double timeout_s) {
    const double end = now_s() + timeout_s;
    while (n > 0) {
        const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= size_t(w);
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            const double left = end - now_s();
            if (left <= 0) return false;
            pollfd pf{fd, POLLOUT, 0};
            if (poll(&pf, 1, int(left * 1000) + 1) < 0 && errno != EINTR) return false;
            continue;
        }
        return false;
    }
    return true;
}

// A framing error: status and message for the client.
struct Refusal {
    int status;
    std::string message;
};

}  // namespace

std::string HttpRequest::header(const std::string& name) const {
    for (const auto& [k, v] : headers)
        if (k == name) return v;
    return "";
}

std::string http_error_body(int status, const std::string& message) {
    return error_json(ApiError(status, message, "", status >= 500 ? "server_error" : "invalid_request_error")).dump() +
           "\n";
}

size_t front_buffer_bytes(const FrontOptions& o) {
    // Each connection holds at most its header section plus one read's worth.
    return size_t(o.max_connections) * (kMaxHeaderBytes + (4 << 10));
}

struct HttpFront::Impl {
    enum class State { Idle, Headers, Body, Busy, Closing };
    struct Conn {
        int fd = -1;
        State state = State::Idle;
        std::string in;           // bytes read and not yet consumed
        double deadline = 0;
        double since = 0;         // when it last started waiting for a client (eviction order)
        HttpRequest req;
        size_t body_len = 0;
        size_t reserved = 0;      // of the body budget
        bool keep_alive = true;
        // Transfer-Encoding: chunked: where the reader is in the framing,
        // and the bytes of the current chunk still to come.
        enum class Chunk { Size, Data, DataEnd, Trailer } chunk = Chunk::Size;
        bool chunked = false;
        size_t chunk_left = 0, trailer_bytes = 0;
    };

    FrontOptions o;
    Handler handle;
    std::function<bool(const HttpRequest&)> cheap;
    std::function<void(const std::string&, const std::string&, int)> refused;
    int listen_fd = -1;
    int bound_port = -1;
    int wake[2] = {-1, -1};
    std::atomic<bool> stopping{false};
    std::map<int, std::unique_ptr<Conn>> conns;  // poll thread only, except Busy ones' fields read by workers

    std::mutex mu;  // the work queue, the returned list and the body budget
    std::condition_variable cv;
    std::deque<Conn*> work;
    std::vector<Conn*> returned;
    size_t budget_used = 0;
    std::vector<std::thread> workers;

    Impl(const FrontOptions& opt, Handler h, std::function<bool(const HttpRequest&)> c,
         std::function<void(const std::string&, const std::string&, int)> r)
        : o(opt), handle(std::move(h)), cheap(std::move(c)), refused(std::move(r)) {
        if (pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0) throw std::runtime_error("serve: cannot make a pipe");
    }
    ~Impl() {
        for (auto& [fd, c] : conns) close(fd);
        if (listen_fd >= 0) close(listen_fd);
        close(wake[0]);
        close(wake[1]);
    }

    void poke() {
        const char b = 1;
        [[maybe_unused]] ssize_t n = write(wake[1], &b, 1);
    }

    void release_budget(Conn& c) {
        if (!c.reserved) return;
        std::lock_guard<std::mutex> lk(mu);
        budget_used -= c.reserved;
        c.reserved = 0;
    }

    // Answers and closes: the client gets the JSON error, then what it still
    // sends is read and dropped for a moment (closing with unread bytes
    // would reset the connection and lose the answer).
    void refuse(Conn& c, const Refusal& r) {
        if (refused) refused(c.req.method, c.req.path, r.status);
        HttpResponse res;
        res.status = r.status;
        res.body = http_error_body(r.status, r.message);
        if (r.status == 503) res.headers.emplace_back("Retry-After", "1");
        write_response(c.fd, res, false, false, 0.05);
        close_gently(c);
    }

    void close_gently(Conn& c) {
        release_budget(c);
        shutdown(c.fd, SHUT_WR);
        c.state = State::Closing;
        c.in.clear();
        c.in.shrink_to_fit();
        c.req = HttpRequest();
        c.deadline = now_s() + kLingerSeconds;
    }

    // Writes a whole response (or runs a streamed one). keep_alive: say so;
    // http10: no chunked encoding (the stream ends with the connection).
    bool write_response(int fd, const HttpResponse& res, bool keep_alive, bool http10, double timeout_s) {
        std::string head = std::string(http10 ? "HTTP/1.0 " : "HTTP/1.1 ") + std::to_string(res.status) + " " +
                           reason_phrase(res.status) + "\r\n";
        if (!res.content_type.empty()) head += "Content-Type: " + res.content_type + "\r\n";
        for (const auto& [k, v] : res.headers) head += k + ": " + v + "\r\n";
        const bool chunked = res.stream && !http10;
        if (res.stream) {
            if (chunked) head += "Transfer-Encoding: chunked\r\n";
            keep_alive = keep_alive && chunked;
        } else {
            head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
        }
        head += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
        if (!res.stream) {
            if (!res.head_only) head += res.body;
            return send_all(fd, head.data(), head.size(), timeout_s);
        }
        if (!send_all(fd, head.data(), head.size(), timeout_s)) return false;
        bool ok = true;
        StreamWrite write = [&](const std::string& bytes) {
            if (!ok || bytes.empty()) return ok;
            if (chunked) {
                char size[32];
                snprintf(size, sizeof size, "%zx\r\n", bytes.size());
                std::string piece = size + bytes + "\r\n";
                ok = send_all(fd, piece.data(), piece.size(), timeout_s);
            } else {
                ok = send_all(fd, bytes.data(), bytes.size(), timeout_s);
            }
            return ok;
        };
        while (res.stream(write)) {
        }
        if (ok && chunked) ok = send_all(fd, "0\r\n\r\n", 5, timeout_s);
        return ok && keep_alive;
    }

    // Header section parsed into c.req; a Refusal when malformed.
    void parse_head(Conn& c, const std::string& head) {
        HttpRequest& r = c.req;
        size_t eol = head.find("\r\n");
        const std::string line = head.substr(0, eol);
        const size_t sp1 = line.find(' ');
        const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
        if (sp1 == std::string::npos || sp2 == std::string::npos || line.find(' ', sp2 + 1) != std::string::npos) {
            throw Refusal{400, "malformed request line: expected METHOD TARGET HTTP/1.1"};
        }
        r.method = line.substr(0, sp1);
        r.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
        const std::string version = line.substr(sp2 + 1);
        if (r.method.empty() || !std::all_of(r.method.begin(), r.method.end(), is_token_char)) {
            throw Refusal{400, "malformed request line: bad method"};
        }
        if (version.size() != 8 || version.compare(0, 5, "HTTP/") != 0 || !isdigit(static_cast<unsigned char>(version[5])) ||
            version[6] != '.' || !isdigit(static_cast<unsigned char>(version[7]))) {
            throw Refusal{400, "malformed request line: bad HTTP version"};
        }
        if (version != "HTTP/1.1" && version != "HTTP/1.0") {
            throw Refusal{505, "this server speaks HTTP/1.1 only, not " + version};
        }
        r.http10 = version == "HTTP/1.0";
        if (r.target.empty() || r.target[0] != '/') {
            throw Refusal{400, "malformed request line: the target must be a path starting with /"};
        }
        for (char ch : r.target) {
            if (static_cast<unsigned char>(ch) <= 0x20 || ch == 0x7f) {
                throw Refusal{400, "malformed request line: control character in the target"};
            }
        }
        const size_t q = r.target.find('?');
        r.path = r.target.substr(0, q);
        r.query = q == std::string::npos ? "" : r.target.substr(q + 1);

        bool have_length = false, chunked = false;
        size_t length = 0;
        while (eol != std::string::npos && eol + 2 < head.size()) {
            const size_t start = eol + 2;
            eol = head.find("\r\n", start);
            const std::string h = head.substr(start, eol == std::string::npos ? std::string::npos : eol - start);
            if (h.empty()) break;
            if (h[0] == ' ' || h[0] == '\t') throw Refusal{400, "malformed header: folded lines are not accepted"};
            const size_t colon = h.find(':');
            if (colon == std::string::npos || colon == 0) throw Refusal{400, "malformed header line (no name: value)"};
            const std::string name = h.substr(0, colon);
            if (!std::all_of(name.begin(), name.end(), is_token_char)) {
                throw Refusal{400, "malformed header name (spaces or control characters)"};
            }
            const std::string value = trim(h.substr(colon + 1));
            for (char ch : value) {
                if ((static_cast<unsigned char>(ch) < 0x20 && ch != '\t') || ch == 0x7f) {
                    throw Refusal{400, "malformed header value: control character in " + lower(name)};
                }
            }
            if (r.headers.size() >= kMaxHeaders) throw Refusal{431, "more than 100 header lines"};
            r.headers.emplace_back(lower(name), value);
            const std::string& key = r.headers.back().first;
            if (key == "content-length") {
                if (value.empty() || !std::all_of(value.begin(), value.end(), [](char d) { return d >= '0' && d <= '9'; })) {
                    throw Refusal{400, "Content-Length must be a decimal number of bytes, not '" + value.substr(0, 32) + "'"};
                }
                const size_t digits = value.find_first_not_of('0');
                const std::string v = digits == std::string::npos ? "0" : value.substr(digits);
                if (v.size() > 15 || std::stoull(v) > o.max_body_bytes) {
                    throw Refusal{413, "the request body is too large: " + v.substr(0, 32) + " bytes, the limit is " +
                                           std::to_string(o.max_body_bytes)};
                }
                const size_t n = std::stoull(v);
                if (have_length && n != length) throw Refusal{400, "two different Content-Length headers"};
                have_length = true;
                length = n;
            } else if (key == "transfer-encoding") {
                if (chunked) throw Refusal{400, "two Transfer-Encoding headers"};
                // The only coding a request body may have here (RFC 9112 6.1: others are a 501).
                if (lower(value) != "chunked") {
                    throw Refusal{501, "transfer coding '" + value.substr(0, 32) + "' is not supported (only chunked)"};
                }
                chunked = true;
            }
        }
        // Both framings at once is how requests are smuggled past proxies.
        if (chunked && have_length) throw Refusal{400, "both Transfer-Encoding and Content-Length"};
        const bool has_body_method = r.method == "POST" || r.method == "PUT" || r.method == "PATCH";
        if (has_body_method && !have_length && !chunked) {
            throw Refusal{411, "a " + r.method + " needs a Content-Length header or a chunked body"};
        }
        c.body_len = length;
        c.chunked = chunked;
        c.chunk = Conn::Chunk::Size;
        c.chunk_left = c.trailer_bytes = 0;
        const std::string conn = lower(r.header("connection"));
        c.keep_alive = r.http10 ? conn.find("keep-alive") != std::string::npos : conn.find("close") == std::string::npos;
    }

    // Consumes what c.in holds: at most one request is started; true when
    // the connection is still open.
    void advance(Conn& c, double now) {
        // Pipelined cheap requests are answered in a loop, one after another.
        while (advance_one(c, now)) {
        }
    }

    // True when a request was answered here and more bytes wait.
    bool advance_one(Conn& c, double now) {
        if (c.state == State::Idle && !c.in.empty()) {
            c.state = State::Headers;
            c.deadline = now + o.header_timeout_s;
        }
        if (c.state == State::Headers) {
            const size_t end = c.in.find("\r\n\r\n");
            const size_t scan = end == std::string::npos ? c.in.size() : end + 4;
            // A bare LF ends a line for some clients and not for others: ambiguity smuggles requests.
            for (size_t i = 0; i < scan; i++) {
                if (c.in[i] == '\n' && (i == 0 || c.in[i - 1] != '\r')) {
                    refuse(c, Refusal{400, "malformed request: lines must end with CRLF"});
                    return false;
                }
            }
            const size_t first_eol = c.in.find("\r\n");
            if ((first_eol == std::string::npos ? c.in.size() : first_eol) > kMaxRequestLine) {
                refuse(c, Refusal{414, "the request line is longer than 8 KiB"});
                return false;
            }
            if (end == std::string::npos) {
                if (c.in.size() > kMaxHeaderBytes) {
                    refuse(c, Refusal{431, "the request headers exceed 16 KiB"});
                    return false;
                }
                if (c.in.size() >= 2 && c.in.compare(0, 2, "\r\n") == 0) {
                    refuse(c, Refusal{400, "malformed request: empty request line"});
                    return false;
                }
                return false;
            }
            if (end + 4 > kMaxHeaderBytes) {
                refuse(c, Refusal{431, "the request headers exceed 16 KiB"});
                return false;
            }
            try {
                parse_head(c, c.in.substr(0, end + 2));
            } catch (const Refusal& r) {
                refuse(c, r);
                return false;
            }
            c.in.erase(0, end + 4);
            if (c.body_len > 0) {
                {
                    std::lock_guard<std::mutex> lk(mu);
                    if (budget_used + c.body_len > o.body_budget_bytes) {
                        c.state = State::Body;  // for the log: the request was understood
                    } else {
                        budget_used += c.body_len;
                        c.reserved = c.body_len;
                    }
                }
                if (!c.reserved) {
                    refuse(c, Refusal{503, "the server holds as many request bodies as its memory budget "
                                           "allows; retry later"});
                    return false;
                }
                if (lower(c.req.header("expect")) == "100-continue") {
                    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                    if (!send_all(c.fd, cont, sizeof cont - 1, 0.2)) {
                        close_gently(c);
                        return false;
                    }
                }
                c.req.body.reserve(c.body_len);
            } else if (c.chunked && lower(c.req.header("expect")) == "100-continue") {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (!send_all(c.fd, cont, sizeof cont - 1, 0.2)) {
                    close_gently(c);
                    return false;
                }
            }
            c.state = State::Body;
            c.deadline = now + o.body_timeout_s;
        }
        if (c.state == State::Body) {
            if (c.chunked) {
                try {
                    if (!read_chunks(c)) return false;
                } catch (const Refusal& r) {
                    refuse(c, r);
                    return false;
                }
            } else {
                const size_t take = std::min(c.in.size(), c.body_len - c.req.body.size());
                c.req.body.append(c.in, 0, take);
                c.in.erase(0, take);
                if (c.req.body.size() < c.body_len) return false;
            }
            c.req.fd = c.fd;
            c.req.received = now;
            if (cheap && cheap(c.req)) {
                HttpResponse res;
                handle(c.req, res);
                const bool again = write_response(c.fd, res, c.keep_alive, c.req.http10, 0.05) && c.keep_alive;
                finish(c, again, now);
                return c.state == State::Idle && !c.in.empty();
            }
            c.state = State::Busy;
            {
                std::lock_guard<std::mutex> lk(mu);
                work.push_back(&c);
            }
            cv.notify_one();
        }
        return false;
    }

    // A chunked body (RFC 9112 7.1): hex size [; extensions] CRLF, data
    // CRLF, ..., 0 CRLF, trailer lines, CRLF. Each chunk is checked against
    // --max-body and takes its bytes from the body budget when its size
    // line arrives, so a chunked body costs what a Content-Length one does.
    // True when the body is complete; throws Refusal on bad framing.
    bool read_chunks(Conn& c) {
        for (;;) {
            switch (c.chunk) {
            case Conn::Chunk::Size: {
                const size_t eol = c.in.find("\r\n");
                if (eol == std::string::npos) {
                    if (c.in.size() > kMaxChunkLine) throw Refusal{400, "malformed chunked body: a chunk size line over 1 KiB"};
                    return false;
                }
                if (eol > kMaxChunkLine) throw Refusal{400, "malformed chunked body: a chunk size line over 1 KiB"};
                const std::string line = c.in.substr(0, eol);
                const size_t digits = std::min(line.find(';'), line.size());
                size_t n = 0;
                if (digits == 0) throw Refusal{400, "malformed chunked body: a chunk size must be hex digits"};
                for (size_t i = 0; i < digits; i++) {
                    const int v = hex_value(line[i]);
                    if (v < 0) throw Refusal{400, "malformed chunked body: a chunk size must be hex digits"};
                    if (n > o.max_body_bytes) break;  // too large already: no overflow
                    n = n * 16 + size_t(v);
                }
                for (char ch : line) {
                    if ((static_cast<unsigned char>(ch) < 0x20 && ch != '\t') || ch == 0x7f) {
                        throw Refusal{400, "malformed chunked body: control character in a chunk size line"};
                    }
                }
                c.in.erase(0, eol + 2);
                if (n == 0) {
                    c.chunk = Conn::Chunk::Trailer;
                    break;
                }
                if (n > o.max_body_bytes || c.req.body.size() + n > o.max_body_bytes) {
                    throw Refusal{413, "the request body is too large: over " + std::to_string(o.max_body_bytes) +
                                           " bytes, the limit"};
                }
                {
                    std::lock_guard<std::mutex> lk(mu);
                    if (budget_used + n > o.body_budget_bytes) {
                        throw Refusal{503, "the server holds as many request bodies as its memory budget allows; retry later"};
                    }
                    budget_used += n;
                    c.reserved += n;
                }
                // Doubling, capped at --max-body: many small chunks must not copy the body each time.
                if (c.req.body.capacity() < c.req.body.size() + n) {
                    c.req.body.reserve(std::min(std::max(c.req.body.capacity() * 2, c.req.body.size() + n), o.max_body_bytes));
                }
                c.chunk_left = n;
                c.chunk = Conn::Chunk::Data;
                break;
            }
            case Conn::Chunk::Data: {
                const size_t take = std::min(c.in.size(), c.chunk_left);
                c.req.body.append(c.in, 0, take);
                c.in.erase(0, take);
                c.chunk_left -= take;
                if (c.chunk_left > 0) return false;
                c.chunk = Conn::Chunk::DataEnd;
                break;
            }
            case Conn::Chunk::DataEnd:
                if (c.in.size() < 2) return false;
                if (c.in.compare(0, 2, "\r\n") != 0) throw Refusal{400, "malformed chunked body: a chunk's data must end with CRLF"};
                c.in.erase(0, 2);
                c.chunk = Conn::Chunk::Size;
                break;
            case Conn::Chunk::Trailer: {
                // Trailer fields are read and dropped; they count against the header limit.
                const size_t eol = c.in.find("\r\n");
                if (eol == std::string::npos || c.trailer_bytes + eol + 2 > kMaxHeaderBytes) {
                    if (c.trailer_bytes + c.in.size() > kMaxHeaderBytes) throw Refusal{431, "the trailer fields exceed 16 KiB"};
                    return false;
                }
                c.trailer_bytes += eol + 2;
                const bool last = eol == 0;
                const std::string field = c.in.substr(0, eol);
                c.in.erase(0, eol + 2);
                if (last) {
                    c.body_len = c.req.body.size();
                    return true;
                }
                if (field.find(':') == std::string::npos || field[0] == ' ' || field[0] == '\t') {
                    throw Refusal{400, "malformed chunked body: a trailer line is not name: value"};
                }
                break;
            }
            }
        }
    }

    // A request answered: the connection waits for the next one (handling
    // any already read), or closes.
    void finish(Conn& c, bool keep, double now) {
        release_budget(c);
        c.req = HttpRequest();
        if (!keep) return close_gently(c);
        c.state = State::Idle;
        c.deadline = now + o.idle_timeout_s;
        c.since = now;
    }

    void worker() {
        for (;;) {
            Conn* c;
            {
                std::unique_lock<std::mutex> lk(mu);
                cv.wait(lk, [&] { return stopping || !work.empty(); });
                if (work.empty()) return;
                c = work.front();
                work.pop_front();
            }
            HttpResponse res;
            try {
                handle(c->req, res);
            } catch (const std::exception& e) {
                res = HttpResponse();
                res.status = 500;
                res.body = http_error_body(500, std::string("internal error: ") + e.what());
            }
            c->keep_alive = write_response(c->fd, res, c->keep_alive && !stopping, c->req.http10, o.write_timeout_s) &&
                            c->keep_alive;
            const bool large = c->req.body.size() >= (size_t(1) << 20);
            c->req.body = std::string();  // the body's memory goes back before the budget does
            if (large) malloc_trim(0);    // and to the system: glibc keeps freed heap otherwise
            {
                std::lock_guard<std::mutex> lk(mu);
                returned.push_back(c);
            }
            poke();
        }
    }

    void drop(int fd) {
        auto it = conns.find(fd);
        if (it == conns.end()) return;
        release_budget(*it->second);
        close(fd);
        conns.erase(it);
    }

    void accept_all(double now) {
        for (;;) {
            const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) return;
            const int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            if (int(conns.size()) >= o.max_connections) {
                // Make room: drop the connection that has waited longest
                // without a request in service (idle, slow or lingering).
                Conn* oldest = nullptr;
                for (auto& [k, c] : conns)
                    if (c->state != State::Busy && (!oldest || c->since < oldest->since)) oldest = c.get();
                if (oldest) {
                    drop(oldest->fd);
                } else {
                    static const std::string busy = http_error_body(503, "too many connections; retry later");
                    const std::string res = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                            "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
                                            std::to_string(busy.size()) + "\r\n\r\n" + busy;
                    [[maybe_unused]] ssize_t n = send(fd, res.data(), res.size(), MSG_NOSIGNAL);
                    close(fd);
                    continue;
                }
            }
            auto c = std::make_unique<Conn>();
            c->fd = fd;
            c->deadline = now + o.idle_timeout_s;
            c->since = now;
            conns[fd] = std::move(c);
        }
    }

    void read_from(Conn& c, double now) {
        char buf[64 << 10];
        // Headers: never hold more than their limit plus one small read.
        const size_t want = c.state == State::Body ? sizeof buf : size_t(4 << 10);
        const ssize_t n = recv(c.fd, buf, want, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR && errno != EWOULDBLOCK)) {
            if (c.state == State::Closing || c.state == State::Idle) return drop(c.fd);
            return drop(c.fd);  // a partial request abandoned
        }
        if (n < 0) return;
        if (c.state == State::Closing) return;  // dropped unread
        c.in.append(buf, size_t(n));
        advance(c, now);
    }

    void run() {
        for (int i = 0; i < o.workers; i++) workers.emplace_back([this] { worker(); });
        std::vector<pollfd> fds;
        std::vector<int> ids;
        while (!stopping) {
            const double now = now_s();
            // Timeouts first: each state has a whole-phase deadline.
            std::vector<int> expired;
            double next = now + 1;
            for (auto& [fd, c] : conns) {
                if (c->state == State::Busy) continue;
                if (c->deadline <= now) expired.push_back(fd);
                else next = std::min(next, c->deadline);
            }
            for (int fd : expired) {
                Conn& c = *conns[fd];
                if (c.state == State::Headers || c.state == State::Body) {
                    refuse(c, Refusal{408, c.state == State::Headers ? "the request headers did not arrive in time"
                                                                     : "the request body did not arrive in time"});
                } else {
                    drop(fd);
                }
            }
            fds.clear();
            ids.clear();
            fds.push_back({listen_fd, POLLIN, 0});
            fds.push_back({wake[0], POLLIN, 0});
            for (auto& [fd, c] : conns) {
                if (c->state == State::Busy) continue;
                fds.push_back({fd, POLLIN, 0});
                ids.push_back(fd);
            }
            const int wait_ms = std::max(1, int((next - now) * 1000) + 1);
            if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) break;
            const double t = now_s();
            if (fds[1].revents) {
                char b[256];
                while (read(wake[0], b, sizeof b) > 0) {
                }
                std::vector<Conn*> back;
                {
                    std::lock_guard<std::mutex> lk(mu);
                    back.swap(returned);
                }
                for (Conn* c : back) {
                    finish(*c, c->keep_alive, t);
                    if (c->state == State::Idle && !c->in.empty()) advance(*c, t);
                }
            }
            for (size_t i = 2; i < fds.size(); i++) {
                if (!fds[i].revents) continue;
                auto it = conns.find(ids[i - 2]);
                if (it != conns.end() && it->second->state != State::Busy) read_from(*it->second, t);
            }
            if (fds[0].revents) accept_all(t);
        }
        // Stopping: wake every connection's reader and writer, then the workers.
        for (auto& [fd, c] : conns) shutdown(fd, SHUT_RDWR);
        {
            std::lock_guard<std::mutex> lk(mu);
            stopping = true;
        }
        cv.notify_all();
        for (auto& w : workers) w.join();
        workers.clear();
        for (auto& [fd, c] : conns) close(fd);
        conns.clear();
    }
};

HttpFront::HttpFront(const FrontOptions& o, Handler handle, std::function<bool(const HttpRequest&)> cheap,
                     std::function<void(const std::string&, const std::string&, int)> refused)
    : impl_(std::make_unique<Impl>(o, std::move(handle), std::move(cheap), std::move(refused))) {}

HttpFront::~HttpFront() = default;

void HttpFront::bind(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const std::string where = host + ":" + std::to_string(port);
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
        throw std::runtime_error("cannot listen on " + where + " (not an address of this machine)");
    }
    int fd = -1;
    for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) throw std::runtime_error("cannot listen on " + where + " (address in use, or not an address of this machine)");
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    impl_->bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                                 : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    impl_->listen_fd = fd;
}

int HttpFront::port() const { return impl_->bound_port; }

void HttpFront::run() {
    if (impl_->stopping) return;
    impl_->run();
}

void HttpFront::stop() {
    impl_->stopping = true;
    impl_->poke();
}

}  // namespace ms
