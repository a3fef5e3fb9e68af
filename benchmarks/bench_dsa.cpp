// Decode attention of one MLA layer at GLM-5's attention shape (64 heads,
// compressed rows of kv_lora 512 + rope 64, V 512 in latent space; indexer
// 32 heads of 128, top_k 2048) over an F16 cache of 1k, 8k and 32k
// positions: dense MLA attention against DeepSeek sparse attention, i.e. the
// lightning indexer's scan of every key plus attention over the top_k rows
// it picks. The indexer's projections take a 64-wide input here so that what
// is timed is the part that depends on the context (the projections cost the
// same at every length). Times are wall-clock for one token at the last
// position.
//
//   build/bench_dsa --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "model/dsa_indexer.h"
#include "model/mla_attention.h"
#include "ops/attention.h"
#include "ops/buffer.h"
#include "ops/rope.h"

namespace ms {
namespace {

constexpr int kHeads = 64, kLatent = 512, kRope = 64, kRow = kLatent + kRope;
constexpr IndexerShape kIndexer{32, 128, 2048};
constexpr int kInput = 64;  // the indexer projections' input width (see above)
const AttentionShape kLatentShape{kHeads, 1, kRow, kLatent, 1.0f / std::sqrt(256.0f), 0, nullptr};

std::vector<float> random_floats(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// An F16 cache of n_ctx random rows of `width`.
AlignedBuffer random_cache(int64_t n_ctx, int width, uint32_t seed) {
    AlignedBuffer buf(size_t(n_ctx * width) * 2);
    const KvLayer kv{GgmlType::F16, width, width, buf.data(), buf.data(), 0, 0};
    const std::vector<float> rows = random_floats(size_t(n_ctx * width), seed);
    for (int64_t p = 0; p < n_ctx; p++) kv_store(kv, p, rows.data() + p * width, nullptr);
    return buf;
}

void bm_dense(benchmark::State& st, int threads) {
    const int64_t n_ctx = st.range(0);
    AlignedBuffer cache = random_cache(n_ctx, kRow, 1);
    const KvLayer kv{GgmlType::F16, kRow, kRow, cache.data(), cache.data(), 0, 0};
    const std::vector<float> q = random_floats(size_t(kHeads * kRow), 2);
    std::vector<float> out(size_t(kHeads * kLatent));
    ThreadPool pool(threads);
    AlignedBuffer scratch(attention_scratch_floats(kLatentShape, n_ctx, threads) * 4);
    for (auto _ : st) {
        attention(pool, kLatentShape, kv, q.data(), 1, n_ctx - 1, n_ctx, scratch.f32(), out.data());
        benchmark::DoNotOptimize(out.data());
    }
}

// The indexer for one token at position n_ctx - 1 (its keys cached before),
// then attention over the rows it picked; or either part alone.
enum class Part { Both, Indexer, Attention };

void bm_sparse(benchmark::State& st, int threads, Part part) {
    const int64_t n_ctx = st.range(0);
    const IndexerShape& s = kIndexer;
    AlignedBuffer cache = random_cache(n_ctx, kRow, 1);
    AlignedBuffer keys = random_cache(n_ctx, s.head_dim, 3);
    const KvLayer kv{GgmlType::F16, kRow, kRow, cache.data(), cache.data(), 0, 0};
    const KvLayer key_rows = indexer_key_layer(s, GgmlType::F16, keys.data());
    const std::vector<float> q = random_floats(size_t(kHeads * kRow), 2);
    const std::vector<float> wq = random_floats(size_t(kInput * s.n_head * s.head_dim), 4);
    const std::vector<float> wk = random_floats(size_t(kInput * s.head_dim), 5);
    const std::vector<float> wp = random_floats(size_t(kInput * s.n_head), 6);
    const std::vector<float> norm(size_t(s.head_dim), 1.0f), bias(size_t(s.head_dim), 0.0f);
    auto f32 = [](const std::vector<float>& v, int64_t cols) {
        return Tensor{GgmlType::F32, cols, int64_t(v.size()) / cols, reinterpret_cast<const uint8_t*>(v.data())};
    };
    IndexerLayer l;
    l.wq_b = f32(wq, kInput);
    l.wk = f32(wk, kInput);
    l.proj = f32(wp, kInput);
    l.k_norm = f32(norm, s.head_dim);
    l.k_norm_bias = f32(bias, s.head_dim);
    const std::vector<float> x = random_floats(kInput, 7), qr = random_floats(kInput, 8);

    const Rope rope{kRope, 1e6f, false};
    std::vector<float> cos_sin(kRope);
    rope_angles(rope, n_ctx - 1, cos_sin.data());
    ThreadPool pool(threads);
    IndexerScratch isc;
    isc.init(s, 1, n_ctx, threads);
    AlignedBuffer acts(IndexerScratch::acts_per_token({l}) + 64);
    isc.acts = acts.data();
    std::vector<int32_t> sel(size_t(s.top_k));
    int32_t n_sel = 0;
    AlignedBuffer scratch(size_t(threads) * attention_selected_scratch_floats(kLatentShape, kv, s.top_k) * 4);
    std::vector<float> out(size_t(kHeads * kLatent));
    indexer_select(pool, s, rope, l, x.data(), qr.data(), 1, n_ctx - 1, cos_sin.data(), key_rows, isc, sel.data(),
                   &n_sel);
    for (auto _ : st) {
        if (part != Part::Attention) {
            indexer_select(pool, s, rope, l, x.data(), qr.data(), 1, n_ctx - 1, cos_sin.data(), key_rows, isc,
                           sel.data(), &n_sel);
        }
        if (part != Part::Indexer) {
            attention_selected(pool, kLatentShape, kv, q.data(), 1, sel.data(), &n_sel, s.top_k, scratch.f32(),
                               out.data());
        }
        benchmark::DoNotOptimize(out.data());
    }
}

void bm_sparse_all(benchmark::State& st, int threads) { bm_sparse(st, threads, Part::Both); }
void bm_sparse_indexer(benchmark::State& st, int threads) { bm_sparse(st, threads, Part::Indexer); }
void bm_sparse_attention(benchmark::State& st, int threads) { bm_sparse(st, threads, Part::Attention); }

void register_all() {
    for (int threads : {1, 2}) {
        const std::string t = "/threads:" + std::to_string(threads);
        const std::pair<const char*, void (*)(benchmark::State&, int)> cases[] = {
            {"mla_dense", bm_dense},
            {"dsa_top2048", bm_sparse_all},
            {"dsa_top2048_indexer_only", bm_sparse_indexer},
            {"dsa_top2048_attention_only", bm_sparse_attention}};
        for (const auto& [name, fn] : cases) {
            benchmark::RegisterBenchmark((std::string(name) + t).c_str(),
                                         [fn = fn, threads](benchmark::State& st) { fn(st, threads); })
                ->Arg(1024)
                ->Arg(8192)
                ->Arg(32768)
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
        }
    }
}

}  // namespace
}  // namespace ms

int main(int argc, char** argv) {
    ms::register_all();
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    return 0;
}
