// Internal to quant/: the per-level kernel tables behind dot.h. A kernel dots
// one weight row with NT activation rows (act_stride bytes apart) and writes
// out[0..NT); NT is 1 (matvec) or 4 (matmul tiles reuse each decoded weight
// block for four tokens). Per token, dot4 performs exactly dot1's operations,
// so matvec and matmul agree bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace ms {

using RowDotFn = void (*)(const void* wrow, const void* act, size_t act_stride, int64_t n, float* out);

struct LevelKernels {
    RowDotFn dot1[kGgmlTypeCount] = {};
    RowDotFn dot4[kGgmlTypeCount] = {};
};

// Defined in dot_avx2.cpp / dot_avx512.cpp; they only set the types they speed up.
void add_avx2_kernels(LevelKernels& k);
void add_avx512_kernels(LevelKernels& k);

}  // namespace ms
