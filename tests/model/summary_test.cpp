// model/summary against every golden file: facts from the golden README
// (architecture, layers, experts, widths, types, tied head, NextN block) and
// byte sums recomputed here from the tensor table by name.
#include "model/summary.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>
#include "../golden_required.h"

using namespace ms;

namespace {

const std::string kModels = std::string(MOESTREAM_GOLDEN_DIR) + "/models/";
const std::string kVocab = std::string(MOESTREAM_GOLDEN_DIR) + "/tokenizer/";

struct Facts {
    const char* file;
    const char* arch;
    int n_layer, n_embd, n_expert, n_used, moe_layers, ranges;
    bool tied;    // no output.weight: token_embd is resident
    int nextn;    // trailing NextN blocks
};

// From ../shared/golden/README.md.
const Facts kFacts[] = {
    {"qwen3moe-F32", "qwen3moe", 3, 256, 8, 2, 3, 3, false, 0},
    {"qwen3moe-Q4_K_M", "qwen3moe", 3, 256, 8, 2, 3, 3, false, 0},
    {"qwen3moe-IQ4_XS", "qwen3moe", 3, 256, 8, 2, 3, 3, false, 0},
    {"qwen3moe-MXFP4_MOE", "qwen3moe", 3, 256, 8, 2, 3, 3, false, 0},
    {"qwen3moe-BF16", "qwen3moe", 3, 256, 8, 2, 3, 3, false, 0},
    {"mixtral-Q8_0", "llama", 3, 128, 8, 2, 3, 3, false, 0},
    {"olmoe-Q8_0", "olmoe", 3, 128, 8, 2, 3, 3, false, 0},
    {"qwen2moe-Q8_0", "qwen2moe", 3, 128, 8, 2, 3, 3, false, 0},
    {"gpt-oss-MXFP4_MOE", "gpt-oss", 4, 64, 8, 2, 4, 3, false, 0},
    {"deepseek2-lite-Q8_0", "deepseek2", 3, 64, 8, 2, 2, 3, false, 0},
    {"deepseek3-Q8_0", "deepseek2", 3, 64, 16, 4, 2, 3, false, 0},
    {"gemma4-Q8_0", "gemma4", 4, 64, 8, 4, 4, 2, true, 0},
    {"gemma4-ple-Q8_0", "gemma4", 4, 64, 8, 4, 4, 2, true, 0},
    {"qwen35moe-Q8_0", "qwen35moe", 4, 64, 8, 2, 4, 3, false, 0},
    {"glm4moe-Q8_0", "glm4moe", 4, 64, 8, 2, 2, 3, false, 1},
};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The class of a tensor, decided here from its name alone.
int expected_class(const std::string& name, bool tied, int nextn_layer) {
    if (nextn_layer >= 0 && name.rfind("blk." + std::to_string(nextn_layer) + ".", 0) == 0) return 3;
    if (contains(name, "_exps.weight")) return 1;
    if (name == "per_layer_token_embd.weight" || (name == "token_embd.weight" && !tied)) return 2;
    return 0;
}

}  // namespace

TEST(Summary, GoldenModelsMatchReadmeFacts) {
    for (const Facts& f : kFacts) {
        SCOPED_TRACE(f.file);
        GgufFile g = GgufFile::open(kModels + f.file + ".gguf");
        ModelSummary s = summarize_model(g);
        EXPECT_EQ(s.hp.arch, f.arch);
        EXPECT_EQ(s.hp.n_layer, f.n_layer);
        EXPECT_EQ(s.hp.n_embd, f.n_embd);
        EXPECT_EQ(s.hp.n_expert, f.n_expert);
        EXPECT_EQ(s.hp.n_expert_used, f.n_used);
        EXPECT_EQ(int(s.moe_layers.size()), f.moe_layers);
        EXPECT_EQ(s.expert_ranges_max, f.ranges);
        EXPECT_EQ(s.hp.n_nextn, f.nextn);
        EXPECT_EQ(s.version, 3u);

        // Bytes and parameters by class, summed here by name pattern.
        int nextn_layer = f.nextn ? f.n_layer - 1 : -1;
        uint64_t bytes[4] = {}, params[4] = {}, total = 0;
        for (const GgufTensor& t : g.tensors()) {
            int c = expected_class(t.name, f.tied, nextn_layer);
            bytes[c] += t.nbytes;
            params[c] += uint64_t(t.n_elements());
            total += t.nbytes;
        }
        for (int c = 0; c < 4; ++c) {
            EXPECT_EQ(s.bytes_by_class[c], bytes[c]) << "class " << tensor_class_name(TensorClass(c));
            EXPECT_EQ(s.params_by_class[c], params[c]);
        }
        EXPECT_EQ(s.tensor_bytes, total);
        EXPECT_GT(bytes[1], 0u);

        // Bytes per expert: each layer's *_exps.weight tensors divided by their expert count.
        for (const MoeLayer& l : s.moe_layers) {
            uint64_t per = 0;
            std::string prefix = "blk." + std::to_string(l.layer) + ".";
            for (const GgufTensor& t : g.tensors())
                if (t.name.rfind(prefix, 0) == 0 && contains(t.name, "_exps.weight"))
                    per += t.nbytes / uint64_t(t.ne[2]);
            EXPECT_EQ(l.expert_bytes, per) << "layer " << l.layer;
            EXPECT_EQ(l.n_expert, f.n_expert);
        }

        // Type mix: tensor counts per type add up to the file's.
        int n = 0;
        uint64_t type_bytes = 0;
        for (const TypeUse& u : s.types) {
            n += u.tensors;
            type_bytes += u.bytes;
        }
        EXPECT_EQ(n, int(g.tensors().size()));
        EXPECT_EQ(type_bytes, total);
    }
}

TEST(Summary, ExpertByteRangesHoldTheExpertsBytes) {
    // Expert 5 of layer 1 read through its ranges equals the slices cut from
    // the whole tensors.
    for (const char* file : {"qwen3moe-Q4_K_M", "gemma4-Q8_0", "gpt-oss-MXFP4_MOE"}) {
        SCOPED_TRACE(file);
        GgufFile g = GgufFile::open(kModels + file + ".gguf");
        ModelSummary s = summarize_model(g);
        const MoeLayer& l = s.moe_layers.at(1);
        std::vector<uint8_t> via_ranges;
        for (const ByteRange& r : expert_byte_ranges(g, l, 5)) {
            size_t at = via_ranges.size();
            via_ranges.resize(at + r.size);
            g.read(r.split, r.offset, via_ranges.data() + at, r.size);
        }
        std::vector<uint8_t> via_tensors;
        std::vector<const GgufTensor*> ts;
        for (size_t i : l.tensors) ts.push_back(&g.tensors()[i]);
        std::sort(ts.begin(), ts.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
        for (const GgufTensor* t : ts) {
            std::vector<uint8_t> all(t->nbytes);
            g.read_tensor(*t, all.data());
            uint64_t slice = t->nbytes / uint64_t(t->ne[2]);
            via_tensors.insert(via_tensors.end(), all.begin() + long(5 * slice), all.begin() + long(6 * slice));
        }
        EXPECT_EQ(via_ranges.size(), l.expert_bytes);
        EXPECT_EQ(via_ranges, via_tensors);
    }
}

TEST(Summary, SideTensorsAndSpecialClasses) {
    // gpt-oss: per-expert biases (gate, up, down) stay resident beside the experts.
    GgufFile oss = GgufFile::open(kModels + "gpt-oss-MXFP4_MOE.gguf");
    ModelSummary so = summarize_model(oss);
    uint64_t bias = 0;
    for (const GgufTensor& t : oss.tensors())
        if (contains(t.name, "_exps.bias")) bias += t.nbytes;
    EXPECT_EQ(so.expert_side_bytes, bias);
    EXPECT_EQ(so.moe_layers[0].side_tensors.size(), 3u);

    // gemma4-ple: tied head makes token_embd resident; per-layer embeddings are rows.
    GgufFile ple = GgufFile::open(kModels + "gemma4-ple-Q8_0.gguf");
    ModelSummary sp = summarize_model(ple);
    for (size_t i = 0; i < ple.tensors().size(); ++i) {
        const std::string& n = ple.tensors()[i].name;
        if (n == "token_embd.weight") {
            EXPECT_EQ(sp.tensor_class[i], TensorClass::Resident);
        }
        if (n == "per_layer_token_embd.weight") {
            EXPECT_EQ(sp.tensor_class[i], TensorClass::EmbeddingRows);
        }
    }
    EXPECT_EQ(sp.hp.n_head_kv_layer, (std::vector<int64_t>{2, 1, 2, 1}));

    // glm4moe: blk.3 is the NextN block, unused by decoding.
    GgufFile glm = GgufFile::open(kModels + "glm4moe-Q8_0.gguf");
    ModelSummary sg = summarize_model(glm);
    EXPECT_GT(sg.bytes_by_class[int(TensorClass::Unused)], 0u);
    for (const MoeLayer& l : sg.moe_layers) EXPECT_LT(l.layer, 3);
    EXPECT_EQ(sg.hp.n_dense_lead, 1);
    EXPECT_EQ(sg.hp.n_shared_expert, 1);
}

TEST(Summary, QuantMixOfQ4KM) {
    // README: Q4_K for attn_q, gate/up experts, token_embd; Q4_K/Q6_K ffn_down;
    // Q5_K attn_output; Q6_K output; Q8_0 attn_k, attn_v; the rest F32.
    GgufFile g = GgufFile::open(kModels + "qwen3moe-Q4_K_M.gguf");
    ModelSummary s = summarize_model(g);
    auto count = [&](GgmlType t) {
        for (const TypeUse& u : s.types)
            if (u.type == t) return u.tensors;
        return 0;
    };
    int q6 = 0;
    for (const GgufTensor& t : g.tensors()) q6 += t.type == GgmlType::Q6_K;
    EXPECT_EQ(count(GgmlType::Q6_K), q6);
    EXPECT_GE(q6, 2);  // output + at least one ffn_down_exps
    EXPECT_EQ(count(GgmlType::Q5_K), 3);  // attn_output of 3 layers
    EXPECT_EQ(count(GgmlType::Q8_0), 6);  // attn_k and attn_v of 3 layers
    EXPECT_EQ(count(GgmlType::Q4_K), 3 * 3 + 1 + (3 - (q6 - 1)));
}

TEST(Summary, KvCacheFormula) {
    // qwen3moe: 3 layers x 2 KV heads x (64 + 64) x 512 tokens (its context) x 2 bytes.
    GgufFile q = GgufFile::open(kModels + "qwen3moe-F32.gguf");
    ModelSummary s = summarize_model(q);
    EXPECT_EQ(s.mem.ctx, 512);
    EXPECT_EQ(s.mem.kv_bytes, 3ull * 2 * 128 * 512 * 2);
    EXPECT_EQ(summarize_model(q, 100).mem.kv_bytes, 3ull * 2 * 128 * 100 * 2);
    uint64_t resident = s.bytes_by_class[0];
    EXPECT_EQ(s.mem.ram_streaming, resident + s.mem.kv_bytes + 2 * s.expert_bytes_max + 4 * 499);

    // gemma4: layers 0, 2 sliding (window 8, 2 KV heads, 32 + 32); layers 1, 3
    // full (1 KV head, 64 + 64) over 1024 tokens.
    GgufFile gm = GgufFile::open(kModels + "gemma4-Q8_0.gguf");
    EXPECT_EQ(summarize_model(gm).mem.kv_bytes, 2ull * (2 * 64 * 8 * 2) + 2ull * (1 * 128 * 1024 * 2));

    // gpt-oss: layers 0, 2 sliding (8 tokens), 1, 3 full; 2 KV heads x (64 + 64); ctx min(4096, 4096).
    GgufFile oss = GgufFile::open(kModels + "gpt-oss-Q8_0.gguf");
    EXPECT_EQ(summarize_model(oss).mem.kv_bytes, 2ull * (2 * 128 * 8 * 2) + 2ull * (2 * 128 * 4096 * 2));

    // deepseek2 MLA: kv_lora_rank 32 + rope 16 per token, 3 layers, 512 tokens.
    GgufFile ds = GgufFile::open(kModels + "deepseek2-lite-Q8_0.gguf");
    EXPECT_EQ(summarize_model(ds).mem.kv_bytes, 3ull * 48 * 512 * 2);
    // Full K/V: 4 heads of key_length_mla 48 + value_length_mla 32 (README).
    EXPECT_EQ(summarize_model(ds).mem.kv_token_bytes, 3ull * 48 * 2);
    EXPECT_EQ(summarize_model(ds).mem.full_kv_token_bytes, 3ull * 4 * (48 + 32) * 2);

    // glm-dsa: 3 run layers of kv_lora_rank 64 + rope 32, plus the indexer
    // key (key_length 64) of the one layer attention.indexer.types marks.
    GgufFile dsa = GgufFile::open(kModels + "glm-dsa-Q8_0.gguf");
    EXPECT_EQ(summarize_model(dsa).mem.kv_token_bytes, 3ull * (64 + 32) * 2 + 64 * 2);

    // qwen35moe: layer 3 attends (2 KV heads x 128, 1024 tokens); layers 0-2
    // keep conv state 3 x (128 + 2 x 2 x 32) and a 128 x 32 state, in F32.
    GgufFile q35 = GgufFile::open(kModels + "qwen35moe-Q8_0.gguf");
    ModelSummary s35 = summarize_model(q35);
    uint64_t state = 3ull * 4 * (3 * 256 + 128 * 32);
    EXPECT_EQ(s35.mem.state_bytes, state);
    EXPECT_EQ(s35.mem.kv_bytes, 2ull * 128 * 1024 * 2 + state);
}

TEST(Summary, VocabularyOnlyFiles) {
    struct V { const char* file; int64_t n_vocab; const char* model; };
    for (V v : {V{"qwen3-vocab.gguf", 151669, "gpt2"}, V{"ggml-vocab-gpt-2.gguf", 50257, "gpt2"},
                V{"ggml-vocab-llama-spm.gguf", 32000, "llama"}}) {
        SCOPED_TRACE(v.file);
        GgufFile g = GgufFile::open(kVocab + v.file);
        ModelSummary s = summarize_model(g);
        EXPECT_EQ(s.n_tensors, 0);
        EXPECT_EQ(s.params, 0u);
        EXPECT_EQ(s.hp.n_vocab, v.n_vocab);
        EXPECT_EQ(s.hp.tokenizer_model, v.model);
        EXPECT_TRUE(s.moe_layers.empty());
    }
}

TEST(Summary, TensorLayerParsing) {
    EXPECT_EQ(tensor_layer("blk.12.attn_q.weight"), 12);
    EXPECT_EQ(tensor_layer("blk.0.ffn_up_exps.weight"), 0);
    EXPECT_EQ(tensor_layer("token_embd.weight"), -1);
    EXPECT_EQ(tensor_layer("blk.x.attn_q.weight"), -1);
    EXPECT_EQ(tensor_layer("blk.7"), -1);
}
