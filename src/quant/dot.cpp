#include "quant/dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
// Scalar reference dot products: the integer sum of each block exactly as the
// reference forms it, then one float multiply-add per block.

namespace {

float dot_f32(const void* wv, const void* av, int64_t n) {
    const float* w = static_cast<const float*>(wv);
    const float* a = static_cast<const float*>(av);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(w[i]) * double(a[i]);
    return float(s);
}

float dot_f16(const void* wv, const void* av, int64_t n) {
    const uint16_t* w = static_cast<const uint16_t*>(wv);
    const uint16_t* a = static_cast<const uint16_t*>(av);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(fp16_to_fp32(w[i]) * fp16_to_fp32(a[i]));  // product exact
    return float(s);
}

float dot_bf16(const void* wv, const void* av, int64_t n) {
    const uint16_t* w = static_cast<const uint16_t*>(wv);
    const uint16_t* a = static_cast<const uint16_t*>(av);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(bf16_to_fp32(w[i]) * bf16_to_fp32(a[i]));  // product exact
    return float(s);
}

// 32-element weight blocks decode to 32 integers and a float scale; against
// Q8_0 the block contributes d_w * d_a * sum(q * a). Q4_1 / Q5_1 (against
// Q8_1) add m_w * s_a, with s_a = d_a * sum(a) stored in the activation.
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

template <typename B, void (*decode)(const B&, int*), float (*scale)(const B&)>
float dot_q8_family(const void* wv, const void* av, int64_t n) {
    const B* x = static_cast<const B*>(wv);
    const BlockQ8_0* y = static_cast<const BlockQ8_0*>(av);
    float s = 0;
    for (int64_t i = 0; i < n / QK; ++i) {
        int v[32], isum = 0;
        decode(x[i], v);
        for (int j = 0; j < 32; ++j) isum += v[j] * y[i].qs[j];
        s += float(isum) * (scale(x[i]) * fp16_to_fp32(y[i].d));
    }
    return s;
}

template <typename B, void (*decode)(const B&, int*)>
float dot_q8_1_family(const void* wv, const void* av, int64_t n) {
    const B* x = static_cast<const B*>(wv);
    const BlockQ8_1* y = static_cast<const BlockQ8_1*>(av);
    float s = 0;
    for (int64_t i = 0; i < n / QK; ++i) {
        int v[32], isum = 0;
        decode(x[i], v);
        for (int j = 0; j < 32; ++j) isum += v[j] * y[i].qs[j];
        s += float(isum) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) + fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
    }
    return s;
}

// K-quants against Q8_K. Mins are folded in through the activation's bsums.
float dot_q2_k(const void* wv, const void* av, int64_t n) {
    const BlockQ2_K* x = static_cast<const BlockQ2_K*>(wv);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(av);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int summs = 0, isum = 0;
        for (int g = 0; g < 16; ++g) summs += y[i].bsums[g] * (x[i].scales[g] >> 4);
        const int8_t* a = y[i].qs;
        for (int g = 0; g < 16; ++g) {
            // Group g: 32-byte half g/8, 2-bit layer (g%8)/2, bytes 16*(g%2)...
            const uint8_t* q = x[i].qs + 32 * (g / 8) + 16 * (g % 2);
            int shift = 2 * ((g % 8) / 2);
            int gs = 0;
            for (int l = 0; l < 16; ++l) gs += ((q[l] >> shift) & 3) * a[16 * g + l];
            isum += (x[i].scales[g] & 0xf) * gs;
        }
        float dall = y[i].d * fp16_to_fp32(x[i].d), dmin = y[i].d * fp16_to_fp32(x[i].dmin);
        s += dall * float(isum) - dmin * float(summs);
    }
    return s;
}

float dot_q3_k(const void* wv, const void* av, int64_t n) {
    const BlockQ3_K* x = static_cast<const BlockQ3_K*>(wv);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(av);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        uint8_t sc[16];
        q3k_unpack(x[i].scales, sc);
        const int8_t* a = y[i].qs;
        int isum = 0;
        for (int g = 0; g < 16; ++g) {
            const uint8_t* q = x[i].qs + 32 * (g / 8) + 16 * (g % 2);
            const uint8_t* hm = x[i].hmask + 16 * (g % 2);
            int layer = (g % 8) / 2;  // 2-bit layer within the half
            uint8_t m = uint8_t(1 << (4 * (g / 8) + layer));
            int gs = 0;
            for (int l = 0; l < 16; ++l) {
                int v = ((q[l] >> (2 * layer)) & 3) - ((hm[l] & m) ? 0 : 4);
                gs += v * a[16 * g + l];
            }
            isum += (sc[g] - 32) * gs;
        }
        s += fp16_to_fp32(x[i].d) * y[i].d * float(isum);
    }
    return s;
}

// Q4_K and Q5_K share everything but the fifth bit (qh == nullptr for Q4_K).
inline float dot_k4_block(uint16_t dw, uint16_t dminw, const uint8_t scales[12], const uint8_t* qs,
                          const uint8_t* qh, const BlockQ8_K& y) {
    int isum = 0, summs = 0;
    uint8_t sm[16];
    k4_unpack(scales, sm);
    for (int j = 0; j < 8; ++j) {
        const int sc = sm[j], m = sm[8 + j];
        summs += m * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
        const uint8_t* q = qs + 32 * (j / 2);
        int shift = 4 * (j % 2);
        int gs = 0;
        for (int l = 0; l < 32; ++l) {
            int v = (q[l] >> shift) & 0xf;
            if (qh && (qh[l] >> j) & 1) v += 16;
            gs += v * y.qs[32 * j + l];
        }
        isum += sc * gs;
    }
    float d = y.d * fp16_to_fp32(dw), dmin = y.d * fp16_to_fp32(dminw);
    return d * float(isum) - dmin * float(summs);
}

float dot_q4_k(const void* wv, const void* av, int64_t n) {
    const BlockQ4_K* x = static_cast<const BlockQ4_K*>(wv);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(av);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) s += dot_k4_block(x[i].d, x[i].dmin, x[i].scales, x[i].qs, nullptr, y[i]);
    return s;
}

float dot_q5_k(const void* wv, const void* av, int64_t n) {
    const BlockQ5_K* x = static_cast<const BlockQ5_K*>(wv);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(av);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) s += dot_k4_block(x[i].d, x[i].dmin, x[i].scales, x[i].qs, x[i].qh, y[i]);
    return s;
}

float dot_q6_k(const void* wv, const void* av, int64_t n) {
    const BlockQ6_K* x = static_cast<const BlockQ6_K*>(wv);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(av);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int isum = 0;
        for (int g = 0; g < 16; ++g) {
            // Element e = 128*h + 32*k + l (k = layer 0..3): low nibble of ql[64h + 32*(k%2) + l]
            // (high nibble when k >= 2), 2 high bits (qh[32h + l] >> 2k) & 3.
            int gs = 0;
            for (int l16 = 0; l16 < 16; ++l16) {
                int e = 16 * g + l16, h = e / 128, k = (e % 128) / 32, l = e % 32;
                uint8_t lo = x[i].ql[64 * h + 32 * (k % 2) + l];
                int v = ((k < 2 ? lo & 0xf : lo >> 4) | (((x[i].qh[32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
                gs += v * y[i].qs[e];
            }
            isum += x[i].scales[g] * gs;
        }
        s += fp16_to_fp32(x[i].d) * y[i].d * float(isum);
    }
    return s;
}

float dot_iq4_xs(const void* wv, const void* av, int64_t n) {
    const BlockIQ4_XS* x = static_cast<const BlockIQ4_XS*>(wv);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(av);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int isum = 0;
        for (int ib = 0; ib < 8; ++ib) {
            int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            int v[32], sub = 0;
            nibbles(x[i].qs + 16 * ib, v);
            table_lookup(kIQ4NL, v);
            for (int j = 0; j < 32; ++j) sub += v[j] * y[i].qs[32 * ib + j];
            isum += (ls - 32) * sub;
        }
        s += fp16_to_fp32(x[i].d) * y[i].d * float(isum);
    }
    return s;
}

using ScalarDotFn = float (*)(const void*, const void*, int64_t);

ScalarDotFn scalar_dot(GgmlType w) {
    switch (w) {
        case GgmlType::F32: return dot_f32;
        case GgmlType::F16: return dot_f16;
        case GgmlType::BF16: return dot_bf16;
        case GgmlType::Q4_0: return dot_q8_family<BlockQ4_0, dec_q4_0, scale_fp16<BlockQ4_0>>;
        case GgmlType::Q4_1: return dot_q8_1_family<BlockQ4_1, dec_q4_1>;
        case GgmlType::Q5_0: return dot_q8_family<BlockQ5_0, dec_q5_0, scale_fp16<BlockQ5_0>>;
        case GgmlType::Q5_1: return dot_q8_1_family<BlockQ5_1, dec_q5_1>;
        case GgmlType::Q8_0: return dot_q8_family<BlockQ8_0, dec_q8_0, scale_fp16<BlockQ8_0>>;
        case GgmlType::Q2_K: return dot_q2_k;
        case GgmlType::Q3_K: return dot_q3_k;
        case GgmlType::Q4_K: return dot_q4_k;
        case GgmlType::Q5_K: return dot_q5_k;
        case GgmlType::Q6_K: return dot_q6_k;
        case GgmlType::IQ4_NL: return dot_q8_family<BlockIQ4_NL, dec_iq4_nl, scale_fp16<BlockIQ4_NL>>;
        case GgmlType::IQ4_XS: return dot_iq4_xs;
        case GgmlType::MXFP4: return dot_q8_family<BlockMXFP4, dec_mxfp4, scale_mxfp4>;
        default: return nullptr;
    }
}

struct KernelTables {
    LevelKernels level[3];
    KernelTables() {
        // Every level starts from nothing; missing SIMD entries fall back to
        // scalar in pick() so each level's table says what it really has.
        add_avx2_kernels(level[int(SimdLevel::Avx2)]);
        add_avx2_kernels(level[int(SimdLevel::Avx512)]);
        add_avx512_kernels(level[int(SimdLevel::Avx512)]);
    }
};

const KernelTables& tables() {
    static const KernelTables t;
    return t;
}

}  // namespace

void quantize_act(GgmlType w, const float* x, void* dst, int64_t n) {
    const ActType a = act_type(w);
    if (QuantizeFn q = tables().level[int(simd_level())].quantize[int(a)]) {
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
    const LevelKernels& k = tables().level[int(simd_level())];
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
