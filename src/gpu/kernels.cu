// The CUDA kernels of gpu.h. Decode is memory-bound: each matrix-vector
// kernel gives a warp two rows, 8 lanes a block of 256 (K-quants) or 32
// weights. Quantized weights meet 8-bit activations (quantize_act: Q8_K
// blocks for the K-quants, Q8_0 for Q8_0 and MXFP4, rounded as
// quant/dot.cpp rounds them) in integer dot products (dp4a), or, where the
// caller gives floats only, float32 activations (the weights dequantized in
// registers as quant/dequant.cpp does). Block layouts are quant/blocks.h's.
// Prefill's kernels (batch_kernel, and the attention, RoPE and routing
// kernels with a token index in their grid) run the same arithmetic over
// many tokens, so each token's outputs are the decode kernels' bits.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/gpu.h"
#include "gpu/block_sum.cuh"
#include "gpu/expert_hidden.cuh"
#include "gpu/half_at.cuh"
#include "gpu/launch.cuh"
#include "gpu/warp_topk.cuh"
#include "ops/gates.h"
#include "quant/blocks.h"

namespace ms::gpu {

namespace {

// float(q) for 0 <= q < 2^23 (less `bias`) without the int-to-float
// instruction, which runs at a quarter of the FMA rate and was what bounded
// the quantized kernels: q in the low mantissa bits of 2^23, minus 2^23.
__device__ __forceinline__ float small_float(uint32_t q, float bias = 0.0f) {
    return __int_as_float(0x4B000000u | q) - (8388608.0f + bias);
}

// One lane's share of a block of weights: the 8 lanes p = lane % 8 of a
// lane group split each block (kWeights weights, kBytes bytes) of a row.
// load() reads the lane's activations once, dot() uses them with one row's
// block, so a warp computing R rows reads x once for all R. weights()
// reads (W) the lane's share of a row's block once for all the inputs a
// warp takes (rows_dot_tokens): the 8-bit units (UnitQ) decode it into
// registers there; the float units keep the block and the part (BlockPart)
// and decode in dot().
template <GgmlType T>
struct Unit;

// The float units' W: the block and the part, decoded in dot().
struct BlockPart {
    const uint8_t* block;
    int p;
};
struct ByBlock {
    using W = BlockPart;
    __device__ static W weights(const uint8_t* block, int p) { return {block, p}; }
};

// Q4_K: lane part p reads 16 bytes of qs: 16 low nibbles (sub-block 2g) and
// 16 high nibbles (2g + 1), g = p / 2. A block is 144 bytes, 16-byte aligned
// in rows that are: d, dmin and the 12 scale bytes come in one 16-byte load.
template <>
struct Unit<GgmlType::Q4_K> : ByBlock {
    static constexpr int kWeights = 256, kBytes = sizeof(BlockQ4_K);
    static constexpr bool kTail = false;
    struct X {
        float4 lo[4], hi[4];
        float sum_lo, sum_hi;
    };
    __device__ static X load(const float* x, int64_t ib, int p) {
        x += ib * kWeights;
        const int g = p / 2, l0 = (p % 2) * 16;
        X v;
        const float4* xl = reinterpret_cast<const float4*>(x + g * 64 + l0);
        v.sum_lo = v.sum_hi = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            v.lo[j] = xl[j];
            v.hi[j] = xl[j + 8];  // 32 floats on
            v.sum_lo += (v.lo[j].x + v.lo[j].y) + (v.lo[j].z + v.lo[j].w);
            v.sum_hi += (v.hi[j].x + v.hi[j].y) + (v.hi[j].z + v.hi[j].w);
        }
        return v;
    }
    __device__ static float dot(const W& held, const X& v) {
        const uint8_t* block = held.block;
        const int p = held.p;
        const int g = p / 2, l0 = (p % 2) * 16;
        const uint4 head = *reinterpret_cast<const uint4*>(block);
        const uint4 qv = *reinterpret_cast<const uint4*>(block + 16 + 32 * g + l0);
        float sc0, m0, sc1, m1;
        scales_k4(head, g, &sc0, &m0, &sc1, &m1);
        const float d = __half2float(__ushort_as_half(uint16_t(head.x & 0xFFFF)));
        const float dmin = __half2float(__ushort_as_half(uint16_t(head.x >> 16)));
        // Words, not a byte pointer into qv: that would put qv in local memory.
        const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
        float lo = 0, hi = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float4 a = v.lo[j], c = v.hi[j];
            const uint32_t w = qw[j];
            lo += small_float(w & 0xF) * a.x + small_float((w >> 8) & 0xF) * a.y +
                  small_float((w >> 16) & 0xF) * a.z + small_float((w >> 24) & 0xF) * a.w;
            hi += small_float((w >> 4) & 0xF) * c.x + small_float((w >> 12) & 0xF) * c.y +
                  small_float((w >> 20) & 0xF) * c.z + small_float(w >> 28) * c.w;
        }
        return d * (sc0 * lo + sc1 * hi) - dmin * (m0 * v.sum_lo + m1 * v.sum_hi);
    }
    // The 6-bit scales and mins of sub-blocks 2g and 2g + 1 (quant's
    // get_scale_min_k4) from the block's first 16 bytes, held in registers.
    template <class N>
    __device__ static void scales_k4(const uint4& h, int g, N* sc0, N* m0, N* sc1, N* m1) {
        // scale bytes q[0..11] are h.y (q0..q3), h.z (q4..q7), h.w (q8..q11)
        const int j0 = 2 * g;
        auto q = [&](int i) -> uint32_t {
            const uint32_t w = i < 4 ? h.y : (i < 8 ? h.z : h.w);
            return (w >> (8 * (i & 3))) & 0xFF;
        };
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int j = j0 + k;
            uint32_t sc, m;
            if (j < 4) {
                sc = q(j) & 63;
                m = q(j + 4) & 63;
            } else {
                sc = (q(j + 4) & 0xF) | ((q(j - 4) >> 6) << 4);
                m = (q(j + 4) >> 4) | ((q(j) >> 6) << 4);
            }
            if (k == 0) *sc0 = N(sc), *m0 = N(m);
            else *sc1 = N(sc), *m1 = N(m);
        }
    }
};

// Q5_K: Q4_K's layout plus a high bit per weight in qh (bit 2g for the low
// nibbles of group g, 2g + 1 for the high ones); 176 bytes, 16-byte aligned.
template <>
struct Unit<GgmlType::Q5_K> : ByBlock {
    static constexpr int kWeights = 256, kBytes = sizeof(BlockQ5_K);
    static constexpr bool kTail = false;
    using X = Unit<GgmlType::Q4_K>::X;
    __device__ static X load(const float* x, int64_t ib, int p) { return Unit<GgmlType::Q4_K>::load(x, ib, p); }
    __device__ static float dot(const W& held, const X& v) {
        const uint8_t* block = held.block;
        const int p = held.p;
        const int g = p / 2, l0 = (p % 2) * 16;
        const uint4 head = *reinterpret_cast<const uint4*>(block);
        const uint4 hv = *reinterpret_cast<const uint4*>(block + 16 + l0);
        const uint4 qv = *reinterpret_cast<const uint4*>(block + 48 + 32 * g + l0);
        float sc0, m0, sc1, m1;
        Unit<GgmlType::Q4_K>::scales_k4(head, g, &sc0, &m0, &sc1, &m1);
        const float d = __half2float(__ushort_as_half(uint16_t(head.x & 0xFFFF)));
        const float dmin = __half2float(__ushort_as_half(uint16_t(head.x >> 16)));
        const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w}, hw[4] = {hv.x, hv.y, hv.z, hv.w};
        float lo = 0, hi = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float* af = &v.lo[j].x;
            const float* cf = &v.hi[j].x;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint32_t q = (qw[j] >> (8 * k)) & 0xFF, h = (hw[j] >> (8 * k)) & 0xFF;
                lo += small_float((q & 0xF) | (((h >> (2 * g)) & 1) << 4)) * af[k];
                hi += small_float((q >> 4) | (((h >> (2 * g + 1)) & 1) << 4)) * cf[k];
            }
        }
        return d * (sc0 * lo + sc1 * hi) - dmin * (m0 * v.sum_lo + m1 * v.sum_hi);
    }
};

// Q6_K: part p takes half n = p / 4 and l in [l0, l0 + 8), l0 = (p % 4) * 8:
// the four weights l, l + 32, l + 64, l + 96 of that half. Blocks are 210
// bytes, so 2-byte loads are the widest aligned ones.
template <>
struct Unit<GgmlType::Q6_K> : ByBlock {
    static constexpr int kWeights = 256, kBytes = sizeof(BlockQ6_K);
    static constexpr bool kTail = false;
    struct X {
        float4 v[4][2];  // [quarter][l0 .. l0 + 8)
    };
    __device__ static X load(const float* x, int64_t ib, int p) {
        x += ib * kWeights;
        const int n = p / 4, l0 = (p % 4) * 8;
        X v;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float4* xv = reinterpret_cast<const float4*>(x + 128 * n + 32 * i + l0);
            v.v[i][0] = xv[0];
            v.v[i][1] = xv[1];
        }
        return v;
    }
    __device__ static float dot(const W& held, const X& v) {
        const uint8_t* block = held.block;
        const int p = held.p;
        const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(block);
        const int n = p / 4, l0 = (p % 4) * 8;
        const float d = half_at(reinterpret_cast<const uint8_t*>(&b->d));
        const uint8_t* ql = b->ql + 64 * n;
        const uint8_t* qh = b->qh + 32 * n;
        const int8_t* sc = b->scales + 8 * n + l0 / 16;
        const uint16_t* lo16 = reinterpret_cast<const uint16_t*>(ql + l0);
        const uint16_t* hi16 = reinterpret_cast<const uint16_t*>(ql + l0 + 32);
        const uint16_t* h16 = reinterpret_cast<const uint16_t*>(qh + l0);
        float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma unroll
        for (int i2 = 0; i2 < 4; i2++) {
            const uint32_t la = lo16[i2], lb = hi16[i2], hh = h16[i2];
            const float* x0 = &v.v[0][i2 / 2].x + 2 * (i2 % 2);
            const float* x1 = &v.v[1][i2 / 2].x + 2 * (i2 % 2);
            const float* x2 = &v.v[2][i2 / 2].x + 2 * (i2 % 2);
            const float* x3 = &v.v[3][i2 / 2].x + 2 * (i2 % 2);
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const uint32_t qa = (la >> (8 * k)) & 0xFF, qb = (lb >> (8 * k)) & 0xFF, h = (hh >> (8 * k)) & 0xFF;
                a0 += small_float((qa & 0xF) | ((h & 3) << 4), 32.0f) * x0[k];
                a1 += small_float((qb & 0xF) | (((h >> 2) & 3) << 4), 32.0f) * x1[k];
                a2 += small_float((qa >> 4) | (((h >> 4) & 3) << 4), 32.0f) * x2[k];
                a3 += small_float((qb >> 4) | (((h >> 6) & 3) << 4), 32.0f) * x3[k];
            }
        }
        return d * (float(sc[0]) * a0 + float(sc[2]) * a1 + float(sc[4]) * a2 + float(sc[6]) * a3);
    }
};

// Blocks of 32 weights read 4 a lane (Q8_0, MXFP4): lane part p's x is
// one float4.
struct Float4Part : ByBlock {
    using X = float4;
    __device__ static X load(const float* x, int64_t ib, int p) {
        return *reinterpret_cast<const float4*>(x + ib * 32 + p * 4);
    }
};

// Q8_0: 8 lanes a block of 32, 4 weights each (34-byte blocks: 2-byte loads).
template <>
struct Unit<GgmlType::Q8_0> : Float4Part {
    static constexpr int kWeights = 32, kBytes = sizeof(BlockQ8_0);
    static constexpr bool kTail = false;
    __device__ static float dot(const W& held, const X& xv) {
        const uint8_t* block = held.block;
        const int p = held.p;
        const uint16_t* q16 = reinterpret_cast<const uint16_t*>(block + 2 + p * 4);
        const uint32_t a = q16[0], b = q16[1];
        // int8 q as (q + 128) - 128: the sign bit flipped is q + 128.
        const float q0 = small_float((a ^ 0x80) & 0xFF, 128.0f), q1 = small_float(((a >> 8) ^ 0x80) & 0xFF, 128.0f),
                    q2 = small_float((b ^ 0x80) & 0xFF, 128.0f), q3 = small_float(((b >> 8) ^ 0x80) & 0xFF, 128.0f);
        return half_at(block) * (q0 * xv.x + q1 * xv.y + q2 * xv.z + q3 * xv.w);
    }
};

// MXFP4: blocks of 32 FP4 (E2M1) weights under an E8M0 scale, 17 bytes
// (byte loads). Lane part p takes weights 4p .. 4p + 3: nibble p / 4 of
// bytes 4 (p % 4) .. + 3 of qs. The codes become kMXFP4's int8 values
// (twice the FP4 values) four at a time through two byte-permute tables,
// and the scale is halved to match (quant's e8m0_half).
__device__ __forceinline__ float e8m0_half(uint32_t e) {
    return __int_as_float(e < 2 ? (0x00200000u << e) : ((e - 1) << 23));
}

__device__ __forceinline__ int mxfp4_values(const uint8_t* block, int p) {
    const uint8_t* q = block + 1 + 4 * (p % 4);
    uint32_t w = q[0] | (uint32_t(q[1]) << 8) | (uint32_t(q[2]) << 16) | (uint32_t(q[3]) << 24);
    w = (w >> (4 * (p / 4))) & 0x0F0F0F0Fu;
    w |= w >> 4;
    const uint32_t idx = (w & 0xFF) | ((w >> 8) & 0xFF00);  // code i in nibble i
    // kMXFP4 by byte: codes 0-7 from the first pair of words, 8-15 (the
    // negative ones) from the second, picked by each code's top bit.
    const uint32_t pos = __byte_perm(0x03020100u, 0x0C080604u, idx & 0x7777u);
    const uint32_t neg = __byte_perm(0xFDFEFF00u, 0xF4F8FAFCu, idx & 0x7777u);
    return int(__byte_perm(pos, neg, 0x3210u | ((idx & 0x8888u) >> 1)));
}

template <>
struct Unit<GgmlType::MXFP4> : Float4Part {
    static constexpr int kWeights = 32, kBytes = sizeof(BlockMXFP4);
    static constexpr bool kTail = false;
    __device__ static float dot(const W& held, const X& xv) {
        const uint8_t* block = held.block;
        const int p = held.p;
        const int v = mxfp4_values(block, p);
        const float s = float(int8_t(v)) * xv.x + float(int8_t(v >> 8)) * xv.y + float(int8_t(v >> 16)) * xv.z +
                        float(int8_t(v >> 24)) * xv.w;
        return e8m0_half(block[0]) * s;
    }
};

// F32 and F16: a "block" of 256 weights, 32 contiguous a lane part; the
// columns past the last whole 256 go through tail().
template <>
struct Unit<GgmlType::F32> : ByBlock {
    static constexpr int kWeights = 256, kBytes = 256 * 4;
    static constexpr bool kTail = true;
    struct X {
        float4 v[8];
    };
    __device__ static X load(const float* x, int64_t ib, int p) {
        X v;
        const float4* xv = reinterpret_cast<const float4*>(x + ib * kWeights + p * 32);
#pragma unroll
        for (int j = 0; j < 8; j++) v.v[j] = xv[j];
        return v;
    }
    __device__ static float dot(const W& held, const X& v) {
        const uint8_t* block = held.block;
        const int p = held.p;
        const float4* w = reinterpret_cast<const float4*>(block) + p * 8;
        float s = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float4 a = w[j];
            s += a.x * v.v[j].x + a.y * v.v[j].y + a.z * v.v[j].z + a.w * v.v[j].w;
        }
        return s;
    }
    __device__ static float weight(const uint8_t* row, int64_t i) { return reinterpret_cast<const float*>(row)[i]; }
};

// The 2-byte float types: F32's lanes and loads, a block's 256 values read
// as words of two, which Half turns into floats (pair) and one value
// (one) for the row's tail.
template <class Half>
struct Unit16 : ByBlock {
    static constexpr int kWeights = 256, kBytes = 256 * 2;
    static constexpr bool kTail = true;
    using X = Unit<GgmlType::F32>::X;
    __device__ static X load(const float* x, int64_t ib, int p) { return Unit<GgmlType::F32>::load(x, ib, p); }
    __device__ static float dot(const W& held, const X& v) {
        const uint8_t* block = held.block;
        const int p = held.p;
        const uint4* w = reinterpret_cast<const uint4*>(block) + p * 4;
        float s = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint4 a = w[j];
            const uint32_t h[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const float2 lo = Half::pair(h[2 * k]), hi = Half::pair(h[2 * k + 1]);
                const float4 xv = v.v[2 * j + k];
                s += lo.x * xv.x + lo.y * xv.y + hi.x * xv.z + hi.y * xv.w;
            }
        }
        return s;
    }
    __device__ static float weight(const uint8_t* row, int64_t i) {
        return Half::one(reinterpret_cast<const uint16_t*>(row)[i]);
    }
};

struct F16Half {
    __device__ static float2 pair(uint32_t w) { return __half22float2(*reinterpret_cast<const __half2*>(&w)); }
    __device__ static float one(uint16_t h) { return __half2float(__ushort_as_half(h)); }
};

// BF16: a value is the high half of a float's bits.
struct BF16Half {
    __device__ static float2 pair(uint32_t w) { return {__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u)}; }
    __device__ static float one(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
};

template <>
struct Unit<GgmlType::F16> : Unit16<F16Half> {};
template <>
struct Unit<GgmlType::BF16> : Unit16<BF16Half> {};

// 8-bit activations (gpu.h's act_bytes layout): a row of n values holds
// its Q8_K values (n bytes), its Q8_0 values (n bytes), the Q8_K scales (a
// float per 256) and the Q8_0 scales (a float per 32, each an fp16 value).
struct ActRow {
    const int8_t* qk;
    const int8_t* q0;
    const float* dk;
    const float* d0;
};

__host__ __device__ constexpr size_t act_row_bytes(int64_t n) {
    return (size_t(2 * n + 4 * (n / 256) + 4 * ((n + 31) / 32)) + 15) & ~size_t(15);
}

__device__ __forceinline__ ActRow act_row(const uint8_t* base, int64_t n) {
    const int8_t* q = reinterpret_cast<const int8_t*>(base);
    const float* d = reinterpret_cast<const float*>(base + 2 * n);
    return {q, q + n, d, d + n / 256};
}

// The sum of a word's four signed bytes, and of an int4's sixteen.
__device__ __forceinline__ int byte_sum(int w, int c = 0) { return __dp4a(w, 0x01010101, c); }
__device__ __forceinline__ int byte_sum(const int4& v) {
    return byte_sum(v.x, byte_sum(v.y, byte_sum(v.z, byte_sum(v.w))));
}

// Lane `lane` of a warp quantizes values 8 lane .. 8 lane + 7 (v) of the
// 256-value chunk b of a row of n values into act: the Q8_K block (its
// scale from the signed value of largest magnitude, the first of equals,
// which maps to -127) and the eight Q8_0 blocks (scale amax / 127 in fp16),
// rounded to nearest even as quant/dot.cpp's quantize_q8_k and
// quantize_q8_32 do. A chunk past n's last whole 256 writes no Q8_K scale.
__device__ void quantize_chunk(const float (&v)[8], int lane, int64_t b, uint8_t* act, int64_t n) {
    int8_t* qk = reinterpret_cast<int8_t*>(act);
    int8_t* q0 = qk + n;
    float* dk = reinterpret_cast<float*>(act + 2 * n);
    float* d0 = dk + n / 256;
    float amax = 0, mx = 0;
    int idx = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const float ax = fabsf(v[k]);
        if (ax > amax) amax = ax, mx = v[k], idx = k;
    }
    idx += 8 * lane;
    float a32 = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    a32 = fmaxf(a32, __shfl_xor_sync(0xffffffffu, a32, 2));
    for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, amax, o), om = __shfl_xor_sync(0xffffffffu, mx, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (oa > amax || (oa == amax && oi < idx)) amax = oa, mx = om, idx = oi;
    }
    const float iscale = amax != 0.0f ? -127.0f / mx : 0.0f;
    const float d = a32 / 127.0f, id = a32 != 0.0f ? 127.0f / a32 : 0.0f;
    uint32_t wk[2] = {0, 0}, w0[2] = {0, 0};
#pragma unroll
    for (int k = 0; k < 8; k++) {
        const int qkv = min(127, __float2int_rn(__fmul_rn(iscale, v[k])));
        const int q0v = __float2int_rn(__fmul_rn(v[k], id));
        wk[k / 4] |= uint32_t(qkv & 0xFF) << (8 * (k % 4));
        w0[k / 4] |= uint32_t(q0v & 0xFF) << (8 * (k % 4));
    }
    const int64_t i0 = b * 256 + 8 * lane;
    if (i0 < n) {
        *reinterpret_cast<uint2*>(qk + i0) = make_uint2(wk[0], wk[1]);
        *reinterpret_cast<uint2*>(q0 + i0) = make_uint2(w0[0], w0[1]);
        if (lane % 4 == 0) d0[i0 / 32] = __half2float(__float2half_rn(d));
    }
    if (lane == 0 && (b + 1) * 256 <= n) dk[b] = amax != 0.0f ? 1.0f / iscale : 0.0f;
}

// The same blocks against 8-bit activations: integer dot products, one
// float scale step a block (as quant/dot.cpp's kernels). Lane part p takes
// the weights Unit<T> gives it; x comes as the matching bytes of the row's
// Q8_K (or Q8_0) values, whose sums stand in for the weights' offsets.
template <GgmlType T>
struct UnitQ;

template <>
struct UnitQ<GgmlType::Q4_K> {
    static constexpr int kWeights = 256, kBytes = sizeof(BlockQ4_K);
    static constexpr bool kTail = false;
    struct X {
        int4 lo, hi;  // sub-block 2g's 16 values from l0, sub-block 2g + 1's
        int sum_lo, sum_hi;
        float d;
    };
    __device__ static X load(const ActRow& a, int64_t ib, int p) {
        const int8_t* q = a.qk + ib * 256 + (p / 2) * 64 + (p % 2) * 16;
        X v;
        v.lo = *reinterpret_cast<const int4*>(q);
        v.hi = *reinterpret_cast<const int4*>(q + 32);
        v.sum_lo = byte_sum(v.lo);
        v.sum_hi = byte_sum(v.hi);
        v.d = a.dk[ib];
        return v;
    }
    // The part's scales and mins (sub-blocks 2g, 2g + 1) and d, dmin: what
    // Q5_K shares.
    struct Scales {
        int sc0, m0, sc1, m1;
        float d, dmin;
    };
    __device__ static Scales scales(const uint8_t* block, int g) {
        const uint4 head = *reinterpret_cast<const uint4*>(block);
        Scales k;
        Unit<GgmlType::Q4_K>::scales_k4(head, g, &k.sc0, &k.m0, &k.sc1, &k.m1);
        k.d = __half2float(__ushort_as_half(uint16_t(head.x & 0xFFFF)));
        k.dmin = __half2float(__ushort_as_half(uint16_t(head.x >> 16)));
        return k;
    }
    struct W {
        Scales k;
        uint4 qv;
    };
    __device__ static W weights(const uint8_t* block, int p) {
        const int g = p / 2, l0 = (p % 2) * 16;
        return {scales(block, g), *reinterpret_cast<const uint4*>(block + 16 + 32 * g + l0)};
    }
    // w's four 5-bit values (nibbles, plus bit `bit` of h's bytes as the fifth) against x's four bytes.
    __device__ static int dot4(uint32_t nib, int x, int c) { return __dp4a(int(nib & 0x0F0F0F0Fu), x, c); }
    __device__ static float finish(const Scales& k, int lo, int hi, const X& v) {
        return v.d * (k.d * float(k.sc0 * lo + k.sc1 * hi) - k.dmin * float(k.m0 * v.sum_lo + k.m1 * v.sum_hi));
    }
    __device__ static float dot(const W& w, const X& v) {
        const uint4 qv = w.qv;
        int lo = dot4(qv.x, v.lo.x, 0), hi = dot4(qv.x >> 4, v.hi.x, 0);
        lo = dot4(qv.y, v.lo.y, lo), hi = dot4(qv.y >> 4, v.hi.y, hi);
        lo = dot4(qv.z, v.lo.z, lo), hi = dot4(qv.z >> 4, v.hi.z, hi);
        lo = dot4(qv.w, v.lo.w, lo), hi = dot4(qv.w >> 4, v.hi.w, hi);
        return finish(w.k, lo, hi, v);
    }
};

template <>
struct UnitQ<GgmlType::Q5_K> {
    static constexpr int kWeights = 256, kBytes = sizeof(BlockQ5_K);
    static constexpr bool kTail = false;
    using Q4 = UnitQ<GgmlType::Q4_K>;
    using X = Q4::X;
    __device__ static X load(const ActRow& a, int64_t ib, int p) { return Q4::load(a, ib, p); }
    // Four 5-bit values: the nibbles of q, the fifth bits from bit `bit` of h's bytes.
    __device__ static int dot5(uint32_t q, uint32_t h, int bit, int x, int c) {
        return __dp4a(int((q & 0x0F0F0F0Fu) | (((h >> bit) & 0x01010101u) << 4)), x, c);
    }
    struct W {
        Q4::Scales k;
        uint4 qv, hv;
        int g;
    };
    __device__ static W weights(const uint8_t* block, int p) {
        const int g = p / 2, l0 = (p % 2) * 16;
        return {Q4::scales(block, g), *reinterpret_cast<const uint4*>(block + 48 + 32 * g + l0),
                *reinterpret_cast<const uint4*>(block + 16 + l0), g};
    }
    __device__ static float dot(const W& w, const X& v) {
        const uint4 qv = w.qv, hv = w.hv;
        const int b0 = 2 * w.g, b1 = 2 * w.g + 1;
        int lo = dot5(qv.x, hv.x, b0, v.lo.x, 0), hi = dot5(qv.x >> 4, hv.x, b1, v.hi.x, 0);
        lo = dot5(qv.y, hv.y, b0, v.lo.y, lo), hi = dot5(qv.y >> 4, hv.y, b1, v.hi.y, hi);
        lo = dot5(qv.z, hv.z, b0, v.lo.z, lo), hi = dot5(qv.z >> 4, hv.z, b1, v.hi.z, hi);
        lo = dot5(qv.w, hv.w, b0, v.lo.w, lo), hi = dot5(qv.w >> 4, hv.w, b1, v.hi.w, hi);
        return Q4::finish(w.k, lo, hi, v);
    }
};

// Q6_K: part p's weights as in Unit<Q6_K> (half n = p / 4, l in [l0, l0 +
// 8) of each quarter); the -32 offset comes in through the x sums.
template <>
struct UnitQ<GgmlType::Q6_K> {
    static constexpr int kWeights = 256, kBytes = sizeof(BlockQ6_K);
    static constexpr bool kTail = false;
    struct X {
        int2 q[4];  // [quarter]: values l0 .. l0 + 8
        int sum[4];
        float d;
    };
    __device__ static X load(const ActRow& a, int64_t ib, int p) {
        const int8_t* q = a.qk + ib * 256 + 128 * (p / 4) + (p % 4) * 8;
        X v;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v.q[i] = *reinterpret_cast<const int2*>(q + 32 * i);
            v.sum[i] = byte_sum(v.q[i].x, byte_sum(v.q[i].y));
        }
        v.d = a.dk[ib];
        return v;
    }
    struct W {
        uint32_t la[2], lb[2], hh[2];
        int sc[4];
        float d;
    };
    __device__ static W weights(const uint8_t* block, int p) {
        const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(block);
        const int n = p / 4, l0 = (p % 4) * 8;
        const int8_t* sc = b->scales + 8 * n + l0 / 16;
        // 210-byte blocks: 2-byte loads are the widest aligned ones.
        const uint16_t* lo16 = reinterpret_cast<const uint16_t*>(b->ql + 64 * n + l0);
        const uint16_t* hi16 = reinterpret_cast<const uint16_t*>(b->ql + 64 * n + 32 + l0);
        const uint16_t* h16 = reinterpret_cast<const uint16_t*>(b->qh + 32 * n + l0);
        W wt;
#pragma unroll
        for (int w = 0; w < 2; w++) {
            wt.la[w] = lo16[2 * w] | (uint32_t(lo16[2 * w + 1]) << 16);
            wt.lb[w] = hi16[2 * w] | (uint32_t(hi16[2 * w + 1]) << 16);
            wt.hh[w] = h16[2 * w] | (uint32_t(h16[2 * w + 1]) << 16);
        }
        for (int i = 0; i < 4; i++) wt.sc[i] = sc[2 * i];
        wt.d = half_at(reinterpret_cast<const uint8_t*>(&b->d));
        return wt;
    }
    __device__ static float dot(const W& wt, const X& v) {
        int a[4] = {0, 0, 0, 0};
#pragma unroll
        for (int w = 0; w < 2; w++) {
            const uint32_t la = wt.la[w], lb = wt.lb[w], hh = wt.hh[w];
            const int x0 = w ? v.q[0].y : v.q[0].x, x1 = w ? v.q[1].y : v.q[1].x;
            const int x2 = w ? v.q[2].y : v.q[2].x, x3 = w ? v.q[3].y : v.q[3].x;
            a[0] = __dp4a(int((la & 0x0F0F0F0Fu) | ((hh & 0x03030303u) << 4)), x0, a[0]);
            a[1] = __dp4a(int((lb & 0x0F0F0F0Fu) | (((hh >> 2) & 0x03030303u) << 4)), x1, a[1]);
            a[2] = __dp4a(int(((la >> 4) & 0x0F0F0F0Fu) | (((hh >> 4) & 0x03030303u) << 4)), x2, a[2]);
            a[3] = __dp4a(int(((lb >> 4) & 0x0F0F0F0Fu) | (((hh >> 6) & 0x03030303u) << 4)), x3, a[3]);
        }
        const int s = wt.sc[0] * (a[0] - 32 * v.sum[0]) + wt.sc[1] * (a[1] - 32 * v.sum[1]) +
                      wt.sc[2] * (a[2] - 32 * v.sum[2]) + wt.sc[3] * (a[3] - 32 * v.sum[3]);
        return wt.d * v.d * float(s);
    }
};

// Q8_0 against Q8_0 activations: 8 lanes a block of 32, 4 weights each.
template <>
struct UnitQ<GgmlType::Q8_0> {
    static constexpr int kWeights = 32, kBytes = sizeof(BlockQ8_0);
    static constexpr bool kTail = false;
    struct X {
        int q;
        float d;
    };
    __device__ static X load(const ActRow& a, int64_t ib, int p) {
        return {*reinterpret_cast<const int*>(a.q0 + ib * 32 + 4 * p), a.d0[ib]};
    }
    struct W {
        int q;
        float d;
    };
    __device__ static W weights(const uint8_t* block, int p) {
        const uint16_t* q16 = reinterpret_cast<const uint16_t*>(block + 2 + p * 4);
        return {int(q16[0] | (uint32_t(q16[1]) << 16)), half_at(block)};
    }
    __device__ static float dot(const W& w, const X& v) { return w.d * v.d * float(__dp4a(w.q, v.q, 0)); }
};

// MXFP4 against Q8_0 activations (as the CPU's kernels take them).
template <>
struct UnitQ<GgmlType::MXFP4> {
    static constexpr int kWeights = 32, kBytes = sizeof(BlockMXFP4);
    static constexpr bool kTail = false;
    using X = UnitQ<GgmlType::Q8_0>::X;
    __device__ static X load(const ActRow& a, int64_t ib, int p) { return UnitQ<GgmlType::Q8_0>::load(a, ib, p); }
    using W = UnitQ<GgmlType::Q8_0>::W;
    __device__ static W weights(const uint8_t* block, int p) { return {mxfp4_values(block, p), e8m0_half(block[0])}; }
    __device__ static float dot(const W& w, const X& v) { return w.d * v.d * float(__dp4a(w.q, v.q, 0)); }
};

template <GgmlType T>
constexpr bool kQuantized = T != GgmlType::F32 && T != GgmlType::F16 && T != GgmlType::BF16;

// Lane `lane`'s share, for each of R rows w[r] and each of NT inputs x[t],
// of dot(row, x[t]) over `cols` weights: lane groups of 8 take blocks ib =
// lane / 8 + 4 * part, stepping 4 * nparts (nparts warps share the rows).
// U is a Unit (x: floats) or a UnitQ (x: an ActRow). Each input's sums
// take the same steps whatever NT is, so a prefill pass over many tokens
// gives each the bits a decode step gives it. Only the first `count`
// inputs are summed (a tile's others are left 0): a batched decode step's
// experts mostly take one or two of a tile's NT.
template <class U, int R, int NT, class XS>
__device__ __forceinline__ void rows_dot_tokens(const uint8_t* const (&w)[R], int64_t cols, const XS (&x)[NT],
                                                int lane, int part, int nparts, float (&s)[NT][R], int count = NT) {
    const int64_t nb = cols / U::kWeights;
    const int p = lane % 8;
#pragma unroll
    for (int t = 0; t < NT; t++) {
#pragma unroll
        for (int r = 0; r < R; r++) s[t][r] = 0;
    }
    for (int64_t ib = int64_t(part) * 4 + lane / 8; ib < nb; ib += 4 * nparts) {
        typename U::W held[R];
#pragma unroll
        for (int r = 0; r < R; r++) held[r] = U::weights(w[r] + ib * U::kBytes, p);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= count) break;
            const typename U::X xs = U::load(x[t], ib, p);
#pragma unroll
            for (int r = 0; r < R; r++) s[t][r] += U::dot(held[r], xs);
        }
    }
    if constexpr (U::kTail) {
        for (int64_t i = nb * U::kWeights + part * 32 + lane; i < cols; i += 32 * nparts) {
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= count) break;
#pragma unroll
                for (int r = 0; r < R; r++) s[t][r] += U::weight(w[r], i) * x[t][i];
            }
        }
    }
}

// rows_dot_tokens of one input.
template <class U, int R, class XS>
__device__ __forceinline__ void rows_dot(const uint8_t* const (&w)[R], int64_t cols, const XS& x, int lane, int part,
                                         int nparts, float (&s)[R]) {
    const XS xs[1] = {x};
    float st[1][R];
    rows_dot_tokens<U, R, 1>(w, cols, xs, lane, part, nparts, st);
#pragma unroll
    for (int r = 0; r < R; r++) s[r] = st[0][r];
}

// One warp: k rounds of a warp-wide argmax over the logits (the lower id
// on a tie), then the chosen probabilities from a softmax over all, as
// model/moe.cpp does (its sum in double, in id order by lane strides here),
// or over the chosen logits only (over_chosen).
__global__ void route_kernel(const float* logits, int n_expert, int k, bool renorm, int32_t* ids, float* weights,
                             bool over_chosen) {
    chain_start();
    logits += int64_t(blockIdx.x) * n_expert;  // prefill: a block a token
    ids += int64_t(blockIdx.x) * k;
    weights += int64_t(blockIdx.x) * k;
    __shared__ uint32_t taken[32];
    __shared__ int32_t chosen[32];
    __shared__ float l[1024];  // the logits, read once (each round scans them)
    const int lane = threadIdx.x % 32;
    for (int e = lane; e < n_expert; e += 32) l[e] = logits[e];
    __syncwarp();
    warp_topk(l, n_expert, k, taken, chosen, ids);
    const float mx = l[chosen[0]];
    double sum = 0;
    if (over_chosen) {
        for (int r = 0; r < k; r++) sum += double(expf(l[chosen[r]] - mx));
    } else {
        for (int e = lane; e < n_expert; e += 32) sum += double(expf(l[e] - mx));
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    if (lane != 0) return;
    const float inv = float(1.0 / sum);
    float wsum = 0;
    for (int r = 0; r < k; r++) {
        weights[r] = expf(l[chosen[r]] - mx) * inv;
        wsum += weights[r];
    }
    if (renorm) {
        for (int r = 0; r < k; r++) weights[r] /= wsum;
    }
}

// What a matvec launch computes: blockIdx.y picks a matrix (an expert's,
// through table, when table is set; the second `pair` of them at offset2
// writing after the first n outputs); y is written, or added to (add).
// nparts warps (1 or 4) share each group of 2 rows. x: floats, and, when
// xq is set, its 8-bit rows (act_row_bytes(cols) apart where x_stride is).
struct MatvecArgs {
    const uint8_t* w0;
    const uint8_t* const* table;
    const int32_t* ids;
    int n;  // matrices per pair
    size_t offset, offset2;
    int64_t rows, cols;
    size_t row_bytes;
    const float* x;
    int64_t x_stride;
    float* y;
    bool add;
    int nparts;
    const uint8_t* xq;
    size_t xq_stride;
};

constexpr int kWarps = 4;  // a matvec block's warps

// rows_dot over input row e of a (8-bit when Q).
template <GgmlType T, bool Q, int R>
__device__ __forceinline__ void dot_rows(const uint8_t* const (&w)[R], const MatvecArgs& a, int e, int lane, int part,
                                         int nparts, float (&s)[R]) {
    if constexpr (Q) {
        rows_dot<UnitQ<T>, R>(w, a.cols, act_row(a.xq + e * a.xq_stride, a.cols), lane, part, nparts, s);
    } else {
        rows_dot<Unit<T>, R>(w, a.cols, a.x + e * a.x_stride, lane, part, nparts, s);
    }
}

template <GgmlType T, bool Q>
__global__ void __launch_bounds__(32 * kWarps) matvec_kernel(const MatvecArgs a) {
    constexpr int R = 2;
    __shared__ float part_sum[kWarps][R];
    const int e = blockIdx.y % a.n, second = blockIdx.y / a.n;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int groups = kWarps / a.nparts, part = warp % a.nparts;
    if (!a.table && threadIdx.x == 0) {  // a matrix of its own, which no kernel writes: its block's rows
        const int64_t first = int64_t(blockIdx.x) * groups * R;
        prefetch_l2(a.w0 + first * a.row_bytes, size_t(min(int64_t(groups * R), a.rows - first)) * a.row_bytes);
    }
    chain_start();
    const uint8_t* w = a.table ? (a.ids ? a.table[a.ids[e]] : a.table[e]) + (second ? a.offset2 : a.offset) : a.w0;
    float* y = a.y + int64_t(blockIdx.y) * a.rows;
    const int64_t r0 = (int64_t(blockIdx.x) * groups + warp / a.nparts) * R;
    const uint8_t* rows[R];
#pragma unroll
    for (int r = 0; r < R; r++) rows[r] = w + min(r0 + r, a.rows - 1) * a.row_bytes;  // clamped: written below if < rows
    float s[R];
    dot_rows<T, Q, R>(rows, a, e, lane, part, a.nparts, s);
#pragma unroll
    for (int r = 0; r < R; r++) s[r] = warp_sum(s[r]);
    if (a.nparts > 1) {
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; r++) part_sum[warp][r] = s[r];
        }
        __syncthreads();
        if (part == 0) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                float t = part_sum[warp][r];
                for (int q = 1; q < a.nparts; q++) t += part_sum[warp + q][r];
                s[r] = t;
            }
        }
    }
    if (lane == 0 && part == 0) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r0 + r < a.rows) y[r0 + r] = a.add ? y[r0 + r] + s[r] : s[r];
        }
    }
}

// Up to three matrices of any of the types, all reading x (a layer's q, k
// and v), in one launch: the grid's blocks are cut into one run a matrix,
// a warp two rows.
struct MatvecSegment {
    const uint8_t* w;
    float* y;
    int64_t rows;
    size_t row_bytes;
    GgmlType type;
    unsigned first_block;
};

struct MultiArgs {
    MatvecSegment seg[3];
    int n;
    int64_t cols;
    const float* x;
    const uint8_t* xq;
};

template <GgmlType T, bool Q>
__device__ void segment_rows(const MatvecSegment& g, const MultiArgs& m, unsigned block) {
    const int lane = threadIdx.x % 32;
    const int64_t r0 = (int64_t(block) * kWarps + threadIdx.x / 32) * 2;
    if (r0 >= g.rows) return;
    const uint8_t* rows[2] = {g.w + r0 * g.row_bytes, g.w + min(r0 + 1, g.rows - 1) * g.row_bytes};
    float s[2];
    if constexpr (Q) {
        rows_dot<UnitQ<T>, 2>(rows, m.cols, act_row(m.xq, m.cols), lane, 0, 1, s);
    } else {
        rows_dot<Unit<T>, 2>(rows, m.cols, m.x, lane, 0, 1, s);
    }
    s[0] = warp_sum(s[0]);
    s[1] = warp_sum(s[1]);
    if (lane == 0) {
        g.y[r0] = s[0];
        if (r0 + 1 < g.rows) g.y[r0 + 1] = s[1];
    }
}

template <bool Q>
__global__ void __launch_bounds__(32 * kWarps) matvec_multi_kernel(const MultiArgs a) {
    int i = 0;
    while (i + 1 < a.n && blockIdx.x >= a.seg[i + 1].first_block) i++;
    const MatvecSegment& g = a.seg[i];
    const unsigned block = blockIdx.x - g.first_block;
    const int64_t first = int64_t(block) * kWarps * 2;  // the block's rows (segment_rows)
    if (threadIdx.x == 0 && first < g.rows) {
        prefetch_l2(g.w + first * g.row_bytes, size_t(min(int64_t(kWarps * 2), g.rows - first)) * g.row_bytes);
    }
    chain_start();
    switch (g.type) {
        case GgmlType::F32: segment_rows<GgmlType::F32, false>(g, a, block); break;
        case GgmlType::F16: segment_rows<GgmlType::F16, false>(g, a, block); break;
        case GgmlType::BF16: segment_rows<GgmlType::BF16, false>(g, a, block); break;
        case GgmlType::Q8_0: segment_rows<GgmlType::Q8_0, Q>(g, a, block); break;
        case GgmlType::Q4_K: segment_rows<GgmlType::Q4_K, Q>(g, a, block); break;
        case GgmlType::Q5_K: segment_rows<GgmlType::Q5_K, Q>(g, a, block); break;
        case GgmlType::Q6_K: segment_rows<GgmlType::Q6_K, Q>(g, a, block); break;
        case GgmlType::MXFP4: segment_rows<GgmlType::MXFP4, Q>(g, a, block); break;
        default: break;
    }
}

// Gate and up of n experts with SwiGLU: warp computes gate and up rows r and
// r + 1 of expert blockIdx.y (one read of x for the four) and writes
// h[e * rows + r] = silu(gate) * up.
template <GgmlType T, bool Q>
__global__ void __launch_bounds__(32 * kWarps) gate_up_kernel(const MatvecArgs a, const ExpertExtras x) {
    chain_start();
    const int e = blockIdx.y;
    const uint8_t* w = (a.ids ? a.table[a.ids[e]] : a.table[e]);
    const int lane = threadIdx.x % 32;
    const int64_t r0 = (int64_t(blockIdx.x) * kWarps + threadIdx.x / 32) * 2;
    const int64_t r1 = min(r0 + 1, a.rows - 1);
    const uint8_t* rows[4] = {w + a.offset + r0 * a.row_bytes, w + a.offset + r1 * a.row_bytes,
                              w + a.offset2 + r0 * a.row_bytes, w + a.offset2 + r1 * a.row_bytes};
    if (r0 >= a.rows) return;
    float s[4];
    dot_rows<T, Q, 4>(rows, a, x.own_input ? e : 0, lane, 0, 1, s);
#pragma unroll
    for (int r = 0; r < 4; r++) s[r] = warp_sum(s[r]);
    if (lane == 0) {
        const int id = x.ids ? x.ids[e] : a.ids ? a.ids[e] : e;
        float* h = a.y + int64_t(e) * a.rows;
        h[r0] = expert_hidden(s[0], s[2], x, id, a.rows, r0);
        if (r0 + 1 < a.rows) h[r0 + 1] = expert_hidden(s[1], s[3], x, id, a.rows, r0 + 1);
    }
}

// Down of n experts and their weighted sum into the residual: warp e
// computes rows r0, r0 + 1 of expert e (its input row e of x), then
// y[r] += sum over e, in order, of weights[e] * that row: the same sum
// whatever order the warps finish in.
template <GgmlType T, bool Q>
__global__ void down_combine_kernel(const MatvecArgs a, const float* weights, const ExpertExtras x) {
    chain_start();
    __shared__ float part_sum[32][2];
    const int lane = threadIdx.x % 32, e = threadIdx.x / 32;
    const uint8_t* w = (a.ids ? a.table[a.ids[e]] : a.table[e]) + a.offset;
    const int64_t r0 = int64_t(blockIdx.x) * 2, r1 = min(r0 + 1, a.rows - 1);
    const uint8_t* rows[2] = {w + r0 * a.row_bytes, w + r1 * a.row_bytes};
    float s[2];
    dot_rows<T, Q, 2>(rows, a, e, lane, 0, 1, s);
    s[0] = warp_sum(s[0]);
    s[1] = warp_sum(s[1]);
    if (lane == 0) part_sum[e][0] = s[0], part_sum[e][1] = s[1];
    __syncthreads();
    if (threadIdx.x < 2 && r0 + threadIdx.x < a.rows) {
        const int64_t r = r0 + threadIdx.x;
        float acc = 0;
        for (int k = 0; k < a.n; k++) {
            const int id = x.ids ? x.ids[k] : a.ids ? a.ids[k] : k;
            acc += weights[k] * biased(part_sum[k][threadIdx.x], x.down_bias, id, a.rows, r);
        }
        a.y[r] += acc;
    }
}

// Prefill: one matrix (or each expert's) over many inputs. Each warp
// takes rows r0, r0 + 1 (and, for gate/up, the up matrix's too: R = 4) of
// a tile of up to NT inputs, with the lanes, the parts and the additions
// of the decode kernel that computes them one input at a time
// (matvec_kernel with the same nparts, segment_rows with nparts 1,
// gate_up_kernel, down_combine_kernel's dot products), so every output is
// bit for bit the decode step's. Tiles: dense, NT consecutive inputs and
// outputs; experts, `tiles` holds three ints a tile (the expert, its first
// pair, its pairs) and pair j reads input row in_row[j] and writes output
// row out_row[j].
struct BatchArgs {
    const uint8_t* w0;
    const uint8_t* const* table;
    const int32_t* tiles;
    const int32_t* in_row;
    const int32_t* out_row;
    int n;  // dense: inputs
    size_t offset, offset2;
    int64_t rows, cols;
    size_t row_bytes;
    const float* x;  // input rows of cols floats
    const uint8_t* xq;  // and their 8-bit rows (act_row_bytes(cols) apart), when set
    float* y;  // output rows of `rows` floats
    bool add;
    int nparts;
};

template <GgmlType T, bool Q, int R>
__global__ void __launch_bounds__(32 * kWarps) batch_kernel(const BatchArgs a, const ExpertExtras x) {
    constexpr int NT = kExpertTile;
    __shared__ float part_sum[kWarps][NT][R];
    chain_start();
    int first = int(blockIdx.y) * NT, count = min(NT, a.n - first);
    const uint8_t* w = a.w0;
    int id = 0;  // the tile's expert
    if (a.tiles) {
        const int32_t* tile = a.tiles + 3 * blockIdx.y;
        id = tile[0];
        w = a.table[id];
        first = tile[1];
        count = tile[2];
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int groups = kWarps / a.nparts, part = warp % a.nparts;
    const int64_t r0 = (int64_t(blockIdx.x) * groups + warp / a.nparts) * 2;
    const int64_t r1 = min(r0 + 1, a.rows - 1);
    const int64_t rc = min(r0, a.rows - 1);  // clamped: written below only if < rows
    const uint8_t* rows[R];
    rows[0] = w + a.offset + rc * a.row_bytes;
    rows[1] = w + a.offset + r1 * a.row_bytes;
    if constexpr (R == 4) {
        rows[2] = w + a.offset2 + rc * a.row_bytes;
        rows[3] = w + a.offset2 + r1 * a.row_bytes;
    }
    int in[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const int j = first + min(t, count - 1);  // past count: the last again, not written
        in[t] = a.tiles ? a.in_row[j] : j;
    }
    float s[NT][R];
    if constexpr (Q) {
        ActRow xs[NT];
        const size_t stride = act_row_bytes(a.cols);
#pragma unroll
        for (int t = 0; t < NT; t++) xs[t] = act_row(a.xq + in[t] * stride, a.cols);
        rows_dot_tokens<UnitQ<T>, R, NT>(rows, a.cols, xs, lane, part, a.nparts, s, count);
    } else {
        const float* xs[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) xs[t] = a.x + int64_t(in[t]) * a.cols;
        rows_dot_tokens<Unit<T>, R, NT>(rows, a.cols, xs, lane, part, a.nparts, s, count);
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t >= count) break;
#pragma unroll
        for (int r = 0; r < R; r++) s[t][r] = warp_sum(s[t][r]);
    }
    if (a.nparts > 1) {
        if (lane == 0) {
#pragma unroll
            for (int t = 0; t < NT; t++) {
#pragma unroll
                for (int r = 0; r < R; r++) part_sum[warp][t][r] = s[t][r];
            }
        }
        __syncthreads();
        if (part == 0) {
#pragma unroll
            for (int t = 0; t < NT; t++) {
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float v = part_sum[warp][t][r];
                    for (int q = 1; q < a.nparts; q++) v += part_sum[warp + q][t][r];
                    s[t][r] = v;
                }
            }
        }
    }
    if (lane != 0 || part != 0 || r0 >= a.rows) return;
    for (int t = 0; t < count; t++) {
        const int64_t out = a.tiles ? a.out_row[first + t] : first + t;
        float* y = a.y + out * a.rows;
        if constexpr (R == 4) {
            y[r0] = expert_hidden(s[t][0], s[t][2], x, id, a.rows, r0);
            if (r0 + 1 < a.rows) y[r0 + 1] = expert_hidden(s[t][1], s[t][3], x, id, a.rows, r0 + 1);
        } else {
            y[r0] = a.add ? y[r0] + s[t][0] : s[t][0];
            if (r0 + 1 < a.rows) y[r0 + 1] = a.add ? y[r0 + 1] + s[t][1] : s[t][1];
        }
    }
}

// x[t * width + r] += the sum over i < k, in order, of weights[t * k + i] *
// out[(t * k + i) * width + r] (biased by the expert's down_bias row):
// down_combine_kernel's sum, of n tokens.
__global__ void combine_experts_kernel(const float* out, const float* weights, int n, int k, int64_t width, float* x,
                                       const float* down_bias, const int32_t* ids) {
    chain_start();
    const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int t = blockIdx.y;
    if (r >= width || t >= n) return;
    float acc = 0;
    for (int i = 0; i < k; i++) {
        const int64_t j = int64_t(t) * k + i;
        acc += weights[j] * biased(out[j * width + r], down_bias, down_bias ? ids[j] : 0, width, r);
    }
    x[int64_t(t) * width + r] += acc;
}

int sm_count() {
    static const int n = [] {
        int d = 0, v = 0;
        cudaGetDevice(&d);
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, d);
        return v > 0 ? v : 1;
    }();
    return n;
}

// The warps that share each row pair of a matvec launch of n_launch
// matrices of `rows` rows: four when one warp a pair would leave the device
// short of blocks (the router's 128 rows, k and v), else one.
int matvec_parts(int64_t rows, int n_launch) {
    const int64_t groups = (rows + 1) / 2;
    return groups * n_launch / kWarps < 2 * sm_count() ? kWarps : 1;
}

template <GgmlType T>
void launch_matvec(MatvecArgs a, int n_launch, cudaStream_t s) {
    a.row_bytes = row_bytes(T, a.cols);
    const int64_t groups = (a.rows + 1) / 2;
    a.nparts = matvec_parts(a.rows, n_launch);
    const int64_t per_block = kWarps / a.nparts;
    const dim3 grid(unsigned((groups + per_block - 1) / per_block), unsigned(n_launch));
    if (kQuantized<T> && a.xq) {
        launch("matvec", matvec_kernel<T, kQuantized<T>>, grid, 32 * kWarps, 0, s, a);
    } else {
        launch("matvec", matvec_kernel<T, false>, grid, 32 * kWarps, 0, s, a);
    }
}

template <GgmlType T>
void launch_gate_up(MatvecArgs a, const ExpertExtras& x, cudaStream_t s) {
    a.row_bytes = row_bytes(T, a.cols);
    const dim3 grid(unsigned((a.rows + 2 * kWarps - 1) / (2 * kWarps)), unsigned(a.n));
    if (kQuantized<T> && a.xq) {
        launch("expert_gate_up", gate_up_kernel<T, kQuantized<T>>, grid, 32 * kWarps, 0, s, a, x);
    } else {
        launch("expert_gate_up", gate_up_kernel<T, false>, grid, 32 * kWarps, 0, s, a, x);
    }
}

template <GgmlType T>
void launch_down_combine(MatvecArgs a, const float* weights, const ExpertExtras& x, cudaStream_t s) {
    a.row_bytes = row_bytes(T, a.cols);
    const unsigned grid = unsigned((a.rows + 1) / 2);
    if (kQuantized<T> && a.xq) {
        launch("expert_down_add", down_combine_kernel<T, kQuantized<T>>, grid, 32 * a.n, 0, s, a, weights, x);
    } else {
        launch("expert_down_add", down_combine_kernel<T, false>, grid, 32 * a.n, 0, s, a, weights, x);
    }
}

// A batch_kernel launch of n_tiles tiles; a.nparts set.
template <GgmlType T, int R>
void launch_batch(const char* what, BatchArgs a, unsigned n_tiles, cudaStream_t s, const ExpertExtras& x = {}) {
    if (n_tiles == 0) return;
    a.row_bytes = row_bytes(T, a.cols);
    const int64_t groups = (a.rows + 1) / 2, per_block = kWarps / a.nparts;
    const dim3 grid(unsigned((groups + per_block - 1) / per_block), n_tiles);
    if (kQuantized<T> && a.xq) {
        launch(what, batch_kernel<T, kQuantized<T>, R>, grid, 32 * kWarps, 0, s, a, x);
    } else {
        launch(what, batch_kernel<T, false, R>, grid, 32 * kWarps, 0, s, a, x);
    }
}

#define MS_TYPE_SWITCH(t, CALL)                                   \
    switch (t) {                                                  \
        case GgmlType::F32: CALL(GgmlType::F32); break;           \
        case GgmlType::F16: CALL(GgmlType::F16); break;           \
        case GgmlType::BF16: CALL(GgmlType::BF16); break;         \
        case GgmlType::Q8_0: CALL(GgmlType::Q8_0); break;         \
        case GgmlType::Q4_K: CALL(GgmlType::Q4_K); break;         \
        case GgmlType::Q5_K: CALL(GgmlType::Q5_K); break;         \
        case GgmlType::Q6_K: CALL(GgmlType::Q6_K); break;         \
        case GgmlType::MXFP4: CALL(GgmlType::MXFP4); break;       \
        default: throw std::runtime_error(std::string("CUDA matvec: no kernel for ") + type_name(t)); \
    }

void dispatch_matvec(GgmlType t, const MatvecArgs& a, int n_launch, cudaStream_t s) {
#define MS_CALL(T) launch_matvec<T>(a, n_launch, s)
    MS_TYPE_SWITCH(t, MS_CALL)
#undef MS_CALL
}

// The 8-bit rows of x: a warp a 256-value chunk (quantize_chunk).
__global__ void quantize_act_kernel(const float* x, int64_t n, uint8_t* act, size_t act_stride) {
    chain_start();
    const int lane = threadIdx.x % 32;
    const int64_t b = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (b * 256 >= n) return;
    x += int64_t(blockIdx.y) * n;
    act += size_t(blockIdx.y) * act_stride;
    const int64_t i0 = b * 256 + 8 * lane;
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (i0 < n) {
        const float4 lo = *reinterpret_cast<const float4*>(x + i0), hi = *reinterpret_cast<const float4*>(x + i0 + 4);
        v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
    }
    quantize_chunk(v, lane, b, act, n);
}

// One block a row; sums of squares in double as ops/norm.cpp does. A row of
// up to kNormPer values a thread is read into registers at once (every load
// in flight together: this kernel is a chain of latencies, not bandwidth).
constexpr int kNormThreads = 512, kNormPer = 8;

__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const float* x, const float* w, int64_t width,
                                                                float eps, float* out, uint8_t* act,
                                                                size_t act_stride) {
    chain_start();
    __shared__ double part[32];
    x += int64_t(blockIdx.x) * width;
    out += int64_t(blockIdx.x) * width;
    const bool held = width <= int64_t(kNormPer) * blockDim.x;
    float v[kNormPer], wv[kNormPer];
    double sum = 0;
    if (held) {
#pragma unroll
        for (int k = 0; k < kNormPer; k++) {
            const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
            v[k] = i < width ? x[i] : 0.0f;
            wv[k] = i < width && w ? w[i] : 1.0f;
        }
#pragma unroll
        for (int k = 0; k < kNormPer; k++) sum += double(v[k] * v[k]);
    } else {
        for (int64_t i = threadIdx.x; i < width; i += blockDim.x) sum += double(x[i] * x[i]);
    }
    const float mean = float(block_sum(sum, part) / double(width));
    const float scale = 1.0f / sqrtf(mean + eps);
    if (held) {
#pragma unroll
        for (int k = 0; k < kNormPer; k++) {
            const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
            if (i < width) out[i] = w ? (v[k] * scale) * wv[k] : v[k] * scale;
        }
    } else {
        for (int64_t i = threadIdx.x; i < width; i += blockDim.x) out[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
    }
    if (!act) return;
    // The row's 8-bit form, a warp a chunk of 256, from the outputs above.
    __syncthreads();
    act += size_t(blockIdx.x) * act_stride;
    const int lane = threadIdx.x % 32;
    for (int64_t b = threadIdx.x / 32; b * 256 < width; b += blockDim.x / 32) {
        const int64_t i0 = b * 256 + 8 * lane;
        float v8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (i0 < width) {
#pragma unroll
            for (int k = 0; k < 8; k++) v8[k] = out[i0 + k];
        }
        quantize_chunk(v8, lane, b, act, width);
    }
}

// A head of head_dim values in shared memory h, RMS-normed with w (its sum
// of squares in double, as ops/norm.cpp) and NeoX-rotated on its first n_rot
// dims; each thread must have written the h[i] it reads first (i =
// threadIdx.x, stepping blockDim.x). Every thread of the block calls it.
__device__ void norm_rope_head(float* h, const float* w, int head_dim, int n_rot, float eps, const float* cos_sin,
                               double* part) {
    double sum = 0;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) sum += double(h[i] * h[i]);
    const double total = block_sum(sum, part);
    const float scale = 1.0f / sqrtf(float(total / double(head_dim)) + eps);
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) h[i] = (h[i] * scale) * w[i];
    __syncthreads();
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const float c = cos_sin[2 * i], sn = cos_sin[2 * i + 1];
        const float a = h[i], b = h[i + half];
        h[i] = a * c - b * sn;
        h[i + half] = a * sn + b * c;
    }
    __syncthreads();
}

// Decode attention in two launches (split over positions, as in
// flash-decoding): the positions p <= *pos are dealt round-robin to
// kAttentionSplits blocks of each query head, so the work spreads over
// n_head x kAttentionSplits blocks at any length (a block a head alone kept
// three quarters of the device idle and grew a chain of dependent loads
// with the context). Split j of head h: its scores (a warp a position, its
// lanes across the head), their maximum m, l = sum exp(score - m) and the
// unnormalized sum of exp(score - m) * v rows, into part; then a block a
// head rescales the splits to their common maximum (and the head's sink
// logit's) and divides. A sliding window deals out only its positions.
constexpr int kAttentionThreads = 256, kAttentionSplits = 16;

// The positions row z of an attention launch attends to: n_pos, one past
// its own; the span of them from `first` on (a window's, a chunk's, or all
// of them), or with a choice (sparse attention) its chosen positions,
// `picked`, in order. j-th position of the span: at(j).
struct RowSpan {
    int n_pos, first, span;
    const int32_t* picked;
    __device__ int at(int j) const { return picked ? picked[j] : first + j; }
};

__device__ __forceinline__ RowSpan row_span(const int32_t* pos, float* const* seq, int64_t z, float** k_cache,
                                            float** v_cache, int window, int chunk, const Chosen& chosen) {
    RowSpan r;
    // Prefill: z is the token, at position *pos + z (or its sequence's pos[z]).
    r.n_pos = int(row_position(pos, seq, z, k_cache, v_cache)) + 1;
    r.picked = chosen.pos ? chosen.pos + z * chosen.top_k : nullptr;
    r.first = r.picked     ? 0
              : window > 0 ? max(0, r.n_pos - window)
              : chunk > 0  ? (r.n_pos - 1) - (r.n_pos - 1) % chunk
                           : 0;
    r.span = r.picked ? chosen.count[z] : r.n_pos - r.first;
    return r;
}

__global__ void __launch_bounds__(kAttentionThreads) attention_split_kernel(const float* q, float* k_cache,
                                                                           float* v_cache, const int32_t* pos,
                                                                           int n_head, int n_kv_head, int head_dim,
                                                                           float scale, float* part,
                                                                           const FreshRow fresh, int window, int chunk,
                                                                           float* const* seq, const Chosen chosen) {
    chain_start();
    const RowSpan rs = row_span(pos, seq, blockIdx.z, &k_cache, &v_cache, window, chunk, chosen);
    const int n_pos = rs.n_pos, span = rs.span;
    const int h = blockIdx.x, split = blockIdx.y, S = gridDim.y, kvh = h / (n_head / n_kv_head);
    // Positions first + split, first + split + S, ...
    const int mine = span > split ? (span - split + S - 1) / S : 0;
    const int64_t qh = int64_t(blockIdx.z) * n_head + h;  // the token's query head
    float* out = part + (qh * S + split) * (head_dim + 2);
    extern __shared__ float smem[];
    float* qs = smem;                     // head_dim
    float* kp = smem + head_dim;          // head_dim: fresh, this position's k row of the head's KV head
    float* scores = smem + 2 * head_dim;  // mine
    __shared__ float red[32];
    __shared__ double sums[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    if (mine == 0) {
        if (threadIdx.x == 0) out[0] = -INFINITY, out[1] = 0;
        return;
    }
    const int64_t row = int64_t(n_kv_head) * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) qs[i] = q[qh * head_dim + i];
    // Fresh: this split holds the new position when (n_pos - 1) % S ==
    // split; its blocks norm and rotate that k row themselves (the cache's
    // row is written by the first query head of the group, and read by
    // none of this launch).
    const bool here = fresh.k && (span - 1) % S == split;
    if (here) {
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) kp[i] = fresh.k[int64_t(kvh) * head_dim + i];
    }
    if (fresh.k) norm_rope_head(qs, fresh.q_norm, head_dim, fresh.n_rot, fresh.eps, fresh.cos_sin, sums);
    if (here) {
        norm_rope_head(kp, fresh.k_norm, head_dim, fresh.n_rot, fresh.eps, fresh.cos_sin, sums);
        if (h % (n_head / n_kv_head) == 0) {
            float* kd = k_cache + int64_t(n_pos - 1) * row + int64_t(kvh) * head_dim;
            float* vd = v_cache + int64_t(n_pos - 1) * row + int64_t(kvh) * head_dim;
            for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
                kd[i] = kp[i];
                vd[i] = fresh.v[int64_t(kvh) * head_dim + i];
            }
        }
    }
    __syncthreads();
    const float* kh = k_cache + int64_t(kvh) * head_dim;
    float mx = -INFINITY;
#pragma unroll 4
    for (int j = warp; j < mine; j += n_warps) {
        const int p = rs.at(split + j * S);
        const float* k = here && p == n_pos - 1 ? kp : kh + int64_t(p) * row;
        float s = 0;
        for (int i = lane; i < head_dim; i += 32) s += qs[i] * k[i];
        s = warp_sum(s) * scale;
        if (lane == 0) scores[j] = s;
        mx = fmaxf(mx, s);
    }
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    mx = red[0];
    for (int i = 1; i < n_warps; i++) mx = fmaxf(mx, red[i]);
    __syncthreads();
    float sum = 0;
    for (int j = threadIdx.x; j < mine; j += blockDim.x) {
        const float e = expf(scores[j] - mx);
        scores[j] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    sum = 0;
    for (int i = 0; i < n_warps; i++) sum += red[i];
    // v: head_dim threads a group of positions; blockDim / head_dim groups
    // take every other one, then add up in group order.
    const int groups = max(1, int(blockDim.x) / head_dim), grp = threadIdx.x / head_dim;
    float* partial = scores + mine;  // groups x head_dim
    const float* vh = v_cache + int64_t(kvh) * head_dim;
    const float* vp = here ? fresh.v + int64_t(kvh) * head_dim : nullptr;  // the new position's v row
    for (int i = threadIdx.x % head_dim; grp < groups && i < head_dim; i += blockDim.x) {
        float acc = 0;
#pragma unroll 4
        for (int j = grp; j < mine; j += groups) {
            const int p = rs.at(split + j * S);
            acc += scores[j] * (here && p == n_pos - 1 ? vp[i] : vh[int64_t(p) * row + i]);
        }
        partial[grp * head_dim + i] = acc;
    }
    __syncthreads();
    if (threadIdx.x == 0) out[0] = mx, out[1] = sum;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        float acc = 0;
        for (int g = 0; g < groups; g++) acc += partial[g * head_dim + i];
        out[2 + i] = acc;
    }
}

// Decode attention where every query head reads the one KV head over
// chosen positions (sparse multi-head latent attention's compressed rows:
// n_kv_head 1, rows of kv_lora + rope values): attention_split_kernel's
// splits and partial sums, but a block
// takes kSharedHeads query heads of the split at once, so each row it
// reads serves them all (a block a head read every row once a head: at 64
// heads, 64 times the cache's bytes through L2). The values are the rows'
// first dims (k_cache is v_cache). Rows come kSharedRows at a time into
// shared memory; warp g scores head g's query (held in its lanes' registers) against them
// and keeps the head's running maximum and sum, the softmax online; every
// thread then adds the rows, weighed, into its slice of each head's values.
constexpr int kSharedHeads = 8, kSharedRows = 8, kSharedSlots = 1024 / kAttentionThreads;

__global__ void __launch_bounds__(kAttentionThreads) attention_shared_kv_kernel(const float* q, float* k_cache,
                                                                               float* v_cache, const int32_t* pos,
                                                                               int n_head, int heads, int head_dim,
                                                                               float scale, float* part,
                                                                               float* const* seq, const Chosen chosen) {
    chain_start();
    const RowSpan rs = row_span(pos, seq, blockIdx.z, &k_cache, &v_cache, 0, 0, chosen);
    const int span = rs.span;
    const int h0 = int(blockIdx.x) * heads, split = blockIdx.y, S = gridDim.y;
    const int mine = span > split ? (span - split + S - 1) / S : 0;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    auto out_of = [&](int g) { return part + ((int64_t(blockIdx.z) * n_head + h0 + g) * S + split) * (head_dim + 2); };
    if (mine == 0) {
        if (threadIdx.x < heads) out_of(threadIdx.x)[0] = -INFINITY, out_of(threadIdx.x)[1] = 0;
        return;
    }
    extern __shared__ float smem[];
    float* rows = smem;                                // kSharedRows x head_dim
    float* probs = rows + kSharedRows * head_dim;      // heads x kSharedRows
    float* factor = probs + kSharedHeads * kSharedRows;  // heads: each chunk's rescale
    // Warp g's query, a lane's dims lane, lane + 32, ...
    float qr[1024 / 32];
    const bool scorer = warp < heads;
    if (scorer) {
        const float* qh = q + (int64_t(blockIdx.z) * n_head + h0 + warp) * head_dim;
#pragma unroll
        for (int k = 0; k < 1024 / 32; k++) qr[k] = lane + 32 * k < head_dim ? qh[lane + 32 * k] : 0.0f;
    }
    float m = -INFINITY, l = 0;  // warp g's head's, the same in every lane
    float acc[kSharedHeads][kSharedSlots];
#pragma unroll
    for (int g = 0; g < kSharedHeads; g++) {
#pragma unroll
        for (int k = 0; k < kSharedSlots; k++) acc[g][k] = 0;
    }
    for (int j0 = 0; j0 < mine; j0 += kSharedRows) {
        const int nc = min(kSharedRows, mine - j0);
        // A row a warp, each lane's loads of it all in flight before any
        // store waits for them (an element a thread at a time put each
        // load's latency, twice with the chosen position's, in series).
        for (int c = warp; c < nc; c += int(blockDim.x) / 32) {
            const float* src = k_cache + int64_t(rs.at(split + (j0 + c) * S)) * head_dim;
            float v[1024 / 32];
#pragma unroll
            for (int k = 0; k < 1024 / 32; k++) {
                if (lane + 32 * k < head_dim) v[k] = src[lane + 32 * k];
            }
#pragma unroll
            for (int k = 0; k < 1024 / 32; k++) {
                if (lane + 32 * k < head_dim) rows[c * head_dim + lane + 32 * k] = v[k];
            }
        }
        __syncthreads();
        if (scorer) {
            float sc = -INFINITY;  // lane c's: row c's score
#pragma unroll
            for (int c = 0; c < kSharedRows; c++) {
                if (c >= nc) continue;
                const float* r = rows + c * head_dim;
                float d = 0;
#pragma unroll
                for (int k = 0; k < 1024 / 32; k++) {
                    if (lane + 32 * k < head_dim) d += qr[k] * r[lane + 32 * k];
                }
                d = warp_sum(d) * scale;
                if (lane == c) sc = d;
            }
            const float m_new = fmaxf(m, warp_max(sc));
            const float f = expf(m - m_new);  // 0 at the first chunk (m is -inf)
            const float e = lane < nc ? expf(sc - m_new) : 0.0f;
            l = l * f + warp_sum(e);
            m = m_new;
            if (lane < kSharedRows) probs[warp * kSharedRows + lane] = e;
            if (lane == 0) factor[warp] = f;
        }
        __syncthreads();
        // Fixed bounds and guards, no break: acc stays in registers.
#pragma unroll
        for (int g = 0; g < kSharedHeads; g++) {
            const float f = g < heads ? factor[g] : 0.0f;
#pragma unroll
            for (int k = 0; k < kSharedSlots; k++) {
                const int i = threadIdx.x + k * kAttentionThreads;
                if (g < heads && i < head_dim) {
                    float a = acc[g][k] * f;
#pragma unroll
                    for (int c = 0; c < kSharedRows; c++) {
                        if (c < nc) a += probs[g * kSharedRows + c] * rows[c * head_dim + i];
                    }
                    acc[g][k] = a;
                }
            }
        }
        __syncthreads();  // rows are loaded again
    }
    if (scorer && lane == 0) out_of(warp)[0] = m, out_of(warp)[1] = l;
#pragma unroll
    for (int g = 0; g < kSharedHeads; g++) {
#pragma unroll
        for (int k = 0; k < kSharedSlots; k++) {
            const int i = threadIdx.x + k * kAttentionThreads;
            if (g < heads && i < head_dim) out_of(g)[2 + i] = acc[g][k];
        }
    }
}

// A block a run of 256 / head_dim heads when act is given (a thread a value:
// the 256 values one Q8_K block holds, written 8-bit too, as quantize_act
// would, so the output matrix reads them without a launch of its own), else
// a block a head.
__global__ void attention_combine_kernel(const float* part, int head_dim, int splits, int64_t width, float* out,
                                         uint8_t* act, const float* sinks) {
    chain_start();
    const int per = int(blockDim.x) / head_dim;
    const int h = int(blockIdx.x) * per + int(threadIdx.x) / head_dim, i = int(threadIdx.x) % head_dim;
    // Prefill: blockIdx.y is the token.
    part += int64_t(blockIdx.y) * (width / head_dim) * splits * (head_dim + 2);
    out += int64_t(blockIdx.y) * width;
    if (act) act += blockIdx.y * act_row_bytes(width);
    const float* p = part + int64_t(h) * splits * (head_dim + 2);
    const float sink = sinks ? sinks[h] : -INFINITY;
    float m = sink;
    for (int j = 0; j < splits; j++) m = fmaxf(m, p[j * (head_dim + 2)]);
    float l = 0, acc = 0;
    for (int j = 0; j < splits; j++) {
        const float mj = p[j * (head_dim + 2)];
        if (mj == -INFINITY) continue;
        const float f = expf(mj - m);
        l += p[j * (head_dim + 2) + 1] * f;
        acc += p[j * (head_dim + 2) + 2 + i] * f;
    }
    if (sinks) l += expf(sink - m);
    const float value = acc * (1.0f / l);
    out[int64_t(h) * head_dim + i] = value;
    if (!act) return;
    __shared__ float chunk[256];
    chunk[threadIdx.x] = value;
    __syncthreads();
    if (threadIdx.x >= 32) return;
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = chunk[8 * threadIdx.x + k];
    quantize_chunk(v, int(threadIdx.x), blockIdx.x, act, width);
}

// One block a head: blocks [0, n_head) are q heads (normed and rotated in
// place), the next n_kv_head k heads (normed, rotated, written with their v
// head to cache row *pos). Per-head sums of squares in double, as
// rms_norm_kernel.
__global__ void qk_norm_rope_store_kernel(float* q, const float* k, const float* v, const float* q_norm,
                                          const float* k_norm, int n_head, int head_dim, int n_rot, float eps,
                                          const float* cos_sin, float* k_cache, float* v_cache, int64_t kv_width,
                                          const int32_t* pos, float* const* seq) {
    chain_start();
    __shared__ float h[512];
    __shared__ double part[32];
    // Prefill: blockIdx.y is the token, at position *pos + blockIdx.y.
    const int64_t t = blockIdx.y;
    q += t * n_head * head_dim;
    k += t * kv_width;
    v += t * kv_width;
    cos_sin += t * n_rot;
    const int64_t at = row_position(pos, seq, t, &k_cache, &v_cache);
    const bool is_q = int(blockIdx.x) < n_head;
    const int head = is_q ? blockIdx.x : blockIdx.x - n_head;
    const float* src = is_q ? q + int64_t(head) * head_dim : k + int64_t(head) * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) h[i] = src[i];
    norm_rope_head(h, is_q ? q_norm : k_norm, head_dim, n_rot, eps, cos_sin, part);
    float* dst = is_q ? q + int64_t(head) * head_dim : k_cache + at * kv_width + int64_t(head) * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = h[i];
    if (!is_q) {
        float* vd = v_cache + at * kv_width + int64_t(head) * head_dim;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) vd[i] = v[int64_t(head) * head_dim + i];
    }
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float* h) {
    chain_start();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) h[i] = gated(gate[i], up[i], false);
}

}  // namespace

namespace {

__global__ void empty_kernel() { chain_start(); }

}  // namespace

double chain_us(int n, int reps) {
    const Stream s = new_stream();
    capture_begin(s);
    for (int i = 0; i < n; i++) launch("empty", empty_kernel, 1, 32, 0, native(s));
    const Graph g = capture_end(s);
    const Event a = new_event(), b = new_event();
    std::vector<float> ms;
    for (int r = 0; r < reps + 1; r++) {  // the first replay warms up
        record(a, s);
        launch(g, s);
        record(b, s);
        sync(s);
        if (r > 0) ms.push_back(elapsed_ms(a, b));
    }
    delete_graph(g);
    delete_event(a);
    delete_event(b);
    delete_stream(s);
    std::sort(ms.begin(), ms.end());
    return double(ms[ms.size() / 2]) * 1000.0 / n;
}

bool supports(GgmlType t) {
    switch (t) {
        case GgmlType::F32:
        case GgmlType::F16:
        case GgmlType::BF16:
        case GgmlType::Q8_0:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
        case GgmlType::MXFP4: return true;
        default: return false;
    }
}

size_t act_bytes(int64_t width) { return act_row_bytes(width); }

void quantize_act(const float* x, int64_t rows, int64_t width, void* act, Stream s) {
    if (width % 32 != 0) throw std::runtime_error("CUDA quantize_act: a width of 32s");
    // A launch a run of up to 65535 rows (the grid's y limit; MLA's prefill
    // quantizes a row a token and head).
    constexpr int64_t kMaxRows = 65535;
    for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {
        const dim3 grid(blocks((width + 255) / 256, 4), unsigned(std::min(kMaxRows, rows - r0)));
        launch("quantize_act", quantize_act_kernel, grid, 128, 0, native(s), x + r0 * width, width,
               static_cast<uint8_t*>(act) + size_t(r0) * act_row_bytes(width), act_row_bytes(width));
    }
}

namespace {

// The arguments common to every matvec launch; x's 8-bit rows, if any,
// act_row_bytes(cols) apart where its float rows are (x_stride != 0).
MatvecArgs matvec_args(const uint8_t* w0, const uint8_t* const* table, const int32_t* ids, int n, size_t offset,
                       size_t offset2, int64_t rows, int64_t cols, Act x, int64_t x_stride, float* y, bool add) {
    if (x.q && cols % 32 != 0) throw std::runtime_error("CUDA matvec: 8-bit x needs a width of 32s");
    return {w0,   table, ids, n,   offset, offset2, rows, cols, 0, x.f, x_stride, y, add, 1,
            static_cast<const uint8_t*>(x.q), x_stride ? act_row_bytes(cols) : 0};
}

}  // namespace

void matvec(GgmlType t, const void* w, int64_t rows, int64_t cols, Act x, float* y, Stream s, bool add) {
    dispatch_matvec(t, matvec_args(static_cast<const uint8_t*>(w), nullptr, nullptr, 1, 0, 0, rows, cols, x, 0, y, add),
                    1, native(s));
}

void matvec_experts(GgmlType t, const uint8_t* const* table, const int32_t* ids, int n, size_t offset, int64_t rows,
                    int64_t cols, Act x, int64_t x_stride, float* y, Stream s) {
    if (x.q && x_stride != 0 && x_stride != cols) throw std::runtime_error("CUDA matvec_experts: 8-bit x rows of cols");
    dispatch_matvec(t, matvec_args(nullptr, table, ids, n, offset, 0, rows, cols, x, x_stride, y, false), n, native(s));
}

void matvec_multi(int n, const GgmlType* types, const void* const* w, const int64_t* rows, int64_t cols, Act x,
                  float* const* y, Stream s) {
    if (n < 1 || n > 3) throw std::runtime_error("CUDA matvec_multi: 1 to 3 matrices");
    if (x.q && cols % 32 != 0) throw std::runtime_error("CUDA matvec: 8-bit x needs a width of 32s");
    MultiArgs a{};
    a.n = n;
    a.cols = cols;
    a.x = x.f;
    a.xq = static_cast<const uint8_t*>(x.q);
    unsigned blocks = 0;
    for (int i = 0; i < n; i++) {
        if (!supports(types[i])) throw std::runtime_error(std::string("CUDA matvec: no kernel for ") + type_name(types[i]));
        a.seg[i] = {static_cast<const uint8_t*>(w[i]), y[i], rows[i], row_bytes(types[i], cols), types[i], blocks};
        blocks += unsigned((rows[i] + 2 * kWarps - 1) / (2 * kWarps));
    }
    if (a.xq) {
        launch("matvec_multi", matvec_multi_kernel<true>, blocks, 32 * kWarps, 0, native(s), a);
    } else {
        launch("matvec_multi", matvec_multi_kernel<false>, blocks, 32 * kWarps, 0, native(s), a);
    }
}

void expert_gate_up(GgmlType t, const uint8_t* const* table, const int32_t* ids, int n, size_t offset,
                    size_t offset2, int64_t rows, int64_t cols, Act x, float* h, Stream s, const ExpertExtras& extras) {
    const MatvecArgs a =
        matvec_args(nullptr, table, ids, n, offset, offset2, rows, cols, x, extras.own_input ? cols : 0, h, false);
#define MS_CALL(T) launch_gate_up<T>(a, extras, native(s))
    MS_TYPE_SWITCH(t, MS_CALL)
#undef MS_CALL
}

void expert_down_add(GgmlType t, const uint8_t* const* table, const int32_t* ids, int n, size_t offset,
                     int64_t rows, int64_t cols, Act h, const float* weights, float* x, Stream s,
                     const ExpertExtras& extras) {
    if (n > 32) throw std::runtime_error("CUDA expert_down_add: more than 32 experts");
    const MatvecArgs a = matvec_args(nullptr, table, ids, n, offset, 0, rows, cols, h, cols, x, true);
#define MS_CALL(T) launch_down_combine<T>(a, weights, extras, native(s))
    MS_TYPE_SWITCH(t, MS_CALL)
#undef MS_CALL
}

namespace {

BatchArgs batch_args(const uint8_t* w0, const uint8_t* const* table, const ExpertTiles* tiles, int n, size_t offset,
                     size_t offset2, int64_t rows, int64_t cols, Act x, float* y, bool add, int nparts) {
    if (x.q && cols % 32 != 0) throw std::runtime_error("CUDA matmul: 8-bit x needs a width of 32s");
    BatchArgs a{};
    a.w0 = w0;
    a.table = table;
    if (tiles) a.tiles = tiles->tiles, a.in_row = tiles->in_row, a.out_row = tiles->out_row;
    a.n = n;
    a.offset = offset;
    a.offset2 = offset2;
    a.rows = rows;
    a.cols = cols;
    a.x = x.f;
    a.xq = static_cast<const uint8_t*>(x.q);
    a.y = y;
    a.add = add;
    a.nparts = nparts;
    return a;
}

}  // namespace

void matmul(GgmlType t, const void* w, int64_t rows, int64_t cols, int n, Act x, float* y, Stream s, bool add,
            int parts_of) {
    const BatchArgs a = batch_args(static_cast<const uint8_t*>(w), nullptr, nullptr, n, 0, 0, rows, cols, x, y, add,
                                   parts_of > 0 ? matvec_parts(rows, parts_of) : 1);
    const unsigned tiles = unsigned((n + kExpertTile - 1) / kExpertTile);
#define MS_CALL(T) launch_batch<T, 2>("matmul", a, tiles, native(s))
    MS_TYPE_SWITCH(t, MS_CALL)
#undef MS_CALL
}

void matmul_experts(GgmlType t, const uint8_t* const* table, const ExpertTiles& tiles, size_t offset, int64_t rows,
                    int64_t cols, Act x, float* y, Stream s, int parts_of) {
    const BatchArgs a = batch_args(nullptr, table, &tiles, 0, offset, 0, rows, cols, x, y, false,
                                   parts_of > 0 ? matvec_parts(rows, parts_of) : 1);
#define MS_CALL(T) launch_batch<T, 2>("matmul_experts", a, unsigned(tiles.n_tiles), native(s))
    MS_TYPE_SWITCH(t, MS_CALL)
#undef MS_CALL
}

void expert_gate_up_tokens(GgmlType t, const uint8_t* const* table, const ExpertTiles& tiles, size_t offset,
                           size_t offset2, int64_t rows, int64_t cols, Act x, float* h, Stream s,
                           const ExpertExtras& extras) {
    const BatchArgs a = batch_args(nullptr, table, &tiles, 0, offset, offset2, rows, cols, x, h, false, 1);
#define MS_CALL(T) launch_batch<T, 4>("expert_gate_up_tokens", a, unsigned(tiles.n_tiles), native(s), extras)
    MS_TYPE_SWITCH(t, MS_CALL)
#undef MS_CALL
}

void combine_experts(const float* out, const float* weights, int n, int k, int64_t width, float* x, Stream s,
                     const float* down_bias, const int32_t* ids) {
    if (n < 1) return;
    if (down_bias && !ids) throw std::runtime_error("CUDA combine_experts: a down bias needs the experts' ids");
    launch("combine_experts", combine_experts_kernel, dim3(blocks(width, 256), unsigned(n)), 256, 0, native(s), out,
           weights, n, k, width, x, down_bias, ids);
}

void rms_norm(const float* x, const float* w, int64_t rows, int64_t width, float eps, float* out, Stream s,
              void* act) {
    if (act && width % 32 != 0) throw std::runtime_error("CUDA rms_norm: 8-bit rows need a width of 32s");
    launch("rms_norm", rms_norm_kernel, unsigned(rows), kNormThreads, 0, native(s), x, w, width, eps, out,
           static_cast<uint8_t*>(act), act_row_bytes(width));
}

static size_t attention_smem = 0;  // dynamic shared memory of every attention launch (prepare_attention)

void prepare_attention(int max_pos, int head_dim) {
    const int groups = std::max(1, kAttentionThreads / head_dim);
    const int per_split = (max_pos + kAttentionSplits - 1) / kAttentionSplits;
    const size_t smem = size_t(2 * head_dim + per_split + groups * head_dim) * sizeof(float);
    if (smem <= attention_smem) return;
    if (smem > (48 << 10) && cudaFuncSetAttribute(attention_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  int(smem)) != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error("CUDA attention: a context of " + std::to_string(max_pos) +
                                 " positions needs more shared memory than the device has");
    }
    attention_smem = smem;
}

size_t attention_scratch_bytes(int n_head, int head_dim) {
    return size_t(n_head) * kAttentionSplits * size_t(head_dim + 2) * sizeof(float);
}

void attention(const float* q, float* k_cache, float* v_cache, const int32_t* pos, int n_head, int n_kv_head,
               int head_dim, float scale, float* scratch, float* out, Stream s, void* act, const FreshRow& fresh,
               int n, int window, const float* sinks, int chunk, float* const* seq, const Chosen& chosen) {
    if (head_dim > 1024) throw std::runtime_error("CUDA attention: head_dim > 1024");
    if (n < 1 || n > 65535 || (n > 1 && fresh.k) || (chosen.pos && fresh.k)) {
        throw std::runtime_error("CUDA attention: 1 to 65535 tokens, one if fresh, none fresh with chosen positions");
    }
    if (fresh.k && (fresh.n_rot > head_dim || fresh.n_rot % 2 != 0)) {
        throw std::runtime_error("CUDA attention: n_rot even, <= head_dim");
    }
    // Sparse multi-head latent attention (glm-dsa: chosen positions of one
    // KV head whose rows are also the values): kSharedHeads query heads a
    // block, each row read once for them. Only there: its loads of a chunk
    // run one after another (193 us for 2,048 rows of 576 at 64 heads on
    // an H100, docs/gpu.md "Twenty-second session"), and against the block
    // a head over every position (DeepSeek V2/V3) it was not measured.
    const int heads = std::min(n_head, kSharedHeads);
    if (chosen.pos && n_kv_head == 1 && k_cache == v_cache && !fresh.k && n_head % heads == 0) {
        // At most 8 rows of 1,024 floats and the heads' weights: under the
        // 48 KiB every launch may take.
        const size_t smem =
            (size_t(kSharedRows) * size_t(head_dim) + kSharedHeads * kSharedRows + kSharedHeads) * sizeof(float);
        launch("attention", attention_shared_kv_kernel, dim3(unsigned(n_head / heads), kAttentionSplits, unsigned(n)),
               kAttentionThreads, smem, native(s), q, k_cache, v_cache, pos, n_head, heads, head_dim, scale, scratch,
               seq, chosen);
    } else {
        const dim3 grid(unsigned(n_head), kAttentionSplits, unsigned(n));
        launch("attention", attention_split_kernel, grid, kAttentionThreads, attention_smem, native(s), q, k_cache,
               v_cache, pos, n_head, n_kv_head, head_dim, scale, scratch, fresh, window, chunk, seq, chosen);
    }
    const int64_t width = int64_t(n_head) * head_dim;
    const bool fused = act && 256 % head_dim == 0 && width % 256 == 0;
    const int per = fused ? 256 / head_dim : 1;
    launch("attention", attention_combine_kernel, dim3(unsigned(n_head / per), unsigned(n)), unsigned(per * head_dim),
           0, native(s), static_cast<const float*>(scratch), head_dim, kAttentionSplits, width, out,
           static_cast<uint8_t*>(fused ? act : nullptr), sinks);
    if (act && !fused) quantize_act(out, n, width, act, s);
}

void qk_norm_rope_store(float* q, const float* k, const float* v, const float* q_norm, const float* k_norm,
                        int n_head, int n_kv_head, int head_dim, int n_rot, float eps, const float* cos_sin,
                        float* k_cache, float* v_cache, const int32_t* pos, Stream s, int n, float* const* seq) {
    if (head_dim > 512) throw std::runtime_error("CUDA qk_norm_rope_store: head_dim > 512");
    launch("qk_norm_rope_store", qk_norm_rope_store_kernel, dim3(unsigned(n_head + n_kv_head), unsigned(n)), 128, 0,
           native(s), q, k, v,
           q_norm, k_norm, n_head, head_dim, n_rot, eps, cos_sin, k_cache, v_cache, int64_t(n_kv_head) * head_dim,
           pos, seq);
}

void swiglu(const float* gate, const float* up, int64_t n, float* h, Stream s) {
    launch("swiglu", swiglu_kernel, blocks(n, 256), 256, 0, native(s), gate, up, n, h);
}

void route_softmax_topk(const float* logits, int n_expert, int k, bool renorm, int32_t* ids, float* weights,
                        Stream s, int n, bool over_chosen) {
    if (k > 32 || n_expert > 1024 || k > n_expert) throw std::runtime_error("CUDA routing: k <= 32, n_expert <= 1024");
    launch("route_softmax_topk", route_kernel, unsigned(n), 32, 0, native(s), logits, n_expert, k, renorm, ids,
           weights, over_chosen);
}

}  // namespace ms::gpu
