// bench cache: chunking of experts, and small runs over a synthetic file and
// a packed file that check the accounting (bytes per pass, passes, grid).
#include "bench/cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace {

TEST(SplitExpert, ChunksArePageAlignedAndCoverEachRangeOnce) {
    ms::CacheExpert e;
    e.ranges = {{1000, 884736, 0}, {900000, 884736, 0}, {2000000, 1253376 + 100, 0}};
    for (int split : {1, 2, 3, 4, 8}) {
        std::vector<ms::ReadOp> ops = ms::split_expert(e, split, 1 << 20);
        uint64_t dst = 1 << 20;
        size_t i = 0;
        for (const ms::ReadOp& r : e.ranges) {
            uint64_t covered = 0;
            int chunks = 0;
            while (covered < r.length) {
                ASSERT_LT(i, ops.size());
                EXPECT_EQ(ops[i].offset, r.offset + covered);
                EXPECT_EQ(ops[i].dst, dst + covered);
                // Every chunk but the last of a range is a whole number of pages.
                if (covered + ops[i].length < r.length) {
                    EXPECT_EQ(ops[i].length % 4096, 0u);
                }
                covered += ops[i].length;
                ++i;
                ++chunks;
            }
            EXPECT_EQ(covered, r.length);
            EXPECT_LE(chunks, split);
            dst += r.length;
        }
        EXPECT_EQ(i, ops.size());
    }
}

TEST(SplitExpert, SmallRangeIsNotOverSplit) {
    ms::CacheExpert e;
    e.ranges = {{0, 4096, 0}};
    EXPECT_EQ(ms::split_expert(e, 8, 0).size(), 1u);
}

TEST(CacheBench, SyntheticGridAccounting) {
    ms::CacheOptions o;
    o.experts = 16;
    o.expert_bytes = 256 << 10;
    o.warmup = 1;
    o.passes = 2;
    o.grid = true;
    o.grid_threads = {1, 2};
    o.grid_splits = {1, 3};
    ms::CacheReport r = ms::run_cache_bench(o);
    EXPECT_EQ(r.source, "synthetic");
    EXPECT_EQ(r.experts, 16);
    EXPECT_EQ(r.pass_bytes, 16u * (256 << 10));
    ASSERT_EQ(r.runs.size(), 4u);
    EXPECT_EQ(r.runs[3].threads, 2);
    EXPECT_EQ(r.runs[3].split, 3);
    for (const ms::CacheRun& run : r.runs) {
        ASSERT_EQ(run.passes.size(), 2u);
        for (const ms::CachePass& p : run.passes) EXPECT_EQ(p.bytes, r.pass_bytes);
        EXPECT_LE(run.best_seconds, run.avg_seconds);
        EXPECT_GE(run.worst_seconds, run.avg_seconds);
    }
    EXPECT_FALSE(fs::exists(r.path)) << "synthetic file left behind";
    EXPECT_NE(r.text.find("avg GB/s"), std::string::npos);
    ms::Json j = ms::Json::parse(r.json.dump());
    EXPECT_EQ(j.at("runs").size(), 4u);
    EXPECT_EQ(j.at("settings").at("source").as_string(), "synthetic");
}

TEST(CacheBench, PackedFileLimitsExperts) {
    std::string path = (fs::current_path() / ("cache_test_" + std::to_string(getpid()) + ".bin")).string();
    std::ofstream(path, std::ios::binary) << std::string(10 * 65536 + 100, 'x');
    ms::CacheOptions o;
    o.file = path;
    o.expert_bytes = 65536;
    o.experts = 128;
    o.warmup = 0;
    o.passes = 1;
    o.threads = 3;
    o.split = 2;
    ms::CacheReport r = ms::run_cache_bench(o);
    EXPECT_EQ(r.experts, 10);
    EXPECT_EQ(r.runs.at(0).passes.at(0).bytes, 10u * 65536);
    EXPECT_NE(r.text.find("average"), std::string::npos);
    fs::remove(path);
    o.file = "/no/such/file";
    EXPECT_THROW(ms::run_cache_bench(o), std::runtime_error);
}

}  // namespace
