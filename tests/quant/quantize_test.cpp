// Quantizing float rows: Q8_0 gives the reference quantizer's bytes exactly
// (every Q8_0 tensor of the golden qwen3moe-Q8_0 file, made from the F32
// one); Q4_K rows read back through the reference-exact dequantizer no
// further from the floats than the reference's own Q4_K of the same tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "quant/dequant.h"
#include "quant/quantize.h"
#include "../golden_required.h"

namespace ms {
namespace {

const std::string kModels = std::string(MOESTREAM_GOLDEN_DIR) + "/models/";

std::vector<float> read_floats(const GgufFile& f, const GgufTensor& t) {
    EXPECT_EQ(t.type, GgmlType::F32) << t.name;
    std::vector<float> v(size_t(t.n_elements()));
    f.read_tensor(t, v.data());
    return v;
}

TEST(Quantize, Q8_0MatchesReferenceBytes) {
    const GgufFile f32 = GgufFile::open(kModels + "qwen3moe-F32.gguf");
    const GgufFile q8 = GgufFile::open(kModels + "qwen3moe-Q8_0.gguf");
    int checked = 0;
    for (const GgufTensor& t : q8.tensors()) {
        if (t.type != GgmlType::Q8_0) continue;
        SCOPED_TRACE(t.name);
        const std::vector<float> x = read_floats(f32, *f32.tensor(t.name));
        std::vector<uint8_t> want(t.nbytes), got(t.nbytes);
        q8.read_tensor(t, want.data());
        const int64_t rows = t.n_elements() / t.ne[0];
        for (int64_t r = 0; r < rows; r++)
            ASSERT_TRUE(quantize_row(GgmlType::Q8_0, &x[size_t(r * t.ne[0])], &got[size_t(r) * t.row_bytes()], t.ne[0]));
        EXPECT_EQ(got, want);
        checked++;
    }
    EXPECT_GE(checked, 20);
}

// Root-mean-square of a - b.
double rms(const float* a, const float* b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    return std::sqrt(s / double(n));
}

TEST(Quantize, Q4_KAsCloseAsReference) {
    const GgufFile f32 = GgufFile::open(kModels + "qwen3moe-F32.gguf");
    const GgufFile ref = GgufFile::open(kModels + "qwen3moe-Q4_K_M.gguf");
    int checked = 0;
    for (const GgufTensor& t : ref.tensors()) {
        if (t.type != GgmlType::Q4_K) continue;
        SCOPED_TRACE(t.name);
        const std::vector<float> x = read_floats(f32, *f32.tensor(t.name));
        std::vector<uint8_t> ref_bytes(t.nbytes), ours(t.nbytes);
        ref.read_tensor(t, ref_bytes.data());
        std::vector<float> back_ref(x.size()), back_ours(x.size());
        const int64_t rows = t.n_elements() / t.ne[0];
        for (int64_t r = 0; r < rows; r++) {
            const size_t at = size_t(r * t.ne[0]), b = size_t(r) * t.row_bytes();
            ASSERT_TRUE(quantize_row(GgmlType::Q4_K, &x[at], &ours[b], t.ne[0]));
            ASSERT_TRUE(dequantize_row(GgmlType::Q4_K, &ours[b], &back_ours[at], t.ne[0]));
            ASSERT_TRUE(dequantize_row(GgmlType::Q4_K, &ref_bytes[b], &back_ref[at], t.ne[0]));
        }
        const double e_ours = rms(back_ours.data(), x.data(), x.size());
        const double e_ref = rms(back_ref.data(), x.data(), x.size());
        EXPECT_LE(e_ours, 1.1 * e_ref) << "ours " << e_ours << ", reference " << e_ref;
        EXPECT_GT(e_ours, 0.0);
        checked++;
    }
    EXPECT_GE(checked, 5);
}

TEST(Quantize, OnlyQ8_0AndQ4_K) {
    EXPECT_TRUE(can_quantize(GgmlType::Q8_0));
    EXPECT_TRUE(can_quantize(GgmlType::Q4_K));
    EXPECT_FALSE(can_quantize(GgmlType::Q6_K));
    float x[256] = {};
    uint8_t buf[512];
    EXPECT_FALSE(quantize_row(GgmlType::Q6_K, x, buf, 256));
}

}  // namespace
}  // namespace ms
