// A 64-byte aligned heap buffer: weights, KV cache and scratch live in these,
// so SIMD kernels can use aligned loads and rows never straddle cache lines
// more than they must. Allocation happens only at load / setup time.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

namespace ms {

// Allocates the pages of [p, p + n) in one call, before a bulk write fills
// them: faulted in one at a time as the write reaches them, fresh pages cost
// ~5-10 s per GB on the development VM against ~1 s this way. Advisory:
// kernels before 5.14 ignore it.
inline void prefault(void* p, size_t n) {
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t a = (uintptr_t(p) + page - 1) & ~(page - 1), b = (uintptr_t(p) + n) & ~(page - 1);
    if (b > a) madvise(reinterpret_cast<void*>(a), b - a, 23 /* MADV_POPULATE_WRITE */);
}

// Asks for [p, p + n) to be backed by 2 MiB pages where the kernel allows it
// (transparent huge pages in "madvise" mode, as on the development VM's
// Debian 12, give huge pages only to memory that asks). Weights and cache
// slots stream gigabytes per token; measured on that VM (2 cores, a
// qwen3-30b-a3b decode layer's 8 experts picked uniformly from a 15 GB
// buffer): 23-38 GB/s in 4 KiB pages, 41 GB/s in 2 MiB ones. Why, we take
// to be a TLB miss every 4 KiB (a nested page walk on a VM) and hardware
// prefetchers that stop at page boundaries; not measured. Advisory: ignored
// where THP is off.
constexpr size_t kHugePage = size_t(2) << 20;
inline void advise_huge_pages(void* p, size_t n) {
    const uintptr_t mask = ~uintptr_t(kHugePage - 1);
    const uintptr_t a = (uintptr_t(p) + kHugePage - 1) & mask, b = (uintptr_t(p) + n) & mask;
    if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);
}

// Huge: the buffer starts on a 2 MiB boundary and its whole 2 MiB pages are
// advised huge. For weights, which decode streams every token and which are
// written whole at load. Not for the KV cache or scratch: they fill as they
// are used, and a huge page makes the first touched byte 2 MiB resident (the
// KV cache at 4 KiB pages measured no slower at depth 4,096).
enum class PageSize { Base, Huge };

class AlignedBuffer {
public:
    AlignedBuffer() = default;
    explicit AlignedBuffer(size_t bytes, PageSize pages = PageSize::Base) { resize(bytes, pages); }
    AlignedBuffer(AlignedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
        std::swap(p_, o.p_);
        std::swap(n_, o.n_);
        return *this;
    }
    AlignedBuffer(const AlignedBuffer&) = delete;
    AlignedBuffer& operator=(const AlignedBuffer&) = delete;
    ~AlignedBuffer() { std::free(p_); }

    // Discards the contents. The new bytes are uninitialized and untouched,
    // so a large KV cache costs resident memory only as it fills.
    void resize(size_t bytes, PageSize pages = PageSize::Base) {
        std::free(p_);
        p_ = nullptr;
        n_ = 0;
        if (bytes == 0) return;
        const size_t align = pages == PageSize::Huge && bytes >= kHugePage ? kHugePage : 64;
        size_t rounded = (bytes + align - 1) & ~(align - 1);
        p_ = static_cast<uint8_t*>(std::aligned_alloc(align, rounded));
        if (!p_) throw std::bad_alloc();
        n_ = bytes;
        // Only whole huge pages inside the bytes asked for: a tail rounded
        // up to one would be resident memory that --mem does not count.
        if (align == kHugePage) advise_huge_pages(p_, bytes);
    }

    uint8_t* data() { return p_; }
    const uint8_t* data() const { return p_; }
    float* f32() { return reinterpret_cast<float*>(p_); }
    const float* f32() const { return reinterpret_cast<const float*>(p_); }
    size_t size() const { return n_; }

private:
    uint8_t* p_ = nullptr;
    size_t n_ = 0;
};

}  // namespace ms
