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
    ModelState& lead = *states[0];
    if (n > lead.options.max_batch || !batches()) {
        Model::forward_batch(states, n, experts, pool, tokens, logits);
        return;
    }
    experts.start_decode_step(n);
    for (int i = 0; i < n; i++) begin(*states[i], experts, pool, tokens + i, 1);
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; t++) embed(lead, t, tokens[t], states[t]->n_past);
    });
    before_layers(lead, experts, pool, tokens, n);

    TimeSplit* time = &lead.decode_time;
    time->calls++;
    for (int il = 0; il < layers_run(); il++) {
        PhaseTimer attn_time(time, Phase::Attention, il, attention_bytes(il));
        for (int i = 0; i < n; i++) attend(*states[i], lead, pool, il, i, 1, 0, states[i]->n_past);
        attn_time.stop();
        feed_forward(lead, experts, pool, il, 0, n, true, time);
    }
    head(lead, pool, 0, n, logits);
    for (int i = 0; i < n; i++) {
        states[i]->n_past++;
        end(*states[i], tokens + i, 1);
    }
}

}  // namespace ms
