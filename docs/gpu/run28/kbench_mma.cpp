// Timing of prefill's quantized matrix products on tensor cores alone
// (twenty-eighth session): gpu::mma_matmul over n rows at qwen3-30b-a3b's
// shapes (an expert's gate and up as one 1,536-row matrix, its down, the
// q projection), for each weight type, and mma_gate_up_experts over a pass
// routed 8 of 128, so one binary built against main's kernels and one
// against a change give the two rates side by side. Weights are random
// bytes with modest fp16 scales (timing only). Built beside the bundle:
// g++ -std=c++20 -O2 -Isrc docs/gpu/run28/kbench_mma.cpp build/libms_gpu.a
// build/libms_quant.a -L<cuda>/lib -lcudart_static -ldl -lrt -lpthread
#include <cstdio>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/gpu.h"
#include "../kbench_time.h"
#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/types.h"
using namespace ms;

static void* dev(const void* p, size_t n) {
    void* d = gpu::alloc(n);
    gpu::copy_to_device(d, p, n, nullptr);
    return d;
}
// Random blocks of type t with their float scales set to modest values.
static std::vector<uint8_t> weights(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
    const size_t bytes = row_bytes(t, cols) * size_t(rows), bs = type_traits(t).type_size;
    std::vector<uint8_t> w(bytes + 8);
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + 1;  // xorshift, 8 bytes a step (the setup was most of a run)
    for (size_t i = 0; i < bytes; i += 8) {
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        memcpy(w.data() + i, &z, 8);
    }
    w.resize(bytes);
    const uint16_t h = fp32_to_fp16(0.01f);
    for (size_t i = 0; i < bytes / bs; i++) {
        uint8_t* b = w.data() + i * bs;
        switch (t) {
            case GgmlType::Q4_K:
            case GgmlType::Q5_K: memcpy(b, &h, 2), memcpy(b + 2, &h, 2); break;
            case GgmlType::Q6_K: memcpy(b + 208, &h, 2); break;
            case GgmlType::Q8_0: memcpy(b, &h, 2); break;
            case GgmlType::MXFP4: b[0] = 120; break;
            default: break;
        }
    }
    return w;
}
static gpu::Act act(int64_t n, int64_t cols) {
    std::vector<float> x(size_t(n * cols));
    std::mt19937 rng(7);
    std::normal_distribution<float> d;
    for (float& v : x) v = d(rng);
    float* xf = static_cast<float*>(dev(x.data(), x.size() * 4));
    void* q = gpu::alloc(gpu::act_bytes(cols) * size_t(n));
    gpu::quantize_act(xf, n, cols, q, nullptr);
    return {xf, q};
}
static void dense(const char* name, GgmlType t, int64_t rows, int64_t cols, int n) {
    const std::vector<uint8_t> w = weights(t, rows, cols, 3);
    void* dw = dev(w.data(), w.size());
    const gpu::Act x = act(n, cols);
    float* y = static_cast<float*>(gpu::alloc(size_t(n * rows) * 4));
    const double us = time_us([&](gpu::Stream s) { gpu::mma_matmul(t, dw, rows, cols, n, x, y, s, false); }, 20);
    // A check that the variant computes the product: against decode's
    // kernel (gpu::matmul, dp4a) over the same 8-bit rows, the largest
    // difference over the largest |value|.
    float* yref = static_cast<float*>(gpu::alloc(size_t(n * rows) * 4));
    gpu::matmul(t, dw, rows, cols, n, x, yref, nullptr, false, 1);
    std::vector<float> got(size_t(n * rows)), ref(got.size());
    gpu::copy_to_host(got.data(), y, got.size() * 4, nullptr);
    gpu::copy_to_host(ref.data(), yref, ref.size() * 4, nullptr);
    gpu::sync(nullptr);
    double diff = 0, top = 0;
    for (size_t i = 0; i < got.size(); i++) {
        diff = std::max(diff, double(std::fabs(got[i] - ref[i])));
        top = std::max(top, double(std::fabs(ref[i])));
        if (!std::isfinite(got[i])) diff = INFINITY;
    }
    printf("dense %-10s %-5s %5lldx%-5lld n %5d: %9.1f us  %7.2f TOP/s  err %.1e\n", name, type_name(t),
           (long long)rows, (long long)cols, n, us, 2.0 * double(rows) * double(cols) * n / us * 1e-6, diff / top);
    gpu::release(yref);
    gpu::release(dw), gpu::release(y), gpu::release(const_cast<float*>(x.f)), gpu::release(const_cast<void*>(x.q));
}
// n tokens, each to k of n_exp experts (uniform), gate and up (rows each)
// by cols, in tiles of kMmaTile pairs an expert.
static void experts(GgmlType t, int n_exp, int k, int64_t rows, int64_t cols, int n) {
    const size_t mb = row_bytes(t, cols) * size_t(rows);
    const std::vector<uint8_t> w = weights(t, 2 * rows * n_exp, cols, 5);
    uint8_t* dw = static_cast<uint8_t*>(dev(w.data(), w.size()));
    std::vector<const uint8_t*> table(static_cast<size_t>(n_exp));
    for (int e = 0; e < n_exp; e++) table[size_t(e)] = dw + size_t(e) * 2 * mb;
    std::mt19937 rng(11);
    std::vector<std::vector<int>> chose(static_cast<size_t>(n_exp));
    for (int i = 0; i < n; i++) {
        std::vector<int> ids(static_cast<size_t>(n_exp));
        for (int e = 0; e < n_exp; e++) ids[size_t(e)] = e;
        std::shuffle(ids.begin(), ids.end(), rng);
        for (int j = 0; j < k; j++) chose[size_t(ids[size_t(j)])].push_back(i);
    }
    std::vector<int32_t> tiles, in_row, out_row;
    for (int e = 0; e < n_exp; e++) {
        const std::vector<int>& c = chose[size_t(e)];
        for (size_t f = 0; f < c.size(); f += gpu::kMmaTile) {
            tiles.push_back(e), tiles.push_back(int32_t(in_row.size() + 0)),
                tiles.push_back(int32_t(std::min(c.size() - f, size_t(gpu::kMmaTile))));
            for (size_t j = f; j < std::min(c.size(), f + gpu::kMmaTile); j++)
                in_row.push_back(c[j]), out_row.push_back(int32_t(out_row.size()));
        }
    }
    gpu::ExpertTiles et;
    et.tiles = static_cast<const int32_t*>(dev(tiles.data(), tiles.size() * 4));
    et.n_tiles = int(tiles.size() / 3);
    et.in_row = static_cast<const int32_t*>(dev(in_row.data(), in_row.size() * 4));
    et.out_row = static_cast<const int32_t*>(dev(out_row.data(), out_row.size() * 4));
    auto* dt = static_cast<const uint8_t* const*>(dev(table.data(), table.size() * sizeof(void*)));
    const gpu::Act x = act(n, cols);
    float* h = static_cast<float*>(gpu::alloc(out_row.size() * size_t(rows) * 4));
    const double us = time_us([&](gpu::Stream s) { gpu::mma_gate_up_experts(t, dt, et, 0, mb, rows, cols, x, h, s); }, 20);
    printf("experts gate/up %-5s %d of %d, %lldx%lld, n %5d (%d tiles): %9.1f us  %7.2f TOP/s\n", type_name(t), k,
           n_exp, (long long)rows, (long long)cols, n, et.n_tiles, us,
           4.0 * double(rows) * double(cols) * double(n) * k / us * 1e-6);
}
int main() {
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::MXFP4}) {
        for (int n : {512, 4096}) {
            dense("gate+up", t, 1536, 2048, n);
            dense("q", t, 4096, 2048, n);
            dense("down", t, 2048, 768, n);
        }
    }
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::MXFP4})
        for (int n : {512, 4096}) experts(t, 128, 8, 768, 2048, n);
    return 0;
}
