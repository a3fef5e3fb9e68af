#include "telemetry/trace.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <stdexcept>

#include "json/json.h"

namespace ms {

namespace {

std::atomic<Trace*> g_active{nullptr};
std::atomic<int> g_next_lane{1};

// Microseconds with nanosecond digits, the unit Chrome traces use.
void append_us(std::string& out, int64_t ns) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64 ".%03d", ns / 1000, int(ns % 1000 < 0 ? -(ns % 1000) : ns % 1000));
    out += buf;
}

}  // namespace

Trace* active_trace() { return g_active.load(std::memory_order_acquire); }
void set_active_trace(Trace* t) { g_active.store(t, std::memory_order_release); }

Trace::Trace(size_t capacity) : events_(capacity), origin_ns_(now_ns()) {}

int64_t Trace::now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int Trace::thread_lane() {
    thread_local int lane = g_next_lane.fetch_add(1, std::memory_order_relaxed);
    return lane;
}

void Trace::complete(const char* name, const char* cat, int64_t start_ns, int64_t end_ns, int tid,
                     const char* arg0_name, int64_t arg0, const char* arg1_name, int64_t arg1) {
    size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= events_.size()) return;  // counted as dropped by size()/dropped()
    Event& e = events_[i];
    e.name = name;
    e.cat = cat;
    e.start_ns = start_ns;
    e.dur_ns = end_ns > start_ns ? end_ns - start_ns : 0;
    e.arg0_name = arg0_name;
    e.arg0 = arg0;
    e.arg1_name = arg1_name;
    e.arg1 = arg1;
    e.tid = tid >= 0 ? tid : thread_lane();
}

void Trace::name_lane(int tid, std::string name) { lane_names_.emplace_back(tid, std::move(name)); }

size_t Trace::size() const { return std::min(next_.load(), events_.size()); }

size_t Trace::dropped() const {
    size_t n = next_.load();
    return n > events_.size() ? n - events_.size() : 0;
}

std::string Trace::json() const {
    std::string out;
    out.reserve(size() * 120 + 256);
    write_json(out, std::string::npos, [](std::string&) {});
    return out;
}

void Trace::write(const std::string& path) const {
    std::ofstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot write");
    std::string chunk;
    chunk.reserve((size_t(1) << 20) + 4096);
    write_json(chunk, size_t(1) << 20, [&](std::string& out) {
        f.write(out.data(), std::streamsize(out.size()));
        out.clear();
    });
    if (!f.flush()) throw std::runtime_error(path + ": write failed");
}

void Trace::write_json(std::string& out, size_t chunk, const std::function<void(std::string&)>& flush) const {
    const int pid = int(getpid());
    out += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"moestream\",\"dropped_events\":";
    out += std::to_string(dropped());
    out += "},\"traceEvents\":[\n";
    char buf[64];
    snprintf(buf, sizeof buf, "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\",", pid);
    out += buf;
    out += "\"args\":{\"name\":\"moestream\"}}";
    for (const auto& [tid, name] : lane_names_) {
        snprintf(buf, sizeof buf, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",", pid, tid);
        out += buf;
        out += "\"args\":{\"name\":";
        json_quote(out, name);
        out += "}}";
    }
    for (size_t i = 0; i < size(); ++i) {
        const Event& e = events_[i];
        out += ",\n{\"ph\":\"X\",\"name\":";
        json_quote(out, e.name ? e.name : "?");
        out += ",\"cat\":";
        json_quote(out, e.cat ? e.cat : "");
        out += ",\"ts\":";
        append_us(out, e.start_ns - origin_ns_);
        out += ",\"dur\":";
        append_us(out, e.dur_ns);
        snprintf(buf, sizeof buf, ",\"pid\":%d,\"tid\":%d", pid, e.tid);
        out += buf;
        if (e.arg0_name || e.arg1_name) {
            out += ",\"args\":{";
            if (e.arg0_name) {
                json_quote(out, e.arg0_name);
                out += ':';
                out += std::to_string(e.arg0);
            }
            if (e.arg1_name) {
                if (e.arg0_name) out += ",";
                json_quote(out, e.arg1_name);
                out += ':';
                out += std::to_string(e.arg1);
            }
            out += "}";
        }
        out += "}";
        if (out.size() >= chunk) flush(out);
    }
    out += "\n]}\n";
    flush(out);
}

}  // namespace ms
