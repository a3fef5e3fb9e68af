#include "ops/linear.h"

#include <algorithm>

#include "quant/dot.h"

namespace ms {

namespace {

constexpr int kActTypes = int(ActType::Q8_K) + 1;

// Where linear_many keeps each activation format's converted copy of x, in
// the order of the formats' first use; rep[] is a weight wanting each one.
struct ActLayout {
    int n = 0;
    ActType type[kActTypes];
    const Tensor* rep[kActTypes];
    size_t offset[kActTypes];
    size_t bytes = 0;

    ActLayout(const Tensor* const* w, int n_w, int64_t n_tok) {
        for (int i = 0; i < n_w; i++) {
            const ActType a = act_type(w[i]->type);
            if (find(a) >= 0) continue;
            type[n] = a;
            rep[n] = w[i];
            offset[n] = bytes;
            bytes += (linear_scratch_bytes(*w[i], n_tok) + 63) & ~size_t(63);
            n++;
        }
    }
    int find(ActType a) const {
        for (int k = 0; k < n; k++) {
            if (type[k] == a) return k;
        }
        return -1;
    }
};

}  // namespace

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

size_t linear_many_scratch_bytes(const Tensor* const* w, int n_w, int64_t n_tok) {
    return ActLayout(w, n_w, n_tok).bytes;
}

void linear_many(ThreadPool& pool, const Tensor* const* w, int n_w, const float* x, int64_t n_tok, float* const* y,
                 uint8_t* act) {
    const ActLayout layout(w, n_w, n_tok);
    const int64_t cols = w[0]->cols;
    // Rows converted one at a time give the same bytes as convert_acts.
    auto convert = [&](int k, int64_t t) {
        const Tensor& r = *layout.rep[k];
        quantize_act(r.type, x + t * cols, act + layout.offset[k] + size_t(t) * act_bytes(r.type, cols), cols);
    };
    if (n_tok == 1) {
        for (int k = 0; k < layout.n; k++) convert(k, 0);
    } else {
        pool.parallel_for(layout.n * n_tok, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; i++) convert(int(i / n_tok), i % n_tok);
        });
    }
    int64_t total = 0;
    for (int i = 0; i < n_w; i++) total += w[i]->rows;
    pool.parallel_for(total, [&](int64_t b, int64_t e) {
        int64_t first = 0;  // w[i]'s row 0 in the union
        for (int i = 0; i < n_w; i++) {
            const int64_t r0 = std::max(b, first), r1 = std::min(e, first + w[i]->rows);
            if (r0 < r1) {
                const uint8_t* a = act + layout.offset[layout.find(act_type(w[i]->type))];
                linear_rows(*w[i], a, n_tok, y[i], r0 - first, r1 - first);
            }
            first += w[i]->rows;
        }
    });
}

}  // namespace ms
