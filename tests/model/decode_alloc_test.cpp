// Decode allocates nothing: every heap entry point of this binary is
// replaced by a counting wrapper, and a run of single-token forward steps
// (with a thread pool, routed experts through RamExperts) must not call it.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <new>

#include "gguf/gguf.h"
#include "model/model.h"
#include "model/ram_experts.h"

namespace {
std::atomic<bool> g_armed{false};
std::atomic<long> g_allocs{0};
void note() {
    if (g_armed.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

// These replacements pair new with free by design; GCC cannot see that.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(size_t n) {
    note();
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, std::align_val_t a) {
    note();
    const size_t al = size_t(a);
    if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

#if !defined(__SANITIZE_ADDRESS__)
// C allocations too (glibc's real allocator stays reachable under __libc_*);
// sanitizer builds keep their own interceptors and count operator new only.
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* malloc(size_t n) {
    note();
    return __libc_malloc(n);
}
void* calloc(size_t n, size_t m) {
    note();
    return __libc_calloc(n, m);
}
void* realloc(void* p, size_t n) {
    note();
    return __libc_realloc(p, n);
}
void* aligned_alloc(size_t a, size_t n) {
    note();
    return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
    note();
    *out = __libc_memalign(a, n);
    return *out ? 0 : ENOMEM;
}
}
#endif

namespace ms {
namespace {

TEST(DecodeAlloc, CountingWorks) {
    g_allocs = 0;
    g_armed = true;
    int* q = new int(3);
    g_armed = false;
    delete q;
    EXPECT_GE(g_allocs.load(), 1);
#if !defined(__SANITIZE_ADDRESS__)
    g_allocs = 0;
    g_armed = true;
    void* p = std::malloc(16);
    g_armed = false;
    std::free(p);
    EXPECT_EQ(g_allocs.load(), 1);
#endif
}

TEST(DecodeAlloc, DecodeStepsAllocateNothing) {
    // Mixed weight types (Q4_K, Q6_K, Q5_K, Q8_0, F32) and both KV types.
    GgufFile f = GgufFile::open(std::string(MOESTREAM_GOLDEN_DIR) + "/models/qwen3moe-Q4_K_M.gguf");
    auto model = Model::open(f);
    model->load_resident(f);
    RamExperts experts(f, model->expert_layers());
    ThreadPool pool(2);
    for (GgmlType kv : {GgmlType::F16, GgmlType::F32}) {
        StateOptions o;
        o.n_ctx = 128;
        o.max_batch = 16;
        o.kv_type = kv;
        o.n_threads = 2;
        auto st = model->new_state(o);
        std::vector<float> logits(size_t(model->config().n_vocab) * 16);
        std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
        model->forward(*st, experts, pool, prompt.data(), int(prompt.size()), logits.data(), false);

        int32_t tok = 9;
        g_allocs = 0;
        g_armed = true;
        for (int i = 0; i < 32; i++) {
            model->forward(*st, experts, pool, &tok, 1, logits.data(), false);
            tok = int32_t((tok * 31 + 7) % model->config().n_vocab);
        }
        // A short prefill chunk after decode must not allocate either.
        model->forward(*st, experts, pool, prompt.data(), int(prompt.size()), logits.data(), true);
        g_armed = false;
        EXPECT_EQ(g_allocs.load(), 0) << "kv " << type_name(kv);
    }
}

}  // namespace
}  // namespace ms
