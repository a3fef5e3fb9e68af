// Gated DeltaNet, the linear-attention layers of the Qwen3-Next and Qwen3.5
// hybrids, one layer over a batch of tokens: a short causal convolution, then
// per value head a gated delta-rule recurrence over a head_k x head_v state,
// normed and gated by z. Both states are carried from call to call.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ops/buffer.h"
#include "ops/tensor.h"
#include "ops/thread_pool.h"

namespace ms {

class GgufFile;

struct DeltaNetShape {
    int n_k_heads = 0;    // ssm.group_count: heads of q and k
    int n_v_heads = 0;    // ssm.time_step_rank: heads of v, each with its own state
    int head_k = 0;       // ssm.state_size: width of a q / k head
    int head_v = 0;       // ssm.inner_size / n_v_heads
    int conv_kernel = 0;  // ssm.conv_kernel
    // qwen3next: one ssm_ba projection, per key head [beta of its value heads
    // | alpha of them]; else ssm_beta and ssm_alpha, one value per value head.
    bool fused_ba = false;
    // Value head h reads key head h % n_k_heads (Qwen3.5's GGUF orders its
    // value heads so); else h / (n_v_heads / n_k_heads) (Qwen3-Next).
    bool tiled_heads = false;

    int64_t qk_dim() const { return int64_t(n_k_heads) * head_k; }
    int64_t v_dim() const { return int64_t(n_v_heads) * head_v; }
    int64_t conv_channels() const { return 2 * qk_dim() + v_dim(); }  // [q | k | v]
    int64_t conv_state_floats() const { return int64_t(conv_kernel - 1) * conv_channels(); }
    int64_t recurrent_state_floats() const { return v_dim() * head_k; }
    bool empty() const { return n_v_heads == 0; }
};

// The shape from the `ARCH.ssm.*` metadata; throws naming the key that is
// missing or out of range.
DeltaNetShape read_deltanet_shape(const GgufFile& file, const std::string& arch);

// One layer's weights.
struct DeltaNetLayer {
    Tensor norm;             // attn_norm (the caller applies it)
    Tensor wqkv, wz;         // attn_qkv: conv_channels; attn_gate: z, v_dim
    Tensor wba;              // ssm_ba (fused_ba)
    Tensor wbeta, walpha;    // ssm_beta, ssm_alpha (else)
    Tensor conv;             // ssm_conv1d, conv_kernel taps per channel, F32
    Tensor dt_bias, a;       // ssm_dt.bias, ssm_a (= -exp(A_log)), per value head
    Tensor out_norm;         // ssm_norm, head_v wide, shared by the heads
    Tensor wout;             // ssm_out: v_dim -> n_embd

    bool empty() const { return wqkv.empty(); }
    uint64_t weight_bytes() const {
        return wqkv.bytes() + wz.bytes() + wba.bytes() + wbeta.bytes() + walpha.bytes() + wout.bytes();
    }
};

// Pieces of at least this many tokens run the recurrence in chunks
// (ops/delta_rule.h); shorter ones, decode included, token by token.
constexpr int kDeltaNetMinChunked = 16;

// Scratch for deltanet_block, sized once for the largest batch.
struct DeltaNetScratch {
    AlignedBuffer qkv, conv;     // projection and its convolution, conv_channels per token
    AlignedBuffer z, o;          // gate and recurrence output, v_dim per token
    AlignedBuffer ba;            // beta and alpha logits, 2 n_v_heads per token
    AlignedBuffer chunk;         // the chunked recurrence's, per thread (none for batches too short to use it)
    uint8_t* acts = nullptr;     // the caller's converted-activation buffer (acts_per_token)

    // n_threads: the size of the pools deltanet_block will run on.
    void init(const DeltaNetShape& s, int max_batch, int n_threads = 1);
    uint64_t bytes() const;  // without acts
    static size_t acts_per_token(const std::vector<DeltaNetLayer>& layers);
};

// out (n rows of n_embd) = the layer over x (n rows of the normed residual),
// continuing from conv_state (conv_kernel - 1 rows of conv_channels inputs)
// and recurrent_state (per value head, head_k rows of head_v), both updated;
// zeroed states start a sequence. A batch of fewer than kDeltaNetMinChunked
// tokens gives the bits of evaluating them one at a time; a longer one runs
// the recurrence in chunks of kDeltaRuleChunk from its first token, the same
// function rounded differently (logits within ~1e-6 relative). Threads never
// change a bit.
void deltanet_block(ThreadPool& pool, const DeltaNetShape& shape, float rms_eps, const DeltaNetLayer& l,
                    const float* x, int n, float* conv_state, float* recurrent_state, DeltaNetScratch& s, float* out);

}  // namespace ms
