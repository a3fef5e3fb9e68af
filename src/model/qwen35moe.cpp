// Qwen3.5 MoE (architecture `qwen35moe`) and Qwen3-Next (`qwen3next`): hybrid
// stacks of Gated DeltaNet layers (model/deltanet.h) with a gated full
// attention layer every full_attention_interval (attn_q emits per head
// [q | gate], q/k RMS-normed per head, NeoX RoPE on the first
// rope.dimension_count dims: for text every section of Qwen3.5's multi-section
// rope gets the token position, which is that); post_attention_norm is the
// pre-FFN norm; softmax router, the top k renormalized, SwiGLU experts plus a
// shared expert scaled by sigmoid(ffn_gate_inp_shexp . x). They differ in the
// DeltaNet's beta/alpha projections and in which key head a value head reads.
#include <stdexcept>

#include "gguf/gguf.h"
#include "model/decoder.h"

namespace ms {

namespace {

DecoderSpec hybrid_spec(const GgufFile& file, const ModelConfig& c, bool qwen3next) {
    DecoderSpec s;
    s.qk_norm = QkNorm::PerHead;
    s.q_gate = true;
    s.rope = config_rope(c, true);
    // Multi-section rope is NeoX rope over the sections' dims for text; any
    // other split of the rotated dims would be a layout this does not know.
    const std::string sections = c.arch + ".rope.dimension_sections";
    if (file.has(sections)) {
        int64_t pairs = 0;
        for (int64_t n : file.get_ints(sections)) pairs += n;
        if (2 * pairs != c.n_rot) {
            throw std::runtime_error(file.path() + ": " + sections + " cover " + std::to_string(2 * pairs) +
                                     " dims, rope.dimension_count is " + std::to_string(c.n_rot));
        }
    }
    s.full_attention_interval = int(file.require_int(c.arch + ".full_attention_interval"));
    if (s.full_attention_interval < 1) {
        throw std::runtime_error(file.path() + ": " + c.arch + ".full_attention_interval must be >= 1");
    }
    s.deltanet = read_deltanet_shape(file, c.arch);
    s.deltanet.fused_ba = qwen3next;
    s.deltanet.tiled_heads = !qwen3next;
    s.ffn_norm = "post_attention_norm";
    s.n_ff_exp = c.n_ff_exp;
    s.routing = {Gating::Softmax, true};
    s.n_ff_shared = c.n_ff_shexp > 0 ? c.n_ff_shexp : c.n_ff_exp;
    s.shared_gate = true;
    return s;
}

}  // namespace

DecoderSpec qwen35moe_spec(const GgufFile& file, const ModelConfig& c) { return hybrid_spec(file, c, false); }

DecoderSpec qwen3next_spec(const GgufFile& file, const ModelConfig& c) { return hybrid_spec(file, c, true); }

}  // namespace ms
