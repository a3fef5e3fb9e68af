#include "model/decoder_weights.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "gguf/gguf.h"
#include "model/layer_major.h"

namespace ms {

template <class Base>
DecoderWeights<Base>::DecoderWeights(const GgufFile& f, ModelConfig c, const DecoderSpec& spec)
    : Base(std::move(c)), spec_(spec), rope_(spec.rope), mla_shape_(spec.mla), indexer_shape_(spec.indexer) {
    ModelConfig& cfg = config_;
    const std::string& arch = cfg.arch;
    if (cfg.n_expert <= 0 || cfg.n_expert_used <= 0 || spec.n_ff_exp <= 0) {
        throw std::runtime_error(f.path() + ": " + arch + " needs expert_count, expert_used_count and an expert "
                                 "feed_forward_length > 0 (dense models are not supported)");
    }
    if ((spec.n_dense_lead > 0 || spec.moe_step > 1) && spec.n_ff_dense <= 0) {
        throw std::runtime_error(f.path() + ": " + arch + ": dense layers need feed_forward_length > 0");
    }
    const GgufTensor* embd = f.tensor("token_embd.weight");
    if (!embd) throw std::runtime_error(f.path() + ": missing tensor token_embd.weight");
    cfg.n_vocab = embd->ne[1];
    const int64_t E = cfg.n_embd, V = cfg.n_vocab;
    need(f, "token_embd.weight", {E, V}, &token_embd_);
    need(f, "output_norm.weight", {E}, &output_norm_);
    tied_output_ = !maybe(f, "output.weight", {E, V}, &output_);
    if (spec.rope_freqs) maybe(f, "rope_freqs.weight", {spec.rope.n_rot / 2}, &rope_freqs_);

    n_run_ = cfg.n_layer - cfg.n_nextn;
    // need() keeps pointers into these: room for enable_nextn()'s layer
    // now, so that adding it never moves them.
    attn_.reserve(size_t(n_run_) + 1);
    deltanet_.reserve(size_t(n_run_) + 1);
    ffn_.reserve(size_t(n_run_) + 1);
    attn_.resize(size_t(n_run_));
    deltanet_.resize(size_t(n_run_));
    deltanet_slot_.assign(size_t(n_run_), -1);
    if (mla_shape_.kv_lora > 0) mla_.resize(size_t(n_run_));
    if (indexer_shape_.top_k > 0) {
        const IndexerShape& is = indexer_shape_;
        if (mla_.empty() || is.n_head <= 0 || is.head_dim < rope_.n_rot || is.head_dim % 2 != 0 ||
            (!spec.indexer_layers.empty() && spec.indexer_layers.size() < size_t(n_run_))) {
            throw std::runtime_error(f.path() + ": " + arch + ": sparse attention needs MLA, indexer head_count "
                                     "> 0, an even indexer key_length of at least rope.dimension_count, and "
                                     "an indexer type per layer");
        }
        indexer_.resize(size_t(n_run_));
        indexer_slot_.assign(size_t(n_run_), -1);
    }
    ffn_.resize(size_t(n_run_));
    expert_layers_.resize(size_t(n_run_));
    for (int il = 0; il < n_run_; il++) {
        expert_layers_[size_t(il)].layer = il;
        const int every = spec.full_attention_interval;
        if (every > 0 && (il + 1) % every != 0) {
            declare_deltanet(f, spec, il);
        } else {
            declare_attention(f, spec, il);
        }
        declare_ffn(f, spec, il);
        // A chunked layer needs at most its chunk's positions: the ring
        // of a window as long as the chunk holds them.
        const int64_t w = std::max<int64_t>(attn_[size_t(il)].window, attn_[size_t(il)].chunk);
        if (w > 0 && window_ > 0 && w != window_) {
            throw std::runtime_error(f.path() + ": sliding windows of " + std::to_string(window_) + " and " +
                                     std::to_string(w) + " positions in one model are not supported");
        }
        if (w > 0) window_ = w;
    }
    // NextN blocks: their own tensors are checked when present, but
    // nothing of the block is read or run.
    for (int il = n_run_; il < cfg.n_layer; il++) {
        const std::string p = "blk." + std::to_string(il) + ".nextn.";
        present(f, p + "eh_proj.weight", {2 * E, E});
        for (const char* norm : {"enorm", "hnorm", "shared_head_norm"}) present(f, p + norm + ".weight", {E});
    }
}

template <class Base>
void DecoderWeights<Base>::declare_attention(const GgufFile& f, const DecoderSpec& spec, int il) {
    const ModelConfig& c = config_;
    const int64_t E = c.n_embd;
    const std::string p = "blk." + std::to_string(il) + ".";
    AttentionLayer& a = attn_[size_t(il)];
    need(f, p + "attn_norm.weight", {E}, &a.norm);
    if (!mla_.empty()) {
        declare_mla(f, p, &mla_[size_t(il)]);
        if (indexer_shape_.top_k > 0 && (spec.indexer_layers.empty() || spec.indexer_layers[size_t(il)])) {
            declare_indexer(f, p, il);
        } else if (indexer_shape_.top_k > 0 && il == 0) {
            throw std::runtime_error(f.path() + ": layer 0 has no indexer, so it has no selection to reuse");
        }
        return;
    }
    need(f, p + "attn_q.weight", {E, spec.q_gate ? 2 * c.q_dim() : c.q_dim()}, &a.wq);
    need(f, p + "attn_k.weight", {E, c.kv_dim()}, &a.wk);
    need(f, p + "attn_v.weight", {E, c.v_dim()}, &a.wv);
    need(f, p + "attn_output.weight", {int64_t(c.n_head) * c.head_dim_v, E}, &a.wo);
    if (spec.qkv_bias) {
        need(f, p + "attn_q.bias", {c.q_dim()}, &a.bq);
        need(f, p + "attn_k.bias", {c.kv_dim()}, &a.bk);
        need(f, p + "attn_v.bias", {c.v_dim()}, &a.bv);
    }
    if (spec.out_bias) need(f, p + "attn_output.bias", {E}, &a.bo);
    a.qk_norm = spec.qk_norm;
    if (spec.qk_norm == QkNorm::PerHead || spec.qk_norm == QkNorm::Whole) {
        const bool whole = spec.qk_norm == QkNorm::Whole;
        need(f, p + "attn_q_norm.weight", {whole ? c.q_dim() : c.head_dim}, &a.q_norm);
        need(f, p + "attn_k_norm.weight", {whole ? c.kv_dim() : c.head_dim}, &a.k_norm);
    }
    if (spec.sinks) need(f, p + "attn_sinks.weight", {c.n_head}, &a.sinks);
    a.window = spec.window.empty() ? 0 : spec.window[size_t(il)];
    a.chunk = spec.chunk.empty() ? 0 : spec.chunk[size_t(il)];
    // A layer without RoPE has no after-RoPE norm either (Llama 4).
    a.rope = spec.no_rope.empty() || !spec.no_rope[size_t(il)];
    if (!a.rope) {
        a.temperature = spec.temperature;
        if (a.qk_norm == QkNorm::PlainAfterRope) a.qk_norm = QkNorm::None;
    }
    a.q_gate = spec.q_gate;
    if (spec.q_gate && c.head_dim != c.head_dim_v) {
        throw std::runtime_error(f.path() + ": a gated attention needs key_length == value_length");
    }
}

template <class Base>
void DecoderWeights<Base>::declare_deltanet(const GgufFile& f, const DecoderSpec& spec, int il) {
    const DeltaNetShape& sh = spec.deltanet;
    const int64_t E = config_.n_embd, NV = sh.n_v_heads;
    const std::string p = "blk." + std::to_string(il) + ".";
    DeltaNetLayer& d = deltanet_[size_t(il)];
    need(f, p + "attn_norm.weight", {E}, &d.norm);
    need(f, p + "attn_qkv.weight", {E, sh.conv_channels()}, &d.wqkv);
    need(f, p + "attn_gate.weight", {E, sh.v_dim()}, &d.wz);
    if (sh.fused_ba) {
        need(f, p + "ssm_ba.weight", {E, 2 * NV}, &d.wba);
    } else {
        need(f, p + "ssm_beta.weight", {E, NV}, &d.wbeta);
        need(f, p + "ssm_alpha.weight", {E, NV}, &d.walpha);
    }
    need_f32(f, p + "ssm_conv1d.weight", {sh.conv_kernel, sh.conv_channels()}, &d.conv);
    need(f, p + "ssm_dt.bias", {NV}, &d.dt_bias);
    need(f, p + "ssm_a", {NV}, &d.a);
    need(f, p + "ssm_norm.weight", {sh.head_v}, &d.out_norm);
    need(f, p + "ssm_out.weight", {sh.v_dim(), E}, &d.wout);
    deltanet_shape_ = sh;
    deltanet_slot_[size_t(il)] = n_deltanet_++;
}

template <class Base>
void DecoderWeights<Base>::declare_mla(const GgufFile& f, const std::string& p, MlaLayer* l) {
    const MlaShape& s = mla_shape_;
    const int64_t E = config_.n_embd, H = s.n_head;
    if (s.q_lora > 0) {
        need(f, p + "attn_q_a.weight", {E, s.q_lora}, &l->wq_a);
        need(f, p + "attn_q_a_norm.weight", {s.q_lora}, &l->q_a_norm);
        need(f, p + "attn_q_b.weight", {s.q_lora, H * s.q_head()}, &l->wq_b);
    } else {
        need(f, p + "attn_q.weight", {E, H * s.q_head()}, &l->wq);
    }
    need(f, p + "attn_kv_a_mqa.weight", {E, s.row()}, &l->wkv_a);
    need(f, p + "attn_kv_a_norm.weight", {s.kv_lora}, &l->kv_a_norm);
    need(f, p + "attn_k_b.weight", {s.nope, s.kv_lora, H}, &l->wk_b);
    need(f, p + "attn_v_b.weight", {s.kv_lora, s.v, H}, &l->wv_b);
    l->wk_b.rows *= H;  // the heads' matrices one after another (mla_attention.h)
    l->wv_b.rows *= H;
    need(f, p + "attn_output.weight", {H * s.v, E}, &l->wo);
}

template <class Base>
void DecoderWeights<Base>::declare_indexer(const GgufFile& f, const std::string& p, int il) {
    const IndexerShape& s = indexer_shape_;
    const int64_t E = config_.n_embd, H = s.n_head, D = s.head_dim;
    IndexerLayer& l = indexer_[size_t(il)];
    if (mla_shape_.q_lora <= 0) throw std::runtime_error(f.path() + ": the indexer needs q compression");
    need(f, p + "indexer.attn_q_b.weight", {mla_shape_.q_lora, H * D}, &l.wq_b);
    need(f, p + "indexer.attn_k.weight", {E, D}, &l.wk);
    need(f, p + "indexer.proj.weight", {E, H}, &l.proj);
    need(f, p + "indexer.k_norm.weight", {D}, &l.k_norm);
    need(f, p + "indexer.k_norm.bias", {D}, &l.k_norm_bias);
    indexer_slot_[size_t(il)] = n_indexer_++;
}

template <class Base>
void DecoderWeights<Base>::declare_ffn(const GgufFile& f, const DecoderSpec& spec, int il) {
    const ModelConfig& c = config_;
    const int64_t E = c.n_embd, X = c.n_expert;
    const std::string p = "blk." + std::to_string(il) + ".";
    FfnLayer& m = ffn_[size_t(il)];
    need(f, p + spec.ffn_norm + ".weight", {E}, &m.norm);
    if (il < spec.n_dense_lead || (spec.moe_step > 0 && (il + 1) % spec.moe_step != 0)) {
        dense(f, p, "", spec.n_ff_dense, &m.dense);
        return;
    }
    need(f, p + "ffn_gate_inp.weight", {E, X}, &m.router);
    if (spec.router_bias) need(f, p + "ffn_gate_inp.bias", {X}, &m.router_bias);
    if (spec.selection_bias) need(f, p + "exp_probs_b.bias", {X}, &m.selection_bias);
    m.routing = spec.routing;
    need_experts(f, il, c.n_expert, E, spec.n_ff_exp);
    expert_layers_[size_t(il)].act = spec.activation;
    expert_layers_[size_t(il)].weight_input = spec.weight_input;
    if (spec.expert_biases) {
        need_f32(f, p + "ffn_gate_exps.bias", {spec.n_ff_exp, X}, &m.gate_bias);
        need_f32(f, p + "ffn_up_exps.bias", {spec.n_ff_exp, X}, &m.up_bias);
        need_f32(f, p + "ffn_down_exps.bias", {E, X}, &m.down_bias);
    }
    if (spec.n_ff_shared > 0) dense(f, p, "_shexp", spec.n_ff_shared, &m.shared);
    if (spec.shared_gate) need(f, p + "ffn_gate_inp_shexp.weight", {E}, &m.shared_gate);
}

template <class Base>
void DecoderWeights<Base>::dense(const GgufFile& f, const std::string& p, const char* suffix, int64_t n_ff,
                                 DenseFfn* out) {
    const int64_t E = config_.n_embd;
    need(f, p + "ffn_gate" + suffix + ".weight", {E, n_ff}, &out->gate);
    need(f, p + "ffn_up" + suffix + ".weight", {E, n_ff}, &out->up);
    need(f, p + "ffn_down" + suffix + ".weight", {n_ff, E}, &out->down);
}

template <class Base>
void DecoderWeights<Base>::need_f32(const GgufFile& f, const std::string& name, std::vector<int64_t> shape,
                                    Tensor* out) {
    need(f, name, std::move(shape), out);
    if (out->type != GgmlType::F32) {
        throw std::runtime_error(f.path() + ": tensor " + name + " has type " + type_name(out->type) +
                                 ", expected F32");
    }
}

// The two forward passes' bases.
template class DecoderWeights<LayerMajorModel>;
template class DecoderWeights<Model>;

}  // namespace ms
