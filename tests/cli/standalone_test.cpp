// The binary stands on its own: a copy of it in an empty folder, run from
// there with no repository and no ../shared beside it, prints its help,
// writes the tiny synth and runs it, and sizes every preset. Nothing it
// needs (vocabularies included) is read from the build machine's paths,
// and those paths are not compiled into it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "run_cli.h"

namespace fs = std::filesystem;

namespace {

struct Folder {
    std::string path;
    Folder() {
        char tmpl[] = "/tmp/ms-standalone-XXXXXX";
        if (!mkdtemp(tmpl)) abort();
        path = tmpl;
    }
    ~Folder() { fs::remove_all(path); }
};

// `moestream ARGS` run from `dir` with the copy there, stderr included.
CliResult run_in(const std::string& dir, const std::string& args) {
    return run_shell("cd " + dir + " && ./moestream " + args + " 2>&1");
}

}  // namespace

TEST(Standalone, CopyInAnEmptyFolderRunsEveryCommand) {
    Folder tmp;
    const std::string dir = tmp.path + "/bin";
    fs::create_directory(dir);
    fs::copy_file(MOESTREAM_BINARY, dir + "/moestream");
    ASSERT_FALSE(fs::exists(tmp.path + "/shared")) << "a ../shared beside the copy would hide the point";

    CliResult h = run_in(dir, "--help");
    ASSERT_EQ(h.rc, 0) << h.out;
    for (const char* cmd : {"run", "chat", "serve", "logits", "perplexity", "inspect", "quantize", "pack", "synth",
                            "tokenize", "template", "bench"}) {
        CliResult c = run_in(dir, std::string(cmd) + " --help");
        EXPECT_EQ(c.rc, 0) << cmd << ": " << c.out;
    }

    CliResult s = run_in(dir, "synth --preset tiny -o tiny.gguf");
    ASSERT_EQ(s.rc, 0) << s.out;
    CliResult r = run_in(dir, "run -m tiny.gguf -p 'The quick brown fox' -n 16 -c 512 --seed 1");
    ASSERT_EQ(r.rc, 0) << r.out;
    CliResult t = run_in(dir, "tokenize -m tiny.gguf -p 'It is my duty to'");
    EXPECT_EQ(t.rc, 0) << t.out;
    CliResult i = run_in(dir, "inspect tiny.gguf");
    EXPECT_EQ(i.rc, 0) << i.out;
    EXPECT_NE(i.out.find("chat template: yes"), std::string::npos) << i.out;

    // Every preset, as the binary lists them (synth_preset_names()).
    CliResult bad = run_in(dir, "synth --preset none --dry-run");
    ASSERT_NE(bad.rc, 0);
    const size_t at = bad.out.find("(known: ");
    ASSERT_NE(at, std::string::npos) << bad.out;
    std::stringstream names(bad.out.substr(at + 8, bad.out.find(')', at) - at - 8));
    std::vector<std::string> presets;
    for (std::string n; std::getline(names, n, ',');) presets.push_back(n.substr(n.find_first_not_of(' ')));
    EXPECT_GE(presets.size(), 16u);
    for (const std::string& p : presets) {
        CliResult d = run_in(dir, "synth --dry-run --preset " + p);
        EXPECT_EQ(d.rc, 0) << p << ": " << d.out;
        EXPECT_NE(d.out.find("would write"), std::string::npos) << p << ": " << d.out;
    }

    // No path of the build machine's golden data or source tree is compiled
    // into the program's read-only data (debug info, outside it, names
    // sources by design; so do assert() messages, off with NDEBUG, and the
    // source locations of sanitizer builds' checks).
    const std::string rodata = tmp.path + "/rodata";
    ASSERT_EQ(run_shell("objcopy -O binary --only-section=.rodata " + std::string(MOESTREAM_BINARY) + " " + rodata).rc, 0);
    std::ifstream in(rodata, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 100000u);
    EXPECT_NE(bytes.find("Fellow-Citizens of the Senate"), std::string::npos) << "the embedded text is not in .rodata?";
    EXPECT_EQ(bytes.find(MOESTREAM_GOLDEN_DIR), std::string::npos);
    EXPECT_EQ(bytes.find("shared/golden"), std::string::npos);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    EXPECT_EQ(bytes.find(MOESTREAM_SOURCE_DIR), std::string::npos);
#endif
}
