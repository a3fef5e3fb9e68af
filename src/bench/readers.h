// The read loops the drive and page-cache benchmarks time: a planned list of
// (offset, length) reads carried out either by N threads each doing one
// blocking pread at a time, or by one thread keeping D reads in flight through
// io_uring. Every read is timed; buffers are allocated once, before the clock
// starts.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ms {

struct ReadOp {
    uint64_t offset = 0;
    uint32_t length = 0;
    uint64_t dst = 0;  // where it lands in the caller's arena, when one is given
};

struct ReadStats {
    uint64_t reads = 0;
    uint64_t bytes = 0;
    double seconds = 0;
    // Per-read latency (submit to completion), microseconds.
    double lat_avg_us = 0, lat_p50_us = 0, lat_p99_us = 0, lat_max_us = 0;

    double gb_per_s() const { return seconds > 0 ? double(bytes) / seconds / 1e9 : 0; }
    double iops() const { return seconds > 0 ? double(reads) / seconds : 0; }
};

// N persistent threads, each with its own 4 KiB-aligned buffer of max_read
// bytes, taking reads from a shared list in order (an atomic index).
class PreadPool {
public:
    PreadPool(int threads, uint64_t max_read);
    ~PreadPool();
    PreadPool(const PreadPool&) = delete;
    PreadPool& operator=(const PreadPool&) = delete;

    int threads() const { return int(workers_.size()); }

    // Runs ops[0..n) on fd; stops taking new reads once max_seconds have
    // passed (<= 0: no limit). Reads land in the thread's own buffer, or at
    // arena + op.dst when an arena is given (as in a slot cache, where every
    // expert has its own destination). Throws "read at offset N: reason" on
    // an error or a short read.
    ReadStats run(int fd, const ReadOp* ops, size_t n, double max_seconds, uint8_t* arena = nullptr);

private:
    void worker(int index);

    std::vector<std::thread> workers_;
    std::vector<uint8_t*> buffers_;
    std::mutex mu_;
    std::condition_variable wake_, done_;
    uint64_t generation_ = 0;
    int running_ = 0;
    bool stop_ = false;
    // The current job.
    int fd_ = -1;
    const ReadOp* ops_ = nullptr;
    size_t n_ = 0;
    uint8_t* arena_ = nullptr;
    int64_t deadline_ns_ = 0;
    std::atomic<size_t> next_{0};
    std::atomic<uint64_t> bytes_{0}, reads_{0};
    std::vector<float> lat_us_;  // per op index
    std::string error_;
};

// One thread keeping up to `depth` reads in flight on an io_uring, with
// buffers registered once (fixed-buffer reads), same stopping rule.
// Throws when io_uring cannot be set up, naming the reason.
ReadStats uring_read(int fd, const ReadOp* ops, size_t n, int depth, uint64_t max_read, double max_seconds);

// Average, median, 99th percentile and maximum of the first n latencies
// (sorted in place).
void latency_summary(std::vector<float>& lat, size_t n, ReadStats* out);

// Monotonic clock in nanoseconds.
int64_t now_ns();

}  // namespace ms
