#include "store/store.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "telemetry/system.h"

namespace ms {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Each expert needs at most 3 reads; a completion's tag is slot * 4 + read.
constexpr uint64_t kReadsPerSlot = 4;

}  // namespace

Store::Store(ExpertLayout layout, int n_slots, const StoreOptions& options, StoreCounters* counters)
    : layout_(std::move(layout)),
      options_(options),
      counters_(counters ? counters : &own_counters_),
      cache_(n_slots, layout_.slot_bytes() ? layout_.slot_bytes() : kIoAlign, std::max(1, layout_.n_layers()),
             std::max(1, layout_.max_experts()), parse_cache_policy(options.cache_policy)),
      engine_(make_io_engine(options.io, options.io_options)),
      slot_io_(size_t(n_slots)),
      reuse_(size_t(std::max(1, layout_.n_layers())) * size_t(std::max(1, layout_.max_experts()))) {
    if (layout_.total_experts() == 0) throw std::runtime_error("store: the model has no routed experts");
    if (options_.prefetch != "off" && options_.prefetch != "auto" && options_.prefetch != "next")
        throw std::runtime_error("--prefetch: expected off, auto or next, not '" + options_.prefetch + "'");
    cache_.set_step_fit(options_.step_fit);
    predicted_.resize(size_t(layout_.n_layers()));
    if (counters_->uses.size() != size_t(layout_.n_layers()) * size_t(layout_.max_experts()))
        counters_->init(layout_.n_layers(), layout_.max_experts());
    for (const std::string& path : layout_.files()) {
        int flags = O_RDONLY | O_CLOEXEC;
        int fd = engine_->wants_direct() ? open(path.c_str(), flags | O_DIRECT) : -1;
        if (engine_->wants_direct() && fd < 0 && errno == EINVAL) {
            std::string fs = filesystem_of(path);
            notes_.push_back(path + ": O_DIRECT is not supported" + (fs.empty() ? "" : " on " + fs) +
                             "; reading through the page cache");
        }
        if (fd < 0) fd = open(path.c_str(), flags);
        if (fd < 0) {
            std::string why = strerror(errno);
            for (int f : fds_) close(f);
            throw std::runtime_error(path + ": " + why);
        }
        fds_.push_back(fd);
    }
    if (!options_.faults.empty()) {
        engine_ = make_fault_engine(std::move(engine_), parse_faults(options_.faults),
                                    [this](uint64_t tag, int* layer, int* expert) {
                                        const int s = int(tag / kReadsPerSlot);
                                        *layer = cache_.layer_of(s);
                                        *expert = cache_.expert_of(s);
                                    });
        notes_.push_back("injecting read faults: " + options_.faults);
    }
    engine_->register_memory(cache_.arena(), cache_.arena_bytes(), cache_.slot_bytes());
    if (!engine_->note().empty()) notes_.push_back(engine_->note());
    done_.resize(256);
    held_.reserve(8);
    hash_ = XXH3_createState();
    if (!hash_) throw std::runtime_error("store: out of memory");
}

Store::~Store() {
    // Reads still in flight write into the arena: wait for them first.
    while (engine_->outstanding() > 0) engine_->reap(done_.data(), done_.size(), true);
    if (unpin) unpin(cache_.arena());
    for (int fd : fds_) close(fd);
    XXH3_freeState(hash_);
}

void Store::begin_step(int n_tokens) { start_step(n_tokens, 1); }

void Store::start_step(int n_tokens, int n_seqs) {
    // A forward pass that threw (a read error, a bad token) never released
    // its layers: unpin them, so the next pass (the next request of `serve`)
    // starts clean instead of failing with "acquired twice".
    for (Held& h : held_)
        if (h.layer >= 0) release(h.layer);
    step_tokens_ = n_tokens;
    step_clock_ = cache_.clock() + 1;  // the first use of this step
    cache_.begin_step(n_tokens, n_seqs);
    if (cache_.step_fit_active()) counters_->step_fit_steps++;
    counters_->steps++;
    if (n_tokens == 1) counters_->decode_steps++;
    else counters_->prefill_tokens += uint64_t(n_tokens);
}

void Store::begin_decode_step(int n_seqs) {
    start_step(1, n_seqs);  // decoding: demand reads, decode-step cache clock
    counters_->decode_steps += uint64_t(n_seqs - 1);  // one per generated token
}

Store::Held* Store::held(int layer) {
    for (Held& h : held_)
        if (h.layer == layer) return &h;
    return nullptr;
}

void Store::start_reads(int slot, int layer, int expert, ReadReason reason) {
    ExpertPlacement p = layout_.place(layer, expert);
    SlotIo& io = slot_io_[size_t(slot)];
    io = SlotIo{};
    io.reads_left = p.n_reads;
    uint8_t* base = cache_.data(slot);
    uint64_t bytes = 0;
    for (int k = 0; k < p.n_reads; k++) {
        const ExpertRead& r = p.reads[k];
        batch_.push_back({fds_[size_t(r.file)], r.offset, r.len, base + r.slot_offset,
                          uint64_t(slot) * kReadsPerSlot + uint64_t(k)});
        bytes += r.len;
    }
    io.bytes = bytes;
    io.reason = reason;
    if (Trace* t = active_trace()) {
        io.submit_ns = Trace::now_ns();
        io.lane = take_lane(t);
    }
    counters_->add_read(reason, p.bytes, bytes, uint64_t(p.n_reads));
}

int Store::take_lane(Trace* t) {
    if (!free_lanes_.empty()) {
        int lane = free_lanes_.back();
        free_lanes_.pop_back();
        return lane;
    }
    const int lane = 1000 + n_lanes_++;
    t->name_lane(lane, "expert reads " + std::to_string(n_lanes_));
    return lane;
}

void Store::note_eviction(int slot) {
    counters_->evictions = cache_.evictions();
    if (!slot_io_[size_t(slot)].prefetched) return;
    counters_->prefetch_unused_evicted++;
    counters_->prefetch_wasted_bytes += slot_io_[size_t(slot)].bytes;
}

void Store::acquire(int layer, const int32_t* ids, int n, const int32_t* rows) {
    if (layer < 0 || layer >= layout_.n_layers() || layout_.layers()[size_t(layer)].n_expert == 0)
        throw std::runtime_error("store: layer " + std::to_string(layer) + " has no routed experts");
    if (n > capacity())
        throw std::runtime_error("store: " + std::to_string(n) + " experts acquired at once, the cache holds " +
                                 std::to_string(capacity()));
    if (held(layer)) throw std::runtime_error("store: layer " + std::to_string(layer) + " acquired twice");
    Held* h = held(-1);
    if (!h) h = &held_.emplace_back();
    h->layer = layer;
    h->ids.assign(ids, ids + n);
    h->slots.assign(size_t(n), -1);
    h->handed.assign(size_t(n), 0);
    h->n_handed = 0;
    layer_clock_ = cache_.clock() + 1;

    const int n_expert = layout_.layers()[size_t(layer)].n_expert;
    const ReadReason reason = layout_.layers()[size_t(layer)].rows ? ReadReason::Rows
                              : step_tokens_ > 1                     ? ReadReason::Prefill
                                                                      : ReadReason::Demand;
    std::vector<int32_t>& guess = predicted_[size_t(layer)];
    if (!guess.empty()) {
        uint64_t correct = 0;
        for (int32_t g : guess) correct += uint64_t(std::count(ids, ids + n, g));
        counters_->record_prediction(layer, guess.size(), uint64_t(n), correct);
        guess.clear();
    }
    batch_.clear();
    for (int i = 0; i < n; i++) {
        int e = ids[i];
        if (e < 0 || e >= n_expert) {
            release(layer);
            throw std::runtime_error("store: layer " + std::to_string(layer) + ": expert id " + std::to_string(e) +
                                     " out of range");
        }
        int s = cache_.find(layer, e);
        bool hit = s >= 0;
        bool late = hit && cache_.state(s) == SlotCache::State::Loading;
        if (!hit) {
            int old_layer;
            s = cache_.claim(layer, e, &old_layer);
            // Slots still loading hints are not victims: let them land.
            while (s < 0 && engine_->outstanding() > 0) {
                reap(true);
                s = cache_.claim(layer, e, &old_layer);
            }
            if (s < 0) {
                if (!batch_.empty()) engine_->submit(batch_.data(), batch_.size());
                release(layer);
                throw std::runtime_error("store: layer " + std::to_string(layer) + ": no slot free for expert " +
                                         std::to_string(e) + ": all " + std::to_string(capacity()) +
                                         " slots are in use");
            }
            if (old_layer >= 0) note_eviction(s);
            start_reads(s, layer, e, reason);
        } else if (slot_io_[size_t(s)].prefetched) {
            slot_io_[size_t(s)].prefetched = false;
            counters_->prefetch_used++;
        }
        cache_.pin(s);
        cache_.touch(s, rows ? rows[i] : 1);
        h->slots[size_t(i)] = s;
        int64_t dist = reuse_.use(size_t(layer) * size_t(layout_.max_experts()) + size_t(e));
        counters_->record_use(layer, e, hit, late, dist);
    }
    if (!batch_.empty()) engine_->submit(batch_.data(), batch_.size());
}

int Store::next_ready(int layer, ExpertView* view) { return hand_out(layer, view, true); }

int Store::next_ready_now(int layer, ExpertView* view) { return hand_out(layer, view, false); }

int Store::hand_out(int layer, ExpertView* view, bool wait) {
    Held* h = held(layer);
    if (!h) throw std::runtime_error("store: next_ready on layer " + std::to_string(layer) + ", not acquired");
    const int n = int(h->ids.size());
    for (int look = 0;; look++) {
        if (h->n_handed == n) return -1;
        for (int i = 0; i < n; i++) {
            int s = h->slots[size_t(i)];
            if (h->handed[size_t(i)] || s < 0 || cache_.state(s) != SlotCache::State::Ready) continue;
            h->handed[size_t(i)] = 1;
            h->n_handed++;
            ExpertPlacement p = layout_.place(layer, h->ids[size_t(i)]);
            const uint8_t* base = cache_.data(s);
            view->gate = base + p.gate;
            view->up = base + p.up;
            view->down = base + p.down;
            return i;
        }
        if (!wait && look > 0) return kNoneReadyYet;
        reap(wait);
    }
}

void Store::release(int layer) {
    Held* h = held(layer);
    if (!h) return;
    for (int s : h->slots)
        if (s >= 0) cache_.unpin(s);
    h->layer = -1;
}

void Store::prefetch(int layer, const int32_t* ids, int n) {
    if (layer < 0 || layer >= layout_.n_layers()) return;
    const int n_expert = layout_.layers()[size_t(layer)].n_expert;
    predicted_[size_t(layer)].assign(ids, ids + n);
    batch_.clear();
    for (int i = 0; i < n; i++) {
        int e = ids[i];
        if (e < 0 || e >= n_expert || cache_.find(layer, e) >= 0) continue;
        int old_layer;
        // Decode keeps every expert this token used; a prefill chunk keeps
        // only the current layer's (earlier layers are done with the chunk).
        int s = cache_.claim(layer, e, &old_layer, nullptr, step_tokens_ > 1 ? layer_clock_ : step_clock_);
        if (s < 0) break;  // every slot busy or used this step: a hint is not worth waiting for
        if (old_layer >= 0) note_eviction(s);
        size_t first = batch_.size();
        start_reads(s, layer, e, ReadReason::Prefetch);
        for (size_t k = first; k < batch_.size(); k++) batch_[k].low = true;
        slot_io_[size_t(s)].prefetched = true;
        counters_->prefetch_issued++;
    }
    if (!batch_.empty()) engine_->submit(batch_.data(), batch_.size());
}

void Store::reap(bool wait) {
    size_t n = engine_->reap(done_.data(), done_.size(), wait);
    if (wait && n == 0) throw std::runtime_error("store: waiting for an expert with no read in flight");
    // Every reaped completion is processed before a failure is thrown:
    // one left unprocessed would leave its slot loading forever, and the
    // next pass (serve's next request) would wait on it.
    for (size_t i = 0; i < n; i++) complete_read(done_[i]);
    if (!failure_.empty()) {
        std::string msg = std::move(failure_);
        failure_.clear();
        throw std::runtime_error(msg);
    }
}

void Store::complete_read(const IoCompletion& c) {
    int s = int(c.tag / kReadsPerSlot);
    int k = int(c.tag % kReadsPerSlot);
    SlotIo& io = slot_io_[size_t(s)];
    const ExpertRead& r = layout_.place(cache_.layer_of(s), cache_.expert_of(s)).reads[k];
    const uint64_t have = io.start[k] + uint64_t(std::max<int64_t>(c.result, 0));
    if (io.error == 0 && c.result > 0 && have < r.need) {
        // A short read (the kernel may return less than asked): read the rest,
        // from the page it stopped in so an O_DIRECT request stays aligned.
        const uint64_t from = have / kIoAlign * kIoAlign;
        io.start[k] = from;
        IoRequest again{fds_[size_t(r.file)], r.offset + from, r.len - from,
                        cache_.data(s) + r.slot_offset + from, c.tag};
        engine_->submit(&again, 1);
        counters_->read_retries++;
        return;
    }
    if (io.error == 0 && (c.result < 0 || have < r.need)) {
        io.error = c.result < 0 ? c.result : 1;
        io.error_offset = r.offset + io.start[k];
    }
    if (--io.reads_left > 0) return;
    if (io.lane >= 0) {
        // Submit to reap: what the forward pass saw of the read.
        if (Trace* t = active_trace()) {
            t->complete(read_reason_name(io.reason), "read", io.submit_ns, Trace::now_ns(), io.lane, "layer",
                        cache_.layer_of(s), "expert", cache_.expert_of(s));
        }
        free_lanes_.push_back(io.lane);
        io.lane = -1;
    }
    if (io.error == 0) {
        slot_loaded(s);
        return;
    }
    if (cache_.pins(s) == 0) {  // a prefetch nobody waits for: forget it quietly
        cache_.drop(s);
        return;
    }
    const std::string& path = layout_.files()[size_t(r.file)];
    if (io.error < 0) {
        fail(s, path, "read failed at offset " + std::to_string(io.error_offset) + ": " + strerror(int(-io.error)));
    } else {
        fail(s, path, "the file ends before the expert's bytes (truncated?)");
    }
}

void Store::slot_loaded(int s) {
    const int layer = cache_.layer_of(s);
    if (options_.verify_checksums && layout_.has_checksums() && !layout_.layers()[size_t(layer)].rows) {
        const ExpertPlacement p = layout_.place(layer, cache_.expert_of(s));  // rows have no checksum
        // xxh3 of gate|up|down as `pack` hashed them: one run in a packed
        // slot, three in a gguf one.
        const ExpertLayer& L = layout_.layers()[size_t(layer)];
        const uint8_t* base = cache_.data(s);
        auto t0 = std::chrono::steady_clock::now();
        XXH3_64bits_reset(hash_);
        XXH3_64bits_update(hash_, base + p.gate, L.gate.bytes);
        XXH3_64bits_update(hash_, base + p.up, L.up.bytes);
        XXH3_64bits_update(hash_, base + p.down, L.down.bytes);
        const uint64_t h = XXH3_64bits_digest(hash_);
        counters_->checksum_s += seconds_since(t0);
        counters_->checksum_bytes += p.bytes;
        if (h != p.checksum) {
            if (cache_.pins(s) == 0) {
                cache_.drop(s);
                return;
            }
            const int file = p.reads[0].file;
            fail(s, layout_.files()[size_t(file)],
                 layout_.kind() == LayoutKind::Packed
                     ? "checksum mismatch (the sidecar is damaged: check it with `moestream pack --verify`, "
                       "write it again with `moestream pack`)"
                     : "checksum mismatch against the table `moestream pack` wrote (the drive returned damaged "
                       "bytes, or the model file changed)");
            return;
        }
    }
    cache_.set_ready(s);
}

void Store::fail(int s, const std::string& path, const std::string& why) {
    const int layer = cache_.layer_of(s);
    if (failure_.empty())
        failure_ = path + ": layer " + std::to_string(layer) + " expert " + std::to_string(cache_.expert_of(s)) +
                   ": " + why;
    // The dropped slot is free for others now: its holder must not unpin it.
    if (Held* h = held(layer))
        for (int& slot : h->slots)
            if (slot == s) slot = -1;
    cache_.drop(s);
}

}  // namespace ms
