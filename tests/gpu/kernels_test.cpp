// The CUDA kernels against the CPU: quantized matrix-vector products against
// quant's dequantization, norms, RoPE and SwiGLU against ops/, routing
// against model/moe's route_softmax_topk, attention against a double
// reference. Skips, saying why, where no CUDA device is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gpu/gpu.h"
#include "model/moe.h"
#include "ops/activation.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/half.h"

namespace ms {
namespace {

#define SKIP_WITHOUT_GPU()                        \
    do {                                          \
        std::string why;                          \
        if (!gpu::available(&why)) GTEST_SKIP() << why; \
    } while (0)

// Device copies of host vectors, freed at scope end.
struct DeviceBuffer {
    void* p = nullptr;
    size_t n = 0;
    explicit DeviceBuffer(size_t bytes) : p(gpu::alloc(bytes)), n(bytes) {}
    template <class T>
    explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size() * sizeof(T)) {
        gpu::copy_to_device(p, v.data(), n, nullptr);
        gpu::sync(nullptr);
    }
    ~DeviceBuffer() { gpu::release(p); }
    float* f() const { return static_cast<float*>(p); }
    template <class T>
    std::vector<T> get() const {
        std::vector<T> v(n / sizeof(T));
        gpu::sync(nullptr);
        gpu::check_last("kernel");
        gpu::copy_to_host(v.data(), p, n, nullptr);
        gpu::sync(nullptr);
        return v;
    }
};

std::vector<float> randoms(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// A row of random blocks of type t: random bytes (every quant value and
// 6-bit scale valid), with the fp16 block scales set to modest values.
std::vector<uint8_t> random_rows(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
    const size_t rb = row_bytes(t, cols);
    std::vector<uint8_t> w(rb * size_t(rows));
    std::mt19937 rng(seed);
    for (uint8_t& b : w) b = uint8_t(rng());
    std::uniform_real_distribution<float> scale(0.001f, 0.02f);
    auto set_half = [&](uint8_t* p) {
        const uint16_t h = fp32_to_fp16(scale(rng));
        memcpy(p, &h, 2);
    };
    const size_t nb = w.size() / type_traits(t).type_size;
    for (size_t i = 0; i < nb; i++) {
        uint8_t* b = w.data() + i * type_traits(t).type_size;
        switch (t) {
            case GgmlType::F32: {
                const float f = scale(rng) * 50 - 0.5f;
                memcpy(b, &f, 4);
                break;
            }
            case GgmlType::F16: set_half(b); break;
            case GgmlType::Q8_0: set_half(b); break;
            case GgmlType::Q4_K:
            case GgmlType::Q5_K: set_half(b), set_half(b + 2); break;  // d, dmin
            case GgmlType::Q6_K: set_half(b + offsetof(BlockQ6_K, d)); break;
            default: break;
        }
    }
    return w;
}

// y = W x in double from quant's dequantization.
std::vector<double> reference_matvec(GgmlType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                                     const float* x) {
    std::vector<double> y(static_cast<size_t>(rows), 0.0);
    std::vector<float> row(static_cast<size_t>(cols), 0.0f);
    for (int64_t r = 0; r < rows; r++) {
        EXPECT_TRUE(dequantize_row(t, w.data() + size_t(r) * row_bytes(t, cols), row.data(), cols));
        double s = 0;
        for (int64_t i = 0; i < cols; i++) s += double(row[size_t(i)]) * double(x[i]);
        y[size_t(r)] = s;
    }
    return y;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(got[i])) return INFINITY;
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return std::sqrt(num / den);
}

class Matvec : public ::testing::TestWithParam<GgmlType> {};

TEST_P(Matvec, MatchesDequantizedReference) {
    SKIP_WITHOUT_GPU();
    const GgmlType t = GetParam();
    ASSERT_TRUE(gpu::supports(t));
    // Few rows (several warps share a row) and many (a warp takes its own),
    // row counts that are not a multiple of the rows a warp computes.
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 256}, {515, 2048}, {64, 4096}, {2201, 512}}) {
        const std::vector<uint8_t> w = random_rows(t, rows, cols, uint32_t(rows * 7 + cols));
        const std::vector<float> x = randoms(size_t(cols), uint32_t(cols));
        DeviceBuffer dw(w), dx(x), dy(size_t(rows) * 4);
        gpu::fill(dy.p, 0xff, dy.n, nullptr);  // NaN: every output must be written
        gpu::matvec(t, dw.p, rows, cols, dx.f(), dy.f(), nullptr);
        const double e = rel_err(dy.get<float>(), reference_matvec(t, w, rows, cols, x.data()));
        EXPECT_LT(e, 1e-5) << type_name(t) << " " << rows << "x" << cols;
    }
}

TEST_P(Matvec, ExpertsThroughSlotTable) {
    SKIP_WITHOUT_GPU();
    const GgmlType t = GetParam();
    const int64_t rows = 96, cols = 512, n_slot = 6;
    const size_t bytes = row_bytes(t, cols) * size_t(rows), offset = 256;  // a matrix behind another's bytes
    std::vector<std::vector<uint8_t>> mats;
    std::vector<uint8_t> arena(size_t(n_slot) * (offset + bytes));
    for (int e = 0; e < n_slot; e++) {
        mats.push_back(random_rows(t, rows, cols, uint32_t(100 + e)));
        memcpy(arena.data() + size_t(e) * (offset + bytes) + offset, mats.back().data(), bytes);
    }
    DeviceBuffer darena(arena);
    // Slots in reverse order of experts: table[e] is slot n_slot - 1 - e.
    std::vector<const uint8_t*> table;
    for (int e = 0; e < n_slot; e++)
        table.push_back(static_cast<const uint8_t*>(darena.p) + size_t(n_slot - 1 - e) * (offset + bytes));
    const std::vector<int32_t> ids = {4, 1, 5};
    const std::vector<float> x = randoms(size_t(cols) * ids.size(), 9);
    DeviceBuffer dtable(table), dids(ids), dx(x), dy(ids.size() * size_t(rows) * 4);
    gpu::matvec_experts(t, static_cast<const uint8_t* const*>(dtable.p), static_cast<const int32_t*>(dids.p),
                        int(ids.size()), offset, rows, cols, dx.f(), cols, dy.f(), nullptr);
    const std::vector<float> y = dy.get<float>();
    for (size_t i = 0; i < ids.size(); i++) {
        const int slot = n_slot - 1 - ids[i];
        const std::vector<double> ref = reference_matvec(t, mats[size_t(slot)], rows, cols, x.data() + i * cols);
        const std::vector<float> got(y.begin() + long(i * rows), y.begin() + long((i + 1) * rows));
        EXPECT_LT(rel_err(got, ref), 1e-5) << "expert " << ids[i];
    }
}

// The fused expert FFN halves against ops' SwiGLU and a double weighted sum
// of the dequantized products: gate and up are two slots' matrices (the
// table's slots hold one matrix each, so "up" is the next slot's), down a
// square matrix, as rows x cols = cols x cols.
TEST_P(Matvec, ExpertGateUpAndDownAdd) {
    SKIP_WITHOUT_GPU();
    const GgmlType t = GetParam();
    const int64_t n_ff = 256, d = 512;  // gate/up: n_ff x d; down: d x n_ff
    const size_t gate_bytes = row_bytes(t, d) * size_t(n_ff), down_bytes = row_bytes(t, n_ff) * size_t(d);
    const size_t up_off = (gate_bytes + 255) & ~size_t(255), down_off = up_off + ((gate_bytes + 255) & ~size_t(255));
    const size_t slot = down_off + down_bytes;
    const int n_expert = 5;
    std::vector<uint8_t> arena(slot * n_expert);
    std::vector<std::vector<uint8_t>> gates, ups, downs;
    for (int e = 0; e < n_expert; e++) {
        gates.push_back(random_rows(t, n_ff, d, uint32_t(200 + e)));
        ups.push_back(random_rows(t, n_ff, d, uint32_t(300 + e)));
        downs.push_back(random_rows(t, d, n_ff, uint32_t(400 + e)));
        memcpy(arena.data() + size_t(e) * slot, gates.back().data(), gate_bytes);
        memcpy(arena.data() + size_t(e) * slot + up_off, ups.back().data(), gate_bytes);
        memcpy(arena.data() + size_t(e) * slot + down_off, downs.back().data(), down_bytes);
    }
    DeviceBuffer darena(arena);
    std::vector<const uint8_t*> table;
    for (int e = 0; e < n_expert; e++) table.push_back(static_cast<const uint8_t*>(darena.p) + size_t(e) * slot);
    const std::vector<int32_t> ids = {3, 0, 4};
    const std::vector<float> weights = {0.5f, 0.3f, 0.2f};
    const std::vector<float> x = randoms(size_t(d), 11), resid = randoms(size_t(d), 12);
    DeviceBuffer dtable(table), dids(ids), dw(weights), dx(x), dres(resid), dh(ids.size() * size_t(n_ff) * 4);
    const auto* tp = static_cast<const uint8_t* const*>(dtable.p);
    const auto* ip = static_cast<const int32_t*>(dids.p);
    gpu::expert_gate_up(t, tp, ip, int(ids.size()), 0, up_off, n_ff, d, dx.f(), dh.f(), nullptr);
    const std::vector<float> h = dh.get<float>();
    std::vector<double> ref_h, ref_x(resid.begin(), resid.end());
    for (size_t i = 0; i < ids.size(); i++) {
        const std::vector<double> g = reference_matvec(t, gates[size_t(ids[i])], n_ff, d, x.data());
        const std::vector<double> u = reference_matvec(t, ups[size_t(ids[i])], n_ff, d, x.data());
        std::vector<float> gf(g.begin(), g.end()), uf(u.begin(), u.end()), hf(gf.size());
        swiglu(gf.data(), uf.data(), int64_t(gf.size()), hf.data());
        ref_h.insert(ref_h.end(), hf.begin(), hf.end());
    }
    EXPECT_LT(rel_err(h, ref_h), 1e-5) << "gate/up";
    // With the next norm after it (gpu::Epilogue), checked against ops' norm
    // of the sum it wrote.
    DeviceBuffer counter(std::vector<int32_t>{0}), dnw(randoms(size_t(d), 13)), dnormed(size_t(d) * 4);
    gpu::Epilogue then;
    then.counter = static_cast<int*>(counter.p);
    then.x = dres.f();
    then.w = dnw.f();
    then.out = dnormed.f();
    then.width = d;
    then.eps = 1e-6f;
    gpu::expert_down_add(t, tp, ip, int(ids.size()), down_off, d, n_ff, dh.f(), dw.f(), dres.f(), nullptr, then);
    for (size_t i = 0; i < ids.size(); i++) {
        const std::vector<double> y = reference_matvec(t, downs[size_t(ids[i])], d, n_ff, h.data() + i * n_ff);
        for (int64_t r = 0; r < d; r++) ref_x[size_t(r)] += weights[i] * y[size_t(r)];
    }
    const std::vector<float> sum = dres.get<float>(), nw = dnw.get<float>();
    EXPECT_LT(rel_err(sum, ref_x), 1e-5) << "down + weighted sum";
    std::vector<float> normed(sum.size());
    rms_norm(sum.data(), nw.data(), d, 1e-6f, normed.data());
    EXPECT_LT(rel_err(dnormed.get<float>(), std::vector<double>(normed.begin(), normed.end())), 1e-6) << "norm after";
}

INSTANTIATE_TEST_SUITE_P(Types, Matvec,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K,
                                           GgmlType::Q5_K, GgmlType::Q6_K),
                         [](const auto& info) { return std::string(type_name(info.param)); });

// Three matrices of different types and row counts in one launch (q, k, v).
TEST(Kernels, MatvecMultiMatchesDequantizedReference) {
    SKIP_WITHOUT_GPU();
    const int64_t cols = 512;
    const GgmlType types[3] = {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q6_K};
    const int64_t rows[3] = {300, 64, 65};
    const std::vector<float> x = randoms(size_t(cols), 21);
    DeviceBuffer dx(x);
    std::vector<std::vector<uint8_t>> w;
    std::vector<std::unique_ptr<DeviceBuffer>> dw, dy;
    const void* wp[3];
    float* yp[3];
    for (int i = 0; i < 3; i++) {
        w.push_back(random_rows(types[i], rows[i], cols, uint32_t(30 + i)));
        dw.push_back(std::make_unique<DeviceBuffer>(w.back()));
        dy.push_back(std::make_unique<DeviceBuffer>(size_t(rows[i]) * 4));
        gpu::fill(dy.back()->p, 0xff, dy.back()->n, nullptr);
        wp[i] = dw.back()->p;
        yp[i] = dy.back()->f();
    }
    gpu::matvec_multi(3, types, wp, rows, cols, dx.f(), yp, nullptr);
    for (int i = 0; i < 3; i++) {
        const double e = rel_err(dy[size_t(i)]->get<float>(), reference_matvec(types[i], w[size_t(i)], rows[i], cols, x.data()));
        EXPECT_LT(e, 1e-5) << type_name(types[i]);
    }
}

// The work a launch's last block does after it (gpu::Epilogue): the next
// RMSNorm over the vector the launch added to, and top-k routing over the
// logits it wrote, against ops' norm and model/moe's routing of what the
// launch wrote; each launch twice, so the block counter must have gone back
// to 0 (a second launch that ran no epilogue would leave the first's output).
TEST(Kernels, EpiloguesMatchSeparateLaunches) {
    SKIP_WITHOUT_GPU();
    const int64_t rows = 2048, cols = 512;
    DeviceBuffer counter(std::vector<int32_t>{0});
    const std::vector<uint8_t> w = random_rows(GgmlType::Q4_K, rows, cols, 41);
    const std::vector<float> nw = randoms(size_t(rows), 42);
    DeviceBuffer dw(w), dnw(nw), dy(size_t(rows) * 4), dout(size_t(rows) * 4);
    for (int round = 0; round < 2; round++) {
        const std::vector<float> x = randoms(size_t(cols), uint32_t(43 + round)), y0 = randoms(size_t(rows), 45);
        DeviceBuffer dx(x), dres(y0);
        gpu::Epilogue e;
        e.counter = static_cast<int*>(counter.p);
        e.x = dres.f();
        e.w = dnw.f();
        e.out = dout.f();
        e.width = rows;
        e.eps = 1e-6f;
        gpu::matvec(GgmlType::Q4_K, dw.p, rows, cols, dx.f(), dres.f(), nullptr, true, e);
        const std::vector<float> y = dres.get<float>();
        std::vector<double> ref = reference_matvec(GgmlType::Q4_K, w, rows, cols, x.data());
        for (int64_t r = 0; r < rows; r++) ref[size_t(r)] += y0[size_t(r)];
        EXPECT_LT(rel_err(y, ref), 1e-5) << "round " << round;
        std::vector<float> normed(y.size());
        rms_norm(y.data(), nw.data(), rows, 1e-6f, normed.data());
        EXPECT_LT(rel_err(dout.get<float>(), std::vector<double>(normed.begin(), normed.end())), 1e-6) << round;
        EXPECT_EQ(counter.get<int32_t>()[0], 0);
    }
    // The router: F32 logits of 128 experts, then the top 8.
    const int n_expert = 128, k = 8;
    const std::vector<uint8_t> rw = random_rows(GgmlType::F32, n_expert, cols, 46);
    DeviceBuffer drw(rw), dl(size_t(n_expert) * 4), dids(size_t(k) * 4), dwt(size_t(k) * 4);
    for (int round = 0; round < 2; round++) {
        DeviceBuffer dx(randoms(size_t(cols), uint32_t(47 + round)));
        gpu::Epilogue e;
        e.counter = static_cast<int*>(counter.p);
        e.k = k;
        e.renorm = true;
        e.ids = static_cast<int32_t*>(dids.p);
        e.weights = dwt.f();
        gpu::matvec(GgmlType::F32, drw.p, n_expert, cols, dx.f(), dl.f(), nullptr, false, e);
        const std::vector<float> logits = dl.get<float>();
        std::vector<int32_t> ids(static_cast<size_t>(k));
        std::vector<float> wt(static_cast<size_t>(k));
        route_softmax_topk(logits.data(), 1, n_expert, k, true, ids.data(), wt.data());
        EXPECT_EQ(dids.get<int32_t>(), ids) << round;
        EXPECT_LT(rel_err(dwt.get<float>(), std::vector<double>(wt.begin(), wt.end())), 1e-6) << round;
    }
}

TEST(Kernels, RmsNormMatchesOps) {
    SKIP_WITHOUT_GPU();
    const int64_t rows = 5, width = 2048;
    const std::vector<float> x = randoms(size_t(rows * width), 1, 3.0f), w = randoms(size_t(width), 2);
    DeviceBuffer dx(x), dw(w), dy(x.size() * 4);
    gpu::rms_norm(dx.f(), dw.f(), rows, width, 1e-6f, dy.f(), nullptr);
    const std::vector<float> got = dy.get<float>();
    std::vector<double> ref(x.size());
    std::vector<float> row(static_cast<size_t>(width), 0.0f);
    for (int64_t r = 0; r < rows; r++) {
        rms_norm(x.data() + r * width, w.data(), width, 1e-6f, row.data());
        for (int64_t i = 0; i < width; i++) ref[size_t(r * width + i)] = row[size_t(i)];
    }
    EXPECT_LT(rel_err(got, ref), 1e-6);
}

TEST(Kernels, QkNormRopeStoreMatchesOps) {
    SKIP_WITHOUT_GPU();
    const int n_head = 8, n_kv = 2, hd = 128, pos = 5;
    const Rope rope{hd, 1e6f, true};
    std::vector<float> q = randoms(size_t(n_head * hd), 1, 2.0f), k = randoms(size_t(n_kv * hd), 2, 2.0f),
                       v = randoms(size_t(n_kv * hd), 3), qn = randoms(size_t(hd), 4), kn = randoms(size_t(hd), 5),
                       cs(hd);
    rope_angles(rope, pos, cs.data());
    DeviceBuffer dq(q), dk(k), dv(v), dqn(qn), dkn(kn), dcs(cs), dpos(std::vector<int32_t>{pos}),
        kc(size_t((pos + 1) * n_kv * hd) * 4), vc(size_t((pos + 1) * n_kv * hd) * 4);
    gpu::qk_norm_rope_store(dq.f(), dk.f(), dv.f(), dqn.f(), dkn.f(), n_head, n_kv, hd, hd, 1e-6f, dcs.f(), kc.f(),
                            vc.f(), static_cast<const int32_t*>(dpos.p), nullptr);
    for (int h = 0; h < n_head; h++) rms_norm(q.data() + h * hd, qn.data(), hd, 1e-6f, q.data() + h * hd);
    for (int h = 0; h < n_kv; h++) rms_norm(k.data() + h * hd, kn.data(), hd, 1e-6f, k.data() + h * hd);
    rope_apply(rope, cs.data(), q.data(), n_head, hd);
    rope_apply(rope, cs.data(), k.data(), n_kv, hd);
    EXPECT_LT(rel_err(dq.get<float>(), std::vector<double>(q.begin(), q.end())), 1e-6);
    const std::vector<float> krow = kc.get<float>(), vrow = vc.get<float>();
    const size_t at = size_t(pos * n_kv * hd);
    EXPECT_LT(rel_err(std::vector<float>(krow.begin() + long(at), krow.end()), std::vector<double>(k.begin(), k.end())),
              1e-6);
    EXPECT_EQ(std::vector<float>(vrow.begin() + long(at), vrow.end()), v);
}

TEST(Kernels, AttentionMatchesDoubleReference) {
    SKIP_WITHOUT_GPU();
    const int n_head = 8, n_kv = 2, hd = 64;
    for (int n_pos : {1, 33, 5000}) {
        const std::vector<float> q = randoms(size_t(n_head * hd), 1),
                                 k = randoms(size_t(n_pos) * n_kv * hd, 2), v = randoms(size_t(n_pos) * n_kv * hd, 3);
        const float scale = 1.0f / std::sqrt(float(hd));
        DeviceBuffer dq(q), dk(k), dv(v), dout(size_t(n_head * hd) * 4), dpos(std::vector<int32_t>{n_pos - 1});
        gpu::prepare_attention(n_pos, hd);
        gpu::attention(dq.f(), dk.f(), dv.f(), static_cast<const int32_t*>(dpos.p), n_head, n_kv, hd, scale,
                       dout.f(), nullptr);
        std::vector<double> ref(size_t(n_head * hd));
        for (int h = 0; h < n_head; h++) {
            const int kvh = h / (n_head / n_kv);
            std::vector<double> s(static_cast<size_t>(n_pos));
            double mx = -INFINITY, sum = 0;
            for (int p = 0; p < n_pos; p++) {
                double d = 0;
                for (int i = 0; i < hd; i++) d += double(q[size_t(h * hd + i)]) * k[size_t((p * n_kv + kvh) * hd + i)];
                s[size_t(p)] = d * scale;
                mx = std::max(mx, s[size_t(p)]);
            }
            for (double& e : s) sum += (e = std::exp(e - mx));
            for (int i = 0; i < hd; i++) {
                double acc = 0;
                for (int p = 0; p < n_pos; p++) acc += s[size_t(p)] * v[size_t((p * n_kv + kvh) * hd + i)];
                ref[size_t(h * hd + i)] = acc / sum;
            }
        }
        EXPECT_LT(rel_err(dout.get<float>(), ref), 1e-5) << n_pos << " positions";
    }
}

TEST(Kernels, SwigluMatchesOps) {
    SKIP_WITHOUT_GPU();
    const int64_t n = 3000;
    const std::vector<float> g = randoms(size_t(n), 1, 4.0f), u = randoms(size_t(n), 2);
    DeviceBuffer dg(g), du(u), dh(size_t(n) * 4);
    gpu::swiglu(dg.f(), du.f(), n, dh.f(), nullptr);
    std::vector<float> h(static_cast<size_t>(n));
    swiglu(g.data(), u.data(), n, h.data());
    EXPECT_LT(rel_err(dh.get<float>(), std::vector<double>(h.begin(), h.end())), 1e-6);
}

TEST(Kernels, RoutingMatchesModel) {
    SKIP_WITHOUT_GPU();
    for (auto [n_expert, k] : {std::pair<int, int>{8, 2}, {128, 8}, {512, 10}}) {
        const std::vector<float> logits = randoms(size_t(n_expert), uint32_t(n_expert));
        DeviceBuffer dl(logits), dids(size_t(k) * 4), dw(size_t(k) * 4);
        gpu::route_softmax_topk(dl.f(), n_expert, k, true, static_cast<int32_t*>(dids.p), dw.f(), nullptr);
        std::vector<int32_t> ids(static_cast<size_t>(k));
        std::vector<float> w(static_cast<size_t>(k));
        route_softmax_topk(logits.data(), 1, n_expert, k, true, ids.data(), w.data());
        EXPECT_EQ(dids.get<int32_t>(), ids) << n_expert;
        EXPECT_LT(rel_err(dw.get<float>(), std::vector<double>(w.begin(), w.end())), 1e-6);
    }
}

}  // namespace
}  // namespace ms
