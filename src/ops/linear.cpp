#include "ops/linear.h"

#include "quant/dot.h"

namespace ms {

size_t linear_scratch_bytes(const Tensor& w, int64_t n_tok) {
    return act_bytes(w.type, w.cols) * size_t(n_tok);
}

void convert_acts(ThreadPool& pool, const Tensor& w, const float* x, int64_t n_tok, uint8_t* act) {
    const size_t stride = act_bytes(w.type, w.cols);
    if (n_tok == 1) {
        quantize_act(w.type, x, act, w.cols);
        return;
    }
    pool.parallel_for(n_tok, [&](int64_t b, int64_t e) {
        quantize_acts(w.type, x + b * w.cols, act + size_t(b) * stride, w.cols, e - b);
    });
}

void linear_rows(const Tensor& w, const uint8_t* act, int64_t n_tok, float* y, int64_t r0, int64_t r1) {
    if (n_tok == 1) {
        matvec(w.type, w.data, act, y, w.cols, r0, r1);
    } else {
        matmul(w.type, w.data, w.rows, act, n_tok, y, w.cols, r0, r1);
    }
}

void linear_converted(ThreadPool& pool, const Tensor& w, const uint8_t* act, int64_t n_tok, float* y) {
    pool.parallel_for(w.rows, [&](int64_t r0, int64_t r1) { linear_rows(w, act, n_tok, y, r0, r1); });
}

void linear(ThreadPool& pool, const Tensor& w, const float* x, int64_t n_tok, float* y, uint8_t* act) {
    convert_acts(pool, w, x, n_tok, act);
    linear_converted(pool, w, act, n_tok, y);
}

}  // namespace ms
