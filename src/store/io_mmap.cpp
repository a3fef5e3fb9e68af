// The baseline: experts copied out of a read-only mapping of the file, so
// every miss is served by page faults and kernel readahead, as in engines
// that mmap the model today. Synchronous: reads complete inside submit().
// After each copy the pages leave our page tables (they stay in the page
// cache), so mapped file pages do not count against the memory budget.
// A file truncated under the run turns the copy's page faults into SIGBUS;
// the copy catches it and the read comes back short, like a pread's.
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "store/io.h"

namespace ms {

namespace {

// SIGBUS during a guarded copy jumps back into it; anywhere else the signal
// keeps its default action (the process dies as it would have).
// volatile: the compiler must not move the store past the copy, which it
// may otherwise do with a builtin memcpy it knows does not read it.
thread_local sigjmp_buf* volatile t_copy_jump = nullptr;

void on_sigbus(int sig) {
    if (t_copy_jump) siglongjmp(*t_copy_jump, 1);
    signal(sig, SIG_DFL);
    raise(sig);
}

void install_sigbus_handler() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa = {};
        sa.sa_handler = on_sigbus;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_NODEFER;  // siglongjmp leaves the handler: do not keep SIGBUS blocked
        sigaction(SIGBUS, &sa, nullptr);
    });
}

// memcpy that survives the source's pages vanishing (file truncated).
bool guarded_copy(void* dst, const void* src, size_t n) {
    sigjmp_buf jump;
    if (sigsetjmp(jump, 1) != 0) {
        t_copy_jump = nullptr;
        return false;
    }
    t_copy_jump = &jump;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    memcpy(dst, src, n);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_copy_jump = nullptr;
    return true;
}

constexpr uint64_t kSpan = 2 << 20;  // the largest page-cache folio mapped at once (PMD size)

class MmapEngine : public IoEngine {
public:
    ~MmapEngine() override {
        for (const Mapping& m : maps_)
            if (m.data) munmap(m.data, m.size);
    }
    MmapEngine() { install_sigbus_handler(); }
    const char* name() const override { return "mmap"; }
    bool wants_direct() const override { return false; }

    void submit(const IoRequest* reqs, size_t n) override {
        for (size_t i = 0; i < n; i++) {
            const IoRequest& r = reqs[i];
            const Mapping* m = mapping(r.fd);
            int64_t result;
            if (!m) {
                result = -int64_t(mmap_errno_);
            } else if (r.offset >= m->size) {
                result = 0;
            } else {
                uint64_t n_copy = std::min<uint64_t>(r.len, m->size - r.offset);
                if (!guarded_copy(r.dst, static_cast<const uint8_t*>(m->data) + r.offset, n_copy)) {
                    // Truncated since it was mapped. Which bytes the copy
                    // got is unknown: none count, as at the end of a file
                    // (the store then names the file as truncated).
                    done_.push_back({r.tag, 0});
                    continue;
                }
                // A fault maps more than the faulting page: cached
                // neighbours ("fault-around") and whole large folios, up to
                // 2 MiB on x86-64. Release the 2 MiB-aligned span around the
                // copy so none of it lingers in RSS.
                uint64_t lo = r.offset / kSpan * kSpan;
                uint64_t hi = std::min(m->size, (r.offset + n_copy + kSpan - 1) / kSpan * kSpan);
                madvise(static_cast<uint8_t*>(m->data) + lo, hi - lo, MADV_DONTNEED);
                result = int64_t(n_copy);
            }
            done_.push_back({r.tag, result});
        }
    }

    size_t reap(IoCompletion* out, size_t max, bool) override {
        size_t n = std::min(max, done_.size() - head_);
        for (size_t i = 0; i < n; i++) out[i] = done_[head_ + i];
        head_ += n;
        if (head_ == done_.size()) done_.clear(), head_ = 0;
        return n;
    }
    size_t outstanding() const override { return done_.size() - head_; }

private:
    struct Mapping {
        int fd;
        void* data;
        uint64_t size;
    };
    // Maps each file once, on its first read.
    const Mapping* mapping(int fd) {
        for (const Mapping& m : maps_)
            if (m.fd == fd) return &m;
        struct stat st;
        if (fstat(fd, &st) != 0) return mmap_errno_ = errno, nullptr;
        uint64_t size = uint64_t(st.st_size);
        void* p = size ? mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) : nullptr;
        if (p == MAP_FAILED) return mmap_errno_ = errno, nullptr;
        maps_.push_back({fd, p, size});
        return &maps_.back();
    }
    std::vector<Mapping> maps_;
    std::vector<IoCompletion> done_;
    size_t head_ = 0;
    int mmap_errno_ = 0;
};

}  // namespace

std::unique_ptr<IoEngine> make_mmap_engine() { return std::make_unique<MmapEngine>(); }

}  // namespace ms
