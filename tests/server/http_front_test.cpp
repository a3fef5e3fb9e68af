// HttpFront against slow and hostile clients, with a stand-in for the model's
// routes (no model needed): 60 sockets trickling headers leave /health fast
// and a POST answered; over a thousand malformed requests each get the right
// status with a JSON error within a second; pipelined requests come back in
// order; bodies beyond the byte budget get 503 before they are read.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "json/json.h"
#include "server/http_front.h"
#include "server/request.h"

#include "hostile.h"
#include "loopback.h"

namespace ms {
namespace {

struct Front {
    std::unique_ptr<HttpFront> front;
    std::thread thread;
    int port = 0;
    explicit Front(FrontOptions o) {
        auto handle = [](const HttpRequest& req, HttpResponse& res) {
            try {
                if (req.path == "/health") {
                    res.body = "{\"status\": \"ok\"}";
                } else if (req.method == "POST" && req.path == "/v1/chat/completions") {
                    // Stands in for a generation: parse the body, take a while.
                    const Json body = parse_body(req.body, 1 << 20);
                    std::this_thread::sleep_for(std::chrono::milliseconds(20));
                    res.body = "{\"echo\": " + Json(body.is_object() ? "object" : "other").dump() + "}";
                } else if (req.path.compare(0, 6, "/echo/") == 0) {
                    res.body = Json(req.path.substr(6)).dump();
                } else {
                    throw ApiError(404, "no route");
                }
            } catch (const ApiError& e) {
                res.status = e.status;
                res.body = error_json(e).dump();
            }
        };
        auto cheap = [](const HttpRequest& req) { return req.path == "/health"; };
        front = std::make_unique<HttpFront>(o, handle, cheap, nullptr);
        front->bind("127.0.0.1", 0);
        port = front->port();
        thread = std::thread([this] { front->run(); });
    }
    ~Front() {
        front->stop();
        thread.join();
    }
};

TEST(HttpFront, SlowHeaderSocketsLeaveHealthFastAndPostsAnswered) {
    FrontOptions o;
    o.header_timeout_s = 2;
    o.workers = 4;
    Front f(o);
    // 60 clients that send a request line and then one header byte every 100 ms.
    Trickle slow(f.port, 60, "POST /v1/chat/completions HTTP/1.1\r\nX-Slow: ", 100);
    for (int fd : slow.fds) ASSERT_GE(fd, 0);
    std::vector<double> ms;
    const double t_end = now_s() + 1.5;
    int posts_ok = 0;
    while (now_s() < t_end) {
        auto [r, took] = ask(f.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        EXPECT_EQ(r.status, 200);
        ms.push_back(took * 1000);
        if (ms.size() % 20 == 0) {
            auto [p, t] = ask(f.port, post("/v1/chat/completions", R"({"messages": []})"));
            posts_ok += p.status == 200 && p.body == "{\"echo\": \"object\"}";
        }
    }
    std::sort(ms.begin(), ms.end());
    const double p99 = ms[std::min(ms.size() - 1, size_t(double(ms.size()) * 0.99))];
    printf("/health with 60 slow-header sockets: %zu probes, p50 %.2f ms, p99 %.2f ms; %d POSTs answered\n",
           ms.size(), ms[ms.size() / 2], p99, posts_ok);
    EXPECT_LT(p99, 100.0);
    EXPECT_GE(posts_ok, 1);
    // The trickle does not buy time: the header deadline is whole, so every
    // slow client has its 408 (JSON) about 2 s after its first byte.
    int timed_out = 0;
    for (int fd : slow.fds) {
        const Reply r = parse_reply(read_all(fd, 2.0));
        timed_out += r.status == 408 && is_json_error(r.body);
    }
    EXPECT_EQ(timed_out, 60);
}

TEST(HttpFront, PipelinedRequestsAreAnsweredInOrder) {
    Front f(FrontOptions{});
    const int fd = connect_to(f.port);
    const std::string three = "GET /echo/one HTTP/1.1\r\nHost: x\r\n\r\n" + post("/v1/chat/completions", "{}") +
                              "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    ASSERT_EQ(send(fd, three.data(), three.size(), 0), ssize_t(three.size()));
    std::string got = read_all(fd, 3.0);
    close(fd);
    std::vector<std::string> bodies;
    for (Reply r = parse_reply(got); r.status; r = parse_reply(got)) {
        EXPECT_EQ(r.status, 200);
        bodies.push_back(r.body);
        got.erase(0, r.size);
    }
    ASSERT_EQ(bodies.size(), 3u);
    EXPECT_EQ(bodies[0], "\"one\"");
    EXPECT_EQ(bodies[1], "{\"echo\": \"object\"}");
    EXPECT_EQ(bodies[2], "{\"status\": \"ok\"}");
}

TEST(HttpFront, BodiesBeyondTheBudgetGet503BeforeTheyAreRead) {
    FrontOptions o;
    o.max_body_bytes = 1 << 20;
    o.body_budget_bytes = 2 << 20;
    Front f(o);
    const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                             std::to_string(1 << 20) + "\r\n\r\n{";
    int a = connect_to(f.port), b = connect_to(f.port);
    send(a, head.data(), head.size(), 0);
    send(b, head.data(), head.size(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto [r, took] = ask(f.port, head);
    EXPECT_EQ(r.status, 503);
    EXPECT_TRUE(is_json_error(r.body));
    EXPECT_LT(took, 1.0);
    close(a);  // its reservation goes back
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string body = "{" + std::string((1 << 20) - 2, ' ') + "}";
    auto [ok, t2] = ask(f.port, post("/v1/chat/completions", body), 5);
    EXPECT_EQ(ok.status, 200);
    close(b);
}

// A chunked body arrives whole (in pieces, with an extension and a
// trailer), and counts against --max-body and the body budget like a
// Content-Length one; one trickled past the body deadline gets 408.
TEST(HttpFront, ChunkedBodiesUnderTheSameLimits) {
    FrontOptions o;
    o.max_body_bytes = 1 << 20;
    o.body_budget_bytes = 2 << 20;
    o.body_timeout_s = 0.5;
    Front f(o);
    const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    {
        const int fd = connect_to(f.port);
        const std::string parts[] = {"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n1", "\r\n{\r", "\n5;name=value\r\n\"a\": \r\n3\r\n1}\n\r\n0\r\nX-T: 1\r\n", "\r\n"};
        for (const std::string& p : parts) {
            ASSERT_EQ(send(fd, p.data(), p.size(), 0), ssize_t(p.size()));
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        const Reply r = parse_reply(read_all(fd, 2.0));
        close(fd);
        EXPECT_EQ(r.status, 200);
        EXPECT_EQ(r.body, "{\"echo\": \"object\"}");
    }
    // 1 MiB in 1 KiB chunks is whole; one byte more is 413.
    const std::string body = "[" + std::string((1 << 20) - 2, ' ') + "]";
    std::string big = head;
    for (size_t at = 0; at < body.size(); at += 1024) big += "400\r\n" + body.substr(at, 1024) + "\r\n";
    auto [whole, t1] = ask(f.port, big + "0\r\n\r\n", 5);
    EXPECT_EQ(whole.status, 200) << whole.body;
    auto [over, t2] = ask(f.port, big + "1\r\n \r\n0\r\n\r\n", 5);
    EXPECT_EQ(over.status, 413);
    EXPECT_TRUE(is_json_error(over.body));
    // Two bodies of 1 MiB hold the budget: a chunk of a third gets 503.
    int a = connect_to(f.port), b = connect_to(f.port);
    const std::string held = head + "100000\r\n{";
    send(a, held.data(), held.size(), 0);
    send(b, held.data(), held.size(), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto [busy, t3] = ask(f.port, head + "10\r\n{}", 1.0);
    EXPECT_EQ(busy.status, 503);
    close(a);
    close(b);
    // A body trickled past its deadline.
    const int slow = connect_to(f.port);
    send(slow, head.data(), head.size(), 0);
    for (int i = 0; i < 8; i++) {
        send(slow, "1\r\n \r\n", 6, MSG_NOSIGNAL);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(parse_reply(read_all(slow, 1.0)).status, 408);
    close(slow);
}

TEST(HttpFront, AThousandHostileRequestsEachGetAJsonErrorWithinASecond) {
    Front f(FrontOptions{});
    expect_hostile_requests_refused(f.port);
}

}  // namespace
}  // namespace ms
