// --gpu-ram-tier auto's rule (model/gpu_decoder.h, host_split_pays) against
// the mode that was faster in each measured run on an H100 (docs/gpu.md,
// fifteenth session, docs/gpu/run15/call1-3; the thirteenth session's 8G
// run). The expected modes are those runs' measured winners, not the rule
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
    double copy_tok_s, cpu_tok_s;  // decode, --gpu-ram-tier copy and cpu (auto share)
};

TEST(RamTierChoice, PicksTheMeasuredFasterMode) {
    const MeasuredRun runs[] = {
        {"qwen3-30b-a3b --gpu-mem 64M", 21, 48, 8, 2'850'000, 34.07, 56.38},
        {"qwen3-30b-a3b --gpu-mem 4G", 1403, 48, 8, 2'850'000, 173.30, 128.90},
        // Thirteenth session: cpu 0.83-0.97x of copying at 4G and 8G.
        {"qwen3-30b-a3b --gpu-mem 8G", 2807, 48, 8, 2'850'000, 180.5, 0.97 * 180.5},
        {"gpt-oss-120b 12 layers --gpu-mem 64M", 5, 12, 4, 13'300'000, 66.99, 94.85},
        {"gpt-oss-120b 12 layers --gpu-mem 4G", 324, 12, 4, 13'300'000, 107.24, 132.76},
        {"deepseek-v3 6 layers --gpu-mem 4G", 150, 3, 8, 28'557'312, 116.60, 157.72},
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

}  // namespace
}  // namespace ms
