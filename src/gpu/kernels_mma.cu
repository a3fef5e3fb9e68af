// Prefill's matrix products on tensor cores (gpu.h: mma_matmul,
// mma_matmul_experts, mma_gate_up_experts). A block takes 128 weight rows
// (of one matrix, or 64 of an expert's gate and the same 64 of its up) and
// up to kMmaTile (32) inputs (a dense pass's consecutive rows, or one tile
// of the pairs an expert takes), and walks the columns 256 at a time. In
// mma_kernel (Q8_0, MXFP4) the weights' quants are unpacked into shared
// memory as int8 with the scales of their groups of 32; Q4_K, Q5_K and
// Q6_K skip the unpacking (the raw kernels below read their blocks as they
// are, copied while the last chunk is multiplied). The inputs' 8-bit rows
// (quantize_act's Q8_K for the K-quants, Q8_0 for Q8_0 and MXFP4) sit
// beside them. Each warp multiplies its 32 rows by the block's inputs group
// by group with mma.sync (s8 x s8 -> s32: m16n8k32, or m16n8k16 for Q6_K's
// groups of 16), exact integer sums. Q8_0 and MXFP4
// then scale each group's sum into float accumulators (weight scale x
// activation scale x sum), as the decode kernels do a block's. The
// K-quants' group scales and mins are small integers and their activations
// have one scale per 256 columns, so a chunk's sums times their scales, and
// its mins times the groups' activation sums, are added as integers (exact)
// and scaled once a chunk (super-block d or dmin x activation scale): a
// quarter of the float work a group (worth 0-15 % on an H100: the loop
// waits on its loads more than on its arithmetic, docs/gpu.md,
// twenty-eighth session), with exact integer sums where decode adds
// floats. Prefill therefore equals decode within
// rounding, not bit for bit (issue 34's contract); an output does not
// depend on which other inputs share its tile. Why int8 and not bf16
// tiles: the activations are already in 8-bit blocks with a scale each (no
// range or rounding of their own to add), the weights' quants are small
// integers (exact in int8), and the integer MMA runs at twice bf16's rate.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/expert_hidden.cuh"
#include "gpu/gpu.h"
#include "gpu/half_at.cuh"
#include "gpu/launch.cuh"
#include "gpu/split_f16.cuh"
#include "quant/blocks.h"

namespace ms::gpu {

namespace {

constexpr int kRows = 128;            // weight rows a block (shared-memory rows)
constexpr int kPairs = kMmaTile;      // inputs a block
constexpr int kNi = kPairs / 8;       // n-tiles of 8 inputs a warp multiplies
// Why 32: more inputs a block would unpack each expert fewer times in a
// long pass (a 4,096-token pass of qwen3-30b-a3b unpacks each expert's
// weights 8 times), but at 64 the kernel takes 227-255 registers a thread,
// 2 blocks an SM against 4, and on an H100 it was slower on the experts
// (1.01-1.41x) and on most dense shapes; only Q6_K gained (docs/gpu.md,
// twenty-eighth session).
constexpr int kChunk = 256;           // columns a stage
constexpr int kStride = kChunk + 16;  // bytes a shared row: rows 4 banks apart, so fragment loads meet no conflict
constexpr int kThreads = 128;         // 4 warps of 32 rows each
// The copies into shared memory run in whole rounds of the block's threads,
// unrolled (the weights' eight rounds four at a time), so a thread's loads
// are in flight together instead of each round waiting on L2 in turn; with
// at most 128 registers a thread (4 blocks an SM). On an H100 the cap took
// the integer K-quant form's Q4_K products (then unpacked as the others
// are) 11-31 % faster than at its
// uncapped 168 registers, and the unrolling 0-4 % more (docs/gpu.md,
// twenty-eighth session); unrolling all eight spilled and was slower.
static_assert(kRows * 8 % kThreads == 0 && kPairs * 16 % kThreads == 0 && kPairs * 8 % kThreads == 0);

struct MmaArgs {
    const uint8_t* w0;  // a dense matrix, or null (experts: table)
    const uint8_t* const* table;
    ExpertTiles t;  // experts: gpu.h's tiles of up to kPairs pairs (t.tiles null: dense)
    int n;          // dense: inputs
    size_t offset, offset2;
    int64_t rows, cols;
    size_t row_bytes;
    const uint8_t* xq;  // the inputs' 8-bit rows, xq_stride apart
    size_t xq_stride;
    float* y;  // output rows of `rows` floats
    bool add;
    bool gate_up;  // shared rows [64, 128) are the up matrix's (offset2) rows of [0, 64)
};

// A word of 2-byte aligned memory.
__device__ __forceinline__ uint32_t word2(const uint8_t* p) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    return uint32_t(h[0]) | (uint32_t(h[1]) << 16);
}

// Four FP4 codes (one a byte, low nibbles) as kMXFP4's int8 values.
__device__ __forceinline__ uint32_t fp4_values(uint32_t codes) {
    const uint32_t idx = (codes & 0xF) | ((codes >> 4) & 0xF0) | ((codes >> 8) & 0xF00) | ((codes >> 12) & 0xF000);
    const uint32_t pos = __byte_perm(0x03020100u, 0x0C080604u, idx & 0x7777u);  // codes 0-7: 0 1 2 3 4 6 8 12
    const uint32_t neg = __byte_perm(0xFDFEFF00u, 0xF4F8FAFCu, idx & 0x7777u);  // 8-15: their negatives
    return __byte_perm(pos, neg, 0x3210u | ((idx & 0x8888u) >> 1));
}

// mma_kernel's weights (Q8_0 and MXFP4, whose activations are Q8_0, a
// scale per 32), by type: piece s (32 columns, one group) of 256-column
// chunk c of a row, unpacked into q (32 int8, 8 words) and the group's
// float scale. nb: the row's blocks (pieces past them are zeros).
template <GgmlType T>
struct MmaWeights;

// The block of a 32-weight type (bytes each) behind piece s of chunk c,
// or null, q and the scale zeroed, past the row's nb blocks.
__device__ __forceinline__ const uint8_t* block32(const uint8_t* row, int64_t nb, int64_t c, int s, size_t bytes,
                                                  uint32_t (&q)[8], float* scale) {
    const int64_t ib = c * 8 + s;
    if (ib < nb) return row + ib * int64_t(bytes);
#pragma unroll
    for (int k = 0; k < 8; k++) q[k] = 0;
    scale[0] = 0;
    return nullptr;
}

template <>
struct MmaWeights<GgmlType::Q8_0> {
    __device__ static void piece(const uint8_t* row, int64_t nb, int64_t c, int s, uint32_t (&q)[8], float* scale) {
        const uint8_t* b = block32(row, nb, c, s, sizeof(BlockQ8_0), q, scale);
        if (!b) return;
#pragma unroll
        for (int k = 0; k < 8; k++) q[k] = word2(b + 2 + 4 * k);
        scale[0] = half_at(b);
    }
};

// MXFP4: element j < 16 is byte j's low nibble, j >= 16 byte j - 16's high
// one; kMXFP4's values are twice FP4's, so the E8M0 scale is halved (quant's
// e8m0_half).
template <>
struct MmaWeights<GgmlType::MXFP4> {
    __device__ static void piece(const uint8_t* row, int64_t nb, int64_t c, int s, uint32_t (&q)[8], float* scale) {
        const uint8_t* b = block32(row, nb, c, s, sizeof(BlockMXFP4), q, scale);
        if (!b) return;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t w = uint32_t(b[1 + 4 * k]) | (uint32_t(b[2 + 4 * k]) << 8) |
                               (uint32_t(b[3 + 4 * k]) << 16) | (uint32_t(b[4 + 4 * k]) << 24);
            q[k] = fp4_values(w & 0x0F0F0F0Fu);
            q[k + 4] = fp4_values((w >> 4) & 0x0F0F0F0Fu);
        }
        const uint32_t e = b[0];
        scale[0] = __int_as_float(e < 2 ? int(0x00200000u << e) : int((e - 1) << 23));
    }
};

// float(c) for |c| < 2^22 without the int-to-float instruction (a quarter
// of the FMA rate): c in the low mantissa bits of 1.5 * 2^23.
__device__ __forceinline__ float int_float(int c) { return __int_as_float(0x4B400000 + c) - 12582912.0f; }

__device__ __forceinline__ void mma_k32(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
}

__device__ __forceinline__ void mma_k16(int (&c)[4], const uint32_t (&a)[2], uint32_t b) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(b), "r"(0));
}

__device__ __forceinline__ uint32_t shared_word(const uint8_t* base, int row, int col) {
    return *reinterpret_cast<const uint32_t*>(base + row * kStride + col);
}

// A block's tile: its weights (a dense matrix, or its expert's), its inputs
// (in_rows: each pair's activation row, -1 past count; in shared memory,
// read after the block's next barrier) and its first output row.
struct MmaTile {
    const uint8_t* w;
    int first, count, id, out_rows;
    int64_t r0;
};

__device__ __forceinline__ MmaTile mma_tile(const MmaArgs& a, int* in_rows) {
    MmaTile t{a.w0, 0, 0, 0, a.gate_up ? kRows / 2 : kRows, 0};
    if (a.t.tiles) {
        const int32_t* tile = a.t.tiles + 3 * blockIdx.y;
        t.id = tile[0];
        t.w = a.table[t.id];
        t.first = tile[1];
        t.count = tile[2];
    } else {
        t.first = int(blockIdx.y) * kPairs;
        t.count = min(kPairs, a.n - t.first);
    }
    t.r0 = int64_t(blockIdx.x) * t.out_rows;
    if (threadIdx.x < kPairs) {
        const int i = threadIdx.x;
        in_rows[i] = i < t.count ? (a.t.tiles ? a.t.in_row[t.first + i] : t.first + i) : -1;
    }
    return t;
}

// The accumulators (a warp's 32 rows x the block's inputs, in mma's C
// layout) through shared memory over the stages, so each output row is
// written by consecutive threads; gate/up's halves meet there.
__device__ __forceinline__ void mma_store(const MmaArgs& a, const ExpertExtras& x, const MmaTile& tl,
                                          const float (&acc)[2][kNi][4], uint8_t* smem) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    __syncthreads();
    float* cs = reinterpret_cast<float*>(smem);
    constexpr int cstride = kPairs + 1;
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = warp * 32 + gid + 16 * mi + 8 * h;
#pragma unroll
            for (int ni = 0; ni < kNi; ni++) {
#pragma unroll
                for (int e = 0; e < 2; e++) cs[r * cstride + 8 * ni + 2 * tig + e] = acc[mi][ni][2 * h + e];
            }
        }
    }
    __syncthreads();
    const int out_rows = tl.out_rows;
    for (int i = threadIdx.x; i < out_rows * kPairs; i += kThreads) {
        const int t = i / out_rows, r = i % out_rows;
        if (t >= tl.count || tl.r0 + r >= a.rows) continue;
        const int64_t out = a.t.tiles ? a.t.out_row[tl.first + t] : tl.first + t;
        float* y = a.y + out * a.rows + tl.r0 + r;
        float v = cs[r * cstride + t];
        if (a.gate_up) v = expert_hidden(v, cs[(r + out_rows) * cstride + t], x, tl.id, a.rows, tl.r0 + r);
        *y = a.add ? *y + v : v;
    }
}

// mma_kernel's shared memory: the weights' and inputs' int8 rows, the
// weights' group scales and the inputs' piece scales.
constexpr size_t kMmaSmem = size_t(kRows + kPairs) * kStride + size_t(kRows) * (kChunk / 32) * 4 + size_t(kPairs) * 8 * 4;

template <GgmlType T>
__global__ void __launch_bounds__(kThreads, 4) mma_kernel(const MmaArgs a, const ExpertExtras x) {
    using W = MmaWeights<T>;
    constexpr int NG = kChunk / 32;  // groups a chunk
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t* As = smem;                   // kRows x kStride: the weights' int8 values
    uint8_t* Bs = As + kRows * kStride;   // kPairs x kStride: the inputs'
    float* sw = reinterpret_cast<float*>(Bs + kPairs * kStride);  // kRows x NG: group scales
    float* dx = sw + kRows * NG;          // kPairs x 8: the inputs' scale, a 32-column piece
    __shared__ int in_rows[kPairs];
    chain_start();
    const MmaTile tl = mma_tile(a, in_rows);
    const uint8_t* w = tl.w;
    const int out_rows = tl.out_rows;
    const int64_t r0 = tl.r0;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    const int64_t nb = a.cols / 32;
    const int64_t chunks = (a.cols + kChunk - 1) / kChunk;
    float acc[2][kNi][4] = {};
    for (int64_t c = 0; c < chunks; c++) {
        __syncthreads();  // the last chunk's fragments are read (and in_rows written)
#pragma unroll 4
        for (int it = 0; it < kRows * 8 / kThreads; it++) {
            const int i = int(threadIdx.x) + it * kThreads, r = i / 8, s = i % 8;
            const bool up = a.gate_up && r >= out_rows;
            const int64_t rr = min(r0 + (r % out_rows), a.rows - 1);  // clamped: written only if < rows
            const uint8_t* row = w + (up ? a.offset2 : a.offset) + rr * int64_t(a.row_bytes);
            uint32_t q[8];
            float scale = 0;
            W::piece(row, nb, c, s, q, &scale);
            sw[r * NG + s] = scale;
            uint4* dst = reinterpret_cast<uint4*>(As + r * kStride + 32 * s);
            dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
            dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
        }
#pragma unroll
        for (int it = 0; it < kPairs * 16 / kThreads; it++) {
            const int i = int(threadIdx.x) + it * kThreads, t = i / 16, p = i % 16;
            const int64_t col = c * kChunk + p * 16;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (in_rows[t] >= 0 && col < a.cols) {
                const uint8_t* base = a.xq + size_t(in_rows[t]) * a.xq_stride + a.cols;  // the Q8_0 bytes
                v = *reinterpret_cast<const uint4*>(base + col);
            }
            *reinterpret_cast<uint4*>(Bs + t * kStride + p * 16) = v;
        }
#pragma unroll
        for (int it = 0; it < kPairs * 8 / kThreads; it++) {
            const int i = int(threadIdx.x) + it * kThreads, t = i / 8, s = i % 8;
            float d = 0;
            if (in_rows[t] >= 0 && c * kChunk + 32 * s < a.cols) {
                const float* scales = reinterpret_cast<const float*>(a.xq + size_t(in_rows[t]) * a.xq_stride + 2 * a.cols);
                d = scales[a.cols / 256 + c * 8 + s];
            }
            dx[t * 8 + s] = d;
        }
        __syncthreads();
        const int row0 = warp * 32 + gid;
#pragma unroll 2
        for (int g = 0; g < NG; g++) {
            int cs[2][kNi][4];
            uint32_t af[2][4], bf[kNi][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const int r = row0 + 16 * mi, col = 32 * g + 4 * tig;
                af[mi][0] = shared_word(As, r, col);
                af[mi][1] = shared_word(As, r + 8, col);
                af[mi][2] = shared_word(As, r, col + 16);
                af[mi][3] = shared_word(As, r + 8, col + 16);
            }
#pragma unroll
            for (int ni = 0; ni < kNi; ni++) {
                bf[ni][0] = shared_word(Bs, 8 * ni + gid, 32 * g + 4 * tig);
                bf[ni][1] = shared_word(Bs, 8 * ni + gid, 32 * g + 4 * tig + 16);
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
#pragma unroll
                for (int ni = 0; ni < kNi; ni++) mma_k32(cs[mi][ni], af[mi], bf[ni]);
            }
            float dxv[kNi][2];
#pragma unroll
            for (int ni = 0; ni < kNi; ni++) {
#pragma unroll
                for (int e = 0; e < 2; e++) dxv[ni][e] = dx[(8 * ni + 2 * tig + e) * 8 + g];
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float swv = sw[(row0 + 16 * mi + 8 * h) * NG + g];
#pragma unroll
                    for (int ni = 0; ni < kNi; ni++) {
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float& o = acc[mi][ni][2 * h + e];
                            o = fmaf(swv, dxv[ni][e] * int_float(cs[mi][ni][2 * h + e]), o);
                        }
                    }
                }
            }
        }
    }
    mma_store(a, x, tl, acc, smem);
}

// Q4_K and Q5_K straight from their raw blocks (Q6_K: below; the other
// types take mma_kernel).
// Chunk c + 1's raw weight blocks (144 or 176 bytes a row), 8-bit activations and
// their Q8_K scales are copied by cp.async into the other half of a double
// buffer while chunk c is multiplied, so a block no longer loads, waits,
// unpacks and waits again a chunk; the A fragments are built from the raw
// nibbles (one 32-bit load, a shift and a mask), the 6-bit scales and mins
// from the block's 12 scale bytes once a chunk. The mins' part: the groups'
// activation sums (int16 pairs, one pass a chunk) against the mins' bytes
// by dp2a. The sums are the integer form's (exact, scaled once a chunk).
// On an H100 (docs/gpu.md, twenty-ninth session) it took qwen3-30b-a3b's
// Q4_K expert gate/up 0.58x (512 inputs) and 0.64x (4,096) of the unpacking
// kernel's time and a 4096x2048 matrix over 4,096 rows 0.70x; held to 128
// registers (4 blocks an SM, small spills) with the groups unrolled by 4,
// the fastest of four register caps and unrollings there.
constexpr int kRawGUnroll = 4;
constexpr int kRawXStride = 256 + 16;           // an input's bytes a stage (rows 4 banks apart)
constexpr int kRawX = kPairs * kRawXStride;
// A K-quant block of 256 with 6-bit scales and mins (12 bytes at 4):
// Q4_K's 144 bytes (qs at 16), Q5_K's 176 (qh at 16, qs at 48). Rows of
// either are 4 banks apart in shared memory (36 or 44 words).
template <GgmlType T>
__host__ __device__ constexpr int raw_block_bytes() { return T == GgmlType::Q4_K ? 144 : 176; }
template <GgmlType T>
__host__ __device__ constexpr int raw_w() { return kRows * raw_block_bytes<T>(); }  // a stage's weight bytes
template <GgmlType T>
__host__ __device__ constexpr int raw_stage() { return raw_w<T>() + kRawX + kPairs * 4; }
template <GgmlType T>
__host__ __device__ constexpr size_t raw_smem() { return size_t(2) * raw_stage<T>() + size_t(kPairs) * 16; }
// 4 blocks an SM for Q4_K (54.5 KB each), 3 for Q5_K (63.3 KB).
template <GgmlType T>
__host__ __device__ constexpr int raw_min_blocks() { return T == GgmlType::Q4_K ? 4 : 3; }
static_assert(raw_w<GgmlType::Q4_K>() % 16 == 0 && raw_w<GgmlType::Q5_K>() % 16 == 0 && kRawX % 16 == 0);

// 4 bytes, of which the first n (0-4) are read and the rest zeroed.
__device__ __forceinline__ void copy_async4(uint32_t to, const void* from, int n) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(to), "l"(from), "r"(n) : "memory");
}
__device__ __forceinline__ void copy_async4(uint32_t to, const void* from, bool valid) {
    copy_async4(to, from, valid ? 4 : 0);
}
__device__ __forceinline__ void copy_async_wait_one() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// A raw kernel's inputs for chunk c, by cp.async: each pair's 256 8-bit
// activations (four threads an input, 64 bytes each; zeros past the tile's
// count) into X (kRawXStride apart) and its Q8_K scale into DX.
__device__ __forceinline__ void raw_copy_inputs(const MmaArgs& a, const int* in_rows, int64_t c, uint8_t* X,
                                                uint8_t* DX, bool x16) {
    {
        const int t = threadIdx.x / 4, p = threadIdx.x % 4;
        const bool valid = in_rows[t] >= 0;
        const uint8_t* src = a.xq + (valid ? size_t(in_rows[t]) * a.xq_stride + c * 256 + 64 * p : 0);
        const uint32_t dst = shared_address(X + t * kRawXStride + 64 * p);
        if (x16) {
#pragma unroll
            for (int k = 0; k < 4; k++) copy_async(dst + 16 * k, src + 16 * k, valid);
        } else {
#pragma unroll
            for (int k = 0; k < 16; k++) copy_async4(dst + 4 * k, src + 4 * k, valid);
        }
    }
    if (threadIdx.x < kPairs) {
        const int t = threadIdx.x;
        const bool valid = in_rows[t] >= 0;
        const uint8_t* src = a.xq + (valid ? size_t(in_rows[t]) * a.xq_stride + 2 * a.cols + 4 * c : 0);
        copy_async4(shared_address(DX + 4 * t), src, valid);
    }
}

// The raw kernels' double buffer: chunk c + 1's copies issued into the
// other stage (issue(c, stage) commits one cp.async group) before chunk c's
// are waited for and multiplied (multiply(stage)).
template <class Issue, class Multiply>
__device__ __forceinline__ void raw_pipeline(int64_t chunks, Issue& issue, Multiply&& multiply) {
    issue(0, 0);
    for (int64_t c = 0; c < chunks; c++) {
        const int stage = int(c & 1);
        if (c + 1 < chunks) {
            issue(c + 1, stage ^ 1);
        } else {
            copy_async_commit();  // an empty group, so wait_group 1 still means chunk c
        }
        copy_async_wait_one();
        __syncthreads();
        multiply(stage);
        __syncthreads();  // this stage's reads are done before the next issue overwrites it
    }
    copy_async_wait();
}

// The raw kernels' weight row r of the block (gate's or up's half; past
// a.rows the last row again, computed but not written), chunk c of blocks
// of `block` bytes.
__device__ __forceinline__ const uint8_t* raw_row_chunk(const MmaArgs& a, const MmaTile& tl, int r, int64_t c,
                                                        int block) {
    const bool up = a.gate_up && r >= tl.out_rows;
    const int64_t rr = min(tl.r0 + (r % tl.out_rows), a.rows - 1);
    return tl.w + (up ? a.offset2 : a.offset) + rr * int64_t(a.row_bytes) + c * block;
}

template <GgmlType T>
__global__ void __launch_bounds__(kThreads, raw_min_blocks<T>()) mma_raw_k4_kernel(const MmaArgs a, const ExpertExtras x) {
    constexpr int B = raw_block_bytes<T>(), kStage = raw_stage<T>(), kW = raw_w<T>();
    constexpr int kQs = T == GgmlType::Q4_K ? 16 : 48;  // the nibbles' offset in a block
    extern __shared__ __align__(16) uint8_t smem[];
    uint32_t* xs16 = reinterpret_cast<uint32_t*>(smem + 2 * kStage);  // kPairs x 4: group sums, int16 pairs
    __shared__ int in_rows[kPairs];
    chain_start();
    const MmaTile tl = mma_tile(a, in_rows);
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    const int64_t chunks = a.cols / 256;
    const bool w16 = ((reinterpret_cast<uintptr_t>(tl.w) + a.offset) % 16 == 0) &&
                     (!a.gate_up || (reinterpret_cast<uintptr_t>(tl.w) + a.offset2) % 16 == 0) &&
                     a.row_bytes % 16 == 0;
    const bool x16 = (reinterpret_cast<uintptr_t>(a.xq) | a.xq_stride) % 16 == 0;
    auto issue = [&](int64_t c, int stage) {
        uint8_t* W = smem + stage * kStage;
        uint8_t* X = W + kW;
        uint8_t* DX = X + kRawX;
        {  // thread r copies weight row r's block (one base address a thread)
            static_assert(kThreads == kRows);
            const int r = threadIdx.x;
            const uint8_t* src = raw_row_chunk(a, tl, r, c, B);
            const uint32_t dst = shared_address(W + r * B);
            if (w16) {
#pragma unroll
                for (int k = 0; k < B / 16; k++) copy_async(dst + 16 * k, src + 16 * k, true);
            } else {
#pragma unroll
                for (int k = 0; k < B / 4; k++) copy_async4(dst + 4 * k, src + 4 * k, true);
            }
        }
        raw_copy_inputs(a, in_rows, c, X, DX, x16);
        copy_async_commit();
    };
    float acc[2][kNi][4] = {};
    const int row0 = warp * 32 + gid;
    raw_pipeline(chunks, issue, [&](int stage) {
        const uint8_t* W = smem + stage * kStage;
        const uint8_t* X = W + kW;
        const float* DX = reinterpret_cast<const float*>(X + kRawX);
        {  // the groups' activation sums, two groups a thread
            const int t = threadIdx.x / 4, pp = threadIdx.x % 4;
            const int4* v = reinterpret_cast<const int4*>(X + t * kRawXStride + 64 * pp);
            int s0 = 0, s1 = 0;
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const int4 u = v[k], u2 = v[k + 2];
                s0 = __dp4a(u.x, 0x01010101, s0), s0 = __dp4a(u.y, 0x01010101, s0);
                s0 = __dp4a(u.z, 0x01010101, s0), s0 = __dp4a(u.w, 0x01010101, s0);
                s1 = __dp4a(u2.x, 0x01010101, s1), s1 = __dp4a(u2.y, 0x01010101, s1);
                s1 = __dp4a(u2.z, 0x01010101, s1), s1 = __dp4a(u2.w, 0x01010101, s1);
            }
            xs16[t * 4 + pp] = (uint32_t(s0) & 0xFFFFu) | (uint32_t(s1) << 16);
        }
        // Each of the thread's four rows: its scales' and mins' bytes (groups 0-3, 4-7).
        uint32_t scw[2][2][2], mnw[2][2][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint8_t* b = W + (row0 + 16 * mi + 8 * h) * B;
                const uint32_t w0 = lds32(b + 4), w1 = lds32(b + 8), w2 = lds32(b + 12);
                scw[mi][h][0] = w0 & 0x3F3F3F3Fu;
                scw[mi][h][1] = (w2 & 0x0F0F0F0Fu) | ((w0 >> 2) & 0x30303030u);
                mnw[mi][h][0] = w1 & 0x3F3F3F3Fu;
                mnw[mi][h][1] = ((w2 >> 4) & 0x0F0F0F0Fu) | ((w1 >> 2) & 0x30303030u);
            }
        }
        __syncthreads();  // xs16 written
        int isum[2][kNi][4] = {};
#pragma unroll kRawGUnroll
        for (int g = 0; g < 8; g++) {
            uint32_t af[2][4], bf[kNi][2];
            const int qoff = kQs + 32 * (g / 2) + 4 * tig, sh = 4 * (g % 2);
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const uint8_t* b = W + (row0 + 16 * mi) * B + qoff;
                af[mi][0] = (lds32(b) >> sh) & 0x0F0F0F0Fu;
                af[mi][1] = (lds32(b + 8 * B) >> sh) & 0x0F0F0F0Fu;
                af[mi][2] = (lds32(b + 16) >> sh) & 0x0F0F0F0Fu;
                af[mi][3] = (lds32(b + 8 * B + 16) >> sh) & 0x0F0F0F0Fu;
                if constexpr (T == GgmlType::Q5_K) {  // the fifth bit: bit g of qh's bytes 16 + column
                    const uint8_t* h = W + (row0 + 16 * mi) * B + 16 + 4 * tig;
                    af[mi][0] |= ((lds32(h) >> g) & 0x01010101u) << 4;
                    af[mi][1] |= ((lds32(h + 8 * B) >> g) & 0x01010101u) << 4;
                    af[mi][2] |= ((lds32(h + 16) >> g) & 0x01010101u) << 4;
                    af[mi][3] |= ((lds32(h + 8 * B + 16) >> g) & 0x01010101u) << 4;
                }
            }
#pragma unroll
            for (int ni = 0; ni < kNi; ni++) {
                const uint8_t* b = X + (8 * ni + gid) * kRawXStride + 32 * g + 4 * tig;
                bf[ni][0] = lds32(b);
                bf[ni][1] = lds32(b + 16);
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
#pragma unroll
                for (int ni = 0; ni < kNi; ni++) {
                    int cs[4];
                    mma_k32(cs, af[mi], bf[ni]);
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int scv = int(((g < 4 ? scw[mi][h][0] : scw[mi][h][1]) >> (8 * (g % 4))) & 0xFFu);
                        isum[mi][ni][2 * h] += scv * cs[2 * h];
                        isum[mi][ni][2 * h + 1] += scv * cs[2 * h + 1];
                    }
                }
            }
        }
#pragma unroll
        for (int ni = 0; ni < kNi; ni++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int t = 8 * ni + 2 * tig + e;
                const uint4 xv = *reinterpret_cast<const uint4*>(xs16 + t * 4);
                const float dx = DX[t];
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint32_t m0 = mnw[mi][h][0], m1 = mnw[mi][h][1];
                        int ms = __dp2a_lo(int(xv.x), int(m0), 0);
                        ms = __dp2a_hi(int(xv.y), int(m0), ms);
                        ms = __dp2a_lo(int(xv.z), int(m1), ms);
                        ms = __dp2a_hi(int(xv.w), int(m1), ms);
                        const float2 d = __half22float2(
                            *reinterpret_cast<const __half2*>(W + (row0 + 16 * mi + 8 * h) * B));
                        float& o = acc[mi][ni][2 * h + e];
                        o = fmaf(d.x * dx, __int2float_rn(isum[mi][ni][2 * h + e]), o);
                        o = fmaf(-d.y * dx, __int2float_rn(ms), o);
                    }
                }
            }
        }
    });
    mma_store(a, x, tl, acc, smem);
}

// Q6_K from its raw blocks, as mma_raw_k4_kernel takes Q4_K: chunk c + 1's
// 210-byte blocks, activations and scales copied by cp.async while chunk c
// is multiplied. A block starts on an even byte, so a row's copy starts at
// the word below it (`off` 0 or 2 bytes before, kept a row) and each 32-bit
// fragment word is read as two words and a funnel shift. Groups of 16
// columns (m16n8k16): group 8n + 2i + hh of a chunk is quarter i of half n,
// columns 16 hh.. of it; its 4 bytes a thread are ql's nibbles (low for i
// 0, 1, high for 2, 3) of bytes 64n + 32 (i % 2) + 16 hh + 4 tig, with qh's
// 2 bits (2i) of bytes 128 + 32n + 16 hh + 4 tig, minus 32; one load of
// ql, ql + 32 and qh serves a half's four quarters. Scales (signed bytes
// at 192..) times the group sums are added as integers, scaled by d (at
// 208) and the input's scale once a chunk.
constexpr int kRaw6Stride = 240;  // a row's bytes a stage: 60 words, a warp's 8 rows 28 banks apart
constexpr int kRaw6W = kRows * kRaw6Stride;
constexpr int kRaw6Stage = kRaw6W + kRawX + kPairs * 4 + kRows;  // + each row's off
constexpr size_t kRaw6Smem = size_t(2) * kRaw6Stage;
constexpr int kRaw6MinBlocks = 2;  // 77.5 KB of shared memory a block
static_assert(kRaw6W % 16 == 0 && (kRaw6W + kRawX) % 16 == 0);

__global__ void __launch_bounds__(kThreads, kRaw6MinBlocks) mma_raw_q6k_kernel(const MmaArgs a, const ExpertExtras x) {
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int in_rows[kPairs];
    chain_start();
    const MmaTile tl = mma_tile(a, in_rows);
    __syncthreads();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
    const int64_t chunks = a.cols / 256;
    const bool x16 = (reinterpret_cast<uintptr_t>(a.xq) | a.xq_stride) % 16 == 0;
    auto issue = [&](int64_t c, int stage) {
        uint8_t* W = smem + stage * kRaw6Stage;
        uint8_t* X = W + kRaw6W;
        uint8_t* DX = X + kRawX;
        uint8_t* offs = DX + kPairs * 4;
        {  // thread r copies weight row r's block: 53 words from the word at or below it
            static_assert(kThreads == kRows);
            const int r = threadIdx.x;
            const uint8_t* src = raw_row_chunk(a, tl, r, c, 210);
            const int off = int(reinterpret_cast<uintptr_t>(src) & 3);
            const uint8_t* from = src - off;
            const uint32_t dst = shared_address(W + r * kRaw6Stride);
#pragma unroll
            for (int k = 0; k < 53; k++) copy_async4(dst + 4 * k, from + 4 * k, min(4, off + 210 - 4 * k));
            offs[r] = uint8_t(off);
        }
        raw_copy_inputs(a, in_rows, c, X, DX, x16);
        copy_async_commit();
    };
    float acc[2][kNi][4] = {};
    const int row0 = warp * 32 + gid;
    raw_pipeline(chunks, issue, [&](int stage) {
        const uint8_t* W = smem + stage * kRaw6Stage;
        const uint8_t* X = W + kRaw6W;
        const float* DX = reinterpret_cast<const float*>(X + kRawX);
        const uint8_t* offs = X + kRawX + kPairs * 4;
        // The thread's four rows (16 mi + 8 h past row0): where each block
        // starts, and a 32-bit word of it at byte k (k % 4 == 0).
        const uint8_t* rb[2][2];
        int sh[2][2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = row0 + 16 * mi + 8 * h;
                rb[mi][h] = W + r * kRaw6Stride;
                sh[mi][h] = 8 * offs[r];
            }
        }
        auto word = [&](int mi, int h, int k) {
            return __funnelshift_r(lds32(rb[mi][h] + k), lds32(rb[mi][h] + k + 4), sh[mi][h]);
        };
        uint32_t scw[2][2][4];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
#pragma unroll
                for (int k = 0; k < 4; k++) scw[mi][h][k] = word(mi, h, 192 + 4 * k);
            }
        }
        int isum[2][kNi][4] = {};
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                uint32_t ql[2][2][2], qh[2][2];
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        ql[mi][h][0] = word(mi, h, 64 * n + 16 * hh + 4 * tig);
                        ql[mi][h][1] = word(mi, h, 64 * n + 32 + 16 * hh + 4 * tig);
                        qh[mi][h] = word(mi, h, 128 + 32 * n + 16 * hh + 4 * tig);
                    }
                }
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int g = 8 * n + 2 * i + hh;  // the group's scale
                    uint32_t af[2][2], bf[kNi];
#pragma unroll
                    for (int mi = 0; mi < 2; mi++) {
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const uint32_t v = ((ql[mi][h][i % 2] >> (4 * (i / 2))) & 0x0F0F0F0Fu) |
                                               (((qh[mi][h] >> (2 * i)) & 0x03030303u) << 4);
                            af[mi][h] = __vsub4(v, 0x20202020u);
                        }
                    }
#pragma unroll
                    for (int ni = 0; ni < kNi; ni++) {
                        bf[ni] = lds32(X + (8 * ni + gid) * kRawXStride + 128 * n + 32 * i + 16 * hh + 4 * tig);
                    }
#pragma unroll
                    for (int mi = 0; mi < 2; mi++) {
#pragma unroll
                        for (int ni = 0; ni < kNi; ni++) {
                            int cs[4];
                            mma_k16(cs, af[mi], bf[ni]);
#pragma unroll
                            for (int h = 0; h < 2; h++) {
                                const int scv = int(int8_t((scw[mi][h][g / 4] >> (8 * (g % 4))) & 0xFFu));
                                isum[mi][ni][2 * h] += scv * cs[2 * h];
                                isum[mi][ni][2 * h + 1] += scv * cs[2 * h + 1];
                            }
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float d = __half2float(__ushort_as_half(uint16_t(word(mi, h, 208) & 0xFFFFu)));
#pragma unroll
                for (int ni = 0; ni < kNi; ni++) {
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float& o = acc[mi][ni][2 * h + e];
                        o = fmaf(d * DX[8 * ni + 2 * tig + e], __int2float_rn(isum[mi][ni][2 * h + e]), o);
                    }
                }
            }
        }
    });
    mma_store(a, x, tl, acc, smem);
}

template <GgmlType T>
void launch_mma(const char* what, const MmaArgs& a, unsigned n_tiles, cudaStream_t s, const ExpertExtras& x) {
    if (n_tiles == 0) return;
    const int out_rows = a.gate_up ? kRows / 2 : kRows;
    const dim3 grid(unsigned((a.rows + out_rows - 1) / out_rows), n_tiles);
    auto raise = [what](const void* kernel, size_t smem) {
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess) {
            throw std::runtime_error(std::string("CUDA: ") + what + ": shared memory of " + std::to_string(smem) +
                                     " bytes refused");
        }
    };
    if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
        static const bool raised = (raise(reinterpret_cast<const void*>(mma_raw_k4_kernel<T>), raw_smem<T>()), true);
        (void)raised;
        launch(what, mma_raw_k4_kernel<T>, grid, kThreads, raw_smem<T>(), s, a, x);
    } else if constexpr (T == GgmlType::Q6_K) {
        static const bool raised = (raise(reinterpret_cast<const void*>(mma_raw_q6k_kernel), kRaw6Smem), true);
        (void)raised;
        launch(what, mma_raw_q6k_kernel, grid, kThreads, kRaw6Smem, s, a, x);
    } else {
        static const bool raised = (raise(reinterpret_cast<const void*>(mma_kernel<T>), kMmaSmem), true);
        (void)raised;
        launch(what, mma_kernel<T>, grid, kThreads, kMmaSmem, s, a, x);
    }
}

// Float32 weights (a router's; every matrix of a float32 file) over float
// rows, in split_f16.cuh's form: a block takes 64 inputs and 32 outputs (a
// warp 16 inputs against all 32), walks the columns 32 at a time, each
// piece of both operands split into hi and lo planes in shared memory (the
// next piece loaded into registers meanwhile). The batch kernel's float
// dot products ran a 4,096-token pass's 128-expert router at some 1.3
// TFLOP/s (docs/gpu.md, twenty-sixth session's profile).
constexpr int kF32Inputs = 64, kF32Outputs = 32, kF32Piece = 32, kF32Threads = 128;
constexpr int kF32Stride = 2 * kF32Piece + 8;  // halves a shared row: hi, lo, 8 more (an odd number of 16 bytes)

__global__ void __launch_bounds__(kF32Threads) mma_f32_kernel(const float* w, int64_t rows, int64_t cols, int n,
                                                              const float* x, float* y, bool add) {
    __shared__ __align__(16) __half xs[kF32Inputs * kF32Stride];
    __shared__ __align__(16) __half ws[kF32Outputs * kF32Stride];
    constexpr int P4 = kF32Piece / 4;  // float4s a row's piece
    constexpr int XL = kF32Inputs * P4 / kF32Threads, WL = kF32Outputs * P4 / kF32Threads;  // a thread's loads
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t4 = lane % 4;
    const int64_t o0 = int64_t(blockIdx.x) * kF32Outputs;
    const int t0 = int(blockIdx.y) * kF32Inputs;
    chain_start();
    float4 xr[XL], wr[WL];
    auto fetch = [&](int64_t k0) {
#pragma unroll
        for (int i = 0; i < XL; i++) {
            const int e = int(threadIdx.x) + kF32Threads * i, r = e / P4, c = (e % P4) * 4;
            xr[i] = t0 + r < n ? *reinterpret_cast<const float4*>(x + int64_t(t0 + r) * cols + k0 + c)
                               : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < WL; i++) {
            const int e = int(threadIdx.x) + kF32Threads * i, r = e / P4, c = (e % P4) * 4;
            wr[i] = o0 + r < rows ? *reinterpret_cast<const float4*>(w + (o0 + r) * cols + k0 + c)
                                  : make_float4(0, 0, 0, 0);
        }
    };
    float acc[kF32Outputs / 8][4] = {};
    // Lanes' ldmatrix rows: the warp's 16 inputs, dims 0/8 (lo: + a
    // piece); 8 outputs' hi dims 0-7, hi 8-15, lo 0-7, lo 8-15.
    const uint32_t xa = shared_address(xs + (warp * 16 + lane % 16) * kF32Stride + (lane / 16) * 8);
    const uint32_t wb = shared_address(ws + (lane % 8) * kF32Stride + (lane / 8) % 2 * 8 + (lane / 16) * kF32Piece);
    fetch(0);
    for (int64_t k0 = 0; k0 < cols; k0 += kF32Piece) {
        __syncthreads();  // every warp is done with the last piece
#pragma unroll
        for (int i = 0; i < XL; i++) {
            const int e = int(threadIdx.x) + kF32Threads * i, r = e / P4, c = (e % P4) * 4;
            split_store(xr[i], xs + r * kF32Stride + c, xs + r * kF32Stride + kF32Piece + c);
        }
#pragma unroll
        for (int i = 0; i < WL; i++) {
            const int e = int(threadIdx.x) + kF32Threads * i, r = e / P4, c = (e % P4) * 4;
            split_store(wr[i], ws + r * kF32Stride + c, ws + r * kF32Stride + kF32Piece + c);
        }
        __syncthreads();
        if (k0 + kF32Piece < cols) fetch(k0 + kF32Piece);
#pragma unroll
        for (int kk = 0; kk < kF32Piece / 16; kk++) {
            uint32_t ah[4], al[4];
            load_matrices(ah, xa + kk * 32);
            load_matrices(al, xa + (kF32Piece + kk * 16) * 2);
#pragma unroll
            for (int j = 0; j < kF32Outputs / 8; j++) {
                uint32_t b[4];
                load_matrices(b, wb + (j * 8 * kF32Stride + kk * 16) * 2);
                mma_split(acc[j], ah, al, b);
            }
        }
    }
#pragma unroll
    for (int v = 0; v < 2; v++) {
        const int t = t0 + warp * 16 + g + 8 * v;
        if (t >= n) continue;
        float* out = y + int64_t(t) * rows;
#pragma unroll
        for (int j = 0; j < kF32Outputs / 8; j++) {
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int64_t o = o0 + 8 * j + 2 * t4 + u;
                if (o < rows) out[o] = add ? out[o] + acc[j][2 * v + u] : acc[j][2 * v + u];
            }
        }
    }
}

void dispatch(GgmlType t, const char* what, MmaArgs a, unsigned n_tiles, Stream s, const ExpertExtras& x) {
    if (a.cols % 32 != 0) throw std::runtime_error(std::string("CUDA ") + what + ": a width of 32s is needed");
    a.row_bytes = row_bytes(t, a.cols);
    switch (t) {
        case GgmlType::Q4_K: launch_mma<GgmlType::Q4_K>(what, a, n_tiles, native(s), x); break;
        case GgmlType::Q5_K: launch_mma<GgmlType::Q5_K>(what, a, n_tiles, native(s), x); break;
        case GgmlType::Q6_K: launch_mma<GgmlType::Q6_K>(what, a, n_tiles, native(s), x); break;
        case GgmlType::Q8_0: launch_mma<GgmlType::Q8_0>(what, a, n_tiles, native(s), x); break;
        case GgmlType::MXFP4: launch_mma<GgmlType::MXFP4>(what, a, n_tiles, native(s), x); break;
        default: throw std::runtime_error(std::string("CUDA ") + what + ": no tensor-core kernel for " + type_name(t));
    }
}

MmaArgs mma_args(const char* what, const uint8_t* w0, const uint8_t* const* table, const ExpertTiles* tiles, int n,
                 size_t offset, size_t offset2, int64_t rows, int64_t cols, Act x, float* y, bool add) {
    if (!x.q) throw std::runtime_error(std::string("CUDA ") + what + ": the tensor-core kernels read 8-bit x");
    MmaArgs a{.w0 = w0,
              .table = table,
              .t = tiles ? *tiles : ExpertTiles{},
              .n = n,
              .offset = offset,
              .offset2 = offset2,
              .rows = rows,
              .cols = cols,
              .row_bytes = 0,
              .xq = static_cast<const uint8_t*>(x.q),
              .xq_stride = act_bytes(cols),
              .y = y,
              .add = add,
              .gate_up = false};
    return a;
}

}  // namespace

bool mma_supports(GgmlType t) {
    return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::Q8_0 ||
           t == GgmlType::MXFP4;
}

void mma_matmul(GgmlType t, const void* w, int64_t rows, int64_t cols, int n, Act x, float* y, Stream s, bool add) {
    if (n < 1) return;
    const MmaArgs a = mma_args("mma_matmul", static_cast<const uint8_t*>(w), nullptr, nullptr, n, 0, 0, rows, cols,
                               x, y, add);
    dispatch(t, "mma_matmul", a, unsigned((n + kPairs - 1) / kPairs), s, {});
}

void mma_matmul_f32(const float* w, int64_t rows, int64_t cols, int n, const float* x, float* y, Stream s, bool add) {
    if (n < 1) return;
    if (cols % kF32Piece != 0) throw std::runtime_error("CUDA mma_matmul_f32: a width of 32s is needed");
    const dim3 grid(unsigned((rows + kF32Outputs - 1) / kF32Outputs), unsigned((n + kF32Inputs - 1) / kF32Inputs));
    launch("mma_matmul_f32", mma_f32_kernel, grid, kF32Threads, 0, native(s), w, rows, cols, n, x, y, add);
}

void mma_matmul_experts(GgmlType t, const uint8_t* const* table, const ExpertTiles& tiles, size_t offset,
                        int64_t rows, int64_t cols, Act x, float* y, Stream s) {
    const MmaArgs a = mma_args("mma_matmul_experts", nullptr, table, &tiles, 0, offset, 0, rows, cols, x, y, false);
    dispatch(t, "mma_matmul_experts", a, unsigned(tiles.n_tiles), s, {});
}

void mma_gate_up_experts(GgmlType t, const uint8_t* const* table, const ExpertTiles& tiles, size_t offset,
                         size_t offset2, int64_t rows, int64_t cols, Act x, float* h, Stream s,
                         const ExpertExtras& extras) {
    MmaArgs a = mma_args("mma_gate_up_experts", nullptr, table, &tiles, 0, offset, offset2, rows, cols, x, h, false);
    a.gate_up = true;
    dispatch(t, "mma_gate_up_experts", a, unsigned(tiles.n_tiles), s, extras);
}

}  // namespace ms::gpu
