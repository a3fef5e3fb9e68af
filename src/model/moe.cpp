#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/activation.h"
#include "ops/gates.h"
#include "ops/linear.h"
#include "quant/dot.h"
#include "telemetry/routing_trace.h"
#include "telemetry/trace.h"

namespace ms {

namespace {

// id[0..k) = the k experts with the largest score(e), best first (the lower
// id on a tie).
template <class Score>
void select_topk(int n_expert, int k, Score score, int32_t* id) {
    for (int r = 0; r < k; r++) {
        int best = -1;
        for (int e = 0; e < n_expert; e++) {
            bool taken = false;
            for (int q = 0; q < r; q++) taken = taken || id[q] == e;
            if (!taken && (best < 0 || score(e) > score(best))) best = e;
        }
        id[r] = best;
    }
}

// The k weights divided by their sum (kept above a tiny floor, as the
// reference clamps it).
void renormalize(float* w, int k) {
    double s = 0;
    for (int r = 0; r < k; r++) s += double(w[r]);
    const float total = renorm_total(s);
    for (int r = 0; r < k; r++) w[r] /= total;
}

// Sigmoid or SqrtSoftplus scores of n logits, in place.
void gate_scores(Gating g, float* l, int n) {
    if (g == Gating::Sigmoid) {
        for (int e = 0; e < n; e++) l[e] = sigmoid(l[e]);
    } else {
        for (int e = 0; e < n; e++) l[e] = std::sqrt(softplus(l[e]));
    }
}

}  // namespace

void route_softmax_topk(const float* logits, int n_tok, int n_expert, int k, bool renorm, int32_t* ids,
                        float* weights) {
    // Select on the logits (softmax keeps their order), then take the chosen
    // experts' probabilities from a softmax over all experts, as the
    // reference does.
    for (int t = 0; t < n_tok; t++) {
        const float* l = logits + int64_t(t) * n_expert;
        int32_t* id = ids + int64_t(t) * k;
        float* w = weights + int64_t(t) * k;
        select_topk(n_expert, k, [&](int e) { return l[e]; }, id);
        float max = l[id[0]];
        double sum = 0;
        for (int e = 0; e < n_expert; e++) sum += double(std::exp(l[e] - max));
        const float inv = float(1.0 / sum);
        for (int r = 0; r < k; r++) w[r] = std::exp(l[id[r]] - max) * inv;
        if (renorm) renormalize(w, k);
    }
}

namespace {

// Bit g set: group g is one of the r.n_group_used groups whose two best
// scores have the largest sum (ops/gates.h, as the kernels choose them);
// every bit set without groups.
template <class Score>
uint64_t chosen_groups(const Routing& r, int n_expert, Score score) {
    if (r.n_group <= 1) return ~uint64_t(0);
    const int per = n_expert / r.n_group;
    float sum[kMaxExpertGroups];
    for (int g = 0; g < r.n_group; g++) sum[g] = group_score(score, g * per, (g + 1) * per);
    return best_groups(sum, r.n_group, r.n_group_used);
}

}  // namespace

void route_experts(const Routing& r, float* logits, const float* selection_bias, int n_tok, int n_expert, int k,
                   int32_t* ids, float* weights) {
    if (r.gating == Gating::Softmax && r.n_group <= 1) {
        route_softmax_topk(logits, n_tok, n_expert, k, r.renorm, ids, weights);
    } else {
        const int per = r.n_group > 1 ? n_expert / r.n_group : n_expert;
        for (int t = 0; t < n_tok; t++) {
            float* l = logits + int64_t(t) * n_expert;
            int32_t* id = ids + int64_t(t) * k;
            float* w = weights + int64_t(t) * k;
            if (r.gating == Gating::SoftmaxChosen) {
                select_topk(n_expert, k, [&](int e) { return l[e]; }, id);
                for (int q = 0; q < k; q++) w[q] = l[id[q]];
                softmax(w, k);
            } else {
                if (r.gating == Gating::Sigmoid || r.gating == Gating::SqrtSoftplus) {
                    gate_scores(r.gating, l, n_expert);
                } else {  // Softmax with groups: the probabilities as route_softmax_topk takes them
                    float max = l[0];
                    for (int e = 1; e < n_expert; e++) max = std::max(max, l[e]);
                    double sum = 0;
                    for (int e = 0; e < n_expert; e++) sum += double(std::exp(l[e] - max));
                    const float inv = float(1.0 / sum);
                    for (int e = 0; e < n_expert; e++) l[e] = std::exp(l[e] - max) * inv;
                }
                auto biased = [&](int e) { return selection_bias ? l[e] + selection_bias[e] : l[e]; };
                const uint64_t groups = chosen_groups(r, n_expert, biased);
                select_topk(
                    n_expert, k,
                    [&](int e) { return (groups >> (e / per) & 1) ? biased(e) : -INFINITY; }, id);
                for (int q = 0; q < k; q++) w[q] = l[id[q]];
            }
            if (r.renorm) renormalize(w, k);
        }
    }
    if (r.scale != 1.0f) {
        for (int64_t i = 0; i < int64_t(n_tok) * k; i++) weights[i] *= r.scale;
    }
}

void weigh_chosen_experts(const Routing& r, float* logits, int n_tok, int n_expert, int k, const int32_t* ids,
                          float* weights) {
    for (int t = 0; t < n_tok; t++) {
        float* l = logits + int64_t(t) * n_expert;
        float* w = weights + int64_t(t) * k;
        gate_scores(r.gating, l, n_expert);
        for (int q = 0; q < k; q++) w[q] = l[ids[int64_t(t) * k + q]];
        if (r.renorm) renormalize(w, k);
        for (int q = 0; q < k; q++) w[q] *= r.scale;
    }
}

ExpertHint expert_hint(int layer, const int32_t* ids, int n_tok, int k, int n_expert, int32_t* votes,
                       int32_t* hint) {
    if (n_tok == 1) return ExpertHint{layer, ids, k};
    std::fill(votes, votes + n_expert, 0);
    for (int i = 0; i < n_tok * k; i++) votes[ids[i]]++;
    int m = 0;
    for (int e = 0; e < n_expert; e++)
        if (votes[e] >= 3) hint[m++] = e;
    std::stable_sort(hint, hint + m, [&](int32_t a, int32_t b) { return votes[a] > votes[b]; });
    return ExpertHint{layer, hint, m};
}

void MoeScratch::init(const std::vector<ExpertLayer>& layers, int max_batch, int k) {
    max_batch_ = max_batch;
    k_ = k;
    size_t gate_act = 0, up_act = 0, down_act = 0, ff = 0, embd = 0;
    int n_expert = 0;
    bool weight_input = false;
    for (const ExpertLayer& l : layers) {
        if (l.n_expert == 0 || l.rows) continue;  // rows are not run as experts
        weight_input = weight_input || l.weight_input;
        gate_act = std::max(gate_act, act_bytes(l.gate.type, l.gate.cols));
        up_act = std::max(up_act, act_bytes(l.up.type, l.up.cols));
        down_act = std::max(down_act, act_bytes(l.down.type, l.down.cols));
        ff = std::max(ff, size_t(l.gate.rows));
        embd = std::max(embd, size_t(l.down.rows));
        n_expert = std::max(n_expert, l.n_expert);
    }
    const size_t b = size_t(max_batch);
    batch_rows_ = std::max(max_batch, k);
    const size_t rows = size_t(batch_rows_);
    acts_gate_.resize(gate_act * b);
    acts_up_.resize(up_act * b);
    scaled_.resize(weight_input ? embd * rows * 4 : 0);
    rows_gate_.resize(gate_act * rows);
    rows_up_.resize(up_act * rows);
    gate_.resize(ff * rows * 4);
    up_.resize(ff * rows * 4);
    acts_down_.resize(down_act * rows);
    down_.resize(embd * rows * 4);
    slots_.resize(embd * b * size_t(k) * 4);
    groups_.resize(n_expert, b * size_t(k));
}

void ExpertGroups::resize(int n_expert, size_t max_entries) {
    count.assign(size_t(n_expert), 0);
    first.assign(size_t(n_expert), 0);
    entries.assign(max_entries, 0);
    used.assign(size_t(n_expert), 0);
    used_rows.assign(size_t(n_expert), 0);
}

void ExpertGroups::group(const int32_t* ids, int n) {
    std::fill(count.begin(), count.end(), 0);
    for (int i = 0; i < n; i++) count[size_t(ids[i])]++;
    n_used = 0;
    int start = 0;
    for (size_t e = 0; e < count.size(); e++) {
        first[e] = start;
        start += count[e];
        if (count[e] > 0) used_rows[size_t(n_used)] = count[e], used[size_t(n_used++)] = int32_t(e);
    }
    for (int i = 0; i < n; i++) entries[size_t(first[size_t(ids[i])]++)] = i;
    for (int j = 0; j < n_used; j++) first[size_t(used[size_t(j)])] -= count[size_t(used[size_t(j)])];
}

uint64_t MoeScratch::bytes() const {
    return acts_gate_.size() + acts_up_.size() + scaled_.size() + rows_gate_.size() + rows_up_.size() + gate_.size() + up_.size() +
           acts_down_.size() + down_.size() + slots_.size() + groups_.bytes();
}

namespace {

// gpt-oss's activation constants (the reference fixes them too).
constexpr float kOaiAlpha = 1.702f, kOaiLimit = 7.0f;

// Most experts moe_forward computes as one batch (a decode step's k, or
// more of a prefill chunk's while they fit the scratch's rows).
constexpr int kMaxBatchExperts = 64;

// y[t][r] += bias[r] for the m rows of y (`width` apart) and r in [r0, r1).
void add_bias_rows(float* y, int64_t width, int m, const float* bias, int64_t r0, int64_t r1) {
    for (int t = 0; t < m; t++) add_to(y + t * width + r0, bias + r0, r1 - r0);
}

// Converted rows of the tokens in entries[0..m) (each t*k + r), contiguous:
// the batch's rows themselves when they already are.
const uint8_t* gather_rows(const uint8_t* acts, size_t row, const int32_t* entries, int m, int k, int n_tok,
                           uint8_t* dst) {
    if (m == n_tok) return acts;  // every token uses this expert: rows in token order
    for (int i = 0; i < m; i++) std::memcpy(dst + size_t(i) * row, acts + size_t(entries[i] / k) * row, row);
    return dst;
}

}  // namespace

void ExpertSource::start_step(int n_tokens) {
    if (routing_trace) routing_trace->begin_call(n_tokens);
    begin_step(n_tokens);
}

void ExpertSource::start_decode_step(int n_seqs) {
    if (routing_trace) routing_trace->begin_call(n_seqs);
    begin_decode_step(n_seqs);
}

MoeCost moe_forward(ThreadPool& pool, ExpertSource& source, const ExpertLayer& layer, const float* x, int n_tok,
                    const int32_t* ids, const float* weights, int k, MoeScratch& s, float* out,
                    const ExpertHint& next, const ExpertVectors& vectors, const WhileReading& while_reading) {
    if (source.routing_trace) source.routing_trace->record(layer.layer, ids, n_tok, k);
    const int64_t n_embd = layer.gate.cols, n_ff = layer.gate.rows;
    const bool shared_acts = act_type(layer.gate.type) == act_type(layer.up.type);
    const Tensor gate_shape{layer.gate.type, n_embd, n_ff, nullptr};
    const Tensor up_shape{layer.up.type, n_embd, n_ff, nullptr};
    // Weighted inputs differ per (token, expert): converted per expert below.
    if (!layer.weight_input) {
        convert_acts(pool, gate_shape, x, n_tok, s.acts_gate_.data());
        if (!shared_acts) convert_acts(pool, up_shape, x, n_tok, s.acts_up_.data());
    }
    const uint8_t* acts_up = shared_acts ? s.acts_gate_.data() : s.acts_up_.data();
    const size_t gate_row = act_bytes(layer.gate.type, n_embd), up_row = act_bytes(layer.up.type, n_embd);

    ExpertGroups& g = s.groups_;
    g.group(ids, n_tok * k);
    const int n_used = g.n_used;

    float* G = s.gate_.f32();
    float* U = s.up_.f32();
    float* D = s.down_.f32();
    float* slots = s.slots_.f32();
    MoeCost cost;
    Trace* trace = active_trace();
    // Time blocked on the source since t0, into the cost and, for real waits
    // (hits come back in well under a microsecond), onto the timeline.
    auto waited = [&](int64_t t0) {
        const int64_t t1 = Trace::now_ns();
        cost.io_wait_s += double(t1 - t0) * 1e-9;
        if (trace && t1 - t0 >= 2000) trace->complete("io_wait", "layer", t0, t1, -1, "layer", layer.layer);
    };
    // The experts computed together: those in memory when the first of them
    // is, up to the scratch's rows. One pool job each for gate/up with the
    // activation, the hidden rows' conversion and down, whatever the batch's
    // size: a decode step's experts cost three waits on the slowest thread,
    // not three each. Every row is computed as it would be alone.
    struct Batch {
        int n = 0, rows = 0;
        int e[kMaxBatchExperts], m[kMaxBatchExperts], row0[kMaxBatchExperts];
        const int32_t* entries[kMaxBatchExperts];
        const uint8_t *ag[kMaxBatchExperts], *au[kMaxBatchExperts];
        Tensor wg[kMaxBatchExperts], wu[kMaxBatchExperts], wd[kMaxBatchExperts];
    } batch;
    const Tensor down_shape{layer.down.type, n_ff, n_embd, nullptr};
    const size_t down_row = act_bytes(layer.down.type, n_ff);
    // Adds expert index i (of group g0) with view v; false (nothing added)
    // when its rows do not fit beside the batch's.
    auto add = [&](int g0, int i, const ExpertView& v) {
        const int e = g.used[size_t(g0 + i)];
        const int m = g.count[size_t(e)];
        if (batch.n == kMaxBatchExperts || batch.rows + m > s.batch_rows_) return false;
        const int j = batch.n++;
        const int r0 = batch.rows;
        batch.rows += m;
        batch.e[j] = e;
        batch.m[j] = m;
        batch.row0[j] = r0;
        batch.entries[j] = g.entries.data() + g.first[size_t(e)];
        batch.wg[j] = Tensor{layer.gate.type, n_embd, n_ff, v.gate};
        batch.wu[j] = Tensor{layer.up.type, n_embd, n_ff, v.up};
        batch.wd[j] = Tensor{layer.down.type, n_ff, n_embd, v.down};
        const int32_t* entries = batch.entries[j];
        if (layer.weight_input) {
            // Each token's row times its weight, rounded for the kernels
            // after the product, as the reference rounds w x.
            float* rows = s.scaled_.f32() + int64_t(r0) * n_embd;
            for (int r = 0; r < m; r++) {
                const float w = weights[entries[r]];
                const float* xt = x + int64_t(entries[r] / k) * n_embd;
                for (int64_t c = 0; c < n_embd; c++) rows[r * n_embd + c] = w * xt[c];
            }
            uint8_t* cg = s.rows_gate_.data() + size_t(r0) * gate_row;
            convert_acts(pool, gate_shape, rows, m, cg);
            batch.ag[j] = cg;
            if (shared_acts) {
                batch.au[j] = cg;
            } else {
                uint8_t* cu = s.rows_up_.data() + size_t(r0) * up_row;
                convert_acts(pool, up_shape, rows, m, cu);
                batch.au[j] = cu;
            }
        } else {
            batch.ag[j] = gather_rows(s.acts_gate_.data(), gate_row, entries, m, k, n_tok,
                                      s.rows_gate_.data() + size_t(r0) * gate_row);
            batch.au[j] = shared_acts ? batch.ag[j]
                                      : gather_rows(acts_up, up_row, entries, m, k, n_tok,
                                                    s.rows_up_.data() + size_t(r0) * up_row);
        }
        cost.expert_bytes += layer.expert_bytes();
        return true;
    };
    auto run_batch = [&]() {
        // Gate and up rows of each expert (and their biases), then the
        // activation over the same rows: item j * n_ff + f is row f of
        // batch expert j.
        pool.parallel_for(int64_t(batch.n) * n_ff, [&](int64_t b, int64_t end) {
            for (int64_t i = b; i < end;) {
                const int j = int(i / n_ff);
                const int64_t f0 = i - int64_t(j) * n_ff, f1 = std::min(n_ff, end - int64_t(j) * n_ff);
                const int e = batch.e[j], m = batch.m[j];
                float* Gj = G + int64_t(batch.row0[j]) * n_ff;
                float* Uj = U + int64_t(batch.row0[j]) * n_ff;
                linear_rows(batch.wg[j], batch.ag[j], m, Gj, f0, f1);
                linear_rows(batch.wu[j], batch.au[j], m, Uj, f0, f1);
                if (vectors.gate_bias) add_bias_rows(Gj, n_ff, m, vectors.gate_bias + int64_t(e) * n_ff, f0, f1);
                if (vectors.up_bias) add_bias_rows(Uj, n_ff, m, vectors.up_bias + int64_t(e) * n_ff, f0, f1);
                for (int r = 0; r < m; r++) {
                    float* g_r = Gj + int64_t(r) * n_ff + f0;
                    const float* u_r = Uj + int64_t(r) * n_ff + f0;
                    const int64_t n = f1 - f0;
                    switch (layer.act) {
                        case GatedActivation::SwiGlu: swiglu(g_r, u_r, n, g_r); break;
                        case GatedActivation::GeGlu: geglu(g_r, u_r, n, g_r); break;
                        case GatedActivation::SwiGluOai: swiglu_oai(g_r, u_r, n, kOaiAlpha, kOaiLimit, g_r); break;
                        case GatedActivation::SwiGluClamp: swiglu_clamp(g_r, u_r, n, layer.clamp, g_r); break;
                    }
                }
                i = int64_t(j) * n_ff + f1;
            }
        });
        convert_acts(pool, down_shape, G, batch.rows, s.acts_down_.data());
        pool.parallel_for(int64_t(batch.n) * n_embd, [&](int64_t b, int64_t end) {
            for (int64_t i = b; i < end;) {
                const int j = int(i / n_embd);
                const int64_t r0 = i - int64_t(j) * n_embd, r1 = std::min(n_embd, end - int64_t(j) * n_embd);
                linear_rows(batch.wd[j], s.acts_down_.data() + size_t(batch.row0[j]) * down_row, batch.m[j],
                            D + int64_t(batch.row0[j]) * n_embd, r0, r1);
                i = int64_t(j) * n_embd + r1;
            }
        });
        for (int j = 0; j < batch.n; j++) {
            const int e = batch.e[j];
            const float* down_bias = vectors.down_bias ? vectors.down_bias + int64_t(e) * n_embd : nullptr;
            for (int r = 0; r < batch.m[j]; r++) {
                float* slot = slots + int64_t(batch.entries[j][r]) * n_embd;
                const float* d = D + int64_t(batch.row0[j] + r) * n_embd;
                if (vectors.scale) {
                    for (int64_t c = 0; c < n_embd; c++) slot[c] = d[c] * vectors.scale[e];
                } else {
                    std::memcpy(slot, d, size_t(n_embd) * 4);
                }
                if (down_bias) add_to(slot, down_bias, n_embd);
            }
        }
        batch.n = 0;
        batch.rows = 0;
    };
    for (int g0 = 0; g0 < n_used; g0 += source.capacity()) {
        const int group = std::min(n_used - g0, source.capacity());
        // Engines that read synchronously (mmap: page faults in memcpy)
        // block inside acquire and prefetch: that is waiting for I/O too.
        const int64_t a0 = Trace::now_ns();
        source.acquire(layer.layer, g.used.data() + g0, group, g.used_rows.data() + g0);
        if (g0 == 0 && next.n > 0) source.prefetch(next.layer, next.ids, next.n);
        waited(a0);
        if (g0 == 0 && while_reading.fn) while_reading.fn(while_reading.ctx);
        // An expert handed out that did not fit the last batch opens the next.
        int held = -1;
        ExpertView held_view;
        for (;;) {
            ExpertView v;
            int i = held;
            if (i >= 0) {
                v = held_view;
                held = -1;
            } else {
                const int64_t t0 = Trace::now_ns();
                i = source.next_ready(layer.layer, &v);
                waited(t0);
                if (i < 0) break;
            }
            add(g0, i, v);
            while ((i = source.next_ready_now(layer.layer, &v)) >= 0) {
                if (!add(g0, i, v)) {
                    held = i;
                    held_view = v;
                    break;
                }
            }
            run_batch();
        }
        source.release(layer.layer);
    }
    if (n_used == 0 && while_reading.fn) while_reading.fn(while_reading.ctx);

    // Combine in rank order: w0*e0 + w1*e1 + ..., each product rounded first,
    // as the reference's separate multiply and add steps do (weights already
    // applied to the input: e0 + e1 + ...).
    pool.parallel_for(n_tok, [&](int64_t b, int64_t end) {
        for (int64_t t = b; t < end; t++) {
            float* o = out + t * n_embd;
            for (int r = 0; r < k; r++) {
                const float w = layer.weight_input ? 1.0f : weights[t * k + r];
                const float* e = slots + (t * k + r) * n_embd;
                if (r == 0) {
                    for (int64_t i = 0; i < n_embd; i++) o[i] = w * e[i];
                } else {
                    for (int64_t i = 0; i < n_embd; i++) o[i] += w * e[i];
                }
            }
        }
    });
    return cost;
}

}  // namespace ms
