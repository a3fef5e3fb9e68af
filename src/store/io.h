// Reading expert bytes from files: one interface, IoEngine (submit a batch of
// reads, reap completions), with four engines behind it: `uring` (io_uring,
// O_DIRECT, registered buffers), `pread` (thread pool, optional split of each
// read into page-aligned chunks), `buffered` (the same pool through the page
// cache) and `mmap` (memcpy out of a mapping: the page-fault baseline).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ms {

// Read len bytes at offset of fd into dst. tag is the caller's; it comes back
// with the completion. For O_DIRECT files offset, len and dst are multiples of
// 4 KiB (the store guarantees it).
struct IoRequest {
    int fd = -1;
    uint64_t offset = 0;
    uint64_t len = 0;
    void* dst = nullptr;
    uint64_t tag = 0;
    bool low = false;  // a prefetch: starts only when no demand read is waiting
};

// result: bytes read (less than len only at end of file), or -errno.
struct IoCompletion {
    uint64_t tag = 0;
    int64_t result = 0;
};

struct IoOptions {
    int depth = 64;    // uring: reads in flight
    int threads = 4;   // pread/buffered: worker threads
    int split = 1;     // pread/buffered: page-aligned chunks per read
};

class IoEngine {
public:
    virtual ~IoEngine() = default;
    virtual const char* name() const = 0;
    // Whether files should be opened with O_DIRECT for this engine.
    virtual bool wants_direct() const = 0;
    // The memory all reads land in (the slot arena), so an engine can register
    // it with the kernel once. Called at most once, before the first submit.
    virtual void register_memory(void* base, size_t bytes, size_t unit) { (void)base, (void)bytes, (void)unit; }
    // Queues n reads; all of them will complete (successfully or not).
    virtual void submit(const IoRequest* reqs, size_t n) = 0;
    // Moves up to max finished reads into out; with wait, blocks until at
    // least one is available (returns 0 only when nothing is outstanding).
    virtual size_t reap(IoCompletion* out, size_t max, bool wait) = 0;
    // Reads submitted and not yet reaped.
    virtual size_t outstanding() const = 0;
    // Notes for the user (e.g. buffer registration refused, fell back).
    const std::string& note() const { return note_; }

protected:
    std::string note_;
};

// name: "uring", "pread", "buffered" or "mmap"; throws on an unknown name or
// when the engine cannot start (io_uring unavailable: the message says to
// use --io pread).
std::unique_ptr<IoEngine> make_io_engine(const std::string& name, const IoOptions& opt);

// Injected faults, for tests and `--io-faults`: reads of chosen experts fail
// with EIO, come back short (half, in whole pages), arrive ms late, or
// arrive with the middle byte of each page flipped. layer / expert -1 match any; count
// is how many matching reads a rule still hits (-1: all). The first rule
// that matches a read applies.
enum class FaultKind { Eio, Short, Slow, Corrupt };
struct FaultRule {
    FaultKind kind = FaultKind::Eio;
    int layer = -1, expert = -1;
    int ms = 0;
    int count = -1;
};
// "KIND@LAYER:EXPERT[xN],...", KIND eio | short | corrupt | slow=MS, LAYER
// and EXPERT numbers or *; throws naming the bad rule.
std::vector<FaultRule> parse_faults(const std::string& spec);
// Which (layer, expert) a request's tag belongs to (the store knows).
using FaultLocator = std::function<void(uint64_t tag, int* layer, int* expert)>;
std::unique_ptr<IoEngine> make_fault_engine(std::unique_ptr<IoEngine> inner, std::vector<FaultRule> rules,
                                            FaultLocator locate);

// pread until n bytes, end of file or an error: retries short reads, EINTR
// and EAGAIN. Returns bytes read or -errno.
int64_t pread_full(int fd, void* dst, uint64_t n, uint64_t offset);

}  // namespace ms
