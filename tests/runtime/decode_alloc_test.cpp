// Decode allocates nothing: every heap entry point of this binary is
// replaced by a counting wrapper, and a session's decode loop (sampling,
// forward pass on a thread pool, routed experts through RamExperts) must not
// call it.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <new>

#include "runtime/session.h"
#include "../golden_required.h"

namespace {
std::atomic<bool> g_armed{false};
std::atomic<long> g_allocs{0};
}  // namespace

// The sanitizer runtime owns the allocator there (and checks new/free
// pairing), so these tests count allocations in plain builds only.
#if !defined(__SANITIZE_ADDRESS__)
static void note() {
    if (g_armed.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}

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

// C allocations too; glibc's real allocator stays reachable under __libc_*.
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

#if defined(__SANITIZE_ADDRESS__)
#define SKIP_UNDER_ASAN() GTEST_SKIP() << "allocation counting needs the plain allocator"
#else
#define SKIP_UNDER_ASAN() (void)0
#endif

TEST(DecodeAlloc, CountingWorks) {
    SKIP_UNDER_ASAN();
    g_allocs = 0;
    g_armed = true;
    int* q = new int(3);
    g_armed = false;
    delete q;
    EXPECT_GE(g_allocs.load(), 1);
    g_allocs = 0;
    g_armed = true;
    void* p = std::malloc(16);
    g_armed = false;
    std::free(p);
    EXPECT_EQ(g_allocs.load(), 1);
}

TEST(DecodeAlloc, DecodeStepsAllocateNothing) {
    SKIP_UNDER_ASAN();
    // Mixed weight types (Q4_K, Q6_K, Q5_K, Q8_0, F32), both KV types, and
    // every block variant: gemma4 with per-layer embeddings, its
    // sliding-window ring wrapping; gpt-oss (sinks, windows, YaRN, biases,
    // MXFP4); qwen2moe (gated shared expert); glm4moe (dense layer, sigmoid
    // routing); qwen35moe and qwen3next (DeltaNet layers, gated attention);
    // deepseek3 (MLA, q compression, grouped routing).
    for (const char* model : {"qwen3moe-Q4_K_M", "gemma4-ple-Q8_0", "gpt-oss-MXFP4_MOE", "qwen2moe-Q8_0",
                              "glm4moe-Q8_0", "qwen35moe-Q8_0", "qwen3next-Q8_0", "deepseek3-Q8_0"}) {
        for (const char* kv : {"f16", "f32"}) {
            SessionOptions o;
            o.model_path = std::string(MOESTREAM_GOLDEN_DIR) + "/models/" + model + ".gguf";
            o.n_ctx = 128;
            o.n_batch = 16;
            o.kv_type = parse_kv_type(kv);
            o.n_threads = 2;
            o.sampling.seed = 1;
            o.sampling.repeat_penalty = 1.1f;
            auto s = Session::open(o);
            const std::vector<int32_t> prompt = s->tokenize("The GNU General Public License");
            s->prefill(prompt);

            g_allocs = 0;
            g_armed = true;
            for (int i = 0; i < 32; i++) {
                const int32_t tok = s->sampler().sample(s->logits());
                s->sampler().accept(tok);
                s->decode(tok);
            }
            g_armed = false;
            EXPECT_EQ(g_allocs.load(), 0) << model << " kv " << kv;
            EXPECT_EQ(s->tokens().size(), prompt.size() + 32);
        }
    }
}

}  // namespace
}  // namespace ms
