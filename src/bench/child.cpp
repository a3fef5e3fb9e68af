#include "bench/child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "bench/cgroup.h"
#include "bench/table.h"

namespace ms {

namespace {

// Between fork and exec only async-signal-safe calls: write(2), not stdio.
void child_fail(const char* what, const char* detail) {
    const char* e = strerror(errno);
    for (const char* s : {what, ": ", detail, ": ", e, "\n"}) {
        ssize_t r = write(2, s, strlen(s));
        (void)r;
    }
    _exit(127);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string ChildResult::describe() const {
    if (timed_out) return strf("timed out after %.0f s", wall_s);
    if (signal) return strf("killed by signal %d (%s)", signal, strsignal(signal));
    return strf("exit %d", exit_code);
}

ChildResult run_child(const ChildOptions& opt) {
    if (opt.argv.empty()) throw std::runtime_error("run_child: empty command");
    // Everything the child needs is prepared before fork.
    std::vector<char*> args;
    for (const std::string& a : opt.argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::string pid_file = opt.cgroup ? opt.cgroup->procs_file() : "";

    auto t0 = std::chrono::steady_clock::now();
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + strerror(errno));
    if (pid == 0) {
        int out = open(opt.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        int err = open(opt.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (out < 0) child_fail("cannot open", opt.stdout_path.c_str());
        if (err < 0) child_fail("cannot open", opt.stderr_path.c_str());
        dup2(out, 1);
        dup2(err, 2);
        if (!pid_file.empty()) {
            // "0" names the writing process itself, in v1 and v2 alike.
            int fd = open(pid_file.c_str(), O_WRONLY | O_CLOEXEC);
            if (fd < 0 || write(fd, "0", 1) != 1) child_fail("cannot join cgroup", pid_file.c_str());
            close(fd);
        }
        execv(args[0], args.data());
        child_fail("cannot execute", args[0]);
    }

    ChildResult r;
    double next_sample = opt.sample_interval_s;
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) throw std::runtime_error(std::string("waitpid: ") + strerror(errno));
        double t = seconds_since(t0);
        if (opt.timeout_s > 0 && t > opt.timeout_s && !r.timed_out) {
            r.timed_out = true;
            kill(pid, SIGKILL);
        }
        if (opt.on_sample && opt.sample_interval_s > 0 && t >= next_sample) {
            opt.on_sample(int(pid), t);
            // Keep to the grid (1 s, 2 s, ...) even when a callback ran late.
            while (next_sample <= t) next_sample += opt.sample_interval_s;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    r.wall_s = seconds_since(t0);
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    return r;
}

std::string tail_lines(const std::string& path, int max_lines) {
    std::ifstream f(path);
    std::vector<std::string> lines;
    for (std::string l; std::getline(f, l);) {
        // Progress bars redraw with \r: keep what the terminal would show.
        size_t cr = l.rfind('\r');
        if (cr != std::string::npos) l = l.substr(cr + 1);
        lines.push_back(l);
        if (int(lines.size()) > max_lines) lines.erase(lines.begin());
    }
    std::string out;
    for (const std::string& l : lines) {
        if (!out.empty()) out += "\n";
        out += l;
    }
    return out;
}

std::string shell_join(const std::vector<std::string>& argv) {
    std::string out;
    for (const std::string& a : argv) {
        if (!out.empty()) out += ' ';
        bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                       "-_./=,:+@%") == std::string::npos;
        if (plain) {
            out += a;
            continue;
        }
        out += '\'';
        for (char c : a) {
            if (c == '\'') out += "'\\''";
            else out += c;
        }
        out += '\'';
    }
    return out;
}

}  // namespace ms
