// Memory cgroups for bench --limit-mem: parsing of /proc/self/cgroup and
// memory.stat, and, where a group can be made here, proof that it bounds the
// page cache a child builds: the child reads a file four times the limit,
// and afterwards the file's resident pages (mincore) stay within the limit.
#include "bench/cgroup.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "bench/child.h"
#include "bench/model_bench.h"
#include "telemetry/system.h"

namespace fs = std::filesystem;

namespace {

TEST(Cgroup, OwnGroupFromProcSelfCgroup) {
    const char* hybrid =
        "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n3:cpu,cpuacct:/x\n0::/user.slice/s-1.scope\n";
    EXPECT_EQ(ms::own_cgroup(hybrid, "memory"), "/process_api/abc");
    EXPECT_EQ(ms::own_cgroup(hybrid, "cpuacct"), "/x");
    EXPECT_EQ(ms::own_cgroup(hybrid, ""), "/user.slice/s-1.scope");
    EXPECT_EQ(ms::own_cgroup("0::/\n", "memory"), "");
    EXPECT_EQ(ms::own_cgroup("0::/\n", ""), "/");
}

TEST(Cgroup, MemoryStat) {
    const char* v1 = "cache 4096\nrss 8192\nmapped_file 0\ntotal_cache 12288\n";
    EXPECT_EQ(ms::memory_stat_value(v1, "cache"), 4096u);
    EXPECT_EQ(ms::memory_stat_value(v1, "total_cache"), 12288u);
    EXPECT_EQ(ms::memory_stat_value(v1, "file"), 0u);
    EXPECT_EQ(ms::memory_stat_value("anon 1\nfile 65536\n", "file"), 65536u);
}

TEST(Cgroup, LimitBoundsTheChildsPageCache) {
    const uint64_t limit = 32ull << 20, file_size = 128ull << 20;
    std::unique_ptr<ms::MemoryCgroup> cg;
    try {
        cg = std::make_unique<ms::MemoryCgroup>("moestream-cgroup-test-" + std::to_string(getpid()), limit);
    } catch (const std::exception& e) {
        GTEST_SKIP() << e.what();
    }
    std::string path = (fs::current_path() / ("cgroup_test_" + std::to_string(getpid()) + ".bin")).string();
    {
        std::ofstream f(path, std::ios::binary);
        std::string block(1 << 20, 'x');
        for (uint64_t i = 0; i < file_size; i += block.size()) f << block;
    }
    // Written pages belong to this process's group: evict them so only the
    // child's reading brings the file back.
    ASSERT_TRUE(ms::drop_file_cache(path));
    EXPECT_LT(ms::page_cache_bytes(path), 4ull << 20);

    ms::ChildOptions co;
    co.argv = {"/bin/cat", path};
    co.cgroup = cg.get();
    ms::ChildResult r = ms::run_child(co);
    ASSERT_TRUE(r.ok()) << r.describe();
    EXPECT_GT(cg->peak_bytes(), 0u);
    EXPECT_LE(cg->peak_bytes(), limit);
    EXPECT_LE(cg->file_bytes(), limit);
    // The decisive check, independent of the cgroup's own counters: of the
    // 128 MiB the child read, at most the limit stayed cached.
    EXPECT_LE(ms::page_cache_bytes(path), limit + (1 << 20));
    fs::remove(path);
}

TEST(Child, ExitCodesSignalsTimeoutAndSampling) {
    ms::ChildOptions co;
    co.argv = {"/bin/sh", "-c", "exit 7"};
    EXPECT_EQ(ms::run_child(co).exit_code, 7);
    co.argv = {"/bin/sh", "-c", "kill -9 $$"};
    EXPECT_EQ(ms::run_child(co).signal, 9);
    co.argv = {"/bin/sleep", "5"};
    co.timeout_s = 0.2;
    ms::ChildResult t = ms::run_child(co);
    EXPECT_TRUE(t.timed_out);
    EXPECT_LT(t.wall_s, 2.0);
    co.argv = {"/no/such/program"};
    co.timeout_s = 0;
    std::string err = (fs::current_path() / ("child_test_" + std::to_string(getpid()) + ".err")).string();
    co.stderr_path = err;
    EXPECT_EQ(ms::run_child(co).exit_code, 127);
    EXPECT_NE(ms::tail_lines(err, 2).find("cannot execute"), std::string::npos);
    fs::remove(err);
    co.stderr_path = "/dev/null";

    int samples = 0;
    co.argv = {"/bin/sleep", "0.35"};
    co.sample_interval_s = 0.1;
    co.on_sample = [&](int pid, double t) {
        EXPECT_GT(pid, 0);
        EXPECT_GE(t, 0.1 * (samples + 1) - 1e-9);
        ++samples;
    };
    ms::run_child(co);
    EXPECT_GE(samples, 2);
    EXPECT_LE(samples, 4);
    EXPECT_EQ(ms::shell_join({"a", "b c", "it's"}), "a 'b c' 'it'\\''s'");
}

}  // namespace
