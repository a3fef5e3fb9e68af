// One layer's decode attention (ops/attention.h) at the qwen3-30b-a3b shape,
// 48 layers' F16 caches rotated so every call reads DRAM (or 1 layer: L3),
// with the KV heads in planes (as the models keep them) or side by side.
//   g++ -O2 -std=c++20 -Isrc attention_layer.cpp build/libms_ops.a build/libms_quant.a -lpthread
//   ./a.out PLANES(0|1) N_CTX THREADS LAYERS [g: gemma4-26b-a4b full layers]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <random>
#include <vector>
#include <algorithm>
#include "ops/attention.h"
#include "ops/buffer.h"
#include "quant/cpu.h"
using namespace ms;
int main(int argc, char** argv) {
    const bool planes = argc > 1 && argv[1][0] == '1';
    const int64_t n_ctx = argc > 2 ? atoi(argv[2]) : 4096;
    const int threads = argc > 3 ? atoi(argv[3]) : 2;
    const bool gemma = argc > 5 && argv[5][0] == 'g';  // gemma4-26b-a4b's full layers: 16 q / 2 KV heads of 512, scale 1
    const AttentionShape shape = gemma ? AttentionShape{16, 2, 512, 512, 1.0f} : AttentionShape{32, 4, 128, 128, 0.0883883f};
    const int64_t kw = int64_t(shape.n_head_kv) * shape.head_dim;
    const size_t bytes = size_t(n_ctx * kv_row_bytes(GgmlType::F16, kw));
    const size_t al = size_t(2) << 20, rb = (bytes + al - 1) / al * al;
    std::vector<uint8_t*> kc, vc;
    std::mt19937 rng(1);
    const int nl = argc > 4 ? atoi(argv[4]) : 48;
    for (int l = 0; l < nl; l++) {
        for (auto* vec : {&kc, &vc}) {
            uint8_t* p = static_cast<uint8_t*>(std::aligned_alloc(al, rb));
            uint16_t* h = reinterpret_cast<uint16_t*>(p);
            for (size_t i = 0; i < bytes / 2; i++) h[i] = uint16_t(0x3000 | (rng() & 0x0fff));
            vec->push_back(p);
        }
    }
    std::vector<float> q(size_t(shape.n_head * shape.head_dim)), out(size_t(shape.n_head * shape.head_dim_v));
    for (auto& x : q) x = float(rng() % 1000) / 1000.0f - 0.5f;
    ThreadPool pool(threads);
    AlignedBuffer scratch(attention_scratch_floats(shape, n_ctx, threads) * 4);
    std::vector<double> t;
    for (int it = 0; it < 480; it++) {
        const int l = it % nl;
        const KvLayer kv{GgmlType::F16, kw, kw, kc[l], vc[l], 0, 0, planes ? n_ctx : 0, shape.n_head_kv};
        auto t0 = std::chrono::steady_clock::now();
        attention(pool, shape, kv, q.data(), 1, n_ctx - 1, n_ctx, scratch.f32(), out.data());
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    std::printf("planes %d ctx %ld threads %d: median %.3f ms/layer, %.1f GB/s\n", planes, long(n_ctx), threads, t[t.size() / 2] * 1e3,
                2.0 * bytes / t[t.size() / 2] / 1e9);
}
