// The layer stack most MoE families share: token embedding; per layer,
// RMSNorm -> attention block -> residual, RMSNorm -> feed-forward block (dense
// or MoE) -> residual; final RMSNorm and output head (tied to token_embd when
// `output` is absent). A DecoderSpec says how a family's layers differ; each
// family's file (model/<family>.cpp) fills one in from its metadata, so its
// differences read in one screen. The passes over the layers (a prompt layer
// by layer, several sequences' decode steps together) are LayerMajorModel's
// (model/layer_major.h), which gemma4 shares.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/attention_block.h"
#include "model/deltanet.h"
#include "model/dsa_indexer.h"
#include "model/mla_attention.h"
#include "model/model.h"
#include "model/moe.h"
#include "ops/rope.h"

namespace ms {

struct DecoderSpec {
    // Attention (tensor names blk.N.attn_*).
    bool qkv_bias = false;        // attn_{q,k,v}.bias
    bool out_bias = false;        // attn_output.bias
    QkNorm qk_norm = QkNorm::None;  // attn_q_norm, attn_k_norm
    bool sinks = false;           // attn_sinks
    Rope rope;
    bool rope_freqs = false;      // the global rope_freqs.weight (when present) divides pair i's angle
    std::vector<int> window;      // sliding window per layer (0: full); empty: every layer full
    // Llama 4: per layer, attention within chunks of this many positions
    // (0: none; empty: no layer chunked); whether the layer has no position
    // encoding (empty: every layer roped), its q tuned by `temperature`.
    std::vector<int64_t> chunk;
    std::vector<bool> no_rope;
    AttentionTemperature temperature;
    bool q_gate = false;          // attn_q emits per head [q | gate], the output times sigmoid(gate)

    // Hybrid stacks (Qwen3-Next, Qwen3.5): layer il is a Gated DeltaNet layer
    // (model/deltanet.h) unless (il + 1) % full_attention_interval == 0; 0:
    // every layer attends.
    int full_attention_interval = 0;
    DeltaNetShape deltanet;
    // Multi-head latent attention instead of q/k/v when mla.kv_lora > 0:
    // attn_q (or attn_q_a, attn_q_a_norm, attn_q_b), attn_kv_a_mqa,
    // attn_kv_a_norm, attn_k_b, attn_v_b, attn_output; the cache holds
    // compressed rows (model/mla_attention.h).
    MlaShape mla;
    // DeepSeek sparse attention over the MLA layers when indexer.top_k > 0:
    // layer il has a lightning indexer (indexer.* tensors, model/dsa_indexer.h)
    // where indexer_layers[il] (every layer when empty); the others attend to
    // the positions the nearest earlier one chose.
    IndexerShape indexer;
    std::vector<bool> indexer_layers;

    // Feed-forward.
    std::string ffn_norm = "ffn_norm";  // the pre-FFN norm (gpt-oss, GLM: post_attention_norm)
    int n_dense_lead = 0;         // first layers with a dense FFN (ffn_{gate,up,down}) of n_ff_dense
    int moe_step = 0;             // > 0: only layers with (il + 1) % moe_step == 0 route, the others dense
    int64_t n_ff_dense = 0;
    int64_t n_ff_exp = 0;         // routed expert width (ffn_{gate,up,down}_exps)
    Routing routing;
    bool router_bias = false;     // ffn_gate_inp.bias
    bool selection_bias = false;  // exp_probs_b.bias
    GatedActivation activation = GatedActivation::SwiGlu;
    bool weight_input = false;    // the router weight scales the expert's input (ExpertLayer)
    bool expert_biases = false;   // ffn_{gate,up,down}_exps.bias
    int64_t n_ff_shared = 0;      // shared expert width (ffn_{gate,up,down}_shexp); 0: none
    bool shared_gate = false;     // ffn_gate_inp_shexp: shared output times sigmoid(gate . x)
};

// The RoPE the metadata asks for: rope.dimension_count dims, rope.freq_base,
// YaRN or linear interpolation when rope.scaling.type says so; neox: which
// dimensions pair up (see Rope).
Rope config_rope(const ModelConfig& c, bool neox);

// The families built from a DecoderSpec, one file each (model/<family>.cpp):
// the spec from the file's metadata (throwing, naming the file, where it
// asks for what the family does not support). Model::open and the GPU
// forward (model/gpu_decoder.h) take the same spec.
DecoderSpec qwen3moe_spec(const GgufFile& file, const ModelConfig& config);
DecoderSpec mixtral_spec(const GgufFile& file, const ModelConfig& config);
DecoderSpec olmoe_spec(const GgufFile& file, const ModelConfig& config);
DecoderSpec qwen2moe_spec(const GgufFile& file, const ModelConfig& config);
DecoderSpec glm4moe_spec(const GgufFile& file, const ModelConfig& config);
DecoderSpec gpt_oss_spec(const GgufFile& file, const ModelConfig& config);
DecoderSpec qwen35moe_spec(const GgufFile& file, const ModelConfig& config);
DecoderSpec qwen3next_spec(const GgufFile& file, const ModelConfig& config);
DecoderSpec glm_dsa_spec(const GgufFile& file, const ModelConfig& config);
DecoderSpec llama4_spec(const GgufFile& file, const ModelConfig& config);
DecoderSpec minimax_m2_spec(const GgufFile& file, const ModelConfig& config);
// DeepSeek V2/V3's layers from the metadata (model/deepseek2.cpp): MLA,
// routing, dense lead and shared experts; glm-dsa adds its indexer to them.
DecoderSpec deepseek2_spec(const GgufFile& file, const ModelConfig& config);

// The spec of the file's architecture into *out; false where the family has
// a forward pass of its own (gemma4, deepseek4). Throws on an unknown
// architecture, as Model::open does.
bool decoder_spec(const GgufFile& file, const ModelConfig& config, DecoderSpec* out);

// Throws unless the file's expert_gating_func is absent (0) or 2, sigmoid:
// the families that only route by sigmoid scores.
void require_sigmoid_gating(const GgufFile& file, const ModelConfig& c);

// Checks the tensors `spec` names (shapes and types, as Model::open does)
// and returns the model. Runs config.n_layer - config.n_nextn layers; the
// first NextN (multi-token prediction) block is read and run only after
// Model::enable_nextn() (model/nextn.h), as one more layer with its own KV
// cache.
std::unique_ptr<Model> open_decoder(const GgufFile& file, ModelConfig config, const DecoderSpec& spec);

}  // namespace ms
