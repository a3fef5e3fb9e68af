// `pread` and `buffered`: a pool of threads issuing blocking preads. Each read
// may be split into `split` page-aligned chunks that different threads fetch
// at once (more requests in flight per expert: the fan-out of
// seeds/001); `buffered` is the same pool on files opened without O_DIRECT.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "store/io.h"

namespace ms {

namespace {

class PoolEngine : public IoEngine {
public:
    PoolEngine(const IoOptions& opt, bool direct) : direct_(direct), split_(opt.split) {
        for (int i = 0; i < opt.threads; i++) workers_.emplace_back([this] { work(); });
    }
    ~PoolEngine() override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stop_ = true;
        }
        work_cv_.notify_all();
        for (std::thread& t : workers_) t.join();
    }
    const char* name() const override { return direct_ ? "pread" : "buffered"; }
    bool wants_direct() const override { return direct_; }

    void submit(const IoRequest* reqs, size_t n) override {
        {
            std::lock_guard<std::mutex> lk(mu_);
            for (size_t i = 0; i < n; i++) {
                const IoRequest& r = reqs[i];
                int id = new_job();
                Job& j = *jobs_[size_t(id)];
                j.req = r;
                j.result = int64_t(r.len);
                // Chunks are whole pages so each stays O_DIRECT-aligned.
                uint64_t chunk = std::max<uint64_t>(4096, (r.len / uint64_t(split_) + 4095) / 4096 * 4096);
                j.chunks_left = 0;
                uint64_t off = 0;
                do {
                    uint64_t len = std::min(chunk, r.len - off);
                    (r.low ? work_low_ : work_).push_back({id, off, len});
                    j.chunks_left++;
                    off += len;
                } while (off < r.len);
                outstanding_++;
            }
        }
        work_cv_.notify_all();
    }

    size_t reap(IoCompletion* out, size_t max, bool wait) override {
        std::unique_lock<std::mutex> lk(mu_);
        if (wait) done_cv_.wait(lk, [&] { return !done_.empty() || outstanding_ == 0; });
        size_t n = 0;
        while (n < max && !done_.empty()) {
            out[n++] = done_.front();
            done_.pop_front();
            outstanding_--;
        }
        return n;
    }
    size_t outstanding() const override {
        std::lock_guard<std::mutex> lk(mu_);
        return outstanding_;
    }

private:
    struct Job {
        IoRequest req;
        int chunks_left = 0;
        int64_t result = 0;  // bytes up to the first short chunk, or the first error
    };
    struct Chunk {
        int job;
        uint64_t off, len;
    };

    int new_job() {
        if (free_.empty()) {
            jobs_.push_back(std::make_unique<Job>());
            return int(jobs_.size() - 1);
        }
        int id = free_.back();
        free_.pop_back();
        return id;
    }

    void work() {
        std::unique_lock<std::mutex> lk(mu_);
        for (;;) {
            work_cv_.wait(lk, [&] { return stop_ || !work_.empty() || !work_low_.empty(); });
            if (stop_) return;
            std::deque<Chunk>& q = work_.empty() ? work_low_ : work_;  // prefetches wait for demand reads
            Chunk c = q.front();
            q.pop_front();
            IoRequest r = jobs_[size_t(c.job)]->req;
            lk.unlock();
            int64_t got = pread_full(r.fd, static_cast<uint8_t*>(r.dst) + c.off, c.len, r.offset + c.off);
            lk.lock();
            Job& j = *jobs_[size_t(c.job)];
            if (got < 0) {
                if (j.result >= 0) j.result = got;
            } else if (uint64_t(got) < c.len && j.result >= 0) {
                j.result = std::min<int64_t>(j.result, int64_t(c.off) + got);  // end of file inside this chunk
            }
            if (--j.chunks_left == 0) {
                done_.push_back({j.req.tag, j.result});
                free_.push_back(c.job);
                done_cv_.notify_one();
            }
        }
    }

    bool direct_;
    int split_;
    mutable std::mutex mu_;
    std::condition_variable work_cv_, done_cv_;
    std::deque<Chunk> work_, work_low_;
    std::deque<IoCompletion> done_;
    std::vector<std::unique_ptr<Job>> jobs_;
    std::vector<int> free_;
    size_t outstanding_ = 0;
    bool stop_ = false;
    std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<IoEngine> make_pool_engine(const IoOptions& opt, bool direct) {
    return std::make_unique<PoolEngine>(opt, direct);
}

}  // namespace ms
