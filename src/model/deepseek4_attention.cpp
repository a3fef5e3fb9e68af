#include "model/deepseek4_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/activation.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "quant/dequant.h"

namespace ms {

namespace {

// Eight running sums, so the compiler keeps them in one vector register
// (one fixed order: the same bits whatever the thread or SIMD level).
float dot(const float* a, const float* b, int64_t n) {
    float s[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    }
    float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; i++) t += a[i] * b[i];
    return t;
}

// Token `pos`'s values a and scores s (c.in_width() each) join the ring of
// unpooled rows (`rows` rows of [a | s + ape]); when pos completes a block,
// its vector is pooled into blocks (c.width floats per block), normed and
// roped. tmp: c.in_width() + rope.n_rot floats.
void compress_token(const Dsv4Compressor& c, int ratio, int64_t pos, const float* a, const float* s, float* ring,
                    int64_t rows, float* blocks, const Rope& rope, float eps, float* tmp) {
    const int64_t in = c.in_width(), W = c.width;
    float* row = ring + (pos % rows) * 2 * in;
    dequantize_row(c.ape.type, c.ape.row(pos % ratio), tmp, in);
    std::memcpy(row, a, size_t(in) * 4);
    for (int64_t i = 0; i < in; i++) row[in + i] = s[i] + tmp[i];
    if ((pos + 1) % ratio != 0) return;

    // Per channel, a softmax over the block's entries: with overlap, the
    // previous block's tokens (first halves; none for block 0) and this
    // block's (second halves).
    const int64_t b = pos / ratio, first = b * ratio;
    const bool prev = c.overlap && b > 0;
    const int64_t half = c.overlap ? W : 0;
    float* out = blocks + b * W;
    for (int64_t j = 0; j < W; j++) {
        float max = -INFINITY;
        for (int i = 0; i < ratio; i++) {
            if (prev) max = std::max(max, ring[((first - ratio + i) % rows) * 2 * in + in + j]);
            max = std::max(max, ring[((first + i) % rows) * 2 * in + in + half + j]);
        }
        float sum = 0, acc = 0;
        for (int i = 0; i < ratio; i++) {
            if (prev) {
                const float* r = ring + ((first - ratio + i) % rows) * 2 * in;
                const float e = std::exp(r[in + j] - max);
                sum += e;
                acc += e * r[j];
            }
            const float* r = ring + ((first + i) % rows) * 2 * in;
            const float e = std::exp(r[in + half + j] - max);
            sum += e;
            acc += e * r[half + j];
        }
        out[j] = acc / sum;
    }
    rms_norm(out, c.norm.f32(), W, eps, out);
    float* cs = tmp + in;
    rope_angles(rope, first, cs);
    rope_apply(rope, cs, out + W - rope.n_rot, 1, int(W));
}

// out[0..k) = the k blocks of the best scores (the lower block on a tie), in
// ascending order; order: nb ints of scratch.
void pick_blocks(const float* score, int64_t nb, int k, int32_t* order, int32_t* out) {
    for (int64_t b = 0; b < nb; b++) order[b] = int32_t(b);
    std::nth_element(order, order + k, order + nb, [&](int32_t a, int32_t b) {
        return score[a] > score[b] || (score[a] == score[b] && a < b);
    });
    std::copy(order, order + k, out);
    std::sort(out, out + k);
}

}  // namespace

double dsv4_state_bytes_per_token(const Dsv4AttentionLayer& l) {
    if (l.ratio == 0) return 0;
    return 4.0 * double(l.comp.width + (l.index.empty() ? 0 : l.index.width)) / double(l.ratio);
}

void Dsv4AttentionState::init(const Dsv4AttentionShape& sh, const std::vector<Dsv4AttentionLayer>& layers,
                              int max_batch, int64_t n_ctx, int n_threads) {
    const int64_t D = sh.head_dim, B = max_batch;
    window_ = sh.window;
    window_rows_ = std::min<int64_t>(n_ctx, sh.window + B - 1);
    layers_.assign(layers.size(), Layer{});
    int64_t at = 0, comp_in = 0, index_in = 0, ape = 0;
    max_blocks_ = 0;
    for (size_t il = 0; il < layers.size(); il++) {
        const Dsv4AttentionLayer& l = layers[il];
        Layer& s = layers_[il];
        s.window = at;
        at += window_rows_ * D;
        if (l.ratio == 0) continue;
        s.ratio = l.ratio;
        s.overlap = l.comp.overlap;
        s.n_blocks = n_ctx / l.ratio;
        max_blocks_ = std::max(max_blocks_, s.n_blocks);
        s.pool_rows = l.comp.overlap ? 2 * l.ratio : l.ratio;
        // A compressor's unpooled rows, then its blocks.
        auto place = [&](const Dsv4Compressor& c, int64_t* pool, int64_t* blocks, int64_t* in_max) {
            *pool = at;
            at += s.pool_rows * 2 * c.in_width();
            *blocks = at;
            at += s.n_blocks * c.width;
            *in_max = std::max(*in_max, c.in_width());
            ape = std::max(ape, c.in_width());
        };
        place(l.comp, &s.pool, &s.blocks, &comp_in);
        if (!l.index.empty()) place(l.index, &s.index_pool, &s.index_keys, &index_in);
    }
    data_.resize(size_t(at) * 4);
    const size_t b = size_t(B) * 4;
    q_lat_.resize(b * size_t(sh.q_lora));
    q_.resize(b * size_t(sh.n_head) * size_t(D));
    att_.resize(b * size_t(sh.n_head) * size_t(D));
    kv_.resize(b * size_t(D));
    comp_a_.resize(b * size_t(comp_in));
    comp_s_.resize(b * size_t(comp_in));
    index_a_.resize(b * size_t(index_in));
    index_s_.resize(b * size_t(index_in));
    index_q_.resize(index_in ? b * size_t(sh.index_heads) * size_t(sh.index_dim) : 0);
    index_w_.resize(index_in ? b * size_t(sh.index_heads) : 0);
    chosen_.resize(index_in ? b * size_t(sh.top_k) : 0);
    const int64_t group_width = int64_t(sh.n_head / sh.n_group) * D;
    group_in_.resize(b * size_t(group_width));
    group_out_.resize(b * size_t(sh.out_lora));
    low_.resize(b * size_t(sh.n_group) * size_t(sh.out_lora));
    // Attention's scores over window + blocks; the indexer's scores and the
    // block numbers it ranks.
    per_thread_floats_ = (sh.window + max_blocks_) + 2 * max_blocks_;
    per_thread_.resize(size_t(n_threads) * size_t(per_thread_floats_) * 4);
    ape_.resize(size_t(ape + sh.n_rot) * 4);
}

uint64_t Dsv4AttentionState::bytes() const {
    uint64_t b = layers_.size() * sizeof(Layer);
    for (const AlignedBuffer* p : {&data_, &q_lat_, &q_, &kv_, &comp_a_, &comp_s_, &index_a_, &index_s_, &index_q_,
                                   &index_w_, &att_, &group_in_, &group_out_, &low_, &chosen_, &per_thread_, &ape_}) {
        b += p->size();
    }
    return b;
}

int64_t Dsv4AttentionState::rewind_limit(int64_t n, int64_t top) const {
    if (n == 0) return 0;
    // Continuing at n reads the window before it and the tokens of the
    // block it is in (and of the block before, with overlap): each ring holds
    // the positions [top - its rows, top).
    if (std::max<int64_t>(0, n - window_ + 1) < top - window_rows_) return 0;
    for (const Layer& l : layers_) {
        if (l.ratio == 0) continue;
        const int64_t start = std::max<int64_t>(0, (n / l.ratio - (l.overlap ? 1 : 0)) * l.ratio);
        if (start < top - l.pool_rows) return 0;
    }
    return n;
}

size_t dsv4_attention_acts_per_token(const std::vector<Dsv4AttentionLayer>& layers) {
    size_t act = 0;
    for (const Dsv4AttentionLayer& l : layers) {
        const Tensor* in[7] = {&l.q_a, &l.kv, &l.comp.kv, &l.comp.gate, &l.index.kv, &l.index.gate, &l.index_proj};
        const Tensor* lat[2] = {&l.q_b, &l.index_q_b};
        act = std::max({act, linear_many_scratch_bytes(in, l.comp.empty() ? 2 : l.index.empty() ? 4 : 7, 1),
                        linear_many_scratch_bytes(lat, l.index.empty() ? 1 : 2, 1), linear_scratch_bytes(l.out_b, 1)});
        // A group's slice of out_a: its heads' values as the input.
        const Tensor g{l.out_a.type, l.out_a.cols, 1, nullptr};
        act = std::max(act, linear_scratch_bytes(g, 1));
    }
    return act;
}

void dsv4_attention(ThreadPool& pool, const Dsv4AttentionShape& sh, const Dsv4AttentionLayer& l, int il,
                    Dsv4AttentionState& st, const float* xn, int n, int64_t pos0, const float* cos_sin_plain,
                    const float* cos_sin_comp, uint8_t* acts, float* out) {
    const int H = sh.n_head, D = sh.head_dim, R = sh.n_rot;
    const int64_t QD = int64_t(H) * D, QL = sh.q_lora;
    const Dsv4AttentionState::Layer& L = st.layers_[size_t(il)];
    const bool comp = l.ratio > 0, index = comp && !l.index.empty();
    const Rope& rope = comp ? sh.rope_comp : sh.rope_plain;
    const float* cos_sin = comp ? cos_sin_comp : cos_sin_plain;
    float* data = st.data_.f32();
    float* qa = st.q_lat_.f32();
    float* q = st.q_.f32();
    float* kv = st.kv_.f32();
    float* ca = st.comp_a_.f32();
    float* cs = st.comp_s_.f32();
    float* ia = st.index_a_.f32();
    float* is = st.index_s_.f32();
    float* iq = st.index_q_.f32();
    float* iw = st.index_w_.f32();
    float* att = st.att_.f32();
    float* window = data + L.window;
    const int64_t rows = st.window_rows_;

    // Every projection of the normed input, in one job.
    {
        const Tensor* w[7] = {&l.q_a, &l.kv, &l.comp.kv, &l.comp.gate, &l.index.kv, &l.index.gate, &l.index_proj};
        float* const y[7] = {qa, kv, ca, cs, ia, is, iw};
        linear_many(pool, w, !comp ? 2 : !index ? 4 : 7, xn, n, y, acts);
    }
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; t++) {
            rms_norm(qa + t * QL, l.q_a_norm.f32(), QL, sh.eps, qa + t * QL);
            float* k = kv + t * D;
            rms_norm(k, l.kv_norm.f32(), D, sh.eps, k);
            rope_apply(rope, cos_sin + t * R, k + D - R, 1, D);
            std::memcpy(window + ((pos0 + t) % rows) * D, k, size_t(D) * 4);
        }
    });
    {
        const Tensor* w[2] = {&l.q_b, &l.index_q_b};
        float* const y[2] = {q, iq};
        linear_many(pool, w, index ? 2 : 1, qa, n, y, acts);
    }
    const int IH = sh.index_heads, ID = sh.index_dim;
    const float index_scale = 1.0f / std::sqrt(float(ID) * float(IH));
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; t++) {
            float* qt = q + t * QD;
            for (int h = 0; h < H; h++) rms_norm(qt + h * D, nullptr, D, sh.eps, qt + h * D);
            rope_apply(rope, cos_sin + t * R, qt + D - R, H, D);
            if (!index) continue;
            rope_apply(sh.rope_comp, cos_sin_comp + t * R, iq + t * IH * ID + ID - R, IH, ID);
            for (int h = 0; h < IH; h++) iw[t * IH + h] *= index_scale;
        }
    });

    // Blocks completed by this batch's tokens, in position order (a
    // query sees only the blocks completed at or before its position).
    if (comp) {
        float* tmp = st.ape_.f32();
        for (int t = 0; t < n; t++) {
            const int64_t in = l.comp.in_width();
            compress_token(l.comp, l.ratio, pos0 + t, ca + t * in, cs + t * in, data + L.pool, L.pool_rows,
                           data + L.blocks, sh.rope_comp, sh.eps, tmp);
            if (!index) continue;
            const int64_t iin = l.index.in_width();
            compress_token(l.index, l.ratio, pos0 + t, ia + t * iin, is + t * iin, data + L.index_pool, L.pool_rows,
                           data + L.index_keys, sh.rope_comp, sh.eps, tmp);
        }
    }

    // The indexer's choice: the top_k visible blocks by
    // sum_h w_h * max(0, iq_h . k_b) (the lower block on a tie), when there
    // are more than top_k.
    int32_t* chosen = reinterpret_cast<int32_t*>(st.chosen_.data());
    const int K = sh.top_k;
    const float* index_keys = index ? data + L.index_keys : nullptr;
    auto block_score = [&](int64_t t, int64_t blk) {
        float s = 0;
        for (int h = 0; h < IH; h++) {
            s += iw[t * IH + h] * std::max(0.0f, dot(iq + (t * IH + h) * ID, index_keys + blk * ID, ID));
        }
        return s;
    };
    // Per thread: the scores, then the block numbers being ranked.
    auto scratch = [&](int thread) {
        return st.per_thread_.f32() + thread * st.per_thread_floats_ + sh.window + st.max_blocks_;
    };
    if (index && n == 1 && (pos0 + 1) / l.ratio > K) {
        // Decode: the blocks spread over the pool.
        const int64_t nb = (pos0 + 1) / l.ratio;
        float* score = scratch(0);
        pool.parallel_for(nb, [&](int64_t b, int64_t e) {
            for (int64_t blk = b; blk < e; blk++) score[blk] = block_score(0, blk);
        });
        pick_blocks(score, nb, K, reinterpret_cast<int32_t*>(score + st.max_blocks_), chosen);
    } else if (index) {
        pool.parallel_for(n, [&](int64_t b, int64_t e, int thread) {
            float* score = scratch(thread);
            for (int64_t t = b; t < e; t++) {
                const int64_t nb = (pos0 + t + 1) / l.ratio;
                if (nb <= K) continue;
                for (int64_t blk = 0; blk < nb; blk++) score[blk] = block_score(t, blk);
                pick_blocks(score, nb, K, reinterpret_cast<int32_t*>(score + st.max_blocks_), chosen + t * K);
            }
        });
    }

    // Each (token, head): softmax over the window's vectors and the chosen
    // blocks plus the sink; the output rotated back by the query's rope.
    const float scale = 1.0f / std::sqrt(float(D));
    const float* blocks = comp ? data + L.blocks : nullptr;
    pool.parallel_for(int64_t(n) * H, [&](int64_t b, int64_t e, int thread) {
        float* score = st.per_thread_.f32() + thread * st.per_thread_floats_;
        for (int64_t i = b; i < e; i++) {
            const int64_t t = i / H;
            const int h = int(i % H);
            const int64_t pos = pos0 + t;
            const float* qh = q + t * QD + int64_t(h) * D;
            const int64_t w0 = std::max<int64_t>(0, pos - sh.window + 1), nw = pos - w0 + 1;
            const int64_t nb = comp ? (pos + 1) / l.ratio : 0;
            const bool picked = index && nb > K;
            const int64_t nc = picked ? K : nb;
            auto key = [&](int64_t j) -> const float* {
                if (j < nw) return window + ((w0 + j) % rows) * D;
                const int64_t blk = picked ? chosen[t * K + (j - nw)] : j - nw;
                return blocks + blk * D;
            };
            for (int64_t j = 0; j < nw + nc; j++) score[j] = dot(qh, key(j), D);
            softmax(score, nw + nc, scale, l.sinks.f32()[h]);
            float* o = att + t * QD + int64_t(h) * D;
            std::fill(o, o + D, 0.0f);
            for (int64_t j = 0; j < nw + nc; j++) {
                const float* v = key(j);
                const float p = score[j];
                for (int d = 0; d < D; d++) o[d] += p * v[d];
            }
            rope_apply_inverse(rope, cos_sin + t * R, o + D - R, 1, D);
        }
    });

    // Grouped low-rank output: group g's heads times its rows of out_a, the
    // groups' results side by side through out_b.
    const int G = sh.n_group, OL = sh.out_lora;
    const int64_t GW = QD / G;
    float* gin = st.group_in_.f32();
    float* gout = st.group_out_.f32();
    float* low = st.low_.f32();
    for (int g = 0; g < G; g++) {
        for (int t = 0; t < n; t++) std::memcpy(gin + t * GW, att + t * QD + g * GW, size_t(GW) * 4);
        const Tensor wg{l.out_a.type, l.out_a.cols, OL, l.out_a.row(int64_t(g) * OL)};
        linear(pool, wg, gin, n, gout, acts);
        for (int t = 0; t < n; t++) std::memcpy(low + (int64_t(t) * G + g) * OL, gout + t * OL, size_t(OL) * 4);
    }
    linear(pool, l.out_b, low, n, out, acts);
}

}  // namespace ms
