// ops/ throughput at Qwen3-30B-A3B's shapes (n_embd 2048, 32 query heads and
// 4 KV heads of 128, 48 layers): decode attention over an F16/F32/Q8_0 cache at
// two context lengths per SIMD level, and the Q/K/V projections as three linear()
// calls against one linear_many(), in GB/s of weights read. The weights
// rotate over 1 GiB of copies so every byte comes from DRAM, as in a 48-layer
// decode; mem/read is the bound those figures compare to, a streaming sum
// over 1 GiB with the same threads. Times are wall-clock (the pool's workers
// do half the work).
//
//   build-*/bench_ops --benchmark_filter='attention|mem' --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/gemm.h"
#include "ops/attention.h"
#include "ops/buffer.h"
#include "ops/linear.h"
#include "quant/cpu.h"

namespace ms {
namespace {

constexpr size_t kColdBytes = size_t(1) << 30;
constexpr int64_t kEmbd = 2048;
constexpr int kLayers = 48;
constexpr AttentionShape kShape{32, 4, 128, 128, 0.08838834764831845f};

std::vector<float> random_floats(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

void bm_mem_read(benchmark::State& st, int threads) {
    ThreadPool pool(threads);
    AlignedBuffer buf(kColdBytes, PageSize::Huge);
    std::memset(buf.data(), 1, kColdBytes);
    for (auto _ : st) benchmark::DoNotOptimize(stream_sum(pool, buf.data(), kColdBytes));
    st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(kColdBytes));
}

// gemma4-26b-a4b's full-attention layers: 16 query heads and 2 KV heads of 512.
constexpr AttentionShape kGemma4Full{16, 2, 512, 512, 1.0f};

// One decode step (n_tok = 1) at position n_ctx - 1 over a full cache, the
// step moving through 48 layers' caches as decode does (at 4096 positions
// they outgrow the L3 cache), each laid out as the models keep it (a plane
// per KV head, an F16 cache's K in tiles) or, with rows, F16 K in rows (the
// layout before tiles, for comparison).
void bm_attention(benchmark::State& st, AttentionShape shape, SimdLevel level, GgmlType kv_type, bool rows,
                  int64_t n_ctx, int threads) {
    if (set_simd_level(level) != level) {
        st.SkipWithError("level not available");
        return;
    }
    const bool tiled = kv_tiles_k(kv_type) && !rows;
    const int64_t kw = int64_t(shape.n_head_kv) * shape.head_dim;
    const size_t layer_bytes = size_t(n_ctx * kv_row_bytes(kv_type, kw));
    // One buffer for every layer's K and one for V, as the decoder's state
    // keeps them.
    AlignedBuffer k_all(size_t(kLayers) * layer_bytes);
    AlignedBuffer v_all(size_t(kLayers) * layer_bytes);
    auto kc = [&](size_t l) { return k_all.data() + l * layer_bytes; };
    auto vc = [&](size_t l) { return v_all.data() + l * layer_bytes; };
    const std::vector<float> k = random_floats(size_t(n_ctx * kw), 1), v = random_floats(size_t(n_ctx * kw), 2);
    const KvLayer first{kv_type, kw, kw, kc(0), vc(0), 0, 0, n_ctx, shape.n_head_kv, tiled};
    for (int64_t pos = 0; pos < n_ctx; pos++) kv_store(first, pos, k.data() + pos * kw, v.data() + pos * kw);
    for (int l = 1; l < kLayers; l++) {
        std::memcpy(kc(size_t(l)), kc(0), layer_bytes);
        std::memcpy(vc(size_t(l)), vc(0), layer_bytes);
    }
    const std::vector<float> q = random_floats(size_t(shape.n_head * shape.head_dim), 3);
    ThreadPool pool(threads);
    AlignedBuffer scratch(attention_scratch_floats(shape, n_ctx, threads) * 4);
    std::vector<float> out(size_t(shape.n_head * shape.head_dim_v));
    size_t l = 0;
    for (auto _ : st) {
        const KvLayer kv{kv_type, kw, kw, kc(l), vc(l), 0, 0, n_ctx, shape.n_head_kv, tiled};
        attention(pool, shape, kv, q.data(), 1, n_ctx - 1, n_ctx, scratch.f32(), out.data());
        benchmark::DoNotOptimize(out.data());
        l = l + 1 == size_t(kLayers) ? 0 : l + 1;
    }
    // The cache bytes of one layer: each KV head's rows are read once for its group of query heads.
    st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(2 * layer_bytes));
    set_simd_level(best_simd_level());
}

// Layer l's attn_q (4096 x 2048), attn_k and attn_v (512 x 2048) in Q4_K,
// copies of one random set filling kColdBytes.
struct QkvWeights {
    AlignedBuffer data;
    size_t set_bytes = 0, copies = 0;
    QkvWeights() {
        const int64_t rows[3] = {int64_t(kShape.n_head) * kShape.head_dim, int64_t(kShape.n_head_kv) * kShape.head_dim,
                                 int64_t(kShape.n_head_kv) * kShape.head_dim_v};
        for (int64_t r : rows) set_bytes += row_bytes(GgmlType::Q4_K, kEmbd) * size_t(r);
        copies = kColdBytes / set_bytes;
        data.resize(set_bytes * copies, PageSize::Huge);
        uint8_t* p = data.data();
        for (int i = 0; i < 3; i++) {
            fill_random_weights(GgmlType::Q4_K, kEmbd, rows[i], p, uint64_t(i + 1));
            t[i] = Tensor{GgmlType::Q4_K, kEmbd, rows[i], p};
            p += t[i].bytes();
        }
        for (size_t c = 1; c < copies; c++) std::memcpy(data.data() + c * set_bytes, data.data(), set_bytes);
    }
    Tensor t[3];
    Tensor at(size_t copy, int i) const {
        Tensor r = t[i];
        r.data += copy * set_bytes;
        return r;
    }
};

void bm_qkv(benchmark::State& st, bool many, int64_t n_tok, int threads) {
    static const QkvWeights w;  // built once, shared by every qkv case
    ThreadPool pool(threads);
    const std::vector<float> x = random_floats(size_t(kEmbd * n_tok), 4);
    std::vector<float> y[3];
    for (int i = 0; i < 3; i++) y[i].resize(size_t(w.t[i].rows * n_tok));
    float* ys[3] = {y[0].data(), y[1].data(), y[2].data()};
    const Tensor* ws[3] = {&w.t[0], &w.t[1], &w.t[2]};
    AlignedBuffer act(linear_many_scratch_bytes(ws, 3, n_tok));
    size_t c = 0;
    for (auto _ : st) {
        const Tensor t[3] = {w.at(c, 0), w.at(c, 1), w.at(c, 2)};
        if (many) {
            const Tensor* tp[3] = {&t[0], &t[1], &t[2]};
            linear_many(pool, tp, 3, x.data(), n_tok, ys, act.data());
        } else {
            for (int i = 0; i < 3; i++) linear(pool, t[i], x.data(), n_tok, ys[i], act.data());
        }
        benchmark::DoNotOptimize(ys);
        c = c + 1 == w.copies ? 0 : c + 1;
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(w.set_bytes));
}

void register_all() {
    for (int threads : {1, 2}) {
        const std::string th = "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(("mem/read" + th).c_str(), bm_mem_read, threads)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
        // attention/ is qwen3-30b-a3b's shape, attention-g4full/ gemma4's
        // full layers; F16-rows keeps F16 K in rows, as before tiles.
        for (int g4 = 0; g4 < 2; g4++) {
            for (int kv = 0; kv < 4; kv++) {
                const GgmlType type = kv == 2 ? GgmlType::F32 : kv == 3 ? GgmlType::Q8_0 : GgmlType::F16;
                const std::string type_label = kv == 1 ? "F16-rows" : type_name(type);
                for (int64_t n_ctx : {512, 4096, 16384}) {
                    for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
                        if (int(l) > int(best_simd_level())) continue;
                        const std::string name = std::string(g4 ? "attention-g4full/" : "attention/") + type_label +
                                                 "/ctx:" + std::to_string(n_ctx) + "/" + simd_level_name(l) + th;
                        benchmark::RegisterBenchmark(name.c_str(), bm_attention, g4 ? kGemma4Full : kShape, l, type,
                                                     kv == 1, n_ctx, threads)
                            ->Unit(benchmark::kMicrosecond)
                            ->UseRealTime();
                    }
                }
            }
        }
        for (int64_t n_tok : {1, 16}) {
            for (bool many : {false, true}) {
                const std::string name = std::string("qkv/Q4_K/tok:") + std::to_string(n_tok) +
                                         (many ? "/linear_many" : "/linear_x3") + th;
                benchmark::RegisterBenchmark(name.c_str(), bm_qkv, many, n_tok, threads)
                    ->Unit(benchmark::kMicrosecond)
                    ->UseRealTime();
            }
        }
    }
}

}  // namespace
}  // namespace ms

int main(int argc, char** argv) {
    ms::register_all();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
