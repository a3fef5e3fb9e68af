// The decoder's forward pass on a CUDA device (gpu/gpu.h), driven by the
// family's DecoderSpec (model/decoder.h), the same one the CPU decoder is
// built from: resident weights, KV cache and activations in VRAM; routed
// experts in a VRAM slot cache of `expert_bytes`, filled from the
// ExpertSource (the RAM tier: RamExperts or the store's slot cache,
// page-locked so copies are DMA). Decode: a token's launches replayed as
// one CUDA graph where every expert is reached through a device table (all
// in VRAM, or the rest read from the mapped RAM tier), else a layer's
// misses copied as one batch on a copy stream. Prefill: up to --ubatch
// tokens through each layer at once, every expert the pass uses read and
// copied once, the matrix products on tensor cores (quantized weights as
// int8, float32 ones and attention in split f16; equal to token-by-token
// decoding within rounding; --gpu-prefill pass: decode's kernels, bit for
// bit). Covers grouped-query attention (q/k/v and output biases, q/k
// RMSNorm per head, whole or after RoPE, NeoX or adjacent-pair RoPE on some
// or all dims, sliding windows, chunks, sink logits, unroped layers with a
// temperature, gated heads), multi-head latent attention, Gated DeltaNet
// layers, softmax, softmax-over-chosen or sigmoid routing (selection and
// router biases, groups, renormalized, scaled), dense lead or interleaved
// layers, shared experts (gated or not), SwiGLU or gpt-oss's clamped
// activation, expert biases, weighted expert inputs; weights
// F32/F16/Q8_0/Q4_K/Q5_K/Q6_K/MXFP4. Other features (the sparse-attention
// indexer) are refused at open, by name.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "json/json.h"
#include "model/model.h"
#include "store/slot_cache.h"

namespace ms {

// --gpu-ram-tier auto's choice (the default): whether the host computing
// part of a layer's VRAM misses (cpu) is expected to beat copying them all
// (copy). Fitted to runs on an H100 (docs/gpu.md, seventeenth session, and
// the fifteenth's DeepSeek V3): the host's part pays where experts are
// large (gpt-oss, 13 MB: 1.37x copying at 4G; DeepSeek V3, 27 MB: 1.35x) or
// the cache cannot hold a token's experts (qwen3-30b at 64M: 1.64x,
// gpt-oss 1.64x), and not where a layer's few misses are small and the
// cache keeps them (qwen3-30b at 4G and 8G, 2.9 MB, 97 % hits: 0.90x): a
// copied miss stays cached, and one small miss costs about the same on
// either side.
// Without a RAM tier that holds every expert the host would compute every
// miss from the drive's slots: copy, as measured before.
inline bool host_split_pays(bool ram_holds_all, int64_t vram_slots, int n_moe_layers, int top_k,
                            uint64_t largest_expert_bytes) {
    if (!ram_holds_all) return false;
    return vram_slots < int64_t(n_moe_layers) * top_k || largest_expert_bytes >= (uint64_t(8) << 20);
}

// Of a batched pass's n misses in one layer (serve's steps of several
// sequences: rows[i] rows chose miss i, rows ascending), how many the host
// computes, the ones of fewest rows: h of them take host_fixed_s plus
// host_s for each of their rows (taken as linear: the host's rate of a
// single row is all that is measured, and a few rows of one expert cost it
// less than that), the other n - h are copied in copy_s each, both sides at
// once; h minimizes the later finish, ties to the link (host_misses' rule
// where every miss has one row; rows null: one row each).
inline int host_misses_rows(const int32_t* rows, int n, double copy_s, double host_fixed_s, double host_s) {
    int best = 0;
    double best_t = n * copy_s, host_t = host_fixed_s;
    for (int h = 1; h <= n; h++) {
        host_t += host_s * (rows ? rows[h - 1] : 1);
        const double t = std::max((n - h) * copy_s, host_t);
        if (t < best_t) best = h, best_t = t;
    }
    return best;
}

// How many of a layer's n VRAM misses the host computes (the rest copied
// into VRAM) under --gpu-host-share auto: the link copies each in copy_s;
// the host computes h of them in host_fixed_s + h * host_s (waking its
// threads and their barriers are the fixed part, which makes one small miss
// dearer on the host than on the link). Both sides work at once, so h
// minimizes the later finish; ties go to the link, whose copies also stay
// cached. The three times are measured at start-up (measure_split).
inline int host_misses(int n, double copy_s, double host_fixed_s, double host_s) {
    return host_misses_rows(nullptr, n, copy_s, host_fixed_s, host_s);
}

// Issue 33's small chunks: whether a chunk of n tokens (a short prompt, a
// chat's next turn, or n sequences' steps of one batch) costs less as n
// decode steps than as one pass, under --gpu-ram-tier cpu. A pass copies
// each expert its tokens chose that VRAM lacks once: per MoE layer, the
// unique experts of n tokens (n_expert (1 - (1 - k/n_expert)^n), for
// independent picks) times the miss rate, copy_s each; its own compute is
// taken as one step's, since a pass of few rows is bound by its launches.
// A step's time (step_s) is measured by decoding and includes the host's
// share of its misses, which is what steps gain: small chunks go to the
// host, big ones are copied once. step_s <= 0 (not measured yet): a pass.
inline bool steps_beat_pass(int n, int n_expert, int top_k, int n_moe_layers, double miss_rate, double copy_s,
                            double step_s) {
    if (step_s <= 0 || n < 2 || n_expert <= 0) return false;
    const double unique = double(n_expert) * (1.0 - std::pow(1.0 - double(top_k) / double(n_expert), double(n)));
    const double pass_s = step_s + double(n_moe_layers) * unique * miss_rate * copy_s;
    return double(n) * step_s < pass_s;
}

// The GPU forward pass's settings, from the command line (--gpu-*, parsed
// with the other session flags in cli/session_flags.cpp); the defaults are
// the measured best (docs/gpu.md).
struct GpuOptions {
    uint64_t expert_bytes = 0;  // --gpu-mem: VRAM for the expert cache; 0: all free VRAM but 1 GiB
    // --gpu-activations f32: float32 activations throughout (an F32 file's
    // exact/ logits are then the reference), not 8-bit ones where quantized
    // weights meet them (as on the CPU).
    bool float_activations = false;
    // --gpu-ram-tier map: where the RAM tier holds every expert, it is mapped
    // into the device's address space and the kernels read a token's misses
    // over the bus, the VRAM slots refilled between tokens; else (copy) each
    // layer's misses are copied into VRAM slots.
    bool map_ram_tier = false;
    // --gpu-ram-tier auto (the command line's default): at load, cpu_misses
    // where host_split_pays says the host's part is the faster, else copy.
    bool ram_tier_auto = false;
    // --gpu-ram-tier cpu: each layer's experts not in VRAM are computed by
    // the host's cores from the RAM tier (as llama.cpp's --n-cpu-moe does)
    // while the GPU runs those in VRAM; the two sums are added on the GPU.
    // The VRAM cache fills with the next layer's predicted experts
    // (--gpu-prefetch) and, where it holds a token's experts, with the
    // host's misses, copied after the host takes them. Decode only: prefill
    // passes copy as with `copy`.
    bool cpu_misses = false;
    // --gpu-host-share: with cpu_misses, the eighths of a layer's misses the
    // host computes (the rest copied into VRAM and run there); -1: a layer's
    // split by host_misses over times measured at start-up. With prefetch_next_layer, the link's part
    // is the next layer's predicted misses copied ahead, and the host
    // computes every miss left. Copies need a RAM tier that holds every
    // expert; otherwise the host computes them all.
    int host_share_eighths = -1;
    // --gpu-batch-host on: in a batched pass of several sequences' steps
    // (serve --parallel), where the RAM tier holds every expert and a
    // layer's experts fit the VRAM cache, the host's cores compute the
    // misses of fewest rows (host_misses_rows, by the times measured at
    // start-up, or --gpu-host-share's eighths) while the link copies the
    // rest; the rows are then equal to each sequence's decoding alone
    // within rounding, not bit for bit. off: every miss copied.
    bool batch_host = true;
    // --gpu-prefill tokens: a prompt token by token instead of each layer
    // over every token of a pass (slower: to compare).
    bool prefill_pass = true;
    // --gpu-prefill tensor (the default): a pass's products of quantized
    // weights on tensor cores (integer MMA), equal to decoding's within
    // rounding; pass: decode's kernels over the pass, bit for bit decoding's.
    bool prefill_tensor_cores = true;
    // --gpu-prefill-attention tiles (the default): with
    // prefill_tensor_cores, a prompt's attention in tiles over all its
    // tokens on tensor cores (gpu.h's attention_tiled); decode: the decode
    // kernel a run of tokens (on an H100, qwen3-30b-a3b resident: 1.6x
    // slower than the float32 tiles before them at 512 tokens, 3.3x at
    // 4,096, docs/gpu/run15; the tensor-core tiles took that model's
    // attention from 89.7 to 23.8 us a token at 4,096, docs/gpu/run27).
    bool prefill_attention_tiles = true;
    // --gpu-prefill-mla tiles (the default): with prefill_tensor_cores,
    // multi-head latent attention's prompts on tensor cores in the split-f16
    // form (gpu.h's attention_tiled_shared) instead of the decode kernel. It
    // passed the golden files on an H100 (docs/gpu.md, twenty-sixth session:
    // within 3e-7 of token by token) and gave deepseek-v3 6L pp512 and
    // pp4096 1.9x and 4.4x the decode kernel's rates.
    bool prefill_mla_tiles = true;
    // --gpu-prefill-mla expand (the default): with prefill_mla_tiles, a
    // dense-MLA prompt's pass builds every head's keys and values for its
    // positions (up to 8,192) and attends over them (gpu.h's
    // attention_expanded): DeepSeek V3's heads of 192/128 against the
    // latent rows' 576/512, 3.4x fewer products.
    bool prefill_mla_expand = true;
    // --gpu-prefetch off: no copies ahead of the next layer's predicted
    // experts (decode), nor of its first experts (prompt passes).
    bool prefetch_next_layer = true;
    // --routing-profile: a file of each (layer, expert)'s uses
    // (model/routing_profile.h). Read at load, where VRAM cannot hold every
    // expert, to copy the hottest into it first; this run's uses are merged
    // into it when the model closes. Empty: none.
    std::string routing_profile;
    // --gpu-profile: each stage's kernels timed with events (launched one by
    // one, no graph), printed to stderr at exit.
    bool profile = false;
    // --cache-policy and --step-fit: which expert a VRAM miss evicts, by the
    // store's SlotCache (the same policies as the RAM tier's).
    CachePolicy cache_policy = CachePolicy::Wlfu;
    bool step_fit = true;
};

// The model on the GPU, or nullptr with *why (one line) when there is no
// usable device, or the architecture is not a DecoderSpec family, or its
// spec asks for a feature without a GPU operation (named), or a weight type
// has no kernel.
std::unique_ptr<Model> open_gpu_model(const GgufFile& file, const GpuOptions& options, std::string* why);

// The architectures (general.architecture) whose files the GPU forward
// pass takes: the DecoderSpec families but those whose spec always needs an
// operation the GPU lacks. A file of one may still be refused for a shape
// or weight type open_gpu_model names.
std::vector<std::string> gpu_architectures();

// When `model` runs on the GPU, adds the report's "gpu" object: the device,
// and the VRAM tier's slots, hits, misses, bytes copied to it and the host's
// time spent filling it (the time split's io_wait holds it too).
void add_gpu_report(const Model& model, Json* report);

// The VRAM tier's running counts (serve's /metrics), read without building
// a report: uses found in VRAM (copies ahead included), misses, the misses
// the host computed, next-layer experts copied ahead, and bytes copied to
// VRAM, read by the host's cores, read by kernels over the bus (mapped).
struct GpuTierCounts {
    bool mapped = false;
    uint64_t hits = 0, misses = 0, host_computed = 0, prefetch_copies = 0;
    uint64_t copied_bytes = 0, host_bytes = 0, bus_read_bytes = 0;
};
// False where `model` is not on the GPU or VRAM holds every expert.
bool gpu_tier_counts(const Model& model, GpuTierCounts* out);

}  // namespace ms
