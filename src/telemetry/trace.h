// A Chrome-trace timeline (the JSON that Perfetto and chrome://tracing open):
// complete events ("ph":"X") with a start, a duration, a lane (tid) and up to
// two integer arguments. Recording is cheap enough for every layer and every
// read: one atomic increment and a store into a buffer allocated up front;
// names are not copied, so they must be string literals (or otherwise
// outlive the Trace). When the buffer is full further events are counted as
// dropped, never allocated.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace ms {

class Trace {
public:
    // capacity: events held; 64 bytes each, allocated and written (so
    // resident) here: a program that makes its trace before planning its
    // memory finds it in its RSS.
    explicit Trace(size_t capacity = size_t(1) << 18);
    Trace(const Trace&) = delete;
    Trace& operator=(const Trace&) = delete;

    // Monotonic clock, nanoseconds (the timebase of every event).
    static int64_t now_ns();

    // The calling thread's lane: a small number given out on first use.
    static int thread_lane();

    // Records [start_ns, end_ns) as `name` in category `cat` on lane tid
    // (-1: the calling thread's lane). Argument names, when given, label the
    // integer values (layer, expert, bytes...). Thread-safe.
    void complete(const char* name, const char* cat, int64_t start_ns, int64_t end_ns, int tid = -1,
                  const char* arg0_name = nullptr, int64_t arg0 = 0, const char* arg1_name = nullptr,
                  int64_t arg1 = 0);

    // Names a lane in the viewer ("io lane 3", "decode"). Not for the hot
    // path: it allocates.
    void name_lane(int tid, std::string name);

    // Measures a scope: Trace::Span s(trace, "attention", "layer", "layer", l);
    // records on destruction. A null trace makes it free.
    class Span {
    public:
        Span(Trace* t, const char* name, const char* cat, const char* arg0_name = nullptr, int64_t arg0 = 0)
            : t_(t), name_(name), cat_(cat), arg0_name_(arg0_name), arg0_(arg0), start_(t ? now_ns() : 0) {}
        ~Span() {
            if (t_) t_->complete(name_, cat_, start_, now_ns(), -1, arg0_name_, arg0_);
        }
        Span(const Span&) = delete;
        Span& operator=(const Span&) = delete;

    private:
        Trace* t_;
        const char* name_;
        const char* cat_;
        const char* arg0_name_;
        int64_t arg0_;
        int64_t start_;
    };

    size_t size() const;      // events recorded (at most capacity)
    size_t dropped() const;   // events that did not fit
    size_t capacity() const { return events_.size(); }

    // The whole timeline as Chrome-trace JSON; call once recording is over.
    std::string json() const;
    // Writes json() to path a MiB at a time (the whole text of a full trace
    // would be tens of MB beside the budget); throws "PATH: cannot write".
    void write(const std::string& path) const;

private:
    // json() into out, handed to flush(out) (which empties it) whenever it
    // passes chunk bytes, and at the end.
    void write_json(std::string& out, size_t chunk, const std::function<void(std::string&)>& flush) const;

    struct Event {
        const char* name;
        const char* cat;
        int64_t start_ns;
        int64_t dur_ns;
        const char* arg0_name;
        int64_t arg0;
        const char* arg1_name;
        int64_t arg1;
        int32_t tid;
    };
    std::vector<Event> events_;
    std::atomic<size_t> next_{0};
    int64_t origin_ns_;
    std::vector<std::pair<int, std::string>> lane_names_;
};

// The trace the running program records into, or null (the default: no
// tracing). The runtime sets it for `run --trace FILE`; the store and the
// forward pass record through it without having a Trace passed to them.
Trace* active_trace();
void set_active_trace(Trace* t);

}  // namespace ms
