// The whole server (engine, routes, front) with the shipped demo model while
// 60 clients trickle request headers a byte at a time: /health stays fast
// (p99 < 100 ms) and a chat completion is answered, through the demo
// model's own chat template.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <chrono>
#include <thread>

#include "loopback.h"
#include "server/http.h"

namespace ms {
namespace {

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TEST(SlowClients, HealthStaysFastAndAChatIsAnswered) {
    SessionOptions o;
    o.model_path = std::string(MOESTREAM_SOURCE_DIR) + "/models/demo-Q8_0.gguf";
    o.n_ctx = 512;
    o.n_threads = 1;
    Engine engine(
        [&] {
            std::vector<std::unique_ptr<Session>> slots;
            slots.push_back(Session::open(o));
            return slots;
        },
        EngineOptions{});
    ServerOptions so;
    so.port = 0;
    so.model_id = "demo";
    so.sampling = o.sampling;
    so.http_threads = 4;
    so.header_timeout_s = 3;
    HttpServer server(engine, so);
    server.bind();
    std::thread serving([&] { server.listen(); });

    std::vector<int> slow;
    for (int i = 0; i < 60; i++) {
        const int fd = connect_to(server.port());
        ASSERT_GE(fd, 0);
        const std::string start = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ";
        ASSERT_EQ(send(fd, start.data(), start.size(), MSG_NOSIGNAL), ssize_t(start.size()));
        slow.push_back(fd);
    }
    std::atomic<bool> trickling{true};
    std::thread trickle([&] {
        while (trickling) {
            for (int fd : slow) send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    });

    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(30, 0);
    auto chat = std::async(std::launch::async, [&] {
        httplib::Client cc("127.0.0.1", server.port());
        cc.set_read_timeout(30, 0);
        return cc.Post("/v1/chat/completions",
                       R"({"messages": [{"role": "user", "content": "It is my duty to"}], "max_tokens": 16})",
                       "application/json");
    });
    std::vector<double> ms;
    const double end = now_s() + 2.0;
    while (now_s() < end) {
        const double t0 = now_s();
        httplib::Client h("127.0.0.1", server.port());
        auto r = h.Get("/health");
        ms.push_back((now_s() - t0) * 1000);
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200);
    }
    auto reply = chat.get();
    trickling = false;
    trickle.join();
    std::sort(ms.begin(), ms.end());
    const double p99 = ms[std::min(ms.size() - 1, size_t(double(ms.size()) * 0.99))];
    printf("/health with 60 slow-header sockets and a chat generating: %zu probes, p50 %.2f ms, p99 %.2f ms\n",
           ms.size(), ms[ms.size() / 2], p99);
    EXPECT_LT(p99, 100.0);
    ASSERT_TRUE(reply);
    ASSERT_EQ(reply->status, 200) << reply->body;
    const Json j = Json::parse(reply->body);
    EXPECT_EQ(j.at("choices")[0].at("message").at("role").as_string(), "assistant");
    EXPECT_GT(j.at("usage").at("completion_tokens").as_int(), 0);
    for (int fd : slow) close(fd);
    server.stop();
    serving.join();
}

}  // namespace
}  // namespace ms
