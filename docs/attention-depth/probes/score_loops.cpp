// Score loops in L2, standalone (one KV head, 8 query heads, dim 128, 256
// keys 1 KB apart): dot products summed across lanes (dot_f16, the form
// reverted for its rounding), keys stored transposed (bcast_f16: 16 keys'
// element d a vector, summed in element order), and the library's own
// (lib_f16: keys transposed 16 x 16 in registers; lib_mix: the value loop).
// GFLOP/s a core.
//   g++ -O3 -march=native -std=c++20 -Isrc score_loops.cpp build/libms_ops.a
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <vector>
#include "ops/attention_kernels.h"
// Inner-loop variants of H=8 x 2 keys dot-form, dim 128, n keys
__attribute__((noinline)) void dot_f16(const float* q, const uint16_t* k, int stride, int n, float* out) {
    for (int j = 0; j < n; j += 2) {
        const uint16_t* r0 = k + j * stride; const uint16_t* r1 = r0 + stride;
        __m512 acc[16];
        for (int a = 0; a < 16; a++) acc[a] = _mm512_setzero_ps();
        for (int d = 0; d < 128; d += 16) {
            __m512 k0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(r0 + d)));
            __m512 k1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(r1 + d)));
            for (int h = 0; h < 8; h++) { __m512 qv = _mm512_loadu_ps(q + h * 128 + d); acc[h] = _mm512_fmadd_ps(qv, k0, acc[h]); acc[8 + h] = _mm512_fmadd_ps(qv, k1, acc[8 + h]); }
        }
        __m512 s = acc[0]; for (int a = 1; a < 16; a++) s = _mm512_add_ps(s, acc[a]);
        _mm512_storeu_ps(out + j * 8, s);
    }
}
// transposed: kt[d][16 keys] per 16-key tile (tile = 128*16 f16), 32 keys at a time
__attribute__((noinline)) void bcast_f16(const float* q, const uint16_t* kt, int n, float* out) {
    for (int j = 0; j < n; j += 32) {
        const uint16_t* t0 = kt + j * 128; const uint16_t* t1 = t0 + 16 * 128;
        __m512 acc[16];
        for (int a = 0; a < 16; a++) acc[a] = _mm512_setzero_ps();
        for (int d = 0; d < 128; d++) {
            __m512 k0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(t0 + d * 16)));
            __m512 k1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(t1 + d * 16)));
            for (int h = 0; h < 8; h++) { __m512 qv = _mm512_set1_ps(q[h * 128 + d]); acc[h] = _mm512_fmadd_ps(qv, k0, acc[h]); acc[8 + h] = _mm512_fmadd_ps(qv, k1, acc[8 + h]); }
        }
        for (int a = 0; a < 16; a++) _mm512_storeu_ps(out + j * 8 + a * 16, acc[a]);
    }
}
int main() {
    const int n = 256, stride = 512;
    std::vector<uint16_t> k(n * stride, 0x3c00), kt(n * 128, 0x3c00); std::vector<float> q(1024, 0.5f), out(n * 16 + 64);
    auto T = [&](const char* name, auto f) {
        for (int r = 0; r < 2; r++) {
            const int it = 20000;
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < it; i++) f();
            double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            printf("%-10s %.1f GFLOP/s\n", name, 2.0 * 8 * 128 * n * it / s / 1e9);
        }
    };
    T("dot_f16", [&] { dot_f16(q.data(), k.data(), stride, n, out.data()); });
    T("bcast_f16", [&] { bcast_f16(q.data(), kt.data(), n, out.data()); });
    std::vector<float> sc(8 * n);
    T("lib_f16", [&] { ms::kAttentionAvx512.scores_f16(q.data(), 8, k.data(), stride, 128, n, sc.data(), n); });
    T("lib_mix", [&] { ms::kAttentionAvx512.mix_f16(sc.data(), n, 8, k.data(), stride, 128, n, out.data()); });
}
