// bench/fma_peak.h's loop at the AVX512 level (fma_peak_x86.inc).
#include <immintrin.h>

#include <cstdint>

#include "bench/fma_peak.h"
#include "quant/isa_target.h"

MS_ISA_BEGIN(MS_ISA_AVX512)
namespace ms {
namespace {

using Vec = __m512;
constexpr int kLanes = 16;
inline Vec vset1(float x) { return _mm512_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline void vstore(float* p, Vec v) { _mm512_store_ps(p, v); }

#include "bench/fma_peak_x86.inc"

}  // namespace
}  // namespace ms
MS_ISA_END

namespace ms {

constinit const FmaKernel kFmaAvx512 = {run, kLanes, kChains};

}  // namespace ms
