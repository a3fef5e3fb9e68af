// Mixtral (architecture `llama` with experts: Mixtral 8x7B, 8x22B). Plain
// attention with normal (adjacent-pair) RoPE; softmax router, the top k
// renormalized; SwiGLU experts as wide as feed_forward_length.
#include "model/decoder.h"

namespace ms {

DecoderSpec mixtral_spec(const GgufFile&, const ModelConfig& c) {
    DecoderSpec s;
    s.rope = config_rope(c, false);
    s.n_ff_exp = c.n_ff_exp > 0 ? c.n_ff_exp : c.n_ff;
    s.routing = {Gating::Softmax, true};
    return s;
}

}  // namespace ms
