// bench routing: what a model's routing looks like on a text and what a
// cache of a given size would hit. Statistics per layer (spread, popularity,
// reuse between nearby tokens) and an offline replay of the trace through
// the store's own SlotCache policies and Belady's optimum, the ceiling any
// policy can reach at that size.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "json/json.h"
#include "store/slot_cache.h"
#include "telemetry/routing_trace.h"

namespace ms {

struct LayerRouting {
    int layer = 0;
    int64_t picks = 0;             // tokens x experts chosen
    int unique = 0;                // distinct experts used
    int for_50 = 0, for_80 = 0, for_90 = 0;  // fewest experts covering that share of the picks
    double top_share = 0;          // share of the picks taken by the most used expert
    double entropy = 0;            // of the pick distribution, in bits
    double prev_reuse = 0;         // share of a token's experts the previous token also chose
    double window_reuse = 0;       // ... that any of the previous `window` tokens chose
};

struct RoutingStats {
    int window = 8;
    int64_t tokens = 0;
    int n_expert = 0, k = 0;
    std::vector<LayerRouting> layers;  // routed layers only
    LayerRouting mean;                 // the per-layer figures averaged over layers
};

RoutingStats routing_stats(const RoutingTrace& trace, int window);

// Belady's optimum stands beside the store's policies in the replay.
enum class ReplayPolicy { Lru, Lfu, Wlfu, Belady };
const char* replay_policy_name(ReplayPolicy p);

// Hit rate of a cache of `slots` experts (all layers share it, as the
// store's does) over the trace in decode order (token by token, layer by
// layer), starting empty. A layer's experts stay pinned while it runs and
// each token is a step, as in decode. Lru, Lfu and Wlfu replay through
// SlotCache itself. rows (optional, laid out as the trace's ids): how many
// sequences chose each expert of a union_trace step, counted as uses as
// the store counts them. n_seqs: the sequences a step decodes together
// (a union_trace's streams). step_fit: the cache's step fit (on in the
// store unless --step-fit off; SlotCache), in steps of several sequences.
double replay_hit_rate(const RoutingTrace& trace, int64_t slots, ReplayPolicy policy,
                       const int32_t* rows = nullptr, int n_seqs = 1, bool step_fit = true);

struct CachePoint {
    int per_layer = 0;     // slots per routed layer
    int64_t slots = 0;     // per_layer x routed layers
    double lru = 0, lfu = 0, wlfu = 0, belady = 0;
    // Streams only: WLFU counting an expert once a step however many
    // sequences chose it (the store before issue 36), and the ceiling on
    // the hit rate of any schedule and policy (streams_read_bound).
    double wlfu_once = -1, bound = -1;
    // Streams only: LRU and WLFU without the step fit (--step-fit off).
    double lru_plain = -1, wlfu_plain = -1;
};

// One point per entry of per_layer_slots (each at least k, at most n_expert).
std::vector<CachePoint> replay_cache_sizes(const RoutingTrace& trace, const std::vector<int>& per_layer_slots);

// The default sizes: 1/16 .. 7/8 of a layer's experts, and at least k.
std::vector<int> default_cache_sizes(int n_expert, int k);

// The trace as n_streams sequences decoded together (`serve --parallel`,
// Model::forward_batch): its tokens cut into n_streams equal contiguous
// parts, step i running token i of each part, each layer of a step routing
// the union of those tokens' experts (in stream order, each once). The
// result has n_tokens / n_streams steps (the remainder dropped) of up to
// min(n_streams x k, n_expert) ids, so replay_hit_rate over it counts hits per expert
// acquired, as the store does for a batched step. rows (optional): how many
// sequences chose each id, laid out as the ids.
RoutingTrace union_trace(const RoutingTrace& trace, int n_streams, std::vector<int32_t>* rows = nullptr);

// The fewest experts any cache of `slots` must read over a union_trace,
// whatever its policy and in whatever order each layer takes its union:
// every expert of a step's union is in memory at some point of the step
// and at most `slots` of them were there when it began, so a step reads at
// least max(its union - slots, its experts never used before).
int64_t streams_read_bound(const RoutingTrace& unions, int64_t slots);

// Replays of union_trace(trace, n) for each n of `streams`, at the cache
// sizes given (slots per routed layer, as replay_cache_sizes).
struct StreamsPoint {
    int streams = 1;
    int64_t steps = 0;
    double acquired_per_token = 0;  // distinct experts a step, summed over layers, per generated token
    std::vector<CachePoint> cache;
};
std::vector<StreamsPoint> replay_streams(const RoutingTrace& trace, const std::vector<int>& streams,
                                         const std::vector<int>& per_layer_slots);

Json routing_json(const RoutingStats& s, const std::vector<CachePoint>& cache);
Json streams_json(const std::vector<StreamsPoint>& points);
std::string streams_text(const std::vector<StreamsPoint>& points);
// Plain-text tables: per layer, the mean, and the cache replay.
std::string routing_text(const RoutingStats& s, const std::vector<CachePoint>& cache);
// PNG of hit rate against cache size per policy through gnuplot; returns ""
// or what went wrong.
std::string plot_cache_curve(const std::vector<CachePoint>& cache, int n_expert, const std::string& png_path);

}  // namespace ms
