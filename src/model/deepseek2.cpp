// DeepSeek V2 / V3 (architecture `deepseek2`). Multi-head latent attention
// in the split attn_k_b / attn_v_b form, q straight from attn_q (V2-Lite) or
// compressed (attn_q_a -> norm -> attn_q_b); normal (adjacent-pair) RoPE on
// each head's last qk_rope dims and on the shared k_pe, YaRN with DeepSeek's
// log multiplier scaling the attention scores. The first
// leading_dense_block_count layers have a dense FFN; the others route by
// softmax (V2) or by sigmoid plus exp_probs_b within the best expert groups
// (V3), plus shared experts.
#include <cmath>
#include <stdexcept>

#include "gguf/gguf.h"
#include "model/decoder.h"

namespace ms {

DecoderSpec deepseek2_spec(const GgufFile& file, const ModelConfig& c) {
    const std::string p = c.arch + ".";
    const std::string& path = file.path();
    MlaShape m;
    m.n_head = c.n_head;
    m.q_lora = int(file.get_int(p + "attention.q_lora_rank", 0));
    m.kv_lora = int(file.require_int(p + "attention.kv_lora_rank"));
    m.rope = c.n_rot;
    m.nope = int(file.get_int(p + "attention.key_length_mla", c.head_dim)) - m.rope;
    m.v = int(file.get_int(p + "attention.value_length_mla", c.head_dim_v));
    // The split form's cache row is what key_length / value_length describe.
    if (m.kv_lora <= 0 || m.nope <= 0 || m.v <= 0 || m.q_lora < 0 || c.n_head_kv != 1 ||
        c.head_dim != m.kv_lora + m.rope || c.head_dim_v != m.kv_lora) {
        throw std::runtime_error(path + ": " + c.arch + " needs the split MLA form (attn_k_b / attn_v_b): "
                                 "head_count_kv 1, key_length = kv_lora_rank + rope.dimension_count, "
                                 "value_length = kv_lora_rank");
    }

    DecoderSpec s;
    s.rope = config_rope(c, false);
    // YaRN's magnitude correction goes on the scores (mscale^2), not on
    // cos/sin, when the log multiplier is given (as the reference does).
    const float log_mul = float(file.get_float(p + "rope.scaling.yarn_log_multiplier", 0.0));
    float mscale = 1.0f;
    if (s.rope.ext_factor != 0.0f) {
        const float ln_factor = std::log(1.0f / s.rope.freq_scale);
        if (log_mul != 0.0f) {
            s.rope.attn_factor = 1.0f / (1.0f + 0.1f * ln_factor);
        } else {
            mscale = 1.0f + 0.1f * ln_factor;
        }
        mscale *= 1.0f + log_mul * ln_factor;
    }
    m.scale = mscale * mscale / std::sqrt(float(m.nope + m.rope));
    s.mla = m;

    s.n_dense_lead = c.n_dense_lead;
    s.n_ff_dense = c.n_ff;
    s.n_ff_exp = c.n_ff_exp;
    const bool sigmoid = c.expert_gating == 2;
    if (c.expert_gating != 0 && c.expert_gating != 1 && !sigmoid) {
        throw std::runtime_error(path + ": " + p + "expert_gating_func " + std::to_string(c.expert_gating) +
                                 " is not supported (1: softmax, 2: sigmoid)");
    }
    s.routing = {sigmoid ? Gating::Sigmoid : Gating::Softmax, c.expert_weights_norm, c.expert_weights_scale};
    s.routing.n_group = int(file.get_int(p + "expert_group_count", 0));
    s.routing.n_group_used = int(file.get_int(p + "expert_group_used_count", 0));
    const Routing& r = s.routing;
    if (r.n_group > 1 && (r.n_group > kMaxExpertGroups || c.n_expert % r.n_group != 0 || r.n_group_used < 1 ||
                          r.n_group_used > r.n_group ||
                          int64_t(r.n_group_used) * (c.n_expert / r.n_group) < c.n_expert_used)) {
        throw std::runtime_error(path + ": " + c.arch + " expert groups (" + std::to_string(r.n_group) + ", " +
                                 std::to_string(r.n_group_used) + " used) do not fit " +
                                 std::to_string(c.n_expert) + " experts, " + std::to_string(c.n_expert_used) +
                                 " used (at most " + std::to_string(kMaxExpertGroups) + " groups)");
    }
    s.selection_bias = sigmoid;
    s.n_ff_shared = c.n_ff_shexp > 0 ? c.n_ff_shexp : c.n_ff_exp * c.n_expert_shared;
    return s;
}

}  // namespace ms
