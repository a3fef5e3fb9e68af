// Probe (twenty-fifth session, issue 38; argv: experts, 4|6 for down's type, h for
// MADV_HUGEPAGE): the expert step of one qwen3-30b-a3b decode layer (8 experts, gate/up
// Q4_K 2048->768, down Q6_K 768->2048), weights spread over a buffer far larger
// than the caches, timed as moe_forward structures it vs one kernel stream.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <sys/mman.h>
#include <cstdlib>
#include "ops/activation.h"
#include "ops/linear.h"
#include "ops/thread_pool.h"
#include "quant/dot.h"
#include "quant/types.h"
using namespace ms;
int main(int argc, char** argv) {
    const int64_t E = 2048, F = 768;
    const int n_exp = argc > 1 ? atoi(argv[1]) : 1024;
    GgmlType dt = argc > 2 && argv[2][0] == '4' ? GgmlType::Q4_K : GgmlType::Q6_K;
    const size_t gb = row_bytes(GgmlType::Q4_K, E) * F, db = row_bytes(dt, F) * E;
    const size_t per = 2 * gb + db;
    const bool huge = argc > 3 && argv[3][0] == 'h';
    uint8_t* Wp = (uint8_t*)mmap(nullptr, per * n_exp, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (huge) madvise(Wp, per * n_exp, MADV_HUGEPAGE);
    struct { uint8_t* p; uint8_t* data() { return p; } size_t n; size_t size() { return n; } uint8_t& operator[](size_t i) { return p[i]; } } W{Wp, per * n_exp};
    std::mt19937 rng(1);
    for (size_t i = 0; i < W.size(); i += 4) { uint32_t r = rng(); memcpy(&W[i], &r, 4); }
    // sane scales: set d/dmin of every Q4_K block to small f16; Q6_K's d is last 2 bytes of 210
    for (int e = 0; e < n_exp; e++) {
        uint8_t* p = W.data() + per * e;
        for (size_t b = 0; b < 2 * gb; b += 144) { p[b] = 0x00; p[b+1] = 0x20; p[b+2] = 0x00; p[b+3] = 0x20; }
        if (dt == GgmlType::Q6_K) for (size_t b = 0; b < db; b += 210) { p[2*gb+b+208] = 0; p[2*gb+b+209] = 0x20; }
        else for (size_t b = 0; b < db; b += 144) { p[2*gb+b] = 0; p[2*gb+b+1] = 0x20; p[2*gb+b+2] = 0; p[2*gb+b+3] = 0x20; }
    }
    ThreadPool pool(2);
    std::vector<float> x(E), G(8 * F), U(8 * F), D(8 * E);
    for (auto& v : x) v = float(rng() % 1000) / 1000.f - 0.5f;
    std::vector<uint8_t> ag(act_bytes(GgmlType::Q4_K, E)), ad(8 * act_bytes(dt, F));
    const size_t drow = act_bytes(dt, F);
    const int layers = 2000;
    std::vector<int> ids(layers * 8);
    for (auto& i : ids) i = int(rng() % n_exp);
    auto now = [] { return std::chrono::steady_clock::now(); };
    const Tensor gs{GgmlType::Q4_K, E, F, nullptr}, ds{dt, F, E, nullptr};
    // One layer's gate/up (with the activation when act) and down, as moe_forward splits them.
    auto gate_up = [&](const int* id, bool act) {
        pool.parallel_for(8 * F, [&](int64_t b, int64_t end) {
            for (int64_t i = b; i < end;) {
                const int j = int(i / F);
                const int64_t f0 = i - j * F, f1 = std::min(F, end - j * F);
                const uint8_t* p = W.data() + per * id[j];
                Tensor wg{GgmlType::Q4_K, E, F, p}, wu{GgmlType::Q4_K, E, F, p + gb};
                linear_rows(wg, ag.data(), 1, G.data() + j * F, f0, f1);
                linear_rows(wu, ag.data(), 1, U.data() + j * F, f0, f1);
                if (act) swiglu(G.data() + j * F + f0, U.data() + j * F + f0, f1 - f0, G.data() + j * F + f0);
                i = j * F + f1;
            }
        });
    };
    auto down = [&](const int* id) {
        pool.parallel_for(8 * E, [&](int64_t b, int64_t end) {
            for (int64_t i = b; i < end;) {
                const int j = int(i / E);
                const int64_t r0 = i - j * E, r1 = std::min(E, end - j * E);
                Tensor wd{dt, F, E, W.data() + per * id[j] + 2 * gb};
                linear_rows(wd, ad.data() + j * drow, 1, D.data() + j * E, r0, r1);
                i = j * E + r1;
            }
        });
    };
    auto timed = [&](const char* name, double bytes_per_layer, auto&& layer) {
        auto t0 = now();
        for (int l = 0; l < layers; l++) layer(&ids[l * 8]);
        const double s = std::chrono::duration<double>(now() - t0).count();
        printf("%s: %.1f us/layer, %.2f GB/s\n", name, s / layers * 1e6, bytes_per_layer * layers / s / 1e9);
    };
    for (int rep = 0; rep < 3; rep++) {
        timed("moe structure", per * 8.0, [&](const int* id) {
            convert_acts(pool, gs, x.data(), 1, ag.data());
            gate_up(id, true);
            convert_acts(pool, ds, G.data(), 8, ad.data());
            down(id);
        });
        timed("gate/up only", gb * 16.0, [&](const int* id) { gate_up(id, false); });
        timed("down only", db * 8.0, [&](const int* id) { down(id); });
    }
}
