// `moestream synth` end to end: the tiny preset with a router skew, read back
// by `inspect --json`; dimension and type overrides; bad flags as one-line
// errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "json/json.h"
#include "run_cli.h"

using ms::Json;

namespace {

std::string temp_path(const char* name) {
    return "/tmp/moestream-cli-synth-" + std::to_string(getpid()) + "-" + name + ".gguf";
}

}  // namespace

TEST(SynthCli, TinyWithSkewReadsBack) {
    std::string out = temp_path("tiny");
    CliResult r = run_cli("synth --preset tiny --router-skew 0.8 --seed 3 --json -o " + out, false);
    ASSERT_EQ(r.rc, 0) << r.out;
    Json j = Json::parse(r.out);
    EXPECT_EQ(uint64_t(j.at("bytes").as_int()), file_size(out));
    EXPECT_GT(j.at("mb_per_s").as_number(), 0);

    CliResult ins = run_cli("inspect --json " + out, false);
    ASSERT_EQ(ins.rc, 0) << ins.out;
    Json s = Json::parse(ins.out);
    EXPECT_EQ(s.at("architecture").as_string(), "qwen3moe");
    EXPECT_EQ(s.at("hparams").at("n_layer").as_int(), 6);
    EXPECT_EQ(s.at("hparams").at("n_expert").as_int(), 16);
    EXPECT_EQ(s.at("hparams").at("n_expert_used").as_int(), 4);
    EXPECT_EQ(s.at("experts").at("moe_layers").as_int(), 6);
    EXPECT_EQ(s.at("experts").at("ranges_per_expert").as_int(), 3);
    EXPECT_NEAR(s.at("synth").at("router_skew").as_number(), 0.8, 1e-6);  // stored as f32
    EXPECT_EQ(s.at("synth").at("seed").as_int(), 3);
    // Skewed: the top expert takes well over its uniform 1/16 of selections.
    EXPECT_GT(s.at("synth").at("top1_share").as_number(), 1.5 / 16);
    EXPECT_LT(s.at("synth").at("top1_share").as_number(), 0.5 / 4 + 0.01);
    unlink(out.c_str());
}

TEST(SynthCli, OverridesAndTypes) {
    std::string out = temp_path("small");
    CliResult r = run_cli("synth --preset tiny --layers 2 --experts 8 --experts-used 2 --n-embd 128 --ffn 64 --heads 2 "
                   "--kv-heads 1 --head-dim 32 --type Q8_0 -o " + out, true);
    ASSERT_EQ(r.rc, 0) << r.out;
    CliResult ins = run_cli("inspect --json " + out, false);
    ASSERT_EQ(ins.rc, 0) << ins.out;
    Json s = Json::parse(ins.out);
    const Json& hp = s.at("hparams");
    EXPECT_EQ(hp.at("n_layer").as_int(), 2);
    EXPECT_EQ(hp.at("n_expert").as_int(), 8);
    EXPECT_EQ(hp.at("n_expert_used").as_int(), 2);
    EXPECT_EQ(hp.at("n_embd").as_int(), 128);
    EXPECT_EQ(hp.at("expert_ffn").as_int(), 64);
    EXPECT_EQ(hp.at("n_head").as_int(), 2);
    EXPECT_EQ(hp.at("n_head_kv").as_int(), 1);
    EXPECT_EQ(hp.at("head_dim_k").as_int(), 32);
    for (const Json& t : s.at("types").as_array()) {
        std::string name = t.at("type").as_string();
        EXPECT_TRUE(name == "Q8_0" || name == "F32") << name;
    }
    // One Q8_0 expert: 3 matrices of 128 x 64 weights, 34 bytes per 32.
    EXPECT_EQ(s.at("experts").at("bytes_per_expert_max").as_int(), 3 * 128 * 64 / 32 * 34);
    unlink(out.c_str());
}

TEST(SynthCli, BadFlagsAreOneLineErrors) {
    std::string out = temp_path("bad");
    for (std::string args : {"--preset nope -o " + out, "--preset tiny --experts-used 99 -o " + out,
                             "--preset tiny --type Q3_K -o " + out, std::string("--preset tiny"), "--preset tiny --layers x -o " + out,
                             "--preset tiny --vocab /nonexistent.gguf -o " + out,
                             "--preset tiny --router-bands 1,2 -o " + out, "--preset tiny --router-bands 1,x,1 -o " + out,
                             "--preset tiny --router-bands 1,1,9 -o " + out}) {
        SCOPED_TRACE(args);
        CliResult r = run_cli("synth " + args, true);
        EXPECT_EQ(r.rc, 1) << r.out;
        EXPECT_EQ(r.out.rfind("moestream synth: error: ", 0), 0u) << r.out;
        EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    }
    EXPECT_NE(access(out.c_str(), F_OK), 0);
    EXPECT_NE(access((out + ".partial").c_str(), F_OK), 0);
    CliResult h = run_cli("synth --help", true);
    EXPECT_EQ(h.rc, 0);
    for (const char* flag : {"--preset", "--output", "--type", "--layers", "--experts", "--experts-used", "--n-embd",
                             "--ffn", "--heads", "--kv-heads", "--head-dim", "--vocab", "--router-skew", "--seed"})
        EXPECT_NE(h.out.find(flag), std::string::npos) << flag;
}
