// Internal to quant/: the per-level kernel tables behind dot.h. A row kernel
// dots one weight row with NT activation rows (act_stride bytes apart) and
// writes out[0..NT); NT is 1 (matvec) or 4 (matmul of types without tile
// kernels: each decoded weight block serves four tokens). Per token, dot4
// performs exactly dot1's operations, so matvec and matmul agree bit for bit.
//
// A tile kernel does the same for a whole band of rows and NT = 1, 2, 4, 8 or
// 16 tokens: it first rearranges the NT activation rows into scratch (scales
// gathered so one multiply forms every token's block scale, quants aligned),
// then walks the rows, decoding each weight block once for all NT tokens. Per
// token it too performs dot1's float operations in dot1's order.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/dot.h"
#include "quant/types.h"

namespace ms {

using RowDotFn = void (*)(const void* wrow, const void* act, size_t act_stride, int64_t n, float* out);

// Rows [0, nrows) of W (w_stride bytes apart) times `valid` <= NT activation
// rows (act_stride apart): Y[t * y_stride + r] for t < valid. With valid < NT
// the tile is padded: the missing tokens repeat the last one, and their
// results are dropped. scratch: scratch(NT, n) bytes, 64-byte aligned.
using TileFn = void (*)(const uint8_t* W, size_t w_stride, int64_t nrows, const uint8_t* act, size_t act_stride,
                        int valid, int64_t n, float* Y, size_t y_stride, uint8_t* scratch);
using TileScratchFn = size_t (*)(int nt, int64_t n);

constexpr int kTileCount = 5;
constexpr int kTileSizes[kTileCount] = {16, 8, 4, 2, 1};  // NT of tile[0..kTileCount)

struct TileKernels {
    TileFn tile[kTileCount] = {};
    TileScratchFn scratch = nullptr;
};

// Converts n floats to an activation format (quantize_act's job); must write
// the scalar converter's bytes exactly.
using QuantizeFn = void (*)(const float* x, void* dst, int64_t n);
constexpr int kActTypeCount = int(ActType::Q8_K) + 1;

struct LevelKernels {
    RowDotFn dot1[kGgmlTypeCount] = {};
    RowDotFn dot4[kGgmlTypeCount] = {};
    TileKernels tiles[kGgmlTypeCount];
    QuantizeFn quantize[kActTypeCount] = {};
};

// The tables of dot_avx2.cpp and dot_avx512.cpp (null where a type has no
// kernel at that level): constant data, so nothing in those units runs before
// dot.cpp has picked a level the CPU has (quant/isa_target.h says why).
// kDotAvx512Bf16 is kDotAvx512 with AVX512-BF16 pair dots for BF16, for CPUs
// with cpu_features().avx512bf16.
extern const LevelKernels kDotAvx2;
extern const LevelKernels kDotAvx512;
extern const LevelKernels kDotAvx512Bf16;

}  // namespace ms
