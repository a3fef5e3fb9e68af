// Throwaway timing of the MLA attention kernels (twenty-third session):
// run22's indexer and decode-attention timings, plus the prompt kernel
// attention_tiled_shared (DeepSeek V3's 128 heads, rows of 576, values 512).
#include <cstdio>
#include <random>
#include <vector>
#include "gpu/gpu.h"
using namespace ms;
static void* dev(const std::vector<float>& v) { void* p = gpu::alloc(v.size() * 4); gpu::copy_to_device(p, v.data(), v.size() * 4, nullptr); return p; }
static std::vector<float> rnd(size_t n, int seed) { std::mt19937 r(seed); std::normal_distribution<float> d; std::vector<float> v(n); for (auto& x : v) x = d(r); return v; }
template <class F> double time_us(F f, int reps = 50) {
    gpu::Stream s = gpu::new_stream(); gpu::Event a = gpu::new_event(), b = gpu::new_event();
    f(s); gpu::sync(s);
    gpu::record(a, s); for (int i = 0; i < reps; i++) f(s); gpu::record(b, s); gpu::sync(s);
    return gpu::elapsed_ms(a, b) * 1000.0 / reps;
}
int main() {
    std::string why; if (!gpu::available(&why)) { printf("no gpu: %s\n", why.c_str()); return 1; }
    const int H = 32, D = 128, TOPK = 2048, MH = 64, R = 576;
    for (int n_pos : {4096, 16384}) {
        const int max_pos = n_pos + 64;
        float* q = (float*)dev(rnd(size_t(64) * H * D, 1)); float* w = (float*)dev(rnd(size_t(64) * H, 2));
        float* keys = (float*)dev(rnd(size_t(max_pos) * D, 3));
        std::vector<int32_t> hp = {n_pos - 1}; int32_t* pos = (int32_t*)gpu::alloc(4); gpu::copy_to_device(pos, hp.data(), 4, nullptr);
        float* scores = (float*)gpu::alloc(size_t(64) * max_pos * 4);
        int32_t* chosen = (int32_t*)gpu::alloc(size_t(64) * TOPK * 4); int32_t* count = (int32_t*)gpu::alloc(64 * 4);
        gpu::sync(nullptr);
        const double sel1 = time_us([&](gpu::Stream s) { gpu::indexer_select(q, w, keys, pos, H, D, TOPK, max_pos, scores, chosen, count, s, 1); });
        const double sel_all = time_us([&](gpu::Stream s) { gpu::indexer_select(q, w, keys, pos, H, D, max_pos, max_pos, scores, chosen, count, s, 1); });
        const double sel64 = time_us([&](gpu::Stream s) { gpu::indexer_select(q, w, keys, pos, H, D, TOPK, max_pos, scores, chosen, count, s, 64); }, 10);
        // MLA attention: 64 heads, rows of 576, over the chosen positions and over all.
        float* mq = (float*)dev(rnd(size_t(64) * MH * R, 4)); float* cache = (float*)dev(rnd(size_t(max_pos) * R, 5));
        float* out = (float*)gpu::alloc(size_t(64) * MH * R * 4); float* scratch = (float*)gpu::alloc(64 * gpu::attention_scratch_bytes(MH, R));
        gpu::prepare_attention(max_pos, R);
        gpu::indexer_select(q, w, keys, pos, H, D, TOPK, max_pos, scores, chosen, count, nullptr, 1); gpu::sync(nullptr);
        const double att_ch = time_us([&](gpu::Stream s) { gpu::attention(mq, cache, cache, pos, MH, 1, R, 0.07f, scratch, out, s, nullptr, {}, 1, 0, nullptr, 0, nullptr, {chosen, count, TOPK}); });
        const double att_all = time_us([&](gpu::Stream s) { gpu::attention(mq, cache, cache, pos, MH, 1, R, 0.07f, scratch, out, s); });
        printf("n_pos %6d: indexer_select 1 row top %d %8.1f us, top-all (scores only) %8.1f us, 64 rows %9.1f us; MLA attention 64x576 over %d chosen %7.1f us, over all %7.1f us\n",
               n_pos, TOPK, sel1, sel_all, sel64, TOPK, att_ch, att_all);
    }
    // Prompt attention: 512 tokens after pos0 cached rows, 128 heads.
    for (int pos0 : {0, 3584}) {
        const int n = 512, MH = 128, R = 576, L = 512, rows = pos0 + n;
        float* q = (float*)dev(rnd(size_t(n) * MH * R, 6)); float* cache = (float*)dev(rnd(size_t(rows) * R, 7));
        float* out = (float*)gpu::alloc(size_t(n) * MH * L * 4);
        std::vector<int32_t> hp = {pos0}; int32_t* pos = (int32_t*)gpu::alloc(4); gpu::copy_to_device(pos, hp.data(), 4, nullptr);
        gpu::sync(nullptr);
        const double us = time_us([&](gpu::Stream s) { gpu::attention_tiled_shared(q, cache, pos, MH, R, L, 0.07f, out, s, n); }, 10);
        double flop = 0;
        for (int t = 0; t < n; t++) flop += double(MH) * (pos0 + t + 1) * (R + L) * 2;
        printf("attention_tiled_shared: %d tokens after %d, 128 heads 576/512: %9.1f us, %.1f TFLOP/s\n", n, pos0, us,
               flop / us * 1e-6);
    }
    return 0;
}
