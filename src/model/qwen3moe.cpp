// Qwen3-MoE (architecture `qwen3moe`: Qwen3-30B-A3B, Qwen3-235B-A22B). q and k
// RMS-normed per head, NeoX RoPE, grouped-query heads; softmax router over
// all experts, the top k renormalized; SwiGLU experts, no shared expert.
#include "model/decoder.h"

namespace ms {

DecoderSpec qwen3moe_spec(const GgufFile&, const ModelConfig& c) {
    DecoderSpec s;
    s.qk_norm = QkNorm::PerHead;
    s.rope = config_rope(c, true);
    s.n_ff_exp = c.n_ff_exp;
    s.routing = {Gating::Softmax, true};
    return s;
}

}  // namespace ms
