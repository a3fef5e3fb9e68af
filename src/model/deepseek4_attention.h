// DeepSeek V4's attention (model/deepseek4.cpp): one vector per token that
// is both key and value of every head, a sliding window of those vectors
// plus compressed blocks of the older ones (ratio 4: overlapping blocks the
// indexer picks the best of; ratio 128: every block), attention sinks, the
// output rotated back by the inverse rope, grouped low-rank output.
#pragma once
#include <cstdint>
#include <vector>

#include "ops/buffer.h"
#include "ops/rope.h"
#include "ops/tensor.h"
#include "ops/thread_pool.h"

namespace ms {

// A stream of pooled block vectors: per token, values a = kv . x and scores
// s = gate . x + ape[pos mod ratio]; a block's vector is the per-channel
// softmax(s)-weighted sum of a over its entries, RMS-normed (times norm) and
// roped at the block's first position. With overlap, a and s are twice the
// block width: a block pools the first half of the previous block's tokens
// and the second half of its own.
struct Dsv4Compressor {
    Tensor kv, gate, ape, norm;
    int width = 0;  // of the pooled vector
    bool overlap = false;

    bool empty() const { return kv.empty(); }
    int64_t in_width() const { return overlap ? 2 * int64_t(width) : width; }
};

struct Dsv4AttentionLayer {
    int ratio = 0;  // compression ratio (0: the window only)
    Tensor q_a, q_a_norm, q_b, kv, kv_norm, sinks, out_a, out_b;
    Dsv4Compressor comp;               // the blocks attention reads (ratio > 0)
    Dsv4Compressor index;              // the indexer's keys (none: every visible block is read)
    Tensor index_q_b, index_proj;
};

struct Dsv4AttentionShape {
    int n_head = 0, head_dim = 0, n_rot = 0;  // rope on each head's last n_rot dims
    int64_t q_lora = 0;
    int window = 0;
    int n_group = 0, out_lora = 0;           // grouped output: n_group groups of n_head / n_group heads
    int index_heads = 0, index_dim = 0, top_k = 0;
    float eps = 1e-6f;
    Rope rope_plain, rope_comp;              // ratio-0 layers; compressed layers and every block
};

// The bytes per position of context a layer's state grows by: its blocks and
// indexer keys (the window and the partial block are fixed).
double dsv4_state_bytes_per_token(const Dsv4AttentionLayer& l);

// A sequence's attention state for every layer: the window of key/value
// vectors (a ring), the values and scores of the tokens not yet pooled, the
// compressed blocks and the indexer's keys. F32 throughout.
class Dsv4AttentionState {
public:
    void init(const Dsv4AttentionShape& sh, const std::vector<Dsv4AttentionLayer>& layers, int max_batch,
              int64_t n_ctx, int n_threads);
    uint64_t bytes() const;
    // The longest prefix of at most n positions the rings still hold what
    // continuing needs (see ModelState::rewind_limit); top: one past the
    // highest position written.
    int64_t rewind_limit(int64_t n, int64_t top) const;

private:
    friend void dsv4_attention(ThreadPool&, const Dsv4AttentionShape&, const Dsv4AttentionLayer&, int,
                               Dsv4AttentionState&, const float*, int, int64_t, const float*, const float*,
                               uint8_t*, float*);
    // Where a layer's parts live in data_ (offsets in floats; -1: none).
    struct Layer {
        int64_t window = -1;      // window_rows_ rows of head_dim: position p in row p % window_rows_
        int64_t pool = -1;        // pool_rows rows of [a | s]: the compressor's unpooled tokens
        int64_t index_pool = -1;  // the same for the indexer
        int64_t blocks = -1;      // n_blocks rows of head_dim
        int64_t index_keys = -1;  // n_blocks rows of index_dim
        int64_t pool_rows = 0, n_blocks = 0;
        int ratio = 0;
        bool overlap = false;
    };
    std::vector<Layer> layers_;
    int64_t window_ = 0, window_rows_ = 0, max_blocks_ = 0;
    AlignedBuffer data_;
    // Scratch: max_batch rows each.
    AlignedBuffer q_lat_, q_, kv_, comp_a_, comp_s_, index_a_, index_s_, index_q_, index_w_, att_;
    AlignedBuffer group_in_, group_out_, low_;
    AlignedBuffer chosen_;      // per token, the blocks the indexer picked
    AlignedBuffer per_thread_;  // per thread: scores over window + blocks, then indexer scores
    int64_t per_thread_floats_ = 0;
    AlignedBuffer ape_;         // one dequantized ape row, then a block's rope angles
};

// Bytes per token of converted-activation scratch dsv4_attention's linear()
// calls need.
size_t dsv4_attention_acts_per_token(const std::vector<Dsv4AttentionLayer>& layers);

// out (n rows of n_embd) = layer il's attention over xn (n rows, the normed
// input) at positions pos0.., appending to the state. cos_sin_plain /
// cos_sin_comp: each token's rope angles (n_rot floats per token) for the
// two ropes. acts: dsv4_attention_acts_per_token bytes per token.
void dsv4_attention(ThreadPool& pool, const Dsv4AttentionShape& sh, const Dsv4AttentionLayer& l, int il,
                    Dsv4AttentionState& st, const float* xn, int n, int64_t pos0, const float* cos_sin_plain,
                    const float* cos_sin_comp, uint8_t* acts, float* out);

}  // namespace ms
