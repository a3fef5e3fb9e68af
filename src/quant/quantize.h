// Float rows to weight block formats, for `moestream quantize`: Q8_0 with
// the reference engine's own reference steps (so files come out byte for
// byte as its quantizer writes them), Q4_K with a short least-squares search.
#pragma once
#include <cstdint>

#include "quant/types.h"

namespace ms {

// Types quantize_row writes.
bool can_quantize(GgmlType t);
// dst = row src[0..n) in type t (n a multiple of the block size; dst holds
// row_bytes of it). Returns false, writing nothing, when !can_quantize(t).
bool quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

}  // namespace ms
