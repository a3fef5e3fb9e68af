// The drive benchmark's data file: unique, incompressible 4 KiB blocks (each
// one a pseudo-random stream seeded by its own index), so neither a
// compressing or deduplicating drive nor any cache can serve a read that was
// never made before. A header remembers how far earlier runs have read, so
// each run, and each test inside a run, gets a slice nobody has read yet.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace ms {

constexpr uint64_t kBenchBlock = 4096;

// Fills dst (n bytes, a multiple of 8) with the content of the file at byte
// offset `offset` (a multiple of 8): block b = offset / 4096 is a splitmix64
// stream seeded with seed ^ b.
void fill_bench_bytes(uint8_t* dst, uint64_t n, uint64_t offset, uint64_t seed);

struct BenchFile {
    std::string path;
    uint64_t size = 0;       // whole file, header included
    uint64_t seed = 0;
    uint64_t cursor = 0;     // first byte no run has read yet (>= kBenchBlock)
    bool created = false;    // this run wrote it
    bool wrapped = false;    // a slice had to reuse bytes an earlier run read

    uint64_t data_begin() const { return kBenchBlock; }
    uint64_t data_bytes() const { return size - kBenchBlock; }
    uint64_t fresh_bytes() const { return size - cursor; }

    // Hands out the next `bytes` (rounded up to 4 KiB) of never-read data;
    // when the file runs out, starts again after the header and sets wrapped.
    // Throws when bytes exceed the file's data.
    uint64_t take(uint64_t bytes);
    // Writes the cursor back into the header so the next run starts after it.
    void save_cursor() const;
};

using BytesProgress = std::function<void(uint64_t done, uint64_t total)>;

// Opens PATH when it holds a valid bench file of exactly `size` bytes (size 0:
// any size), checking the header and two data blocks against the generator;
// otherwise creates it (O_DIRECT writes, so the page cache stays clean),
// refusing when it would leave less than 1 GiB free on the file system.
BenchFile open_or_create_bench_file(const std::string& path, uint64_t size, const BytesProgress& progress);

// Free bytes on the file system that holds PATH (or its directory).
uint64_t free_bytes_at(const std::string& path);

}  // namespace ms
