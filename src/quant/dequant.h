// Scalar reference dequantization: one row of any supported GGML type to
// float32, bit-for-bit what the reference engine's own routines produce.
// Also the load-time check that a tensor's type is one we can compute.
#pragma once
#include <cstdint>
#include <string>

#include "quant/types.h"

namespace ms {

// dst[0..n) = row src of type t; n a multiple of the block size. Returns false
// (writing nothing) when t is not supported (type_traits(t).dequant false).
bool dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// Types moestream can dequantize AND multiply (dot.h): F32, F16, BF16, Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4.
bool is_runnable(GgmlType t);
// Throws std::runtime_error "tensor NAME has type T, which moestream cannot run".
void check_runnable(GgmlType t, const std::string& tensor_name);

}  // namespace ms
