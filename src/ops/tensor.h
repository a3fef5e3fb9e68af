// A view of a weight tensor in memory: `rows` rows of `cols` elements of one
// GGML type, rows row_bytes() apart, as laid out in the GGUF. For a stack of
// matrices (experts), `rows` counts the rows of one matrix.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace ms {

struct Tensor {
    GgmlType type = GgmlType::F32;
    int64_t cols = 0;
    int64_t rows = 0;
    const uint8_t* data = nullptr;

    size_t row_bytes() const { return ms::row_bytes(type, cols); }
    size_t bytes() const { return row_bytes() * size_t(rows); }
    const uint8_t* row(int64_t r) const { return data + size_t(r) * row_bytes(); }
    const float* f32() const { return reinterpret_cast<const float*>(data); }
    // No tensor: an optional weight the model lacks. (A declared tensor has
    // its shape before its data is read.)
    bool empty() const { return cols == 0; }
};

}  // namespace ms
