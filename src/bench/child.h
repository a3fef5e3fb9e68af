// Runs one benchmark case as a child process (normally `moestream run`), so
// every case starts from a fresh process and a memory cgroup applies to it
// alone: moved into the cgroup before exec, stdout and stderr to files, a
// callback every sampling interval while it runs, killed after a timeout.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace ms {

class MemoryCgroup;

struct ChildOptions {
    std::vector<std::string> argv;       // argv[0] is the program path
    std::string stdout_path = "/dev/null";
    std::string stderr_path = "/dev/null";
    const MemoryCgroup* cgroup = nullptr;
    double timeout_s = 0;                // 0: none
    double sample_interval_s = 0;        // 0: no sampling
    // Called every sample_interval_s with the child's pid and the seconds
    // since it started, from the waiting thread.
    std::function<void(int pid, double t)> on_sample;
};

struct ChildResult {
    int exit_code = -1;   // when it exited normally
    int signal = 0;       // when a signal ended it
    bool timed_out = false;
    double wall_s = 0;
    bool ok() const { return exit_code == 0 && signal == 0 && !timed_out; }
    std::string describe() const;  // "exit 0", "killed by signal 9", "timed out after 30 s"
};

// Throws when the process cannot be started (fork failure); a program that
// cannot be executed shows up as exit code 127 with the reason in stderr.
ChildResult run_child(const ChildOptions& opt);

// The last max_lines lines of a text file, for error messages.
std::string tail_lines(const std::string& path, int max_lines);

// The command line as a shell would show it (for logs and reports).
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace ms
