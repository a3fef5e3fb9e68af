// Timing of the prompt attention kernels alone (twenty-seventh session):
// gpu::attention_tiled (grouped-query, on tensor cores since this session)
// at qwen3-30b-a3b's and gpt-oss-120b's shapes, and attention_tiled_shared
// (MLA) at DeepSeek V3's for comparison with run23's figures, and the
// router's float32 product (mma_matmul_f32 against the batch kernel). Built beside
// the bundle: g++ -std=c++20 -O2 -Isrc docs/gpu/run27/kbench.cpp
// build/libms_gpu.a build/libms_quant.a -L<cuda>/lib -lcudart_static -ldl -lrt -lpthread
#include <cstdio>
#include <random>
#include <vector>
#include "gpu/gpu.h"
#include "../kbench_time.h"
using namespace ms;
static void* dev(const std::vector<float>& v) {
    void* p = gpu::alloc(v.size() * 4);
    gpu::copy_to_device(p, v.data(), v.size() * 4, nullptr);
    return p;
}
static std::vector<float> rnd(size_t n, int seed) {
    std::mt19937 r(seed);
    std::normal_distribution<float> d;
    std::vector<float> v(n);
    for (auto& x : v) x = d(r);
    return v;
}
// n tokens after pos0 cached positions; useful FLOPs: q.k and p.v over hd,
// each position a token sees (a window's only).
static void gqa(const char* name, int n_head, int n_kv, int hd, int pos0, int n, int window, bool sinks) {
    const int rows = pos0 + n;
    const size_t Q = size_t(n_head) * hd, KV = size_t(n_kv) * hd;
    float* q = (float*)dev(rnd(size_t(n) * Q, 1));
    float* k = (float*)dev(rnd(size_t(rows) * KV, 2));
    float* v = (float*)dev(rnd(size_t(rows) * KV, 3));
    float* sk = (float*)dev(rnd(size_t(n_head), 4));
    float* out = (float*)gpu::alloc(size_t(n) * Q * 4);
    void* planes = gpu::alloc(gpu::attention_tiled_scratch_bytes(rows, n_kv, hd));
    std::vector<int32_t> hp = {pos0};
    int32_t* pos = (int32_t*)gpu::alloc(4);
    gpu::copy_to_device(pos, hp.data(), 4, nullptr);
    gpu::sync(nullptr);
    const double us = time_us(
        [&](gpu::Stream s) {
            gpu::attention_tiled(q, k, v, pos, n_head, n_kv, hd, 0.088f, out, s, nullptr, n, planes, window,
                                 sinks ? sk : nullptr);
        },
        10);
    double flop = 0;
    for (int t = 0; t < n; t++) {
        const int p = pos0 + t, seen = window > 0 ? std::min(p + 1, window) : p + 1;
        flop += double(n_head) * seen * hd * 4;
    }
    printf("attention_tiled %-14s %d tokens after %5d, %d/%d heads of %d, window %d: %9.1f us, %6.1f TFLOP/s, %.2f us a token\n",
           name, n, pos0, n_head, n_kv, hd, window, us, flop / us * 1e-6, us / n);
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)sk, (void*)out, planes, (void*)pos}) gpu::release(p);
}
// A 128-expert router's float32 product over a pass of n rows of 2,048:
// the batch kernel (gpu::matmul, a warp's whole rows) against
// mma_matmul_f32 (split f16 on tensor cores).
static void router(int n) {
    const int X = 128, E = 2048;
    float* w = (float*)dev(rnd(size_t(X) * E, 8));
    float* x = (float*)dev(rnd(size_t(n) * E, 9));
    float* y = (float*)gpu::alloc(size_t(n) * X * 4);
    gpu::sync(nullptr);
    const double old_us = time_us([&](gpu::Stream s) { gpu::matmul(GgmlType::F32, w, X, E, n, {x}, y, s, false, 0); }, 10);
    const double new_us = time_us([&](gpu::Stream s) { gpu::mma_matmul_f32(w, X, E, n, x, y, s, false); }, 10);
    const double flop = 2.0 * n * X * E;
    printf("router %dx%d over %d rows: batch kernel %8.1f us (%.2f TFLOP/s), mma_matmul_f32 %8.1f us (%.2f TFLOP/s)\n", X,
           E, n, old_us, flop / old_us * 1e-6, new_us, flop / new_us * 1e-6);
    for (void* p : {(void*)w, (void*)x, (void*)y}) gpu::release(p);
}
static void mla(int pos0) {
    const int n = 512, MH = 128, R = 576, L = 512, rows = pos0 + n;
    float* q = (float*)dev(rnd(size_t(n) * MH * R, 6));
    float* cache = (float*)dev(rnd(size_t(rows) * R, 7));
    float* out = (float*)gpu::alloc(size_t(n) * MH * L * 4);
    std::vector<int32_t> hp = {pos0};
    int32_t* pos = (int32_t*)gpu::alloc(4);
    gpu::copy_to_device(pos, hp.data(), 4, nullptr);
    gpu::sync(nullptr);
    const double us =
        time_us([&](gpu::Stream s) { gpu::attention_tiled_shared(q, cache, pos, MH, R, L, 0.07f, out, s, n); }, 10);
    double flop = 0;
    for (int t = 0; t < n; t++) flop += double(MH) * (pos0 + t + 1) * (R + L) * 2;
    printf("attention_tiled_shared: %d tokens after %d, 128 heads 576/512: %9.1f us, %.1f TFLOP/s\n", n, pos0, us,
           flop / us * 1e-6);
    for (void* p : {(void*)q, (void*)cache, (void*)out, (void*)pos}) gpu::release(p);
}
int main() {
    std::string why;
    if (!gpu::available(&why)) {
        printf("no gpu: %s\n", why.c_str());
        return 1;
    }
    gqa("qwen3-30b-a3b", 32, 4, 128, 0, 512, 0, false);
    gqa("qwen3-30b-a3b", 32, 4, 128, 3584, 512, 0, false);
    gqa("qwen3-30b-a3b", 32, 4, 128, 0, 4096, 0, false);
    gqa("gpt-oss-120b", 64, 8, 64, 0, 512, 0, true);
    gqa("gpt-oss-120b", 64, 8, 64, 0, 4096, 0, true);
    gqa("gpt-oss-120b", 64, 8, 64, 0, 4096, 128, true);
    gqa("qwen3-next", 16, 2, 256, 0, 4096, 0, false);
    router(512);
    router(2048);
    router(4096);
    mla(0);
    mla(3584);
    return 0;
}
