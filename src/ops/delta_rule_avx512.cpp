// AVX-512 delta-rule step: ops/delta_rule_x86.inc over 16-float vectors.
#include <immintrin.h>

#include <cstdint>

#include "ops/delta_rule_kernels.h"
#include "quant/isa_target.h"

MS_ISA_BEGIN(MS_ISA_AVX512)
namespace ms {
namespace {

using Vec = __m512;
constexpr int kLanes = 16;

inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vset1(float x) { return _mm512_set1_ps(x); }
inline Vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vmul_fusable(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec vsub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
// GCC writes intrinsics as plain vector arithmetic and, with FMA enabled,
// fuses a product feeding an addition into one FMA (one rounding where the
// scalar reference has two): the empty asm hides a product from it.
inline Vec vrounded(Vec p) {
    __asm__("" : "+v"(p));
    return p;
}
inline Vec vmul(Vec a, Vec b) { return vrounded(vmul_fusable(a, b)); }
inline Vec vadd_product(Vec acc, Vec a, Vec b) { return vadd(acc, vmul(a, b)); }

#include "ops/delta_rule_x86.inc"

}  // namespace
}  // namespace ms
MS_ISA_END

namespace ms {

constinit const DeltaRuleKernels kDeltaRuleAvx512 = kTable;

}  // namespace ms
