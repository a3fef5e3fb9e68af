#include "bench/cgroup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace ms {

namespace {

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Writes text to a cgroup control file; returns "" or the reason it failed.
std::string write_control(const std::string& path, const std::string& text) {
    FILE* f = fopen(path.c_str(), "w");
    if (!f) return path + ": " + strerror(errno);
    bool ok = fputs(text.c_str(), f) >= 0;
    int e = errno;
    ok = fclose(f) == 0 && ok;
    if (!ok) return path + ": " + strerror(e ? e : errno);
    return "";
}

uint64_t to_u64(const std::string& s) { return strtoull(s.c_str(), nullptr, 10); }

// Whether `word` is one of the items of text separated by spaces, commas or
// newlines ("cpu memory io", "rw,memory").
bool has_word(const std::string& text, const std::string& word) {
    size_t i = 0;
    while (i < text.size()) {
        size_t e = text.find_first_of(" ,\n", i);
        if (e == std::string::npos) e = text.size();
        if (text.compare(i, e - i, word) == 0 && e - i == word.size()) return true;
        i = e + 1;
    }
    return false;
}

// Mount points of the cgroup2 hierarchy and of the v1 hierarchy holding the
// memory controller, from /proc/self/mountinfo.
void cgroup_mounts(std::string* v2, std::string* v1_memory) {
    std::istringstream in(slurp("/proc/self/mountinfo"));
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::vector<std::string> f;
        for (std::string w; ls >> w;) f.push_back(w);
        size_t dash = 0;
        for (size_t i = 6; i < f.size(); ++i)
            if (f[i] == "-") { dash = i; break; }
        if (dash == 0 || dash + 3 >= f.size()) continue;
        const std::string& type = f[dash + 1];
        const std::string& opts = f[dash + 3];
        if (type == "cgroup2" && v2->empty()) *v2 = f[4];
        if (type == "cgroup" && v1_memory->empty() && has_word(opts, "memory"))
            *v1_memory = f[4];
    }
}

}  // namespace

std::string own_cgroup(const std::string& text, const std::string& controller) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        // hierarchy-id:controller-list:path
        size_t a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        std::string ctrls = line.substr(a + 1, b - a - 1);
        bool match = controller.empty() ? (line.compare(0, a, "0") == 0 && ctrls.empty())
                                        : has_word(ctrls, controller);
        if (match) return line.substr(b + 1);
    }
    return "";
}

uint64_t memory_stat_value(const std::string& text, const std::string& key) {
    std::istringstream in(text);
    std::string k;
    uint64_t v;
    while (in >> k >> v)
        if (k == key) return v;
    return 0;
}

MemoryCgroup::MemoryCgroup(const std::string& name, uint64_t limit_bytes) : limit_(limit_bytes) {
    std::string v2, v1;
    cgroup_mounts(&v2, &v1);
    std::string self = slurp("/proc/self/cgroup");
    std::string why_v2, why_v1;

    if (v2.empty()) {
        why_v2 = "not mounted";
    } else {
        std::string base = v2 + own_cgroup(self, "");
        if (!has_word(slurp(base + "/cgroup.controllers"), "memory")) {
            why_v2 = base + " has no memory controller (it is bound to v1 or not delegated)";
        } else {
            if (!has_word(slurp(base + "/cgroup.subtree_control"), "memory")) why_v2 = write_control(base + "/cgroup.subtree_control", "+memory");
            std::string dir = base + "/" + name;
            if (why_v2.empty() && mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) why_v2 = dir + ": " + strerror(errno);
            if (why_v2.empty()) why_v2 = write_control(dir + "/memory.max", std::to_string(limit_bytes));
            if (why_v2.empty()) {
                version_ = 2;
                path_ = dir;
                return;
            }
            rmdir(dir.c_str());
        }
    }
    if (v1.empty()) {
        why_v1 = "memory hierarchy not mounted";
    } else {
        std::string dir = v1 + own_cgroup(self, "memory") + "/" + name;
        if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) why_v1 = dir + ": " + strerror(errno);
        if (why_v1.empty()) why_v1 = write_control(dir + "/memory.limit_in_bytes", std::to_string(limit_bytes));
        if (why_v1.empty()) {
            version_ = 1;
            path_ = dir;
            return;
        }
        rmdir(dir.c_str());
    }
    throw std::runtime_error("--limit-mem: cannot create a memory cgroup (cgroup v2: " + why_v2 + "; cgroup v1: " +
                             why_v1 + "); run as root or from a delegated cgroup");
}

MemoryCgroup::~MemoryCgroup() {
    // The children have exited; the kernel may take a moment to let go.
    for (int i = 0; i < 50 && rmdir(path_.c_str()) != 0 && errno == EBUSY; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void MemoryCgroup::add(int pid) const {
    std::string err = write_control(procs_file(), std::to_string(pid == 0 ? getpid() : pid));
    if (!err.empty()) throw std::runtime_error(err);
}

std::string MemoryCgroup::read_file(const char* name) const { return slurp(path_ + "/" + name); }

uint64_t MemoryCgroup::current_bytes() const {
    return to_u64(read_file(version_ == 2 ? "memory.current" : "memory.usage_in_bytes"));
}

uint64_t MemoryCgroup::peak_bytes() const {
    return to_u64(read_file(version_ == 2 ? "memory.peak" : "memory.max_usage_in_bytes"));
}

uint64_t MemoryCgroup::file_bytes() const {
    return memory_stat_value(read_file("memory.stat"), version_ == 2 ? "file" : "cache");
}

}  // namespace ms
