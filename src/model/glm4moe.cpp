// GLM-4.5 / 4.6 (architecture `glm4moe`). q/k/v biases, q and k RMS-normed
// per head where the file has the norms (GLM-4.5-Air has none), NeoX RoPE on the first rope.dimension_count dims of each head;
// post_attention_norm is the pre-FFN norm. The first
// leading_dense_block_count layers have a dense FFN; the others route by
// sigmoid scores plus exp_probs_b (bias for choosing only), weights the
// unbiased scores renormalized and scaled, SwiGLU experts plus a shared
// expert. The trailing NextN (multi-token prediction) block is checked, and
// read and run only for --draft mtp (Model::enable_nextn, model/nextn.h).
#include "gguf/gguf.h"
#include "model/decoder.h"

namespace ms {

DecoderSpec glm4moe_spec(const GgufFile& file, const ModelConfig& c) {
    require_sigmoid_gating(file, c);
    DecoderSpec s;
    s.qkv_bias = true;
    s.qk_norm = file.tensor("blk.0.attn_q_norm.weight") ? QkNorm::PerHead : QkNorm::None;
    s.rope = config_rope(c, true);
    s.ffn_norm = "post_attention_norm";
    s.n_dense_lead = c.n_dense_lead;
    s.n_ff_dense = c.n_ff;
    s.n_ff_exp = c.n_ff_exp;
    s.routing = {Gating::Sigmoid, c.expert_weights_norm, c.expert_weights_scale};
    s.selection_bias = true;
    s.n_ff_shared = c.n_ff_shexp > 0 ? c.n_ff_shexp : c.n_ff_exp * c.n_expert_shared;
    return s;
}

}  // namespace ms
