// Certain prefetch (deepseek4's hash-routed layers, whose experts follow
// from the token ids): with the store's hints on, the hash layers' experts
// are read ahead instead of on demand, the hints are never wrong, and the
// output stays bit-identical to everything in RAM.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "../model/golden.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/ram_experts.h"
#include "store/store.h"
#include "../golden_required.h"

namespace ms {
namespace {

// Prompt logits, then the logits of `steps` greedy steps.
std::vector<float> generate(const Model& model, ExpertSource& experts, const std::vector<int32_t>& prompt,
                            int steps) {
    StateOptions o;
    o.n_ctx = 128;
    o.max_batch = 8;
    o.kv_type = GgmlType::F32;
    o.n_threads = 1;
    auto st = model.new_state(o);
    ThreadPool pool(1);
    const int64_t V = model.config().n_vocab;
    const int n = int(prompt.size());
    std::vector<float> out(size_t((n + steps) * V));
    for (int t = 0; t < n; t += 8) {
        model.forward(*st, experts, pool, &prompt[size_t(t)], std::min(8, n - t), out.data() + t * V, true);
    }
    for (int s = 0; s < steps; s++) {
        const int32_t tok = golden::argmax(out.data() + (n - 1 + s) * V, V);
        model.forward(*st, experts, pool, &tok, 1, out.data() + (n + s) * V, false);
    }
    return out;
}

TEST(CertainPrefetch, HashLayersReadAheadAndNeverWrong) {
    const golden::Case g = golden::load("deepseek4-Q8_0");
    GgufFile f = GgufFile::open(g.gguf);
    std::unique_ptr<Model> model = Model::open(f);
    model->load_resident(f);
    const std::vector<ExpertLayer>& layers = model->expert_layers();
    RamExperts ram(f, layers);
    const int steps = 64;
    const std::vector<float> want = generate(*model, ram, g.prompt, steps);
    const int k = model->config().n_expert_used;
    for (int slots : {2 * k, 4 * k, 6 * k}) {
        uint64_t hash_misses[2] = {};
        for (const char* prefetch : {"off", "auto"}) {
            SCOPED_TRACE(std::to_string(slots) + " slots, prefetch " + prefetch);
            StoreOptions opt;
            opt.io = "pread";
            opt.prefetch = prefetch;
            StoreCounters c;
            Store store(ExpertLayout::gguf(f, layers), slots, opt, &c);
            const std::vector<float> got = generate(*model, store, g.prompt, steps);
            EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4));
            const bool on = std::string(prefetch) == "auto";
            hash_misses[on] = c.misses[0] + c.misses[1];
            printf("%2d slots, prefetch %-4s: misses in hash layers %3llu, layer 2 %3llu; hints issued %llu, used "
                   "%llu, evicted unused %llu\n",
                   slots, prefetch, (unsigned long long)(c.misses[0] + c.misses[1]), (unsigned long long)c.misses[2],
                   (unsigned long long)c.prefetch_issued, (unsigned long long)c.prefetch_used,
                   (unsigned long long)c.prefetch_unused_evicted);
            if (on) {
                EXPECT_GT(c.prefetch_issued, 0u);
                EXPECT_EQ(c.prefetch_used + c.prefetch_unused_evicted, c.prefetch_issued);
            }
        }
        EXPECT_LT(hash_misses[1], hash_misses[0]);
    }
}

}  // namespace
}  // namespace ms
