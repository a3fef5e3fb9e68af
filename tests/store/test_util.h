// Shared by the store tests: a scratch directory (under /tmp, a real block
// device here, so O_DIRECT works) removed at the end, golden model paths,
// plain file reads as the reference, and a check that a layout's read plan
// lands each expert's exact file bytes where its views point.
#pragma once
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "store/layout.h"

namespace ms::test {

struct TempDir {
    std::string path;
    explicit TempDir(const char* base = "/tmp") {
        std::string tmpl = std::string(base) + "/ms_store_XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back(0);
        if (!mkdtemp(buf.data())) abort();
        path = buf.data();
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    std::string file(const std::string& name) const { return path + "/" + name; }
};

inline std::string golden_model(const std::string& name) {
    return std::string(MOESTREAM_GOLDEN_DIR) + "/models/" + name + ".gguf";
}

inline std::vector<uint8_t> read_bytes(const std::string& path, uint64_t off, uint64_t n) {
    std::vector<uint8_t> out(n);
    std::ifstream f(path, std::ios::binary);
    f.seekg(std::streamoff(off));
    f.read(reinterpret_cast<char*>(out.data()), std::streamsize(n));
    if (uint64_t(f.gcount()) != n) out.clear();
    return out;
}

inline void copy_file(const std::string& from, const std::string& to) {
    std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
}

inline void flip_byte(const std::string& path, uint64_t off) {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(std::streamoff(off));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x5a);
    f.seekp(std::streamoff(off));
    f.write(&c, 1);
}

// Executes every placement's reads with plain file reads into a slot-sized
// buffer and compares the three views with the matrices read from the GGUF.
inline void check_placements(const GgufFile& f, const ExpertLayout& lay) {
    std::vector<uint8_t> slot(lay.slot_bytes());
    for (const ExpertLayer& L : lay.layers())
        for (int e = 0; e < L.n_expert; e++) {
            SCOPED_TRACE("layer " + std::to_string(L.layer) + " expert " + std::to_string(e));
            ExpertPlacement p = lay.place(L.layer, e);
            ASSERT_GE(p.n_reads, 1);
            ASSERT_LE(p.n_reads, 3);
            std::fill(slot.begin(), slot.end(), 0xee);
            for (int k = 0; k < p.n_reads; k++) {
                const ExpertRead& r = p.reads[k];
                EXPECT_EQ(r.offset % 4096, 0u);
                EXPECT_EQ(r.len % 4096, 0u);
                EXPECT_EQ(r.slot_offset % 4096, 0u);
                ASSERT_LE(r.slot_offset + r.len, lay.slot_bytes());
                ASSERT_LE(r.need, r.len);
                const std::string& path = lay.files()[size_t(r.file)];
                std::vector<uint8_t> got = read_bytes(path, r.offset, r.need);
                ASSERT_EQ(got.size(), r.need) << path;
                memcpy(slot.data() + r.slot_offset, got.data(), got.size());
            }
            EXPECT_EQ(p.bytes, L.expert_bytes());
            struct {
                const ExpertMatrix* m;
                uint64_t at;
            } mats[3] = {{&L.gate, p.gate}, {&L.up, p.up}, {&L.down, p.down}};
            for (auto& mv : mats) {
                std::vector<uint8_t> want(mv.m->bytes);
                f.read(mv.m->split, mv.m->offset(e), want.data(), want.size());
                ASSERT_LE(mv.at + mv.m->bytes, lay.slot_bytes());
                EXPECT_EQ(memcmp(slot.data() + mv.at, want.data(), want.size()), 0) << mv.m->tensor;
            }
        }
}

}  // namespace ms::test
