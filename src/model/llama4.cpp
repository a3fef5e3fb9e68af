// Llama 4 (architecture `llama4`: Scout, Maverick). Normal (adjacent-pair)
// RoPE with the global rope_freqs; every 4th layer has no position encoding
// (its q tuned by attention temperature instead) and attends over the whole
// prefix, the others attend within 8192-token chunks and RMS-norm each head of
// q and k after RoPE, without weights (not when there are 128 experts, as the
// reference decides for Maverick). Layers with (il + 1) % interleave_moe_layer_step
// == 0 route, the others have a dense FFN. The router takes the top k by
// sigmoid score and that score scales the expert's input; a shared expert
// as wide as a routed one is added.
#include <stdexcept>

#include "gguf/gguf.h"
#include "model/decoder.h"

namespace ms {

namespace {

// The reference fixes these for the architecture (none are in the file).
constexpr int kPattern = 4;               // 3 chunked roped layers, then 1 full layer without RoPE
constexpr int64_t kChunk = 8192;
constexpr AttentionTemperature kTemperature{0.1f, 8192};

}  // namespace

DecoderSpec llama4_spec(const GgufFile& file, const ModelConfig& c) {
    const std::string step_key = c.arch + ".interleave_moe_layer_step";
    const int64_t step = file.get_int(step_key, 1);
    if (step < 1 || step > c.n_layer) {
        throw std::runtime_error(file.path() + ": " + step_key + " = " + std::to_string(step) + " is out of range [1, " +
                                 std::to_string(c.n_layer) + "]");
    }
    DecoderSpec s;
    s.qk_norm = c.n_expert == 128 ? QkNorm::None : QkNorm::PlainAfterRope;
    s.rope = config_rope(c, false);
    s.rope_freqs = true;
    // attention.sliding_window present and 0 selects the reference's other
    // pattern: every layer roped, nothing chunked, no temperature tuning.
    const bool chunked = !(file.has(c.arch + ".attention.sliding_window") && c.sliding_window == 0);
    if (chunked) {
        for (int il = 0; il < c.n_layer; il++) {
            s.chunk.push_back(il % kPattern < kPattern - 1 ? kChunk : 0);
            s.no_rope.push_back((il + 1) % kPattern == 0);
        }
        s.temperature = kTemperature;
    }
    s.moe_step = int(step);
    s.n_ff_dense = c.n_ff;
    s.n_ff_exp = c.n_ff_exp;
    s.routing = {Gating::Sigmoid, false};
    s.weight_input = true;
    s.n_ff_shared = c.n_ff_shexp > 0 ? c.n_ff_shexp : c.n_ff_exp;
    return s;
}

}  // namespace ms
