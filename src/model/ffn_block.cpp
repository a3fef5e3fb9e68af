#include "model/ffn_block.h"

#include <algorithm>

#include "ops/activation.h"
#include "ops/linear.h"

namespace ms {

void FfnScratch::init(const std::vector<FfnLayer>& layers, const std::vector<ExpertLayer>& experts, int max_batch,
                      int k, int64_t n_embd) {
    const size_t B = size_t(max_batch);
    int n_expert = 0;
    for (const ExpertLayer& e : experts) n_expert = std::max(n_expert, e.n_expert);
    size_t ff = 0;
    bool shared = false;
    for (const FfnLayer& l : layers) {
        for (const DenseFfn* f : {&l.dense, &l.shared}) {
            if (!f->empty()) ff = std::max(ff, size_t(f->gate.rows));
        }
        shared = shared || !l.shared.empty();
    }
    logits.resize(B * size_t(n_expert) * 4);
    for (AlignedBuffer* b : {&ids, &weights, &next_ids, &next_weights}) b->resize(B * size_t(k) * 4);
    next_union.resize(size_t(n_expert) * 4);
    next_votes.resize(size_t(n_expert) * 4);
    hidden_gate.resize(B * ff * 4);
    hidden_up.resize(B * ff * 4);
    shared_out.resize(shared ? B * size_t(n_embd) * 4 : 0);
    shared_gate.resize(shared ? B * 4 : 0);
    moe.init(experts, max_batch, k);
}

uint64_t FfnScratch::bytes() const {
    uint64_t b = moe.bytes();
    for (const AlignedBuffer* p : {&logits, &ids, &weights, &next_ids, &next_weights, &next_union, &next_votes,
                                   &hidden_gate, &hidden_up, &shared_out, &shared_gate}) {
        b += p->size();
    }
    return b;
}

size_t FfnScratch::acts_per_token(const std::vector<FfnLayer>& layers) {
    size_t act = 0;
    for (const FfnLayer& l : layers) {
        for (const DenseFfn* f : {&l.dense, &l.shared}) {
            if (f->empty()) continue;
            const Tensor* gu[2] = {&f->gate, &f->up};
            act = std::max({act, linear_many_scratch_bytes(gu, 2, 1), linear_scratch_bytes(f->down, 1)});
        }
        if (l.moe()) act = std::max(act, linear_scratch_bytes(l.router, 1));
        if (!l.shared_gate.empty()) act = std::max(act, linear_scratch_bytes(l.shared_gate, 1));
    }
    return act;
}

void dense_ffn(ThreadPool& pool, const DenseFfn& f, const float* x, int n, FfnScratch& s, float* out) {
    float* g = s.hidden_gate.f32();
    float* u = s.hidden_up.f32();
    const Tensor* gu_w[2] = {&f.gate, &f.up};
    float* const gu_y[2] = {g, u};
    linear_many(pool, gu_w, 2, x, n, gu_y, s.acts);
    const int64_t total = int64_t(n) * f.gate.rows;
    pool.parallel_for(total, [&](int64_t b, int64_t e) {
        if (f.clamp > 0) {
            swiglu_clamp(g + b, u + b, e - b, f.clamp, g + b);
        } else {
            swiglu(g + b, u + b, e - b, g + b);
        }
    });
    linear(pool, f.down, g, n, out, s.acts);
}

void route_tokens(ThreadPool& pool, const FfnLayer& l, const float* x, int n, int k, FfnScratch& s, int32_t* ids,
                  float* weights) {
    const int64_t n_expert = l.router.rows;
    float* logits = s.logits.f32();
    linear(pool, l.router, x, n, logits, s.acts);
    if (!l.router_bias.empty()) {
        for (int t = 0; t < n; t++) add_to(logits + t * n_expert, l.router_bias.f32(), n_expert);
    }
    route_experts(l.routing, logits, l.selection_bias.empty() ? nullptr : l.selection_bias.f32(), n, int(n_expert),
                  k, ids ? ids : reinterpret_cast<int32_t*>(s.ids.data()), weights ? weights : s.weights.f32());
}

ExpertVectors expert_biases(const FfnLayer& l) {
    ExpertVectors v;
    v.gate_bias = l.gate_bias.empty() ? nullptr : l.gate_bias.f32();
    v.up_bias = l.up_bias.empty() ? nullptr : l.up_bias.f32();
    v.down_bias = l.down_bias.empty() ? nullptr : l.down_bias.f32();
    return v;
}

FfnCost ffn_block(ThreadPool& pool, ExpertSource& source, const ExpertLayer& experts, const FfnLayer& l,
                  const float* x, int n, int k, FfnScratch& s, float* out, const ExpertHint& next) {
    FfnCost cost;
    if (!l.moe()) {
        dense_ffn(pool, l.dense, x, n, s, out);
        cost.dense_bytes = l.dense.weight_bytes();
        return cost;
    }
    const ExpertVectors biases = expert_biases(l);
    // The shared expert computes while the routed ones are read; its output
    // is added after the routed sum, as the reference adds them.
    const int64_t E = experts.down.rows;
    float* sh = s.shared_out.f32();
    const bool gated = !l.shared_gate.empty();
    struct Shared {
        ThreadPool& pool;
        const FfnLayer& l;
        const float* x;
        int n;
        FfnScratch& s;
        float* sh;
        bool gated;
    } shared{pool, l, x, n, s, sh, gated};
    WhileReading while_reading;
    if (!l.shared.empty()) {
        while_reading.fn = [](void* ctx) {
            Shared& c = *static_cast<Shared*>(ctx);
            dense_ffn(c.pool, c.l.shared, c.x, c.n, c.s, c.sh);
            if (c.gated) linear(c.pool, c.l.shared_gate, c.x, c.n, c.s.shared_gate.f32(), c.s.acts);
        };
        while_reading.ctx = &shared;
    }
    cost.moe = moe_forward(pool, source, experts, x, n, reinterpret_cast<const int32_t*>(s.ids.data()),
                           s.weights.f32(), k, s.moe, out, next, biases, while_reading);
    if (l.shared.empty()) return cost;
    cost.dense_bytes = l.shared.weight_bytes() + l.shared_gate.bytes();
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; t++) {
            float* y = sh + t * E;
            if (gated) {
                const float g = sigmoid(s.shared_gate.f32()[t]);
                for (int64_t i = 0; i < E; i++) y[i] *= g;
            }
            add_to(out + t * E, y, E);
        }
    });
    return cost;
}

}  // namespace ms
