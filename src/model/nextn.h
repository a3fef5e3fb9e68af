// A NextN (multi-token prediction) block's own weights, as GLM-4.5 and
// DeepSeek V3 ship them after their layers: from the main model's hidden
// state h at position i (before the final norm) and the token at i + 1,
// eh_proj([enorm(embed(token)) | hnorm(h)]) is the input of one more
// decoder layer (its own attention and MoE, model/decoder.cpp), whose output
// through shared_head_norm and the output head predicts the token at i + 2.
#pragma once
#include <cstdint>

#include "ops/tensor.h"
#include "ops/thread_pool.h"

namespace ms {

struct NextnBlock {
    Tensor eh_proj;     // 2 n_embd -> n_embd
    Tensor enorm, hnorm, head_norm;
    Tensor embd, head;  // nextn.embed_tokens / shared_head_head where the file has its own, else empty

    bool empty() const { return eh_proj.empty(); }
};

// One row of eh_proj's input (2 n_embd floats): enorm(embd[token]) then
// hnorm(h).
void nextn_input_row(const NextnBlock& b, const Tensor& embd, int32_t token, const float* h, int64_t n_embd,
                     float eps, float* row);

}  // namespace ms
