// The whole server (engine, routes, front) with the shipped demo model (no
// golden files needed): while 60 clients trickle request headers a byte at
// a time, /health stays fast (p99 < 100 ms) and a chat completion is
// answered through the demo model's own chat template; the hostile requests
// of hostile.h; llama-server's utility routes and CORS.
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

#include "hostile.h"
#include "loopback.h"
#include "sampling/grammar.h"
#include "server/http.h"

namespace ms {
namespace {

struct DemoServer {
    SessionOptions o;
    std::unique_ptr<Engine> engine;
    std::unique_ptr<HttpServer> server;
    std::thread serving;
    explicit DemoServer(const std::string& cors = "", size_t grammar_budget = ServerOptions().grammar_budget_bytes) {
        o.model_path = std::string(MOESTREAM_SOURCE_DIR) + "/models/demo-Q8_0.gguf";
        o.n_ctx = 512;
        o.n_threads = 1;
        engine = std::make_unique<Engine>(
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
        so.cors = cors;
        so.grammar_budget_bytes = grammar_budget;
        server = std::make_unique<HttpServer>(*engine, so);
        server->bind();
        serving = std::thread([this] { server->listen(); });
    }
    ~DemoServer() {
        server->stop();
        serving.join();
    }
    Json post(const std::string& path, const std::string& body, int* status) const {
        httplib::Client c("127.0.0.1", server->port());
        auto r = c.Post(path.c_str(), body, "application/json");
        *status = r ? r->status : 0;
        return r ? Json::parse(r->body) : Json();
    }
};

TEST(DemoServe, SlowClientsLeaveHealthFastAndAChatAnswered) {
    DemoServer d;
    HttpServer& server = *d.server;
    Trickle slow(server.port(), 60, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ", 200);
    for (int fd : slow.fds) ASSERT_GE(fd, 0);

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
}

// The hostile list against the real routes: the same statuses, JSON errors
// and bound as against the front alone, and the server serves on.
TEST(DemoServe, AThousandHostileRequestsAgainstTheRealRoutes) {
    DemoServer d;
    expect_hostile_requests_refused(d.server->port());
    int status = 0;
    d.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})", &status);
    EXPECT_EQ(status, 200);
}

TEST(DemoServe, UtilityRoutesAndCors) {
    DemoServer d("https://example.org");
    const Session& s = d.engine->session();
    int status = 0;
    const std::string text = "It is my duty to report";
    // /tokenize is the session's tokenizer; /detokenize inverts it.
    Json t = d.post("/tokenize", R"({"content": ")" + text + R"("})", &status);
    ASSERT_EQ(status, 200) << t.dump();
    const std::vector<int32_t> ids = s.tokenize(text, false);
    ASSERT_EQ(t.at("tokens").size(), ids.size());
    Json id_list = Json::array();
    for (size_t i = 0; i < ids.size(); i++) {
        EXPECT_EQ(t.at("tokens")[i].as_int(), ids[i]);
        id_list.push_back(Json(int64_t(ids[i])));
    }
    Json pieces = d.post("/tokenize", R"({"content": ")" + text + R"(", "with_pieces": true})", &status);
    std::string joined;
    for (const Json& p : pieces.at("tokens").as_array()) joined += p.at("piece").as_string();
    EXPECT_EQ(joined, text);
    Json back = d.post("/detokenize", "{\"tokens\": " + id_list.dump() + "}", &status);
    ASSERT_EQ(status, 200);
    EXPECT_EQ(back.at("content").as_string(), text);
    d.post("/detokenize", R"({"tokens": [-1]})", &status);
    EXPECT_EQ(status, 400);
    d.post("/tokenize", R"({"content": 5})", &status);
    EXPECT_EQ(status, 400);
    // /apply-template: the demo's template makes paragraphs of the messages
    // and opens the next one (scripts/demo/chat_template.jinja).
    Json tpl = d.post("/apply-template",
                      R"({"messages": [{"role": "system", "content": "A"}, {"role": "user", "content": "B"}]})", &status);
    ASSERT_EQ(status, 200) << tpl.dump();
    EXPECT_EQ(tpl.at("prompt").as_string(), "A\n\nB\n\n");

    httplib::Client c("127.0.0.1", d.server->port());
    auto props = c.Get("/props");
    ASSERT_TRUE(props);
    const Json p = Json::parse(props->body);
    EXPECT_EQ(p.at("default_generation_settings").at("n_ctx").as_int(), 512);
    EXPECT_EQ(p.at("total_slots").as_int(), 1);
    EXPECT_EQ(props->get_header_value("Access-Control-Allow-Origin"), "https://example.org");
    const Json slots = Json::parse(c.Get("/slots")->body);
    ASSERT_EQ(slots.size(), 1u);
    EXPECT_FALSE(slots[0].at("is_processing").as_bool());
    EXPECT_EQ(c.Get("/v1/models/demo")->status, 200);
    EXPECT_EQ(Json::parse(c.Get("/v1/models/demo")->body).at("id").as_string(), "demo");
    EXPECT_EQ(c.Get("/v1/models/gpt-4o")->status, 404);
    auto pre = c.Options("/v1/chat/completions");
    ASSERT_TRUE(pre);
    EXPECT_EQ(pre->status, 204);
    EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "https://example.org");
    EXPECT_NE(pre->get_header_value("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
}

// A request's compiled grammar takes its bytes from --grammar-mem while it
// is in service: one larger than all of it is a 400 naming its field, and
// the bytes come back when the request is over.
TEST(DemoServe, GrammarsTakeTheirBytesFromTheirBudget) {
    const size_t budget = 16 << 10;
    DemoServer d("", budget);
    // A grammar over half the budget: two at once could not be held.
    std::string half;
    for (int k = 1; k < 4096; k++) {
        half = "root ::= \"a\" [a-z]{0," + std::to_string(k) + "}";
        if (parse_gbnf(half).bytes() > budget / 2) break;
    }
    ASSERT_LE(parse_gbnf(half).bytes(), budget);
    for (int i = 0; i < 3; i++) {
        int status = 0;
        Json j = d.post("/v1/completions", R"({"prompt": "It is", "max_tokens": 4, "grammar": )" + Json(half).dump() + "}",
                        &status);
        ASSERT_EQ(status, 200) << i << ": " << j.dump();
        EXPECT_EQ(j.at("choices")[0].at("text").as_string().substr(0, 1), "a");
    }
    const std::string big = "root ::= \"a\" [a-z]{0,4000}";
    ASSERT_GT(parse_gbnf(big).bytes(), budget);
    int status = 0;
    Json e = d.post("/v1/completions", R"({"prompt": "It is", "max_tokens": 4, "grammar": )" + Json(big).dump() + "}", &status);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(e.at("error").at("param").as_string(), "grammar");
    EXPECT_NE(e.at("error").at("message").as_string().find("--grammar-mem"), std::string::npos) << e.dump();
}

}  // namespace
}  // namespace ms
