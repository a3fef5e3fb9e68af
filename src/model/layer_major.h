// The two passes of a model that runs layer by layer (the shared decoder,
// model/decoder.cpp, and gemma4): a forward call over up to max_tokens
// tokens, each layer over all of them in pieces of max_batch, so a long
// prompt reads each expert it needs once; and one decode step of several
// sequences, each attending over its own cache, the feed-forward half over
// their rows together, so each MoE layer acquires their union once (one
// token a sequence, or several: speculation's verify passes). The
// order of work is written here once; a family supplies a layer's steps.
#pragma once
#include <cstdint>

#include "model/model.h"

namespace ms {

class LayerMajorModel : public Model {
public:
    void forward(ModelState& state, ExpertSource& experts, ThreadPool& pool, const int32_t* tokens, int n,
                 float* logits, bool all_logits) const final;
    // The first state's scratch holds the sequences' rows.
    void forward_batch(ModelState* const* states, int n, ExpertSource& experts, ThreadPool& pool,
                       const int32_t* tokens, float* logits) const final;
    // The same pass with counts[i] tokens of sequence i (verify passes).
    void forward_rows(ModelState* const* states, const int* counts, int n, ExpertSource& experts, ThreadPool& pool,
                      const int32_t* tokens, float* logits) const final;
    bool layer_major() const final { return true; }

protected:
    using Model::Model;

private:
    // forward_batch's and forward_rows' pass over `rows` rows: counts[i]
    // of sequence i, one each when counts is null.
    void pass_rows(ModelState* const* states, const int* counts, int n, int rows, ExpertSource& experts,
                   ThreadPool& pool, const int32_t* tokens, float* logits) const;

protected:

    // The layers run (NextN blocks are left out).
    virtual int layers_run() const = 0;
    // A forward call is about to write n positions of seq at seq.n_past
    // (tokens: its tokens; the source's step has started, the residual
    // still holds the last call's hidden states).
    virtual void begin(ModelState& seq, ExpertSource& experts, ThreadPool& pool, const int32_t* tokens,
                       int n) const = 0;
    // The call is over (seq.n_past advanced).
    virtual void end(ModelState&, const int32_t*, int) const {}
    // Whether forward_batch may decode several sequences in one pass (else
    // it runs forward() on each).
    virtual bool batches() const { return true; }
    // Row t of lead's residual: token's embedding; row t of its rope angles:
    // position pos's. Called from a parallel_for, one token at a time.
    virtual void embed(ModelState& lead, int64_t t, int32_t token, int64_t pos) const = 0;
    // After the n rows are embedded, before the first layer: what a family
    // reads once for all the call's tokens (gemma4's per-layer embedding
    // rows).
    virtual void before_layers(ModelState&, ExpertSource&, ThreadPool&, const int32_t*, int) const {}
    // Layer il's attention (or recurrent) half over nc residual rows of lead
    // from `row` on, those of sequence seq at positions pos..: the residual
    // gets the block's output added. c0: the rows' offset in seq's forward
    // call. Scratch from seq.
    virtual void attend(ModelState& seq, ModelState& lead, ThreadPool& pool, int il, int row, int nc, int c0,
                        int64_t pos) const = 0;
    // Weight bytes of layer il's attention half, for the time split.
    virtual uint64_t attention_bytes(int il) const = 0;
    // Layer il's feed-forward half over nc residual rows of lead from `row`
    // on, in place, with lead's scratch; may_predict: whether to hint the
    // next layer's experts.
    virtual void feed_forward(ModelState& lead, ExpertSource& experts, ThreadPool& pool, int il, int row, int nc,
                              bool may_predict, TimeSplit* time) const = 0;
    // The logits of n residual rows of lead from `row` on.
    virtual void head(ModelState& lead, ThreadPool& pool, int row, int n, float* logits) const = 0;
};

}  // namespace ms
