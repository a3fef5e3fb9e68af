#include "quant/dequant.h"

#include <cstring>
#include <stdexcept>

#include "quant/blocks.h"
#include "quant/half.h"

namespace ms {

// Each routine follows the reference's float operation order exactly (which
// product is formed first, where the min is subtracted), because the golden
// tensors are compared bit for bit.
namespace {

void deq_f32(const void* src, float* y, int64_t n) { std::memcpy(y, src, size_t(n) * 4); }

void deq_f16(const void* src, float* y, int64_t n) {
    const uint16_t* x = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void deq_bf16(const void* src, float* y, int64_t n) {
    const uint16_t* x = static_cast<const uint16_t*>(src);
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}

void deq_q4_0(const void* src, float* y, int64_t n) {
    const BlockQ4_0* x = static_cast<const BlockQ4_0*>(src);
    for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = float((x[i].qs[j] & 0xf) - 8) * d;
            y[j + 16] = float((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void deq_q4_1(const void* src, float* y, int64_t n) {
    const BlockQ4_1* x = static_cast<const BlockQ4_1*>(src);
    for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
        for (int j = 0; j < 16; ++j) {
            y[j] = float(x[i].qs[j] & 0xf) * d + m;
            y[j + 16] = float(x[i].qs[j] >> 4) * d + m;
        }
    }
}

// Fifth bits: bit j of the 32-bit qh is element j's.
inline uint32_t load_qh(const uint8_t* qh) { uint32_t v; std::memcpy(&v, qh, 4); return v; }

void deq_q5_0(const void* src, float* y, int64_t n) {
    const BlockQ5_0* x = static_cast<const BlockQ5_0*>(src);
    for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        float d = fp16_to_fp32(x[i].d);
        uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < 16; ++j) {
            int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            y[j] = float(((x[i].qs[j] & 0xf) | (h0 << 4)) - 16) * d;
            y[j + 16] = float(((x[i].qs[j] >> 4) | (h1 << 4)) - 16) * d;
        }
    }
}

void deq_q5_1(const void* src, float* y, int64_t n) {
    const BlockQ5_1* x = static_cast<const BlockQ5_1*>(src);
    for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
        uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < 16; ++j) {
            int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
            y[j] = float((x[i].qs[j] & 0xf) | (h0 << 4)) * d + m;
            y[j + 16] = float((x[i].qs[j] >> 4) | (h1 << 4)) * d + m;
        }
    }
}

void deq_q8_0(const void* src, float* y, int64_t n) {
    const BlockQ8_0* x = static_cast<const BlockQ8_0*>(src);
    for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK; ++j) y[j] = float(x[i].qs[j]) * d;
    }
}

void deq_iq4_nl(const void* src, float* y, int64_t n) {
    const BlockIQ4_NL* x = static_cast<const BlockIQ4_NL*>(src);
    for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * float(kIQ4NL[x[i].qs[j] & 0xf]);
            y[j + 16] = d * float(kIQ4NL[x[i].qs[j] >> 4]);
        }
    }
}

void deq_mxfp4(const void* src, float* y, int64_t n) {
    const BlockMXFP4* x = static_cast<const BlockMXFP4*>(src);
    for (int64_t i = 0; i < n / QK; ++i, y += QK) {
        float d = e8m0_half(x[i].e);
        for (int j = 0; j < 16; ++j) {
            y[j] = float(kMXFP4[x[i].qs[j] & 0xf]) * d;
            y[j + 16] = float(kMXFP4[x[i].qs[j] >> 4]) * d;
        }
    }
}

// Q2_K: 16 sub-blocks of 16; scale byte = (min << 4) | scale. Each 32-byte
// group of qs holds 4 layers of 2-bit values (shift 0, 2, 4, 6) for 128 elements.
void deq_q2_k(const void* src, float* y, int64_t n) {
    const BlockQ2_K* x = static_cast<const BlockQ2_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        const uint8_t* q = x[i].qs;
        int is = 0;
        for (int half = 0; half < 2; ++half, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; ++part) {
                    uint8_t sc = x[i].scales[is++];
                    float dl = d * float(sc & 0xf), ml = dmin * float(sc >> 4);
                    for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l + 16 * part] >> shift) & 3) - ml;
                }
            }
        }
    }
}

// Q3_K: like Q2_K's layout for the low 2 bits; hmask bit set adds 4 (else the
// value is 4 lower), 16 signed 6-bit scales.
void deq_q3_k(const void* src, float* y, int64_t n) {
    const BlockQ3_K* x = static_cast<const BlockQ3_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        float d = fp16_to_fp32(x[i].d);
        uint8_t scales[16];
        q3k_unpack(x[i].scales, scales);
        const uint8_t* q = x[i].qs;
        const uint8_t* hm = x[i].hmask;
        int is = 0;
        uint8_t m = 1;
        for (int half = 0; half < 2; ++half, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = uint8_t(m << 1)) {
                for (int part = 0; part < 2; ++part) {
                    float dl = d * float(scales[is++] - 32);
                    for (int l = 16 * part; l < 16 * part + 16; ++l) {
                        int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
                        *y++ = dl * float(v);
                    }
                }
            }
        }
    }
}

// Q4_K / Q5_K: 8 sub-blocks of 32; each 32 bytes of qs hold two sub-blocks
// (low nibbles first). Q5_K adds a fifth bit per element: bit j of qh[l] for
// sub-block j (qh is null for Q4_K).
void deq_k4_block(uint16_t dw, uint16_t dminw, const uint8_t scales[12], const uint8_t* q, const uint8_t* qh,
                  float* y) {
    float d = fp16_to_fp32(dw), dmin = fp16_to_fp32(dminw);
    uint8_t sm[16];
    k4_unpack(scales, sm);
    for (int j = 0; j < 8; ++j) {
        float dl = d * float(sm[j]), ml = dmin * float(sm[8 + j]);
        const uint8_t* qj = q + 32 * (j / 2);
        for (int l = 0; l < 32; ++l) {
            int v = (j % 2 ? qj[l] >> 4 : qj[l] & 0xf) + (qh && ((qh[l] >> j) & 1) ? 16 : 0);
            *y++ = dl * float(v) - ml;
        }
    }
}

void deq_q4_k(const void* src, float* y, int64_t n) {
    const BlockQ4_K* x = static_cast<const BlockQ4_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) deq_k4_block(x[i].d, x[i].dmin, x[i].scales, x[i].qs, nullptr, y);
}

void deq_q5_k(const void* src, float* y, int64_t n) {
    const BlockQ5_K* x = static_cast<const BlockQ5_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) deq_k4_block(x[i].d, x[i].dmin, x[i].scales, x[i].qs, x[i].qh, y);
}

// Q6_K: per 128 elements, 64 bytes of low nibbles and 32 bytes of 2-bit highs;
// 16 signed 8-bit scales.
void deq_q6_k(const void* src, float* y, int64_t n) {
    const BlockQ6_K* x = static_cast<const BlockQ6_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        float d = fp16_to_fp32(x[i].d);
        const uint8_t* ql = x[i].ql;
        const uint8_t* qh = x[i].qh;
        const int8_t* sc = x[i].scales;
        for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * float(sc[is]) * float(q1);
                y[l + 32] = d * float(sc[is + 2]) * float(q2);
                y[l + 64] = d * float(sc[is + 4]) * float(q3);
                y[l + 96] = d * float(sc[is + 6]) * float(q4);
            }
        }
    }
}

// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (low 4 bits in scales_l, high 2
// in scales_h), values from the IQ4_NL codebook.
void deq_iq4_xs(const void* src, float* y, int64_t n) {
    const BlockIQ4_XS* x = static_cast<const BlockIQ4_XS*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        float d = fp16_to_fp32(x[i].d);
        const uint8_t* qs = x[i].qs;
        for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
            int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            float dl = d * float(ls - 32);
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * float(kIQ4NL[qs[j] & 0xf]);
                y[j + 16] = dl * float(kIQ4NL[qs[j] >> 4]);
            }
        }
    }
}

using DequantFn = void (*)(const void*, float*, int64_t);

DequantFn dequant_fn(GgmlType t) {
    switch (t) {
        case GgmlType::F32: return deq_f32;
        case GgmlType::F16: return deq_f16;
        case GgmlType::BF16: return deq_bf16;
        case GgmlType::Q4_0: return deq_q4_0;
        case GgmlType::Q4_1: return deq_q4_1;
        case GgmlType::Q5_0: return deq_q5_0;
        case GgmlType::Q5_1: return deq_q5_1;
        case GgmlType::Q8_0: return deq_q8_0;
        case GgmlType::Q2_K: return deq_q2_k;
        case GgmlType::Q3_K: return deq_q3_k;
        case GgmlType::Q4_K: return deq_q4_k;
        case GgmlType::Q5_K: return deq_q5_k;
        case GgmlType::Q6_K: return deq_q6_k;
        case GgmlType::IQ4_NL: return deq_iq4_nl;
        case GgmlType::IQ4_XS: return deq_iq4_xs;
        case GgmlType::MXFP4: return deq_mxfp4;
        default: return nullptr;
    }
}

}  // namespace

bool dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
    DequantFn f = dequant_fn(t);
    if (!f) return false;
    f(src, dst, n);
    return true;
}

bool is_runnable(GgmlType t) { return dequant_fn(t) != nullptr; }

void check_runnable(GgmlType t, const std::string& tensor_name) {
    if (!is_runnable(t))
        throw std::runtime_error("tensor " + tensor_name + " has type " + type_name(t) +
                                 ", which moestream cannot run");
}

}  // namespace ms
