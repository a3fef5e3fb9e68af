// `moestream pack` end to end: writes and verifies a sidecar, finds the model
// from the sidecar's header, and exits non-zero with a one-line error naming
// the layer and expert for a damaged record, naming the file for a truncated
// GGUF, and naming the change for a stale sidecar.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <cstdio>

#include "json/json.h"
#include "store/layout.h"
#include "test_util.h"
#include "../golden_required.h"

namespace ms {
namespace {

struct Result {
    int status;
    std::string out;  // stdout and stderr
};

Result run(const std::string& args) {
    std::string cmd = std::string(MOESTREAM_BINARY) + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    Result r{-1, ""};
    if (!p) return r;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

TEST(PackCli, WriteVerifyAndRefuse) {
    test::TempDir dir;
    std::string model = dir.file("m.gguf");
    test::copy_file(test::golden_model("qwen3moe-Q4_K_M"), model);

    Result w = run("pack " + model);
    ASSERT_EQ(w.status, 0) << w.out;
    EXPECT_NE(w.out.find("24 experts in 3 layers"), std::string::npos) << w.out;
    std::string side = model + ".experts";

    Result v = run("pack --verify " + side + " --json");
    ASSERT_EQ(v.status, 0) << v.out;
    size_t open_brace = v.out.find('{');  // the progress line on stderr may come first
    Json j = Json::parse(v.out.substr(open_brace, v.out.rfind('}') + 1 - open_brace));
    EXPECT_TRUE(j.at("ok").as_bool());
    EXPECT_EQ(j.at("experts").as_int(), 24);

    // A sidecar written elsewhere finds its model through the header.
    std::string other = dir.file("elsewhere.experts");
    ASSERT_EQ(run("pack " + model + " -o " + other).status, 0);
    EXPECT_EQ(run("pack --verify " + other).status, 0);

    // One flipped byte in layer 0 expert 3's record.
    GgufFile f = GgufFile::open(model);
    ExpertLayout lay = ExpertLayout::packed(f, find_expert_layers(f), side);
    test::flip_byte(side, lay.place(0, 3).reads[0].offset + 5);
    Result bad = run("pack --verify " + model);
    EXPECT_EQ(bad.status, 1);
    EXPECT_NE(bad.out.find("layer 0 expert 3: checksum mismatch"), std::string::npos) << bad.out;

    // Stale: the model was touched after packing.
    struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, model.c_str(), times, 0), 0);
    Result stale = run("pack --verify " + other);
    EXPECT_EQ(stale.status, 1);
    EXPECT_NE(stale.out.find("stale sidecar"), std::string::npos) << stale.out;

    // Truncated GGUF: a one-line error naming the file.
    std::string cut = dir.file("cut.gguf");
    test::copy_file(test::golden_model("qwen3moe-Q4_K_M"), cut);
    ASSERT_EQ(truncate(cut.c_str(), 300000), 0);
    Result t = run("pack " + cut);
    EXPECT_EQ(t.status, 1);
    EXPECT_NE(t.out.find(cut), std::string::npos) << t.out;
    EXPECT_EQ(std::count(t.out.begin(), t.out.end(), '\n'), 1) << t.out;

    Result help = run("pack --help");
    EXPECT_EQ(help.status, 0);
    EXPECT_NE(help.out.find("--verify"), std::string::npos);
}

}  // namespace
}  // namespace ms
