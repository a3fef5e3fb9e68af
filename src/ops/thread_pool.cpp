#include "ops/thread_pool.h"

#include <immintrin.h>

namespace ms {

namespace {

// Spin this many pauses (tens of microseconds) before sleeping: decode
// issues hundreds of small jobs per token, and a futex wake costs more than
// that. Longer spins only burn a core another thread may need.
constexpr int kSpins = 1000;

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
    generation_.fetch_add(1);
    generation_.notify_all();
    for (std::thread& t : threads_) t.join();
}

void ThreadPool::part(int64_t n, int i, int n_threads, int64_t* begin, int64_t* end) {
    int64_t base = n / n_threads, extra = n % n_threads;
    *begin = i * base + (i < extra ? i : extra);
    *end = *begin + base + (i < extra ? 1 : 0);
}

void ThreadPool::run(int64_t n, Fn fn, void* ctx) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    n_ = n;
    fn_ = fn;
    ctx_ = ctx;
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();

    int64_t b, e;
    part(n, 0, n_threads_, &b, &e);
    if (b < e) fn(ctx, b, e, 0);

    for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; spins++) {
        if (spins < kSpins) {
            _mm_pause();
        } else {
            std::this_thread::yield();
        }
    }
}

void ThreadPool::worker(int index) {
    // Generation 0 is the pool's state before any job. Reading the counter
    // here instead would miss a job posted before this thread got going.
    uint32_t seen = 0;
    for (;;) {
        int spins = 0;
        uint32_t g;
        while ((g = generation_.load(std::memory_order_acquire)) == seen) {
            if (spins++ < kSpins) {
                _mm_pause();
            } else {
                generation_.wait(seen, std::memory_order_acquire);
            }
        }
        seen = g;
        if (stop_.load()) return;
        int64_t b, e;
        part(n_, index, n_threads_, &b, &e);
        if (b < e) fn_(ctx_, b, e, index);
        pending_.fetch_sub(1, std::memory_order_release);
    }
}

}  // namespace ms
