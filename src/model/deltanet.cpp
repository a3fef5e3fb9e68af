#include "model/deltanet.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "gguf/gguf.h"
#include "ops/activation.h"
#include "ops/delta_rule.h"
#include "ops/gates.h"
#include "ops/linear.h"
#include "ops/norm.h"

namespace ms {

DeltaNetShape read_deltanet_shape(const GgufFile& f, const std::string& arch) {
    const std::string p = arch + ".ssm.";
    auto need = [&](const char* key, int64_t lo, int64_t hi) {
        const int64_t v = f.require_int(p + key);
        if (v < lo || v > hi) {
            throw std::runtime_error(f.path() + ": " + p + key + " = " + std::to_string(v) + " is out of range [" +
                                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
        }
        return int(v);
    };
    DeltaNetShape s;
    s.n_k_heads = need("group_count", 1, 1 << 12);
    s.n_v_heads = need("time_step_rank", 1, 1 << 12);
    s.head_k = need("state_size", 1, 1 << 12);
    s.conv_kernel = need("conv_kernel", 2, 64);
    const int inner = need("inner_size", 1, 1 << 24);
    if (s.n_v_heads % s.n_k_heads != 0 || inner % s.n_v_heads != 0) {
        throw std::runtime_error(f.path() + ": " + p + "time_step_rank " + std::to_string(s.n_v_heads) +
                                 " must be a multiple of group_count " + std::to_string(s.n_k_heads) +
                                 " and divide inner_size " + std::to_string(inner));
    }
    s.head_v = inner / s.n_v_heads;
    return s;
}

void DeltaNetScratch::init(const DeltaNetShape& s, int max_batch, int n_threads) {
    const size_t B = size_t(max_batch);
    if (max_batch >= kDeltaNetMinChunked) {
        chunk.resize(size_t(std::max(n_threads, 1)) * delta_rule_chunk_scratch_floats(s.head_k, s.head_v) * 4);
    }
    qkv.resize(B * size_t(s.conv_channels()) * 4);
    conv.resize(B * size_t(s.conv_channels()) * 4);
    z.resize(B * size_t(s.v_dim()) * 4);
    o.resize(B * size_t(s.v_dim()) * 4);
    ba.resize(B * size_t(2 * s.n_v_heads) * 4);
}

uint64_t DeltaNetScratch::bytes() const {
    return qkv.size() + conv.size() + z.size() + o.size() + ba.size() + chunk.size();
}

size_t DeltaNetScratch::acts_per_token(const std::vector<DeltaNetLayer>& layers) {
    size_t act = 0;
    for (const DeltaNetLayer& l : layers) {
        if (l.empty()) continue;
        const Tensor* in[4] = {&l.wqkv, &l.wz, l.wba.empty() ? &l.wbeta : &l.wba, &l.walpha};
        act = std::max({act, linear_many_scratch_bytes(in, l.wba.empty() ? 4 : 3, 1),
                        linear_scratch_bytes(l.wout, 1)});
    }
    return act;
}

namespace {

// x[0..n) /= max(||x||, 1e-6)
void l2_normalize(float* x, int n) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += double(x[i]) * x[i];
    const float scale = 1.0f / std::max(float(std::sqrt(ss)), 1e-6f);
    for (int i = 0; i < n; i++) x[i] *= scale;
}

// The causal depthwise convolution of `in` (n rows of C channels) continuing
// from state (K - 1 earlier rows), then SiLU; the state moves on to the last
// K - 1 inputs.
void causal_conv(ThreadPool& pool, const float* w, int K, int64_t C, const float* in, int n, float* state,
                 float* out) {
    pool.parallel_for(C, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; c++) {
            const float* wc = w + c * K;
            // Row i of the sequence [state; in].
            auto seq = [&](int64_t i) { return i < K - 1 ? state[i * C + c] : in[(i - (K - 1)) * C + c]; };
            for (int t = 0; t < n; t++) {
                float s = 0.0f;
                for (int j = 0; j < K; j++) s += wc[j] * seq(t + j);
                out[int64_t(t) * C + c] = silu(s);
            }
            // Reads row n + i >= i before writing row i.
            for (int i = 0; i < K - 1; i++) state[i * C + c] = seq(n + i);
        }
    });
}

}  // namespace

void deltanet_block(ThreadPool& pool, const DeltaNetShape& sh, float rms_eps, const DeltaNetLayer& l,
                    const float* x, int n, float* conv_state, float* recurrent_state, DeltaNetScratch& s,
                    float* out) {
    const int64_t C = sh.conv_channels(), QK = sh.qk_dim(), VD = sh.v_dim();
    const int NV = sh.n_v_heads, HK = sh.head_k, HV = sh.head_v, ratio = sh.n_v_heads / sh.n_k_heads;
    float* qkv = s.qkv.f32();
    float* conv = s.conv.f32();
    float* z = s.z.f32();
    float* o = s.o.f32();
    float* ba = s.ba.f32();  // fused: 2 NV per token as in the file; else NV betas, then NV alphas per token
    if (sh.fused_ba) {
        const Tensor* w[3] = {&l.wqkv, &l.wz, &l.wba};
        float* const y[3] = {qkv, z, ba};
        linear_many(pool, w, 3, x, n, y, s.acts);
    } else {
        // beta and alpha rows land in separate halves of ba: n NV betas, then n NV alphas.
        const Tensor* w[4] = {&l.wqkv, &l.wz, &l.wbeta, &l.walpha};
        float* const y[4] = {qkv, z, ba, ba + int64_t(n) * NV};
        linear_many(pool, w, 4, x, n, y, s.acts);
    }
    causal_conv(pool, l.conv.f32(), sh.conv_kernel, C, qkv, n, conv_state, conv);

    // q and k L2-normalized per head.
    pool.parallel_for(int64_t(n) * 2 * sh.n_k_heads, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; i++) {
            const int64_t t = i / (2 * sh.n_k_heads), h = i % (2 * sh.n_k_heads);
            l2_normalize(conv + t * C + h * HK, HK);
        }
    });

    // The recurrence, each value head on its own: S (head_k rows of head_v,
    // the README's S) decays by exp(g), takes in the delta-rule correction
    // beta (v - S^T k) along k, and is read by q. Short pieces (decode, a few
    // draft tokens) step token by token; longer ones go in chunks.
    const float scale = 1.0f / std::sqrt(float(HK));
    const bool chunked = n >= kDeltaNetMinChunked && s.chunk.size() > 0;
    const size_t per_thread = delta_rule_chunk_scratch_floats(HK, HV);
    pool.parallel_for(NV, [&](int64_t hb, int64_t he, int thread) {
        for (int64_t h = hb; h < he; h++) {
            float* S = recurrent_state + h * HV * HK;
            const int64_t kh = sh.tiled_heads ? h % sh.n_k_heads : h / ratio;
            // beta and the log of the decay of token t.
            // (ops/gates.h: the kernels' gates too)
            auto gates = [&](int t, float* beta, float* log_decay) {
                float b_logit, a_logit;
                deltanet_gate_logits(ba, sh.fused_ba, t, n, int(h), NV, ratio, &b_logit, &a_logit);
                deltanet_gates(b_logit, a_logit, l.dt_bias.f32()[h], l.a.f32()[h], beta, log_decay);
            };
            const float* q0 = conv + kh * HK;
            const float* k0 = conv + QK + kh * HK;
            const float* v0 = conv + 2 * QK + h * HV;
            float* o0 = o + h * HV;
            if (!chunked) {
                for (int t = 0; t < n; t++) {
                    float beta, log_decay;
                    gates(t, &beta, &log_decay);
                    delta_rule_step(S, HK, HV, q0 + t * C, k0 + t * C, v0 + t * C, beta, std::exp(log_decay), scale,
                                    o0 + t * VD);
                }
                continue;
            }
            float beta[kDeltaRuleChunk], log_decay[kDeltaRuleChunk];
            for (int t0 = 0; t0 < n; t0 += kDeltaRuleChunk) {
                const int m = std::min(kDeltaRuleChunk, n - t0);
                for (int t = 0; t < m; t++) gates(t0 + t, &beta[t], &log_decay[t]);
                delta_rule_chunk(S, HK, HV, q0 + t0 * C, k0 + t0 * C, C, v0 + t0 * C, C, beta, log_decay, m, scale,
                                 o0 + t0 * VD, VD, s.chunk.f32() + size_t(thread) * per_thread);
            }
        }
    });

    // Per value head: RMS norm, ssm_norm, times silu(z).
    pool.parallel_for(int64_t(n) * NV, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; i++) {
            float* oh = o + i * HV;  // token i / NV, head i % NV: rows of VD are NV heads of HV
            const float* zh = z + i * HV;
            rms_norm(oh, l.out_norm.f32(), HV, rms_eps, oh);
            for (int j = 0; j < HV; j++) oh[j] *= silu(zh[j]);
        }
    });
    linear(pool, l.wout, o, n, out, s.acts);
}

}  // namespace ms
