#include "store/io.h"

#include <unistd.h>

#include <cerrno>
#include <stdexcept>

namespace ms {

std::unique_ptr<IoEngine> make_uring_engine(const IoOptions& opt);
std::unique_ptr<IoEngine> make_pool_engine(const IoOptions& opt, bool direct);
std::unique_ptr<IoEngine> make_mmap_engine();

std::unique_ptr<IoEngine> make_io_engine(const std::string& name, const IoOptions& opt) {
    if (opt.depth < 1 || opt.threads < 1 || opt.split < 1)
        throw std::runtime_error("--io-depth, --io-threads and --io-split must be at least 1");
    if (name == "uring") return make_uring_engine(opt);
    if (name == "pread") return make_pool_engine(opt, true);
    if (name == "buffered") return make_pool_engine(opt, false);
    if (name == "mmap") return make_mmap_engine();
    throw std::runtime_error("--io: expected uring, pread, buffered or mmap, got '" + name + "'");
}

int64_t pread_full(int fd, void* dst, uint64_t n, uint64_t offset) {
    uint8_t* p = static_cast<uint8_t*>(dst);
    uint64_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, p + done, n - done, off_t(offset + done));
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return -int64_t(errno);
        }
        if (r == 0) break;  // end of file
        done += uint64_t(r);
    }
    return int64_t(done);
}

}  // namespace ms
