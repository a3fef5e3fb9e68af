// Byte layouts of the GGML block formats (public format facts), as plain
// structs that alias the bytes of a GGUF tensor row. Scales marked "fp16" are
// IEEE half bits (quant/half.h); MXFP4's e is an E8M0 power-of-two exponent.
#pragma once
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

// 2^(e-128) as float (half the E8M0 scale; e = 0 and 1 are float subnormals).
inline float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? (0x00200000u << e) : (uint32_t(e - 1) << 23);
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

// The 6-bit scale and min of sub-block j (0..7) of Q4_K / Q5_K, packed in 12 bytes:
// bytes 0-3 low 6 bits of scales 0-3, bytes 4-7 of mins 0-3, bytes 8-11 the low
// nibbles of scales/mins 4-7 whose top 2 bits sit in the spare bits of bytes 0-7.
inline void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = uint8_t((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// The 16 signed 6-bit scales of Q3_K (stored biased by 32 in 12 bytes).
inline void q3k_scales(const uint8_t* s, int8_t out[16]) {
    for (int j = 0; j < 16; ++j) {
        int low = j < 8 ? (s[j] & 0xf) : (s[j - 8] >> 4);
        int high = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
        out[j] = int8_t((low | (high << 4)) - 32);
    }
}

}  // namespace ms
