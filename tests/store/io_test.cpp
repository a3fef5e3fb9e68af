// Every I/O engine, at several depths / thread counts / splits, returns the
// same bytes as a plain pread of the file, for random sets of aligned reads,
// including one that runs past the end of the file; a bad descriptor comes
// back as an error completion, not a crash.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "store/io.h"
#include "test_util.h"

namespace ms {
namespace {

struct Config {
    const char* engine;
    IoOptions opt;
};

class IoEngines : public ::testing::Test {
protected:
    void SetUp() override {
        path_ = dir_.file("data.bin");
        size_ = 6 * 1024 * 1024 + 1234;  // not a whole number of pages
        data_.resize(size_);
        std::mt19937_64 rng(42);
        for (auto& b : data_) b = uint8_t(rng());
        FILE* f = fopen(path_.c_str(), "wb");
        ASSERT_TRUE(f);
        ASSERT_EQ(fwrite(data_.data(), 1, size_, f), size_);
        fclose(f);
        arena_bytes_ = 32 << 20;
        arena_ = static_cast<uint8_t*>(aligned_alloc(4096, arena_bytes_));
    }
    void TearDown() override { free(arena_); }

    // Runs n_batches of random reads through the engine and checks each.
    void check(const Config& c, int n_batches, int per_batch, uint64_t seed) {
        SCOPED_TRACE(std::string(c.engine) + " depth " + std::to_string(c.opt.depth) + " threads " +
                     std::to_string(c.opt.threads) + " split " + std::to_string(c.opt.split));
        std::unique_ptr<IoEngine> eng = make_io_engine(c.engine, c.opt);
        int fd = eng->wants_direct() ? open(path_.c_str(), O_RDONLY | O_DIRECT) : -1;
        if (fd < 0) fd = open(path_.c_str(), O_RDONLY);
        ASSERT_GE(fd, 0);
        eng->register_memory(arena_, arena_bytes_, 4096);
        std::mt19937_64 rng(seed);
        const uint64_t pages = (size_ + 4095) / 4096;
        std::vector<IoRequest> reqs;
        uint64_t arena_pos = 0;
        for (int b = 0; b < n_batches; b++) {
            std::vector<IoRequest> batch;
            for (int i = 0; i < per_batch; i++) {
                uint64_t len = (1 + rng() % 64) * 4096;
                uint64_t off = (rng() % pages) * 4096;
                if (i == 0 && b == 0) off = (size_ / 4096) * 4096, len = 8192;  // crosses the end
                if (arena_pos + len > arena_bytes_) arena_pos = 0;
                IoRequest r{fd, off, len, arena_ + arena_pos, uint64_t(reqs.size())};
                arena_pos += len;
                batch.push_back(r);
                reqs.push_back(r);
            }
            eng->submit(batch.data(), batch.size());
            std::vector<bool> seen(reqs.size(), false);
            size_t got = 0;
            std::vector<IoCompletion> done(16);
            while (got < batch.size()) {
                size_t n = eng->reap(done.data(), done.size(), true);
                ASSERT_GT(n, 0u);
                for (size_t k = 0; k < n; k++) {
                    const IoRequest& r = reqs[done[k].tag];
                    ASSERT_FALSE(seen[done[k].tag]);
                    seen[done[k].tag] = true;
                    uint64_t want = std::min<uint64_t>(r.len, size_ - std::min(size_, r.offset));
                    ASSERT_EQ(done[k].result, int64_t(want)) << "offset " << r.offset << " len " << r.len;
                    ASSERT_EQ(memcmp(r.dst, data_.data() + r.offset, want), 0) << "offset " << r.offset;
                }
                got += n;
            }
            EXPECT_EQ(eng->outstanding(), 0u);
        }
        IoCompletion none;
        EXPECT_EQ(eng->reap(&none, 1, true), 0u);  // nothing outstanding: returns at once
        close(fd);
    }

    test::TempDir dir_;
    std::string path_;
    uint64_t size_ = 0;
    std::vector<uint8_t> data_;
    uint8_t* arena_ = nullptr;
    uint64_t arena_bytes_ = 0;
};

TEST_F(IoEngines, SameBytesAsPread) {
    const Config configs[] = {
        {"uring", {1, 1, 1}},    {"uring", {4, 1, 1}},    {"uring", {64, 1, 1}},
        {"pread", {1, 1, 1}},    {"pread", {1, 3, 1}},    {"pread", {1, 2, 4}},
        {"buffered", {1, 1, 1}}, {"buffered", {1, 3, 3}}, {"mmap", {1, 1, 1}},
    };
    uint64_t seed = 1;
    for (const Config& c : configs) check(c, 3, 12, seed++);
}

TEST_F(IoEngines, BadDescriptorIsAnErrorCompletion) {
    for (const char* name : {"uring", "pread", "buffered", "mmap"}) {
        SCOPED_TRACE(name);
        std::unique_ptr<IoEngine> eng = make_io_engine(name, IoOptions{});
        IoRequest r{9999, 0, 4096, arena_, 7};
        eng->submit(&r, 1);
        IoCompletion c;
        ASSERT_EQ(eng->reap(&c, 1, true), 1u);
        EXPECT_EQ(c.tag, 7u);
        EXPECT_EQ(c.result, -int64_t(EBADF));
    }
}

// Prefetches (low priority) behind demand reads: all complete, with the
// right bytes, even at depth 1 where they can only go one at a time.
TEST_F(IoEngines, LowPriorityReadsComplete) {
    for (const char* name : {"uring", "pread"})
        for (int depth : {1, 4}) {
            SCOPED_TRACE(std::string(name) + " depth " + std::to_string(depth));
            std::unique_ptr<IoEngine> eng = make_io_engine(name, IoOptions{depth, 2, 1});
            int fd = open(path_.c_str(), O_RDONLY | O_DIRECT);
            ASSERT_GE(fd, 0);
            std::vector<IoRequest> reqs;
            for (int i = 0; i < 16; i++)
                reqs.push_back({fd, uint64_t(i) * 65536, 65536, arena_ + size_t(i) * 65536, uint64_t(i), i % 2 == 0});
            eng->submit(reqs.data(), 8);
            eng->submit(reqs.data() + 8, 8);
            std::vector<IoCompletion> done(16);
            size_t got = 0;
            while (got < 16) {
                size_t n = eng->reap(done.data() + got, 16 - got, true);
                ASSERT_GT(n, 0u);
                got += n;
            }
            for (const IoCompletion& c : done) {
                ASSERT_EQ(c.result, 65536);
                EXPECT_EQ(memcmp(reqs[c.tag].dst, data_.data() + reqs[c.tag].offset, 65536), 0);
            }
            close(fd);
        }
}

TEST(IoEngine, UnknownNameAndBadOptions) {
    EXPECT_THROW(make_io_engine("aio", IoOptions{}), std::runtime_error);
    EXPECT_THROW(make_io_engine("uring", IoOptions{0, 1, 1}), std::runtime_error);
    EXPECT_THROW(make_io_engine("pread", IoOptions{1, 1, 0}), std::runtime_error);
}

TEST(IoEngine, PreadFullReadsToEndOfFile) {
    test::TempDir dir;
    std::string p = dir.file("small");
    FILE* f = fopen(p.c_str(), "wb");
    fputs("hello world", f);
    fclose(f);
    int fd = open(p.c_str(), O_RDONLY);
    char buf[64] = {};
    EXPECT_EQ(pread_full(fd, buf, sizeof buf, 6), 5);
    EXPECT_STREQ(buf, "world");
    close(fd);
    EXPECT_EQ(pread_full(-1, buf, 4, 0), -int64_t(EBADF));
}

}  // namespace

// A file truncated after it was mapped: the mmap engine's copy meets SIGBUS,
// catches it, and the read comes back empty (the store reports the file as
// truncated) instead of the process dying.
TEST(MmapEngine, SurvivesTheFileShrinkingUnderIt) {
    test::TempDir dir;
    const std::string path = dir.file("shrinks.bin");
    std::vector<uint8_t> data(1 << 20, 7);
    FILE* f = fopen(path.c_str(), "wb");
    ASSERT_TRUE(f);
    ASSERT_EQ(fwrite(data.data(), 1, data.size(), f), data.size());
    fclose(f);
    std::unique_ptr<IoEngine> eng = make_io_engine("mmap", IoOptions{});
    int fd = open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    std::vector<uint8_t> dst(256 << 10);
    IoCompletion c;
    IoRequest r{fd, 0, 64 << 10, dst.data(), 1};
    eng->submit(&r, 1);
    ASSERT_EQ(eng->reap(&c, 1, true), 1u);
    EXPECT_EQ(c.result, 64 << 10);  // mapped at the full size
    ASSERT_EQ(truncate(path.c_str(), 8192), 0);
    r = {fd, 512 << 10, 256 << 10, dst.data(), 2};
    eng->submit(&r, 1);
    ASSERT_EQ(eng->reap(&c, 1, true), 1u);
    EXPECT_EQ(c.tag, 2u);
    EXPECT_EQ(c.result, 0);
    close(fd);
}

}  // namespace ms
