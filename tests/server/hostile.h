// Clients that misbehave on purpose, for the server tests: raw replies read
// off a socket, and over a thousand hostile requests (bad request lines,
// headers, lengths, encodings, JSON), each with the status the HTTP RFCs
// (9110, 9112, 6585) and OpenAI's error shape call for.
#pragma once
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "json/json.h"
#include "loopback.h"

namespace ms {

inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Reads until the server closes or timeout_s passes.
inline std::string read_all(int fd, double timeout_s) {
    std::string got;
    const double end = now_s() + timeout_s;
    char buf[8192];
    for (;;) {
        const double left = end - now_s();
        if (left <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, int(left * 1000) + 1) <= 0) break;
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, size_t(n));
    }
    return got;
}

// One response off the front of `raw`: status and body (Content-Length framed).
struct Reply {
    int status = 0;
    std::string body;
    size_t size = 0;  // bytes it took
};
inline Reply parse_reply(const std::string& raw) {
    Reply r;
    const size_t head_end = raw.find("\r\n\r\n");
    if (raw.compare(0, 9, "HTTP/1.1 ") != 0 || head_end == std::string::npos) return r;
    r.status = std::atoi(raw.c_str() + 9);
    const size_t cl = raw.find("Content-Length: ");
    if (cl == std::string::npos || cl > head_end) return r;
    const size_t n = std::stoul(raw.substr(cl + 16));
    r.body = raw.substr(head_end + 4, n);
    r.size = head_end + 4 + n;
    return r;
}

inline std::string post(const std::string& path, const std::string& body) {
    return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A request on a fresh connection: the reply, and how long it took.
inline std::pair<Reply, double> ask(int port, const std::string& bytes, double timeout_s = 2) {
    const int fd = connect_to(port);
    if (fd < 0) return {Reply(), 0};
    const double t0 = now_s();
    [[maybe_unused]] ssize_t w = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    std::string got;
    char buf[8192];
    Reply r;
    while (now_s() - t0 < timeout_s) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, size_t(n));
        r = parse_reply(got);
        if (r.status) break;
    }
    const double took = now_s() - t0;
    close(fd);
    return {parse_reply(got), took};
}

inline bool is_json_error(const std::string& body) {
    try {
        const Json j = Json::parse(body);
        return j.is_object() && j.contains("error") && j.at("error").at("message").is_string();
    } catch (const std::exception&) {
        return false;
    }
}

// Hostile requests by kind, each with the status the HTTP RFCs (9110, 9112,
// 6585) and OpenAI's error shape call for.
struct Hostile {
    std::string bytes;
    int status;
};

inline std::vector<Hostile> hostile_requests() {
    std::mt19937 rng(35);
    std::vector<Hostile> out;
    auto rnd = [&](size_t n, int lo, int hi) {
        std::string s;
        for (size_t i = 0; i < n; i++) s += char(std::uniform_int_distribution<int>(lo, hi)(rng));
        return s;
    };
    const std::string ok_body = R"({"messages": []})";
    // Request lines that are not METHOD SP /TARGET SP HTTP/1.x.
    const char* lines[] = {"HELLO", "GET", "GET /", "GET / HTTP/1.1 extra", "GET  / HTTP/1.1", "G(T / HTTP/1.1",
                           "GET / HTTQ/1.1", "GET / HTTP/1", "GET / http/1.1", "GET x HTTP/1.1", "GET /\x01 HTTP/1.1",
                           " GET / HTTP/1.1", "GET / HTTP/1.1 ", "GET /a\x7f HTTP/1.1"};
    for (const char* l : lines) out.push_back({std::string(l) + "\r\nHost: x\r\n\r\n", 400});
    out.push_back({"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505});  // the HTTP/2 preface
    out.push_back({"GET / HTTP/2.0\r\n\r\n", 505});
    out.push_back({"GET / HTTP/3.7\r\n\r\n", 505});
    for (int i = 0; i < 200; i++) {  // random printable garbage lines: no spaces in the right places
        std::string l = rnd(1 + rng() % 60, 0x21, 0x7e);
        out.push_back({l + "\r\n\r\n", 400});
    }
    for (int i = 0; i < 100; i++) {  // random bytes with controls, high bits
        std::string l = rnd(1 + rng() % 60, 1, 255);
        std::replace(l.begin(), l.end(), '\n', 'x');
        std::replace(l.begin(), l.end(), '\r', 'x');
        std::replace(l.begin(), l.end(), ' ', 'x');
        out.push_back({l + "\r\n\r\n", 400});
    }
    // LF-only endings.
    out.push_back({"GET /health HTTP/1.1\nHost: x\n\n", 400});
    out.push_back({"GET /health HTTP/1.1\r\nHost: x\n\r\n", 400});
    out.push_back({post("/v1/chat/completions", ok_body).replace(0, 0, "\n"), 400});
    // Long lines and header sections.
    out.push_back({"GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n", 414});
    out.push_back({"GET / HTTP/1.1\r\nX: " + std::string(100000, 'a') + "\r\n\r\n", 431});
    {
        std::string many = "GET / HTTP/1.1\r\n";
        for (int i = 0; i < 150; i++) many += "X-" + std::to_string(i) + ": 1\r\n";
        out.push_back({many + "\r\n", 431});
    }
    // Malformed headers.
    const char* headers[] = {"NoColon", ": empty-name", "Bad Name: x", "X\x01: y", "X: a\x01b", " folded: x",
                             "\tfolded: x", "X : spaced"};
    for (const char* h : headers) out.push_back({"GET /health HTTP/1.1\r\nHost: x\r\n" + std::string(h) + "\r\n\r\n", 400});
    // Lengths.
    const std::string post_head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n";
    out.push_back({post_head + "\r\n", 411});
    // Chunked bodies: well framed, the route reads them ("hello" is no JSON);
    // bad framing, a coding other than chunked, or over --max-body is refused.
    out.push_back({post_head + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400});
    out.push_back({post_head + "Transfer-Encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nT: 1\r\n\r\n", 400});
    const char* bad_chunks[] = {"zz\r\nhello\r\n0\r\n\r\n", "5\r\nhelloXX0\r\n\r\n", "\r\nhello\r\n",
                                "-5\r\nhello\r\n0\r\n\r\n", "5 \x01\r\nhello\r\n0\r\n\r\n",
                                "0\r\nno colon\r\n\r\n"};
    for (const char* b : bad_chunks) out.push_back({post_head + "Transfer-Encoding: chunked\r\n\r\n" + b, 400});
    out.push_back({post_head + "Transfer-Encoding: chunked\r\n\r\n" + std::string(2000, '1') + "\r\n", 400});
    out.push_back({post_head + "Transfer-Encoding: chunked\r\n\r\n800001\r\nab", 413});
    out.push_back({post_head + "Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFFFFFFFF\r\nab", 413});
    out.push_back({post_head + "Transfer-Encoding: gzip\r\n\r\nab", 501});
    out.push_back({post_head + "Transfer-Encoding: gzip, chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n", 501});
    out.push_back({post_head + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400});
    out.push_back({post_head + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc", 400});
    out.push_back({post_head + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400});
    const char* bad_lengths[] = {"-5", "abc", "0x10", "1e3", "+3", "3 3", "", "3.0", "-0"};
    for (const char* l : bad_lengths) out.push_back({post_head + "Content-Length: " + l + "\r\n\r\n", 400});
    for (int i = 0; i < 100; i++) {  // over the limit: refused before any body byte
        const uint64_t n = (uint64_t(8) << 20) + 1 + (uint64_t(rng()) << (rng() % 24));
        out.push_back({post_head + "Content-Length: " + std::to_string(n) + "\r\n\r\nab", 413});
    }
    out.push_back({post_head + "Content-Length: 99999999999999999999999999\r\n\r\n", 413});
    // Bodies that are not the JSON the route wants (answered by the route).
    const char* bodies[] = {"", "{", "}", "[", "nul", "{\"a\":}", "{\"a\" 1}", "{'a': 1}",
                            "{\"a\": 1,}", "\xff\xfe{}", "{\"a\": NaN}", "{\"a\": 1}{}",
                            "{\"a\": \"\x01\"}", "{\"a\": 1, \"a\": 2}"};
    for (const char* b : bodies) out.push_back({post("/v1/chat/completions", b), 400});
    for (int i = 0; i < 400; i++) {  // random truncations of a valid body
        std::string b = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": false})";
        b.resize(rng() % (b.size() - 1));
        out.push_back({post("/v1/chat/completions", b), 400});
    }
    for (int i = 0; i < 200; i++) {  // random bytes as the body
        out.push_back({post("/v1/chat/completions", "{\x01" + rnd(rng() % 100, 0, 255)), 400});
    }
    {
        std::string deep(200, '[');
        out.push_back({post("/v1/chat/completions", deep + std::string(200, ']')), 400});
    }
    // Unknown routes and methods.
    for (const char* m : {"GET", "PUT", "DELETE", "BREW"}) {
        const bool body_method = std::string(m) == "PUT";
        out.push_back({std::string(m) + " /nothing/here HTTP/1.1\r\nHost: x\r\n" +
                           (body_method ? "Content-Length: 0\r\n" : "") + "\r\n",
                       404});
    }
    return out;
}

// Sends every hostile request on its own connection to the server at port:
// each must be answered with its status and a JSON error within the bound;
// then /health still answers.
inline void expect_hostile_requests_refused(int port) {
    const std::vector<Hostile> cases = hostile_requests();
    ASSERT_GE(cases.size(), 1000u);
    // Sanitized builds run several times slower: the bound is the same shape.
    const double limit_s = getenv("MOESTREAM_SANITIZED") ? 3.0 : 1.0;
    int right = 0;
    double worst = 0;
    for (const Hostile& h : cases) {
        auto [r, took] = ask(port, h.bytes, limit_s + 0.5);
        worst = std::max(worst, took);
        const bool ok = r.status == h.status && is_json_error(r.body) && took < limit_s;
        right += ok;
        EXPECT_TRUE(ok) << "expected " << h.status << ", got " << r.status << " in " << took << " s for "
                        << Json(h.bytes.substr(0, 80)).dump() << " -> " << r.body.substr(0, 200);
    }
    printf("%zu hostile requests: %d answered right, slowest %.3f s\n", cases.size(), right, worst);
    auto [health, took] = ask(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(health.status, 200);
}

}  // namespace ms
