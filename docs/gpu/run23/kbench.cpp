// Throwaway timing of the MLA prompt kernel (twenty-third session), built
// from branch gpu-mla-prefill (attention_tiled_shared is not on main).
// Call 1's kbench binary was run22/idxbench.cpp's main() (the indexer and
// decode-attention lines of c1/kbench.txt) followed by prompt_kernel() below;
// only the new part is kept here.
#include <cstdio>
#include <random>
#include <vector>
#include "gpu/gpu.h"
using namespace ms;
static void* dev(const std::vector<float>& v) { void* p = gpu::alloc(v.size() * 4); gpu::copy_to_device(p, v.data(), v.size() * 4, nullptr); return p; }
static std::vector<float> rnd(size_t n, int seed) { std::mt19937 r(seed); std::normal_distribution<float> d; std::vector<float> v(n); for (auto& x : v) x = d(r); return v; }
template <class F> double time_us(F f, int reps) {
    gpu::Stream s = gpu::new_stream(); gpu::Event a = gpu::new_event(), b = gpu::new_event();
    f(s); gpu::sync(s);
    gpu::record(a, s); for (int i = 0; i < reps; i++) f(s); gpu::record(b, s); gpu::sync(s);
    return gpu::elapsed_ms(a, b) * 1000.0 / reps;
}
// 512 tokens after pos0 cached rows, DeepSeek V3's 128 heads, rows of 576, values 512.
void prompt_kernel() {
    for (int pos0 : {0, 3584}) {
        const int n = 512, MH = 128, R = 576, L = 512, rows = pos0 + n;
        float* q = (float*)dev(rnd(size_t(n) * MH * R, 6)); float* cache = (float*)dev(rnd(size_t(rows) * R, 7));
        float* out = (float*)gpu::alloc(size_t(n) * MH * L * 4);
        std::vector<int32_t> hp = {pos0}; int32_t* pos = (int32_t*)gpu::alloc(4); gpu::copy_to_device(pos, hp.data(), 4, nullptr);
        gpu::sync(nullptr);
        const double us = time_us([&](gpu::Stream s) { gpu::attention_tiled_shared(q, cache, pos, MH, R, L, 0.07f, out, s, n); }, 10);
        double flop = 0;  // useful work: q.k over 576 and p.v over 512, each position a token sees
        for (int t = 0; t < n; t++) flop += double(MH) * (pos0 + t + 1) * (R + L) * 2;
        printf("attention_tiled_shared: %d tokens after %d, 128 heads 576/512: %9.1f us, %.1f TFLOP/s\n", n, pos0, us,
               flop / us * 1e-6);
    }
}
int main() {
    std::string why; if (!gpu::available(&why)) { printf("no gpu: %s\n", why.c_str()); return 1; }
    prompt_kernel();
    return 0;
}
