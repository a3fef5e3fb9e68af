// ThreadPool: every index of a range is run exactly once, by a valid thread
// id, across many back-to-back jobs of every size (the pattern decode
// produces), and a single-thread pool runs inline.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "ops/thread_pool.h"

namespace ms {
namespace {

TEST(ThreadPool, PartsCoverTheRangeInOrder) {
    for (int64_t n : {1, 5, 8, 13, 100}) {
        for (int64_t chunks : {1, 2, 3, 8}) {
            int64_t next = 0;
            for (int64_t i = 0; i < chunks; i++) {
                int64_t b, e;
                ThreadPool::part(n, i, chunks, &b, &e);
                EXPECT_EQ(b, next);
                EXPECT_GE(e, b);
                EXPECT_LE(e - b, n / chunks + 1);
                next = e;
            }
            EXPECT_EQ(next, n);
        }
    }
}

TEST(ThreadPool, EveryIndexExactlyOnceOverManyJobs) {
    for (int threads : {1, 2, 3, 5}) {
        ThreadPool pool(threads);
        EXPECT_EQ(pool.size(), threads);
        std::vector<std::atomic<int>> hits(300);
        for (int job = 0; job < 3000; job++) {
            const int64_t n = 1 + job % 300;
            for (int64_t i = 0; i < n; i++) hits[size_t(i)].store(0);
            std::atomic<bool> bad_thread{false};
            pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
                if (t < 0 || t >= threads) bad_thread = true;
                for (int64_t i = b; i < e; i++) hits[size_t(i)].fetch_add(1);
            });
            ASSERT_FALSE(bad_thread.load());
            for (int64_t i = 0; i < n; i++) ASSERT_EQ(hits[size_t(i)].load(), 1) << "job " << job << " index " << i;
        }
    }
}

TEST(ThreadPool, SingleThreadRunsInline) {
    ThreadPool pool(1);
    int calls = 0;
    pool.parallel_for(10, [&](int64_t b, int64_t e) {
        EXPECT_EQ(b, 0);
        EXPECT_EQ(e, 10);
        calls++;
    });
    EXPECT_EQ(calls, 1);
    pool.parallel_for(0, [&](int64_t, int64_t) { calls++; });
    EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace ms
