// /proc and /sys readers: fixture text for the parsers, a fake sysfs tree for
// block-device resolution, and live checks where the answer is knowable.
#include "telemetry/system.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace fs = std::filesystem;

namespace {

// Real lines from three kernels: a 20-field line (5.5+ with discards and
// flushes), an 18-field one (4.18+), an old 14-field one, a partition whose
// name extends the disk's, and a truncated line that must be ignored.
const char* kDiskstats =
    "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
    " 259       0 nvme0n1 1180 17 95922 233 410 233 23456 95 0 700 329 0 0 0 0 12 1\n"
    " 259       1 nvme0n1p1 100 0 2048 10 0 0 0 0 0 20 10 0 0 0 0\n"
    " 254       0 vda 31662 7399 2874426 11792 11866 6877 5557888 7793 3 8880 20616 4510 43 4429200 956 1296 75\n"
    " 254       1 vda1 5 0 40 1 0 0 0 0 0 1 1\n"
    "   8       0 sda 12 3 456 7 8 9 10 11 0 13 14\n"
    "   8      16 sdb 1 2\n";

TEST(Diskstats, ParsesTwentyFieldLine) {
    ms::DiskStats d;
    ASSERT_TRUE(ms::parse_diskstats(kDiskstats, "vda", &d));
    EXPECT_EQ(d.reads, 31662u);
    EXPECT_EQ(d.reads_merged, 7399u);
    EXPECT_EQ(d.read_bytes, 2874426ull * 512);
    EXPECT_EQ(d.read_ms, 11792u);
    EXPECT_EQ(d.writes, 11866u);
    EXPECT_EQ(d.write_bytes, 5557888ull * 512);
    EXPECT_EQ(d.in_flight, 3u);
    EXPECT_EQ(d.io_ms, 8880u);
    EXPECT_EQ(d.weighted_io_ms, 20616u);
}

TEST(Diskstats, NamesMatchExactlyNotByPrefix) {
    ms::DiskStats d;
    ASSERT_TRUE(ms::parse_diskstats(kDiskstats, "nvme0n1p1", &d));
    EXPECT_EQ(d.reads, 100u);
    EXPECT_EQ(d.read_bytes, 2048u * 512);
    ASSERT_TRUE(ms::parse_diskstats(kDiskstats, "nvme0n1", &d));
    EXPECT_EQ(d.reads, 1180u);
}

TEST(Diskstats, OldAndShortLines) {
    ms::DiskStats d;
    ASSERT_TRUE(ms::parse_diskstats(kDiskstats, "sda", &d));
    EXPECT_EQ(d.read_bytes, 456u * 512);
    EXPECT_EQ(d.weighted_io_ms, 14u);
    EXPECT_FALSE(ms::parse_diskstats(kDiskstats, "sdb", &d));  // too few fields
    EXPECT_FALSE(ms::parse_diskstats(kDiskstats, "vdb", &d));
    EXPECT_FALSE(ms::parse_diskstats("", "vda", &d));
}

TEST(Diskstats, Delta) {
    ms::DiskStats a, b;
    a.reads = 10; a.read_bytes = 4096; a.io_ms = 5; a.in_flight = 7;
    b.reads = 25; b.read_bytes = 4096 + 1048576; b.io_ms = 9; b.in_flight = 2;
    ms::DiskStats d = ms::diskstats_delta(a, b);
    EXPECT_EQ(d.reads, 15u);
    EXPECT_EQ(d.read_bytes, 1048576u);
    EXPECT_EQ(d.io_ms, 4u);
    EXPECT_EQ(d.in_flight, 2u);
}

TEST(Diskstats, LiveDeviceOfSourceTree) {
    std::string dev = ms::block_device_of(MOESTREAM_SOURCE_DIR);
    if (dev.empty()) GTEST_SKIP() << "source tree is not on a block device (tmpfs/overlay)";
    ms::DiskStats d = ms::read_diskstats(dev);
    EXPECT_GT(d.reads, 0u) << dev;  // the tree was read from this device
}

TEST(Diskstats, UnknownDeviceThrows) {
    EXPECT_THROW(ms::read_diskstats("no-such-disk-xyz"), std::runtime_error);
}

// A miniature sysfs: /sys/dev/block/MAJ:MIN links into /sys/devices, like the
// kernel's, for an NVMe partition, a virtio disk and a dm volume on a
// partition.
class FakeSysfs : public ::testing::Test {
protected:
    void SetUp() override {
        root = fs::temp_directory_path() / ("ms_sysfs_" + std::to_string(getpid()));
        fs::remove_all(root);
        fs::path nvme = root / "devices/pci0000:00/0000:00:1d.0/nvme/nvme0/nvme0n1";
        fs::create_directories(nvme / "nvme0n1p3");
        write(nvme / "dev", "259:0\n");
        write(nvme / "nvme0n1p3/dev", "259:3\n");
        write(nvme / "nvme0n1p3/partition", "3\n");
        fs::path vda = root / "devices/pci0000:00/0000:00:02.0/virtio1/block/vda";
        fs::create_directories(vda);
        write(vda / "dev", "254:0\n");
        fs::path dm = root / "devices/virtual/block/dm-0";
        fs::create_directories(dm / "slaves");
        write(dm / "dev", "253:0\n");
        fs::create_directory_symlink(nvme / "nvme0n1p3", dm / "slaves/nvme0n1p3");
        fs::create_directories(root / "dev/block");
        fs::create_directory_symlink("../../devices/pci0000:00/0000:00:1d.0/nvme/nvme0/nvme0n1",
                                     root / "dev/block/259:0");
        fs::create_directory_symlink("../../devices/pci0000:00/0000:00:1d.0/nvme/nvme0/nvme0n1/nvme0n1p3",
                                     root / "dev/block/259:3");
        fs::create_directory_symlink("../../devices/pci0000:00/0000:00:02.0/virtio1/block/vda",
                                     root / "dev/block/254:0");
        fs::create_directory_symlink("../../devices/virtual/block/dm-0", root / "dev/block/253:0");
        fs::create_directories(root / "block");
        fs::create_directory_symlink(dm, root / "block/dm-0");
        fs::create_directory_symlink(nvme, root / "block/nvme0n1");
    }
    void TearDown() override { fs::remove_all(root); }
    static void write(const fs::path& p, const char* text) { std::ofstream(p) << text; }
    fs::path root;
};

TEST_F(FakeSysfs, PartitionResolvesToDisk) {
    EXPECT_EQ(ms::disk_for_devnum(259, 3, root.string()), "nvme0n1");
    EXPECT_EQ(ms::disk_for_devnum(259, 0, root.string()), "nvme0n1");
}

TEST_F(FakeSysfs, VirtioAndDm) {
    EXPECT_EQ(ms::disk_for_devnum(254, 0, root.string()), "vda");
    EXPECT_EQ(ms::disk_for_devnum(253, 0, root.string()), "dm-0");
    EXPECT_EQ(ms::disk_for_devnum(8, 0, root.string()), "");
}

TEST_F(FakeSysfs, DmSlavesResolveToPhysicalDisk) {
    std::vector<std::string> p = ms::physical_disks_of("dm-0", root.string());
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p[0], "nvme0n1");
    p = ms::physical_disks_of("nvme0n1", root.string());
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p[0], "nvme0n1");
}

TEST(BlockDevice, PseudoFilesystemsHaveNone) {
    EXPECT_EQ(ms::block_device_of("/proc/self/status"), "");
    EXPECT_THROW(ms::block_device_of("/no/such/path/xyz"), std::runtime_error);
}

TEST(BlockDevice, MatchesStatOfRealDisk) {
    struct stat st;
    ASSERT_EQ(stat(MOESTREAM_SOURCE_DIR, &st), 0);
    std::string dev = ms::block_device_of(MOESTREAM_SOURCE_DIR);
    if (dev.empty()) GTEST_SKIP() << "not on a block device";
    // The name must be a real sysfs block device, and the file system's
    // device number must be that disk or one of its partitions.
    EXPECT_TRUE(fs::exists("/sys/block/" + dev)) << dev;
}

const char* kStatus =
    "Name:\tcat\nVmPeak:\t    8000 kB\nVmHWM:\t     1234 kB\nVmRSS:\t     1000 kB\nThreads:\t1\n";

TEST(Memory, ParsesKbFields) {
    EXPECT_EQ(ms::parse_kb_field(kStatus, "VmRSS"), 1000u * 1024);
    EXPECT_EQ(ms::parse_kb_field(kStatus, "VmHWM"), 1234u * 1024);
    EXPECT_EQ(ms::parse_kb_field(kStatus, "Threads"), 1u);
    EXPECT_EQ(ms::parse_kb_field(kStatus, "VmSwap"), 0u);
    EXPECT_EQ(ms::parse_kb_field(kStatus, "Vm"), 0u);  // a prefix is not a key
}

TEST(Memory, PeakRssFollowsTouchedMemory) {
    uint64_t before = ms::peak_rss_bytes();
    ASSERT_GT(ms::rss_bytes(), 0u);
    const size_t n = 64u << 20;
    std::vector<char> big(n);
    memset(big.data(), 1, n);  // fault every page in
    uint64_t rss = ms::rss_bytes();
    uint64_t peak = ms::peak_rss_bytes();
    EXPECT_GE(peak, rss);
    EXPECT_GE(peak, before);
    EXPECT_GE(rss, n - (4u << 20)) << "64 MiB touched but RSS is " << rss;
    volatile char sink = big[n / 2];
    (void)sink;
}

TEST(Memory, Meminfo) {
    ms::MemInfo m = ms::read_meminfo();
    EXPECT_GT(m.total, 64ull << 20);
    EXPECT_LE(m.available, m.total);
    EXPECT_LE(m.swap_free, m.swap_total);
    // glibc derives _SC_PHYS_PAGES from sysinfo(), the same source as MemTotal.
    EXPECT_EQ(m.total, uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE)));
}

TEST(PageCache, FollowsWritesAndEviction) {
    std::string path = (fs::current_path() / ("pagecache_" + std::to_string(getpid()))).string();
    {
        std::ofstream f(path, std::ios::binary);
        f << std::string(8u << 20, 'p');
    }
    // Just written: every page cached. After DONTNEED on synced pages: none.
    EXPECT_EQ(ms::page_cache_bytes(path), 8u << 20);
    int fd = open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    EXPECT_LT(ms::page_cache_bytes(path), 1u << 20);
    fs::remove(path);
    EXPECT_EQ(ms::page_cache_bytes(path), 0u);
}

TEST(ProcessIo, CountsOwnDirectReads) {
    // 4 MiB read with O_DIRECT must reach the device and be charged to us.
    std::string path = (fs::current_path() / ("procio_" + std::to_string(getpid()))).string();
    std::ofstream(path, std::ios::binary) << std::string(4u << 20, 'r');
    int fd = open(path.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) {
        fs::remove(path);
        GTEST_SKIP() << "no O_DIRECT here";
    }
    fdatasync(fd);
    void* buf = nullptr;
    ASSERT_EQ(posix_memalign(&buf, 4096, 4u << 20), 0);
    uint64_t before = ms::proc_io_read_bytes();
    ssize_t n = pread(fd, buf, 4u << 20, 0);
    uint64_t after = ms::proc_io_read_bytes();
    close(fd);
    free(buf);
    fs::remove(path);
    ASSERT_EQ(n, ssize_t(4u << 20));
    EXPECT_GE(after - before, 4u << 20);
    EXPECT_EQ(ms::parse_kb_field("rchar: 10\nread_bytes: 8192\n", "read_bytes"), 8192u);
}

TEST(Cpu, ParsesProcStat) {
    ms::CpuTimes t;
    ASSERT_TRUE(ms::parse_cpu_times("cpu  5272 0 2654 100667 687 0 45 25 0 0\ncpu0 1 2 3 4\n", &t));
    EXPECT_EQ(t.idle, 100667u + 687u);
    EXPECT_EQ(t.iowait, 687u);
    EXPECT_EQ(t.total, 5272u + 2654u + 100667u + 687u + 45u + 25u);
    EXPECT_FALSE(ms::parse_cpu_times("intr 1 2 3\n", &t));
}

TEST(Cpu, IdleFraction) {
    ms::CpuTimes a{100, 10, 1000}, b{160, 30, 1100};
    EXPECT_DOUBLE_EQ(ms::cpu_idle_fraction(a, b), 0.6);
    EXPECT_DOUBLE_EQ(ms::cpu_iowait_fraction(a, b), 0.2);
    EXPECT_DOUBLE_EQ(ms::cpu_idle_fraction(a, a), 1.0);
}

TEST(Cpu, BusyLoopLowersIdle) {
    // One core spinning for 300 ms: idle over that window cannot exceed
    // (cores - 1) / cores plus scheduler noise.
    int cores = ms::logical_core_count();
    ms::CpuTimes a = ms::read_cpu_times();
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    volatile uint64_t x = 0;
    while (std::chrono::steady_clock::now() < end) x = x + 1;
    ms::CpuTimes b = ms::read_cpu_times();
    double idle = ms::cpu_idle_fraction(a, b);
    EXPECT_LE(idle, double(cores - 1) / cores + 0.15) << "cores " << cores;
    EXPECT_GE(idle, 0.0);
}

TEST(Machine, InfoHasCpuMemoryKernelAndStorage) {
    ms::Json m = ms::machine_info(MOESTREAM_SOURCE_DIR);
    EXPECT_EQ(m.at("cpu").at("logical_cores").as_int(), sysconf(_SC_NPROCESSORS_ONLN));
    EXPECT_GE(m.at("cpu").at("physical_cores").as_int(), 1);
    EXPECT_GT(m.at("memory").at("total_bytes").as_int(), 0);
    EXPECT_EQ(m.at("kernel").as_string().rfind("Linux ", 0), 0u);
    const ms::Json& s = m.at("storage");
    EXPECT_FALSE(s.at("filesystem").as_string().empty());
    if (!s.at("device").is_null()) {
        EXPECT_EQ(s.at("device").as_string(), ms::block_device_of(MOESTREAM_SOURCE_DIR));
    }
    // Round trip through the writer and the strict parser.
    EXPECT_NO_THROW(ms::Json::parse(m.dump(2)));
}

}  // namespace
