#include "bench/run_figures.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "bench/child.h"

namespace ms {

namespace {

double number_or_nan(const Json* j) { return j && j->is_number() ? j->as_number() : NAN; }

// Tokens and seconds of a phase ("prefill", "decode") in either report shape.
void phase_timing(const Json& report, const Json& results, const std::string& phase, int64_t* tokens,
                  double* seconds, const std::string& what) {
    const Json* t = results.find(phase + "_tokens");
    const Json* s = results.find(phase + "_seconds");
    if (!t || !s) {
        const Json* o = results.find(phase);
        if (!o || !o->is_object()) o = report.find(phase);
        if (o && o->is_object()) {
            t = o->find("tokens");
            s = o->find("seconds");
        }
    }
    if (!t || !s || !t->is_number() || !s->is_number()) throw std::runtime_error(what + ": no " + phase + " timing");
    *tokens = int64_t(t->as_number());
    *seconds = s->as_number();
}

const char* kWords[] = {
    "the", "river", "morning", "light", "across", "small", "town", "where", "people", "walk", "slowly", "toward",
    "market", "bread", "coffee", "warm", "stones", "old", "bridge", "children", "laugh", "while", "birds", "circle",
    "above", "roofs", "and", "a", "teacher", "opens", "window", "to", "let", "cool", "air", "into", "room", "full",
    "of", "books", "maps", "questions", "about", "history", "science", "music", "that", "nobody", "has", "answered",
    "yet", "because", "every", "answer", "brings", "new", "ideas", "with", "it", "as", "seasons", "change", "fields",
    "turn", "green", "then", "gold", "farmers", "count", "rain", "measure", "soil", "hope", "for", "good", "harvest",
    "in", "city", "trains", "arrive", "on", "time", "engineers", "check", "signals", "bright", "screens", "show",
    "numbers", "climbing", "evening", "falls", "lamps", "glow", "stories", "are", "told", "again",
};

std::string word_text(size_t n_words) {
    std::string s;
    uint64_t x = 0x2545f4914f6cdd1dULL;
    for (size_t i = 0; i < n_words; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (i) s += (i % 17 == 16) ? ". " : " ";
        s += kWords[x % (sizeof kWords / sizeof kWords[0])];
    }
    return s + ".";
}

}  // namespace

int count_prompt_tokens(const std::string& binary, const std::string& model, const std::string& path,
                        const std::string& out) {
    ChildOptions co;
    co.argv = {binary, "tokenize", "-m", model, "-f", path, "--ids"};
    co.stdout_path = out;
    co.stderr_path = out + ".err";
    ChildResult r = run_child(co);
    if (!r.ok()) throw std::runtime_error(model + ": moestream tokenize failed: " + tail_lines(out + ".err", 2));
    std::ifstream f(out);
    int n = 0;
    for (std::string id; f >> id;) ++n;
    std::remove(out.c_str());
    std::remove((out + ".err").c_str());
    return n;
}

RunCaps probe_run_caps(const std::string& binary, const std::string& work_dir) {
    ChildOptions co;
    co.argv = {binary, "run", "--help"};
    co.stdout_path = work_dir + "/run-help.txt";
    run_child(co);
    std::ifstream f(co.stdout_path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string help = ss.str();
    RunCaps c;
    c.random_prompt = help.find("--random-prompt") != std::string::npos;
    c.ignore_eos = help.find("--ignore-eos") != std::string::npos;
    c.trace = help.find("--trace") != std::string::npos;
    return c;
}

int write_token_prompt(const std::string& binary, const std::string& model, int n, const std::string& path) {
    // Words run about 1.3 tokens each; grow until past n, then cut by
    // bisection on the word count.
    size_t lo = 0, hi = size_t(n) + 8;
    std::string probe = path + ".probe";
    auto tokens_of = [&](size_t words) {
        std::ofstream(probe) << word_text(words);
        return count_prompt_tokens(binary, model, probe, probe + ".ids");
    };
    while (tokens_of(hi) <= n) {
        lo = hi;
        hi *= 2;
        if (hi > 16 * size_t(n) + 1024)
            throw std::runtime_error(model + ": the tokenizer does not grow with the text; cannot build a " +
                                     std::to_string(n) + "-token prompt");
    }
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (tokens_of(mid) <= n) lo = mid;
        else hi = mid;
    }
    std::ofstream(path) << word_text(std::max<size_t>(lo, 1));
    int got = count_prompt_tokens(binary, model, path, probe + ".ids");
    for (const char* ext : {"", ".ids", ".ids.err"}) std::remove((probe + ext).c_str());
    return got;
}

std::vector<std::string> run_argv(const RunRequest& r) {
    std::vector<std::string> a = {r.binary, "run", "-m", r.model};
    if (!r.prompt_file.empty()) {
        a.insert(a.end(), {"-f", r.prompt_file});
    } else {
        a.insert(a.end(), {"--random-prompt", std::to_string(r.n_prompt < 1 ? 1 : r.n_prompt)});
    }
    a.insert(a.end(), {"-n", std::to_string(r.n_gen)});
    if (r.caps.ignore_eos) a.push_back("--ignore-eos");
    a.insert(a.end(), {"--seed", std::to_string(r.seed), "--report", r.report});
    if (!r.trace.empty() && r.caps.trace) a.insert(a.end(), {"--trace", r.trace});
    a.insert(a.end(), r.extra.begin(), r.extra.end());
    return a;
}

RunFigures read_run_figures(const Json& report, const std::string& what) {
    static const Json kEmpty = Json::object();
    const Json* res = report.find("results");
    if (!res || !res->is_object()) res = &kEmpty;
    RunFigures f;
    phase_timing(report, *res, "prefill", &f.prefill_tokens, &f.prefill_seconds, what);
    phase_timing(report, *res, "decode", &f.decode_tokens, &f.decode_seconds, what);
    const Json* ph = res->find("time_split");
    if (!ph) ph = report.find("time_split");
    if (ph && ph->is_object()) {
        f.phases.attention = number_or_nan(ph->find("attention"));
        f.phases.routing = number_or_nan(ph->find("routing"));
        f.phases.io_wait = number_or_nan(ph->find("io_wait"));
        f.phases.expert_compute = number_or_nan(ph->find("expert_compute"));
        f.phases.other = number_or_nan(ph->find("other"));
    }
    if (const Json* s = report.find("store"); s && s->is_object()) {
        f.hit_rate = number_or_nan(s->find("hit_rate"));
        f.mb_read_per_token = number_or_nan(s->find("mb_read_per_token"));
        f.read_amplification = number_or_nan(s->find("read_amplification"));
    }
    if (const Json* g = report.find("gpu"); g && g->is_object()) {
        if (const Json* v = g->find("vram_tier"); v && v->is_object()) {
            auto read = [](const Json* o) {
                VramFigures x;
                if (!o || !o->is_object()) return x;
                x.hit_rate = number_or_nan(o->find("hit_rate"));
                // Copies, plus what a mapped run's kernels read over the bus.
                const Json* bus = o->find("bus_read_bytes_per_token");
                x.pcie_mb_per_token = (number_or_nan(o->find("copied_bytes_per_token")) +
                                       (bus && bus->is_number() ? bus->as_number() : 0.0)) / 1e6;
                x.host_mb_per_token = number_or_nan(o->find("host_bytes_per_token")) / 1e6;
                x.copy_bound_fraction = number_or_nan(o->find("copy_bound_fraction"));
                return x;
            };
            f.vram = read(v);
            f.vram_prefill = read(v->find("prefill"));
            f.vram_decode = read(v->find("decode"));
        }
    }
    f.cpu_idle = number_or_nan(report.find("cpu_idle"));
    f.wall_s = number_or_nan(report.find("wall_s"));
    if (const Json* p = report.find("peak_rss_bytes"); p && p->is_number()) f.peak_rss_bytes = uint64_t(p->as_number());
    if (const Json* d = report.find("disk"); d && d->is_object()) {
        const Json* b = d->find("read_bytes");
        f.has_device = b && b->is_number();
        if (f.has_device) f.device_read_bytes = uint64_t(b->as_number());
    }
    if (const Json* st = report.find("settings"); st && st->is_object())
        if (const Json* t = st->find("threads"); t && t->is_number()) f.threads = int(t->as_number());
    return f;
}

}  // namespace ms
