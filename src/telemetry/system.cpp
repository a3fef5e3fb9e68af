#include "telemetry/system.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace ms {

namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
    std::ifstream f(path);
    if (!f) return "";
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string trim(std::string s) {
    size_t b = s.find_first_not_of(" \t\n\r");
    size_t e = s.find_last_not_of(" \t\n\r");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string read_line(const std::string& path) { return trim(read_text(path)); }

// Splits a line into whitespace-separated fields without allocating per call
// site more than the fields themselves.
std::vector<std::string_view> fields(std::string_view line) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
        size_t b = i;
        while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
        if (i > b) out.push_back(line.substr(b, i - b));
    }
    return out;
}

uint64_t to_u64(std::string_view s) {
    uint64_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') break;
        v = v * 10 + uint64_t(c - '0');
    }
    return v;
}

std::string proc_path(int pid, const char* file) {
    return pid == 0 ? std::string("/proc/self/") + file : "/proc/" + std::to_string(pid) + "/" + file;
}

// "key\t: value" lines of /proc/cpuinfo, first occurrence.
std::string cpuinfo_field(const std::string& text, const std::string& key) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        if (trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
    }
    return "";
}

}  // namespace

DiskStats diskstats_delta(const DiskStats& a, const DiskStats& b) {
    DiskStats d;
    d.reads = b.reads - a.reads;
    d.reads_merged = b.reads_merged - a.reads_merged;
    d.read_bytes = b.read_bytes - a.read_bytes;
    d.read_ms = b.read_ms - a.read_ms;
    d.writes = b.writes - a.writes;
    d.writes_merged = b.writes_merged - a.writes_merged;
    d.write_bytes = b.write_bytes - a.write_bytes;
    d.write_ms = b.write_ms - a.write_ms;
    d.in_flight = b.in_flight;
    d.io_ms = b.io_ms - a.io_ms;
    d.weighted_io_ms = b.weighted_io_ms - a.weighted_io_ms;
    return d;
}

bool parse_diskstats(std::string_view text, std::string_view device, DiskStats* out) {
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        std::vector<std::string_view> f = fields(text.substr(pos, nl - pos));
        pos = nl + 1;
        // major minor name + 11 counters (kernels since 2.6); newer kernels
        // append discard and flush counters, which we do not need.
        if (f.size() < 14 || f[2] != device) continue;
        DiskStats d;
        d.reads = to_u64(f[3]);
        d.reads_merged = to_u64(f[4]);
        d.read_bytes = to_u64(f[5]) * 512;
        d.read_ms = to_u64(f[6]);
        d.writes = to_u64(f[7]);
        d.writes_merged = to_u64(f[8]);
        d.write_bytes = to_u64(f[9]) * 512;
        d.write_ms = to_u64(f[10]);
        d.in_flight = to_u64(f[11]);
        d.io_ms = to_u64(f[12]);
        d.weighted_io_ms = to_u64(f[13]);
        *out = d;
        return true;
    }
    return false;
}

DiskStats read_diskstats(const std::string& device) {
    DiskStats d;
    if (!parse_diskstats(read_text("/proc/diskstats"), device, &d))
        throw std::runtime_error(device + ": not in /proc/diskstats");
    return d;
}

std::string disk_for_devnum(unsigned major, unsigned minor, const std::string& sys_root) {
    std::error_code ec;
    fs::path link = fs::path(sys_root) / "dev/block" / (std::to_string(major) + ":" + std::to_string(minor));
    fs::path dir = fs::canonical(link, ec);
    if (ec) return "";
    // A partition's directory sits inside its disk's and has a "partition"
    // file; its reads are also counted on the disk line, which is what
    // callers compare against.
    if (fs::exists(dir / "partition", ec)) dir = dir.parent_path();
    return dir.filename().string();
}

std::vector<std::string> physical_disks_of(const std::string& device, const std::string& sys_root) {
    std::vector<std::string> out;
    std::error_code ec;
    fs::path slaves = fs::path(sys_root) / "block" / device / "slaves";
    if (fs::is_directory(slaves, ec)) {
        std::set<std::string> seen;
        for (const auto& e : fs::directory_iterator(slaves, ec)) {
            std::string dev = read_line((e.path() / "dev").string());
            unsigned ma = 0, mi = 0;
            if (sscanf(dev.c_str(), "%u:%u", &ma, &mi) != 2) continue;
            std::string disk = disk_for_devnum(ma, mi, sys_root);
            if (disk.empty()) continue;
            for (const std::string& d : physical_disks_of(disk, sys_root))
                if (seen.insert(d).second) out.push_back(d);
        }
    }
    if (out.empty()) out.push_back(device);
    return out;
}

namespace {

struct MountEntry {
    unsigned major = 0, minor = 0;
    std::string mount_point, fstype, source;
};

// The /proc/self/mountinfo line for the mount holding PATH: the longest
// mount point that prefixes its canonical path (later mounts win ties, as
// they shadow earlier ones).
bool mount_of(const std::string& path, MountEntry* out) {
    std::error_code ec;
    std::string p = fs::weakly_canonical(fs::absolute(path, ec), ec).string();
    std::istringstream in(read_text("/proc/self/mountinfo"));
    std::string line;
    size_t best = 0;
    bool found = false;
    while (std::getline(in, line)) {
        std::vector<std::string_view> f = fields(line);
        // id parent maj:min root mount_point options [optional...] - fstype source super_opts
        size_t dash = 0;
        for (size_t i = 6; i < f.size(); ++i)
            if (f[i] == "-") { dash = i; break; }
        if (dash == 0 || dash + 2 >= f.size()) continue;
        std::string mp(f[4]);
        bool prefix = p == mp || mp == "/" ||
                      (p.size() > mp.size() && p.compare(0, mp.size(), mp) == 0 && p[mp.size()] == '/');
        if (!prefix || mp.size() < best) continue;
        best = mp.size();
        found = true;
        MountEntry m;
        sscanf(std::string(f[2]).c_str(), "%u:%u", &m.major, &m.minor);
        m.mount_point = mp;
        m.fstype = std::string(f[dash + 1]);
        m.source = std::string(f[dash + 2]);
        *out = m;
    }
    return found;
}

}  // namespace

uint64_t page_cache_bytes(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size == 0) {
        close(fd);
        return 0;
    }
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t size = size_t(st.st_size);
    uint64_t resident = 0;
    // A window at a time keeps the mincore vector small for huge models.
    const size_t window = size_t(1) << 30;
    std::vector<unsigned char> v(window / page);
    for (size_t off = 0; off < size; off += window) {
        size_t len = std::min(window, size - off);
        void* p = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, off_t(off));
        if (p == MAP_FAILED) break;
        if (mincore(p, len, v.data()) == 0)
            for (size_t i = 0; i < (len + page - 1) / page; ++i) resident += v[i] & 1;
        munmap(p, len);
    }
    close(fd);
    return resident * page;
}

std::string filesystem_of(const std::string& path) {
    MountEntry m;
    return mount_of(path, &m) ? m.fstype : "";
}

std::string block_device_of(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) throw std::runtime_error(path + ": " + strerror(errno));
    if (major(st.st_dev) != 0) return disk_for_devnum(major(st.st_dev), minor(st.st_dev));
    // Anonymous device numbers (major 0) belong to tmpfs, overlay, but also
    // btrfs subvolumes: for those the mount's source names the real device.
    MountEntry m;
    if (!mount_of(path, &m) || m.source.rfind("/dev/", 0) != 0) return "";
    struct stat src;
    if (stat(m.source.c_str(), &src) != 0 || !S_ISBLK(src.st_mode)) return "";
    return disk_for_devnum(major(src.st_rdev), minor(src.st_rdev));
}

uint64_t parse_kb_field(std::string_view text, std::string_view key) {
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        std::string_view line = text.substr(pos, nl - pos);
        pos = nl + 1;
        if (line.size() <= key.size() || line.compare(0, key.size(), key) != 0 || line[key.size()] != ':')
            continue;
        std::vector<std::string_view> f = fields(line.substr(key.size() + 1));
        if (f.empty()) return 0;
        uint64_t v = to_u64(f[0]);
        return f.size() > 1 && (f[1] == "kB" || f[1] == "KB") ? v * 1024 : v;
    }
    return 0;
}

uint64_t proc_io_read_bytes(int pid) { return parse_kb_field(read_text(proc_path(pid, "io")), "read_bytes"); }

uint64_t rss_bytes(int pid) { return parse_kb_field(read_text(proc_path(pid, "status")), "VmRSS"); }
uint64_t peak_rss_bytes(int pid) { return parse_kb_field(read_text(proc_path(pid, "status")), "VmHWM"); }

bool parse_cpu_times(std::string_view text, CpuTimes* out) {
    size_t nl = text.find('\n');
    std::vector<std::string_view> f = fields(text.substr(0, nl));
    if (f.size() < 5 || f[0] != "cpu") return false;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    uint64_t v[8] = {};
    for (size_t i = 0; i < 8 && i + 1 < f.size(); ++i) v[i] = to_u64(f[i + 1]);
    CpuTimes t;
    t.iowait = v[4];
    t.idle = v[3] + v[4];
    for (uint64_t x : v) t.total += x;
    *out = t;
    return true;
}

CpuTimes read_cpu_times() {
    CpuTimes t;
    parse_cpu_times(read_text("/proc/stat"), &t);
    return t;
}

double cpu_idle_fraction(const CpuTimes& a, const CpuTimes& b) {
    if (b.total <= a.total) return 1.0;
    return double(b.idle - a.idle) / double(b.total - a.total);
}

double cpu_iowait_fraction(const CpuTimes& a, const CpuTimes& b) {
    if (b.total <= a.total) return 0.0;
    return double(b.iowait - a.iowait) / double(b.total - a.total);
}

MemInfo read_meminfo() {
    std::string t = read_text("/proc/meminfo");
    MemInfo m;
    m.total = parse_kb_field(t, "MemTotal");
    m.available = parse_kb_field(t, "MemAvailable");
    m.cached = parse_kb_field(t, "Cached");
    m.swap_total = parse_kb_field(t, "SwapTotal");
    m.swap_free = parse_kb_field(t, "SwapFree");
    return m;
}

SwapActivity read_swap_activity() {
    std::istringstream in(read_text("/proc/vmstat"));
    std::string key;
    uint64_t v = 0;
    SwapActivity s;
    while (in >> key >> v) {
        if (key == "pswpin") s.pages_in = v;
        else if (key == "pswpout") s.pages_out = v;
    }
    return s;
}

std::string cpu_model_name() {
    std::string text = read_text("/proc/cpuinfo");
    std::string m = cpuinfo_field(text, "model name");
    if (m.empty()) m = cpuinfo_field(text, "Model");  // arm64 kernels
    return m;
}

int logical_core_count() { return int(sysconf(_SC_NPROCESSORS_ONLN)); }

int physical_core_count() {
    // Distinct (physical id, core id) pairs; kernels that hide them (some
    // VMs, arm64) leave the logical count as the best answer.
    std::istringstream in(read_text("/proc/cpuinfo"));
    std::string line, phys = "0";
    std::set<std::string> cores;
    while (std::getline(in, line)) {
        size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string k = trim(line.substr(0, colon)), v = trim(line.substr(colon + 1));
        if (k == "physical id") phys = v;
        else if (k == "core id") cores.insert(phys + ":" + v);
    }
    return cores.empty() ? logical_core_count() : int(cores.size());
}

double cpu_mhz() { return atof(cpuinfo_field(read_text("/proc/cpuinfo"), "cpu MHz").c_str()); }

bool cpu_has_flag(const std::string& flag) {
    std::string flags = cpuinfo_field(read_text("/proc/cpuinfo"), "flags");
    if (flags.empty()) flags = cpuinfo_field(read_text("/proc/cpuinfo"), "Features");  // arm64
    for (std::string_view f : fields(flags))
        if (f == flag) return true;
    return false;
}

namespace {

Json storage_info(const std::string& path) {
    Json s = Json::object();
    std::error_code ec;
    s["path"] = fs::weakly_canonical(fs::absolute(path, ec), ec).string();
    s["filesystem"] = filesystem_of(path);
    std::string dev = block_device_of(path);
    if (dev.empty()) {
        s["device"] = nullptr;
        return s;
    }
    s["device"] = dev;
    Json phys = Json::array();
    std::vector<std::string> disks = physical_disks_of(dev);
    for (const std::string& d : disks) phys.push_back(d);
    s["physical_devices"] = phys;
    // Describe the first physical disk: for dm over one NVMe that is the drive.
    std::string base = "/sys/block/" + disks[0];
    std::string model = read_line(base + "/device/model");
    if (model.empty()) {
        // virtio and some others have no model file: name the driver instead.
        fs::path drv = fs::read_symlink(base + "/device/driver", ec);
        if (!ec) model = drv.filename().string();
    }
    if (!model.empty()) s["model"] = model;
    std::string size = read_line(base + "/size");
    if (!size.empty()) s["size_bytes"] = to_u64(size) * 512;
    std::string rot = read_line(base + "/queue/rotational");
    if (!rot.empty()) s["rotational"] = rot == "1";
    std::string sched = read_line(base + "/queue/scheduler");
    size_t b = sched.find('['), e = sched.find(']');
    if (b != std::string::npos && e != std::string::npos && e > b) s["scheduler"] = sched.substr(b + 1, e - b - 1);
    std::string lbs = read_line(base + "/queue/logical_block_size");
    if (!lbs.empty()) s["logical_block_size"] = to_u64(lbs);
    return s;
}

}  // namespace

Json machine_info(const std::string& path) {
    Json m = Json::object();
    Json cpu = Json::object();
    cpu["model"] = cpu_model_name();
    cpu["logical_cores"] = logical_core_count();
    cpu["physical_cores"] = physical_core_count();
    double mhz = cpu_mhz();
    if (mhz > 0) cpu["mhz"] = mhz;
    Json flags = Json::array();
    for (const char* f : {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni",
                          "amx_tile", "asimd"})
        if (cpu_has_flag(f)) flags.push_back(f);
    cpu["flags"] = flags;
    m["cpu"] = cpu;

    MemInfo mi = read_meminfo();
    Json mem = Json::object();
    mem["total_bytes"] = mi.total;
    mem["available_bytes"] = mi.available;
    mem["swap_total_bytes"] = mi.swap_total;
    m["memory"] = mem;

    struct utsname u;
    if (uname(&u) == 0) {
        m["kernel"] = std::string(u.sysname) + " " + u.release;
        m["kernel_version"] = u.version;
        m["arch"] = u.machine;
        m["hostname"] = u.nodename;
    }
    std::istringstream os(read_text("/etc/os-release"));
    std::string line;
    while (std::getline(os, line)) {
        if (line.rfind("PRETTY_NAME=", 0) != 0) continue;
        std::string v = line.substr(12);
        if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
        m["os"] = v;
    }
    if (!path.empty()) m["storage"] = storage_info(path);
    return m;
}

}  // namespace ms
