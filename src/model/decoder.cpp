#include "model/decoder.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "gguf/gguf.h"
#include "model/decoder_weights.h"
#include "model/ffn_block.h"
#include "model/layer_major.h"
#include "model/nextn.h"
#include "model/window_ring.h"
#include "ops/activation.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "quant/dequant.h"

namespace ms {

namespace {

class DecoderState : public ModelState {
public:
    AlignedBuffer k_cache, v_cache;  // every layer's rows, one layer after another
    std::vector<KvLayer> kv;         // per layer, into the caches
    WindowRing ring;                 // the sliding-window layers' ring
    AlignedBuffer x;                 // residual: max_tokens rows (a forward call's tokens)
    AlignedBuffer xb, y;             // normed residual, block output: max_batch rows (one piece)
    AlignedBuffer cos_sin;           // rope angles per token: max_tokens rows
    AlignedBuffer acts;              // converted activations for one linear(), shared by the blocks
    AttentionScratch attn;
    MlaScratch mla;
    // Sparse attention: each indexer layer's keys, and the positions each
    // token of a forward call attends to (top_k a token), which the layers
    // without an indexer reuse.
    AlignedBuffer index_keys, sel, n_sel;
    std::vector<KvLayer> keys;  // per indexer slot
    IndexerScratch indexer;
    // The model's indexer shape with top_k at most n_ctx: no query has more
    // positions to choose from, and the selections are sized by it.
    IndexerShape indexer_shape;
    FfnScratch ffn;
    // DeltaNet layers' states, one slot per such layer: the convolution's
    // last inputs and the recurrent matrices. They hold the sequence as a
    // whole, so it continues only from its end or from position 0.
    AlignedBuffer conv_state, recurrent_state;
    DeltaNetScratch deltanet;
    // Their copies at position saved_pos (checkpoint(); -1: none), and the
    // position the live states have reached.
    AlignedBuffer saved_conv, saved_recurrent;
    int64_t saved_pos = -1, recurrent_pos = 0;
    // The NextN block (when enabled): its cache rows before nextn_rows are
    // made (from the main layers' hidden state and the next token); the
    // last forward call's positions [last_pos0, last_pos0 + last_n) have
    // their hidden states in x and their tokens in last_tokens, so their
    // rows are made when the token after them is known (the next call, or
    // the sampled token when drafting); nextn_seen: n_past when these were
    // last brought up to date (lower now: the sequence was rewound).
    AlignedBuffer nextn_x, nextn_cat, nextn_cs, nextn_logits, last_tokens;
    int64_t nextn_rows = 0, last_pos0 = 0, last_n = 0, nextn_seen = 0;

    uint64_t bytes() const override {
        uint64_t b = attn.bytes() + mla.bytes() + indexer.bytes() + ffn.bytes() + deltanet.bytes() +
                     (kv.size() + keys.size()) * sizeof(KvLayer);
        for (const AlignedBuffer* p : {&k_cache, &v_cache, &x, &xb, &y, &cos_sin, &acts, &conv_state,
                                       &recurrent_state, &saved_conv, &saved_recurrent, &index_keys, &sel, &n_sel,
                                       &nextn_x, &nextn_cat, &nextn_cs, &nextn_logits, &last_tokens}) {
            b += p->size();
        }
        return b;
    }

    int64_t rewind_limit(int64_t n) const override {
        if (recurrent_state.size() > 0 && n < n_past) n = saved_pos >= 0 && n >= saved_pos ? saved_pos : 0;
        return ring.rewind_limit(n);
    }

    void checkpoint() override {
        if (recurrent_state.size() == 0) return;
        // Sized on first use: only speculation pays for the copies.
        saved_conv.resize(conv_state.size());
        saved_recurrent.resize(recurrent_state.size());
        std::memcpy(saved_conv.data(), conv_state.data(), conv_state.size());
        std::memcpy(saved_recurrent.data(), recurrent_state.data(), recurrent_state.size());
        saved_pos = n_past;
    }

    bool copy_from(const ModelState& other) override {
        const auto* o = dynamic_cast<const DecoderState*>(&other);
        if (!o || o->k_cache.size() != k_cache.size() || o->v_cache.size() != v_cache.size()) return false;
        // Whole caches: the ring's rows are not in position order, and a
        // copy per choice is small next to the prompt it saves evaluating.
        // x holds the hidden states NextN makes its rows from.
        for (auto [to, from] : {std::pair{&k_cache, &o->k_cache}, {&v_cache, &o->v_cache}, {&index_keys, &o->index_keys},
                                {&conv_state, &o->conv_state}, {&recurrent_state, &o->recurrent_state},
                                {&nextn_x, &o->nextn_x}, {&last_tokens, &o->last_tokens}}) {
            if (to->size() != from->size()) return false;
            if (to->size() > 0) std::memcpy(to->data(), from->data(), to->size());
        }
        if (nextn_x.size() > 0 && x.size() == o->x.size()) std::memcpy(x.data(), o->x.data(), x.size());
        saved_conv.resize(o->saved_conv.size());
        saved_recurrent.resize(o->saved_recurrent.size());
        if (saved_conv.size() > 0) std::memcpy(saved_conv.data(), o->saved_conv.data(), saved_conv.size());
        if (saved_recurrent.size() > 0) std::memcpy(saved_recurrent.data(), o->saved_recurrent.data(), saved_recurrent.size());
        saved_pos = o->saved_pos;
        recurrent_pos = o->recurrent_pos;
        nextn_rows = o->nextn_rows;
        last_pos0 = o->last_pos0;
        last_n = o->last_n;
        nextn_seen = o->nextn_seen;
        ring.top = o->ring.top;
        n_past = o->n_past;
        return true;
    }

    // Before a forward call at pos0: states from zero at 0, from the
    // checkpoint when rewound to it; a call before the checkpoint rewrites
    // the positions it saved.
    void continue_at(int64_t pos0) {
        if (recurrent_state.size() == 0) return;
        if (pos0 == 0) {
            for (AlignedBuffer* b : {&conv_state, &recurrent_state}) std::memset(b->data(), 0, b->size());
        } else if (pos0 != recurrent_pos && pos0 == saved_pos) {
            std::memcpy(conv_state.data(), saved_conv.data(), conv_state.size());
            std::memcpy(recurrent_state.data(), saved_recurrent.data(), recurrent_state.size());
        }
        if (pos0 < saved_pos) saved_pos = -1;
    }
};

class Decoder : public DecoderWeights<LayerMajorModel> {
public:
    Decoder(const GgufFile& f, ModelConfig c, const DecoderSpec& spec) : DecoderWeights(f, std::move(c), spec) {}

    std::unique_ptr<ModelState> new_state(const StateOptions& o) const override {
        const ModelConfig& c = config_;
        check_state_options(o);
        auto st = std::make_unique<DecoderState>();
        st->options = o;
        const size_t B = size_t(o.max_batch);
        // MLA's compressed rows and the indexer's keys are read by their own
        // loops (attention_selected, attention_scores), which take F16 or F32.
        if (o.kv_type == GgmlType::Q8_0 && (!mla_.empty() || n_indexer_ > 0))
            throw std::runtime_error("a q8_0 KV cache is not supported for MLA models (use f16)");
        // Full layers hold every position; sliding-window layers a ring of
        // their window plus a batch, when that is shorter than the context.
        st->ring = WindowRing(window_, o.max_batch, o.n_ctx);
        std::vector<size_t> k_off, v_off;
        size_t k_bytes = 0, v_bytes = 0;
        int64_t n_full = 0;  // layers that cache every position
        // MLA layers keep only the compressed K rows; V reads their front.
        const bool mla = !mla_.empty();
        const size_t k_width = mla ? size_t(mla_shape_.row()) : size_t(c.kv_dim());
        const size_t v_width = mla ? 0 : size_t(c.v_dim());
        for (const AttentionLayer& a : attn_) {
            const bool attends = !a.wq.empty() || mla;
            const size_t rows = attends ? size_t(st->ring.cache_rows(looks_back(a), o.n_ctx)) : 0;
            n_full += attends && !(looks_back(a) && st->ring.rows > 0);
            k_off.push_back(k_bytes);
            v_off.push_back(v_bytes);
            if (attends && !mla) check_kv_type(o.kv_type, c.head_dim, c.head_dim_v);
            k_bytes += rows * size_t(kv_row_bytes(o.kv_type, int64_t(k_width)));
            v_bytes += rows * size_t(kv_row_bytes(o.kv_type, int64_t(v_width)));
        }
        st->k_cache.resize(k_bytes);
        st->v_cache.resize(v_bytes);
        for (size_t il = 0; il < attn_.size(); il++) {
            uint8_t* k = st->k_cache.data() + k_off[il];
            st->kv.push_back(mla ? mla_kv_layer(mla_shape_, o.kv_type, k)
                                 : st->ring.layer(looks_back(attn_[il]), o.kv_type, c.n_head_kv, c.kv_dim(), c.v_dim(),
                                                  o.n_ctx, k, st->v_cache.data() + v_off[il]));
        }
        st->kv_bytes_per_token =
            (kv_row_bytes(o.kv_type, int64_t(k_width)) + kv_row_bytes(o.kv_type, int64_t(v_width))) * n_full;
        if (n_indexer_ > 0) {
            const int64_t key_bytes = indexer_key_bytes(indexer_shape_, o.kv_type);
            st->index_keys.resize(size_t(n_indexer_ * o.n_ctx * key_bytes));
            for (int64_t i = 0; i < n_indexer_; i++) {
                st->keys.push_back(indexer_key_layer(indexer_shape_, o.kv_type,
                                                     st->index_keys.data() + size_t(i * o.n_ctx * key_bytes)));
            }
            st->kv_bytes_per_token += key_bytes * n_indexer_;
        }
        st->full_kv_bytes_per_token = mla ? mla_full_kv_bytes(mla_shape_, o.kv_type) * n_full : st->kv_bytes_per_token;
        const size_t T = size_t(std::max(o.max_tokens, o.max_batch));
        if (n_indexer_ > 0) {
            st->indexer_shape = indexer_shape_;
            st->indexer_shape.top_k = int(std::min<int64_t>(indexer_shape_.top_k, o.n_ctx));
            st->sel.resize(T * size_t(st->indexer_shape.top_k) * 4);
            st->n_sel.resize(T * 4);
            st->indexer.init(st->indexer_shape, o.max_batch, o.n_ctx, o.n_threads);
        }
        st->x.resize(T * size_t(c.n_embd) * 4);
        for (AlignedBuffer* b : {&st->xb, &st->y}) b->resize(B * size_t(c.n_embd) * 4);
        st->cos_sin.resize(T * size_t(rope_.n_rot) * 4);
        const size_t attn_acts = mla ? MlaScratch::acts_per_token(mla_) : AttentionScratch::acts_per_token(attn_);
        st->acts.resize(B * std::max({linear_scratch_bytes(output(), 1), attn_acts, FfnScratch::acts_per_token(ffn_),
                                      DeltaNetScratch::acts_per_token(deltanet_),
                                      IndexerScratch::acts_per_token(indexer_),
                                      nextn_.empty() ? size_t(0) : linear_scratch_bytes(nextn_.eh_proj, 1),
                                      nextn_.empty() ? size_t(0) : linear_scratch_bytes(nextn_head(), 1)}));
        if (!nextn_.empty()) {
            st->last_tokens.resize(T * 4);
            st->nextn_x.resize(B * size_t(c.n_embd) * 4);
            st->nextn_cat.resize(B * size_t(2 * c.n_embd) * 4);
            st->nextn_cs.resize(B * size_t(rope_.n_rot) * 4);
            st->nextn_logits.resize(size_t(c.n_vocab) * 4);
        }
        if (n_deltanet_ > 0) {
            st->conv_state.resize(size_t(n_deltanet_ * deltanet_shape_.conv_state_floats()) * 4);
            st->recurrent_state.resize(size_t(n_deltanet_ * deltanet_shape_.recurrent_state_floats()) * 4);
            st->deltanet.init(deltanet_shape_, o.max_batch, o.n_threads);
            st->deltanet.acts = st->acts.data();
        }
        if (mla) {
            st->mla.init(mla_shape_, o.max_batch, o.n_ctx, o.n_threads, st->indexer_shape.top_k);
        } else {
            st->attn.init(c, attn_, o.max_batch, o.n_ctx, o.n_threads);
        }
        st->ffn.init(ffn_, expert_layers_, o.max_batch, c.n_expert_used, c.n_embd);
        st->attn.acts = st->acts.data();
        st->mla.acts = st->acts.data();
        st->indexer.acts = st->acts.data();
        st->ffn.acts = st->acts.data();
        return st;
    }


    void enable_nextn(const GgufFile& f) override {
        if (!nextn_.empty()) return;
        const ModelConfig& c = config_;
        if (c.n_nextn == 0) Model::enable_nextn(f);  // throws: none in the file
        const char* why = !indexer_.empty() ? "attends through sparse MLA but has no indexer of its own"
                          : !mla_.empty()   ? "attends through MLA, which no reference file checks yet"
                          : n_deltanet_ > 0 || window_ > 0 ? "follows a hybrid or windowed stack"
                                                           : nullptr;
        if (why) {
            throw std::runtime_error(f.path() + ": --draft mtp: " + c.arch + "'s NextN block " + why +
                                     " (not run yet)");
        }
        // The first block, as one more layer of the stack after the main ones.
        const int L = n_run_;
        const int64_t E = c.n_embd, V = c.n_vocab;
        attn_.resize(size_t(L) + 1);
        deltanet_.resize(size_t(L) + 1);
        deltanet_slot_.push_back(-1);
        ffn_.resize(size_t(L) + 1);
        expert_layers_.resize(size_t(L) + 1);
        expert_layers_[size_t(L)].layer = L;
        DecoderSpec spec = spec_;
        spec.window.clear();
        spec.chunk.clear();
        spec.no_rope.clear();
        declare_attention(f, spec, L);
        declare_ffn(f, spec, L);
        const std::string p = "blk." + std::to_string(L) + ".nextn.";
        need(f, p + "eh_proj.weight", {2 * E, E}, &nextn_.eh_proj);
        need(f, p + "enorm.weight", {E}, &nextn_.enorm);
        need(f, p + "hnorm.weight", {E}, &nextn_.hnorm);
        need(f, p + "shared_head_norm.weight", {E}, &nextn_.head_norm);
        maybe(f, p + "embed_tokens.weight", {E, V}, &nextn_.embd);
        maybe(f, p + "shared_head_head.weight", {E, V}, &nextn_.head);
    }

    bool nextn_enabled() const override { return !nextn_.empty(); }

    int draft_nextn(ModelState& state, ExpertSource& experts, ThreadPool& pool, int32_t token, int k,
                    int32_t* out) const override {
        DecoderState& st = static_cast<DecoderState&>(state);
        if (nextn_.empty() || k < 1) return 0;
        sync_nextn(st);
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, pos = st.n_past - 1;
        if (pos < st.last_pos0 || pos >= st.last_pos0 + st.last_n) return 0;  // its hidden state is gone
        k = int(std::min<int64_t>(k, st.options.n_ctx - pos));
        // Depth 1: the rows still to make up to pos, the last with `token`,
        // in one call; then each draft from the block's own output and the
        // draft before it, one position on (rows made again from the main
        // layers' states once the pass that checks the drafts has run).
        st.nextn_rows = std::min(st.nextn_rows, pos);
        const int m = nextn_rows_upto(st, experts, pool, pos + 1, token, &st.decode_time);
        float* hx = st.nextn_x.f32();
        for (int j = 0; j < k; j++) {
            if (j > 0) {
                nextn_input_row(nextn_, nextn_embd(), out[j - 1], hx + int64_t(j == 1 ? m - 1 : 0) * E, E, c.rms_eps,
                                st.nextn_cat.f32());
                nextn_layer(st, experts, pool, pos + j, 1, &st.decode_time);
            }
            const float* o = hx + int64_t(j == 0 ? m - 1 : 0) * E;
            rms_norm_rows(pool, o, nextn_.head_norm.f32(), 1, E, c.rms_eps, st.xb.f32());
            linear(pool, nextn_head(), st.xb.f32(), 1, st.nextn_logits.f32(), st.acts.data());
            out[j] = argmax(st.nextn_logits.f32(), c.n_vocab);
        }
        return k;
    }

private:
    int layers_run() const override { return n_run_; }

    void begin(ModelState& seq, ExpertSource& experts, ThreadPool& pool, const int32_t* tokens,
               int n) const override {
        DecoderState& st = static_cast<DecoderState&>(seq);
        const int64_t pos0 = st.n_past;
        advance(st, n);
        // The NextN rows of the last call's positions wait for the tokens
        // after them, tokens[0] the last; their hidden states are in x,
        // which the embeddings overwrite.
        if (!nextn_.empty()) {
            sync_nextn(st);
            nextn_rows_upto(st, experts, pool, std::min(pos0, st.last_pos0 + st.last_n), tokens[0],
                            n == 1 ? &st.decode_time : &st.prefill_time);
        }
    }

    void end(ModelState& seq, const int32_t* tokens, int n) const override {
        if (nextn_.empty()) return;
        DecoderState& st = static_cast<DecoderState&>(seq);
        std::copy(tokens, tokens + n, reinterpret_cast<int32_t*>(st.last_tokens.data()));
        st.last_pos0 = st.n_past - n;
        st.last_n = n;
        st.nextn_seen = st.n_past;
    }

    // The NextN block follows each sequence through forward().
    bool batches() const override { return nextn_.empty(); }

    void embed(ModelState& lead, int64_t t, int32_t token, int64_t pos) const override {
        DecoderState& st = static_cast<DecoderState&>(lead);
        dequantize_row(token_embd_.type, token_embd_.row(token), st.x.f32() + t * config_.n_embd, config_.n_embd);
        rope_angles(rope(), pos, st.cos_sin.f32() + t * rope_.n_rot);
    }

    void attend(ModelState& seq, ModelState& lead, ThreadPool& pool, int il, int row, int nc, int c0,
                int64_t pos) const override {
        DecoderState& st = static_cast<DecoderState&>(seq);
        DecoderState& rows = static_cast<DecoderState&>(lead);
        float* xc = rows.x.f32() + int64_t(row) * config_.n_embd;
        float* y = st.y.f32();
        const float* cs = rows.cos_sin.f32() + int64_t(row) * rope_.n_rot;
        run_attention(st, pool, rope(), il, xc, nc, c0, pos, cs, st.xb.f32(), y);
        add_to(xc, y, nc * config_.n_embd);
    }

    void feed_forward(ModelState& lead, ExpertSource& experts, ThreadPool& pool, int il, int row, int nc,
                      bool may_predict, TimeSplit* time) const override {
        DecoderState& st = static_cast<DecoderState&>(lead);
        run_ffn(st, experts, pool, il, st.x.f32() + int64_t(row) * config_.n_embd, nc, may_predict, time);
    }

    void head(ModelState& lead, ThreadPool& pool, int row, int n, float* logits) const override {
        DecoderState& st = static_cast<DecoderState&>(lead);
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, B = st.options.max_batch;
        for (int64_t c0 = 0; c0 < n; c0 += B) {
            const int64_t nc = std::min<int64_t>(B, n - c0);
            rms_norm_rows(pool, st.x.f32() + (row + c0) * E, output_norm_.f32(), nc, E, c.rms_eps, st.xb.f32());
            linear(pool, output(), st.xb.f32(), nc, logits + c0 * c.n_vocab, st.acts.data());
        }
    }
    const Tensor& nextn_embd() const { return nextn_.embd.empty() ? token_embd_ : nextn_.embd; }
    const Tensor& nextn_head() const { return nextn_.head.empty() ? output() : nextn_.head; }

    // A rewind (n_past lowered since the NextN rows were last updated)
    // leaves valid only the rows whose next token is still in the sequence,
    // and the hidden states of positions still in it.
    static void sync_nextn(DecoderState& st) {
        if (st.n_past < st.nextn_seen) {
            st.nextn_rows = std::min(st.nextn_rows, std::max<int64_t>(st.n_past - 1, 0));
            st.last_n = std::clamp<int64_t>(st.n_past - st.last_pos0, 0, st.last_n);
        }
        st.nextn_seen = st.n_past;
    }

    // Makes the NextN rows of the last call's positions from nextn_rows up
    // to `end` (exclusive, at most the call's end): row q from x's hidden
    // state of q and the token at q + 1, `next` for the last. Earlier rows
    // whose hidden state is gone (a rewind past the last call) stay stale:
    // drafts get worse, not the output. Returns the rows made; the last
    // one's output is row count-1 of st.nextn_x.
    int nextn_rows_upto(DecoderState& st, ExpertSource& experts, ThreadPool& pool, int64_t end, int32_t next,
                        TimeSplit* time) const {
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, first = std::max(st.nextn_rows, st.last_pos0);
        const int32_t* toks = reinterpret_cast<const int32_t*>(st.last_tokens.data());
        const int B = st.options.max_batch;
        int m = 0;
        for (int64_t q0 = first; q0 < end; q0 += B) {
            m = int(std::min<int64_t>(B, end - q0));
            pool.parallel_for(m, [&](int64_t b, int64_t e) {
                for (int64_t r = b; r < e; r++) {
                    const int64_t q = q0 + r;
                    const int32_t t = q + 1 == end ? next : toks[q + 1 - st.last_pos0];
                    nextn_input_row(nextn_, nextn_embd(), t, st.x.f32() + (q - st.last_pos0) * E, E, c.rms_eps,
                                    st.nextn_cat.f32() + r * 2 * E);
                }
            });
            nextn_layer(st, experts, pool, q0, m, time);
        }
        st.nextn_rows = std::max(st.nextn_rows, end);
        return m;
    }

    // The NextN block's layer over m rows of eh_proj input (st.nextn_cat)
    // at positions pos..: its output rows in st.nextn_x, its K/V in its
    // cache. The routing trace records the main layers only.
    void nextn_layer(DecoderState& st, ExpertSource& experts, ThreadPool& pool, int64_t pos, int m,
                     TimeSplit* time) const {
        const int64_t E = config_.n_embd;
        const int L = n_run_;
        float* hx = st.nextn_x.f32();
        float* cs = st.nextn_cs.f32();
        Rope rope = rope_;
        if (!rope_freqs_.empty()) rope.freq_factors = rope_freqs_.f32();
        linear(pool, nextn_.eh_proj, st.nextn_cat.f32(), m, hx, st.acts.data());
        for (int r = 0; r < m; r++) rope_angles(rope, pos + r, cs + int64_t(r) * rope.n_rot);
        RoutingTrace* trace = experts.routing_trace;
        experts.routing_trace = nullptr;
        PhaseTimer attn_time(time, Phase::Attention, L, attention_bytes(L));
        run_attention(st, pool, rope, L, hx, m, 0, pos, cs, st.xb.f32(), st.y.f32());
        add_to(hx, st.y.f32(), m * E);
        attn_time.stop();
        run_ffn(st, experts, pool, L, hx, m, false, time);
        experts.routing_trace = trace;
    }

    // A forward call is about to write n positions at st.n_past.
    static void advance(DecoderState& st, int n) {
        st.ring.wrote(st.n_past, n);
        st.continue_at(st.n_past);
        st.recurrent_pos = st.n_past + n;
    }

    // Weight bytes of layer il's attention (or DeltaNet) half, for the time split.
    uint64_t attention_bytes(int il) const override {
        if (!mla_.empty()) {
            const bool indexed = !indexer_.empty() && indexer_slot_[size_t(il)] >= 0;
            return mla_[size_t(il)].weight_bytes() + (indexed ? indexer_[size_t(il)].weight_bytes() : 0);
        }
        const DeltaNetLayer& d = deltanet_[size_t(il)];
        return d.empty() ? attn_[size_t(il)].weight_bytes() : d.weight_bytes();
    }

    // Layer il's attention (or DeltaNet) half over nc tokens of one
    // sequence at positions pos..: xc its residual rows, xb gets them
    // normed, y the block's output. cs: the tokens' rope angles; c0: their
    // offset in the forward call (sparse attention keeps its selections by it).
    void run_attention(DecoderState& st, ThreadPool& pool, const Rope& rope, int il, const float* xc, int nc, int c0,
                       int64_t pos, const float* cs, float* xb, float* y) const {
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, n_ctx = st.options.n_ctx;
        const AttentionLayer& a = attn_[size_t(il)];
        const DeltaNetLayer& d = deltanet_[size_t(il)];
        const bool mla = !mla_.empty();
        const int64_t islot = indexer_.empty() ? -1 : indexer_slot_[size_t(il)];
        if (mla && indexer_.empty()) {
            rms_norm_rows(pool, xc, a.norm.f32(), nc, E, c.rms_eps, xb);
            mla_attention_block(pool, mla_shape_, c.rms_eps, rope, mla_[size_t(il)], xb, nc, pos, cs,
                                st.kv[size_t(il)], n_ctx, st.mla, y);
        } else if (mla) {
            // Sparse: this layer's indexer (or the nearest earlier
            // one's, kept for the call's tokens) picks the positions,
            // from the normed compressed q mla_project leaves.
            const int top_k = st.indexer_shape.top_k;
            int32_t* sel = reinterpret_cast<int32_t*>(st.sel.data()) + int64_t(c0) * top_k;
            int32_t* n_sel = reinterpret_cast<int32_t*>(st.n_sel.data()) + c0;
            rms_norm_rows(pool, xc, a.norm.f32(), nc, E, c.rms_eps, xb);
            mla_project(pool, mla_shape_, c.rms_eps, rope_, mla_[size_t(il)], xb, nc, pos, cs, st.kv[size_t(il)],
                        st.mla);
            if (islot >= 0) {
                indexer_select(pool, st.indexer_shape, rope_, indexer_[size_t(il)], xb, st.mla.qa.f32(), nc, pos, cs,
                               st.keys[size_t(islot)], st.indexer, sel, n_sel);
            }
            const MlaSelection chosen{sel, n_sel, top_k};
            mla_attend(pool, mla_shape_, mla_[size_t(il)], nc, pos, st.kv[size_t(il)], n_ctx, &chosen, st.mla, y);
        } else if (d.empty()) {
            rms_norm_rows(pool, xc, a.norm.f32(), nc, E, c.rms_eps, xb);
            attention_block(pool, c, rope, a, xb, nc, pos, cs, st.kv[size_t(il)], n_ctx, st.attn, y);
        } else {
            // Pieces in order: the states carry from one to the next.
            const int64_t slot = deltanet_slot_[size_t(il)];
            rms_norm_rows(pool, xc, d.norm.f32(), nc, E, c.rms_eps, xb);
            deltanet_block(pool, deltanet_shape_, c.rms_eps, d, xb, nc,
                           st.conv_state.f32() + slot * deltanet_shape_.conv_state_floats(),
                           st.recurrent_state.f32() + slot * deltanet_shape_.recurrent_state_floats(), st.deltanet, y);
        }
    }

    // Layer il's feed-forward half over nc residual rows xc (in place), with
    // st's scratch; may_predict: whether to hint the next layer's experts.
    void run_ffn(DecoderState& st, ExpertSource& experts, ThreadPool& pool, int il, float* xc, int nc, bool may_predict,
                 TimeSplit* time) const {
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd;
        const int K = c.n_expert_used;
        const FfnLayer& m = ffn_[size_t(il)];
        float* xb = st.xb.f32();
        float* y = st.y.f32();
        const bool predict = may_predict && il + 1 < n_run_ && ffn_[size_t(il) + 1].moe() && experts.wants_prefetch();
        PhaseTimer route_time(time, Phase::Routing, il,
                              m.router.bytes() + (predict ? ffn_[size_t(il) + 1].router.bytes() : 0));
        rms_norm_rows(pool, xc, m.norm.f32(), nc, E, c.rms_eps, xb);
        if (m.moe()) route_tokens(pool, m, xb, nc, K, st.ffn);
        // y is free until the feed-forward block writes it.
        const ExpertHint next = predict ? predict_experts(st, pool, il + 1, xc, nc, y) : ExpertHint{};
        route_time.stop();

        // The experts span on the timeline holds this layer's io_wait
        // spans; the split counts the time between them as compute.
        PhaseTimer ffn_time(nullptr, Phase::ExpertCompute, il);
        const FfnCost cost = ffn_block(pool, experts, expert_layers_[size_t(il)], m, xb, nc, K, st.ffn, y, next);
        add_to(xc, y, nc * E);
        const double ffn_s = ffn_time.stop();
        time->add(Phase::IoWait, cost.moe.io_wait_s);
        time->add(Phase::ExpertCompute, ffn_s - cost.moe.io_wait_s, cost.moe.expert_bytes + cost.dense_bytes);
    }

    // Whether a layer sees only the last window_ positions at most (a ring
    // holds its cache).
    static bool looks_back(const AttentionLayer& a) { return a.window > 0 || a.chunk > 0; }

    // The residual changes little from one layer to the next, so `layer`'s
    // router over it (normed with that layer's weights) predicts the
    // experts that layer will want, while the current layer's are still
    // being read and computed (expert_hint: which of them to hint).
    ExpertHint predict_experts(DecoderState& st, ThreadPool& pool, int layer, const float* x, int n,
                               float* normed) const {
        const ModelConfig& c = config_;
        const FfnLayer& nl = ffn_[size_t(layer)];
        const int K = c.n_expert_used;
        rms_norm_rows(pool, x, nl.norm.f32(), n, c.n_embd, c.rms_eps, normed);
        int32_t* ids = reinterpret_cast<int32_t*>(st.ffn.next_ids.data());
        route_tokens(pool, nl, normed, n, K, st.ffn, ids, st.ffn.next_weights.f32());
        return expert_hint(layer, ids, n, K, c.n_expert, reinterpret_cast<int32_t*>(st.ffn.next_votes.data()),
                           reinterpret_cast<int32_t*>(st.ffn.next_union.data()));
    }

    NextnBlock nextn_;  // empty unless enable_nextn()
};

}  // namespace

Rope config_rope(const ModelConfig& c, bool neox) {
    Rope r{c.n_rot, c.rope_freq_base, neox};
    if (c.rope_scaling == "yarn") return with_yarn(r, c.rope_factor, c.rope_n_ctx_orig);
    if (c.rope_scaling == "linear") r.freq_scale = 1.0f / c.rope_factor;
    return r;
}

void require_sigmoid_gating(const GgufFile& file, const ModelConfig& c) {
    if (c.expert_gating != 0 && c.expert_gating != 2) {
        throw std::runtime_error(file.path() + ": " + c.arch + ".expert_gating_func " +
                                 std::to_string(c.expert_gating) + " is not supported (2: sigmoid)");
    }
}

std::unique_ptr<Model> open_decoder(const GgufFile& file, ModelConfig config, const DecoderSpec& spec) {
    return std::make_unique<Decoder>(file, std::move(config), spec);
}

}  // namespace ms
