// Bad input: crafted headers that each break one rule must give that rule's
// message; every truncation and byte flip of a valid file must give a
// std::runtime_error (never a crash, never another exception type).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace fs = std::filesystem;
using namespace ms;

namespace {

// Serves bytes as a file without touching the disk: a memfd opened through
// /proc/self/fd, exactly what the fuzzer does.
struct MemFile {
    int fd;
    std::string path;
    explicit MemFile(const std::string& bytes) {
        fd = memfd_create("gguf", 0);
        if (fd < 0) throw std::logic_error("memfd_create failed");
        size_t done = 0;
        while (done < bytes.size()) {
            ssize_t r = write(fd, bytes.data() + done, bytes.size() - done);
            if (r <= 0) throw std::logic_error("memfd write failed");
            done += size_t(r);
        }
        path = "/proc/self/fd/" + std::to_string(fd);
    }
    ~MemFile() { close(fd); }
};

// Opens bytes; returns "" on success, the message on runtime_error. Any other
// exception escapes and fails the test.
std::string open_error(const std::string& bytes) {
    MemFile m(bytes);
    try {
        GgufFile f = GgufFile::open(m.path);
        // Touch everything, as a consumer would.
        size_t n = 0;
        for (auto& [k, v] : f.metadata()) n += k.size() + v.array_size();
        for (auto& t : f.tensors()) n += t.nbytes != 0;
        (void)n;
        return "";
    } catch (const std::runtime_error& e) {
        std::string msg = e.what();
        EXPECT_EQ(msg.rfind(m.path + ": ", 0), 0u) << "message does not start with the path: " << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
        return msg;
    }
}

// Little-endian GGUF byte builder for hand-made headers.
struct Bytes {
    std::string b;
    Bytes& u32(uint32_t v) { return raw(&v, 4); }
    Bytes& u64(uint64_t v) { return raw(&v, 8); }
    Bytes& raw(const void* p, size_t n) {
        b.append(static_cast<const char*>(p), n);
        return *this;
    }
    Bytes& str(const std::string& s) {
        u64(s.size());
        b += s;
        return *this;
    }
    Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
    }
    Bytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
    Bytes& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
        str(name).u32(uint32_t(ne.size()));
        for (uint64_t d : ne) u64(d);
        return u32(type).u64(offset);
    }
    // Pads to `align` and appends n bytes of data.
    Bytes& data(size_t n, size_t align = 32) {
        b.resize((b.size() + align - 1) / align * align, '\0');
        b.append(n, '\x5a');
        return *this;
    }
};

// A small valid file written by GgufWriter: metadata of several kinds and
// three tensors.
std::string small_valid_file() {
    std::string path = testing::TempDir() + "gguf_corrupt_" + std::to_string(getpid()) + ".gguf";
    {
        GgufWriter w(path);
        w.set_string("general.architecture", "qwen3moe");
        w.set_u32("qwen3moe.block_count", 2);
        w.set_f32("qwen3moe.rope.freq_base", 1e6f);
        w.set_strings("tokenizer.ggml.tokens", {"a", "bc", "def", "<s>"});
        w.set_i32s("tokenizer.ggml.token_type", {1, 1, 1, 3});
        w.add_tensor("token_embd.weight", GgmlType::Q8_0, {32, 4});
        w.add_tensor("blk.0.ffn_down_exps.weight", GgmlType::Q4_K, {256, 2, 2});
        w.add_tensor("output_norm.weight", GgmlType::F32, {32});
        w.begin_data();
        std::vector<uint8_t> d(4 * 34 + 4 * 144 + 128, 0x11);
        w.write_tensor_data(d.data(), d.size());
        w.finish();
    }
    std::string bytes(fs::file_size(path), '\0');
    FILE* f = fopen(path.c_str(), "rb");
    EXPECT_EQ(fread(bytes.data(), 1, bytes.size(), f), bytes.size());
    fclose(f);
    fs::remove(path);
    return bytes;
}

void expect_error(const Bytes& file, const std::string& substring) {
    std::string err = open_error(file.b);
    EXPECT_NE(err.find(substring), std::string::npos) << "expected \"" << substring << "\", got \"" << err << "\"";
}

}  // namespace

TEST(GgufCorrupt, SmallValidFileOpens) {
    std::string bytes = small_valid_file();
    EXPECT_EQ(open_error(bytes), "");
    Bytes ok;
    ok.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {4}, 0, 0).data(16, 64);
    EXPECT_EQ(open_error(ok.b), "");
}

TEST(GgufCorrupt, EveryTruncationIsAnError) {
    std::string bytes = small_valid_file();
    MemFile m(bytes);
    GgufFile f = GgufFile::open(m.path);
    uint64_t data_end = 0;
    for (auto& t : f.tensors()) data_end = std::max(data_end, t.offset + t.nbytes);
    ASSERT_LE(data_end, bytes.size());
    // Shorter than the last tensor's end: an error. From there on only
    // alignment padding is missing, which is still a complete file.
    for (size_t n = 0; n < bytes.size(); ++n) {
        std::string err = open_error(bytes.substr(0, n));
        if (n < data_end) {
            EXPECT_NE(err, "") << "truncated to " << n << " bytes but opened";
        } else {
            EXPECT_EQ(err, "") << "truncated to " << n;
        }
    }
}

TEST(GgufCorrupt, ByteFlipsNeverCrash) {
    std::string bytes = small_valid_file();
    MemFile m(bytes);
    uint64_t header_end = GgufFile::open(m.path).tensors()[0].offset;
    // Every header byte with several replacement values, then random
    // multi-byte mutations.
    size_t errors = 0, total = 0;
    for (size_t i = 0; i < header_end; ++i) {
        for (uint8_t x : {0x00, 0x01, 0x80, 0xff, 0x7f, 0x20}) {
            std::string b = bytes;
            if (uint8_t(b[i]) == x) continue;
            b[i] = char(x);
            errors += open_error(b) != "";
            ++total;
        }
    }
    std::mt19937 rng(1234);
    int rounds = getenv("MOESTREAM_SANITIZED") ? 2000 : 20000;
    for (int r = 0; r < rounds; ++r) {
        std::string b = bytes;
        int flips = 1 + int(rng() % 8);
        for (int k = 0; k < flips; ++k) b[rng() % header_end] = char(rng());
        errors += open_error(b) != "";
        ++total;
    }
    // Most mutations of the header must be caught (a few change only a
    // string's contents or a value and stay valid).
    EXPECT_GT(errors, total / 2);
}

TEST(GgufCorrupt, NotGguf) {
    expect_error(Bytes{}, "empty file");
    expect_error(Bytes{"GG"}, "not a GGUF file");
    expect_error(Bytes{"GGML and then some text"}, "not a GGUF file (bad magic)");
    expect_error(Bytes{"{\"json\": true}\n"}, "not a GGUF file (bad magic)");
    expect_error(Bytes{}.header(0, 0, 1), "unsupported GGUF version 1");
    expect_error(Bytes{}.header(0, 0, 4), "unsupported GGUF version 4");
    expect_error(Bytes{}.header(0, 0, 0x03000000), "big-endian GGUF is not supported");
    expect_error(Bytes{}.u32(0x46554747).u32(3).u32(0), "truncated: tensor count at offset 8 needs 8 bytes");

    std::string dir = testing::TempDir();
    try {
        GgufFile::open(dir);
        ADD_FAILURE() << "opened a directory";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
    }
    try {
        GgufFile::open("/nonexistent/model.gguf");
        ADD_FAILURE() << "opened a missing file";
    } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), "/nonexistent/model.gguf: cannot open: No such file or directory");
    }
}

TEST(GgufCorrupt, HugeCountsAndLengths) {
    expect_error(Bytes{}.header(UINT64_MAX, 0), "tensor count 18446744073709551615 cannot fit in a file of 24 bytes");
    expect_error(Bytes{}.header(0, uint64_t(1) << 40), "metadata count 1099511627776 cannot fit");
    expect_error(Bytes{}.header(0, 1).u64(UINT64_MAX - 3).u32(4).u32(0), "string length 18446744073709551612 at offset 24 runs past the end");
    expect_error(Bytes{}.header(0, 1).str("k").u32(8).u64(1000).raw("abc", 3), "key k: string length 1000 at offset 37 runs past the end of the file");
    // Arrays: a count the file cannot hold, and one whose byte size overflows.
    expect_error(Bytes{}.header(0, 1).str("arr").u32(9).u32(4).u64(1000000).u32(1).u32(2),
                 "key arr: array of 1000000 elements at offset 51 cannot fit in the file");
    expect_error(Bytes{}.header(0, 1).str("arr").u32(9).u32(12).u64(uint64_t(1) << 62).u64(0),
                 "key arr: array of 4611686018427387904 elements");
    expect_error(Bytes{}.header(0, 1).str("arr").u32(9).u32(8).u64(UINT64_MAX).u64(0), "key arr: array of 18446744073709551615");
    expect_error(Bytes{}.header(0, 1).str("arr").u32(9).u32(77).u64(1).u64(0), "key arr: unknown array element type 77");
    expect_error(Bytes{}.header(0, 1).str("v").u32(13).u64(0), "key v: unknown value type 13");
    // Arrays of arrays nested deeper than the reader allows.
    Bytes deep;
    deep.header(0, 1).str("deep").u32(9);
    for (int i = 0; i < 6; ++i) deep.u32(9).u64(1);
    deep.u32(4).u64(0);
    expect_error(deep, "key deep: arrays nested deeper than 4");
}

TEST(GgufCorrupt, TensorShapes) {
    expect_error(Bytes{}.header(1, 0).tensor("blk.0.attn_q.weight", {}, 0, 0).data(0),
                 "tensor blk.0.attn_q.weight: 0 dimensions (must be 1 to 4)");
    expect_error(Bytes{}.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, 0, 0).data(4), "tensor w: 5 dimensions");
    expect_error(Bytes{}.header(1, 0).tensor("w", {4, 0}, 0, 0).data(16), "tensor w: dimension 1 is 0");
    expect_error(Bytes{}.header(1, 0).tensor("w", {uint64_t(1) << 63}, 0, 0).data(0), "tensor w: dimension 0 is 9223372036854775808, too large");
    // Element count 2^32 * 2^32 overflows int64.
    expect_error(Bytes{}.header(1, 0).tensor("w", {uint64_t(1) << 32, uint64_t(1) << 32}, 0, 0).data(0),
                 "tensor w: element count overflows");
    // 2^62 F64 elements fit in int64, their 2^65 bytes do not fit in uint64.
    expect_error(Bytes{}.header(1, 0).tensor("w", {uint64_t(1) << 31, uint64_t(1) << 31}, 28, 0).data(0),
                 "tensor w: byte size overflows");
    expect_error(Bytes{}.header(1, 0).tensor("w", {uint64_t(1) << 30, 4}, 0, 0).data(16),
                 "tensor w: data of 17179869184 bytes at offset 96 lies outside the file (112 bytes)");
    expect_error(Bytes{}.header(1, 0).tensor("blk.3.ffn_up_exps.weight", {100, 2}, 12, 0).data(288),
                 "tensor blk.3.ffn_up_exps.weight: row length 100 is not a multiple of the Q4_K block size 256");
}

TEST(GgufCorrupt, TypeIds) {
    expect_error(Bytes{}.header(1, 0).tensor("blk.1.ffn_gate_exps.weight", {32}, 4, 0).data(32),
                 "tensor blk.1.ffn_gate_exps.weight: unknown or retired type id 4");
    expect_error(Bytes{}.header(1, 0).tensor("x", {32}, 36, 0).data(32), "tensor x: unknown or retired type id 36");
    expect_error(Bytes{}.header(1, 0).tensor("x", {32}, 40, 0).data(32), "tensor x: unknown or retired type id 40");
    expect_error(Bytes{}.header(1, 0).tensor("x", {32}, 0xFFFFFFFFu, 0).data(32), "unknown or retired type id 4294967295");
}

TEST(GgufCorrupt, Alignment) {
    expect_error(Bytes{}.header(0, 1).kv_u32("general.alignment", 48), "general.alignment 48 is not a power of two");
    expect_error(Bytes{}.header(0, 1).kv_u32("general.alignment", 0), "general.alignment must be a positive integer");
    expect_error(Bytes{}.header(0, 1).str("general.alignment").u32(8).str("32"), "general.alignment must be a positive integer");
    expect_error(Bytes{}.header(1, 0).tensor("w", {4}, 0, 16).data(48), "tensor w: offset 16 is not a multiple of the alignment 32");
    // With alignment 64 the data section starts at the next multiple of 64
    // (128 here); data placed at the 32-aligned spot (96) leaves the file
    // short.
    expect_error(Bytes{}.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {16}, 0, 0).data(64, 32),
                 "tensor w: data of 64 bytes at offset 128 lies outside the file (160 bytes)");
}

TEST(GgufCorrupt, RangesOverlapsAndDuplicates) {
    expect_error(Bytes{}.header(2, 0).tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 0).data(64),
                 "tensors a [96, 128) and b [96, 128) overlap");
    expect_error(Bytes{}.header(2, 0).tensor("a", {16}, 0, 32).tensor("b", {16}, 0, 0).data(96),
                 "tensors b [96, 160) and a [128, 192) overlap");
    expect_error(Bytes{}.header(1, 0).tensor("a", {8}, 0, uint64_t(-32)).data(64), "tensor a: offset 18446744073709551584 lies outside the file");
    expect_error(Bytes{}.header(1, 0).tensor("a", {8}, 0, 1024).data(64), "tensor a: offset 1024 lies outside the file");
    expect_error(Bytes{}.header(2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).data(64), "duplicate tensor a");
    expect_error(Bytes{}.header(0, 2).kv_u32("x.y", 1).kv_u32("x.y", 2), "duplicate key x.y");
    expect_error(Bytes{}.header(0, 1).kv_u32("", 1), "empty metadata key");
    expect_error(Bytes{}.header(1, 0).tensor("", {8}, 0, 0).data(32), "tensor 0 has an empty name");
}

// Counts that a big file could in principle hold must still not turn into
// big allocations: a 16 GB sparse file (zeros after the header) claiming
// hundreds of millions of entries.
TEST(GgufCorrupt, BogusCountsInABigSparseFile) {
    std::string path = testing::TempDir() + "gguf_sparse_" + std::to_string(getpid()) + ".gguf";
    auto sparse = [&](const Bytes& head) {
        FILE* f = fopen(path.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        fwrite(head.b.data(), 1, head.b.size(), f);
        fclose(f);
        fs::resize_file(path, uint64_t(16) << 30);
    };
    auto error = [&]() -> std::string {
        try {
            GgufFile::open(path);
        } catch (const std::runtime_error& e) {
            return e.what();
        }
        return "";
    };
    struct rusage before;
    getrusage(RUSAGE_SELF, &before);
    sparse(Bytes{}.header(uint64_t(1) << 28, 0));
    EXPECT_NE(error().find("tensor 0 has an empty name"), std::string::npos);
    sparse(Bytes{}.header(0, uint64_t(1) << 28));
    EXPECT_NE(error().find("empty metadata key at entry 0"), std::string::npos);
    sparse(Bytes{}.header(0, 1).str("a").u32(9).u32(8).u64(uint64_t(1) << 30));
    EXPECT_NE(error().find("key a: array of 1073741824 elements is implausibly large"), std::string::npos);
    // A million empty strings do exist in the zeros; parsing them is
    // allowed, but the next (bogus) entry must still be caught.
    sparse(Bytes{}.header(0, 2).str("a").u32(9).u32(8).u64(uint64_t(1) << 20));
    EXPECT_NE(error().find("empty metadata key at entry 1"), std::string::npos);
    struct rusage after;
    getrusage(RUSAGE_SELF, &after);
    // ru_maxrss is in KB: a million empty strings cost ~32 MB; the bogus
    // counts must add nothing near the GBs they claim.
    EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024);
    fs::remove(path);
}
