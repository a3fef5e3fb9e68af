// Dot products of quantized weight rows with activations converted the way
// the reference engine (llama.cpp CPU backend) converts them per weight type:
// Q8_0 blocks for Q8_0/Q4_0/Q5_0/IQ4_NL/MXFP4, Q8_1 for Q4_1/Q5_1, Q8_K for
// the K-quants and IQ4_XS, F16/BF16/F32 for F16/BF16/F32. Every SIMD level
// takes the reference's float steps (those of its AVX2 kernels), so results
// are the same bits at every level; the one exception is BF16 on CPUs with
// AVX512-BF16, whose pair dots round their own way. Kernels run at
// simd_level() (quant/cpu.h); none allocates.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace ms {

enum class ActType { F32, F16, BF16, Q8_0, Q8_1, Q8_K };
const char* act_type_name(ActType a);

// Activation format for a weight type (weight must be is_runnable()).
ActType act_type(GgmlType weight);
// Bytes of one converted activation row of n elements (n a multiple of the
// weight's block size). Give such buffers 64-byte alignment.
size_t act_bytes(GgmlType weight, int64_t n);

// Converts float x[0..n) into the activation format for `weight` (dst holds
// act_bytes(weight, n) bytes). Same bytes at every SIMD level.
void quantize_act(GgmlType weight, const float* x, void* dst, int64_t n);
// n_tok rows, x rows n floats apart, dst rows act_bytes(weight, n) apart.
void quantize_acts(GgmlType weight, const float* x, void* dst, int64_t n, int64_t n_tok);

// dot(weight row, activation row) over n elements.
float vec_dot(GgmlType weight, const void* wrow, const void* act, int64_t n);

// y[r] = dot(row r of W, act) for r in [r0, r1); W rows are row_bytes(weight, n)
// apart, y is indexed by absolute row. Results per row do not depend on r0/r1,
// so splitting rows over threads is bit-exact.
void matvec(GgmlType weight, const void* W, const void* act, float* y, int64_t n,
            int64_t r0, int64_t r1);

// Y[t*rows + r] = dot(row r of W, activation row t) for t in [0, n_tok), r in
// [r0, r1): prefill and expert GEMMs. Activation rows are act_bytes(weight, n)
// apart. Each weight block is reused across tokens while in cache; every
// result is bit-identical to matvec's at the same SIMD level.
void matmul(GgmlType weight, const void* W, int64_t rows, const void* acts, int64_t n_tok,
            float* Y, int64_t n, int64_t r0, int64_t r1);

}  // namespace ms
