// y = W x for a weight tensor W with float activations, computed the way
// the reference engine computes them: the activations are first converted to
// the format the weight type's dot product wants (quant/dot.h), then rows are
// split over the thread pool. Per-row results do not depend on the thread
// count or on how many tokens are multiplied at once.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ops/tensor.h"
#include "ops/thread_pool.h"

namespace ms {

// Bytes of the converted-activation scratch linear needs for n_tok rows of
// w.cols elements.
size_t linear_scratch_bytes(const Tensor& w, int64_t n_tok);

// Converts x (n_tok rows of w.cols floats, contiguous) for w into act
// (linear_scratch_bytes(w, n_tok) bytes, 64-byte aligned), in parallel.
void convert_acts(ThreadPool& pool, const Tensor& w, const float* x, int64_t n_tok, uint8_t* act);

// y (n_tok rows of w.rows floats) = converted act rows times w's rows.
void linear_converted(ThreadPool& pool, const Tensor& w, const uint8_t* act, int64_t n_tok, float* y);

// linear_converted for output rows [r0, r1) only, on the calling thread.
void linear_rows(const Tensor& w, const uint8_t* act, int64_t n_tok, float* y, int64_t r0, int64_t r1);

// convert_acts then linear_converted, using act as scratch.
void linear(ThreadPool& pool, const Tensor& w, const float* x, int64_t n_tok, float* y, uint8_t* act);

// Bytes of the scratch linear_many needs: one converted copy of the input per
// distinct activation format among w[0..n_w), each 64-byte aligned.
size_t linear_many_scratch_bytes(const Tensor* const* w, int n_w, int64_t n_tok);

// y[i] (n_tok rows of w[i]->rows floats) = w[i] times x for i in [0, n_w), for
// matrices that share their input (attention's Q, K and V; all w[i]->cols
// equal): x is converted once per distinct activation format and the rows of
// all the matrices are split over the pool as one job (n_w linear() calls
// make a job per matrix, each ending with a wait on its slowest thread). The
// same bits as those calls. act holds
// linear_many_scratch_bytes(w, n_w, n_tok) bytes, 64-byte aligned.
void linear_many(ThreadPool& pool, const Tensor* const* w, int n_w, const float* x, int64_t n_tok, float* const* y,
                 uint8_t* act);

}  // namespace ms
