// A fixed set of worker threads that split one range of work (rows of a
// matrix, heads of attention) into contiguous parts, one per thread, and wait
// for all of them. Parts depend only on the range and the thread count, and
// every row is computed by exactly one thread, so results do not depend on
// scheduling. Dispatch allocates nothing.
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace ms {

class ThreadPool {
public:
    // n_threads counts the calling thread; <= 0 means the number of CPUs.
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Calls fn(ctx, begin, end, thread) for the non-empty parts of [0, n) and
    // returns when all are done. thread in [0, size()) names the part (for
    // per-thread scratch); the caller computes part 0 itself.
    using Fn = void (*)(void* ctx, int64_t begin, int64_t end, int thread);
    void run(int64_t n, Fn fn, void* ctx);

    // run() with a callable f(begin, end) or f(begin, end, thread), without
    // allocating.
    template <class F>
    void parallel_for(int64_t n, F&& f) {
        using C = std::remove_reference_t<F>;
        if constexpr (std::is_invocable_v<C&, int64_t, int64_t, int>) {
            run(n, [](void* c, int64_t b, int64_t e, int t) { (*static_cast<C*>(c))(b, e, t); }, &f);
        } else {
            run(n, [](void* c, int64_t b, int64_t e, int) { (*static_cast<C*>(c))(b, e); }, &f);
        }
    }

    // The part of [0, n) that thread i of n_threads computes.
    static void part(int64_t n, int i, int n_threads, int64_t* begin, int64_t* end);

private:
    void worker(int index);

    int n_threads_ = 1;
    std::vector<std::thread> threads_;
    std::atomic<uint32_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stop_{false};
    // The current job; written before generation_ is bumped.
    int64_t n_ = 0;
    Fn fn_ = nullptr;
    void* ctx_ = nullptr;
};

}  // namespace ms
