// DeepSeek V4 (architecture `deepseek4`). The residual is several streams
// (hyper-connections): around each sub-block, coefficients computed from all
// streams mix them into the block's input, weigh its output back into each
// stream and mix the streams through a Sinkhorn-normalized matrix; a last
// mix feeds the output head. Attention is model/deepseek4_attention.h. MoE:
// sqrt(softplus) scores, the first hash_layer_count layers route by a table
// of the token id, the others by top-k of the scores plus a selection bias;
// weights renormalized and scaled; clamped SwiGLU in routed and shared
// experts. The trailing MTP block is checked but neither read nor run.
// The passes over the layers are LayerMajorModel's (model/layer_major.h):
// a prompt layer by layer, several sequences' decode steps in one pass.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "gguf/gguf.h"
#include "model/deepseek4_attention.h"
#include "model/ffn_block.h"
#include "model/layer_major.h"
#include "model/model.h"
#include "ops/activation.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "quant/dequant.h"

namespace ms {

namespace {

// One sub-block's hyper-connection weights: fn maps the normed streams to
// n pre weights, n post weights and n x n mixing logits (or n pre weights
// only, before the output head).
struct HyperConnection {
    Tensor fn, base, scale;
};

struct Layer {
    Dsv4AttentionLayer attn;
    Tensor attn_norm;
    HyperConnection hc_attn, hc_ffn;
    FfnLayer ffn;
    Tensor token_experts;  // hash-routed layers: I32, n_expert_used per token id
};

class Deepseek4State : public ModelState {
public:
    // A forward call's rows (max_tokens): the residual streams (n_hc x
    // n_embd each), the rope angles and the token ids (hash routing).
    AlignedBuffer streams, cos_sin_plain, cos_sin_comp, row_tokens;
    // A piece's rows (max_batch): a sub-block's mixed streams before they
    // replace the residual's; normed streams; fn's output; pre | post | C
    // per token; the sub-block's input, its norm, its output.
    AlignedBuffer streams_next, flat, mix, coef;
    AlignedBuffer x, xn, y;
    AlignedBuffer acts;
    AlignedBuffer hint, hinted;  // a hash-routed layer's experts for the batch; which are in it
    Dsv4AttentionState attn;
    FfnScratch ffn;
    int64_t top = 0;  // one past the highest position written

    uint64_t bytes() const override {
        uint64_t b = attn.bytes() + ffn.bytes();
        for (const AlignedBuffer* p : {&streams, &streams_next, &flat, &mix, &coef, &x, &xn, &y, &cos_sin_plain,
                                       &cos_sin_comp, &row_tokens, &acts, &hint, &hinted}) {
            b += p->size();
        }
        return b;
    }

    int64_t rewind_limit(int64_t n) const override { return attn.rewind_limit(n, top); }
};

class Deepseek4 : public LayerMajorModel {
public:
    Deepseek4(const GgufFile& f, ModelConfig c) : LayerMajorModel(std::move(c)) {
        ModelConfig& cfg = config_;
        const std::string p = cfg.arch + ".";
        const GgufTensor* embd = f.tensor("token_embd.weight");
        if (!embd) throw std::runtime_error(f.path() + ": missing tensor token_embd.weight");
        cfg.n_vocab = embd->ne[1];
        const int64_t E = cfg.n_embd, V = cfg.n_vocab;
        n_run_ = cfg.n_layer - cfg.n_nextn;
        n_hc_ = int(f.get_int(p + "hyper_connection.count", 0));
        sinkhorn_ = int(f.get_int(p + "hyper_connection.sinkhorn_iterations", 0));
        hc_eps_ = float(f.get_float(p + "hyper_connection.epsilon", 1e-6));
        n_hash_ = int(f.get_int(p + "hash_layer_count", 0));
        const std::vector<int64_t> ratios = f.get_ints(p + "attention.compress_ratios");
        std::vector<double> clamp_exp = f.get_floats(p + "swiglu_clamp_exp");
        std::vector<double> clamp_shexp = f.get_floats(p + "swiglu_clamp_shexp");
        for (const auto& [key, n] : {std::pair{"attention.compress_ratios", ratios.size()},
                                    std::pair{"swiglu_clamp_exp", clamp_exp.size()},
                                    std::pair{"swiglu_clamp_shexp", clamp_shexp.size()}}) {
            if (n != size_t(cfg.n_layer)) {
                throw std::runtime_error(f.path() + ": " + p + key + " has " + std::to_string(n) + " values for " +
                                         std::to_string(cfg.n_layer) + " layers");
            }
        }

        Dsv4AttentionShape& a = shape_;
        a.n_head = cfg.n_head;
        a.head_dim = cfg.head_dim;
        a.n_rot = cfg.n_rot;
        a.q_lora = f.get_int(p + "attention.q_lora_rank", 0);
        a.window = cfg.sliding_window;
        a.n_group = int(f.get_int(p + "attention.output_group_count", 0));
        a.out_lora = int(f.get_int(p + "attention.output_lora_rank", 0));
        a.index_heads = int(f.get_int(p + "attention.indexer.head_count", 0));
        a.index_dim = int(f.get_int(p + "attention.indexer.key_length", 0));
        a.top_k = int(f.get_int(p + "attention.indexer.top_k", 0));
        a.eps = cfg.rms_eps;
        a.rope_plain = Rope{cfg.n_rot, cfg.rope_freq_base, false, nullptr};
        // Compressed layers: YaRN angles without YaRN's magnitude factor.
        a.rope_comp = Rope{cfg.n_rot, float(f.get_float(p + "attention.compress_rope_freq_base", cfg.rope_freq_base)),
                           false, nullptr};
        if (cfg.rope_scaling == "yarn" && cfg.rope_factor > 1.0f) {
            a.rope_comp = with_yarn(a.rope_comp, cfg.rope_factor, cfg.rope_n_ctx_orig);
            a.rope_comp.attn_factor = 1.0f / (1.0f + 0.1f * std::log(cfg.rope_factor));
        }
        const bool shape_ok = n_hc_ >= 1 && n_hc_ <= 16 && sinkhorn_ >= 1 && a.q_lora > 0 && a.window > 0 &&
                              a.n_group > 0 && cfg.n_head % a.n_group == 0 && a.out_lora > 0 && cfg.n_head_kv == 1 &&
                              cfg.head_dim == cfg.head_dim_v && a.n_rot > 0 && a.n_rot % 2 == 0 &&
                              a.n_rot <= cfg.head_dim && n_run_ >= 1 && n_hash_ >= 0 && n_hash_ <= n_run_ &&
                              cfg.n_expert > 0 && cfg.n_expert_used > 0 &&
                              cfg.n_ff_exp > 0;
        if (!shape_ok) throw std::runtime_error(f.path() + ": deepseek4 metadata missing or out of range");

        need(f, "token_embd.weight", {E, V}, &token_embd_);
        need(f, "output_norm.weight", {E}, &output_norm_);
        need(f, "output.weight", {E, V}, &output_);
        need(f, "output_hc_fn.weight", {n_hc_ * E, n_hc_}, &output_hc_.fn);
        need(f, "output_hc_base.weight", {n_hc_}, &output_hc_.base);
        need(f, "output_hc_scale.weight", {1}, &output_hc_.scale);

        const int64_t H = cfg.n_head, D = cfg.head_dim, QL = a.q_lora, n_mix = 2 * n_hc_ + n_hc_ * n_hc_;
        const int64_t n_ff_shexp = cfg.n_ff_shexp > 0 ? cfg.n_ff_shexp : cfg.n_ff_exp;
        layers_.resize(size_t(n_run_));
        expert_layers_.resize(size_t(n_run_));
        for (int il = 0; il < n_run_; il++) {
            Layer& l = layers_[size_t(il)];
            Dsv4AttentionLayer& at = l.attn;
            const std::string b = "blk." + std::to_string(il) + ".";
            need(f, b + "attn_norm.weight", {E}, &l.attn_norm);
            need(f, b + "attn_q_a.weight", {E, QL}, &at.q_a);
            need(f, b + "attn_q_a_norm.weight", {QL}, &at.q_a_norm);
            need(f, b + "attn_q_b.weight", {QL, H * D}, &at.q_b);
            need(f, b + "attn_kv.weight", {E, D}, &at.kv);
            need(f, b + "attn_kv_a_norm.weight", {D}, &at.kv_norm);
            need(f, b + "attn_sinks.weight", {H}, &at.sinks);
            need(f, b + "attn_output_a.weight", {H * D / a.n_group, a.n_group * a.out_lora}, &at.out_a);
            need(f, b + "attn_output_b.weight", {a.n_group * a.out_lora, E}, &at.out_b);
            at.ratio = int(ratios[size_t(il)]);
            if (at.ratio < 0 || (at.ratio > 0 && at.ratio < 2)) {
                throw std::runtime_error(f.path() + ": deepseek4 layer " + std::to_string(il) +
                                         ": compress ratio out of range");
            }
            if (at.ratio > 0) {
                declare_compressor(f, b + "attn_compressor_", int(D), at.ratio, &at.comp);
                if (f.tensor(b + "indexer.proj.weight")) {
                    if (a.index_heads <= 0 || a.index_dim < a.n_rot || a.top_k <= 0) {
                        throw std::runtime_error(f.path() + ": deepseek4 indexer metadata missing or out of range");
                    }
                    declare_compressor(f, b + "indexer_compressor_", a.index_dim, at.ratio, &at.index);
                    need(f, b + "indexer.attn_q_b.weight", {QL, int64_t(a.index_heads) * a.index_dim}, &at.index_q_b);
                    need(f, b + "indexer.proj.weight", {E, a.index_heads}, &at.index_proj);
                }
            }
            declare_hc(f, b + "hc_attn_", E, n_mix, &l.hc_attn);
            declare_hc(f, b + "hc_ffn_", E, n_mix, &l.hc_ffn);

            FfnLayer& ff = l.ffn;
            need(f, b + "ffn_norm.weight", {E}, &ff.norm);
            need(f, b + "ffn_gate_inp.weight", {E, cfg.n_expert}, &ff.router);
            ff.routing = {Gating::SqrtSoftplus, cfg.expert_weights_norm, cfg.expert_weights_scale};
            if (il < n_hash_) {
                need_i32(f, b + "ffn_gate_tid2eid.weight", {cfg.n_expert_used, V}, &l.token_experts);
            } else {
                maybe(f, b + "exp_probs_b.bias", {cfg.n_expert}, &ff.selection_bias);
            }
            need_experts(f, il, cfg.n_expert, E, cfg.n_ff_exp);
            expert_layers_[size_t(il)].act = GatedActivation::SwiGluClamp;
            expert_layers_[size_t(il)].clamp = float(clamp_exp[size_t(il)]);
            if (cfg.n_expert_shared > 0) {
                need(f, b + "ffn_gate_shexp.weight", {E, n_ff_shexp}, &ff.shared.gate);
                need(f, b + "ffn_up_shexp.weight", {E, n_ff_shexp}, &ff.shared.up);
                need(f, b + "ffn_down_shexp.weight", {n_ff_shexp, E}, &ff.shared.down);
                ff.shared.clamp = float(clamp_shexp[size_t(il)]);
            }
        }
        // The MTP block: its own tensors are checked when present, nothing
        // of it is read or run (no speculative decoding to use it).
        for (int il = n_run_; il < cfg.n_layer; il++) {
            const std::string b = "blk." + std::to_string(il) + ".nextn.";
            present(f, b + "eh_proj.weight", {2 * E, E});
            for (const char* norm : {"enorm", "hnorm", "shared_head_norm"}) present(f, b + norm + ".weight", {E});
        }
    }

    std::unique_ptr<ModelState> new_state(const StateOptions& o) const override {
        const ModelConfig& c = config_;
        check_state_options(o);
        // Its compressed attention keeps its own F32 state.
        if (o.kv_type == GgmlType::Q8_0) throw std::runtime_error("a q8_0 KV cache is not supported for deepseek4 (use f16)");
        auto st = std::make_unique<Deepseek4State>();
        st->options = o;
        // A forward call takes up to T tokens and runs each layer over them
        // in pieces of B (layer_major()).
        const size_t B = size_t(o.max_batch), T = size_t(st->max_tokens()), E = size_t(c.n_embd),
                     S = size_t(n_hc_);
        st->streams.resize(T * S * E * 4);
        st->cos_sin_plain.resize(T * size_t(shape_.n_rot) * 4);
        st->cos_sin_comp.resize(T * size_t(shape_.n_rot) * 4);
        st->row_tokens.resize(T * 4);
        st->streams_next.resize(B * S * E * 4);
        st->flat.resize(B * S * E * 4);
        st->mix.resize(B * size_t(2 * n_hc_ + n_hc_ * n_hc_) * 4);
        st->coef.resize(B * size_t(2 * n_hc_ + n_hc_ * n_hc_) * 4);
        for (AlignedBuffer* b : {&st->x, &st->xn, &st->y}) b->resize(B * E * 4);

        std::vector<Dsv4AttentionLayer> attn;
        std::vector<FfnLayer> ffn;
        size_t act = std::max(linear_scratch_bytes(output_, 1), linear_scratch_bytes(output_hc_.fn, 1));
        for (const Layer& l : layers_) {
            attn.push_back(l.attn);
            ffn.push_back(l.ffn);
            act = std::max({act, linear_scratch_bytes(l.hc_attn.fn, 1), linear_scratch_bytes(l.hc_ffn.fn, 1)});
        }
        act = std::max({act, dsv4_attention_acts_per_token(attn), FfnScratch::acts_per_token(ffn)});
        st->acts.resize(act * B);
        st->hint.resize(size_t(c.n_expert) * 4);
        st->hinted.resize(size_t(c.n_expert));
        st->attn.init(shape_, attn, o.max_batch, o.n_ctx, o.n_threads);
        st->ffn.init(ffn, expert_layers_, o.max_batch, c.n_expert_used, c.n_embd);
        st->ffn.acts = st->acts.data();
        double per_token = 0;
        for (const Layer& l : layers_) per_token += dsv4_state_bytes_per_token(l.attn);
        st->kv_bytes_per_token = int64_t(std::lround(per_token));
        // What per-head K and V of every position would take (F16).
        st->full_kv_bytes_per_token = int64_t(n_run_) * 2 * 2 * c.n_head * c.head_dim;
        return st;
    }

protected:
    int layers_run() const override { return n_run_; }

    void begin(ModelState& seq, ExpertSource&, ThreadPool&, const int32_t*, int n) const override {
        Deepseek4State& st = static_cast<Deepseek4State&>(seq);
        if (st.n_past == 0) st.top = 0;
        st.top = std::max(st.top, st.n_past + n);
    }

    void embed(ModelState& lead, int64_t t, int32_t token, int64_t pos) const override {
        Deepseek4State& st = static_cast<Deepseek4State&>(lead);
        const int64_t E = config_.n_embd, R = shape_.n_rot;
        float* xt = st.streams.f32() + t * n_hc_ * E;
        dequantize_row(token_embd_.type, token_embd_.row(token), xt, E);
        for (int h = 1; h < n_hc_; h++) std::memcpy(xt + h * E, xt, size_t(E) * 4);
        rope_angles(shape_.rope_plain, pos, st.cos_sin_plain.f32() + t * R);
        rope_angles(shape_.rope_comp, pos, st.cos_sin_comp.f32() + t * R);
        reinterpret_cast<int32_t*>(st.row_tokens.data())[t] = token;
    }

    // Hash-routed layers' experts are known from the token ids: layer 0's
    // are read during its attention, each later one's while the layer
    // before computes its experts (feed_forward).
    void before_layers(ModelState& lead, ExpertSource& experts, ThreadPool&, const int32_t* tokens,
                       int n) const override {
        if (n_hash_ == 0 || !experts.wants_certain_prefetch()) return;
        const ExpertHint h = token_hint(static_cast<Deepseek4State&>(lead), 0, tokens, n);
        experts.prefetch(h.layer, h.ids, h.n);
    }

    // The residual's nc rows from `row` on through the attention sub-block:
    // the lead's rows and scratch, seq's attention state.
    void attend(ModelState& seq, ModelState& lead, ThreadPool& pool, int il, int row, int nc, int,
                int64_t pos) const override {
        Deepseek4State& st = static_cast<Deepseek4State&>(lead);
        const Layer& l = layers_[size_t(il)];
        const int64_t E = config_.n_embd, R = shape_.n_rot;
        float* X = st.streams.f32() + int64_t(row) * n_hc_ * E;
        hc_pre(pool, st, l.hc_attn, nc, X, st.x.f32());
        rms_norm_rows(pool, st.x.f32(), l.attn_norm.f32(), nc, E, config_.rms_eps, st.xn.f32());
        dsv4_attention(pool, shape_, l.attn, il, static_cast<Deepseek4State&>(seq).attn, st.xn.f32(), nc, pos,
                       st.cos_sin_plain.f32() + row * R, st.cos_sin_comp.f32() + row * R, st.acts.data(),
                       st.y.f32());
        hc_post(pool, st, nc, X, st.y.f32());
    }

    uint64_t attention_bytes(int il) const override {
        const Layer& l = layers_[size_t(il)];
        const Dsv4AttentionLayer& a = l.attn;
        uint64_t b = l.hc_attn.fn.bytes();
        for (const Tensor* t : {&a.q_a, &a.q_b, &a.kv, &a.out_a, &a.out_b, &a.comp.kv, &a.comp.gate, &a.index.kv,
                                &a.index.gate, &a.index_q_b, &a.index_proj}) {
            b += t->bytes();
        }
        return b;
    }

    void feed_forward(ModelState& lead, ExpertSource& experts, ThreadPool& pool, int il, int row, int nc,
                      bool may_predict, TimeSplit* time) const override {
        Deepseek4State& st = static_cast<Deepseek4State&>(lead);
        const Layer& l = layers_[size_t(il)];
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd;
        const int K = c.n_expert_used;
        float* X = st.streams.f32() + int64_t(row) * n_hc_ * E;
        float* xn = st.xn.f32();
        const int32_t* tokens = reinterpret_cast<const int32_t*>(st.row_tokens.data());
        hc_pre(pool, st, l.hc_ffn, nc, X, st.x.f32());
        rms_norm_rows(pool, st.x.f32(), l.ffn.norm.f32(), nc, E, c.rms_eps, xn);
        PhaseTimer route_time(time, Phase::Routing, il, l.ffn.router.bytes());
        if (l.token_experts.empty()) {
            route_tokens(pool, l.ffn, xn, nc, K, st.ffn);
        } else {
            // Hash-routed: the experts are the token's row of the table,
            // weighted by their scores.
            int32_t* ids = reinterpret_cast<int32_t*>(st.ffn.ids.data());
            const int32_t* table = reinterpret_cast<const int32_t*>(l.token_experts.data);
            for (int t = 0; t < nc; t++) {
                std::memcpy(ids + t * K, table + int64_t(tokens[row + t]) * K, size_t(K) * 4);
            }
            for (int i = 0; i < nc * K; i++) {
                if (ids[i] < 0 || ids[i] >= c.n_expert) {
                    throw std::runtime_error("blk." + std::to_string(il) + ".ffn_gate_tid2eid: token " +
                                             std::to_string(tokens[row + i / K]) + " names expert " +
                                             std::to_string(ids[i]) + " of " + std::to_string(c.n_expert));
                }
            }
            linear(pool, l.ffn.router, xn, nc, st.ffn.logits.f32(), st.acts.data());
            weigh_chosen_experts(l.ffn.routing, st.ffn.logits.f32(), nc, c.n_expert, K, ids, st.ffn.weights.f32());
        }
        route_time.stop();
        PhaseTimer moe_time(nullptr, Phase::ExpertCompute, il);
        // The next hash-routed layer's experts for every row of the call
        // (it runs them all before its last piece's experts are needed).
        const bool hint = may_predict && il + 1 < n_hash_ && experts.wants_certain_prefetch();
        const ExpertHint next = hint ? token_hint(st, il + 1, tokens, row + nc) : ExpertHint{};
        const FfnCost cost = ffn_block(pool, experts, expert_layers_[size_t(il)], l.ffn, xn, nc, K, st.ffn,
                                       st.y.f32(), next);
        const double moe_s = moe_time.stop();
        time->add(Phase::IoWait, cost.moe.io_wait_s);
        time->add(Phase::ExpertCompute, moe_s - cost.moe.io_wait_s, cost.moe.expert_bytes + cost.dense_bytes);
        hc_post(pool, st, nc, X, st.y.f32());
    }

    // The last mix (pre weights only) feeds the output head.
    void head(ModelState& lead, ThreadPool& pool, int row, int n, float* logits) const override {
        Deepseek4State& st = static_cast<Deepseek4State&>(lead);
        const int64_t E = config_.n_embd, SE = int64_t(n_hc_) * E, B = st.options.max_batch;
        for (int64_t c0 = 0; c0 < n; c0 += B) {
            const int nc = int(std::min<int64_t>(B, n - c0));
            hc_pre(pool, st, output_hc_, nc, st.streams.f32() + (row + c0) * SE, st.x.f32());
            rms_norm_rows(pool, st.x.f32(), output_norm_.f32(), nc, E, config_.rms_eps, st.xn.f32());
            linear(pool, output_, st.xn.f32(), nc, logits + c0 * config_.n_vocab, st.acts.data());
        }
    }

public:
    void enable_nextn(const GgufFile& f) override {
        if (config_.n_nextn == 0) Model::enable_nextn(f);
        // One eh_proj over [enorm(e) | hnorm(h)] takes one vector, not four streams.
        throw std::runtime_error(f.path() + ": --draft mtp: deepseek4's MTP block runs on four hyper-connected "
                                 "residual streams, and how its eh_proj input and hc_* mixing meet them is not "
                                 "specified (not run)");
    }

protected:
    bool fixed_experts_per_token() const override { return n_hash_ > 0; }

private:
    void declare_compressor(const GgufFile& f, const std::string& prefix, int width, int ratio,
                            Dsv4Compressor* out) {
        const GgufTensor* kv = f.tensor(prefix + "kv.weight");
        if (!kv) throw std::runtime_error(f.path() + ": missing tensor " + prefix + "kv.weight");
        if (kv->ne[1] != width && kv->ne[1] != 2 * width) {
            throw std::runtime_error(f.path() + ": tensor " + prefix + "kv.weight has " + std::to_string(kv->ne[1]) +
                                     " rows, expected " + std::to_string(width) + " or " + std::to_string(2 * width));
        }
        out->width = width;
        out->overlap = kv->ne[1] == 2 * width;
        const int64_t in = out->in_width(), E = config_.n_embd;
        need(f, prefix + "kv.weight", {E, in}, &out->kv);
        need(f, prefix + "gate.weight", {E, in}, &out->gate);
        need(f, prefix + "ape.weight", {in, ratio}, &out->ape);
        need(f, prefix + "norm.weight", {width}, &out->norm);
    }

    void declare_hc(const GgufFile& f, const std::string& prefix, int64_t E, int64_t n_mix, HyperConnection* out) {
        need(f, prefix + "fn.weight", {n_hc_ * E, n_mix}, &out->fn);
        need(f, prefix + "base.weight", {n_mix}, &out->base);
        need(f, prefix + "scale.weight", {3}, &out->scale);
    }

    // The experts hash-routed layer il uses for the n tokens (each once, in
    // the order the tokens first name them).
    ExpertHint token_hint(Deepseek4State& st, int il, const int32_t* tokens, int n) const {
        const int K = config_.n_expert_used;
        const int32_t* table = reinterpret_cast<const int32_t*>(layers_[size_t(il)].token_experts.data);
        int32_t* ids = reinterpret_cast<int32_t*>(st.hint.data());
        uint8_t* seen = st.hinted.data();
        std::memset(seen, 0, st.hinted.size());
        int m = 0;
        for (int t = 0; t < n; t++) {
            for (int r = 0; r < K; r++) {
                const int32_t e = table[int64_t(tokens[t]) * K + r];
                // forward() rejects ids out of range.
                if (e >= 0 && e < config_.n_expert && !seen[e]) seen[e] = 1, ids[m++] = e;
            }
        }
        return ExpertHint{il, ids, m};
    }

    // x (n rows) = sum_h pre[h] * X[h] for each token's streams X (n rows of
    // n_hc x n_embd), pre and, for a sub-block (fn with more than n_hc rows),
    // post and the Sinkhorn-normalized mixing matrix C into st.coef.
    void hc_pre(ThreadPool& pool, Deepseek4State& st, const HyperConnection& w, int n, const float* X,
                float* x) const {
        const int64_t E = config_.n_embd, SE = int64_t(n_hc_) * E, M = w.fn.rows;
        const int S = n_hc_;
        float* flat = st.flat.f32();
        float* mix = st.mix.f32();
        rms_norm_rows(pool, X, nullptr, n, SE, config_.rms_eps, flat);
        linear(pool, w.fn, flat, n, mix, st.acts.data());
        const float* base = w.base.f32();
        const float* scale = w.scale.f32();
        const float eps = hc_eps_;
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                const float* m = mix + t * M;
                float* coef = st.coef.f32() + t * M;
                float* pre = coef;
                for (int h = 0; h < S; h++) pre[h] = sigmoid(m[h] * scale[0] + base[h]) + eps;
                const float* xt = X + t * SE;
                float* out = x + t * E;
                for (int64_t i = 0; i < E; i++) out[i] = pre[0] * xt[i];
                for (int h = 1; h < S; h++) {
                    for (int64_t i = 0; i < E; i++) out[i] += pre[h] * xt[h * E + i];
                }
                if (M == S) continue;
                float* post = coef + S;
                for (int h = 0; h < S; h++) post[h] = 2.0f * sigmoid(m[S + h] * scale[1] + base[S + h]);
                // C[s][d]: a softmax over d per source s, then columns and
                // rows normalized in turn (Sinkhorn).
                float* C = coef + 2 * S;
                for (int s = 0; s < S; s++) {
                    float* r = C + s * S;
                    for (int d = 0; d < S; d++) r[d] = m[2 * S + s * S + d] * scale[2] + base[2 * S + s * S + d];
                    softmax(r, S);
                    for (int d = 0; d < S; d++) r[d] += eps;
                }
                auto columns = [&] {
                    for (int d = 0; d < S; d++) {
                        float sum = 0;
                        for (int s = 0; s < S; s++) sum += C[s * S + d];
                        for (int s = 0; s < S; s++) C[s * S + d] /= sum + eps;
                    }
                };
                columns();
                for (int it = 1; it < sinkhorn_; it++) {
                    for (int s = 0; s < S; s++) {
                        float sum = 0;
                        for (int d = 0; d < S; d++) sum += C[s * S + d];
                        for (int d = 0; d < S; d++) C[s * S + d] /= sum + eps;
                    }
                    columns();
                }
            }
        });
    }

    // X[d] = post[d] * y + sum_s C[s][d] * X[s], with hc_pre's coefficients
    // (the new streams made in st.streams_next, then copied over X).
    void hc_post(ThreadPool& pool, Deepseek4State& st, int n, float* X, const float* y) const {
        float* Xn = st.streams_next.f32();
        const int64_t E = config_.n_embd, SE = int64_t(n_hc_) * E;
        const int S = n_hc_;
        const int64_t M = 2 * S + S * S;
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                const float* coef = st.coef.f32() + t * M;
                const float* post = coef + S;
                const float* C = coef + 2 * S;
                const float* xt = X + t * SE;
                const float* yt = y + t * E;
                for (int d = 0; d < S; d++) {
                    float* o = Xn + t * SE + d * E;
                    for (int64_t i = 0; i < E; i++) {
                        float acc = C[d] * xt[i];
                        for (int s = 1; s < S; s++) acc += C[s * S + d] * xt[s * E + i];
                        o[i] = post[d] * yt[i] + acc;
                    }
                }
                std::memcpy(X + t * SE, Xn + t * SE, size_t(SE) * 4);
            }
        });
    }

    Dsv4AttentionShape shape_;
    std::vector<Layer> layers_;
    Tensor token_embd_, output_norm_, output_;
    HyperConnection output_hc_;
    int n_run_ = 0, n_hc_ = 0, sinkhorn_ = 0, n_hash_ = 0;
    float hc_eps_ = 1e-6f;
};

}  // namespace

std::unique_ptr<Model> open_deepseek4(const GgufFile& file, ModelConfig config) {
    return std::make_unique<Deepseek4>(file, std::move(config));
}

}  // namespace ms
