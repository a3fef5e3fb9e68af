// Synthetic models of real architectures (qwen3moe, and the families of
// synth/synth_families.h): real tensor names,
// shapes and metadata, a generated vocabulary of the preset's size and
// tokenizer type (synth/synth_vocab.h) or the tokenizer of a vocabulary GGUF
// the user names, and random but valid quantized weights. Big tensors are never made as floats:
// blocks are filled from a fast PRNG and only their scale fields are set, so
// a 17 GB model is written at disk speed. Router rows are scaled so expert
// popularity follows a Zipf-like law (--router-skew); a few designed
// elements give attention a recency window so routing follows the token and
// its recent context, as in trained models (--router-locality; synth/synth_routing.h
// says which families have the design so far).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quant/types.h"

namespace ms {

struct SynthSpec {
    std::string preset = "custom";
    // qwen3moe, or a family of synth/synth_families.h (llama, gpt-oss,
    // deepseek2, glm4moe, qwen35moe, glm-dsa, llama4, minimax-m2, deepseek4, gemma4), whose
    // extra sizes follow below.
    std::string arch = "qwen3moe";
    int n_layer = 4;
    int n_expert = 16;
    int n_expert_used = 4;
    int n_embd = 256;
    int expert_ffn = 256;
    int n_head = 4;
    int n_head_kv = 2;
    int head_dim = 64;
    int64_t context = 4096;
    double rope_base = 1e6;
    int rope_dim = 0;        // rotated dims per head (0: all); deepseek2: the rope part of q and k
    int n_dense_lead = 0;    // first layers with a dense FFN (deepseek2, glm4moe)
    int moe_step = 0;        // llama4: layer il routes when (il + 1) % moe_step == 0, the others are dense
    int dense_ffn = 0;       // the dense layers' FFN width
    int n_shared = 0;        // shared experts, expert_ffn wide each (deepseek2, glm4moe)
    int q_lora = 0;          // deepseek2 MLA: q compression rank (0: q straight from the input)
    int kv_lora = 0;         // deepseek2 MLA: compressed KV rank; head_dim is then the no-rope part
    int v_head_dim = 0;      // deepseek2 MLA: value width per head
    int sliding_window = 0;  // gpt-oss: the window of its even layers
    // qwen35moe: a gated full-attention layer every full_attention_interval,
    // Gated DeltaNet layers between, with these heads (q/k and v heads of
    // ssm_head_dim each).
    int full_attention_interval = 0;
    int ssm_k_heads = 0;
    int ssm_v_heads = 0;
    int ssm_head_dim = 0;
    // glm-dsa: the lightning indexer of every layer (heads of indexer_dim;
    // each query attends to its top_k positions).
    int indexer_heads = 0;
    int indexer_dim = 0;
    int indexer_top_k = 0;
    // deepseek4: the first hash_layers layers route by token id; attention
    // output in out_groups groups through a rank-out_lora projection. Its
    // indexer uses the indexer_* sizes above and its window sliding_window.
    int hash_layers = 0;
    int out_groups = 0;
    int out_lora = 0;
    // gemma4: every full_attention_interval-th layer attends to everything
    // with heads of head_dim_full, n_head_kv_full KV heads (V from the K
    // projection when v_from_k), rope_base and a quarter of its dims rotating; the others
    // within sliding_window (heads of head_dim, n_head_kv, rope_base_swa).
    // Every layer runs a GELU MLP dense_ffn wide beside its experts, or
    // alone where routed is false (the E-series). per_layer_embd > 0: the
    // E-series' per-layer embeddings of that width; the last
    // shared_kv_layers layers read earlier layers' KV caches.
    int head_dim_full = 0;
    int n_head_kv_full = 0;
    double rope_base_swa = 10000;
    int per_layer_embd = 0;
    int shared_kv_layers = 0;
    bool routed = true;
    bool v_from_k = false;
    // The vocabulary: generated (synth/synth_vocab.h) with this tokenizer
    // ("gpt2" byte-level BPE, "llama" SentencePiece) and size, unless
    // vocab_path names a GGUF whose tokenizer.* keys (and size) are copied.
    std::string tokenizer = "gpt2";
    int64_t n_vocab = 151669;
    std::string vocab_path = {};
    std::string recipe = "Q4_K_M";  // Q4_K_M, Q8_0, MXFP4, F16
    double router_skew = 0;       // Zipf exponent of expert popularity; 0 = uniform
    // How much recent context each router sees beside the token (the value
    // scale of recency-window attention; synth.cpp's Design): 0 gives the
    // plain random network, whose routing collapses onto a few experts.
    double router_locality = 1.0;
    // How fast the recency window's scores fall with distance, relative to
    // the qwen3 presets' (synth/synth_routing.h); fitted per family preset.
    // Families other than qwen3moe only.
    double router_sharpness = 1.0;
    // How the locality knob fades with depth: layer l's scale is
    // router_locality / sqrt(1 + router_fade * l) (synth/synth_routing.h's
    // layer_locality). 0.5, the qwen3 presets', unless a preset's fit
    // needed another (docs/routing.md: Mixtral's slower, MiniMax-M2's none).
    double router_fade = 0.5;
    // The locality knob's scale in each third of the layers (first, middle,
    // last; layer l is in third (3 l + 2) / n_layer), on top of the fade: a depth
    // profile the fade cannot give, such as Mixtral's repetition peaking in
    // its middle layers. A --layers cut splits its own layers in thirds.
    std::array<double, 3> router_bands = {1.0, 1.0, 1.0};
    // The weight the routers (and experts) of each third give the token's
    // own channels: n_embd / 16 residual channels after the carrier that no
    // layer writes (attn_output's and every ffn_down's rows there exact
    // zeros), so they hold the token's embedding alone. Above 1 a third's
    // routers see less of the context that the layers before it wrote into
    // the residual, which their own locality cannot take back (Mixtral's
    // last third). All 0, the default: no such channels. Families with
    // position-only attention (gpt-oss, Mixtral, GLM-4.5, Llama 4,
    // MiniMax-M2).
    std::array<double, 3> router_own = {0.0, 0.0, 0.0};
    // qwen35moe: the Gated DeltaNet layers' output gate silu(z) reads the
    // carrier alone, so z is the same large positive value for every token
    // (up to its residual's RMS) instead of one drawn from each token's own
    // residual, whose silu keeps about a tenth of the correlation between
    // consecutive tokens' context (docs/routing.md, qwen3.5-35b-a3b). The
    // locality knob then sets how much context the routers see.
    bool router_steady_gate = false;
    uint64_t seed = 1;
};

// Presets at real dimensions: "qwen3-30b-a3b", "qwen3-235b-a22b", the other
// families' published shapes ("mixtral-8x7b", "gpt-oss-120b", "deepseek-v3",
// "glm-4.5-air", "qwen3.5-397b-a17b", "qwen3.5-35b-a3b", "glm-5",
// "llama4-scout", "llama4-maverick", "minimax-m2", "deepseek-v4-flash", "gemma4-26b-a4b", "gemma4-e4b")
// and "tiny" (a few MB, the README demo). Their vocabularies are generated:
// tiny's 499 byte-level BPE tokens, Qwen3's size (151,669, byte-level BPE)
// for the others, Llama 2's 32,000 SentencePiece tokens for mixtral-8x7b.
// Throws on an unknown name.
SynthSpec synth_preset(const std::string& name);
const std::vector<std::string>& synth_preset_names();

// Checks dimensions and recipe; throws std::runtime_error naming the problem.
void validate_spec(const SynthSpec& s);

// Type of one tensor under a recipe, following the usual llama.cpp choices
// for Q4_K_M: Q6_K output head; ffn_down and attn_v in Q6_K on the layers
// use_more_bits picks (first and last eighth, every third in between), Q4_K
// elsewhere; with exactly 8 experts attn_k/attn_v Q8_0 and attn_output Q5_K.
// 1-D tensors and routers stay F32. A type whose block does not divide the
// row length falls back to Q8_0, then F16.
GgmlType synth_tensor_type(const std::string& recipe, const std::string& tensor, int layer, int n_layer,
                           int n_expert, int64_t row_len);

// Selection probability per popularity rank r (0 = most popular) for k of n
// experts: proportional to 1/(r+1)^skew, capped at `cap` and renormalized so
// the probabilities sum to k.
std::vector<double> zipf_targets(int n_expert, int k, double skew, double cap);

// Router logits of random rows with norms scale[e] against an isotropic
// Gaussian input are independent Gaussians with std scale[e]. Finds scales
// (by a Monte Carlo over such inputs) whose top-k selection frequency matches
// `target`, and the frequencies they reach (`popularity`, summing to k).
// A symmetric input can never put one expert in the top k of more than half
// the tokens (x and -x select opposite ends), so targets must stay below 0.5.
struct RouterCalibration {
    std::vector<double> scale;
    std::vector<double> popularity;
};
RouterCalibration calibrate_router(const std::vector<double>& target, int k, uint64_t seed);

// The popularity cap synth uses (below the 0.5 limit above, with margin to
// converge).
constexpr double kRouterCap = 0.45;

struct SynthResult {
    uint64_t bytes = 0;
    double seconds = 0;
    int n_tensors = 0;
};

// What a spec would write, without writing it: tensor data bytes, split
// into routed experts (the *_exps tensors) and everything else (resident
// while streaming), and the size of one expert of one layer (gate + up +
// down). Reads only the vocabulary file, if the spec names one.
struct SynthSizes {
    uint64_t total = 0, experts = 0, resident = 0, one_expert = 0;
    uint64_t rows = 0;  // per-layer embedding table: read a row a token, like experts, not resident
    int64_t n_vocab = 0;
    int n_tensors = 0;
    int moe_layers = 0;
};
SynthSizes synth_sizes(const SynthSpec& spec);

// Writes the model to `path` (through `path`.partial, renamed at the end).
// progress(done, total) is called from the calling thread after each chunk.
SynthResult write_synth_model(const SynthSpec& spec, const std::string& path,
                              const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace ms
