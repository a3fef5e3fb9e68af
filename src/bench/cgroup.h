// A memory cgroup for one benchmark case, so the page cache a child process
// builds up is bounded as on a machine with less RAM. Uses cgroup v2 where
// its memory controller is available, else the v1 memory hierarchy. The new
// group is made inside the caller's own group (delegation-friendly, and its
// usage still counts against every limit above it); it is removed on
// destruction.
#pragma once
#include <cstdint>
#include <string>

namespace ms {

class MemoryCgroup {
public:
    // Creates "<own group>/<name>" with a hard limit of limit_bytes. Throws a
    // one-line error saying what was tried and why it failed when neither
    // version can be used (not mounted, no memory controller, no permission).
    MemoryCgroup(const std::string& name, uint64_t limit_bytes);
    ~MemoryCgroup();
    MemoryCgroup(const MemoryCgroup&) = delete;
    MemoryCgroup& operator=(const MemoryCgroup&) = delete;

    int version() const { return version_; }
    const std::string& path() const { return path_; }
    uint64_t limit_bytes() const { return limit_; }
    // File to write a pid into to move that process into the group.
    std::string procs_file() const { return path_ + "/cgroup.procs"; }

    // Moves process pid (0: the caller) into the group; throws on failure.
    void add(int pid) const;

    uint64_t current_bytes() const;  // memory charged now (anon + page cache)
    uint64_t peak_bytes() const;     // high-water mark (0 when the kernel keeps none)
    uint64_t file_bytes() const;     // page cache charged now

private:
    std::string read_file(const char* name) const;
    int version_ = 0;
    std::string path_;
    uint64_t limit_ = 0;
};

// The line of /proc/self/cgroup for hierarchy `controller` ("memory" for v1,
// "" for the v2 unified line), e.g. "/user.slice/x"; "" when absent.
std::string own_cgroup(const std::string& proc_self_cgroup_text, const std::string& controller);

// Reads "key value" lines of memory.stat; 0 when the key is absent.
uint64_t memory_stat_value(const std::string& text, const std::string& key);

}  // namespace ms
