// The gated delta rule, the recurrence of Gated DeltaNet layers, over one
// value head's state S (head_k rows of head_v): a token decays S, corrects it
// towards v along k, and reads it with q. One token at a time (decode), or a
// chunk of tokens at once in the chunked form (prefill), which reads S once
// per chunk and does the work as matrix products.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ms {

// S = decay S + k d^T with d = beta (v - decay S^T k); out = scale S^T q.
// Two passes over S (read, then update and read by q), in column strips that
// stay in L1 between them; SIMD at the active level, each column summed in
// row order like the scalar reference, so every level gives the same bits.
void delta_rule_step(float* S, int head_k, int head_v, const float* q, const float* k, const float* v, float beta,
                     float decay, float scale, float* out);

// Longest chunk delta_rule_chunk takes.
constexpr int kDeltaRuleChunk = 64;

// Floats of scratch one delta_rule_chunk call needs.
size_t delta_rule_chunk_scratch_floats(int head_k, int head_v);

// n (1..kDeltaRuleChunk) tokens of delta_rule_step in one go: token t has q
// and k at q + t * qk_stride and k + t * qk_stride, v at v + t * v_stride,
// beta[t] and decay exp(log_decay[t]); its output goes to out + t *
// out_stride. The same function of the inputs as n steps, rounded
// differently (within ~1e-6 relative); the same bits at every SIMD level.
void delta_rule_chunk(float* S, int head_k, int head_v, const float* q, const float* k, int64_t qk_stride,
                      const float* v, int64_t v_stride, const float* beta, const float* log_decay, int n, float scale,
                      float* out, int64_t out_stride, float* scratch);

}  // namespace ms
