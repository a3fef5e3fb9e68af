// What is particular to deepseek4 beside the checks every family gets
// (golden_test.cpp): the state grows by the compressed blocks and indexer
// keys only; a rewind continues bit-exactly; and the compressed attention
// beyond what the golden prompt reaches (ratio-128 blocks need 128 tokens,
// the indexer's choice among many blocks) against a direct computation of
// the golden README's formulas, in double, over 300 positions, with the
// golden file's own layer weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "golden_model.h"
#include "model/deepseek4_attention.h"
#include "../golden_required.h"

namespace ms {
namespace {

// The README's golden deepseek4: layer 1 (ratio 4) keeps a 32-float block
// and a 64-float indexer key per 4 positions, layer 2 (ratio 128) a
// 32-float block per 128: 96 + 1 bytes a position in F32. The window and
// the unpooled tokens do not grow with the context; the per-thread scratch
// over the blocks (attention's scores, the indexer's scores and ranking)
// adds 3.
TEST(Deepseek4State, GrowsByCompressedBlocksOnly) {
    golden::LoadedModel m(golden::models_dir() + "/deepseek4-F32.gguf");
    const double per_position = golden::state_bytes_per_position(m);
    printf("state bytes per position of context: %.2f\n", per_position);
    EXPECT_GE(per_position, 97.0);
    EXPECT_LE(per_position, 100.0);
    EXPECT_EQ(m.model->new_state(StateOptions{})->kv_bytes_per_token, 97);
}

// A sequence rewound to what rewind_limit allows and continued gives the
// same bits as one never rewound: the rings (window, unpooled tokens) still
// hold what the continuation reads, or the limit says to start over.
TEST(Deepseek4State, RewindLimitIsSafe) {
    const golden::Case g = golden::load("deepseek4-F32");
    golden::LoadedModel m(g.gguf);
    ThreadPool pool(1);
    const int n = int(g.prompt.size()), V = int(g.n_vocab);
    auto fresh = m.state(1, GgmlType::F32, 4);
    std::vector<float> want(size_t(n) * size_t(V)), row(size_t(4) * size_t(V));
    for (int t = 0; t < n; t += 4) {
        const int k = std::min(4, n - t);
        m.model->forward(*fresh, *m.experts, pool, &g.prompt[size_t(t)], k, want.data() + size_t(t) * size_t(V), true);
    }
    int kept = 0;
    for (int back = 0; back <= n; back++) {
        const int64_t limit = fresh->rewind_limit(back);
        ASSERT_LE(limit, back);
        kept += limit > 0;
        auto st = m.state(1, GgmlType::F32, 4);
        for (int t = 0; t < n; t += 4) {
            m.model->forward(*st, *m.experts, pool, &g.prompt[size_t(t)], std::min(4, n - t), row.data(), true);
        }
        st->n_past = limit;
        for (int64_t t = limit; t < n; t += 4) {
            const int k = int(std::min<int64_t>(4, n - t));
            m.model->forward(*st, *m.experts, pool, &g.prompt[size_t(t)], k, row.data(), true);
            ASSERT_EQ(0, std::memcmp(row.data(), want.data() + size_t(t) * size_t(V), size_t(k) * size_t(V) * 4))
                << "rewound to " << limit << ", position " << t;
        }
    }
    EXPECT_GT(kept, 1);  // the last positions can be kept
}

// ---- the README's formulas, directly -----------------------------------------

using Vec = std::vector<double>;

struct Weights {
    std::vector<float> data;
    int64_t cols = 0, rows = 0;
    Tensor view() const { return Tensor{GgmlType::F32, cols, rows, reinterpret_cast<const uint8_t*>(data.data())}; }
    // Row r times x (x: cols values from x0).
    double dot_row(int64_t r, const double* x) const {
        double s = 0;
        for (int64_t c = 0; c < cols; c++) s += double(data[size_t(r * cols + c)]) * x[c];
        return s;
    }
    Vec apply(const Vec& x, int64_t r0 = 0, int64_t n = -1) const {
        Vec y(size_t(n < 0 ? rows : n));
        for (size_t r = 0; r < y.size(); r++) y[r] = dot_row(r0 + int64_t(r), x.data());
        return y;
    }
};

Weights read(const GgufFile& f, const std::string& name) {
    const GgufTensor* t = f.tensor(name);
    if (!t || t->type != GgmlType::F32) throw std::runtime_error("no F32 tensor " + name);
    Weights w;
    w.data.resize(size_t(t->n_elements()));
    f.read_tensor(*t, w.data.data());
    w.cols = t->ne[0];
    w.rows = t->n_elements() / t->ne[0];
    return w;
}

Vec rms(const Vec& x, const Weights* w, double eps = 1e-6) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); i++) y[i] = x[i] * inv * (w ? double(w->data[i]) : 1.0);
    return y;
}

// The README's rope on the last 16 dims of each `dim`-wide head of x:
// adjacent pairs; compressed layers: theta 1.6e5 with YaRN (factor 4,
// original context 256, beta 32 / 1, no magnitude factor); sign -1 rotates
// back.
void rope(double* x, int n_heads, int dim, int64_t pos, bool compressed, double sign = 1) {
    const int n_rot = 16;
    const double base = compressed ? 1.6e5 : 1e4;
    const double pi = std::acos(-1.0);
    auto corr = [&](double b) { return n_rot * std::log(256 / (2 * pi * b)) / (2 * std::log(base)); };
    const double lo = std::max(0.0, std::floor(corr(32))), hi = std::min(15.0, std::ceil(corr(1)));
    for (int i = 0; i < n_rot / 2; i++) {
        const double th_x = double(pos) * std::pow(base, -2.0 * i / n_rot);
        double th = th_x;
        if (compressed) {
            const double g = 1 - std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
            th = g * th_x + (1 - g) * th_x / 4;
        }
        const double c = std::cos(th), s = sign * std::sin(th);
        for (int h = 0; h < n_heads; h++) {
            double* v = x + h * dim + dim - n_rot + 2 * i;
            const double a = v[0], b = v[1];
            v[0] = a * c - b * s;
            v[1] = a * s + b * c;
        }
    }
}

double dot(const double* a, const double* b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// One compressor's block vectors over xs: per token a = kv . x and s = gate
// . x + ape[t mod R]; block b pools (per channel, softmax over entries of s)
// its own R tokens or, with overlap, the first `width` dims of block b-1's
// tokens and the last `width` of its own; then the norm and rope at bR.
std::vector<Vec> blocks(const GgufFile& f, const std::string& prefix, int ratio, int width,
                        const std::vector<Vec>& xs) {
    const Weights kv = read(f, prefix + "kv.weight"), gate = read(f, prefix + "gate.weight");
    const Weights ape = read(f, prefix + "ape.weight"), norm = read(f, prefix + "norm.weight");
    const bool overlap = kv.rows == 2 * width;
    std::vector<Vec> a, s;
    for (size_t t = 0; t < xs.size(); t++) {
        a.push_back(kv.apply(xs[t]));
        s.push_back(gate.apply(xs[t]));
        const float* ape_row = ape.data.data() + (int64_t(t) % ratio) * ape.cols;
        for (int64_t i = 0; i < gate.rows; i++) s.back()[size_t(i)] += ape_row[i];
    }
    std::vector<Vec> out;
    for (int64_t b = 0; (b + 1) * ratio <= int64_t(xs.size()); b++) {
        Vec c(static_cast<size_t>(width));
        for (int j = 0; j < width; j++) {
            std::vector<std::pair<double, double>> e;  // (score, value)
            if (overlap && b > 0) {
                for (int64_t t = (b - 1) * ratio; t < b * ratio; t++) {
                    e.push_back({s[size_t(t)][size_t(j)], a[size_t(t)][size_t(j)]});
                }
            }
            const int off = overlap ? width : 0;
            for (int64_t t = b * ratio; t < (b + 1) * ratio; t++) {
                e.push_back({s[size_t(t)][size_t(off + j)], a[size_t(t)][size_t(off + j)]});
            }
            double max = -INFINITY, sum = 0, acc = 0;
            for (auto& [sc, v] : e) max = std::max(max, sc);
            for (auto& [sc, v] : e) {
                sum += std::exp(sc - max);
                acc += std::exp(sc - max) * v;
            }
            c[size_t(j)] = acc / sum;
        }
        c = rms(c, &norm);
        rope(c.data(), 1, width, b * ratio, true);
        out.push_back(c);
    }
    return out;
}

// Layer il's attention output for every token of xs, the README's way.
// drop_blocks: leave the compressed blocks out (to show they matter).
std::vector<Vec> reference(const GgufFile& f, int il, int ratio, const std::vector<Vec>& xs, bool drop_blocks = false) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const int H = 4, D = 32, W = 8, G = 2, OL = 16, IH = 8, ID = 64, TOP = 4;
    const Weights q_a = read(f, p + "attn_q_a.weight"), q_a_norm = read(f, p + "attn_q_a_norm.weight");
    const Weights q_b = read(f, p + "attn_q_b.weight"), wkv = read(f, p + "attn_kv.weight");
    const Weights kv_norm = read(f, p + "attn_kv_a_norm.weight"), sinks = read(f, p + "attn_sinks.weight");
    const Weights out_a = read(f, p + "attn_output_a.weight"), out_b = read(f, p + "attn_output_b.weight");
    const bool comp = ratio > 0, index = comp && f.tensor(p + "indexer.proj.weight");
    std::vector<Vec> kv, blk, ikeys;
    for (size_t t = 0; t < xs.size(); t++) {
        kv.push_back(rms(wkv.apply(xs[t]), &kv_norm));
        rope(kv.back().data(), 1, D, int64_t(t), comp);
    }
    if (comp) blk = blocks(f, p + "attn_compressor_", ratio, D, xs);
    if (index) ikeys = blocks(f, p + "indexer_compressor_", ratio, ID, xs);
    Weights iq_b, iproj;
    if (index) {
        iq_b = read(f, p + "indexer.attn_q_b.weight");
        iproj = read(f, p + "indexer.proj.weight");
    }
    std::vector<Vec> out;
    for (size_t t = 0; t < xs.size(); t++) {
        const int64_t pos = int64_t(t);
        const Vec qr = rms(q_a.apply(xs[t]), &q_a_norm);
        Vec q = q_b.apply(qr);
        for (int h = 0; h < H; h++) {
            const Vec head(q.begin() + h * D, q.begin() + (h + 1) * D);
            const Vec n = rms(head, nullptr);
            std::copy(n.begin(), n.end(), q.begin() + h * D);
        }
        rope(q.data(), H, D, pos, comp);
        std::vector<const Vec*> keys;
        for (int64_t j = std::max<int64_t>(0, pos - W + 1); j <= pos; j++) keys.push_back(&kv[size_t(j)]);
        const int64_t nb = comp && !drop_blocks ? (pos + 1) / ratio : 0;
        std::vector<int64_t> visible;
        for (int64_t b = 0; b < nb; b++) visible.push_back(b);
        if (index && nb > TOP) {
            Vec iq = iq_b.apply(qr);
            rope(iq.data(), IH, ID, pos, true);
            const Vec w = iproj.apply(xs[t]);
            std::vector<std::pair<double, int64_t>> score;
            for (int64_t b = 0; b < nb; b++) {
                double s = 0;
                for (int h = 0; h < IH; h++) {
                    s += w[size_t(h)] / std::sqrt(double(ID * IH)) *
                         std::max(0.0, dot(iq.data() + h * ID, ikeys[size_t(b)].data(), ID));
                }
                score.push_back({-s, b});  // best first, the lower block on a tie
            }
            std::sort(score.begin(), score.end());
            visible.clear();
            for (int r = 0; r < TOP; r++) visible.push_back(score[size_t(r)].second);
        }
        for (int64_t b : visible) keys.push_back(&blk[size_t(b)]);
        Vec o(size_t(H * D), 0.0);
        for (int h = 0; h < H; h++) {
            std::vector<double> sc;
            double max = sinks.data[size_t(h)];
            for (const Vec* k : keys) {
                sc.push_back(dot(q.data() + h * D, k->data(), D) / std::sqrt(double(D)));
                max = std::max(max, sc.back());
            }
            double sum = std::exp(double(sinks.data[size_t(h)]) - max);
            for (double& v : sc) sum += (v = std::exp(v - max));
            for (size_t j = 0; j < keys.size(); j++) {
                for (int d = 0; d < D; d++) o[size_t(h * D + d)] += sc[j] / sum * (*keys[j])[size_t(d)];
            }
        }
        rope(o.data(), H, D, pos, comp, -1);
        Vec low;
        for (int g = 0; g < G; g++) {
            const Vec part(o.begin() + g * (H / G) * D, o.begin() + (g + 1) * (H / G) * D);
            const Vec r = out_a.apply(part, g * OL, OL);
            low.insert(low.end(), r.begin(), r.end());
        }
        out.push_back(out_b.apply(low));
    }
    return out;
}

// dsv4_attention over xs in chunks of `chunk` (a state sized for them).
std::vector<float> run(const GgufFile& f, int il, int ratio, const std::vector<Vec>& xs, int chunk) {
    const std::string p = "blk." + std::to_string(il) + ".";
    std::vector<Weights> store;  // the views below point into these (never reallocated)
    store.reserve(32);
    auto w = [&](const std::string& name) {
        store.push_back(read(f, p + name));
        return store.back().view();
    };
    Dsv4AttentionLayer l;
    l.ratio = ratio;
    l.q_a = w("attn_q_a.weight");
    l.q_a_norm = w("attn_q_a_norm.weight");
    l.q_b = w("attn_q_b.weight");
    l.kv = w("attn_kv.weight");
    l.kv_norm = w("attn_kv_a_norm.weight");
    l.sinks = w("attn_sinks.weight");
    l.out_a = w("attn_output_a.weight");
    l.out_b = w("attn_output_b.weight");
    auto compressor = [&](const std::string& prefix, int width, Dsv4Compressor* c) {
        c->kv = w(prefix + "kv.weight");
        c->gate = w(prefix + "gate.weight");
        c->ape = w(prefix + "ape.weight");
        c->norm = w(prefix + "norm.weight");
        c->width = width;
        c->overlap = c->kv.rows == 2 * width;
    };
    if (ratio > 0) compressor("attn_compressor_", 32, &l.comp);
    if (ratio > 0 && f.tensor(p + "indexer.proj.weight")) {
        compressor("indexer_compressor_", 64, &l.index);
        l.index_q_b = w("indexer.attn_q_b.weight");
        l.index_proj = w("indexer.proj.weight");
    }
    Dsv4AttentionShape sh;
    sh.n_head = 4;
    sh.head_dim = 32;
    sh.n_rot = 16;
    sh.q_lora = 32;
    sh.window = 8;
    sh.n_group = 2;
    sh.out_lora = 16;
    sh.index_heads = 8;
    sh.index_dim = 64;
    sh.top_k = 4;
    sh.rope_plain = Rope{16, 1e4f, false, nullptr};
    sh.rope_comp = with_yarn(Rope{16, 1.6e5f, false, nullptr}, 4.0f, 256);
    sh.rope_comp.attn_factor = 1.0f / (1.0f + 0.1f * std::log(4.0f));

    const int n = int(xs.size());
    const std::vector<Dsv4AttentionLayer> layers{l};
    Dsv4AttentionState st;
    st.init(sh, layers, chunk, n, 2);
    ThreadPool pool(2);
    AlignedBuffer acts(dsv4_attention_acts_per_token(layers) * size_t(chunk));
    std::vector<float> x(size_t(chunk) * 64), cs_plain(size_t(chunk) * 16), cs_comp(size_t(chunk) * 16);
    std::vector<float> out(size_t(n) * 64);
    for (int t0 = 0; t0 < n; t0 += chunk) {
        const int m = std::min(chunk, n - t0);
        for (int t = 0; t < m; t++) {
            for (int i = 0; i < 64; i++) x[size_t(t * 64 + i)] = float(xs[size_t(t0 + t)][size_t(i)]);
            rope_angles(sh.rope_plain, t0 + t, cs_plain.data() + t * 16);
            rope_angles(sh.rope_comp, t0 + t, cs_comp.data() + t * 16);
        }
        dsv4_attention(pool, sh, layers[0], 0, st, x.data(), m, t0, cs_plain.data(), cs_comp.data(), acts.data(),
                       out.data() + size_t(t0) * 64);
    }
    return out;
}

double rel_l2(const std::vector<float>& got, const std::vector<Vec>& want) {
    double num = 0, den = 0;
    for (size_t t = 0; t < want.size(); t++) {
        for (size_t i = 0; i < want[t].size(); i++) {
            const double d = double(got[t * want[t].size() + i]) - want[t][i];
            num += d * d;
            den += want[t][i] * want[t][i];
        }
    }
    return std::sqrt(num / den);
}

// Inputs like a normed residual: random, unit RMS.
std::vector<Vec> inputs(int n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> nd(0.0, 1.0);
    std::vector<Vec> xs(size_t(n), Vec(64));
    for (Vec& x : xs) {
        for (double& v : x) v = float(nd(rng));
    }
    return xs;
}

void expect_matches_formulas(int il, int ratio) {
    const GgufFile f = GgufFile::open(golden::models_dir() + "/deepseek4-F32.gguf");
    const std::vector<Vec> xs = inputs(300, 7 + unsigned(il));
    const std::vector<Vec> want = reference(f, il, ratio, xs);
    const std::vector<float> got = run(f, il, ratio, xs, 64);
    const double err = rel_l2(got, want);
    // Without the blocks the output is far off: the blocks are exercised.
    const double without = rel_l2(got, reference(f, il, ratio, xs, true));
    printf("layer %d (ratio %d): relative L2 %.3e against the formulas, %.3e against them without blocks\n", il,
           ratio, err, without);
    EXPECT_LE(err, 1e-5);
    EXPECT_GE(without, 1e-2);
    // Token by token: the same bits as chunks of 64.
    const std::vector<float> steps = run(f, il, ratio, xs, 1);
    EXPECT_EQ(0, std::memcmp(steps.data(), got.data(), got.size() * 4));
}

TEST(Deepseek4Attention, Ratio128BlocksMatchFormulas) { expect_matches_formulas(2, 128); }

TEST(Deepseek4Attention, Ratio4IndexerOverManyBlocksMatchesFormulas) { expect_matches_formulas(1, 4); }

}  // namespace
}  // namespace ms
