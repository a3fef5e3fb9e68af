// Bit-exact streaming: prompt logits, greedy tokens and every greedy step's
// logits from the forward pass over the Store are identical, bit for bit, to
// the same pass over RamExperts (everything in RAM), for every I/O engine x
// layout x cache size (down to one token's experts) x thread count (LRU under
// two engines, WLFU under the other two: the policy only chooses victims) on two
// qwen3moe and two gemma4 models, and at the smallest cache for every file of
// every other family the forward pass runs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "../model/golden.h"
#include "gguf/gguf.h"
#include "json/json.h"
#include "model/model.h"
#include "model/ram_experts.h"
#include "store/store.h"
#include "test_util.h"
#include "../golden_required.h"

namespace ms {
namespace {

struct Outputs {
    std::vector<float> logits;  // prompt rows, then one row per greedy step
    std::vector<int32_t> tokens;
};

std::vector<int32_t> prompt_of(const std::string& name) {
    Json j = Json::parse_file(std::string(MOESTREAM_GOLDEN_DIR) + "/models/" + name + ".json");
    std::vector<int32_t> out;
    for (const Json& v : j.at("prompt_tokens").as_array()) out.push_back(int32_t(v.as_int()));
    return out;
}

Outputs generate(const Model& model, ExpertSource& experts, int threads, const std::vector<int32_t>& prompt,
                 int steps) {
    StateOptions o;
    o.n_ctx = 128;
    o.max_batch = int(prompt.size());
    o.kv_type = GgmlType::F32;
    o.n_threads = threads;
    auto st = model.new_state(o);
    ThreadPool pool(threads);
    const int64_t V = model.config().n_vocab;
    const int n = int(prompt.size());
    Outputs out;
    out.logits.resize(size_t((n + steps) * V));
    model.forward(*st, experts, pool, prompt.data(), n, out.logits.data(), true);
    for (int s = 0; s < steps; s++) {
        const float* last = out.logits.data() + (n - 1 + s) * V;
        int32_t tok = 0;
        for (int64_t i = 1; i < V; i++)
            if (last[i] > last[tok]) tok = int32_t(i);
        out.tokens.push_back(tok);
        model.forward(*st, experts, pool, &tok, 1, out.logits.data() + (n + s) * V, false);
    }
    return out;
}

TEST(Streaming, BitExactAcrossEnginesLayoutsCacheSizesAndThreads) {
    const bool small = getenv("MOESTREAM_SANITIZED") != nullptr;
    for (const char* name : {"qwen3moe-Q4_K_M", "qwen3moe-Q8_0", "gemma4-Q8_0", "gemma4-ple-Q8_0"}) {
        test::TempDir dir;
        GgufFile f = GgufFile::open(test::golden_model(name));
        std::unique_ptr<Model> model = Model::open(f);
        model->load_resident(f);
        const std::vector<ExpertLayer>& layers = model->expert_layers();
        std::string sidecar = dir.file("m.experts");
        write_sidecar(f, find_expert_layers(f), sidecar);
        std::vector<int32_t> prompt = prompt_of(name);
        RamExperts ram(f, layers);
        const Outputs want = generate(*model, ram, 1, prompt, 8);

        const int k = model->config().n_expert_used;
        int total = 0;
        for (const ExpertLayer& L : layers) total += L.n_expert;
        for (const char* layout : {"gguf", "packed"})
            for (const char* engine : {"uring", "pread", "buffered", "mmap"})
                for (int slots : {k, k + 3, total})
                    for (int threads : {1, 2}) {
                        if (small && (threads == 2 || slots == k + 3)) continue;
                        SCOPED_TRACE(std::string(name) + " " + layout + " " + engine + " slots " +
                                     std::to_string(slots) + " threads " + std::to_string(threads));
                        ExpertLayout lay = std::string(layout) == "packed" ? ExpertLayout::packed(f, layers, sidecar)
                                                                           : ExpertLayout::gguf(f, layers);
                        StoreOptions opt;
                        opt.io = engine;
                        opt.io_options = {4, 2, 2};
                        const std::string e = engine;
                        opt.cache_policy = e == "pread" || e == "mmap" ? "wlfu" : "lru";
                        StoreCounters c;
                        Store store(std::move(lay), slots, opt, &c);
                        Outputs got = generate(*model, store, threads, prompt, 8);
                        EXPECT_EQ(got.tokens, want.tokens);
                        ASSERT_EQ(got.logits.size(), want.logits.size());
                        EXPECT_EQ(memcmp(got.logits.data(), want.logits.data(), want.logits.size() * 4), 0);
                        EXPECT_GT(c.total_misses(), 0u);
                        if (slots == k) {
                            EXPECT_GT(c.evictions, 0u);
                        }
                    }
    }
}

// Every other runnable family (its own attention, routing and expert
// variants) streams bit-identically too, with the smallest cache (exactly one
// token's experts) and the engine whose reads complete out of order.
TEST(Streaming, EveryFamilyBitExactAtTopKSlots) {
    for (const std::string& family : golden::runnable_families()) {
        if (family == "qwen3moe" || family == "gemma4") continue;  // above
        for (const std::string& name : golden::family(family)) {
            test::TempDir dir;
            GgufFile f = GgufFile::open(test::golden_model(name));
            std::unique_ptr<Model> model = Model::open(f);
            model->load_resident(f);
            const std::vector<ExpertLayer>& layers = model->expert_layers();
            const std::string sidecar = dir.file("m.experts");
            write_sidecar(f, find_expert_layers(f), sidecar);
            const std::vector<int32_t> prompt = prompt_of(name);
            RamExperts ram(f, layers);
            const Outputs want = generate(*model, ram, 1, prompt, 8);
            const int k = model->config().n_expert_used;
            for (const char* layout : {"gguf", "packed"})
                for (int threads : {1, 2}) {
                    SCOPED_TRACE(name + " " + layout + " threads " + std::to_string(threads));
                    ExpertLayout lay = std::string(layout) == "packed" ? ExpertLayout::packed(f, layers, sidecar)
                                                                       : ExpertLayout::gguf(f, layers);
                    StoreOptions opt;
                    opt.io = "pread";
                    opt.io_options = {4, 2, 2};
                    StoreCounters c;
                    Store store(std::move(lay), k, opt, &c);
                    const Outputs got = generate(*model, store, threads, prompt, 8);
                    EXPECT_EQ(got.tokens, want.tokens);
                    ASSERT_EQ(got.logits.size(), want.logits.size());
                    EXPECT_EQ(memcmp(got.logits.data(), want.logits.data(), want.logits.size() * 4), 0);
                    EXPECT_GT(c.evictions, 0u);
                }
        }
    }
}

}  // namespace
}  // namespace ms
