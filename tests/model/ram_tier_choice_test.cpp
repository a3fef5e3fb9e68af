// --gpu-ram-tier auto's rules (model/gpu_decoder.h: host_split_pays, host_misses,
// steps_beat_pass) against
// the mode that was faster in each measured run on an H100 (docs/gpu.md,
// seventeenth session, docs/gpu/run17/call2, the code of this rule; the
// fifteenth's DeepSeek V3 run, docs/gpu/run15/call3, with the split of
// then). The expected modes are those runs' measured winners, not the rule
// restated: a rule that misses one fails here.
#include <gtest/gtest.h>

#include "model/gpu_decoder.h"

namespace ms {
namespace {

struct MeasuredRun {
    const char* what;
    int64_t vram_slots;        // the run's "VRAM expert cache N slots"
    int moe_layers, top_k;
    uint64_t expert_bytes;     // host MB a token / host experts a token, or the slot size
    double copy_tok_s, cpu_tok_s;  // decode, --gpu-ram-tier copy and cpu (--gpu-host-share auto)
};

TEST(RamTierChoice, PicksTheMeasuredFasterMode) {
    const MeasuredRun runs[] = {
        {"qwen3-30b-a3b --gpu-mem 64M", 21, 48, 8, 2'850'000, 35.68, 58.46},
        {"qwen3-30b-a3b --gpu-mem 4G", 1403, 48, 8, 2'850'000, 179.26, 161.60},
        {"qwen3-30b-a3b --gpu-mem 8G", 2807, 48, 8, 2'850'000, 179.55, 161.43},
        {"gpt-oss-120b 12 layers --gpu-mem 64M", 5, 12, 4, 13'300'000, 69.20, 113.51},
        {"gpt-oss-120b 12 layers --gpu-mem 4G", 324, 12, 4, 13'300'000, 106.80, 146.15},
        {"deepseek-v3 6 layers --gpu-mem 4G (run15)", 150, 3, 8, 28'557'312, 116.60, 157.72},
    };
    for (const MeasuredRun& r : runs) {
        const bool cpu_faster = r.cpu_tok_s > r.copy_tok_s;
        EXPECT_EQ(host_split_pays(true, r.vram_slots, r.moe_layers, r.top_k, r.expert_bytes), cpu_faster) << r.what;
    }
}

TEST(RamTierChoice, CopiesWhereTheRamTierCannotHoldEveryExpert) {
    // The host would compute every miss from the drive's slots.
    EXPECT_FALSE(host_split_pays(false, 5, 12, 4, 13'300'000));
    EXPECT_FALSE(host_split_pays(false, 21, 48, 8, 2'850'000));
}


// --gpu-host-share auto's rule for one layer's misses (host_misses): the
// expected splits are worked by hand from the two sides' finish times.
TEST(HostMisses, OneSmallMissGoesOverTheLinkWhenTheHostsFixedCostIsDearer) {
    // A qwen3-30b expert: 62 us to copy; on the host 36 us plus 60 us a part.
    EXPECT_EQ(host_misses(1, 62e-6, 60e-6, 36e-6), 0);
    // Without the fixed part the host's 36 us wins.
    EXPECT_EQ(host_misses(1, 62e-6, 0, 36e-6), 1);
}

TEST(HostMisses, ManyMissesAreSharedSoBothSidesFinishTogether) {
    // 8 misses, 62 us a copy, host 36 us each after 100 us: h = 4 ends at
    // max(248, 244) = 248 us; h = 5 at max(186, 280); h = 3 at max(310, 208).
    EXPECT_EQ(host_misses(8, 62e-6, 100e-6, 36e-6), 4);
    // Equal rates, no fixed part: half each (ties go to the link: 4, not 5).
    EXPECT_EQ(host_misses(8, 50e-6, 0, 50e-6), 4);
    EXPECT_EQ(host_misses(7, 50e-6, 0, 50e-6), 3);
    // A link far slower than the host: everything on the host.
    EXPECT_EQ(host_misses(8, 1e-3, 10e-6, 10e-6), 8);
    // No misses: nothing to split.
    EXPECT_EQ(host_misses(0, 62e-6, 60e-6, 36e-6), 0);
}

TEST(HostMisses, NeverMoreThanTheMissesAndNeverSlowerThanEitherSideAlone) {
    for (int n = 1; n <= 16; n++) {
        for (double fixed : {0.0, 20e-6, 200e-6}) {
            for (double host : {10e-6, 60e-6, 300e-6}) {
                const double copy = 80e-6;
                const int h = host_misses(n, copy, fixed, host);
                ASSERT_GE(h, 0);
                ASSERT_LE(h, n);
                const double t = std::max((n - h) * copy, h > 0 ? fixed + h * host : 0.0);
                EXPECT_LE(t, n * copy + 1e-12) << n;
                EXPECT_LE(t, fixed + n * host + 1e-12) << n;
            }
        }
    }
}

// --gpu-batch-host's rule for a batched pass's misses (host_misses_rows):
// the host's time grows with the rows of the misses it takes.
TEST(HostMissesRows, OneRowEachIsHostMissesRule) {
    const int32_t ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    for (int n = 0; n <= 16; n++) {
        for (double fixed : {0.0, 60e-6, 200e-6}) {
            for (double host : {10e-6, 36e-6, 300e-6}) {
                EXPECT_EQ(host_misses_rows(ones, n, 62e-6, fixed, host), host_misses(n, 62e-6, fixed, host))
                    << n << " " << fixed << " " << host;
            }
        }
    }
}

TEST(HostMissesRows, RowsMakeTheHostsMissesDearer) {
    // 6 misses of 1, 1, 2, 2, 4, 8 rows; 60 us a copy, host 30 us a row
    // after 20 us. h = 2: max(240, 80) = 240; h = 3: max(180, 140) = 180;
    // h = 4: max(120, 200) = 200. So 3 (a single row each would take 4:
    // max(120, 140) against h = 3's max(180, 110)).
    const int32_t rows[6] = {1, 1, 2, 2, 4, 8};
    EXPECT_EQ(host_misses_rows(rows, 6, 60e-6, 20e-6, 30e-6), 3);
    EXPECT_EQ(host_misses(6, 60e-6, 20e-6, 30e-6), 4);
    // The first miss alone costs the host more than copying all six: none.
    const int32_t many[6] = {20, 20, 20, 20, 20, 20};
    EXPECT_EQ(host_misses_rows(many, 6, 60e-6, 20e-6, 30e-6), 0);
}

// steps_beat_pass: where a chunk of n tokens costs less as decode steps
// (the host taking its share of each step's misses) than as one pass that
// copies the chunk's unique misses. Worked by hand for qwen3-30b-a3b's
// shape (128 experts, top-8, 48 MoE layers) at run17's 64M figures: a step
// 17.1 ms (58.46 tok/s), a copy 65 us, every pick a miss.
TEST(ChunkAsSteps, SmallChunksAreStepsAndBigOnesOnePass) {
    const double step = 1.0 / 58.46, copy = 65e-6;
    // n = 4: unique = 128 (1 - (15/16)^4) = 29.1; a pass 17.1 + 48 x 29.1 x
    // 65 us = 17.1 + 90.8 ms, against 4 steps' 68.4 ms.
    EXPECT_TRUE(steps_beat_pass(4, 128, 8, 48, 1.0, copy, step));
    // n = 32: unique = 111.8; a pass 17.1 + 348.8 ms, 32 steps 547 ms.
    EXPECT_FALSE(steps_beat_pass(32, 128, 8, 48, 1.0, copy, step));
    // At 4G's hit rate (99 %, a step 5.6 ms): a pass copies 0.16 experts a
    // layer for two tokens (0.5 ms), steps cost a second step (5.6 ms).
    EXPECT_FALSE(steps_beat_pass(2, 128, 8, 48, 0.01, copy, 1.0 / 179.0));
    // Not measured yet, or one token: the pass (and a step is a step).
    EXPECT_FALSE(steps_beat_pass(4, 128, 8, 48, 1.0, copy, 0.0));
    EXPECT_FALSE(steps_beat_pass(1, 128, 8, 48, 1.0, copy, step));
}

TEST(ChunkAsSteps, OnceAPassPaysItPaysForEveryLongerChunk) {
    // The pass's copies grow slower than n (unique experts saturate at
    // n_expert), steps' cost linearly: one crossover, no flip back.
    for (double miss : {0.05, 0.3, 1.0}) {
        for (double step : {2e-3, 17e-3, 60e-3}) {
            bool pass_seen = false;
            for (int n = 2; n <= 512; n++) {
                const bool steps = steps_beat_pass(n, 128, 8, 48, miss, 65e-6, step);
                if (pass_seen) {
                    EXPECT_FALSE(steps) << "n " << n << " miss " << miss << " step " << step;
                }
                pass_seen = pass_seen || !steps;
            }
            EXPECT_TRUE(pass_seen) << "miss " << miss << " step " << step;  // 512 steps never beat one pass
        }
    }
}

}  // namespace
}  // namespace ms
