// AVX2 + FMA + F16C row kernels (quant/dot_x86.inc with the pre-VNNI integer
// dot: maddubs into int16 pairs, madd into int32).
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "quant/blocks.h"
#include "quant/isa_target.h"
#include "quant/kernels.h"

MS_ISA_BEGIN(MS_ISA_AVX2)
namespace ms {
namespace {

inline __m256i mul_sum_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
inline __m256i madd_acc(__m256i acc, __m256i p16, __m256i s16) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, s16));
}

#include "quant/dot_x86.inc"

}  // namespace
}  // namespace ms
MS_ISA_END

namespace ms {

constinit const LevelKernels kDotAvx2 = kernels_256();

}  // namespace ms
