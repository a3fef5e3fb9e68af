// The gated delta rule (ops/delta_rule.h) against the recurrence summed in
// double from its definition: token by token and in chunks, over several
// chunks (the state carried), at weak and strong decays, with head widths
// that are and are not whole vectors; and every SIMD level giving the scalar
// reference's bits, for the step and for the chunk.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/delta_rule.h"
#include "quant/cpu.h"
#include "test_util.h"

namespace ms {
namespace {

struct Restore {
    ~Restore() { set_simd_level(best_simd_level()); }
};

// n tokens of one head: q and k L2-normed (as Gated DeltaNet feeds them),
// beta in (0, 1), decays exp(log_decay) in (0, 1].
struct Tokens {
    int hk, hv, n;
    std::vector<float> q, k, v, beta, log_decay;
    Tokens(int hk_, int hv_, int n_, float decay_scale, uint32_t seed, float shared = 0.0f) : hk(hk_), hv(hv_), n(n_) {
        q = random_vector(size_t(n * hk), seed);
        k = random_vector(size_t(n * hk), seed + 1);
        // Keys that share a direction: nearly parallel at shared >> 1.
        const std::vector<float> common = random_vector(size_t(hk), seed + 5);
        for (int t = 0; t < n; t++) {
            for (int i = 0; i < hk; i++) k[t * hk + i] += shared * common[i];
        }
        v = random_vector(size_t(n * hv), seed + 2);
        for (std::vector<float>* x : {&q, &k}) {
            for (int t = 0; t < n; t++) {
                double ss = 0;
                for (int i = 0; i < hk; i++) ss += double((*x)[t * hk + i]) * (*x)[t * hk + i];
                for (int i = 0; i < hk; i++) (*x)[t * hk + i] = float((*x)[t * hk + i] / std::sqrt(ss));
            }
        }
        const std::vector<float> b = random_vector(size_t(n), seed + 3), a = random_vector(size_t(n), seed + 4);
        for (int t = 0; t < n; t++) {
            beta.push_back(1.0f / (1.0f + std::exp(-b[t])));
            log_decay.push_back(-decay_scale * std::log1p(std::exp(a[t])));
        }
    }
};

// The definition in double: S = g S + k (beta (v - g S^T k))^T, o = scale S^T q.
void reference(const Tokens& x, std::vector<double>& S, float scale, std::vector<double>& out) {
    out.assign(size_t(x.n * x.hv), 0.0);
    for (int t = 0; t < x.n; t++) {
        const double g = std::exp(double(x.log_decay[t]));
        for (double& s : S) s *= g;
        for (int j = 0; j < x.hv; j++) {
            double sk = 0;
            for (int i = 0; i < x.hk; i++) sk += S[i * x.hv + j] * x.k[t * x.hk + i];
            const double d = x.beta[t] * (x.v[t * x.hv + j] - sk);
            double o = 0;
            for (int i = 0; i < x.hk; i++) {
                S[i * x.hv + j] += x.k[t * x.hk + i] * d;
                o += S[i * x.hv + j] * x.q[t * x.hk + i];
            }
            out[t * x.hv + j] = o * scale;
        }
    }
}

double rel_l2(const std::vector<float>& a, const std::vector<double>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return std::sqrt(num / den);
}

// Runs x from state S (hk x hv) token by token or in chunks of `chunk`.
void run(const Tokens& x, std::vector<float>& S, int chunk, float scale, std::vector<float>& out) {
    out.assign(size_t(x.n * x.hv), 0.0f);
    if (chunk == 0) {
        for (int t = 0; t < x.n; t++) {
            delta_rule_step(S.data(), x.hk, x.hv, &x.q[t * x.hk], &x.k[t * x.hk], &x.v[t * x.hv], x.beta[t],
                            std::exp(x.log_decay[t]), scale, &out[t * x.hv]);
        }
        return;
    }
    std::vector<float> scratch(delta_rule_chunk_scratch_floats(x.hk, x.hv));
    for (int t0 = 0; t0 < x.n; t0 += chunk) {
        const int m = std::min(chunk, x.n - t0);
        delta_rule_chunk(S.data(), x.hk, x.hv, &x.q[t0 * x.hk], &x.k[t0 * x.hk], x.hk, &x.v[t0 * x.hv], x.hv,
                         &x.beta[t0], &x.log_decay[t0], m, scale, &out[t0 * x.hv], x.hv, scratch.data());
    }
}

struct Case {
    int hk, hv, n;
    float decay_scale;
    float shared = 0.0f;
};

TEST(DeltaRule, StepAndChunksFollowTheDefinition) {
    const Case cases[] = {{32, 32, 150, 1.0f}, {128, 128, 130, 0.05f}, {64, 40, 100, 3.0f}, {16, 48, 70, 0.0f},
                          {24, 17, 65, 0.5f}, {32, 32, 150, 0.0f, 3.0f}, {32, 32, 150, 0.0f, 10.0f}, {32, 32, 150, 0.1f, 10.0f}};
    uint32_t seed = 1;
    for (const Case& c : cases) {
        const Tokens x(c.hk, c.hv, c.n, c.decay_scale, seed += 10, c.shared);
        const float scale = 1.0f / std::sqrt(float(c.hk));
        const std::vector<float> S0 = random_vector(size_t(c.hk * c.hv), seed + 7, 0.1f);
        std::vector<double> S_ref(S0.begin(), S0.end()), o_ref;
        reference(x, S_ref, scale, o_ref);
        for (int chunk : {0, 1, 7, 16, kDeltaRuleChunk}) {
            std::vector<float> S = S0, out;
            run(x, S, chunk, scale, out);
            const double eo = rel_l2(out, o_ref), es = rel_l2(S, S_ref);
            printf("hk %3d hv %3d n %3d decay x%.2f shared %4.1f chunk %2d: output rel L2 %.2e, state %.2e\n", c.hk, c.hv, c.n,
                   c.decay_scale, c.shared, chunk, eo, es);
            EXPECT_LE(eo, 2e-6) << c.hk << "x" << c.hv << " chunk " << chunk;
            EXPECT_LE(es, 2e-6) << c.hk << "x" << c.hv << " chunk " << chunk;
        }
    }
}

// Since the attention loops fuse their products (issue 38's contract), the
// SIMD levels no longer give the scalar loop's bits: each level follows the
// definition (double-precision reference) within the scalar's bound.
TEST(DeltaRule, EveryLevelFollowsTheDefinition) {
    Restore restore;
    const Case cases[] = {{128, 128, 80, 1.0f}, {32, 48, 70, 0.2f}, {16, 24, 20, 1.0f}};
    uint32_t seed = 100;
    for (const Case& c : cases) {
        const Tokens x(c.hk, c.hv, c.n, c.decay_scale, seed += 10);
        const float scale = 1.0f / std::sqrt(float(c.hk));
        const std::vector<float> S0 = random_vector(size_t(c.hk * c.hv), seed + 7, 0.1f);
        std::vector<double> S_ref(S0.begin(), S0.end()), o_ref;
        reference(x, S_ref, scale, o_ref);
        for (int chunk : {0, kDeltaRuleChunk}) {
            for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512}) {
                if (l > best_simd_level()) continue;
                set_simd_level(l);
                std::vector<float> S = S0, out;
                run(x, S, chunk, scale, out);
                const double eo = rel_l2(out, o_ref), es = rel_l2(S, S_ref);
                printf("%-6s hk %3d hv %3d chunk %2d: output rel L2 %.2e, state %.2e\n", simd_level_name(l), c.hk,
                       c.hv, chunk, eo, es);
                EXPECT_LE(eo, 2e-6) << simd_level_name(l) << " chunk " << chunk;
                EXPECT_LE(es, 2e-6) << simd_level_name(l) << " chunk " << chunk;
            }
        }
    }
}

}  // namespace
}  // namespace ms
