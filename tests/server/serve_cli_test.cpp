// `moestream serve` as a user starts it (the built binary, the shipped demo
// model): what --help says about -c, and the --mem budget error, which shows
// the request reserve on its own line, apart from the KV cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace {

// Runs a shell command; its stdout and stderr together, and its exit status.
std::pair<std::string, int> run(const std::string& cmd) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    return {out, pclose(p)};
}

const std::string kBinary = MOESTREAM_BINARY;
const std::string kDemo = std::string(MOESTREAM_SOURCE_DIR) + "/models/demo-Q8_0.gguf";

// The "X MiB" after `what` in a budget error.
double mib_after(const std::string& text, const std::string& what) {
    const size_t at = text.find(what);
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + what.size()));
}

TEST(ServeCli, HelpSaysTheContextComesFromTheModel) {
    if (access(kBinary.c_str(), X_OK) != 0) GTEST_SKIP() << kBinary << " is not built here";
    auto [help, status] = run(kBinary + " serve --help");
    ASSERT_EQ(status, 0) << help;
    const size_t c = help.find("-c, --ctx");
    ASSERT_NE(c, std::string::npos) << help;
    const std::string line = help.substr(c, help.find('\n', c) - c);
    EXPECT_EQ(line.find("[default: 4096]"), std::string::npos) << line;
    EXPECT_NE(line.find("[default: the model's training context"), std::string::npos) << line;
}

TEST(ServeCli, TheBudgetErrorShowsTheRequestReserveApartFromTheKvCache) {
    if (access(kBinary.c_str(), X_OK) != 0) GTEST_SKIP() << kBinary << " is not built here";
    auto [small, s1] = run(kBinary + " serve -m " + kDemo + " --mem 16M --max-body 1K --port 0");
    auto [large, s2] = run(kBinary + " serve -m " + kDemo + " --mem 16M --max-body 4M --port 0");
    EXPECT_NE(s1, 0);
    EXPECT_NE(s2, 0);
    ASSERT_NE(small.find("memory budget: needs at least"), std::string::npos) << small;
    ASSERT_NE(large.find("memory budget: needs at least"), std::string::npos) << large;
    // The KV cache is the slots' and does not move with the request reserve.
    EXPECT_GT(mib_after(small, "KV cache "), 0);
    EXPECT_EQ(mib_after(small, "KV cache "), mib_after(large, "KV cache "));
    // The reserve: 3.5 x --request-mem (here --max-body) plus the header buffers.
    const double grown = mib_after(large, "requests ") - mib_after(small, "requests ");
    EXPECT_NEAR(grown, 3.5 * (4 - 1.0 / 1024), 0.15) << small << large;
    EXPECT_NE(large.find("--request-mem"), std::string::npos) << large;
    // Grammars' budget is in the reserve too.
    auto [g1, s3] = run(kBinary + " serve -m " + kDemo + " --mem 16M --max-body 1K --grammar-mem 1M --port 0");
    auto [g5, s4] = run(kBinary + " serve -m " + kDemo + " --mem 16M --max-body 1K --grammar-mem 5M --port 0");
    EXPECT_NEAR(mib_after(g5, "requests ") - mib_after(g1, "requests "), 4.0, 0.15) << g1 << g5;
}

}  // namespace
