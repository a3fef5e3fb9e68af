// A progress line on stderr for long work (synth, pack, benches): percent,
// bytes, rate and ETA, redrawn at most 10 times a second, silent when
// stderr is not a terminal unless asked for.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace ms {

class ProgressBar {
public:
    ProgressBar(std::string label, uint64_t total, bool bytes = true);
    ~ProgressBar();
    void update(uint64_t done);
    void finish();  // prints the final line with the average rate

private:
    void draw(bool final);
    std::string label_;
    uint64_t total_, done_ = 0;
    bool bytes_, tty_, finished_ = false;
    std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace ms
