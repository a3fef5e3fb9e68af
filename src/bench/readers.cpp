#include "bench/readers.h"

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace ms {

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

namespace {

uint8_t* alloc_aligned(uint64_t n) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, std::max<uint64_t>(n, 4096)) != 0) throw std::runtime_error("out of memory");
    // Touch every page now so first-read page faults are not timed.
    memset(p, 0, std::max<uint64_t>(n, 4096));
    return static_cast<uint8_t*>(p);
}

std::string read_error(uint64_t offset, int64_t got, uint32_t want) {
    if (got < 0) return "read at offset " + std::to_string(offset) + ": " + strerror(int(-got));
    return "short read at offset " + std::to_string(offset) + ": " + std::to_string(got) + " of " +
           std::to_string(want) + " bytes";
}

}  // namespace

void latency_summary(std::vector<float>& lat, size_t n, ReadStats* out) {
    if (n == 0) return;
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += lat[i];
    std::sort(lat.begin(), lat.begin() + long(n));
    out->lat_avg_us = sum / double(n);
    out->lat_p50_us = lat[n / 2];
    out->lat_p99_us = lat[std::min(n - 1, n * 99 / 100)];
    out->lat_max_us = lat[n - 1];
}

PreadPool::PreadPool(int threads, uint64_t max_read) {
    if (threads < 1) threads = 1;
    for (int i = 0; i < threads; ++i) buffers_.push_back(alloc_aligned(max_read));
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

PreadPool::~PreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    for (uint8_t* b : buffers_) free(b);
}

ReadStats PreadPool::run(int fd, const ReadOp* ops, size_t n, double max_seconds, uint8_t* arena) {
    if (lat_us_.size() < n) lat_us_.resize(n);
    std::unique_lock<std::mutex> lk(mu_);
    fd_ = fd;
    ops_ = ops;
    n_ = n;
    arena_ = arena;
    next_ = 0;
    bytes_ = 0;
    reads_ = 0;
    error_.clear();
    int64_t start = now_ns();
    deadline_ns_ = max_seconds > 0 ? start + int64_t(max_seconds * 1e9) : INT64_MAX;
    running_ = int(workers_.size());
    ++generation_;
    wake_.notify_all();
    done_.wait(lk, [this] { return running_ == 0; });
    ReadStats s;
    s.seconds = double(now_ns() - start) / 1e9;
    if (!error_.empty()) throw std::runtime_error(error_);
    s.bytes = bytes_;
    s.reads = reads_;
    // Reads are handed out in order and every taken one completes, so the
    // first `reads` entries are exactly the finished ones.
    latency_summary(lat_us_, size_t(s.reads), &s);
    return s;
}

void PreadPool::worker(int index) {
    uint64_t seen = 0;
    uint8_t* buf = buffers_[size_t(index)];
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        uint64_t bytes = 0, reads = 0;
        std::string error;
        for (;;) {
            int64_t t0 = now_ns();
            // Every worker makes at least one read, so a thread woken late on
            // a busy machine still measures something.
            if (t0 >= deadline_ns_ && reads > 0) break;
            size_t i = next_.fetch_add(1, std::memory_order_relaxed);
            if (i >= n_) break;
            const ReadOp& op = ops_[i];
            uint8_t* dst = arena_ ? arena_ + op.dst : buf;
            uint32_t done = 0;
            int64_t r = 0;
            while (done < op.length) {
                r = pread(fd_, dst + done, op.length - done, off_t(op.offset + done));
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) break;
                done += uint32_t(r);
            }
            if (done != op.length) {
                error = read_error(op.offset, r < 0 ? -errno : int64_t(done), op.length);
                next_.store(n_);  // stop the others too
                break;
            }
            lat_us_[i] = float(double(now_ns() - t0) / 1e3);
            bytes += op.length;
            ++reads;
        }
        std::lock_guard<std::mutex> lk(mu_);
        bytes_ += bytes;
        reads_ += reads;
        if (!error.empty() && error_.empty()) error_ = error;
        if (--running_ == 0) done_.notify_all();
    }
}

ReadStats uring_read(int fd, const ReadOp* ops, size_t n, int depth, uint64_t max_read, double max_seconds) {
    if (depth < 1) depth = 1;
    io_uring ring;
    int rc = io_uring_queue_init(unsigned(depth), &ring, 0);
    if (rc < 0) throw std::runtime_error(std::string("io_uring setup failed: ") + strerror(-rc));
    const size_t nd = size_t(depth);
    std::vector<uint8_t*> bufs(nd);
    std::vector<iovec> iov(nd);
    for (int i = 0; i < depth; ++i) {
        bufs[size_t(i)] = alloc_aligned(max_read);
        iov[size_t(i)] = {bufs[size_t(i)], size_t(max_read)};
    }
    // Fixed buffers save the kernel pinning pages per read; fall back to
    // plain reads where registration is refused (RLIMIT_MEMLOCK).
    bool fixed = io_uring_register_buffers(&ring, iov.data(), unsigned(depth)) == 0;
    std::vector<float> lat(n);
    std::vector<size_t> slot_op(nd);
    std::vector<int64_t> slot_t0(nd);
    std::vector<int> free_slots;
    for (int i = depth - 1; i >= 0; --i) free_slots.push_back(i);

    ReadStats s;
    std::string error;
    int64_t start = now_ns();
    int64_t deadline = max_seconds > 0 ? start + int64_t(max_seconds * 1e9) : INT64_MAX;
    size_t next = 0, inflight = 0, finished = 0;
    auto submit_more = [&] {
        int queued = 0;
        while (!free_slots.empty() && next < n && error.empty() && (next == 0 || now_ns() < deadline)) {
            int slot = free_slots.back();
            io_uring_sqe* sqe = io_uring_get_sqe(&ring);
            if (!sqe) break;
            free_slots.pop_back();
            const ReadOp& op = ops[next];
            if (fixed) io_uring_prep_read_fixed(sqe, fd, bufs[size_t(slot)], op.length, op.offset, slot);
            else io_uring_prep_read(sqe, fd, bufs[size_t(slot)], op.length, op.offset);
            io_uring_sqe_set_data64(sqe, uint64_t(slot));
            slot_op[size_t(slot)] = next++;
            slot_t0[size_t(slot)] = now_ns();
            ++queued;
        }
        if (queued) {
            int r = io_uring_submit(&ring);
            if (r < 0 && error.empty()) error = std::string("io_uring submit: ") + strerror(-r);
            inflight += size_t(queued);
        }
    };
    submit_more();
    while (inflight > 0) {
        io_uring_cqe* cqe = nullptr;
        int r = io_uring_wait_cqe(&ring, &cqe);
        if (r == -EINTR) continue;
        if (r < 0) {
            if (error.empty()) error = std::string("io_uring wait: ") + strerror(-r);
            break;
        }
        int slot = int(io_uring_cqe_get_data64(cqe));
        const ReadOp& op = ops[slot_op[size_t(slot)]];
        // O_DIRECT reads of whole blocks inside the file complete in full; a
        // short one means the plan ran past the end of the file.
        if (cqe->res != int32_t(op.length) && error.empty()) error = read_error(op.offset, cqe->res, op.length);
        lat[finished++] = float(double(now_ns() - slot_t0[size_t(slot)]) / 1e3);
        s.bytes += op.length;
        ++s.reads;
        io_uring_cqe_seen(&ring, cqe);
        --inflight;
        free_slots.push_back(slot);
        submit_more();
    }
    s.seconds = double(now_ns() - start) / 1e9;
    if (fixed) io_uring_unregister_buffers(&ring);
    io_uring_queue_exit(&ring);
    for (uint8_t* b : bufs) free(b);
    if (!error.empty()) throw std::runtime_error(error);
    latency_summary(lat, finished, &s);
    return s;
}

}  // namespace ms
