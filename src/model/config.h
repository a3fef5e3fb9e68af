// Hyper-parameters of a model, read from its GGUF metadata. Keys are
// prefixed by the architecture name (`qwen3moe.block_count`); values a family
// does not use keep their defaults.
#pragma once
#include <cstdint>
#include <string>

namespace ms {

class GgufFile;

struct ModelConfig {
    std::string arch;           // general.architecture
    std::string name;           // general.name (may be empty)
    int64_t n_vocab = 0;        // rows of token_embd
    int64_t n_ctx_train = 0;    // context_length
    int64_t n_embd = 0;         // embedding_length
    int n_layer = 0;            // block_count
    int n_head = 0;             // attention.head_count
    int n_head_kv = 0;          // attention.head_count_kv (default n_head)
    int head_dim = 0;           // attention.key_length (default n_embd / n_head)
    int head_dim_v = 0;         // attention.value_length (default head_dim)
    int n_rot = 0;              // rope.dimension_count (default head_dim)
    float rope_freq_base = 10000.0f;
    float rms_eps = 1e-6f;      // attention.layer_norm_rms_epsilon
    int64_t n_ff = 0;           // feed_forward_length (dense FFN layers)
    int n_expert = 0;           // expert_count
    int n_expert_used = 0;      // expert_used_count
    int64_t n_ff_exp = 0;       // expert_feed_forward_length
    int expert_gating = 0;      // expert_gating_func: 1 softmax, 2 sigmoid (0: the family's default)
    bool expert_weights_norm = false;  // expert_weights_norm: the chosen weights renormalized
    float expert_weights_scale = 1.0f; // expert_weights_scale (1 when absent or 0)
    int n_expert_shared = 0;    // expert_shared_count
    int64_t n_ff_shexp = 0;     // expert_shared_feed_forward_length
    int n_dense_lead = 0;       // leading_dense_block_count: first layers with a dense FFN
    int n_nextn = 0;            // nextn_predict_layers: trailing multi-token-prediction blocks
    int sliding_window = 0;     // attention.sliding_window
    std::string rope_scaling;   // rope.scaling.type ("" / "none", "linear", "yarn")
    float rope_factor = 1.0f;   // rope.scaling.factor
    int64_t rope_n_ctx_orig = 0;  // rope.scaling.original_context_length (default context_length)

    int64_t q_dim() const { return int64_t(n_head) * head_dim; }
    int64_t kv_dim() const { return int64_t(n_head_kv) * head_dim; }
    int64_t v_dim() const { return int64_t(n_head_kv) * head_dim_v; }
};

// Reads the configuration of any architecture; checks that the sizes every
// family needs are present and sane ("PATH: missing metadata KEY",
// "PATH: KEY = V is out of range"). n_vocab is left 0 (the model fills it in
// from token_embd).
ModelConfig read_config(const GgufFile& file);

}  // namespace ms
