// The FMA rate one core sustains: 12 independent chains of 16-float FMAs in
// registers (no memory), the F32 FLOP bound that bench gemm's formula
// (cpuinfo's nominal clock) understates on a VM whose cores boost.
//   g++ -O2 -mavx512f -mfma fma_peak.cpp && ./a.out
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#define R(i) __m512 a##i = _mm512_set1_ps(1.0f + i * 1e-7f);
#define F(i) a##i = _mm512_fmadd_ps(a##i, b, c);
#define ALL(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
int main() {
    ALL(R)
    const __m512 b = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
    const long n = 400000000;
    for (int rep = 0; rep < 5; rep++) {
        auto t0 = std::chrono::steady_clock::now();
        for (long i = 0; i < n / 12; i++) {
            ALL(F)
            __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
        }
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        __m512 t = _mm512_add_ps(a0, a11);
        printf("%.1f GFLOP/s one core (%.2f G FMA/s) %g\n", n * 32.0 / s / 1e9, n / s / 1e9, _mm512_reduce_add_ps(t));
    }
}
