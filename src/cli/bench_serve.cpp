// moestream bench serve: N concurrent streams through serve's own engine
// (server/engine.h: the slots that generate decode together, each MoE layer
// reading the union of their experts once), for each N of a list. Prompts
// are pieces of a real text; every stream generates exactly --tokens tokens.
// Per N: aggregate and per-stream decode rates, time to first token, expert
// bytes read and the cache's hit rate per generated token while decoding,
// and peak RSS; as a table, JSON and a chart against N.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/plot.h"
#include "bench/table.h"
#include "cli/args.h"
#include "cli/bench_args.h"
#include "cli/session_flags.h"
#include "gguf/gguf.h"
#include "server/engine.h"
#include "telemetry/build_info.h"
#include "telemetry/system.h"
#include "tokenizer/tokenizer.h"

namespace ms {

namespace {

struct ServePoint {
    int streams = 0;
    int64_t generated = 0;              // tokens, all streams
    double wall_s = 0;                  // submit to the last stream's end
    double decode_tok_s = 0;            // aggregate, after every stream's first token
    double stream_tok_s_median = 0;     // each stream's tokens after its first over the time they took
    double stream_tok_s_min = 0;
    double ttft_median_s = 0, ttft_max_s = 0;
    double bytes_per_token = 0;         // expert bytes read from the drive per token decoded together
    double hit_rate = 0;                // the cache's, over the same tokens
    uint64_t peak_rss = 0;
    int cache_slots = 0;                // the store's slots (the memory plan gives fewer as N's KV grows)
    // Speculation (--draft), over the same tokens: forward passes, drafts
    // checked and accepted (the bytes a token above are then per accepted
    // token: every token counted was sampled or an accepted draft).
    uint64_t passes = 0, drafted = 0, accepted = 0;
    int64_t decoded = 0;  // tokens in the decode window (all streams)
    // The GPU's VRAM expert cache over the same tokens (where the model is on
    // the GPU and VRAM does not hold every expert): its hits / (hits +
    // misses), the bytes copied into it (PCIe) and the experts the host
    // computed, per token decoded together.
    bool gpu_tier = false;
    double vram_hit_rate = 0, pcie_bytes_per_token = 0, host_computed_per_token = 0;
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

uint64_t drive_bytes(const EngineStats& s) {
    uint64_t b = 0;
    for (int r = 0; r < kReadReasons; r++)
        if (r != int(ReadReason::Resident)) b += s.read[r];
    return b;
}

// Resets the kernel's peak RSS (VmHWM) of this process, so each N's peak is
// its own; false where the kernel does not allow it.
bool reset_peak_rss() {
    std::ofstream f("/proc/self/clear_refs");
    f << "5";
    f.flush();
    return bool(f);
}

ServePoint run_streams(const SessionFlags& flags, int n, const std::vector<int32_t>& text, int prompt_tokens,
                       int tokens) {
    EngineOptions eo;
    eo.queue = n;
    eo.prefill_chunk = flags.batch;
    const SamplerParams sampling = flags.options().sampling;
    int slots = 0;
    Engine engine(
        [&] {
            auto sessions = flags.open_slots(n, 0, sampling);
            slots = sessions[0]->experts().capacity();
            return sessions;
        },
        eo, &flags.store.counters());
    if (int64_t(prompt_tokens) + tokens > engine.session().n_ctx())
        throw std::runtime_error("--prompt-tokens + --tokens exceed the context (-c " +
                                 std::to_string(engine.session().n_ctx()) + ")");

    std::vector<std::shared_ptr<Job>> jobs;
    for (int i = 0; i < n; i++) {
        // Stream i reads the text from its own offset (wrapping), so the
        // streams are about different things, as a server's are.
        const size_t at = (size_t(i) * size_t(prompt_tokens) * 7) % text.size();
        std::vector<int32_t> prompt;
        for (int t = 0; t < prompt_tokens; t++) prompt.push_back(text[(at + size_t(t)) % text.size()]);
        GenerationRequest r;
        r.chat = false;
        r.max_tokens = tokens;
        r.ignore_eos = true;
        r.logprobs = -1;  // JobOutput::tokens counts the tokens (text may hold back a partial character)
        r.sampling = sampling;
        r.sampling.seed = sampling.seed + uint64_t(i);
        jobs.push_back(std::make_shared<Job>(std::move(r), std::move(prompt), 1e9));
    }

    std::vector<double> first(size_t(n), 0), done(size_t(n), 0);
    std::vector<int64_t> made(size_t(n), 0);
    std::atomic<int> started{0};
    std::mutex snap_mu;
    EngineStats at_all_first;
    double t_all_first = 0;
    const double t0 = steady_seconds();
    for (auto& j : jobs)
        if (!engine.submit(j)) throw std::runtime_error("the engine refused a stream (queue full)");
    std::vector<std::thread> waiters;
    std::vector<std::string> errors(static_cast<size_t>(n));
    for (int i = 0; i < n; i++)
        waiters.emplace_back([&, i] {
            std::vector<JobOutput> out;
            for (bool over = false; !over;) {
                out.clear();
                over = jobs[size_t(i)]->wait(&out, 1.0);
                int64_t got = 0;
                for (const JobOutput& o : out) got += o.tokens;
                if (got > 0 && made[size_t(i)] == 0) {
                    first[size_t(i)] = steady_seconds();
                    if (++started == n) {
                        // Every stream has its first token: from here on the
                        // steps decode all of them together.
                        std::lock_guard<std::mutex> lk(snap_mu);
                        at_all_first = engine.stats();
                        t_all_first = steady_seconds();
                    }
                }
                made[size_t(i)] += got;
            }
            done[size_t(i)] = steady_seconds();
            errors[size_t(i)] = jobs[size_t(i)]->error;
        });
    for (std::thread& w : waiters) w.join();
    for (const std::string& e : errors)
        if (!e.empty()) throw std::runtime_error("a stream failed: " + e);
    const double t_end = *std::max_element(done.begin(), done.end());
    const EngineStats end = engine.stats();

    ServePoint p;
    p.streams = n;
    for (int64_t m : made) p.generated += m;
    p.wall_s = t_end - t0;
    std::vector<double> ttft, rate;
    for (int i = 0; i < n; i++) {
        ttft.push_back(first[size_t(i)] - t0);
        if (made[size_t(i)] > 1 && done[size_t(i)] > first[size_t(i)])
            rate.push_back(double(made[size_t(i)] - 1) / (done[size_t(i)] - first[size_t(i)]));
    }
    p.ttft_median_s = median(ttft);
    p.ttft_max_s = *std::max_element(ttft.begin(), ttft.end());
    p.stream_tok_s_median = median(rate);
    p.stream_tok_s_min = rate.empty() ? 0 : *std::min_element(rate.begin(), rate.end());
    std::lock_guard<std::mutex> lk(snap_mu);
    const double decoded = double(end.generated_tokens - at_all_first.generated_tokens);
    if (decoded > 0) {
        p.decode_tok_s = decoded / std::max(1e-9, t_end - t_all_first);
        p.bytes_per_token = double(drive_bytes(end) - drive_bytes(at_all_first)) / decoded;
    }
    p.decoded = int64_t(decoded);
    p.passes = end.decode_passes - at_all_first.decode_passes;
    p.drafted = end.drafted_tokens - at_all_first.drafted_tokens;
    p.accepted = end.accepted_tokens - at_all_first.accepted_tokens;
    const double hits = double(end.hits - at_all_first.hits), misses = double(end.misses - at_all_first.misses);
    p.hit_rate = hits + misses > 0 ? hits / (hits + misses) : 0;
    p.peak_rss = peak_rss_bytes();
    p.cache_slots = slots;
    p.gpu_tier = end.gpu_tier && at_all_first.gpu_tier;
    if (p.gpu_tier && decoded > 0) {
        const GpuTierCounts &a = at_all_first.gpu, &b = end.gpu;
        const double vh = double(b.hits - a.hits), vm = double(b.misses - a.misses);
        p.vram_hit_rate = vh + vm > 0 ? vh / (vh + vm) : 0;
        p.pcie_bytes_per_token = double(b.copied_bytes - a.copied_bytes) / decoded;
        p.host_computed_per_token = double(b.host_computed - a.host_computed) / decoded;
    }
    return p;
}

std::string plot_serve(const std::vector<ServePoint>& points, const std::string& png) {
    const std::string data = png + ".tsv";
    {
        std::ofstream f(data);
        if (!f) return data + ": cannot write";
        f << "# streams\tdecode_tok_s\tstream_tok_s\tttft_s\tmb_per_token\thit_rate\tpeak_rss_gb\n";
        for (const ServePoint& p : points)
            f << p.streams << '\t' << p.decode_tok_s << '\t' << p.stream_tok_s_median << '\t' << p.ttft_median_s
              << '\t' << p.bytes_per_token / 1e6 << '\t' << p.hit_rate << '\t' << double(p.peak_rss) / 1e9 << '\n';
    }
    const std::string prog =
        "set terminal pngcairo size 1000,700 noenhanced; set output '" + png +
        "'; set multiplot layout 2,2 title 'bench serve: concurrent streams'; set grid; set logscale x 2; "
        "set xlabel 'streams'; set key left top; "
        "set title 'decode rate (tok/s)'; plot '" + data + "' using 1:2 with linespoints title 'aggregate', "
        "'' using 1:3 with linespoints title 'per stream (median)'; "
        "set title 'expert MB read per generated token'; plot '" + data + "' using 1:5 with linespoints notitle; "
        "set title 'time to first token (s, median)'; plot '" + data + "' using 1:4 with linespoints notitle; "
        "set title 'cache hit rate'; set yrange [0:1]; plot '" + data + "' using 1:6 with linespoints notitle; "
        "unset multiplot";
    return plot_png(prog, png);
}

}  // namespace

int bench_serve(int argc, char** argv) {
    SessionFlags flags;
    std::string text_file, streams = "1,2,4,8", json, png;
    int prompt_tokens = 64, tokens = 32;
    Args a("moestream bench serve -m MODEL [--streams LIST] [options]",
           "Concurrent streams through serve's engine (`serve --parallel N`, without HTTP): for each N of "
           "--streams, N sequences each given --prompt-tokens tokens of the text (each from its own offset) "
           "start together and generate --tokens tokens each (end of generation ignored). Reports the "
           "aggregate decode rate (tokens over the time after every stream has its first token), each "
           "stream's own rate (median and slowest), time to first token (median and longest: prompts are "
           "evaluated one slot at a time, so it grows with N), expert bytes read from the drive and the "
           "cache's hit rate per token decoded together (on the GPU with --gpu-mem, also the VRAM tier's hit "
           "rate, the bytes copied into it over PCIe and the experts the host computed per token), and peak "
           "RSS. The model is opened afresh for each N.");
    flags.declare(a, true);
    a.option("--streams", &streams, "LIST", "numbers of concurrent streams, comma list (e.g. 1,8,16,32)");
    a.option("-f,--file", &text_file, "TEXT", "the text prompts are cut from (default: bench/prompts/long.txt)");
    a.option("--prompt-tokens", &prompt_tokens, "N", "prompt length of each stream, in tokens");
    a.option("--tokens", &tokens, "N", "tokens each stream generates");
    a.option("--json", &json, "FILE", "write the figures as JSON");
    a.option("--png", &png, "FILE", "chart of the figures against the number of streams (gnuplot)");
    if (!a.parse(argc, argv, 3)) return 0;
    if (flags.model.empty()) throw std::runtime_error("no model given (-m MODEL)");
    if (prompt_tokens < 1 || tokens < 2) throw std::runtime_error("--prompt-tokens must be >= 1 and --tokens >= 2");
    const std::vector<int> list = parse_int_list("--streams", streams);
    for (int n : list)
        if (n > 256) throw std::runtime_error("--streams: at most 256 (serve's --parallel)");
    if (text_file.empty()) {
        const std::string dir = repo_dir("bench/prompts");
        if (dir.empty()) throw std::runtime_error("bench/prompts not found: give -f TEXT");
        text_file = dir + "/long.txt";
    }
    std::ifstream f(text_file, std::ios::binary);
    if (!f) throw std::runtime_error(text_file + ": cannot open");
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // The model's own tokenizer, without opening the model (its weights).
    const std::vector<int32_t> ids = Tokenizer::from_gguf(GgufFile::open(flags.model)).encode(text, false, false);
    if (ids.size() < size_t(prompt_tokens)) throw std::runtime_error(text_file + ": fewer tokens than --prompt-tokens");

    std::vector<ServePoint> points;
    const bool rss_reset = reset_peak_rss();
    for (int n : list) {
        reset_peak_rss();
        fprintf(stderr, "bench serve: %d stream%s\n", n, n == 1 ? "" : "s");
        points.push_back(run_streams(flags, n, ids, prompt_tokens, tokens));
    }
    Table t;
    t.header = {"streams", "generated", "wall s", "aggregate tok/s", "stream tok/s", "slowest stream",
                "ttft s (median)", "ttft s (max)", "MB/token", "hit %", "peak RSS GB", "slots", "tokens/pass",
                "accepted %"};
    for (const ServePoint& p : points)
        t.add({std::to_string(p.streams), std::to_string(p.generated), strf("%.1f", p.wall_s),
               strf("%.2f", p.decode_tok_s), strf("%.2f", p.stream_tok_s_median), strf("%.2f", p.stream_tok_s_min),
               strf("%.2f", p.ttft_median_s), strf("%.2f", p.ttft_max_s), strf("%.1f", p.bytes_per_token / 1e6),
               strf("%.1f", 100 * p.hit_rate), strf("%.2f", double(p.peak_rss) / 1e9), std::to_string(p.cache_slots),
               p.passes ? strf("%.2f", double(p.decoded) / double(p.passes)) : "-",
               p.drafted ? strf("%.1f", 100.0 * double(p.accepted) / double(p.drafted)) : "-"});
    printf("%s", t.text().c_str());
    for (const ServePoint& p : points) {
        if (!p.gpu_tier) continue;
        printf("%d stream%s: VRAM tier %.1f %% hits, %.1f MB copied over PCIe and %.2f experts computed by the host a "
               "decoded token\n",
               p.streams, p.streams == 1 ? "" : "s", 100 * p.vram_hit_rate, p.pcie_bytes_per_token / 1e6,
               p.host_computed_per_token);
    }
    if (!rss_reset) fprintf(stderr, "note: peak RSS could not be reset between N: each is the peak so far\n");
    if (!json.empty()) {
        Json j = Json::object();
        j["command"] = "bench serve";
        j["schema_version"] = 1;
        j["machine"] = machine_info(flags.model);
        j["model"] = flags.model;
        j["text"] = text_file;
        j["prompt_tokens"] = prompt_tokens;
        j["tokens_per_stream"] = tokens;
        j["mem"] = flags.mem;
        j["peak_rss_per_n"] = rss_reset;
        Json arr = Json::array();
        for (const ServePoint& p : points) {
            Json o = Json::object();
            o["streams"] = p.streams;
            o["generated_tokens"] = p.generated;
            o["wall_s"] = p.wall_s;
            o["aggregate_decode_tok_s"] = p.decode_tok_s;
            o["stream_tok_s_median"] = p.stream_tok_s_median;
            o["stream_tok_s_min"] = p.stream_tok_s_min;
            o["ttft_median_s"] = p.ttft_median_s;
            o["ttft_max_s"] = p.ttft_max_s;
            o["expert_bytes_per_token"] = p.bytes_per_token;
            o["hit_rate"] = p.hit_rate;
            o["peak_rss_bytes"] = p.peak_rss;
            o["cache_slots"] = p.cache_slots;
            o["decoded_tokens"] = p.decoded;
            o["decode_passes"] = p.passes;
            o["drafted_tokens"] = p.drafted;
            o["accepted_tokens"] = p.accepted;
            if (p.gpu_tier) {
                Json g = Json::object();
                g["vram_hit_rate"] = p.vram_hit_rate;
                g["pcie_bytes_per_token"] = p.pcie_bytes_per_token;
                g["host_computed_per_token"] = p.host_computed_per_token;
                o["gpu_tier"] = std::move(g);
            }
            arr.push_back(std::move(o));
        }
        j["points"] = std::move(arr);
        j["build"] = build_info();
        write_json(json, j);
    }
    if (!png.empty()) {
        const std::string err = plot_serve(points, png);
        if (!err.empty()) throw std::runtime_error(png + ": " + err);
        fprintf(stderr, "wrote %s\n", png.c_str());
    }
    return 0;
}

}  // namespace ms
