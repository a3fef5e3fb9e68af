// OLMoE (architecture `olmoe`). q and k RMS-normed over the whole projection
// (before the head split), NeoX RoPE; softmax router, the top k NOT
// renormalized; SwiGLU experts.
#include "model/decoder.h"

namespace ms {

DecoderSpec olmoe_spec(const GgufFile&, const ModelConfig& c) {
    DecoderSpec s;
    s.qk_norm = QkNorm::Whole;
    s.rope = config_rope(c, true);
    s.n_ff_exp = c.n_ff_exp > 0 ? c.n_ff_exp : c.n_ff;
    s.routing = {Gating::Softmax, false};
    return s;
}

}  // namespace ms
