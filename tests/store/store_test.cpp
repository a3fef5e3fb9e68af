// The Store as an ExpertSource: for every engine x layout x cache size (down
// to one token's experts) the views it hands out hold exactly the file's
// bytes, each acquired expert comes out once, hits and misses match an
// independent LRU simulation, bytes are counted by reason; a damaged sidecar
// record, a file truncated under a running store, and acquiring more than the
// cache holds each give a clear error naming the layer and expert.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <list>
#include <map>
#include <random>

#include "gguf/gguf.h"
#include "store/store.h"
#include "test_util.h"
#include "../golden_required.h"

namespace ms {
namespace {

using test::golden_model;
using test::TempDir;

// Every expert's gate|up|down bytes read straight from the GGUF.
struct Reference {
    std::map<std::pair<int, int>, std::vector<uint8_t>> gate, up, down;
    Reference(const GgufFile& f, const std::vector<ExpertLayer>& layers) {
        for (const ExpertLayer& L : layers)
            for (int e = 0; e < L.n_expert; e++) {
                auto rd = [&](const ExpertMatrix& m) {
                    std::vector<uint8_t> v(m.bytes);
                    f.read(m.split, m.offset(e), v.data(), v.size());
                    return v;
                };
                gate[{L.layer, e}] = rd(L.gate);
                up[{L.layer, e}] = rd(L.up);
                down[{L.layer, e}] = rd(L.down);
            }
    }
    bool matches(int layer, int e, const ExpertView& v) const {
        auto same = [&](const std::vector<uint8_t>& want, const uint8_t* got) {
            return memcmp(want.data(), got, want.size()) == 0;
        };
        return same(gate.at({layer, e}), v.gate) && same(up.at({layer, e}), v.up) && same(down.at({layer, e}), v.down);
    }
};

// Plain LRU over keys, for hit/miss counts to compare against.
struct LruModel {
    size_t cap;
    std::list<int> order;  // front = most recent
    bool use(int key) {
        auto it = std::find(order.begin(), order.end(), key);
        bool hit = it != order.end();
        if (hit) order.erase(it);
        order.push_front(key);
        if (order.size() > cap) order.pop_back();
        return hit;
    }
};

struct Fixture {
    TempDir dir;
    GgufFile f;
    std::vector<ExpertLayer> layers;
    std::string sidecar;
    Reference ref;
    explicit Fixture(const std::string& model)
        : f(GgufFile::open(golden_model(model))),
          layers(find_expert_layers(f)),
          sidecar(dir.file("m.experts")),
          ref(f, layers) {
        write_sidecar(f, layers, sidecar);
    }
    ExpertLayout layout(const std::string& kind) const {
        return kind == "packed" ? ExpertLayout::packed(f, layers, sidecar) : ExpertLayout::gguf(f, layers);
    }
};

// Runs `steps` decode steps of random top-k routing through the store and
// checks every view; returns the hits the store counted.
void run_steps(Store& store, const Fixture& fx, int k, int steps, uint64_t seed, LruModel* lru, StoreCounters& c) {
    std::mt19937 rng{uint32_t(seed)};
    uint64_t want_hits = 0;
    for (int s = 0; s < steps; s++) {
        store.begin_step(1);
        for (const ExpertLayer& L : fx.layers) {
            if (L.n_expert == 0) continue;
            std::vector<int32_t> ids(size_t(L.n_expert));
            for (int e = 0; e < L.n_expert; e++) ids[size_t(e)] = e;
            // Skewed routing so there is reuse to hit.
            std::shuffle(ids.begin(), ids.end(), rng);
            if (rng() % 3 != 0) std::sort(ids.begin(), ids.begin() + std::min(L.n_expert, k + 2));
            ids.resize(size_t(k));
            if (lru)
                for (int32_t e : ids) want_hits += lru->use(L.layer * 1000 + e);
            store.acquire(L.layer, ids.data(), k);
            std::vector<int> seen(size_t(k), 0);
            ExpertView v;
            int i, n = 0;
            while ((i = store.next_ready(L.layer, &v)) >= 0) {
                ASSERT_LT(i, k);
                ASSERT_EQ(seen[size_t(i)]++, 0);
                ASSERT_TRUE(fx.ref.matches(L.layer, ids[size_t(i)], v))
                    << "layer " << L.layer << " expert " << ids[size_t(i)];
                n++;
            }
            ASSERT_EQ(n, k);
            store.release(L.layer);
        }
    }
    if (lru) {
        EXPECT_EQ(c.total_hits(), want_hits);
    }
}

TEST(Store, EveryEngineLayoutAndCacheSizeServesFileBytes) {
    for (const char* model : {"qwen3moe-Q4_K_M", "gemma4-Q8_0"}) {
        Fixture fx(model);
        int k = 0, total = 0;
        for (const ExpertLayer& L : fx.layers) total += L.n_expert;
        k = std::string(model) == "gemma4-Q8_0" ? 4 : 2;  // the families' top-k
        for (const char* layout : {"gguf", "packed"})
            for (const char* engine : {"uring", "pread", "buffered", "mmap"})
                for (int slots : {k, k + 3, total}) {
                    SCOPED_TRACE(std::string(model) + " " + layout + " " + engine + " slots " + std::to_string(slots));
                    StoreOptions opt;
                    opt.io = engine;
                    opt.io_options = {8, 2, 3};
                    opt.cache_policy = "lru";  // its hits are counted against LruModel
                    StoreCounters c;
                    Store store(fx.layout(layout), slots, opt, &c);
                    EXPECT_EQ(store.capacity(), slots);
                    LruModel lru{size_t(slots), {}};
                    run_steps(store, fx, k, 12, 99, &lru, c);
                    // Every use is a hit or a miss; only misses read.
                    uint64_t uses = c.total_hits() + c.total_misses();
                    EXPECT_EQ(uses, uint64_t(12 * k) * uint64_t(std::count_if(
                                        fx.layers.begin(), fx.layers.end(), [](auto& L) { return L.n_expert > 0; })));
                    EXPECT_EQ(c.requests[int(ReadReason::Demand)] > 0, true);
                    EXPECT_GE(c.read[int(ReadReason::Demand)], c.needed[int(ReadReason::Demand)]);
                    uint64_t reused = 0;
                    for (uint64_t h : c.reuse_hist) reused += h;
                    EXPECT_EQ(reused + c.first_uses, uses);
                    if (slots == total) {
                        EXPECT_EQ(c.evictions, 0u);
                    }
                }
    }
}

TEST(Store, LfuAndWlfuPoliciesAndThreadedEnginesStayExact) {
    Fixture fx("qwen3moe-Q4_K_M");
    for (const char* policy : {"lfu", "wlfu"})
        for (int threads : {1, 4})
            for (int split : {1, 2}) {
                SCOPED_TRACE(policy);
                StoreOptions opt;
                opt.io = "pread";
                opt.cache_policy = policy;
                opt.io_options = {1, threads, split};
                StoreCounters c;
                Store store(fx.layout("packed"), 10, opt, &c);
                run_steps(store, fx, 2, 20, uint64_t(threads * 10 + split), nullptr, c);
                EXPECT_GT(c.total_hits(), 0u);
                EXPECT_GT(c.checksum_bytes, 0u);
            }
}

TEST(Store, BytesAreCountedByReason) {
    Fixture fx("qwen3moe-Q4_K_M");
    StoreCounters c;
    Store store(fx.layout("packed"), 24, StoreOptions{}, &c);
    const ExpertLayer& L1 = fx.layers[1];
    int32_t ids[3] = {0, 1, 2};
    store.begin_step(7);  // a prefill chunk
    store.acquire(1, ids, 3);
    ExpertView v;
    while (store.next_ready(1, &v) >= 0) {}
    store.release(1);
    EXPECT_EQ(c.needed[int(ReadReason::Prefill)], 3 * L1.expert_bytes());
    EXPECT_EQ(c.read[int(ReadReason::Prefill)], 3 * align_up(L1.expert_bytes(), 4096));
    EXPECT_EQ(c.requests[int(ReadReason::Prefill)], 3u);
    EXPECT_EQ(c.prefill_tokens, 7u);

    int32_t next[2] = {3, 4};
    store.prefetch(2, next, 2);
    EXPECT_EQ(c.prefetch_issued, 2u);
    EXPECT_EQ(c.needed[int(ReadReason::Prefetch)], 2 * fx.layers[2].expert_bytes());
    store.begin_step(1);
    int32_t want[2] = {4, 5};
    store.acquire(2, want, 2);  // 4 was prefetched: a hit; 5 a demand miss
    while (store.next_ready(2, &v) >= 0) {}
    store.release(2);
    EXPECT_EQ(c.prefetch_used, 1u);
    EXPECT_EQ(c.hits[2], 1u);
    EXPECT_EQ(c.misses[2], 1u);
    EXPECT_EQ(c.needed[int(ReadReason::Demand)], fx.layers[2].expert_bytes());
    EXPECT_EQ(c.decode_steps, 1u);
    Json j = c.to_json();
    EXPECT_EQ(j.at("hits").as_int(), 1);
    EXPECT_EQ(j.at("misses").as_int(), 4);
    EXPECT_EQ(j.at("layers").size(), 2u);
}

TEST(Store, CapacityIsEnforcedAndPinsHold) {
    Fixture fx("qwen3moe-Q4_K_M");
    Store store(fx.layout("gguf"), 3, StoreOptions{}, nullptr);
    int32_t four[4] = {0, 1, 2, 3};
    EXPECT_THROW(store.acquire(0, four, 4), std::runtime_error);
    int32_t two[2] = {0, 1};
    store.acquire(0, two, 2);
    // Layer 0's two experts are pinned: a second layer of two cannot fit.
    try {
        store.acquire(1, two, 2);
        FAIL() << "acquired more than the cache holds";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("layer 1: no slot free"), std::string::npos) << e.what();
    }
    // Prefetch never displaces pinned experts: one free slot, one prefetch.
    int32_t pf[2] = {5, 6};
    store.prefetch(2, pf, 2);
    ExpertView v;
    int n = 0;
    while (store.next_ready(0, &v) >= 0) n++;
    EXPECT_EQ(n, 2);
    store.release(0);
    store.acquire(1, two, 2);  // fits now
    while (store.next_ready(1, &v) >= 0) {}
    store.release(1);
    EXPECT_THROW(store.acquire(7, two, 2), std::runtime_error);
    int32_t bad[1] = {8};
    EXPECT_THROW(store.acquire(0, bad, 1), std::runtime_error);
    store.acquire(0, two, 2);  // the failed acquires left nothing held
    store.release(0);
}

TEST(Store, AStepThatNeverReleasedIsCleanedUpByTheNext) {
    // A forward pass that throws between acquire and release (serve keeps
    // serving after it) must not leave the layer held or its experts pinned.
    Fixture fx("qwen3moe-Q4_K_M");
    Store store(fx.layout("gguf"), 3, StoreOptions{}, nullptr);
    int32_t two[2] = {0, 1}, three[3] = {2, 3, 4};
    store.begin_step(1);
    store.acquire(0, two, 2);  // ... and the pass throws here
    store.begin_step(1);
    store.acquire(0, two, 2);
    ExpertView v;
    while (store.next_ready(0, &v) >= 0) {}
    store.release(0);
    store.begin_step(1);
    store.acquire(1, three, 3);  // all 3 slots: nothing is still pinned
    while (store.next_ready(1, &v) >= 0) {}
    store.release(1);
}

TEST(Store, CorruptedSidecarRecordNamesLayerAndExpert) {
    Fixture fx("qwen3moe-Q4_K_M");
    ExpertLayout lay = fx.layout("packed");
    test::flip_byte(fx.sidecar, lay.place(2, 6).reads[0].offset + 77);
    for (const char* engine : {"uring", "pread", "mmap"}) {
        SCOPED_TRACE(engine);
        StoreOptions opt;
        opt.io = engine;
        Store store(fx.layout("packed"), 4, opt, nullptr);
        int32_t ids[2] = {1, 6};
        store.acquire(2, ids, 2);
        ExpertView v;
        try {
            while (store.next_ready(2, &v) >= 0) {}
            FAIL() << "damaged expert accepted";
        } catch (const std::runtime_error& e) {
            std::string m = e.what();
            EXPECT_NE(m.find("layer 2 expert 6: checksum mismatch"), std::string::npos) << m;
            EXPECT_NE(m.find(fx.sidecar), std::string::npos) << m;
        }
    }
    StoreOptions off;
    off.verify_checksums = false;
    Store store(fx.layout("packed"), 4, off, nullptr);
    int32_t ids[1] = {6};
    store.acquire(2, ids, 1);
    ExpertView v;
    ASSERT_EQ(store.next_ready(2, &v), 0);
    EXPECT_FALSE(fx.ref.matches(2, 6, v));  // unchecked: the damage shows
}

TEST(Store, FileTruncatedUnderTheStoreNamesLayerAndExpert) {
    TempDir dir;
    std::string model = dir.file("m.gguf");
    test::copy_file(golden_model("qwen3moe-Q4_K_M"), model);
    GgufFile f = GgufFile::open(model);
    std::vector<ExpertLayer> layers = find_expert_layers(f);
    // Cut the file in the middle of the last expert of layer 2's down matrix.
    const ExpertLayer& L = layers[2];
    uint64_t cut = L.down.offset(7) + L.down.bytes / 2;
    uint64_t last_end = 0;
    for (const ExpertLayer& x : layers) last_end = std::max(last_end, x.down.offset(7) + x.down.bytes);
    ASSERT_EQ(last_end, L.down.offset(7) + L.down.bytes) << "layer 2 down is not the file's last expert data";
    for (const char* engine : {"uring", "pread", "buffered", "mmap"}) {
        SCOPED_TRACE(engine);
        StoreOptions opt;
        opt.io = engine;
        Store store(ExpertLayout::gguf(f, layers), 4, opt, nullptr);
        ASSERT_EQ(truncate(model.c_str(), off_t(cut)), 0);
        int32_t ids[1] = {7};
        store.acquire(2, ids, 1);
        ExpertView v;
        try {
            store.next_ready(2, &v);
            FAIL() << "read past the end accepted";
        } catch (const std::runtime_error& e) {
            std::string m = e.what();
            EXPECT_NE(m.find("layer 2 expert 7"), std::string::npos) << m;
            EXPECT_NE(m.find("truncated"), std::string::npos) << m;
        }
        test::copy_file(golden_model("qwen3moe-Q4_K_M"), model);
    }
}

// tmpfs accepts O_DIRECT only since Linux 6.6: where it refuses, the store
// says so and reads through the page cache; either way the bytes are right.
TEST(Store, TmpfsWorksWithOrWithoutODirect) {
    if (access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no /dev/shm";
    TempDir dir("/dev/shm");
    std::string model = dir.file("m.gguf");
    test::copy_file(golden_model("qwen3moe-Q4_K_M"), model);
    GgufFile f = GgufFile::open(model);
    std::vector<ExpertLayer> layers = find_expert_layers(f);
    Reference ref(f, layers);
    int probe = open(model.c_str(), O_RDONLY | O_DIRECT);
    bool direct_ok = probe >= 0;
    if (probe >= 0) close(probe);
    Store store(ExpertLayout::gguf(f, layers), 2, StoreOptions{}, nullptr);
    std::string notes;
    for (const std::string& n : store.notes()) notes += n + "\n";
    EXPECT_EQ(notes.find("O_DIRECT is not supported on tmpfs") != std::string::npos, !direct_ok) << notes;
    int32_t ids[2] = {3, 4};
    store.acquire(1, ids, 2);
    ExpertView v;
    int i;
    while ((i = store.next_ready(1, &v)) >= 0) EXPECT_TRUE(ref.matches(1, ids[i], v));
    store.release(1);
}

}  // namespace
}  // namespace ms
