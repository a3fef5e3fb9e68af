// The server end to end on loopback, in process, against the golden
// qwen3moe-Q8_0 model: a greedy completion equals the golden greedy tokens
// (plain and streamed), chat with the prompt cache, models/health/metrics,
// OpenAI-style errors, the API key, 503 on a full queue, and a client that
// goes away (streaming or not) freeing its slot. Ports are the kernel's pick.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "../model/golden.h"
#include "server/http.h"
#include "../golden_required.h"
#include "loopback.h"

namespace ms {
namespace {

const char* kModel = "qwen3moe-Q8_0";

struct TestServer {
    std::unique_ptr<Engine> engine;
    std::unique_ptr<HttpServer> http;
    std::thread thread;
    int port = 0;

    explicit TestServer(int parallel = 2, int queue = 4, const std::string& api_key = "", int64_t n_ctx = 512) {
        SessionOptions o;
        o.model_path = golden::models_dir() + "/" + kModel + ".gguf";
        o.n_ctx = n_ctx;
        o.n_threads = 1;
        EngineOptions eo;
        eo.queue = queue;
        engine = std::make_unique<Engine>(
            [&] {
                std::vector<std::unique_ptr<Session>> slots;
                slots.push_back(Session::open(o));
                for (int i = 1; i < parallel; i++) slots.push_back(slots[0]->fork(o.sampling));
                return slots;
            },
            eo);
        ServerOptions so;
        so.port = 0;
        so.model_id = "golden";
        so.api_key = api_key;
        so.sampling = o.sampling;
        so.http_threads = 16;
        http = std::make_unique<HttpServer>(*engine, so);
        http->bind();
        port = http->port();
        thread = std::thread([this] { http->listen(); });
    }
    ~TestServer() {
        http->stop();
        thread.join();
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(120, 0);
        return c;
    }
    // POST a JSON body; returns status and parsed body.
    std::pair<int, Json> post(const std::string& path, const std::string& body, const std::string& key = "") const {
        httplib::Client c = client();
        httplib::Headers h;
        if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
        auto res = c.Post(path.c_str(), h, body, "application/json");
        if (!res) return {0, Json()};
        Json j;
        try {
            j = Json::parse(res->body);
        } catch (const std::exception&) {
            j = Json(res->body);
        }
        return {res->status, j};
    }
    double metric(const std::string& name) const {
        auto res = client().Get("/metrics");
        const std::string& t = res->body;
        const size_t at = t.find("\n" + name + " ");
        if (at == std::string::npos) return -1;
        return std::stod(t.substr(at + name.size() + 2));
    }
};

void send_post(int fd, const std::string& path, const std::string& body) {
    const std::string req = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(write(fd, req.data(), req.size()), ssize_t(req.size()));
}

// Reads until `what` arrives (or 60 s pass).
bool read_until(int fd, const std::string& what) {
    std::string got;
    char buf[4096];
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (got.find(what) == std::string::npos && std::chrono::steady_clock::now() < end) {
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) return false;
        got.append(buf, size_t(n));
    }
    return got.find(what) != std::string::npos;
}

// Polls until cond() or 60 s.
template <class F>
bool eventually(F cond) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!cond()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
}

// The golden greedy continuation as the text a client should see.
std::string golden_text(const golden::Case& c, const Tokenizer& tok) {
    StreamDecoder d(tok, false);
    std::string s;
    for (int32_t t : c.greedy) s += d.push(t);
    return s + d.flush();
}

Json completion_body(const golden::Case& c, bool stream) {
    Json b = Json::object();
    b["model"] = "golden";
    b["prompt"] = c.meta.at("prompt").as_string();
    b["max_tokens"] = int64_t(c.greedy.size());
    b["temperature"] = 0;
    b["ignore_eos"] = true;
    b["stream"] = stream;
    if (stream) b["stream_options"]["include_usage"] = true;
    return b;
}

TEST(Serve, GreedyCompletionIsTheGoldenContinuation) {
    const golden::Case c = golden::load(kModel);
    TestServer s;
    const std::string want = golden_text(c, s.engine->session().tokenizer());
    auto [status, j] = s.post("/v1/completions", completion_body(c, false).dump());
    ASSERT_EQ(status, 200) << j.dump();
    EXPECT_EQ(j.at("object").as_string(), "text_completion");
    EXPECT_EQ(j.at("choices")[0].at("text").as_string(), want);
    EXPECT_EQ(j.at("choices")[0].at("finish_reason").as_string(), "length");
    EXPECT_EQ(j.at("usage").at("prompt_tokens").as_int(), int64_t(c.prompt.size()));
    EXPECT_EQ(j.at("usage").at("completion_tokens").as_int(), int64_t(c.greedy.size()));

    // Streamed: the deltas add up to the same text; then a finish chunk, the
    // usage chunk and [DONE].
    auto res = s.client().Post("/v1/completions", completion_body(c, true).dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
    std::string text, finish;
    Json usage;
    bool done = false;
    size_t pos = 0;
    const std::string& body = res->body;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
        const size_t end = body.find("\n\n", pos);
        const std::string data = body.substr(pos + 6, end - pos - 6);
        pos = end;
        if (data == "[DONE]") {
            done = true;
            continue;
        }
        const Json ev = Json::parse(data);
        if (ev.at("choices").size() == 0) {
            usage = ev.at("usage");
            continue;
        }
        text += ev.at("choices")[0].at("text").as_string();
        if (!ev.at("choices")[0].at("finish_reason").is_null()) finish = ev.at("choices")[0].at("finish_reason").as_string();
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(text, want);
    EXPECT_EQ(finish, "length");
    ASSERT_TRUE(usage.is_object());
    EXPECT_EQ(usage.at("completion_tokens").as_int(), int64_t(c.greedy.size()));
    // The same prompt again: the slot's KV cache holds all but its last token.
    EXPECT_EQ(usage.at("prompt_tokens_details").at("cached_tokens").as_int(), int64_t(c.prompt.size()) - 1);
}

TEST(Serve, ChatAndThePromptCache) {
    TestServer s(1, 4);
    auto [status, j] = s.post("/v1/chat/completions",
                              R"({"messages": [{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": "Hello there"}],
                                  "max_completion_tokens": 6, "seed": 7, "temperature": 0.7})");
    ASSERT_EQ(status, 200) << j.dump();
    EXPECT_EQ(j.at("object").as_string(), "chat.completion");
    const Json& msg = j.at("choices")[0].at("message");
    EXPECT_EQ(msg.at("role").as_string(), "assistant");
    const int64_t first_prompt = j.at("usage").at("prompt_tokens").as_int();
    EXPECT_GT(first_prompt, 3);
    EXPECT_LE(j.at("usage").at("completion_tokens").as_int(), 6);

    // The next turn repeats the conversation: only its new tokens are evaluated.
    Json next = Json::parse(R"({"messages": [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "Hello there"}],
                                "max_tokens": 4})");
    Json reply = Json::object();
    reply["role"] = "assistant";
    reply["content"] = msg.at("content").as_string();
    next["messages"].push_back(reply);
    next["messages"].push_back(Json::parse(R"({"role": "user", "content": [{"type": "text", "text": "More?"}]})"));
    auto [status2, j2] = s.post("/v1/chat/completions", next.dump());
    ASSERT_EQ(status2, 200) << j2.dump();
    const Json& u = j2.at("usage");
    EXPECT_GT(u.at("prompt_tokens").as_int(), first_prompt);
    EXPECT_GE(u.at("prompt_tokens_details").at("cached_tokens").as_int(), first_prompt - 1);

    // The same seed gives the same reply.
    auto [status3, j3] = s.post("/v1/chat/completions",
                                R"({"messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Hello there"}],
                                    "max_completion_tokens": 6, "seed": 7, "temperature": 0.7})");
    ASSERT_EQ(status3, 200);
    EXPECT_EQ(j3.at("choices")[0].at("message").at("content").as_string(), msg.at("content").as_string());
}

TEST(Serve, ModelsHealthMetrics) {
    TestServer s;
    auto c = s.client();
    auto health = c.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    auto models = c.Get("/v1/models");
    ASSERT_TRUE(models);
    const Json m = Json::parse(models->body);
    EXPECT_EQ(m.at("data")[0].at("id").as_string(), "golden");
    EXPECT_EQ(m.at("data")[0].at("object").as_string(), "model");
    ASSERT_EQ(s.post("/v1/completions", R"({"prompt": "Hi", "max_tokens": 3, "ignore_eos": true})").first, 200);
    EXPECT_EQ(s.metric("moestream_generated_tokens_total"), 3);
    EXPECT_EQ(s.metric("moestream_slots"), 2);
    EXPECT_EQ(s.metric("moestream_queue_depth"), 0);
    EXPECT_GT(s.metric("moestream_rss_bytes"), 1e6);
    // Prometheus text format, read strictly: every sample belongs to the
    // family whose HELP and TYPE came last, families are declared once and
    // each declared family has samples.
    {
        const std::string text = c.Get("/metrics")->body;
        std::map<std::string, int> samples;
        std::string family;
        size_t pos = 0;
        while (pos < text.size()) {
            const size_t eol = text.find('\n', pos);
            ASSERT_NE(eol, std::string::npos) << "the last line has no newline";
            const std::string line = text.substr(pos, eol - pos);
            pos = eol + 1;
            if (line.rfind("# HELP ", 0) == 0) {
                const std::string name = line.substr(7, line.find(' ', 7) - 7);
                EXPECT_EQ(samples.count(name), 0u) << name << " declared twice";
                family = name;
                samples[name] = 0;
                continue;
            }
            if (line.rfind("# TYPE ", 0) == 0) {
                EXPECT_EQ(line.substr(7, line.find(' ', 7) - 7), family);
                continue;
            }
            const std::string name = line.substr(0, line.find_first_of("{ "));
            ASSERT_EQ(name, family) << "sample out of its family: " << line;
            const std::string value = line.substr(line.rfind(' ') + 1);
            size_t used = 0;
            std::stod(value, &used);
            EXPECT_EQ(used, value.size()) << line;
            samples[family]++;
        }
        for (const auto& [name, n] : samples) EXPECT_GT(n, 0) << name << " has no samples";
        EXPECT_GT(samples["moestream_bytes_read_total"], 0);
    }
    auto page = c.Get("/");
    ASSERT_TRUE(page);
    EXPECT_NE(page->body.find("<html"), std::string::npos);
}

TEST(Serve, BadRequestsGetOpenAIErrorsAndTheServerGoesOn) {
    TestServer s;
    const std::string chat = "/v1/chat/completions", comp = "/v1/completions";
    const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
    struct Case {
        std::string path, body;
        int status;
        std::string param;
    };
    const std::string long_prompt(4000, 'x');
    const Case cases[] = {
        {chat, "{\"messages\": [", 400, ""},
        {chat, "[1, 2]", 400, ""},
        {chat, "{" + msgs + ", \"messages\": []}", 400, ""},
        {chat, "{}", 400, "messages"},
        {chat, R"({"messages": "hi"})", 400, "messages"},
        {chat, R"({"messages": [{"role": "wizard", "content": "hi"}]})", 400, "messages[0].role"},
        {chat, R"({"messages": [{"role": "user", "content": 5}]})", 400, "messages[0].content"},
        {chat, "{" + msgs + ", \"temperature\": \"hot\"}", 400, "temperature"},
        {chat, "{" + msgs + ", \"temperature\": 9}", 400, "temperature"},
        {chat, "{" + msgs + ", \"max_tokens\": -1}", 400, "max_tokens"},
        {chat, "{" + msgs + ", \"max_tokens\": 1e300}", 400, "max_tokens"},
        {chat, "{" + msgs + ", \"max_tokens\": 2.5}", 400, "max_tokens"},
        {chat, "{" + msgs + ", \"stop\": [1]}", 400, "stop"},
        {chat, "{" + msgs + ", \"n\": 0}", 400, "n"},
        {chat, "{" + msgs + ", \"n\": 17}", 400, "n"},
        {chat, "{" + msgs + ", \"functions\": []}", 400, "functions"},
        {chat, "{" + msgs + ", \"id_slot\": 0}", 400, "id_slot"},
        {chat, "{" + msgs + ", \"chat_template_kwargs\": {}}", 400, "chat_template_kwargs"},
        {chat, "{" + msgs + ", \"cache_prompt\": false}", 400, "cache_prompt"},
        {chat, "{" + msgs + ", \"logprobs\": 3}", 400, "logprobs"},
        {chat, "{" + msgs + ", \"logprobs\": true, \"top_logprobs\": 21}", 400, "top_logprobs"},
        {chat, "{" + msgs + ", \"top_logprobs\": 2}", 400, "top_logprobs"},
        {chat, "{" + msgs + ", \"logit_bias\": {\"abc\": 1}}", 400, "logit_bias.abc"},
        {chat, "{" + msgs + ", \"logit_bias\": {\"5\": \"x\"}}", 400, "logit_bias.5"},
        {chat, "{" + msgs + ", \"logit_bias\": {\"5\": 101}}", 400, "logit_bias.5"},
        {chat, "{" + msgs + ", \"logit_bias\": {\"99999999\": 1}}", 400, "logit_bias.99999999"},
        {chat, "{" + msgs + ", \"response_format\": {\"type\": \"xml\"}}", 400, "response_format"},
        {chat, "{" + msgs + R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "a"}}}})", 400, "response_format.json_schema.schema"},
        {chat, "{" + msgs + ", \"grammar\": \"root ::= (\"}", 400, "grammar"},
        {chat, "{" + msgs + ", \"grammar\": \"root ::= root\"}", 400, "grammar"},
        {chat, "{" + msgs + ", \"grammar\": \"root ::= \\\"a\\\"\", \"json_schema\": {}}", 400, "json_schema"},
        {comp, R"({"prompt": "x", "best_of": 2})", 400, "best_of"},
        {comp, R"({"prompt": "x", "logprobs": true})", 400, "logprobs"},
        {comp, R"({"prompt": "x", "frobnicate": 1})", 400, "frobnicate"},
        {chat, "{" + msgs + ", \"stream\": \"yes\"}", 400, "stream"},
        {chat, "{" + msgs + ", \"tools\": [{\"type\": \"function\"}]}", 400, "tools[0]"},  // a tool without a function
        {chat, "{" + msgs + ", \"model\": \"gpt-4o\"}", 404, "model"},
        {comp, R"({"prompt": ")" + long_prompt + R"("})", 400, "prompt"},
        {comp, R"({"prompt": 7})", 400, "prompt"},
        {comp, std::string(200, '[') + std::string(200, ']'), 400, ""},
    };
    for (const Case& c : cases) {
        auto [status, j] = s.post(c.path, c.body);
        EXPECT_EQ(status, c.status) << c.body.substr(0, 120) << " -> " << j.dump();
        ASSERT_TRUE(j.is_object() && j.contains("error")) << c.body.substr(0, 120);
        const Json& e = j.at("error");
        EXPECT_TRUE(e.at("message").is_string());
        EXPECT_TRUE(e.at("type").is_string());
        if (!c.param.empty()) {
            EXPECT_EQ(e.at("param").as_string(), c.param) << c.body.substr(0, 120);
        }
    }
    auto nope = s.client().Get("/v1/nothing");
    ASSERT_TRUE(nope);
    EXPECT_EQ(nope->status, 404);
    EXPECT_TRUE(Json::parse(nope->body).contains("error"));
    EXPECT_EQ(s.post(comp, R"({"prompt": "still here", "max_tokens": 2})").first, 200);
    // max_tokens past the context left is capped there (llama-server's way), not refused.
    auto [capped, cj] = s.post(comp, R"({"prompt": "x", "max_tokens": 100000, "ignore_eos": true})");
    ASSERT_EQ(capped, 200) << cj.dump();
    EXPECT_EQ(cj.at("choices")[0].at("finish_reason").as_string(), "length");
    EXPECT_EQ(cj.at("usage").at("prompt_tokens").as_int() + cj.at("usage").at("completion_tokens").as_int(), 512);
}

// The logprobs of a greedy completion are the log-softmax of what
// `moestream logits` writes for the same prompt and continuation.
TEST(Serve, LogprobsAreTheLogitsCommandsSoftmax) {
    TestServer s(1, 4);
    const std::string prompt = "The capital of France is";
    auto [status, j] = s.post("/v1/completions", R"({"prompt": ")" + prompt +
                                                     R"(", "max_tokens": 3, "temperature": 0, "ignore_eos": true, "logprobs": 5})");
    ASSERT_EQ(status, 200) << j.dump();
    const Json& lp = j.at("choices")[0].at("logprobs");
    ASSERT_EQ(lp.at("token_logprobs").size(), 3u);

    // `make tsan` builds this test alone, without the moestream binary.
    if (access(MOESTREAM_BINARY, X_OK) != 0) GTEST_SKIP() << MOESTREAM_BINARY << " is not built here";
    const std::string prefix = testing::TempDir() + "serve_logprobs";
    const std::string cmd = std::string(MOESTREAM_BINARY) + " logits -m " + golden::models_dir() + "/" + kModel +
                            ".gguf -p '" + prompt + "' -o " + prefix + " -n 2 --kv-type f16 -c 512 -t 1 >/dev/null 2>&1";
    ASSERT_EQ(system(cmd.c_str()), 0) << cmd;
    std::ifstream meta_file(prefix + ".json");
    const Json meta = Json::parse(std::string(std::istreambuf_iterator<char>(meta_file), {}));
    const int64_t n_vocab = meta.at("n_vocab").as_int();
    const size_t n_prompt = meta.at("prompt_tokens").size();
    ASSERT_EQ(int64_t(n_prompt), j.at("usage").at("prompt_tokens").as_int());
    auto rows = [&](const std::string& path, size_t n) {
        std::ifstream f(path, std::ios::binary);
        std::vector<float> v(n * size_t(n_vocab));
        f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
        EXPECT_TRUE(f) << path;
        return v;
    };
    const std::vector<float> prompt_rows = rows(prefix + ".logits.f32", n_prompt), gen = rows(prefix + ".gen.f32", 2);
    const Json& greedy = meta.at("greedy_tokens");
    const Tokenizer& tok = s.engine->session().tokenizer();
    // A token as the API shows it: U+FFFD for a piece of a character.
    auto shown = [&](int64_t id) {
        StreamDecoder d(tok, true);
        std::string text = d.push(int32_t(id));
        return text + d.flush();
    };
    for (size_t step = 0; step < 3; step++) {
        const float* row = step == 0 ? &prompt_rows[(n_prompt - 1) * size_t(n_vocab)] : &gen[(step - 1) * size_t(n_vocab)];
        double max = row[0], sum = 0;
        for (int64_t i = 0; i < n_vocab; i++) max = std::max(max, double(row[i]));
        for (int64_t i = 0; i < n_vocab; i++) sum += std::exp(double(row[i]) - max);
        auto ref = [&](int64_t id) { return double(row[id]) - max - std::log(sum); };
        const int64_t t = std::max_element(row, row + n_vocab) - row;  // the greedy token
        if (step < greedy.size()) {
            EXPECT_EQ(greedy[step].as_int(), t);
        }
        EXPECT_EQ(lp.at("tokens")[step].as_string(), shown(t)) << step;
        EXPECT_NEAR(lp.at("token_logprobs")[step].as_number(), ref(t), 2e-3) << step;
        // The top 5, best first, are the reference's 5 largest.
        std::vector<int64_t> order(static_cast<size_t>(n_vocab));
        for (int64_t i = 0; i < n_vocab; i++) order[size_t(i)] = i;
        std::partial_sort(order.begin(), order.begin() + 5, order.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
        const Json& top = lp.at("top_logprobs")[step];
        std::set<std::string> keys;
        for (int k = 0; k < 5; k++) keys.insert(shown(order[size_t(k)]));
        ASSERT_EQ(top.size(), keys.size());
        for (int k = 0; k < 5; k++) {
            const Json* v = top.find(shown(order[size_t(k)]));
            ASSERT_TRUE(v) << "step " << step << " rank " << k;
            // Two byte tokens may share the key U+FFFD: the value is then the better one's.
            if (keys.size() == 5) {
                EXPECT_NEAR(v->as_number(), ref(order[size_t(k)]), 2e-3);
            }
        }
    }
    // echo: the prompt's text, then the reply's; its tokens' logprobs first
    // (the first one's null), each the softmax of the logits before it.
    const std::string echo_body = R"({"prompt": ")" + prompt + R"(", "max_tokens": 2, "temperature": 0, "ignore_eos": true, )";
    auto [es, ej] = s.post("/v1/completions", echo_body + R"("echo": true, "logprobs": 2})");
    ASSERT_EQ(es, 200) << ej.dump();
    auto [ps, pj] = s.post("/v1/completions", echo_body + R"("n": 2, "echo": true})");
    ASSERT_EQ(ps, 200) << pj.dump();
    const std::string reply = j.at("choices")[0].at("text").as_string();  // 3 tokens
    EXPECT_EQ(ej.at("choices")[0].at("text").as_string().rfind(prompt, 0), 0u);
    EXPECT_EQ(reply.rfind(ej.at("choices")[0].at("text").as_string().substr(prompt.size()), 0), 0u) << reply;
    for (const Json& ch : pj.at("choices").as_array())
        EXPECT_EQ(ch.at("text").as_string(), ej.at("choices")[0].at("text").as_string());
    const Json& elp = ej.at("choices")[0].at("logprobs");
    const Json& prompt_tokens = meta.at("prompt_tokens");
    const size_t first = tok.add_bos() && prompt_tokens[0].as_int() == tok.bos() ? 1 : 0;
    ASSERT_EQ(elp.at("token_logprobs").size(), n_prompt - first + 2);
    size_t text_at = 0;
    for (size_t p = first; p < n_prompt; p++) {
        const size_t k = p - first;
        const int64_t id = prompt_tokens[p].as_int();
        EXPECT_EQ(elp.at("tokens")[k].as_string(), shown(id)) << p;
        EXPECT_EQ(elp.at("text_offset")[k].as_int(), int64_t(text_at)) << p;
        text_at += tok.piece(int32_t(id)).size();
        if (p == 0) {
            EXPECT_TRUE(elp.at("token_logprobs")[k].is_null());
            EXPECT_TRUE(elp.at("top_logprobs")[k].is_null());
            continue;
        }
        const float* row = &prompt_rows[(p - 1) * size_t(n_vocab)];
        double max = row[0], sum = 0;
        for (int64_t i = 0; i < n_vocab; i++) max = std::max(max, double(row[i]));
        for (int64_t i = 0; i < n_vocab; i++) sum += std::exp(double(row[i]) - max);
        EXPECT_NEAR(elp.at("token_logprobs")[k].as_number(), double(row[id]) - max - std::log(sum), 2e-3) << p;
        // Two byte tokens may share the key U+FFFD.
        EXPECT_TRUE(elp.at("top_logprobs")[k].size() == 2u || elp.at("top_logprobs")[k].size() == 1u);
    }
    EXPECT_NEAR(elp.at("token_logprobs")[n_prompt - first].as_number(), lp.at("token_logprobs")[0].as_number(), 1e-6);
    auto [cs0, cj0] = s.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "echo": true})");
    EXPECT_EQ(cs0, 400);
    // Chat's shape: content[i] with token, logprob, bytes, top_logprobs.
    auto [cs, cj] = s.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                                                      "logprobs": true, "top_logprobs": 2})");
    ASSERT_EQ(cs, 200) << cj.dump();
    const Json& content = cj.at("choices")[0].at("logprobs").at("content");
    ASSERT_GE(content.size(), 1u);
    EXPECT_TRUE(content[0].at("logprob").as_number() <= 0);
    EXPECT_EQ(content[0].at("top_logprobs").size(), 2u);
    EXPECT_TRUE(content[0].at("bytes").is_array());
}

// n choices: one evaluation of the prompt, n different replies.
TEST(Serve, NChoicesShareOnePromptEvaluation) {
    TestServer s(1, 4);
    const double prefilled = s.metric("moestream_prefill_tokens_total");
    auto [status, j] = s.post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 4, "n": 3, "seed": 5,
                                                     "temperature": 1.5, "top_k": 0, "top_p": 1, "min_p": 0, "ignore_eos": true})");
    ASSERT_EQ(status, 200) << j.dump();
    const Json& choices = j.at("choices");
    ASSERT_EQ(choices.size(), 3u);
    std::set<std::string> texts;
    for (size_t i = 0; i < 3; i++) {
        EXPECT_EQ(choices[i].at("index").as_int(), int64_t(i));
        EXPECT_EQ(choices[i].at("finish_reason").as_string(), "length");
        texts.insert(choices[i].at("text").as_string());
    }
    EXPECT_EQ(texts.size(), 3u) << j.dump();
    EXPECT_EQ(j.at("usage").at("completion_tokens").as_int(), 12);
    EXPECT_EQ(s.metric("moestream_prefill_tokens_total") - prefilled, double(j.at("usage").at("prompt_tokens").as_int()));

    // Streamed: chunks of both choices, each ending with its finish_reason,
    // with the logprobs of the tokens they carry.
    httplib::Client c = s.client();
    auto res = c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                                                 "n": 2, "stream": true, "ignore_eos": true, "logprobs": true})",
                      "application/json");
    ASSERT_TRUE(res);
    int finished[2] = {0, 0};
    size_t logprobs[2] = {0, 0};
    size_t at = 0;
    while ((at = res->body.find("data: {", at)) != std::string::npos) {
        const size_t end = res->body.find("\n\n", at);
        const Json chunk = Json::parse(res->body.substr(at + 6, end - at - 6));
        at = end;
        const Json& ch = chunk.at("choices")[0];
        if (!ch.at("finish_reason").is_null()) finished[ch.at("index").as_int()]++;
        if (!ch.at("logprobs").is_null()) {
            for (const Json& e : ch.at("logprobs").at("content").as_array()) {
                EXPECT_LE(e.at("logprob").as_number(), 0.0);
                logprobs[ch.at("index").as_int()]++;
            }
        }
    }
    EXPECT_EQ(finished[0], 1);
    EXPECT_EQ(finished[1], 1);
    // One per token but an end-of-generation one (ignore_eos lets those through).
    EXPECT_TRUE(logprobs[0] >= 1 && logprobs[0] <= 3) << res->body;
    EXPECT_TRUE(logprobs[1] >= 1 && logprobs[1] <= 3) << res->body;
}

// With free slots, the n choices decode together: one prompt evaluation,
// one batched pass per token for all of them; greedy choices are the
// single-choice reply, seeded ones the same on every run.
TEST(Serve, NChoicesDecodeAsOneBatch) {
    TestServer s(4, 4);
    const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 6, "ignore_eos": true, )";
    auto [s1, one] = s.post("/v1/completions", body + R"("temperature": 0})");
    ASSERT_EQ(s1, 200) << one.dump();
    const std::string greedy = one.at("choices")[0].at("text").as_string();
    const double prefilled = s.metric("moestream_prefill_tokens_total"), passes = s.metric("moestream_decode_passes_total");
    // A different prompt, so no slot's cache holds it already.
    auto [s4, four] = s.post("/v1/completions", R"({"prompt": "Once upon a time there", "max_tokens": 6, "ignore_eos": true,
                                                   "temperature": 0, "n": 4})");
    ASSERT_EQ(s4, 200) << four.dump();
    const Json& usage = four.at("usage");
    EXPECT_EQ(s.metric("moestream_prefill_tokens_total") - prefilled,
              double(usage.at("prompt_tokens").as_int() - usage.at("prompt_tokens_details").at("cached_tokens").as_int()));
    // 5 passes evaluate the first 5 of each choice's 6 tokens (the last is
    // only sampled); in turn it would take 20.
    EXPECT_EQ(s.metric("moestream_decode_passes_total") - passes, 5.0);
    EXPECT_EQ(four.at("usage").at("completion_tokens").as_int(), 24);
    auto [s1b, oneb] = s.post("/v1/completions", R"({"prompt": "Once upon a time there", "max_tokens": 6, "ignore_eos": true,
                                                    "temperature": 0})");
    ASSERT_EQ(s1b, 200);
    for (const Json& ch : four.at("choices").as_array())
        EXPECT_EQ(ch.at("text").as_string(), oneb.at("choices")[0].at("text").as_string());
    EXPECT_NE(greedy, "");

    const std::string seeded = body + R"("temperature": 1.5, "top_k": 0, "top_p": 1, "min_p": 0, "seed": 9, "n": 3})";
    auto [a, ja] = s.post("/v1/completions", seeded);
    auto [b, jb] = s.post("/v1/completions", seeded);
    ASSERT_EQ(a, 200);
    ASSERT_EQ(b, 200);
    // Choice i of a batch draws as a request alone with seed + i does.
    for (size_t i = 0; i < 3; i++) {
        EXPECT_EQ(ja.at("choices")[i].at("text").as_string(), jb.at("choices")[i].at("text").as_string()) << i;
        auto [c, jc] = s.post("/v1/completions", body + R"("temperature": 1.5, "top_k": 0, "top_p": 1, "min_p": 0, "seed": )" +
                                                     std::to_string(9 + i) + "}");
        ASSERT_EQ(c, 200);
        EXPECT_EQ(jc.at("choices")[0].at("text").as_string(), ja.at("choices")[i].at("text").as_string()) << i;
    }
}

// serve --parallel 3 with drafts: the slots' passes (each its sampled
// token and 3 forced drafts, most rejected and rolled back) run as one
// forward call (Session::run_passes), and each reply is the text a slot
// decoding alone without drafts gives, greedy; the tokens JobOutput counts
// are the replies' tokens, and the decode passes are fewer than the tokens
// when the three run together.
TEST(Serve, DraftsOfSeveralSlotsVerifyInOnePass) {
    SessionOptions o;
    o.model_path = golden::models_dir() + "/" + kModel + ".gguf";
    o.n_ctx = 256;
    o.n_threads = 1;
    const std::vector<std::string> prompts = {"Once upon a time", "The capital of France is", "1, 2, 3, 4,"};
    const int64_t max_tokens = 12;
    auto run = [&](int parallel, DraftMode mode, EngineStats* stats) {
        Engine engine(
            [&] {
                std::vector<std::unique_ptr<Session>> slots;
                slots.push_back(Session::open(o));
                for (int i = 1; i < parallel; i++) slots.push_back(slots[0]->fork(o.sampling));
                DraftOptions d;
                d.mode = mode;
                d.max = 3;
                for (auto& sl : slots) sl->set_draft(d);
                return slots;
            },
            EngineOptions{});
        std::vector<std::shared_ptr<Job>> jobs;
        for (const std::string& p : prompts) {
            GenerationRequest r;
            r.chat = false;
            r.prompt = p;
            r.max_tokens = max_tokens;
            r.ignore_eos = true;
            r.sampling.temp = 0;
            jobs.push_back(std::make_shared<Job>(r, engine.session().tokenize(p, true), 1e9));
        }
        for (auto& j : jobs) EXPECT_TRUE(engine.submit(j));
        std::vector<std::string> text;
        for (auto& j : jobs) {
            std::string t;
            int64_t tokens = 0;
            std::vector<JobOutput> out;
            for (bool over = false; !over;) {
                out.clear();
                over = j->wait(&out, 5.0);
                for (const JobOutput& x : out) {
                    t += x.text;
                    tokens += x.tokens;
                }
            }
            EXPECT_EQ(j->error, "");
            EXPECT_EQ(tokens, max_tokens);
            text.push_back(t);
        }
        *stats = engine.stats();
        return text;
    };
    EngineStats alone, together;
    const std::vector<std::string> plain = run(1, DraftMode::Off, &alone);
    const std::vector<std::string> drafted = run(3, DraftMode::Forced, &together);
    EXPECT_EQ(drafted, plain);
    EXPECT_GT(together.drafted_tokens, 0u);
    EXPECT_EQ(together.generated_tokens, uint64_t(max_tokens) * prompts.size());
    // One slot: a pass a token but each reply's last (sampled, not
    // evaluated). Three slots with drafts: their passes share forward calls.
    EXPECT_EQ(alone.decode_passes, uint64_t(max_tokens - 1) * prompts.size());
    EXPECT_LT(together.decode_passes, alone.decode_passes);
}

TEST(Serve, LogitBiasForcesAndForbidsTokens) {
    TestServer s(1, 4);
    const Tokenizer& tok = s.engine->session().tokenizer();
    const int32_t forced = tok.encode(" blue", false, false).at(0);
    auto [status, j] = s.post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 3, "temperature": 1, "ignore_eos": true,
                                                     "logit_bias": {")" + std::to_string(forced) + R"(": 100}})");
    ASSERT_EQ(status, 200) << j.dump();
    EXPECT_EQ(j.at("choices")[0].at("text").as_string(), tok.piece(forced) + tok.piece(forced) + tok.piece(forced));

    // Greedy, then greedy with the best token banned: the second best.
    auto [s1, g] = s.post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 1, "temperature": 0, "logprobs": 2})");
    ASSERT_EQ(s1, 200) << g.dump();
    const std::string best = g.at("choices")[0].at("text").as_string();
    const Json& top = g.at("choices")[0].at("logprobs").at("top_logprobs")[0];
    std::string second;
    for (const auto& [k, v] : top.as_object())
        if (k != best) second = k;
    const int32_t best_id = tok.encode(best, false, false).at(0);
    ASSERT_EQ(tok.piece(best_id), best);
    auto [s2, b] = s.post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 1, "temperature": 0, "logit_bias": {")" +
                                                 std::to_string(best_id) + R"(": -100}})");
    ASSERT_EQ(s2, 200) << b.dump();
    EXPECT_EQ(b.at("choices")[0].at("text").as_string(), second);
}

// Constrained replies parse as what was asked for, streamed or not, chat
// or completion (the golden model is random-weight: only the mask makes
// its output JSON).
TEST(Serve, ResponseFormatAndGrammarConstrainTheReply) {
    TestServer s(1, 4);
    const std::string schema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
        "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 2}, "ok": {"type": "boolean"}},
        "required": ["name", "ok"], "additionalProperties": false})";
    const std::string bodies[] = {
        R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 200, "temperature": 1, "seed": 1,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": )" + schema + "}}}",
        R"({"prompt": "A", "max_tokens": 200, "temperature": 1, "seed": 2, "json_schema": )" + schema + "}",
        R"({"prompt": "B", "max_tokens": 200, "temperature": 1, "seed": 3, "stream": true, "json_schema": )" + schema + "}",
    };
    for (int i = 0; i < 3; i++) {
        const std::string path = i == 0 ? "/v1/chat/completions" : "/v1/completions";
        std::string text, reason;
        if (i == 2) {
            auto res = s.client().Post(path.c_str(), bodies[i], "application/json");
            ASSERT_TRUE(res);
            size_t at = 0;
            while ((at = res->body.find("data: {", at)) != std::string::npos) {
                const size_t end = res->body.find("\n\n", at);
                const Json ch = Json::parse(res->body.substr(at + 6, end - at - 6)).at("choices")[0];
                at = end;
                text += ch.at("text").as_string();
                if (!ch.at("finish_reason").is_null()) reason = ch.at("finish_reason").as_string();
            }
        } else {
            auto [status, j] = s.post(path, bodies[i]);
            ASSERT_EQ(status, 200) << j.dump();
            const Json& ch = j.at("choices")[0];
            text = i == 0 ? ch.at("message").at("content").as_string() : ch.at("text").as_string();
            reason = ch.at("finish_reason").as_string();
        }
        EXPECT_EQ(reason, "stop") << text;
        Json doc;
        ASSERT_NO_THROW(doc = Json::parse(text)) << text;
        EXPECT_TRUE(doc.at("name").is_string() && doc.at("name").as_string().size() <= 12) << text;
        EXPECT_TRUE(doc.at("ok").is_bool()) << text;
        for (const auto& [k, v] : doc.as_object()) EXPECT_TRUE(k == "name" || k == "tags" || k == "ok") << text;
    }
    auto [status, j] = s.post("/v1/completions", R"({"prompt": "Q", "max_tokens": 20, "temperature": 1, "n": 4,
                                                     "grammar": "root ::= (\"yes\" | \"no\") \"!\""})");
    ASSERT_EQ(status, 200) << j.dump();
    ASSERT_EQ(j.at("choices").size(), 4u);
    for (const Json& ch : j.at("choices").as_array()) {  // each choice starts the grammar afresh
        const std::string t = ch.at("text").as_string();
        EXPECT_TRUE(t == "yes!" || t == "no!") << t;
        EXPECT_EQ(ch.at("finish_reason").as_string(), "stop");
    }
    auto [os, oj] = s.post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 300,
                                                       "temperature": 0.8, "response_format": {"type": "json_object"}})");
    ASSERT_EQ(os, 200) << oj.dump();
    const Json& och = oj.at("choices")[0];
    if (och.at("finish_reason").as_string() == "stop") {
        EXPECT_TRUE(Json::parse(och.at("message").at("content").as_string()).is_object());
    }
}

TEST(Serve, ApiKey) {
    TestServer s(1, 1, "sesame");
    auto c = s.client();
    EXPECT_EQ(c.Get("/health")->status, 200);
    auto no_key = c.Get("/v1/models");
    EXPECT_EQ(no_key->status, 401);
    EXPECT_EQ(Json::parse(no_key->body).at("error").at("code").as_string(), "invalid_api_key");
    EXPECT_EQ(s.post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "wrong").first, 401);
    EXPECT_EQ(s.post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "sesame").first, 200);
    EXPECT_EQ(c.Get("/metrics")->status, 401);
}

// One slot, no queue: a long stream holds the slot, so a second request gets
// 503 at once; when the stream's client hangs up, its sequence stops and the
// slot serves the next request.
TEST(Serve, FullQueueIs503AndAClientThatLeavesFreesItsSlot) {
    TestServer s(1, 0, "", 4096);
    const int limit = 4000;
    const std::string body = R"({"prompt": "Once", "stream": true, "ignore_eos": true, "max_tokens": )" +
                             std::to_string(limit) + "}";
    int fd = connect_to(s.port);
    ASSERT_GE(fd, 0);
    send_post(fd, "/v1/completions", body);
    ASSERT_TRUE(read_until(fd, "data: "));
    auto [status, j] = s.post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})");
    EXPECT_EQ(status, 503) << j.dump();
    EXPECT_EQ(j.at("error").at("code").as_string(), "overloaded");
    close(fd);
    EXPECT_TRUE(eventually([&] { return s.metric("moestream_requests_total{outcome=\"cancelled\"}") == 1; }));
    EXPECT_LT(s.metric("moestream_generated_tokens_total"), limit);
    EXPECT_EQ(s.post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})").first, 200);

    // A client waiting for a whole (non-streamed) reply that hangs up is
    // noticed too, between two tokens.
    fd = connect_to(s.port);
    send_post(fd, "/v1/completions", R"({"prompt": "Once", "ignore_eos": true, "max_tokens": 4000})");
    ASSERT_TRUE(eventually([&] { return s.metric("moestream_slots_busy") == 1; }));
    close(fd);
    EXPECT_TRUE(eventually([&] { return s.metric("moestream_requests_total{outcome=\"cancelled\"}") == 2; }));
    EXPECT_TRUE(eventually([&] { return s.metric("moestream_slots_busy") == 0; }));
}

// The engine asks client_alive() before every forward pass: a client found
// gone stops its sequence before the next token.
TEST(Serve, ASequenceStopsWithinOneTokenOfItsClientLeaving) {
    TestServer s(1, 1);
    GenerationRequest r;
    r.chat = false;
    r.max_tokens = 100;
    r.ignore_eos = true;
    auto job = std::make_shared<Job>(r, s.engine->session().tokenize("Once upon"), 60.0);
    std::atomic<int> polls{0};
    job->client_alive = [&] { return ++polls <= 5; };  // 1 prefill + 4 tokens, then gone
    ASSERT_TRUE(s.engine->submit(job));
    std::vector<JobOutput> out;
    while (!job->wait(&out, 1.0)) {
    }
    EXPECT_EQ(job->error, "cancelled");
    EXPECT_EQ(job->usage.completion_tokens, 4);
}

}  // namespace
}  // namespace ms
