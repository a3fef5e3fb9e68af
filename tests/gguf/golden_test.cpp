// Opens every golden GGUF and checks what the golden README states about it
// independently: architecture, tensor names per family, tensor types per
// quantized file, and that every tensor lies inside its file without overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "../golden_required.h"

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

namespace {

// What golden/README.md states about one model family.
struct Family {
    std::string name, arch;
    std::set<std::string> tensors;                                   // base names
    std::map<std::string, std::map<std::string, std::set<std::string>>> types;  // TYPE -> base name -> allowed types
    std::map<std::string, std::string> every_file;  // base name -> its type in every file, the F32 source included
};

std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::vector<std::string> split(const std::string& s, const std::string& sep) {
    std::vector<std::string> out;
    size_t at = 0;
    for (;;) {
        size_t next = s.find(sep, at);
        out.push_back(s.substr(at, next - at));
        if (next == std::string::npos) return out;
        at = next + sep.size();
    }
}

// Parses the "## Families" part of the README: "### NAME (arch `ARCH`...",
// "- tensors (...): a, b, c" and "- `TYPE`: T1: a, b; T2/T3: c; everything
// else F32. Logits ...".
std::vector<Family> readme_families() {
    std::ifstream in(kGolden + "/README.md");
    std::vector<Family> fams;
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("### ", 0) == 0) {
            Family f;
            f.name = line.substr(4, line.find(' ', 4) - 4);
            size_t a = line.find("arch `");
            if (a == std::string::npos) continue;
            a += 6;
            f.arch = line.substr(a, line.find('`', a) - a);
            fams.push_back(f);
        } else if (!fams.empty() && line.rfind("- tensors (", 0) == 0) {
            for (auto& n : split(line.substr(line.find("): ") + 3), ",")) fams.back().tensors.insert(trim(n));
            // "... all F32 in `X-F32` except `NAME`, which is TYPE in every file)"
            const std::string head = line.substr(0, line.find("): "));
            size_t e = head.find("except `");
            if (e != std::string::npos) {
                e += 8;
                const std::string name = head.substr(e, head.find('`', e) - e);
                size_t w = head.find("which is ", e);
                if (w != std::string::npos) {
                    w += 9;
                    fams.back().every_file[name] = head.substr(w, head.find(' ', w) - w);
                }
            }
        } else if (!fams.empty() && line.rfind("- `", 0) == 0) {
            std::string type = line.substr(3, line.find('`', 3) - 3);
            std::string body = line.substr(line.find("`: ") + 3);
            body = body.substr(0, body.find("everything else F32"));
            auto& m = fams.back().types[type];
            for (auto& group : split(body, "; ")) {
                size_t colon = group.find(": ");
                if (colon == std::string::npos) continue;
                auto allowed = split(group.substr(0, colon), "/");
                for (auto& n : split(group.substr(colon + 2), ","))
                    if (!trim(n).empty()) m[trim(n)] = std::set<std::string>(allowed.begin(), allowed.end());
            }
        }
    }
    return fams;
}

}  // namespace

TEST(GgufGolden, ArchitectureTensorNamesAndTypesMatchTheReadme) {
    auto fams = readme_families();
    // The golden set grows as families are added: check every family the
    // README lists, and that together they name every model file there.
    ASSERT_GE(fams.size(), 11u);
    size_t files = 0;
    for (const Family& fam : fams) {
        ASSERT_FALSE(fam.tensors.empty()) << fam.name;
        std::map<std::string, std::map<std::string, std::set<std::string>>> types = fam.types;
        types["F32"];  // the source file: everything F32 but the README's "in every file" exceptions
        for (const auto& [name, type] : fam.every_file) types["F32"][name] = {type};
        for (const auto& [type, expected] : types) {
            std::string path = kGolden + "/models/" + fam.name + "-" + type + ".gguf";
            SCOPED_TRACE(path);
            ASSERT_TRUE(fs::exists(path));
            ++files;
            GgufFile f = GgufFile::open(path);
            EXPECT_EQ(f.get_string("general.architecture"), fam.arch);
            std::set<std::string> names;
            for (const GgufTensor& t : f.tensors()) {
                std::string base = base_name(t.name);
                names.insert(base);
                auto it = expected.find(base);
                std::set<std::string> allowed = it == expected.end() ? std::set<std::string>{"F32"} : it->second;
                EXPECT_TRUE(allowed.count(ms::type_name(t.type))) << t.name << " is " << ms::type_name(t.type);
            }
            EXPECT_EQ(names, fam.tensors);
            for (const auto& [base, allowed] : expected) EXPECT_TRUE(names.count(base)) << base;
        }
    }
    size_t on_disk = 0;
    for (auto& e : fs::directory_iterator(kGolden + "/models"))
        if (e.path().extension() == ".gguf") ++on_disk;
    EXPECT_EQ(files, on_disk);  // every model file in golden/models belongs to a listed family and type
}

TEST(GgufGolden, SpotFacts) {
    GgufFile q = GgufFile::open(kGolden + "/models/qwen3moe-Q4_K_M.gguf");
    EXPECT_EQ(q.tensor("blk.0.attn_q.weight")->type, GgmlType::Q4_K);
    EXPECT_EQ(q.tensor("output.weight")->type, GgmlType::Q6_K);
    EXPECT_EQ(q.get_int("qwen3moe.embedding_length", 0), 256);
    EXPECT_EQ(q.get_int("qwen3moe.block_count", 0), 3);
    EXPECT_EQ(q.get_int("qwen3moe.expert_count", 0), 8);
    EXPECT_EQ(q.get_int("qwen3moe.expert_used_count", 0), 2);
    EXPECT_EQ(q.get_string("tokenizer.ggml.pre"), "qwen2");
    // Expert tensors: [n_embd, expert FFN, experts] for gate.
    const GgufTensor* g = q.tensor("blk.0.ffn_gate_exps.weight");
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->n_dims, 3u);
    EXPECT_EQ(g->ne[0], 256);
    EXPECT_EQ(g->ne[1], 256);
    EXPECT_EQ(g->ne[2], 8);
    EXPECT_EQ(g->nbytes, 256u / 256 * 144 * 256 * 8);

    GgufFile oss = GgufFile::open(kGolden + "/models/gpt-oss-MXFP4_MOE.gguf");
    EXPECT_EQ(oss.tensor("blk.0.ffn_up_exps.weight")->type, GgmlType::MXFP4);
    EXPECT_EQ(oss.get_int("gpt-oss.block_count", 0), 4);

    GgufFile m = GgufFile::open(kGolden + "/models/mixtral-Q8_0.gguf");
    EXPECT_EQ(m.get_string("general.architecture"), "llama");
    EXPECT_EQ(m.get_bool("tokenizer.ggml.add_bos_token", false), true);
}

TEST(GgufGolden, VocabFilesAndOpenTime) {
    std::string path = kGolden + "/tokenizer/qwen3-vocab.gguf";
    auto t0 = std::chrono::steady_clock::now();
    GgufFile f = GgufFile::open(path);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens").size(), 151669u);
    EXPECT_EQ(f.get_ints("tokenizer.ggml.token_type").size(), 151669u);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen2");
    EXPECT_TRUE(f.tensors().empty());
    // How long the open takes is printed, not asserted: a shared 2-core CI
    // machine under ctest -j2 is no place for timing (~20 ms when quiet).
    std::printf("qwen3-vocab.gguf opened in %.1f ms\n", ms);

    GgufFile spm = GgufFile::open(kGolden + "/tokenizer/ggml-vocab-llama-spm.gguf");
    EXPECT_EQ(spm.get_string("tokenizer.ggml.model"), "llama");
    EXPECT_EQ(spm.get_strings("tokenizer.ggml.tokens").size(), spm.get_floats("tokenizer.ggml.scores").size());
}

TEST(GgufGolden, BaseNames) { EXPECT_EQ(base_name("blk.1.attn_k.bias"), "attn_k.bias"); }
