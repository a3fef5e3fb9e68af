// Where tests find the golden reference data: ../shared/golden beside the
// repository. Only tests read it, never the moestream binary. In a clone of
// this repository alone it is absent, and a test that needs it skips through
// SKIP_WITHOUT_GOLDEN() (one test) or golden_required.h (every test of a
// program), which say why and append "PROGRAM N" (N tests skipped) to the
// build tree's golden-skipped.txt; `make test` prints one line from it, and
// fails if anything was logged while the folder is present (CI).
#pragma once
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>

namespace ms::golden {

inline std::string dir() { return MOESTREAM_GOLDEN_DIR; }
inline bool available() { return std::filesystem::is_directory(dir()); }

inline std::string skip_reason(int n_tests) {
    if (FILE* f = fopen(MOESTREAM_GOLDEN_SKIP_LOG, "a")) {
        fprintf(f, "%s %d\n", program_invocation_short_name, n_tests);
        fclose(f);
    }
    return dir() + " not found (golden reference data): skipped " + std::to_string(n_tests) + " test(s)";
}

}  // namespace ms::golden

// First statement of a test that reads golden files.
#define SKIP_WITHOUT_GOLDEN()                                                     \
    do {                                                                          \
        if (!::ms::golden::available()) GTEST_SKIP() << ::ms::golden::skip_reason(1); \
    } while (0)
