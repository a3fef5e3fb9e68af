// Runs the built `moestream` binary for the end-to-end CLI tests: exit
// status and captured output (stdout, plus stderr when asked).
#pragma once
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

struct CliResult {
    int rc;
    std::string out;
};

inline CliResult run_cli(const std::string& args, bool with_stderr) {
    std::string cmd = std::string(MOESTREAM_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
    CliResult r{-1, ""};
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
    int st = pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

inline uint64_t file_size(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}
