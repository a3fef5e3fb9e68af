#include "model/gpu_decoder.h"
#include "model/routing_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "gguf/gguf.h"
#include "gpu/gpu.h"
#include "model/decoder.h"
#include "model/decoder_weights.h"
#include "model/ffn_block.h"
#include "model/moe.h"
#include "quant/dequant.h"
#include "store/budget.h"
#include "store/slot_cache.h"

namespace ms {

namespace {

size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

// Device memory freed with its owner.
class DeviceMemory {
public:
    DeviceMemory() = default;
    explicit DeviceMemory(size_t bytes) : p_(static_cast<uint8_t*>(gpu::alloc(bytes))) {}
    DeviceMemory(DeviceMemory&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
    DeviceMemory& operator=(DeviceMemory&& o) noexcept {
        std::swap(p_, o.p_);
        return *this;
    }
    ~DeviceMemory() { gpu::release(p_); }
    uint8_t* data() const { return p_; }
    float* f32() const { return reinterpret_cast<float*>(p_); }

private:
    uint8_t* p_ = nullptr;
};

// Multi-head latent attention's rows for `tokens` tokens: q's compression
// and its 8-bit rows, q, the compressed rows and their latent parts (normed
// apart from their k_pe), the heads' q_nope and latent rows (and 8-bit), the
// latent queries, the attention's rows, the heads' outputs (and 8-bit).
// With DeepSeek sparse attention (alloc_indexer): the indexer's queries,
// keys and head weights, the scores of score_rows tokens at a time, and each
// token's chosen positions (top_k a token) and their count.
struct MlaRows {
    DeviceMemory qa, qa8, q, ckv, c, qn, qn8, lat, lat8, qlat, att, o, o8;
    DeviceMemory iq, ik, iw, scores, chosen, count;
    int score_rows = 0;
    // A prompt's expanded heads (gpu.h's attention_expanded): the planes of
    // `expanded` positions, and k_b as float rows of kv_lora.
    DeviceMemory planes, k_b_rows;
    int64_t expanded = 0;
    void alloc_indexer(const IndexerShape& s, size_t tokens, int rows, int64_t n_ctx, int top_k) {
        const size_t T = tokens, H = size_t(s.n_head), D = size_t(s.head_dim);
        iq = DeviceMemory(T * H * D * 4);
        ik = DeviceMemory(T * D * 4);
        iw = DeviceMemory(T * H * 4);
        score_rows = rows;
        scores = DeviceMemory(size_t(rows) * size_t(n_ctx) * 4);
        chosen = DeviceMemory(T * size_t(top_k) * 4);
        count = DeviceMemory(T * 4);
    }
    void alloc(const MlaShape& m, size_t tokens) {
        const size_t T = tokens, H = size_t(m.n_head);
        qa = DeviceMemory(T * size_t(std::max(m.q_lora, 1)) * 4);
        qa8 = DeviceMemory(T * gpu::act_bytes(std::max(m.q_lora, 32)));
        q = DeviceMemory(T * H * size_t(m.q_head()) * 4);
        ckv = DeviceMemory(T * size_t(m.row()) * 4);
        c = DeviceMemory(T * size_t(m.kv_lora) * 4);
        qn = DeviceMemory(T * H * size_t(m.nope) * 4);
        qn8 = DeviceMemory(T * H * gpu::act_bytes(m.nope));
        lat = DeviceMemory(T * H * size_t(m.kv_lora) * 4);
        lat8 = DeviceMemory(T * H * gpu::act_bytes(m.kv_lora));
        qlat = DeviceMemory(T * H * size_t(m.row()) * 4);
        att = DeviceMemory(T * H * size_t(m.row()) * 4);
        o = DeviceMemory(T * H * size_t(m.v) * 4);
        o8 = DeviceMemory(T * gpu::act_bytes(int64_t(H) * m.v));
    }
};

// Prefill's rows: up to `cap` tokens of a forward call at once, in VRAM
// (gpu.h's batched operations), with the host's view of each layer's
// routing, from which it cuts the experts' tiles.
class GpuState;

struct PrefillRows {
    int cap = 0;  // tokens; 0: prefill runs token by token
    DeviceMemory x, xb, xb8, q, k, v, att, att8, att_part, router, ids, weights;
    DeviceMemory gate, hidden, hidden8, down;  // gate: gate | up, for experts whose gate and up differ in type
    DeviceMemory ffn_gate, ffn_up, ffn_hidden, ffn_hidden8, shared_out, shared_logit, moe_out;
    DeviceMemory qg;     // gated attention: wq's rows of [q | gate] heads
    // Gated DeltaNet: the projections, their convolution, beta/alpha
    // logits, the recurrence's output and its 8-bit rows.
    DeviceMemory dn_qkv, dn_conv, dn_z, dn_ba, dn_o, dn_o8;
    DeviceMemory kt, vt;  // q/k norms after RoPE: the rotated k rows (and v rows) before they are cached
    DeviceMemory kv_planes;  // attention in tiles: a layer's k and v rows as f16 halves (gpu::attention_tiled)
    // Multi-head latent attention's rows, and the head tiles: each head's
    // tokens as gpu::ExpertTiles over the heads' k_b and v_b.
    MlaRows mla;
    DeviceMemory mla_tiles;
    std::vector<int32_t> host_mla_tiles;
    // Llama 4: each (token, expert) pair's input row, weighted, and 8-bit;
    // routing weights of 1 for the sum (the weights scaled the inputs).
    DeviceMemory xs, xs8, ones;
    // cap rows of the rope angles, then cap positions (ints), then cap
    // attention temperatures (Llama 4's unroped layers' q factor)
    DeviceMemory rope;
    DeviceMemory tiles;  // gpu::ExpertTiles' arrays: tiles, then in_row, then out_row
    DeviceMemory logits;  // all_logits: kLogitRows rows of the output head
    // Batched decode (rows of several sequences): per KV layer, each row's
    // k and v cache (gpu.h's seq: 2 x rows pointers a layer), and the states.
    DeviceMemory seq_caches;
    float** host_seq_caches = nullptr;  // pinned
    std::vector<GpuState*> seqs;
    float* host_x = nullptr;      // pinned: the tokens' embedded rows
    float* host_rope = nullptr;   // pinned: rope's contents
    int32_t* host_ids = nullptr;  // pinned: a layer's routing, cap x K ids
    int32_t* host_tiles = nullptr;  // pinned: tiles' contents
    // Mapped: each layer's distinct experts of the pass, for refresh_vram.
    std::vector<int32_t> layer_ids, layer_count;
    ExpertGroups groups;        // a layer's (token, rank) pairs by expert
    std::vector<int32_t> miss;  // the copied tier: a group's experts not in VRAM
    // The experts a layer's tiles run on the GPU, ascending: the layer's
    // used experts, or, with a host part, those the host does not compute.
    const int32_t* gpu_ids = nullptr;
    int n_gpu_ids = 0;
    // A batched pass's host part (GpuOptions::batch_host, set up by
    // host_rows_alloc): the experts the host computes in the layer
    // (ascending), those the GPU runs; the FFN input rows and routing
    // weights brought to the host; each (token, rank) pair's input row,
    // expert, weight, output and its row in `down`, for host_cap pairs.
    std::vector<int32_t> host_used, gpu_used;
    int n_host_used = 0;
    int host_cap = 0;
    float* host_xb = nullptr;          // pinned, cap x E
    float* host_w = nullptr;           // pinned, cap x K
    float* host_out = nullptr;         // pinned, host_cap x E
    int32_t* host_out_rows = nullptr;  // pinned, host_cap
    DeviceMemory host_rows;            // host_out's rows, then host_out_rows, on the device
    std::vector<float> host_in, host_pair_w;
    std::vector<int32_t> host_pair_ids;
    MoeScratch host_moe;
    ~PrefillRows() {
        gpu::release_pinned(host_seq_caches);
        gpu::release_pinned(host_x);
        gpu::release_pinned(host_rope);
        gpu::release_pinned(host_ids);
        gpu::release_pinned(host_tiles);
        gpu::release_pinned(host_xb);
        gpu::release_pinned(host_w);
        gpu::release_pinned(host_out);
        gpu::release_pinned(host_out_rows);
    }
};

class GpuState : public ModelState {
public:
    PrefillRows prefill;
    DeviceMemory k_cache, v_cache;  // per attention layer n_ctx rows of kv_dim floats
    // Gated DeltaNet layers: each one's convolution inputs and recurrent
    // matrices, holding positions [0, recurrent_pos); as PrefillRows' dn_*
    // for one token.
    DeviceMemory conv_state, recurrent_state;
    int64_t recurrent_pos = 0;
    DeviceMemory qg, dn_qkv, dn_conv, dn_z, dn_ba, dn_o, dn_o8;
    DeviceMemory kt, vt, xs, xs8, ones;  // as PrefillRows' for one token
    MlaRows mla;  // multi-head latent attention's, for one token
    // DeepSeek sparse attention: per indexer layer n_ctx key rows of the
    // indexer's head_dim floats; the positions a token attends to, at most
    // (the model's top_k, or n_ctx when that is fewer).
    DeviceMemory index_keys;
    int top_k = 0;
    DeviceMemory att_part;  // attention's partial sums (gpu::attention_scratch_bytes)
    DeviceMemory x, xb, q, k, v, att, router, ids, weights, gate, hidden, logits;  // gate: gate | up
    // Dense and shared-expert FFNs: gate, up, their SwiGLU; the shared
    // expert's output and its gate's logit; with a shared expert, the
    // routed sum it is added to before the residual.
    DeviceMemory ffn_gate, ffn_up, ffn_hidden, shared_out, shared_logit, moe_out;
    // xb, att, hidden, ffn_hidden and next_xb as 8-bit rows (gpu::quantize_act)
    DeviceMemory xb8, att8, hidden8, ffn_hidden8, next_xb8;
    DeviceMemory next_xb, next_router, next_weights;  // streaming: the next layer's routing, predicted
    DeviceMemory input;  // the token's embedded row, rope angles, position (an int) and attention temperature
    DeviceMemory slots;           // streaming: the VRAM address of each chosen expert of the layer, by rank
    DeviceMemory layer_ids;       // every expert routed on the device: each layer's chosen experts
    int32_t* host_layer_ids = nullptr;  // pinned: layer_ids after a token (the RAM tier mapped)
    gpu::Graph graph = nullptr;   // one token's launches, when every expert is in VRAM
    float* host_input = nullptr;  // pinned: the embedded row and the rope angles of one token
    int32_t* host_ids = nullptr;  // pinned: a layer's chosen experts, then the next layer's predicted ones
    const uint8_t** host_slots = nullptr;  // pinned: their VRAM addresses
    float* host_logits = nullptr;  // pinned: copied at DMA speed, then to the caller's buffer
    // --gpu-ram-tier cpu: the layer's experts the GPU runs (those in VRAM)
    // with their routing weights, by rank; the host's sum of the others.
    DeviceMemory hit_ids, hit_weights, cpu_out;
    // pinned, K + K + E + E floats: the routing weights, the GPU's experts'
    // weights, the FFN input xb, the host's sum; then K ints of their ids.
    float* host_split = nullptr;
    MoeScratch cpu_moe;  // the host's moe_forward scratch, one token
    uint64_t host_bytes = 0;
    ~GpuState() override {
        gpu::delete_graph(graph);
        gpu::release_pinned(host_input);
        gpu::release_pinned(host_ids);
        gpu::release_pinned(host_slots);
        gpu::release_pinned(host_logits);
        gpu::release_pinned(host_layer_ids);
        gpu::release_pinned(host_split);
    }
    uint64_t bytes() const override { return host_bytes; }
    // The recurrent states cannot go back: a shorter prefix is evaluated
    // again from the start.
    int64_t rewind_limit(int64_t n) const override {
        return recurrent_state.data() && n < n_past ? 0 : n;
    }
};

// The first feature of `s` (or shape of `c`) the GPU forward has no
// operation for, in a few words; empty when it covers them all.
std::string missing_feature(const DecoderSpec& s, const ModelConfig& c) {
    auto any = [](const auto& v) { return std::any_of(v.begin(), v.end(), [](auto x) { return x != 0; }); };
    if (s.mla.kv_lora > 0 && (s.mla.row() > 1024 || s.mla.rope % 2 != 0)) {
        return "multi-head latent attention with rows over 1024 values or odd rope dims";
    }
    if (s.indexer.top_k > 0 && (s.indexer.head_dim > 1024 || s.rope.n_rot > s.indexer.head_dim)) {
        return "a sparse-attention indexer with heads over 1024 dims or narrower than the rope";
    }
    if (s.full_attention_interval > 0) {
        const DeltaNetShape& d = s.deltanet;
        if (d.head_v % 32 != 0 || d.head_v > 1024 || d.head_k > 4096) {
            return "Gated DeltaNet heads of " + std::to_string(d.head_v) + " values (a multiple of 32 up to 1024)";
        }
    }
    if (s.q_gate && s.qkv_bias) return "gated attention (q_gate) with q/k/v biases";
    if (s.qk_norm == QkNorm::PerHead && !s.rope.neox) return "per-head q/k norm with adjacent-pair RoPE";
    if (s.qk_norm == QkNorm::PerHead && any(s.no_rope)) return "per-head q/k norm on layers without RoPE";
    if (s.rope.n_rot > c.head_dim || s.rope.n_rot % 2 != 0) return "rope.dimension_count odd or above key_length";
    if (s.mla.kv_lora == 0 && c.head_dim != c.head_dim_v) return "key_length != value_length";
    if (s.mla.kv_lora == 0 && (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)) {
        return "query heads not a multiple of KV heads";
    }
    const Routing& r = s.routing;
    if (r.n_group > 1 && r.gating != Gating::Sigmoid) return "group-limited routing of other than sigmoid scores";
    if (r.n_group > 64) return "more than 64 expert groups";
    if (r.gating == Gating::SqrtSoftplus) return "sqrt-softplus routing";
    if (r.gating == Gating::Softmax && r.scale != 1.0f) return "scaled softmax routing weights";
    if (r.gating == Gating::Softmax && s.selection_bias) return "a selection bias on softmax routing";
    if (s.activation != GatedActivation::SwiGlu && s.activation != GatedActivation::SwiGluOai) {
        return "expert activations other than SwiGLU and gpt-oss's";
    }
    if (c.n_expert_used > 32 || c.n_expert > 1024) return "more than 32 experts a token or 1024 a layer";
    return "";
}

// Where up and down sit in an expert's slot, from the start of gate (per
// layer): in VRAM as in the RAM tier's slots when the kernels read both.
struct SlotLayout {
    size_t up = 0, down = 0;
    // Gate, up and down one after another, each 256-byte aligned.
    static SlotLayout aligned(const ExpertLayer& l) {
        return {align256(l.gate.bytes), align256(l.gate.bytes) + align256(l.up.bytes)};
    }
    // The bytes a slot of layer l takes.
    size_t bytes(const ExpertLayer& l) const { return align256(down + l.down.bytes); }
};

// The VRAM tier of the expert cache: equal slots, which expert each holds
// and which a miss evicts (the store's SlotCache), and a device table of
// each (layer, expert)'s address that the expert kernels read: its slot,
// or, where it has none, its fallback (the RAM tier's copy, mapped into the
// device's address space; null when there is none).
class VramExperts {
public:
    // host: the RAM tier's layout of each layer's slots, which the VRAM
    // slots then take (empty: gate, up and down 256-byte aligned). Which
    // slot a miss takes is the store's SlotCache's choice (one set of cache
    // policies for both tiers: --cache-policy, --step-fit), over slots of
    // VRAM it does not own.
    void init(const std::vector<ExpertLayer>& layers, int n_expert, uint64_t budget, int min_slots,
              const std::vector<SlotLayout>& host, CachePolicy policy, bool step_fit) {
        n_expert_ = n_expert;
        layout_.resize(layers.size());
        for (size_t il = 0; il < layers.size(); il++) {
            layout_[il] = host.empty() ? SlotLayout::aligned(layers[il]) : host[il];
            slot_bytes_ = std::max<uint64_t>(slot_bytes_, layout_[il].bytes(layers[il]));
        }
        int64_t total = 0;  // the routed layers' experts (dense layers have none)
        for (const ExpertLayer& l : layers) total += l.n_expert;
        n_slots_ = slot_bytes_ ? int(std::min<int64_t>(total, int64_t(budget / slot_bytes_))) : 0;
        if (n_slots_ < min_slots) {
            throw BudgetTooSmall("--gpu-mem: " + std::to_string(budget >> 20) + " MiB holds " +
                                     std::to_string(n_slots_) + " experts of " + std::to_string(slot_bytes_ >> 10) +
                                     " KiB; a layer needs " + std::to_string(min_slots));
        }
        all_ = n_slots_ == total;
        arena_ = DeviceMemory(size_t(n_slots_) * slot_bytes_);
        const size_t keys = layers.size() * size_t(n_expert);
        table_ = DeviceMemory(keys * sizeof(uint8_t*));
        host_table_.assign(keys, nullptr);
        fallback_.assign(keys, nullptr);
        // A model without routed experts has no slots; the cache is then
        // made of one that is never claimed (SlotCache needs one).
        order_ = std::make_unique<SlotCache>(std::max(n_slots_, 1), std::max<uint64_t>(slot_bytes_, 1),
                                             std::max(int(layers.size()), 1), std::max(n_expert, 1), policy,
                                             SlotCache::Arena::None);
        order_->set_step_fit(step_fit);
    }

    bool holds_all() const { return all_; }
    int n_slots() const { return n_slots_; }
    uint64_t slot_bytes() const { return slot_bytes_; }
    const uint8_t* const* table(int layer) const {
        return reinterpret_cast<const uint8_t* const*>(table_.data()) + int64_t(layer) * n_expert_;
    }
    // Offsets of up and down inside a slot of layer il.
    size_t up_offset(int il) const { return layout_[size_t(il)].up; }
    size_t down_offset(int il) const { return layout_[size_t(il)].down; }

    // (layer, id)'s address while it has no slot.
    void set_fallback(int layer, int id, const uint8_t* p) {
        const size_t key = size_t(int64_t(layer) * n_expert_ + id);
        fallback_[key] = p;
        if (order_->find(layer, id) < 0) host_table_[key] = p;
    }

    // A forward call of n_tokens tokens for each of n_seqs sequences begins
    // (SlotCache::begin_step: WLFU's window, the step fit).
    void begin_step(int n_tokens, int n_seqs) { order_->begin_step(n_tokens, n_seqs); }

    // The slot of (layer, id), its use counted (`uses` rows); -1 when absent.
    int find(int layer, int id, int uses = 1) {
        const int s = order_->find(layer, id);
        if (s >= 0) order_->touch(s, uses);
        return s;
    }
    // Whether (layer, id) has a slot; nothing counted.
    bool has(int layer, int id) const { return order_->find(layer, id) >= 0; }

    // Slots used from now on are not taken until the next protect() (a
    // layer's experts, while its kernels may still read them).
    void protect() { protect(mark()); }
    // Slots used from `since` on (a mark() taken earlier) are not taken
    // until the next protect(): a layer's experts copied ahead of its
    // routing keep their slots through its own copies.
    void protect(uint64_t since) { keep_since_ = since; }
    uint64_t mark() const { return order_->clock() + 1; }

    // A slot for (layer, id), by the policy among those not used since
    // protect() (any, if all were), its use counted; the table entry
    // changes when copy() is called, the evicted expert's goes back to
    // its fallback.
    int take(int layer, int id, int uses = 1) {
        int ev_layer = -1, ev_id = -1;
        int s = order_->claim(layer, id, &ev_layer, &ev_id, keep_since_);
        if (s < 0) s = order_->claim(layer, id, &ev_layer, &ev_id);
        if (ev_layer >= 0) {
            const size_t old = size_t(int64_t(ev_layer) * n_expert_ + ev_id);
            host_table_[old] = fallback_[old];
        }
        order_->set_ready(s);  // the copy is ordered on the streams, not waited for here
        order_->touch(s, uses);
        return s;
    }

    // The expert take() would evict now, as a layer * n_expert + expert key
    // (-1: a free slot, or none to take).
    int64_t next_victim() const {
        const int s = order_->next_victim(keep_since_);
        if (s < 0 || order_->layer_of(s) < 0) return -1;
        return int64_t(order_->layer_of(s)) * n_expert_ + order_->expert_of(s);
    }

    const uint8_t* address(int s) const { return arena_.data() + size_t(s) * slot_bytes_; }

    // Copies an expert's three matrices into slot s on `stream`; the table
    // points at the slot from now on, or, when !visible, once commit() says
    // the copy is done (until then, at the fallback).
    void copy(int s, int layer, int id, const ExpertLayer& l, const ExpertView& v, gpu::Stream stream,
              bool visible = true) {
        uint8_t* dst = arena_.data() + size_t(s) * slot_bytes_;
        gpu::copy_to_device(dst, v.gate, l.gate.bytes, stream);
        gpu::copy_to_device(dst + up_offset(layer), v.up, l.up.bytes, stream);
        gpu::copy_to_device(dst + down_offset(layer), v.down, l.down.bytes, stream);
        if (visible) host_table_[size_t(int64_t(layer) * n_expert_ + id)] = dst;
    }

    // A copy made with !visible has finished: the table points at its slot,
    // if (layer, id) still has it.
    void commit(int layer, int id) {
        const int s = order_->find(layer, id);
        if (s >= 0) host_table_[size_t(int64_t(layer) * n_expert_ + id)] = address(s);
    }

    // Whether the table sends (layer, id) to its slot.
    bool visible(int layer, int id) const {
        const int s = order_->find(layer, id);
        return s >= 0 && host_table_[size_t(int64_t(layer) * n_expert_ + id)] == address(s);
    }

    // The device table, as the slots and fallbacks stand, on `stream`
    // (the copy is staged: the host may change the table once it returns).
    void upload_table(gpu::Stream stream) {
        gpu::copy_to_device(table_.data(), host_table_.data(), host_table_.size() * sizeof(uint8_t*), stream);
    }

private:
    int n_expert_ = 0, n_slots_ = 0;
    bool all_ = false;
    uint64_t slot_bytes_ = 0;
    DeviceMemory arena_, table_;
    std::vector<const uint8_t*> host_table_, fallback_;
    std::vector<SlotLayout> layout_;  // per layer
    std::unique_ptr<SlotCache> order_;  // which expert each slot holds, and which a miss evicts
    uint64_t keep_since_ = UINT64_MAX;
};

// --gpu-profile: the device time of each stage of a token, from
// events recorded between its launches (the token is then launched kernel by
// kernel, not replayed from a graph), with the weight bytes each stage reads;
// printed, per token and as GB/s, when the model closes.
class StageProfile {
public:
    enum Stage { kAttnIn, kQkRope, kAttention, kAttnOut, kRouter, kTopK, kFetch, kGateUp, kDown, kHead, kStages };

    // title: "decode" or "prefill"; `tokens` in the printout are those of its passes.
    StageProfile(const char* title, int max_marks)
        : title_(title), events_(size_t(max_marks) + 1), stage_(size_t(max_marks) + 1) {
        for (gpu::Event& e : events_) e = gpu::new_event();
    }
    ~StageProfile() {
        static const char* names[kStages] = {"norm + q,k,v matvec", "q/k norm + rope + kv", "attention + 8-bit row",
                                             "output matvec", "norm + router matvec", "top-k",
                                             "expert copies (wait)", "experts gate/up + swiglu",
                                             "8-bit h + experts down + sum", "norm + output head"};
        if (tokens_ > 0) {
            double total = 0;
            for (double t : ms_) total += t;
            fprintf(stderr, "gpu %s profile: %.1f us a token over %llu tokens (kernels launched one by one)\n", title_,
                    1e3 * total / double(tokens_), (unsigned long long)tokens_);
            for (int i = 0; i < kStages; i++) {
                const double us = 1e3 * ms_[i] / double(tokens_), mb = double(bytes_[i]) / 1e6 / double(tokens_);
                fprintf(stderr, "  %-28s %8.1f us %5.1f%%  %8.2f MB  %7.1f GB/s\n", names[i], us,
                        100 * ms_[i] / std::max(total, 1e-9), mb, us > 0 ? mb * 1e3 / us : 0.0);
            }
        }
        for (gpu::Event e : events_) gpu::delete_event(e);
    }
    void begin(gpu::Stream s) {
        n_ = 0;
        gpu::record(events_[0], s);
    }
    void mark(Stage st, uint64_t bytes, gpu::Stream s) {
        if (n_ + 1 >= int(events_.size())) return;
        n_++;
        gpu::record(events_[size_t(n_)], s);
        stage_[size_t(n_)] = st;
        bytes_[st] += bytes;
    }
    // After the pass's stream is synchronized; it ran `tokens` tokens.
    void collect(int tokens = 1) {
        for (int i = 1; i <= n_; i++) ms_[stage_[size_t(i)]] += gpu::elapsed_ms(events_[size_t(i - 1)], events_[size_t(i)]);
        tokens_ += uint64_t(tokens);
        n_ = 0;
    }

private:
    const char* title_;
    std::vector<gpu::Event> events_;
    std::vector<Stage> stage_;
    int n_ = 0;
    double ms_[kStages] = {};
    uint64_t bytes_[kStages] = {};
    uint64_t tokens_ = 0;
};

class GpuDecoder : public DecoderWeights<Model> {
public:
    bool one_token_per_pass() const override { return true; }
    // qwen3-30b-a3b's 4,096-token prompt on an H100, attention on tensor
    // cores: 5,300 tok/s in passes of 512, 7,490 of 2,048, 7,950 of 4,096
    // (docs/gpu.md, twenty-seventh session); a pass's rows of 2,048 tokens
    // take some 0.42 GB of VRAM on that model (new_prefill_rows), of 4,096
    // twice that, taken from the expert cache where VRAM is short. Several
    // sequences (serve's slots) each hold their rows: 512 keeps 32 of them
    // at some 3.4 GB where 2,048 would take 13.
    int default_ubatch(int sequences) const override { return sequences > 1 ? 512 : 2048; }
    // The tensors `spec` names, declared as for the CPU decoder
    // (model/decoder_weights.h), of which missing_feature() has let through
    // only what the GPU runs; each weight a kernel reads must be of a type
    // it takes.
    GpuDecoder(const GgufFile& f, ModelConfig c, const DecoderSpec& spec, const GpuOptions& o)
        : DecoderWeights(f, std::move(c), spec), options_(o), cpu_misses_(o.cpu_misses) {
        for (int il = 0; il < n_run_; il++) {
            const AttentionLayer& a = attn_[size_t(il)];
            const FfnLayer& m = ffn_[size_t(il)];
            if (deltanet(il)) {
                const DeltaNetLayer& l = deltanet_[size_t(il)];
                for (const Tensor* t : {&l.wqkv, &l.wz, &l.wba, &l.wbeta, &l.walpha, &l.wout}) {
                    if (!t->empty()) require(t->type);
                }
                kv_layer_.push_back(-1);
            } else if (mla()) {
                const MlaLayer& l = mla_[size_t(il)];
                for (const Tensor* t : {&l.wq, &l.wq_a, &l.wq_b, &l.wkv_a, &l.wk_b, &l.wv_b, &l.wo}) {
                    if (!t->empty()) require(t->type);
                }
                kv_layer_.push_back(n_kv_layers_++);
            } else {
                for (const Tensor* t : {&a.wq, &a.wk, &a.wv, &a.wo}) require(t->type);
                kv_layer_.push_back(n_kv_layers_++);
            }
            for (const DenseFfn* d : {&m.dense, &m.shared}) {
                if (d->empty()) continue;
                for (const Tensor* t : {&d->gate, &d->up, &d->down}) require(t->type);
            }
            if (!m.moe()) continue;
            require(m.router.type);
            const ExpertLayer& e = expert_layers_[size_t(il)];
            for (const ExpertMatrix* x : {&e.gate, &e.up, &e.down}) require(x->type);
            // Biases and the clamped activation live in the fused gate/up kernels.
            if (e.gate.type != e.up.type && (clamped() || !m.gate_bias.empty() || !m.up_bias.empty())) {
                throw std::runtime_error(std::string("no CUDA kernel for expert biases or gpt-oss's activation with ") +
                                         type_name(e.gate.type) + " gate and " + type_name(e.up.type) + " up weights");
            }
        }
        require(output().type);
    }

    // The VRAM tier's account, on stderr: what the run report does not hold
    // yet; this run's uses merged into --routing-profile's file.
    ~GpuDecoder() override {
        if (tokens_ == 0) return;
        if (!routing_.uses.empty()) {
            routing_.tokens = tokens_;
            try {
                RoutingProfile::merge_into(options_.routing_profile, routing_);
                fprintf(stderr, "gpu: routing profile: %llu tokens' uses merged into %s\n",
                        (unsigned long long)tokens_, options_.routing_profile.c_str());
            } catch (const std::exception& e) {
                fprintf(stderr, "error: routing profile not written: %s\n", e.what());
            }
        }
        const double gib = double(vram_.slot_bytes()) * vram_.n_slots() / double(1 << 30);
        fprintf(stderr,
                "gpu: setup %.2f s: resident weights %.2f s, RAM tier page-locked (and filled, mapped) %.2f s, "
                "expert cache %.2f s\n",
                setup_.resident_weights + setup_.ram_tier + setup_.expert_cache, setup_.resident_weights,
                setup_.ram_tier, setup_.expert_cache);
        if (filled_bytes_ > 0) {
            fprintf(stderr, "gpu: RAM tier filled with every expert at start-up: %.2f GB in %.2f s\n",
                    filled_bytes_ / 1e9, setup_.ram_fill);
        }
        if (vram_.holds_all()) {
            fprintf(stderr, "gpu: every expert in VRAM (%d slots, %.2f GiB)%s; RAM tier page-locked: %.2f GiB\n",
                    vram_.n_slots(), gib, !profile_ ? ", a CUDA graph a token" : "", pinned_bytes_ / double(1 << 30));
            return;
        }
        fprintf(stderr,
                "gpu: VRAM expert cache %d slots (%.2f GiB): %llu hits, %llu misses (hit rate %.1f%%), %.2f GB "
                "copied host to device, %.1f MB a token over %llu tokens; RAM tier page-locked: %.2f GiB%s\n",
                vram_.n_slots(), gib, (unsigned long long)hits_, (unsigned long long)misses_,
                100.0 * double(hits_) / double(std::max<uint64_t>(1, hits_ + misses_)), copied_bytes_ / 1e9,
                copied_bytes_ / 1e6 / double(tokens_), (unsigned long long)tokens_, pinned_bytes_ / double(1 << 30),
                mapped_ ? ", mapped: misses read from it by the kernels, a CUDA graph a token" : "");
        const TierCounts& pc = phase_counts_[0];
        if (copy_gbps_ > 0 && pc.copied_bytes > 0 && pc.seconds > 0) {
            const double bound_s = double(pc.copied_bytes) / (copy_gbps_ * 1e9);
            fprintf(stderr,
                    "gpu: prompt passes: %.2f GB copied in %.3f s; alone at the link's %.1f GB/s (measured at "
                    "start-up) the copies take %.3f s: the passes ran at %.2f of that copy bound\n",
                    pc.copied_bytes / 1e9, pc.seconds, copy_gbps_, bound_s, bound_s / pc.seconds);
        }
        if (ahead_copies_ > 0) {
            fprintf(stderr,
                    "gpu: prompt passes: %llu experts copied ahead of their layer's routing, %.1f%% of them used\n",
                    (unsigned long long)ahead_copies_, 100.0 * double(ahead_used_) / double(ahead_copies_));
        }
        if (mapped_) {
            fprintf(stderr, "gpu: mapped RAM tier: %.1f MB a token read by the kernels over the bus\n",
                    bus_read_bytes_ / 1e6 / double(tokens_));
        }
        if (cpu_misses_) {
            fprintf(stderr,
                    "gpu: misses split %s: %.1f experts a token computed by the host (%.1f MB of "
                    "weights, %.2f ms a token on its threads, %.1f then copied into VRAM), %.1f copied on demand\n",
                    cpu_share_ >= 0 ? "by --gpu-host-share" : "by the measured times",
                    double(cpu_experts_) / double(tokens_), cpu_bytes_ / 1e6 / double(tokens_),
                    1e3 * cpu_seconds_ / double(tokens_), double(admitted_) / double(tokens_),
                    double(copied_misses_) / double(tokens_));
        }
        if (batch_host_experts_ > 0) {
            fprintf(stderr,
                    "gpu: batched passes: the host computed %llu misses (%llu rows, %.2f s on its threads) while the "
                    "link copied the others\n",
                    (unsigned long long)batch_host_experts_, (unsigned long long)batch_host_rows_,
                    batch_host_seconds_);
        }
        if (predicted_ > 0) {
            fprintf(stderr,
                    "gpu: next-layer prediction: %.1f%% of %llu predicted experts chosen; %llu copied ahead, %.1f%% "
                    "of them used\n",
                    100.0 * double(predicted_right_) / double(predicted_), (unsigned long long)predicted_,
                    (unsigned long long)prefetch_copies_,
                    100.0 * double(prefetch_used_) / double(std::max<uint64_t>(1, prefetch_copies_)));
        }
    }

    // gpu_tier_counts'.
    bool tier_counts_now(GpuTierCounts* out) const {
        if (vram_.holds_all()) return false;
        *out = {mapped_, hits_, misses_, cpu_experts_, prefetch_copies_, copied_bytes_, cpu_bytes_, bus_read_bytes_};
        return true;
    }

    // add_gpu_report's object.
    void add_to_report(Json* report) const {
        Json g = Json::object();
        g["device"] = gpu::describe();
        size_t free_b = 0, total_b = 0;
        gpu::memory_info(&free_b, &total_b);
        g["vram_bytes"] = uint64_t(total_b);
        g["vram_free_bytes"] = uint64_t(free_b);
        g["cuda_graphs"] = device_routed() && !profile_;
        g["ram_tier_mapped"] = mapped_;
        g["ram_tier_mode"] = mapped_ ? "map" : cpu_misses_ ? "cpu" : "copy";
        Json v = Json::object();
        v["slots"] = vram_.n_slots();
        v["slot_bytes"] = vram_.slot_bytes();
        v["bytes"] = vram_.slot_bytes() * uint64_t(vram_.n_slots());
        v["holds_every_expert"] = vram_.holds_all();
        v["hits"] = hits_;
        v["misses"] = misses_;
        v["hit_rate"] = hits_ + misses_ > 0 ? double(hits_) / double(hits_ + misses_) : 1.0;
        v["copied_bytes"] = copied_bytes_;
        v["copied_bytes_per_token"] = tokens_ > 0 ? double(copied_bytes_) / double(tokens_) : 0.0;
        // Mapped: the misses' matrices, which the kernels read from the RAM tier over the bus.
        v["bus_read_bytes"] = bus_read_bytes_;
        v["bus_read_bytes_per_token"] = tokens_ > 0 ? double(bus_read_bytes_) / double(tokens_) : 0.0;
        v["fill_seconds"] = fill_seconds_;
        // --gpu-ram-tier cpu: misses computed by the host's threads instead.
        v["host_computed"] = cpu_experts_;
        v["host_computed_bytes"] = cpu_bytes_;
        v["host_compute_seconds"] = cpu_seconds_;
        // Where the host's decode time goes around its part: waiting at each
        // MoE layer for the device's routing (and the work queued before it:
        // the layer before's experts, which wait for their copies), and
        // queueing copies (ahead, admissions, on demand; with a RAM tier
        // that does not hold every expert, its reads from the drive too).
        v["host_wait_routing_seconds"] = wait_routing_seconds_;
        v["host_queue_copies_seconds"] = queue_copies_seconds_;
        v["copied_misses"] = copied_misses_;
        // Prompt passes: experts copied ahead of their layer's routing (copy_ahead), and of them used.
        v["copied_ahead_of_routing"] = ahead_copies_;
        v["copied_ahead_used"] = ahead_used_;
        if (cpu_misses_) {
            v["host_share_eighths"] = cpu_share_;  // -1: host_misses' rule a layer
            v["host_expert_gbps"] = host_gbps_;
            v["copy_gbps"] = copy_gbps_;
            v["host_fixed_us"] = host_fixed_s_ * 1e6;
            v["host_expert_us"] = host_expert_s_ * 1e6;
            v["copy_expert_us"] = copy_expert_s_ * 1e6;
            v["admitted_host_misses"] = admitted_;
            v["admissions_skipped"] = admit_skipped_;  // host misses not admitted: admissions did not pay
            // Tokens of chunks (prompts, batched steps) decoded as steps,
            // where that cost less than a pass (steps_beat_pass).
            v["chunk_tokens_as_steps"] = chunk_steps_tokens_;
        }
        v["ram_fill_bytes"] = filled_bytes_;
        v["ram_fill_seconds"] = setup_.ram_fill;
        v["tokens"] = tokens_;
        v["predicted"] = predicted_;
        v["predicted_right"] = predicted_right_;
        v["prefetch_copies"] = prefetch_copies_;
        v["routing_profile_placed"] = uint64_t(placed_);
        v["prefetch_used"] = prefetch_used_;
        // The same for prefill calls and decode calls alone (a prefill pass
        // reads each expert it uses once for many tokens).
        v["prefill"] = phase_counts_[0].json(copy_gbps_);
        v["decode"] = phase_counts_[1].json(copy_gbps_);
        const TierCounts& dc = phase_counts_[1];
        if (cpu_misses_ && copy_gbps_ > 0 && host_gbps_ > 0 && dc.tokens > 0) {
            // The most tokens a second that the link and the host's cores
            // allow at decode's measured bytes a token, each at the rate
            // measured at start-up, the two working at once. The GPU's own
            // time and the per-layer waits for routing are not in it.
            const double link_s = dc.per_token(dc.copied_bytes) / (copy_gbps_ * 1e9);
            const double host_s = dc.per_token(dc.host_bytes) / (host_gbps_ * 1e9);
            v["decode"]["link_host_bound_tok_s"] = 1.0 / std::max({link_s, host_s, 1e-9});
        }
        g["vram_tier"] = v;
        // forward_batch's passes (serve --parallel): steps of several
        // sequences run as one pass, and their rows (tokens).
        Json b = Json::object();
        b["passes"] = batched_passes_;
        b["rows"] = batched_rows_;
        b["rows_per_pass"] = batched_passes_ > 0 ? double(batched_rows_) / double(batched_passes_) : 0.0;
        // --gpu-batch-host: the misses of those passes the host computed
        // (each expert once for all the rows that chose it), their rows, and
        // the host's time on them (while the link copied the others).
        b["host_part"] = batch_host_ready_;
        b["host_experts"] = batch_host_experts_;
        b["host_rows"] = batch_host_rows_;
        b["host_seconds"] = batch_host_seconds_;
        g["batched_decode"] = b;
        g["ram_tier_pinned_bytes"] = pinned_bytes_;
        Json up = Json::object();
        up["resident_weights_seconds"] = setup_.resident_weights;
        up["ram_tier_seconds"] = setup_.ram_tier;  // page-locking it; mapped, also reading every expert
        up["expert_cache_seconds"] = setup_.expert_cache;
        g["setup"] = up;
        (*report)["gpu"] = g;
    }

    std::unique_ptr<ModelState> new_state(const StateOptions& o) const override {
        const ModelConfig& c = config_;
        check_state_options(o);
        // The GPU's cache is F32; a q8_0 one is the CPU's alone.
        if (o.kv_type == GgmlType::Q8_0) throw std::runtime_error("a q8_0 KV cache runs on the CPU only (--gpu off)");
        auto st = std::make_unique<GpuState>();
        st->options = o;
        const size_t kv = size_t(n_kv_layers_) * size_t(o.n_ctx) * size_t(kv_row()) * 4;
        st->k_cache = DeviceMemory(kv);
        // MLA: the values are the compressed rows' first kv_lora floats.
        if (!mla()) st->v_cache = DeviceMemory(kv);
        st->kv_bytes_per_token = int64_t((mla() ? 1 : 2) * n_kv_layers_ * kv_row() * 4);
        st->full_kv_bytes_per_token =
            mla() ? int64_t(n_kv_layers_) * mla_full_kv_bytes(mla_shape_, GgmlType::F32) : st->kv_bytes_per_token;
        if (mla()) st->mla.alloc(mla_shape_, 1);
        if (n_indexer_ > 0) {
            const IndexerShape& is = indexer_shape_;
            st->top_k = int(std::min<int64_t>(is.top_k, o.n_ctx));
            st->index_keys = DeviceMemory(size_t(n_indexer_) * size_t(o.n_ctx) * size_t(is.head_dim) * 4);
            st->mla.alloc_indexer(is, 1, 1, o.n_ctx, st->top_k);
            st->kv_bytes_per_token += int64_t(n_indexer_) * is.head_dim * 4;  // full K/V: without them, as the CPU's
        }
        if (n_deltanet_ > 0) {
            const DeltaNetShape& sh = deltanet_shape_;
            st->conv_state = DeviceMemory(size_t(n_deltanet_ * sh.conv_state_floats()) * 4);
            st->recurrent_state = DeviceMemory(size_t(n_deltanet_ * sh.recurrent_state_floats()) * 4);
            st->dn_qkv = DeviceMemory(size_t(sh.conv_channels()) * 4);
            st->dn_conv = DeviceMemory(size_t(sh.conv_channels()) * 4);
            st->dn_z = DeviceMemory(size_t(sh.v_dim()) * 4);
            st->dn_ba = DeviceMemory(size_t(2 * sh.n_v_heads) * 4);
            st->dn_o = DeviceMemory(size_t(sh.v_dim()) * 4);
            st->dn_o8 = DeviceMemory(gpu::act_bytes(sh.v_dim()));
        }
        if (spec_.q_gate) st->qg = DeviceMemory(2 * size_t(c.q_dim()) * 4);
        const size_t E = size_t(c.n_embd), K = size_t(c.n_expert_used), F = size_t(spec_.n_ff_exp);
        const size_t FD = size_t(std::max(spec_.n_ff_dense, spec_.n_ff_shared));
        if (FD > 0) {
            st->ffn_gate = DeviceMemory(FD * 4);
            st->ffn_up = DeviceMemory(FD * 4);
            st->ffn_hidden = DeviceMemory(FD * 4);
            st->shared_out = DeviceMemory(E * 4);
            st->shared_logit = DeviceMemory(4);
            st->moe_out = DeviceMemory(E * 4);
            st->ffn_hidden8 = DeviceMemory(gpu::act_bytes(FD));
        }
        st->x = DeviceMemory(E * 4);
        st->xb = DeviceMemory(E * 4);
        st->q = DeviceMemory(size_t(c.q_dim()) * 4);
        st->k = DeviceMemory(size_t(c.kv_dim()) * 4);
        st->v = DeviceMemory(size_t(c.kv_dim()) * 4);
        st->att = DeviceMemory(size_t(c.q_dim()) * 4);
        st->att_part = DeviceMemory(mla() ? gpu::attention_scratch_bytes(mla_shape_.n_head, mla_shape_.row())
                                          : gpu::attention_scratch_bytes(c.n_head, c.head_dim));
        st->router = DeviceMemory(size_t(c.n_expert) * 4);
        st->ids = DeviceMemory(2 * K * 4);  // the layer's choice, the next layer's predicted
        st->weights = DeviceMemory(K * 4);
        st->gate = DeviceMemory(2 * K * F * 4);
        st->hidden = DeviceMemory(K * F * 4);
        st->logits = DeviceMemory(size_t(c.n_vocab) * 4);
        st->xb8 = DeviceMemory(gpu::act_bytes(E));
        st->att8 = DeviceMemory(gpu::act_bytes(c.q_dim()));
        st->hidden8 = DeviceMemory(K * gpu::act_bytes(F));
        st->input = DeviceMemory((E + size_t(rope_.n_rot) + 2) * 4);
        st->host_input = static_cast<float*>(gpu::alloc_pinned((E + size_t(rope_.n_rot) + 2) * 4));
        if (spec_.qk_norm == QkNorm::PlainAfterRope) {
            st->kt = DeviceMemory(size_t(c.kv_dim()) * 4);
            st->vt = DeviceMemory(size_t(c.kv_dim()) * 4);
        }
        if (spec_.weight_input) {
            st->xs = DeviceMemory(K * E * 4);
            st->xs8 = DeviceMemory(K * gpu::act_bytes(int64_t(E)));
            st->ones = ones(K);
        }
        gpu::prepare_attention(int(o.n_ctx), mla() ? mla_shape_.row() : c.head_dim);
        st->host_ids = static_cast<int32_t*>(gpu::alloc_pinned(2 * K * 4));
        st->next_xb = DeviceMemory(E * 4);
        st->next_xb8 = DeviceMemory(gpu::act_bytes(E));
        st->next_router = DeviceMemory(size_t(c.n_expert) * 4);
        st->next_weights = DeviceMemory(K * 4);
        st->slots = DeviceMemory(K * sizeof(uint8_t*));
        st->host_slots = static_cast<const uint8_t**>(gpu::alloc_pinned(K * sizeof(uint8_t*)));
        st->host_logits = static_cast<float*>(gpu::alloc_pinned(size_t(c.n_vocab) * 4));
        st->layer_ids = DeviceMemory(size_t(n_run_) * K * 4);
        st->host_layer_ids = static_cast<int32_t*>(gpu::alloc_pinned(size_t(n_run_) * K * 4));
        st->host_bytes = (E + size_t(rope_.n_rot) + 2 + 2 * K + size_t(c.n_vocab)) * 4 + K * sizeof(uint8_t*);
        // --gpu-ram-tier auto decides at the upload, after the first
        // state is made: its host rows are there for either mode.
        if (cpu_misses_ || options_.ram_tier_auto) {
            st->hit_ids = DeviceMemory(K * 4);
            st->hit_weights = DeviceMemory(K * 4);
            st->cpu_out = DeviceMemory(E * 4);
            st->host_split = static_cast<float*>(gpu::alloc_pinned((3 * K + 2 * E) * 4));
            st->cpu_moe.init(expert_layers_, 1, int(K));
            st->host_bytes += (3 * K + 2 * E) * 4 + st->cpu_moe.bytes();
        }
        if (options_.prefill_pass && o.max_batch > 1) {
            st->host_bytes += new_prefill_rows(st->prefill, o.max_batch, o.n_ctx, st->top_k);
        }
        return st;
    }

    // n floats of 1 on the device.
    static DeviceMemory ones(size_t n) {
        DeviceMemory d(n * 4);
        const std::vector<float> h(n, 1.0f);
        gpu::copy_to_device(d.data(), h.data(), n * 4, nullptr);
        gpu::sync(nullptr);
        return d;
    }

    // Rows for prefill passes of up to cap tokens (of states of n_ctx
    // positions, attending to top_k of them with sparse attention); returns
    // the pinned host bytes they take.
    uint64_t new_prefill_rows(PrefillRows& b, int cap, int64_t n_ctx, int top_k) const {
        const ModelConfig& c = config_;
        const size_t T = size_t(cap), E = size_t(c.n_embd), K = size_t(c.n_expert_used), F = size_t(spec_.n_ff_exp);
        const size_t FD = size_t(std::max(spec_.n_ff_dense, spec_.n_ff_shared)), R = size_t(rope_.n_rot);
        const size_t Q = size_t(c.q_dim()), KV = size_t(c.kv_dim());
        b.cap = cap;
        b.x = DeviceMemory(T * E * 4);
        b.xb = DeviceMemory(T * E * 4);
        b.xb8 = DeviceMemory(T * gpu::act_bytes(E));
        b.q = DeviceMemory(T * Q * 4);
        b.k = DeviceMemory(T * KV * 4);
        b.v = DeviceMemory(T * KV * 4);
        b.att = DeviceMemory(T * Q * 4);
        b.att8 = DeviceMemory(T * gpu::act_bytes(int64_t(Q)));
        const size_t att_rows = size_t(std::min(cap, kAttentionRows));
        b.att_part = DeviceMemory(att_rows * (mla() ? gpu::attention_scratch_bytes(mla_shape_.n_head, mla_shape_.row())
                                                    : gpu::attention_scratch_bytes(c.n_head, c.head_dim)));
        if (!mla() && n_kv_layers_ > 0 && options_.prefill_tensor_cores && options_.prefill_attention_tiles) {
            b.kv_planes = DeviceMemory(gpu::attention_tiled_scratch_bytes(n_ctx, c.n_head_kv, c.head_dim));
        }
        if (mla()) {
            const MlaShape& m = mla_shape_;
            const size_t H = size_t(m.n_head);
            b.mla.alloc(m, T);
            if (n_indexer_ > 0) b.mla.alloc_indexer(indexer_shape_, T, std::min(cap, kAttentionRows), n_ctx, top_k);
            const size_t tiles = H * ((T + gpu::kExpertTile - 1) / gpu::kExpertTile);
            b.mla_tiles = DeviceMemory((3 * tiles + T * H) * 4);
            b.host_mla_tiles.resize(3 * tiles + T * H);
            if (mla_expands()) {
                // Only where VRAM has room for them besides a margin: else
                // the prompts take the latent form's tiles.
                const int64_t positions = std::min<int64_t>(n_ctx, kMlaExpandedPositions);
                const size_t bytes = gpu::attention_expanded_scratch_bytes(positions, m.n_head, m.q_head(), m.v);
                const size_t k_b_bytes = H * size_t(m.nope) * size_t(m.kv_lora) * 4;
                size_t free_b = 0, total_b = 0;
                gpu::memory_info(&free_b, &total_b);
                if (free_b > bytes + k_b_bytes + (size_t(512) << 20)) {
                    b.mla.planes = DeviceMemory(bytes);
                    b.mla.k_b_rows = DeviceMemory(k_b_bytes);
                    b.mla.expanded = positions;
                } else {
                    fprintf(stderr,
                            "gpu: no room for the expanded MLA prompt planes (%.1f MiB): prompts take the latent "
                            "form's tiles\n",
                            double(bytes) / (1 << 20));
                }
            }
        }
        b.router = DeviceMemory(T * size_t(c.n_expert) * 4);
        b.ids = DeviceMemory(T * K * 4);
        b.weights = DeviceMemory(T * K * 4);
        if (F > 0) {
            b.gate = DeviceMemory(2 * T * K * F * 4);
            b.hidden = DeviceMemory(T * K * F * 4);
            b.hidden8 = DeviceMemory(T * K * gpu::act_bytes(int64_t(F)));
            b.down = DeviceMemory(T * K * E * 4);
        }
        if (FD > 0) {
            b.ffn_gate = DeviceMemory(T * FD * 4);
            b.ffn_up = DeviceMemory(T * FD * 4);
            b.ffn_hidden = DeviceMemory(T * FD * 4);
            b.ffn_hidden8 = DeviceMemory(T * gpu::act_bytes(int64_t(FD)));
            b.shared_out = DeviceMemory(T * E * 4);
            b.shared_logit = DeviceMemory(T * 4);
            b.moe_out = DeviceMemory(T * E * 4);
        }
        if (n_deltanet_ > 0) {
            const DeltaNetShape& sh = deltanet_shape_;
            b.dn_qkv = DeviceMemory(T * size_t(sh.conv_channels()) * 4);
            b.dn_conv = DeviceMemory(T * size_t(sh.conv_channels()) * 4);
            b.dn_z = DeviceMemory(T * size_t(sh.v_dim()) * 4);
            b.dn_ba = DeviceMemory(T * size_t(2 * sh.n_v_heads) * 4);
            b.dn_o = DeviceMemory(T * size_t(sh.v_dim()) * 4);
            b.dn_o8 = DeviceMemory(T * gpu::act_bytes(sh.v_dim()));
        }
        if (spec_.q_gate) b.qg = DeviceMemory(T * 2 * Q * 4);
        if (spec_.qk_norm == QkNorm::PlainAfterRope) {
            b.kt = DeviceMemory(T * KV * 4);
            b.vt = DeviceMemory(T * KV * 4);
        }
        if (spec_.weight_input) {
            b.xs = DeviceMemory(T * K * E * 4);
            b.xs8 = DeviceMemory(T * K * gpu::act_bytes(int64_t(E)));
            b.ones = ones(T * K);
        }
        b.rope = DeviceMemory(T * (R + 2) * 4);
        const size_t tile_ints = 3 * max_tiles(cap) + 2 * T * K;
        b.tiles = DeviceMemory(tile_ints * 4);
        b.logits = DeviceMemory(size_t(kLogitRows) * size_t(c.n_vocab) * 4);
        b.host_x = static_cast<float*>(gpu::alloc_pinned(T * E * 4));
        b.host_rope = static_cast<float*>(gpu::alloc_pinned(T * (R + 2) * 4));
        b.host_ids = static_cast<int32_t*>(gpu::alloc_pinned(T * K * 4));
        b.host_tiles = static_cast<int32_t*>(gpu::alloc_pinned(tile_ints * 4));
        b.layer_ids.resize(size_t(n_run_) * size_t(c.n_expert));
        b.layer_count.resize(size_t(n_run_));
        b.groups.resize(c.n_expert, T * K);
        b.miss.resize(size_t(c.n_expert));
        size_t seq_bytes = 0;
        if (batches_sequences()) {
            // Then each indexer layer's key caches, as a KV layer's.
            seq_bytes = size_t(n_kv_layers_ + n_indexer_) * 2 * T * sizeof(float*);
            b.seq_caches = DeviceMemory(seq_bytes);
            b.host_seq_caches = static_cast<float**>(gpu::alloc_pinned(seq_bytes));
            b.seqs.resize(T);
        }
        return (T * E + T * (R + 2) + T * K + tile_ints) * 4 + seq_bytes;
    }

    // The most expert tiles a pass of cap tokens can need: each expert's
    // pairs cut into tiles of kExpertTile, the last one of each partial.
    size_t max_tiles(int cap) const {
        return (size_t(cap) * size_t(config_.n_expert_used) + gpu::kExpertTile - 1) / gpu::kExpertTile +
               size_t(config_.n_expert);
    }

    void attach(ExpertSource& experts, ThreadPool& pool) const override {
        pool_ = &pool;
        std::call_once(uploaded_, [&] { upload(experts); });
    }

    // Whether forward_batch runs its sequences as the rows of one pass
    // (prefill_pass over rows of several sequences, each row the bits of
    // its sequence's decode step); Gated DeltaNet layers' recurrent states
    // are one sequence's in the pass, so those families decode in turn.
    bool batches_sequences() const { return options_.prefill_pass && n_deltanet_ == 0; }

    // n sequences' next tokens as the rows of one pass: each layer's
    // projections and experts run once over all rows (every expert the
    // step uses read once), attention over each row's own cache.
    void forward_batch(ModelState* const* states, int n, ExpertSource& experts, ThreadPool& pool,
                       const int32_t* tokens, float* logits) const override {
        GpuState& lead = static_cast<GpuState&>(*states[0]);
        const bool can_pass = n > 1 && batches_sequences() && n <= lead.prefill.cap;
        const bool steps = can_pass && chunk_as_steps(n);
        if (!can_pass || steps) {
            if (steps) chunk_steps_tokens_ += uint64_t(n);
            Model::forward_batch(states, n, experts, pool, tokens, logits);
            return;
        }
        pool_ = &pool;
        std::call_once(uploaded_, [&] { upload(experts); });
        prepare_batch_host(experts);
        const TierCounts before = tier_counts();
        const double t0 = now();
        for (int i = 0; i < n; i++) {
            lead.prefill.seqs[size_t(i)] = static_cast<GpuState*>(states[i]);
            states[i]->decode_time.calls++;
        }
        if (!mapped_) experts.start_step(n);
        vram_.begin_step(1, n);
        decode_rows_ = true;
        try {
            prefill_pass(lead, experts, tokens, n, logits, true, true, lead.prefill.seqs.data());
        } catch (...) {
            decode_rows_ = false;
            throw;
        }
        decode_rows_ = false;
        phase_counts_[1].add(tier_counts(), before);
        phase_counts_[1].seconds += now() - t0;
        batched_passes_++;
        batched_rows_ += uint64_t(n);
    }

    void forward(ModelState& state, ExpertSource& experts, ThreadPool& pool, const int32_t* tokens, int n,
                 float* logits, bool all_logits) const override {
        pool_ = &pool;
        std::call_once(uploaded_, [&] { upload(experts); });
        const TierCounts before = tier_counts();
        const double t0 = now();
        vram_.begin_step(n, 1);
        forward_call(static_cast<GpuState&>(state), experts, tokens, n, logits, all_logits);
        const double dt = now() - t0;
        if (n == 1) {
            step_seconds_ += dt;
            steps_timed_++;
        }
        phase_counts_[n > 1 ? 0 : 1].add(tier_counts(), before);
        phase_counts_[n > 1 ? 0 : 1].seconds += dt;
    }

private:
    // The VRAM tier's counters, and their part in prefill calls (n > 1) and
    // in decode calls, for the report.
    struct TierCounts {
        uint64_t hits = 0, misses = 0, copied_bytes = 0, bus_read_bytes = 0, tokens = 0;
        uint64_t host_computed = 0, host_bytes = 0;  // --gpu-ram-tier cpu
        double seconds = 0;                          // the calls' wall time (TierCounts::add leaves it)
        void add(const TierCounts& now, const TierCounts& before) {
            hits += now.hits - before.hits;
            misses += now.misses - before.misses;
            copied_bytes += now.copied_bytes - before.copied_bytes;
            bus_read_bytes += now.bus_read_bytes - before.bus_read_bytes;
            tokens += now.tokens - before.tokens;
            host_computed += now.host_computed - before.host_computed;
            host_bytes += now.host_bytes - before.host_bytes;
        }
        double per_token(uint64_t x) const { return tokens > 0 ? double(x) / double(tokens) : 0.0; }
        // link_gbps: the link's measured rate for expert copies (0: not
        // measured; the RAM tier mapped, holding only part of the experts,
        // or every expert in VRAM).
        Json json(double link_gbps) const {
            Json o = Json::object();
            o["tokens"] = tokens;
            o["seconds"] = seconds;
            o["copied_bytes"] = copied_bytes;
            o["hits"] = hits;
            o["misses"] = misses;
            o["hit_rate"] = hits + misses > 0 ? Json(double(hits) / double(hits + misses)) : Json(nullptr);
            o["copied_bytes_per_token"] = per_token(copied_bytes);
            o["bus_read_bytes_per_token"] = per_token(bus_read_bytes);
            o["host_computed_per_token"] = per_token(host_computed);
            o["host_bytes_per_token"] = per_token(host_bytes);
            if (link_gbps > 0 && copied_bytes > 0 && seconds > 0) {
                // The copies alone at the link's rate, against the calls'
                // time: 1.0 where the calls took no longer than their copies.
                const double bound_s = double(copied_bytes) / (link_gbps * 1e9);
                o["link_gbps"] = link_gbps;
                o["copy_bound_seconds"] = bound_s;
                o["copy_bound_fraction"] = bound_s / seconds;
            }
            return o;
        }
    };
    TierCounts tier_counts() const {
        return {hits_, misses_, copied_bytes_, bus_read_bytes_, tokens_, cpu_experts_, cpu_bytes_};
    }

    void forward_call(GpuState& st, ExpertSource& experts, const int32_t* tokens, int n, float* logits,
                      bool all_logits) const {
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, V = c.n_vocab;
        // Mapped, the RAM tier holds every expert acquired since the upload
        // (a step's start would release them) and counts no uses.
        if (!mapped_) experts.start_step(n);
        if (st.recurrent_state.data()) {
            // The recurrent states hold positions [0, recurrent_pos): a
            // sequence starts from zeros; rewind_limit sends any shorter
            // prefix back to the start.
            if (st.n_past == 0) {
                gpu::fill(st.conv_state.data(), 0, size_t(n_deltanet_ * deltanet_shape_.conv_state_floats()) * 4,
                          compute_);
                gpu::fill(st.recurrent_state.data(), 0,
                          size_t(n_deltanet_ * deltanet_shape_.recurrent_state_floats()) * 4, compute_);
            } else if (st.n_past != st.recurrent_pos) {
                throw std::runtime_error("GPU: the recurrent layers hold " + std::to_string(st.recurrent_pos) +
                                         " positions and cannot continue from " + std::to_string(st.n_past));
            }
            st.recurrent_pos = st.n_past + n;
        }
        TimeSplit* time = n == 1 ? &st.decode_time : &st.prefill_time;
        time->calls++;
        const bool steps = n > 1 && st.prefill.cap > 0 && chunk_as_steps(n);
        if (steps) chunk_steps_tokens_ += uint64_t(n);
        if (n > 1 && st.prefill.cap > 0 && !steps) {
            for (int t0 = 0; t0 < n; t0 += st.prefill.cap) {
                const int m = std::min(st.prefill.cap, n - t0);
                prefill_pass(st, experts, tokens + t0, m, logits + (all_logits ? int64_t(t0) * V : 0), all_logits,
                             all_logits || t0 + m == n);
            }
            // The decode graph is captured (recorded, not run) here, in the
            // time to the first token, rather than by the first decode step
            // (16 tokens after a 512-token pass decoded 296-314 tok/s
            // against 338-342 after a token-by-token prefill).
            if (device_routed() && !profile_ && !st.graph) {
                gpu::capture_begin(compute_);
                token(st, experts, nullptr);
                st.graph = gpu::capture_end(compute_);
            }
            return;
        }
        // Copying the next layer's predicted experts ahead pays where they
        // are in RAM; from the drive only where the store wants the hints
        // (--prefetch): a wrong guess costs a read and evicts a RAM slot.
        prefetch_now_ = options_.prefetch_next_layer && (ram_holds_all_ || experts.wants_prefetch());
        const gpu::Stream s = compute_;
        // One token at a time: prefill is a sequence of decode steps here.
        for (int t = 0; t < n; t++) {
            // The token's embedding, rope angles and position in one copy.
            dequantize_row(token_embd_.type, token_embd_.row(tokens[t]), st.host_input, E);
            rope_angles(rope(), st.n_past, st.host_input + E);
            const int32_t pos = int32_t(st.n_past);
            memcpy(st.host_input + E + rope_.n_rot, &pos, 4);
            st.host_input[E + rope_.n_rot + 1] = attention_temperature(spec_.temperature, st.n_past);
            gpu::copy_to_device(st.input.data(), st.host_input, size_t(E + rope_.n_rot + 2) * 4, s);
            if (device_routed() && !profile_) {
                // Nothing in a token waits for the host: one graph replays it.
                if (!st.graph) {
                    gpu::capture_begin(s);
                    token(st, experts, nullptr);
                    st.graph = gpu::capture_end(s);
                }
                gpu::launch(st.graph, s);
            } else {
                token(st, experts, time);
            }
            st.n_past++;
            tokens_++;
            const bool out = all_logits || t == n - 1;
            if (out) gpu::copy_to_host(st.host_logits, st.logits.data(), size_t(V) * 4, s);
            if (mapped_) {
                gpu::copy_to_host(st.host_layer_ids, st.layer_ids.data(),
                                  size_t(n_run_) * size_t(c.n_expert_used) * 4, s);
            }
            gpu::sync(s);  // host_input is written again for the next token
            gpu::check_last("forward");
            release_held(experts);
            if (mapped_) {
                count_uses(st.host_layer_ids, c.n_expert_used);
                refresh_vram(st.host_layer_ids, c.n_expert_used, nullptr);
            }
            age_uses();
            if (out) memcpy(logits + (all_logits ? int64_t(t) * V : 0), st.host_logits, size_t(V) * 4);
            if (profile_) profile_->collect();
        }
    }

    // The layer's weights in VRAM (null where the layer has none).
    struct DeviceFfn {
        const uint8_t *gate, *up, *down;
    };
    struct DeviceLayer {
        const uint8_t *wq, *wk, *wv, *wo, *router;
        const float *attn_norm, *q_norm, *k_norm, *ffn_norm;
        const float *bq, *bk, *bv, *bo, *router_bias, *selection_bias, *shared_gate;
        const float* sinks;  // n_head logits, or null
        const float *gate_bias, *up_bias, *down_bias;  // per-expert rows (gpt-oss), or null
        DeviceFfn dense, shared;
        // A Gated DeltaNet layer's (attn_norm is its norm).
        const uint8_t *dn_qkv, *dn_z, *dn_ba, *dn_beta, *dn_alpha, *dn_out;
        const float *dn_conv, *dn_dt_bias, *dn_a, *dn_norm;
        // Multi-head latent attention's (wo is its output matrix); k_b and
        // v_b: device tables of each head's matrix.
        const uint8_t *mla_wq, *mla_wq_a, *mla_wq_b, *mla_wkv_a;
        const float *mla_q_a_norm, *mla_kv_a_norm;
        const uint8_t* const* mla_k_b;
        const uint8_t* const* mla_v_b;
        const uint8_t *mla_k_b0, *mla_v_b0;  // the first head's matrix: all of them, one after another
        // The layer's sparse-attention indexer's, where it has one.
        const uint8_t *idx_wq_b, *idx_wk, *idx_proj;
        const float *idx_k_norm, *idx_k_bias;

        // The expert kernels' biases and activation; ids: the routed ids
        // (decode), by which a streamed layer's slots find their bias rows.
        gpu::ExpertExtras extras(bool clamped, bool own_input, const int32_t* ids = nullptr) const {
            return {gate_bias, up_bias, down_bias, ids, clamped, own_input};
        }
    };

    bool clamped() const { return spec_.activation == GatedActivation::SwiGluOai; }

    bool deltanet(int il) const { return !deltanet_.empty() && !deltanet_[size_t(il)].empty(); }
    bool mla() const { return mla_shape_.kv_lora > 0; }
    // Floats in a layer's KV cache row: MLA's compressed row, else kv_dim.
    int64_t kv_row() const { return mla() ? mla_shape_.row() : config_.kv_dim(); }

    // Layer il's rows of the KV caches (an attention layer's).
    float* k_rows(const GpuState& st, int il) const {
        return st.k_cache.f32() + int64_t(kv_layer_[size_t(il)]) * st.options.n_ctx * kv_row();
    }
    // Whether layer il has an indexer of its own (DeepSeek sparse attention;
    // the others reuse the selection of the nearest earlier one), and its
    // key rows.
    bool indexed(int il) const { return !indexer_.empty() && indexer_slot_[size_t(il)] >= 0; }
    float* index_rows(const GpuState& st, int il) const {
        return st.index_keys.f32() + indexer_slot_[size_t(il)] * st.options.n_ctx * indexer_shape_.head_dim;
    }
    float* v_rows(const GpuState& st, int il) const {
        return st.v_cache.f32() + int64_t(kv_layer_[size_t(il)]) * st.options.n_ctx * config_.kv_dim();
    }

    gpu::DeltaNetDims deltanet_dims() const {
        const DeltaNetShape& d = deltanet_shape_;
        return {d.n_k_heads, d.n_v_heads, d.head_k, d.head_v, d.conv_kernel, d.fused_ba, d.tiled_heads};
    }

    // A Gated DeltaNet layer over n tokens (the rows `r` hold, one token's
    // or a pass's): xb (the normed residual) in, its output added to x.
    // One launch a matrix, the states carried on: n tokens in one call
    // give each the bits of n calls of one.
    struct DeltaNetRows {
        float *qkv, *conv, *z, *ba, *o;
        void* o8;
    };
    void deltanet_layer(GpuState& st, int il, const DeltaNetRows& r, int n, gpu::Act xb, float* x) const {
        const gpu::Stream s = compute_;
        const DeltaNetLayer& l = deltanet_[size_t(il)];
        const DeviceLayer& d = device_[size_t(il)];
        const DeltaNetShape& sh = deltanet_shape_;
        const int64_t E = config_.n_embd, C = sh.conv_channels(), VD = sh.v_dim(), NV = sh.n_v_heads;
        const Tensor& wb = sh.fused_ba ? l.wba : l.wbeta;
        if (n == 1) {
            const GgmlType types[3] = {l.wqkv.type, l.wz.type, wb.type};
            const void* w[3] = {d.dn_qkv, d.dn_z, sh.fused_ba ? d.dn_ba : d.dn_beta};
            const int64_t rows[3] = {C, VD, sh.fused_ba ? 2 * NV : NV};
            float* y[3] = {r.qkv, r.z, r.ba};
            gpu::matvec_multi(3, types, w, rows, E, xb, y, s);
            if (!sh.fused_ba) gpu::matvec(l.walpha.type, d.dn_alpha, NV, E, xb, r.ba + NV, s);
        } else {
            pass_matmul(l.wqkv.type, d.dn_qkv, C, E, n, xb, r.qkv, s, false, 0);
            pass_matmul(l.wz.type, d.dn_z, VD, E, n, xb, r.z, s, false, 0);
            if (sh.fused_ba) {
                pass_matmul(l.wba.type, d.dn_ba, 2 * NV, E, n, xb, r.ba, s, false, 0);
            } else {
                pass_matmul(l.wbeta.type, d.dn_beta, NV, E, n, xb, r.ba, s, false, 0);
                pass_matmul(l.walpha.type, d.dn_alpha, NV, E, n, xb, r.ba + int64_t(n) * NV, s, false, 1);
            }
        }
        const int slot = deltanet_slot_[size_t(il)];
        float* conv_state = st.conv_state.f32() + int64_t(slot) * sh.conv_state_floats();
        float* state = st.recurrent_state.f32() + int64_t(slot) * sh.recurrent_state_floats();
        gpu::deltanet_conv(r.qkv, d.dn_conv, sh.conv_kernel, C, n, conv_state, r.conv, s);
        gpu::deltanet_recurrence(deltanet_dims(), r.conv, r.z, r.ba, d.dn_dt_bias, d.dn_a, d.dn_norm, config_.rms_eps,
                                 n, state, r.o, s);
        rows_product(l.wout.type, d.dn_out, E, VD, n, {r.o, quantize(r.o, n, VD, r.o8)}, x, true);
    }

    // Whether a row of `width` floats meets quantized weights as 8-bit rows
    // (quantized weights' rows are whole blocks of 32, so a width that is
    // not a multiple only meets F32 / F16 weights, which read the floats).
    bool act8(int64_t width) const { return act8_ && width % 32 == 0; }

    // A prefill pass's matrix products: on tensor cores (gpu.h's mma_*)
    // where --gpu-prefill tensor, the weights' type has a kernel there and x
    // comes as 8-bit rows; else decode's arithmetic (matmul, each row
    // matvec's bits).
    // forward_batch's passes keep decode's arithmetic whatever the flag:
    // each row must carry the bits its sequence's decode step gives alone.
    bool tensor(GgmlType t, const gpu::Act& x) const { return rounding_pass() && x.q && gpu::mma_supports(t); }
    // Whether this pass is held only to rounding against decoding
    // (--gpu-prefill tensor, not forward_batch's rows), so its kernels may
    // sum in another order than decode's.
    bool rounding_pass() const { return options_.prefill_tensor_cores && !decode_rows_; }
    void pass_matmul(GgmlType t, const void* w, int64_t rows, int64_t cols, int n, gpu::Act x, float* y,
                     gpu::Stream s, bool add, int parts_of) const {
        if (tensor(t, x)) {
            gpu::mma_matmul(t, w, rows, cols, n, x, y, s, add);
        } else if (t == GgmlType::F32 && rounding_pass() && cols % 32 == 0) {
            gpu::mma_matmul_f32(static_cast<const float*>(w), rows, cols, n, x.f, y, s, add);
        } else {
            gpu::matmul(t, w, rows, cols, n, x, y, s, add, parts_of);
        }
    }
    // Products of a pass that read the same rows and write apart (q, k and
    // v; MLA's two compressions), launched at once: the first on the
    // compute stream, the others on side streams joined back to it. A short
    // pass gives the small ones a few blocks each (qwen3-30b-a3b's k at 512
    // tokens: 4 row blocks x 16 tiles of inputs, 64 blocks on 132 SMs), so
    // one after another each took about as long as q's whole grid.
    // Decoding's passes (forward_batch's rows) keep one stream. fork(k)
    // before k products (at most 3), stream(i) product i's, join(k) after.
    void fork(int k) const {
        if (!rounding_pass()) return;
        gpu::record(forked_, compute_);
        for (int i = 1; i < k; i++) gpu::wait(side_[size_t(i - 1)], forked_);
    }
    gpu::Stream stream(int i) const { return i == 0 || !rounding_pass() ? compute_ : side_[size_t(i - 1)]; }
    void join(int k) const {
        for (int i = 1; i < k && rounding_pass(); i++) {
            gpu::record(joined_[size_t(i - 1)], side_[size_t(i - 1)]);
            gpu::wait(compute_, joined_[size_t(i - 1)]);
        }
    }

    // Whether layer il's experts run on tensor cores in a pass (all three
    // matrices' types covered; their inputs' widths take 8-bit rows).
    bool tensor_experts(int il) const {
        const ExpertLayer& el = expert_layers_[size_t(il)];
        return rounding_pass() && act8(config_.n_embd) && act8(spec_.n_ff_exp) &&
               gpu::mma_supports(el.gate.type) && gpu::mma_supports(el.up.type) && gpu::mma_supports(el.down.type);
    }

    // x's 8-bit rows in `act` (quantize_act), or null when act8(width) is not.
    void* quantize(const float* x, int64_t rows, int64_t width, void* act) const {
        if (!act8(width)) return nullptr;
        gpu::quantize_act(x, rows, width, act, compute_);
        return act;
    }

    // A dense SwiGLU FFN over xb: into out, or added to it.
    void dense_ffn(GpuState& st, const DenseFfn& f, const DeviceFfn& d, gpu::Act xb, float* out, bool add) const {
        const gpu::Stream s = compute_;
        const int64_t n_ff = f.gate.rows;
        const GgmlType types[2] = {f.gate.type, f.up.type};
        const void* w[2] = {d.gate, d.up};
        const int64_t rows[2] = {n_ff, n_ff};
        float* y[2] = {st.ffn_gate.f32(), st.ffn_up.f32()};
        gpu::matvec_multi(2, types, w, rows, config_.n_embd, xb, y, s);
        gpu::swiglu(y[0], y[1], n_ff, st.ffn_hidden.f32(), s);
        void* h8 = quantize(st.ffn_hidden.f32(), 1, n_ff, st.ffn_hidden8.data());
        gpu::matvec(f.down.type, d.down, config_.n_embd, n_ff, {st.ffn_hidden.f32(), h8}, out, s, add);
    }

    // The MoE layer's router over xb chooses its experts into ids and
    // weights (as model/ffn_block.cpp's route_tokens: the router's bias,
    // then the layer's Routing).
    void route(const FfnLayer& m, const DeviceLayer& d, gpu::Act xb, float* logits, int32_t* ids,
               float* weights) const {
        const gpu::Stream s = compute_;
        const int64_t X = config_.n_expert;
        const int K = config_.n_expert_used;
        gpu::matvec(m.router.type, d.router, X, config_.n_embd, xb, logits, s);
        if (d.router_bias) gpu::add(logits, d.router_bias, X, s);
        if (m.routing.gating == Gating::Sigmoid) {
            gpu::route_sigmoid_topk(logits, d.selection_bias, int(X), K, m.routing.renorm, m.routing.scale, ids,
                                    weights, s, 1, m.routing.n_group, m.routing.n_group_used);
        } else {
            gpu::route_softmax_topk(logits, int(X), K, m.routing.renorm, ids, weights, s, 1,
                                    m.routing.gating == Gating::SoftmaxChosen);
        }
    }

    // Whether a pass takes MLA's per-head k_b and v_b products on tensor
    // cores: a rounding pass, both inputs as 8-bit rows, and every layer's
    // two types with a kernel there (the head tiles are cut for one or the
    // other kernel, for all layers at once). On an H100 this took DeepSeek
    // V3's 6-layer cut from 4,756 to 6,855 prompt tokens a second at 512
    // tokens and from 4,214 to 5,758 at 4,096 (docs/gpu.md, twenty-ninth
    // session).
    bool mla_heads_mma() const {
        if (!rounding_pass() || !act8(mla_shape_.nope) || !act8(mla_shape_.kv_lora)) return false;
        for (const MlaLayer& l : mla_)
            if (!gpu::mma_supports(l.wk_b.type) || !gpu::mma_supports(l.wv_b.type)) return false;
        return true;
    }
    // Whether prompt passes may take MLA's expanded form (--gpu-prefill-mla
    // expand): every head's keys [k_b c | k_pe] and values v_b c built for
    // the positions, then attention over keys of nope + rope and values of
    // v (DeepSeek V3: 192 and 128, against the latent form's 576 and 512).
    // Dense MLA only (the indexer's chosen positions keep the latent
    // form), k_b of a type mla_k_b_transposed reads, a shape the kernel
    // has, and the pass's rows (lat, qlat) wide enough to hold a chunk's
    // k_nope and v.
    bool mla_expands() const {
        const MlaShape& m = mla_shape_;
        if (!options_.prefill_tensor_cores || !options_.prefill_mla_tiles || !options_.prefill_mla_expand) return false;
        if (!indexer_.empty() || m.kv_lora < m.nope || m.row() < m.v || m.kv_lora % 32 != 0) return false;
        if (!gpu::attention_expanded_supports(m.q_head(), m.v)) return false;
        for (const MlaLayer& l : mla_)
            if (!gpu::mla_k_b_transposable(l.wk_b.type)) return false;
        return true;
    }
    // The positions whose expanded planes a pass keeps at most: 164 KiB a
    // position for DeepSeek V3 (128 heads of 192 + 128 dims as f16 halves),
    // 1.3 GiB at 8,192. Longer contexts' later passes take the latent form.
    static constexpr int64_t kMlaExpandedPositions = 8192;

    // Prefill's MLA head products as expert tiles: head h's pairs are the n
    // tokens' rows t * n_head + h (read and written), in tiles of up to
    // kMmaTile pairs for the tensor cores (mla_heads_mma), else kExpertTile,
    // so matmul_experts runs each head's k_b (v_b) over its rows with
    // decode's lanes and order (bit for bit its matvec_experts).
    gpu::ExpertTiles mla_head_tiles(PrefillRows& b, int n) const {
        const int H = mla_shape_.n_head;
        const size_t tile_ints = 3 * size_t(H) * ((size_t(b.cap) + gpu::kExpertTile - 1) / gpu::kExpertTile);
        int32_t* tiles = b.host_mla_tiles.data();
        int32_t* rows = tiles + tile_ints;
        int n_tiles = 0;
        // Tensor-core tiles hold kMmaTile pairs (fewer tiles than the
        // buffer's count).
        const int per_tile = mla_heads_mma() ? gpu::kMmaTile : gpu::kExpertTile;
        for (int h = 0; h < H; h++) {
            for (int t = 0; t < n; t++) rows[h * n + t] = t * H + h;
            for (int j = 0; j < n; j += per_tile) {
                int32_t* tl = tiles + 3 * n_tiles++;
                tl[0] = h;
                tl[1] = h * n + j;
                tl[2] = std::min(per_tile, n - j);
            }
        }
        int32_t* dev = reinterpret_cast<int32_t*>(b.mla_tiles.data());
        gpu::copy_to_device(dev, tiles, size_t(3 * n_tiles) * 4, compute_);
        gpu::copy_to_device(dev + tile_ints, rows, size_t(n) * size_t(H) * 4, compute_);
        return {dev, n_tiles, dev + tile_ints, dev + tile_ints};
    }

    // k (at most 3) matrices over the same n rows of x (y[i] = w[i] . x):
    // one token as decode's one matvec_multi launch, a pass as a matmul
    // each, at once (fork).
    void rows_products(int k, const GgmlType* types, const void* const* w, const int64_t* rows, int64_t cols, int n,
                       gpu::Act x, float* const* y) const {
        if (n == 1) {
            gpu::matvec_multi(k, types, w, rows, cols, x, y, compute_);
        } else {
            fork(k);
            for (int i = 0; i < k; i++) pass_matmul(types[i], w[i], rows[i], cols, n, x, y[i], stream(i), false, 0);
            join(k);
        }
    }

    // y = w . x over n rows: one token as decode's matvec, a pass as the
    // matmul that gives each row matvec's bits.
    void rows_product(GgmlType t, const void* w, int64_t rows, int64_t cols, int n, gpu::Act x, float* y,
                      bool add) const {
        if (n == 1) {
            gpu::matvec(t, w, rows, cols, x, y, compute_, add);
        } else {
            pass_matmul(t, w, rows, cols, n, x, y, compute_, add, 1);
        }
    }

    // Multi-head latent attention of layer il over xb (n rows of the normed
    // residual), as model/mla_attention.cpp, its output added to x: q
    // (through its compression or not) and the compressed rows; their latent
    // parts normed, the rope dims of q's heads and of k_pe rotated, the rows
    // cached; each head's q_nope moved into latent space by its k_b; then
    // one-KV-head attention over the cached rows (the values are their
    // first kv_lora), each head's latent output through its v_b, and wo.
    // One token takes decode's launches; a pass (n > 1) their batched forms,
    // each row bit for bit decode's (the heads' k_b and v_b as expert tiles,
    // `heads`; the latent parts normed in a contiguous copy).
    // DeepSeek sparse attention: the layer's indexer (keys from xb, queries
    // from the normed compressed q) chooses each row's positions, or the
    // nearest earlier indexer's choice, left in r, is reused; index_seq: the
    // rows' key caches as seq gives their KV caches.
    void mla_layer(GpuState& st, int il, const MlaRows& r, float* att_part, float* x, int n, gpu::Act xb,
                   const float* cos_sin, const int32_t* pos, const gpu::ExpertTiles& heads,
                   float* const* seq = nullptr, float* const* index_seq = nullptr,
                   StageProfile* prof = nullptr) const {
        const ModelConfig& c = config_;
        const MlaShape& m = mla_shape_;
        const MlaLayer& l = mla_[size_t(il)];
        const DeviceLayer& d = device_[size_t(il)];
        const gpu::Stream s = compute_;
        const int64_t E = c.n_embd, H = m.n_head, QH = m.q_head(), R = m.row(), L = m.kv_lora;
        const size_t HN = size_t(n) * size_t(H);
        float* q = r.q.f32();
        float* row = r.ckv.f32();
        float* qa = r.qa.f32();
        const bool direct = !l.wq.empty();  // q straight from x, not through its compression
        const GgmlType types[2] = {direct ? l.wq.type : l.wq_a.type, l.wkv_a.type};
        const void* w[2] = {direct ? d.mla_wq : d.mla_wq_a, d.mla_wkv_a};
        const int64_t rows[2] = {direct ? H * QH : m.q_lora, R};
        float* y[2] = {direct ? q : qa, row};
        rows_products(2, types, w, rows, E, n, xb, y);
        void* qa8 = !direct && act8(m.q_lora) ? r.qa8.data() : nullptr;
        if (!direct) {
            gpu::rms_norm(qa, d.mla_q_a_norm, n, m.q_lora, c.rms_eps, qa, s, qa8);
            rows_product(l.wq_b.type, d.mla_wq_b, H * QH, m.q_lora, n, {qa, qa8}, q, false);
        }
        // --gpu-profile of a pass: the layer's parts as the stages of
        // grouped-query attention's (projections, the heads' k_b product
        // with RoPE and the cache row, attention, v_b and the output).
        auto mark = [&](StageProfile::Stage stage) {
            if (prof) prof->mark(stage, 0, s);
        };
        mark(StageProfile::kAttnIn);
        const bool sparse = !indexer_.empty();
        if (indexed(il)) index_select(st, il, r, n, xb, {qa, qa8}, cos_sin, pos, index_seq);
        if (n == 1) {
            gpu::rms_norm(row, d.mla_kv_a_norm, 1, L, c.rms_eps, row, s);
        } else {
            float* lc = r.c.f32();
            gpu::copy_rows(lc, size_t(L) * 4, row, size_t(R) * 4, size_t(L) * 4, size_t(n), s);
            gpu::rms_norm(lc, d.mla_kv_a_norm, n, L, c.rms_eps, lc, s);
            gpu::copy_rows(row, size_t(R) * 4, lc, size_t(L) * 4, size_t(L) * 4, size_t(n), s);
        }
        float* cache = k_rows(st, il);
        gpu::mla_rope_store(q, int(H), int(QH), m.nope, row, int(R), int(L), m.rope, rope_.neox, cos_sin, cache, pos,
                            s, n, seq);
        const int64_t positions = st.n_past + n;  // the pass's last position + 1 (one sequence)
        if (n > 1 && !seq && !sparse && !decode_rows_ && positions <= r.expanded) {
            // The expanded form: every position's heads built, a chunk of
            // the pass's rows at a time, into the planes (k_nope in lat, v
            // in qlat: both wider).
            float* kb_rows = r.k_b_rows.f32();
            gpu::mla_k_b_transposed(l.wk_b.type, d.mla_k_b0, int(H), int(L), m.nope, kb_rows, s);
            for (int64_t p0 = 0; p0 < positions; p0 += n) {
                const int count = int(std::min<int64_t>(n, positions - p0));
                float* lc = r.c.f32();
                gpu::copy_rows(lc, size_t(L) * 4, cache + p0 * R, size_t(R) * 4, size_t(L) * 4, size_t(count), s);
                gpu::mma_matmul_f32(kb_rows, H * m.nope, L, count, lc, r.lat.f32(), s, false);
                rows_product(l.wv_b.type, d.mla_v_b0, H * m.v, L, count,
                             {lc, quantize(lc, count, L, r.lat8.data())}, r.qlat.f32(), false);
                gpu::mla_expand_planes(r.lat.f32(), r.qlat.f32(), cache, p0, count, int(H), m.nope, m.rope, m.v,
                                       int(R), int(L), r.planes.data(), s);
            }
            mark(StageProfile::kQkRope);
            float* o = r.o.f32();
            gpu::attention_expanded(q, r.planes.data(), pos, int(H), int(QH), m.v, m.scale, o, s, n);
            mark(StageProfile::kAttention);
            rows_product(l.wo.type, d.wo, E, H * m.v, n, {o, quantize(o, n, H * m.v, r.o8.data())}, x, true);
            mark(StageProfile::kAttnOut);
            return;
        }
        // The heads' matrices over the (token, head) rows: one token as
        // decode's expert-table launch, a pass through the head tiles.
        auto heads_product = [&](const Tensor& t, const uint8_t* const* table, int64_t out, int64_t in, gpu::Act hx,
                                 float* hy) {
            if (n == 1) {
                gpu::matvec_experts(t.type, table, nullptr, int(H), 0, out, in, hx, in, hy, s);
            } else if (mla_heads_mma()) {
                gpu::mma_matmul_experts(t.type, table, heads, 0, out, in, hx, hy, s);
            } else {
                gpu::matmul_experts(t.type, table, heads, 0, out, in, hx, hy, s, int(H));
            }
        };
        // q_lat head h = [k_b[h] . q_nope[h] | q_pe[h]].
        float* qn = r.qn.f32();
        float* lat = r.lat.f32();
        float* qlat = r.qlat.f32();
        gpu::copy_rows(qn, size_t(m.nope) * 4, q, size_t(QH) * 4, size_t(m.nope) * 4, HN, s);
        heads_product(l.wk_b, d.mla_k_b, L, m.nope, {qn, quantize(qn, int64_t(HN), m.nope, r.qn8.data())}, lat);
        gpu::copy_rows(qlat, size_t(R) * 4, lat, size_t(L) * 4, size_t(L) * 4, HN, s);
        gpu::copy_rows(qlat + L, size_t(R) * 4, q + m.nope, size_t(QH) * 4, size_t(m.rope) * 4, HN, s);
        mark(StageProfile::kQkRope);
        // The rows are keys and (their first L values) values: each head's
        // output row is R wide, of which the first L are the latent output.
        float* att = r.att.f32();
        // --gpu-prefill-mla tiles: a prompt's pass on tensor cores (within
        // float32 rounding of decoding), every head and token in tiles,
        // latent outputs straight into lat.
        const bool tiled =
            n > 1 && options_.prefill_tensor_cores && options_.prefill_mla_tiles && !decode_rows_ && !seq &&
            gpu::attention_tiled_shared(
                qlat, cache, pos, int(H), int(R), int(L), m.scale, lat, s, n,
                sparse ? gpu::Chosen{reinterpret_cast<const int32_t*>(r.chosen.data()),
                                     reinterpret_cast<const int32_t*>(r.count.data()), st.top_k}
                       : gpu::Chosen{});
        for (int a0 = 0; !tiled && a0 < n; a0 += kAttentionRows) {
            const int na = std::min(kAttentionRows, n - a0);
            const gpu::Chosen chosen = sparse ? gpu::Chosen{reinterpret_cast<const int32_t*>(r.chosen.data()) +
                                                                int64_t(a0) * st.top_k,
                                                            reinterpret_cast<const int32_t*>(r.count.data()) + a0,
                                                            st.top_k}
                                              : gpu::Chosen{};
            gpu::attention(qlat + int64_t(a0) * H * R, cache, cache, pos + a0, int(H), 1, int(R), m.scale, att_part,
                           att + int64_t(a0) * H * R, s, nullptr, {}, na, 0, nullptr, 0, seq ? seq + 2 * a0 : nullptr,
                           chosen);
        }
        if (!tiled) gpu::copy_rows(lat, size_t(L) * 4, att, size_t(R) * 4, size_t(L) * 4, HN, s);
        mark(StageProfile::kAttention);
        float* o = r.o.f32();
        heads_product(l.wv_b, d.mla_v_b, m.v, L, {lat, quantize(lat, int64_t(HN), L, r.lat8.data())}, o);
        rows_product(l.wo.type, d.wo, E, H * m.v, n, {o, quantize(o, n, H * m.v, r.o8.data())}, x, true);
        mark(StageProfile::kAttnOut);
    }

    // Layer il's indexer over n rows (xb: their normed inputs, qa: their
    // normed compressed queries): keys into its cache, each row's chosen
    // positions into r (model/dsa_indexer.cpp's indexer_select), the scores
    // of r.score_rows rows at a time.
    void index_select(GpuState& st, int il, const MlaRows& r, int n, gpu::Act xb, gpu::Act qa, const float* cos_sin,
                      const int32_t* pos, float* const* index_seq) const {
        const IndexerShape& is = indexer_shape_;
        const IndexerLayer& l = indexer_[size_t(il)];
        const DeviceLayer& d = device_[size_t(il)];
        const gpu::Stream s = compute_;
        const int64_t E = config_.n_embd, H = is.n_head, D = is.head_dim;
        float* iq = r.iq.f32();
        float* ik = r.ik.f32();
        float* iw = r.iw.f32();
        const GgmlType types[2] = {l.wk.type, l.proj.type};
        const void* w[2] = {d.idx_wk, d.idx_proj};
        const int64_t rows[2] = {D, H};
        float* y[2] = {ik, iw};
        rows_products(2, types, w, rows, E, n, xb, y);
        rows_product(l.wq_b.type, d.idx_wq_b, H * D, mla_shape_.q_lora, n, qa, iq, false);
        float* keys = index_rows(st, il);
        gpu::indexer_keys(iq, ik, iw, d.idx_k_norm, d.idx_k_bias, int(H), int(D), rope_.n_rot, rope_.neox, cos_sin,
                          keys, pos, s, n, index_seq);
        int32_t* chosen = reinterpret_cast<int32_t*>(r.chosen.data());
        int32_t* count = reinterpret_cast<int32_t*>(r.count.data());
        for (int a0 = 0; a0 < n; a0 += r.score_rows) {
            const int na = std::min(r.score_rows, n - a0);
            gpu::indexer_select(iq + a0 * H * D, iw + a0 * H, keys, pos + a0, int(H), int(D), st.top_k,
                                int(st.options.n_ctx), r.scores.f32(), chosen + int64_t(a0) * st.top_k, count + a0, s,
                                na, index_seq ? index_seq + 2 * a0 : nullptr);
        }
    }

    // Positions into q and k for n tokens where the q/k norms are not per
    // head (over the whole projection, after RoPE, or none): q rotated in
    // place (unroped layers: scaled by the position's temperature, temp's
    // n floats), k rotated into cache row *pos (+ t), v beside it. Norms
    // after RoPE come between the rotation (into kt, vt: n rows each) and
    // the cache write.
    void position_qk(const AttentionLayer& a, const DeviceLayer& d, float* q, float* k, const float* v, int n,
                     const float* cos_sin, const int32_t* pos, const float* temp, float* kc, float* vc, float* kt,
                     float* vt, float* const* seq = nullptr) const {
        const ModelConfig& c = config_;
        const gpu::Stream s = compute_;
        const int64_t Q = c.q_dim(), KV = c.kv_dim();
        if (a.qk_norm == QkNorm::Whole) {
            gpu::rms_norm(q, d.q_norm, n, Q, c.rms_eps, q, s);
            gpu::rms_norm(k, d.k_norm, n, KV, c.rms_eps, k, s);
        }
        const int n_rot = a.rope ? rope_.n_rot : 0;
        if (!a.rope && a.temperature.scale != 0.0f) gpu::scale_by(q, Q, temp, s, n);
        if (a.qk_norm != QkNorm::PlainAfterRope) {
            gpu::rope_store(q, k, v, c.n_head, c.n_head_kv, c.head_dim, n_rot, rope_.neox, cos_sin, kc, vc, pos, s, n,
                            seq);
            return;
        }
        const int32_t* zero = reinterpret_cast<const int32_t*>(zero_.data());
        gpu::rope_store(q, k, v, c.n_head, c.n_head_kv, c.head_dim, n_rot, rope_.neox, cos_sin, kt, vt, zero, s, n);
        gpu::rms_norm(q, nullptr, int64_t(n) * c.n_head, c.head_dim, c.rms_eps, q, s);
        gpu::rms_norm(kt, nullptr, int64_t(n) * c.n_head_kv, c.head_dim, c.rms_eps, kt, s);
        gpu::rope_store(q, kt, vt, c.n_head, c.n_head_kv, c.head_dim, 0, rope_.neox, cos_sin, kc, vc, pos, s, n, seq);
    }

    // One token's attention block of layer il over xb (the normed
    // residual), its output added to the residual st.x; the token's k and
    // v rows written at *pos. Stages marked in prof when given.
    void attend(GpuState& st, int il, gpu::Act xb, const float* cos_sin, const int32_t* pos, StageProfile* prof) const {
        const ModelConfig& c = config_;
        const AttentionLayer& a = attn_[size_t(il)];
        const DeviceLayer& d = device_[size_t(il)];
        const int64_t E = c.n_embd, KV = c.kv_dim(), Q = c.q_dim();
        const gpu::Stream s = compute_;
        const float scale = 1.0f / std::sqrt(float(c.head_dim));
        auto mark = [&](StageProfile::Stage stage, uint64_t bytes) {
            if (prof) prof->mark(stage, bytes, s);
        };
        float* x = st.x.f32();
        float* kc = k_rows(st, il);
        float* vc = v_rows(st, il);
        float* q = st.q.f32();
        float* k = st.k.f32();
        float* v = st.v.f32();
        {
            // Gated attention: wq gives [q | gate] heads, split below.
            const GgmlType types[3] = {a.wq.type, a.wk.type, a.wv.type};
            const void* w[3] = {d.wq, d.wk, d.wv};
            const int64_t rows[3] = {a.q_gate ? 2 * Q : Q, KV, KV};
            float* y[3] = {a.q_gate ? st.qg.f32() : q, k, v};
            gpu::matvec_multi(3, types, w, rows, E, xb, y, s);
        }
        if (a.q_gate) gpu::split_gated_q(st.qg.f32(), c.n_head, c.head_dim, q, s);
        if (d.bq) {
            gpu::add(q, d.bq, Q, s);
            gpu::add(k, d.bk, KV, s);
            gpu::add(v, d.bv, KV, s);
        }
        mark(StageProfile::kAttnIn, a.wq.bytes() + a.wk.bytes() + a.wv.bytes());
        // Per-head q/k norms: attention norms and rotates q and the new k
        // row itself, and stores k and v (one launch less).
        gpu::FreshRow fresh;
        if (a.qk_norm == QkNorm::PerHead) {
            fresh = {k, v, d.q_norm, d.k_norm, c.rms_eps, cos_sin, rope_.n_rot};
        } else {
            // The input buffer holds the temperature after the position.
            const float* temp = reinterpret_cast<const float*>(pos + 1);
            position_qk(a, d, q, k, v, 1, cos_sin, pos, temp, kc, vc, st.kt.f32(), st.vt.f32());
        }
        mark(StageProfile::kQkRope, 0);
        // With its 8-bit row, which the output matrix reads (gated: after the gate).
        void* att8 = act8(Q) ? st.att8.data() : nullptr;
        gpu::attention(q, kc, vc, pos, c.n_head, c.n_head_kv, c.head_dim, scale, st.att_part.f32(), st.att.f32(), s,
                       a.q_gate ? nullptr : att8, fresh, 1, a.window, d.sinks, int(a.chunk));
        if (a.q_gate) {
            gpu::mul_sigmoid_heads(st.att.f32(), st.qg.f32(), c.n_head, c.head_dim, s);
            att8 = quantize(st.att.f32(), 1, Q, st.att8.data());
        }
        mark(StageProfile::kAttention, uint64_t(st.n_past + 1) * uint64_t(KV) * 8);
        // The residual add too.
        gpu::matvec(a.wo.type, d.wo, E, Q, {st.att.f32(), att8}, x, s, true);
        if (d.bo) gpu::add(x, d.bo, E, s);
        mark(StageProfile::kAttnOut, a.wo.bytes());
    }

    // Every launch of one token on the compute stream, from the input copied
    // to st.input to its logits in st.logits. The host waits only where the
    // VRAM cache lacks a layer's experts (fetch_experts), and times phases
    // when `time` is given (their launches, not their execution).
    void token(GpuState& st, ExpertSource& experts, TimeSplit* time) const {
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, V = c.n_vocab, F = spec_.n_ff_exp;
        const int K = c.n_expert_used;
        const gpu::Stream s = compute_;
        float* x = st.x.f32();
        float* xb = st.xb.f32();
        void* xb8 = act8(E) ? st.xb8.data() : nullptr;  // xb's 8-bit rows
        const float* cos_sin = st.input.f32() + E;
        const int32_t* pos = reinterpret_cast<const int32_t*>(cos_sin + rope_.n_rot);
        StageProfile* prof = profile_.get();
        auto mark = [&](StageProfile::Stage stage, uint64_t bytes) {
            if (prof) prof->mark(stage, bytes, s);
        };
        if (prof) prof->begin(s);
        gpu::copy_on_device(x, st.input.data(), size_t(E) * 4, s);
        for (int il = 0; il < n_run_; il++) {
            // Routed on the device, each layer's choice is kept (refresh_vram
            // reads them after the token).
            int32_t* ids = device_routed() ? reinterpret_cast<int32_t*>(st.layer_ids.data()) + int64_t(il) * K
                                           : reinterpret_cast<int32_t*>(st.ids.data());
            const AttentionLayer& a = attn_[size_t(il)];
            const FfnLayer& m = ffn_[size_t(il)];
            const DeviceLayer& d = device_[size_t(il)];
            PhaseTimer attn_time(time, Phase::Attention, il, time ? a.weight_bytes() : 0);
            gpu::rms_norm(x, d.attn_norm, 1, E, c.rms_eps, xb, s, xb8);
            if (deltanet(il)) {
                deltanet_layer(st, il, {st.dn_qkv.f32(), st.dn_conv.f32(), st.dn_z.f32(), st.dn_ba.f32(), st.dn_o.f32(),
                                        st.dn_o8.data()},
                               1, {xb, xb8}, x);
                mark(StageProfile::kAttention, deltanet_[size_t(il)].weight_bytes());
            } else if (mla()) {
                mla_layer(st, il, st.mla, st.att_part.f32(), x, 1, {xb, xb8}, cos_sin, pos, {});
                mark(StageProfile::kAttention, mla_[size_t(il)].weight_bytes());
            } else {
                attend(st, il, {xb, xb8}, cos_sin, pos, prof);
            }
            attn_time.stop();

            if (!m.moe()) {
                PhaseTimer ffn_time(time, Phase::ExpertCompute, il, time ? m.dense.weight_bytes() : 0);
                gpu::rms_norm(x, d.ffn_norm, 1, E, c.rms_eps, xb, s, xb8);
                dense_ffn(st, m.dense, d.dense, {xb, xb8}, x, true);
                mark(StageProfile::kDown, m.dense.weight_bytes());
                continue;
            }
            PhaseTimer route_time(time, Phase::Routing, il, time ? m.router.bytes() : 0);
            gpu::rms_norm(x, d.ffn_norm, 1, E, c.rms_eps, xb, s, xb8);
            route(m, d, {xb, xb8}, st.router.f32(), ids, st.weights.f32());
            mark(StageProfile::kRouter, m.router.bytes());
            if (predicting(il)) {
                // The next layer's router over this layer's FFN input, normed
                // with its own weights (as the CPU path's predict_experts):
                // its picks follow ids.
                const FfnLayer& nm = ffn_[size_t(il + 1)];
                const DeviceLayer& nd = device_[size_t(il + 1)];
                void* next8 = act8(E) ? st.next_xb8.data() : nullptr;
                gpu::rms_norm(x, nd.ffn_norm, 1, E, c.rms_eps, st.next_xb.f32(), s, next8);
                route(nm, nd, {st.next_xb.f32(), next8}, st.next_router.f32(), ids + K, st.next_weights.f32());
            }
            mark(StageProfile::kTopK, 0);
            route_time.stop();

            const ExpertLayer& el = expert_layers_[size_t(il)];
            // --gpu-ram-tier cpu: the GPU runs the KG experts it holds, by
            // the weights and ids in hit_*; the host the other K - KG.
            const bool split = cpu_computes_misses();
            const int KG = split ? split_experts(st, experts, il, K) : K;
            const double io_wait = device_routed() || split ? 0 : fetch_experts(st, experts, il, K);
            const float* expert_weights = split ? st.hit_weights.f32() : st.weights.f32();
            const int32_t* expert_ids = split ? reinterpret_cast<const int32_t*>(st.hit_ids.data()) : ids;
            mark(StageProfile::kFetch, 0);
            PhaseTimer ffn_time(nullptr, Phase::ExpertCompute, il);
            // Resident or mapped: the table of every expert, indexed by the
            // routed ids on the device; streaming: this layer's chosen
            // experts' slots by rank.
            const bool all = device_routed();
            const uint8_t* const* table = all ? vram_.table(il) : reinterpret_cast<const uint8_t* const*>(st.slots.data());
            const int32_t* table_ids = all ? ids : nullptr;
            float* gate = st.gate.f32();
            float* up = gate + int64_t(K) * F;
            // Llama 4: each expert reads the token's row times its routing
            // weight (as model/moe.cpp), and the sum weighs them by 1.
            gpu::Act in = {xb, xb8};
            const bool own = el.weight_input;
            if (own && KG > 0) {
                gpu::weighted_rows(xb, expert_weights, 1, KG, E, st.xs.f32(), s);
                in = {st.xs.f32(), quantize(st.xs.f32(), KG, E, st.xs8.data())};
            }
            if (KG == 0) {
                // Every chosen expert is the host's.
            } else if (el.gate.type == el.up.type) {
                gpu::expert_gate_up(el.gate.type, table, table_ids, KG, 0, vram_.up_offset(il), F, E, in,
                                    st.hidden.f32(), s, d.extras(clamped(), own, expert_ids));
            } else {
                gpu::matvec_experts(el.gate.type, table, table_ids, KG, 0, F, E, in, own ? E : 0, gate, s);
                gpu::matvec_experts(el.up.type, table, table_ids, KG, vram_.up_offset(il), F, E, in, own ? E : 0,
                                    up, s);
                gpu::swiglu(gate, up, int64_t(KG) * F, st.hidden.f32(), s);
            }
            mark(StageProfile::kGateUp, uint64_t(KG) * (el.gate.bytes + el.up.bytes));
            void* hidden8 = KG > 0 ? quantize(st.hidden.f32(), KG, F, st.hidden8.data()) : nullptr;
            // With a shared expert: the routed sum first (into zeros: the
            // same bits), the shared expert's output added to it, then the
            // residual, in the CPU's order (model/ffn_block.cpp). Adding
            // each to x in turn rounds differently: 4.6e-3 from
            // qwen2moe-Q8_0's logits where 8-bit rows amplify it.
            float* moe_out = m.shared.empty() ? x : st.moe_out.f32();
            if (moe_out != x) gpu::fill(moe_out, 0, size_t(E) * 4, s);
            if (KG > 0) {
                gpu::expert_down_add(el.down.type, table, table_ids, KG, vram_.down_offset(il), E, F,
                                     {st.hidden.f32(), hidden8}, own ? st.ones.f32() : expert_weights, moe_out, s,
                                     d.extras(clamped(), own, expert_ids));
            }
            // The next layer's predicted experts start copying before the
            // host computes this layer's part, so the link and the host's
            // cores work at once (after it, the two took turns).
            const double t_queue = now();
            if (predicting(il)) prefetch_next(st, experts, il, K);
            if (split && KG < K) admit_host_misses(experts, il, K - KG);
            queue_copies_seconds_ += now() - t_queue;
            // The host's part, computed while the GPU runs the above, then
            // added after it: a fixed order for a given split.
            const MoeCost host = split && KG < K ? compute_misses(st, experts, il, K, KG) : MoeCost{};
            if (split && KG < K) {
                gpu::copy_to_device(st.cpu_out.data(), st.host_split + 2 * K + E, size_t(E) * 4, s);
                gpu::add(moe_out, st.cpu_out.f32(), E, s);
            }
            if (!m.shared.empty() && d.shared_gate) {
                dense_ffn(st, m.shared, d.shared, {xb, xb8}, st.shared_out.f32(), false);
                gpu::matvec(m.shared_gate.type, d.shared_gate, 1, E, {xb, xb8}, st.shared_logit.f32(), s);
                gpu::add_sigmoid_gated(moe_out, st.shared_out.f32(), st.shared_logit.f32(), E, s);
            } else if (!m.shared.empty()) {
                dense_ffn(st, m.shared, d.shared, {xb, xb8}, moe_out, true);
            }
            if (moe_out != x) gpu::add(x, moe_out, E, s);
            mark(StageProfile::kDown, uint64_t(K) * el.down.bytes + m.shared.weight_bytes());
            const double ffn_s = ffn_time.stop();
            if (time) {
                time->add(Phase::IoWait, io_wait + host.io_wait_s);
                time->add(Phase::ExpertCompute, ffn_s, uint64_t(K) * el.expert_bytes() + m.shared.weight_bytes());
            }
        }
        gpu::rms_norm(x, output_norm_dev_, 1, E, c.rms_eps, xb, s, xb8);
        gpu::matvec(output().type, output_dev_, V, E, {xb, xb8}, st.logits.f32(), s);
        mark(StageProfile::kHead, output().bytes());
    }

    // Prefill's attention runs over at most this many tokens a launch (its
    // scratch grows with them); the output head over this many rows.
    static constexpr int kAttentionRows = 64, kLogitRows = 32;

    // dense_ffn over n rows of xb (st.prefill's rows).
    void dense_rows(PrefillRows& b, const DenseFfn& f, const DeviceFfn& d, int n, gpu::Act xb, float* out,
                    bool add) const {
        const gpu::Stream s = compute_;
        const int64_t n_ff = f.gate.rows, E = config_.n_embd;
        fork(2);
        pass_matmul(f.gate.type, d.gate, n_ff, E, n, xb, b.ffn_gate.f32(), stream(0), false, 0);
        pass_matmul(f.up.type, d.up, n_ff, E, n, xb, b.ffn_up.f32(), stream(1), false, 0);
        join(2);
        gpu::swiglu(b.ffn_gate.f32(), b.ffn_up.f32(), n * n_ff, b.ffn_hidden.f32(), s);
        void* h8 = quantize(b.ffn_hidden.f32(), n, n_ff, b.ffn_hidden8.data());
        pass_matmul(f.down.type, d.down, E, n_ff, n, {b.ffn_hidden.f32(), h8}, out, s, add, 1);
    }

    // A pass's expert tiles on tensor cores: gate/up and their activation
    // (one launch where gate and up share a type), the hidden rows' 8-bit
    // form, down into b.down.
    // prof: --gpu-profile's, marked after gate/up (their bytes), so that
    // down falls in the next stage as in the other paths.
    void tensor_expert_tiles(PrefillRows& b, int il, const gpu::ExpertTiles& g, const gpu::ExpertTiles& gd,
                             gpu::Act in, int n, const gpu::ExpertExtras& extras, StageProfile* prof,
                             uint64_t gate_up_bytes) const {
        const gpu::Stream s = compute_;
        const ExpertLayer& el = expert_layers_[size_t(il)];
        const uint8_t* const* table = vram_.table(il);
        const int64_t E = config_.n_embd, F = spec_.n_ff_exp, K = config_.n_expert_used;
        float* hidden = b.hidden.f32();
        if (el.gate.type == el.up.type) {
            gpu::mma_gate_up_experts(el.gate.type, table, g, 0, vram_.up_offset(il), F, E, in, hidden, s, extras);
        } else {
            float* gate = b.gate.f32();
            float* up = gate + int64_t(b.cap) * K * F;
            gpu::mma_matmul_experts(el.gate.type, table, g, 0, F, E, in, gate, s);
            gpu::mma_matmul_experts(el.up.type, table, g, vram_.up_offset(il), F, E, in, up, s);
            gpu::swiglu(gate, up, int64_t(n) * K * F, hidden, s);
        }
        if (prof) prof->mark(StageProfile::kGateUp, gate_up_bytes, s);
        void* hidden8 = quantize(hidden, int64_t(n) * K, F, b.hidden8.data());
        gpu::mma_matmul_experts(el.down.type, table, gd, vram_.down_offset(il), E, F, {hidden, hidden8}, b.down.f32(),
                                s);
    }

    // Layer il's routing of n tokens (b.host_ids, n x K) cut into tiles of
    // the pairs each expert takes (as many as the layer's kernels take a
    // tile), uploaded; the layer's distinct experts
    // noted for refresh_vram. Returns the gate/up tiles (pair t * K + r
    // reads xb row t, writes hidden row t * K + r); *down gets the down
    // tiles (hidden row to the down output's row of the same number).
    gpu::ExpertTiles cut_tiles(PrefillRows& b, int il, int n, gpu::ExpertTiles* down, bool host_part) const {
        const int K = config_.n_expert_used, X = config_.n_expert;
        const size_t tile_ints = 3 * max_tiles(b.cap), TK = size_t(b.cap) * size_t(K);
        int32_t* tiles = b.host_tiles;
        int32_t* in_row = tiles + tile_ints;
        int32_t* out_row = in_row + TK;
        ExpertGroups& g = b.groups;
        g.group(b.host_ids, n * K);
        b.gpu_ids = g.used.data();
        b.n_gpu_ids = g.n_used;
        b.n_host_used = 0;
        if (host_part && g.n_used < vram_.n_slots()) split_host_rows(b, il);
        for (int j = 0; j < n * K; j++) {
            // Llama 4: pair j reads its own weighted row (weighted_rows).
            in_row[j] = expert_layers_[size_t(il)].weight_input ? g.entries[size_t(j)] : g.entries[size_t(j)] / K;
            out_row[j] = g.entries[size_t(j)];
        }
        int n_tiles = 0;
        const ExpertLayer& el = expert_layers_[size_t(il)];
        const int per = tensor_experts(il) ? gpu::kMmaTile : gpu::kExpertTile;  // pairs a tile
        if (mapped_) std::copy(g.used.begin(), g.used.begin() + g.n_used, b.layer_ids.begin() + ptrdiff_t(il) * X);
        for (int u = 0; u < b.n_gpu_ids; u++) {
            const int e = b.gpu_ids[u], c = g.count[size_t(e)];
            const bool hit = !mapped_ || vram_.visible(il, e);
            for (int j = 0; j < c; j += per) {
                int32_t* t = tiles + 3 * n_tiles++;
                t[0] = e;
                t[1] = g.first[size_t(e)] + j;
                t[2] = std::min(per, c - j);
                // Mapped: each tile reads a miss's matrices over the bus.
                if (!hit) bus_read_bytes_ += el.expert_bytes();
            }
            if (mapped_) {
                hits_ += hit ? uint64_t(c) : 0;
                misses_ += hit ? 0 : uint64_t(c);
                count_use(il, e, c);
            }
        }
        b.layer_count[size_t(il)] = g.n_used;
        const gpu::Stream s = compute_;
        int32_t* dev = reinterpret_cast<int32_t*>(b.tiles.data());
        gpu::copy_to_device(dev, tiles, size_t(3 * n_tiles) * 4, s);
        gpu::copy_to_device(dev + tile_ints, in_row, size_t(n * K) * 4, s);
        gpu::copy_to_device(dev + tile_ints + TK, out_row, size_t(n * K) * 4, s);
        *down = {dev, n_tiles, dev + tile_ints + TK, dev + tile_ints + TK};
        return {dev, n_tiles, dev + tile_ints, dev + tile_ints + TK};
    }

    // The copied tier's experts of layer il for a prefill pass (its n_tiles
    // tiles in b.host_tiles, its distinct experts in b.groups), in groups:
    // a group's misses acquired from the RAM tier (the store reads from the
    // drive what it lacks), copied into slots, the table uploaded, then the
    // group's tiles run. Each expert is read and copied once a pass.
    // Where the layer's experts fit the slots, nothing else runs on the
    // device (the host waited for the layer's routing) and no slot is taken
    // twice in the layer (none used since protect() is a victim),
    // so groups of kCopyGroup are copied while the group before computes.
    // Otherwise groups as large as the slots and the RAM tier allow, each
    // copied once the kernels of the one before are done with its slots.
    static constexpr int kCopyGroup = 8;
    void stream_tiles(PrefillRows& b, ExpertSource& experts, int il, int n_tiles,
                      const std::function<void(int, int)>& run) const {
        const ExpertLayer& el = expert_layers_[size_t(il)];
        const int32_t* ids = b.gpu_ids;
        const int n_ids = b.n_gpu_ids;
        const bool overlap = n_ids < vram_.n_slots();
        const int group = overlap ? std::min(kCopyGroup, experts.capacity())
                                  : std::min(vram_.n_slots(), experts.capacity());
        const int32_t* tiles = b.host_tiles;
        int tile = 0;
        // Experts copy_ahead took for this layer are this layer's, as found
        // below: copies (a miss each), their rows' other uses hits.
        const bool ahead = ahead_layer_ == il;
        ahead_layer_ = -1;
        int next_ahead = 0;
        if (overlap) vram_.protect(ahead ? ahead_mark_ : vram_.mark());
        kept_slots_ = overlap ? n_ids + (ahead ? n_ahead_ : 0) : vram_.n_slots();
        if (ahead) gpu::wait(compute_, ahead_);
        for (int g0 = 0; g0 < n_ids; g0 += group) {
            const int gn = std::min(group, n_ids - g0);
            int n_miss = 0;
            if (!overlap) {
                gpu::record(launched_, compute_);
                gpu::wait(copy_, launched_);
                vram_.protect();
            }
            for (int i = g0; i < g0 + gn; i++) {
                const int c = b.groups.count[size_t(ids[i])];
                count_use(il, ids[i], c);
                while (ahead && next_ahead < n_ahead_ && ahead_ids_[next_ahead] < ids[i]) next_ahead++;
                const bool copied_ahead = ahead && next_ahead < n_ahead_ && ahead_ids_[next_ahead] == ids[i];
                if (vram_.find(il, ids[i], c) >= 0) {
                    hits_ += uint64_t(c - (copied_ahead ? 1 : 0));
                    misses_ += copied_ahead ? 1 : 0;
                    ahead_used_ += copied_ahead ? 1 : 0;
                } else {
                    b.miss[size_t(n_miss++)] = ids[i];
                    hits_ += uint64_t(c - 1);
                    misses_++;
                }
            }
            const double t0 = now();
            if (n_miss > 0) {
                experts.acquire(il, b.miss.data(), n_miss);
                ExpertView v;
                for (int i; (i = experts.next_ready(il, &v)) >= 0;) {
                    const int id = b.miss[size_t(i)];
                    vram_.copy(take_slot(il, id, b.groups.count[size_t(id)]), il, id, el, v, copy_);
                }
                gpu::record(copied_, copy_);
                gpu::wait(compute_, copied_);
                copied_bytes_ += uint64_t(n_miss) * el.expert_bytes();
            }
            vram_.upload_table(compute_);
            int end = tile;
            while (end < n_tiles && tiles[3 * end] <= ids[g0 + gn - 1]) end++;
            run(tile, end - tile);
            tile = end;
            if (n_miss > 0) {
                // The RAM tier's views are no longer read; where it holds
                // every expert they outlive the release (nothing is
                // evicted), so the host goes on (to the next group, or to
                // the host's part) while the link copies.
                if (!ram_holds_all_) gpu::sync_event(copied_);
                experts.release(il);
            }
            fill_seconds_ += now() - t0;
        }
    }

    // A prompt pass with VRAM short: once layer il's copies are queued, the
    // next layer's first experts by id (the order its groups take) that
    // VRAM lacks are copied behind them, ahead of that layer's routing, so
    // that the link does not idle through the next layer's attention and
    // router, nor the compute stream wait for its first group (s30: the
    // 4,096-token pass at --gpu-mem 8G took 1.031 s where its copies alone
    // take 0.749 s). Only where the pass's n rows choose nearly every
    // expert (n * K at least 4 a expert: 98 % of them chosen if routing
    // were uniform). Slots: none that layer il used (its kernels still read
    // them; at most kept_slots_) is taken, and the next layer's own copies
    // find a slot it does not use while the slots outnumber its experts.
    // --gpu-prefetch off: none. 32 measured best on qwen3-30b-a3b at
    // --gpu-mem 8G (H100, docs/gpu/run31): 0.78-0.83 of the copy bound,
    // against 0.68-0.73 with 64 and 0.71 with 128 ahead.
    static constexpr int kCopyAhead = 32;
    void copy_ahead(ExpertSource& experts, int il, int n) const {
        ahead_layer_ = -1;
        n_ahead_ = 0;
        const int next = il + 1;
        if (!options_.prefetch_next_layer || next >= n_run_ || !ffn_[size_t(next)].moe()) return;
        const ExpertLayer& el = expert_layers_[size_t(next)];
        const int room = std::min({kCopyAhead, experts.capacity(), el.n_expert, vram_.n_slots() - kept_slots_ - 1});
        if (int64_t(n) * config_.n_expert_used < 4 * int64_t(el.n_expert) || vram_.n_slots() <= el.n_expert ||
            room <= 0) {
            return;
        }
        ahead_mark_ = vram_.mark();
        for (int id = 0; id < el.n_expert && n_ahead_ < room; id++) {
            if (!vram_.has(next, id)) ahead_ids_[n_ahead_++] = id;
        }
        if (n_ahead_ == 0) return;
        const double t0 = now();
        experts.acquire(next, ahead_ids_, n_ahead_);
        ExpertView v;
        for (int i; (i = experts.next_ready(next, &v)) >= 0;) {
            vram_.copy(take_slot(next, ahead_ids_[i]), next, ahead_ids_[i], el, v, copy_);
        }
        gpu::record(ahead_, copy_);
        if (!ram_holds_all_) gpu::sync_event(ahead_);  // the views are read until then
        experts.release(next);
        copied_bytes_ += uint64_t(n_ahead_) * el.expert_bytes();
        ahead_copies_ += uint64_t(n_ahead_);
        ahead_layer_ = next;
        fill_seconds_ += now() - t0;
    }

    // GpuOptions::batch_host, where upload() found it possible: the split's
    // times measured at the first batched pass (a run of one sequence never
    // pays for them, nor has its cache changed by their copies), unless
    // decode's host part measured them at load.
    void prepare_batch_host(ExpertSource& experts) const {
        if (!batch_host_wanted_) return;
        batch_host_wanted_ = false;
        if (!split_measured_) measure_split(experts);
        batch_host_ready_ = cpu_share_ >= 0 ? options_.host_share_eighths >= 0 : copy_expert_s_ > 0;
    }

    // Whether this pass has a host part (GpuOptions::batch_host): a batched
    // pass of several sequences' steps, experts streamed by copies, the
    // host's split measured at start-up; its buffers made for n rows.
    bool batch_host_pass(PrefillRows& b, int n) const {
        if (!decode_rows_ || !batch_host_ready_ || device_routed()) return false;
        host_rows_alloc(b, n);
        return true;
    }

    // The host part's buffers (PrefillRows' host_*): the FFN input and
    // weight rows for the pass's cap tokens, made once; the pair buffers
    // for n tokens' pairs, grown (to twice what they held at least) when a
    // pass has more rows than any before.
    void host_rows_alloc(PrefillRows& b, int n) const {
        const int K = config_.n_expert_used;
        const int64_t E = config_.n_embd;
        if (!b.host_xb) {
            b.host_xb = static_cast<float*>(gpu::alloc_pinned(size_t(b.cap) * size_t(E) * 4));
            b.host_w = static_cast<float*>(gpu::alloc_pinned(size_t(b.cap) * size_t(K) * 4));
            b.host_used.resize(size_t(config_.n_expert));
            b.gpu_used.resize(size_t(config_.n_expert));
        }
        if (n * K <= b.host_cap) return;
        const int cap = std::max(n * K, 2 * b.host_cap);
        gpu::sync(compute_);  // the last pass's copies from the buffers replaced here are done
        gpu::release_pinned(b.host_out);
        gpu::release_pinned(b.host_out_rows);
        b.host_out = nullptr;
        b.host_out_rows = nullptr;
        b.host_out = static_cast<float*>(gpu::alloc_pinned(size_t(cap) * size_t(E) * 4));
        b.host_out_rows = static_cast<int32_t*>(gpu::alloc_pinned(size_t(cap) * 4));
        b.host_rows = DeviceMemory(size_t(cap) * size_t(E) * 4 + size_t(cap) * 4);
        b.host_in.resize(size_t(cap) * size_t(E));
        b.host_pair_w.resize(size_t(cap));
        b.host_pair_ids.resize(size_t(cap));
        b.host_moe.init(expert_layers_, cap, 1);
        b.host_cap = cap;
    }

    // A batched pass's layer il (its experts fit the VRAM cache): which of
    // the misses the host computes, those chosen by the fewest rows first
    // (ids ascending among equals), as many as --gpu-host-share's eighths
    // or host_misses_rows over the times measured at start-up; they go to
    // b.host_used, the layer's other experts to b.gpu_used for the tiles,
    // both ascending. The split depends on the routing, the cache and the
    // measured times alone: a given share gives the same bits every run.
    void split_host_rows(PrefillRows& b, int il) const {
        const ExpertGroups& g = b.groups;
        int32_t* miss = b.host_used.data();
        int n_miss = 0;
        for (int u = 0; u < g.n_used; u++) {
            if (!vram_.has(il, g.used[size_t(u)])) miss[n_miss++] = g.used[size_t(u)];
        }
        if (n_miss == 0) return;
        std::sort(miss, miss + n_miss, [&](int32_t a, int32_t c) {
            const int32_t ra = g.count[size_t(a)], rc = g.count[size_t(c)];
            return ra != rc ? ra < rc : a < c;  // no allocation, as stable_sort's buffer would be
        });
        int32_t* rows = b.gpu_used.data();  // scratch until the split is known
        for (int i = 0; i < n_miss; i++) rows[i] = g.count[size_t(miss[i])];
        const int h = cpu_share_ >= 0 ? (n_miss * cpu_share_ + 4) / 8
                                      : host_misses_rows(rows, n_miss, copy_expert_s_, host_fixed_s_, host_expert_s_);
        if (h == 0) return;
        std::sort(miss, miss + h);
        int n_gpu = 0;
        for (int u = 0, i = 0; u < g.n_used; u++) {
            const int32_t e = g.used[size_t(u)];
            if (i < h && miss[i] == e) {
                i++;
            } else {
                b.gpu_used[size_t(n_gpu++)] = e;
            }
        }
        b.n_host_used = h;
        b.gpu_ids = b.gpu_used.data();
        b.n_gpu_ids = n_gpu;
    }

    // The host's part of a batched pass's layer il (split_host_rows' experts),
    // once stream_tiles has queued the GPU's: each (token, rank) pair that
    // chose one of them computed from the RAM tier by the host's cores
    // (model/moe.cpp, each expert once over its rows) while the link copies
    // and the GPU runs the others, unweighted (combine_experts weighs each
    // row and adds the down bias; a weight_input layer's pair takes its
    // weighted row, as the tiles do), then copied into the rows of `down`
    // the tiles would have written.
    void host_rows_part(PrefillRows& b, ExpertSource& experts, int il) const {
        const ExpertGroups& g = b.groups;
        const int K = config_.n_expert_used;
        const int64_t E = config_.n_embd;
        const ExpertLayer& el = expert_layers_[size_t(il)];
        int m = 0;
        for (int u = 0; u < b.n_host_used; u++) {
            const int e = b.host_used[size_t(u)], c = g.count[size_t(e)];
            for (int q = g.first[size_t(e)]; q < g.first[size_t(e)] + c; q++) {
                const int j = g.entries[size_t(q)];
                memcpy(b.host_in.data() + int64_t(m) * E, b.host_xb + int64_t(j / K) * E, size_t(E) * 4);
                b.host_pair_ids[size_t(m)] = e;
                b.host_pair_w[size_t(m)] = el.weight_input ? b.host_w[j] : 1.0f;
                b.host_out_rows[m++] = j;
            }
            count_use(il, e, c);
            hits_ += uint64_t(c - 1);
            misses_++;
        }
        ExpertVectors vectors = expert_biases(ffn_[size_t(il)]);
        vectors.down_bias = nullptr;
        const double t0 = now();
        const MoeCost cost = moe_forward(*pool_, experts, el, b.host_in.data(), m, b.host_pair_ids.data(),
                                         b.host_pair_w.data(), 1, b.host_moe, b.host_out, {}, vectors);
        const double took = now() - t0;
        cpu_seconds_ += took;
        batch_host_seconds_ += took;
        // The host's time a row follows what its parts take now (its cores
        // may be busier or idler than at the measurement: while llama.cpp
        // built on them, the split measured there gave the host a share
        // that then cost 0.81x copying, docs/gpu/run21/c1), a tenth a part.
        if (cpu_share_ < 0) {
            const double row_s = std::max(took - host_fixed_s_, 0.0) / double(m);
            host_expert_s_ += 0.1 * (row_s - host_expert_s_);
        }
        cpu_bytes_ += cost.expert_bytes;
        cpu_experts_ += uint64_t(b.n_host_used);
        batch_host_experts_ += uint64_t(b.n_host_used);
        batch_host_rows_ += uint64_t(m);
        float* rows = b.host_rows.f32();
        int32_t* at = reinterpret_cast<int32_t*>(rows + int64_t(b.host_cap) * E);
        gpu::copy_to_device(rows, b.host_out, size_t(m) * size_t(E) * 4, compute_);
        gpu::copy_to_device(at, b.host_out_rows, size_t(m) * 4, compute_);
        gpu::scatter_rows(rows, at, m, E, b.down.f32(), compute_);
    }

    // n <= st.prefill.cap tokens through every layer at once, each token's
    // logits and KV rows bit for bit what forward() gives it token by token
    // (gpu.h's batched operations; the host cuts each layer's routing into
    // tiles of the tokens each expert takes). Each expert a layer's tokens
    // use is read once a pass: through the device table where every expert
    // is reached there (device_routed()), else copied in by stream_tiles.
    // Logits: every token's (all_logits), or the last one's when `last`.
    // seqs set (forward_batch): row t is the next token of sequence
    // seqs[t] (one row each), at its own position and caches; st is
    // seqs[0], whose rows the pass uses.
    void prefill_pass(GpuState& st, ExpertSource& experts, const int32_t* tokens, int n, float* logits,
                      bool all_logits, bool last, GpuState* const* seqs = nullptr) const {
        PrefillRows& b = st.prefill;
        const ModelConfig& c = config_;
        const int64_t E = c.n_embd, V = c.n_vocab, KV = c.kv_dim(), Q = c.q_dim(), F = spec_.n_ff_exp;
        const int K = c.n_expert_used, R = rope_.n_rot;
        const gpu::Stream s = compute_;
        const float scale = 1.0f / std::sqrt(float(c.head_dim));
        int32_t* host_pos = reinterpret_cast<int32_t*>(b.host_rope + int64_t(b.cap) * R);
        float* host_temp = b.host_rope + int64_t(b.cap) * (R + 1);
        wait_admitted(-1);  // the pass may read any slot
        ahead_layer_ = -1;
        for (int t = 0; t < n; t++) {
            const int64_t p = seqs ? seqs[t]->n_past : st.n_past + t;
            dequantize_row(token_embd_.type, token_embd_.row(tokens[t]), b.host_x + int64_t(t) * E, E);
            rope_angles(rope(), p, b.host_rope + int64_t(t) * R);
            host_pos[t] = int32_t(p);
            host_temp[t] = attention_temperature(spec_.temperature, p);
        }
        // Each KV layer's 2n cache pointers (gpu.h's seq), then each
        // indexer layer's (its key caches twice), in one copy.
        float* const* layer_seqs = nullptr;
        if (seqs) {
            float** h = b.host_seq_caches;
            for (int il = 0; il < n_run_; il++) {
                const int kl = kv_layer_[size_t(il)];
                const int64_t xl = indexed(il) ? n_kv_layers_ + indexer_slot_[size_t(il)] : -1;
                for (int t = 0; t < n && kl >= 0; t++) {
                    h[(int64_t(kl) * n + t) * 2] = k_rows(*seqs[t], il);
                    h[(int64_t(kl) * n + t) * 2 + 1] = mla() ? k_rows(*seqs[t], il) : v_rows(*seqs[t], il);
                }
                for (int t = 0; t < n && xl >= 0; t++) {
                    h[(xl * n + t) * 2] = h[(xl * n + t) * 2 + 1] = index_rows(*seqs[t], il);
                }
            }
            gpu::copy_to_device(b.seq_caches.data(), h,
                                size_t(n_kv_layers_ + n_indexer_) * 2 * size_t(n) * sizeof(float*), s);
            layer_seqs = reinterpret_cast<float* const*>(b.seq_caches.data());
        }
        float* x = b.x.f32();
        float* xb = b.xb.f32();
        const float* cos_sin = b.rope.f32();
        int32_t* pos = reinterpret_cast<int32_t*>(b.rope.f32() + int64_t(b.cap) * R);
        gpu::copy_to_device(x, b.host_x, size_t(n * E) * 4, s);
        gpu::copy_to_device(b.rope.data(), b.host_rope, size_t(n * R) * 4, s);
        gpu::copy_to_device(pos, host_pos, size_t(n) * 4, s);
        const float* temp = b.rope.f32() + int64_t(b.cap) * (R + 1);
        gpu::copy_to_device(b.rope.f32() + int64_t(b.cap) * (R + 1), host_temp, size_t(n) * 4, s);
        void* xb8 = act8(E) ? b.xb8.data() : nullptr;
        void* att8 = act8(Q) ? b.att8.data() : nullptr;
        float *q = b.q.f32(), *k = b.k.f32(), *v = b.v.f32(), *att = b.att.f32();
        StageProfile* prof = seqs ? batch_profile_.get() : prefill_profile_.get();
        auto mark = [&](StageProfile::Stage stage, uint64_t bytes) {
            if (prof) prof->mark(stage, bytes, s);
        };
        if (prof) prof->begin(s);
        const gpu::ExpertTiles head_tiles = mla() ? mla_head_tiles(b, n) : gpu::ExpertTiles{};
        for (int il = 0; il < n_run_; il++) {
            const AttentionLayer& a = attn_[size_t(il)];
            const FfnLayer& m = ffn_[size_t(il)];
            const DeviceLayer& d = device_[size_t(il)];
            float* const* seq = seqs && kv_layer_[size_t(il)] >= 0 ? layer_seqs + int64_t(kv_layer_[size_t(il)]) * 2 * n
                                                                    : nullptr;
            gpu::rms_norm(x, d.attn_norm, n, E, c.rms_eps, xb, s, xb8);
            if (deltanet(il)) {
                deltanet_layer(st, il, {b.dn_qkv.f32(), b.dn_conv.f32(), b.dn_z.f32(), b.dn_ba.f32(), b.dn_o.f32(),
                                        b.dn_o8.data()},
                               n, {xb, xb8}, x);
                mark(StageProfile::kAttention, deltanet_[size_t(il)].weight_bytes());
            } else if (mla()) {
                float* const* index_seq =
                    seqs && indexed(il) ? layer_seqs + (n_kv_layers_ + indexer_slot_[size_t(il)]) * 2 * n : nullptr;
                mla_layer(st, il, b.mla, b.att_part.f32(), x, n, {xb, xb8}, cos_sin, pos, head_tiles, seq, index_seq,
                          prof);
                mark(StageProfile::kAttention, mla_[size_t(il)].weight_bytes());
            } else {
                float* kc = k_rows(st, il);
                float* vc = v_rows(st, il);
                // Gated attention: wq gives [q | gate] heads, split below.
                fork(3);
                pass_matmul(a.wq.type, d.wq, a.q_gate ? 2 * Q : Q, E, n, {xb, xb8}, a.q_gate ? b.qg.f32() : q,
                            stream(0), false, 0);
                pass_matmul(a.wk.type, d.wk, KV, E, n, {xb, xb8}, k, stream(1), false, 0);
                pass_matmul(a.wv.type, d.wv, KV, E, n, {xb, xb8}, v, stream(2), false, 0);
                join(3);
                if (a.q_gate) gpu::split_gated_q(b.qg.f32(), c.n_head, c.head_dim, q, s, n);
                if (d.bq) {
                    gpu::add(q, d.bq, Q, s, n);
                    gpu::add(k, d.bk, KV, s, n);
                    gpu::add(v, d.bv, KV, s, n);
                }
                mark(StageProfile::kAttnIn, a.wq.bytes() + a.wk.bytes() + a.wv.bytes());
                if (a.qk_norm == QkNorm::PerHead) {
                    gpu::qk_norm_rope_store(q, k, v, d.q_norm, d.k_norm, c.n_head, c.n_head_kv, c.head_dim, R, c.rms_eps,
                                            cos_sin, kc, vc, pos, s, n, seq);
                } else {
                    position_qk(a, d, q, k, v, n, cos_sin, pos, temp, kc, vc, b.kt.f32(), b.vt.f32(), seq);
                }
                mark(StageProfile::kQkRope, 0);
                // A prompt's pass on tensor cores (within rounding of
                // decoding): attention in tiles over all its tokens at once;
                // else (bit for bit decoding's, or batched decode's rows of
                // several sequences) the decode kernel, a launch a run of
                // tokens.
                const bool tiled = rounding_pass() && options_.prefill_attention_tiles && !seq &&
                                   gpu::attention_tiled(q, kc, vc, pos, c.n_head, c.n_head_kv, c.head_dim, scale, att,
                                                        s, a.q_gate ? nullptr : att8, n, b.kv_planes.data(), a.window,
                                                        d.sinks, int(a.chunk));
                for (int a0 = 0; !tiled && a0 < n; a0 += kAttentionRows) {
                    const int na = std::min(kAttentionRows, n - a0);
                    void* row8 = att8 && !a.q_gate ? static_cast<uint8_t*>(att8) + size_t(a0) * gpu::act_bytes(Q) : nullptr;
                    gpu::attention(q + a0 * Q, kc, vc, pos + a0, c.n_head, c.n_head_kv, c.head_dim, scale,
                                   b.att_part.f32(), att + a0 * Q, s, row8, {}, na, a.window, d.sinks, int(a.chunk),
                                   seq ? seq + 2 * a0 : nullptr);
                }
                if (a.q_gate) {
                    gpu::mul_sigmoid_heads(att, b.qg.f32(), c.n_head, c.head_dim, s, n);
                    quantize(att, n, Q, att8);
                }
                mark(StageProfile::kAttention, uint64_t(st.n_past + n) * uint64_t(KV) * 8);
                pass_matmul(a.wo.type, d.wo, E, Q, n, {att, att8}, x, s, true, 1);
                if (d.bo) gpu::add(x, d.bo, E, s, n);
                mark(StageProfile::kAttnOut, a.wo.bytes());
            }

            gpu::rms_norm(x, d.ffn_norm, n, E, c.rms_eps, xb, s, xb8);
            if (!m.moe()) {
                dense_rows(b, m.dense, d.dense, n, {xb, xb8}, x, true);
                mark(StageProfile::kDown, m.dense.weight_bytes());
                continue;
            }
            const int64_t X = c.n_expert;
            int32_t* ids = reinterpret_cast<int32_t*>(b.ids.data());
            // Decode's split of each router row over a block's four warps
            // keeps decode's bits (--gpu-prefill pass); a pass held only to
            // rounding gives each warp whole rows, so a block reads the
            // pass's activations once for 8 rows instead of 2.
            pass_matmul(m.router.type, d.router, X, E, n, {xb, xb8}, b.router.f32(), s, false,
                        rounding_pass() ? 0 : 1);
            if (d.router_bias) gpu::add(b.router.f32(), d.router_bias, X, s, n);
            if (m.routing.gating == Gating::Sigmoid) {
                gpu::route_sigmoid_topk(b.router.f32(), d.selection_bias, int(X), K, m.routing.renorm,
                                        m.routing.scale, ids, b.weights.f32(), s, n, m.routing.n_group,
                                        m.routing.n_group_used);
            } else {
                gpu::route_softmax_topk(b.router.f32(), int(X), K, m.routing.renorm, ids, b.weights.f32(), s, n,
                                        m.routing.gating == Gating::SoftmaxChosen);
            }
            mark(StageProfile::kRouter, m.router.bytes());
            gpu::copy_to_host(b.host_ids, ids, size_t(n * K) * 4, s);
            const bool host_part = batch_host_pass(b, n);
            if (host_part) {
                gpu::copy_to_host(b.host_xb, xb, size_t(n * E) * 4, s);
                gpu::copy_to_host(b.host_w, b.weights.f32(), size_t(n * K) * 4, s);
            }
            gpu::sync(s);
            gpu::ExpertTiles down;
            const gpu::ExpertTiles tiles = cut_tiles(b, il, n, &down, host_part);
            mark(StageProfile::kTopK, 0);
            const ExpertLayer& el = expert_layers_[size_t(il)];
            const uint8_t* const* table = vram_.table(il);
            float* hidden = b.hidden.f32();
            // Llama 4: each pair's input row weighted, as token()'s.
            gpu::Act in = {xb, xb8};
            const bool own = el.weight_input;
            if (own) {
                gpu::weighted_rows(xb, b.weights.f32(), n, K, E, b.xs.f32(), s);
                in = {b.xs.f32(), quantize(b.xs.f32(), int64_t(n) * K, E, b.xs8.data())};
            }
            // Tiles [first, first + count): gate/up, the hidden rows' 8-bit
            // form (all rows: each the same bits whenever quantized), down.
            const bool tc = tensor_experts(il);
            auto run_tiles = [&](int first, int count) {
                gpu::ExpertTiles g = tiles, gd = down;
                g.tiles += 3 * first;
                gd.tiles += 3 * first;
                g.n_tiles = gd.n_tiles = count;
                if (tc) {
                    tensor_expert_tiles(b, il, g, gd, in, n, d.extras(clamped(), own), prof,
                                        uint64_t(count) * (el.gate.bytes + el.up.bytes));
                    return;
                }
                if (el.gate.type == el.up.type) {
                    gpu::expert_gate_up_tokens(el.gate.type, table, g, 0, vram_.up_offset(il), F, E, in, hidden, s,
                                               d.extras(clamped(), own));
                } else {
                    float* gate = b.gate.f32();
                    float* up = gate + int64_t(b.cap) * K * F;
                    gpu::matmul_experts(el.gate.type, table, g, 0, F, E, in, gate, s, K);
                    gpu::matmul_experts(el.up.type, table, g, vram_.up_offset(il), F, E, in, up, s, K);
                    gpu::swiglu(gate, up, int64_t(n) * K * F, hidden, s);
                }
                mark(StageProfile::kGateUp, uint64_t(count) * (el.gate.bytes + el.up.bytes));
                void* hidden8 = quantize(hidden, int64_t(n) * K, F, b.hidden8.data());
                gpu::matmul_experts(el.down.type, table, gd, vram_.down_offset(il), E, F, {hidden, hidden8},
                                    b.down.f32(), s, 0);
            };
            if (device_routed()) {
                run_tiles(0, tiles.n_tiles);
            } else {
                stream_tiles(b, experts, il, tiles.n_tiles, run_tiles);
                if (b.n_host_used > 0) host_rows_part(b, experts, il);
                if (!seqs) copy_ahead(experts, il, n);
            }
            // As token(): the routed sum into zeros, then the shared expert, then the residual.
            float* moe_out = m.shared.empty() ? x : b.moe_out.f32();
            if (moe_out != x) gpu::fill(moe_out, 0, size_t(n * E) * 4, s);
            gpu::combine_experts(b.down.f32(), own ? b.ones.f32() : b.weights.f32(), n, K, E, moe_out, s, d.down_bias,
                                 ids);
            if (!m.shared.empty() && d.shared_gate) {
                dense_rows(b, m.shared, d.shared, n, {xb, xb8}, b.shared_out.f32(), false);
                pass_matmul(m.shared_gate.type, d.shared_gate, 1, E, n, {xb, xb8}, b.shared_logit.f32(), s, false, 1);
                gpu::add_sigmoid_gated(moe_out, b.shared_out.f32(), b.shared_logit.f32(), E, s, n);
            } else if (!m.shared.empty()) {
                dense_rows(b, m.shared, d.shared, n, {xb, xb8}, moe_out, true);
            }
            if (moe_out != x) gpu::add(x, moe_out, n * E, s);
            mark(StageProfile::kDown, uint64_t(tiles.n_tiles) * el.down.bytes + m.shared.weight_bytes());
        }
        const size_t row8 = gpu::act_bytes(E);
        if (all_logits) {
            for (int r0 = 0; r0 < n; r0 += kLogitRows) {
                const int nr = std::min(kLogitRows, n - r0);
                void* x8 = xb8 ? static_cast<uint8_t*>(xb8) + size_t(r0) * row8 : nullptr;
                gpu::rms_norm(x + r0 * E, output_norm_dev_, nr, E, c.rms_eps, xb + r0 * E, s, x8);
                pass_matmul(output().type, output_dev_, V, E, nr, {xb + r0 * E, x8}, b.logits.f32(), s, false, 1);
                gpu::copy_to_host(logits + int64_t(r0) * V, b.logits.f32(), size_t(nr * V) * 4, s);
            }
        } else if (last) {
            const int64_t r = n - 1;
            void* x8 = xb8 ? static_cast<uint8_t*>(xb8) + size_t(r) * row8 : nullptr;
            gpu::rms_norm(x + r * E, output_norm_dev_, 1, E, c.rms_eps, xb + r * E, s, x8);
            gpu::matvec(output().type, output_dev_, V, E, {xb + r * E, x8}, st.logits.f32(), s);
            gpu::copy_to_host(st.host_logits, st.logits.data(), size_t(V) * 4, s);
        }
        mark(StageProfile::kHead, output().bytes());
        gpu::sync(s);
        gpu::check_last("prefill");
        if (prof) prof->collect(n);
        if (last && !all_logits) memcpy(logits, st.host_logits, size_t(V) * 4);
        if (seqs) {
            for (int t = 0; t < n; t++) seqs[t]->n_past++;
        } else {
            st.n_past += n;
        }
        tokens_ += uint64_t(n);
        if (mapped_) refresh_vram(b.layer_ids.data(), c.n_expert, b.layer_count.data());
        age_uses();
    }

    static void require(GgmlType t) {
        if (!gpu::supports(t)) throw std::runtime_error(std::string("no CUDA kernel for ") + type_name(t) + " weights");
    }

    // The chosen experts of layer il that the VRAM cache lacks, acquired
    // from the RAM tier and copied as one batch on the copy stream; the
    // compute stream waits for the batch (the host does not). Sets
    // st.host_slots, and the device's st.slots, to the chosen experts' slots
    // by rank. Returns the seconds the host spent on it after the routing.
    // Whether this decode step's misses are the host's (--gpu-ram-tier cpu):
    // streaming (a prefill pass copies them, stream_tiles).
    bool cpu_computes_misses() const { return cpu_misses_ && !device_routed(); }

    int moe_layer_count() const {
        int n = 0;
        for (int il = 0; il < n_run_; il++) n += ffn_[size_t(il)].moe() ? 1 : 0;
        return n;
    }

    // Whether n tokens (one sequence's chunk, or n sequences' steps) run as
    // decode steps rather than one pass (steps_beat_pass, gpu_decoder.h):
    // only where the host computes misses by the measured split (a fixed
    // --gpu-host-share keeps passes: the same bits every run), at decode's
    // miss rate so far. Until 8 steps are timed, chunks of up to
    // kExploreSteps tokens run as steps, which times them: a first prompt
    // of 4 tokens ran 67.5 tok/s as steps against 49.6 as a pass at 64M on
    // the H100 of run18 call 2, and serve's batches of several sequences
    // never make a single step to time otherwise.
    static constexpr int kExploreSteps = 8;
    bool chunk_as_steps(int n) const {
        if (n < 2 || !cpu_computes_misses() || cpu_share_ >= 0 || copy_expert_s_ <= 0) return false;
        if (steps_timed_ < 8) return n <= kExploreSteps;
        const TierCounts& dc = phase_counts_[1];
        const double miss_rate = dc.hits + dc.misses > 0 ? double(dc.misses) / double(dc.hits + dc.misses) : 0.0;
        return steps_beat_pass(n, config_.n_expert, config_.n_expert_used, moe_layer_count(), miss_rate,
                               copy_expert_s_, step_seconds_ / double(steps_timed_));
    }

    // --gpu-ram-tier cpu: waits for layer il's routing and its FFN input,
    // then splits the K chosen experts: those in VRAM go to the GPU; of the
    // misses, the host computes cpu_share_ eighths (the last in rank order)
    // and the rest are copied into VRAM slots (cached) and run on the GPU
    // with the hits, so the link and the host's cores work at once. The
    // GPU's experts' slots go to st.slots, their ids and weights to
    // st.hit_ids / st.hit_weights (rank order kept), the host's to cpu_ids_ /
    // cpu_weights_ for compute_misses. Returns how many the GPU runs. The
    // split depends only on the routing, the cache and cpu_share_, so a
    // given share gives the same bits every run (a measured one can differ
    // between runs).
    int split_experts(GpuState& st, ExpertSource& experts, int il, int K) const {
        const int64_t E = config_.n_embd;
        float* w = st.host_split;  // K routing weights
        float* hit_w = w + K;      // K: the GPU's experts' weights
        float* xb = hit_w + K;     // E: the FFN input
        int32_t* hit_ids = reinterpret_cast<int32_t*>(xb + 2 * E);
        gpu::copy_to_host(w, st.weights.data(), size_t(K) * 4, compute_);
        gpu::copy_to_host(xb, st.xb.data(), size_t(E) * 4, compute_);
        routing_ready(st, experts, il, K);
        int slot_of[64], miss[64], miss_rank[64], n_miss = 0;
        vram_.protect();
        for (int r = 0; r < K; r++) {
            const int32_t id = st.host_ids[r];
            count_use(il, id, 1);
            slot_of[r] = vram_.find(il, id);
            if (slot_of[r] >= 0 && !admitted_slot_.empty() && admitted_slot_[size_t(slot_of[r])]) {
                admitted_slot_[size_t(slot_of[r])] = 0;
                admit_useful_++;
            }
            if (slot_of[r] < 0) {
                miss_rank[n_miss] = r;
                miss[n_miss++] = id;
            }
        }
        // Copies need the RAM tier to keep every expert: their reads outlive
        // the acquire (released below, before moe_forward acquires the
        // layer's other misses), which only a tier that never evicts allows.
        // Where the link already took its share of this layer ahead (the
        // predicted experts, prefetch_next), the host computes every miss:
        // a copy now would stall the GPU behind it.
        const bool link_went_ahead = host_ahead_layer_ == il;
        host_ahead_layer_ = -1;
        const int n_cpu = ram_holds_all_ && !link_went_ahead ? host_part(n_miss) : n_miss;
        const int n_copy = n_miss - n_cpu;
        if (n_copy > 0) {
            int slot[64];
            copy_experts(experts, il, miss, n_copy, slot);
            experts.release(il);
            for (int i = 0; i < n_copy; i++) slot_of[miss_rank[i]] = slot[i];
            copied_misses_ += uint64_t(n_copy);
        }
        int n_gpu = 0, n_host = 0;
        for (int r = 0; r < K; r++) {
            if (slot_of[r] >= 0) {
                st.host_slots[n_gpu] = vram_.address(slot_of[r]);
                hit_ids[n_gpu] = st.host_ids[r];
                hit_w[n_gpu++] = w[r];
            } else {
                cpu_ids_[n_host] = st.host_ids[r];
                cpu_weights_[n_host++] = w[r];
            }
        }
        hits_ += uint64_t(K - n_miss);
        misses_ += uint64_t(n_miss);
        cpu_experts_ += uint64_t(n_host);
        if (n_gpu > 0) wait_admitted(il);
        if (n_gpu > 0) {
            gpu::copy_to_device(st.slots.data(), st.host_slots, size_t(n_gpu) * sizeof(uint8_t*), compute_);
            gpu::copy_to_device(st.hit_ids.data(), hit_ids, size_t(n_gpu) * 4, compute_);
            gpu::copy_to_device(st.hit_weights.data(), hit_w, size_t(n_gpu) * 4, compute_);
        }
        return n_gpu;
    }

    // The host's part of layer il: experts cpu_ids_[0 .. K - KG) applied to
    // the FFN input with their routing weights (model/moe.cpp: the CPU
    // path's kernels and threads), summed in rank order into host_split's
    // last E floats. The RAM tier (or the drive) serves them.
    MoeCost compute_misses(GpuState& st, ExpertSource& experts, int il, int K, int KG) const {
        const int64_t E = config_.n_embd;
        const float* xb = st.host_split + 2 * K;
        float* out = st.host_split + 2 * K + E;
        const double t0 = now();
        const MoeCost cost = moe_forward(*pool_, experts, expert_layers_[size_t(il)], xb, 1, cpu_ids_, cpu_weights_,
                                         K - KG, st.cpu_moe, out, {}, expert_biases(ffn_[size_t(il)]));
        cpu_seconds_ += now() - t0;
        cpu_bytes_ += cost.expert_bytes;
        return cost;
    }

    // The host's n misses of layer il (cpu_ids_) also copied into VRAM slots
    // on the copy stream, behind the next layer's copies ahead, while the
    // host computes them; the compute stream waits for these copies when it
    // next runs layer il (wait_admitted). Only where admit_host_ (set at
    // load): a cache smaller than a token's experts would evict what the
    // token still needs. The split depends on the routing and the cache
    // alone, so a fixed share keeps its bits.
    void admit_host_misses(ExpertSource& experts, int il, int n) const {
        if (!admit_host_) return;
        // All of them while at least half of recent admissions were hit
        // again (or too few to tell); else a sample.
        const bool admit_all = admit_recent_ < 32 || 2 * admit_useful_ >= admit_recent_;
        int32_t ids[64];
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (admit_all || host_misses_seen_ % kAdmitSample == 0) ids[m++] = cpu_ids_[i];
            host_misses_seen_++;
        }
        admit_skipped_ += uint64_t(n - m);
        if (m == 0) return;
        const ExpertLayer& el = expert_layers_[size_t(il)];
        // The RAM tier holds every expert, so a view outlives the release
        // (as copy_experts' do).
        experts.acquire(il, ids, m);
        ExpertView v;
        for (int i; (i = experts.next_ready(il, &v)) >= 0;) {
            const int slot = take_slot(il, ids[i]);
            vram_.copy(slot, il, ids[i], el, v, copy_);
            admitted_slot_[size_t(slot)] = 1;
        }
        experts.release(il);
        gpu::record(admit_events_[size_t(il)], copy_);
        admit_pending_[size_t(il)] = 1;
        admitted_ += uint64_t(m);
        copied_bytes_ += uint64_t(m) * el.expert_bytes();
        admit_recent_ += uint64_t(m);
        if (admit_recent_ >= kAdmitWindow) admit_recent_ /= 2, admit_useful_ /= 2;
    }

    // The compute stream waits for layer il's admitted copies
    // (admit_host_misses) before it reads a slot they fill; il < 0: every
    // layer's (a pass that may read any slot).
    void wait_admitted(int il) const {
        for (int l = il < 0 ? 0 : il; l < int(admit_pending_.size()) && (il < 0 || l == il); l++) {
            if (!admit_pending_[size_t(l)]) continue;
            gpu::wait(compute_, admit_events_[size_t(l)]);
            admit_pending_[size_t(l)] = 0;
        }
    }

    // Waits for layer il's routing (and whatever was queued before it);
    // the RAM tier's copies of the layer before, and this layer's
    // prefetched experts, are then done with.
    // Returns when the wait for the device ended.
    double routing_ready(GpuState& st, ExpertSource& experts, int il, int K) const {
        gpu::copy_to_host(st.host_ids, st.ids.data(), size_t(predicting(il) ? 2 * K : K) * 4, compute_);
        const double t_sync = now();
        gpu::sync(compute_);
        release_held(experts);
        const double t0 = now();
        wait_routing_seconds_ += t0 - t_sync;
        if (prefetched_layer_ == il) {
            // The prefetched experts' copies must land before the GPU reads
            // their slots. Where the RAM tier holds every expert, its views
            // outlive a release (as copy_experts' and admission's do), so
            // only the compute stream waits and the host goes on to its part
            // of the layer. (Tried as the cause of DeepSeek V3's slow cpu
            // mode: no measurable change there, 98.40 against 96.76 tok/s,
            // docs/gpu.md run19; kept as the wait the copies need, no more.)
            // Otherwise the RAM tier may reuse the slots once released, so
            // the host waits for the copies.
            if (ram_holds_all_) {
                gpu::wait(compute_, prefetched_);
            } else {
                gpu::sync_event(prefetched_);
            }
            experts.release(il);
            prefetched_layer_ = -1;
            for (int i = 0; i < n_prefetched_; i++)
                prefetch_used_ += uint64_t(std::count(st.host_ids, st.host_ids + K, prefetched_ids_[i]));
        }
        if (predicted_layer_ == il) {
            for (int r = 0; r < K; r++)
                predicted_right_ += uint64_t(std::count(st.host_ids, st.host_ids + K, predicted_ids_[r]));
            predicted_ += uint64_t(K);
        }
        return t0;
    }

    double fetch_experts(GpuState& st, ExpertSource& experts, int il, int K) const {
        const double t0 = routing_ready(st, experts, il, K);
        int32_t miss[64], miss_rank[64];
        int n_miss = 0;
        vram_.protect();
        for (int r = 0; r < K; r++) {
            count_use(il, st.host_ids[r], 1);
            const int slot = vram_.find(il, st.host_ids[r]);
            if (slot >= 0) {
                st.host_slots[r] = vram_.address(slot);
            } else {
                miss_rank[n_miss] = r;
                miss[n_miss++] = st.host_ids[r];
            }
        }
        hits_ += uint64_t(K - n_miss);
        misses_ += uint64_t(n_miss);
        if (n_miss > 0) {
            int slot[64];
            copy_experts(experts, il, miss, n_miss, slot);
            for (int i = 0; i < n_miss; i++) st.host_slots[miss_rank[i]] = vram_.address(slot[i]);
        }
        // The compute stream has finished with host_slots' last copy: the
        // host waited for it above (the ids).
        gpu::copy_to_device(st.slots.data(), st.host_slots, size_t(K) * sizeof(uint8_t*), compute_);
        // The RAM tier keeps the misses until the copies are done: released
        // at the next layer's (or the token's) wait, so the host launches
        // this layer's experts while they copy.
        if (n_miss > 0) held_ = il;
        const double spent = now() - t0;
        fill_seconds_ += spent;
        return spent;
    }

    // Experts ids[0 .. n) of layer il acquired from the RAM tier (the
    // caller releases them) and copied into VRAM slots on the copy stream,
    // slot[i] getting ids[i]'s; the compute stream waits for the copies.
    void copy_experts(ExpertSource& experts, int il, const int32_t* ids, int n, int* slot) const {
        const ExpertLayer& el = expert_layers_[size_t(il)];
        const double t0 = now();
        experts.acquire(il, ids, n);
        ExpertView v;
        for (int i; (i = experts.next_ready(il, &v)) >= 0;) {
            slot[i] = take_slot(il, ids[i]);
            vram_.copy(slot[i], il, ids[i], el, v, copy_);
        }
        gpu::record(copied_, copy_);
        gpu::wait(compute_, copied_);
        queue_copies_seconds_ += now() - t0;
        copied_bytes_ += uint64_t(n) * el.expert_bytes();
    }

    // The host's part of n misses: --gpu-host-share's eighths, rounded to
    // nearest; auto, the cost rule over the times measured at start-up
    // (host_misses, gpu_decoder.h).
    int host_part(int n) const {
        if (cpu_share_ >= 0) return (n * cpu_share_ + 4) / 8;
        return host_misses(n, copy_expert_s_, host_fixed_s_, host_expert_s_);
    }

    // Whether layer il predicts layer il + 1's experts (streaming only).
    // Only between two MoE layers: the host reads the prediction where it
    // waits for layer il's routing, and layer il + 1 must route.
    bool predicting(int il) const {
        return prefetch_now_ && !device_routed() && il + 1 < n_run_ && ffn_[size_t(il)].moe() &&
               ffn_[size_t(il + 1)].moe();
    }

    // After layer il's launches: layer il + 1's predicted experts (in
    // st.host_ids after il's own) that the VRAM cache lacks, acquired from
    // the RAM tier and copied on the copy stream behind il's misses, so the
    // copies overlap layer il's experts and layer il + 1's attention. Wrong
    // guesses cost their copies and the slots they take.
    void prefetch_next(GpuState& st, ExpertSource& experts, int il, int K) const {
        const int next = il + 1;
        const int32_t* guess = st.host_ids + K;
        predicted_layer_ = next;
        std::copy(guess, guess + K, predicted_ids_);
        n_prefetched_ = 0;
        for (int r = 0; r < K; r++) {
            if (vram_.find(next, guess[r]) < 0) prefetched_ids_[n_prefetched_++] = guess[r];
        }
        const int pinned = held_ >= 0 ? K : 0;  // at most il's misses
        // Layer il's slots (the K most recently used, still being read) are
        // never taken while the cache has 2K.
        if (n_prefetched_ == 0 || pinned + n_prefetched_ > experts.capacity() || vram_.n_slots() < 2 * K) {
            n_prefetched_ = 0;
            return;
        }
        // --gpu-ram-tier cpu with the split: the link copies ahead only its
        // share of the predicted misses, the highest-ranked, and the host
        // computes the next layer's misses (split_experts). Copying every
        // prediction ahead made the link the bound: on the H100's 64M run
        // (docs/gpu/run13) 1.13 GB a token crossed it, host share or not.
        if (cpu_computes_misses() && ram_holds_all_) {
            host_ahead_layer_ = next;
            n_prefetched_ -= host_part(n_prefetched_);
            if (n_prefetched_ == 0) return;
        }
        const ExpertLayer& el = expert_layers_[size_t(next)];
        experts.acquire(next, prefetched_ids_, n_prefetched_);
        ExpertView v;
        for (int i; (i = experts.next_ready(next, &v)) >= 0;) {
            vram_.copy(take_slot(next, prefetched_ids_[i]), next, prefetched_ids_[i], el, v, copy_);
        }
        gpu::record(prefetched_, copy_);
        prefetched_layer_ = next;
        prefetch_copies_ += uint64_t(n_prefetched_);
        copied_bytes_ += uint64_t(n_prefetched_) * el.expert_bytes();
    }

    // Releases the layer whose misses were copied last, once the compute
    // stream, which waited for those copies, has been synchronized.
    void release_held(ExpertSource& experts) const {
        if (held_ >= 0) experts.release(held_);
        held_ = -1;
    }

    static double now() {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }

    // The layer's tensors, each once (empty ones are skipped by to_device).
    std::vector<const Tensor*> tensors(int il) const {
        const AttentionLayer& a = attn_[size_t(il)];
        const FfnLayer& m = ffn_[size_t(il)];
        return {&a.norm,        &a.wq,         &a.wk,       &a.wv,           &a.wo,           &a.bq,
                &a.bk,          &a.bv,         &a.bo,       &a.q_norm,       &a.k_norm,       &m.norm,
                &m.router,      &m.router_bias, &m.selection_bias, &m.shared_gate, &m.dense.gate, &m.dense.up,
                &m.dense.down,  &m.shared.gate, &m.shared.up, &m.shared.down, &a.sinks, &m.gate_bias,
                &m.up_bias,     &m.down_bias};
    }

    // Layer il's multi-head latent attention tensors (none without MLA).
    std::vector<const Tensor*> mla_tensors(int il) const {
        if (!mla()) return {};
        const MlaLayer& l = mla_[size_t(il)];
        std::vector<const Tensor*> t = {&l.wq, &l.wq_a, &l.q_a_norm, &l.wq_b, &l.wkv_a, &l.kv_a_norm, &l.wk_b, &l.wv_b, &l.wo};
        if (indexed(il)) {
            const IndexerLayer& x = indexer_[size_t(il)];
            t.insert(t.end(), {&x.wq_b, &x.wk, &x.proj, &x.k_norm, &x.k_norm_bias});
        }
        return t;
    }

    // Layer il's Gated DeltaNet tensors (none where it attends).
    std::vector<const Tensor*> deltanet_tensors(int il) const {
        if (!deltanet(il)) return {};
        const DeltaNetLayer& l = deltanet_[size_t(il)];
        return {&l.norm, &l.wqkv, &l.wz, &l.wba, &l.wbeta, &l.walpha, &l.conv, &l.dt_bias, &l.a, &l.out_norm, &l.wout};
    }

    // Null for an empty tensor.
    const uint8_t* to_device(const Tensor& t) const {
        if (t.empty()) return nullptr;
        uint8_t* p = weights_.data() + weight_used_;
        gpu::copy_to_device(p, t.data, t.bytes(), nullptr);
        weight_used_ += align256(t.bytes());
        return p;
    }

    // Resident weights to VRAM; the RAM tier's memory page-locked; the
    // expert cache sized, and filled when it holds every expert.
    void upload(ExpertSource& experts) const {
        const double t0 = now();
        size_t total = align256(output().bytes()) + align256(output_norm_.bytes());
        for (int il = 0; il < n_run_; il++) {
            for (const Tensor* t : tensors(il)) total += align256(t->bytes());
            for (const Tensor* t : deltanet_tensors(il)) total += align256(t->bytes());
            for (const Tensor* t : mla_tensors(il)) total += align256(t->bytes());
        }
        // MLA: per layer, the device tables of k_b's and v_b's head matrices.
        std::vector<const uint8_t*> head_tables;
        weights_ = DeviceMemory(total);
        output_dev_ = to_device(output());
        output_norm_dev_ = reinterpret_cast<const float*>(to_device(output_norm_));
        auto f32 = [&](const Tensor& t) { return reinterpret_cast<const float*>(to_device(t)); };
        for (int il = 0; il < n_run_; il++) {
            const AttentionLayer& a = attn_[size_t(il)];
            const FfnLayer& m = ffn_[size_t(il)];
            DeviceLayer d{};
            d.wq = to_device(a.wq);
            d.wk = to_device(a.wk);
            d.wv = to_device(a.wv);
            d.wo = to_device(a.wo);
            d.attn_norm = f32(a.norm);
            d.bq = f32(a.bq);
            d.bk = f32(a.bk);
            d.bv = f32(a.bv);
            d.bo = f32(a.bo);
            d.q_norm = f32(a.q_norm);
            d.k_norm = f32(a.k_norm);
            d.ffn_norm = f32(m.norm);
            d.router = to_device(m.router);
            d.router_bias = f32(m.router_bias);
            d.selection_bias = f32(m.selection_bias);
            d.shared_gate = f32(m.shared_gate);
            d.sinks = f32(a.sinks);
            d.gate_bias = f32(m.gate_bias);
            d.up_bias = f32(m.up_bias);
            d.down_bias = f32(m.down_bias);
            if (deltanet(il)) {
                const DeltaNetLayer& l = deltanet_[size_t(il)];
                d.attn_norm = f32(l.norm);
                d.dn_qkv = to_device(l.wqkv);
                d.dn_z = to_device(l.wz);
                d.dn_ba = to_device(l.wba);
                d.dn_beta = to_device(l.wbeta);
                d.dn_alpha = to_device(l.walpha);
                d.dn_out = to_device(l.wout);
                d.dn_conv = f32(l.conv);
                d.dn_dt_bias = f32(l.dt_bias);
                d.dn_a = f32(l.a);
                d.dn_norm = f32(l.out_norm);
            }
            if (mla()) {
                const MlaLayer& l = mla_[size_t(il)];
                const MlaShape& ms = mla_shape_;
                d.mla_wq = to_device(l.wq);
                d.mla_wq_a = to_device(l.wq_a);
                d.mla_q_a_norm = f32(l.q_a_norm);
                d.mla_wq_b = to_device(l.wq_b);
                d.mla_wkv_a = to_device(l.wkv_a);
                d.mla_kv_a_norm = f32(l.kv_a_norm);
                const uint8_t* kb = to_device(l.wk_b);
                const uint8_t* vb = to_device(l.wv_b);
                d.mla_k_b0 = kb;
                d.mla_v_b0 = vb;
                d.wo = to_device(l.wo);
                if (indexed(il)) {
                    const IndexerLayer& x = indexer_[size_t(il)];
                    d.idx_wq_b = to_device(x.wq_b);
                    d.idx_wk = to_device(x.wk);
                    d.idx_proj = to_device(x.proj);
                    d.idx_k_norm = f32(x.k_norm);
                    d.idx_k_bias = f32(x.k_norm_bias);
                }
                for (int h = 0; h < ms.n_head; h++) {
                    head_tables.push_back(kb + size_t(h) * size_t(ms.kv_lora) * row_bytes(l.wk_b.type, ms.nope));
                }
                for (int h = 0; h < ms.n_head; h++) {
                    head_tables.push_back(vb + size_t(h) * size_t(ms.v) * row_bytes(l.wv_b.type, ms.kv_lora));
                }
            }
            d.dense = {to_device(m.dense.gate), to_device(m.dense.up), to_device(m.dense.down)};
            d.shared = {to_device(m.shared.gate), to_device(m.shared.up), to_device(m.shared.down)};
            device_.push_back(d);
        }
        if (!head_tables.empty()) {
            mla_tables_ = DeviceMemory(head_tables.size() * sizeof(uint8_t*));
            gpu::copy_to_device(mla_tables_.data(), head_tables.data(), head_tables.size() * sizeof(uint8_t*), nullptr);
            const auto* t = reinterpret_cast<const uint8_t* const*>(mla_tables_.data());
            for (int il = 0; il < n_run_; il++) {
                device_[size_t(il)].mla_k_b = t + size_t(2 * il) * size_t(mla_shape_.n_head);
                device_[size_t(il)].mla_v_b = t + size_t(2 * il + 1) * size_t(mla_shape_.n_head);
            }
        }
        zero_ = DeviceMemory(4);
        gpu::fill(zero_.data(), 0, 4, nullptr);
        gpu::sync(nullptr);
        const double t1 = now();
        compute_ = gpu::new_stream();
        copy_ = gpu::new_stream();
        for (int i = 0; i < 2; i++) side_[i] = gpu::new_stream(), joined_[i] = gpu::new_event();
        forked_ = gpu::new_event();
        if (options_.profile) {
            profile_ = std::make_unique<StageProfile>("decode", n_run_ * 12 + 4);
            prefill_profile_ = std::make_unique<StageProfile>("prefill", n_run_ * 16 + 4);
            batch_profile_ = std::make_unique<StageProfile>("batched decode", n_run_ * 16 + 4);
        }
        copied_ = gpu::new_event();
        prefetched_ = gpu::new_event();
        ahead_ = gpu::new_event();
        tabled_ = gpu::new_event();
        uint64_t budget = options_.expert_bytes;
        if (budget == 0) {
            size_t free_b = 0, total_b = 0;
            gpu::memory_info(&free_b, &total_b);
            budget = free_b > (size_t(1) << 30) ? free_b - (size_t(1) << 30) : 0;
        }
        // When every expert fits in VRAM, the RAM tier only passes them
        // through once: page-locking it all would cost more than the
        // driver's staged copies (7 s against 1.2 s for the 30B's 17.6 GiB,
        // measured). Otherwise it feeds the misses by DMA, and, when it
        // can hold every expert at once, the kernels read a miss from it
        // directly (mapped) and the VRAM cache is refreshed between tokens.
        int64_t n_experts = 0;
        uint64_t slot = 0;
        for (const ExpertLayer& l : expert_layers_) {
            n_experts += l.n_expert;
            slot = std::max<uint64_t>(slot, SlotLayout::aligned(l).bytes(l));
        }
        ram_holds_all_ = experts.capacity() >= n_experts;
        launched_ = gpu::new_event();
        std::vector<SlotLayout> host_layout;
        if (uint64_t(n_experts) * slot > budget) {
            for (auto [p, bytes] : experts.host_memory()) {
                std::string why;
                if (bytes > 0 && gpu::pin_host(p, bytes, &why)) {
                    pinned_bytes_ += bytes;
                } else if (bytes > 0) {
                    fprintf(stderr, "gpu: %.1f MiB of the RAM tier not page-locked (%s): its copies are staged\n",
                            double(bytes) / (1 << 20), why.c_str());
                }
            }
            if (pinned_bytes_ > 0) experts.unpin = [](uint8_t* p) { gpu::unpin_host(p); };
            if (options_.map_ram_tier && pinned_bytes_ > 0 && experts.capacity() >= n_experts) {
                host_layout = map_ram_tier(experts);
            }
        }
        const double t2 = now();
        setup_.resident_weights = t1 - t0;
        setup_.ram_tier = t2 - t1;
        vram_.init(expert_layers_, config_.n_expert, budget, config_.n_expert_used, host_layout,
                   options_.cache_policy, options_.step_fit);
        if (!host_layout.empty() && !vram_.holds_all()) {
            mapped_ = true;
            for (int il = 0; il < n_run_; il++) {
                for (int e = 0; e < expert_layers_[size_t(il)].n_expert; e++) {
                    vram_.set_fallback(il, e, gpu::device_view(host_views_[size_t(il) * config_.n_expert + e].gate));
                }
            }
            vram_.upload_table(nullptr);
        } else if (!host_layout.empty()) {
            for (int il = 0; il < n_run_; il++) experts.release(il);  // filled below, as any resident run
        }
        if (options_.ram_tier_auto && !mapped_ && !vram_.holds_all()) {
            const int n_moe = moe_layer_count();
            uint64_t largest = 0;
            for (int il = 0; il < n_run_; il++) {
                if (ffn_[size_t(il)].moe()) largest = std::max<uint64_t>(largest, expert_layers_[size_t(il)].expert_bytes());
            }
            cpu_misses_ =
                host_split_pays(ram_holds_all_, vram_.n_slots(), n_moe, config_.n_expert_used, largest);
            fprintf(stderr,
                    "gpu: --gpu-ram-tier auto: %s (%d VRAM slots for %d MoE layers of top-%d, experts of %.1f MB, "
                    "RAM tier %s every expert)\n",
                    cpu_misses_ ? "cpu" : "copy", vram_.n_slots(), n_moe, int(config_.n_expert_used),
                    double(largest) / 1e6, ram_holds_all_ ? "holding" : "not holding");
        }
        // The use counts, where the mapped tier's admission reads them.
        if (!vram_.holds_all() && mapped_) {
            uses_.assign(size_t(n_run_) * size_t(config_.n_expert), 0);
        }
        if (vram_.holds_all()) {
            // Every expert once, in groups the RAM tier can hold.
            std::vector<int32_t> ids(size_t(config_.n_expert));
            for (int il = 0; il < n_run_; il++) {
                const ExpertLayer& el = expert_layers_[size_t(il)];
                if (el.n_expert == 0) continue;  // a dense layer
                for (int e0 = 0; e0 < config_.n_expert; e0 += experts.capacity()) {
                    const int m = std::min(experts.capacity(), config_.n_expert - e0);
                    for (int i = 0; i < m; i++) ids[size_t(i)] = e0 + i;
                    experts.acquire(il, ids.data(), m);
                    ExpertView v;
                    for (int i; (i = experts.next_ready(il, &v)) >= 0;) {
                        vram_.copy(vram_.take(il, ids[size_t(i)]), il, ids[size_t(i)], el, v, copy_);
                    }
                    gpu::sync(copy_);
                    experts.release(il);
                }
            }
            vram_.upload_table(nullptr);
        }
        gpu::sync(nullptr);
        setup_.expert_cache = now() - t2;
        if (ram_holds_all_ && !vram_.holds_all() && !mapped_) {
            const double t3 = now();
            fill_ram_tier(experts);
            setup_.ram_fill = now() - t3;
            if (cpu_misses_) {
                const int64_t token_experts = int64_t(moe_layer_count()) * config_.n_expert_used;
                admit_host_ = vram_.n_slots() >= std::max<int64_t>(token_experts, 4 * config_.n_expert_used);
                if (admit_host_) {
                    admit_events_.resize(size_t(n_run_));
                    for (gpu::Event& e : admit_events_) e = gpu::new_event();
                    admit_pending_.assign(size_t(n_run_), 0);
                    admitted_slot_.assign(size_t(vram_.n_slots()), 0);
                }
                measure_split(experts);
            }
            // The link's rate, for the copy bound of the runs' report.
            if (copy_gbps_ <= 0) measure_link(experts);
            batch_host_wanted_ = options_.batch_host;
        }
        if (!options_.routing_profile.empty() && !vram_.holds_all()) {
            place_hottest(experts);
        } else if (!options_.routing_profile.empty()) {
            fprintf(stderr, "gpu: every expert fits VRAM: --routing-profile %s not read or written\n",
                    options_.routing_profile.c_str());
        }
    }

    // --routing-profile: the file's hottest experts copied into VRAM, as
    // many as it has slots, the coldest of them first so that the hottest
    // are the last that recency evicts; each placed expert's use count (the
    // policy's, and the mapped tier's uses_) starts from the profile's,
    // scaled so that the hottest counts as used every step of an aging
    // period. This run's
    // uses are counted from zero into routing_ and merged at close.
    void place_hottest(ExpertSource& experts) const {
        const RoutingProfile old = RoutingProfile::read(options_.routing_profile, n_run_, config_.n_expert);
        routing_ = RoutingProfile(n_run_, config_.n_expert);
        std::vector<std::pair<int, int>> hot = old.hottest(size_t(vram_.n_slots()));
        if (hot.empty()) return;
        const double t0 = now();
        const uint64_t top = old.at(hot[0].first, hot[0].second);
        std::reverse(hot.begin(), hot.end());
        uint64_t bytes = 0;
        for (const auto& [il, id] : hot) {
            const ExpertLayer& el = expert_layers_[size_t(il)];
            if (id >= el.n_expert) continue;  // a dense layer's or out of range: nothing to place
            // The file's count, scaled to what aging keeps (kAgingSteps
            // steps' worth at most), seeds the policies' counts.
            const int seed = int(std::max<uint64_t>(1, old.at(il, id) * kAgingSteps / top));
            if (!uses_.empty()) uses_[size_t(il) * size_t(config_.n_expert) + size_t(id)] = uint32_t(seed);
            if (vram_.has(il, id)) continue;
            experts.acquire(il, &id, 1);
            ExpertView v;
            if (experts.next_ready(il, &v) >= 0) {
                vram_.copy(take_slot(il, id, seed), il, id, el, v, copy_);
                bytes += el.expert_bytes();
            }
            gpu::sync(copy_);
            experts.release(il);
        }
        vram_.upload_table(nullptr);
        gpu::sync(nullptr);
        placed_ = hot.size();
        fprintf(stderr,
                "gpu: routing profile %s: the %zu hottest experts (of %llu tokens' uses) placed in VRAM, %.2f GB "
                "in %.2f s\n",
                options_.routing_profile.c_str(), hot.size(), (unsigned long long)old.tokens, bytes / 1e9, now() - t0);
    }

    // Every expert read into the RAM tier once, where it holds them all, so
    // decode's misses come from RAM from the first token (as a llama.cpp
    // whose weights were loaded) rather than from the drive while the
    // first tokens are timed. Layer by layer, in groups the tier holds.
    void fill_ram_tier(ExpertSource& experts) const {
        std::vector<int32_t> ids(size_t(config_.n_expert));
        uint64_t bytes = 0;
        for (int il = 0; il < n_run_; il++) {
            const ExpertLayer& el = expert_layers_[size_t(il)];
            if (el.n_expert == 0) continue;
            for (int e0 = 0; e0 < el.n_expert; e0 += experts.capacity()) {
                const int m = std::min(experts.capacity(), el.n_expert - e0);
                for (int i = 0; i < m; i++) ids[size_t(i)] = e0 + i;
                experts.acquire(il, ids.data(), m);
                ExpertView v;
                while (experts.next_ready(il, &v) >= 0) bytes += el.expert_bytes();
                experts.release(il);
            }
        }
        filled_bytes_ = bytes;
    }

    // The first layer with routed experts (n_run_ where none has).
    int first_moe_layer() const {
        int il = 0;
        while (il < n_run_ && expert_layers_[size_t(il)].n_expert == 0) il++;
        return il;
    }

    // The link's rate for expert copies (copy_gbps_): a warm-up group, then
    // three timed ones (the median rate: one group of 16 experts
    // measured 28.7 to 46.6 GB/s on one H100 host, docs/gpu/run21), each of
    // other experts of the first MoE layer, copied from the RAM tier into a
    // scratch buffer of at most 256 MB, so the VRAM tier's slots and counts
    // stay as they were. What the VRAM-short runs' copy bound is counted
    // against (TierCounts::json).
    void measure_link(ExpertSource& experts) const {
        const int il = first_moe_layer();
        if (il == n_run_) return;
        const ExpertLayer& el = expert_layers_[size_t(il)];
        const int K = std::min(config_.n_expert_used, el.n_expert);
        const uint64_t eb = el.expert_bytes();
        const int group = int(std::min<uint64_t>({uint64_t(2 * K), uint64_t(el.n_expert / 4),
                                                   uint64_t(experts.capacity()),
                                                   std::max<uint64_t>(1, (256ull << 20) / eb)}));
        if (group < 1) return;
        std::vector<int32_t> ids(static_cast<size_t>(group));
        DeviceMemory scratch;
        try {
            scratch = DeviceMemory(size_t(group) * eb);
        } catch (const std::runtime_error&) {
            return;  // no room beside the tiers: the report gives no copy bound
        }
        std::vector<double> gbps;
        for (int pass = 0; pass < 4; pass++) {
            for (int i = 0; i < group; i++) ids[size_t(i)] = pass * group + i;
            const double t0 = now();
            experts.acquire(il, ids.data(), group);
            ExpertView v;
            for (int i; (i = experts.next_ready(il, &v)) >= 0;) {
                uint8_t* dst = scratch.data() + size_t(i) * eb;
                gpu::copy_to_device(dst, v.gate, el.gate.bytes, copy_);
                gpu::copy_to_device(dst + el.gate.bytes, v.up, el.up.bytes, copy_);
                gpu::copy_to_device(dst + el.gate.bytes + el.up.bytes, v.down, el.down.bytes, copy_);
            }
            gpu::sync(copy_);
            experts.release(il);
            if (pass > 0) gbps.push_back(double(group) * double(eb) / (now() - t0) / 1e9);
        }
        std::sort(gbps.begin(), gbps.end());
        copy_gbps_ = gbps[gbps.size() / 2];
    }

    // --gpu-ram-tier cpu and --gpu-batch-host: the host's share of a layer's misses, in eighths,
    // from --gpu-host-share or from two rates measured here on the first
    // MoE layer's experts: the host's threads running the CPU path's
    // moe_forward over n_expert_used experts for one token, and the link's
    // (measure_link). The shares equalize the two sides' time for a
    // layer's misses.
    void measure_split(ExpertSource& experts) const {
        const int il = first_moe_layer();
        if (il == n_run_) return;
        const ExpertLayer& el = expert_layers_[size_t(il)];
        const int K = std::min(config_.n_expert_used, el.n_expert);
        const int64_t E = config_.n_embd;
        MoeScratch scratch;
        scratch.init(expert_layers_, 1, K);
        std::vector<float> x(static_cast<size_t>(E)), out(static_cast<size_t>(E)), w(static_cast<size_t>(K), 1.0f / float(K));
        for (int64_t i = 0; i < E; i++) x[size_t(i)] = float((i * 37) % 17 - 8) / 64.0f;
        std::vector<int32_t> ids(size_t(el.n_expert));
        // The host's time for one expert and for K (medians of 5 after a
        // warm-up): the difference is the time an expert adds, the rest of
        // one expert's time the fixed cost of a host part.
        double median_s[2] = {0, 0};
        int next_id = 0;
        for (int side = 0; side < 2; side++) {
            const int n = side == 0 ? 1 : K;
            std::vector<double> host_s;
            for (int rep = 0; rep < 6; rep++) {
                // A different set each time where the layer has them: the
                // weights come from RAM, not from the host's caches.
                for (int r = 0; r < n; r++) ids[size_t(r)] = next_id++ % el.n_expert;
                const double t0 = now();
                moe_forward(*pool_, experts, el, x.data(), 1, ids.data(), w.data(), n, scratch, out.data(), {},
                            expert_biases(ffn_[size_t(il)]));
                if (rep > 0) host_s.push_back(now() - t0);
            }
            std::sort(host_s.begin(), host_s.end());
            median_s[side] = host_s[host_s.size() / 2];
        }
        split_measured_ = true;
        host_expert_s_ = K > 1 ? std::max(median_s[1] - median_s[0], 0.0) / double(K - 1) : median_s[0];
        host_fixed_s_ = std::max(median_s[0] - host_expert_s_, 0.0);
        host_gbps_ = double(K) * double(el.expert_bytes()) / median_s[1] / 1e9;
        if (copy_gbps_ <= 0) measure_link(experts);
        if (options_.host_share_eighths >= 0) {
            cpu_share_ = options_.host_share_eighths;
        } else if (copy_gbps_ > 0) {
            cpu_share_ = -1;
            copy_expert_s_ = double(el.expert_bytes()) / (copy_gbps_ * 1e9);
        }
        char split[512];
        int used = cpu_share_ >= 0 ? snprintf(split, sizeof split, "%d/8 (--gpu-host-share)", cpu_share_)
                                   : snprintf(split, sizeof split, "per layer:");
        for (int n = 1; cpu_share_ < 0 && n <= K && used < int(sizeof split) - 16; n++)
            used += snprintf(split + used, sizeof split - size_t(used), " %d/%d", host_part(n), n);
        fprintf(stderr,
                "gpu: %sthe host computes %s of a layer's VRAM misses, the link copies the rest (measured: host %.0f "
                "us a part + %.0f us an expert with %d threads, %.1f GB/s of expert weights for %d; copies %.1f GB/s, "
                "%.0f us an expert)%s\n",
                !cpu_misses_ ? "in batched passes (--gpu-batch-host), " : "", split, host_fixed_s_ * 1e6, host_expert_s_ * 1e6, pool_->size(), host_gbps_, K, copy_gbps_,
                double(el.expert_bytes()) / std::max(copy_gbps_, 1e-9) / 1e3,
                admit_host_ ? "; the host's misses are then copied into VRAM for later tokens" : "");
    }

    // Every expert acquired from the RAM tier and kept (host_views_), with
    // each layer's slot layout there; empty, with nothing acquired, where the
    // tier's slots are not page-locked and mapped, or a layer's experts are
    // not laid out alike (gate, then up, then down, at the same offsets).
    std::vector<SlotLayout> map_ram_tier(ExpertSource& experts) const {
        std::vector<SlotLayout> layout(static_cast<size_t>(n_run_));
        host_views_.assign(size_t(n_run_) * size_t(config_.n_expert), ExpertView{});
        std::vector<int32_t> ids(size_t(config_.n_expert));
        for (int i = 0; i < config_.n_expert; i++) ids[size_t(i)] = i;
        bool alike = true;
        int il = 0;
        for (; il < n_run_ && alike; il++) {
            const ExpertLayer& el = expert_layers_[size_t(il)];
            if (el.n_expert == 0) continue;
            experts.acquire(il, ids.data(), el.n_expert);
            ExpertView v;
            SlotLayout& o = layout[size_t(il)];
            for (int i; (i = experts.next_ready(il, &v)) >= 0;) {
                host_views_[size_t(il) * config_.n_expert + i] = v;
                const SlotLayout here{size_t(v.up - v.gate), size_t(v.down - v.gate)};
                if (o.down == 0) o = here;
                alike = alike && v.up >= v.gate + el.gate.bytes && v.down >= v.up + el.up.bytes && here.up == o.up &&
                        here.down == o.down && gpu::device_view(v.gate) != nullptr;
            }
        }
        if (alike) return layout;
        for (int l = 0; l < il; l++) experts.release(l);
        host_views_.clear();
        return {};
    }

    // Mapped, after a token's (or a prefill pass's) launches have finished:
    // the experts it read from the RAM tier copied into the slots the
    // policy gives up, and the table updated, on the compute stream, so before
    // the next token's launches.
    //
    // The copies overlap the next token: they go on the copy stream once
    // the table no longer sends anything to the slots they overwrite (the
    // evicted experts read from the RAM tier again), and the table sends
    // the copied experts to their slots from the token after, once the
    // host has seen the copies end (committed at the next refresh).
    //
    // layer_ids: layer il's distinct experts at layer_ids + il * stride,
    // count[il] of them (null: stride each).
    void refresh_vram(const int32_t* layer_ids, int stride, const int32_t* count) const {
        gpu::sync_event(copied_);
        bool changed = !pending_.empty();
        for (const PendingCopy& p : pending_) vram_.commit(p.layer, p.id);
        pending_.clear();
        // Each copy takes the slot the policy gives: never more than half of
        // them, so none is taken twice (the rest wait for a later token).
        const size_t most = size_t(vram_.n_slots() / 2);
        candidates_.clear();
        for (int il = 0; il < n_run_; il++) {
            if (expert_layers_[size_t(il)].n_expert == 0) continue;
            const int32_t* ids = layer_ids + int64_t(il) * stride;
            const int n = count ? count[il] : stride;
            for (int r = 0; r < n; r++) {
                if (vram_.find(il, ids[r]) < 0) candidates_.push_back({il, ids[r], -1});
            }
        }
        // Frequency admission: a miss takes the policy's victim slot only
        // if it has been used at least as often (uses_, halved every
        // kAgingSteps forward steps) as the expert there, the most used
        // misses first.
        // Plain LRU, which copies every miss, evicted what the next tokens
        // need where the experts a stretch of text uses outnumber the slots
        // (measured: 27.5 % of uses found in VRAM at --gpu-mem 8G on sampled
        // English text; docs/gpu.md, fifth session).
        auto uses = [&](int layer, int id) { return uses_[size_t(layer) * size_t(config_.n_expert) + size_t(id)]; };
        std::stable_sort(candidates_.begin(), candidates_.end(), [&](const PendingCopy& a, const PendingCopy& b) {
            return uses(a.layer, a.id) > uses(b.layer, b.id);
        });
        for (const PendingCopy& c : candidates_) {
            if (pending_.size() >= most) break;
            const int64_t owner = vram_.next_victim();
            if (owner >= 0 && uses_[size_t(owner)] > uses(c.layer, c.id)) continue;
            pending_.push_back({c.layer, c.id, vram_.take(c.layer, c.id)});
        }
        if (pending_.empty() && !changed) return;
        vram_.upload_table(compute_);
        gpu::record(tabled_, compute_);
        gpu::wait(copy_, tabled_);
        for (const PendingCopy& p : pending_) {
            const ExpertLayer& el = expert_layers_[size_t(p.layer)];
            vram_.copy(p.slot, p.layer, p.id, el, host_views_[size_t(p.layer) * config_.n_expert + p.id], copy_, false);
            copied_bytes_ += el.expert_bytes();
        }
        gpu::record(copied_, copy_);
    }

    // Mapped, after a token: what it found in VRAM (the table as it ran,
    // before refresh_vram commits the copies made during it); ids: each
    // layer's K chosen experts.
    void count_uses(const int32_t* layer_ids, int K) const {
        for (int il = 0; il < n_run_; il++) {
            if (expert_layers_[size_t(il)].n_expert == 0) continue;
            const int32_t* ids = layer_ids + int64_t(il) * K;
            for (int r = 0; r < K; r++) {
                const bool hit = vram_.visible(il, ids[r]);
                count_use(il, ids[r], 1);
                hits_ += hit;
                misses_ += !hit;
                if (!hit) bus_read_bytes_ += expert_layers_[size_t(il)].expert_bytes();
            }
        }
    }

    // The VRAM tier's use counts, which its admission (mapped) and eviction
    // (copied) go by: `c` uses of (il, id); age_uses() once a forward step
    // (a decode token or a prefill pass) halves them every kAgingSteps.
    void count_use(int il, int id, int c) const {
        if (!uses_.empty()) uses_[size_t(il) * size_t(config_.n_expert) + size_t(id)] += uint32_t(c);
        if (!routing_.uses.empty()) routing_.at(il, id) += uint64_t(c);
    }
    void age_uses() const {
        if (++steps_ % kAgingSteps == 0) {
            for (uint32_t& u : uses_) u >>= 1;
        }
    }

    // A VRAM slot for a copied miss (`uses` rows chose it), by the store's
    // policy (--cache-policy; VramExperts). Before the tiers shared
    // SlotCache, the VRAM tier took the coldest unprotected slot where the
    // RAM tier cannot hold every expert (the 235B cut: 550 MB a token read
    // from the drive against LRU's 859) and the least recently used where
    // it can (2G: 56.6 tok/s against fewest-uses' 51.1, whose victims were
    // the newest copies ahead; WLFU's window keeps those).
    int take_slot(int il, int id, int uses = 1) const {
        const int s = vram_.take(il, id, uses);
        if (!admitted_slot_.empty()) admitted_slot_[size_t(s)] = 0;
        return s;
    }

    // Whether the expert kernels find every chosen expert through the device
    // table without the host (all in VRAM, or the RAM tier mapped).
    bool device_routed() const { return vram_.holds_all() || mapped_; }

    GpuOptions options_;
    std::vector<int> kv_layer_;  // per layer: its place among the attention layers' KV caches, -1 for DeltaNet
    int n_kv_layers_ = 0;
    // Quantized weights meet 8-bit activations, as on the CPU (the golden
    // files' main logits are the reference), unless --gpu-activations f32.
    const bool act8_ = !options_.float_activations;
    // Made by attach() (or the first forward call), once load_resident has read the weights.
    mutable std::once_flag uploaded_;
    mutable DeviceMemory weights_;
    mutable size_t weight_used_ = 0;
    mutable std::vector<DeviceLayer> device_;
    mutable DeviceMemory mla_tables_;  // MLA: per layer, k_b's then v_b's head matrices' addresses
    mutable DeviceMemory zero_;  // one int, 0: the first row of a scratch "cache" (position_qk)
    mutable const uint8_t* output_dev_ = nullptr;
    mutable const float* output_norm_dev_ = nullptr;
    mutable VramExperts vram_;
    // --gpu-ram-tier map (options_.map_ram_tier): the RAM tier mapped into
    // the device's address space (map_ram_tier) where it holds every expert,
    // each expert's view there kept acquired, the misses read by the kernels
    // over the bus. Not by default: on text whose experts change, copying
    // each layer's misses (with the next layer's copied ahead) decoded 3-10 %
    // faster in each of three comparisons and prefilled 1.36x faster
    // (docs/gpu.md, fifth session); mapped won only on text repeating one word.
    mutable bool mapped_ = false;
    mutable bool decode_rows_ = false;  // inside forward_batch's pass (see tensor())
    mutable std::vector<ExpertView> host_views_;
    // Mapped: the experts being copied into VRAM slots during the token,
    // and the event the copy stream waits for: the table without their
    // slots' old owners.
    struct PendingCopy {
        int layer, id, slot;
    };
    mutable std::vector<PendingCopy> pending_, candidates_;
    // Each (layer, expert)'s uses (count_use), for the mapped tier's
    // admission (refresh_vram); eviction counts in VramExperts' SlotCache.
    mutable std::vector<uint32_t> uses_;
    // --routing-profile: this run's uses of each (layer, expert), and how
    // many experts the file's profile placed in VRAM at load.
    mutable RoutingProfile routing_;
    mutable size_t placed_ = 0;
    mutable uint64_t steps_ = 0;
    static constexpr uint64_t kAgingSteps = 64;
    mutable gpu::Event tabled_ = nullptr;
    mutable uint64_t pinned_bytes_ = 0;  // of the RAM tier, page-locked
    mutable gpu::Stream compute_ = nullptr, copy_ = nullptr;
    mutable gpu::Stream side_[2] = {nullptr, nullptr};  // fork's: products 1 and 2 of a pass
    mutable gpu::Event forked_ = nullptr, joined_[2] = {nullptr, nullptr};
    mutable gpu::Event copied_ = nullptr;
    mutable std::unique_ptr<StageProfile> profile_, prefill_profile_, batch_profile_;
    mutable int held_ = -1;  // the layer whose copied misses the RAM tier still holds
    // --gpu-ram-tier cpu: this forward call's thread pool; a layer's experts
    // for the host (ids, routing weights); their count, host seconds and
    // weight bytes.
    mutable ThreadPool* pool_ = nullptr;
    mutable int32_t cpu_ids_[64] = {};
    mutable float cpu_weights_[64] = {};
    mutable uint64_t cpu_experts_ = 0, cpu_bytes_ = 0, copied_misses_ = 0;
    // --gpu-ram-tier cpu: the eighths of a layer's misses the host computes
    // (the rest are copied), from --gpu-host-share; -1: host_misses' rule
    // over the times measured at start-up (measure_split): a host part's
    // fixed seconds, the seconds an expert adds on the host and on the link.
    mutable int cpu_share_ = 8;
    mutable double host_gbps_ = 0, copy_gbps_ = 0;  // those rates, GB/s of expert weights
    mutable double host_fixed_s_ = 0, host_expert_s_ = 0, copy_expert_s_ = 0;
    // Where the VRAM cache holds a token's experts (and the RAM tier every
    // expert): the host's misses of a layer are also copied into VRAM, off
    // the critical path, so that a later token finds them there. Without it
    // a host-computed expert stays a miss: on the H100's qwen3-30b run at 4G
    // decode hits fell from 99 % (copy) to 90 % and the host computed 39
    // experts a token (docs/gpu/run15/call1). admit_events_[il] follows
    // layer il's last such copies; admit_pending_[il]: the compute stream
    // has not waited for it yet. One event a layer: a decode step reads
    // layer il's slots only at layer il, a token after the copies began,
    // so the wait costs nothing there, where one event for all would make
    // each layer wait for the layer before's copies. (The first try had
    // one event and admitted every miss: gpt-oss at 4G fell from 132.8 to
    // 99.2 tok/s, docs/gpu/run17/call1; with both changed, 146.2, call 2.
    // Which of the two cost what was not measured apart.)
    mutable bool admit_host_ = false;
    mutable std::vector<gpu::Event> admit_events_;
    mutable std::vector<uint8_t> admit_pending_;
    mutable uint64_t admitted_ = 0;
    // Whether admissions pay (admit_all): admitted_slot_[s] marks a slot
    // filled by an admission and not yet hit; admit_recent_ and
    // admit_useful_ count recent admissions and those hit before their slot
    // was taken again, both halved every kAdmitWindow admissions. Where
    // fewer than half are used, only every kAdmitSample-th host miss is
    // admitted, to keep measuring: on gpt-oss at 4G admitting every one
    // doubled the link's bytes and left decode's hit rate at 62 %
    // (docs/gpu/run17/call1), where qwen3-30b's rose from 90 % to 98 %.
    // Counts of routing and cache events only, so a configuration keeps its
    // bits from run to run.
    static constexpr uint64_t kAdmitWindow = 256, kAdmitSample = 8;
    mutable std::vector<uint8_t> admitted_slot_;
    mutable uint64_t admit_recent_ = 0, admit_useful_ = 0, admit_skipped_ = 0, host_misses_seen_ = 0;
    mutable double cpu_seconds_ = 0;
    mutable double wait_routing_seconds_ = 0, queue_copies_seconds_ = 0;  // host time, decode (see the report)
    mutable uint64_t filled_bytes_ = 0;  // read into the RAM tier at start-up (fill_ram_tier)
    // Streaming: layer il's router predicts layer il + 1's experts, which are
    // copied ahead (prefetch_next) unless --gpu-prefetch off.
    mutable bool prefetch_now_ = false;  // this forward call: options_.prefetch_next_layer, where it pays
    // --gpu-ram-tier cpu, or auto's choice at load (host_split_pays).
    mutable bool cpu_misses_ = false;
    mutable bool ram_holds_all_ = false;  // the RAM tier can hold every expert at once
    mutable gpu::Event launched_ = nullptr;  // prefill: a group's kernels launched (copied tier)
    mutable gpu::Event prefetched_ = nullptr;
    mutable int predicted_layer_ = -1, prefetched_layer_ = -1, n_prefetched_ = 0;
    // The layer whose share of the link went to copies ahead (prefetch_next):
    // the host computes all of its misses.
    mutable int host_ahead_layer_ = -1;
    mutable int32_t predicted_ids_[64] = {}, prefetched_ids_[64] = {};
    // Prompt passes: the layer whose first experts copy_ahead copied (-1:
    // none), their ids ascending, the cache's mark() before them, and the
    // event after their copies; how many were copied so, and used.
    mutable int ahead_layer_ = -1, n_ahead_ = 0;
    mutable int kept_slots_ = 0;  // slots the last stream_tiles' layer may have used since its protect()
    mutable int32_t ahead_ids_[kCopyAhead] = {};
    mutable uint64_t ahead_mark_ = 0, ahead_copies_ = 0, ahead_used_ = 0;
    mutable gpu::Event ahead_ = nullptr;
    mutable uint64_t predicted_ = 0, predicted_right_ = 0, prefetch_copies_ = 0, prefetch_used_ = 0;
    mutable uint64_t copied_bytes_ = 0, bus_read_bytes_ = 0, hits_ = 0, misses_ = 0, tokens_ = 0;
    mutable uint64_t batched_passes_ = 0, batched_rows_ = 0;  // forward_batch's passes and their rows
    // GpuOptions::batch_host: wanted (set at load where the RAM tier holds
    // every expert and copies stream them), ready once the split is
    // measured (prepare_batch_host); the batched passes' host part's
    // experts, rows and seconds.
    mutable bool batch_host_wanted_ = false, batch_host_ready_ = false, split_measured_ = false;
    mutable uint64_t batch_host_experts_ = 0, batch_host_rows_ = 0;
    mutable double batch_host_seconds_ = 0;
    // Decode steps' wall seconds and count (chunk_as_steps reads their
    // mean), and the tokens of chunks it sent through steps.
    mutable double step_seconds_ = 0;
    mutable uint64_t steps_timed_ = 0, chunk_steps_tokens_ = 0;
    mutable TierCounts phase_counts_[2];  // prefill calls, decode calls
    mutable double fill_seconds_ = 0;  // host time in fetch_experts
    // The setup's parts (upload), in seconds: resident weights copied; the
    // RAM tier page-locked (and, mapped, every expert read into it); the
    // expert cache made (and filled, when it holds every expert).
    struct SetupSeconds {
        double resident_weights = 0, ram_tier = 0, expert_cache = 0, ram_fill = 0;
    };
    mutable SetupSeconds setup_;
};

}  // namespace

std::vector<std::string> gpu_architectures() {
    std::vector<std::string> out;
    for (const std::string& a : Model::decoder_architectures()) out.push_back(a);
    return out;
}

void add_gpu_report(const Model& model, Json* report) {
    if (const auto* m = dynamic_cast<const GpuDecoder*>(&model)) m->add_to_report(report);
}

bool gpu_tier_counts(const Model& model, GpuTierCounts* out) {
    const auto* m = dynamic_cast<const GpuDecoder*>(&model);
    return m && m->tier_counts_now(out);
}

std::unique_ptr<Model> open_gpu_model(const GgufFile& file, const GpuOptions& options, std::string* why) {
    std::unique_ptr<Model> m;
    try {
        // The spec Model::open builds the CPU decoder from.
        ModelConfig config = read_config(file);
        DecoderSpec spec;
        if (!decoder_spec(file, config, &spec)) {
            *why = config.arch + " has a forward pass of its own, on the CPU only";
            return nullptr;
        }
        const std::string missing = missing_feature(spec, config);
        if (!missing.empty()) {
            *why = config.arch + ": no GPU operation for " + missing;
            return nullptr;
        }
        // The device before the weight types: a build without CUDA takes
        // no type, and its reason is the one to give.
        if (!gpu::available(why)) return nullptr;
        m = std::make_unique<GpuDecoder>(file, std::move(config), spec, options);
    } catch (const std::runtime_error& e) {
        *why = e.what();
        return nullptr;
    }
    return m;
}

}  // namespace ms
