#include "model/attention_block.h"

#include <algorithm>
#include <cmath>

#include "ops/activation.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace ms {

void AttentionScratch::init(const ModelConfig& c, const std::vector<AttentionLayer>& layers, int max_batch,
                            int64_t n_ctx, int n_threads) {
    const size_t B = size_t(max_batch);
    q.resize(B * size_t(c.q_dim()) * 4);
    k.resize(B * size_t(c.kv_dim()) * 4);
    v.resize(B * size_t(c.v_dim()) * 4);
    att.resize(B * size_t(c.n_head) * size_t(c.head_dim_v) * 4);
    const bool gated = std::any_of(layers.begin(), layers.end(), [](const AttentionLayer& l) { return l.q_gate; });
    qg.resize(gated ? B * size_t(2 * c.q_dim()) * 4 : 0);
    size_t floats = 0;
    for (const AttentionLayer& l : layers) {
        floats = std::max(floats, attention_scratch_floats(attention_shape(c, l), n_ctx, n_threads));
    }
    scores.resize(floats * 4);
}

uint64_t AttentionScratch::bytes() const {
    return q.size() + k.size() + v.size() + att.size() + qg.size() + scores.size();
}

size_t AttentionScratch::acts_per_token(const std::vector<AttentionLayer>& layers) {
    size_t act = 0;
    for (const AttentionLayer& l : layers) {
        if (l.wq.empty()) continue;  // not an attention layer (DeltaNet)
        const Tensor* qkv[3] = {&l.wq, &l.wk, &l.wv};
        act = std::max({act, linear_many_scratch_bytes(qkv, 3, 1), linear_scratch_bytes(l.wo, 1)});
    }
    return act;
}

AttentionShape attention_shape(const ModelConfig& c, const AttentionLayer& l) {
    return AttentionShape{c.n_head,    c.n_head_kv, c.head_dim, c.head_dim_v, 1.0f / std::sqrt(float(c.head_dim)),
                          l.window, l.sinks.empty() ? nullptr : l.sinks.f32(), l.chunk};
}

float attention_temperature(const AttentionTemperature& t, int64_t pos) {
    if (t.scale == 0.0f) return 1.0f;
    return std::log(std::floor((float(pos) + 1.0f) / float(t.floor_len)) + 1.0f) * t.scale + 1.0f;
}

namespace {

void add_bias(const Tensor& b, float* row) {
    if (!b.empty()) add_to(row, b.f32(), b.cols);
}

// Each head of one token's q and k RMS-normed on its own (weights wq / wk
// head_dim wide, or none).
void norm_heads(const ModelConfig& c, float* q, float* k, const float* wq, const float* wk) {
    for (int h = 0; h < c.n_head; h++) rms_norm(q + h * c.head_dim, wq, c.head_dim, c.rms_eps, q + h * c.head_dim);
    for (int h = 0; h < c.n_head_kv; h++) rms_norm(k + h * c.head_dim, wk, c.head_dim, c.rms_eps, k + h * c.head_dim);
}

}  // namespace

void attention_block(ThreadPool& pool, const ModelConfig& c, const Rope& rope, const AttentionLayer& l,
                     const float* x, int n, int64_t pos0, const float* cos_sin, const KvLayer& kv, int64_t n_ctx,
                     AttentionScratch& s, float* out) {
    float* q = s.q.f32();
    float* k = s.k.f32();
    float* v = s.v.f32();
    const Tensor* qkv_w[3] = {&l.wq, &l.wk, &l.wv};
    float* const qkv_y[3] = {l.q_gate ? s.qg.f32() : q, k, v};
    linear_many(pool, qkv_w, 3, x, n, qkv_y, s.acts);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; t++) {
            float* qt = q + t * c.q_dim();
            if (l.q_gate) {
                const float* qg = s.qg.f32() + t * 2 * c.q_dim();
                for (int h = 0; h < c.n_head; h++) {
                    std::copy_n(qg + 2 * h * c.head_dim, c.head_dim, qt + h * c.head_dim);
                }
            }
            float* kt = k + t * c.kv_dim();
            float* vt = v + t * c.v_dim();
            add_bias(l.bq, qt);
            add_bias(l.bk, kt);
            add_bias(l.bv, vt);
            if (l.qk_norm == QkNorm::PerHead) {
                norm_heads(c, qt, kt, l.q_norm.f32(), l.k_norm.f32());
            } else if (l.qk_norm == QkNorm::Whole) {
                rms_norm(qt, l.q_norm.f32(), c.q_dim(), c.rms_eps, qt);
                rms_norm(kt, l.k_norm.f32(), c.kv_dim(), c.rms_eps, kt);
            }
            if (l.rope) {
                rope_apply(rope, cos_sin + t * rope.n_rot, qt, c.n_head, c.head_dim);
                rope_apply(rope, cos_sin + t * rope.n_rot, kt, c.n_head_kv, c.head_dim);
            } else if (l.temperature.scale != 0.0f) {
                const float f = attention_temperature(l.temperature, pos0 + t);
                for (int64_t i = 0; i < c.q_dim(); i++) qt[i] *= f;
            }
            if (l.qk_norm == QkNorm::PlainAfterRope) norm_heads(c, qt, kt, nullptr, nullptr);
            kv_store(kv, pos0 + t, kt, vt);
        }
    });
    attention(pool, attention_shape(c, l), kv, q, n, pos0, n_ctx, s.scores.f32(), s.att.f32());
    if (l.q_gate) {
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                const float* qg = s.qg.f32() + t * 2 * c.q_dim();
                float* at = s.att.f32() + t * c.n_head * c.head_dim_v;
                for (int h = 0; h < c.n_head; h++) {
                    const float* gate = qg + (2 * h + 1) * c.head_dim;
                    for (int j = 0; j < c.head_dim_v; j++) at[h * c.head_dim_v + j] *= sigmoid(gate[j]);
                }
            }
        });
    }
    linear(pool, l.wo, s.att.f32(), n, out, s.acts);
    if (!l.bo.empty()) {
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) add_bias(l.bo, out + t * c.n_embd);
        });
    }
}

}  // namespace ms
