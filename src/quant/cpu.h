// Which SIMD kernels this CPU can run. Detected once with cpuid/xgetbv; the
// active level defaults to the best available and can be lowered by tests and
// benchmarks to compare the levels (quant/dot.h: they give the same bits).
#pragma once

namespace ms {

struct CpuFeatures {
    bool avx2 = false, fma = false, f16c = false, bmi2 = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
    bool avx512vnni = false, avx512bf16 = false, avxvnni = false;
};
const CpuFeatures& cpu_features();

// Avx2 = AVX2+FMA+F16C+BMI2. Avx512 = AVX-512 F/BW/VL/DQ + VNNI (Ice Lake,
// Zen 4 and later); BF16 dot instructions are used inside it only when
// cpu_features().avx512bf16 is set.
enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx512 = 2 };
const char* simd_level_name(SimdLevel l);  // "scalar", "avx2", "avx512"

// The best level this CPU runs, capped by the environment variable
// MOESTREAM_SIMD (scalar, avx2; anything else: no cap).
SimdLevel best_simd_level();
SimdLevel simd_level();  // the active level
// Sets the active level, clamped to best_simd_level(); returns what was set.
// Not thread-safe against running kernels: call it between computations.
SimdLevel set_simd_level(SimdLevel l);

}  // namespace ms
