// Byte layouts of the GGML block formats (public format facts), as plain
// structs that alias the bytes of a GGUF tensor row. Scales marked "fp16" are
// IEEE half bits (quant/half.h); MXFP4's e is an E8M0 power-of-two exponent.
#pragma once
#include <bit>
#include <cstdint>

namespace ms {

constexpr int QK = 32;    // elements per block of the 32-element formats
constexpr int QK_K = 256; // elements per super-block of the K-quants

struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };            // x = d * (q - 8)
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[16]; };         // x = d * q + m
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };      // x = d * (q - 16)
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };   // x = d * q + m
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };             // x = d * q
struct BlockQ8_1 { uint16_t d, s; int8_t qs[32]; };          // s = d * sum(qs)
struct BlockMXFP4 { uint8_t e; uint8_t qs[16]; };            // x = 2^(e-127) * fp4(q)
struct BlockIQ4_NL { uint16_t d; uint8_t qs[16]; };          // x = d * kIQ4NL[q]

// Nibble order of the 32-element 4-bit formats: byte j holds element j (low
// nibble) and element j + 16 (high nibble).

// K-quants: a super-block of 256 split into sub-blocks with 6/4/8-bit scales.
struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };
// Activation format of the K-quants: float scale, bsums[i] = sum of qs[16i..16i+16).
struct BlockQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockMXFP4) == 17 && sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockQ8_K) == 292);

// Non-linear 4-bit codebook of IQ4_NL / IQ4_XS.
inline constexpr int8_t kIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1, 13, 25, 38, 53, 69, 89, 113};
// FP4 (E2M1) values times 2, so they are integers; the E8M0 scale is halved
// to compensate (e8m0_half).
inline constexpr int8_t kMXFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e-128) as float: half the E8M0 scale (e = 0 and 1 give float
// subnormals). A table, because kernels look one up per 32 weights.
struct E8M0HalfTable {
    float v[256];
    constexpr E8M0HalfTable() : v() {
        for (int e = 0; e < 256; ++e) v[e] = std::bit_cast<float>(e < 2 ? (0x00200000u << e) : (uint32_t(e - 1) << 23));
    }
};
inline constexpr E8M0HalfTable kE8M0Half{};
inline float e8m0_half(uint8_t e) { return kE8M0Half.v[e]; }

// Q4_K / Q5_K pack 8 six-bit scales and 8 six-bit mins into 12 bytes: bytes
// 0-3 hold scales 0-3 and bytes 4-7 mins 0-3 in their low 6 bits; bytes 8-11
// hold the low nibbles of scales 4-7 (low) and mins 4-7 (high), whose top two
// bits sit in the spare top bits of bytes 0-3 (scales) and 4-7 (mins).
// out[0..8) = scales, out[8..16) = mins. Word-wise, so kernels can afford it.
inline void k4_unpack(const uint8_t q[12], uint8_t out[16]) {
    uint32_t w[3];
    __builtin_memcpy(w, q, 12);
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
    uint32_t u[4] = {
        w[0] & low6,                                          // scales 0-3
        (w[2] & low4) | (((w[0] >> 6) & low2) << 4),         // scales 4-7
        w[1] & low6,                                          // mins 0-3
        ((w[2] >> 4) & low4) | (((w[1] >> 6) & low2) << 4),  // mins 4-7
    };
    __builtin_memcpy(out, u, 16);
}

// Q3_K packs 16 six-bit scales (biased by 32) into 12 bytes: low nibbles of
// scales 0-7 and high nibbles of 8-15 in bytes 0-7, the top two bits of scale
// j in bits 2*(j/4) of byte 8 + j%4. out[j] = scale j + 32, in [0, 63].
inline void q3k_unpack(const uint8_t s[12], uint8_t out[16]) {
    uint32_t w[3];
    __builtin_memcpy(w, s, 12);
    const uint32_t low4 = 0x0f0f0f0f, low2 = 0x03030303;
    uint32_t u[4] = {
        (w[0] & low4) | (((w[2] >> 0) & low2) << 4),
        (w[1] & low4) | (((w[2] >> 2) & low2) << 4),
        ((w[0] >> 4) & low4) | (((w[2] >> 4) & low2) << 4),
        ((w[1] >> 4) & low4) | (((w[2] >> 6) & low2) << 4),
    };
    __builtin_memcpy(out, u, 16);
}

}  // namespace ms
