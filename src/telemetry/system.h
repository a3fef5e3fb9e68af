// What the operating system can tell a report about the machine and about the
// work being measured: CPU, memory, kernel, the block device under a file and
// its /proc/diskstats counters, RSS and peak RSS, CPU idle time, swap.
// Everything reads /proc and /sys; nothing here needs privileges.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "json/json.h"

namespace ms {

// One line of /proc/diskstats. Sectors there are always 512 bytes, whatever
// the device's block size; *_bytes fields are already multiplied out.
struct DiskStats {
    uint64_t reads = 0;          // completed read requests
    uint64_t reads_merged = 0;
    uint64_t read_bytes = 0;
    uint64_t read_ms = 0;        // time spent by reads (sum over requests)
    uint64_t writes = 0;
    uint64_t writes_merged = 0;
    uint64_t write_bytes = 0;
    uint64_t write_ms = 0;
    uint64_t in_flight = 0;      // a gauge, not a counter
    uint64_t io_ms = 0;          // time the device had at least one request
    uint64_t weighted_io_ms = 0;
};

// Counter differences b - a (in_flight is taken from b).
DiskStats diskstats_delta(const DiskStats& a, const DiskStats& b);

// Finds DEVICE ("vda", "nvme0n1", "dm-0") in the text of /proc/diskstats.
// Returns false when it is not there. Lines with fewer than 14 fields are
// skipped (they are not device lines).
bool parse_diskstats(std::string_view text, std::string_view device, DiskStats* out);

// Reads /proc/diskstats now. Throws "DEVICE: not in /proc/diskstats".
DiskStats read_diskstats(const std::string& device);

// The device whose /proc/diskstats line counts the reads of a file at PATH:
// the whole disk for a partition (nvme0n1p2 -> nvme0n1, sda1 -> sda), the
// device-mapper node itself for dm (dm-0, which counts exactly that volume's
// I/O), the disk for virtio (vda). Returns "" when PATH is on no block device
// (tmpfs, overlay of tmpfs, procfs, network file systems). Throws when PATH
// cannot be stat'ed.
std::string block_device_of(const std::string& path);

// The resolution step on its own, testable against a fake sysfs tree: the
// diskstats name of block device MAJOR:MINOR, looked up under SYS_ROOT
// (normally "/sys"). "" if sysfs does not know the device.
std::string disk_for_devnum(unsigned major, unsigned minor, const std::string& sys_root = "/sys");

// The devices under a dm/md node (its sysfs slaves/), resolved to whole disks;
// the device itself when it has none.
std::vector<std::string> physical_disks_of(const std::string& device, const std::string& sys_root = "/sys");

// VmRSS and VmHWM of a process (pid 0: this one), from /proc/PID/status.
// 0 when the process is gone.
uint64_t rss_bytes(int pid = 0);
uint64_t peak_rss_bytes(int pid = 0);

// Bytes process pid (0: this one) caused to be read from storage, from
// /proc/PID/io read_bytes: page-cache hits are not counted, so unlike the
// device's counters this attributes physical reads to one process. 0 when
// the file is unreadable (another user's process, or gone).
uint64_t proc_io_read_bytes(int pid = 0);

// Parses a "Key:   123 kB" field out of /proc/*/status or /proc/meminfo text;
// returns bytes, or 0 when the key is absent.
uint64_t parse_kb_field(std::string_view text, std::string_view key);

// Aggregate CPU times from the first line of /proc/stat, in clock ticks.
// idle includes iowait: a core waiting for the drive is a core not computing,
// which is what "CPU idle %" in an I/O autopsy is meant to show.
struct CpuTimes {
    uint64_t idle = 0;    // idle + iowait
    uint64_t iowait = 0;
    uint64_t total = 0;   // user..steal (guest time is already inside user)
};
bool parse_cpu_times(std::string_view proc_stat_text, CpuTimes* out);
CpuTimes read_cpu_times();
// Share of CPU time idle between two readings, 0..1 (1 when no time passed).
double cpu_idle_fraction(const CpuTimes& a, const CpuTimes& b);
double cpu_iowait_fraction(const CpuTimes& a, const CpuTimes& b);

struct MemInfo {
    uint64_t total = 0, available = 0, cached = 0;
    uint64_t swap_total = 0, swap_free = 0;
    uint64_t swap_used() const { return swap_total - swap_free; }
};
MemInfo read_meminfo();

// Pages swapped in/out since boot (/proc/vmstat pswpin/pswpout).
struct SwapActivity {
    uint64_t pages_in = 0, pages_out = 0;
};
SwapActivity read_swap_activity();

// The machine for a report: cpu {model, logical_cores, physical_cores, mhz,
// flags}, memory {total_bytes, swap_total_bytes}, kernel, os, hostname and,
// when PATH is given, storage {path, filesystem, device, physical_devices,
// model, size_bytes, rotational, scheduler}. Fields the system does not
// expose are left out rather than guessed.
Json machine_info(const std::string& path = "");

// Physical cores and the nominal clock from /proc/cpuinfo (0 if unknown).
int physical_core_count();
int logical_core_count();
double cpu_mhz();
std::string cpu_model_name();
bool cpu_has_flag(const std::string& flag);

// Bytes of PATH now in the page cache (mincore over a mapping of the file);
// 0 when it cannot be mapped. Independent of any accounting the kernel
// keeps per cgroup, so it can check such accounting.
uint64_t page_cache_bytes(const std::string& path);

// Filesystem type of the mount holding PATH ("ext4", "tmpfs", "overlay"),
// from /proc/self/mountinfo; "" when unknown.
std::string filesystem_of(const std::string& path);

}  // namespace ms
