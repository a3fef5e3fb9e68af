// moestream run: generate text from a prompt, streamed to stdout as it is
// produced; prefill and decode speed and peak RSS go to stderr at the end.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/session_flags.h"
#include "telemetry/routing_trace.h"
#include "telemetry/trace.h"

namespace ms {

namespace {

// run --parallel: lead (prefilled with its prompt) and n - 1 forks, each
// with its own prompt and seed, decoded together by Session::decode_batch
// until each has `limit` tokens (or an end-of-generation token, unless
// ignore_eos) or a full context; show gets the lead's tokens. The lead's
// timings become the sums over all sequences: every prompt's prefill, and
// every generated token over the wall time of the batched steps.
void decode_parallel(Session& lead, int n, int random_prompt, const std::vector<int32_t>& prompt, int limit,
                     bool ignore_eos, const std::function<bool(int32_t)>& show) {
    const uint64_t seed = lead.sampler().params().seed;
    std::vector<std::unique_ptr<Session>> forks;
    std::vector<Session*> all = {&lead};
    for (int i = 1; i < n; i++) {
        SamplerParams p = lead.sampler().params();
        p.seed = seed + uint64_t(i);
        forks.push_back(lead.fork(p));
        Session& f = *forks.back();
        f.prefill(random_prompt > 0 ? f.random_tokens(random_prompt, p.seed) : prompt);
        lead.timings.prefill_tokens += f.timings.prefill_tokens;
        lead.timings.prefill_seconds += f.timings.prefill_seconds;
        all.push_back(&f);
    }
    std::vector<Session*> active;
    std::vector<int32_t> next;
    std::vector<int> made(size_t(n), 0);
    int64_t generated = 0, steps = 0;
    double forward_seconds = 0;
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t0 = Clock::now();
    for (;;) {
        active.clear();
        next.clear();
        for (int i = 0; i < n; i++) {
            Session& s = *all[size_t(i)];
            if (made[size_t(i)] < 0 || made[size_t(i)] >= limit || s.tokens().size() >= size_t(s.n_ctx())) continue;
            const int32_t t = s.sampler().sample(s.logits());
            s.sampler().accept(t);
            if (!ignore_eos && s.tokenizer().is_eog(t)) {
                made[size_t(i)] = -1;
                continue;
            }
            if (i == 0) show(t);
            made[size_t(i)]++;
            generated++;
            active.push_back(&s);
            next.push_back(t);
        }
        if (active.empty()) break;
        const Clock::time_point f0 = Clock::now();
        Session::decode_batch(active.data(), next.data(), int(active.size()));
        forward_seconds += std::chrono::duration<double>(Clock::now() - f0).count();
        steps++;
    }
    lead.timings.decode_tokens = generated;
    lead.timings.decode_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    fprintf(stderr,
            "parallel: %d sequences, %lld decode steps; forward passes %.3f s (%.1f %% of decode), sampling and the "
            "rest %.3f s\n",
            n, (long long)steps, forward_seconds, 100 * forward_seconds / std::max(lead.timings.decode_seconds, 1e-9),
            lead.timings.decode_seconds - forward_seconds);
}

}  // namespace

int cmd_run(int argc, char** argv) {
    Args a("moestream run -m MODEL -p PROMPT [-n N] [sampling flags]",
           "Generates a continuation of the prompt and streams it to stdout (complete UTF-8 characters only), "
           "stopping at an end-of-generation token, after N tokens or when the context is full. Prefill and "
           "decode tokens per second and the peak RSS are printed to stderr at the end (and written with "
           "--report). The same --seed and flags give the same text.");
    SessionFlags flags;
    std::string prompt, prompt_file, trace_path, routing_path;
    int n_predict = 256, random_prompt = 0;
    bool show_special = false, ignore_eos = false;
    a.option("-p,--prompt", &prompt, "TEXT", "the prompt (special tokens like <|im_start|> are parsed)");
    a.option("-f,--file", &prompt_file, "FILE", "read the prompt from FILE instead");
    a.option("-n,--n-predict", &n_predict, "N", "most tokens to generate (-1: until the context is full)");
    a.option("--random-prompt", &random_prompt, "N",
             "instead of a text, a prompt of N token ids drawn at random from the vocabulary (after BOS when "
             "the model adds one; reproducible with --seed), as llama-bench does");
    a.option("--parallel", &flags.parallel, "N",
             "decode N sequences together, as `serve --parallel N` does (one forward pass a step for all of "
             "them, each layer's experts read once for all): each sequence has its own prompt (--random-prompt: "
             "drawn with seed + i; a text prompt: the same text) and sampling seed (seed + i), no drafts; the "
             "first sequence's text is printed; the prefill and decode figures on stderr and in --report are "
             "the sums over the N sequences (decode tok/s: aggregate)");
    a.flag("--special", &show_special, "print control tokens (e.g. <|im_end|>) too");
    a.flag("--ignore-eos", &ignore_eos, "keep generating past end-of-generation tokens (exactly -n tokens)");
    a.option("--trace", &trace_path, "FILE",
             "write a Chrome-trace timeline of prefill and decode to FILE (open it in ui.perfetto.dev): per "
             "layer attention, routing, experts with their io_wait spans; per expert read, queued to "
             "completed. Holds up to 262,144 events (16 MiB, counted in --mem)");
    a.option("--routing-trace", &routing_path, "FILE",
             "write every token's chosen experts per layer (prompt and generated tokens) to FILE, for "
             "`moestream bench routing --trace FILE` (outside --mem: 4 bytes per expert choice)");
    flags.declare(a, true);
    if (!a.parse(argc, argv)) return 0;
    if (!prompt_file.empty()) {
        std::ifstream f(prompt_file, std::ios::binary);
        if (!f) throw std::runtime_error(prompt_file + ": cannot open");
        prompt.assign(std::istreambuf_iterator<char>(f), {});
    }
    if (n_predict < -1) throw std::runtime_error("-n must be >= -1");
    if (random_prompt < 0) throw std::runtime_error("--random-prompt must be >= 1");
    if (flags.parallel < 1 || flags.parallel > 4096) throw std::runtime_error("--parallel must be in [1, 4096]");
    if (random_prompt > 0 && (!prompt.empty() || !prompt_file.empty()))
        throw std::runtime_error("give either a prompt (-p/-f) or --random-prompt, not both");

    // Made before the session: its buffer is then in the RSS the memory
    // plan counts as the process's, so --mem bounds it too.
    std::unique_ptr<Trace> trace;
    if (!trace_path.empty()) trace = std::make_unique<Trace>();
    auto s = flags.open(flags.parallel);
    const std::vector<int32_t> tokens =
        random_prompt > 0 ? s->random_tokens(random_prompt, s->sampler().params().seed) : s->tokenize(prompt);
    if (tokens.empty()) throw std::runtime_error("the prompt gives no tokens (give -p TEXT)");
    if (trace) {
        trace->name_lane(Trace::thread_lane(), "forward pass");
        set_active_trace(trace.get());
    }
    std::unique_ptr<RoutingTrace> routing;
    if (!routing_path.empty()) {
        const ModelConfig& c = s->config();
        if (c.n_expert <= 0) throw std::runtime_error(flags.model + ": the model has no routed experts to trace");
        routing = std::make_unique<RoutingTrace>(c.n_layer, c.n_expert, c.n_expert_used);
        routing->reserve(int64_t(tokens.size()) + std::max(0, n_predict));
        s->experts().routing_trace = routing.get();
    }
    s->prefill(tokens);
    flags.store.mark_decode();

    StreamDecoder text(s->tokenizer(), show_special);
    const int limit = n_predict < 0 ? int(s->n_ctx()) : n_predict;
    auto show = [&](int32_t tok) {
        const std::string piece = text.push(tok);
        fwrite(piece.data(), 1, piece.size(), stdout);
        fflush(stdout);
        return true;
    };
    if (flags.parallel > 1) {
        decode_parallel(*s, flags.parallel, random_prompt, tokens, limit, ignore_eos, show);
    } else {
        s->generate(limit, show, nullptr, ignore_eos);
    }
    const std::string rest = text.flush();
    fwrite(rest.data(), 1, rest.size(), stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (trace) {
        set_active_trace(nullptr);
        trace->write(trace_path);
        fprintf(stderr, "trace: %zu events written to %s%s\n", trace->size(), trace_path.c_str(),
                trace->dropped() ? (" (" + std::to_string(trace->dropped()) + " more did not fit)").c_str() : "");
    }
    if (routing) {
        s->experts().routing_trace = nullptr;
        routing->write(routing_path);
        fprintf(stderr, "routing trace: %lld tokens written to %s\n", (long long)routing->n_tokens(),
                routing_path.c_str());
    }
    flags.finish("run", *s);
    return 0;
}

}  // namespace ms
