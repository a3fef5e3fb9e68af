// `uring`: io_uring with up to `depth` reads in flight, on O_DIRECT files,
// into buffers registered with the kernel (the slot arena), so a miss costs
// one SQE and the DMA lands straight in its slot. The arena is registered in
// pieces as reads first reach them, not up front: registering pins (and so
// allocates) every page, ~1 s per GB on the development VM, which made a
// 4.6 GiB cache cost 5-20 s before the first token.
#include <liburing.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <vector>

#include "ops/buffer.h"
#include "store/io.h"

namespace ms {

namespace {

class UringEngine : public IoEngine {
public:
    explicit UringEngine(int depth) {
        // One thread submits and reaps, so the kernel may defer completion
        // work to our reap calls; older kernels reject the flags.
        io_uring_params p{};
        p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
        int r = io_uring_queue_init_params(unsigned(depth), &ring_, &p);
        if (r == -EINVAL) r = io_uring_queue_init(unsigned(depth), &ring_, 0);
        else deferred_ = r == 0;
        if (r < 0)
            throw std::runtime_error(std::string("io_uring unavailable: ") + strerror(-r) +
                                     " (use --io pread)");
        slots_.resize(size_t(depth));
        for (int i = depth - 1; i >= 0; i--) free_.push_back(i);
    }
    ~UringEngine() override { io_uring_queue_exit(&ring_); }

    const char* name() const override { return "uring"; }
    bool wants_direct() const override { return true; }

    void register_memory(void* base, size_t bytes, size_t unit) override {
        // Pieces of whole units (slots), so no read straddles two, at most
        // kPieceBytes each (a registered buffer may not exceed 1 GiB).
        size_t per = unit ? std::max<size_t>(1, kPieceBytes / unit) * unit : 0;
        if (per == 0 || per > (size_t(1) << 30)) {
            note_ = "io_uring: slots larger than 1 GiB, buffers not registered";
            return;
        }
        const size_t n = (bytes + per - 1) / per;
        reg_base_ = static_cast<uint8_t*>(base);
        reg_bytes_ = bytes;
        reg_piece_ = per;
        // A sparse table filled in on first use (kernel 5.19+); else every
        // piece now.
        if (io_uring_register_buffers_sparse(&ring_, unsigned(n)) == 0) {
            registered_.assign(n, 0);
            return;
        }
        std::vector<iovec> iov;
        for (size_t off = 0; off < bytes; off += per) iov.push_back(piece_iov(off / per));
        int r = io_uring_register_buffers(&ring_, iov.data(), unsigned(iov.size()));
        if (r < 0) {
            note_ = std::string("io_uring: buffer registration refused (") + strerror(-r) +
                    "; raise `ulimit -l`), using unregistered reads";
            reg_base_ = nullptr;
            return;
        }
        registered_.assign(n, 1);
    }

    void submit(const IoRequest* reqs, size_t n) override {
        for (size_t i = 0; i < n; i++) queue(reqs[i]).push_back({reqs[i], 0});
        outstanding_ += n;
        fill();
    }

    size_t reap(IoCompletion* out, size_t max, bool wait) override {
        size_t n = 0;
        // With deferred task work, completions only show up in the ring once
        // we enter the kernel to ask for them.
        if (deferred_ && outstanding_ > 0) io_uring_get_events(&ring_);
        for (;;) {
            io_uring_cqe* cqe;
            while (n < max && io_uring_peek_cqe(&ring_, &cqe) == 0) {
                int idx = int(io_uring_cqe_get_data64(cqe));
                int res = cqe->res;
                io_uring_cqe_seen(&ring_, cqe);
                n += finish(idx, res, out + n);
            }
            fill();
            if (n > 0 || !wait || outstanding_ == 0) return n;
            int r = io_uring_wait_cqe(&ring_, &cqe);
            if (r < 0 && r != -EINTR && r != -EAGAIN && r != -ETIME)
                throw std::runtime_error(std::string("io_uring wait failed: ") + strerror(-r));
        }
    }
    size_t outstanding() const override { return outstanding_; }

private:
    struct Read {
        IoRequest req;
        uint64_t done;  // bytes already read (short reads continue from here)
    };

    // Handles one completion of slot idx; returns 1 if a request finished
    // (written to *out), 0 if it was resubmitted.
    int finish(int idx, int res, IoCompletion* out) {
        Read rd = slots_[size_t(idx)];
        free_.push_back(idx);
        low_in_flight_ -= rd.req.low;
        if (res == -EINTR || res == -EAGAIN) {
            queue(rd.req).push_front(rd);
            return 0;
        }
        if (res > 0) {
            rd.done += uint64_t(res);
            if (rd.done < rd.req.len) {
                queue(rd.req).push_front(rd);
                return 0;
            }
        }
        out->tag = rd.req.tag;
        out->result = res < 0 ? int64_t(res) : int64_t(rd.done);  // res == 0: end of file
        outstanding_--;
        return 1;
    }

    std::deque<Read>& queue(const IoRequest& r) { return r.low ? pending_low_ : pending_; }

    // Moves pending reads into the submission queue while slots are free:
    // demand reads first; prefetches only while they hold at most half the
    // slots (always at least one), so demand reads find free ones.
    void fill() {
        bool any = false;
        for (;;) {
            bool low = pending_.empty();
            bool low_room = low_in_flight_ == 0 || 2 * (low_in_flight_ + 1) <= slots_.size();
            if (free_.empty() || (low && (pending_low_.empty() || !low_room))) break;
            io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
            if (!sqe) break;
            std::deque<Read>& q = low ? pending_low_ : pending_;
            int idx = free_.back();
            free_.pop_back();
            Read& rd = slots_[size_t(idx)] = q.front();
            q.pop_front();
            low_in_flight_ += low;
            uint8_t* dst = static_cast<uint8_t*>(rd.req.dst) + rd.done;
            unsigned len = unsigned(rd.req.len - rd.done);
            uint64_t off = rd.req.offset + rd.done;
            size_t at = size_t(dst - reg_base_);
            if (reg_base_ && dst >= reg_base_ && at < reg_bytes_ && piece_ready(at / reg_piece_))
                io_uring_prep_read_fixed(sqe, rd.req.fd, dst, len, off, int(at / reg_piece_));
            else
                io_uring_prep_read(sqe, rd.req.fd, dst, len, off);
            io_uring_sqe_set_data64(sqe, uint64_t(idx));
            any = true;
        }
        if (any) {
            int r;
            do r = io_uring_submit(&ring_);
            while (r == -EINTR || r == -EAGAIN);
            if (r < 0) throw std::runtime_error(std::string("io_uring submit failed: ") + strerror(-r));
        }
    }

    io_uring ring_;
    bool deferred_ = false;
    std::vector<Read> slots_;  // reads in flight, by SQE user data
    std::vector<int> free_;
    std::deque<Read> pending_, pending_low_;  // demand reads, prefetches
    size_t outstanding_ = 0, low_in_flight_ = 0;
    // Whether piece p is registered; on first use it is, or the piece's
    // reads go unregistered when the kernel refuses (memlock limit).
    bool piece_ready(size_t p) {
        if (registered_[p] == 0) {
            iovec iov = piece_iov(p);
            // Pinning faults the pages in one at a time: allocate them first.
            prefault(iov.iov_base, iov.iov_len);
            __u64 tag = 0;
            registered_[p] = io_uring_register_buffers_update_tag(&ring_, unsigned(p), &iov, &tag, 1) == 1 ? 1 : 2;
            if (registered_[p] == 2 && note_.empty())
                note_ = "io_uring: buffer registration refused (raise `ulimit -l`), using unregistered reads";
        }
        return registered_[p] == 1;
    }
    iovec piece_iov(size_t p) const {
        return {reg_base_ + p * reg_piece_, std::min(reg_piece_, reg_bytes_ - p * reg_piece_)};
    }

    static constexpr size_t kPieceBytes = size_t(64) << 20;
    uint8_t* reg_base_ = nullptr;
    size_t reg_bytes_ = 0, reg_piece_ = 0;
    std::vector<uint8_t> registered_;  // per piece: 0 not yet, 1 registered, 2 refused
};

}  // namespace

std::unique_ptr<IoEngine> make_uring_engine(const IoOptions& opt) { return std::make_unique<UringEngine>(opt.depth); }

}  // namespace ms
