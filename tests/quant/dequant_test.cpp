// Dequantization: bit-exact against every golden tensor the reference engine
// dequantized (../shared/golden/dequant), plus hand-built blocks for the types
// the golden files do not contain, and the runnable-type check.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "gguf/gguf.h"
#include "json/json.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/half.h"
#include "../golden_required.h"

namespace ms {
namespace {

const std::string kGolden = MOESTREAM_GOLDEN_DIR;

std::vector<float> read_f32(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot open");
    f.seekg(0, std::ios::end);
    size_t n = size_t(f.tellg());
    f.seekg(0);
    std::vector<float> v(n / 4);
    f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n));
    return v;
}

TEST(DequantGolden, EveryTensorBitExact) {
    const std::string dir = kGolden + "/dequant";
    Json index = Json::parse_file(dir + "/index.json");
    ASSERT_TRUE(index.is_object());
    size_t f32_files = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().extension() == ".f32") ++f32_files;
    ASSERT_EQ(index.size(), f32_files) << "index.json and the .f32 files disagree";
    ASSERT_GT(f32_files, 0u);

    std::set<std::string> types_seen;
    std::map<std::string, GgufFile> files;
    for (const auto& [name, entry] : index.as_object()) {
        SCOPED_TRACE(name);
        const std::string file = entry.at("file").as_string();
        const std::string tname = entry.at("tensor").as_string();
        const int64_t rows = entry.at("shape_rows_cols")[0].as_int();
        const int64_t cols = entry.at("shape_rows_cols")[1].as_int();
        const std::string slice = entry.at("slice").as_string();
        if (!files.count(file)) files.emplace(file, GgufFile::open(kGolden + "/models/" + file));
        const GgufFile& g = files.at(file);
        const GgufTensor* t = g.tensor(tname);
        ASSERT_NE(t, nullptr);
        ASSERT_EQ(type_name(t->type), entry.at("type").as_string());
        ASSERT_EQ(t->ne[0], cols);
        ASSERT_TRUE(slice == "whole" || slice == "expert 0") << slice;
        // "whole" is the full 2-D tensor; "expert 0" the first rows x cols slab of a 3-D one.
        if (slice == "whole") ASSERT_EQ(t->n_elements(), rows * cols);
        else ASSERT_EQ(t->ne[1], rows);
        types_seen.insert(type_name(t->type));

        const size_t rb = row_bytes(t->type, cols);
        std::vector<uint8_t> raw(rb * size_t(rows));
        g.read(t->split, t->offset, raw.data(), raw.size());
        std::vector<float> ours(size_t(rows * cols));
        for (int64_t r = 0; r < rows; ++r)
            ASSERT_TRUE(dequantize_row(t->type, raw.data() + size_t(r) * rb, ours.data() + r * cols, cols));

        std::vector<float> ref = read_f32(dir + "/" + name);
        ASSERT_EQ(ref.size(), ours.size());
        size_t mismatches = 0, first = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
            if (float_bits(ref[i]) != float_bits(ours[i])) {
                if (!mismatches) first = i;
                ++mismatches;
            }
        }
        EXPECT_EQ(mismatches, 0u) << "first at " << first << ": ours " << ours[first] << " ref " << ref[first];
    }
    // The README promises these types; make sure none was silently skipped.
    for (const char* ty : {"F16", "BF16", "Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q3_K", "Q2_K", "Q4_0", "IQ4_XS", "MXFP4"})
        EXPECT_TRUE(types_seen.count(ty)) << ty;
}

// Element values for hand-built blocks are computed here from the format's
// definition, element by element, independently of the library's loops.
TEST(DequantBlocks, Q4_1) {
    BlockQ4_1 b;
    b.d = fp32_to_fp16(0.5f);
    b.m = fp32_to_fp16(-3.0f);
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
    float y[32];
    ASSERT_TRUE(dequantize_row(GgmlType::Q4_1, &b, y, 32));
    for (int e = 0; e < 32; ++e) {
        int q = e < 16 ? e : 15 - (e - 16);
        EXPECT_EQ(y[e], 0.5f * float(q) - 3.0f) << e;
    }
}

TEST(DequantBlocks, Q5_0AndQ5_1) {
    BlockQ5_0 b0;
    BlockQ5_1 b1;
    b0.d = b1.d = fp32_to_fp16(0.25f);
    b1.m = fp32_to_fp16(1.0f);
    uint32_t qh = 0xA5C3F00Fu;
    std::memcpy(b0.qh, &qh, 4);
    std::memcpy(b1.qh, &qh, 4);
    for (int j = 0; j < 16; ++j) b0.qs[j] = b1.qs[j] = uint8_t((j * 7 + 3) & 0xff);
    float y0[32], y1[32];
    ASSERT_TRUE(dequantize_row(GgmlType::Q5_0, &b0, y0, 32));
    ASSERT_TRUE(dequantize_row(GgmlType::Q5_1, &b1, y1, 32));
    for (int e = 0; e < 32; ++e) {
        int byte = b0.qs[e % 16];
        int nib = e < 16 ? byte & 15 : byte >> 4;
        int q = nib + 16 * int((qh >> e) & 1);
        EXPECT_EQ(y0[e], 0.25f * float(q - 16)) << e;
        EXPECT_EQ(y1[e], 0.25f * float(q) + 1.0f) << e;
    }
}

TEST(DequantBlocks, IQ4_NL) {
    BlockIQ4_NL b;
    b.d = fp32_to_fp16(0.125f);
    for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (j << 4));
    float y[32];
    ASSERT_TRUE(dequantize_row(GgmlType::IQ4_NL, &b, y, 32));
    const int book[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 0.125f * float(book[e % 16])) << e;
}

TEST(DequantBlocks, MXFP4Scales) {
    // E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 times 2^(e-127).
    const float fp4[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int e : {0, 1, 2, 100, 127, 130, 200}) {
        BlockMXFP4 b;
        b.e = uint8_t(e);
        for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | ((15 - j) << 4));
        float y[32];
        ASSERT_TRUE(dequantize_row(GgmlType::MXFP4, &b, y, 32));
        for (int k = 0; k < 32; ++k) {
            int code = k < 16 ? k : 15 - (k - 16);
            double expect = (code & 8 ? -1.0 : 1.0) * fp4[code & 7] * std::ldexp(1.0, e - 127);
            EXPECT_EQ(double(y[k]), expect) << "e=" << e << " k=" << k;
        }
    }
}

TEST(DequantTypes, RunnableCheckNamesTensorAndType) {
    EXPECT_TRUE(is_runnable(GgmlType::Q4_K));
    EXPECT_TRUE(is_runnable(GgmlType::MXFP4));
    EXPECT_FALSE(is_runnable(GgmlType::IQ2_XXS));
    EXPECT_FALSE(is_runnable(GgmlType::Q8_K));
    EXPECT_NO_THROW(check_runnable(GgmlType::Q6_K, "output.weight"));
    try {
        check_runnable(GgmlType::IQ3_S, "blk.3.ffn_down_exps.weight");
        FAIL() << "no throw";
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "tensor blk.3.ffn_down_exps.weight has type IQ3_S, which moestream cannot run");
    }
    float y[256];
    uint8_t junk[256] = {};
    EXPECT_FALSE(dequantize_row(GgmlType::IQ1_S, junk, y, 256));
    // Every type the traits table marks as dequantizable really is, and vice versa.
    for (uint32_t id = 0; id < kGgmlTypeCount; ++id)
        EXPECT_EQ(type_traits(id).dequant, is_runnable(GgmlType(id))) << type_traits(id).name;
}

}  // namespace
}  // namespace ms
