// synth/synth_families: every non-qwen3moe preset, shrunk to a few MB with
// its family's structure kept (dense lead layers, shared experts, MLA,
// biases, sinks, partial rope, DeltaNet layers, its recipe), is a file the family's own loader
// opens and runs: the tensors are the ones model/ checks, the metadata reads
// back as the spec, and a forward pass gives finite, token-dependent logits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "quant/dequant.h"
#include "../model/golden_model.h"
#include "synth/synth.h"
#include "synth/synth_families.h"
#include "synth/synth_routing.h"
#include "ops/thread_pool.h"

using namespace ms;

namespace {


std::vector<std::string> family_presets() {
    std::vector<std::string> out;
    for (const std::string& n : synth_preset_names())
        if (synth_preset(n).arch != "qwen3moe") out.push_back(n);
    return out;
}

// The preset's structure at toy widths: every flag that picks tensors (dense
// lead, shared experts, q compression, partial rope, window) stays set.
SynthSpec shrink(SynthSpec s) {
    s.n_dense_lead = std::min(s.n_dense_lead, 1);
    s.n_layer = std::max({s.n_dense_lead + 2, s.full_attention_interval, 2 * s.moe_step});  // every kind of layer
    s.n_embd = 256;
    s.expert_ffn = 256;
    s.dense_ffn = s.dense_ffn > 0 ? 512 : 0;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_head = 4;
    s.n_head_kv = std::min(s.n_head_kv, 2);
    s.head_dim = s.arch == "deepseek2" ? 32 : 64;
    if (s.rope_dim > 0) s.rope_dim = s.arch == "deepseek2" ? 16 : 32;
    if (s.q_lora > 0) s.q_lora = 64;
    if (s.kv_lora > 0) s.kv_lora = 64;
    if (s.v_head_dim > 0) s.v_head_dim = 32;
    if (s.sliding_window > 0) s.sliding_window = 4;
    if (s.ssm_k_heads > 0) s.ssm_k_heads = 2, s.ssm_v_heads = 4, s.ssm_head_dim = 32;
    if (s.indexer_heads > 0) s.indexer_heads = 4, s.indexer_dim = 32, s.indexer_top_k = 3;  // top 3 of 4 tokens
    if (s.arch == "deepseek4") {
        // Window-only, ratio-4 (indexer) and ratio-128 layers, one hash-routed.
        s.n_layer = 4, s.hash_layers = 1, s.out_groups = 2, s.out_lora = 32;
    }
    if (s.head_dim_full > 0) s.head_dim_full = 128, s.n_head_kv_full = 1;
    if (s.dense_ffn > 0 && s.arch == "gemma4") s.dense_ffn = 256;
    // Two of each kind of layer, the last of each reading the other's KV cache.
    if (s.shared_kv_layers > 0) s.n_layer = 2 * s.full_attention_interval, s.shared_kv_layers = 2;
    s.context = 256;
    s.tokenizer = "gpt2", s.n_vocab = 499;  // tiny's generated vocabulary
    return s;
}

// Row r of a 2-D (or stacked 3-D) tensor, dequantized.
std::vector<float> row_of(const GgufFile& f, const GgufTensor& t, int64_t r) {
    std::vector<uint8_t> raw(t.row_bytes());
    f.read(t.split, t.offset + uint64_t(r) * t.row_bytes(), raw.data(), raw.size());
    std::vector<float> y(size_t(t.ne[0]));
    EXPECT_TRUE(dequantize_row(t.type, raw.data(), y.data(), t.ne[0])) << t.name;
    return y;
}

bool all_zero(const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

std::vector<float> f32_tensor(const GgufFile& f, const std::string& name) {
    const GgufTensor* t = f.tensor(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return {};
    EXPECT_EQ(t->type, GgmlType::F32) << name;
    std::vector<float> v(size_t(t->n_elements()));
    f.read_tensor(*t, v.data());
    return v;
}

}  // namespace

// --router-bands scales the locality by thirds of the layers as
// docs/routing.md's tables cut them (32 layers: 0-9, 10-20, 21-31), on top
// of the fade; the default leaves the fade's value exactly.
TEST(SynthFamilies, RouterBandsScaleTheLocalityByThirds) {
    SynthSpec s = synth_preset("mixtral-8x7b");
    s.router_bands = {1.0, 1.0, 1.0};
    const double fade = s.router_locality / std::sqrt(1.0 + s.router_fade * 9);
    EXPECT_EQ(layer_locality(s, 9), fade);
    s.router_bands = {0.5, 2.0, 3.0};
    EXPECT_EQ(layer_locality(s, 9), fade * 0.5);
    EXPECT_DOUBLE_EQ(layer_locality(s, 10), 2.0 * s.router_locality / std::sqrt(1.0 + s.router_fade * 10));
    EXPECT_DOUBLE_EQ(layer_locality(s, 20), 2.0 * s.router_locality / std::sqrt(1.0 + s.router_fade * 20));
    EXPECT_DOUBLE_EQ(layer_locality(s, 21), 3.0 * s.router_locality / std::sqrt(1.0 + s.router_fade * 21));
    s.n_layer = 48;
    EXPECT_DOUBLE_EQ(layer_band_scale(s, 15), 0.5);
    EXPECT_DOUBLE_EQ(layer_band_scale(s, 16), 2.0);
    EXPECT_DOUBLE_EQ(layer_band_scale(s, 32), 3.0);
    s.router_bands = {1.0, -1.0, 1.0};
    EXPECT_THROW(validate_spec(s), std::runtime_error);
}

TEST(SynthFamilies, EveryFullPresetIsValid) {
    ASSERT_FALSE(family_presets().empty());
    for (const std::string& n : family_presets()) {
        SCOPED_TRACE(n);
        SynthSpec s = synth_preset(n);
        EXPECT_TRUE(synth_family_known(s.arch));
        EXPECT_NO_THROW(validate_spec(s));
        // A generated vocabulary of the published size's order, no file.
        EXPECT_TRUE(s.vocab_path.empty());
        EXPECT_GE(s.n_vocab, 32000);
        EXPECT_EQ(synth_sizes(s).n_vocab, s.n_vocab);
    }
}

TEST(SynthFamilies, ShrunkPresetsOpenAndRunInTheirFamily) {
    for (const std::string& n : family_presets()) {
        SCOPED_TRACE(n);
        const SynthSpec s = shrink(synth_preset(n));
        const std::string path = "/tmp/moestream-synth-families-" + std::to_string(getpid()) + "-" + n + ".gguf";
        write_synth_model(s, path, nullptr);
        {
            golden::LoadedModel m(path);
            const ModelConfig& c = m.model->config();
            EXPECT_EQ(c.arch, s.arch);
            EXPECT_EQ(c.n_layer, s.n_layer);
            EXPECT_EQ(c.n_embd, s.n_embd);
            EXPECT_EQ(c.n_expert, s.routed ? s.n_expert : 0);
            EXPECT_EQ(c.n_expert_used, s.routed ? s.n_expert_used : 0);
            EXPECT_EQ(c.n_dense_lead, s.n_dense_lead);
            EXPECT_EQ(c.n_expert_shared, s.n_shared);
            EXPECT_EQ(c.sliding_window, s.sliding_window);
            // Every MoE layer's experts are streamable; dense layers have none.
            // Per-layer embedding rows stream too, as a source layer of rows.
            int moe_layers = 0, routed = 0, row_tables = 0;
            for (const ExpertLayer& l : m.model->expert_layers()) {
                moe_layers += l.n_expert > 0 && !l.rows;
                row_tables += l.rows;
            }
            for (int il = 0; il < s.n_layer; il++) routed += family_layer_has_experts(s, il);
            EXPECT_EQ(moe_layers, routed);
            EXPECT_EQ(row_tables, s.per_layer_embd > 0 ? 1 : 0);
            EXPECT_GT(routed + row_tables, 0);

            ThreadPool pool(2);
            auto st = m.state(2);
            const int32_t prompt[4] = {11, 42, 7, 300};
            const int64_t V = c.n_vocab;
            std::vector<float> logits(size_t(4 * V));
            m.model->forward(*st, *m.experts, pool, prompt, 4, logits.data(), true);
            for (float x : logits) ASSERT_TRUE(std::isfinite(x));
            // Different tokens, different rows.
            EXPECT_GT(golden::rel_l2(logits.data(), logits.data() + V, size_t(V)), 1e-3);
        }
        unlink(path.c_str());
    }
}

// DeepSeek V4's hash-routed layers: each token's row names n_expert_used
// distinct experts in range, and the rows differ between tokens.
TEST(SynthFamilies, HashRoutingTableNamesDistinctExperts) {
    SynthSpec s = shrink(synth_preset("deepseek-v4-flash"));
    s.n_layer = 2, s.hash_layers = 2, s.n_expert = 16, s.n_expert_used = 6;
    const std::string path = "/tmp/moestream-synth-families-" + std::to_string(getpid()) + "-tid2eid.gguf";
    write_synth_model(s, path, nullptr);
    {
        const GgufFile f = GgufFile::open(path);
        for (int il = 0; il < 2; il++) {
            const GgufTensor* t = f.tensor("blk." + std::to_string(il) + ".ffn_gate_tid2eid.weight");
            ASSERT_NE(t, nullptr);
            ASSERT_EQ(t->type, GgmlType::I32);
            ASSERT_EQ(t->ne[0], 6);
            std::vector<int32_t> table(size_t(t->n_elements()));
            f.read_tensor(*t, table.data());
            const int32_t* ids = table.data();
            int same_as_previous = 0;
            for (int64_t v = 0; v < t->ne[1]; v++) {
                std::vector<int32_t> row(ids + v * 6, ids + v * 6 + 6);
                for (int32_t e : row) ASSERT_TRUE(e >= 0 && e < 16) << e;
                std::sort(row.begin(), row.end());
                ASSERT_EQ(std::adjacent_find(row.begin(), row.end()), row.end()) << "token " << v;
                if (v > 0) same_as_previous += std::equal(ids + v * 6, ids + v * 6 + 6, ids + (v - 1) * 6);
            }
            EXPECT_LT(same_as_previous, t->ne[1] / 10);
        }
    }
    unlink(path.c_str());
}

TEST(SynthFamilies, BadFamilySizesAreRefused) {
    SynthSpec s = synth_preset("deepseek-v3");
    s.kv_lora = 0;
    EXPECT_THROW(validate_spec(s), std::runtime_error);
    s = synth_preset("deepseek-v3");
    s.n_layer = s.n_dense_lead;  // no MoE layer left
    EXPECT_THROW(validate_spec(s), std::runtime_error);
    s = synth_preset("gpt-oss-120b");
    s.sliding_window = 0;
    EXPECT_THROW(validate_spec(s), std::runtime_error);
    s = synth_preset("glm-4.5-air");
    s.arch = "falcon";
    EXPECT_THROW(validate_spec(s), std::runtime_error);
}

// --router-own: the token's own channels (n_embd / 16 after the carrier) are
// written by no layer, so the residual holds the embedding alone there:
// attn_output's rows and every expert's ffn_down rows for them dequantize
// to exact zeros (the rows beside them do not), and each third's ffn_norm
// weighs them as asked. Without the knob the same rows are random.
TEST(SynthFamilies, RouterOwnChannelsAreWrittenByNoLayer) {
    for (const bool own : {true, false}) {
        SCOPED_TRACE(own ? "own channels" : "none");
        SynthSpec s = shrink(synth_preset("mixtral-8x7b"));
        s.n_layer = 3;  // one layer a third
        s.router_own = own ? std::array<double, 3>{1.0, 2.0, 13.0} : std::array<double, 3>{0, 0, 0};
        const std::string path = "/tmp/moestream-synth-families-" + std::to_string(getpid()) + "-own.gguf";
        write_synth_model(s, path, nullptr);
        {
            const GgufFile f = GgufFile::open(path);
            const int64_t J = carrier_channels(s.n_embd), T = s.n_embd / 16;
            for (int il = 0; il < s.n_layer; il++) {
                SCOPED_TRACE(il);
                const std::string b = "blk." + std::to_string(il) + ".";
                for (const char* name : {"attn_output.weight", "ffn_down_exps.weight"}) {
                    const GgufTensor* t = f.tensor(b + name);
                    ASSERT_NE(t, nullptr) << name;
                    const int64_t per_matrix = t->ne[1], matrices = t->n_elements() / (t->ne[0] * t->ne[1]);
                    for (int64_t m = 0; m < matrices; m++) {
                        for (int64_t r = J; r < J + T; r++)
                            EXPECT_EQ(all_zero(row_of(f, *t, m * per_matrix + r)), own) << name << " row " << r;
                        EXPECT_FALSE(all_zero(row_of(f, *t, m * per_matrix + J + T))) << name;
                    }
                }
                const std::vector<float> norm = f32_tensor(f, b + "ffn_norm.weight");
                ASSERT_EQ(int64_t(norm.size()), s.n_embd);
                for (int64_t c = J; c < J + T; c++) EXPECT_EQ(norm[size_t(c)], own ? float(s.router_own[size_t(il)]) : 1.0f);
                EXPECT_EQ(norm[size_t(J + T)], 1.0f);
            }
        }
        unlink(path.c_str());
    }
    SynthSpec s = synth_preset("deepseek-v3");
    s.router_own = {1, 1, 2};
    EXPECT_THROW(validate_spec(s), std::runtime_error);  // MLA has no such design
}

// --router-gate steady: every row of a Gated DeltaNet layer's attn_gate
// reads the carrier's columns at one positive value and, beyond them, no
// more than the residues a quantized zero leaves in the carrier's block
// (zero bytes past it), so z = attn_gate . x is about one value for every
// channel, set by the carrier, whatever the token. With token gates the
// rows are the token's own (random, and blind to the carrier).
TEST(SynthFamilies, SteadyGateReadsTheCarrierAlone) {
    for (const bool steady : {true, false}) {
        SCOPED_TRACE(steady ? "steady" : "token");
        SynthSpec s = shrink(synth_preset("qwen3.5-35b-a3b"));
        s.router_steady_gate = steady;
        const std::string path = "/tmp/moestream-synth-families-" + std::to_string(getpid()) + "-gate.gguf";
        write_synth_model(s, path, nullptr);
        {
            const GgufFile f = GgufFile::open(path);
            const int64_t J = carrier_channels(s.n_embd);
            int deltanet = 0;
            for (int il = 0; il < s.n_layer; il++) {
                const GgufTensor* t = f.tensor("blk." + std::to_string(il) + ".attn_gate.weight");
                if (!t) continue;  // a gated-attention layer
                deltanet++;
                const std::vector<float> first = row_of(f, *t, 0);
                if (steady) {
                    const float carrier = first[0];
                    ASSERT_GT(carrier, 0.0f);
                    for (int64_t r = 0; r < t->ne[1]; r++) {
                        const std::vector<float> row = row_of(f, *t, r);
                        double rest = 0;  // the sum of squares of the weights on the token's own channels
                        for (int64_t c = 0; c < t->ne[0]; c++) {
                            if (c < J) ASSERT_EQ(row[size_t(c)], carrier) << r << ", " << c;
                            else rest += double(row[size_t(c)]) * row[size_t(c)];
                        }
                        // Over independent unit-RMS channels the token's own part of z has std
                        // sqrt(rest): under a tenth of the carrier's part even at a normed carrier of 1.
                        ASSERT_LT(std::sqrt(rest), 0.1 * carrier * J) << r;
                    }
                } else {
                    EXPECT_NE(row_of(f, *t, 1), first);
                    EXPECT_FALSE(all_zero(std::vector<float>(first.begin() + J, first.end())));
                }
            }
            EXPECT_GT(deltanet, 0);
        }
        unlink(path.c_str());
    }
    SynthSpec s = synth_preset("mixtral-8x7b");
    s.router_steady_gate = true;
    EXPECT_THROW(validate_spec(s), std::runtime_error);
}
