#include "bench/bench_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>

namespace ms {

namespace {

constexpr char kMagic[8] = {'M', 'S', 'B', 'E', 'N', 'C', 'H', '1'};

// Header block layout (little-endian u64s after the magic).
struct Header {
    char magic[8];
    uint64_t size;
    uint64_t seed;
    uint64_t cursor;
    uint64_t check;  // size ^ seed ^ cursor ^ constant: catches torn writes
};
constexpr uint64_t kCheckSalt = 0x6d6f657374726561ULL;  // "moestrea"

uint64_t header_check(const Header& h) { return h.size ^ (h.seed * 0x9e3779b97f4a7c15ULL) ^ h.cursor ^ kCheckSalt; }

uint64_t splitmix64(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

struct AlignedFree {
    void operator()(void* p) const { free(p); }
};
using AlignedBuf = std::unique_ptr<uint8_t, AlignedFree>;

AlignedBuf aligned_buf(size_t n) {
    void* p = nullptr;
    if (posix_memalign(&p, kBenchBlock, n) != 0) throw std::runtime_error("out of memory");
    return AlignedBuf(static_cast<uint8_t*>(p));
}

std::string err(const std::string& path, const char* what) {
    // Built by appending: GCC 12 at -O3 warns falsely on chained operator+.
    std::string s = path;
    s.append(": ").append(what).append(": ").append(strerror(errno));
    return s;
}

void write_header(int fd, const std::string& path, const Header& h) {
    AlignedBuf b = aligned_buf(kBenchBlock);
    memset(b.get(), 0, kBenchBlock);
    memcpy(b.get(), &h, sizeof h);
    if (pwrite(fd, b.get(), kBenchBlock, 0) != ssize_t(kBenchBlock)) throw std::runtime_error(err(path, "write"));
}

enum class HeaderState { Valid, Ours, Foreign };

// Ours: our magic, or the all-zero header of a creation that was killed.
HeaderState read_header(int fd, Header* h) {
    AlignedBuf b = aligned_buf(kBenchBlock);
    ssize_t n = pread(fd, b.get(), kBenchBlock, 0);
    if (n <= 0) return HeaderState::Ours;  // empty file
    if (n != ssize_t(kBenchBlock)) return HeaderState::Foreign;
    memcpy(h, b.get(), sizeof *h);
    if (memcmp(h->magic, kMagic, 8) == 0) return h->check == header_check(*h) ? HeaderState::Valid : HeaderState::Ours;
    for (size_t i = 0; i < sizeof *h; ++i)
        if (b.get()[i] != 0) return HeaderState::Foreign;
    return HeaderState::Ours;
}

// Opens with O_DIRECT where the file system allows it (tmpfs does not).
int open_maybe_direct(const std::string& path, int flags) {
    int fd = open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EINVAL) fd = open(path.c_str(), flags | O_CLOEXEC, 0644);
    return fd;
}

bool blocks_match(int fd, uint64_t size, uint64_t seed, uint64_t cursor) {
    // Two blocks already consumed by earlier runs (reading them again costs
    // nothing fresh): the one before the cursor and the first data block.
    AlignedBuf got = aligned_buf(kBenchBlock), want = aligned_buf(kBenchBlock);
    uint64_t last = cursor > 2 * kBenchBlock ? cursor - kBenchBlock : size - kBenchBlock;
    for (uint64_t off : {kBenchBlock, last}) {
        if (pread(fd, got.get(), kBenchBlock, off_t(off)) != ssize_t(kBenchBlock)) return false;
        fill_bench_bytes(want.get(), kBenchBlock, off, seed);
        if (memcmp(got.get(), want.get(), kBenchBlock) != 0) return false;
    }
    return true;
}

}  // namespace

void fill_bench_bytes(uint8_t* dst, uint64_t n, uint64_t offset, uint64_t seed) {
    uint64_t end = offset + n;
    while (offset < end) {
        uint64_t block = offset / kBenchBlock;
        uint64_t block_end = std::min(end, (block + 1) * kBenchBlock);
        uint64_t state = seed ^ (block * 0xd1342543de82ef95ULL);
        // Skip to the word inside the block where offset starts.
        uint64_t skip = (offset % kBenchBlock) / 8;
        for (uint64_t i = 0; i < skip; ++i) splitmix64(&state);
        for (; offset < block_end; offset += 8, dst += 8) {
            uint64_t v = splitmix64(&state);
            memcpy(dst, &v, 8);
        }
    }
}

uint64_t BenchFile::take(uint64_t bytes) {
    bytes = (bytes + kBenchBlock - 1) / kBenchBlock * kBenchBlock;
    if (bytes > data_bytes())
        throw std::runtime_error(path + ": a test needs " + std::to_string(bytes >> 20) +
                                 " MiB but the file holds only " + std::to_string(data_bytes() >> 20) +
                                 " MiB (use a larger --size or smaller --slice)");
    if (cursor + bytes > size) {
        cursor = data_begin();
        wrapped = true;
    }
    uint64_t at = cursor;
    cursor += bytes;
    return at;
}

void BenchFile::save_cursor() const {
    int fd = open_maybe_direct(path, O_WRONLY);
    if (fd < 0) throw std::runtime_error(err(path, "open"));
    Header h;
    memcpy(h.magic, kMagic, 8);
    h.size = size;
    h.seed = seed;
    h.cursor = cursor;
    h.check = header_check(h);
    try {
        write_header(fd, path, h);
    } catch (...) {
        close(fd);
        throw;
    }
    close(fd);
}

uint64_t free_bytes_at(const std::string& path) {
    std::filesystem::path probe(path);
    if (!std::filesystem::exists(probe)) probe = probe.parent_path();
    if (probe.empty()) probe = std::filesystem::current_path();
    struct statvfs v;
    if (statvfs(probe.c_str(), &v) != 0) throw std::runtime_error(err(probe.string(), "statvfs"));
    return uint64_t(v.f_bavail) * v.f_frsize;
}

BenchFile open_or_create_bench_file(const std::string& path, uint64_t size, const BytesProgress& progress) {
    if (size != 0) size = (size + kBenchBlock - 1) / kBenchBlock * kBenchBlock;
    if (size != 0 && size < 4 * kBenchBlock) throw std::runtime_error(path + ": --size must be at least 16 KiB");

    BenchFile bf;
    bf.path = path;
    int fd = open_maybe_direct(path, O_RDONLY);
    if (fd >= 0) {
        Header h{};
        struct stat st;
        HeaderState state = read_header(fd, &h);
        bool ok = state == HeaderState::Valid && fstat(fd, &st) == 0 && uint64_t(st.st_size) == h.size &&
                  (size == 0 || size == h.size) && h.cursor >= kBenchBlock && h.cursor <= h.size &&
                  blocks_match(fd, h.size, h.seed, h.cursor);
        close(fd);
        if (ok) {
            bf.size = h.size;
            bf.seed = h.seed;
            bf.cursor = h.cursor;
            return bf;
        }
        // Only ever overwrite a bench file (of another size, or damaged),
        // never an arbitrary user file.
        if (state == HeaderState::Foreign)
            throw std::runtime_error(path + ": exists and is not a moestream bench file; choose another --file");
    }
    if (size == 0) throw std::runtime_error(path + ": no bench file there; give --size");

    uint64_t have = free_bytes_at(path);
    uint64_t existing = std::filesystem::exists(path) ? std::filesystem::file_size(path) : 0;
    if (size + (1ull << 30) > have + existing)
        throw std::runtime_error(path + ": " + std::to_string(size >> 20) + " MiB would leave less than 1 GiB free (" +
                                 std::to_string(have >> 20) + " MiB available); use a smaller --size");

    fd = open_maybe_direct(path, O_WRONLY | O_CREAT | O_TRUNC);
    if (fd < 0) throw std::runtime_error(err(path, "create"));
    std::random_device rd;
    bf.seed = (uint64_t(rd()) << 32) ^ rd();
    bf.size = size;
    bf.cursor = kBenchBlock;
    bf.created = true;
    const uint64_t chunk = 4ull << 20;
    AlignedBuf buf = aligned_buf(chunk);
    try {
        // An invalid header until the data is complete: an interrupted
        // creation is never mistaken for a usable file.
        Header h{};
        write_header(fd, path, h);
        for (uint64_t off = kBenchBlock; off < size; off += chunk) {
            uint64_t n = std::min(chunk, size - off);
            fill_bench_bytes(buf.get(), n, off, bf.seed);
            uint64_t done = 0;
            while (done < n) {
                ssize_t w = pwrite(fd, buf.get() + done, n - done, off_t(off + done));
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) throw std::runtime_error(err(path, "write"));
                done += uint64_t(w);
            }
            if (progress) progress(off + n, size);
        }
        if (fdatasync(fd) != 0) throw std::runtime_error(err(path, "fdatasync"));
        memcpy(h.magic, kMagic, 8);
        h.size = size;
        h.seed = bf.seed;
        h.cursor = bf.cursor;
        h.check = header_check(h);
        write_header(fd, path, h);
        if (fdatasync(fd) != 0) throw std::runtime_error(err(path, "fdatasync"));
    } catch (...) {
        close(fd);
        unlink(path.c_str());
        throw;
    }
    // Buffered fallback (no O_DIRECT) leaves pages cached: drop them.
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return bf;
}

}  // namespace ms
