// Synthetic models route like trained ones (issue: collapsed routing made
// every streaming figure a best case), checked through `synth` and
// `bench routing` on English text (bench/prompts/long.txt):
//  - fast, in make test: a narrow qwen3-30b-a3b-shaped model; with the
//    default design no layer collapses and nearby tokens share experts,
//    while the plain random network (--router-locality 0) collapses;
//  - fast, in make test: narrow deepseek-v3 (MLA) and qwen3.5-35b-a3b
//    (Gated DeltaNet) shapes share experts between nearby tokens beyond
//    chance and beyond their random networks, without collapsing;
//  - slow (make routing-check, MOESTREAM_SLOW=1, ~18 GB of disk): the full
//    preset against published measurements of the real Qwen3-30B-A3B over
//    ~1k tokens (90 % of a layer's picks need 65 of 128 experts; the top
//    expert takes 4.3-6.3 % of them; ~45 % of a token's experts were also the
//    previous token's and ~80 % within the last 8), each within +-20 %.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "json/json.h"
#include "run_cli.h"

using ms::Json;

namespace {

const std::string kText = std::string(MOESTREAM_SOURCE_DIR) + "/bench/prompts/long.txt";

Json routing_of(const std::string& model, const std::string& flags, int tokens) {
    const std::string json = model + ".routing.json";
    CliResult r = run_cli("bench routing -m " + model + " -f " + kText + " --tokens " + std::to_string(tokens) +
                              " --replay-slots 24 " + flags + " --json " + json,
                          true);
    EXPECT_EQ(r.rc, 0) << r.out;
    Json j = Json::parse_file(json);
    std::remove(json.c_str());
    return j;
}

double mean_over(const Json& layers, const char* key, size_t from, size_t to) {
    double s = 0;
    for (size_t l = from; l < to; l++) s += layers.as_array()[l].at(key).as_number();
    return s / double(to - from);
}

}  // namespace

TEST(RoutingCli, DefaultSynthDoesNotCollapseAndRandomDoes) {
    if (getenv("MOESTREAM_SANITIZED")) GTEST_SKIP() << "a statistical check of the model, not of memory safety";
    const std::string base = "/tmp/moestream-routing-" + std::to_string(getpid());
    const std::string shape =
        "synth --preset qwen3-30b-a3b --layers 24 --n-embd 256 --ffn 64 --heads 4 --kv-heads 1 --type Q8_0 ";
    Json real, flat;
    for (int pass = 0; pass < 2; pass++) {
        const std::string model = base + (pass ? "-random.gguf" : ".gguf");
        CliResult s = run_cli(shape + (pass ? "--router-locality 0 " : "") + "-o " + model, true);
        ASSERT_EQ(s.rc, 0) << s.out;
        (pass ? flat : real) = routing_of(model, "", 400);
        std::remove(model.c_str());
    }
    const Json& L = real.at("layers");
    ASSERT_EQ(L.as_array().size(), 24u);
    for (const Json& layer : L.as_array()) {
        SCOPED_TRACE(layer.at("layer").as_int());
        EXPECT_GE(layer.at("unique_experts").as_int(), 110);
        EXPECT_GE(layer.at("experts_for_90pct").as_int(), 50);
        EXPECT_LT(layer.at("top_expert_share").as_number(), 0.10);
    }
    // Nearby tokens share experts far beyond chance (8/128 = 6 %), more so
    // within 8 tokens than from the previous one alone.
    const Json& m = real.at("mean");
    EXPECT_GT(m.at("prev_token_reuse").as_number(), 0.25);
    EXPECT_LT(m.at("prev_token_reuse").as_number(), 0.60);
    EXPECT_GT(m.at("window_reuse").as_number(), m.at("prev_token_reuse").as_number() + 0.15);
    // The random network's deeper layers route onto a few experts.
    const Json& F = flat.at("layers");
    EXPECT_LT(mean_over(F, "experts_for_90pct", 16, 24), 40.0);
    EXPECT_GT(mean_over(L, "experts_for_90pct", 16, 24), 1.5 * mean_over(F, "experts_for_90pct", 16, 24));
}

TEST(RoutingCli, FullPresetRoutesLikeThePublishedModel) {
    const char* dir = getenv("MOESTREAM_SLOW_DIR");
    if (!getenv("MOESTREAM_SLOW")) GTEST_SKIP() << "slow (18 GB model): make routing-check";
    const std::string model = std::string(dir ? dir : "/tmp") + "/moestream-routing-q30.gguf";
    CliResult s = run_cli("synth --preset qwen3-30b-a3b --type Q4_K_M -o " + model, true);
    ASSERT_EQ(s.rc, 0) << s.out;
    Json j = routing_of(model, "--mem 6G", 1000);
    std::remove(model.c_str());
    const Json& m = j.at("mean");
    const double f90 = m.at("experts_for_90pct").as_number() / 128.0, top = m.at("top_expert_share").as_number(),
                 prev = m.at("prev_token_reuse").as_number(), win = m.at("window_reuse").as_number();
    printf("experts for 90%%: %.0f%% (published 51%%), top expert %.1f%% (4.3-6.3%%), previous token %.1f%% "
           "(~45%%), within 8 %.1f%% (~80%%)\n",
           100 * f90, 100 * top, 100 * prev, 100 * win);
    EXPECT_NEAR(f90, 65.0 / 128, 0.2 * 65.0 / 128);
    EXPECT_GE(top, 0.8 * 0.043);
    EXPECT_LE(top, 1.2 * 0.063);
    EXPECT_NEAR(prev, 0.45, 0.2 * 0.45);
    EXPECT_NEAR(win, 0.80, 0.2 * 0.80);
}

// The designs of the other families (synth/synth_routing.cpp) at narrow
// widths of their presets, against what would mean they no longer work:
//  - routing no better than a router that ignores context: a token then
//    shares k / n_expert of its experts with the previous one by chance, so
//    the designed model must reach twice that;
//  - the design not applied: the same shape with --router-locality 0 (the
//    plain random network) must share less beyond chance;
//  - collapse: a uniform router needs about 90 % of the experts for 90 % of
//    its picks and a collapsed one a handful, so every layer must need at
//    least a third of them.
TEST(RoutingCli, FamilyDesignsShareExpertsBeyondChanceWithoutCollapse) {
    if (getenv("MOESTREAM_SANITIZED")) GTEST_SKIP() << "a statistical check of the model, not of memory safety";
    const std::string base = "/tmp/moestream-routing-family-" + std::to_string(getpid());
    const int n_expert = 64, k = 8;
    const std::string narrow = " --n-embd 256 --ffn 64 --heads 4 --experts " + std::to_string(n_expert) +
                               " --experts-used " + std::to_string(k) + " --type Q8_0 ";
    // MLA (3 dense lead layers, then MoE), Qwen3.5 (3 DeltaNet layers to
    // one gated-attention layer, twice), Mixtral (position-only queries and
    // keys, adjacent-pair rope) and MiniMax-M2 (the same, normed over the
    // whole projection). Narrow shapes route less locally than the full
    // widths the presets are fitted at, so Mixtral's light locality and
    // MiniMax-M2's sharp window are eased to stand clear of the random
    // network's reuse, and Mixtral's depth profile (its bands, and the own
    // channels weighed up in the last third) is left flat: at this width
    // the profile's quiet first and last thirds sit near the random
    // network's reuse. GLM-4.5-Air (the same position-only queries and
    // keys, no q/k norms) in Q4_K, whose zero is off its grid: the design
    // without exact zeros in the carrier's rows collapsed here (14-20 of 64
    // experts for 90 % in layers 8-11); flat popularity, as its skew raises the random network's
    // reuse as much as the design's. Llama 4 Scout (per-head q/k norms
    // without weights, every 4th layer muted), its light locality eased as
    // Mixtral's. Llama 4 Maverick keeps its 128 experts, which is what
    // tells its layers apart from Scout's (no q/k norms: the carrier gain
    // follows the residual and carries the sharpness), over 16 layers (8
    // routed, two of them after a muted layer). DeepSeek V4 Flash (one
    // vector per token as key and value, its norm's weight carrying both
    // knobs; eight heads for its eight output groups), whose first three
    // layers route by token id alike in both passes. The shape's flags come
    // last and win.
    struct Shape {
        std::string flags;
        int n_expert;
    };
    for (const Shape& shape : std::vector<Shape>{
             {"--preset deepseek-v3 --layers 6", n_expert},
             {"--preset qwen3.5-35b-a3b --layers 8 --kv-heads 1", n_expert},
             {"--preset mixtral-8x7b --layers 6 --kv-heads 2 --router-locality 3 --router-bands 1,1,1 --router-own 1,1,1",
              n_expert},
             {"--preset minimax-m2 --layers 6 --kv-heads 2 --router-sharpness 0.6", n_expert},
             {"--preset glm-4.5-air --layers 12 --kv-heads 2 --ffn 256 --type Q4_K_M --router-skew 0", n_expert},
             {"--preset llama4-scout --layers 8 --kv-heads 2 --router-locality 3", n_expert},
             {"--preset llama4-maverick --layers 16 --kv-heads 2 --experts 128", 128},
             {"--preset deepseek-v4-flash --layers 8 --heads 8", n_expert}}) {
        SCOPED_TRACE(shape.flags);
        Json designed, plain;
        for (int pass = 0; pass < 2; pass++) {
            const std::string model = base + (pass ? "-random.gguf" : ".gguf");
            CliResult s =
                run_cli("synth" + narrow + shape.flags + (pass ? " --router-locality 0" : "") + " -o " + model, true);
            ASSERT_EQ(s.rc, 0) << s.out;
            (pass ? plain : designed) = routing_of(model, "", 200);
            std::remove(model.c_str());
        }
        const double chance = double(k) / shape.n_expert;
        const double reuse = designed.at("mean").at("prev_token_reuse").as_number(),
                     random_reuse = plain.at("mean").at("prev_token_reuse").as_number();
        EXPECT_GT(reuse, 2 * chance);
        EXPECT_GT(reuse - chance, 1.25 * (random_reuse - chance)) << "random network: " << random_reuse;
        for (const Json& layer : designed.at("layers").as_array()) {
            SCOPED_TRACE(layer.at("layer").as_int());
            EXPECT_GE(layer.at("experts_for_90pct").as_int(), shape.n_expert / 3);
        }
    }
}

// The two mechanisms of the qwen3.5-35b-a3b and mixtral-8x7b fits
// (docs/routing.md, "Status of issue 37's targets"), each against the same
// shape without it, on a narrow model:
//  - a Gated DeltaNet output gate that reads the carrier alone (steady)
//    lets the context the layers' state holds reach the routers, which a
//    gate drawn from each token's own residual masks token by token: more
//    experts shared by consecutive tokens at the same knobs;
//  - the token's own channels weighed up in the last third's routers lower
//    that third's reuse and change nothing before it (its ffn_norm is all
//    that differs, so the earlier layers route exactly alike).
TEST(RoutingCli, SteadyGateAndOwnChannelsMoveReuseWhereTheySay) {
    if (getenv("MOESTREAM_SANITIZED")) GTEST_SKIP() << "a statistical check of the model, not of memory safety";
    const std::string base = "/tmp/moestream-routing-mech-" + std::to_string(getpid());
    const std::string narrow = " --n-embd 256 --ffn 64 --heads 4 --experts 64 --type Q8_0 ";
    auto routed = [&](const std::string& flags) {
        const std::string model = base + ".gguf";
        CliResult s = run_cli("synth" + narrow + flags + " -o " + model, true);
        EXPECT_EQ(s.rc, 0) << s.out;
        Json j = routing_of(model, "", 200);
        std::remove(model.c_str());
        return j;
    };
    {
        const std::string q35 = "--preset qwen3.5-35b-a3b --layers 8 --kv-heads 1 --experts-used 8";
        const Json steady = routed(q35 + " --router-gate steady"), token = routed(q35 + " --router-gate token");
        const double a = steady.at("mean").at("prev_token_reuse").as_number(),
                     b = token.at("mean").at("prev_token_reuse").as_number();
        EXPECT_GT(a, b + 0.05) << "steady " << a << ", token " << b;
        for (const Json& layer : steady.at("layers").as_array()) EXPECT_GE(layer.at("experts_for_90pct").as_int(), 64 / 3);
    }
    {
        const std::string mx = "--preset mixtral-8x7b --layers 6 --kv-heads 2 --experts-used 2 --router-locality 3";
        const Json plain = routed(mx + " --router-own 1,1,1"), own = routed(mx + " --router-own 1,1,16");
        const auto& p = plain.at("layers").as_array();
        const auto& o = own.at("layers").as_array();
        ASSERT_EQ(p.size(), 6u);
        ASSERT_EQ(o.size(), 6u);
        for (size_t l = 0; l < 4; l++) {  // the first two thirds of 6 layers: 0-1, 2-3
            SCOPED_TRACE(l);
            EXPECT_EQ(o[l].at("prev_token_reuse").as_number(), p[l].at("prev_token_reuse").as_number());
            EXPECT_EQ(o[l].at("experts_for_90pct").as_int(), p[l].at("experts_for_90pct").as_int());
        }
        EXPECT_LT(mean_over(own.at("layers"), "prev_token_reuse", 4, 6),
                  mean_over(plain.at("layers"), "prev_token_reuse", 4, 6));
    }
}
