#include "bench/routing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <queue>
#include <stdexcept>

#include "bench/plot.h"
#include "bench/table.h"

namespace ms {

namespace {

int count_valid(const int32_t* ids, int k) {
    int n = 0;
    while (n < k && ids[n] >= 0) n++;
    return n;
}

LayerRouting layer_stats(const RoutingTrace& tr, int l, int window) {
    const int k = tr.k(), E = tr.n_expert();
    LayerRouting L;
    L.layer = l;
    std::vector<int64_t> uses(size_t(E), 0);
    std::vector<int64_t> last_seen(size_t(E), -1);  // latest token that chose each expert
    double prev_sum = 0, win_sum = 0;
    int64_t prev_n = 0, win_n = 0;
    for (int64_t t = 0; t < tr.n_tokens(); t++) {
        const int32_t* ids = tr.ids(t, l);
        const int n = count_valid(ids, k);
        if (n == 0) continue;
        int prev = 0, win = 0;
        for (int r = 0; r < n; r++) {
            uses[size_t(ids[r])]++;
            const int64_t seen = last_seen[size_t(ids[r])];
            if (seen == t - 1) prev++;
            if (seen >= 0 && seen >= t - window) win++;
        }
        if (t >= 1) prev_sum += double(prev) / n, prev_n++;
        if (t >= window) win_sum += double(win) / n, win_n++;
        for (int r = 0; r < n; r++) last_seen[size_t(ids[r])] = t;
        L.picks += n;
    }
    std::vector<int64_t> sorted = uses;
    std::sort(sorted.begin(), sorted.end(), std::greater<int64_t>());
    L.unique = int(std::count_if(sorted.begin(), sorted.end(), [](int64_t u) { return u > 0; }));
    auto cover = [&](double share) {
        int64_t acc = 0;
        int n = 0;
        while (n < E && double(acc) < share * double(L.picks)) acc += sorted[size_t(n++)];
        return n;
    };
    L.for_50 = cover(0.5), L.for_80 = cover(0.8), L.for_90 = cover(0.9);
    if (L.picks > 0) {
        L.top_share = double(sorted[0]) / double(L.picks);
        for (int64_t u : sorted)
            if (u > 0) L.entropy -= double(u) / double(L.picks) * std::log2(double(u) / double(L.picks));
    }
    L.prev_reuse = prev_n ? prev_sum / double(prev_n) : 0;
    L.window_reuse = win_n ? win_sum / double(win_n) : 0;
    return L;
}

double belady_hit_rate(const RoutingTrace& tr, int64_t slots) {
    // The accesses in decode order, as keys layer * E + expert.
    const int k = tr.k(), E = tr.n_expert();
    std::vector<int64_t> seq;
    for (int64_t t = 0; t < tr.n_tokens(); t++)
        for (int l = 0; l < tr.n_layer(); l++) {
            const int32_t* ids = tr.ids(t, l);
            for (int r = 0; r < k && ids[r] >= 0; r++) seq.push_back(int64_t(l) * E + ids[r]);
        }
    const int64_t n = int64_t(seq.size()), never = INT64_MAX;
    std::vector<int64_t> next(static_cast<size_t>(n));
    std::vector<int64_t> upcoming(size_t(tr.n_layer()) * size_t(E), never);
    for (int64_t i = n - 1; i >= 0; i--) {
        next[size_t(i)] = upcoming[size_t(seq[size_t(i)])];
        upcoming[size_t(seq[size_t(i)])] = i;
    }
    // Resident keys with their next use; the heap may hold stale entries,
    // recognised by a next use that no longer matches.
    std::vector<int64_t> resident_next(upcoming.size(), -1);  // -1: not resident
    std::priority_queue<std::pair<int64_t, int64_t>> heap;    // (next use, key)
    int64_t resident = 0, hits = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t key = seq[size_t(i)];
        if (resident_next[size_t(key)] >= 0) {
            hits++;
        } else {
            if (resident == slots) {
                for (;;) {
                    auto [nu, victim] = heap.top();
                    heap.pop();
                    if (resident_next[size_t(victim)] == nu) {
                        resident_next[size_t(victim)] = -1;
                        resident--;
                        break;
                    }
                }
            }
            resident++;
        }
        resident_next[size_t(key)] = next[size_t(i)];
        heap.push({next[size_t(i)], key});
    }
    return n ? double(hits) / double(n) : 0;
}

std::string pct(double v) { return strf("%.1f", 100 * v); }

Json layer_json(const LayerRouting& L, bool with_layer) {
    Json j = Json::object();
    if (with_layer) j["layer"] = L.layer;
    j["picks"] = L.picks;
    j["unique_experts"] = L.unique;
    j["experts_for_50pct"] = L.for_50;
    j["experts_for_80pct"] = L.for_80;
    j["experts_for_90pct"] = L.for_90;
    j["top_expert_share"] = L.top_share;
    j["entropy_bits"] = L.entropy;
    j["prev_token_reuse"] = L.prev_reuse;
    j["window_reuse"] = L.window_reuse;
    return j;
}

}  // namespace

RoutingStats routing_stats(const RoutingTrace& trace, int window) {
    if (window < 1) throw std::runtime_error("--window must be at least 1");
    RoutingStats s;
    s.window = window;
    s.tokens = trace.n_tokens();
    s.n_expert = trace.n_expert();
    s.k = trace.k();
    for (int l = 0; l < trace.n_layer(); l++)
        if (trace.routed(l)) s.layers.push_back(layer_stats(trace, l, window));
    const double n = double(std::max<size_t>(1, s.layers.size()));
    double u = 0, f50 = 0, f80 = 0, f90 = 0;
    for (const LayerRouting& L : s.layers) {
        s.mean.picks += L.picks;
        u += L.unique, f50 += L.for_50, f80 += L.for_80, f90 += L.for_90;
        s.mean.top_share += L.top_share / n;
        s.mean.entropy += L.entropy / n;
        s.mean.prev_reuse += L.prev_reuse / n;
        s.mean.window_reuse += L.window_reuse / n;
    }
    s.mean.layer = -1;
    s.mean.unique = int(std::lround(u / n));
    s.mean.for_50 = int(std::lround(f50 / n));
    s.mean.for_80 = int(std::lround(f80 / n));
    s.mean.for_90 = int(std::lround(f90 / n));
    return s;
}

const char* replay_policy_name(ReplayPolicy p) {
    switch (p) {
        case ReplayPolicy::Lru: return "lru";
        case ReplayPolicy::Lfu: return "lfu";
        case ReplayPolicy::Wlfu: return "wlfu";
        case ReplayPolicy::Belady: return "belady";
    }
    return "?";
}

double replay_hit_rate(const RoutingTrace& trace, int64_t slots, ReplayPolicy policy, const int32_t* rows,
                       int n_seqs, bool step_fit) {
    if (slots < trace.k()) throw std::runtime_error("a cache needs at least k slots");
    if (policy == ReplayPolicy::Belady) return belady_hit_rate(trace, slots);
    // 4 KiB slots: the arena is reserved, never touched.
    SlotCache cache(int(slots), 4096, trace.n_layer(), trace.n_expert(),
                    policy == ReplayPolicy::Lru   ? CachePolicy::Lru
                    : policy == ReplayPolicy::Lfu ? CachePolicy::Lfu
                                                  : CachePolicy::Wlfu);
    cache.set_step_fit(step_fit);
    const int k = trace.k();
    std::vector<int> pinned(static_cast<size_t>(k));
    int64_t hits = 0, total = 0;
    for (int64_t t = 0; t < trace.n_tokens(); t++) {
        cache.begin_step(1, n_seqs);
        for (int l = 0; l < trace.n_layer(); l++) {
            const int32_t* ids = trace.ids(t, l);
            int n = 0;
            for (; n < k && ids[n] >= 0; n++) {
                int s = cache.find(l, ids[n]);
                if (s >= 0) {
                    hits++;
                } else {
                    s = cache.claim(l, ids[n]);
                    cache.set_ready(s);
                }
                cache.touch(s, rows ? rows[(size_t(t) * size_t(trace.n_layer()) + size_t(l)) * size_t(k) + size_t(n)] : 1);
                cache.pin(s);
                pinned[size_t(n)] = s;
            }
            for (int r = 0; r < n; r++) cache.unpin(pinned[size_t(r)]);
            total += n;
        }
    }
    return total ? double(hits) / double(total) : 0;
}

namespace {

int routed_layers(const RoutingTrace& trace) {
    int routed = 0;
    for (int l = 0; l < trace.n_layer(); l++) routed += trace.routed(l);
    return routed;
}

// Every policy's hit rate at per_layer slots a routed layer; with rows (a
// union_trace's), also WLFU counting each expert once a step, and the bound.
CachePoint replay_point(const RoutingTrace& trace, int per_layer, const int32_t* rows = nullptr, int n_seqs = 1) {
    CachePoint p;
    p.per_layer = per_layer;
    p.slots = int64_t(per_layer) * routed_layers(trace);
    p.lru = replay_hit_rate(trace, p.slots, ReplayPolicy::Lru, rows, n_seqs);
    p.lfu = replay_hit_rate(trace, p.slots, ReplayPolicy::Lfu, rows, n_seqs);
    p.wlfu = replay_hit_rate(trace, p.slots, ReplayPolicy::Wlfu, rows, n_seqs);
    p.belady = replay_hit_rate(trace, p.slots, ReplayPolicy::Belady);
    if (rows) {
        p.wlfu_once = replay_hit_rate(trace, p.slots, ReplayPolicy::Wlfu, nullptr, n_seqs);
        p.lru_plain = replay_hit_rate(trace, p.slots, ReplayPolicy::Lru, rows, n_seqs, false);
        p.wlfu_plain = replay_hit_rate(trace, p.slots, ReplayPolicy::Wlfu, rows, n_seqs, false);
        int64_t acquired = 0;
        for (int64_t t = 0; t < trace.n_tokens(); t++)
            for (int l = 0; l < trace.n_layer(); l++)
                acquired += count_valid(trace.ids(t, l), trace.k());
        if (acquired > 0) p.bound = 1 - double(streams_read_bound(trace, p.slots)) / double(acquired);
    }
    return p;
}

}  // namespace

int64_t streams_read_bound(const RoutingTrace& unions, int64_t slots) {
    std::vector<uint8_t> seen(size_t(unions.n_layer()) * size_t(unions.n_expert()), 0);
    int64_t reads = 0;
    for (int64_t t = 0; t < unions.n_tokens(); t++) {
        int64_t size = 0, fresh = 0;
        for (int l = 0; l < unions.n_layer(); l++)
            for (const int32_t* e = unions.ids(t, l); e < unions.ids(t, l) + unions.k() && *e >= 0; e++) {
                size++;
                uint8_t& s = seen[size_t(l) * size_t(unions.n_expert()) + size_t(*e)];
                fresh += !s;
                s = 1;
            }
        reads += std::max(fresh, size - slots);
    }
    return reads;
}

RoutingTrace union_trace(const RoutingTrace& trace, int n_streams, std::vector<int32_t>* rows) {
    if (n_streams < 1) throw std::runtime_error("streams must be >= 1");
    const int k = trace.k(), K = std::min(n_streams * k, trace.n_expert());  // a union holds each expert once
    const int64_t steps = trace.n_tokens() / n_streams;
    if (steps < 1)
        throw std::runtime_error(std::to_string(n_streams) + " streams need at least as many tokens (the trace has " +
                                 std::to_string(trace.n_tokens()) + ")");
    RoutingTrace out(trace.n_layer(), trace.n_expert(), K);
    out.reserve(steps);
    if (rows) rows->assign(size_t(steps) * size_t(trace.n_layer()) * size_t(K), 0);
    std::vector<int32_t> ids(static_cast<size_t>(K));
    for (int64_t i = 0; i < steps; i++) {
        out.begin_call(1);
        for (int l = 0; l < trace.n_layer(); l++) {
            if (!trace.routed(l)) continue;
            int n = 0;
            for (int s = 0; s < n_streams; s++) {
                const int32_t* e = trace.ids(int64_t(s) * steps + i, l);
                for (int r = 0; r < k && e[r] >= 0; r++) {
                    const int j = int(std::find(ids.begin(), ids.begin() + n, e[r]) - ids.begin());
                    if (j == n) ids[size_t(n++)] = e[r];
                    if (rows) (*rows)[(size_t(i) * size_t(trace.n_layer()) + size_t(l)) * size_t(K) + size_t(j)]++;
                }
            }
            std::fill(ids.begin() + n, ids.end(), -1);
            out.record(l, ids.data(), 1, K);
        }
    }
    return out;
}

std::vector<StreamsPoint> replay_streams(const RoutingTrace& trace, const std::vector<int>& streams,
                                         const std::vector<int>& per_layer_slots) {
    std::vector<StreamsPoint> out;
    for (int n : streams) {
        std::vector<int32_t> rows;
        const RoutingTrace u = union_trace(trace, n, &rows);
        StreamsPoint p;
        p.streams = n;
        p.steps = u.n_tokens();
        int64_t acquired = 0;
        for (int64_t i = 0; i < u.n_tokens(); i++)
            for (int l = 0; l < u.n_layer(); l++)
                for (const int32_t* e = u.ids(i, l); e < u.ids(i, l) + u.k() && *e >= 0; e++) acquired++;
        p.acquired_per_token = double(acquired) / double(p.steps * n);
        // Any size whose slots hold a layer's union (replay_hit_rate checks):
        // a union may exceed a layer's experts per slot count, unlike k.
        for (int per : per_layer_slots) p.cache.push_back(replay_point(u, per, rows.data(), n));
        out.push_back(std::move(p));
    }
    return out;
}

std::vector<int> default_cache_sizes(int n_expert, int k) {
    std::vector<int> out;
    for (int sixteenths : {1, 2, 3, 4, 6, 8, 10, 12, 14}) {
        const int s = std::max(k, int(std::lround(double(n_expert) * sixteenths / 16.0)));
        if (s <= n_expert && (out.empty() || s > out.back())) out.push_back(s);
    }
    return out;
}

std::vector<CachePoint> replay_cache_sizes(const RoutingTrace& trace, const std::vector<int>& per_layer_slots) {
    std::vector<CachePoint> out;
    for (int per : per_layer_slots) {
        if (per < trace.k() || per > trace.n_expert())
            throw std::runtime_error("cache size " + std::to_string(per) + " slots per layer: must be between k (" +
                                     std::to_string(trace.k()) + ") and the expert count (" +
                                     std::to_string(trace.n_expert()) + ")");
        out.push_back(replay_point(trace, per));
    }
    return out;
}

Json routing_json(const RoutingStats& s, const std::vector<CachePoint>& cache) {
    Json j = Json::object();
    j["tokens"] = s.tokens;
    j["n_expert"] = s.n_expert;
    j["k"] = s.k;
    j["window"] = s.window;
    j["mean"] = layer_json(s.mean, false);
    Json layers = Json::array();
    for (const LayerRouting& L : s.layers) layers.push_back(layer_json(L, true));
    j["layers"] = std::move(layers);
    Json c = Json::array();
    for (const CachePoint& p : cache) {
        Json o = Json::object();
        o["slots_per_layer"] = p.per_layer;
        o["slots"] = p.slots;
        o["fraction_of_experts"] = double(p.per_layer) / double(s.n_expert);
        o["lru"] = p.lru;
        o["lfu"] = p.lfu;
        o["wlfu"] = p.wlfu;
        o["belady"] = p.belady;
        c.push_back(std::move(o));
    }
    j["cache"] = std::move(c);
    return j;
}

Json streams_json(const std::vector<StreamsPoint>& points) {
    Json a = Json::array();
    for (const StreamsPoint& p : points) {
        Json o = Json::object();
        o["streams"] = p.streams;
        o["steps"] = p.steps;
        o["experts_acquired_per_token"] = p.acquired_per_token;
        Json c = Json::array();
        for (const CachePoint& q : p.cache) {
            Json r = Json::object();
            r["slots_per_layer"] = q.per_layer;
            r["slots"] = q.slots;
            for (const auto& [name, hit] : {std::pair{"lru", q.lru}, std::pair{"lfu", q.lfu},
                                            std::pair{"wlfu", q.wlfu}, std::pair{"belady", q.belady},
                                            std::pair{"wlfu_once", q.wlfu_once}, std::pair{"bound", q.bound},
                                            std::pair{"lru_plain", q.lru_plain}, std::pair{"wlfu_plain", q.wlfu_plain}}) {
                r[name] = hit;
                r[std::string(name) + "_reads_per_token"] = p.acquired_per_token * (1 - hit);
            }
            c.push_back(std::move(r));
        }
        o["cache"] = std::move(c);
        a.push_back(std::move(o));
    }
    return a;
}

std::string streams_text(const std::vector<StreamsPoint>& points) {
    Table t;
    t.header = {"streams", "steps", "acquired/token", "slots/layer", "lru plain %", "lru %", "lfu %", "wlfu once %",
                "wlfu plain %", "wlfu %", "belady %", "bound %", "lru plain reads", "lru reads", "wlfu plain reads",
                "wlfu reads", "belady reads", "bound reads"};
    for (const StreamsPoint& p : points)
        for (const CachePoint& q : p.cache) {
            auto reads = [&](double hit) { return strf("%.1f", p.acquired_per_token * (1 - hit)); };
            t.add({std::to_string(p.streams), std::to_string(p.steps), strf("%.1f", p.acquired_per_token),
                   std::to_string(q.per_layer), pct(q.lru_plain), pct(q.lru), pct(q.lfu), pct(q.wlfu_once),
                   pct(q.wlfu_plain), pct(q.wlfu), pct(q.belady), pct(q.bound), reads(q.lru_plain), reads(q.lru),
                   reads(q.wlfu_plain), reads(q.wlfu), reads(q.belady), reads(q.bound)});
        }
    return "\nstreams decoded together (a step's layer acquires the union of their experts; cold start, one "
           "cache shared by all layers; wlfu counts an expert once per sequence that chose it, wlfu once once "
           "a step; plain: without the step fit (--step-fit off); bound: the ceiling of any policy and schedule; reads: experts read per generated token)\n" +
           t.text();
}

std::string routing_text(const RoutingStats& s, const std::vector<CachePoint>& cache) {
    Table t;
    t.header = {"layer", "unique", "for 50%", "for 80%", "for 90%", "top %", "entropy", "prev %",
                "within " + std::to_string(s.window) + " %"};
    auto row = [&](const std::string& name, const LayerRouting& L) {
        t.add({name, std::to_string(L.unique), std::to_string(L.for_50), std::to_string(L.for_80),
               std::to_string(L.for_90), pct(L.top_share), strf("%.2f", L.entropy), pct(L.prev_reuse),
               pct(L.window_reuse)});
    };
    for (const LayerRouting& L : s.layers) row(std::to_string(L.layer), L);
    row("mean", s.mean);
    std::string out = strf("routing of %lld tokens, %d experts, top-%d (expert counts of %d; entropy of a flat "
                           "choice: %.2f bits)\n",
                           (long long)s.tokens, s.n_expert, s.k, s.n_expert, std::log2(double(s.n_expert)));
    out += t.text();
    if (!cache.empty()) {
        Table c;
        c.header = {"slots/layer", "% experts", "lru %", "lfu %", "wlfu %", "belady %", "lru/belady", "wlfu/belady"};
        auto ratio = [](double v, double b) { return b > 0 ? strf("%.2f", v / b) : std::string("-"); };
        for (const CachePoint& p : cache)
            c.add({std::to_string(p.per_layer), pct(double(p.per_layer) / s.n_expert), pct(p.lru), pct(p.lfu),
                   pct(p.wlfu), pct(p.belady), ratio(p.lru, p.belady), ratio(p.wlfu, p.belady)});
        out += "\nexpert cache replay (decode order, cold start, one cache shared by all layers)\n" + c.text();
    }
    return out;
}

std::string plot_cache_curve(const std::vector<CachePoint>& cache, int n_expert, const std::string& png_path) {
    const std::string data = png_path + ".tsv";
    {
        std::ofstream f(data);
        if (!f) return data + ": cannot write";
        f << "# fraction_of_experts\tlru\tlfu\tbelady\twlfu\n";
        for (const CachePoint& p : cache)
            f << double(p.per_layer) / n_expert << '\t' << p.lru << '\t' << p.lfu << '\t' << p.belady << '\t'
              << p.wlfu << '\n';
    }
    const std::string prog =
        "set terminal pngcairo size 800,500 noenhanced; set output '" + png_path +
        "'; set title 'expert cache hit rate against cache size'; set xlabel 'cache size (share of all "
        "experts)'; set ylabel 'hit rate'; set xrange [0:1]; set yrange [0:1]; set grid; set key left top; "
        "plot '" + data + "' using 1:2 with linespoints title 'LRU', '' using 1:3 with linespoints title 'LFU', "
        "'' using 1:5 with linespoints title 'WLFU', '' using 1:4 with linespoints title 'Belady (optimum)'";
    return plot_png(prog, png_path);
}

}  // namespace ms
