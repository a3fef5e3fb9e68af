// synth/synth (the writer): the tiny preset opened back with GgufFile (metadata, shapes,
// tokenizer), block validity through the reference dequantizer, the Q4_K_M
// recipe against the reference quantizer's choices in the golden file, and
// the router-skew calibration measured on Gaussian inputs.
#include "synth/synth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "../golden_dir.h"
#include "gguf/gguf.h"
#include "json/json.h"
#include "synth/synth_vocab.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "model/summary.h"
#include "quant/dequant.h"

using namespace ms;

namespace {


std::string temp_path(const std::string& name) {
    return "/tmp/moestream-synth-test-" + std::to_string(getpid()) + "-" + name + ".gguf";
}

struct TempModel {
    std::string path;
    explicit TempModel(const SynthSpec& s, const std::string& name) : path(temp_path(name)) {
        write_synth_model(s, path, nullptr);
    }
    ~TempModel() { unlink(path.c_str()); }
};

SynthSpec small_spec(const std::string& recipe) {
    SynthSpec s = synth_preset("tiny");
    s.n_layer = 2;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.recipe = recipe;
    return s;
}

// Mean and standard deviation of rows of a tensor, dequantized, leaving out
// the elements synth designs for realistic routing (the first 32 rows and
// columns hold carrier elements in some tensors).
void row_stats(const GgufFile& f, const GgufTensor& t, int rows, double* mean, double* sd) {
    const int64_t skip = std::min<int64_t>(32, t.ne[0] / 8);
    const int64_t first = t.ne[1] > skip + rows ? skip : 0;
    std::vector<uint8_t> raw(t.row_bytes() * size_t(rows));
    f.read(t.split, t.offset + uint64_t(first) * t.row_bytes(), raw.data(), raw.size());
    std::vector<float> y(static_cast<size_t>(t.ne[0]));
    double s = 0, s2 = 0;
    int64_t n = 0;
    for (int r = 0; r < rows; ++r) {
        ASSERT_TRUE(dequantize_row(t.type, raw.data() + size_t(r) * t.row_bytes(), y.data(), t.ne[0])) << t.name;
        for (int64_t i = skip; i < t.ne[0]; i++) {
            const float v = y[size_t(i)];
            ASSERT_TRUE(std::isfinite(v)) << t.name;
            s += v;
            s2 += double(v) * v;
            ++n;
        }
    }
    *mean = s / double(n);
    *sd = std::sqrt(s2 / double(n) - *mean * *mean);
}

// Every weight matrix has std ~1/sqrt(fan_in) (embedding 1, head 2/sqrt(n_embd)).
void check_blocks(const GgufFile& f) {
    for (const GgufTensor& t : f.tensors()) {
        if (t.n_dims < 2 || t.type == GgmlType::F32) continue;
        SCOPED_TRACE(t.name + " " + type_name(t.type));
        double want = t.name == "token_embd.weight" ? 1.0
                      : t.name == "output.weight"   ? 2.0 / std::sqrt(double(t.ne[0]))
                                                    : 1.0 / std::sqrt(double(t.ne[0]));
        double mean = 0, sd = 0;
        row_stats(f, t, 8, &mean, &sd);
        // MXFP4 scales are powers of two: within a factor sqrt(2) of the aim.
        EXPECT_GT(sd, 0.65 * want);
        EXPECT_LT(sd, 1.5 * want);
        EXPECT_LT(std::fabs(mean), 0.1 * want);
    }
}

}  // namespace

TEST(Synth, TinyPresetIsAValidQwen3MoeModel) {
    SynthSpec spec = synth_preset("tiny");
    TempModel m(spec, "tiny");
    GgufFile f = GgufFile::open(m.path);
    EXPECT_EQ(f.get_string("general.architecture"), "qwen3moe");
    EXPECT_EQ(f.get_int("qwen3moe.block_count", 0), spec.n_layer);
    EXPECT_EQ(f.get_int("qwen3moe.expert_count", 0), spec.n_expert);
    EXPECT_EQ(f.get_int("qwen3moe.expert_used_count", 0), spec.n_expert_used);
    EXPECT_EQ(f.get_int("qwen3moe.embedding_length", 0), spec.n_embd);
    EXPECT_EQ(f.get_int("qwen3moe.expert_feed_forward_length", 0), spec.expert_ffn);
    EXPECT_EQ(f.get_int("qwen3moe.attention.head_count", 0), spec.n_head);
    EXPECT_EQ(f.get_int("qwen3moe.attention.head_count_kv", 0), spec.n_head_kv);
    EXPECT_EQ(f.get_int("qwen3moe.attention.key_length", 0), spec.head_dim);
    EXPECT_GT(f.get_float("qwen3moe.attention.layer_norm_rms_epsilon", 0), 0);

    // The generated vocabulary (no file read): the preset's size, byte-level
    // BPE, ChatML markers and template.
    const int64_t n_vocab = spec.n_vocab;
    EXPECT_TRUE(spec.vocab_path.empty());
    const Tokenizer tok = Tokenizer::from_gguf(f);
    EXPECT_EQ(int64_t(tok.n_vocab()), n_vocab);
    EXPECT_EQ(tok.model(), "gpt2");
    EXPECT_EQ(tok.text(tok.eos()), "<|im_end|>");
    EXPECT_TRUE(f.has("tokenizer.chat_template"));

    // Names and shapes llama.cpp's qwen3moe loader asks for.
    auto shape = [&](const std::string& name) {
        const GgufTensor* t = f.tensor(name);
        EXPECT_NE(t, nullptr) << name;
        std::vector<int64_t> ne;
        if (t)
            for (uint32_t d = 0; d < t->n_dims; ++d) ne.push_back(t->ne[d]);
        return ne;
    };
    using V = std::vector<int64_t>;
    const int64_t E = spec.n_embd, F = spec.expert_ffn, X = spec.n_expert, Q = spec.n_head * spec.head_dim,
                  KV = spec.n_head_kv * spec.head_dim;
    EXPECT_EQ(shape("token_embd.weight"), (V{E, n_vocab}));
    EXPECT_EQ(shape("output.weight"), (V{E, n_vocab}));
    EXPECT_EQ(shape("output_norm.weight"), (V{E}));
    for (int l = 0; l < spec.n_layer; ++l) {
        std::string b = "blk." + std::to_string(l) + ".";
        EXPECT_EQ(shape(b + "attn_norm.weight"), (V{E}));
        EXPECT_EQ(shape(b + "attn_q.weight"), (V{E, Q}));
        EXPECT_EQ(shape(b + "attn_k.weight"), (V{E, KV}));
        EXPECT_EQ(shape(b + "attn_v.weight"), (V{E, KV}));
        EXPECT_EQ(shape(b + "attn_output.weight"), (V{Q, E}));
        EXPECT_EQ(shape(b + "attn_q_norm.weight"), (V{spec.head_dim}));
        EXPECT_EQ(shape(b + "attn_k_norm.weight"), (V{spec.head_dim}));
        EXPECT_EQ(shape(b + "ffn_norm.weight"), (V{E}));
        EXPECT_EQ(shape(b + "ffn_gate_inp.weight"), (V{E, X}));
        EXPECT_EQ(shape(b + "ffn_gate_exps.weight"), (V{E, F, X}));
        EXPECT_EQ(shape(b + "ffn_up_exps.weight"), (V{E, F, X}));
        EXPECT_EQ(shape(b + "ffn_down_exps.weight"), (V{F, E, X}));
        EXPECT_EQ(f.tensor(b + "ffn_gate_inp.weight")->type, GgmlType::F32);
        EXPECT_EQ(f.tensor(b + "ffn_norm.weight")->type, GgmlType::F32);
    }
    EXPECT_EQ(int(f.tensors().size()), 3 + 12 * spec.n_layer);
    for (const GgufTensor& t : f.tensors()) EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;

    ModelSummary s = summarize_model(f);
    EXPECT_EQ(int(s.moe_layers.size()), spec.n_layer);
    EXPECT_LT(s.file_bytes, 16u << 20);  // "a few MB"
    check_blocks(f);
}

TEST(Synth, EveryRecipeWritesSaneBlocks) {
    for (const char* recipe : {"Q8_0", "MXFP4", "F16"}) {
        SCOPED_TRACE(recipe);
        TempModel m(small_spec(recipe), recipe);
        GgufFile f = GgufFile::open(m.path);
        const GgufTensor* up = f.tensor("blk.0.ffn_up_exps.weight");
        ASSERT_NE(up, nullptr);
        EXPECT_EQ(up->type, std::string(recipe) == "MXFP4" ? GgmlType::MXFP4
                            : std::string(recipe) == "F16" ? GgmlType::F16
                                                           : GgmlType::Q8_0);
        check_blocks(f);
    }
}

TEST(Synth, SameSeedSameFile) {
    SynthSpec s = small_spec("Q4_K_M");
    TempModel a(s, "a"), b(s, "b");
    s.seed = 2;
    TempModel c(s, "c");
    auto bytes = [](const std::string& p) {
        GgufFile f = GgufFile::open(p);
        const GgufTensor* t = f.tensor("blk.1.ffn_down_exps.weight");
        std::vector<uint8_t> v(t->nbytes);
        f.read_tensor(*t, v.data());
        return v;
    };
    EXPECT_EQ(bytes(a.path), bytes(b.path));
    EXPECT_NE(bytes(a.path), bytes(c.path));
}

TEST(Synth, Q4KMRecipeMatchesTheReferenceQuantizer) {
    SKIP_WITHOUT_GOLDEN();
    // The golden qwen3moe-Q4_K_M file was made by the reference quantizer
    // (3 layers, 8 experts): our recipe must pick the same type per tensor.
    GgufFile g = GgufFile::open(ms::golden::dir() + "/models/qwen3moe-Q4_K_M.gguf");
    int checked = 0;
    for (const GgufTensor& t : g.tensors()) {
        if (t.n_dims < 2 || t.name.find("ffn_gate_inp") != std::string::npos) continue;
        SCOPED_TRACE(t.name);
        EXPECT_EQ(synth_tensor_type("Q4_K_M", t.name, tensor_layer(t.name), 3, 8, t.ne[0]), t.type);
        ++checked;
    }
    EXPECT_EQ(checked, 2 + 3 * 7);

    // 48 layers: use_more_bits picks the first and last 6 and every third
    // layer from 8 to 41 for ffn_down and attn_v.
    std::vector<int> q6;
    for (int l = 0; l < 48; ++l)
        if (synth_tensor_type("Q4_K_M", "blk.0.ffn_down_exps.weight", l, 48, 128, 768) == GgmlType::Q6_K)
            q6.push_back(l);
    std::vector<int> want = {0, 1, 2, 3, 4, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38, 41, 42, 43, 44, 45, 46, 47};
    EXPECT_EQ(q6, want);
    EXPECT_EQ(synth_tensor_type("Q4_K_M", "blk.9.attn_v.weight", 9, 48, 128, 2048), GgmlType::Q4_K);
    EXPECT_EQ(synth_tensor_type("Q4_K_M", "blk.8.attn_v.weight", 8, 48, 128, 2048), GgmlType::Q6_K);
    // Rows shorter than a K-quant block fall back to Q8_0.
    EXPECT_EQ(synth_tensor_type("Q4_K_M", "blk.0.attn_q.weight", 0, 4, 16, 64), GgmlType::Q8_0);
}

TEST(Synth, ZipfTargets) {
    std::vector<double> p = zipf_targets(32, 4, 0.5, kRouterCap);
    double sum = 0;
    for (double x : p) sum += x;
    EXPECT_NEAR(sum, 4.0, 1e-9);
    for (size_t r = 1; r < p.size(); ++r) EXPECT_LE(p[r], p[r - 1]);
    EXPECT_LE(p[0], kRouterCap + 1e-12);
    EXPECT_NEAR(p[3] / p[15], std::sqrt(16.0 / 4.0), 1e-9);  // uncapped ranks follow 1/sqrt(rank)
    std::vector<double> u = zipf_targets(16, 4, 0, kRouterCap);
    for (double x : u) EXPECT_NEAR(x, 0.25, 1e-12);
    // A steep law saturates the cap on its head.
    std::vector<double> steep = zipf_targets(128, 8, 1.5, kRouterCap);
    EXPECT_NEAR(steep[0], kRouterCap, 1e-9);
}

TEST(Synth, RouterSkewFollowsTheTargetLaw) {
    // Skew 0.5 on the tiny preset (16 experts, top-4). Route Gaussian inputs
    // through the router rows written to the file and compare the measured
    // popularity with the target law and with the calibration in the metadata.
    SynthSpec spec = synth_preset("tiny");
    spec.n_layer = 2;
    spec.router_skew = 0.5;
    TempModel m(spec, "skew");
    GgufFile f = GgufFile::open(m.path);
    ModelSummary s = summarize_model(f);
    ASSERT_TRUE(s.synth.present);
    EXPECT_DOUBLE_EQ(s.synth.router_skew, 0.5);
    ASSERT_EQ(s.synth.popularity.size(), 2u);

    const int E = spec.n_embd, X = spec.n_expert, K = spec.n_expert_used;
    std::vector<double> target = zipf_targets(X, K, 0.5, kRouterCap);
    for (int layer = 0; layer < 2; ++layer) {
        const GgufTensor* t = f.tensor("blk." + std::to_string(layer) + ".ffn_gate_inp.weight");
        std::vector<float> w(size_t(E) * X);
        f.read_tensor(*t, w.data());
        std::mt19937_64 gen(42 + layer);
        std::normal_distribution<float> normal;
        std::vector<double> count(size_t(X), 0);
        std::vector<float> x(static_cast<size_t>(E));
        std::vector<std::pair<float, int>> logit(static_cast<size_t>(X));
        const int samples = 20000;
        for (int n = 0; n < samples; ++n) {
            for (float& v : x) v = normal(gen);
            for (int e = 0; e < X; ++e) {
                float d = 0;
                for (int i = 0; i < E; ++i) d += w[size_t(e) * E + size_t(i)] * x[size_t(i)];
                logit[size_t(e)] = {d, e};
            }
            std::partial_sort(logit.begin(), logit.begin() + K, logit.end(),
                              [](auto& a, auto& b) { return a.first > b.first; });
            for (int i = 0; i < K; ++i) count[size_t(logit[size_t(i)].second)] += 1.0 / samples;
        }
        // Measured selection probability by popularity rank vs the target law.
        std::vector<double> by_rank = count;
        std::sort(by_rank.begin(), by_rank.end(), std::greater<double>());
        for (int r = 0; r < X; ++r) EXPECT_NEAR(by_rank[size_t(r)], target[size_t(r)], 0.04) << "rank " << r;
        EXPECT_NEAR(by_rank[0] / K, target[0] / K, 0.01);  // top expert's share of selections
        // Each expert's measured popularity matches what the metadata claims.
        for (int e = 0; e < X; ++e)
            EXPECT_NEAR(count[size_t(e)], s.synth.popularity[size_t(layer)][size_t(e)], 0.04) << "expert " << e;
    }
    EXPECT_NEAR(top_expert_share(s.synth.popularity, 1), target[0] / K, 0.01);
}

TEST(Synth, CalibrationConvergesAtRealScale) {
    // 128 experts, top-8 (Qwen3-30B-A3B): each rank's measured probability
    // within 0.03 of the law, for a mild and a steep (capped) skew.
    if (getenv("MOESTREAM_SANITIZED")) GTEST_SKIP() << "slow under sanitizers";
    for (double skew : {0.5, 1.5}) {
        SCOPED_TRACE(skew);
        std::vector<double> target = zipf_targets(128, 8, skew, kRouterCap);
        RouterCalibration cal = calibrate_router(target, 8, 11);
        double sum = 0;
        for (size_t r = 0; r < target.size(); ++r) {
            EXPECT_NEAR(cal.popularity[r], target[r], 0.03) << "rank " << r;
            sum += cal.popularity[r];
        }
        EXPECT_NEAR(sum, 8.0, 1e-9);  // every sample picks exactly 8
        EXPECT_GT(cal.scale[0], cal.scale[127]);
    }
}

TEST(Synth, BadSpecsAreRefused) {
    SynthSpec s = synth_preset("tiny");
    s.n_expert_used = s.n_expert + 1;
    EXPECT_THROW(validate_spec(s), std::runtime_error);
    s = synth_preset("tiny");
    s.recipe = "Q3_K";
    EXPECT_THROW(validate_spec(s), std::runtime_error);
    s = synth_preset("tiny");
    s.n_head_kv = 3;
    EXPECT_THROW(validate_spec(s), std::runtime_error);
    EXPECT_THROW(synth_preset("qwen9"), std::runtime_error);
    s = synth_preset("tiny");
    s.vocab_path = std::string(MOESTREAM_SOURCE_DIR) + "/models/demo-reference.json";  // not a GGUF
    EXPECT_THROW(write_synth_model(s, temp_path("bad"), nullptr), std::runtime_error);
    EXPECT_NE(access(temp_path("bad").c_str(), F_OK), 0);
    EXPECT_NE(access((temp_path("bad") + ".partial").c_str(), F_OK), 0);
}

namespace {

std::vector<float> row_of(const GgufFile& f, const std::string& name, int64_t row) {
    const GgufTensor* t = f.tensor(name);
    EXPECT_NE(t, nullptr) << name;
    std::vector<uint8_t> raw(t->row_bytes());
    f.read(t->split, t->offset + uint64_t(row) * t->row_bytes(), raw.data(), raw.size());
    std::vector<float> y(static_cast<size_t>(t->ne[0]));
    EXPECT_TRUE(dequantize_row(t->type, raw.data(), y.data(), t->ne[0]));
    return y;
}

}  // namespace

TEST(Synth, RealisticRoutingElementsAreWhereTheDesignPutsThem) {
    // The designed elements (synth.cpp, Design), read back through the
    // reference dequantizer for every recipe's types.
    for (const char* recipe : {"Q4_K_M", "Q8_0", "MXFP4", "F16"}) {
        SCOPED_TRACE(recipe);
        SynthSpec spec = small_spec(recipe);
        TempModel m(spec, std::string("design-") + recipe);
        GgufFile f = GgufFile::open(m.path);
        const int J = 32, D = spec.head_dim;
        // Every embedding row: the carrier channels hold one large positive value.
        for (int64_t tok : {0, 7, 300}) {
            std::vector<float> e = row_of(f, "token_embd.weight", tok);
            for (int j = 0; j < J; j++) EXPECT_GT(e[size_t(j)], 1.2f) << "token " << tok << " channel " << j;
        }
        // attn_v ignores the carrier; attn_output does not write it.
        std::vector<float> v = row_of(f, "blk.1.attn_v.weight", 5);
        for (int j = 0; j < J; j++) EXPECT_LT(std::fabs(v[size_t(j)]), 0.02f) << j;
        std::vector<float> o = row_of(f, "blk.1.attn_output.weight", 3);
        for (float x : o) EXPECT_LT(std::fabs(x), 0.02f);
        // q/k: recency rows read the carrier with the largest value; the
        // q/k norms keep only those dims and the same dims in both.
        std::vector<float> qn = row_of(f, "blk.0.attn_q_norm.weight", 0), kn = row_of(f, "blk.0.attn_k_norm.weight", 0);
        EXPECT_EQ(qn, kn);
        int kept = 0;
        for (int d = 0; d < D; d++) {
            kept += qn[size_t(d)] > 0;
            if (qn[size_t(d)] == 0) continue;
            std::vector<float> q = row_of(f, "blk.0.attn_q.weight", D + d);  // head 1
            for (int j = 0; j < J; j++) EXPECT_GT(q[size_t(j)], 0.0f) << "dim " << d;
        }
        EXPECT_GT(kept, 4);
        EXPECT_LT(kept, D / 2);
        // ffn_norm hides the carrier from routers and experts.
        std::vector<float> fn = row_of(f, "blk.0.ffn_norm.weight", 0);
        for (int j = 0; j < int(fn.size()); j++) EXPECT_EQ(fn[size_t(j)], j < J ? 0.0f : 1.0f);
    }
}

// The generated vocabularies, read back by the project's tokenizer: the
// requested size; English round-trips, mostly in whole-word tokens at full
// size (the token statistics routing depends on); the last normal token (a
// padding token at full size) never comes out of encode yet decodes to
// text; the family's markers are single tokens and its template renders.
TEST(SynthVocab, GeneratedVocabulariesTokenizeEnglish) {
    const std::string text =
        "The committee reported that the new measures had been adopted by the states, and that commerce and "
        "agriculture continue to prosper under the protection of the laws.";
    struct Case {
        const char* tokenizer;
        int64_t n_vocab;
    };
    for (const Case c : {Case{"gpt2", 499}, Case{"gpt2", 151669}, Case{"llama", 32000}}) {
        SCOPED_TRACE(std::string(c.tokenizer) + " " + std::to_string(c.n_vocab));
        SynthSpec spec = synth_preset("tiny");
        spec.n_layer = 1;
        spec.tokenizer = c.tokenizer;
        spec.n_vocab = c.n_vocab;
        TempModel m(spec, std::string("vocab-") + c.tokenizer + std::to_string(c.n_vocab));
        GgufFile f = GgufFile::open(m.path);
        const Tokenizer tok = Tokenizer::from_gguf(f);
        ASSERT_EQ(int64_t(tok.n_vocab()), c.n_vocab);
        const std::vector<int32_t> ids = tok.encode(text, false, false);
        EXPECT_EQ(tok.decode(ids), text);
        const size_t words = size_t(std::count(text.begin(), text.end(), ' ') + 1);
        if (c.n_vocab > 1000) {
            EXPECT_LT(ids.size(), words * 13 / 10) << "common words should be single tokens";
        } else {
            EXPECT_LT(ids.size(), text.size() / 2) << "merges should fire";
        }
        int32_t last_normal = -1;
        for (int32_t i = 0; i < int32_t(tok.n_vocab()); i++)
            if (tok.type(i) == TokenType::Normal) last_normal = i;
        const std::string piece = tok.decode({last_normal});
        EXPECT_FALSE(piece.empty());
        if (c.n_vocab > 1000) {
            EXPECT_NE(tok.encode(piece, false, false), std::vector<int32_t>{last_normal}) << piece;
        }
        ChatTemplate ct(f.get_string("tokenizer.chat_template"));
        const Json ctx = Json::parse(R"({"messages": [{"role": "system", "content": "Be brief."},
                                                     {"role": "user", "content": "Hello"}],
                                       "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
        const std::string prompt = ct.render(ctx);
        if (std::string(c.tokenizer) == "gpt2") {
            for (const char* marker : {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                                       "<tool_call>", "</tool_call>"}) {
                const bool control = marker[1] == '|';
                if (control || c.n_vocab > 1000) {
                    EXPECT_EQ(tok.encode(marker, false, true).size(), 1u) << marker;
                }
            }
            EXPECT_EQ(prompt,
                      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
            EXPECT_TRUE(tok.is_eog(tok.find("<|im_end|>")));
        } else {
            EXPECT_EQ(prompt, "<s>[INST] Be brief. [/INST][INST] Hello [/INST]");
            EXPECT_EQ(tok.text(tok.bos()), "<s>");
            EXPECT_TRUE(tok.add_bos());
        }
    }
    EXPECT_EQ(make_synth_vocab("gpt2", 4096).merges, make_synth_vocab("gpt2", 4096).merges);
    EXPECT_THROW(make_synth_vocab("wordpiece", 4096), std::runtime_error);
}
