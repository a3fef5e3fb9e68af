// Runs the built `moestream` binary for the end-to-end CLI tests: exit
// status and captured output (stdout, plus stderr when asked).
#pragma once
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "json/json.h"

struct CliResult {
    int rc;
    std::string out;
};

// A shell command line: its exit status and stdout.
inline CliResult run_shell(const std::string& cmd) {
    CliResult r{-1, ""};
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
    int st = pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

inline CliResult run_cli(const std::string& args, bool with_stderr) {
    return run_shell(std::string(MOESTREAM_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

inline uint64_t file_size(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

// " --mem B --cache-slots N -c 512 -t 2 ": a budget of the model's fixed
// part (measured by a probe run: under sanitizers the process itself is tens
// of MiB larger) plus `slots` expert slots and 1 MiB, so a run must stream
// experts; the cap keeps the cache at `slots` when a run's own RSS comes out
// a few MiB below the probe's (CI once got a cache of every expert so).
// Empty when the probe fails (the caller's own run then reports why).
// probe_args: flags that change the fixed part (e.g. --trace, whose buffer
// --mem counts), given to the probe as to the run.
inline std::string streaming_budget(const std::string& model, int slots, const std::string& probe,
                                    const std::string& probe_args = "") {
    CliResult pr = run_cli("run -m " + model + " -c 512 -t 2 -p hi -n 1 " + probe_args + " --report " + probe, true);
    if (pr.rc != 0) return "";
    const ms::Json st = ms::Json::parse_file(probe).at("store_settings");
    std::remove(probe.c_str());
    const int64_t fixed = st.at("resident_bytes").as_int() + st.at("kv_and_scratch_bytes").as_int() +
                          st.at("process_bytes").as_int();
    return " --mem " + std::to_string(fixed + slots * st.at("slot_bytes").as_int() + (1 << 20)) + " --cache-slots " +
           std::to_string(slots) + " -c 512 -t 2 ";
}

// `moestream ARGS --report REPORT` under streaming_budget(model, slots)
// with the cache capped at `slots` (--cache-slots): the process's own RSS
// when the cache is planned moves between runs (by MiBs under sanitizers),
// and with it what a fixed --mem buys, so the cap keeps a test's cache much
// smaller than the experts; a budget the run refuses as too small is raised
// a quarter MiB at a time, up to 3 MiB.
inline CliResult run_streamed(const std::string& args, const std::string& model, int slots, const std::string& probe,
                              const std::string& report) {
    const std::string budget = streaming_budget(model, slots, probe);
    if (budget.empty()) return CliResult{-1, "streaming_budget: the probe run failed"};
    const int64_t mem = std::stoll(budget.substr(budget.find("--mem ") + 6));
    const std::string rest = budget.substr(budget.find(" -c "));
    CliResult r{-1, ""};
    for (int64_t extra = 0; extra <= (3 << 20); extra += 1 << 18) {
        r = run_cli(args + " --report " + report + " --cache-slots " + std::to_string(slots) + " --mem " +
                        std::to_string(mem + extra) + rest,
                    true);
        if (r.rc == 0 || r.out.find("memory budget") == std::string::npos) break;
    }
    return r;
}
