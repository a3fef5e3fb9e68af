// The kernels of gpu.h that the families beyond qwen3moe's layer shape add
// (model/gpu_decoder.cpp, driven by a DecoderSpec): biases, RoPE without
// per-head norms (either pairing), sigmoid routing with a selection bias,
// the shared expert's sigmoid gate, and DeepSeek sparse attention's
// indexer. Each follows the CPU's arithmetic (ops/rope.cpp, model/moe.cpp,
// model/ffn_block.cpp, model/dsa_indexer.cpp) to float rounding.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "gpu/gpu.h"
#include "gpu/block_sum.cuh"
#include "gpu/half_at.cuh"
#include "gpu/launch.cuh"
#include "gpu/warp_topk.cuh"
#include "ops/gates.h"
#include "quant/types.h"

namespace ms::gpu {

namespace {

// blockIdx.y: the row (prefill's token).
__global__ void add_kernel(float* y, const float* b, int64_t n) {
    chain_start();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[int64_t(blockIdx.y) * n + i] += b[i];
}

__global__ void scale_by_kernel(float* x, int64_t n, const float* factor) {
    chain_start();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[int64_t(blockIdx.y) * n + i] *= factor[blockIdx.y];
}

// blockIdx.y: the output row t * k + r.
__global__ void weighted_rows_kernel(const float* x, const float* weights, int k, int64_t width, float* out) {
    chain_start();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, row = blockIdx.y;
    if (i < width) out[row * width + i] = weights[row] * x[(row / k) * width + i];
}

// blockIdx.y: the source row.
__global__ void scatter_rows_kernel(const float* src, const int32_t* rows, int64_t width, float* dst) {
    chain_start();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, row = blockIdx.y;
    if (i < width) dst[int64_t(rows[row]) * width + i] = src[row * width + i];
}

__global__ void add_sigmoid_gated_kernel(float* x, const float* y, const float* gate, int64_t n) {
    chain_start();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, row = blockIdx.y;
    if (i < n) x[row * n + i] += y[row * n + i] * sigmoid(gate[row]);
}

// The block's threads rotate the first n_rot dims of src into dst (dst may
// be src: each thread reads its pair before writing it), pairs (i, i +
// n_rot/2) when neox, else (2i, 2i + 1), as ops/rope.cpp.
__device__ void rotate_pairs(const float* src, float* dst, int n_rot, bool neox, const float* cos_sin) {
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
        const float c = cos_sin[2 * i], sn = cos_sin[2 * i + 1];
        const float a = src[ia], b = src[ib];
        dst[ia] = a * c - b * sn;
        dst[ib] = a * sn + b * c;
    }
}

// One block a head: blocks [0, n_head) rotate q's heads in place, the next
// n_kv_head rotate k's heads into cache row *pos and copy v's beside them.
// Pairs (i, i + n_rot/2) when neox, else (2i, 2i + 1); dimensions past
// n_rot are copied as they are.
__global__ void rope_store_kernel(float* q, const float* k, const float* v, int n_head, int head_dim, int n_rot,
                                  bool neox, const float* cos_sin, float* k_cache, float* v_cache, int64_t kv_width,
                                  const int32_t* pos, float* const* seq) {
    chain_start();
    // Prefill: blockIdx.y is the token, at position *pos + blockIdx.y (or its sequence's pos[y]).
    const int64_t t = blockIdx.y, at = row_position(pos, seq, t, &k_cache, &v_cache);
    q += t * n_head * head_dim;
    k += t * kv_width;
    v += t * kv_width;
    cos_sin += t * n_rot;
    const bool is_q = int(blockIdx.x) < n_head;
    const int head = is_q ? blockIdx.x : blockIdx.x - n_head;
    const float* src = is_q ? q + int64_t(head) * head_dim : k + int64_t(head) * head_dim;
    float* dst = is_q ? q + int64_t(head) * head_dim : k_cache + at * kv_width + int64_t(head) * head_dim;
    rotate_pairs(src, dst, n_rot, neox, cos_sin);
    if (!is_q) {
        for (int i = n_rot + threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = src[i];
        float* vd = v_cache + at * kv_width + int64_t(head) * head_dim;
        for (int i = threadIdx.x; i < head_dim; i += blockDim.x) vd[i] = v[int64_t(head) * head_dim + i];
    }
}

// One warp: sigmoid scores, k rounds of a warp-wide argmax of score plus
// bias (the lower id on a tie, as model/moe.cpp's select_topk), the chosen
// unbiased scores as weights, renormalized (sum in double, floored as the
// CPU does) and scaled.
__global__ void route_sigmoid_kernel(const float* logits, const float* bias, int n_expert, int k, bool renorm,
                                     float scale, int32_t* ids, float* weights, int n_group, int n_group_used) {
    chain_start();
    logits += int64_t(blockIdx.x) * n_expert;  // prefill: a block a token
    ids += int64_t(blockIdx.x) * k;
    weights += int64_t(blockIdx.x) * k;
    __shared__ uint32_t taken[32];
    __shared__ int32_t chosen[32];
    __shared__ float score[1024], biased[1024];
    const int lane = threadIdx.x % 32;
    for (int e = lane; e < n_expert; e += 32) {
        score[e] = sigmoid(logits[e]);
        biased[e] = bias ? score[e] + bias[e] : score[e];
    }
    __syncwarp();
    if (n_group > 1) {
        // A lane a group: the sum of its two best biased scores; then lane
        // 0 keeps the n_group_used best groups and masks the others' experts
        // (ops/gates.h, model/moe.cpp's choice).
        __shared__ float sum[64];
        const int per = n_expert / n_group;
        for (int g = lane; g < n_group; g += 32) {
            sum[g] = group_score([&](int e) { return biased[e]; }, g * per, (g + 1) * per);
        }
        __syncwarp();
        if (lane == 0) {
            const uint64_t keep = best_groups(sum, n_group, n_group_used);
            for (int e = 0; e < n_expert; e++) {
                if (!(keep >> (e / per) & 1)) biased[e] = -INFINITY;
            }
        }
        __syncwarp();
    }
    warp_topk(biased, n_expert, k, taken, chosen, ids);
    if (lane != 0) return;
    double sum = 0;
    for (int r = 0; r < k; r++) sum += double(score[chosen[r]]);
    const float total = renorm_total(sum);
    for (int r = 0; r < k; r++) {
        const float w = renorm ? score[chosen[r]] / total : score[chosen[r]];
        weights[r] = scale != 1.0f ? w * scale : w;
    }
}

// Blocks [0, n_head) rotate q's heads' rope dims; block n_head rotates the
// row's k_pe, then writes the row into the cache.
__global__ void mla_rope_store_kernel(float* q, int n_head, int q_head, int q_rope_at, float* row, int row_width,
                                      int row_rope_at, int n_rot, bool neox, const float* cos_sin, float* cache,
                                      const int32_t* pos, float* const* seq) {
    chain_start();
    // Prefill: blockIdx.y is the token, at position *pos + blockIdx.y (or its sequence's pos[y]).
    const int64_t t = blockIdx.y;
    float* unused = nullptr;
    const int64_t at = row_position(pos, seq, t, &cache, &unused);
    q += t * n_head * q_head;
    row += t * row_width;
    cos_sin += t * n_rot;
    const bool is_q = int(blockIdx.x) < n_head;
    float* v = is_q ? q + int64_t(blockIdx.x) * q_head + q_rope_at : row + row_rope_at;
    rotate_pairs(v, v, n_rot, neox, cos_sin);
    if (is_q) return;
    __syncthreads();
    float* dst = cache + at * row_width;
    for (int i = threadIdx.x; i < row_width; i += blockDim.x) dst[i] = row[i];
}

// The indexer's keys: blocks [0, n_head) rotate q's heads of row
// blockIdx.y; block n_head LayerNorms the row's key (sums in double, as
// ops/norm.cpp's layer_norm; no eps), rotates it into its position's row of
// keys and scales the row's head weights.
constexpr int kIndexerMaxDim = 1024;

__global__ void indexer_keys_kernel(float* q, const float* k, float* w, const float* k_norm, const float* k_bias,
                                    int n_head, int head_dim, int n_rot, bool neox, const float* cos_sin, float* keys,
                                    const int32_t* pos, float* const* seq, float w_scale) {
    chain_start();
    const int64_t t = blockIdx.y;
    float* unused = nullptr;
    const int64_t at = row_position(pos, seq, t, &keys, &unused);
    cos_sin += t * n_rot;
    if (int(blockIdx.x) < n_head) {
        float* v = q + (t * n_head + blockIdx.x) * head_dim;
        rotate_pairs(v, v, n_rot, neox, cos_sin);
        return;
    }
    __shared__ float row[kIndexerMaxDim];
    __shared__ double part[32];
    const float* src = k + t * head_dim;
    double sum = 0;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) sum += double(src[i]);
    const float mean = float(block_sum(sum, part) / double(head_dim));
    double sum2 = 0;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        const float d = __fsub_rn(src[i], mean);
        row[i] = d;
        sum2 += double(__fmul_rn(d, d));
    }
    const float scale = 1.0f / sqrtf(float(block_sum(sum2, part) / double(head_dim)));
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        row[i] = __fadd_rn(__fmul_rn(__fmul_rn(row[i], scale), k_norm[i]), k_bias[i]);
    }
    __syncthreads();
    rotate_pairs(row, row, n_rot, neox, cos_sin);
    __syncthreads();
    float* dst = keys + at * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) dst[i] = row[i];
    for (int h = threadIdx.x; h < n_head; h += blockDim.x) w[t * n_head + h] *= w_scale;
}

// The indexer's scores of row blockIdx.y at kScorePositions positions a
// block (blockIdx.x): the row's query heads (padded a float, so the lanes,
// one a head, read them from different banks) and head weights in shared
// memory; a warp a position, its key row staged once for all the heads.
// Blocks past the row's position return at once.
constexpr int kScoreThreads = 256, kScorePositions = 64;

__global__ void __launch_bounds__(kScoreThreads) indexer_scores_kernel(const float* q, const float* w,
                                                                       const float* keys, const int32_t* pos,
                                                                       float* const* seq, int n_head, int head_dim,
                                                                       int max_pos, float* scores) {
    chain_start();
    const int64_t t = blockIdx.y;
    float* kc = const_cast<float*>(keys);
    float* unused = nullptr;
    const int n_pos = int(row_position(pos, seq, t, &kc, &unused)) + 1;
    const int p0 = int(blockIdx.x) * kScorePositions;
    if (p0 >= n_pos) return;
    extern __shared__ float sm[];
    const int ld = head_dim + 1;
    float* qs = sm;
    float* ws = qs + n_head * ld;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    float* kw = ws + n_head + warp * head_dim;
    for (int i = threadIdx.x; i < n_head * head_dim; i += blockDim.x) {
        qs[(i / head_dim) * ld + i % head_dim] = q[t * n_head * head_dim + i];
    }
    for (int h = threadIdx.x; h < n_head; h += blockDim.x) ws[h] = w[t * n_head + h];
    __syncthreads();
    const int p1 = min(p0 + kScorePositions, n_pos);
    for (int p = p0 + warp; p < p1; p += n_warps) {
        for (int i = lane; i < head_dim; i += 32) kw[i] = kc[int64_t(p) * head_dim + i];
        __syncwarp();
        float score = 0;
        for (int h = lane; h < n_head; h += 32) {
            const float* qh = qs + h * ld;
            // Four chains, so the shared loads of one overlap the others' sums.
            float dot[4] = {0, 0, 0, 0};
            int i = 0;
            for (; i + 4 <= head_dim; i += 4) {
#pragma unroll
                for (int u = 0; u < 4; u++) dot[u] += qh[i + u] * kw[i + u];
            }
            for (; i < head_dim; i++) dot[0] += qh[i] * kw[i];
            score += ws[h] * fmaxf((dot[0] + dot[1]) + (dot[2] + dot[3]), 0.0f);
        }
        score = warp_sum(score);
        if (lane == 0) scores[t * max_pos + p] = score + 0.0f;  // -0 as +0: one key for equal scores
        __syncwarp();
    }
}

// A score's bits as an unsigned key in the same order (larger float,
// larger key).
__device__ __forceinline__ uint32_t order_key(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Row blockIdx.x's top_k positions: the top_k-th largest key found a byte
// at a time from the top (a histogram of the keys that share the bytes
// found so far; the first warp finds the byte, a lane eight values of it),
// then every position above it and the earliest ones equal
// to it written in position order: each thread takes a run of positions,
// and the runs' counts before it give where its picks go.
constexpr int kSelectThreads = 1024;

__global__ void __launch_bounds__(kSelectThreads) indexer_topk_kernel(const float* scores, const int32_t* pos,
                                                                      float* const* seq, int top_k, int max_pos,
                                                                      int32_t* chosen, int32_t* count) {
    chain_start();
    const int64_t t = blockIdx.x;
    float *unused_k = nullptr, *unused_v = nullptr;
    const int n_pos = int(row_position(pos, seq, t, &unused_k, &unused_v)) + 1;
    const int tid = threadIdx.x, nt = blockDim.x;
    int32_t* out = chosen + t * top_k;
    if (n_pos <= top_k) {
        for (int i = tid; i < n_pos; i += nt) out[i] = i;
        if (tid == 0) count[t] = n_pos;
        return;
    }
    const float* row = scores + t * max_pos;
    __shared__ uint32_t hist[256];
    __shared__ uint32_t found, found_need;
    uint32_t prefix = 0, mask = 0;
    int need = top_k;  // the need-th largest of the keys under prefix
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += nt) hist[i] = 0;
        __syncthreads();
        for (int p = tid; p < n_pos; p += nt) {
            const uint32_t key = order_key(row[p]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid < 32) {
            // Lane l holds the byte's values 255 - 8l down to 248 - 8l, and
            // the count of keys above its first from the lanes before it.
            int count[8], own = 0;
#pragma unroll
            for (int k = 0; k < 8; k++) own += count[k] = int(hist[255 - 8 * tid - k]);
            int upto = own;
            for (int o = 1; o < 32; o <<= 1) {
                const int v = __shfl_up_sync(0xffffffffu, upto, o);
                if (tid >= o) upto += v;
            }
            int above = upto - own;
            if (above < need && need <= upto) {  // one lane: the byte is among its values
                int k = 0;
                for (; k < 7 && above + count[k] < need; k++) above += count[k];
                found = prefix | (uint32_t(255 - 8 * tid - k) << shift);
                found_need = uint32_t(need - above);
            }
        }
        __syncthreads();
        prefix = found;
        need = int(found_need);
        mask |= 255u << shift;
        __syncthreads();
    }
    // prefix: the top_k-th largest key; need: how many equal to it are in.
    const int per = (n_pos + nt - 1) / nt, b = min(tid * per, n_pos), e = min(b + per, n_pos);
    int above = 0, equal = 0;
    for (int p = b; p < e; p++) {
        const uint32_t key = order_key(row[p]);
        above += key > prefix;
        equal += key == prefix;
    }
    __shared__ int runs_above[kSelectThreads], runs_equal[kSelectThreads];
    runs_above[tid] = above;
    runs_equal[tid] = equal;
    __syncthreads();
    for (int o = 1; o < nt; o <<= 1) {  // inclusive sums over the threads
        const int a = tid >= o ? runs_above[tid - o] : 0, q = tid >= o ? runs_equal[tid - o] : 0;
        __syncthreads();
        runs_above[tid] += a;
        runs_equal[tid] += q;
        __syncthreads();
    }
    int equal_before = runs_equal[tid] - equal;
    int at = runs_above[tid] - above + min(equal_before, need);
    for (int p = b; p < e; p++) {
        const uint32_t key = order_key(row[p]);
        if (key > prefix) {
            out[at++] = p;
        } else if (key == prefix) {
            if (equal_before < need) out[at++] = p;
            equal_before++;
        }
    }
    if (tid == 0) count[t] = top_k;
}

// Weight i of a row of type T, as quant/dequant.cpp gives it.
template <GgmlType T>
__device__ __forceinline__ float weight_at(const uint8_t* row, int i) {
    if constexpr (T == GgmlType::F32) {
        return reinterpret_cast<const float*>(row)[i];
    } else if constexpr (T == GgmlType::F16) {
        return half_at(row + 2 * i);
    } else if constexpr (T == GgmlType::BF16) {
        return bf16_at(row + 2 * i);
    } else {  // Q8_0: blocks of an f16 scale and 32 int8
        const uint8_t* block = row + (i / 32) * 34;
        return half_at(block) * float(int8_t(block[2 + i % 32]));
    }
}

// k_b's heads (row h * kv_lora + j holds its nope columns) as float32
// rows of kv_lora: out row h * nope + i, column j. One thread an element,
// read along a head's column (8.5 MB a DeepSeek V3 layer, once a pass).
template <GgmlType T>
__global__ void mla_k_b_transposed_kernel(const uint8_t* k_b, int n_head, int kv_lora, int nope, size_t row_bytes,
                                          float* out) {
    chain_start();
    const int64_t total = int64_t(n_head) * nope * kv_lora;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = e / kv_lora;  // h * nope + i
        const int j = int(e % kv_lora), h = int(r / nope), i = int(r % nope);
        out[e] = weight_at<T>(k_b + (int64_t(h) * kv_lora + j) * row_bytes, i);
    }
}

}  // namespace

bool mla_k_b_transposable(GgmlType t) {
    return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0;
}

void mla_k_b_transposed(GgmlType t, const void* k_b, int n_head, int kv_lora, int nope, float* out, Stream s) {
    const uint8_t* w = static_cast<const uint8_t*>(k_b);
    const size_t rb = row_bytes(t, nope);
    const dim3 grid(1024);
    switch (t) {
        case GgmlType::F32: launch("mla_k_b_transposed", mla_k_b_transposed_kernel<GgmlType::F32>, grid, 256, 0, native(s), w, n_head, kv_lora, nope, rb, out); break;
        case GgmlType::F16: launch("mla_k_b_transposed", mla_k_b_transposed_kernel<GgmlType::F16>, grid, 256, 0, native(s), w, n_head, kv_lora, nope, rb, out); break;
        case GgmlType::BF16: launch("mla_k_b_transposed", mla_k_b_transposed_kernel<GgmlType::BF16>, grid, 256, 0, native(s), w, n_head, kv_lora, nope, rb, out); break;
        case GgmlType::Q8_0: launch("mla_k_b_transposed", mla_k_b_transposed_kernel<GgmlType::Q8_0>, grid, 256, 0, native(s), w, n_head, kv_lora, nope, rb, out); break;
        default: throw std::runtime_error(std::string("CUDA mla_k_b_transposed: no kernel for ") + type_name(t));
    }
}

void mla_rope_store(float* q, int n_head, int q_head, int q_rope_at, float* row, int row_width, int row_rope_at,
                    int n_rot, bool neox, const float* cos_sin, float* cache, const int32_t* pos, Stream s, int n,
                    float* const* seq) {
    if (n_rot % 2 != 0 || q_rope_at + n_rot > q_head || row_rope_at + n_rot > row_width) {
        throw std::runtime_error("CUDA mla_rope_store: n_rot even, inside the heads and the row");
    }
    launch("mla_rope_store", mla_rope_store_kernel, dim3(unsigned(n_head + 1), unsigned(n)), 64, 0, native(s), q, n_head,
           q_head, q_rope_at, row, row_width, row_rope_at, n_rot, neox, cos_sin, cache, pos, seq);
}

void indexer_keys(float* q, const float* k, float* w, const float* k_norm, const float* k_bias, int n_head,
                  int head_dim, int n_rot, bool neox, const float* cos_sin, float* keys, const int32_t* pos, Stream s,
                  int n, float* const* seq) {
    if (n_rot % 2 != 0 || n_rot > head_dim || head_dim > kIndexerMaxDim) {
        throw std::runtime_error("CUDA indexer_keys: n_rot even, inside a head of at most 1024 dims");
    }
    launch("indexer_keys", indexer_keys_kernel, dim3(unsigned(n_head + 1), unsigned(n)), 128, 0, native(s), q, k, w,
           k_norm, k_bias, n_head, head_dim, n_rot, neox, cos_sin, keys, pos, seq,
           1.0f / sqrtf(float(head_dim) * float(n_head)));
}

void indexer_select(const float* q, const float* w, const float* keys, const int32_t* pos, int n_head, int head_dim,
                    int top_k, int max_pos, float* scores, int32_t* chosen, int32_t* count, Stream s, int n,
                    float* const* seq) {
    if (top_k < 1 || top_k > max_pos) throw std::runtime_error("CUDA indexer_select: top_k in 1 .. positions");
    const size_t smem =
        size_t(n_head * (head_dim + 1) + n_head + (kScoreThreads / 32) * head_dim) * sizeof(float);
    static size_t smem_allowed = 48 << 10;
    if (smem > smem_allowed) {
        if (cudaFuncSetAttribute(indexer_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) !=
            cudaSuccess) {
            cudaGetLastError();
            throw std::runtime_error("CUDA indexer_select: " + std::to_string(n_head) + " heads of " +
                                     std::to_string(head_dim) + " need more shared memory than the device has");
        }
        smem_allowed = smem;
    }
    launch("indexer_select", indexer_scores_kernel, dim3(blocks(max_pos, kScorePositions), unsigned(n)),
           kScoreThreads, smem, native(s), q, w, keys, pos, seq, n_head, head_dim, max_pos, scores);
    launch("indexer_select", indexer_topk_kernel, dim3(unsigned(n)), kSelectThreads, 0, native(s),
           static_cast<const float*>(scores), pos, seq, top_k, max_pos, chosen, count);
}

void add(float* y, const float* b, int64_t n, Stream s, int rows) {
    launch("add", add_kernel, dim3(blocks(n, 256), unsigned(rows)), 256, 0, native(s), y, b, n);
}

void scale_by(float* x, int64_t n, const float* factor, Stream s, int rows) {
    launch("scale_by", scale_by_kernel, dim3(blocks(n, 256), unsigned(rows)), 256, 0, native(s), x, n, factor);
}

void weighted_rows(const float* x, const float* weights, int n, int k, int64_t width, float* out, Stream s) {
    launch("weighted_rows", weighted_rows_kernel, dim3(blocks(width, 256), unsigned(n * k)), 256, 0, native(s), x,
           weights, k, width, out);
}

void scatter_rows(const float* src, const int32_t* rows, int n, int64_t width, float* dst, Stream s) {
    if (n < 1) return;
    launch("scatter_rows", scatter_rows_kernel, dim3(blocks(width, 256), unsigned(n)), 256, 0, native(s), src, rows,
           width, dst);
}

void add_sigmoid_gated(float* x, const float* y, const float* gate, int64_t n, Stream s, int rows) {
    launch("add_sigmoid_gated", add_sigmoid_gated_kernel, dim3(blocks(n, 256), unsigned(rows)), 256, 0, native(s), x,
           y, gate, n);
}

void rope_store(float* q, const float* k, const float* v, int n_head, int n_kv_head, int head_dim, int n_rot,
                bool neox, const float* cos_sin, float* k_cache, float* v_cache, const int32_t* pos, Stream s,
                int n, float* const* seq) {
    if (n_rot > head_dim || n_rot % 2 != 0) throw std::runtime_error("CUDA rope_store: n_rot even, <= head_dim");
    launch("rope_store", rope_store_kernel, dim3(unsigned(n_head + n_kv_head), unsigned(n)), 64, 0, native(s), q, k, v,
           n_head, head_dim,
           n_rot, neox, cos_sin, k_cache, v_cache, int64_t(n_kv_head) * head_dim, pos, seq);
}

void route_sigmoid_topk(const float* logits, const float* selection_bias, int n_expert, int k, bool renorm,
                        float scale, int32_t* ids, float* weights, Stream s, int n, int n_group, int n_group_used) {
    if (k > 32 || n_expert > 1024 || k > n_expert) throw std::runtime_error("CUDA routing: k <= 32, n_expert <= 1024");
    if (n_group > 64 || (n_group > 1 && (n_expert % n_group != 0 || n_group_used < 1 || n_group_used > n_group))) {
        throw std::runtime_error("CUDA routing: at most 64 groups dividing the experts");
    }
    launch("route_sigmoid_topk", route_sigmoid_kernel, unsigned(n), 32, 0, native(s), logits, selection_bias, n_expert,
           k, renorm, scale, ids, weights, n_group, n_group_used);
}

}  // namespace ms::gpu
