#include "model/mla_attention.h"

#include <algorithm>

#include "ops/linear.h"
#include "ops/norm.h"

namespace ms {

namespace {

// Head h's matrix of a stack of n_head matrices stored as one 2-D tensor.
Tensor head_matrix(const Tensor& w, int n_head, int h) {
    Tensor m = w;
    m.rows = w.rows / n_head;
    m.data = w.data + size_t(h) * size_t(m.rows) * w.row_bytes();
    return m;
}

AttentionShape latent_shape(const MlaShape& s) {
    return AttentionShape{s.n_head, 1, s.row(), s.kv_lora, s.scale, 0, nullptr};
}

size_t elt_bytes(GgmlType t) { return t == GgmlType::F16 ? 2 : 4; }

}  // namespace

uint64_t MlaLayer::weight_bytes() const {
    uint64_t b = 0;
    for (const Tensor* t : {&wq, &wq_a, &wq_b, &wkv_a, &wk_b, &wv_b, &wo}) b += t->bytes();
    return b;
}

KvLayer mla_kv_layer(const MlaShape& s, GgmlType type, uint8_t* rows) {
    return KvLayer{type, s.row(), s.row(), rows, rows, 0, 0};
}

int64_t mla_row_bytes(const MlaShape& s, GgmlType type) { return int64_t(s.row()) * int64_t(elt_bytes(type)); }

int64_t mla_full_kv_bytes(const MlaShape& s, GgmlType type) {
    return int64_t(s.n_head) * (s.q_head() + s.v) * int64_t(elt_bytes(type));
}

void MlaScratch::init(const MlaShape& s, int max_batch, int64_t n_ctx, int n_threads, int top_k) {
    const size_t B = size_t(max_batch), H = size_t(s.n_head);
    qa.resize(B * size_t(s.q_lora) * 4);
    q.resize(B * H * size_t(s.q_head()) * 4);
    kv.resize(B * size_t(s.row()) * 4);
    q_lat.resize(B * H * size_t(s.row()) * 4);
    head_in.resize(B * size_t(std::max(s.nope, s.kv_lora)) * 4);
    head_out.resize(B * size_t(std::max(s.kv_lora, s.v)) * 4);
    lat.resize(B * H * size_t(s.kv_lora) * 4);
    o.resize(B * H * size_t(s.v) * 4);
    const KvLayer f32_rows = mla_kv_layer(s, GgmlType::F32, nullptr);  // the widest rows
    const size_t floats = top_k > 0 ? size_t(n_threads) * attention_selected_scratch_floats(latent_shape(s), f32_rows, top_k)
                                    : attention_scratch_floats(latent_shape(s), n_ctx, n_threads);
    scores.resize(floats * 4);
}

uint64_t MlaScratch::bytes() const {
    uint64_t b = 0;
    for (const AlignedBuffer* p : {&qa, &q, &kv, &q_lat, &head_in, &head_out, &lat, &o, &scores}) b += p->size();
    return b;
}

size_t MlaScratch::acts_per_token(const std::vector<MlaLayer>& layers) {
    size_t act = 0;
    for (const MlaLayer& l : layers) {
        const Tensor* in[2] = {l.wq.empty() ? &l.wq_a : &l.wq, &l.wkv_a};
        act = std::max({act, linear_many_scratch_bytes(in, 2, 1), linear_scratch_bytes(l.wk_b, 1),
                        linear_scratch_bytes(l.wv_b, 1), linear_scratch_bytes(l.wo, 1)});
        if (!l.wq_b.empty()) act = std::max(act, linear_scratch_bytes(l.wq_b, 1));
    }
    return act;
}

void mla_project(ThreadPool& pool, const MlaShape& s, float rms_eps, const Rope& rope, const MlaLayer& l,
                 const float* x, int n, int64_t pos0, const float* cos_sin, const KvLayer& kv, MlaScratch& sc) {
    const int H = s.n_head, QH = s.q_head(), R = s.row();
    float* q = sc.q.f32();
    float* ckv = sc.kv.f32();
    float* q_lat = sc.q_lat.f32();
    float* in = sc.head_in.f32();
    float* hout = sc.head_out.f32();

    // q (directly or through its compression) and the compressed row share x.
    const bool q_lora = l.wq.empty();
    const Tensor* w[2] = {q_lora ? &l.wq_a : &l.wq, &l.wkv_a};
    float* const y[2] = {q_lora ? sc.qa.f32() : q, ckv};
    linear_many(pool, w, 2, x, n, y, sc.acts);
    if (q_lora) {
        float* qa = sc.qa.f32();
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                rms_norm(qa + t * s.q_lora, l.q_a_norm.f32(), s.q_lora, rms_eps, qa + t * s.q_lora);
            }
        });
        linear(pool, l.wq_b, qa, n, q, sc.acts);
    }

    // The cache row: normed latent c, then k_pe roped; the queries' rope parts
    // roped at the same positions.
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; t++) {
            float* row = ckv + t * R;
            rms_norm(row, l.kv_a_norm.f32(), s.kv_lora, rms_eps, row);
            rope_apply(rope, cos_sin + t * rope.n_rot, row + s.kv_lora, 1, s.rope);
            rope_apply(rope, cos_sin + t * rope.n_rot, q + t * H * QH + s.nope, H, QH);
            kv_store(kv, pos0 + t, row, nullptr);  // V is a view of K
        }
    });

    // Each head's q_nope into latent space: q_lat head = [k_b[h] . q_nope | q_pe].
    for (int h = 0; h < H; h++) {
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                std::copy_n(q + (t * H + h) * QH, s.nope, in + t * s.nope);
            }
        });
        linear(pool, head_matrix(l.wk_b, H, h), in, n, hout, sc.acts);
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                float* ql = q_lat + (t * H + h) * R;
                std::copy_n(hout + t * s.kv_lora, s.kv_lora, ql);
                std::copy_n(q + (t * H + h) * QH + s.nope, s.rope, ql + s.kv_lora);
            }
        });
    }
}

void mla_attend(ThreadPool& pool, const MlaShape& s, const MlaLayer& l, int n, int64_t pos0, const KvLayer& kv,
                int64_t n_ctx, const MlaSelection* sel, MlaScratch& sc, float* out) {
    const int H = s.n_head;
    const float* q_lat = sc.q_lat.f32();
    float* in = sc.head_in.f32();
    float* hout = sc.head_out.f32();
    float* lat = sc.lat.f32();
    float* o = sc.o.f32();
    if (sel) {
        attention_selected(pool, latent_shape(s), kv, q_lat, n, sel->sel, sel->n_sel, sel->top_k, sc.scores.f32(),
                           lat);
    } else {
        attention(pool, latent_shape(s), kv, q_lat, n, pos0, n_ctx, sc.scores.f32(), lat);
    }

    // Each head's latent output through its attn_v_b, heads side by side.
    for (int h = 0; h < H; h++) {
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) {
                std::copy_n(lat + (t * H + h) * s.kv_lora, s.kv_lora, in + t * s.kv_lora);
            }
        });
        linear(pool, head_matrix(l.wv_b, H, h), in, n, hout, sc.acts);
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) std::copy_n(hout + t * s.v, s.v, o + (t * H + h) * s.v);
        });
    }
    linear(pool, l.wo, o, n, out, sc.acts);
}

void mla_attention_block(ThreadPool& pool, const MlaShape& s, float rms_eps, const Rope& rope, const MlaLayer& l,
                         const float* x, int n, int64_t pos0, const float* cos_sin, const KvLayer& kv, int64_t n_ctx,
                         MlaScratch& sc, float* out) {
    mla_project(pool, s, rms_eps, rope, l, x, n, pos0, cos_sin, kv, sc);
    mla_attend(pool, s, l, n, pos0, kv, n_ctx, nullptr, sc, out);
}

}  // namespace ms
