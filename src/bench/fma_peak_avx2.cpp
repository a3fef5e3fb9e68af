// bench/fma_peak.h's loop at the AVX2 level (fma_peak_x86.inc).
#include <immintrin.h>

#include <cstdint>

#include "bench/fma_peak.h"
#include "quant/isa_target.h"

MS_ISA_BEGIN(MS_ISA_AVX2)
namespace ms {
namespace {

using Vec = __m256;
constexpr int kLanes = 8;
inline Vec vset1(float x) { return _mm256_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline void vstore(float* p, Vec v) { _mm256_store_ps(p, v); }

#include "bench/fma_peak_x86.inc"

}  // namespace
}  // namespace ms
MS_ISA_END

namespace ms {

constinit const FmaKernel kFmaAvx2 = {run, kLanes, kChains};

}  // namespace ms
