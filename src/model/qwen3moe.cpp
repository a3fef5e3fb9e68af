// Qwen3-MoE (architecture `qwen3moe`: Qwen3-30B-A3B, Qwen3-235B-A22B). Per
// layer: RMSNorm -> attention with per-head RMSNorm on q and k, NeoX RoPE,
// grouped-query heads -> residual; RMSNorm -> softmax router over all
// experts, top-k renormalized, SwiGLU experts -> residual. Untied output head
// (tied to token_embd when `output` is absent).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/moe.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "quant/dequant.h"
#include "quant/dot.h"

namespace ms {

namespace {

struct Layer {
    Tensor attn_norm, wq, wk, wv, wo, q_norm, k_norm;
    Tensor ffn_norm, router;
};

class Qwen3MoeState : public ModelState {
public:
    AlignedBuffer k_cache, v_cache;     // n_layer x n_ctx rows
    AlignedBuffer x, xb, q, k, v, att, y;
    AlignedBuffer acts;                 // converted activations for one linear()
    AlignedBuffer cos_sin;              // per token
    AlignedBuffer attn_scratch;
    AlignedBuffer router, ids, weights;
    AlignedBuffer next_ids, next_weights;  // the next layer's predicted experts, per token
    AlignedBuffer next_union, next_votes;  // a chunk's hint; tokens per predicted expert
    MoeScratch moe;

    uint64_t bytes() const override {
        uint64_t b = moe.bytes();
        for (const AlignedBuffer* p : {&k_cache, &v_cache, &x, &xb, &q, &k, &v, &att, &y, &acts, &cos_sin,
                                       &attn_scratch, &router, &ids, &weights, &next_ids, &next_weights,
                                       &next_union, &next_votes}) {
            b += p->size();
        }
        return b;
    }
};

class Qwen3Moe : public Model {
public:
    Qwen3Moe(const GgufFile& f, ModelConfig c) : Model(std::move(c)) {
        ModelConfig& cfg = config_;
        if (cfg.n_expert <= 0 || cfg.n_expert_used <= 0 || cfg.n_ff_exp <= 0) {
            throw std::runtime_error(f.path() + ": qwen3moe needs expert_count, expert_used_count and "
                                                "expert_feed_forward_length > 0");
        }
        const GgufTensor* embd = f.tensor("token_embd.weight");
        if (!embd) throw std::runtime_error(f.path() + ": missing tensor token_embd.weight");
        cfg.n_vocab = embd->ne[1];
        const int64_t E = cfg.n_embd, V = cfg.n_vocab;
        need(f, "token_embd.weight", {E, V}, &token_embd_);
        need(f, "output_norm.weight", {E}, &output_norm_);
        tied_output_ = !maybe(f, "output.weight", {E, V}, &output_);

        layers_.resize(size_t(cfg.n_layer));
        expert_layers_.resize(size_t(cfg.n_layer));
        for (int il = 0; il < cfg.n_layer; il++) {
            Layer& l = layers_[size_t(il)];
            const std::string p = "blk." + std::to_string(il) + ".";
            need(f, p + "attn_norm.weight", {E}, &l.attn_norm);
            need(f, p + "attn_q.weight", {E, cfg.q_dim()}, &l.wq);
            need(f, p + "attn_k.weight", {E, cfg.kv_dim()}, &l.wk);
            need(f, p + "attn_v.weight", {E, cfg.v_dim()}, &l.wv);
            need(f, p + "attn_output.weight", {int64_t(cfg.n_head) * cfg.head_dim_v, E}, &l.wo);
            need(f, p + "attn_q_norm.weight", {cfg.head_dim}, &l.q_norm);
            need(f, p + "attn_k_norm.weight", {cfg.head_dim}, &l.k_norm);
            need(f, p + "ffn_norm.weight", {E}, &l.ffn_norm);
            need(f, p + "ffn_gate_inp.weight", {E, cfg.n_expert}, &l.router);
            need_experts(f, il, cfg.n_expert, E, cfg.n_ff_exp);
        }
    }

    std::unique_ptr<ModelState> new_state(const StateOptions& o) const override {
        const ModelConfig& c = config_;
        check_state_options(o);
        auto st = std::make_unique<Qwen3MoeState>();
        st->options = o;
        const size_t B = size_t(o.max_batch), kv_elt = o.kv_type == GgmlType::F16 ? 2 : 4;
        st->k_cache.resize(size_t(c.n_layer) * size_t(o.n_ctx) * size_t(c.kv_dim()) * kv_elt);
        st->v_cache.resize(size_t(c.n_layer) * size_t(o.n_ctx) * size_t(c.v_dim()) * kv_elt);
        st->x.resize(B * size_t(c.n_embd) * 4);
        st->xb.resize(B * size_t(c.n_embd) * 4);
        st->y.resize(B * size_t(c.n_embd) * 4);
        st->q.resize(B * size_t(c.q_dim()) * 4);
        st->k.resize(B * size_t(c.kv_dim()) * 4);
        st->v.resize(B * size_t(c.v_dim()) * 4);
        st->att.resize(B * size_t(c.n_head) * size_t(c.head_dim_v) * 4);
        size_t act = linear_scratch_bytes(output(), 1);
        for (const Layer& l : layers_) {
            const Tensor* qkv[3] = {&l.wq, &l.wk, &l.wv};
            act = std::max(act, linear_many_scratch_bytes(qkv, 3, 1));
            for (const Tensor* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.router}) {
                act = std::max(act, linear_scratch_bytes(*w, 1));
            }
        }
        st->acts.resize(act * B);
        st->cos_sin.resize(B * size_t(c.n_rot) * 4);
        st->attn_scratch.resize(size_t(o.n_threads) * attention_scratch_floats(shape(), o.n_ctx) * 4);
        st->router.resize(B * size_t(c.n_expert) * 4);
        st->ids.resize(B * size_t(c.n_expert_used) * 4);
        st->weights.resize(B * size_t(c.n_expert_used) * 4);
        st->next_ids.resize(B * size_t(c.n_expert_used) * 4);
        st->next_weights.resize(B * size_t(c.n_expert_used) * 4);
        st->next_union.resize(size_t(c.n_expert) * 4);
        st->next_votes.resize(size_t(c.n_expert) * 4);
        st->moe.init(expert_layers_, o.max_batch, c.n_expert_used);
        return st;
    }

    void forward(ModelState& state, ExpertSource& experts, ThreadPool& pool, const int32_t* tokens, int n,
                 float* logits, bool all_logits) const override {
        Qwen3MoeState& st = static_cast<Qwen3MoeState&>(state);
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, pos0 = st.n_past, n_ctx = st.options.n_ctx;
        const int K = c.n_expert_used;
        const size_t kv_elt = st.options.kv_type == GgmlType::F16 ? 2 : 4;
        float* x = st.x.f32();
        float* xb = st.xb.f32();
        float* y = st.y.f32();
        float* q = st.q.f32();
        float* k = st.k.f32();
        float* v = st.v.f32();
        float* cos_sin = st.cos_sin.f32();
        const Rope rope{c.n_rot, c.rope_freq_base, true};
        experts.begin_step(n);

        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                dequantize_row(token_embd_.type, token_embd_.row(tokens[t]), x + t * E, E);
                rope_angles(rope, pos0 + t, cos_sin + t * c.n_rot);
            }
        });

        TimeSplit* time = n == 1 ? &st.decode_time : &st.prefill_time;
        time->calls++;
        for (int il = 0; il < c.n_layer; il++) {
            const Layer& l = layers_[size_t(il)];
            const KvLayer kv{st.options.kv_type, c.kv_dim(), c.v_dim(),
                             st.k_cache.data() + size_t(il) * size_t(n_ctx) * size_t(c.kv_dim()) * kv_elt,
                             st.v_cache.data() + size_t(il) * size_t(n_ctx) * size_t(c.v_dim()) * kv_elt};

            PhaseTimer attn_time(time, Phase::Attention, il,
                                 l.wq.bytes() + l.wk.bytes() + l.wv.bytes() + l.wo.bytes());
            norm_rows(pool, x, l.attn_norm, n, xb);
            const Tensor* qkv_w[3] = {&l.wq, &l.wk, &l.wv};
            float* const qkv_y[3] = {q, k, v};
            linear_many(pool, qkv_w, 3, xb, n, qkv_y, st.acts.data());
            pool.parallel_for(n, [&](int64_t b, int64_t e) {
                for (int64_t t = b; t < e; t++) {
                    float* qt = q + t * c.q_dim();
                    float* kt = k + t * c.kv_dim();
                    for (int h = 0; h < c.n_head; h++) {
                        rms_norm(qt + h * c.head_dim, l.q_norm.f32(), c.head_dim, c.rms_eps, qt + h * c.head_dim);
                    }
                    for (int h = 0; h < c.n_head_kv; h++) {
                        rms_norm(kt + h * c.head_dim, l.k_norm.f32(), c.head_dim, c.rms_eps, kt + h * c.head_dim);
                    }
                    rope_apply(rope, cos_sin + t * c.n_rot, qt, c.n_head, c.head_dim);
                    rope_apply(rope, cos_sin + t * c.n_rot, kt, c.n_head_kv, c.head_dim);
                    kv_store(kv, pos0 + t, kt, v + t * c.v_dim());
                }
            });
            attention(pool, shape(), kv, q, n, pos0, n_ctx, st.attn_scratch.f32(), st.att.f32());
            linear(pool, l.wo, st.att.f32(), n, y, st.acts.data());
            add_to(x, y, n * E);
            attn_time.stop();

            const bool predict = il + 1 < c.n_layer && experts.wants_prefetch();
            PhaseTimer route_time(time, Phase::Routing, il,
                                  l.router.bytes() + (predict ? layers_[size_t(il) + 1].router.bytes() : 0));
            norm_rows(pool, x, l.ffn_norm, n, xb);
            linear(pool, l.router, xb, n, st.router.f32(), st.acts.data());
            int32_t* ids = reinterpret_cast<int32_t*>(st.ids.data());
            route_softmax_topk(st.router.f32(), n, c.n_expert, K, true, ids, st.weights.f32());
            const ExpertHint next = predict ? predict_experts(st, pool, il + 1, x, n) : ExpertHint{};
            route_time.stop();

            // The experts span on the timeline holds this layer's io_wait
            // spans; the split counts the time between them as compute.
            PhaseTimer moe_time(nullptr, Phase::ExpertCompute, il);
            const MoeCost cost = moe_forward(pool, experts, expert_layers_[size_t(il)], xb, n, ids,
                                             st.weights.f32(), K, st.moe, y, next);
            add_to(x, y, n * E);
            const double moe_s = moe_time.stop();
            time->add(Phase::IoWait, cost.io_wait_s);
            time->add(Phase::ExpertCompute, moe_s - cost.io_wait_s, cost.expert_bytes);
        }

        const int64_t first = all_logits ? 0 : n - 1;
        norm_rows(pool, x + first * E, output_norm_, n - first, xb);
        linear(pool, output(), xb, n - first, logits, st.acts.data());
        st.n_past += n;
    }

private:
    const Tensor& output() const { return tied_output_ ? token_embd_ : output_; }

    AttentionShape shape() const {
        const ModelConfig& c = config_;
        return AttentionShape{c.n_head, c.n_head_kv, c.head_dim, c.head_dim_v,
                              1.0f / std::sqrt(float(c.head_dim))};
    }

    // The residual changes little from one layer to the next, so `layer`'s
    // router over it (normed with that layer's weights) predicts the
    // experts that layer will want, while the current layer's are still
    // being read and computed (expert_hint: which of them to hint).
    ExpertHint predict_experts(Qwen3MoeState& st, ThreadPool& pool, int layer, const float* x, int n) const {
        const ModelConfig& c = config_;
        const Layer& nl = layers_[size_t(layer)];
        const int K = c.n_expert_used;
        float* normed = st.y.f32();
        norm_rows(pool, x, nl.ffn_norm, n, normed);
        linear(pool, nl.router, normed, n, st.router.f32(), st.acts.data());
        int32_t* ids = reinterpret_cast<int32_t*>(st.next_ids.data());
        route_softmax_topk(st.router.f32(), n, c.n_expert, K, true, ids, st.next_weights.f32());
        return expert_hint(layer, ids, n, K, c.n_expert, reinterpret_cast<int32_t*>(st.next_votes.data()),
                           reinterpret_cast<int32_t*>(st.next_union.data()));
    }

    void norm_rows(ThreadPool& pool, const float* in, const Tensor& w, int64_t n, float* out) const {
        const int64_t E = config_.n_embd;
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) rms_norm(in + t * E, w.f32(), E, config_.rms_eps, out + t * E);
        });
    }

    Tensor token_embd_, output_norm_, output_;
    bool tied_output_ = false;
    std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> open_qwen3moe(const GgufFile& file, ModelConfig config) {
    return std::make_unique<Qwen3Moe>(file, std::move(config));
}

}  // namespace ms
