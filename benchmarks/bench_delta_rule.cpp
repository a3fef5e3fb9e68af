// The gated delta rule (ops/delta_rule.h) of one Qwen3.5 value head (head_k =
// head_v = 128) over 64 tokens: token-by-token steps and one chunk, per SIMD
// level, against the four-pass loop deltanet.cpp ran before (decay, S k,
// update, S q, one row at a time with scalar sums). Items are tokens.
//
//   build/bench_delta_rule --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/delta_rule.h"
#include "quant/cpu.h"

namespace ms {
namespace {

constexpr int kHead = 128, kTokens = 64;

struct Inputs {
    std::vector<float> S, q, k, v, beta, log_decay, out;
    Inputs() : S(kHead * kHead, 0.01f), out(kTokens * kHead) {
        std::mt19937 rng(1);
        std::normal_distribution<float> d(0.0f, 1.0f);
        for (std::vector<float>* x : {&q, &k, &v}) {
            x->resize(kTokens * kHead);
            for (float& f : *x) f = d(rng) / std::sqrt(float(kHead));
        }
        for (int t = 0; t < kTokens; t++) {
            beta.push_back(0.5f);
            log_decay.push_back(-0.05f);
        }
    }
};

// deltanet.cpp's recurrence before the chunked form (S as head_v rows).
void four_passes(Inputs& in, float scale) {
    for (int t = 0; t < kTokens; t++) {
        const float* q = &in.q[t * kHead];
        const float* k = &in.k[t * kHead];
        const float decay = std::exp(in.log_decay[t]);
        for (int j = 0; j < kHead; j++) {
            float* sj = &in.S[j * kHead];
            for (int i = 0; i < kHead; i++) sj[i] *= decay;
            float sk = 0;
            for (int i = 0; i < kHead; i++) sk += sj[i] * k[i];
            const float d = in.beta[t] * (in.v[t * kHead + j] - sk);
            for (int i = 0; i < kHead; i++) sj[i] += k[i] * d;
            float sq = 0;
            for (int i = 0; i < kHead; i++) sq += sj[i] * q[i];
            in.out[t * kHead + j] = sq * scale;
        }
    }
}

void BM_DeltaRule(benchmark::State& state) {
    const int mode = int(state.range(0));  // 0 before, 1 steps, 2 chunk
    const SimdLevel level = SimdLevel(state.range(1));
    if (level > best_simd_level()) {
        state.SkipWithError("level not on this CPU");
        return;
    }
    set_simd_level(level);
    Inputs in;
    std::vector<float> scratch(delta_rule_chunk_scratch_floats(kHead, kHead));
    const float scale = 1.0f / std::sqrt(float(kHead));
    for (auto _ : state) {
        if (mode == 0) {
            four_passes(in, scale);
        } else if (mode == 1) {
            for (int t = 0; t < kTokens; t++) {
                delta_rule_step(in.S.data(), kHead, kHead, &in.q[t * kHead], &in.k[t * kHead], &in.v[t * kHead],
                                in.beta[t], std::exp(in.log_decay[t]), scale, &in.out[t * kHead]);
            }
        } else {
            delta_rule_chunk(in.S.data(), kHead, kHead, in.q.data(), in.k.data(), kHead, in.v.data(), kHead,
                             in.beta.data(), in.log_decay.data(), kTokens, scale, in.out.data(), kHead,
                             scratch.data());
        }
        benchmark::DoNotOptimize(in.out.data());
    }
    state.SetItemsProcessed(int64_t(state.iterations()) * kTokens);
    state.SetLabel(std::string(mode == 0 ? "before" : mode == 1 ? "steps" : "chunk") + " " + simd_level_name(level));
    set_simd_level(best_simd_level());
}
BENCHMARK(BM_DeltaRule)->Args({0, 0})->Args({1, 0})->Args({1, 1})->Args({1, 2})->Args({2, 0})->Args({2, 1})->Args({2, 2});

}  // namespace
}  // namespace ms

BENCHMARK_MAIN();
