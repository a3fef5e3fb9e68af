// Qwen2-MoE (architecture `qwen2moe`: Qwen1.5-MoE, Qwen2-57B-A14B). q/k/v
// biases, NeoX RoPE; softmax router, the top k NOT renormalized; SwiGLU
// experts plus a shared expert whose output is scaled by
// sigmoid(ffn_gate_inp_shexp . x).
#include "model/decoder.h"

namespace ms {

DecoderSpec qwen2moe_spec(const GgufFile&, const ModelConfig& c) {
    DecoderSpec s;
    s.qkv_bias = true;
    s.rope = config_rope(c, true);
    s.n_ff_exp = c.n_ff_exp;
    s.routing = {Gating::Softmax, false};
    s.n_ff_shared = c.n_ff_shexp > 0 ? c.n_ff_shexp : c.n_ff;
    s.shared_gate = true;
    return s;
}

}  // namespace ms
