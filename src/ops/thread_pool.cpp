#include "ops/thread_pool.h"

#include <immintrin.h>

#include <algorithm>

namespace ms {

namespace {

// Spin this many pauses (tens of microseconds) before sleeping: decode
// issues hundreds of small jobs per token, and a futex wake costs more than
// that. Longer spins only burn a core another thread may need.
constexpr int kSpins = 1000;
// Chunks per thread: enough that a late or slow thread leaves work for the
// others, few enough that claiming costs nothing.
constexpr int64_t kChunksPerThread = 4;

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) n_threads = int(std::thread::hardware_concurrency());
    if (n_threads <= 0) n_threads = 1;
    n_threads_ = n_threads;
    threads_.reserve(size_t(n_threads - 1));
    for (int i = 1; i < n_threads; i++) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    posted_.fetch_add(1);
    posted_.notify_all();
    for (std::thread& t : threads_) t.join();
}

void ThreadPool::part(int64_t n, int64_t i, int64_t n_chunks, int64_t* begin, int64_t* end) {
    const int64_t base = n / n_chunks, extra = n % n_chunks;
    *begin = i * base + std::min(i, extra);
    *end = *begin + base + (i < extra ? 1 : 0);
}

void ThreadPool::participate(int thread, uint32_t generation) {
    for (;;) {
        uint64_t cur = job_.load(std::memory_order_acquire);
        if (uint32_t(cur >> 32) != generation) return;
        // The chunk count travels in job_ itself: a separate field could
        // already hold the next job's count while job_ still shows this one,
        // letting a late thread claim a chunk that does not exist.
        const int64_t k = int64_t(cur & 0xffff);
        const int64_t chunks = int64_t((cur >> 16) & 0xffff);
        if (k >= chunks) return;
        // Claiming chunk k of this generation succeeds only while the job is
        // unfinished, so the fields read below are this job's.
        if (!job_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) continue;
        int64_t b, e;
        part(n_.load(std::memory_order_relaxed), k, chunks, &b, &e);
        fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), b, e, thread);
        // The caller sleeps (rather than yields) once its spin runs out, so
        // an oversubscribed machine does not spend its time in sched_yield;
        // whoever finishes the last chunk wakes it.
        if (done_.fetch_add(1) + 1 == chunks && caller_sleeps_.load()) done_.notify_all();
    }
}

void ThreadPool::run(int64_t n, Fn fn, void* ctx) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    const int64_t chunks = std::min({n, int64_t(n_threads_) * kChunksPerThread, int64_t(0xffff)});
    const uint32_t g = ++generation_;
    n_.store(n, std::memory_order_relaxed);
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    job_.store(uint64_t(g) << 32 | uint64_t(chunks) << 16, std::memory_order_release);
    posted_.store(g);  // seq_cst, paired with the sleepers_ count in worker()
    if (sleepers_.load() > 0) posted_.notify_all();

    participate(0, g);
    // Only chunks other threads already claimed are left.
    for (int spins = 0;; spins++) {
        int64_t d = done_.load(std::memory_order_acquire);
        if (d == chunks) break;
        if (spins < kSpins) {
            _mm_pause();
            continue;
        }
        caller_sleeps_.store(true);  // seq_cst, paired with the load after fetch_add
        d = done_.load();
        if (d != chunks) done_.wait(d);
        caller_sleeps_.store(false);
    }
}

void ThreadPool::worker(int index) {
    uint32_t seen = 0;  // generation 0: no job yet
    for (;;) {
        int spins = 0;
        uint32_t g;
        while ((g = posted_.load(std::memory_order_acquire)) == seen) {
            if (spins++ < kSpins) {
                _mm_pause();
                continue;
            }
            sleepers_.fetch_add(1);
            posted_.wait(seen);  // returns at once if posted_ moved on meanwhile
            sleepers_.fetch_sub(1);
        }
        seen = g;
        if (stop_.load()) return;
        participate(index, g);
    }
}

}  // namespace ms
