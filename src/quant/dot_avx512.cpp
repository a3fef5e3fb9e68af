// AVX-512 (F/BW/VL/DQ + VNNI) row kernels: the 256-bit bodies of
// quant/dot_x86.inc with VNNI integer dots.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "quant/blocks.h"
#include "quant/cpu.h"
#include "quant/kernels.h"

namespace ms {
namespace {

inline __m256i mul_sum_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
inline __m256i madd_acc(__m256i acc, __m256i p16, __m256i s16) { return _mm256_dpwssd_epi32(acc, p16, s16); }

#include "quant/dot_x86.inc"

}  // namespace

void add_avx512_kernels(LevelKernels& k) { fill_256_kernels(k); }

}  // namespace ms
