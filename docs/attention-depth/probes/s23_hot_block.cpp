// hot-cache timing of one block (twenty-third session): block_f16_tiled and mix_f16 for 8 heads,
// built against libms_ops.a: g++ -O2 -std=c++20 -Isrc s23_hot_block.cpp build/libms_ops.a build/libms_quant.a -lpthread
// usage: s23_hot_block 2|512 head_dim n_pos
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include <cstring>
#include "ops/attention_kernels.h"
#include "quant/half.h"
using namespace ms;
int main(int argc, char** argv) {
    int lvl = atoi(argv[1]); int dim = atoi(argv[2]); int64_t n = atoi(argv[3]); int nq = 8;
    const AttentionKernels& K = lvl == 512 ? kAttentionAvx512 : kAttentionAvx2;
    std::mt19937 rng(1); std::normal_distribution<float> d(0, 1);
    std::vector<uint16_t> k(n * dim), v(n * dim);
    for (auto& x : k) x = fp32_to_fp16(d(rng)); for (auto& x : v) x = fp32_to_fp16(d(rng));
    std::vector<float> q(nq * dim); for (auto& x : q) x = fp16_to_fp32(fp32_to_fp16(d(rng)));
    int64_t ss = (n + 15) / 16 * 16;
    std::vector<float> sc(nq * ss), mx(nq), sm(nq), out(nq * dim);
    double fl = 2.0 * 2 * nq * dim * n;
    for (int rep = 0; rep < 3; rep++) {
        int it = 2000;
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < it; i++) K.block_f16_tiled(q.data(), nq, k.data(), 0, dim, v.data(), dim, dim, n, 0.08f, sc.data(), ss, mx.data(), sm.data(), out.data());
        auto t1 = std::chrono::steady_clock::now();
        for (int i = 0; i < it; i++) K.mix_f16(sc.data(), ss, nq, v.data(), dim, dim, n, out.data());
        auto t2 = std::chrono::steady_clock::now();
        double a = std::chrono::duration<double>(t1 - t0).count() / it, b = std::chrono::duration<double>(t2 - t1).count() / it;
        printf("lvl %d dim %d n %ld: block %.2f us %.1f GFLOP/s | mix %.2f us %.1f GFLOP/s | rest(scores+exp) %.2f us %.1f GFLOP/s\n", lvl, dim, (long)n, a*1e6, fl/a*1e-9, b*1e6, fl/2/b*1e-9, (a-b)*1e6, fl/2/(a-b)*1e-9);
    }
}
