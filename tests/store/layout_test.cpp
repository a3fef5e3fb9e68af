// Expert byte ranges against the golden GGUFs: every expert's gate/up/down
// slice is recomputed here from the tensor table alone (offset + e * nbytes /
// n_expert, halves of a fused gate_up), and the bytes an ExpertLayout read
// plan puts in a slot are compared with the file read directly.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "gguf/gguf.h"
#include "store/layout.h"
#include "test_util.h"
#include "../golden_required.h"

namespace ms {
namespace {

using test::golden_model;
using test::read_bytes;

const char* kModels[] = {"qwen3moe-Q4_K_M", "qwen3moe-F32",   "qwen3moe-MXFP4_MOE", "gemma4-Q8_0",
                         "gpt-oss-MXFP4_MOE", "deepseek2-lite-Q8_0", "mixtral-Q8_0", "glm4moe-Q8_0",
                         "qwen35moe-Q8_0",  "olmoe-Q8_0"};

struct Slice {
    int split;
    uint64_t offset, bytes;
};
// (block, part) -> the tensor; part: gate, up, down, gate_up.
std::map<std::pair<int, std::string>, const GgufTensor*> expert_tensors(const GgufFile& f) {
    std::map<std::pair<int, std::string>, const GgufTensor*> m;
    for (const GgufTensor& t : f.tensors()) {
        for (const char* part : {"gate_up", "gate", "up", "down"}) {
            std::string suffix = std::string(".ffn_") + part + "_exps.weight";
            if (t.name.size() > suffix.size() && t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
                t.name.rfind("blk.", 0) == 0) {
                m[{std::stoi(t.name.substr(4)), part}] = &t;
                break;
            }
        }
    }
    return m;
}

Slice expected(const std::map<std::pair<int, std::string>, const GgufTensor*>& m, int blk, const std::string& part,
               int e) {
    auto it = m.find({blk, part});
    if (it == m.end()) {
        // gate and up as halves of a fused gate_up tensor
        const GgufTensor* t = m.at({blk, "gate_up"});
        uint64_t per = t->nbytes / uint64_t(t->ne[2]);
        uint64_t half = per / 2;
        return {t->split, t->offset + uint64_t(e) * per + (part == "up" ? half : 0), half};
    }
    const GgufTensor* t = it->second;
    uint64_t per = t->nbytes / uint64_t(t->ne[2]);
    return {t->split, t->offset + uint64_t(e) * per, per};
}

TEST(Layout, GoldenRangesMatchTensorTable) {
    for (const char* name : kModels) {
        SCOPED_TRACE(name);
        GgufFile f = GgufFile::open(golden_model(name));
        auto tensors = expert_tensors(f);
        std::vector<ExpertLayer> layers = find_expert_layers(f);
        int moe_blocks = 0;
        for (const ExpertLayer& L : layers) {
            bool has = tensors.count({L.layer, "down"}) > 0;
            ASSERT_EQ(has, L.n_expert > 0) << "block " << L.layer;
            if (!has) continue;
            moe_blocks++;
            EXPECT_EQ(L.n_expert, int(tensors.at({L.layer, "down"})->ne[2]));
            for (int e = 0; e < L.n_expert; e++) {
                Slice g = expected(tensors, L.layer, "gate", e), u = expected(tensors, L.layer, "up", e),
                      d = expected(tensors, L.layer, "down", e);
                EXPECT_EQ(L.gate.offset(e), g.offset);
                EXPECT_EQ(L.gate.bytes, g.bytes);
                EXPECT_EQ(L.up.offset(e), u.offset);
                EXPECT_EQ(L.up.bytes, u.bytes);
                EXPECT_EQ(L.down.offset(e), d.offset);
                EXPECT_EQ(L.down.bytes, d.bytes);
            }
        }
        EXPECT_GT(moe_blocks, 0);
    }
}

TEST(Layout, Qwen3moeQ4KMSizesFromTheFormat) {
    // README: n_embd 256, expert FFN 256; gate/up Q4_K (144-byte blocks of
    // 256), down Q4_K or Q6_K (210-byte blocks) depending on the layer.
    GgufFile f = GgufFile::open(golden_model("qwen3moe-Q4_K_M"));
    std::vector<ExpertLayer> layers = find_expert_layers(f);
    ASSERT_EQ(layers.size(), 3u);
    for (const ExpertLayer& L : layers) {
        EXPECT_EQ(L.n_expert, 8);
        EXPECT_EQ(L.gate.bytes, 256u * 144u);
        EXPECT_EQ(L.up.bytes, 256u * 144u);
        EXPECT_TRUE(L.down.bytes == 256u * 144u || L.down.bytes == 256u * 210u) << L.down.bytes;
    }
}

TEST(Layout, GgufPlacementsLandTheRightBytes) {
    for (const char* name : kModels) {
        SCOPED_TRACE(name);
        GgufFile f = GgufFile::open(golden_model(name));
        ExpertLayout lay = ExpertLayout::gguf(f, find_expert_layers(f));
        EXPECT_EQ(lay.kind(), LayoutKind::Gguf);
        EXPECT_EQ(lay.slot_bytes() % 4096, 0u);
        test::check_placements(f, lay);
    }
}

TEST(Layout, FusedGateUpIsOneRead) {
    GgufFile f = GgufFile::open(golden_model("gemma4-Q8_0"));
    ExpertLayout lay = ExpertLayout::gguf(f, find_expert_layers(f));
    for (const ExpertLayer& L : lay.layers())
        if (L.n_expert > 0) {
            ExpertPlacement p = lay.place(L.layer, 1);
            EXPECT_EQ(p.n_reads, 2);  // gate|up run, down
            EXPECT_EQ(p.up, p.gate + L.gate.bytes);
        }
}

TEST(Layout, MissingUpTensorIsAClearError) {
    test::TempDir dir;
    std::string path = dir.file("broken.gguf");
    {
        GgufWriter w(path);
        w.set_string("general.architecture", "qwen3moe");
        w.add_tensor("blk.0.ffn_gate_exps.weight", GgmlType::F32, {8, 4, 2});
        w.add_tensor("blk.0.ffn_down_exps.weight", GgmlType::F32, {4, 8, 2});
        w.begin_data();
        std::vector<float> z(64, 0.f);
        w.write_tensor_data(z.data(), z.size() * 4);
        w.write_tensor_data(z.data(), z.size() * 4);
        w.finish();
    }
    GgufFile f = GgufFile::open(path);
    try {
        find_expert_layers(f);
        FAIL() << "expected an error";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up_exps missing"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
}

TEST(Layout, TruncatedGgufIsAClearError) {
    test::TempDir dir;
    std::string path = dir.file("cut.gguf");
    test::copy_file(golden_model("qwen3moe-Q8_0"), path);
    ASSERT_EQ(truncate(path.c_str(), 200000), 0);
    try {
        GgufFile f = GgufFile::open(path);
        ExpertLayout lay = ExpertLayout::gguf(f, find_expert_layers(f));
        FAIL() << "a truncated GGUF was accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace ms
