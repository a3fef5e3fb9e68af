#include "cli/session_flags.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <tuple>

#include "cli/progress.h"
#include "model/gpu_decoder.h"
#include "telemetry/build_info.h"
#include "telemetry/system.h"

namespace ms {

void SessionFlags::declare(Args& a, bool sampling) {
    a.option("-m,--model", &model, "MODEL", "the model, a GGUF file (or the first file of a split set)");
    a.option("-c,--ctx", &ctx, "N", "context length in tokens (0: the model's training context)");
    a.option("-t,--threads", &threads, "N", "threads (0: one per CPU)");
    a.option("-b,--batch", &batch, "N",
             "most prompt tokens evaluated per forward pass (capped by the context); the pass runs layer by "
             "layer over all of them, so a prompt up to N tokens reads each expert it needs once. The tokens' "
             "residual (4 bytes x n_embd each) counts in --mem. A longer prompt is split, and the report says so");
    a.option("-ub,--ubatch", &ubatch, "N",
             "most tokens per piece of a layer: the scratch rows of attention and experts (counted in --mem). "
             "On the GPU, a prefill pass's size: larger passes give each expert more tokens per tensor-core "
             "tile (llama.cpp's -ub). 0 (the default): 512 on the CPU, 2048 on the GPU (512 there too for several "
             "sequences, --parallel: each keeps its own pass rows)");
    a.option("--experts-per-token", &experts_per_token, "K",
             "route each token to its K best experts instead of the model's own count (Flash-MoE's speed knob: "
             "fewer experts read and run a token, other logits; warned about, and recorded in the report; "
             "0: the model's)");
    a.option("--kv-type", &kv_type, "TYPE",
             "KV cache type: f16, f32 or q8_0 (llama.cpp's -ctk/-ctv q8_0: blocks of 32 values, an F16 scale and "
             "32 int8, 8.5 bits a value, so about half the KV bytes of f16 in --mem; within the golden tolerances "
             "of f16; not for MLA, deepseek4 or the GPU)");
    a.size_option("--mem", &mem, "SIZE",
                  "memory budget (e.g. 6G) for resident weights + expert cache + KV cache + scratch + the "
                  "process itself; refuses to start when the fixed part does not fit (0: every expert cached "
                  "if that fits in 80% of available memory)");
    std::string families;
    for (const std::string& f : gpu_architectures()) families += (families.empty() ? "" : ", ") + f;
    a.option("--gpu", &gpu, "auto|off",
             ("auto: run the forward pass on the CUDA device when there is one and it covers the model (" +
              families + "; llama: Mixtral); off: the CPU. The run says which, and why not the GPU").c_str());
    a.size_option("--gpu-mem", &gpu_mem, "SIZE",
                  "VRAM for the GPU's expert cache (e.g. 8G; 0: all free VRAM but 1 GiB). Experts beyond it "
                  "come from the RAM tier (--mem, page-locked): each layer's misses are copied as it needs them "
                  "(the next layer's predicted experts copied ahead where the RAM tier holds every expert; "
                  "--gpu-ram-tier map reads them over the bus instead)");
    a.option("--gpu-ram-tier", &gpu_ram_tier, "copy|map|cpu|auto",
             "how the GPU reaches experts not in its VRAM cache: copy, each layer's misses copied into "
             "VRAM slots; map, where the RAM tier holds every expert, the kernels read a token's misses from "
             "it over the bus and the VRAM cache is refilled between tokens (faster only on text that repeats "
             "the same experts: docs/gpu.md); cpu, in decode the host's cores (-t) compute each layer's "
             "misses from the RAM tier while the GPU runs its hits, the VRAM cache filled with the next "
             "layer's predicted experts (prefill copies); where the RAM tier holds every expert, part of each "
             "layer's misses is copied instead (--gpu-host-share), and where the VRAM cache holds a token's "
             "experts the host's misses are copied into it after the host takes them; auto (the default), cpu "
             "where the RAM tier holds every expert and experts are large (8 MB or more) or the VRAM cache "
             "holds fewer than a token's, else copy (the faster mode in every run measured on an H100, "
             "docs/gpu.md)");
    a.option("--gpu-host-share", &gpu_host_share, "auto|F",
             "with --gpu-ram-tier cpu (and in --gpu-batch-host's batched passes): the fraction of each layer's "
             "VRAM misses the host computes, in eighths "
             "(0 to 1; the rest are copied into VRAM, cached, and run there while the host works; with "
             "--gpu-prefetch on, the link's part is copied ahead from the previous layer's prediction and the host "
             "computes whatever is still missing); auto: a layer's misses split so that both sides finish "
             "together, from times measured at start-up (a host part's fixed cost, the time an expert adds on "
             "the host, a copy's time), so one small miss goes over the link and many are shared, and a short "
             "chunk (a prompt of a few tokens, a chat's next turn, a few sequences' steps of serve --parallel) "
             "runs as decode steps where their measured time is less than a pass that copies the chunk's "
             "misses (until 8 steps are timed, chunks of up to 8 tokens run as steps, which times them; the measurement can split otherwise in another run: give a fraction for the same bits "
             "every run)");
    a.option("--gpu-batch-host", &gpu_batch_host, "on|off",
             "GPU with experts streamed (serve --parallel, bench serve): in a pass that decodes several "
             "sequences at once, where the RAM tier holds every expert and the layer's experts fit the VRAM "
             "cache, the host's cores (-t) compute the misses that the fewest sequences chose while the link "
             "copies the others (on: split by times measured at start-up, or by --gpu-host-share; each "
             "sequence's logits then equal its decoding alone within rounding); off: every miss copied "
             "(bit for bit each sequence alone)");
    a.option("--gpu-activations", &gpu_activations, "q8|f32",
             "activations where quantized weights meet them on the GPU: q8, 8-bit as on the CPU; "
             "f32, float32 throughout (slower; the golden files' exact/ logits are its reference)");
    a.option("--gpu-prefill", &gpu_prefill, "tensor|pass|tokens",
             "GPU prefill: tensor, each layer over all of a pass's tokens (up to -ub) at once, the products "
             "of quantized and float32 weights on tensor cores (equal to decoding within rounding); pass, the same "
             "passes with decode's kernels (logits bit for bit those of decoding token by token, slower); "
             "tokens, one token at a time (to compare)");
    a.option("--gpu-prefill-attention", &gpu_prefill_attention, "decode|tiles",
             "with --gpu-prefill tensor: a prompt's attention in tiles on tensor cores that read the KV cache "
             "once for a block of tokens and query heads, each operand split into two f16 halves (tiles, the "
             "default: equal to decoding within float32 rounding), or by the decode kernel, a launch a run of "
             "64 tokens (decode: much slower, 3.3x slower than the float32 tiles that came before at 4,096 "
             "tokens on an H100)");
    a.option("--gpu-prefill-mla", &gpu_prefill_mla, "expand|tiles|decode",
             "with --gpu-prefill tensor: multi-head latent attention's prompts (DeepSeek V2/V3, Kimi K2, GLM-5). "
             "expand (the default): each head's keys and values built from the compressed rows for the pass's "
             "positions (up to 8,192; 164 KiB a position for DeepSeek V3's 128 heads), then attention over heads "
             "of 192/128 dims instead of the latent rows' 576/512, on tensor cores with each operand split into "
             "two f16 halves (within float32 rounding of decoding); GLM-5's sparse attention, longer contexts and "
             "shapes it lacks take tiles. tiles: the latent rows in tiles on tensor cores (needs 227 KiB of shared "
             "memory a block, else the decode kernel runs). decode: the decode kernel, a launch a run of 64 tokens "
             "(1.9x slower than tiles at 512 tokens, 4.4x at 4,096 on an H100)");
    a.option("--routing-profile", &routing_profile, "FILE",
             "GPU with experts streamed: a file of how often each expert was chosen; read at load to copy the "
             "hottest experts into VRAM first (a restart does not start cold), and this run's uses merged into it "
             "(older counts halved) when the model closes; created if missing");
    a.option("--gpu-prefetch", &gpu_prefetch, "on|off",
             "GPU streaming: copy the experts layer L's router predicts for layer L+1 while L runs, and in "
             "prompt passes that choose nearly every expert, layer L+1's first experts behind L's copies, "
             "ahead of L+1's routing (on), or neither");
    a.flag("--gpu-profile", &gpu_profile,
           "time each stage of the GPU forward pass (kernels launched one by one, no CUDA graph) and print the "
           "split to stderr at exit");
    a.option("--report", &report, "FILE", "write settings, timings and peak RSS as JSON to FILE");
    store.declare(a);
    if (!sampling) return;
    generates = true;
    a.option("--temp", &temp, "T", "sampling temperature (0: greedy)");
    a.option("--top-k", &top_k, "K", "keep the K most likely tokens (0: all)");
    a.option("--top-p", &top_p, "P", "keep the smallest set of tokens whose probability reaches P (1: off)");
    a.option("--min-p", &min_p, "P", "drop tokens less likely than P times the most likely (0: off)");
    a.option("--repeat-penalty", &repeat_penalty, "R", "divide the logits of recent tokens by R (1: off)");
    a.option("--repeat-last-n", &repeat_last_n, "N", "how many recent tokens the repeat penalty looks at");
    a.option("--seed", &seed, "S", "random seed; the same seed gives the same text (-1: a random seed)");
    a.option("--draft", &draft, "MODE",
             "speculative decoding: each forward pass checks up to --draft-max guessed tokens after the one it "
             "samples and keeps those the model agrees with (greedy output is unchanged token for token; sampled "
             "output keeps its distribution). ngram: guesses from the latest earlier occurrence of the last 2-4 "
             "tokens in the prompt and output (pays on edits, quotes, code); mtp: the model's own multi-token-"
             "prediction (NextN) block drafts from its last hidden state (glm4moe files that have one; refused "
             "elsewhere); off; forced: always --draft-max guesses (measures what a "
             "pass costs); auto: ngram when every expert fits in the cache and decoding is greedy (--temp 0), else "
             "off. Why: a pass reads the union of its tokens' experts once, which saves RAM reads when experts are in memory; when they "
             "stream, the cache already shares consecutive tokens' experts, so a pass of K+1 tokens reads 0.92-"
             "1.27 x the drive bytes of K+1 steps (docs/speculation.md) and pays only when nearly every guess is "
             "right");
    a.option("--draft-max", &draft_max, "N", "most drafted tokens a forward pass checks");
}

SessionOptions SessionFlags::options() const {
    if (model.empty()) throw std::runtime_error("no model given (-m MODEL)");
    if (ctx < 0) throw std::runtime_error("-c must be >= 0");
    if (threads < 0) throw std::runtime_error("-t must be >= 0");
    if (batch < 1 || ubatch < 0) throw std::runtime_error("-b must be >= 1 and -ub >= 0");
    if (experts_per_token < 0) throw std::runtime_error("--experts-per-token must be >= 0");
    SessionOptions o;
    o.model_path = model;
    o.n_ctx = ctx;
    o.n_threads = threads;
    o.n_batch = batch;
    o.n_ubatch = ubatch;
    o.experts_per_token = experts_per_token;
    o.nextn = generates && draft == "mtp";  // its weights and KV cache count in --mem
    o.kv_type = parse_kv_type(kv_type);
    o.gpu = gpu;
    GpuOptions& g = o.gpu_options;
    g.expert_bytes = gpu_mem;
    auto choose = [](const char* flag, const std::string& v, const char* a, const char* b) {
        if (v != a && v != b) {
            throw std::runtime_error(std::string(flag) + " must be " + a + " or " + b + ", not '" + v + "'");
        }
        return v == b;
    };
    if (gpu_ram_tier != "copy" && gpu_ram_tier != "map" && gpu_ram_tier != "cpu" && gpu_ram_tier != "auto")
        throw std::runtime_error("--gpu-ram-tier must be copy, map, cpu or auto, not '" + gpu_ram_tier + "'");
    g.ram_tier_auto = gpu_ram_tier == "auto";
    g.map_ram_tier = gpu_ram_tier == "map";
    g.cpu_misses = gpu_ram_tier == "cpu";
    if (gpu_host_share != "auto") {
        char* end = nullptr;
        const double f = std::strtod(gpu_host_share.c_str(), &end);
        if (gpu_host_share.empty() || *end != '\0' || !(f >= 0 && f <= 1))
            throw std::runtime_error("--gpu-host-share must be auto or a fraction from 0 to 1, not '" +
                                     gpu_host_share + "'");
        g.host_share_eighths = int(std::lround(f * 8));
    }
    g.batch_host = !choose("--gpu-batch-host", gpu_batch_host, "on", "off");
    g.float_activations = choose("--gpu-activations", gpu_activations, "q8", "f32");
    if (gpu_prefill != "tensor" && gpu_prefill != "pass" && gpu_prefill != "tokens")
        throw std::runtime_error("--gpu-prefill must be tensor, pass or tokens, not '" + gpu_prefill + "'");
    g.prefill_pass = gpu_prefill != "tokens";
    g.prefill_tensor_cores = gpu_prefill == "tensor";
    g.prefill_attention_tiles = choose("--gpu-prefill-attention", gpu_prefill_attention, "decode", "tiles");
    if (gpu_prefill_mla != "expand" && gpu_prefill_mla != "tiles" && gpu_prefill_mla != "decode")
        throw std::runtime_error("--gpu-prefill-mla must be expand, tiles or decode, not '" + gpu_prefill_mla + "'");
    g.prefill_mla_tiles = gpu_prefill_mla != "decode";
    g.prefill_mla_expand = gpu_prefill_mla == "expand";
    g.prefetch_next_layer = !choose("--gpu-prefetch", gpu_prefetch, "on", "off");
    g.profile = gpu_profile;
    g.routing_profile = routing_profile;
    g.cache_policy = parse_cache_policy(store.cache_policy);
    g.step_fit = store.step_fit_on();
    SamplerParams& p = o.sampling;
    p.temp = float(temp);
    p.top_k = top_k;
    p.top_p = float(top_p);
    p.min_p = float(min_p);
    p.repeat_penalty = float(repeat_penalty);
    p.repeat_last_n = repeat_last_n;
    p.seed = seed >= 0 ? uint64_t(seed) : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    return o;
}

std::vector<std::unique_ptr<Session>> SessionFlags::open_slots(int parallel, uint64_t reserved,
                                                              const SamplerParams& sampling) const {
    std::vector<std::unique_ptr<Session>> slots;
    slots.push_back(open(parallel, reserved));
    for (int i = 1; i < parallel; i++) slots.push_back(slots[0]->fork(sampling));
    return slots;
}

std::unique_ptr<Session> SessionFlags::open(int sequences, uint64_t reserved) const {
    SessionOptions o = options();
    o.n_sequences = sequences;
    std::unique_ptr<ProgressBar> bar;
    std::string phase;
    auto progress = [&](const char* what, uint64_t done, uint64_t total) {
        if (phase != what) {
            if (bar) bar->finish();
            phase = what;
            bar = std::make_unique<ProgressBar>(std::string("loading ") + what, total);
        }
        bar->update(done);
    };
    const uint64_t budget = mem;
    store.start(o.model_path);
    ExpertSourceFactory experts = [&](const GgufFile& file, const Model& model, uint64_t fixed) {
        // Loading is over: close its bar so its time and rate are the load's.
        if (bar) bar->finish();
        bar.reset();
        phase.clear();
        // fixed is resident weights plus one session's KV cache and scratch.
        const uint64_t state = fixed - std::min(fixed, model.resident_bytes());
        return store.make(file, model, fixed + uint64_t(std::max(sequences - 1, 0)) * state, budget, reserved);
    };
    auto s = Session::open(o, experts, progress);
    if (bar) bar->finish();
    const int trained = s->model().trained_experts_per_token();
    if (s->config().n_expert_used != trained) {
        fprintf(stderr, "warning: --experts-per-token %d: each token goes to %d experts, the model was trained with "
                "%d; its output changes (docs/experts-per-token.md measures how much)\n",
                s->config().n_expert_used, s->config().n_expert_used, trained);
    }
    if (generates) s->set_draft(draft_options(*s));
    if (gpu != "off") fprintf(stderr, "backend: %s\n", s->backend().c_str());
    return s;
}

uint64_t SessionFlags::nextn_bytes_read(const Session& s) const {
    // The NextN block is the last expert layer (Model::enable_nextn); each
    // of its misses read one expert.
    const std::vector<ExpertLayer>& layers = s.model().expert_layers();
    const StoreCounters& c = store.counters();
    const size_t L = layers.size() - 1;
    return L < c.misses.size() ? c.misses[L] * layers[L].expert_bytes() : 0;
}

DraftOptions SessionFlags::draft_options(const Session& s) const {
    DraftOptions d;
    d.mode = parse_draft_mode(draft);
    d.max = draft_max;
    if (draft_max < 1) throw std::runtime_error("--draft-max must be at least 1");
    // Sampled text with drafts has the model's distribution but, for a
    // seed, other tokens than without: auto keeps --seed's text unchanged.
    // A model that verifies a pass's tokens one at a time only pays for
    // drafts (the GPU's, H200, resident 30B synth: 147.7 tok/s with n-gram
    // drafts, 209.8 without): auto leaves them off there.
    if (d.mode == DraftMode::Auto)
        d.mode = !store.streams() && temp <= 0 && !s.model().one_token_per_pass() ? DraftMode::Ngram : DraftMode::Off;
    return d;
}

Json SessionFlags::report_json(const char* command, const Session& s) const {
    Json j = Json::object();
    j["command"] = command;
    j["model"] = model;
    j["arch"] = s.config().arch;
    j["build"] = build_info(gpu != "off");
    Json settings = Json::object();
    settings["ctx"] = s.n_ctx();
    settings["threads"] = s.n_threads();
    settings["batch"] = batch;
    settings["ubatch"] = s.ubatch();  // the tokens a piece took (-ub 0: the backend's default)
    settings["kv_type"] = kv_type;
    settings["experts_per_token"] = s.config().n_expert_used;
    settings["experts_per_token_trained"] = s.model().trained_experts_per_token();
    settings["mem"] = mem;
    settings["gpu_mem"] = gpu_mem;
    settings["gpu_ram_tier"] = gpu_ram_tier;
    settings["gpu_host_share"] = gpu_host_share;
    settings["gpu_activations"] = gpu_activations;
    settings["gpu_prefill"] = gpu_prefill;
    settings["gpu_prefill_attention"] = gpu_prefill_attention;
    settings["gpu_prefill_mla"] = gpu_prefill_mla;
    settings["gpu_prefetch"] = gpu_prefetch;
    settings["routing_profile"] = routing_profile;
    settings["parallel"] = parallel;
    j["settings"] = settings;
    j["backend"] = s.backend();
    const Timings& t = s.timings;
    Json prefill = Json::object();
    prefill["tokens"] = t.prefill_tokens;
    prefill["prompt_splits"] = t.prompt_splits;
    prefill["seconds"] = t.prefill_seconds;
    prefill["tokens_per_second"] = t.prefill_tps();
    j["prefill"] = prefill;
    Json decode = Json::object();
    decode["tokens"] = t.decode_tokens;
    decode["seconds"] = t.decode_seconds;
    decode["tokens_per_second"] = t.decode_tps();
    j["decode"] = decode;
    // Seconds per kind of work; "other" is the rest of each phase's wall
    // time (embedding, output head, sampling).
    TimeSplit all = s.prefill_time();
    all.merge(s.decode_time());
    j["time_split"] = all.to_json(t.prefill_seconds + t.decode_seconds);
    j["time_split_prefill"] = s.prefill_time().to_json(t.prefill_seconds);
    j["time_split_decode"] = s.decode_time().to_json(t.decode_seconds);
    j["resident_bytes"] = s.model().resident_bytes();
    j["state_bytes"] = s.state_bytes();
    if (s.kv_bytes_per_token() > 0) {
        j["kv_bytes_per_token"] = s.kv_bytes_per_token();
        j["full_kv_bytes_per_token"] = s.full_kv_bytes_per_token();
    }
    j["peak_rss_bytes"] = peak_rss_bytes();
    store.add_to_report(&j);
    add_gpu_report(s.model(), &j);
    if (!generates) return j;
    const DraftStats& d = s.draft_stats;
    Json spec = Json::object();
    spec["mode"] = draft_mode_name(s.draft().mode);
    spec["draft_max"] = s.draft().max;
    spec["forward_passes"] = d.passes;
    spec["drafted"] = d.drafted;
    spec["accepted"] = d.accepted;
    spec["acceptance_rate"] = d.acceptance();
    spec["tokens_per_pass"] = d.passes > 0 ? d.tokens_per_pass() : 1.0;
    // Expert bytes the decode phase read per generated token: compare runs
    // with and without --draft (verify passes count as multi-token steps
    // in the store's reasons, so the store's mb_read_per_token misses them).
    if (const Json* phases = j.find("phases")) {
        for (const Json& p : phases->as_array()) {
            if (p.at("phase").as_string() != "decode" || t.decode_tokens <= 0) continue;
            spec["expert_bytes_read_per_token"] = double(p.at("bytes_read").as_int()) / double(t.decode_tokens);
        }
    }
    if (s.model().nextn_enabled()) spec["nextn_expert_bytes_read"] = nextn_bytes_read(s);
    j["speculation"] = spec;
    return j;
}

void SessionFlags::finish(const char* command, const Session& s) const {
    const Timings& t = s.timings;
    fprintf(stderr, "prefill: %lld tokens in %.3f s (%.2f tok/s)\n", (long long)t.prefill_tokens, t.prefill_seconds,
            t.prefill_tps());
    fprintf(stderr, "decode:  %lld tokens in %.3f s (%.2f tok/s)\n", (long long)t.decode_tokens, t.decode_seconds,
            t.decode_tps());
    for (const auto& [name, split, wall] : {std::tuple{"prefill", &s.prefill_time(), t.prefill_seconds},
                                            std::tuple{"decode", &s.decode_time(), t.decode_seconds}}) {
        if (split->calls == 0 || wall <= 0) continue;
        const double ms = 1e3 / double(split->calls);
        fprintf(stderr, "%s time per forward call: attention %.1f ms, routing %.1f, io wait %.1f, expert compute %.1f, "
                        "other %.1f", name, split->seconds[int(Phase::Attention)] * ms,
                split->seconds[int(Phase::Routing)] * ms, split->seconds[int(Phase::IoWait)] * ms,
                split->seconds[int(Phase::ExpertCompute)] * ms,
                std::max(0.0, wall - split->total_seconds()) * ms);
        const double ec = split->seconds[int(Phase::ExpertCompute)];
        if (ec > 0) fprintf(stderr, " (experts %.2f GB/s)", double(split->weight_bytes[int(Phase::ExpertCompute)]) / ec / 1e9);
        fputc('\n', stderr);
    }
    fputs(store.summary().c_str(), stderr);
    if (s.draft().mode != DraftMode::Off) {
        const DraftStats& d = s.draft_stats;
        fprintf(stderr, "speculation (%s, up to %d): %lld drafted, %lld accepted (%.1f %%), %.2f tokens per forward pass\n",
                draft_mode_name(s.draft().mode), s.draft().max, (long long)d.drafted, (long long)d.accepted,
                100 * d.acceptance(), d.tokens_per_pass());
        if (s.model().nextn_enabled()) {
            fprintf(stderr, "NextN block: %s of its routed experts read\n",
                    format_bytes(double(nextn_bytes_read(s))).c_str());
        }
    }
    if (s.kv_bytes_per_token() > 0 && s.full_kv_bytes_per_token() != s.kv_bytes_per_token()) {
        fprintf(stderr, "KV cache: %lld bytes a token of context (compressed) against %lld for full K/V\n",
                (long long)s.kv_bytes_per_token(), (long long)s.full_kv_bytes_per_token());
    }
    fprintf(stderr, "peak RSS: %s\n", format_bytes(double(peak_rss_bytes())).c_str());
    if (report.empty()) return;
    std::ofstream f(report);
    if (!f) throw std::runtime_error(report + ": cannot write");
    f << report_json(command, s).dump(2) << "\n";
    if (!f) throw std::runtime_error(report + ": write failed");
}

std::string read_chat_template(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot read the chat template");
    std::string text(std::istreambuf_iterator<char>(f), {});
    if (text.empty()) throw std::runtime_error(path + ": the chat template is empty");
    return text;
}

}  // namespace ms
