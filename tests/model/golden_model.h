// Running a model over the golden files in tests: the model with every
// expert in RAM, and the checks each architecture's golden test makes (prompt
// logits and greedy steps against the reference; batch size and thread count
// never changing a bit of the output; every SIMD level within the bound).
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "golden.h"
#include "gguf/gguf.h"
#include "model/deltanet.h"
#include "model/model.h"
#include "model/ram_experts.h"
#include "quant/cpu.h"

namespace ms::golden {

struct LoadedModel {
    GgufFile file;
    std::unique_ptr<Model> model;
    std::unique_ptr<RamExperts> experts;

    explicit LoadedModel(const std::string& path) : file(GgufFile::open(path)) {
        model = Model::open(file);
        model->load_resident(file);
        experts = std::make_unique<RamExperts>(file, model->expert_layers());
    }

    std::unique_ptr<ModelState> state(int threads, GgmlType kv = GgmlType::F32, int max_batch = 48) const {
        StateOptions o;
        o.n_ctx = 64;
        o.max_batch = max_batch;
        o.kv_type = kv;
        o.n_threads = threads;
        return model->new_state(o);
    }
};

// The prompt as one batch, then the 8 greedy steps fed one by one: every
// greedy token the reference does not call a near-tie must match, and the
// prompt rows and the greedy rows (all 8 together: a routing near-tie
// flipped in one step moves that row by a few percent) must be within
// `bound`. Returns the prompt logits.
inline std::vector<float> expect_matches_reference(const Case& g, double bound) {
    LoadedModel m(g.gguf);
    EXPECT_EQ(m.model->config().arch, g.meta.at("arch").as_string());
    EXPECT_EQ(m.model->config().n_vocab, g.n_vocab);
    const int64_t V = g.n_vocab;
    const int n = int(g.prompt.size());

    ThreadPool pool(2);
    auto st = m.state(2);
    std::vector<float> logits(size_t(n * V));
    m.model->forward(*st, *m.experts, pool, g.prompt.data(), n, logits.data(), true);
    const double err = rel_l2(logits.data(), g.logits.data(), logits.size());
    printf("%-22s prompt logits relative L2 %.3e (bound %.0e)\n", g.name.c_str(), err, bound);
    EXPECT_LE(err, bound);

    // greedy_tokens[0] is the argmax of the last prompt row.
    const float* last_ref = g.logits.data() + (n - 1) * V;
    if (top2_gap(last_ref, V) >= 1e-3f) {
        EXPECT_EQ(argmax(logits.data() + (n - 1) * V, V), g.greedy[0]);
    }
    std::vector<float> gen(g.gen.size());
    for (size_t s = 0; s < g.greedy.size(); s++) {
        float* row = gen.data() + s * size_t(V);
        m.model->forward(*st, *m.experts, pool, &g.greedy[s], 1, row, false);
        const float* ref = g.gen.data() + s * size_t(V);
        if (s + 1 < g.greedy.size() && top2_gap(ref, V) >= 1e-3f) {
            EXPECT_EQ(argmax(row, V), g.greedy[s + 1]) << "greedy step " << s;
        }
    }
    const double gen_err = rel_l2(gen.data(), g.gen.data(), gen.size());
    printf("%-22s greedy rows relative L2 %.3e\n", g.name.c_str(), gen_err);
    EXPECT_LE(gen_err, bound);
    return logits;
}

// The prompt evaluated token by token (a state sized for one token at a
// time), in chunks of 5 and layer by layer in pieces of 3, on 1 thread,
// gives the same bits as one batch on 2 threads: the store's bit-exactness
// tests build on this. Gated DeltaNet layers (model/deltanet.h) run a batch
// of kDeltaNetMinChunked or more tokens in chunks, the same function rounded
// differently: there the shorter pieces are held to 1e-5 of the batch and its
// greedy tokens, and the batch on 1 thread to its bits on 2. The cache is
// F16 unless kv says otherwise.
inline void expect_batch_and_threads_do_not_change_bits(const Case& g, GgmlType kv = GgmlType::F16) {
    LoadedModel m(g.gguf);
    const int64_t V = g.n_vocab;
    const int n = int(g.prompt.size());
    ThreadPool pool2(2), pool1(1);

    auto batch = m.state(2, kv);
    std::vector<float> all(size_t(n * V));
    m.model->forward(*batch, *m.experts, pool2, g.prompt.data(), n, all.data(), true);

    const bool chunked = m.file.has(m.model->config().arch + ".ssm.state_size") && n >= kDeltaNetMinChunked;
    auto expect_same = [&](const float* got, const float* want, int rows, const std::string& what) {
        if (!chunked) {
            ASSERT_EQ(0, std::memcmp(got, want, size_t(rows * V) * 4)) << what;
            return;
        }
        EXPECT_LE(rel_l2(got, want, size_t(rows * V)), 1e-5) << what;
        for (int r = 0; r < rows; r++) {
            if (top2_gap(want + r * V, V) >= 1e-3f) {
                EXPECT_EQ(argmax(got + r * V, V), argmax(want + r * V, V)) << what;
            }
        }
    };
    if (chunked) {
        auto one = m.state(1, kv);
        std::vector<float> rows(size_t(n * V));
        m.model->forward(*one, *m.experts, pool1, g.prompt.data(), n, rows.data(), true);
        ASSERT_EQ(0, std::memcmp(rows.data(), all.data(), rows.size() * 4)) << "one batch on 1 thread";
    }
    for (int chunk : {1, 5}) {
        SCOPED_TRACE("chunks of " + std::to_string(chunk));
        auto steps = m.state(1, kv, chunk);
        std::vector<float> rows(size_t(chunk * V));
        for (int t = 0; t < n; t += chunk) {
            const int k = std::min(chunk, n - t);
            m.model->forward(*steps, *m.experts, pool1, &g.prompt[size_t(t)], k, rows.data(), true);
            expect_same(rows.data(), all.data() + t * V, k, "position " + std::to_string(t));
        }
    }
    // A layer-major model takes the whole prompt in one call and runs each
    // layer over it in pieces of 3: the same bits again.
    if (m.model->layer_major()) {
        StateOptions o;
        o.n_ctx = 64;
        o.max_batch = 3;
        o.max_tokens = n;
        o.kv_type = kv;
        o.n_threads = 1;
        auto pieces = m.model->new_state(o);
        std::vector<float> rows(size_t(n * V));
        m.model->forward(*pieces, *m.experts, pool1, g.prompt.data(), n, rows.data(), true);
        expect_same(rows.data(), all.data(), n, "layer by layer in pieces of 3");
    }
}

// How many bytes the state grows by per position of context (F16 cache, one
// thread, batches of 16), measured between contexts of `from` and 2 x `from`.
inline double state_bytes_per_position(const LoadedModel& m, int64_t from = 4096) {
    auto bytes_at = [&](int64_t n_ctx) {
        StateOptions o;
        o.n_ctx = n_ctx;
        o.max_batch = 16;
        o.kv_type = GgmlType::F16;
        o.n_threads = 1;
        return m.model->new_state(o)->bytes();
    };
    return double(bytes_at(2 * from) - bytes_at(from)) / double(from);
}

// ---- every SIMD level ------------------------------------------------------
//
// The matmul kernels take the reference engine's float steps at every level
// (quant/dot_test), but attention's SIMD loops fuse products and use a
// polynomial exponential (docs/performance.md, "Decode attention at long
// contexts"), so the levels differ by rounding there, and a near-tied expert
// choice that rounding flips moves that token's hidden state by percents
// (tracker issue 12 item 6). The contract is the golden bound at every level,
// and exact bits across threads, batches and the store at one level.

// Restores the best level however the test ends.
struct LevelGuard {
    ~LevelGuard() { set_simd_level(best_simd_level()); }
};

// The levels this CPU runs.
inline std::vector<SimdLevel> simd_levels() {
    std::vector<SimdLevel> out;
    for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512})
        if (int(l) <= int(best_simd_level())) out.push_back(l);
    return out;
}

// The prompt as one batch at level l.
inline std::vector<float> prompt_logits_at(const LoadedModel& m, const std::vector<int32_t>& tokens, SimdLevel l) {
    set_simd_level(l);
    ThreadPool pool(2);
    auto st = m.state(2);
    std::vector<float> logits(tokens.size() * size_t(m.model->config().n_vocab));
    m.model->forward(*st, *m.experts, pool, tokens.data(), int(tokens.size()), logits.data(), true);
    return logits;
}

// At every level: prompt logits within `bound` of the reference.
inline void expect_every_level_within_bound(const Case& g, double bound) {
    LoadedModel m(g.gguf);
    LevelGuard guard;
    for (SimdLevel l : simd_levels()) {
        const std::vector<float> logits = prompt_logits_at(m, g.prompt, l);
        const double err = rel_l2(logits.data(), g.logits.data(), logits.size());
        printf("%-22s %-6s prompt logits relative L2 %.3e (bound %.0e)\n", g.name.c_str(), simd_level_name(l), err, bound);
        EXPECT_LE(err, bound) << simd_level_name(l);
    }
}

}  // namespace ms::golden
