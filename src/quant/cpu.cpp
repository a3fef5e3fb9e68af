#include "quant/cpu.h"

#include <cpuid.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace ms {

namespace {

uint64_t xgetbv0() {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (uint64_t(edx) << 32) | eax;
}

CpuFeatures detect() {
    CpuFeatures f;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    bool osxsave = c & (1u << 27);
    bool fma = c & (1u << 12), f16c = c & (1u << 29), avx = c & (1u << 28);
    if (!osxsave || !avx) return f;
    // The OS must save the YMM (bits 1-2) and, for AVX-512, opmask/ZMM state (bits 5-7).
    uint64_t xcr0 = xgetbv0();
    bool ymm_os = (xcr0 & 0x6) == 0x6;
    bool zmm_os = (xcr0 & 0xe6) == 0xe6;
    if (!ymm_os) return f;
    unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
    if (__get_cpuid_max(0, nullptr) >= 7) {
        __cpuid_count(7, 0, a, b7, c7, d7);
        unsigned b71, c71, d71;
        __cpuid_count(7, 1, a71, b71, c71, d71);
    }
    f.fma = fma;
    f.f16c = f16c;
    f.avx2 = b7 & (1u << 5);
    f.bmi2 = b7 & (1u << 8);
    f.avxvnni = a71 & (1u << 4);
    if (zmm_os) {
        f.avx512f = b7 & (1u << 16);
        f.avx512dq = b7 & (1u << 17);
        f.avx512bw = b7 & (1u << 30);
        f.avx512vl = b7 & (1u << 31);
        f.avx512vnni = c7 & (1u << 11);
        f.avx512bf16 = a71 & (1u << 5);
    }
    return f;
}

SimdLevel detect_best() {
    const CpuFeatures& f = cpu_features();
    bool avx2 = f.avx2 && f.fma && f.f16c && f.bmi2;
    SimdLevel best = SimdLevel::Scalar;
    if (avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni) best = SimdLevel::Avx512;
    else if (avx2) best = SimdLevel::Avx2;
    // MOESTREAM_SIMD=scalar|avx2 caps the level, to run on this machine the
    // kernels a CPU without AVX-512 runs (their results are the same bits,
    // but for BF16 pair dots; the cap checks that and compares speed).
    if (const char* cap = std::getenv("MOESTREAM_SIMD")) {
        if (std::strcmp(cap, "scalar") == 0) best = SimdLevel::Scalar;
        else if (std::strcmp(cap, "avx2") == 0 && best == SimdLevel::Avx512) best = SimdLevel::Avx2;
    }
    return best;
}

std::atomic<int> g_level{-1};

}  // namespace

const CpuFeatures& cpu_features() {
    static const CpuFeatures f = detect();
    return f;
}

const char* simd_level_name(SimdLevel l) {
    switch (l) {
        case SimdLevel::Scalar: return "scalar";
        case SimdLevel::Avx2: return "avx2";
        case SimdLevel::Avx512: return "avx512";
    }
    return "unknown";
}

SimdLevel best_simd_level() {
    static const SimdLevel best = detect_best();
    return best;
}

SimdLevel simd_level() {
    int l = g_level.load(std::memory_order_relaxed);
    return l < 0 ? best_simd_level() : SimdLevel(l);
}

SimdLevel set_simd_level(SimdLevel l) {
    if (int(l) > int(best_simd_level())) l = best_simd_level();
    g_level.store(int(l), std::memory_order_relaxed);
    return l;
}

}  // namespace ms
