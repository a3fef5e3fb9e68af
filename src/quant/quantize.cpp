#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/half.h"

namespace ms {

namespace {

// d = max|x| / 127 and q = roundf(x / d), in the order of the reference
// quantizer's scalar steps (its activation path, quantize_act, rounds
// differently: AVX2 steps).
void q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float amax = 0;
        for (int j = 0; j < QK; j++) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < QK; j++) y[i].qs[j] = int8_t(std::roundf(x[j] * id));
    }
}

// One 32-value sub-block as x ~ s * q + b with q in [0, 15] and b <= 0
// (Q4_K stores b as -dmin * m, m >= 0): from min/max, then two rounds of
// least squares on the chosen q, kept while the error falls.
void fit_sub_block(const float* x, float* s_out, float* b_out) {
    float lo = 0, hi = 0;
    for (int j = 0; j < 32; j++) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
    }
    float s = (hi - lo) / 15.0f, b = lo;
    auto error = [&](float s_, float b_, int* q) {
        float e = 0;
        for (int j = 0; j < 32; j++) {
            q[j] = s_ > 0 ? std::clamp(int(std::nearbyint((x[j] - b_) / s_)), 0, 15) : 0;
            const float r = s_ * float(q[j]) + b_ - x[j];
            e += r * r;
        }
        return e;
    };
    int q[32];
    float best = error(s, b, q);
    for (int round = 0; round < 2 && s > 0; round++) {
        double sq = 0, sqq = 0, sx = 0, sqx = 0;
        for (int j = 0; j < 32; j++) {
            sq += q[j];
            sqq += double(q[j]) * q[j];
            sx += x[j];
            sqx += double(q[j]) * x[j];
        }
        const double det = 32 * sqq - sq * sq;
        if (det <= 0) break;
        double ns = (32 * sqx - sq * sx) / det, nb = (sqq * sx - sq * sqx) / det;
        if (nb > 0) {
            nb = 0;
            ns = sqx / sqq;
        }
        if (ns <= 0) break;
        int q2[32];
        const float e = error(float(ns), float(nb), q2);
        if (e >= best) break;
        best = e;
        s = float(ns);
        b = float(nb);
        std::memcpy(q, q2, sizeof q);
    }
    *s_out = s;
    *b_out = b;
}

void q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float s[8], m[8], s_max = 0, m_max = 0;
        for (int j = 0; j < 8; j++) {
            float b;
            fit_sub_block(x + 32 * j, &s[j], &b);
            m[j] = -b;
            s_max = std::max(s_max, s[j]);
            m_max = std::max(m_max, m[j]);
        }
        y[i].d = fp32_to_fp16(s_max / 63.0f);
        y[i].dmin = fp32_to_fp16(m_max / 63.0f);
        const float d = fp16_to_fp32(y[i].d), dmin = fp16_to_fp32(y[i].dmin);
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) {
            sc[j] = d > 0 ? uint8_t(std::clamp(int(std::nearbyint(s[j] / d)), 0, 63)) : 0;
            mn[j] = dmin > 0 ? uint8_t(std::clamp(int(std::nearbyint(m[j] / dmin)), 0, 63)) : 0;
        }
        // The 12-byte packing k4_unpack (quant/blocks.h) reads.
        for (int j = 0; j < 4; j++) {
            y[i].scales[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
            y[i].scales[j + 4] = uint8_t(mn[j] | ((mn[j + 4] >> 4) << 6));
            y[i].scales[j + 8] = uint8_t((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
        }
        uint8_t q[QK_K];
        for (int j = 0; j < 8; j++) {
            const float step = d * float(sc[j]), off = dmin * float(mn[j]);
            for (int l = 0; l < 32; l++) {
                const float v = x[32 * j + l];
                q[32 * j + l] = step > 0 ? uint8_t(std::clamp(int(std::nearbyint((v + off) / step)), 0, 15)) : 0;
            }
        }
        // Chunk c of 64 values: low nibbles sub-block 2c, high nibbles 2c + 1.
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) y[i].qs[32 * c + l] = uint8_t(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
        }
    }
}

}  // namespace

bool can_quantize(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q4_K; }

bool quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
    switch (t) {
        case GgmlType::Q8_0: q8_0(src, static_cast<BlockQ8_0*>(dst), n / QK); return true;
        case GgmlType::Q4_K: q4_k(src, static_cast<BlockQ4_K*>(dst), n / QK_K); return true;
        default: return false;
    }
}

}  // namespace ms
