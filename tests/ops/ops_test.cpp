// The vector operations against plain double-precision formulas written out
// here: RMS norm, softmax (with a sink), SwiGLU and gpt-oss's clamped form,
// RoPE angles (plain and YaRN) and rotation, causal GQA attention (full, and
// windowed with sinks) over F32 and F16 caches, linear() over F32 weights for any
// thread count, and AlignedBuffer's huge-page placement.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/buffer.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "quant/half.h"
#include "test_util.h"

namespace ms {
namespace {

// The VmFlags line of the mapping in /proc/self/smaps that holds p ("" if none).
std::string vm_flags_at(const void* p) {
    std::ifstream f("/proc/self/smaps");
    std::string line;
    bool inside = false;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    while (std::getline(f, line)) {
        unsigned long lo = 0, hi = 0;
        if (line.find('-') != std::string::npos && sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 &&
            line.find(':') > line.find(' ')) {
            inside = a >= lo && a < hi;
        } else if (inside && line.rfind("VmFlags:", 0) == 0) {
            return line;
        }
    }
    return "";
}

TEST(Ops, HugePageBuffersStartOnAHugePageAndAreAdvised) {
    const size_t n = 5 * kHugePage + 4096;
    AlignedBuffer huge(n, PageSize::Huge);
    ASSERT_EQ(huge.size(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(huge.data()) % kHugePage, 0u);
    std::memset(huge.data(), 7, n);  // every byte asked for is usable
    EXPECT_EQ(huge.data()[n - 1], 7);
    // Smaller than a huge page, or not asked for: the 64-byte alignment only.
    AlignedBuffer small(kHugePage / 2, PageSize::Huge), base(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(base.data()) % 64, 0u);
    huge.resize(0, PageSize::Huge);
    EXPECT_EQ(huge.data(), nullptr);
    // madvise(MADV_HUGEPAGE) marks the mapping "hg" wherever the kernel has
    // transparent huge pages at all (in any mode). Control: the same call on a
    // mapping of the test's own, since a kernel without THP, or qemu-user
    // (whose smaps is its own and which drops the advice), shows no "hg".
    AlignedBuffer again(n, PageSize::Huge);
    void* own = mmap(nullptr, 3 * kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(own, MAP_FAILED);
    advise_huge_pages(own, 3 * kHugePage);
    const bool visible = vm_flags_at(static_cast<uint8_t*>(own) + kHugePage).find(" hg") != std::string::npos;
    munmap(own, 3 * kHugePage);
    if (!visible) GTEST_SKIP() << "madvise(MADV_HUGEPAGE) does not show in smaps here (no THP, or qemu-user)";
    const std::string flags = vm_flags_at(again.data() + kHugePage);
    EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
    EXPECT_EQ(vm_flags_at(base.data() + kHugePage).find(" hg"), std::string::npos);
}

TEST(Ops, RmsNormMatchesFormula) {
    const std::vector<float> x = random_vector(96, 1), w = random_vector(96, 2);
    std::vector<float> out(96);
    rms_norm(x.data(), w.data(), 96, 1e-6f, out.data());
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double scale = 1.0 / std::sqrt(ss / 96 + 1e-6);
    for (size_t i = 0; i < 96; i++) EXPECT_NEAR(out[i], x[i] * scale * w[i], 1e-5 * std::fabs(x[i] * scale * w[i]) + 1e-7);
    // In place, without weight.
    std::vector<float> y = x;
    rms_norm(y.data(), nullptr, 96, 1e-6f, y.data());
    for (size_t i = 0; i < 96; i++) EXPECT_NEAR(y[i], x[i] * scale, 1e-5);
}

TEST(Ops, SoftmaxAndSwiglu) {
    std::vector<float> x = {1.0f, 2.0f, -3.0f, 0.5f, 100.0f, 99.0f};
    const std::vector<float> orig = x;
    softmax(x.data(), 6, 0.5f);
    double sum = 0;
    for (float v : orig) sum += std::exp(0.5 * (v - 100.0));
    for (size_t i = 0; i < 6; i++) EXPECT_NEAR(x[i], std::exp(0.5 * (orig[i] - 100.0)) / sum, 1e-6);

    const std::vector<float> g = {-2.0f, 0.0f, 3.0f}, u = {1.5f, 2.0f, -1.0f};
    std::vector<float> out(3);
    swiglu(g.data(), u.data(), 3, out.data());
    for (size_t i = 0; i < 3; i++) EXPECT_NEAR(out[i], g[i] / (1.0 + std::exp(-double(g[i]))) * u[i], 1e-6);

    // A sink logit takes its share of the mass and is not written.
    x = orig;
    softmax(x.data(), 6, 0.5f, 49.5f);
    const double with_sink = sum + std::exp(49.5 - 50.0);
    for (size_t i = 0; i < 6; i++) EXPECT_NEAR(x[i], std::exp(0.5 * (orig[i] - 100.0)) / with_sink, 1e-6);
}

// gpt-oss's activation: gate clamped above, up clamped both ways, at 7.
TEST(Ops, ClampedSwigluOai) {
    const std::vector<float> g = {-2.0f, 0.5f, 9.0f, 3.0f}, u = {1.5f, -8.0f, 2.0f, 7.5f};
    std::vector<float> out(4);
    swiglu_oai(g.data(), u.data(), 4, 1.702f, 7.0f, out.data());
    for (size_t i = 0; i < 4; i++) {
        const double gc = std::min(double(g[i]), 7.0), uc = std::clamp(double(u[i]), -7.0, 7.0);
        EXPECT_NEAR(out[i], gc / (1.0 + std::exp(-1.702 * gc)) * (uc + 1.0), 1e-5) << i;
    }
}

// YaRN as its paper defines it: pairs that turn more than beta_fast times
// over the original context keep their angle, pairs that turn less than
// beta_slow times are interpolated by 1/factor, a linear ramp between; cos
// and sin scaled by 1 + 0.1 ln(factor).
TEST(Ops, YarnAnglesMatchFormula) {
    const int n_rot = 64;
    const double base = 150000, factor = 32, orig = 4096;
    const Rope rope = with_yarn(Rope{n_rot, float(base), true}, float(factor), int64_t(orig));
    auto corr = [&](double turns) { return n_rot * std::log(orig / (turns * 2 * M_PI)) / (2 * std::log(base)); };
    const double lo = std::max(0.0, std::floor(corr(32))), hi = std::min(n_rot - 1.0, std::ceil(corr(1)));
    EXPECT_EQ(rope.corr_lo, float(lo));
    EXPECT_EQ(rope.corr_hi, float(hi));
    const double mscale = 1 + 0.1 * std::log(factor);
    std::vector<float> cs(n_rot);
    for (int64_t pos : {1, 17, 3000}) {
        rope_angles(rope, pos, cs.data());
        for (int i = 0; i < n_rot / 2; i++) {
            const double theta = double(pos) * std::pow(base, -2.0 * i / n_rot);
            const double keep = 1 - std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
            const double angle = theta / factor * (1 - keep) + theta * keep;
            EXPECT_NEAR(cs[size_t(2 * i)], std::cos(angle) * mscale, 2e-4 * mscale) << pos << " " << i;
            EXPECT_NEAR(cs[size_t(2 * i + 1)], std::sin(angle) * mscale, 2e-4 * mscale) << pos << " " << i;
        }
    }
}

TEST(Ops, RopeRotatesPairsByPositionTimesFrequency) {
    const int head_dim = 16, heads = 2;
    for (bool neox : {true, false}) {
        Rope rope{head_dim, 10000.0f, neox};
        std::vector<float> cs(head_dim);
        const int64_t pos = 7;
        rope_angles(rope, pos, cs.data());
        std::vector<float> x = random_vector(size_t(head_dim * heads), 3), orig = x;
        rope_apply(rope, cs.data(), x.data(), heads, head_dim);
        for (int h = 0; h < heads; h++) {
            for (int i = 0; i < head_dim / 2; i++) {
                const double theta = double(pos) * std::pow(10000.0, -2.0 * i / head_dim);
                const int a = h * head_dim + (neox ? i : 2 * i);
                const int b = h * head_dim + (neox ? i + head_dim / 2 : 2 * i + 1);
                EXPECT_NEAR(x[size_t(a)], orig[size_t(a)] * std::cos(theta) - orig[size_t(b)] * std::sin(theta), 1e-5);
                EXPECT_NEAR(x[size_t(b)], orig[size_t(a)] * std::sin(theta) + orig[size_t(b)] * std::cos(theta), 1e-5);
            }
        }
    }
    // Position 0 is the identity; partial rotation leaves the tail alone.
    Rope partial{8, 10000.0f, true};
    std::vector<float> cs(8);
    rope_angles(partial, 0, cs.data());
    std::vector<float> x = random_vector(16, 4), orig = x;
    rope_apply(partial, cs.data(), x.data(), 1, 16);
    EXPECT_EQ(x, orig);
    rope_angles(partial, 3, cs.data());
    rope_apply(partial, cs.data(), x.data(), 1, 16);
    for (int i = 8; i < 16; i++) EXPECT_EQ(x[size_t(i)], orig[size_t(i)]);
}

// Causal GQA attention in double, from the F32 values the cache holds, with
// the shape's window and sinks.
std::vector<double> reference_attention(const AttentionShape& s, const std::vector<float>& q,
                                        const std::vector<float>& k, const std::vector<float>& v, int64_t n_tok) {
    const int64_t kw = int64_t(s.n_head_kv) * s.head_dim, vw = int64_t(s.n_head_kv) * s.head_dim_v;
    std::vector<double> out(size_t(n_tok * s.n_head * s.head_dim_v), 0.0);
    for (int64_t t = 0; t < n_tok; t++) {
        for (int h = 0; h < s.n_head; h++) {
            const int kvh = h / (s.n_head / s.n_head_kv);
            std::vector<double> w(size_t(t + 1));
            const int64_t first = s.window > 0 ? std::max<int64_t>(0, t + 1 - s.window) : 0;
            const double sink = s.sinks ? s.sinks[h] : -INFINITY;
            double max = std::max(-1e300, sink), sum = 0;
            for (int64_t j = 0; j <= t; j++) {
                if (j < first) {
                    w[size_t(j)] = -INFINITY;
                    continue;
                }
                double d = 0;
                for (int i = 0; i < s.head_dim; i++) {
                    d += double(q[size_t((t * s.n_head + h) * s.head_dim + i)]) * k[size_t(j * kw + kvh * s.head_dim + i)];
                }
                w[size_t(j)] = d * s.scale;
                max = std::max(max, w[size_t(j)]);
            }
            for (double& x : w) sum += (x = std::exp(x - max));
            sum += std::exp(sink - max);
            for (int64_t j = 0; j <= t; j++) {
                for (int i = 0; i < s.head_dim_v; i++) {
                    out[size_t((t * s.n_head + h) * s.head_dim_v + i)] +=
                        w[size_t(j)] / sum * v[size_t(j * vw + kvh * s.head_dim_v + i)];
                }
            }
        }
    }
    return out;
}

TEST(Ops, CausalGqaAttentionMatchesReference) {
    const float sinks[4] = {0.3f, -2.0f, 1.5f, 0.0f};
    const AttentionShape full{4, 2, 32, 32, 1.0f / std::sqrt(32.0f)};
    const AttentionShape window_sinks{4, 2, 32, 32, 1.0f / std::sqrt(32.0f), 4, sinks};
    for (const AttentionShape& s : {full, window_sinks}) {
        const int64_t n_tok = 9, n_ctx = 16, kw = 2 * 32;
        const std::vector<float> q = random_vector(size_t(n_tok * 4 * 32), 5);
        const std::vector<float> k = random_vector(size_t(n_tok * kw), 6), v = random_vector(size_t(n_tok * kw), 7);
        for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
            const size_t elt = type == GgmlType::F32 ? 4 : 2;
            AlignedBuffer kc(size_t(n_ctx * kw) * elt), vc(size_t(n_ctx * kw) * elt);
            const KvLayer kv{type, kw, kw, kc.data(), vc.data()};
            for (int64_t t = 0; t < n_tok; t++) kv_store(kv, t, k.data() + t * kw, v.data() + t * kw);
            // What the cache holds, widened back to float.
            std::vector<float> kh = k, vh = v;
            if (type == GgmlType::F16) {
                for (float& x : kh) x = fp16_to_fp32(fp32_to_fp16(x));
                for (float& x : vh) x = fp16_to_fp32(fp32_to_fp16(x));
            }
            const std::vector<double> want = reference_attention(s, q, kh, vh, n_tok);
            for (int threads : {1, 3}) {
                ThreadPool pool(threads);
                std::vector<float> scratch(attention_scratch_floats(s, n_ctx, threads));
                std::vector<float> out(want.size());
                // All tokens at once, then the last token alone at its position.
                attention(pool, s, kv, q.data(), n_tok, 0, n_ctx, scratch.data(), out.data());
                // F16: the query is rounded to F16 too, as the reference does.
                const double tol = type == GgmlType::F32 ? 1e-5 : 2e-3;
                for (size_t i = 0; i < want.size(); i++) {
                    ASSERT_NEAR(out[i], want[i], tol) << type_name(type) << " " << i;
                }
                std::vector<float> last(static_cast<size_t>(4 * 32));
                attention(pool, s, kv, q.data() + (n_tok - 1) * 4 * 32, 1, n_tok - 1, n_ctx, scratch.data(),
                          last.data());
                for (size_t i = 0; i < last.size(); i++) EXPECT_EQ(last[i], out[size_t((n_tok - 1) * 4 * 32) + i]);
            }
        }
    }
}

TEST(Ops, LinearF32MatchesDotsForAnyThreadCount) {
    const int64_t cols = 64, rows = 37, n_tok = 5;
    const std::vector<float> w = random_vector(size_t(cols * rows), 8), x = random_vector(size_t(cols * n_tok), 9);
    const Tensor t{GgmlType::F32, cols, rows, reinterpret_cast<const uint8_t*>(w.data())};
    AlignedBuffer act(linear_scratch_bytes(t, n_tok));
    std::vector<float> first;
    for (int threads : {1, 2, 4}) {
        ThreadPool pool(threads);
        std::vector<float> y(size_t(rows * n_tok));
        linear(pool, t, x.data(), n_tok, y.data(), act.data());
        for (int64_t tok = 0; tok < n_tok; tok++) {
            for (int64_t r = 0; r < rows; r++) {
                double d = 0;
                for (int64_t c = 0; c < cols; c++) d += double(w[size_t(r * cols + c)]) * x[size_t(tok * cols + c)];
                ASSERT_NEAR(y[size_t(tok * rows + r)], d, 1e-4);
            }
        }
        if (first.empty()) first = y;
        EXPECT_EQ(y, first) << threads << " threads";
        // One token alone gives the same bits as inside the batch.
        std::vector<float> one(static_cast<size_t>(rows));
        linear(pool, t, x.data() + 2 * cols, 1, one.data(), act.data());
        for (int64_t r = 0; r < rows; r++) EXPECT_EQ(one[size_t(r)], y[size_t(2 * rows + r)]);
    }
}

}  // namespace
}  // namespace ms
