// The CUDA kernels against the CPU: quantized matrix-vector products against
// quant's dequantization (float x) and quant's dot products (8-bit x),
// norms, RoPE and SwiGLU against ops/, routing against model/moe's
// route_softmax_topk and route_experts, attention against a double
// reference; biases and the shared expert's gate. Skips, saying why, where
// no CUDA device is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "gpu/gpu.h"
#include "model/moe.h"
#include "ops/activation.h"
#include "ops/delta_rule.h"
#include "ops/gates.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/dot.h"
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
            case GgmlType::BF16: {
                const float f = scale(rng) * 50 - 0.5f;
                uint32_t u;
                memcpy(&u, &f, 4);
                const uint16_t h = uint16_t(u >> 16);
                memcpy(b, &h, 2);
                break;
            }
            case GgmlType::Q8_0: set_half(b); break;
            case GgmlType::Q4_K:
            case GgmlType::Q5_K: set_half(b), set_half(b + 2); break;  // d, dmin
            case GgmlType::Q6_K: set_half(b + offsetof(BlockQ6_K, d)); break;
            case GgmlType::MXFP4: b[0] = uint8_t(118 + rng() % 12); break;  // E8M0: 2^-9 .. 2^2
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

// 8-bit activations: the CPU's quantize_act (quant/dot.h) of the same x is
// the reference for quantize_act and for the norm's 8-bit output; the CPU's
// vec_dot of those bytes for every kernel that reads them.
struct CpuAct {
    std::shared_ptr<uint8_t> p;
    size_t row = 0;
    CpuAct(GgmlType weight, const float* x, int64_t n, int64_t rows) : row(act_bytes(weight, n)) {
        p.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (row * size_t(rows) + 63) & ~size_t(63))), free);
        quantize_acts(weight, x, p.get(), n, rows);
    }
    const uint8_t* at(int64_t r) const { return p.get() + size_t(r) * row; }
};

// y = W x from the CPU's kernels: x quantized for the weight type, then vec_dot.
std::vector<double> cpu_matvec(GgmlType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols, const float* x) {
    const CpuAct a(t, x, cols, 1);
    std::vector<double> y(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; r++) y[size_t(r)] = vec_dot(t, w.data() + size_t(r) * row_bytes(t, cols), a.at(0), cols);
    return y;
}

// The GPU's 8-bit rows of x (quantize_act), rows x n.
std::unique_ptr<DeviceBuffer> gpu_act(const DeviceBuffer& x, int64_t rows, int64_t n) {
    auto a = std::make_unique<DeviceBuffer>(gpu::act_bytes(n) * size_t(rows));
    gpu::quantize_act(x.f(), rows, n, a->p, nullptr);
    return a;
}

class Matvec : public ::testing::TestWithParam<GgmlType> {};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b);

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

// Expert slots as the VRAM cache lays them out: per expert, its gate
// matrix (n_ff x d), its up matrix and its down matrix (d x n_ff), each part
// 256-byte aligned; random rows from seeds base, base + 100, base + 200.
struct ExpertSlots {
    size_t gate_bytes, down_bytes, up_off, down_off, slot;
    std::vector<std::vector<uint8_t>> gates, ups, downs;
    std::vector<uint8_t> arena;
    ExpertSlots(GgmlType t, int64_t n_ff, int64_t d, int n_expert, uint32_t base)
        : gate_bytes(row_bytes(t, d) * size_t(n_ff)), down_bytes(row_bytes(t, n_ff) * size_t(d)),
          up_off((gate_bytes + 255) & ~size_t(255)), down_off(2 * up_off), slot(down_off + down_bytes),
          arena(slot * size_t(n_expert)) {
        for (int e = 0; e < n_expert; e++) {
            gates.push_back(random_rows(t, n_ff, d, base + uint32_t(e)));
            ups.push_back(random_rows(t, n_ff, d, base + 100 + uint32_t(e)));
            downs.push_back(random_rows(t, d, n_ff, base + 200 + uint32_t(e)));
            memcpy(arena.data() + size_t(e) * slot, gates.back().data(), gate_bytes);
            memcpy(arena.data() + size_t(e) * slot + up_off, ups.back().data(), gate_bytes);
            memcpy(arena.data() + size_t(e) * slot + down_off, downs.back().data(), down_bytes);
        }
    }
    // Each expert's slot address once the arena is at `device`.
    std::vector<const uint8_t*> table(const void* device) const {
        std::vector<const uint8_t*> t;
        for (size_t e = 0; e < arena.size() / slot; e++) t.push_back(static_cast<const uint8_t*>(device) + e * slot);
        return t;
    }
};

// The fused expert FFN halves against ops' SwiGLU and a double weighted sum
// of the dequantized products: gate and up are two slots' matrices (the
// table's slots hold one matrix each, so "up" is the next slot's), down a
// square matrix, as rows x cols = cols x cols.
TEST_P(Matvec, ExpertGateUpAndDownAdd) {
    SKIP_WITHOUT_GPU();
    const GgmlType t = GetParam();
    const int64_t n_ff = 256, d = 512;  // gate/up: n_ff x d; down: d x n_ff
    const ExpertSlots ex(t, n_ff, d, 5, 200);
    const auto &gates = ex.gates, &ups = ex.ups, &downs = ex.downs;
    const size_t up_off = ex.up_off, down_off = ex.down_off;
    DeviceBuffer darena(ex.arena);
    const std::vector<const uint8_t*> table = ex.table(darena.p);
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
    gpu::expert_down_add(t, tp, ip, int(ids.size()), down_off, d, n_ff, dh.f(), dw.f(), dres.f(), nullptr);
    for (size_t i = 0; i < ids.size(); i++) {
        const std::vector<double> y = reference_matvec(t, downs[size_t(ids[i])], d, n_ff, h.data() + i * n_ff);
        for (int64_t r = 0; r < d; r++) ref_x[size_t(r)] += weights[i] * y[size_t(r)];
    }
    EXPECT_LT(rel_err(dres.get<float>(), ref_x), 1e-5) << "down + weighted sum";
}

// gpt-oss's experts: bias rows per expert and the clamped activation,
// against ops' swiglu_oai over the dequantized products plus the biases;
// once with the table indexed by id, once by rank (a streamed layer's
// slots) with the ids in the extras.
TEST_P(Matvec, ExpertBiasesAndClampedActivation) {
    SKIP_WITHOUT_GPU();
    const GgmlType t = GetParam();
    const int64_t n_ff = 256, d = 512;
    const int n_expert = 5;
    const ExpertSlots ex(t, n_ff, d, n_expert, 300);
    DeviceBuffer darena(ex.arena);
    const std::vector<const uint8_t*> table = ex.table(darena.p);
    const std::vector<int32_t> ids = {3, 0, 4};
    std::vector<const uint8_t*> by_rank;
    for (int32_t id : ids) by_rank.push_back(table[size_t(id)]);
    const std::vector<float> weights = {0.5f, 0.3f, 0.2f};
    // Biases of a size that pushes some gate and up sums past the clamp.
    const std::vector<float> x = randoms(size_t(d), 41), resid = randoms(size_t(d), 42),
                             gb = randoms(size_t(n_expert * n_ff), 43, 6.0f),
                             ub = randoms(size_t(n_expert * n_ff), 44, 6.0f), db = randoms(size_t(n_expert * d), 45);
    DeviceBuffer dtable(table), drank(by_rank), dids(ids), dw(weights), dx(x), dgb(gb), dub(ub), ddb(db),
        dh(ids.size() * size_t(n_ff) * 4);
    std::vector<double> ref_h, ref_x(resid.begin(), resid.end());
    std::vector<float> hf_all;
    for (size_t i = 0; i < ids.size(); i++) {
        const int e = ids[i];
        const std::vector<double> g = reference_matvec(t, ex.gates[size_t(e)], n_ff, d, x.data());
        const std::vector<double> u = reference_matvec(t, ex.ups[size_t(e)], n_ff, d, x.data());
        std::vector<float> gf(static_cast<size_t>(n_ff)), uf(gf), hf(gf);
        for (int64_t r = 0; r < n_ff; r++) {
            gf[size_t(r)] = float(g[size_t(r)]) + gb[size_t(e * n_ff + r)];
            uf[size_t(r)] = float(u[size_t(r)]) + ub[size_t(e * n_ff + r)];
        }
        swiglu_oai(gf.data(), uf.data(), n_ff, 1.702f, 7.0f, hf.data());
        ref_h.insert(ref_h.end(), hf.begin(), hf.end());
        hf_all.insert(hf_all.end(), hf.begin(), hf.end());
    }
    size_t clamped = 0;
    for (size_t i = 0; i < ids.size(); i++) {
        const int e = ids[i];
        for (int64_t r = 0; r < n_ff; r++) clamped += std::fabs(gb[size_t(e * n_ff + r)]) > 7.0f;
        const std::vector<double> y = reference_matvec(t, ex.downs[size_t(e)], d, n_ff, hf_all.data() + i * n_ff);
        for (int64_t r = 0; r < d; r++) ref_x[size_t(r)] += weights[i] * (y[size_t(r)] + db[size_t(e * d + r)]);
    }
    ASSERT_GT(clamped, 10u) << "the biases should push some gate sums past the clamp";
    for (bool rank : {false, true}) {
        const auto* tp = static_cast<const uint8_t* const*>(rank ? drank.p : dtable.p);
        const int32_t* table_ids = rank ? nullptr : static_cast<const int32_t*>(dids.p);
        const gpu::ExpertExtras extras{dgb.f(), dub.f(), ddb.f(), rank ? static_cast<const int32_t*>(dids.p) : nullptr,
                                       true};
        DeviceBuffer dres(resid);
        gpu::expert_gate_up(t, tp, table_ids, int(ids.size()), 0, ex.up_off, n_ff, d, dx.f(), dh.f(), nullptr, extras);
        EXPECT_LT(rel_err(dh.get<float>(), ref_h), 1e-5) << "gate/up, by " << (rank ? "rank" : "id");
        gpu::expert_down_add(t, tp, table_ids, int(ids.size()), ex.down_off, d, n_ff, dh.f(), dw.f(), dres.f(), nullptr,
                             extras);
        EXPECT_LT(rel_err(dres.get<float>(), ref_x), 1e-5) << "down + bias + weighted sum, by " << (rank ? "rank" : "id");
    }
}

// Every weight type the kernels take (gpu::supports), named in test names.
const GgmlType kKernelTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                                 GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4};
std::string type_param_name(const ::testing::TestParamInfo<GgmlType>& info) { return type_name(info.param); }

INSTANTIATE_TEST_SUITE_P(Types, Matvec, ::testing::ValuesIn(kKernelTypes), type_param_name);

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
    // On 8-bit x, against the CPU's kernels.
    const auto act = gpu_act(dx, 1, cols);
    gpu::matvec_multi(3, types, wp, rows, cols, {dx.f(), act->p}, yp, nullptr);
    for (int i = 0; i < 3; i++) {
        const double e = rel_err(dy[size_t(i)]->get<float>(), cpu_matvec(types[i], w[size_t(i)], rows[i], cols, x.data()));
        EXPECT_LT(e, 1e-5) << type_name(types[i]) << " on 8-bit x";
    }
}


// Whether a row of the GPU's 8-bit form holds the CPU's Q8_K and Q8_0
// blocks of the same values: the scales bit for bit and the values equal,
// but for the rare value that lands within a rounding of a half (the CPU
// may fuse the multiply and the rounding's add) and so differs by one.
void expect_same_quantization(const uint8_t* g, const float* x, int64_t n, const char* what) {
    const CpuAct k(GgmlType::Q4_K, x, n, 1), z(GgmlType::Q8_0, x, n, 1);
    const auto* kb = reinterpret_cast<const BlockQ8_K*>(k.at(0));
    const auto* zb = reinterpret_cast<const BlockQ8_0*>(z.at(0));
    const auto* qk = reinterpret_cast<const int8_t*>(g);
    const auto* q0 = qk + n;
    const auto* dk = reinterpret_cast<const float*>(g + 2 * n);
    const auto* d0 = dk + n / 256;
    int off_by_one = 0;
    for (int64_t i = 0; i < n; i++) {
        const int a = qk[i] - kb[i / 256].qs[i % 256], b = q0[i] - zb[i / 32].qs[i % 32];
        ASSERT_LE(std::abs(a), 1) << what << " Q8_K value " << i;
        ASSERT_LE(std::abs(b), 1) << what << " Q8_0 value " << i;
        off_by_one += (a != 0) + (b != 0);
    }
    EXPECT_LE(off_by_one, n / 1000) << what;
    for (int64_t b = 0; b < n / 256; b++) EXPECT_EQ(dk[b], kb[b].d) << what << " Q8_K scale " << b;
    for (int64_t b = 0; b < n / 32; b++) EXPECT_EQ(d0[b], fp16_to_fp32(zb[b].d)) << what << " Q8_0 scale " << b;
}

TEST(Kernels, QuantizeActMatchesCpu) {
    SKIP_WITHOUT_GPU();
    const int64_t rows = 3, n = 2048;
    std::vector<float> x = randoms(size_t(rows * n), 51, 2.0f);
    x[300] = 0;  // a block of zeros, and one whose largest magnitude is a tie of opposite signs
    for (int i = 512; i < 768; i++) x[size_t(i)] = 0;
    x[1100] = 9.0f, x[1101] = -9.0f;
    DeviceBuffer dx(x);
    const auto act = gpu_act(dx, rows, n);
    const std::vector<uint8_t> got = act->get<uint8_t>();
    for (int64_t r = 0; r < rows; r++)
        expect_same_quantization(got.data() + size_t(r) * gpu::act_bytes(n), x.data() + r * n, n, "quantize_act");
    // The norm's 8-bit output: the CPU's quantization of the norm's floats.
    const std::vector<float> w = randoms(size_t(n), 52);
    DeviceBuffer dw(w), dout(size_t(rows * n) * 4), dact(gpu::act_bytes(n) * size_t(rows));
    gpu::rms_norm(dx.f(), dw.f(), rows, n, 1e-6f, dout.f(), nullptr, dact.p);
    const std::vector<float> out = dout.get<float>();
    const std::vector<uint8_t> nact = dact.get<uint8_t>();
    for (int64_t r = 0; r < rows; r++)
        expect_same_quantization(nact.data() + size_t(r) * gpu::act_bytes(n), out.data() + r * n, n, "rms_norm");
    // More rows than a launch's grid takes (MLA's prefill: a row a token and head).
    const int64_t many = 70000, w32 = 256;
    const std::vector<float> y = randoms(size_t(many * w32), 53);
    DeviceBuffer dy(y);
    const std::vector<uint8_t> ya = gpu_act(dy, many, w32)->get<uint8_t>();
    for (int64_t r : {int64_t(0), int64_t(65534), int64_t(65535), many - 1})
        expect_same_quantization(ya.data() + size_t(r) * gpu::act_bytes(w32), y.data() + r * w32, w32, "many rows");
}

class Matvec8 : public ::testing::TestWithParam<GgmlType> {};

TEST_P(Matvec8, MatchesCpuKernels) {
    SKIP_WITHOUT_GPU();
    const GgmlType t = GetParam();
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 256}, {515, 2048}, {64, 4096}, {2201, 512}}) {
        const std::vector<uint8_t> w = random_rows(t, rows, cols, uint32_t(rows * 7 + cols));
        const std::vector<float> x = randoms(size_t(cols), uint32_t(cols));
        DeviceBuffer dw(w), dx(x), dy(size_t(rows) * 4);
        const auto act = gpu_act(dx, 1, cols);
        gpu::fill(dy.p, 0xff, dy.n, nullptr);
        gpu::matvec(t, dw.p, rows, cols, {dx.f(), act->p}, dy.f(), nullptr);
        EXPECT_LT(rel_err(dy.get<float>(), cpu_matvec(t, w, rows, cols, x.data())), 1e-5)
            << type_name(t) << " " << rows << "x" << cols;
    }
}

// The expert kernels on 8-bit rows: per-expert inputs through the slot
// table, gate/up with SwiGLU, and down with the weighted sum.
TEST_P(Matvec8, ExpertKernelsMatchCpuKernels) {
    SKIP_WITHOUT_GPU();
    const GgmlType t = GetParam();
    const int64_t n_ff = 256, d = 512;
    const ExpertSlots ex(t, n_ff, d, 4, 500);
    const auto &gates = ex.gates, &ups = ex.ups, &downs = ex.downs;
    const size_t up_off = ex.up_off, down_off = ex.down_off;
    DeviceBuffer darena(ex.arena);
    const std::vector<const uint8_t*> table = ex.table(darena.p);
    const std::vector<int32_t> ids = {2, 0, 3};
    const int n = int(ids.size());
    const std::vector<float> weights = {0.5f, 0.3f, 0.2f};
    const std::vector<float> x = randoms(size_t(d), 61), xs = randoms(size_t(d) * ids.size(), 62),
                             resid = randoms(size_t(d), 63);
    DeviceBuffer dtable(table), dids(ids), dw(weights), dx(x), dxs(xs), dres(resid), dh(size_t(n * n_ff) * 4),
        dy(size_t(n * n_ff) * 4);
    const auto* tp = static_cast<const uint8_t* const*>(dtable.p);
    const auto* ip = static_cast<const int32_t*>(dids.p);
    const auto x8 = gpu_act(dx, 1, d), xs8 = gpu_act(dxs, n, d);
    gpu::matvec_experts(t, tp, ip, n, up_off, n_ff, d, {dxs.f(), xs8->p}, d, dy.f(), nullptr);
    gpu::expert_gate_up(t, tp, ip, n, 0, up_off, n_ff, d, {dx.f(), x8->p}, dh.f(), nullptr);
    const std::vector<float> y = dy.get<float>(), h = dh.get<float>();
    std::vector<double> ref_y, ref_h, ref_x(resid.begin(), resid.end());
    for (int i = 0; i < n; i++) {
        const auto e = size_t(ids[size_t(i)]);
        const std::vector<double> u = cpu_matvec(t, ups[e], n_ff, d, xs.data() + i * d);
        ref_y.insert(ref_y.end(), u.begin(), u.end());
        const std::vector<double> g = cpu_matvec(t, gates[e], n_ff, d, x.data()), u2 = cpu_matvec(t, ups[e], n_ff, d, x.data());
        std::vector<float> gf(g.begin(), g.end()), uf(u2.begin(), u2.end()), hf(gf.size());
        swiglu(gf.data(), uf.data(), int64_t(gf.size()), hf.data());
        ref_h.insert(ref_h.end(), hf.begin(), hf.end());
    }
    EXPECT_LT(rel_err(y, ref_y), 1e-5) << "experts, a row of x each";
    EXPECT_LT(rel_err(h, ref_h), 1e-5) << "gate/up";
    const auto h8 = gpu_act(dh, n, n_ff);
    gpu::expert_down_add(t, tp, ip, n, down_off, d, n_ff, {dh.f(), h8->p}, dw.f(), dres.f(), nullptr);
    for (int i = 0; i < n; i++) {
        const std::vector<double> r = cpu_matvec(t, downs[size_t(ids[size_t(i)])], d, n_ff, h.data() + i * n_ff);
        for (int64_t j = 0; j < d; j++) ref_x[size_t(j)] += weights[size_t(i)] * r[size_t(j)];
    }
    EXPECT_LT(rel_err(dres.get<float>(), ref_x), 1e-5) << "down + weighted sum";
}

INSTANTIATE_TEST_SUITE_P(Types, Matvec8,
                         ::testing::Values(GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                                           GgmlType::MXFP4),
                         type_param_name);

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

// Attention that norms, rotates and stores the new position's rows itself
// (FreshRow) against qk_norm_rope_store then attention: the same output and
// cache rows, q left as the q/k/v matrices gave it; at positions 0 and 40
// (the new row in the first and in the ninth of the 16 splits).
TEST(Kernels, AttentionWithFreshRowMatchesTwoLaunches) {
    SKIP_WITHOUT_GPU();
    const int n_head = 8, n_kv = 2, hd = 128, rows = 48;
    const Rope rope{hd, 1e6f, true};
    for (int pos : {0, 40}) {
        const std::vector<float> q = randoms(size_t(n_head * hd), 1, 2.0f), k = randoms(size_t(n_kv * hd), 2, 2.0f),
                                 v = randoms(size_t(n_kv * hd), 3), qn = randoms(size_t(hd), 4),
                                 kn = randoms(size_t(hd), 5), cache = randoms(size_t(rows * n_kv * hd), 6);
        std::vector<float> cs(hd);
        rope_angles(rope, pos, cs.data());
        DeviceBuffer dq(q), dq2(q), dk(k), dv(v), dqn(qn), dkn(kn), dcs(cs), dpos(std::vector<int32_t>{pos}),
            kc(cache), vc(cache), kc2(cache), vc2(cache), out(size_t(n_head * hd) * 4), out2(size_t(n_head * hd) * 4),
            scratch(gpu::attention_scratch_bytes(n_head, hd));
        const int32_t* p = static_cast<const int32_t*>(dpos.p);
        const float scale = 1.0f / std::sqrt(float(hd));
        gpu::prepare_attention(rows, hd);
        gpu::qk_norm_rope_store(dq.f(), dk.f(), dv.f(), dqn.f(), dkn.f(), n_head, n_kv, hd, hd, 1e-6f, dcs.f(),
                                kc.f(), vc.f(), p, nullptr);
        gpu::attention(dq.f(), kc.f(), vc.f(), p, n_head, n_kv, hd, scale, scratch.f(), out.f(), nullptr);
        const gpu::FreshRow fresh{dk.f(), dv.f(), dqn.f(), dkn.f(), 1e-6f, dcs.f(), hd};
        gpu::attention(dq2.f(), kc2.f(), vc2.f(), p, n_head, n_kv, hd, scale, scratch.f(), out2.f(), nullptr, nullptr,
                       fresh);
        const std::vector<float> want = out.get<float>();
        EXPECT_LT(rel_err(out2.get<float>(), std::vector<double>(want.begin(), want.end())), 1e-6) << pos;
        const std::vector<float> kw = kc.get<float>(), kg = kc2.get<float>();
        EXPECT_LT(rel_err(kg, std::vector<double>(kw.begin(), kw.end())), 1e-6) << pos;
        EXPECT_EQ(vc2.get<float>(), vc.get<float>()) << pos;
        EXPECT_EQ(dq2.get<float>(), q) << pos;
    }
}

// Attention of one query row q (n_head heads of hd) over positions [first,
// n_pos) of k and v (rows of n_kv heads), in double; sinks: a logit a head
// joining the softmax without a value (or null).
std::vector<double> reference_attention(const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v, int n_head, int n_kv, int hd, float scale,
                                        int first, int n_pos, const float* sinks = nullptr) {
    std::vector<double> ref(size_t(n_head * hd));
    for (int h = 0; h < n_head; h++) {
        const int kvh = h / (n_head / n_kv);
        std::vector<double> s;
        double mx = sinks ? double(sinks[h]) : -INFINITY;
        for (int p = first; p < n_pos; p++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += double(q[size_t(h * hd + i)]) * k[size_t((p * n_kv + kvh) * hd + i)];
            s.push_back(d * scale);
            mx = std::max(mx, s.back());
        }
        double sum = sinks ? std::exp(double(sinks[h]) - mx) : 0.0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int i = 0; i < hd; i++) {
            double acc = 0;
            for (int p = first; p < n_pos; p++) acc += s[size_t(p - first)] * v[size_t((p * n_kv + kvh) * hd + i)];
            ref[size_t(h * hd + i)] = acc / sum;
        }
    }
    return ref;
}

TEST(Kernels, AttentionMatchesDoubleReference) {
    SKIP_WITHOUT_GPU();
    const int n_head = 8, n_kv = 2, hd = 64;
    for (int n_pos : {1, 33, 5000}) {
        const std::vector<float> q = randoms(size_t(n_head * hd), 1),
                                 k = randoms(size_t(n_pos) * n_kv * hd, 2), v = randoms(size_t(n_pos) * n_kv * hd, 3);
        const float scale = 1.0f / std::sqrt(float(hd));
        DeviceBuffer dq(q), dk(k), dv(v), dout(size_t(n_head * hd) * 4), dpos(std::vector<int32_t>{n_pos - 1}),
            scratch(gpu::attention_scratch_bytes(n_head, hd)), act(gpu::act_bytes(n_head * hd)),
            want_act(gpu::act_bytes(n_head * hd));
        gpu::prepare_attention(n_pos, hd);
        gpu::attention(dq.f(), dk.f(), dv.f(), static_cast<const int32_t*>(dpos.p), n_head, n_kv, hd, scale,
                       scratch.f(), dout.f(), nullptr, act.p);
        // The 8-bit row written with the output is quantize_act's of it.
        gpu::quantize_act(dout.f(), 1, n_head * hd, want_act.p, nullptr);
        EXPECT_EQ(act.get<uint8_t>(), want_act.get<uint8_t>()) << n_pos << " positions";
        const std::vector<double> ref = reference_attention(q, k, v, n_head, n_kv, hd, scale, 0, n_pos);
        EXPECT_LT(rel_err(dout.get<float>(), ref), 1e-5) << n_pos << " positions";
    }
}

// Multi-head latent attention's shape (one KV head whose rows are also the
// values, rows of 576, 16 query heads), over every position (a block a
// head): against the double reference, and three tokens in one launch bit
// for bit three launches of one. (Over chosen positions, several heads a
// block: AttentionOverChosenPositions.)
TEST(Kernels, AttentionOverSharedRowsMatchesDoubleReference) {
    SKIP_WITHOUT_GPU();
    const int n_head = 16, hd = 576, n_pos = 3000, n = 3;
    const std::vector<float> q = randoms(size_t(n * n_head * hd), 31), k = randoms(size_t(n_pos + n) * hd, 32);
    const float scale = 1.0f / std::sqrt(192.0f);
    gpu::prepare_attention(n_pos + n, hd);
    DeviceBuffer dq(q), dk(k), dout(size_t(n * n_head * hd) * 4), dpos(std::vector<int32_t>{n_pos - 1}),
        scratch(size_t(n) * gpu::attention_scratch_bytes(n_head, hd));
    gpu::attention(dq.f(), dk.f(), dk.f(), static_cast<const int32_t*>(dpos.p), n_head, 1, hd, scale, scratch.f(),
                   dout.f(), nullptr, nullptr, {}, n);
    const std::vector<float> all = dout.get<float>();
    for (int t = 0; t < n; t++) {
        const std::vector<float> qt(q.begin() + t * n_head * hd, q.begin() + (t + 1) * n_head * hd);
        DeviceBuffer one_q(qt), one_out(size_t(n_head * hd) * 4), one_pos(std::vector<int32_t>{n_pos - 1 + t});
        gpu::attention(one_q.f(), dk.f(), dk.f(), static_cast<const int32_t*>(one_pos.p), n_head, 1, hd, scale,
                       scratch.f(), one_out.f(), nullptr);
        const std::vector<float> one = one_out.get<float>();
        const std::vector<float> row(all.begin() + t * n_head * hd, all.begin() + (t + 1) * n_head * hd);
        EXPECT_EQ(memcmp(one.data(), row.data(), one.size() * 4), 0) << "token " << t;
        const std::vector<double> ref = reference_attention(qt, k, k, n_head, 1, hd, scale, 0, n_pos + t);
        EXPECT_LT(rel_err(one, ref), 1e-5) << "token " << t;
    }
}

// gpt-oss's attention: a sliding window and a sink logit a head, against
// the double reference; and n tokens in one launch against one launch a
// token, bit for bit.
TEST(Kernels, AttentionWindowAndSinks) {
    SKIP_WITHOUT_GPU();
    const int n_head = 8, n_kv = 2, hd = 64;
    const float scale = 1.0f / std::sqrt(float(hd));
    const std::vector<float> sinks = randoms(size_t(n_head), 7, 2.0f);
    DeviceBuffer dsinks(sinks);
    for (auto [n_pos, window] : {std::pair<int, int>{1, 8}, {33, 8}, {33, 0}, {5000, 128}, {5000, 4999}}) {
        const std::vector<float> q = randoms(size_t(n_head * hd), 1),
                                 k = randoms(size_t(n_pos) * n_kv * hd, 2), v = randoms(size_t(n_pos) * n_kv * hd, 3);
        DeviceBuffer dq(q), dk(k), dv(v), dout(size_t(n_head * hd) * 4), dpos(std::vector<int32_t>{n_pos - 1}),
            scratch(gpu::attention_scratch_bytes(n_head, hd));
        gpu::prepare_attention(n_pos, hd);
        gpu::attention(dq.f(), dk.f(), dv.f(), static_cast<const int32_t*>(dpos.p), n_head, n_kv, hd, scale,
                       scratch.f(), dout.f(), nullptr, nullptr, {}, 1, window, dsinks.f());
        const int first = window > 0 ? std::max(0, n_pos - window) : 0;
        const std::vector<double> ref =
            reference_attention(q, k, v, n_head, n_kv, hd, scale, first, n_pos, sinks.data());
        EXPECT_LT(rel_err(dout.get<float>(), ref), 1e-5) << n_pos << " positions, window " << window;
    }
    // 20 tokens after 30 cached positions, window 8: one launch against 20.
    const int pos0 = 30, n = 20, rows = pos0 + n, window = 8;
    const int64_t Q = n_head * hd, KV = n_kv * hd;
    const std::vector<float> q = randoms(size_t(n * Q), 8), cache = randoms(size_t(rows * KV), 9);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int i = 0; i < n; i++) pos[size_t(i)] = pos0 + i;
    DeviceBuffer dq(q), kc(cache), vc(randoms(size_t(rows * KV), 10)), dpos(pos), out(size_t(n * Q) * 4),
        out1(size_t(n * Q) * 4), scratch(size_t(n) * gpu::attention_scratch_bytes(n_head, hd));
    const int32_t* p = static_cast<const int32_t*>(dpos.p);
    gpu::prepare_attention(rows, hd);
    gpu::attention(dq.f(), kc.f(), vc.f(), p, n_head, n_kv, hd, scale, scratch.f(), out.f(), nullptr, nullptr, {}, n,
                   window, dsinks.f());
    for (int i = 0; i < n; i++) {
        gpu::attention(dq.f() + i * Q, kc.f(), vc.f(), p + i, n_head, n_kv, hd, scale, scratch.f(), out1.f() + i * Q,
                       nullptr, nullptr, {}, 1, window, dsinks.f());
    }
    EXPECT_TRUE(same_bits(out.get<float>(), out1.get<float>()));
}

// Llama 4's chunked attention: a query at p sees [p - p % chunk, p], against
// the double reference; 20 tokens in one launch against one a token.
TEST(Kernels, AttentionChunks) {
    SKIP_WITHOUT_GPU();
    const int n_head = 4, n_kv = 2, hd = 64, chunk = 8;
    const float scale = 1.0f / std::sqrt(float(hd));
    for (int n_pos : {1, 8, 9, 33, 40}) {
        const std::vector<float> q = randoms(size_t(n_head * hd), 11),
                                 k = randoms(size_t(n_pos) * n_kv * hd, 12), v = randoms(size_t(n_pos) * n_kv * hd, 13);
        DeviceBuffer dq(q), dk(k), dv(v), dout(size_t(n_head * hd) * 4), dpos(std::vector<int32_t>{n_pos - 1}),
            scratch(gpu::attention_scratch_bytes(n_head, hd));
        gpu::prepare_attention(n_pos, hd);
        gpu::attention(dq.f(), dk.f(), dv.f(), static_cast<const int32_t*>(dpos.p), n_head, n_kv, hd, scale,
                       scratch.f(), dout.f(), nullptr, nullptr, {}, 1, 0, nullptr, chunk);
        const int first = (n_pos - 1) - (n_pos - 1) % chunk;
        const std::vector<double> ref = reference_attention(q, k, v, n_head, n_kv, hd, scale, first, n_pos);
        EXPECT_LT(rel_err(dout.get<float>(), ref), 1e-5) << n_pos << " positions";
    }
    const int pos0 = 5, n = 20, rows = pos0 + n;
    const int64_t Q = n_head * hd, KV = n_kv * hd;
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int i = 0; i < n; i++) pos[size_t(i)] = pos0 + i;
    DeviceBuffer dq(randoms(size_t(n * Q), 14)), kc(randoms(size_t(rows * KV), 15)), vc(randoms(size_t(rows * KV), 16)),
        dpos(pos), out(size_t(n * Q) * 4), out1(size_t(n * Q) * 4),
        scratch(size_t(n) * gpu::attention_scratch_bytes(n_head, hd));
    const int32_t* p = static_cast<const int32_t*>(dpos.p);
    gpu::prepare_attention(rows, hd);
    gpu::attention(dq.f(), kc.f(), vc.f(), p, n_head, n_kv, hd, scale, scratch.f(), out.f(), nullptr, nullptr, {}, n, 0,
                   nullptr, chunk);
    for (int i = 0; i < n; i++) {
        gpu::attention(dq.f() + i * Q, kc.f(), vc.f(), p + i, n_head, n_kv, hd, scale, scratch.f(), out1.f() + i * Q,
                       nullptr, nullptr, {}, 1, 0, nullptr, chunk);
    }
    EXPECT_TRUE(same_bits(out.get<float>(), out1.get<float>()));
}

// Multi-head latent attention's prompt on tensor cores: n tokens after pos0
// cached rows, every head over one cache whose rows are keys and (their
// first v_dim) values, against the double reference: causal, and over each
// token's chosen positions. Shapes: the golden files' (4 heads, rows of 48
// or 96), DeepSeek V3's (128 heads, rows of 576, values 512: two blocks a
// token) and 16 and 96 heads (tokens sharing a block; a block part empty).
// Each operand is split into two f16 halves and each product takes three
// MMAs, so the bound is near float32's: one f16 MMA a product gave some
// 1e-3 here, which is what moved the golden deepseek3 file's logits.
TEST(Kernels, AttentionTiledSharedMatchesDoubleReference) {
    SKIP_WITHOUT_GPU();
    struct Shape {
        int n_head, k_dim, v_dim, pos0, n, top_k;  // top_k 0: causal
    };
    for (const Shape& c : {Shape{4, 48, 32, 0, 70, 0}, Shape{4, 96, 64, 9, 50, 16}, Shape{128, 576, 512, 37, 40, 0},
                           Shape{16, 576, 512, 0, 45, 0}, Shape{96, 576, 512, 300, 5, 0},
                           Shape{64, 576, 512, 100, 9, 64}, Shape{8, 160, 128, 3, 33, 0}}) {
        const int rows = c.pos0 + c.n;
        const int64_t Q = int64_t(c.n_head) * c.k_dim;
        const float scale = 1.0f / std::sqrt(float(c.k_dim));
        const std::vector<float> q = randoms(size_t(c.n * Q), 41, 2.0f), k = randoms(size_t(rows) * c.k_dim, 42, 2.0f);
        // Chosen: each token's top_k (or all, where fewer) of its positions,
        // in position order.
        std::vector<int32_t> chosen(size_t(c.n) * size_t(std::max(c.top_k, 1))), counts(size_t(c.n));
        std::mt19937 rng(43);
        for (int t = 0; c.top_k > 0 && t < c.n; t++) {
            std::vector<int32_t> all(size_t(c.pos0 + t + 1));
            for (size_t i = 0; i < all.size(); i++) all[i] = int32_t(i);
            std::shuffle(all.begin(), all.end(), rng);
            counts[size_t(t)] = std::min(c.top_k, int(all.size()));
            std::sort(all.begin(), all.begin() + counts[size_t(t)]);
            std::copy_n(all.begin(), counts[size_t(t)], chosen.begin() + int64_t(t) * c.top_k);
        }
        DeviceBuffer dq(q), dk(k), dpos(std::vector<int32_t>{c.pos0}), dchosen(chosen), dcount(counts),
            out(size_t(c.n) * c.n_head * c.v_dim * 4);
        const gpu::Chosen ch = c.top_k > 0 ? gpu::Chosen{static_cast<const int32_t*>(dchosen.p),
                                                        static_cast<const int32_t*>(dcount.p), c.top_k}
                                           : gpu::Chosen{};
        ASSERT_TRUE(gpu::attention_tiled_shared(dq.f(), dk.f(), static_cast<const int32_t*>(dpos.p), c.n_head,
                                                c.k_dim, c.v_dim, scale, out.f(), nullptr, c.n, ch));
        const std::vector<float> got = out.get<float>();
        std::vector<double> ref;
        for (int t = 0; t < c.n; t++) {
            const std::vector<float> qt(q.begin() + t * Q, q.begin() + (t + 1) * Q);
            std::vector<float> kr;
            int n_pos = c.pos0 + t + 1;
            if (c.top_k > 0) {
                n_pos = counts[size_t(t)];
                for (int j = 0; j < n_pos; j++) {
                    const float* r = k.data() + size_t(chosen[size_t(t * c.top_k + j)]) * c.k_dim;
                    kr.insert(kr.end(), r, r + c.k_dim);
                }
            }
            const std::vector<float>& keys = c.top_k > 0 ? kr : k;
            const std::vector<double> r = reference_attention(qt, keys, keys, c.n_head, 1, c.k_dim, scale, 0, n_pos);
            for (int h = 0; h < c.n_head; h++) {
                ref.insert(ref.end(), r.begin() + int64_t(h) * c.k_dim, r.begin() + int64_t(h) * c.k_dim + c.v_dim);
            }
        }
        EXPECT_LT(rel_err(got, ref), 2e-5) << c.n_head << " heads of " << c.k_dim << "/" << c.v_dim << ", " << c.n
                                           << " tokens after " << c.pos0 << ", top " << c.top_k;
    }
    DeviceBuffer b(size_t(4096));
    EXPECT_FALSE(gpu::attention_tiled_shared(b.f(), b.f(), nullptr, 4, 40, 32, 1.0f, b.f(), nullptr, 1));
    EXPECT_FALSE(gpu::attention_tiled_shared(b.f(), b.f(), nullptr, 4, 576, 96, 1.0f, b.f(), nullptr, 1));
    EXPECT_FALSE(gpu::attention_tiled_shared(b.f(), b.f(), nullptr, 4, 1024, 512, 1.0f, b.f(), nullptr, 1));
    EXPECT_FALSE(gpu::attention_tiled_shared(b.f(), b.f(), nullptr, 4, 592, 512, 1.0f, b.f(), nullptr, 1));
}

// MLA's expanded prompt form: k_b as float rows (each type it reads, bit
// for bit dequantize_row's values), each head's keys and values built from
// the compressed rows (mma_matmul_f32, in two chunks of positions to test
// `first`), split into planes with the rows' rope dims, and attention over
// them, against the latent form in double: q's nope part through k_b,
// attention over the compressed rows, the latent output through v_b. The
// two forms are the same sums regrouped, so only rounding parts them.
TEST(Kernels, AttentionExpandedMatchesLatentForm) {
    SKIP_WITHOUT_GPU();
    struct Shape {
        int n_head, nope, rope, v, kv_lora, pos0, n;
        GgmlType k_b;
    };
    for (const Shape& c : {Shape{4, 32, 16, 32, 32, 0, 70, GgmlType::Q8_0}, Shape{4, 32, 16, 32, 32, 9, 50, GgmlType::F32},
                           Shape{128, 128, 64, 128, 512, 37, 40, GgmlType::Q8_0},
                           Shape{16, 128, 64, 128, 512, 200, 65, GgmlType::BF16},
                           Shape{8, 128, 64, 128, 512, 3, 130, GgmlType::F16}}) {
        const int H = c.n_head, L = c.kv_lora, R = L + c.rope, QH = c.nope + c.rope, rows = c.pos0 + c.n;
        const float scale = 1.0f / std::sqrt(float(QH));
        const std::vector<uint8_t> k_b = random_rows(c.k_b, int64_t(H) * L, c.nope, 51);
        std::vector<float> kb(size_t(H) * L * c.nope);  // [h][j][i]
        for (int64_t r = 0; r < int64_t(H) * L; r++) {
            ASSERT_TRUE(dequantize_row(c.k_b, k_b.data() + size_t(r) * row_bytes(c.k_b, c.nope),
                                       kb.data() + size_t(r) * c.nope, c.nope));
        }
        const std::vector<float> v_b = randoms(size_t(H) * c.v * L, 52, 0.05f);  // [h][d][j]
        const std::vector<float> cache = randoms(size_t(rows) * R, 53), q = randoms(size_t(c.n) * H * QH, 54, 0.5f);
        // k_b's float rows: [h][i][j], each kb[h][j][i] as it is.
        DeviceBuffer dk_b(k_b), kb_rows(size_t(H) * c.nope * L * 4);
        gpu::mla_k_b_transposed(c.k_b, dk_b.p, H, L, c.nope, kb_rows.f(), nullptr);
        const std::vector<float> got_rows = kb_rows.get<float>();
        bool same = true;
        for (int h = 0; h < H; h++)
            for (int i = 0; i < c.nope; i++)
                for (int j = 0; j < L; j++)
                    same = same && memcmp(&got_rows[(size_t(h) * c.nope + i) * L + j],
                                          &kb[(size_t(h) * L + j) * c.nope + i], 4) == 0;
        EXPECT_TRUE(same) << type_name(c.k_b) << ": k_b's rows differ from dequantize_row's";
        // The compressed rows' latent parts, the keys' nope parts and the
        // values, in two chunks of positions.
        std::vector<float> lat(size_t(rows) * L);
        for (int p = 0; p < rows; p++) std::copy_n(cache.begin() + int64_t(p) * R, L, lat.begin() + int64_t(p) * L);
        DeviceBuffer dlat(lat), dcache(cache), dvb(v_b), dq(q), dpos(std::vector<int32_t>{c.pos0}),
            k_nope(size_t(rows) * H * c.nope * 4), vals(size_t(rows) * H * c.v * 4),
            planes(gpu::attention_expanded_scratch_bytes(rows, H, QH, c.v)), out(size_t(c.n) * H * c.v * 4);
        const int first = rows / 3;
        for (auto [p0, count] : {std::pair<int, int>{0, first}, {first, rows - first}}) {
            gpu::mma_matmul_f32(kb_rows.f(), int64_t(H) * c.nope, L, count, dlat.f() + int64_t(p0) * L, k_nope.f(),
                                nullptr, false);
            gpu::mma_matmul_f32(dvb.f(), int64_t(H) * c.v, L, count, dlat.f() + int64_t(p0) * L, vals.f(), nullptr,
                                false);
            gpu::mla_expand_planes(k_nope.f(), vals.f(), dcache.f(), p0, count, H, c.nope, c.rope, c.v, R, L, planes.p,
                                   nullptr);
        }
        ASSERT_TRUE(gpu::attention_expanded(dq.f(), planes.p, static_cast<const int32_t*>(dpos.p), H, QH, c.v, scale,
                                            out.f(), nullptr, c.n));
        const std::vector<float> got = out.get<float>();
        std::vector<double> ref;
        std::vector<float> q_lat(size_t(H) * R);
        for (int t = 0; t < c.n; t++) {
            for (int h = 0; h < H; h++) {
                const float* qh = q.data() + (int64_t(t) * H + h) * QH;
                for (int j = 0; j < L; j++) {
                    double acc = 0;
                    for (int i = 0; i < c.nope; i++) acc += double(kb[(size_t(h) * L + j) * c.nope + i]) * qh[i];
                    q_lat[size_t(h) * R + j] = float(acc);
                }
                std::copy_n(qh + c.nope, c.rope, q_lat.begin() + int64_t(h) * R + L);
            }
            const std::vector<double> r = reference_attention(q_lat, cache, cache, H, 1, R, scale, 0, c.pos0 + t + 1);
            for (int h = 0; h < H; h++) {
                for (int d = 0; d < c.v; d++) {
                    double acc = 0;
                    for (int j = 0; j < L; j++) acc += double(v_b[(size_t(h) * c.v + d) * L + j]) * r[size_t(h) * R + j];
                    ref.push_back(acc);
                }
            }
        }
        const double err = rel_err(got, ref);
        EXPECT_LT(err, 5e-5) << H << " heads of " << QH << "/" << c.v << ", " << c.n << " tokens after " << c.pos0;
        printf("expanded MLA %d heads of %d/%d (k_b %s), %d tokens after %d: rel err %.2e\n", H, QH, c.v,
               type_name(c.k_b), c.n, c.pos0, err);
    }
    EXPECT_FALSE(gpu::attention_expanded_supports(576, 512));
    EXPECT_FALSE(gpu::mla_k_b_transposable(GgmlType::Q4_K));
    DeviceBuffer b(size_t(4096));
    EXPECT_FALSE(gpu::attention_expanded(b.f(), b.p, nullptr, 4, 96, 64, 1.0f, b.f(), nullptr, 1));
    EXPECT_THROW(gpu::mla_k_b_transposed(GgmlType::Q4_K, b.p, 1, 32, 256, b.f(), nullptr), std::runtime_error);
}

// Prefill attention in tiles: n tokens after pos0 cached positions, each
// against the double reference over its own positions (causal, windows,
// chunks, sinks), across head sizes and query heads a KV head (1 to 64:
// from 64 tokens a block to one); its 8-bit rows are quantize_act's.
TEST(Kernels, AttentionTiledMatchesDoubleReference) {
    SKIP_WITHOUT_GPU();
    struct Shape {
        int n_head, n_kv, hd, pos0, n, window, chunk;
        bool sinks;
    };
    for (const Shape& c : {Shape{8, 2, 64, 0, 100, 0, 0, false}, Shape{32, 4, 128, 37, 200, 0, 0, false},
                           Shape{8, 8, 128, 5, 70, 16, 0, true}, Shape{12, 1, 256, 0, 40, 0, 8, false},
                           Shape{64, 1, 64, 3, 9, 0, 0, true}, Shape{8, 2, 64, 1000, 3, 128, 0, true},
                           Shape{32, 4, 128, 300, 130, 0, 0, true}, Shape{8, 2, 64, 0, 300, 50, 0, false},
                           Shape{16, 2, 256, 90, 70, 0, 0, false}}) {
        const int rows = c.pos0 + c.n;
        const int64_t Q = int64_t(c.n_head) * c.hd, KV = int64_t(c.n_kv) * c.hd;
        const float scale = 1.0f / std::sqrt(float(c.hd));
        const std::vector<float> q = randoms(size_t(c.n * Q), 21), k = randoms(size_t(rows * KV), 22),
                                 v = randoms(size_t(rows * KV), 23), sinks = randoms(size_t(c.n_head), 24, 2.0f);
        DeviceBuffer dq(q), dk(k), dv(v), dsinks(sinks), dpos(std::vector<int32_t>{c.pos0}),
            out(size_t(c.n * Q) * 4), act(size_t(c.n) * gpu::act_bytes(Q)), want_act(size_t(c.n) * gpu::act_bytes(Q)),
            planes(gpu::attention_tiled_scratch_bytes(rows, c.n_kv, c.hd));
        ASSERT_TRUE(gpu::attention_tiled(dq.f(), dk.f(), dv.f(), static_cast<const int32_t*>(dpos.p), c.n_head, c.n_kv,
                                         c.hd, scale, out.f(), nullptr, act.p, c.n, planes.p, c.window,
                                         c.sinks ? dsinks.f() : nullptr, c.chunk));
        const std::vector<float> got = out.get<float>();
        std::vector<double> ref;
        for (int t = 0; t < c.n; t++) {
            const int p = c.pos0 + t;
            const int first = c.window > 0 ? std::max(0, p - c.window + 1) : c.chunk > 0 ? p - p % c.chunk : 0;
            const std::vector<float> qt(q.begin() + t * Q, q.begin() + (t + 1) * Q);
            const std::vector<double> r = reference_attention(qt, k, v, c.n_head, c.n_kv, c.hd, scale, first, p + 1,
                                                              c.sinks ? sinks.data() : nullptr);
            ref.insert(ref.end(), r.begin(), r.end());
        }
        EXPECT_LT(rel_err(got, ref), 1e-5) << c.n_head << "/" << c.n_kv << " heads of " << c.hd << ", " << c.n
                                           << " tokens after " << c.pos0 << ", window " << c.window << ", chunk "
                                           << c.chunk;
        gpu::quantize_act(out.f(), c.n, Q, want_act.p, nullptr);
        EXPECT_EQ(act.get<uint8_t>(), want_act.get<uint8_t>());
    }
    // Shapes it does not take are left to attention().
    DeviceBuffer b(size_t(4096));
    EXPECT_FALSE(gpu::attention_tiled(b.f(), b.f(), b.f(), nullptr, 8, 2, 96, 1.0f, b.f(), nullptr, nullptr, 1, b.p));
    EXPECT_FALSE(gpu::attention_tiled(b.f(), b.f(), b.f(), nullptr, 128, 1, 64, 1.0f, b.f(), nullptr, nullptr, 1, b.p));
}

// Llama 4's expert inputs (each token's row times its routing weight) and
// its unroped layers' q temperature.
TEST(Kernels, WeightedRowsAndScaleBy) {
    SKIP_WITHOUT_GPU();
    const int n = 3, k = 2;
    const int64_t width = 300;
    const std::vector<float> x = randoms(size_t(n * width), 71), w = randoms(size_t(n * k), 72), f = randoms(size_t(n), 73);
    DeviceBuffer dx(x), dw(w), df(f), out(size_t(n * k * width) * 4), dy(x);
    gpu::weighted_rows(dx.f(), dw.f(), n, k, width, out.f(), nullptr);
    gpu::scale_by(dy.f(), width, df.f(), nullptr, n);
    std::vector<double> want, want_y;
    for (int t = 0; t < n; t++) {
        for (int r = 0; r < k; r++) {
            for (int64_t i = 0; i < width; i++) want.push_back(double(w[size_t(t * k + r)] * x[size_t(t * width + i)]));
        }
        for (int64_t i = 0; i < width; i++) want_y.push_back(double(x[size_t(t * width + i)] * f[size_t(t)]));
    }
    EXPECT_EQ(rel_err(out.get<float>(), want), 0.0);
    EXPECT_EQ(rel_err(dy.get<float>(), want_y), 0.0);
}

// The host's expert rows of a batched pass put into the rows the pass
// combines: rows it names take the source's, in any order; others keep
// what they held.
TEST(Kernels, ScatterRowsPutsEachRowWhereItIsNamed) {
    SKIP_WITHOUT_GPU();
    const int n = 3, dst_rows = 7;
    const int64_t width = 300;
    const std::vector<float> src = randoms(size_t(n * width), 81), before = randoms(size_t(dst_rows * width), 82);
    const std::vector<int32_t> rows = {5, 0, 3};
    DeviceBuffer ds(src), dr(rows), dd(before);
    gpu::scatter_rows(ds.f(), static_cast<const int32_t*>(dr.p), n, width, dd.f(), nullptr);
    std::vector<float> want = before;
    for (int i = 0; i < n; i++) {
        std::copy(src.begin() + i * width, src.begin() + (i + 1) * width, want.begin() + rows[size_t(i)] * width);
    }
    EXPECT_EQ(dd.get<float>(), want);
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

// gpt-oss's routing: the top k raw logits, a softmax over those k, against
// model/moe's route_experts; n tokens in one launch against one a token.
TEST(Kernels, SoftmaxOverChosenMatchesModel) {
    SKIP_WITHOUT_GPU();
    const int n = 5;
    for (auto [n_expert, k] : {std::pair<int, int>{8, 2}, {128, 4}}) {
        std::vector<float> logits = randoms(size_t(n * n_expert), uint32_t(n_expert) + 50);
        DeviceBuffer dl(logits), dids(size_t(n * k) * 4), dw(size_t(n * k) * 4), dids1(size_t(n * k) * 4),
            dw1(size_t(n * k) * 4);
        gpu::route_softmax_topk(dl.f(), n_expert, k, false, static_cast<int32_t*>(dids.p), dw.f(), nullptr, n, true);
        for (int i = 0; i < n; i++) {
            gpu::route_softmax_topk(dl.f() + i * n_expert, n_expert, k, false, static_cast<int32_t*>(dids1.p) + i * k,
                                    dw1.f() + i * k, nullptr, 1, true);
        }
        std::vector<int32_t> ids(size_t(n * k));
        std::vector<float> w(size_t(n * k));
        route_experts(Routing{Gating::SoftmaxChosen, false}, logits.data(), nullptr, n, n_expert, k, ids.data(),
                      w.data());
        EXPECT_EQ(dids.get<int32_t>(), ids) << n_expert;
        EXPECT_LT(rel_err(dw.get<float>(), std::vector<double>(w.begin(), w.end())), 1e-6) << n_expert;
        EXPECT_EQ(dids1.get<int32_t>(), ids) << n_expert;
        EXPECT_TRUE(same_bits(dw.get<float>(), dw1.get<float>())) << n_expert;
    }
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

// The operations kernels_layers.cu adds for the families beyond qwen3moe.
TEST(Kernels, RopeStoreMatchesOps) {
    SKIP_WITHOUT_GPU();
    const int n_head = 4, n_kv = 2, hd = 32, pos = 5;
    for (bool neox : {true, false}) {
        for (int n_rot : {hd, hd / 2}) {
            const Rope rope{n_rot, 1e4f, neox};
            std::vector<float> q = randoms(size_t(n_head * hd), 1, 2.0f), k = randoms(size_t(n_kv * hd), 2, 2.0f),
                               v = randoms(size_t(n_kv * hd), 3);
            std::vector<float> cs(static_cast<size_t>(n_rot));
            rope_angles(rope, pos, cs.data());
            DeviceBuffer dq(q), dk(k), dv(v), dcs(cs), dpos(std::vector<int32_t>{pos}),
                kc(size_t((pos + 1) * n_kv * hd) * 4), vc(size_t((pos + 1) * n_kv * hd) * 4);
            gpu::rope_store(dq.f(), dk.f(), dv.f(), n_head, n_kv, hd, n_rot, neox, dcs.f(), kc.f(), vc.f(),
                            static_cast<const int32_t*>(dpos.p), nullptr);
            rope_apply(rope, cs.data(), q.data(), n_head, hd);
            rope_apply(rope, cs.data(), k.data(), n_kv, hd);
            EXPECT_LT(rel_err(dq.get<float>(), std::vector<double>(q.begin(), q.end())), 1e-6) << neox << n_rot;
            const std::vector<float> krow = kc.get<float>(), vrow = vc.get<float>();
            const size_t at = size_t(pos * n_kv * hd);
            EXPECT_LT(rel_err(std::vector<float>(krow.begin() + long(at), krow.end()),
                              std::vector<double>(k.begin(), k.end())),
                      1e-6)
                << neox << n_rot;
            EXPECT_EQ(std::vector<float>(vrow.begin() + long(at), vrow.end()), v);
        }
    }
}

TEST(Kernels, SigmoidRoutingMatchesModel) {
    SKIP_WITHOUT_GPU();
    for (auto [n_expert, k] : {std::pair<int, int>{8, 2}, {16, 4}, {256, 8}}) {
        for (bool renorm : {false, true}) {
            const std::vector<float> logits = randoms(size_t(n_expert), uint32_t(n_expert)),
                                     bias = randoms(size_t(n_expert), 7, 0.1f);
            DeviceBuffer dl(logits), db(bias), dids(size_t(k) * 4), dw(size_t(k) * 4);
            gpu::route_sigmoid_topk(dl.f(), db.f(), n_expert, k, renorm, 2.5f, static_cast<int32_t*>(dids.p), dw.f(),
                                    nullptr);
            std::vector<float> scores = logits, w(static_cast<size_t>(k));
            std::vector<int32_t> ids(static_cast<size_t>(k));
            route_experts(Routing{Gating::Sigmoid, renorm, 2.5f}, scores.data(), bias.data(), 1, n_expert, k,
                          ids.data(), w.data());
            EXPECT_EQ(dids.get<int32_t>(), ids) << n_expert;
            EXPECT_LT(rel_err(dw.get<float>(), std::vector<double>(w.begin(), w.end())), 1e-6) << n_expert;
        }
    }
}

// DeepSeek V3's group-limited choice: 4 of 8 groups (and 2 of 4, as the
// golden deepseek3 routes), ties between groups included, against
// model/moe's route_experts.
TEST(Kernels, GroupLimitedRoutingMatchesModel) {
    SKIP_WITHOUT_GPU();
    for (auto [n_expert, k, groups, used] : {std::tuple<int, int, int, int>{16, 4, 4, 2}, {256, 8, 8, 4}}) {
        for (uint32_t seed : {1u, 2u, 3u}) {
            std::vector<float> logits = randoms(size_t(n_expert), seed * 17 + uint32_t(n_expert));
            if (seed == 3) {  // groups 0 and 1 alike: their sums tie
                for (int e = 0; e < n_expert / groups; e++) logits[size_t(n_expert / groups + e)] = logits[size_t(e)];
            }
            const std::vector<float> bias = seed == 3 ? std::vector<float>(size_t(n_expert), 0.0f)
                                                      : randoms(size_t(n_expert), seed, 0.1f);
            DeviceBuffer dl(logits), db(bias), dids(size_t(k) * 4), dw(size_t(k) * 4);
            gpu::route_sigmoid_topk(dl.f(), db.f(), n_expert, k, true, 2.5f, static_cast<int32_t*>(dids.p), dw.f(),
                                    nullptr, 1, groups, used);
            std::vector<float> scores = logits, w(static_cast<size_t>(k));
            std::vector<int32_t> ids(static_cast<size_t>(k));
            route_experts(Routing{Gating::Sigmoid, true, 2.5f, groups, used}, scores.data(), bias.data(), 1, n_expert,
                          k, ids.data(), w.data());
            EXPECT_EQ(dids.get<int32_t>(), ids) << n_expert << " seed " << seed;
            EXPECT_LT(rel_err(dw.get<float>(), std::vector<double>(w.begin(), w.end())), 1e-6) << n_expert;
        }
    }
}

// MLA's rope (each head's tail dims and k_pe) and the cache write, against
// ops' rope_apply, both pairings.
TEST(Kernels, MlaRopeStoreMatchesOps) {
    SKIP_WITHOUT_GPU();
    const int H = 4, nope = 32, rope_dims = 16, QH = nope + rope_dims, L = 32, R = L + rope_dims, pos = 3;
    for (bool neox : {false, true}) {
        const Rope rope{rope_dims, 1e4f, neox};
        std::vector<float> q = randoms(size_t(H * QH), 1), row = randoms(size_t(R), 2), cs(static_cast<size_t>(rope_dims));
        rope_angles(rope, pos, cs.data());
        DeviceBuffer dq(q), drow(row), dcs(cs), dpos(std::vector<int32_t>{pos}), cache(size_t((pos + 1) * R) * 4);
        gpu::mla_rope_store(dq.f(), H, QH, nope, drow.f(), R, L, rope_dims, neox, dcs.f(), cache.f(),
                            static_cast<const int32_t*>(dpos.p), nullptr);
        rope_apply(rope, cs.data(), q.data() + nope, H, QH);
        rope_apply(rope, cs.data(), row.data() + L, 1, rope_dims);
        EXPECT_LT(rel_err(dq.get<float>(), std::vector<double>(q.begin(), q.end())), 1e-6) << neox;
        const std::vector<float> c = cache.get<float>();
        EXPECT_LT(rel_err(std::vector<float>(c.begin() + pos * R, c.end()), std::vector<double>(row.begin(), row.end())),
                  1e-6)
            << neox;
    }
}

// DeepSeek sparse attention's indexer keys for three tokens: each key
// LayerNormed (no eps) and roped into its cache row, the queries' heads
// roped, the head weights scaled, against ops' layer_norm and rope_apply.
TEST(Kernels, IndexerKeysMatchOps) {
    SKIP_WITHOUT_GPU();
    const int H = 4, D = 64, n_rot = 32, n = 3, pos0 = 5;
    for (bool neox : {false, true}) {
        const Rope rope{n_rot, 1e6f, neox};
        std::vector<float> q = randoms(size_t(n * H * D), 1), k = randoms(size_t(n * D), 2, 3.0f),
                           w = randoms(size_t(n * H), 3), norm = randoms(size_t(D), 4), bias = randoms(size_t(D), 5),
                           cs(size_t(n * n_rot));
        for (int t = 0; t < n; t++) rope_angles(rope, pos0 + t, cs.data() + t * n_rot);
        DeviceBuffer dq(q), dk(k), dw(w), dnorm(norm), dbias(bias), dcs(cs), dpos(std::vector<int32_t>{pos0}),
            keys(size_t((pos0 + n) * D) * 4);
        gpu::indexer_keys(dq.f(), dk.f(), dw.f(), dnorm.f(), dbias.f(), H, D, n_rot, neox, dcs.f(), keys.f(),
                          static_cast<const int32_t*>(dpos.p), nullptr, n);
        std::vector<float> want_k(size_t(n * D));
        for (int t = 0; t < n; t++) {
            layer_norm(k.data() + t * D, norm.data(), bias.data(), D, 0.0f, want_k.data() + t * D);
            rope_apply(rope, cs.data() + t * n_rot, want_k.data() + t * D, 1, D);
            rope_apply(rope, cs.data() + t * n_rot, q.data() + t * H * D, H, D);
        }
        for (float& x : w) x *= 1.0f / std::sqrt(float(D * H));
        const std::vector<float> got = keys.get<float>();
        EXPECT_LT(rel_err(std::vector<float>(got.begin() + pos0 * D, got.end()),
                          std::vector<double>(want_k.begin(), want_k.end())),
                  1e-6)
            << neox;
        EXPECT_LT(rel_err(dq.get<float>(), std::vector<double>(q.begin(), q.end())), 1e-6) << neox;
        EXPECT_LT(rel_err(dw.get<float>(), std::vector<double>(w.begin(), w.end())), 1e-6) << neox;
    }
}

// The indexer's choice for three tokens over a cache where many keys repeat
// (equal scores, bit for bit, so ties are met): the scores against a double
// reference; the chosen positions exactly those the CPU's rule picks from
// those scores (the top_k by score, ties to the earlier position, in
// position order; every position while there are at most top_k).
TEST(Kernels, IndexerSelectMatchesTheCpuRule) {
    SKIP_WITHOUT_GPU();
    const int H = 8, D = 64, n = 3;
    for (const auto& [n_pos0, top_k] : {std::pair{4, 8}, std::pair{300, 8}, std::pair{5000, 2048}, std::pair{700, 64}}) {
        const int max_pos = n_pos0 + n + 7;
        std::vector<float> q = randoms(size_t(n * H * D), 11), w = randoms(size_t(n * H), 12),
                           base = randoms(size_t(97 * D), 13), keys(size_t(max_pos * D));
        for (int p = 0; p < max_pos; p++) std::copy_n(base.data() + (p % 97) * D, D, keys.data() + p * D);
        DeviceBuffer dq(q), dw(w), dkeys(keys), dpos(std::vector<int32_t>{n_pos0 - 1}),
            scores(size_t(n * max_pos) * 4), chosen(size_t(n * top_k) * 4), count(size_t(n) * 4);
        gpu::indexer_select(dq.f(), dw.f(), dkeys.f(), static_cast<const int32_t*>(dpos.p), H, D, top_k, max_pos,
                            scores.f(), static_cast<int32_t*>(chosen.p), static_cast<int32_t*>(count.p), nullptr, n);
        const std::vector<float> sc = scores.get<float>();
        const std::vector<int32_t> got = chosen.get<int32_t>(), got_n = count.get<int32_t>();
        for (int t = 0; t < n; t++) {
            const int n_pos = n_pos0 + t;
            std::vector<int32_t> want(static_cast<size_t>(n_pos));
            for (int p = 0; p < n_pos; p++) want[size_t(p)] = p;
            if (n_pos > top_k) {
                const float* row = sc.data() + size_t(t) * max_pos;
                std::vector<double> ref(static_cast<size_t>(n_pos));
                for (int p = 0; p < n_pos; p++) {
                    double s = 0;
                    for (int h = 0; h < H; h++) {
                        double d = 0;
                        for (int i = 0; i < D; i++) d += double(q[size_t((t * H + h) * D + i)]) * keys[size_t(p * D + i)];
                        s += double(w[size_t(t * H + h)]) * std::max(d, 0.0);
                    }
                    ref[size_t(p)] = s;
                }
                EXPECT_LT(rel_err(std::vector<float>(row, row + n_pos), ref), 1e-5) << n_pos;
                std::sort(want.begin(), want.end(), [&](int32_t a, int32_t b) {
                    return row[a] > row[b] || (row[a] == row[b] && a < b);
                });
                want.resize(size_t(top_k));
                std::sort(want.begin(), want.end());
            }
            ASSERT_EQ(got_n[size_t(t)], int32_t(want.size())) << n_pos << " positions, top " << top_k;
            EXPECT_EQ(std::vector<int32_t>(got.begin() + t * top_k, got.begin() + t * top_k + got_n[size_t(t)]), want)
                << n_pos << " positions, top " << top_k;
        }
    }
}

// Attention over chosen positions (sparse attention's) against the double
// reference over those positions' rows gathered in order, two tokens with
// their own choices in one launch: the golden files' shape (4 heads, rows
// of 96) and GLM-5's (rows of 576; 16 heads, so eight a block).
TEST(Kernels, AttentionOverChosenPositions) {
    SKIP_WITHOUT_GPU();
    for (const auto& [n_head, hd] : {std::pair{4, 96}, std::pair{16, 576}}) {
        const int n_pos = 600, top_k = 40, n = 2;
        const std::vector<float> q = randoms(size_t(n * n_head * hd), 21), k = randoms(size_t(n_pos + 1) * hd, 22);
        std::vector<int32_t> chosen(size_t(n * top_k));
        const std::vector<int32_t> counts = {top_k, 17};
        std::mt19937 rng(23);
        for (int t = 0; t < n; t++) {
            std::vector<int32_t> all(size_t(n_pos + t));
            for (size_t i = 0; i < all.size(); i++) all[i] = int32_t(i);
            std::shuffle(all.begin(), all.end(), rng);
            std::sort(all.begin(), all.begin() + counts[size_t(t)]);
            std::copy_n(all.begin(), counts[size_t(t)], chosen.begin() + t * top_k);
        }
        const float scale = 1.0f / std::sqrt(float(hd));
        DeviceBuffer dq(q), dk(k), dout(size_t(n * n_head * hd) * 4), dpos(std::vector<int32_t>{n_pos - 1, n_pos}),
            dchosen(chosen), dcount(counts), scratch(size_t(n) * gpu::attention_scratch_bytes(n_head, hd));
        gpu::prepare_attention(n_pos + 1, hd);
        gpu::attention(dq.f(), dk.f(), dk.f(), static_cast<const int32_t*>(dpos.p), n_head, 1, hd, scale,
                       scratch.f(), dout.f(), nullptr, nullptr, {}, n, 0, nullptr, 0, nullptr,
                       {static_cast<const int32_t*>(dchosen.p), static_cast<const int32_t*>(dcount.p), top_k});
        const std::vector<float> out = dout.get<float>();
        for (int t = 0; t < n; t++) {
            std::vector<float> rows;
            for (int j = 0; j < counts[size_t(t)]; j++) {
                const float* r = k.data() + size_t(chosen[size_t(t * top_k + j)]) * hd;
                rows.insert(rows.end(), r, r + hd);
            }
            const std::vector<float> qt(q.begin() + t * n_head * hd, q.begin() + (t + 1) * n_head * hd);
            const std::vector<double> ref =
                reference_attention(qt, rows, rows, n_head, 1, hd, scale, 0, counts[size_t(t)]);
            EXPECT_LT(rel_err(std::vector<float>(out.begin() + t * n_head * hd, out.begin() + (t + 1) * n_head * hd),
                              ref),
                      1e-5)
                << n_head << " heads of " << hd << ", token " << t;
        }
    }
}

TEST(Kernels, BiasAndSigmoidGatedAddMatchCpu) {
    SKIP_WITHOUT_GPU();
    const int64_t n = 1000;
    const std::vector<float> x = randoms(size_t(n), 1), b = randoms(size_t(n), 2), y = randoms(size_t(n), 3),
                             g = randoms(1, 4);
    DeviceBuffer dx(x), db(b), dy(y), dg(g);
    gpu::add(dx.f(), db.f(), n, nullptr);
    gpu::add_sigmoid_gated(dx.f(), dy.f(), dg.f(), n, nullptr);
    std::vector<double> ref(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); i++) ref[i] = double(x[i] + b[i]) + double(y[i]) * double(sigmoid(g[0]));
    EXPECT_LT(rel_err(dx.get<float>(), ref), 1e-6);
}

// Prefill's batched operations (gpu.h: matmul, the experts' tiles,
// attention over many tokens) against the one-token kernels decode runs,
// bit for bit: a prompt prefilled in one pass must leave the logits and KV
// rows a token-by-token pass leaves.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Rows [r0, r0 + n) of rows of `width` floats.
std::vector<float> rows_of(const std::vector<float>& v, int64_t width, int64_t r0, int64_t n) {
    return std::vector<float>(v.begin() + long(r0 * width), v.begin() + long((r0 + n) * width));
}

class Prefill : public ::testing::TestWithParam<GgmlType> {};

TEST_P(Prefill, MatmulMatchesMatvecBitForBit) {
    SKIP_WITHOUT_GPU();
    const GgmlType t = GetParam();
    const bool q8 = t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16;
    const int n = 13;  // a tile of 8 and a partial one
    // 37 rows: four warps share each row pair in matvec's launch; 2201: one.
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 256}, {2201, 512}}) {
        const std::vector<uint8_t> w = random_rows(t, rows, cols, uint32_t(rows + cols));
        const std::vector<float> x = randoms(size_t(n * cols), 3), y0 = randoms(size_t(n * rows), 4);
        DeviceBuffer dw(w), dx(x), dy(y0), dy1(y0), dm(size_t(n * rows) * 4), dm1(size_t(n * rows) * 4);
        const auto act = gpu_act(dx, n, cols);
        const size_t row8 = gpu::act_bytes(cols);
        auto xrow = [&](int i) -> gpu::Act {
            const float* f = dx.f() + i * cols;
            return q8 ? gpu::Act(f, static_cast<uint8_t*>(act->p) + size_t(i) * row8) : gpu::Act(f);
        };
        const gpu::Act all = q8 ? gpu::Act(dx.f(), act->p) : gpu::Act(dx.f());
        gpu::matmul(t, dw.p, rows, cols, n, all, dy.f(), nullptr, true, 1);
        gpu::matmul(t, dw.p, rows, cols, n, all, dm.f(), nullptr, false, 0);
        for (int i = 0; i < n; i++) {
            gpu::matvec(t, dw.p, rows, cols, xrow(i), dy1.f() + i * rows, nullptr, true);
            const void* wp = dw.p;
            float* yp = dm1.f() + i * rows;
            gpu::matvec_multi(1, &t, &wp, &rows, cols, xrow(i), &yp, nullptr);
        }
        EXPECT_TRUE(same_bits(dy.get<float>(), dy1.get<float>())) << type_name(t) << " " << rows << " as matvec";
        EXPECT_TRUE(same_bits(dm.get<float>(), dm1.get<float>())) << type_name(t) << " " << rows << " as matvec_multi";
    }
}

// Tiles of each expert's pairs, in token order, at most `per` a tile.
struct Tiles {
    std::vector<int32_t> tiles, in_row, out_row;
    Tiles(const std::vector<int32_t>& ids, int n_expert, int k, int per) {
        for (int e = 0; e < n_expert; e++) {
            const int first = int(in_row.size());
            for (size_t p = 0; p < ids.size(); p++) {
                if (ids[p] != e) continue;
                in_row.push_back(int32_t(p) / k);
                out_row.push_back(int32_t(p));
            }
            for (int j = first; j < int(in_row.size()); j += per) {
                tiles.insert(tiles.end(), {e, j, std::min(per, int(in_row.size()) - j)});
            }
        }
    }
};

TEST_P(Prefill, ExpertTilesMatchOneTokenKernelsBitForBit) {
    SKIP_WITHOUT_GPU();
    const GgmlType t = GetParam();
    const bool q8 = t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16;
    const int64_t n_ff = 256, d = 512;
    const int n_expert = 5, k = 3, n = 11;
    const ExpertSlots ex(t, n_ff, d, n_expert, 900);
    DeviceBuffer darena(ex.arena);
    DeviceBuffer dtable(ex.table(darena.p));
    const auto* tp = static_cast<const uint8_t* const*>(dtable.p);
    std::vector<int32_t> ids;  // k distinct experts a token
    std::mt19937 rng(5);
    for (int i = 0; i < n; i++) {
        std::vector<int32_t> all = {0, 1, 2, 3, 4};
        std::shuffle(all.begin(), all.end(), rng);
        ids.insert(ids.end(), all.begin(), all.begin() + k);
    }
    const std::vector<float> x = randoms(size_t(n * d), 21), weights = randoms(size_t(n * k), 22, 0.3f),
                             resid = randoms(size_t(n * d), 23);
    DeviceBuffer dids(ids), dx(x), dw(weights), dres(resid), dres1(resid), dh(size_t(n * k * n_ff) * 4),
        dh1(size_t(n * k * n_ff) * 4), du(size_t(n * k * n_ff) * 4), du1(size_t(n * k * n_ff) * 4),
        dout(size_t(n * k * d) * 4);
    const auto x8 = gpu_act(dx, n, d);
    auto act = [&](const DeviceBuffer& f, const DeviceBuffer* a, int64_t width, int64_t row) -> gpu::Act {
        const float* fp = f.f() + row * width;
        return q8 ? gpu::Act(fp, static_cast<uint8_t*>(a->p) + size_t(row) * gpu::act_bytes(width)) : gpu::Act(fp);
    };
    // And with gpt-oss's expert biases and clamped activation.
    const std::vector<float> gb = randoms(size_t(n_expert * n_ff), 24, 6.0f),
                             ub = randoms(size_t(n_expert * n_ff), 25, 6.0f), db = randoms(size_t(n_expert * d), 26);
    DeviceBuffer dgb(gb), dub(ub), ddb(db);
    for (int per : {1, gpu::kExpertTile, -1}) {
        const bool biased = per < 0;
        if (biased) per = gpu::kExpertTile;
        const gpu::ExpertExtras extras =
            biased ? gpu::ExpertExtras{dgb.f(), dub.f(), ddb.f(), nullptr, true} : gpu::ExpertExtras{};
        const Tiles tl(ids, n_expert, k, per);
        DeviceBuffer dtiles(tl.tiles), din(tl.in_row), dout_row(tl.out_row);
        const gpu::ExpertTiles tiles{static_cast<int32_t*>(dtiles.p), int(tl.tiles.size() / 3),
                                     static_cast<int32_t*>(din.p), static_cast<int32_t*>(dout_row.p)};
        // gate/up with SwiGLU, and the up matrix alone (as for experts whose gate and up differ in type)
        gpu::expert_gate_up_tokens(t, tp, tiles, 0, ex.up_off, n_ff, d, act(dx, x8.get(), d, 0), dh.f(), nullptr,
                                   extras);
        gpu::matmul_experts(t, tp, tiles, ex.up_off, n_ff, d, act(dx, x8.get(), d, 0), du.f(), nullptr, k);
        for (int i = 0; i < n; i++) {
            const int32_t* ip = static_cast<const int32_t*>(dids.p) + i * k;
            gpu::expert_gate_up(t, tp, ip, k, 0, ex.up_off, n_ff, d, act(dx, x8.get(), d, i), dh1.f() + i * k * n_ff,
                                nullptr, extras);
            gpu::matvec_experts(t, tp, ip, k, ex.up_off, n_ff, d, act(dx, x8.get(), d, i), 0, du1.f() + i * k * n_ff,
                                nullptr);
        }
        EXPECT_TRUE(same_bits(dh.get<float>(), dh1.get<float>()))
            << type_name(t) << " gate/up, tiles of " << per << (biased ? ", biased" : "");
        EXPECT_TRUE(same_bits(du.get<float>(), du1.get<float>())) << type_name(t) << " up, tiles of " << per;
        // down, then the weighted sum into the residual
        const auto h8 = gpu_act(dh, n * k, n_ff);
        const gpu::ExpertTiles down{tiles.tiles, tiles.n_tiles, tiles.out_row, tiles.out_row};
        gpu::matmul_experts(t, tp, down, ex.down_off, d, n_ff, act(dh, h8.get(), n_ff, 0), dout.f(), nullptr, 0);
        gpu::copy_to_device(dres.p, resid.data(), dres.n, nullptr);
        gpu::copy_to_device(dres1.p, resid.data(), dres1.n, nullptr);
        gpu::combine_experts(dout.f(), dw.f(), n, k, d, dres.f(), nullptr, extras.down_bias,
                             static_cast<const int32_t*>(dids.p));
        for (int i = 0; i < n; i++) {
            gpu::expert_down_add(t, tp, static_cast<const int32_t*>(dids.p) + i * k, k, ex.down_off, d, n_ff,
                                 act(dh, h8.get(), n_ff, int64_t(i) * k), dw.f() + i * k, dres1.f() + i * d, nullptr,
                                 extras);
        }
        EXPECT_TRUE(same_bits(dres.get<float>(), dres1.get<float>()))
            << type_name(t) << " down, tiles of " << per << (biased ? ", biased" : "");
    }
}

INSTANTIATE_TEST_SUITE_P(Types, Prefill, ::testing::ValuesIn(kKernelTypes), type_param_name);

// Prefill's tensor-core products (gpu.h: mma_*) against a double
// reference over quant's dequantization of the weights and of the 8-bit
// rows the kernels read (the GPU's quantize_act output, read back): equal
// but for float rounding. Shapes not multiples of the kernels' tiles (128
// rows, 32 inputs, 256 columns), one input, experts with more pairs than a
// tile and with none.
class TensorCore : public ::testing::TestWithParam<GgmlType> {};

// The values of the 8-bit rows (gpu.h's act_bytes layout) the weights of
// type t read: Q8_K for the K-quants, Q8_0 for Q8_0 and MXFP4.
std::vector<double> act_values(GgmlType t, const std::vector<uint8_t>& act, int64_t rows, int64_t n) {
    const bool k_quant = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
    std::vector<double> v(size_t(rows * n));
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t* base = act.data() + size_t(r) * gpu::act_bytes(n);
        const int8_t* q = reinterpret_cast<const int8_t*>(base) + (k_quant ? 0 : n);
        const float* scales = reinterpret_cast<const float*>(base + 2 * n);
        for (int64_t i = 0; i < n; i++) {
            const float d = k_quant ? scales[i / 256] : scales[n / 256 + i / 32];
            v[size_t(r * n + i)] = double(q[i]) * double(d);
        }
    }
    return v;
}

// Row t of the outputs: W . x row in_rows[t] in double.
std::vector<double> reference_rows(GgmlType t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                                   const std::vector<double>& x, const std::vector<int>& in_rows) {
    std::vector<float> row(static_cast<size_t>(cols));
    std::vector<double> y(in_rows.size() * size_t(rows));
    for (int64_t r = 0; r < rows; r++) {
        EXPECT_TRUE(dequantize_row(t, w.data() + size_t(r) * row_bytes(t, cols), row.data(), cols));
        for (size_t j = 0; j < in_rows.size(); j++) {
            double s = 0;
            for (int64_t i = 0; i < cols; i++) s += double(row[size_t(i)]) * x[size_t(in_rows[j] * cols + i)];
            y[j * size_t(rows) + size_t(r)] = s;
        }
    }
    return y;
}

// The largest |got - ref| over the largest |ref| (and over the relative L2
// error when that is larger).
double max_rel_err(const std::vector<float>& got, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!std::isfinite(got[i])) return INFINITY;
        num = std::max(num, std::fabs(got[i] - ref[i]));
        den = std::max(den, std::fabs(ref[i]));
    }
    return std::max(num / den, rel_err(got, ref));
}

TEST_P(TensorCore, DenseMatchesDequantizedReference) {
    SKIP_WITHOUT_GPU();
    const GgmlType t = GetParam();
    const bool k_quant = t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
    struct Shape {
        int64_t rows, cols;
        int n;
    };
    // cols 288: a partial 256-column chunk (the 32-block types only).
    const std::vector<Shape> shapes = k_quant ? std::vector<Shape>{{37, 256, 1}, {130, 512, 33}, {300, 2048, 70}}
                                              : std::vector<Shape>{{37, 256, 1}, {130, 288, 33}, {300, 2048, 70}};
    for (const Shape& sh : shapes) {
        const std::vector<uint8_t> w = random_rows(t, sh.rows, sh.cols, uint32_t(sh.rows * 3 + sh.cols));
        const std::vector<float> x = randoms(size_t(sh.n * sh.cols), 7, 2.0f), y0 = randoms(size_t(sh.n * sh.rows), 8);
        DeviceBuffer dw(w), dx(x), dy(size_t(sh.n * sh.rows) * 4), dadd(y0);
        const auto act = gpu_act(dx, sh.n, sh.cols);
        gpu::fill(dy.p, 0xff, dy.n, nullptr);
        gpu::mma_matmul(t, dw.p, sh.rows, sh.cols, sh.n, {dx.f(), act->p}, dy.f(), nullptr, false);
        gpu::mma_matmul(t, dw.p, sh.rows, sh.cols, sh.n, {dx.f(), act->p}, dadd.f(), nullptr, true);
        std::vector<int> in(size_t(sh.n));
        for (int i = 0; i < sh.n; i++) in[size_t(i)] = i;
        const std::vector<double> ref =
            reference_rows(t, w, sh.rows, sh.cols, act_values(t, act->get<uint8_t>(), sh.n, sh.cols), in);
        std::vector<double> ref_add(ref);
        for (size_t i = 0; i < ref.size(); i++) ref_add[i] += y0[i];
        const double err = max_rel_err(dy.get<float>(), ref), err_add = max_rel_err(dadd.get<float>(), ref_add);
        EXPECT_LT(err, 1e-5) << type_name(t) << " " << sh.rows << "x" << sh.cols << ", " << sh.n << " inputs";
        EXPECT_LT(err_add, 1e-5) << type_name(t) << " added, " << sh.rows << "x" << sh.cols;
        printf("tensor-core %s %lldx%lld, %d inputs: max rel err %.2e (added: %.2e)\n", type_name(t),
               (long long)sh.rows, (long long)sh.cols, sh.n, err, err_add);
    }
}

// Float32 weights on tensor cores in the split form: against the double
// reference within float32's rounding (the batch kernel's float sums are
// held to the same), set or added, for widths and counts that leave
// partial tiles of outputs (32 a block) and inputs (64), and a 128-expert
// router's shape over a pass.
TEST(TensorCore, Float32MatchesDoubleReference) {
    SKIP_WITHOUT_GPU();
    struct Shape {
        int64_t rows, cols;
        int n;
    };
    for (const Shape& sh : {Shape{37, 32, 1}, Shape{130, 96, 70}, Shape{128, 2048, 300}, Shape{5, 640, 129}}) {
        const std::vector<float> w = randoms(size_t(sh.rows * sh.cols), uint32_t(sh.rows + sh.cols), 0.05f);
        const std::vector<float> x = randoms(size_t(sh.n * sh.cols), 7, 2.0f), y0 = randoms(size_t(sh.n * sh.rows), 8);
        DeviceBuffer dw(w), dx(x), dy(size_t(sh.n * sh.rows) * 4), dadd(y0);
        gpu::fill(dy.p, 0xff, dy.n, nullptr);
        gpu::mma_matmul_f32(dw.f(), sh.rows, sh.cols, sh.n, dx.f(), dy.f(), nullptr, false);
        gpu::mma_matmul_f32(dw.f(), sh.rows, sh.cols, sh.n, dx.f(), dadd.f(), nullptr, true);
        std::vector<double> ref(size_t(sh.n * sh.rows)), ref_add(ref.size());
        for (int t = 0; t < sh.n; t++) {
            for (int64_t r = 0; r < sh.rows; r++) {
                double acc = 0;
                for (int64_t c = 0; c < sh.cols; c++) acc += double(w[size_t(r * sh.cols + c)]) * x[size_t(t * sh.cols + c)];
                ref[size_t(t * sh.rows + r)] = acc;
                ref_add[size_t(t * sh.rows + r)] = acc + y0[size_t(t * sh.rows + r)];
            }
        }
        const double err = max_rel_err(dy.get<float>(), ref), err_add = max_rel_err(dadd.get<float>(), ref_add);
        EXPECT_LT(err, 1e-5) << sh.rows << "x" << sh.cols << ", " << sh.n << " inputs";
        EXPECT_LT(err_add, 1e-5) << "added, " << sh.rows << "x" << sh.cols << ", " << sh.n << " inputs";
        printf("tensor-core F32 %lldx%lld, %d inputs: max rel err %.2e (added: %.2e)\n", (long long)sh.rows,
               (long long)sh.cols, sh.n, err, err_add);
    }
    DeviceBuffer b(size_t(4096));
    EXPECT_THROW(gpu::mma_matmul_f32(b.f(), 4, 40, 1, b.f(), b.f(), nullptr, false), std::runtime_error);
}

TEST_P(TensorCore, ExpertTilesMatchDequantizedReference) {
    SKIP_WITHOUT_GPU();
    const GgmlType t = GetParam();
    const int64_t n_ff = 256, d = 512;  // partial row blocks: the dense test's
    const int n_expert = 9, k = 3, n = 45;
    const ExpertSlots ex(t, n_ff, d, n_expert, 700);
    DeviceBuffer darena(ex.arena);
    DeviceBuffer dtable(ex.table(darena.p));
    const auto* tp = static_cast<const uint8_t* const*>(dtable.p);
    // Every token takes expert 0 (45 pairs: two tiles), two of experts 1-7;
    // expert 8 takes none.
    std::vector<int32_t> ids;
    std::mt19937 rng(9);
    for (int i = 0; i < n; i++) {
        std::vector<int32_t> rest = {1, 2, 3, 4, 5, 6, 7};
        std::shuffle(rest.begin(), rest.end(), rng);
        ids.insert(ids.end(), {0, rest[0], rest[1]});
    }
    const Tiles tl(ids, n_expert, k, gpu::kMmaTile);
    DeviceBuffer dtiles(tl.tiles), din(tl.in_row), dout_row(tl.out_row);
    const gpu::ExpertTiles tiles{static_cast<int32_t*>(dtiles.p), int(tl.tiles.size() / 3),
                                 static_cast<int32_t*>(din.p), static_cast<int32_t*>(dout_row.p)};
    const gpu::ExpertTiles down{tiles.tiles, tiles.n_tiles, tiles.out_row, tiles.out_row};
    const std::vector<float> x = randoms(size_t(n * d), 31, 2.0f);
    const std::vector<float> gb = randoms(size_t(n_expert * n_ff), 32, 3.0f), ub = randoms(size_t(n_expert * n_ff), 33);
    DeviceBuffer dx(x), dgb(gb), dub(ub), dh(size_t(n * k * n_ff) * 4), du(size_t(n * k * n_ff) * 4),
        dout(size_t(n * k * d) * 4);
    const auto x8 = gpu_act(dx, n, d);
    const std::vector<double> xv = act_values(t, x8->get<uint8_t>(), n, d);
    // Pair p's reference rows of expert ids[p]'s matrix `m`, input row in(p).
    auto expert_ref = [&](const std::vector<std::vector<uint8_t>>& m, int64_t rows, int64_t cols,
                          const std::vector<double>& in, bool own_rows) {
        std::vector<double> y(ids.size() * size_t(rows));
        for (size_t p = 0; p < ids.size(); p++) {
            const std::vector<double> r =
                reference_rows(t, m[size_t(ids[p])], rows, cols, in, {own_rows ? int(p) : int(p) / k});
            std::copy(r.begin(), r.end(), y.begin() + long(p * size_t(rows)));
        }
        return y;
    };
    const std::vector<double> g = expert_ref(ex.gates, n_ff, d, xv, false), u = expert_ref(ex.ups, n_ff, d, xv, false);
    gpu::fill(du.p, 0xff, du.n, nullptr);
    gpu::mma_matmul_experts(t, tp, tiles, ex.up_off, n_ff, d, {dx.f(), x8->p}, du.f(), nullptr);
    const double err_up = max_rel_err(du.get<float>(), u);
    EXPECT_LT(err_up, 1e-5) << type_name(t) << " up";
    for (bool biased : {false, true}) {
        const gpu::ExpertExtras extras =
            biased ? gpu::ExpertExtras{dgb.f(), dub.f(), nullptr, nullptr, true} : gpu::ExpertExtras{};
        gpu::mma_gate_up_experts(t, tp, tiles, 0, ex.up_off, n_ff, d, {dx.f(), x8->p}, dh.f(), nullptr, extras);
        std::vector<double> h(g.size());
        for (size_t p = 0; p < ids.size(); p++) {
            for (int64_t r = 0; r < n_ff; r++) {
                const size_t i = p * size_t(n_ff) + size_t(r), b = size_t(ids[p]) * size_t(n_ff) + size_t(r);
                const double gv = g[i] + (biased ? gb[b] : 0.0), uv = u[i] + (biased ? ub[b] : 0.0);
                h[i] = biased ? swiglu_oai_one(float(gv), float(uv), 1.702f, 7.0f) : gv / (1 + std::exp(-gv)) * uv;
            }
        }
        const double err = max_rel_err(dh.get<float>(), h);
        EXPECT_LT(err, biased ? 1e-4 : 1e-5) << type_name(t) << " gate/up" << (biased ? ", biased and clamped" : "");
        printf("tensor-core %s experts gate/up%s: max rel err %.2e (up alone %.2e)\n", type_name(t),
               biased ? " (biased, clamped)" : "", err, err_up);
    }
    // down over the hidden rows' 8-bit form
    const auto h8 = gpu_act(dh, n * k, n_ff);
    gpu::fill(dout.p, 0xff, dout.n, nullptr);
    gpu::mma_matmul_experts(t, tp, down, ex.down_off, d, n_ff, {dh.f(), h8->p}, dout.f(), nullptr);
    const std::vector<double> hv = act_values(t, h8->get<uint8_t>(), n * k, n_ff);
    const double err_down = max_rel_err(dout.get<float>(), expert_ref(ex.downs, d, n_ff, hv, true));
    EXPECT_LT(err_down, 1e-5) << type_name(t) << " down";
    printf("tensor-core %s experts down: max rel err %.2e\n", type_name(t), err_down);
}

TEST(TensorCoreTypes, RefusesWhatItDoesNotCover) {
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0}) EXPECT_FALSE(gpu::mma_supports(t));
    SKIP_WITHOUT_GPU();
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::MXFP4})
        EXPECT_TRUE(gpu::mma_supports(t));
    DeviceBuffer dw(size_t(4096)), dx(size_t(4096)), dy(size_t(4096));
    EXPECT_THROW(gpu::mma_matmul(GgmlType::F16, dw.p, 2, 256, 2, dx.f(), dy.f(), nullptr, false), std::runtime_error);
    EXPECT_THROW(gpu::mma_matmul(GgmlType::Q8_0, dw.p, 2, 256, 2, dx.f(), dy.f(), nullptr, false), std::runtime_error)
        << "float x";
}

INSTANTIATE_TEST_SUITE_P(Types, TensorCore,
                         ::testing::Values(GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                                           GgmlType::MXFP4),
                         type_param_name);

// n tokens at positions pos0 .. pos0 + n - 1 after pos0 cached rows: q/k
// norms, RoPE and the cache rows of all, then attention of all (in two
// launches of 12 and 8), against decode's fused launch token by token; and
// adjacent-pair RoPE without norms the same way.
TEST(Kernels, PrefillAttentionMatchesTokenByTokenBitForBit) {
    SKIP_WITHOUT_GPU();
    const int n_head = 8, n_kv = 2, hd = 128, pos0 = 30, n = 20, rows = pos0 + n;
    const int64_t Q = n_head * hd, KV = n_kv * hd;
    const Rope rope{hd, 1e6f, true};
    const std::vector<float> q = randoms(size_t(n * Q), 1, 2.0f), k = randoms(size_t(n * KV), 2, 2.0f),
                             v = randoms(size_t(n * KV), 3), qn = randoms(size_t(hd), 4), kn = randoms(size_t(hd), 5),
                             cache = randoms(size_t(rows * KV), 6);
    std::vector<float> cs(size_t(n * hd));
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int i = 0; i < n; i++) rope_angles(rope, pos0 + i, cs.data() + i * hd), pos[size_t(i)] = pos0 + i;
    DeviceBuffer dq(q), dq1(q), dk(k), dv(v), dqn(qn), dkn(kn), dcs(cs), dpos(pos), kc(cache), vc(cache), kc1(cache),
        vc1(cache), out(size_t(n * Q) * 4), out1(size_t(n * Q) * 4), act(size_t(n) * gpu::act_bytes(Q)),
        act1(size_t(n) * gpu::act_bytes(Q)), scratch(size_t(n) * gpu::attention_scratch_bytes(n_head, hd));
    const int32_t* p = static_cast<const int32_t*>(dpos.p);
    const float scale = 1.0f / std::sqrt(float(hd));
    gpu::prepare_attention(rows, hd);
    gpu::qk_norm_rope_store(dq.f(), dk.f(), dv.f(), dqn.f(), dkn.f(), n_head, n_kv, hd, hd, 1e-6f, dcs.f(), kc.f(),
                            vc.f(), p, nullptr, n);
    for (int a0 : {0, 12}) {
        const int na = a0 == 0 ? 12 : n - 12;
        gpu::attention(dq.f() + a0 * Q, kc.f(), vc.f(), p + a0, n_head, n_kv, hd, scale, scratch.f(), out.f() + a0 * Q,
                       nullptr, static_cast<uint8_t*>(act.p) + size_t(a0) * gpu::act_bytes(Q), {}, na);
    }
    for (int i = 0; i < n; i++) {
        const gpu::FreshRow fresh{dk.f() + i * KV, dv.f() + i * KV, dqn.f(), dkn.f(), 1e-6f, dcs.f() + i * hd, hd};
        gpu::attention(dq1.f() + i * Q, kc1.f(), vc1.f(), p + i, n_head, n_kv, hd, scale, scratch.f(),
                       out1.f() + i * Q, nullptr, static_cast<uint8_t*>(act1.p) + size_t(i) * gpu::act_bytes(Q), fresh);
    }
    EXPECT_TRUE(same_bits(out.get<float>(), out1.get<float>())) << "attention";
    EXPECT_EQ(act.get<uint8_t>(), act1.get<uint8_t>()) << "its 8-bit rows";
    EXPECT_TRUE(same_bits(kc.get<float>(), kc1.get<float>())) << "k rows";
    EXPECT_TRUE(same_bits(vc.get<float>(), vc1.get<float>())) << "v rows";

    // RoPE alone, adjacent pairs on half the dims.
    const Rope pairs{hd / 2, 1e4f, false};
    std::vector<float> cs2(size_t(n * hd / 2));
    for (int i = 0; i < n; i++) rope_angles(pairs, pos0 + i, cs2.data() + i * hd / 2);
    DeviceBuffer dcs2(cs2), dq2(q), dq3(q);
    gpu::rope_store(dq2.f(), dk.f(), dv.f(), n_head, n_kv, hd, hd / 2, false, dcs2.f(), kc.f(), vc.f(), p, nullptr, n);
    for (int i = 0; i < n; i++) {
        gpu::rope_store(dq3.f() + i * Q, dk.f() + i * KV, dv.f() + i * KV, n_head, n_kv, hd, hd / 2, false,
                        dcs2.f() + i * hd / 2, kc1.f(), vc1.f(), p + i, nullptr);
    }
    EXPECT_TRUE(same_bits(dq2.get<float>(), dq3.get<float>())) << "rope_store q";
    EXPECT_TRUE(same_bits(kc.get<float>(), kc1.get<float>())) << "rope_store k rows";
}

// Gated DeltaNet's convolution and recurrence (with the head norm and the
// z gate) over n tokens in one launch against n launches of one, bit for
// bit (states too), and against the CPU's operations (ops/delta_rule.h's
// step, ops' RMS norm) to float rounding; both beta/alpha layouts and both
// key-head pairings. Gated attention's q split and head gate too.
TEST(Kernels, DeltaNetMatchesCpuAndTokenByToken) {
    SKIP_WITHOUT_GPU();
    const int n = 6;
    for (bool fused : {false, true}) {
        gpu::DeltaNetDims d{2, 4, 32, 64, 4, fused, !fused};
        const int NK = d.n_k_heads, NV = d.n_v_heads, HK = d.head_k, HV = d.head_v, K = d.conv_kernel;
        const int64_t QK = int64_t(NK) * HK, VD = int64_t(NV) * HV, C = 2 * QK + VD;
        const std::vector<float> in = randoms(size_t(n * C), 61), taps = randoms(size_t(C * K), 62, 0.5f),
                                 z = randoms(size_t(n * VD), 63), ba = randoms(size_t(n * 2 * NV), 64),
                                 dt = randoms(size_t(NV), 65), norm = randoms(size_t(HV), 66);
        std::vector<float> a = randoms(size_t(NV), 67);
        for (float& v : a) v = -std::exp(v);  // ssm_a = -exp(A_log)
        const float eps = 1e-6f;
        DeviceBuffer din(in), dtaps(taps), dz(z), dba(ba), ddt(dt), da(a), dnorm(norm), conv(size_t(n * C) * 4),
            conv1(size_t(n * C) * 4), out(size_t(n * VD) * 4), out1(size_t(n * VD) * 4),
            cs(size_t((K - 1) * C) * 4), cs1(size_t((K - 1) * C) * 4), rs(size_t(VD * HK) * 4),
            rs1(size_t(VD * HK) * 4), ba1(size_t(n * 2 * NV) * 4);
        for (DeviceBuffer* b : {&cs, &cs1, &rs, &rs1}) gpu::fill(b->p, 0, b->n, nullptr);
        gpu::deltanet_conv(din.f(), dtaps.f(), K, C, n, cs.f(), conv.f(), nullptr);
        gpu::deltanet_recurrence(d, conv.f(), dz.f(), dba.f(), ddt.f(), da.f(), dnorm.f(), eps, n, rs.f(), out.f(),
                                 nullptr);
        // One token a launch: its beta/alpha row laid out as for n = 1.
        std::vector<float> ba_t(size_t(2 * NV));
        for (int t = 0; t < n; t++) {
            for (int h = 0; h < NV; h++) {
                if (fused) {
                    ba_t[size_t(h)] = ba[size_t(t * 2 * NV + h)];
                    ba_t[size_t(NV + h)] = ba[size_t(t * 2 * NV + NV + h)];
                } else {
                    ba_t[size_t(h)] = ba[size_t(t * NV + h)];
                    ba_t[size_t(NV + h)] = ba[size_t(n * NV + t * NV + h)];
                }
            }
            gpu::copy_to_device(ba1.f() + t * 2 * NV, ba_t.data(), ba_t.size() * 4, nullptr);
            gpu::deltanet_conv(din.f() + t * C, dtaps.f(), K, C, 1, cs1.f(), conv1.f() + t * C, nullptr);
            gpu::deltanet_recurrence(d, conv1.f() + t * C, dz.f() + t * VD, ba1.f() + t * 2 * NV, ddt.f(), da.f(),
                                     dnorm.f(), eps, 1, rs1.f(), out1.f() + t * VD, nullptr);
        }
        EXPECT_TRUE(same_bits(out.get<float>(), out1.get<float>())) << "fused " << fused;
        EXPECT_TRUE(same_bits(rs.get<float>(), rs1.get<float>())) << "fused " << fused;
        EXPECT_TRUE(same_bits(cs.get<float>(), cs1.get<float>())) << "fused " << fused;

        // The CPU: convolution and SiLU, per-head L2 norms, the delta rule
        // step, the head's RMS norm times silu(z).
        std::vector<float> seq(size_t((K - 1 + n) * C), 0.0f), S(size_t(VD * HK), 0.0f), o(static_cast<size_t>(HV));
        std::copy(in.begin(), in.end(), seq.begin() + (K - 1) * C);
        std::vector<double> ref;
        const int ratio = NV / NK;
        for (int t = 0; t < n; t++) {
            std::vector<float> cv(static_cast<size_t>(C));
            for (int64_t c = 0; c < C; c++) {
                float acc = 0;
                for (int j = 0; j < K; j++) acc += taps[size_t(c * K + j)] * seq[size_t((t + j) * C + c)];
                cv[size_t(c)] = acc / (1.0f + std::exp(-acc));
            }
            for (int h = 0; h < 2 * NK; h++) {
                double ss = 0;
                for (int i = 0; i < HK; i++) ss += double(cv[size_t(h * HK + i)]) * cv[size_t(h * HK + i)];
                const float inv = 1.0f / std::max(float(std::sqrt(ss)), 1e-6f);
                for (int i = 0; i < HK; i++) cv[size_t(h * HK + i)] *= inv;
            }
            for (int h = 0; h < NV; h++) {
                const int kh = fused ? h / ratio : h % NK;
                const float b = fused ? ba[size_t(t * 2 * NV + (h / ratio) * 2 * ratio + h % ratio)]
                                      : ba[size_t(t * NV + h)];
                const float al = fused ? ba[size_t(t * 2 * NV + (h / ratio) * 2 * ratio + ratio + h % ratio)]
                                       : ba[size_t(n * NV + t * NV + h)];
                const float x = al + dt[size_t(h)];
                const float sp = x > 20.0f ? x : std::log1p(std::exp(x));
                delta_rule_step(S.data() + size_t(h) * HK * HV, HK, HV, cv.data() + kh * HK, cv.data() + QK + kh * HK,
                                cv.data() + 2 * QK + h * HV, sigmoid(b), std::exp(sp * a[size_t(h)]),
                                1.0f / std::sqrt(float(HK)), o.data());
                rms_norm(o.data(), norm.data(), HV, eps, o.data());
                for (int j = 0; j < HV; j++) {
                    const float zj = z[size_t(t * VD + h * HV + j)];
                    ref.push_back(o[size_t(j)] * (zj / (1.0f + std::exp(-zj))));
                }
            }
        }
        EXPECT_LT(rel_err(out.get<float>(), ref), 1e-5) << "fused " << fused;
    }
    // Gated attention: [q | gate] heads of 3 tokens.
    const int n_head = 4, hd = 64;
    const std::vector<float> qg = randoms(size_t(3 * 2 * n_head * hd), 68), att = randoms(size_t(3 * n_head * hd), 69);
    DeviceBuffer dqg(qg), dq(size_t(3 * n_head * hd) * 4), datt(att);
    gpu::split_gated_q(dqg.f(), n_head, hd, dq.f(), nullptr, 3);
    gpu::mul_sigmoid_heads(datt.f(), dqg.f(), n_head, hd, nullptr, 3);
    std::vector<double> want_q, want_att;
    for (int t = 0; t < 3; t++) {
        for (int h = 0; h < n_head; h++) {
            for (int i = 0; i < hd; i++) {
                const size_t g = size_t((t * n_head + h) * 2 * hd + i);
                want_q.push_back(qg[g]);
                want_att.push_back(att[size_t((t * n_head + h) * hd + i)] * sigmoid(qg[g + size_t(hd)]));
            }
        }
    }
    EXPECT_EQ(rel_err(dq.get<float>(), want_q), 0.0);
    EXPECT_LT(rel_err(datt.get<float>(), want_att), 1e-6);
}

TEST(Kernels, PrefillRoutingAndAddsMatchOneTokenBitForBit) {
    SKIP_WITHOUT_GPU();
    const int n = 9, n_expert = 128, k = 8;
    const std::vector<float> logits = randoms(size_t(n * n_expert), 31), bias = randoms(size_t(n_expert), 32, 0.1f);
    DeviceBuffer dl(logits), db(bias), ids(size_t(n * k) * 4), ids1(size_t(n * k) * 4), w(size_t(n * k) * 4),
        w1(size_t(n * k) * 4);
    for (bool sigmoid : {false, true}) {
        if (sigmoid) {
            gpu::route_sigmoid_topk(dl.f(), db.f(), n_expert, k, true, 2.5f, static_cast<int32_t*>(ids.p), w.f(),
                                    nullptr, n);
        } else {
            gpu::route_softmax_topk(dl.f(), n_expert, k, true, static_cast<int32_t*>(ids.p), w.f(), nullptr, n);
        }
        for (int i = 0; i < n; i++) {
            int32_t* ip = static_cast<int32_t*>(ids1.p) + i * k;
            if (sigmoid) {
                gpu::route_sigmoid_topk(dl.f() + i * n_expert, db.f(), n_expert, k, true, 2.5f, ip, w1.f() + i * k,
                                        nullptr);
            } else {
                gpu::route_softmax_topk(dl.f() + i * n_expert, n_expert, k, true, ip, w1.f() + i * k, nullptr);
            }
        }
        EXPECT_EQ(ids.get<int32_t>(), ids1.get<int32_t>()) << sigmoid;
        EXPECT_TRUE(same_bits(w.get<float>(), w1.get<float>())) << sigmoid;
    }
    const int64_t width = 1000;
    const std::vector<float> x = randoms(size_t(n * width), 33), y = randoms(size_t(n * width), 34),
                             g = randoms(size_t(n), 35);
    DeviceBuffer dx(x), dx1(x), dy(y), dg(g), dbias(rows_of(x, width, 0, 1));
    gpu::add(dx.f(), dbias.f(), width, nullptr, n);
    gpu::add_sigmoid_gated(dx.f(), dy.f(), dg.f(), width, nullptr, n);
    for (int i = 0; i < n; i++) {
        gpu::add(dx1.f() + i * width, dbias.f(), width, nullptr);
        gpu::add_sigmoid_gated(dx1.f() + i * width, dy.f() + i * width, dg.f() + i, width, nullptr);
    }
    EXPECT_TRUE(same_bits(dx.get<float>(), dx1.get<float>()));
}

}  // namespace
}  // namespace ms
