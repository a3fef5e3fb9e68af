#include "model/layer_major.h"

#include <algorithm>

namespace ms {

void LayerMajorModel::forward(ModelState& st, ExpertSource& experts, ThreadPool& pool, const int32_t* tokens, int n,
                              float* logits, bool all_logits) const {
    const int64_t pos0 = st.n_past;
    experts.start_step(n);
    begin(st, experts, pool, tokens, n);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; t++) embed(st, t, tokens[t], pos0 + t);
    });
    before_layers(st, experts, pool, tokens, n);

    TimeSplit* time = n == 1 ? &st.decode_time : &st.prefill_time;
    time->calls++;
    // Layer by layer over all n tokens, in pieces of max_batch: a layer's
    // experts are read for its first piece and are still in the cache for
    // the others, so a long prompt reads each expert it needs once instead
    // of once per piece (the residual of every token waits between layers).
    const int B = st.options.max_batch;
    for (int il = 0; il < layers_run(); il++) {
        for (int c0 = 0; c0 < n; c0 += B) {
            const int nc = std::min(B, n - c0);
            PhaseTimer attn_time(time, Phase::Attention, il, attention_bytes(il));
            attend(st, st, pool, il, c0, nc, c0, pos0 + c0);
            attn_time.stop();
            // The next layer's experts are hinted from the layer's last piece.
            feed_forward(st, experts, pool, il, c0, nc, c0 + nc == n, time);
        }
    }
    const int first = all_logits ? 0 : n - 1;
    head(st, pool, first, n - first, logits);
    st.n_past += n;
    end(st, tokens, n);
}

void LayerMajorModel::forward_batch(ModelState* const* states, int n, ExpertSource& experts, ThreadPool& pool,
                                    const int32_t* tokens, float* logits) const {
    if (n > states[0]->options.max_batch || !batches()) {
        Model::forward_batch(states, n, experts, pool, tokens, logits);
        return;
    }
    pass_rows(states, nullptr, n, n, experts, pool, tokens, logits);
}

void LayerMajorModel::forward_rows(ModelState* const* states, const int* counts, int n, ExpertSource& experts,
                                   ThreadPool& pool, const int32_t* tokens, float* logits) const {
    int rows = 0;
    for (int i = 0; i < n; i++) rows += counts[i];
    if (rows > states[0]->options.max_batch || !batches()) {
        Model::forward_rows(states, counts, n, experts, pool, tokens, logits);
        return;
    }
    pass_rows(states, counts, n, rows, experts, pool, tokens, logits);
}

// The rows of sequence i are the count(i) after those of the ones before
// it, at its positions n_past..: embedded and attended per sequence (over
// its own cache, causally among its own rows, as forward() does a piece),
// the feed-forward half and the head over all rows at once.
void LayerMajorModel::pass_rows(ModelState* const* states, const int* counts, int n, int rows,
                                ExpertSource& experts, ThreadPool& pool, const int32_t* tokens, float* logits) const {
    ModelState& lead = *states[0];
    auto count = [&](int i) { return counts ? counts[i] : 1; };
    experts.start_decode_step(rows);
    for (int i = 0, r = 0; i < n; r += count(i), i++) begin(*states[i], experts, pool, tokens + r, count(i));
    if (!counts) {
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++) embed(lead, t, tokens[t], states[t]->n_past);
        });
    } else {
        for (int i = 0, r = 0; i < n; r += count(i), i++) {
            for (int j = 0; j < count(i); j++) embed(lead, r + j, tokens[r + j], states[i]->n_past + j);
        }
    }
    before_layers(lead, experts, pool, tokens, rows);

    TimeSplit* time = &lead.decode_time;
    time->calls++;
    for (int il = 0; il < layers_run(); il++) {
        PhaseTimer attn_time(time, Phase::Attention, il, attention_bytes(il));
        for (int i = 0, r = 0; i < n; r += count(i), i++) attend(*states[i], lead, pool, il, r, count(i), 0, states[i]->n_past);
        attn_time.stop();
        feed_forward(lead, experts, pool, il, 0, rows, true, time);
    }
    head(lead, pool, 0, rows, logits);
    for (int i = 0, r = 0; i < n; r += count(i), i++) {
        states[i]->n_past += count(i);
        end(*states[i], tokens + r, count(i));
    }
}

}  // namespace ms
