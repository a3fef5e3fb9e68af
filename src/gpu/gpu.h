// The CUDA backend's interface, in plain C++ (no CUDA header): whether a
// device is usable, device and pinned memory, streams and events, and the
// kernels the GPU forward pass runs (quantized matrix-vector products, norms,
// RoPE, attention over a KV cache, SwiGLU, softmax top-k routing, and the
// other families' operations). Built from kernels.cu, kernels_layers.cu,
// kernels_deltanet.cu, kernels_mma.cu + device.cpp where nvcc is present (MOESTREAM_CUDA), else from
// nocuda.cpp, whose available() says why there is no GPU. The CUDA runtime is
// linked statically and opens the driver at run time, so a binary built with
// CUDA still runs, on the CPU, where no driver or device is present.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "quant/types.h"

namespace ms::gpu {

// True when a CUDA device can be used; otherwise false and *why says, in one
// line and plain words, why not (no_device_reason below: built without
// CUDA, no NVIDIA driver found, no NVIDIA GPU found, a device too old).
bool available(std::string* why);
// "NVIDIA H200, 139 GiB, sm_90" (empty when !available).
std::string describe();
// The first CUDA device as described above, whether or not this build's
// kernels run on it, without taking it (no context is made, so a report
// costs the device nothing); "" with *why when there is none.
std::string probe(std::string* why);
// The CUDA runtime version this binary was built with ("13.0"); "" when
// built without CUDA.
std::string runtime_version();
// The sentence for a CUDA runtime error met while looking for a device:
// cudaErrorInsufficientDriver with driver_version 0 (cudaDriverGetVersion's
// answer when libcuda is absent) is "no NVIDIA driver found", with a
// driver too old for `runtime` it names both versions; cudaErrorNoDevice is
// "no NVIDIA GPU found"; anything else is error_text after "CUDA: ". Plain
// ints, so this is the same code, and testable, with or without CUDA.
std::string no_device_reason(int cuda_error, const std::string& error_text, int driver_version, int runtime);
// CUDA's values of the errors no_device_reason() names (device.cpp checks
// them against the runtime's header).
constexpr int kCudaErrorInsufficientDriver = 35;
constexpr int kCudaErrorNoDevice = 100;
// Device memory free and total, in bytes.
void memory_info(size_t* free_bytes, size_t* total_bytes);

// Weight types the matrix-vector kernels take.
bool supports(GgmlType t);

// Allocations throw std::runtime_error naming the size on failure.
void* alloc(size_t bytes);
void release(void* p);
void* alloc_pinned(size_t bytes);  // page-locked host memory, so copies are DMA
void release_pinned(void* p);
// Page-locks existing host memory (cudaHostRegister) so copies from it are
// DMA; false when the driver refuses (then copies are staged), with *why
// (when given) saying why.
bool pin_host(void* p, size_t bytes, std::string* why = nullptr);
void unpin_host(void* p);
// The address at which kernels read page-locked host memory (over the bus,
// without a copy); null where p is not page-locked or cannot be mapped.
const uint8_t* device_view(const void* p);

// An opaque CUDA stream and event; nullptr is the default stream.
using Stream = struct StreamOpaque*;
using Event = struct EventOpaque*;
Stream new_stream();
void delete_stream(Stream s);
Event new_event();
void delete_event(Event e);
void record(Event e, Stream s);
void wait(Stream s, Event e);   // s waits for e without blocking the host
void sync(Stream s);
void sync_event(Event e);
float elapsed_ms(Event start, Event end);

void copy_to_device(void* dst, const void* src, size_t bytes, Stream s);  // async when src is pinned
void copy_to_host(void* dst, const void* src, size_t bytes, Stream s);
void copy_on_device(void* dst, const void* src, size_t bytes, Stream s);
// `rows` rows of `width` bytes on the device, src_pitch and dst_pitch bytes apart.
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows, Stream s);
void fill(void* dst, int byte, size_t bytes, Stream s);
// Throws if a kernel launched earlier failed.
void check_last(const char* what);

// 8-bit activations, as the CPU's kernels take them (quant/dot.h): a row
// of `width` floats quantized once into both of quant's block formats, Q8_K
// (256 values a scale, for the K-quants) and Q8_0 (32 a scale, for Q8_0 and
// MXFP4), rounded as quant/dot.cpp rounds them, in act_bytes(width) bytes
// (rows that far apart); then every matrix-vector product of quantized
// weights reading it takes integer dot products. width: a multiple of 32
// (of 256 for K-quant weights, as their rows are).
size_t act_bytes(int64_t width);
void quantize_act(const float* x, int64_t rows, int64_t width, void* act, Stream s);

// The x of a matrix-vector product: float32 values (f) and, optionally,
// the same values quantized by quantize_act (q). Kernels of F32 and F16
// weights read f; of quantized weights q when given, else f (dequantizing
// the weights to multiply float32 activations, as the exact/ golden runs).
struct Act {
    const float* f = nullptr;
    const void* q = nullptr;
    Act(const float* x) : f(x) {}  // NOLINT: a float vector is an Act
    Act(const float* x, const void* quantized) : f(x), q(quantized) {}
};

// y[r] = dot(row r of w, x) for r < rows; w is rows rows of `cols` elements
// of type t, laid out as in the GGUF (row_bytes(t, cols) apart); x and y
// on the device.
// add: y[r] += the product instead.
void matvec(GgmlType t, const void* w, int64_t rows, int64_t cols, Act x, float* y, Stream s, bool add = false);

// Up to three matrices reading the same x in one launch (a layer's q, k and
// v): matrix i, of type types[i] with rows[i] rows of `cols`, into y[i].
void matvec_multi(int n, const GgmlType* types, const void* const* w, const int64_t* rows, int64_t cols, Act x,
                  float* const* y, Stream s);

// The same matrix of n experts at once: expert i's weights are at
// table[ids[i]] + offset (table: device array of device pointers, one per
// expert of the layer; ids: n device ints; or ids null and table[i] expert
// i's own), its input x + i * x_stride, its output y + i * rows. x_stride
// 0: every expert reads the same x (else cols: x's 8-bit rows too). The
// same table and ids below.
void matvec_experts(GgmlType t, const uint8_t* const* table, const int32_t* ids, int n, size_t offset, int64_t rows,
                    int64_t cols, Act x, int64_t x_stride, float* y, Stream s);

// What some families add to an expert's FFN (gpt-oss): bias rows per
// expert, indexed by its id in the layer (n_expert rows each, gate's and
// up's as wide as the FFN, down's as the model), each added to its product
// before the activation or the routing weight; and the clamped activation
// g * sigmoid(1.702 g) * (u + 1), g = min(gate, 7), u = clamp(up, -7, 7),
// instead of silu(g) * u. ids: the experts' ids (device ints, by rank)
// where the one-token kernels' table is not indexed by id (no table ids:
// a streamed layer's slots); else the id is the table's index.
struct ExpertExtras {
    const float* gate_bias = nullptr;
    const float* up_bias = nullptr;
    const float* down_bias = nullptr;
    const int32_t* ids = nullptr;
    bool clamped = false;
    // Llama 4: expert i reads input row i (x: n rows, each the token's
    // row times the expert's routing weight) instead of one shared row.
    bool own_input = false;
};

// An expert FFN's first half for n experts in one launch: with expert i's
// gate matrix at table[ids[i]] + offset and its up matrix at + offset2 (both
// of type t, rows x cols), h[i * rows + r] = silu(gate_r . x) * (up_r . x)
// (or as `extras` says).
void expert_gate_up(GgmlType t, const uint8_t* const* table, const int32_t* ids, int n, size_t offset,
                    size_t offset2, int64_t rows, int64_t cols, Act x, float* h, Stream s,
                    const ExpertExtras& extras = {});

// The second half, and the weighted sum into the residual, in one launch
// (n <= 32): with expert i's down matrix at table[ids[i]] + offset (rows x
// cols) and its input row i of h (n rows of cols), x[r] += sum over i < n,
// in order, of weights[i] * (down_r . h_i) (plus extras.down_bias's row of
// the expert before the weight).
void expert_down_add(GgmlType t, const uint8_t* const* table, const int32_t* ids, int n, size_t offset,
                     int64_t rows, int64_t cols, Act h, const float* weights, float* x, Stream s,
                     const ExpertExtras& extras = {});

// Prefill's matrix products: one matrix (or each expert's) over many
// inputs, each output bit for bit what the one-input kernel above gives
// for that input (the same lanes take the same blocks and add in the same
// order), so a prompt prefilled in one pass leaves the logits and KV cache
// that a token-by-token pass leaves, at whatever VRAM tier its experts are.
// Inputs: x.f rows of `cols` floats, x.q their 8-bit rows (act_bytes(cols)
// apart); outputs rows of `rows` floats. parts_of: the matrices of the
// one-input launch the call stands for, as matvec's 1 and matvec_experts'
// n (the split of each row among warps depends on it); 0 for
// matvec_multi's, expert_gate_up's and expert_down_add's products.
//
// y row t = w . x row t for t < n (add: added to y).
void matmul(GgmlType t, const void* w, int64_t rows, int64_t cols, int n, Act x, float* y, Stream s, bool add,
            int parts_of);

// Experts' products over the tokens routed to each: tiles (device arrays
// the host fills): three ints a tile (the expert's id in the table, its
// first pair, its pairs, at most 8) for n_tiles tiles; pair j reads input
// row in_row[j] and writes output row out_row[j].
struct ExpertTiles {
    const int32_t* tiles = nullptr;
    int n_tiles = 0;
    const int32_t* in_row = nullptr;
    const int32_t* out_row = nullptr;
};
constexpr int kExpertTile = 8;  // pairs a tile
void matmul_experts(GgmlType t, const uint8_t* const* table, const ExpertTiles& tiles, size_t offset, int64_t rows,
                    int64_t cols, Act x, float* y, Stream s, int parts_of);
// expert_gate_up over the tiles' pairs: h's output rows silu(gate . x) * (up . x)
// (or as `extras` says: the tile's expert is the id of its bias rows).
void expert_gate_up_tokens(GgmlType t, const uint8_t* const* table, const ExpertTiles& tiles, size_t offset,
                           size_t offset2, int64_t rows, int64_t cols, Act x, float* h, Stream s,
                           const ExpertExtras& extras = {});
// Prefill on tensor cores (kernels_mma.cu): matmul, matmul_experts and
// expert_gate_up_tokens over a pass's rows as integer matrix products
// (mma.sync, int8 x int8 -> int32) of the weights' quants and the 8-bit
// rows x.q (which must be set), each block's sum scaled in float as the
// decode kernels scale it (the K-quants: a 256-column chunk's sums times
// their integer scales added as integers, then scaled once), so equal to
// them within rounding, not bit for bit. An output
// does not depend on the other inputs of its tile. Weights Q4_K, Q5_K,
// Q6_K, Q8_0 and MXFP4 (mma_supports); the callers take the kernels above
// for other types and for float x. Expert tiles hold up to kMmaTile pairs.
constexpr int kMmaTile = 32;
bool mma_supports(GgmlType t);
void mma_matmul(GgmlType t, const void* w, int64_t rows, int64_t cols, int n, Act x, float* y, Stream s, bool add);
// Float32 weights over n float rows on tensor cores, each operand split
// into two f16 halves (split_f16.cuh): within float32 rounding of
// matmul()'s, not its bits. cols: a multiple of 32.
void mma_matmul_f32(const float* w, int64_t rows, int64_t cols, int n, const float* x, float* y, Stream s, bool add);
void mma_matmul_experts(GgmlType t, const uint8_t* const* table, const ExpertTiles& tiles, size_t offset,
                        int64_t rows, int64_t cols, Act x, float* y, Stream s);
void mma_gate_up_experts(GgmlType t, const uint8_t* const* table, const ExpertTiles& tiles, size_t offset,
                         size_t offset2, int64_t rows, int64_t cols, Act x, float* h, Stream s,
                         const ExpertExtras& extras = {});
// expert_down_add's weighted sum over n tokens of k experts each, once the
// down products are in `out` (row t * k + i: token t's expert of rank i):
// x row t += sum over i < k, in rank order, of weights[t * k + i] * that row
// (plus down_bias's row of expert ids[t * k + i] first, when given).
void combine_experts(const float* out, const float* weights, int n, int k, int64_t width, float* x, Stream s,
                     const float* down_bias = nullptr, const int32_t* ids = nullptr);

// out[r*width + i] = x[r*width + i] / sqrt(mean(x_r^2) + eps) * w[i] over
// `rows` rows (w may be null); out may alias x. act: also out's 8-bit
// rows (quantize_act's), in the same launch.
void rms_norm(const float* x, const float* w, int64_t rows, int64_t width, float eps, float* out, Stream s,
              void* act = nullptr);

// Decode attention of the token at position *pos (an int on the device, so
// a captured graph serves every position): for each of n_head query heads
// (head_dim apart in q), softmax(q . k_p * scale) over positions p <= *pos of
// the cache rows of its KV head (n_head / n_kv_head query heads share one),
// then the weighted sum of the v rows. k_cache, v_cache: rows of
// n_kv_head * head_dim floats. out: n_head * head_dim floats. *pos <
// max_pos, for which prepare_attention was called. scratch: device memory
// of attention_scratch_bytes (the positions are split over several blocks a
// head, whose partial sums meet there). act: also out's 8-bit row
// (quantize_act's), in the launch that writes out where the heads fill
// whole 256-value blocks.
//
// fresh.k set: q and the new position's k and v rows come as the q/k/v
// matrices gave them, and attention does qk_norm_rope_store's work in its
// own launch: q's heads and the k row's RMS-normed per head (q_norm,
// k_norm) and NeoX-rotated (cos_sin, n_rot dims), the k and v rows written
// into row *pos of the caches (q itself is left as it was).
struct FreshRow {
    const float* k = nullptr;
    const float* v = nullptr;
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    float eps = 0;
    const float* cos_sin = nullptr;
    int n_rot = 0;
};
void prepare_attention(int max_pos, int head_dim);
size_t attention_scratch_bytes(int n_head, int head_dim);
//
// n > 1 (prefill; fresh not set): n tokens at positions *pos .. *pos + n -
// 1, whose k and v rows are in the caches already; q, out and act n rows,
// scratch n times attention_scratch_bytes. Each token's output is the bits
// the one-token call gives it.
//
// window > 0: a token at position p attends to (p - window, p] only;
// chunk > 0 (Llama 4): to its chunk's positions, [p - p % chunk, p].
// sinks: n_head logits (device floats, or null), each one more score in its
// head's softmax, not scaled, that takes probability mass but adds no value.
//
// seq set (batched decode, fresh not set): the n rows are of n sequences,
// each with its own caches and position: row t at position pos[t] of the
// caches seq[2t] (k) and seq[2t + 1] (v); k_cache and v_cache are not read.
// The same holds for seq in the KV writes below (qk_norm_rope_store,
// rope_store, mla_rope_store: its one cache at seq[2t]).
//
// chosen set (DeepSeek sparse attention, fresh not set): row t attends to
// the chosen.count[t] positions at chosen.pos[t * chosen.top_k ..] only
// (indexer_select's), not to every position up to its own; window and
// chunk are not read.
struct Chosen {
    const int32_t* pos = nullptr;
    const int32_t* count = nullptr;
    int top_k = 0;
};
void attention(const float* q, float* k_cache, float* v_cache, const int32_t* pos, int n_head, int n_kv_head,
               int head_dim, float scale, float* scratch, float* out, Stream s, void* act = nullptr,
               const FreshRow& fresh = {}, int n = 1, int window = 0, const float* sinks = nullptr,
               int chunk = 0, float* const* seq = nullptr, const Chosen& chosen = {});

// Prefill attention of one sequence's n tokens at positions *pos .. *pos +
// n - 1 (their k and v rows in the caches already), with attention's
// window, chunk and sinks, in tiles on tensor cores (kernels_attention.cu):
// the query heads of a KV head and several tokens read each tile of
// positions once, each row's softmax kept online. Within float32 rounding
// of attention(), not its bits. planes: scratch of
// attention_tiled_scratch_bytes for the positions up to the last one (the
// k and v rows split into f16 halves once). act: also out's 8-bit rows.
// False, with nothing launched, for a shape it does not take (head_dim
// other than 64, 128 or 256; more than 64 query heads a KV head):
// attention() is then the one to call.
size_t attention_tiled_scratch_bytes(int64_t positions, int n_kv_head, int head_dim);
bool attention_tiled(const float* q, const float* k_cache, const float* v_cache, const int32_t* pos, int n_head,
                     int n_kv_head, int head_dim, float scale, float* out, Stream s, void* act, int n, void* planes,
                     int window = 0, const float* sinks = nullptr, int chunk = 0);

// Multi-head latent attention's prompt (kernels_attention.cu): n tokens at
// positions *pos .. *pos + n - 1, n_head query heads of k_dim (q: n x
// n_head rows) over one cache of rows of k_dim (keys; their first v_dim,
// values), causal or each token's chosen positions; out: n x n_head rows
// of v_dim. On tensor cores, each operand split into two f16 halves:
// within float32 rounding of attention(), not its bits. False, with nothing
// launched, for a shape it does not take (k_dim not a multiple of 16 or
// above 576; v_dim other than 32, 64, 128, 256 or 512) or a device without
// the 227 KiB of shared memory a block that rows of 576 need.
bool attention_tiled_shared(const float* q, const float* rows, const int32_t* pos, int n_head, int k_dim, int v_dim,
                            float scale, float* out, Stream s, int n, const Chosen& chosen = {});

// Multi-head latent attention's prompt in the expanded form, for passes
// whose positions fit the planes (kernels_attention.cu). The caller builds
// each head's keys and values for every position up to the pass's last:
// k_nope = k_b c (mla_k_b_transposed gives k_b as float rows of kv_lora
// for mma_matmul_f32) and v = v_b c; mla_expand_planes splits them, with
// the cache rows' rope dims, into planes of attention_expanded_scratch_bytes
// (rows (p, h): head_dim = nope + rope key dims, v_dim value dims, each
// as f16 hi and lo halves), from position `first`, `count` of them (k_nope
// and v: count x n_head rows). attention_expanded then runs n queries
// (n x n_head rows of head_dim: [q_nope | rotated q_pe]) at positions
// *pos .. *pos + n - 1 over positions 0 .. *pos + n - 1, causal, on tensor
// cores in the split-f16 form (within float32 rounding of the latent form,
// whose scores and outputs it equals); out: n x n_head rows of v_dim.
// False, with nothing launched, for a shape it lacks
// (attention_expanded_supports: 192/128, DeepSeek V2/V3 and Kimi K2; 48/32,
// the golden files').
size_t attention_expanded_scratch_bytes(int64_t positions, int n_head, int head_dim, int v_dim);
bool attention_expanded_supports(int head_dim, int v_dim);
bool mla_k_b_transposable(GgmlType t);
void mla_k_b_transposed(GgmlType t, const void* k_b, int n_head, int kv_lora, int nope, float* out, Stream s);
void mla_expand_planes(const float* k_nope, const float* v, const float* rows, int64_t first, int count, int n_head,
                       int nope, int rope, int v_dim, int row_width, int rope_at, void* planes, Stream s);
bool attention_expanded(const float* q, const void* planes, const int32_t* pos, int n_head, int head_dim, int v_dim,
                        float scale, float* out, Stream s, int n);

// Per head: q's n_head heads RMS-normed with q_norm and NeoX-rotated in
// place; k's n_kv_head heads normed with k_norm and rotated into row *pos of
// k_cache, v's heads copied into row *pos of v_cache (rows of n_kv_head *
// head_dim): the norms, NeoX RoPE and the cache write in one launch.
// n > 1: n tokens (q, k, v and cos_sin n rows) into rows *pos .. *pos + n - 1.
void qk_norm_rope_store(float* q, const float* k, const float* v, const float* q_norm, const float* k_norm,
                        int n_head, int n_kv_head, int head_dim, int n_rot, float eps, const float* cos_sin,
                        float* k_cache, float* v_cache, const int32_t* pos, Stream s, int n = 1,
                        float* const* seq = nullptr);

// A CUDA graph: the launches issued on a stream between capture_begin and
// capture_end, replayed by launch() with one call.
using Graph = struct GraphOpaque*;
void capture_begin(Stream s);
Graph capture_end(Stream s);
void launch(Graph g, Stream s);
void delete_graph(Graph g);

// h[i] = silu(gate[i]) * up[i] over n values.
void swiglu(const float* gate, const float* up, int64_t n, float* h, Stream s);

// The top k of softmax(logits) over n_expert (k <= 32, n_expert <= 1024),
// best first, as route_softmax_topk chooses and weighs them; renorm: the k
// weights divided by their sum. n tokens (rows of logits, ids, weights).
// over_chosen: the softmax over the k chosen logits only (gpt-oss).
void route_softmax_topk(const float* logits, int n_expert, int k, bool renorm, int32_t* ids, float* weights,
                        Stream s, int n = 1, bool over_chosen = false);

// Copy and kernel rates (GB/s, medians of `reps` timed repetitions after a
// warm-up) over buffers of `bytes`: device to device (bytes read plus bytes
// written), host to device from pinned and from pageable memory, device to
// host into pinned memory; and the weight bytes per second the matvec
// kernel reads for each type it runs, on a rows x cols matrix of `bytes`.
struct Rates {
    double device_copy = 0, h2d_pinned = 0, h2d_pageable = 0, d2h_pinned = 0;
    // Microseconds each kernel of a chain of 512 empty ones adds, launched
    // as decode launches them (each may start as the one ahead ends) and
    // replayed as one CUDA graph: the floor under a decode token's chain.
    double chain_us = 0;
    std::vector<std::pair<GgmlType, double>> matvec;  // weight GB/s per type
};
Rates measure_rates(size_t bytes, int reps);
// The median over `reps` replays of a graph of n empty chained kernels, in
// microseconds a kernel (Rates::chain_us).
double chain_us(int n, int reps);

// The operations of the families beyond qwen3moe's layer shape
// (kernels_layers.cu). y[i] += b[i] over n values (biases), in each of
// `rows` rows of y.
void add(float* y, const float* b, int64_t n, Stream s, int rows = 1);

// x[i] += y[i] * sigmoid(*gate) over n values (a shared expert's output
// under its gate; gate: one float on the device); rows > 1: row r of x and
// y (n values each) under gate[r].
void add_sigmoid_gated(float* x, const float* y, const float* gate, int64_t n, Stream s, int rows = 1);

// Row r of x (n values) times factor[r] (device floats: Llama 4's
// attention temperature of the token's position), for `rows` rows.
void scale_by(float* x, int64_t n, const float* factor, Stream s, int rows = 1);

// Llama 4's expert inputs: out row t * k + r = weights[t * k + r] times x
// row t (width floats), for n tokens of k experts each.
void weighted_rows(const float* x, const float* weights, int n, int k, int64_t width, float* out, Stream s);

// dst row rows[i] = src row i (width floats each) for i < n: the host's
// expert outputs of a batched pass put in the rows the pass combines.
void scatter_rows(const float* src, const int32_t* rows, int n, int64_t width, float* dst, Stream s);

// qk_norm_rope_store without the norms, for either RoPE: q's n_head heads
// rotated in place, k's n_kv_head heads rotated into row *pos of k_cache and
// v's copied into row *pos of v_cache; the first n_rot dims of each head
// rotate, in pairs (i, i + n_rot/2) when neox, else (2i, 2i + 1).
// n > 1: n tokens, as qk_norm_rope_store's.
void rope_store(float* q, const float* k, const float* v, int n_head, int n_kv_head, int head_dim, int n_rot,
                bool neox, const float* cos_sin, float* k_cache, float* v_cache, const int32_t* pos, Stream s,
                int n = 1, float* const* seq = nullptr);

// Sigmoid routing (k <= 32, n_expert <= 1024), as model/moe.cpp's
// route_experts: the top k of sigmoid(logit) + selection_bias (n_expert
// device floats, or null), weighed by the unbiased sigmoid; renorm: divided
// by their sum; then times scale. n tokens, as route_softmax_topk's.
// n_group > 1 (DeepSeek V3; at most 64): chosen only from the n_group_used
// groups of n_expert / n_group experts whose two best biased scores have
// the largest sums (the lower group on a tie).
void route_sigmoid_topk(const float* logits, const float* selection_bias, int n_expert, int k, bool renorm,
                        float scale, int32_t* ids, float* weights, Stream s, int n = 1, int n_group = 0,
                        int n_group_used = 0);

// Multi-head latent attention (DeepSeek V2/V3, Kimi K2), one token: the
// n_rot rope dims of each of q's n_head heads (q_head floats apart, from
// q_rope_at on) and of the compressed row's k_pe (from row_rope_at on)
// rotated by cos_sin (neox or adjacent pairs, as rope_store), then the
// row (row_width floats) written into row *pos of cache. n > 1: n tokens
// (q, row and cos_sin n rows) into rows *pos .. *pos + n - 1.
void mla_rope_store(float* q, int n_head, int q_head, int q_rope_at, float* row, int row_width, int row_rope_at,
                    int n_rot, bool neox, const float* cos_sin, float* cache, const int32_t* pos, Stream s,
                    int n = 1, float* const* seq = nullptr);

// DeepSeek sparse attention's lightning indexer (GLM-5, DeepSeek V3.2;
// kernels_layers.cu), as model/dsa_indexer.cpp picks positions, for n rows
// (one sequence's tokens at *pos .. *pos + n - 1, or with seq, row t at
// pos[t] of the key cache seq[2t]; rows as in attention's seq).
//
// indexer_keys: each row's key k (head_dim floats, indexer.attn_k's) is
// LayerNormed with no eps, weight k_norm and bias k_bias, its first n_rot
// dims rotated (neox or adjacent pairs), and written into its position's
// row of keys; each of q's n_head heads (head_dim floats, indexer.attn_q_b's)
// is rotated the same; w's n_head head weights (indexer.proj's) are scaled
// by 1 / sqrt(head_dim * n_head).
void indexer_keys(float* q, const float* k, float* w, const float* k_norm, const float* k_bias, int n_head,
                  int head_dim, int n_rot, bool neox, const float* cos_sin, float* keys, const int32_t* pos, Stream s,
                  int n = 1, float* const* seq = nullptr);
// indexer_select: row t's positions, ascending, into chosen[t * top_k ..]
// and their count into count[t]: every position up to its own while there
// are at most top_k, else the top_k by score(t, p) = sum_h w_h max(0, q_h .
// key_p), ties to the earlier position. max_pos: the caches' rows (the
// launch covers them all, so a captured graph serves any position);
// scores: n x max_pos floats.
void indexer_select(const float* q, const float* w, const float* keys, const int32_t* pos, int n_head, int head_dim,
                    int top_k, int max_pos, float* scores, int32_t* chosen, int32_t* count, Stream s, int n = 1,
                    float* const* seq = nullptr);

// Gated attention (Qwen3.5, Qwen3-Next): the q matrix gives per head
// [q | gate] (qg: n rows of 2 n_head head_dim). split_gated_q copies the
// q halves into q (n rows of n_head head_dim); mul_sigmoid_heads then
// multiplies each head of the attention's output by sigmoid of its gate.
void split_gated_q(const float* qg, int n_head, int head_dim, float* q, Stream s, int n = 1);
void mul_sigmoid_heads(float* att, const float* qg, int n_head, int head_dim, Stream s, int n = 1);

// Gated DeltaNet layers (Qwen3.5, Qwen3-Next; kernels_deltanet.cu), as
// model/deltanet.cpp evaluates them one token at a time; n tokens in one
// launch give each token the bits of n launches of one.
struct DeltaNetDims {
    int n_k_heads = 0, n_v_heads = 0, head_k = 0, head_v = 0, conv_kernel = 0;
    bool fused_ba = false;     // ba as qwen3next's ssm_ba orders it, else betas then alphas
    bool tiled_heads = false;  // value head h reads key head h % n_k_heads, else h / (n_v_heads / n_k_heads)
};
// The causal depthwise convolution of n rows of `channels` inputs (taps:
// `kernel` floats a channel) continuing from state (kernel - 1 earlier
// rows, moved on to the last ones), then SiLU, into out.
void deltanet_conv(const float* in, const float* taps, int kernel, int64_t channels, int n, float* state, float* out,
                   Stream s);
// Per value head, each of n tokens in order: its key head's q and k (conv's
// rows are [q | k | v]) L2-normalized; the gated delta rule on the head's
// state (head_k rows of head_v floats; beta = sigmoid(b), decay =
// exp(softplus(a + dt_bias) * ssm_a)), read by q / sqrt(head_k); then
// RMS-normed with out_norm (head_v) and times silu(z), into out (n rows of
// n_v_heads head_v). ba: fused, 2 n_v_heads a token as the file orders
// them; else n rows of betas, then n rows of alphas. head_v: a multiple of
// 32, at most 1024.
void deltanet_recurrence(const DeltaNetDims& d, const float* conv, const float* z, const float* ba,
                         const float* dt_bias, const float* ssm_a, const float* out_norm, float eps, int n,
                         float* state, float* out, Stream s);

}  // namespace ms::gpu
