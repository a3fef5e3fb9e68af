#include "telemetry/counters.h"

#include <algorithm>
#include <numeric>

namespace ms {

const char* read_reason_name(ReadReason r) {
    static const char* names[kReadReasons] = {"resident", "demand", "prefetch", "prefill", "rows"};
    return names[int(r)];
}

void StoreCounters::init(int layers, int experts) {
    n_layers = layers;
    n_experts = experts;
    hits.assign(size_t(layers), 0);
    misses.assign(size_t(layers), 0);
    late_hits.assign(size_t(layers), 0);
    uses.assign(size_t(layers) * size_t(experts), 0);
    predicted.assign(size_t(layers), 0);
    predicted_correct.assign(size_t(layers), 0);
    predicted_actual.assign(size_t(layers), 0);
}

void StoreCounters::record_use(int layer, int expert, bool hit, bool late, int64_t reuse_distance) {
    (hit ? hits : misses)[size_t(layer)]++;
    if (late) late_hits[size_t(layer)]++;
    uses[size_t(layer) * size_t(n_experts) + size_t(expert)]++;
    if (reuse_distance < 0) {
        first_uses++;
        return;
    }
    size_t b = 0;
    while (b + 1 < reuse_hist.size() && (uint64_t(1) << b) <= uint64_t(reuse_distance)) b++;
    reuse_hist[b]++;
}

static uint64_t sum(const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), uint64_t(0)); }
uint64_t StoreCounters::total_hits() const { return sum(hits); }
uint64_t StoreCounters::total_misses() const { return sum(misses); }
uint64_t StoreCounters::total_needed() const { return std::accumulate(needed, needed + kReadReasons, uint64_t(0)); }
uint64_t StoreCounters::total_read() const { return std::accumulate(read, read + kReadReasons, uint64_t(0)); }

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

Json StoreCounters::to_json() const {
    Json j = Json::object();
    uint64_t h = total_hits(), m = total_misses();
    j["hits"] = h;
    j["misses"] = m;
    j["hit_rate"] = ratio(double(h), double(h + m));
    j["evictions"] = evictions;
    j["read_retries"] = read_retries;

    Json bytes = Json::object();
    for (int r = 0; r < kReadReasons; r++) {
        Json b = Json::object();
        b["needed"] = needed[r];
        b["read"] = read[r];
        b["requests"] = requests[r];
        bytes[read_reason_name(ReadReason(r))] = std::move(b);
    }
    j["bytes"] = std::move(bytes);
    j["bytes_needed"] = total_needed();
    j["bytes_read"] = total_read();

    Json pf = Json::object();
    pf["issued"] = prefetch_issued;
    pf["used"] = prefetch_used;
    pf["evicted_unused"] = prefetch_unused_evicted;
    pf["precision"] = ratio(double(prefetch_used), double(prefetch_issued));
    pf["wasted_bytes"] = prefetch_wasted_bytes;
    uint64_t np = sum(predicted), nc = sum(predicted_correct), na = sum(predicted_actual);
    pf["predicted"] = np;
    pf["prediction_precision"] = ratio(double(nc), double(np));
    pf["prediction_recall"] = ratio(double(nc), double(na));
    j["prefetch"] = std::move(pf);

    j["checksum_bytes"] = checksum_bytes;
    j["checksum_s"] = checksum_s;
    j["steps"] = steps;
    j["decode_steps"] = decode_steps;
    j["prefill_tokens"] = prefill_tokens;
    j["step_fit_steps"] = step_fit_steps;

    // Per layer: hits, misses and how concentrated the routing was: the
    // number of distinct experts used and how few of the most used ones
    // account for 50/80/90 % of the uses.
    Json layers = Json::array();
    for (int l = 0; l < n_layers; l++) {
        std::vector<uint64_t> u(uses.begin() + ptrdiff_t(size_t(l) * size_t(n_experts)),
                                uses.begin() + ptrdiff_t(size_t(l + 1) * size_t(n_experts)));
        uint64_t total = sum(u);
        if (total == 0 && hits[size_t(l)] == 0 && misses[size_t(l)] == 0) continue;
        std::sort(u.begin(), u.end(), [](uint64_t a, uint64_t b) { return a > b; });
        Json L = Json::object();
        L["layer"] = l;
        L["hits"] = hits[size_t(l)];
        L["misses"] = misses[size_t(l)];
        L["late_hits"] = late_hits[size_t(l)];
        L["hit_rate"] = ratio(double(hits[size_t(l)]), double(hits[size_t(l)] + misses[size_t(l)]));
        if (predicted[size_t(l)] > 0) {
            L["prediction_precision"] = ratio(double(predicted_correct[size_t(l)]), double(predicted[size_t(l)]));
            L["prediction_recall"] = ratio(double(predicted_correct[size_t(l)]), double(predicted_actual[size_t(l)]));
        }
        L["unique_experts"] = uint64_t(std::count_if(u.begin(), u.end(), [](uint64_t x) { return x > 0; }));
        const double shares[3] = {0.5, 0.8, 0.9};
        const char* names[3] = {"experts_for_50pct", "experts_for_80pct", "experts_for_90pct"};
        for (int s = 0; s < 3; s++) {
            uint64_t acc = 0;
            int k = 0;
            while (k < int(u.size()) && double(acc) < shares[s] * double(total)) acc += u[size_t(k++)];
            L[names[s]] = k;
        }
        layers.push_back(std::move(L));
    }
    j["layers"] = std::move(layers);

    Json hist = Json::array();
    for (size_t b = 0; b < reuse_hist.size(); b++) {
        if (reuse_hist[b] == 0) continue;
        Json e = Json::object();
        e["min"] = b == 0 ? uint64_t(0) : uint64_t(1) << (b - 1);
        e["max"] = (uint64_t(1) << b) - 1;
        e["count"] = reuse_hist[b];
        hist.push_back(std::move(e));
    }
    Json reuse = Json::object();
    reuse["first_uses"] = first_uses;
    reuse["histogram"] = std::move(hist);
    j["reuse_distance"] = std::move(reuse);
    return j;
}

}  // namespace ms
