// A fixed set of worker threads that share one range of work at a time (rows
// of a matrix, heads of attention). The range is cut into a few chunks per
// thread and every participant, the caller included, claims chunks until none
// are left, so a worker the OS has not scheduled yet never holds up the
// caller. Each row is computed by exactly one call, whole, so results do not
// depend on which thread ran it. Dispatch allocates nothing.
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

    // Calls fn(ctx, begin, end, thread) on chunks covering [0, n) and returns
    // when all are done. thread in [0, size()) identifies the participant
    // (for per-thread scratch); the caller is 0.
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

    // Chunk i of n_chunks contiguous, near-equal chunks of [0, n).
    static void part(int64_t n, int64_t i, int64_t n_chunks, int64_t* begin, int64_t* end);

private:
    void worker(int index);
    // Claims and runs chunks of job `generation` until none are left.
    void participate(int thread, uint32_t generation);

    int n_threads_ = 1;
    std::vector<std::thread> threads_;
    uint32_t generation_ = 0;            // caller's count of jobs posted
    std::atomic<uint64_t> job_{0};       // generation << 32 | chunks << 16 | next unclaimed chunk
    std::atomic<uint32_t> posted_{0};    // generation, for workers to sleep on
    std::atomic<int> sleepers_{0};       // workers blocked in posted_.wait
    std::atomic<int64_t> done_{0};       // chunks finished in the current job
    std::atomic<bool> caller_sleeps_{false};  // run() blocked in done_.wait
    std::atomic<bool> stop_{false};
    // The current job; written before job_ publishes its generation.
    std::atomic<int64_t> n_{0};
    std::atomic<Fn> fn_{nullptr};
    std::atomic<void*> ctx_{nullptr};
};

}  // namespace ms
