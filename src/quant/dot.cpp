#include "quant/dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "quant/blocks.h"
#include "quant/cpu.h"
#include "quant/half.h"
#include "quant/kernels.h"

namespace ms {

// ---------------------------------------------------------------------------
// Activation formats

ActType act_type(GgmlType w) {
    switch (w) {
        case GgmlType::F16: return ActType::F16;
        case GgmlType::BF16: return ActType::BF16;
        case GgmlType::Q4_1:
        case GgmlType::Q5_1: return ActType::Q8_1;
        case GgmlType::Q8_0:
        case GgmlType::Q4_0:
        case GgmlType::Q5_0:
        case GgmlType::IQ4_NL:
        case GgmlType::MXFP4: return ActType::Q8_0;
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
        case GgmlType::IQ4_XS: return ActType::Q8_K;
        default: return ActType::F32;
    }
}

const char* act_type_name(ActType a) {
    switch (a) {
        case ActType::F32: return "F32";
        case ActType::F16: return "F16";
        case ActType::BF16: return "BF16";
        case ActType::Q8_0: return "Q8_0";
        case ActType::Q8_1: return "Q8_1";
        case ActType::Q8_K: return "Q8_K";
    }
    return "unknown";
}

size_t act_bytes(GgmlType w, int64_t n) {
    switch (act_type(w)) {
        case ActType::F32: return size_t(n) * 4;
        case ActType::F16:
        case ActType::BF16: return size_t(n) * 2;
        case ActType::Q8_0: return size_t(n / QK) * sizeof(BlockQ8_0);
        case ActType::Q8_1: return size_t(n / QK) * sizeof(BlockQ8_1);
        case ActType::Q8_K: return size_t(n / QK_K) * sizeof(BlockQ8_K);
    }
    return 0;
}

namespace {

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 pushes the
// fraction out of the mantissa. Same result as the reference's
// _mm256_round_ps(_MM_ROUND_NEAREST) and its nearest_int().
inline int round_even(float v) {
    float t = v + 12582912.f;
    uint32_t u = float_bits(t);
    return int(u & 0x007fffff) - 0x00400000;
}

// Q8_0 / Q8_1 as the reference's x86 path computes them: d = amax / 127 and
// the multiplier 127 / amax (not 1 / d).
template <typename Block>
void quantize_q8_32(const float* x, Block* y, int64_t n) {
    for (int64_t i = 0; i < n / QK; ++i, x += QK) {
        float amax = 0;
        for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
        float d = amax / 127.f;
        float id = amax != 0.f ? 127.f / amax : 0.f;
        int sum = 0;
        for (int j = 0; j < QK; ++j) {
            int q = round_even(x[j] * id);
            y[i].qs[j] = int8_t(q);
            sum += q;
        }
        y[i].d = fp32_to_fp16(d);
        if constexpr (sizeof(Block) == sizeof(BlockQ8_1)) y[i].s = fp32_to_fp16(d * float(sum));
    }
}

// Q8_K: the scale comes from the signed value of largest magnitude, so that
// value maps to exactly -127 (the reference's choice).
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        float amax = 0, max = 0;
        for (int j = 0; j < QK_K; ++j) {
            float ax = std::fabs(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (amax == 0.f) {
            std::memset(&y[i], 0, sizeof(BlockQ8_K));
            continue;
        }
        float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) y[i].qs[j] = int8_t(std::min(127, round_even(iscale * x[j])));
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += y[i].qs[16 * g + l];
            y[i].bsums[g] = int16_t(s);
        }
        y[i].d = 1 / iscale;
    }
}

}  // namespace

// ---------------------------------------------------------------------------
// Scalar dot products: the reference engine's float steps, which its AVX2
// kernels (dot_x86.inc) take, one lane at a time. Each block's integer sums
// are gathered in the 8 int32 lanes those kernels use (lane l: elements
// 4l..4l+3 of every 32-element run), each lane gets one fused multiply-add
// with the block scale, and the lanes are summed in hsum8's tree. Any other
// order rounds differently, and a near-tied expert choice downstream turns
// that last-bit difference into percents of a model's logits (summed block
// by block in float, as this level once did, golden qwen3moe-Q4_K_M came out
// 1.2e-2 from the reference; in the AVX2 order it is 2.4e-7).

namespace {

struct Lanes8 {
    float v[8] = {};
    // std::fma rounds once, as the kernels' vfmadd does.
    void fma(float scale, const int32_t s[8]) {
        for (int l = 0; l < 8; ++l) v[l] = std::fma(scale, float(s[l]), v[l]);
    }
};

// hsum4 / hsum8 of dot_x86.inc: halves first, then lanes {0,1} + {2,3}.
float sum4(const float v[4]) { return (v[0] + v[2]) + (v[1] + v[3]); }
float sum8(const float v[8]) {
    const float r[4] = {v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]};
    return sum4(r);
}

// dot_float: 16 lanes (two vectors of 8) over runs of 16 elements, a ragged
// tail padded with zeros, the vectors added, then hsum8.
template <float (*load)(const void*, int64_t)>
float dot_float(const void* wv, const void* av, int64_t n) {
    float acc[16] = {};
    for (int64_t i = 0; i < n; i += 16) {
        for (int l = 0; l < 16; ++l) {
            const bool in = i + l < n;
            acc[l] = std::fma(in ? load(wv, i + l) : 0.f, in ? load(av, i + l) : 0.f, acc[l]);
        }
    }
    float r[8];
    for (int l = 0; l < 8; ++l) r[l] = acc[l] + acc[l + 8];
    return sum8(r);
}
float load_f32(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
float load_f16(const void* p, int64_t i) { return fp16_to_fp32(static_cast<const uint16_t*>(p)[i]); }
float load_bf16(const void* p, int64_t i) { return bf16_to_fp32(static_cast<const uint16_t*>(p)[i]); }

// 32-element weight blocks decode to 32 integers and a float scale; against
// Q8_0 each lane adds d_w * d_a times its four products. Q4_1 / Q5_1 (against
// Q8_1) add m_w * s_a, with s_a = d_a * sum(a) stored in the activation, in
// one separate fused chain.
inline void nibbles(const uint8_t qs[16], int v[32]) {
    for (int j = 0; j < 16; ++j) { v[j] = qs[j] & 0xf; v[j + 16] = qs[j] >> 4; }
}
inline void fifth_bits(const uint8_t qh[4], int v[32]) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    for (int j = 0; j < 32; ++j) v[j] |= int((h >> j) & 1) << 4;
}
inline void table_lookup(const int8_t table[16], int v[32]) {
    for (int j = 0; j < 32; ++j) v[j] = table[v[j]];
}
inline void add_all(int bias, int v[32]) {
    for (int j = 0; j < 32; ++j) v[j] += bias;
}

void dec_q8_0(const BlockQ8_0& b, int v[32]) { for (int j = 0; j < 32; ++j) v[j] = b.qs[j]; }
void dec_q4_0(const BlockQ4_0& b, int v[32]) { nibbles(b.qs, v); add_all(-8, v); }
void dec_q5_0(const BlockQ5_0& b, int v[32]) { nibbles(b.qs, v); fifth_bits(b.qh, v); add_all(-16, v); }
void dec_iq4_nl(const BlockIQ4_NL& b, int v[32]) { nibbles(b.qs, v); table_lookup(kIQ4NL, v); }
void dec_mxfp4(const BlockMXFP4& b, int v[32]) { nibbles(b.qs, v); table_lookup(kMXFP4, v); }
void dec_q4_1(const BlockQ4_1& b, int v[32]) { nibbles(b.qs, v); }
void dec_q5_1(const BlockQ5_1& b, int v[32]) { nibbles(b.qs, v); fifth_bits(b.qh, v); }
template <typename B> float scale_fp16(const B& b) { return fp16_to_fp32(b.d); }
float scale_mxfp4(const BlockMXFP4& b) { return e8m0_half(b.e); }

inline void lanes32(const int v[32], const int8_t a[32], int32_t s[8]) {
    for (int l = 0; l < 8; ++l) {
        s[l] = 0;
        for (int j = 4 * l; j < 4 * l + 4; ++j) s[l] += v[j] * a[j];
    }
}

template <typename B, void (*decode)(const B&, int*), float (*scale)(const B&)>
float dot_q8_family(const void* wv, const void* av, int64_t n) {
    const B* x = static_cast<const B*>(wv);
    const BlockQ8_0* y = static_cast<const BlockQ8_0*>(av);
    Lanes8 acc;
    for (int64_t i = 0; i < n / QK; ++i) {
        int v[32];
        int32_t s[8];
        decode(x[i], v);
        lanes32(v, y[i].qs, s);
        acc.fma(scale(x[i]) * fp16_to_fp32(y[i].d), s);
    }
    return sum8(acc.v);
}

template <typename B, void (*decode)(const B&, int*)>
float dot_q8_1_family(const void* wv, const void* av, int64_t n) {
    const B* x = static_cast<const B*>(wv);
    const BlockQ8_1* y = static_cast<const BlockQ8_1*>(av);
    Lanes8 acc;
    float mins = 0;
    for (int64_t i = 0; i < n / QK; ++i) {
        int v[32];
        int32_t s[8];
        decode(x[i], v);
        lanes32(v, y[i].qs, s);
        acc.fma(fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d), s);
        mins = std::fma(fp16_to_fp32(x[i].m), fp16_to_fp32(y[i].s), mins);
    }
    return sum8(acc.v) + mins;
}

// K-quants against Q8_K. A block decodes to 256 values q[e] with a scale per
// 16 (sc[e / 16]); Q3_K's -4 and Q6_K's -32 come in through the activation's
// bsums (per 16), Q2_K's, Q4_K's and Q5_K's mins in a second float chain.
struct KBlock {
    int q[256];
    int sc[16];
};

// Lane l: its elements' scaled products, plus bias times the bsums of groups
// 2l and 2l + 1 against their scales (how Q3_K / Q6_K fold in their offset).
// Run r (elements 32r..32r+31) puts its first 16 under scale 2r, the rest
// under 2r + 1.
void k_lanes(const KBlock& k, const BlockQ8_K& y, int bias, int32_t s[8]) {
    for (int l = 0; l < 8; ++l)
        s[l] = bias * (y.bsums[2 * l] * k.sc[2 * l] + y.bsums[2 * l + 1] * k.sc[2 * l + 1]);
    for (int r = 0; r < 8; ++r) {
        int32_t p[32];
        for (int b = 0; b < 32; ++b) p[b] = k.q[32 * r + b] * y.qs[32 * r + b];
        for (int l = 0; l < 8; ++l) s[l] += k.sc[2 * r + l / 4] * (p[4 * l] + p[4 * l + 1] + p[4 * l + 2] + p[4 * l + 3]);
    }
}

// Run r = 4h + layer holds byte b of a 32-byte run: Q2_K / Q3_K keep 2-bit
// `layer` of qs[32h + b], Q6_K nibble layer / 2 of ql[64h + 32(layer % 2) + b]
// and 2-bit `layer` of qh[32h + b].
void dec_q2_k(const BlockQ2_K& x, KBlock& k) {
    for (int r = 0; r < 8; ++r)
        for (int b = 0; b < 32; ++b) k.q[32 * r + b] = (x.qs[32 * (r / 4) + b] >> (2 * (r % 4))) & 3;
    for (int g = 0; g < 16; ++g) k.sc[g] = x.scales[g] & 0xf;
}
void dec_q3_k(const BlockQ3_K& x, KBlock& k) {
    for (int r = 0; r < 8; ++r)
        for (int b = 0; b < 32; ++b)
            k.q[32 * r + b] = ((x.qs[32 * (r / 4) + b] >> (2 * (r % 4))) & 3) | (((x.hmask[b] >> r) & 1) << 2);
    uint8_t sc[16];
    q3k_unpack(x.scales, sc);
    for (int g = 0; g < 16; ++g) k.sc[g] = sc[g] - 32;
}
// Q4_K / Q5_K: run j is nibble j % 2 of qs[32(j / 2) + b] (Q5_K's fifth bit:
// bit j of qh[b]); 6-bit scales and mins per run.
void dec_k4(const uint8_t scales[12], const uint8_t* qs, const uint8_t* qh, KBlock& k, uint8_t sm[16]) {
    for (int j = 0; j < 8; ++j)
        for (int b = 0; b < 32; ++b)
            k.q[32 * j + b] = ((qs[32 * (j / 2) + b] >> (4 * (j % 2))) & 0xf) | (qh ? ((qh[b] >> j) & 1) << 4 : 0);
    k4_unpack(scales, sm);
    for (int g = 0; g < 16; ++g) k.sc[g] = sm[g / 2];
}
void dec_q6_k(const BlockQ6_K& x, KBlock& k) {
    for (int r = 0; r < 8; ++r) {
        const int h = r / 4, layer = r % 4;
        for (int b = 0; b < 32; ++b)
            k.q[32 * r + b] = ((x.ql[64 * h + 32 * (layer % 2) + b] >> (4 * (layer / 2))) & 0xf) |
                              (((x.qh[32 * h + b] >> (2 * layer)) & 3) << 4);
    }
    for (int g = 0; g < 16; ++g) k.sc[g] = x.scales[g];
}
void dec_iq4_xs(const BlockIQ4_XS& x, KBlock& k) {
    for (int ib = 0; ib < 8; ++ib) {
        int v[32];
        nibbles(x.qs + 16 * ib, v);
        table_lookup(kIQ4NL, v);
        std::memcpy(k.q + 32 * ib, v, sizeof(v));
        const int ls = ((x.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((x.scales_h >> (2 * ib)) & 3) << 4);
        k.sc[2 * ib] = k.sc[2 * ib + 1] = ls - 32;
    }
}

float dot_q2_k(const void* wv, const void* av, int64_t n) {
    const BlockQ2_K* x = static_cast<const BlockQ2_K*>(wv);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(av);
    Lanes8 acc, accm;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        KBlock k;
        int32_t s[8], m[8];
        dec_q2_k(x[i], k);
        k_lanes(k, y[i], 0, s);
        for (int l = 0; l < 8; ++l)
            m[l] = y[i].bsums[2 * l] * (x[i].scales[2 * l] >> 4) + y[i].bsums[2 * l + 1] * (x[i].scales[2 * l + 1] >> 4);
        acc.fma(fp16_to_fp32(x[i].d) * y[i].d, s);
        accm.fma(fp16_to_fp32(x[i].dmin) * y[i].d, m);
    }
    return sum8(acc.v) - sum8(accm.v);
}

// Q4_K and Q5_K: the mins meet the bsum pairs (activation sums per 32) in
// four lanes, two sub-blocks each.
template <typename B>
float dot_k4(const void* wv, const void* av, int64_t n) {
    const B* x = static_cast<const B*>(wv);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(av);
    Lanes8 acc;
    float accm[4] = {};
    for (int64_t i = 0; i < n / QK_K; ++i) {
        KBlock k;
        uint8_t sm[16];
        if constexpr (std::is_same_v<B, BlockQ5_K>) dec_k4(x[i].scales, x[i].qs, x[i].qh, k, sm);
        else dec_k4(x[i].scales, x[i].qs, nullptr, k, sm);
        int32_t s[8];
        k_lanes(k, y[i], 0, s);
        acc.fma(fp16_to_fp32(x[i].d) * y[i].d, s);
        const float dm = fp16_to_fp32(x[i].dmin) * y[i].d;
        for (int l = 0; l < 4; ++l) {
            const int p0 = y[i].bsums[4 * l] + y[i].bsums[4 * l + 1], p1 = y[i].bsums[4 * l + 2] + y[i].bsums[4 * l + 3];
            accm[l] = std::fma(dm, float(sm[8 + 2 * l] * p0 + sm[8 + 2 * l + 1] * p1), accm[l]);
        }
    }
    return sum8(acc.v) - sum4(accm);
}

// Q3_K, Q6_K and IQ4_XS: one chain; bias is the value offset (-4, -32, none).
template <typename B, void (*decode)(const B&, KBlock&), int bias>
float dot_k_single(const void* wv, const void* av, int64_t n) {
    const B* x = static_cast<const B*>(wv);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(av);
    Lanes8 acc;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        KBlock k;
        int32_t s[8];
        decode(x[i], k);
        k_lanes(k, y[i], bias, s);
        acc.fma(fp16_to_fp32(x[i].d) * y[i].d, s);
    }
    return sum8(acc.v);
}

using ScalarDotFn = float (*)(const void*, const void*, int64_t);

ScalarDotFn scalar_dot(GgmlType w) {
    switch (w) {
        case GgmlType::F32: return dot_float<load_f32>;
        case GgmlType::F16: return dot_float<load_f16>;
        case GgmlType::BF16: return dot_float<load_bf16>;
        case GgmlType::Q4_0: return dot_q8_family<BlockQ4_0, dec_q4_0, scale_fp16<BlockQ4_0>>;
        case GgmlType::Q4_1: return dot_q8_1_family<BlockQ4_1, dec_q4_1>;
        case GgmlType::Q5_0: return dot_q8_family<BlockQ5_0, dec_q5_0, scale_fp16<BlockQ5_0>>;
        case GgmlType::Q5_1: return dot_q8_1_family<BlockQ5_1, dec_q5_1>;
        case GgmlType::Q8_0: return dot_q8_family<BlockQ8_0, dec_q8_0, scale_fp16<BlockQ8_0>>;
        case GgmlType::Q2_K: return dot_q2_k;
        case GgmlType::Q3_K: return dot_k_single<BlockQ3_K, dec_q3_k, -4>;
        case GgmlType::Q4_K: return dot_k4<BlockQ4_K>;
        case GgmlType::Q5_K: return dot_k4<BlockQ5_K>;
        case GgmlType::Q6_K: return dot_k_single<BlockQ6_K, dec_q6_k, -32>;
        case GgmlType::IQ4_NL: return dot_q8_family<BlockIQ4_NL, dec_iq4_nl, scale_fp16<BlockIQ4_NL>>;
        case GgmlType::IQ4_XS: return dot_k_single<BlockIQ4_XS, dec_iq4_xs, 0>;
        case GgmlType::MXFP4: return dot_q8_family<BlockMXFP4, dec_mxfp4, scale_mxfp4>;
        default: return nullptr;
    }
}

// The active level's table: empty at scalar (matmul and quantize_act fall
// back to the scalar code per missing entry). Only pointers are read here;
// a kernel runs only at a level that best_simd_level() found the CPU to have.
const LevelKernels& kernels() {
    static const LevelKernels scalar;
    switch (simd_level()) {
        case SimdLevel::Avx512: return cpu_features().avx512bf16 ? kDotAvx512Bf16 : kDotAvx512;
        case SimdLevel::Avx2: return kDotAvx2;
        case SimdLevel::Scalar: break;
    }
    return scalar;
}

}  // namespace

void quantize_act(GgmlType w, const float* x, void* dst, int64_t n) {
    const ActType a = act_type(w);
    if (QuantizeFn q = kernels().quantize[int(a)]) {
        q(x, dst, n);
        return;
    }
    switch (a) {
        case ActType::F32: std::memcpy(dst, x, size_t(n) * 4); break;
        case ActType::F16: {
            uint16_t* y = static_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
            break;
        }
        case ActType::BF16: {
            uint16_t* y = static_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
            break;
        }
        case ActType::Q8_0: quantize_q8_32(x, static_cast<BlockQ8_0*>(dst), n); break;
        case ActType::Q8_1: quantize_q8_32(x, static_cast<BlockQ8_1*>(dst), n); break;
        case ActType::Q8_K: quantize_q8_k(x, static_cast<BlockQ8_K*>(dst), n); break;
    }
}

void quantize_acts(GgmlType w, const float* x, void* dst, int64_t n, int64_t n_tok) {
    size_t ab = act_bytes(w, n);
    for (int64_t t = 0; t < n_tok; ++t) quantize_act(w, x + t * n, static_cast<uint8_t*>(dst) + t * ab, n);
}

namespace {

// How far ahead of the row being computed to prefetch weights.
constexpr size_t kPrefetchBytes = 4096;
// Weights go in bands small enough to stay in L2 while every group of tokens
// (whose activations stay in L1) passes over them.
constexpr size_t kBandBytes = 192 << 10;
// Room for a tile's rearranged activations (on the stack: kernels do not
// allocate); a tile size whose scratch would not fit is skipped.
constexpr size_t kTileScratchBytes = 96 << 10;

inline void prefetch_row(const uint8_t* p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
}

inline int64_t band_rows(size_t rb) { return std::max<int64_t>(1, int64_t(kBandBytes / std::max<size_t>(rb, 1))); }

// A tile call costs about its token count (padded tokens are computed too)
// plus this many tokens' worth for decoding its weights once more.
constexpr double kTileDecodeTokens = 2.5;

// Tokens [0, returned) of matmul through tile kernels: whole tiles of the
// largest size whose scratch fits, then the cheapest cover of the rest (e.g.
// 7 tokens as one padded tile of 8 rather than 4 + 2 + 1). Each band of rows
// stays in cache while all the tiles pass over it. Returns 0 when no tile
// fits; dot4 / dot1 then do the work.
__attribute__((noinline)) int64_t matmul_tiles(const TileKernels& tk, const uint8_t* W, size_t rb, int64_t rows,
                                               const uint8_t* A, size_t ab, int64_t n_tok, float* Y, int64_t n,
                                               int64_t r0, int64_t r1) {
    alignas(64) uint8_t scratch[kTileScratchBytes];
    int usable[kTileCount], n_usable = 0;  // indices into kTileSizes, largest first
    for (int s = 0; s < kTileCount; ++s)
        if (tk.tile[s] && tk.scratch(kTileSizes[s], n) <= sizeof(scratch)) usable[n_usable++] = s;
    if (n_usable == 0) return 0;
    const int big = kTileSizes[usable[0]];
    const int64_t whole = n_tok / big * big;
    const int rest = int(n_tok - whole);
    double cost[kTileSizes[0]];
    int pick[kTileSizes[0]];  // rest r: run usable[pick[r]] first
    cost[0] = 0;
    for (int r = 1; r <= rest; ++r) {
        cost[r] = 1e9;
        for (int k = 0; k < n_usable; ++k) {
            const int nt = kTileSizes[usable[k]];
            const double c = nt + kTileDecodeTokens + (nt < r ? cost[r - nt] : 0);
            if (c < cost[r]) {
                cost[r] = c;
                pick[r] = k;
            }
        }
    }
    const int64_t band = band_rows(rb);
    for (int64_t rs = r0; rs < r1; rs += band) {
        const int64_t re = std::min(r1, rs + band);
        auto run = [&](int s, int64_t t, int valid) {
            tk.tile[s](W + size_t(rs) * rb, rb, re - rs, A + size_t(t) * ab, ab, valid, n, Y + t * rows + rs,
                       size_t(rows), scratch);
        };
        int64_t t = 0;
        for (; t < whole; t += big) run(usable[0], t, big);
        for (int r = rest; r > 0;) {
            const int s = usable[pick[r]], valid = std::min(kTileSizes[s], r);
            run(s, t, valid);
            t += valid;
            r -= valid;
        }
    }
    return n_tok;
}

}  // namespace

float vec_dot(GgmlType w, const void* wrow, const void* act, int64_t n) {
    float out = 0;
    matvec(w, wrow, act, &out, n, 0, 1);
    return out;
}

void matvec(GgmlType w, const void* W, const void* act, float* y, int64_t n, int64_t r0, int64_t r1) {
    matmul(w, W, 0, act, 1, y, n, r0, r1);
}

void matmul(GgmlType w, const void* W, int64_t rows, const void* acts, int64_t n_tok, float* Y, int64_t n,
            int64_t r0, int64_t r1) {
    const LevelKernels& k = kernels();
    RowDotFn dot1 = k.dot1[uint32_t(w)];
    RowDotFn dot4 = k.dot4[uint32_t(w)];
    const size_t rb = row_bytes(w, n), ab = act_bytes(w, n);
    const uint8_t* Wb = static_cast<const uint8_t*>(W);
    const uint8_t* A = static_cast<const uint8_t*>(acts);
    if (!dot1) {
        ScalarDotFn f = scalar_dot(w);
        if (!f) return;  // not runnable: callers check is_runnable() at load time
        for (int64_t t = 0; t < n_tok; ++t)
            for (int64_t r = r0; r < r1; ++r) Y[t * rows + r] = f(Wb + r * rb, A + t * ab, n);
        return;
    }
    int64_t t0 = 0;
    const TileKernels& tk = k.tiles[uint32_t(w)];
    if (tk.scratch && n_tok >= 2) t0 = matmul_tiles(tk, Wb, rb, rows, A, ab, n_tok, Y, n, r0, r1);
    const int64_t rows_per_band = band_rows(rb);
    const int64_t ahead = int64_t((kPrefetchBytes + rb - 1) / std::max<size_t>(rb, 1));
    for (int64_t rs = r0; rs < r1; rs += rows_per_band) {
        const int64_t re = std::min(r1, rs + rows_per_band);
        int64_t t = t0;
        for (; t + 4 <= n_tok; t += 4) {
            for (int64_t r = rs; r < re; ++r) {
                float out[4];
                dot4(Wb + r * rb, A + t * ab, ab, n, out);
                for (int i = 0; i < 4; ++i) Y[(t + i) * rows + r] = out[i];
            }
        }
        for (; t < n_tok; ++t) {
            for (int64_t r = rs; r < re; ++r) {
                // The kernels are compute-heavy enough that the hardware
                // prefetcher alone leaves DRAM idle; ask for a row ahead.
                if (r + ahead < r1) prefetch_row(Wb + (r + ahead) * rb, rb);
                dot1(Wb + r * rb, A + t * ab, ab, n, &Y[t * rows + r]);
            }
        }
    }
}

}  // namespace ms
