// MiniMax-M2 (architecture `minimax-m2`). q and k RMS-normed over the whole
// projection (before the head split), NeoX RoPE on the first
// rope.dimension_count dims of each head; every layer routes: sigmoid
// scores plus exp_probs_b (bias for choosing only), weights the unbiased
// scores renormalized, no scale; SwiGLU experts as wide as
// feed_forward_length (the reference's choice; expert_feed_forward_length
// holds the same in published files). No shared expert.
#include "model/decoder.h"

namespace ms {

DecoderSpec minimax_m2_spec(const GgufFile& file, const ModelConfig& c) {
    require_sigmoid_gating(file, c);
    DecoderSpec s;
    s.qk_norm = QkNorm::Whole;
    s.rope = config_rope(c, true);
    s.n_ff_exp = c.n_ff > 0 ? c.n_ff : c.n_ff_exp;
    s.routing = {Gating::Sigmoid, true, 1.0f};
    s.selection_bias = true;
    return s;
}

}  // namespace ms
