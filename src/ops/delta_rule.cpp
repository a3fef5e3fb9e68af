#include "ops/delta_rule.h"

#include <algorithm>
#include <cmath>

#include "ops/attention_kernels.h"
#include "ops/delta_rule_kernels.h"
#include "quant/cpu.h"

namespace ms {

namespace {

// The scalar reference of delta_rule_step over columns [j0, hv), 16 at a
// time: each column's sums run over the rows in order, the products rounded
// before they are added (the SIMD loops' steps exactly).
void step_scalar(float* S, int hk, int hv, int j0, const float* q, const float* k, const float* v, float beta,
                 float decay, float scale, float* out) {
    constexpr int B = 16;
    for (int jb = j0; jb < hv; jb += B) {
        const int nb = std::min(B, hv - jb);
        float acc[B] = {}, d[B], o[B] = {};
        for (int i = 0; i < hk; i++) {
            const float* row = S + int64_t(i) * hv + jb;
            for (int l = 0; l < nb; l++) acc[l] += (row[l] * decay) * k[i];
        }
        for (int l = 0; l < nb; l++) d[l] = beta * (v[jb + l] - acc[l]);
        for (int i = 0; i < hk; i++) {
            float* row = S + int64_t(i) * hv + jb;
            for (int l = 0; l < nb; l++) {
                const float s = row[l] * decay + k[i] * d[l];
                row[l] = s;
                o[l] += s * q[i];
            }
        }
        for (int l = 0; l < nb; l++) out[jb + l] = o[l] * scale;
    }
}

const DeltaRuleKernels* step_kernels() {
    switch (simd_level()) {
        case SimdLevel::Avx512: return &kDeltaRuleAvx512;
        case SimdLevel::Avx2: return &kDeltaRuleAvx2;
        case SimdLevel::Scalar: break;
    }
    return nullptr;
}

// out (n_q rows of dim) = p (n_q rows p_stride apart, n_pos used) times v
// (n_pos rows `stride` apart, dim used): each sum over the rows in order,
// through the attention mixing loops where the CPU has them (their products
// are fused: within rounding of the scalar loop, not its bits).
void mix(const float* p, int64_t p_stride, int n_q, const float* v, int64_t stride, int dim, int64_t n_pos,
         float* out) {
    const AttentionKernels* simd = nullptr;
    if (dim % kAttentionSimdWidth == 0 && n_pos > 0) {
        if (simd_level() == SimdLevel::Avx512) simd = &kAttentionAvx512;
        if (simd_level() == SimdLevel::Avx2) simd = &kAttentionAvx2;
    }
    if (simd) {
        simd->mix_f32(p, p_stride, n_q, v, stride, dim, n_pos, out);
        return;
    }
    for (int h = 0; h < n_q; h++) {
        float* o = out + int64_t(h) * dim;
        std::fill(o, o + dim, 0.0f);
        for (int64_t j = 0; j < n_pos; j++) {
            const float pj = p[h * p_stride + j];
            const float* row = v + j * stride;
            for (int d = 0; d < dim; d++) o[d] += pj * row[d];
        }
    }
}

}  // namespace

void delta_rule_step(float* S, int hk, int hv, const float* q, const float* k, const float* v, float beta, float decay,
                     float scale, float* out) {
    const DeltaRuleKernels* simd = step_kernels();
    const int done = simd ? simd->step(S, hk, hv, q, k, v, beta, decay, scale, out) : 0;
    if (done < hv) step_scalar(S, hk, hv, done, q, k, v, beta, decay, scale, out);
}

size_t delta_rule_chunk_scratch_floats(int hk, int hv) {
    const size_t W = kDeltaRuleChunk;
    return 2 * size_t(hk) * W + 2 * W * W + 3 * W * size_t(hv) + size_t(hk) * size_t(hv);
}

// With g_t the decays and gamma_t = g_0 ... g_t, the steps' state after token
// t is S_t = gamma_t S + sum over s <= t of (gamma_t / gamma_s) k_s u_s^T,
// where u_t = beta_t (v_t - g_t S_{t-1}^T k_t) is what token t writes. So
//   u_t = beta_t (v_t - gamma_t S^T k_t - sum_{s<t} (gamma_t/gamma_s) (k_t.k_s) u_s),
// a triangular system solved row by row, and
//   o_t = scale (gamma_t S^T q_t + sum_{s<=t} (gamma_t/gamma_s) (q_t.k_s) u_s).
// Every product is a row mix (attention's loops); S is read twice and written
// once per chunk instead of per token.
void delta_rule_chunk(float* S, int hk, int hv, const float* q, const float* k, int64_t qk_stride, const float* v,
                      int64_t v_stride, const float* beta, const float* log_decay, int n, float scale, float* out,
                      int64_t out_stride, float* scratch) {
    constexpr int W = kDeltaRuleChunk;
    float* kt = scratch;           // k^T: hk rows of W, zero past n
    float* kk = kt + hk * W;       // k_t . k_s, then the system's coefficients: W x W
    float* qk = kk + W * W;        // q_t . k_s, then the output's coefficients: W x W
    float* ks = qk + W * W;        // S^T k_t, then the in-chunk outputs: W rows of hv
    float* qs = ks + W * hv;       // S^T q_t: W rows of hv
    float* u = qs + W * hv;        // u_t: W rows of hv
    float* pu = u + W * hv;        // k_s[i] gamma_{n-1} / gamma_s: hk rows of W
    float* ds = pu + hk * W;       // what the chunk adds to S: hk rows of hv
    // Log-decays summed in double: the ratios are exp of differences.
    double G[W];
    float gamma[W];
    double sum = 0.0;
    for (int t = 0; t < n; t++) {
        sum += double(log_decay[t]);
        G[t] = sum;
        gamma[t] = float(std::exp(sum));
    }
    for (int i = 0; i < hk; i++) {
        for (int s = 0; s < W; s++) kt[i * W + s] = s < n ? k[s * qk_stride + i] : 0.0f;
    }
    mix(k, qk_stride, n, kt, W, W, hk, kk);
    mix(q, qk_stride, n, kt, W, W, hk, qk);
    mix(k, qk_stride, n, S, hv, hv, hk, ks);
    mix(q, qk_stride, n, S, hv, hv, hk, qs);

    // The decay ratios, once for both coefficient matrices.
    for (int t = 0; t < n; t++) {
        float* c = kk + t * W;
        float* a = qk + t * W;
        for (int s = 0; s <= t; s++) {
            const float r = std::exp(float(G[t] - G[s]));
            c[s] *= r;
            a[s] *= r;
        }
        for (int s = t + 1; s < n; s++) a[s] = 0.0f;
    }
    for (int t = 0; t < n; t++) {
        const float* c = kk + t * W;
        float* ut = u + int64_t(t) * hv;
        mix(c, W, 1, u, hv, hv, t, ut);
        const float* vt = v + t * v_stride;
        const float* kst = ks + int64_t(t) * hv;
        for (int j = 0; j < hv; j++) ut[j] = beta[t] * ((vt[j] - gamma[t] * kst[j]) - ut[j]);
    }

    mix(qk, W, n, u, hv, hv, n, ks);
    for (int t = 0; t < n; t++) {
        float* o = out + t * out_stride;
        const float* qst = qs + int64_t(t) * hv;
        const float* in = ks + int64_t(t) * hv;
        for (int j = 0; j < hv; j++) o[j] = (gamma[t] * qst[j] + in[j]) * scale;
    }

    float w[W];
    for (int s = 0; s < n; s++) w[s] = std::exp(float(G[n - 1] - G[s]));
    for (int i = 0; i < hk; i++) {
        for (int s = 0; s < n; s++) pu[i * W + s] = kt[i * W + s] * w[s];
    }
    mix(pu, W, hk, u, hv, hv, n, ds);
    const float last = gamma[n - 1];
    for (int64_t e = 0; e < int64_t(hk) * hv; e++) S[e] = last * S[e] + ds[e];
}

}  // namespace ms
