// Gemma 4 (architecture `gemma4`: 26B-A4B, and the E-series with per-layer
// embeddings). Layers alternate sliding-window attention (their own head
// size, KV heads and rope base; the cache keeps only the window, as a ring)
// and full attention (rope_freqs, V taken from the K projection when attn_v
// is absent, or another layer's cache for the last shared-KV layers). q/k
// RMS norms with weights, v without, attention scale 1, norms after
// attention and FFN. A MoE layer runs a GELU MLP beside the routed experts
// (fused gate_up, per-expert output scale, router over a scaled RMS norm);
// the E-series add a per-layer embedding to each layer's output, whose
// table's rows (one per token) are read through the ExpertSource like
// experts, not held resident. Embeddings scaled by sqrt(n_embd), tied
// output, final logit soft-capping. The passes are the shared decoder's
// (model/layer_major.h): a forward call layer by layer over all its tokens,
// several sequences' decode steps in one pass.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "gguf/gguf.h"
#include "model/layer_major.h"
#include "model/moe.h"
#include "model/window_ring.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "quant/dequant.h"

namespace ms {

namespace {

struct Layer {
    bool swa = false;         // sliding-window layer
    int n_head_kv = 0;
    int head_dim = 0;         // of q, k and v
    int kv_layer = 0;         // whose cache it reads: itself, or an earlier layer (shared KV)
    int64_t n_ff = 0;         // the GELU MLP
    bool moe = false;
    Tensor attn_norm, wq, wk, wv, wo, q_norm, k_norm, post_attn_norm;
    Tensor ffn_norm, ffn_gate, ffn_up, ffn_down, post_ffw_norm;
    Tensor post_mlp_norm, pre_moe_norm, post_moe_norm, router, router_scale, expert_scale;  // MoE layers
    Tensor ple_gate, ple_proj, ple_norm;                                                    // per-layer embeddings
    Tensor out_scale;

    int64_t q_dim(int n_head) const { return int64_t(n_head) * head_dim; }
    int64_t kv_dim() const { return int64_t(n_head_kv) * head_dim; }
};

class Gemma4State : public ModelState {
public:
    AlignedBuffer k_cache, v_cache;
    std::vector<KvLayer> kv;               // per layer, into the caches (shared-KV layers: their source's)
    WindowRing ring;                       // the sliding-window layers' ring
    AlignedBuffer x;                       // residual: max_tokens rows (a forward call's tokens)
    AlignedBuffer xb, y, y2, q, k, v, att, gate, up;  // max_batch rows (one piece)
    AlignedBuffer xm;                      // the routed experts' input rows, while xb feeds the MLP
    AlignedBuffer acts;                    // converted activations for one linear()
    AlignedBuffer cos_sin_swa, cos_sin_full;  // rope angles per token: max_tokens rows
    AlignedBuffer attn_scratch;
    AlignedBuffer router, ids, weights;
    AlignedBuffer next_ids, next_weights;  // the next layer's predicted experts, per token
    AlignedBuffer next_union, next_votes;  // a chunk's hint; tokens per predicted expert
    AlignedBuffer ple;                     // per-layer inputs [token][layer][n_per_layer], max_tokens rows
    AlignedBuffer ple_h;                   // one layer's gate, max_batch rows
    AlignedBuffer ple_row;                 // one table row, dequantized
    AlignedBuffer ple_ids;                 // the call's distinct tokens: the table rows to read
    MoeScratch moe;

    uint64_t bytes() const override {
        uint64_t b = moe.bytes() + kv.size() * sizeof(KvLayer);
        for (const AlignedBuffer* p : {&k_cache, &v_cache, &x, &xb, &xm, &y, &y2, &q, &k, &v, &att, &gate, &up, &acts,
                                       &cos_sin_swa, &cos_sin_full, &attn_scratch, &router, &ids, &weights,
                                       &next_ids, &next_weights, &next_union, &next_votes, &ple, &ple_h,
                                       &ple_row, &ple_ids}) {
            b += p->size();
        }
        return b;
    }

    int64_t rewind_limit(int64_t n) const override { return ring.rewind_limit(n); }
};

class Gemma4 : public LayerMajorModel {
public:
    Gemma4(const GgufFile& f, ModelConfig c) : LayerMajorModel(std::move(c)) {
        ModelConfig& cfg = config_;
        const std::string p = cfg.arch + ".";
        const GgufTensor* embd = f.tensor("token_embd.weight");
        if (!embd) throw std::runtime_error(f.path() + ": missing tensor token_embd.weight");
        cfg.n_vocab = embd->ne[1];
        const int64_t E = cfg.n_embd, V = cfg.n_vocab, L = cfg.n_layer;

        window_ = f.get_int(p + "attention.sliding_window", 0);
        const std::vector<int64_t> swa = per_layer(f, p + "attention.sliding_window_pattern", 0);
        const std::vector<int64_t> n_head = per_layer(f, p + "attention.head_count", cfg.n_head);
        const std::vector<int64_t> n_head_kv = per_layer(f, p + "attention.head_count_kv", cfg.n_head_kv);
        const std::vector<int64_t> n_ff = per_layer(f, p + "feed_forward_length", cfg.n_ff);
        const int64_t head_swa = f.get_int(p + "attention.key_length_swa", cfg.head_dim);
        const int64_t n_shared_kv = f.get_int(p + "attention.shared_kv_layers", 0);
        rope_swa_ = Rope{int(f.get_int(p + "rope.dimension_count_swa", head_swa)),
                         float(f.get_float(p + "rope.freq_base_swa", 10000.0)), true, nullptr};
        rope_full_ = Rope{cfg.n_rot, cfg.rope_freq_base, true, nullptr};
        softcap_ = float(f.get_float(p + "final_logit_softcapping", 0.0));
        n_per_layer_ = f.get_int(p + "embedding_length_per_layer_input", 0);
        if (f.get_int(p + "attention.value_length_swa", head_swa) != head_swa || cfg.head_dim_v != cfg.head_dim) {
            throw std::runtime_error(f.path() + ": gemma4 needs value_length == key_length (and the same for _swa)");
        }
        if (head_swa < 1 || head_swa > (1 << 14) || rope_swa_.n_rot < 0 || rope_swa_.n_rot > head_swa ||
            rope_swa_.n_rot % 2 != 0 || window_ < 0 || n_per_layer_ < 0 || n_per_layer_ > (1 << 16) ||
            n_shared_kv < 0 || n_shared_kv >= L) {
            throw std::runtime_error(f.path() + ": gemma4 attention metadata out of range");
        }

        need(f, "token_embd.weight", {E, V}, &token_embd_);
        need(f, "output_norm.weight", {E}, &output_norm_);
        tied_output_ = !maybe(f, "output.weight", {E, V}, &output_);
        have_rope_freqs_ = maybe(f, "rope_freqs.weight", {cfg.n_rot / 2}, &rope_freqs_);
        if (window_ > 0 && !f.has(p + "attention.sliding_window_pattern")) {
            throw std::runtime_error(f.path() + ": missing metadata " + p + "attention.sliding_window_pattern");
        }
        if (n_per_layer_ > 0) {
            const std::string name = "per_layer_token_embd.weight";
            if (!present(f, name, {L * n_per_layer_, V})) throw std::runtime_error(f.path() + ": missing tensor " + name);
            const GgufTensor& t = *f.tensor(name);
            ple_type_ = t.type;
            // Each layer's slice of a row is dequantized on its own.
            if (n_per_layer_ % type_traits(ple_type_).block_size != 0) {
                throw std::runtime_error(f.path() + ": " + name + ": a layer's " + std::to_string(n_per_layer_) +
                                         " values are not whole " + type_name(ple_type_) + " blocks");
            }
            // The table is sparse: each token reads its own row, so the rows
            // are a source "layer" of their own after the real ones (row =
            // expert id), read like experts and counted apart (rows = true).
            ple_rows_.layer = int(L);
            ple_rows_.n_expert = int(V);
            ple_rows_.rows = true;
            ExpertMatrix& g = ple_rows_.gate;
            g.tensor = name;
            g.type = t.type;
            g.cols = L * n_per_layer_;
            g.rows = 1;
            g.split = t.split;
            g.base = t.offset;
            g.bytes = t.row_bytes();
            g.stride = g.bytes;
            ple_rows_.up = g;
            ple_rows_.up.rows = 0;
            ple_rows_.up.bytes = 0;
            ple_rows_.up.base = g.base + g.bytes;  // empty, right after the row: one read per row
            ple_rows_.down = ple_rows_.up;
            need(f, "per_layer_model_proj.weight", {E, L * n_per_layer_}, &ple_model_proj_);
            need(f, "per_layer_proj_norm.weight", {n_per_layer_}, &ple_proj_norm_);
        }

        layers_.resize(size_t(L));
        expert_layers_.resize(size_t(L));
        const int64_t first_shared = L - n_shared_kv;
        for (int il = 0; il < L; il++) {
            Layer& l = layers_[size_t(il)];
            const std::string b = "blk." + std::to_string(il) + ".";
            l.swa = window_ > 0 && swa[size_t(il)] != 0;
            l.head_dim = int(l.swa ? head_swa : cfg.head_dim);
            l.n_head_kv = int(n_head_kv[size_t(il)]);
            l.n_ff = n_ff[size_t(il)];
            if (n_head[size_t(il)] != cfg.n_head || l.n_head_kv < 1 || cfg.n_head % l.n_head_kv != 0 || l.n_ff < 1) {
                throw std::runtime_error(f.path() + ": gemma4 layer " + std::to_string(il) +
                                         ": head counts or feed_forward_length out of range");
            }
            // The last shared_kv_layers layers read the cache of the last
            // earlier layer of their kind that has its own.
            l.kv_layer = il;
            if (il >= first_shared) {
                l.kv_layer = -1;
                for (int j = int(first_shared) - 1; j >= 0 && l.kv_layer < 0; j--) {
                    if (layers_[size_t(j)].swa == l.swa) l.kv_layer = j;
                }
                if (l.kv_layer < 0 || layers_[size_t(l.kv_layer)].kv_dim() != l.kv_dim()) {
                    throw std::runtime_error(f.path() + ": gemma4 layer " + std::to_string(il) +
                                             " shares a KV cache no earlier layer of its kind provides");
                }
            }
            const int64_t qd = l.q_dim(cfg.n_head), kvd = l.kv_dim();
            need(f, b + "attn_norm.weight", {E}, &l.attn_norm);
            need(f, b + "attn_q.weight", {E, qd}, &l.wq);
            need(f, b + "attn_q_norm.weight", {l.head_dim}, &l.q_norm);
            if (l.kv_layer == il) {
                need(f, b + "attn_k.weight", {E, kvd}, &l.wk);
                maybe(f, b + "attn_v.weight", {E, kvd}, &l.wv);
                need(f, b + "attn_k_norm.weight", {l.head_dim}, &l.k_norm);
            }
            need(f, b + "attn_output.weight", {qd, E}, &l.wo);
            need(f, b + "post_attention_norm.weight", {E}, &l.post_attn_norm);
            need(f, b + "ffn_norm.weight", {E}, &l.ffn_norm);
            need(f, b + "ffn_gate.weight", {E, l.n_ff}, &l.ffn_gate);
            need(f, b + "ffn_up.weight", {E, l.n_ff}, &l.ffn_up);
            need(f, b + "ffn_down.weight", {l.n_ff, E}, &l.ffn_down);
            need(f, b + "post_ffw_norm.weight", {E}, &l.post_ffw_norm);
            l.moe = f.tensor(b + "ffn_gate_inp.weight") != nullptr;
            if (l.moe) {
                if (cfg.n_expert <= 0 || cfg.n_expert_used <= 0 || cfg.n_ff_exp <= 0) {
                    throw std::runtime_error(f.path() + ": gemma4 MoE layers need expert_count, expert_used_count "
                                                        "and expert_feed_forward_length > 0");
                }
                need(f, b + "ffn_gate_inp.weight", {E, cfg.n_expert}, &l.router);
                need(f, b + "ffn_gate_inp.scale", {E}, &l.router_scale);
                maybe(f, b + "ffn_down_exps.scale", {cfg.n_expert}, &l.expert_scale);
                need(f, b + "pre_ffw_norm_2.weight", {E}, &l.pre_moe_norm);
                need(f, b + "post_ffw_norm_1.weight", {E}, &l.post_mlp_norm);
                need(f, b + "post_ffw_norm_2.weight", {E}, &l.post_moe_norm);
                need_experts(f, il, cfg.n_expert, E, cfg.n_ff_exp);
                expert_layers_[size_t(il)].act = GatedActivation::GeGlu;
            }
            if (n_per_layer_ > 0) {
                need(f, b + "inp_gate.weight", {E, n_per_layer_}, &l.ple_gate);
                need(f, b + "proj.weight", {n_per_layer_, E}, &l.ple_proj);
                need(f, b + "post_norm.weight", {E}, &l.ple_norm);
            }
            maybe(f, b + "layer_output_scale.weight", {1}, &l.out_scale);
        }
        if (n_per_layer_ > 0) expert_layers_.push_back(ple_rows_);
    }

    std::unique_ptr<ModelState> new_state(const StateOptions& o) const override {
        const ModelConfig& c = config_;
        check_state_options(o);
        auto st = std::make_unique<Gemma4State>();
        st->options = o;
        const size_t B = size_t(o.max_batch);
        const int64_t E = c.n_embd;

        // Full layers hold every position; sliding-window layers a ring of
        // their window plus a batch, when that is shorter than the context.
        st->ring = WindowRing(window_, o.max_batch, o.n_ctx);
        std::vector<int64_t> rows(layers_.size(), 0);
        std::vector<size_t> k_off(layers_.size(), 0), v_off(layers_.size(), 0);
        size_t k_bytes = 0, v_bytes = 0, q_max = 0, kv_max = 0, ff_max = 0, scratch = 0;
        size_t act = linear_scratch_bytes(output(), 1);
        for (size_t il = 0; il < layers_.size(); il++) {
            const Layer& l = layers_[il];
            q_max = std::max(q_max, size_t(l.q_dim(c.n_head)));
            kv_max = std::max(kv_max, size_t(l.kv_dim()));
            ff_max = std::max(ff_max, size_t(l.n_ff));
            const int64_t seen = l.swa ? std::min<int64_t>(window_, o.n_ctx) : o.n_ctx;
            scratch = std::max(scratch, attention_scratch_floats(shape(l, window_), seen, o.n_threads));
            const Tensor* qkv[3] = {&l.wq, &l.wk, &l.wv};
            act = std::max(act, linear_many_scratch_bytes(qkv, l.kv_layer == int(il) ? (l.wv.rows ? 3 : 2) : 1, 1));
            const Tensor* mlp[2] = {&l.ffn_gate, &l.ffn_up};
            act = std::max(act, linear_many_scratch_bytes(mlp, 2, 1));
            for (const Tensor* w : {&l.wo, &l.ffn_down, &l.router, &l.ple_gate, &l.ple_proj}) {
                if (w->rows) act = std::max(act, linear_scratch_bytes(*w, 1));
            }
            if (l.kv_layer != int(il)) continue;
            check_kv_type(o.kv_type, shape(l, window_).head_dim, shape(l, window_).head_dim_v);
            rows[il] = st->ring.cache_rows(l.swa, o.n_ctx);
            k_off[il] = k_bytes;
            v_off[il] = v_bytes;
            k_bytes += size_t(rows[il] * kv_row_bytes(o.kv_type, l.kv_dim()));
            v_bytes += size_t(rows[il] * kv_row_bytes(o.kv_type, l.kv_dim()));
        }
        if (n_per_layer_ > 0) act = std::max(act, linear_scratch_bytes(ple_model_proj_, 1));
        st->k_cache.resize(k_bytes);
        st->v_cache.resize(v_bytes);
        st->kv.resize(layers_.size());
        for (size_t il = 0; il < layers_.size(); il++) {
            const size_t src = size_t(layers_[il].kv_layer);
            const Layer& l = layers_[src];
            st->kv[il] = st->ring.layer(l.swa, o.kv_type, l.n_head_kv, l.kv_dim(), l.kv_dim(), o.n_ctx,
                                        st->k_cache.data() + k_off[src], st->v_cache.data() + v_off[src]);
        }

        // A forward call takes up to T tokens and runs each layer over them
        // in pieces of B (layer_major()).
        const size_t T = size_t(st->max_tokens()), P = size_t(n_per_layer_);
        st->x.resize(T * size_t(E) * 4);
        for (AlignedBuffer* b : {&st->xb, &st->xm, &st->y, &st->y2}) b->resize(B * size_t(E) * 4);
        st->q.resize(B * q_max * 4);
        st->att.resize(B * q_max * 4);
        st->k.resize(B * kv_max * 4);
        st->v.resize(B * kv_max * 4);
        st->gate.resize(B * ff_max * 4);
        st->up.resize(B * ff_max * 4);
        st->acts.resize(act * B);
        st->cos_sin_swa.resize(T * size_t(rope_swa_.n_rot) * 4);
        st->cos_sin_full.resize(T * size_t(rope_full_.n_rot) * 4);
        st->attn_scratch.resize(scratch * 4);
        st->router.resize(B * size_t(c.n_expert) * 4);
        st->ids.resize(B * size_t(c.n_expert_used) * 4);
        st->weights.resize(B * size_t(c.n_expert_used) * 4);
        st->next_ids.resize(B * size_t(c.n_expert_used) * 4);
        st->next_weights.resize(B * size_t(c.n_expert_used) * 4);
        st->next_union.resize(size_t(c.n_expert) * 4);
        st->next_votes.resize(size_t(c.n_expert) * 4);
        st->ple.resize(T * size_t(c.n_layer) * P * 4);
        st->ple_h.resize(B * P * 4);
        st->ple_row.resize(size_t(c.n_layer) * P * 4);
        st->ple_ids.resize(P > 0 ? T * 4 : 0);
        st->moe.init(expert_layers_, o.max_batch, c.n_expert_used);
        return st;
    }

private:
    const Tensor& output() const { return tied_output_ ? token_embd_ : output_; }

    int layers_run() const override { return config_.n_layer; }

    void begin(ModelState& seq, ExpertSource&, ThreadPool&, const int32_t*, int n) const override {
        static_cast<Gemma4State&>(seq).ring.wrote(seq.n_past, n);
    }

    void embed(ModelState& lead, int64_t t, int32_t token, int64_t pos) const override {
        Gemma4State& st = static_cast<Gemma4State&>(lead);
        const int64_t E = config_.n_embd;
        const float embd_scale = std::sqrt(float(E));
        float* xt = st.x.f32() + t * E;
        dequantize_row(token_embd_.type, token_embd_.row(token), xt, E);
        for (int64_t i = 0; i < E; i++) xt[i] *= embd_scale;
        rope_angles(rope_swa_, pos, st.cos_sin_swa.f32() + t * rope_swa_.n_rot);
        rope_angles(full_rope(), pos, st.cos_sin_full.f32() + t * rope_full_.n_rot);
    }

    void before_layers(ModelState& lead, ExpertSource& experts, ThreadPool& pool, const int32_t* tokens,
                       int n) const override {
        if (n_per_layer_ > 0) per_layer_inputs(static_cast<Gemma4State&>(lead), experts, pool, tokens, n);
    }

    void attend(ModelState& seq, ModelState& lead, ThreadPool& pool, int il, int row, int nc, int,
                int64_t pos) const override {
        Gemma4State& rows = static_cast<Gemma4State&>(lead);
        attention_block(static_cast<Gemma4State&>(seq), pool, layers_[size_t(il)], il,
                        rows.x.f32() + int64_t(row) * config_.n_embd, nc, pos, rows, row);
    }

    uint64_t attention_bytes(int il) const override {
        const Layer& l = layers_[size_t(il)];
        return l.wq.bytes() + l.wk.bytes() + l.wv.bytes() + l.wo.bytes();
    }

    // The FFN, then the per-layer embedding and layer_output_scale.
    void feed_forward(ModelState& lead, ExpertSource& experts, ThreadPool& pool, int il, int row, int nc,
                      bool may_predict, TimeSplit* time) const override {
        Gemma4State& st = static_cast<Gemma4State&>(lead);
        const Layer& l = layers_[size_t(il)];
        float* x = st.x.f32() + int64_t(row) * config_.n_embd;
        ffn(st, experts, pool, il, x, nc, may_predict, time);
        if (n_per_layer_ > 0) {
            const float* ple = st.ple.f32() + int64_t(row) * config_.n_layer * n_per_layer_;
            per_layer_embedding(st, pool, l, il, x, ple, nc);
        }
        if (l.out_scale.rows) {
            const float s = l.out_scale.f32()[0];
            pool.parallel_for(int64_t(nc) * config_.n_embd, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; i++) x[i] *= s;
            });
        }
    }

    // Final norm, output head and soft-capping, in pieces of max_batch.
    void head(ModelState& lead, ThreadPool& pool, int row, int n, float* logits) const override {
        Gemma4State& st = static_cast<Gemma4State&>(lead);
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, V = c.n_vocab;
        for (int c0 = 0; c0 < n; c0 += st.options.max_batch) {
            const int nc = std::min(st.options.max_batch, n - c0);
            rms_norm_rows(pool, st.x.f32() + int64_t(row + c0) * E, output_norm_.f32(), nc, E, c.rms_eps, st.xb.f32());
            linear(pool, output(), st.xb.f32(), nc, logits + int64_t(c0) * V, st.acts.data());
        }
        if (softcap_ > 0) {
            const float inv = 1.0f / softcap_;
            pool.parallel_for(int64_t(n) * V, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; i++) logits[i] = std::tanh(logits[i] * inv) * softcap_;
            });
        }
    }

    Rope full_rope() const {
        Rope full = rope_full_;
        if (have_rope_freqs_) full.freq_factors = rope_freqs_.f32();
        return full;
    }

    AttentionShape shape(const Layer& l, int64_t window) const {
        return AttentionShape{config_.n_head, l.n_head_kv, l.head_dim, l.head_dim, 1.0f, l.swa ? window : 0};
    }

    // x += post_attention_norm(attn_output(attention(attn_norm(x)))) over n
    // residual rows x of st's sequence at positions pos0..; their rope
    // angles are rows row0.. of `angles`; scratch from st.
    void attention_block(Gemma4State& st, ThreadPool& pool, const Layer& l, int il, float* x, int n, int64_t pos0,
                         const Gemma4State& angles, int row0) const {
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, qd = l.q_dim(c.n_head), kvd = l.kv_dim(), n_ctx = st.options.n_ctx;
        const int hd = l.head_dim;
        const bool own_kv = l.kv_layer == il;
        float* xb = st.xb.f32();
        float* q = st.q.f32();
        float* k = st.k.f32();
        float* v = st.v.f32();
        const Rope rope = l.swa ? rope_swa_ : full_rope();
        const float* cos_sin = (l.swa ? angles.cos_sin_swa.f32() : angles.cos_sin_full.f32()) + row0 * rope.n_rot;
        const KvLayer& kv = st.kv[size_t(il)];

        rms_norm_rows(pool, x, l.attn_norm.f32(), n, E, c.rms_eps, xb);
        // Without attn_v, V is the K projection (before k's norm and rope).
        const Tensor* w[3] = {&l.wq, &l.wk, &l.wv};
        float* const out[3] = {q, k, v};
        linear_many(pool, w, own_kv ? (l.wv.rows ? 3 : 2) : 1, xb, n, out, st.acts.data());
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                float* qt = q + t * qd;
                const float* cs = cos_sin + t * rope.n_rot;
                for (int h = 0; h < c.n_head; h++) rms_norm(qt + h * hd, l.q_norm.f32(), hd, c.rms_eps, qt + h * hd);
                rope_apply(rope, cs, qt, c.n_head, hd);
                if (!own_kv) continue;
                float* kt = k + t * kvd;
                float* vt = v + t * kvd;
                if (!l.wv.rows) std::memcpy(vt, kt, size_t(kvd) * 4);
                for (int h = 0; h < l.n_head_kv; h++) {
                    rms_norm(kt + h * hd, l.k_norm.f32(), hd, c.rms_eps, kt + h * hd);
                    rms_norm(vt + h * hd, nullptr, hd, c.rms_eps, vt + h * hd);
                }
                rope_apply(rope, cs, kt, l.n_head_kv, hd);
                kv_store(kv, pos0 + t, kt, vt);
            }
        });
        const int64_t seen = l.swa ? std::min(window_, n_ctx) : n_ctx;
        attention(pool, shape(l, window_), kv, q, n, pos0, seen, st.attn_scratch.f32(), st.att.f32());
        float* y = st.y.f32();
        linear(pool, l.wo, st.att.f32(), n, y, st.acts.data());
        rms_norm_rows(pool, y, l.post_attn_norm.f32(), n, E, c.rms_eps, y);
        add_to(x, y, n * E);
    }

    // Layer il's FFN over n residual rows x (in place), with st's scratch:
    // the GELU MLP and, in MoE layers, the routed experts beside it, both
    // reading x (the residual after attention). may_predict: whether to
    // hint the next layer's experts.
    void ffn(Gemma4State& st, ExpertSource& experts, ThreadPool& pool, int il, float* x, int n, bool may_predict,
             TimeSplit* time) const {
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd;
        const int K = c.n_expert_used;
        const Layer& l = layers_[size_t(il)];
        float* y = st.y.f32();
        float* y2 = st.y2.f32();
        // y = post_mlp_norm(mlp(ffn_norm(x))) in MoE layers; run by
        // moe_forward while the layer's expert reads land.
        struct Mlp {
            const Gemma4* model;
            Gemma4State& st;
            ThreadPool& pool;
            const Layer& l;
            const float* x;
            int n;
            double seconds = 0;
        } job{this, st, pool, l, x, n};
        auto run_mlp = [](void* ctx) {
            Mlp& j = *static_cast<Mlp*>(ctx);
            const int64_t t0 = Trace::now_ns();
            const ModelConfig& c = j.model->config_;
            const int64_t E = c.n_embd;
            float* xb = j.st.xb.f32();
            float* y = j.st.y.f32();
            rms_norm_rows(j.pool, j.x, j.l.ffn_norm.f32(), j.n, E, c.rms_eps, xb);
            j.model->mlp(j.st, j.pool, j.l, xb, j.n, y);
            if (j.l.moe) rms_norm_rows(j.pool, y, j.l.post_mlp_norm.f32(), j.n, E, c.rms_eps, y);
            j.seconds = double(Trace::now_ns() - t0) * 1e-9;
        };
        if (!l.moe) run_mlp(&job);
        if (l.moe) {
            const Layer* nl = may_predict && il + 1 < c.n_layer && experts.wants_prefetch() ? &layers_[size_t(il) + 1]
                                                                                            : nullptr;
            if (nl && !nl->moe) nl = nullptr;
            PhaseTimer route_time(time, Phase::Routing, il, l.router.bytes() + (nl ? nl->router.bytes() : 0));
            int32_t* ids = reinterpret_cast<int32_t*>(st.ids.data());
            route(st, pool, l, x, n, ids, st.weights.f32());
            // The residual changes little from one layer to the next, so
            // the next layer's router over it predicts the experts that
            // layer will want, read while this layer's are computed.
            ExpertHint next;
            if (nl) {
                int32_t* next_ids = reinterpret_cast<int32_t*>(st.next_ids.data());
                route(st, pool, *nl, x, n, next_ids, st.next_weights.f32());
                next = expert_hint(il + 1, next_ids, n, K, c.n_expert, reinterpret_cast<int32_t*>(st.next_votes.data()),
                                   reinterpret_cast<int32_t*>(st.next_union.data()));
            }
            float* xm = st.xm.f32();
            rms_norm_rows(pool, x, l.pre_moe_norm.f32(), n, E, c.rms_eps, xm);
            route_time.stop();

            // The MLP's time is not the experts': it stays in "other".
            PhaseTimer moe_time(nullptr, Phase::ExpertCompute, il);
            const MoeCost cost = moe_forward(pool, experts, expert_layers_[size_t(il)], xm, n, ids, st.weights.f32(), K,
                                             st.moe, y2, next,
                                             {.scale = l.expert_scale.rows ? l.expert_scale.f32() : nullptr},
                                             WhileReading{run_mlp, &job});
            const double moe_s = moe_time.stop();
            time->add(Phase::IoWait, cost.io_wait_s);
            time->add(Phase::ExpertCompute, moe_s - job.seconds - cost.io_wait_s, cost.expert_bytes);
            rms_norm_rows(pool, y2, l.post_moe_norm.f32(), n, E, c.rms_eps, y2);
            add_to(y, y2, n * E);
        }
        rms_norm_rows(pool, y, l.post_ffw_norm.f32(), n, E, c.rms_eps, y);
        add_to(x, y, n * E);
    }

    // Layer l's top-k experts and weights for each of n residual rows x: its
    // router reads rms_norm(x) / sqrt(n_embd) * ffn_gate_inp.scale.
    void route(Gemma4State& st, ThreadPool& pool, const Layer& l, const float* x, int n, int32_t* ids,
               float* weights) const {
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd;
        const float inv = 1.0f / std::sqrt(float(E));
        float* in = st.y2.f32();
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                float* r = in + t * E;
                rms_norm(x + t * E, nullptr, E, c.rms_eps, r);
                for (int64_t i = 0; i < E; i++) r[i] = r[i] * inv * l.router_scale.f32()[i];
            }
        });
        linear(pool, l.router, in, n, st.router.f32(), st.acts.data());
        route_softmax_topk(st.router.f32(), n, c.n_expert, c.n_expert_used, true, ids, weights);
    }

    // out = ffn_down(gelu(ffn_gate in) * ffn_up in).
    void mlp(Gemma4State& st, ThreadPool& pool, const Layer& l, const float* in, int n, float* out) const {
        float* g = st.gate.f32();
        float* u = st.up.f32();
        const Tensor* w[2] = {&l.ffn_gate, &l.ffn_up};
        float* const gu[2] = {g, u};
        linear_many(pool, w, 2, in, n, gu, st.acts.data());
        pool.parallel_for(n * l.n_ff, [&](int64_t b, int64_t e) { geglu(g + b, u + b, e - b, g + b); });
        linear(pool, l.ffn_down, g, n, out, st.acts.data());
    }

    // Each of n tokens' per-layer inputs for every layer, into st.ple:
    // (its per_layer_token_embd row * sqrt(n_per_layer) +
    //  per_layer_proj_norm(per_layer_model_proj x / sqrt(n_embd))) / sqrt(2),
    // x being the scaled token embedding (st.x), the norm taken per layer.
    // The rows come from the source, each distinct token's once.
    void per_layer_inputs(Gemma4State& st, ExpertSource& experts, ThreadPool& pool, const int32_t* tokens,
                          int n) const {
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, P = n_per_layer_, LP = int64_t(c.n_layer) * P;
        float* ple = st.ple.f32();
        for (int c0 = 0; c0 < n; c0 += st.options.max_batch) {
            const int nc = std::min(st.options.max_batch, n - c0);
            linear(pool, ple_model_proj_, st.x.f32() + int64_t(c0) * E, nc, ple + int64_t(c0) * LP, st.acts.data());
        }
        const float proj_scale = 1.0f / std::sqrt(float(c.n_embd));
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                for (int il = 0; il < c.n_layer; il++) {
                    float* s = ple + t * LP + il * P;
                    for (int64_t i = 0; i < P; i++) s[i] *= proj_scale;
                    rms_norm(s, ple_proj_norm_.f32(), P, c.rms_eps, s);
                }
            }
        });

        int32_t* ids = reinterpret_cast<int32_t*>(st.ple_ids.data());
        int n_ids = 0;
        for (int t = 0; t < n; t++) {
            if (std::find(ids, ids + n_ids, tokens[t]) == ids + n_ids) ids[n_ids++] = tokens[t];
        }
        const float embd_scale = std::sqrt(float(P));
        const float input_scale = 1.0f / std::sqrt(2.0f);
        const int layer = ple_rows_.layer;
        float* row = st.ple_row.f32();
        for (int g = 0; g < n_ids; g += experts.capacity()) {
            const int m = std::min(experts.capacity(), n_ids - g);
            experts.acquire(layer, ids + g, m);
            ExpertView v;
            for (int i; (i = experts.next_ready(layer, &v)) >= 0;) {
                const int32_t token = ids[g + i];
                // Layer by layer: each layer's slice is whole blocks.
                for (int il = 0; il < c.n_layer; il++) {
                    dequantize_row(ple_type_, v.gate + ple_slice_bytes(il), row + il * P, P);
                }
                pool.parallel_for(n, [&](int64_t b, int64_t e) {
                    for (int64_t t = b; t < e; t++) {
                        if (tokens[t] != token) continue;
                        float* s = ple + t * LP;
                        for (int64_t k = 0; k < LP; k++) s[k] = (s[k] + row[k] * embd_scale) * input_scale;
                    }
                });
            }
            experts.release(layer);
        }
    }

    // Bytes into a per_layer_token_embd row where layer il's slice starts.
    size_t ple_slice_bytes(int il) const { return row_bytes(ple_type_, int64_t(il) * n_per_layer_); }

    // x += post_norm(proj(gelu(inp_gate x) * ple[layer])) over n residual
    // rows x; ple: their per-layer inputs.
    void per_layer_embedding(Gemma4State& st, ThreadPool& pool, const Layer& l, int il, float* x, const float* ple,
                             int n) const {
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, P = n_per_layer_, LP = int64_t(c.n_layer) * P;
        float* h = st.ple_h.f32();
        float* y = st.y.f32();
        linear(pool, l.ple_gate, x, n, h, st.acts.data());
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                float* ht = h + t * P;
                const float* in = ple + t * LP + il * P;
                gelu(ht, P, ht);
                for (int64_t i = 0; i < P; i++) ht[i] *= in[i];
            }
        });
        linear(pool, l.ple_proj, h, n, y, st.acts.data());
        rms_norm_rows(pool, y, l.ple_norm.f32(), n, E, c.rms_eps, y);
        add_to(x, y, n * E);
    }

    // A per-layer metadata array of n_layer values, or one value for all.
    std::vector<int64_t> per_layer(const GgufFile& f, const std::string& key, int64_t fallback) const {
        const int L = config_.n_layer;
        const GgufValue* v = f.find(key);
        if (!v || !v->is_array()) return std::vector<int64_t>(size_t(L), v ? f.get_int(key, fallback) : fallback);
        std::vector<int64_t> a = f.get_ints(key);
        if (a.size() != size_t(L)) {
            throw std::runtime_error(f.path() + ": " + key + " has " + std::to_string(a.size()) + " values for " +
                                     std::to_string(L) + " layers");
        }
        return a;
    }

    Tensor token_embd_, output_norm_, output_, rope_freqs_;
    Tensor ple_model_proj_, ple_proj_norm_;
    GgmlType ple_type_ = GgmlType::F32;
    ExpertLayer ple_rows_;  // per_layer_token_embd, read through the source
    bool tied_output_ = false, have_rope_freqs_ = false;
    int64_t window_ = 0, n_per_layer_ = 0;
    Rope rope_swa_, rope_full_;
    float softcap_ = 0;
    std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> open_gemma4(const GgufFile& file, ModelConfig config) {
    return std::make_unique<Gemma4>(file, std::move(config));
}

}  // namespace ms
