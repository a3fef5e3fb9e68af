// The flags every command that runs a model shares (run, chat, logits, and
// later serve and bench model): model path, context, threads, batch, KV
// type, memory budget, sampling and the JSON report. Declared once here, so
// the store's flags (--io, --layout, --cache-policy, ...) are added in one
// place for all of them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/store_flags.h"
#include "json/json.h"
#include "runtime/session.h"

namespace ms {

struct SessionFlags {
    std::string model;
    int64_t ctx = 4096;
    int threads = 0;
    int batch = 4096, ubatch = 0;
    int experts_per_token = 0;
    std::string kv_type = "f16";
    uint64_t mem = 0;
    std::string gpu = "auto";
    uint64_t gpu_mem = 0;
    std::string gpu_activations = "q8", gpu_ram_tier = "auto", gpu_prefill = "tensor", gpu_prefetch = "on";
    std::string gpu_host_share = "auto";
    std::string gpu_batch_host = "on";
    std::string routing_profile;
    std::string gpu_prefill_attention = "tiles";
    std::string gpu_prefill_mla = "expand";
    bool gpu_profile = false;
    std::string report;
    // Sampling (declared only by commands that sample).
    double temp = 0.8, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0;
    int top_k = 40, repeat_last_n = 64;
    int64_t seed = -1;
    // Speculative decoding (declared with the sampling flags).
    std::string draft = "auto";
    int draft_max = 4;
    bool generates = false;  // the command samples (declare(a, true)): drafts apply
    int parallel = 1;  // run --parallel: sequences decoded together (the report's decode figures are their sum)
    StoreFlags store;  // --io, --layout, --cache-policy...: experts stream from the drive

    // sampling: also declare the sampling flags.
    void declare(Args& a, bool sampling);
    SessionOptions options() const;
    // Opens the session with a progress bar per loading phase, honouring --mem.
    // sequences > 1: the memory plan also reserves the KV caches of that many
    // - 1 forks (serve's slots), so the expert cache gets what is left.
    // --draft auto resolves here (draft_options).
    // reserved: bytes the caller holds beside the session (serve's requests),
    // taken from --mem like the session's scratch.
    std::unique_ptr<Session> open(int sequences = 1, uint64_t reserved = 0) const;
    // serve's slots: open(parallel, reserved) and parallel - 1 forks of it
    // sampling with `sampling`.
    std::vector<std::unique_ptr<Session>> open_slots(int parallel, uint64_t reserved,
                                                     const SamplerParams& sampling) const;
    // --draft and --draft-max for an open session, auto resolved: n-gram
    // drafts when every expert fits in the cache and decoding is greedy
    // (sampled text then stays the seed's), off when experts stream
    // (a pass then reads nearly K+1 steps' bytes: docs/speculation.md).
    DraftOptions draft_options(const Session& s) const;
    // Bytes of routed experts the store read for the NextN block (--draft mtp).
    uint64_t nextn_bytes_read(const Session& s) const;
    // The settings and measurements of a finished run, for --report.
    Json report_json(const char* command, const Session& s) const;
    // Writes report_json to --report when given; prints timings and peak RSS
    // to stderr.
    void finish(const char* command, const Session& s) const;
};

// The text of a --chat-template-file (chat, serve); throws naming the file
// when it cannot be read or is empty.
std::string read_chat_template(const std::string& path);

}  // namespace ms
