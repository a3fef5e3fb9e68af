// IEEE half (fp16) and bfloat16 conversions with exact round-to-nearest-even,
// as the reference engine's F16C / AVX512-BF16 paths round. Header-only so the
// KV cache and kernels can inline them.
#pragma once
#include <cstdint>
#include <cstring>

namespace ms {

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// Exact: every fp16 value (subnormals, inf, NaN payload) maps to one float.
inline float fp16_to_fp32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return bits_float(sign | 0x7f800000 | (man << 13));  // inf / NaN
    if (exp == 0) {
        // Subnormal (or zero): man * 2^-24, exact in float.
        float v = float(man) * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}

// Round to nearest, ties to even; overflow gives inf, NaN stays a quiet NaN.
inline uint16_t fp32_to_fp16(float f) {
    uint32_t u = float_bits(f);
    uint16_t sign = uint16_t((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffff;
    if (a > 0x7f800000) return uint16_t(sign | 0x7e00 | ((a >> 13) & 0x3ff));  // NaN
    if (a >= 0x477ff000) return uint16_t(sign | 0x7c00);  // rounds to >= 65536: inf
    if (a < 0x38800000) {
        // Subnormal in fp16 (|f| < 2^-14): round |f| / 2^-24 to an integer, RNE.
        uint32_t mant = (a & 0x7fffff) | 0x800000;
        int e = int(a >> 23);  // biased exponent, < 113
        if (e < 102) return sign;  // below half the smallest subnormal (2^-25): zero
        int shift = 126 - e;        // value = mant * 2^(e-150); want units of 2^-24
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return uint16_t(sign | q);  // q may carry into the smallest normal: still right
    }
    uint32_t r = a + 0xfff + ((a >> 13) & 1);  // RNE on the 13 dropped bits
    return uint16_t(sign | ((r - (112u << 23)) >> 13));
}

inline float bf16_to_fp32(uint16_t h) { return bits_float(uint32_t(h) << 16); }

// Round to nearest, ties to even; NaN stays a quiet NaN.
inline uint16_t fp32_to_bf16(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return uint16_t((u >> 16) | 0x40);
    return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

}  // namespace ms
