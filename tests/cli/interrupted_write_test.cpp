// `synth` and `pack` out of space or killed midway: they write under a
// temporary name and rename at the end, so the target name never holds a
// partial file; a full disk (simulated by a file-size limit, which makes
// write(2) fail with EFBIG as a full disk fails it with ENOSPC) gives one
// error line naming the file and removes the temporary; a file left by a
// kill is refused by every reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "run_cli.h"

namespace {

std::string prefix() { return "/tmp/moestream-cli-interrupted-" + std::to_string(getpid()); }

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// The binary under a file-size limit of `kib` KiB, SIGXFSZ ignored (as the
// limit's signal would otherwise kill it before write(2) can fail).
CliResult run_limited(const std::string& args, int kib) {
    return run_shell("bash -c \"trap '' XFSZ; ulimit -f " + std::to_string(kib) + "; exec " +
                     std::string(MOESTREAM_BINARY) + " " + args + "\" 2>&1");
}

int lines(const std::string& s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n + (!s.empty() && s.back() != '\n');
}

}  // namespace

TEST(InterruptedWrite, SynthOnAFullDiskLeavesNothing) {
    const std::string out = prefix() + "-full.gguf";
    CliResult r = run_limited("synth --preset tiny -o " + out, 512);
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find(out), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("File too large"), std::string::npos) << r.out;
    EXPECT_FALSE(exists(out));
    EXPECT_FALSE(exists(out + ".partial"));
}

TEST(InterruptedWrite, PackOnAFullDiskLeavesNoSidecar) {
    const std::string model = prefix() + "-pack.gguf";
    ASSERT_EQ(run_cli("synth --preset tiny --seed 3 -o " + model, false).rc, 0);
    CliResult r = run_limited("pack " + model, 1024);  // the sidecar needs several MiB
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find(model + ".experts"), std::string::npos) << r.out;
    EXPECT_FALSE(exists(model + ".experts"));
    EXPECT_FALSE(exists(model + ".experts.tmp"));
    // The run that follows reads the model, not a half-written sidecar.
    CliResult run = run_cli("run -m " + model + " --layout packed -p hi -n 1", true);
    EXPECT_NE(run.rc, 0);
    EXPECT_EQ(run_cli("run -m " + model + " --layout auto -p hi -n 2 -t 2", false).rc, 0);
    std::remove(model.c_str());
}

TEST(InterruptedWrite, KilledSynthLeavesOnlyAFileThatIsRefused) {
    const std::string out = prefix() + "-killed.gguf", partial = out + ".partial";
    // Kill -9 once a few MiB of a ~0.8 GB model are written (at most 30 s).
    const std::string script = std::string("bash -c '") + MOESTREAM_BINARY +
                               " synth --preset qwen3-30b-a3b --layers 2 -o " + out +
                               " 2>/dev/null & p=$!; for i in $(seq 600); do s=$(stat -c %s " + partial +
                               " 2>/dev/null || echo 0); [ $s -gt 8000000 ] && break; sleep 0.05; done; kill -9 $p; "
                               "wait $p; true'";
    ASSERT_EQ(std::system(script.c_str()), 0);
    EXPECT_FALSE(exists(out));
    ASSERT_TRUE(exists(partial));
    CliResult r = run_cli("inspect " + partial, true);
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_NE(r.out.find("lies outside the file"), std::string::npos) << r.out;
    r = run_cli("run -m " + partial + " -p hi -n 1", true);
    EXPECT_EQ(r.rc, 1) << r.out;
    std::remove(partial.c_str());
}
