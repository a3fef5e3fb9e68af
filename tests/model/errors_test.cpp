// Bad models give one clear error naming the problem: an unknown
// architecture, a missing tensor, a tensor of the wrong shape (expected vs
// actual), a tensor type the kernels cannot run, broken hyper-parameters.
// Each case is the golden qwen3moe-F32 model rewritten with one defect.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <unistd.h>
#include <vector>

#include "gguf/gguf.h"
#include "model/model.h"
#include "../golden_required.h"

namespace ms {
namespace {

const std::string kSource = std::string(MOESTREAM_GOLDEN_DIR) + "/models/qwen3moe-F32.gguf";

struct Edit {
    std::function<void(std::string& key, GgufValue& v)> meta;            // may rewrite a value
    std::function<bool(std::string& name, GgmlType& type, std::vector<int64_t>& ne)> tensor;  // false drops it
};

// A copy of the source model with `edit` applied; tensors whose type or
// shape changed get zero bytes of the new size.
std::string rewrite(const std::string& name, const Edit& edit, const std::string& source = kSource) {
    const std::string path = ::testing::TempDir() + "/errors_" + std::to_string(getpid()) + "_" + name + ".gguf";
    GgufFile src = GgufFile::open(source);
    GgufWriter w(path);
    for (const auto& [key, value] : src.metadata()) {
        std::string k = key;
        GgufValue v = value;
        if (edit.meta) edit.meta(k, v);
        w.set_value(k, v);
    }
    struct Out {
        const GgufTensor* src;
        bool same;
        size_t bytes;
    };
    std::vector<Out> out;
    for (const GgufTensor& t : src.tensors()) {
        std::string n = t.name;
        GgmlType type = t.type;
        std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
        if (edit.tensor && !edit.tensor(n, type, ne)) continue;
        w.add_tensor(n, type, ne);
        int64_t rows = 1;
        for (size_t i = 1; i < ne.size(); i++) rows *= ne[i];
        const size_t bytes = row_bytes(type, ne[0]) * size_t(rows);
        out.push_back({&t, type == t.type && bytes == t.nbytes, bytes});
    }
    w.begin_data();
    for (const Out& o : out) {
        std::vector<uint8_t> data(o.bytes, 0);
        if (o.same) src.read_tensor(*o.src, data.data());
        w.write_tensor_data(data.data(), data.size());
    }
    w.finish();
    return path;
}

std::string open_error(const std::string& path) {
    try {
        GgufFile f = GgufFile::open(path);
        auto m = Model::open(f);
        m->load_resident(f);
    } catch (const std::runtime_error& e) {
        std::filesystem::remove(path);
        return e.what();
    }
    std::filesystem::remove(path);
    return "";
}

TEST(ModelErrors, SourceOpens) {
    GgufFile f = GgufFile::open(kSource);
    auto m = Model::open(f);
    m->load_resident(f);
    EXPECT_EQ(m->config().n_layer, 3);
    EXPECT_EQ(m->config().n_expert, 8);
    EXPECT_EQ(m->config().n_expert_used, 2);
    EXPECT_EQ(m->config().head_dim, 64);
    EXPECT_EQ(m->expert_layers().size(), 3u);
    EXPECT_EQ(m->expert_layers()[1].gate.tensor, "blk.1.ffn_gate_exps.weight");
}

TEST(ModelErrors, UnknownArchitectureIsNamed) {
    Edit e;
    e.meta = [](std::string& k, GgufValue& v) {
        if (k == "general.architecture") v.s = "futuremoe";
    };
    const std::string err = open_error(rewrite("arch", e));
    EXPECT_NE(err.find("unknown architecture 'futuremoe'"), std::string::npos) << err;
    EXPECT_NE(err.find("qwen3moe"), std::string::npos) << err;
}

TEST(ModelErrors, MissingTensorIsNamed) {
    Edit e;
    e.tensor = [](std::string& n, GgmlType&, std::vector<int64_t>&) { return n != "blk.1.attn_k_norm.weight"; };
    const std::string err = open_error(rewrite("missing", e));
    EXPECT_NE(err.find("missing tensor blk.1.attn_k_norm.weight"), std::string::npos) << err;
}

TEST(ModelErrors, MissingExpertTensorIsNamed) {
    Edit e;
    e.tensor = [](std::string& n, GgmlType&, std::vector<int64_t>&) { return n != "blk.2.ffn_down_exps.weight"; };
    const std::string err = open_error(rewrite("missing_exps", e));
    EXPECT_NE(err.find("missing tensor blk.2.ffn_down_exps.weight"), std::string::npos) << err;
}

TEST(ModelErrors, WrongShapeNamesExpectedAndActual) {
    Edit e;
    e.tensor = [](std::string& n, GgmlType&, std::vector<int64_t>& ne) {
        if (n == "blk.0.attn_q.weight") ne[1] = 128;
        return true;
    };
    const std::string err = open_error(rewrite("shape", e));
    EXPECT_NE(err.find("blk.0.attn_q.weight has shape [256, 128], expected [256, 256]"), std::string::npos) << err;
}

TEST(ModelErrors, WrongExpertCountInShape) {
    Edit e;
    e.tensor = [](std::string& n, GgmlType&, std::vector<int64_t>& ne) {
        if (n == "blk.0.ffn_up_exps.weight") ne[2] = 4;
        return true;
    };
    const std::string err = open_error(rewrite("exp_shape", e));
    EXPECT_NE(err.find("blk.0.ffn_up_exps.weight has shape [256, 256, 4], expected [256, 256, 8]"),
              std::string::npos)
        << err;
}

// deepseek4's token -> experts table must be I32 (it is in every golden
// file, F32 ones included), and its per-layer metadata must cover every layer.
const std::string kDeepseek4 = std::string(MOESTREAM_GOLDEN_DIR) + "/models/deepseek4-F32.gguf";

TEST(ModelErrors, Deepseek4TokenTableMustBeI32) {
    Edit e;
    e.tensor = [](std::string& n, GgmlType& t, std::vector<int64_t>&) {
        if (n == "blk.1.ffn_gate_tid2eid.weight") t = GgmlType::F32;
        return true;
    };
    const std::string err = open_error(rewrite("ds4_table", e, kDeepseek4));
    EXPECT_NE(err.find("blk.1.ffn_gate_tid2eid.weight has type F32, expected I32"), std::string::npos) << err;
}

TEST(ModelErrors, Deepseek4PerLayerMetadataIsNamed) {
    Edit e;
    e.meta = [](std::string& k, GgufValue& v) {
        if (k == "deepseek4.attention.compress_ratios") v.ai = {0, 4};
    };
    const std::string err = open_error(rewrite("ds4_ratios", e, kDeepseek4));
    EXPECT_NE(err.find("deepseek4.attention.compress_ratios has 2 values for 4 layers"), std::string::npos) << err;
}

TEST(ModelErrors, UnsupportedTypeIsNamed) {
    Edit e;
    e.tensor = [](std::string& n, GgmlType& t, std::vector<int64_t>&) {
        if (n == "blk.0.attn_v.weight") t = GgmlType::IQ2_XXS;
        return true;
    };
    const std::string err = open_error(rewrite("type", e));
    EXPECT_NE(err.find("blk.0.attn_v.weight"), std::string::npos) << err;
    EXPECT_NE(err.find("IQ2_XXS"), std::string::npos) << err;
}

TEST(ModelErrors, QuantizedNormIsRejected) {
    Edit e;
    e.tensor = [](std::string& n, GgmlType& t, std::vector<int64_t>&) {
        if (n == "output_norm.weight") t = GgmlType::F16;
        return true;
    };
    const std::string err = open_error(rewrite("norm_type", e));
    EXPECT_NE(err.find("output_norm.weight has type F16, expected F32"), std::string::npos) << err;
}

TEST(ModelErrors, BadHyperParametersAreNamed) {
    Edit e;
    e.meta = [](std::string& k, GgufValue& v) {
        if (k == "qwen3moe.attention.head_count_kv") v.i = 3;  // 4 heads are not a multiple of 3
    };
    const std::string err = open_error(rewrite("heads", e));
    EXPECT_NE(err.find("head_count 4 is not a multiple of head_count_kv 3"), std::string::npos) << err;

    Edit drop;
    drop.meta = [](std::string& k, GgufValue&) {
        if (k == "qwen3moe.block_count") k = "qwen3moe.block_count_renamed";
    };
    const std::string err2 = open_error(rewrite("blocks", drop));
    EXPECT_NE(err2.find("qwen3moe.block_count"), std::string::npos) << err2;
}

// The hybrid families' own metadata and tensors (golden qwen35moe-F32).
TEST(ModelErrors, DeltaNetDefectsAreNamed) {
    const std::string q35 = std::string(MOESTREAM_GOLDEN_DIR) + "/models/qwen35moe-F32.gguf";
    Edit heads;
    heads.meta = [](std::string& k, GgufValue& v) {
        if (k == "qwen35moe.ssm.time_step_rank") v.i = 3;
    };
    std::string err = open_error(rewrite("ssm_heads", heads, q35));
    EXPECT_NE(err.find("time_step_rank 3 must be a multiple of group_count 2"), std::string::npos) << err;

    Edit conv;
    conv.tensor = [](std::string& n, GgmlType&, std::vector<int64_t>&) { return n != "blk.1.ssm_conv1d.weight"; };
    err = open_error(rewrite("ssm_conv", conv, q35));
    EXPECT_NE(err.find("missing tensor blk.1.ssm_conv1d.weight"), std::string::npos) << err;

    Edit sections;
    sections.meta = [](std::string& k, GgufValue& v) {
        if (k == "qwen35moe.rope.dimension_count") v.i = 32;
    };
    err = open_error(rewrite("sections", sections, q35));
    EXPECT_NE(err.find("rope.dimension_sections cover 16 dims, rope.dimension_count is 32"), std::string::npos)
        << err;
}

// glm-dsa's sparse attention metadata (golden glm-dsa-F32: indexer in layer
// 0 only, attention.indexer.types [true, false, false]).
TEST(ModelErrors, GlmDsaIndexerDefectsAreNamed) {
    const std::string dsa = std::string(MOESTREAM_GOLDEN_DIR) + "/models/glm-dsa-F32.gguf";
    // Without the types key every layer has its own indexer: layer 1 lacks it.
    Edit no_types;
    no_types.meta = [](std::string& k, GgufValue&) {
        if (k == "glm-dsa.attention.indexer.types") k = "glm-dsa.attention.indexer.unknown";
    };
    std::string err = open_error(rewrite("dsa_types", no_types, dsa));
    EXPECT_NE(err.find("missing tensor blk.1.indexer.attn_q_b.weight"), std::string::npos) << err;

    Edit first_off;
    first_off.meta = [](std::string& k, GgufValue& v) {
        if (k == "glm-dsa.attention.indexer.types") v.ai[0] = 0;
    };
    err = open_error(rewrite("dsa_first", first_off, dsa));
    EXPECT_NE(err.find("layer 0 has no indexer"), std::string::npos) << err;

    Edit top_k;
    top_k.meta = [](std::string& k, GgufValue& v) {
        if (k == "glm-dsa.attention.indexer.top_k") v.i = 0;
    };
    err = open_error(rewrite("dsa_top_k", top_k, dsa));
    EXPECT_NE(err.find("glm-dsa.attention.indexer.top_k 0 is out of range"), std::string::npos) << err;

    Edit key;
    key.tensor = [](std::string& n, GgmlType&, std::vector<int64_t>&) { return n != "blk.0.indexer.k_norm.bias"; };
    err = open_error(rewrite("dsa_norm", key, dsa));
    EXPECT_NE(err.find("missing tensor blk.0.indexer.k_norm.bias"), std::string::npos) << err;
}

}  // namespace
}  // namespace ms
