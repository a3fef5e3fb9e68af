// What a GGUF model is, from its metadata and tensor table alone: the
// hyper-parameters, which tensors stay resident and which are read sparsely
// (routed experts, embedding rows), where each expert's bytes lie in the file,
// the quant-type mix, and how much memory a run needs. Feeds `inspect`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace ms {

// Resident: read by every token (attention, norms, routers, shared experts,
// output head, a tied embedding). Expert: routed-expert matrices, read per
// selected expert. EmbeddingRows: one row per token (token_embd when the
// output head is separate, per_layer_token_embd). Unused: tensors plain
// decoding never reads (the NextN / multi-token-prediction block, which only
// --draft mtp loads and runs).
enum class TensorClass { Resident = 0, Expert = 1, EmbeddingRows = 2, Unused = 3 };
constexpr int kTensorClassCount = 4;
const char* tensor_class_name(TensorClass c);

// Classifies one tensor by name. n_layer / n_nextn locate the NextN block (the
// last n_nextn blocks); tied_output: the file has no output.weight, so
// token_embd doubles as the head and is read whole every token.
TensorClass classify_tensor(const GgufTensor& t, int64_t n_layer, int64_t n_nextn, bool tied_output);

struct ByteRange {
    int split = 0;
    uint64_t offset = 0;  // absolute offset in that split file
    uint64_t size = 0;
};

// The routed experts of one layer. Each expert tensor (ffn_gate_exps,
// ffn_up_exps, ffn_down_exps, or a fused ffn_gate_up_exps) holds n_expert
// equal slices back to back; expert e's slice is bytes [e*slice, (e+1)*slice)
// of the tensor.
struct MoeLayer {
    int layer = 0;
    int n_expert = 0;
    std::vector<size_t> tensors;       // indices into GgufFile::tensors(), file order
    std::vector<size_t> side_tensors;  // per-expert biases/scales (*_exps.bias, *_exps.scale): resident
    uint64_t expert_bytes = 0;         // one expert's bytes over `tensors`
    uint64_t expert_params = 0;        // one expert's weights over `tensors`
    uint64_t side_bytes = 0;           // one expert's share of `side_tensors`
    int ranges = 0;                    // byte ranges one expert spans (adjacent slices merged)
};

// Byte ranges of expert e of layer l in the file, adjacent slices merged,
// sorted by (split, offset).
std::vector<ByteRange> expert_byte_ranges(const GgufFile& f, const MoeLayer& l, int e);

struct TypeUse {
    GgmlType type = GgmlType::F32;
    int tensors = 0;
    uint64_t bytes = 0;
    uint64_t params = 0;
};

// Hyper-parameters as stored under "<arch>." (0 / empty when absent). Values
// that some architectures store per layer (head counts) are given as their
// maximum, with the per-layer list beside them.
struct Hparams {
    std::string arch, name;
    int64_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0;
    std::vector<int64_t> n_head_kv_layer;  // per layer when stored as an array
    int64_t head_dim_k = 0, head_dim_v = 0;
    int64_t head_dim_k_mla = 0, head_dim_v_mla = 0;  // MLA: per-head q.k and v sizes (key/value_length_mla)
    int64_t n_expert = 0, n_expert_used = 0, expert_ffn = 0, ffn = 0;
    int64_t n_shared_expert = 0, shared_ffn = 0;  // shared_ffn: total width of the shared FFN
    int64_t n_dense_lead = 0, n_nextn = 0;        // leading dense layers; NextN/MTP blocks
    int64_t moe_layer_step = 0;  // interleave_moe_layer_step: layers (l+1) % step == 0 route, the rest dense
    // Llama 4's chunked attention: positions per chunk on the 3 of every 4
    // layers that have RoPE (0: none).
    int64_t attention_chunk = 0;
    int64_t context = 0, sliding_window = 0, kv_lora_rank = 0;
    double rope_base = 0;
    int64_t rope_dim = 0;
    std::string rope_scaling;
    double rope_factor = 0;
    // Recurrent (SSM / DeltaNet) layers, e.g. qwen35moe: every layer except
    // each full_attention_interval-th.
    int64_t full_attention_interval = 0, ssm_conv_kernel = 0, ssm_inner = 0, ssm_state = 0, ssm_groups = 0;
    // Tokenizer.
    std::string tokenizer_model, tokenizer_pre;
    int64_t n_vocab = 0;
    bool chat_template = false;
};

// Memory a run needs, in bytes.
// kv_bytes: F16 cache for `ctx` tokens. Per attention layer l (NextN blocks
// and layers sharing another layer's cache excluded):
//   2 bytes * tokens(l) * n_head_kv(l) * (head_dim_k(l) + head_dim_v(l)),
//   tokens(l) = min(ctx, sliding_window) on sliding-window layers,
//   min(ctx, attention_chunk) on chunked layers, else ctx;
//   MLA (kv_lora_rank > 0) caches the compressed row instead:
//   2 bytes * ctx * (kv_lora_rank + rope_dim).
// kv_token_bytes: what one more token adds to kv_bytes (full-attention
// layers); full_kv_token_bytes: what full per-head K and V would take there
// (differs only for MLA: n_head * (head_dim_k_mla + head_dim_v_mla)).
// DeepSeek V4 keeps an F32 state instead (summary.cpp: deepseek4_memory):
// kv_token_bytes its compressed blocks and indexer keys, state_bytes its
// fixed part (windows and unpooled tokens).
// Recurrent layers keep a fixed F32 state instead:
//   4 bytes * ((conv_kernel - 1) * (ssm_inner + 2 * ssm_groups * ssm_state) + ssm_inner * ssm_state).
// ram_streaming = resident + kv + n_expert_used * largest expert + logits
//   (n_vocab * 4): the least a run that streams experts and embedding rows
//   needs (one layer's experts at a time, no reuse).
// ram_all = resident + experts + embedding rows + kv + logits: every weight in RAM.
struct MemoryNeed {
    int64_t ctx = 0;
    uint64_t kv_bytes = 0;
    uint64_t state_bytes = 0;  // recurrent layers' state (part of kv_bytes)
    uint64_t kv_token_bytes = 0, full_kv_token_bytes = 0;
    uint64_t logits_bytes = 0;
    uint64_t ram_streaming = 0;
    uint64_t ram_all = 0;
};

// Synthetic models (moestream synth) record the router skew they were built
// with and the calibrated expected popularity of every expert.
struct SynthInfo {
    bool present = false;
    std::string preset;
    double router_skew = 0;
    uint64_t seed = 0;
    // popularity[l][e]: expected probability that expert e of MoE layer l is
    // among a token's selected experts (each layer sums to n_expert_used).
    std::vector<std::vector<double>> popularity;
};

struct ModelSummary {
    std::vector<std::string> files;
    uint64_t file_bytes = 0;
    uint32_t version = 0;
    uint64_t alignment = 0;
    int64_t n_tensors = 0;

    Hparams hp;
    std::vector<TensorClass> tensor_class;  // per tensor of the file
    uint64_t params = 0, tensor_bytes = 0;
    uint64_t params_by_class[kTensorClassCount] = {};
    uint64_t bytes_by_class[kTensorClassCount] = {};
    uint64_t active_params = 0;  // read per token: resident + n_expert_used experts per MoE layer + one embedding row

    std::vector<MoeLayer> moe_layers;
    uint64_t expert_bytes_min = 0, expert_bytes_max = 0;
    double expert_bytes_avg = 0;
    int expert_ranges_max = 0;
    uint64_t expert_side_bytes = 0;  // all per-expert bias/scale tensors (counted as resident)
    // The mean expert's bytes were all its matrices stored in another type
    // (the usual low-bit choices; a type whose block does not divide a row
    // is left out), to size the same model quantized otherwise.
    std::vector<std::pair<GgmlType, double>> expert_bytes_as;

    std::vector<TypeUse> types;  // sorted by bytes, largest first
    MemoryNeed mem;
    SynthInfo synth;
};

// ctx <= 0: the default context, min(context_length, 4096) (4096 when the
// file states none).
ModelSummary summarize_model(const GgufFile& f, int64_t ctx = 0);

// Mean over MoE layers of the share of all selections taken by each layer's
// `top` most popular experts (popularity as in SynthInfo).
double top_expert_share(const std::vector<std::vector<double>>& popularity, int top);

// "blk.12.attn_q.weight" -> 12; -1 for tensors outside the blocks.
int tensor_layer(const std::string& name);

}  // namespace ms
