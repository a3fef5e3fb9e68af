// gpt-oss (architecture `gpt-oss`: gpt-oss-20b, gpt-oss-120b). Biases on q,
// k, v and the output projection; a sink logit per head; even layers attend
// within a sliding window, odd layers to the whole context; NeoX RoPE with
// YaRN; post_attention_norm is the pre-FFN norm. The router has a bias and
// takes the top k raw logits, weighted by a softmax over those k; experts
// have biases and the clamped activation g * sigmoid(1.702 g) * (u + 1).
#include "model/decoder.h"

namespace ms {

DecoderSpec gpt_oss_spec(const GgufFile&, const ModelConfig& c) {
    DecoderSpec s;
    s.qkv_bias = true;
    s.out_bias = true;
    s.sinks = true;
    s.rope = config_rope(c, true);
    for (int il = 0; il < c.n_layer; il++) s.window.push_back(il % 2 == 0 ? c.sliding_window : 0);
    s.ffn_norm = "post_attention_norm";
    s.n_ff_exp = c.n_ff_exp;
    s.routing = {Gating::SoftmaxChosen, false};
    s.router_bias = true;
    s.activation = GatedActivation::SwiGluOai;
    s.expert_biases = true;
    return s;
}

}  // namespace ms
