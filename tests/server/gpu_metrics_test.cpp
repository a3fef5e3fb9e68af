// /metrics on the GPU with experts streamed: where each expert use ran from
// (VRAM, copied, the host's cores), the copies ahead, and the bytes of each
// tier, equal to the run report's counts (add_gpu_report) at the same
// moment. Skips, saying why, without a CUDA device or the golden file.
#include <gtest/gtest.h>

#include <httplib.h>

#include <string>
#include <thread>

#include "../runtime/gpu_session.h"
#include "json/json.h"
#include "server/engine.h"
#include "server/http.h"
#include "../golden_required.h"

namespace ms {
namespace {

// The value of the sample named exactly `name` (labels included), or -1.
double sample(const std::string& text, const std::string& name) {
    const size_t at = text.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + name.size() + 2));
}

TEST(GpuMetrics, CountWhereEachExpertUseRan) {
    const char* name = "qwen3moe-Q4_K_M";
    if (const std::string why = streaming_skip(name); !why.empty()) GTEST_SKIP() << why;
    const golden::Case g = golden::load(name);
    test::TempDir dir;
    const std::string sidecar = packed_sidecar(g, dir);
    GpuOptions o;
    o.expert_bytes = uint64_t(512) << 10;  // about 4 of its 24 experts a layer
    o.cpu_misses = true;
    o.host_share_eighths = 4;
    Engine engine([&] {
        std::vector<std::unique_ptr<Session>> slots;
        slots.push_back(open_gpu(g.gguf, o, sidecar));
        return slots;
    }, EngineOptions{});
    ServerOptions so;
    so.port = 0;
    so.model_id = "golden";
    HttpServer http(engine, so);
    http.bind();
    std::thread thread([&] { http.listen(); });
    httplib::Client c("127.0.0.1", http.port());
    c.set_read_timeout(120, 0);
    auto res = c.Post("/v1/completions", R"({"prompt": "the", "max_tokens": 8, "temperature": 0})", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    const std::string text = c.Get("/metrics")->body;
    http.stop();
    thread.join();

    Json report = Json::object();
    add_gpu_report(engine.session().model(), &report);
    const Json& v = report.at("gpu").at("vram_tier");
    const double hits = v.at("hits").as_number(), misses = v.at("misses").as_number();
    const double host = v.at("host_computed").as_number();
    ASSERT_GT(misses, 0) << text;
    EXPECT_GT(host, 0);
    EXPECT_EQ(sample(text, "moestream_gpu_expert_uses_total{source=\"vram\"}"), hits) << text;
    EXPECT_EQ(sample(text, "moestream_gpu_expert_uses_total{source=\"host\"}"), host);
    EXPECT_EQ(sample(text, "moestream_gpu_expert_uses_total{source=\"copied\"}"), misses - host);
    EXPECT_EQ(sample(text, "moestream_gpu_expert_uses_total{source=\"bus\"}"), 0);
    EXPECT_EQ(sample(text, "moestream_gpu_prefetch_copies_total"), v.at("prefetch_copies").as_number());
    EXPECT_EQ(sample(text, "moestream_gpu_expert_bytes_total{tier=\"copied\"}"), v.at("copied_bytes").as_number());
    EXPECT_EQ(sample(text, "moestream_gpu_expert_bytes_total{tier=\"host\"}"),
              v.at("host_computed_bytes").as_number());
    EXPECT_GT(sample(text, "moestream_gpu_expert_bytes_total{tier=\"host\"}"), 0);
}

// Without the GPU the family is absent, not zero.
TEST(GpuMetrics, AbsentOnTheCpu) {
    const std::string gguf = golden::models_dir() + "/qwen3moe-Q8_0.gguf";
    if (!std::filesystem::exists(gguf)) GTEST_SKIP() << gguf << " is not here";
    SessionOptions o;
    o.model_path = gguf;
    o.n_ctx = 64;
    o.n_threads = 1;
    Engine engine([&] {
        std::vector<std::unique_ptr<Session>> slots;
        slots.push_back(Session::open(o));
        return slots;
    }, EngineOptions{});
    ServerOptions so;
    so.port = 0;
    HttpServer http(engine, so);
    http.bind();
    std::thread thread([&] { http.listen(); });
    httplib::Client c("127.0.0.1", http.port());
    const std::string text = c.Get("/metrics")->body;
    http.stop();
    thread.join();
    EXPECT_NE(text.find("moestream_requests_total"), std::string::npos) << text;
    EXPECT_EQ(text.find("moestream_gpu_"), std::string::npos) << text;
}

}  // namespace
}  // namespace ms
