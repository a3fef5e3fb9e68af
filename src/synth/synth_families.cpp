#include "synth/synth_families.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "gguf/gguf.h"

namespace ms {

namespace {

constexpr int kConvKernel = 4;  // Qwen3.5's and Qwen3-Next's short convolution
constexpr int kHyperStreams = 4;  // DeepSeek V4's residual streams (hc_mult)

bool is_llama(const SynthSpec& s) { return s.arch == "llama"; }
bool is_gpt_oss(const SynthSpec& s) { return s.arch == "gpt-oss"; }
bool is_deepseek2(const SynthSpec& s) { return s.arch == "deepseek2"; }
bool is_glm_dsa(const SynthSpec& s) { return s.arch == "glm-dsa"; }
bool is_mla(const SynthSpec& s) { return is_deepseek2(s) || is_glm_dsa(s); }
bool is_glm4moe(const SynthSpec& s) { return s.arch == "glm4moe"; }
bool is_qwen35moe(const SynthSpec& s) { return s.arch == "qwen35moe"; }
bool is_llama4(const SynthSpec& s) { return s.arch == "llama4"; }
bool is_minimax_m2(const SynthSpec& s) { return s.arch == "minimax-m2"; }
bool is_deepseek4(const SynthSpec& s) { return s.arch == "deepseek4"; }

// DeepSeek V4 Flash's attention per layer: the first two keep only their
// window; then ratio-4 blocks with an indexer and ratio-128 blocks alternate.
int deepseek4_ratio(int il) { return il < 2 ? 0 : il % 2 == 0 ? 4 : 128; }
bool is_gemma4(const SynthSpec& s) { return s.arch == "gemma4"; }

bool is_deltanet_layer(const SynthSpec& s, int il) {
    return is_qwen35moe(s) && (il + 1) % s.full_attention_interval != 0;
}

// Qwen3.5's gated full attention: attn_q emits [q | gate] per head, q/k
// RMS-normed per head.
void gated_attention(const SynthSpec& s, const std::string& b, int l, std::vector<SynthTensor>& out) {
    const int64_t E = s.n_embd, Q = int64_t(s.n_head) * s.head_dim, KV = int64_t(s.n_head_kv) * s.head_dim;
    const double in = 1 / std::sqrt(double(E));
    out.push_back({b + "attn_q.weight", {E, 2 * Q}, SynthFill::Random, in, l});
    out.push_back({b + "attn_k.weight", {E, KV}, SynthFill::Random, in, l});
    out.push_back({b + "attn_v.weight", {E, KV}, SynthFill::Random, in, l});
    out.push_back({b + "attn_output.weight", {Q, E}, SynthFill::Random, 1 / std::sqrt(double(Q)), l});
    out.push_back({b + "attn_q_norm.weight", {s.head_dim}, SynthFill::Ones, 0, l});
    out.push_back({b + "attn_k_norm.weight", {s.head_dim}, SynthFill::Ones, 0, l});
}

// A Gated DeltaNet layer as model/deltanet.h reads Qwen3.5's: ssm_a = 0 and
// zero dt biases leave the state undecayed, which the delta rule keeps
// bounded (keys are L2-normed).
void deltanet(const SynthSpec& s, const std::string& b, int l, std::vector<SynthTensor>& out) {
    const int64_t E = s.n_embd, NV = s.ssm_v_heads, qk = int64_t(s.ssm_k_heads) * s.ssm_head_dim,
                  v = NV * s.ssm_head_dim, conv = 2 * qk + v;
    const double in = 1 / std::sqrt(double(E));
    out.push_back({b + "attn_qkv.weight", {E, conv}, SynthFill::Random, in, l});
    out.push_back({b + "attn_gate.weight", {E, v}, SynthFill::Random, in, l});
    out.push_back({b + "ssm_conv1d.weight", {kConvKernel, conv}, SynthFill::RandomF32, 1 / std::sqrt(double(kConvKernel)), l});
    out.push_back({b + "ssm_dt.bias", {NV}, SynthFill::Zeros, 0, l});
    out.push_back({b + "ssm_a", {NV}, SynthFill::Zeros, 0, l});
    out.push_back({b + "ssm_beta.weight", {E, NV}, SynthFill::Random, in, l});
    out.push_back({b + "ssm_alpha.weight", {E, NV}, SynthFill::Random, in, l});
    out.push_back({b + "ssm_norm.weight", {s.ssm_head_dim}, SynthFill::Ones, 0, l});
    out.push_back({b + "ssm_out.weight", {v, E}, SynthFill::Random, 1 / std::sqrt(double(v)), l});
}

// The q/k/v/output block of the plain-attention families.
void attention(const SynthSpec& s, const std::string& b, int l, std::vector<SynthTensor>& out) {
    const int64_t E = s.n_embd, Q = int64_t(s.n_head) * s.head_dim, KV = int64_t(s.n_head_kv) * s.head_dim;
    const bool qkv_bias = is_gpt_oss(s) || is_glm4moe(s);
    const double in = 1 / std::sqrt(double(E));
    out.push_back({b + "attn_q.weight", {E, Q}, SynthFill::Random, in, l});
    if (qkv_bias) out.push_back({b + "attn_q.bias", {Q}, SynthFill::Zeros, 0, l});
    out.push_back({b + "attn_k.weight", {E, KV}, SynthFill::Random, in, l});
    if (qkv_bias) out.push_back({b + "attn_k.bias", {KV}, SynthFill::Zeros, 0, l});
    out.push_back({b + "attn_v.weight", {E, KV}, SynthFill::Random, in, l});
    if (qkv_bias) out.push_back({b + "attn_v.bias", {KV}, SynthFill::Zeros, 0, l});
    out.push_back({b + "attn_output.weight", {Q, E}, SynthFill::Random, 1 / std::sqrt(double(Q)), l});
    if (is_minimax_m2(s)) {  // q and k normed over the whole projection
        out.push_back({b + "attn_q_norm.weight", {Q}, SynthFill::Ones, 0, l});
        out.push_back({b + "attn_k_norm.weight", {KV}, SynthFill::Ones, 0, l});
    }
    if (is_gpt_oss(s)) {
        out.push_back({b + "attn_output.bias", {E}, SynthFill::Zeros, 0, l});
        out.push_back({b + "attn_sinks.weight", {s.n_head}, SynthFill::Zeros, 0, l});
    }
}

// Multi-head latent attention in the split form model/mla_attention.h reads.
void mla(const SynthSpec& s, const std::string& b, int l, std::vector<SynthTensor>& out) {
    const int64_t E = s.n_embd, H = s.n_head, nope = s.head_dim, rope = s.rope_dim, v = s.v_head_dim;
    const double in = 1 / std::sqrt(double(E));
    if (s.q_lora > 0) {
        out.push_back({b + "attn_q_a.weight", {E, s.q_lora}, SynthFill::Random, in, l});
        out.push_back({b + "attn_q_a_norm.weight", {s.q_lora}, SynthFill::Ones, 0, l});
        out.push_back({b + "attn_q_b.weight", {s.q_lora, H * (nope + rope)}, SynthFill::Random,
                       1 / std::sqrt(double(s.q_lora)), l});
    } else {
        out.push_back({b + "attn_q.weight", {E, H * (nope + rope)}, SynthFill::Random, in, l});
    }
    out.push_back({b + "attn_kv_a_mqa.weight", {E, s.kv_lora + rope}, SynthFill::Random, in, l});
    out.push_back({b + "attn_kv_a_norm.weight", {s.kv_lora}, SynthFill::Ones, 0, l});
    out.push_back({b + "attn_k_b.weight", {nope, s.kv_lora, H}, SynthFill::Random, 1 / std::sqrt(double(nope)), l});
    out.push_back({b + "attn_v_b.weight", {s.kv_lora, v, H}, SynthFill::Random, 1 / std::sqrt(double(s.kv_lora)), l});
    out.push_back({b + "attn_output.weight", {H * v, E}, SynthFill::Random, 1 / std::sqrt(double(H * v)), l});
    if (is_glm_dsa(s)) {
        // The lightning indexer: its q from the compressed q, LayerNorm'd keys,
        // per-head weights.
        const int64_t ID = s.indexer_dim, IH = s.indexer_heads;
        out.push_back({b + "indexer.k_norm.weight", {ID}, SynthFill::Ones, 0, l});
        out.push_back({b + "indexer.k_norm.bias", {ID}, SynthFill::Zeros, 0, l});
        out.push_back({b + "indexer.proj.weight", {E, IH}, SynthFill::Random, in, l});
        out.push_back({b + "indexer.attn_k.weight", {E, ID}, SynthFill::Random, in, l});
        out.push_back({b + "indexer.attn_q_b.weight", {s.q_lora, IH * ID}, SynthFill::Random,
                       1 / std::sqrt(double(s.q_lora)), l});
    }
}

// One hyper-connection mixer (model/deepseek4.cpp): zero bases and unit
// scales leave pre 1/2, post 1 and a doubly stochastic mix, varied by fn.
void hyper_connection(const SynthSpec& s, const std::string& prefix, int64_t n_mix, int l,
                      std::vector<SynthTensor>& out) {
    const int64_t wide = int64_t(kHyperStreams) * s.n_embd;
    out.push_back({prefix + "fn.weight", {wide, n_mix}, SynthFill::Random, 1 / std::sqrt(double(wide)), l});
    out.push_back({prefix + "base.weight", {n_mix}, SynthFill::Zeros, 0, l});
    out.push_back({prefix + "scale.weight", {n_mix == kHyperStreams ? 1 : 3}, SynthFill::Ones, 0, l});
}

// A pooling compressor: per token a value and a score `in` wide (two halves
// for the overlapping ratio-4 blocks), a position bias per slot of the block.
void compressor(const SynthSpec& s, const std::string& prefix, int64_t width, int ratio, int l,
                std::vector<SynthTensor>& out) {
    const int64_t E = s.n_embd, in = ratio == 4 ? 2 * width : width;
    out.push_back({prefix + "kv.weight", {E, in}, SynthFill::Random, 1 / std::sqrt(double(E)), l});
    out.push_back({prefix + "gate.weight", {E, in}, SynthFill::Random, 1 / std::sqrt(double(E)), l});
    out.push_back({prefix + "ape.weight", {in, ratio}, SynthFill::Random, 0.5, l});
    out.push_back({prefix + "norm.weight", {width}, SynthFill::Ones, 0, l});
}

// DeepSeek V4's attention: q through a low-rank bottleneck, one shared
// key/value vector per token, sinks, grouped low-rank output, and the
// compressor (plus indexer on ratio-4 layers) of compressed layers.
void deepseek4_attention(const SynthSpec& s, const std::string& b, int l, std::vector<SynthTensor>& out) {
    const int64_t E = s.n_embd, H = s.n_head, D = s.head_dim, QL = s.q_lora, G = s.out_groups, OL = s.out_lora;
    const double in = 1 / std::sqrt(double(E));
    out.push_back({b + "attn_q_a.weight", {E, QL}, SynthFill::Random, in, l});
    out.push_back({b + "attn_q_a_norm.weight", {QL}, SynthFill::Ones, 0, l});
    out.push_back({b + "attn_q_b.weight", {QL, H * D}, SynthFill::Random, 1 / std::sqrt(double(QL)), l});
    out.push_back({b + "attn_kv.weight", {E, D}, SynthFill::Random, in, l});
    out.push_back({b + "attn_kv_a_norm.weight", {D}, SynthFill::Ones, 0, l});
    out.push_back({b + "attn_sinks.weight", {H}, SynthFill::Zeros, 0, l});
    out.push_back({b + "attn_output_a.weight", {H * D / G, G * OL}, SynthFill::Random,
                   1 / std::sqrt(double(H * D / G)), l});
    out.push_back({b + "attn_output_b.weight", {G * OL, E}, SynthFill::Random, 1 / std::sqrt(double(G * OL)), l});
    const int ratio = deepseek4_ratio(l);
    if (ratio > 0) compressor(s, b + "attn_compressor_", D, ratio, l, out);
    if (ratio == 4) {
        const int64_t ID = s.indexer_dim, IH = s.indexer_heads;
        compressor(s, b + "indexer_compressor_", ID, ratio, l, out);
        out.push_back({b + "indexer.attn_q_b.weight", {QL, IH * ID}, SynthFill::Random, 1 / std::sqrt(double(QL)), l});
        out.push_back({b + "indexer.proj.weight", {E, IH}, SynthFill::Random, in, l});
    }
    hyper_connection(s, b + "hc_attn_", 2 * kHyperStreams + kHyperStreams * kHyperStreams, l, out);
}

void ffn(const SynthSpec& s, const std::string& b, const std::string& suffix, int64_t width, int l,
         std::vector<SynthTensor>& out) {
    const int64_t E = s.n_embd;
    out.push_back({b + "ffn_gate" + suffix + ".weight", {E, width}, SynthFill::Random, 1 / std::sqrt(double(E)), l});
    out.push_back({b + "ffn_up" + suffix + ".weight", {E, width}, SynthFill::Random, 1 / std::sqrt(double(E)), l});
    out.push_back({b + "ffn_down" + suffix + ".weight", {width, E}, SynthFill::Random, 1 / std::sqrt(double(width)), l});
}

void experts(const SynthSpec& s, const std::string& b, int l, std::vector<SynthTensor>& out) {
    const int64_t E = s.n_embd, F = s.expert_ffn, X = s.n_expert;
    out.push_back({b + "ffn_gate_inp.weight", {E, X}, SynthFill::Router, 0, l});
    if (is_gpt_oss(s)) out.push_back({b + "ffn_gate_inp.bias", {X}, SynthFill::Zeros, 0, l});
    // DeepSeek V4's hash-routed layers take no selection bias.
    if (is_mla(s) || is_glm4moe(s) || is_minimax_m2(s) || (is_deepseek4(s) && l >= s.hash_layers))
        out.push_back({b + "exp_probs_b.bias", {X}, SynthFill::Zeros, 0, l});
    const double in = 1 / std::sqrt(double(E)), mid = 1 / std::sqrt(double(F));
    out.push_back({b + "ffn_gate_exps.weight", {E, F, X}, SynthFill::Random, in, l});
    if (is_gpt_oss(s)) out.push_back({b + "ffn_gate_exps.bias", {F, X}, SynthFill::Zeros, 0, l});
    out.push_back({b + "ffn_up_exps.weight", {E, F, X}, SynthFill::Random, in, l});
    if (is_gpt_oss(s)) out.push_back({b + "ffn_up_exps.bias", {F, X}, SynthFill::Zeros, 0, l});
    out.push_back({b + "ffn_down_exps.weight", {F, E, X}, SynthFill::Random, mid, l});
    if (is_gpt_oss(s)) out.push_back({b + "ffn_down_exps.bias", {E, X}, SynthFill::Zeros, 0, l});
    if (is_qwen35moe(s)) out.push_back({b + "ffn_gate_inp_shexp.weight", {E}, SynthFill::RandomF32, 1 / std::sqrt(double(E)), l});
    if (s.n_shared > 0) ffn(s, b, "_shexp", int64_t(s.n_shared) * F, l, out);
}

// Gemma 4: which layers attend to everything, and which read an earlier
// layer's KV cache instead of projecting their own.
bool gemma4_full(const SynthSpec& s, int il) { return (il + 1) % s.full_attention_interval == 0; }
bool gemma4_own_kv(const SynthSpec& s, int il) { return il < s.n_layer - s.shared_kv_layers; }

// Gemma 4 as model/gemma4.cpp reads it (golden README §gemma4, §gemma4-ple):
// tied output, rope_freqs rotating a quarter of the full layers' dims (the
// rest get factor 1e30: unrotated), ffn_gate_inp.scale sqrt(n_embd) so the
// router sees the plain RMS-normed residual.
std::vector<SynthTensor> gemma4_tensors(const SynthSpec& s, int64_t n_vocab) {
    const int64_t E = s.n_embd, F = s.expert_ffn, X = s.n_expert, FD = s.dense_ffn, P = s.per_layer_embd,
                  LP = int64_t(s.n_layer) * P;
    const double in = 1 / std::sqrt(double(E));
    std::vector<SynthTensor> out;
    out.push_back({"token_embd.weight", {E, n_vocab}, SynthFill::Random, 1.0, -1});
    if (P > 0) {
        out.push_back({"per_layer_token_embd.weight", {LP, n_vocab}, SynthFill::Random, 1.0, -1});
        out.push_back({"per_layer_model_proj.weight", {E, LP}, SynthFill::Random, in, -1});
        out.push_back({"per_layer_proj_norm.weight", {P}, SynthFill::Ones, 0, -1});
    }
    std::vector<float> freqs(size_t(s.head_dim_full / 2), 1e30f);
    std::fill(freqs.begin(), freqs.begin() + s.head_dim_full / 8, 1.0f);
    out.push_back({"rope_freqs.weight", {s.head_dim_full / 2}, SynthFill::Values, 0, -1, freqs});
    for (int l = 0; l < s.n_layer; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        const bool full = gemma4_full(s, l);
        const int64_t hd = full ? s.head_dim_full : s.head_dim, Q = int64_t(s.n_head) * hd,
                      KV = int64_t(full ? s.n_head_kv_full : s.n_head_kv) * hd;
        out.push_back({b + "attn_norm.weight", {E}, SynthFill::Ones, 0, l});
        out.push_back({b + "attn_q.weight", {E, Q}, SynthFill::Random, in, l});
        if (gemma4_own_kv(s, l)) {
            out.push_back({b + "attn_k.weight", {E, KV}, SynthFill::Random, in, l});
            if (!full || !s.v_from_k) out.push_back({b + "attn_v.weight", {E, KV}, SynthFill::Random, in, l});
            out.push_back({b + "attn_k_norm.weight", {hd}, SynthFill::Ones, 0, l});
        }
        out.push_back({b + "attn_q_norm.weight", {hd}, SynthFill::Ones, 0, l});
        out.push_back({b + "attn_output.weight", {Q, E}, SynthFill::Random, 1 / std::sqrt(double(Q)), l});
        out.push_back({b + "post_attention_norm.weight", {E}, SynthFill::Ones, 0, l});
        out.push_back({b + "ffn_norm.weight", {E}, SynthFill::Ones, 0, l});
        out.push_back({b + "ffn_gate.weight", {E, FD}, SynthFill::Random, in, l});
        out.push_back({b + "ffn_up.weight", {E, FD}, SynthFill::Random, in, l});
        out.push_back({b + "ffn_down.weight", {FD, E}, SynthFill::Random, 1 / std::sqrt(double(FD)), l});
        out.push_back({b + "post_ffw_norm.weight", {E}, SynthFill::Ones, 0, l});
        if (s.routed) {
            out.push_back({b + "ffn_gate_inp.weight", {E, X}, SynthFill::Router, 0, l});
            out.push_back({b + "ffn_gate_inp.scale", {E}, SynthFill::Values, 0, l,
                           std::vector<float>(size_t(E), float(std::sqrt(double(E))))});
            out.push_back({b + "ffn_gate_up_exps.weight", {E, 2 * F, X}, SynthFill::Random, in, l});
            out.push_back({b + "ffn_down_exps.weight", {F, E, X}, SynthFill::Random, 1 / std::sqrt(double(F)), l});
            out.push_back({b + "ffn_down_exps.scale", {X}, SynthFill::Ones, 0, l});
            for (const char* n : {"pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"})
                out.push_back({b + n + ".weight", {E}, SynthFill::Ones, 0, l});
        }
        if (P > 0) {
            out.push_back({b + "inp_gate.weight", {E, P}, SynthFill::Random, in, l});
            out.push_back({b + "proj.weight", {P, E}, SynthFill::Random, 1 / std::sqrt(double(P)), l});
            out.push_back({b + "post_norm.weight", {E}, SynthFill::Ones, 0, l});
        }
        out.push_back({b + "layer_output_scale.weight", {1}, SynthFill::Ones, 0, l});
    }
    out.push_back({"output_norm.weight", {E}, SynthFill::Ones, 0, -1});
    return out;
}

void write_gemma4_metadata(GgufWriter& w, const SynthSpec& s) {
    const std::string a = s.arch + ".";
    w.set_u32(a + "block_count", uint32_t(s.n_layer));
    w.set_u32(a + "context_length", uint32_t(s.context));
    w.set_u32(a + "embedding_length", uint32_t(s.n_embd));
    w.set_u32(a + "feed_forward_length", uint32_t(s.dense_ffn));
    w.set_u32(a + "attention.head_count", uint32_t(s.n_head));
    std::vector<int32_t> kv;
    GgufValue pattern;  // true: sliding window, as a bool array like the published files
    pattern.type = GgufType::ARRAY;
    pattern.elem = GgufType::BOOL;
    for (int l = 0; l < s.n_layer; l++) {
        kv.push_back(gemma4_full(s, l) ? s.n_head_kv_full : s.n_head_kv);
        pattern.ai.push_back(gemma4_full(s, l) ? 0 : 1);
    }
    w.set_i32s(a + "attention.head_count_kv", kv);
    w.set_value(a + "attention.sliding_window_pattern", pattern);
    w.set_u32(a + "attention.sliding_window", uint32_t(s.sliding_window));
    w.set_u32(a + "attention.key_length", uint32_t(s.head_dim_full));
    w.set_u32(a + "attention.value_length", uint32_t(s.head_dim_full));
    w.set_u32(a + "attention.key_length_swa", uint32_t(s.head_dim));
    w.set_u32(a + "attention.value_length_swa", uint32_t(s.head_dim));
    w.set_u32(a + "rope.dimension_count", uint32_t(s.head_dim_full));
    w.set_u32(a + "rope.dimension_count_swa", uint32_t(s.head_dim));
    w.set_f32(a + "rope.freq_base", float(s.rope_base));
    w.set_f32(a + "rope.freq_base_swa", float(s.rope_base_swa));
    w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
    w.set_f32(a + "final_logit_softcapping", 30.0f);
    if (s.shared_kv_layers > 0) w.set_u32(a + "attention.shared_kv_layers", uint32_t(s.shared_kv_layers));
    if (s.per_layer_embd > 0) w.set_u32(a + "embedding_length_per_layer_input", uint32_t(s.per_layer_embd));
    if (s.routed) {
        w.set_u32(a + "expert_count", uint32_t(s.n_expert));
        w.set_u32(a + "expert_used_count", uint32_t(s.n_expert_used));
        w.set_u32(a + "expert_feed_forward_length", uint32_t(s.expert_ffn));
    }
}

}  // namespace

bool synth_family_known(const std::string& arch) {
    return arch == "llama" || arch == "gpt-oss" || arch == "deepseek2" || arch == "glm4moe" || arch == "qwen35moe" ||
           arch == "glm-dsa" || arch == "llama4" || arch == "minimax-m2" || arch == "deepseek4" ||
           arch == "gemma4";
}

void validate_family(const SynthSpec& s) {
    auto need = [&](bool ok, const std::string& what) {
        if (!ok) throw std::runtime_error(s.arch + " synth: " + what);
    };
    need(synth_family_known(s.arch), "unknown architecture");
    need(s.n_dense_lead >= 0 && s.n_dense_lead < s.n_layer, "leading dense layers must be 0..layers-1");
    need(s.n_dense_lead == 0 || (s.dense_ffn > 0 && s.dense_ffn % 32 == 0),
         "dense layers need a dense FFN width that is a multiple of 32");
    need(s.n_shared >= 0 && s.n_shared <= 16, "shared experts must be 0..16");
    need(s.rope_dim >= 0 && s.rope_dim % 2 == 0, "rope dims must be even");
    if (is_glm_dsa(s)) {
        need(s.q_lora > 0 && s.indexer_heads > 0 && s.indexer_dim > 0 && s.indexer_dim % 32 == 0 &&
                 s.indexer_top_k > 0,
             "the indexer needs q compression, heads, a width that is a multiple of 32 and a top-k");
    }
    if (is_mla(s)) {
        need(s.kv_lora > 0 && s.kv_lora % 32 == 0 && s.rope_dim > 0 && s.v_head_dim > 0 && s.head_dim % 32 == 0 &&
                 s.v_head_dim % 32 == 0 && s.q_lora >= 0 && s.q_lora % 32 == 0,
             "MLA needs kv_lora, head_dim (no-rope part) and v_head_dim multiples of 32, rope dims > 0");
    } else {
        need(s.rope_dim <= s.head_dim, "rope dims exceed the head");
    }
    if (is_gpt_oss(s)) need(s.sliding_window > 0, "gpt-oss needs a sliding window");
    if (is_deepseek4(s)) {
        need(s.n_head_kv == 1 && s.q_lora > 0 && s.q_lora % 32 == 0 && s.head_dim % 32 == 0 && s.rope_dim > 0 &&
                 s.sliding_window > 0 && s.out_groups > 0 && s.n_head % s.out_groups == 0 && s.out_lora > 0 &&
                 s.out_lora % 32 == 0 && s.hash_layers >= 0 && s.hash_layers <= s.n_layer && s.n_shared == 1 &&
                 s.n_dense_lead == 0,
             "needs one key/value head, q compression, a window, output groups dividing the heads, an output "
             "rank, hash layers within the stack and one shared expert (multiples of 32)");
        need(s.n_layer < 3 || (s.indexer_heads > 0 && s.indexer_dim >= s.rope_dim && s.indexer_dim % 32 == 0 &&
                               s.indexer_top_k > 0),
             "the ratio-4 layers' indexer needs heads, a width of at least the rope dims and a top-k");
    }
    if (is_llama4(s)) {
        need(s.moe_step >= 1 && s.moe_step <= s.n_layer && s.n_shared == 1 && s.dense_ffn > 0 &&
                 s.dense_ffn % 32 == 0,
             "needs an interleave step of 1..layers, one shared expert and a dense FFN width (multiple of 32)");
    }
    if (is_gemma4(s)) {
        need(s.full_attention_interval >= 1 && s.sliding_window > 0 && s.head_dim_full >= 8 &&
                 s.head_dim_full % 8 == 0 && s.head_dim_full * s.n_head % 32 == 0 && s.n_head_kv_full >= 1 &&
                 s.n_head % s.n_head_kv_full == 0 && s.dense_ffn > 0 && s.dense_ffn % 32 == 0 &&
                 s.n_dense_lead == 0 && s.n_shared == 0,
             "needs a full-attention interval, a window, full-attention heads (head size a multiple of 8, "
             "dividing the heads) and an MLP width that is a multiple of 32");
        need(s.per_layer_embd >= 0 && s.per_layer_embd % 256 == 0,
             "per-layer embedding width must be a multiple of 256");
        // Shared-KV layers read the last earlier layer of their kind.
        const int first = s.n_layer - s.shared_kv_layers;
        need(s.shared_kv_layers >= 0 && first >= s.full_attention_interval,
             "shared-KV layers must leave a full and a sliding-window layer before them");
    }
    if (is_qwen35moe(s)) {
        need(s.full_attention_interval >= 1 && s.ssm_k_heads > 0 && s.ssm_v_heads % s.ssm_k_heads == 0 &&
                 s.ssm_head_dim > 0 && s.ssm_head_dim % 32 == 0 && s.n_shared == 1,
             "needs a full-attention interval, DeltaNet value heads a multiple of its key heads, a DeltaNet "
             "head width that is a multiple of 32, and one shared expert");
    }
}

bool family_layer_has_experts(const SynthSpec& s, int il) {
    if (is_llama4(s)) return (il + 1) % s.moe_step == 0;
    if (is_gemma4(s)) return s.routed;
    return il >= s.n_dense_lead;
}

std::vector<SynthTensor> family_tensors(const SynthSpec& s, int64_t n_vocab) {
    if (is_gemma4(s)) return gemma4_tensors(s, n_vocab);
    const int64_t E = s.n_embd;
    std::vector<SynthTensor> out;
    // Embedding rows go straight into the residual stream (unit scale); the
    // head is 2/sqrt(n_embd), for peaked but not one-hot logits.
    out.push_back({"token_embd.weight", {E, n_vocab}, SynthFill::Random, 1.0, -1});
    // gpt-oss and GLM name their pre-FFN norm post_attention_norm.
    const std::string ffn_norm =
        is_gpt_oss(s) || is_glm4moe(s) || is_qwen35moe(s) ? "post_attention_norm" : "ffn_norm";
    for (int l = 0; l < s.n_layer; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        out.push_back({b + "attn_norm.weight", {E}, SynthFill::Ones, 0, l});
        if (is_mla(s)) {
            mla(s, b, l, out);
        } else if (is_deepseek4(s)) {
            deepseek4_attention(s, b, l, out);
        } else if (is_deltanet_layer(s, l)) {
            deltanet(s, b, l, out);
        } else if (is_qwen35moe(s)) {
            gated_attention(s, b, l, out);
        } else {
            attention(s, b, l, out);
        }
        out.push_back({b + ffn_norm + ".weight", {E}, SynthFill::Ones, 0, l});
        if (family_layer_has_experts(s, l)) {
            experts(s, b, l, out);
            if (is_deepseek4(s) && l < s.hash_layers) {
                out.push_back({b + "ffn_gate_tid2eid.weight", {s.n_expert_used, n_vocab}, SynthFill::TokenExperts, 0, l});
            }
            if (is_deepseek4(s)) hyper_connection(s, b + "hc_ffn_", 2 * kHyperStreams + kHyperStreams * kHyperStreams, l, out);
        } else {
            ffn(s, b, "", s.dense_ffn, l, out);
        }
    }
    out.push_back({"output_norm.weight", {E}, SynthFill::Ones, 0, -1});
    out.push_back({"output.weight", {E, n_vocab}, SynthFill::Random, 2 / std::sqrt(double(E)), -1});
    // Llama 4's global RoPE frequency factors (ones: the plain frequencies).
    if (is_llama4(s)) out.push_back({"rope_freqs.weight", {s.head_dim / 2}, SynthFill::Ones, 0, -1});
    // DeepSeek V4 mixes its streams once more before the head.
    if (is_deepseek4(s)) hyper_connection(s, "output_hc_", kHyperStreams, -1, out);
    return out;
}

void write_family_metadata(GgufWriter& w, const SynthSpec& s) {
    if (is_gemma4(s)) return write_gemma4_metadata(w, s);
    const std::string a = s.arch + ".";
    w.set_u32(a + "block_count", uint32_t(s.n_layer));
    w.set_u32(a + "context_length", uint32_t(s.context));
    w.set_u32(a + "embedding_length", uint32_t(s.n_embd));
    w.set_u32(a + "attention.head_count", uint32_t(s.n_head));
    w.set_f32(a + "rope.freq_base", float(s.rope_base));
    w.set_f32(a + "attention.layer_norm_rms_epsilon",
              is_deepseek2(s) || is_qwen35moe(s) || is_minimax_m2(s) || is_deepseek4(s) ? 1e-6f : 1e-5f);
    w.set_u32(a + "expert_count", uint32_t(s.n_expert));
    w.set_u32(a + "expert_used_count", uint32_t(s.n_expert_used));
    if (is_llama(s)) {
        // Mixtral files state the expert width as the FFN width.
        w.set_u32(a + "feed_forward_length", uint32_t(s.expert_ffn));
    } else {
        w.set_u32(a + "expert_feed_forward_length", uint32_t(s.expert_ffn));
        w.set_u32(a + "feed_forward_length", uint32_t(s.dense_ffn > 0 ? s.dense_ffn : s.expert_ffn));
    }
    if (is_llama4(s)) w.set_u32(a + "interleave_moe_layer_step", uint32_t(s.moe_step));
    if (is_minimax_m2(s)) w.set_u32(a + "expert_gating_func", 2);
    if (is_mla(s)) {
        // The split MLA form's cache row: key = compressed + rope, value = compressed.
        w.set_u32(a + "attention.head_count_kv", 1);
        w.set_u32(a + "attention.key_length", uint32_t(s.kv_lora + s.rope_dim));
        w.set_u32(a + "attention.value_length", uint32_t(s.kv_lora));
        w.set_u32(a + "attention.key_length_mla", uint32_t(s.head_dim + s.rope_dim));
        w.set_u32(a + "attention.value_length_mla", uint32_t(s.v_head_dim));
        w.set_u32(a + "attention.q_lora_rank", uint32_t(s.q_lora));
        w.set_u32(a + "attention.kv_lora_rank", uint32_t(s.kv_lora));
        w.set_u32(a + "rope.dimension_count", uint32_t(s.rope_dim));
    } else {
        w.set_u32(a + "attention.head_count_kv", uint32_t(s.n_head_kv));
        w.set_u32(a + "attention.key_length", uint32_t(s.head_dim));
        w.set_u32(a + "attention.value_length", uint32_t(s.head_dim));
        w.set_u32(a + "rope.dimension_count", uint32_t(s.rope_dim > 0 ? s.rope_dim : s.head_dim));
    }
    if (s.n_dense_lead > 0) w.set_u32(a + "leading_dense_block_count", uint32_t(s.n_dense_lead));
    if (s.n_shared > 0) w.set_u32(a + "expert_shared_count", uint32_t(s.n_shared));
    if (is_mla(s) || is_glm4moe(s)) {
        // Sigmoid scores, chosen weights renormalized (and scaled by 2.5 in
        // DeepSeek V3 and GLM-5; GLM-4.5-Air uses 1).
        w.set_u32(a + "expert_gating_func", 2);
        w.set_bool(a + "expert_weights_norm", true);
        w.set_f32(a + "expert_weights_scale", is_mla(s) ? 2.5f : 1.0f);
    }
    if (is_glm_dsa(s)) {
        w.set_u32(a + "attention.indexer.head_count", uint32_t(s.indexer_heads));
        w.set_u32(a + "attention.indexer.key_length", uint32_t(s.indexer_dim));
        w.set_u32(a + "attention.indexer.top_k", uint32_t(s.indexer_top_k));
    }
    if (is_deepseek2(s)) {
        // V3 picks its experts within the best 4 of 8 groups, and uses YaRN
        // (factor 40 over 4096 positions, log multiplier 0.1).
        if (s.n_expert % 8 == 0 && s.n_expert_used <= s.n_expert / 2) {
            w.set_u32(a + "expert_group_count", 8);
            w.set_u32(a + "expert_group_used_count", 4);
        }
        w.set_string(a + "rope.scaling.type", "yarn");
        w.set_f32(a + "rope.scaling.factor", 40.0f);
        w.set_u32(a + "rope.scaling.original_context_length", 4096);
        w.set_f32(a + "rope.scaling.yarn_log_multiplier", 0.1f);
    }
    if (is_qwen35moe(s)) {
        // Qwen3.5's multi-section rope: for text every section carries the
        // position; the sections split the rotated pairs 11:11:10 (scaled).
        const int pairs = (s.rope_dim > 0 ? s.rope_dim : s.head_dim) / 2, t = pairs * 11 / 32, h = pairs * 11 / 32;
        w.set_i32s(a + "rope.dimension_sections", {t, h, pairs - t - h, 0});
        w.set_u32(a + "full_attention_interval", uint32_t(s.full_attention_interval));
        w.set_u32(a + "ssm.conv_kernel", kConvKernel);
        w.set_u32(a + "ssm.state_size", uint32_t(s.ssm_head_dim));
        w.set_u32(a + "ssm.group_count", uint32_t(s.ssm_k_heads));
        w.set_u32(a + "ssm.time_step_rank", uint32_t(s.ssm_v_heads));
        w.set_u32(a + "ssm.inner_size", uint32_t(s.ssm_v_heads * s.ssm_head_dim));
        w.set_u32(a + "expert_shared_feed_forward_length", uint32_t(s.expert_ffn));
    }
    if (is_deepseek4(s)) {
        // V4 Flash: sqrt-softplus scores, chosen weights renormalized and
        // scaled by 1.5, SwiGLU clamped at 10; compressed layers rope at
        // theta 160000 with YaRN (factor 16 over 65536 positions).
        std::vector<int32_t> ratios;
        for (int il = 0; il < s.n_layer; il++) ratios.push_back(deepseek4_ratio(il));
        w.set_i32s(a + "attention.compress_ratios", ratios);
        w.set_f32s(a + "swiglu_clamp_exp", std::vector<float>(size_t(s.n_layer), 10.0f));
        w.set_f32s(a + "swiglu_clamp_shexp", std::vector<float>(size_t(s.n_layer), 10.0f));
        w.set_u32(a + "hyper_connection.count", kHyperStreams);
        w.set_u32(a + "hyper_connection.sinkhorn_iterations", 20);
        w.set_f32(a + "hyper_connection.epsilon", 1e-6f);
        w.set_u32(a + "hash_layer_count", uint32_t(s.hash_layers));
        w.set_u32(a + "attention.q_lora_rank", uint32_t(s.q_lora));
        w.set_u32(a + "attention.output_group_count", uint32_t(s.out_groups));
        w.set_u32(a + "attention.output_lora_rank", uint32_t(s.out_lora));
        w.set_u32(a + "attention.sliding_window", uint32_t(s.sliding_window));
        w.set_u32(a + "attention.indexer.head_count", uint32_t(s.indexer_heads));
        w.set_u32(a + "attention.indexer.key_length", uint32_t(s.indexer_dim));
        w.set_u32(a + "attention.indexer.top_k", uint32_t(s.indexer_top_k));
        w.set_f32(a + "attention.compress_rope_freq_base", float(kDeepseek4CompressRopeBase));
        w.set_string(a + "rope.scaling.type", "yarn");
        w.set_f32(a + "rope.scaling.factor", 16.0f);
        w.set_u32(a + "rope.scaling.original_context_length", 65536);
        w.set_u32(a + "expert_gating_func", 4);
        w.set_bool(a + "expert_weights_norm", true);
        w.set_f32(a + "expert_weights_scale", 1.5f);
    }
    if (is_gpt_oss(s)) {
        w.set_u32(a + "attention.sliding_window", uint32_t(s.sliding_window));
        w.set_string(a + "rope.scaling.type", "yarn");
        w.set_f32(a + "rope.scaling.factor", 32.0f);
        w.set_u32(a + "rope.scaling.original_context_length", 4096);
    }
}

}  // namespace ms
