#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

#include "cli/args.h"

namespace ms {

ProgressBar::ProgressBar(std::string label, uint64_t total, bool bytes)
    : label_(std::move(label)), total_(total), bytes_(bytes), tty_(isatty(2)) {
    start_ = last_ = std::chrono::steady_clock::now();
}

ProgressBar::~ProgressBar() {
    if (!finished_ && tty_) fputc('\n', stderr);
}

void ProgressBar::update(uint64_t done) {
    done_ = done;
    auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(tty_ ? 100 : 5000)) return;
    last_ = now;
    draw(false);
}

void ProgressBar::finish() {
    if (finished_) return;
    done_ = total_;
    draw(true);
    finished_ = true;
}

void ProgressBar::draw(bool final) {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    double frac = total_ ? double(done_) / double(total_) : 1.0;
    double rate = secs > 0 ? double(done_) / secs : 0;
    char line[256];
    std::string amount = bytes_ ? format_bytes(double(done_)) + " / " + format_bytes(double(total_))
                                : std::to_string(done_) + " / " + std::to_string(total_);
    std::string r = bytes_ ? format_bytes(rate) + "/s" : std::to_string(uint64_t(rate)) + "/s";
    if (final) {
        snprintf(line, sizeof line, "%s: %s in %.1f s (%s)", label_.c_str(), amount.c_str(), secs, r.c_str());
    } else {
        int width = 30, fill = int(frac * width);
        std::string bar(size_t(fill), '#');
        bar.resize(size_t(width), '.');
        double eta = rate > 0 ? double(total_ - done_) / rate : 0;
        snprintf(line, sizeof line, "%s [%s] %5.1f%% %s %s ETA %.0fs", label_.c_str(), bar.c_str(), frac * 100,
                 amount.c_str(), r.c_str(), eta);
    }
    if (tty_) fprintf(stderr, "\r\033[K%s%s", line, final ? "\n" : "");
    else fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

}  // namespace ms
