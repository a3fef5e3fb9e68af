// SessionOptions::experts_per_token (the CLI's --experts-per-token): the
// model's own count gives its bits, another count other logits, and counts
// outside [1, n_expert] or a family whose layers take a fixed set of experts
// (DeepSeek V4's token tables) are refused with a clear error.
#include <gtest/gtest.h>

#include <cstring>

#include "runtime/session.h"
#include "../golden_required.h"

namespace ms {
namespace {

std::string model(const char* name) { return std::string(MOESTREAM_GOLDEN_DIR) + "/models/" + name + ".gguf"; }

std::vector<float> last_logits(const std::string& path, int k) {
    SessionOptions o;
    o.model_path = path;
    o.n_ctx = 64;
    o.n_threads = 2;
    o.experts_per_token = k;
    auto s = Session::open(o);
    EXPECT_EQ(s->model().trained_experts_per_token(), 2);  // both files route top-2 (golden README)
    if (k > 0) {
        EXPECT_EQ(s->config().n_expert_used, k);
    }
    s->prefill(s->tokenize("The GNU General Public License is a free, copyleft license"));
    return std::vector<float>(s->logits(), s->logits() + s->config().n_vocab);
}

TEST(ExpertsPerToken, TheModelsOwnCountGivesItsBitsAnotherChangesTheLogits) {
    for (const char* name : {"qwen35moe-Q8_0", "qwen3moe-Q8_0"}) {
        const std::vector<float> own = last_logits(model(name), 0);
        const std::vector<float> two = last_logits(model(name), 2);
        EXPECT_EQ(0, std::memcmp(own.data(), two.data(), own.size() * 4)) << name;
        for (int k : {1, 4}) {
            const std::vector<float> other = last_logits(model(name), k);
            EXPECT_NE(0, std::memcmp(own.data(), other.data(), own.size() * 4)) << name << " K=" << k;
        }
    }
}

TEST(ExpertsPerToken, OutOfRangeAndTableRoutedFamiliesAreRefused) {
    SessionOptions o;
    o.model_path = model("qwen35moe-Q8_0");
    o.n_ctx = 64;
    o.experts_per_token = 9;  // of 8 experts
    try {
        Session::open(o);
        ADD_FAILURE() << "9 of 8 experts accepted";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("[1, 8]"), std::string::npos) << e.what();
    }
    o.model_path = model("deepseek4-Q8_0");
    o.experts_per_token = 1;
    EXPECT_THROW(Session::open(o), std::runtime_error);
}

}  // namespace
}  // namespace ms
