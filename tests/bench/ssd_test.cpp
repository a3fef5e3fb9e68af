// bench ssd: the data file generator and its reuse rules, the read plans of
// every pattern, and a quick end-to-end run whose physical share is checked
// against /proc/diskstats where the file system allows it.
#include "bench/ssd.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "bench/bench_file.h"
#include "telemetry/system.h"

namespace fs = std::filesystem;
using ms::kBenchBlock;

namespace {

// The build directory, not /tmp: it is where the project's data lives, and
// usually a real block device.
class Scratch : public ::testing::Test {
protected:
    void SetUp() override {
        dir = fs::current_path() / ("bench_ssd_test_" + std::to_string(getpid()));
        fs::create_directories(dir);
    }
    void TearDown() override { fs::remove_all(dir); }
    fs::path dir;
};

TEST(BenchBytes, DeterministicAndSliceable) {
    const uint64_t seed = 42;
    std::vector<uint8_t> whole(3 * kBenchBlock), part(3 * kBenchBlock);
    ms::fill_bench_bytes(whole.data(), whole.size(), 0, seed);
    // The same bytes generated in two pieces split mid-block.
    ms::fill_bench_bytes(part.data(), 5000, 0, seed);
    ms::fill_bench_bytes(part.data() + 5000, part.size() - 5000, 5000, seed);
    EXPECT_EQ(whole, part);
    std::vector<uint8_t> again(whole.size());
    ms::fill_bench_bytes(again.data(), again.size(), 0, seed);
    EXPECT_EQ(whole, again);
    ms::fill_bench_bytes(again.data(), again.size(), 0, seed + 1);
    EXPECT_NE(whole, again);
}

TEST(BenchBytes, BlocksUniqueAndIncompressible) {
    const size_t n_blocks = 512;
    std::vector<uint8_t> buf(n_blocks * kBenchBlock);
    ms::fill_bench_bytes(buf.data(), buf.size(), 0, 7);
    std::set<std::string> blocks;
    for (size_t b = 0; b < n_blocks; ++b)
        blocks.insert(std::string(reinterpret_cast<char*>(buf.data() + b * kBenchBlock), kBenchBlock));
    EXPECT_EQ(blocks.size(), n_blocks);
    // Shannon entropy of the bytes: random data is within a hair of 8 bits,
    // which no compressor can shrink.
    double count[256] = {};
    for (uint8_t c : buf) count[c] += 1;
    double h = 0;
    for (double c : count)
        if (c > 0) h -= c / double(buf.size()) * std::log2(c / double(buf.size()));
    EXPECT_GT(h, 7.99);
}

TEST_F(Scratch, FileCreatedThenReusedWithItsCursor) {
    std::string path = (dir / "b.dat").string();
    uint64_t progress_last = 0;
    ms::BenchFile a = ms::open_or_create_bench_file(path, 8 << 20, [&](uint64_t d, uint64_t) { progress_last = d; });
    EXPECT_TRUE(a.created);
    EXPECT_EQ(progress_last, 8u << 20);
    EXPECT_EQ(fs::file_size(path), 8u << 20);
    EXPECT_EQ(a.cursor, kBenchBlock);
    // The file's bytes are what the generator says.
    std::vector<uint8_t> got(kBenchBlock * 2), want(kBenchBlock * 2);
    std::ifstream(path, std::ios::binary).seekg(1 << 20).read(reinterpret_cast<char*>(got.data()), long(got.size()));
    ms::fill_bench_bytes(want.data(), want.size(), 1 << 20, a.seed);
    EXPECT_EQ(got, want);

    uint64_t s1 = a.take(1 << 20), s2 = a.take(100);
    EXPECT_EQ(s1, kBenchBlock);
    EXPECT_EQ(s2, kBenchBlock + (1 << 20));
    EXPECT_EQ(a.cursor, s2 + kBenchBlock);  // rounded up to a block
    a.save_cursor();

    ms::BenchFile b = ms::open_or_create_bench_file(path, 0, nullptr);
    EXPECT_FALSE(b.created);
    EXPECT_EQ(b.seed, a.seed);
    EXPECT_EQ(b.cursor, a.cursor);
    // Running out wraps around to the start and says so.
    b.take(b.fresh_bytes());
    EXPECT_FALSE(b.wrapped);
    EXPECT_EQ(b.take(kBenchBlock), kBenchBlock);
    EXPECT_TRUE(b.wrapped);
    EXPECT_THROW(b.take(16 << 20), std::runtime_error);
}

TEST_F(Scratch, DamagedOrOtherSizeIsRecreatedForeignIsRefused) {
    std::string path = (dir / "b.dat").string();
    ms::BenchFile a = ms::open_or_create_bench_file(path, 1 << 20, nullptr);
    {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(kBenchBlock);
        f.write("xxxx", 4);  // the first data block no longer matches
    }
    ms::BenchFile b = ms::open_or_create_bench_file(path, 1 << 20, nullptr);
    EXPECT_TRUE(b.created);
    ms::BenchFile c = ms::open_or_create_bench_file(path, 2 << 20, nullptr);
    EXPECT_TRUE(c.created);
    EXPECT_EQ(fs::file_size(path), 2u << 20);

    std::string other = (dir / "notes.txt").string();
    std::ofstream(other) << std::string(8192, 'n');
    EXPECT_THROW(ms::open_or_create_bench_file(other, 1 << 20, nullptr), std::runtime_error);
    EXPECT_EQ(fs::file_size(other), 8192u);  // untouched
    EXPECT_THROW(ms::open_or_create_bench_file((dir / "none.dat").string(), 0, nullptr), std::runtime_error);
}

// Every read inside the slice, 4 KiB aligned, and no byte read twice.
void check_plan(const std::vector<ms::ReadOp>& ops, uint64_t base, uint64_t len) {
    std::vector<std::pair<uint64_t, uint64_t>> iv;
    for (const ms::ReadOp& o : ops) {
        ASSERT_GE(o.offset, base);
        ASSERT_LE(o.offset + o.length, base + len);
        ASSERT_EQ(o.offset % kBenchBlock, 0u);
        ASSERT_EQ(o.length % kBenchBlock, 0u);
        iv.push_back({o.offset, o.offset + o.length});
    }
    std::sort(iv.begin(), iv.end());
    for (size_t i = 1; i < iv.size(); ++i) ASSERT_LE(iv[i - 1].second, iv[i].first) << "overlapping reads";
}

TEST(Plan, GgufExpertIsThreeReadsPerExpertFromThreeRegions) {
    std::mt19937_64 rng(1);
    const uint64_t base = 1 << 20, len = 30 << 20;
    std::vector<uint64_t> parts = {512 << 10, 512 << 10, 512 << 10};
    auto ops = ms::plan_reads(ms::SsdPattern::GgufExpert, base, len, parts, 1, rng);
    const uint64_t n_exp = len / (3 * (512 << 10));  // 20
    ASSERT_EQ(ops.size(), 3 * n_exp);
    check_plan(ops, base, len);
    // Read i of each expert comes from region i: gate, up, down tensors.
    std::set<uint64_t> experts;
    for (size_t e = 0; e < n_exp; ++e) {
        for (int p = 0; p < 3; ++p) {
            const ms::ReadOp& o = ops[e * 3 + size_t(p)];
            EXPECT_EQ(o.length, 512u << 10);
            uint64_t region = base + uint64_t(p) * n_exp * (512 << 10);
            ASSERT_GE(o.offset, region);
            ASSERT_LT(o.offset, region + n_exp * (512 << 10));
            uint64_t idx = (o.offset - region) / (512 << 10);
            if (p == 0) experts.insert(idx);
            else EXPECT_EQ(idx, (ops[e * 3].offset - base) / (512 << 10));
        }
    }
    EXPECT_EQ(experts.size(), n_exp);
    // Random order: not ascending.
    EXPECT_FALSE(std::is_sorted(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.offset < b.offset; }));
}

TEST(Plan, ModelPartSizesAreRoundedToBlocks) {
    std::mt19937_64 rng(1);
    std::vector<uint64_t> parts = {884736, 884736, 1253376 + 100};  // down part not block-sized
    auto ops = ms::plan_reads(ms::SsdPattern::PackedExpert, 0, 64 << 20, parts, 1, rng);
    uint64_t unit = 884736 * 2 + 1257472;
    ASSERT_EQ(ops.size(), (64u << 20) / unit);
    for (auto& o : ops) EXPECT_EQ(o.length, unit);
    check_plan(ops, 0, 64 << 20);
}

TEST(Plan, SequentialStridedRows) {
    std::mt19937_64 rng(3);
    std::vector<uint64_t> parts = {512 << 10, 512 << 10, 512 << 10};
    auto seq = ms::plan_reads(ms::SsdPattern::Sequential, 4096, 17 << 20, parts, 1, rng);
    ASSERT_EQ(seq.size(), 4u);
    for (size_t i = 0; i < seq.size(); ++i) EXPECT_EQ(seq[i].offset, 4096 + i * (4 << 20));
    check_plan(seq, 4096, 17 << 20);

    auto st = ms::plan_reads(ms::SsdPattern::Strided, 0, 15 << 20, parts, 2, rng);
    ASSERT_EQ(st.size(), 5u);  // experts 0,2,4,6,8 of 10
    for (size_t i = 0; i < st.size(); ++i) EXPECT_EQ(st[i].offset, i * 2 * (1536u << 10));

    auto rows = ms::plan_reads(ms::SsdPattern::Rows, 8192, 1 << 20, parts, 1, rng);
    ASSERT_EQ(rows.size(), 256u);
    check_plan(rows, 8192, 1 << 20);  // so all 256 distinct blocks, each once
}

TEST_F(Scratch, QuickRunMeasuresAndVerifies) {
    ms::SsdOptions o;
    o.file = (dir / "bench.dat").string();
    o.size = 160ull << 20;
    o.seconds = 0.1;
    o.threads = {1, 2};
    o.depths = {1, 4};
    o.expert_parts = {64 << 10, 64 << 10, 64 << 10};
    o.control_bytes = 8 << 20;
    int steps = 0;
    o.progress = [&](const std::string&, uint64_t, uint64_t) { ++steps; };
    ms::SsdReport r = ms::run_ssd_bench(o);

    // 5 uncached patterns x (2 thread counts + 2 depths) + 2 cached runs.
    ASSERT_EQ(r.results.size(), 5u * 4 + 2);
    EXPECT_GE(steps, 22);
    std::set<uint64_t> slices;
    for (const ms::SsdResult& x : r.results) {
        EXPECT_GT(x.stats.reads, 0u) << ms::ssd_pattern_name(x.pattern);
        EXPECT_EQ(x.stats.bytes % kBenchBlock, 0u);
        EXPECT_GT(x.stats.gb_per_s(), 0.0);
        EXPECT_GE(x.stats.lat_p99_us, x.stats.lat_p50_us);
        if (x.pattern != ms::SsdPattern::Cached) {
            EXPECT_TRUE(slices.insert(x.slice_offset).second) << "slice reused";
        }
    }
    // Physical share: where the file is on a block device with O_DIRECT,
    // uncached reads must all reach it and the warm control must not.
    std::string dev = ms::block_device_of(o.file);
    if (!r.verified) {
        EXPECT_NE(r.table.find("not verified"), std::string::npos);
        GTEST_SKIP() << "no block device / no O_DIRECT under " << dir << ": physical share not checkable";
    }
    EXPECT_GE(r.min_uncached_share, 0.99) << r.table;
    for (const ms::SsdResult& x : r.results)
        // This process's own storage reads (other processes excluded): the
        // uncached tests read everything from the device, the control almost
        // nothing.
        if (x.pattern == ms::SsdPattern::Cached) {
            EXPECT_LT(double(x.process_bytes), 0.1 * double(x.stats.bytes)) << "control not served from RAM";
        } else {
            EXPECT_GE(double(x.process_bytes), 0.99 * double(x.stats.bytes)) << ms::ssd_pattern_name(x.pattern);
        }
    EXPECT_TRUE(r.json.at("summary").at("uncached_ok").as_bool());

    // The JSON survives the strict parser and records machine and settings.
    ms::Json j = ms::Json::parse(r.json.dump(2));
    EXPECT_EQ(j.at("command").as_string(), "bench ssd");
    EXPECT_EQ(j.at("file").at("device").as_string(), dev);
    EXPECT_TRUE(j.at("machine").contains("cpu"));
    EXPECT_EQ(j.at("results").size(), r.results.size());
    EXPECT_NE(r.table.find("qd=4"), std::string::npos);
    EXPECT_NE(r.table.find("t=2"), std::string::npos);

    // A second run continues after the first one's slices.
    ms::BenchFile bf = ms::open_or_create_bench_file(o.file, 0, nullptr);
    EXPECT_GT(bf.cursor, r.results[19].slice_offset);
}

}  // namespace
