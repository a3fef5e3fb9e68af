// One decode step's attention for qwen3 shape (4 KV heads x 8 q heads, dim 128) from DRAM:
// 48 layers' planes rotated; work items (head, block of 256) split over T threads.
// Built against a copy of src/ops: g++ -std=c++20 -O3 -mf16c -Isrc s26_attention_dram.cpp src/ops/thread_pool.cpp -pthread
#include "ops/attention_avx512.cpp"
#include <chrono>
#include <cstdio>
#include <vector>
#include <thread>
#include <atomic>
#include <random>
#include <sys/mman.h>
#include <cstring>
#include "ops/thread_pool.h"
using namespace ms;
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
    int T = argc > 1 ? atoi(argv[1]) : 2; int dim = argc > 2 ? atoi(argv[2]) : 128; int HK = dim == 512 ? 2 : 4;
    int64_t ctx = argc > 3 ? atoll(argv[3]) : 4096; int L = argc > 4 ? atoi(argv[4]) : 48; int H = 8; int64_t blk = argc > 6 ? atoll(argv[6]) : 256; int mode = argc > 5 ? atoi(argv[5]) : 0;
    size_t plane = ctx * dim; size_t per_layer = 2 * HK * plane;
    uint16_t* kv = (uint16_t*)aligned_alloc(2 << 20, per_layer * L * 2); int huge = argc > 7 ? atoi(argv[7]) : 1; madvise(kv, per_layer * L * 2, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    for (size_t i = 0; i < per_layer * L; i++) kv[i] = 0x3c00 ^ (i & 0x3ff);
    std::vector<float> q(HK * H * dim, 0.01f);
    { FILE* f = fopen("/proc/self/smaps_rollup", "r"); char line[256]; while (fgets(line, sizeof line, f)) if (strstr(line, "AnonHugePages")) fprintf(stderr, "%s", line); fclose(f); }
    int64_t nb = ctx / blk;
    double fl = 4.0 * HK * H * ctx * dim;
    ThreadPool pool(T); std::vector<std::vector<float>> SC(T, std::vector<float>((blk+16)*8)), OUT(T, std::vector<float>(8*512));
    for (int pass = 0; pass < 5; pass++) {
      int layer = 0; double best = 1e9, sum = 0; int steps = 96;
      for (int st = 0; st < steps; st++) {
        layer = (layer + 1) % L;
        uint16_t* base = kv + layer * per_layer;
        double t0 = now();
        
        pool.parallel_for(HK * nb, [&](int64_t b0, int64_t b1, int t) { auto& sc = SC[t]; auto& out = OUT[t];
            int64_t ss = blk + 16; float mx[8], sm[8];
            for (int64_t i = b0; i < b1; i++) {
                int g = i / nb, b = i % nb;
                const uint16_t* K = base + g * plane + b * blk * dim;
                const uint16_t* V = base + (HK + g) * plane + b * blk * dim;
                if (mode == 0) block_partial_tiled(q.data() + g * H * dim, H, K, 0, dim, V, dim, dim, blk, 0.1f, sc.data(), ss, mx, sm, out.data());
                else if (mode == 1) scores_group_tiled(q.data() + g * H * dim, H, K, 0, dim, blk, sc.data(), ss, nullptr, 0, 0);
                else mix_group<uint16_t>(sc.data(), ss, H, V, dim, dim, blk, out.data());
            }
        });
        double dt = now() - t0; sum += dt; if (dt < best) best = dt;
      }
      printf("T=%d dim %d ctx %ld: mean %.1f us, best %.1f us; %.1f GF/s, %.1f GB/s (mean)\n", T, dim, ctx, sum / steps * 1e6, best * 1e6, fl * steps / sum / 1e9 / (mode ? 2 : 1), per_layer * 2.0 / (mode ? 2 : 1) * steps / sum / 1e9);
    }
}
