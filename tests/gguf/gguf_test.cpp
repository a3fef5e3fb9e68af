// Writer -> reader round trips: every metadata value type, arrays (strings,
// nested), tensors of several types with their data, custom alignment, split
// sets, and the writer's own error checks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace fs = std::filesystem;
using namespace ms;

namespace {

std::string temp_dir() { return testing::TempDir() + "gguf_test_" + std::to_string(getpid()); }

std::string temp_path(const std::string& name) {
    fs::create_directories(temp_dir());
    return temp_dir() + "/" + name;
}

// Removes the test's files when the run ends.
struct TempCleanup : testing::Environment {
    void TearDown() override { fs::remove_all(temp_dir()); }
};
const auto* kCleanup = testing::AddGlobalTestEnvironment(new TempCleanup);

// Deterministic bytes for tensor t (so each tensor's data is distinct).
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto& b : v) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        b = uint8_t(x);
    }
    return v;
}

GgufValue make(GgufType t, int64_t i = 0, double f = 0) {
    GgufValue v;
    v.type = t;
    v.i = i;
    v.f = f;
    return v;
}

GgufValue array_of(GgufType elem) {
    GgufValue v;
    v.type = GgufType::ARRAY;
    v.elem = elem;
    return v;
}

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST(GgufRoundTrip, EveryValueType) {
    std::string path = temp_path("values.gguf");
    {
        GgufWriter w(path);
        w.set_u32("t.u32", 4000000000u);
        w.set_i32("t.i32", -123456);
        w.set_u64("t.u64", 0xFEDCBA9876543210ull);
        w.set_f32("t.f32", 0.15625f);
        w.set_bool("t.bool", true);
        w.set_string("t.string", std::string("h\xC3\xA9llo\0world", 12));
        w.set_string("t.empty", "");
        w.set_strings("t.strings", {"a", "", "\xE2\x96\x81the", std::string(1000, 'x')});
        w.set_i32s("t.i32s", {-1, 0, 2147483647, -2147483647 - 1});
        w.set_f32s("t.f32s", {1.5f, -0.0f, 3e38f});
        w.set_value("t.u8", make(GgufType::UINT8, 255));
        w.set_value("t.i8", make(GgufType::INT8, -128));
        w.set_value("t.u16", make(GgufType::UINT16, 65535));
        w.set_value("t.i16", make(GgufType::INT16, -32768));
        w.set_value("t.i64", make(GgufType::INT64, INT64_MIN));
        w.set_value("t.f64", make(GgufType::FLOAT64, 0, 1e300));
        GgufValue u8s = array_of(GgufType::UINT8);
        u8s.ai = {0, 1, 255};
        w.set_value("t.u8s", u8s);
        GgufValue bools = array_of(GgufType::BOOL);
        bools.ai = {1, 0, 1};
        w.set_value("t.bools", bools);
        GgufValue f64s = array_of(GgufType::FLOAT64);
        f64s.af = {-2.5, 1e-300};
        w.set_value("t.f64s", f64s);
        GgufValue u64s = array_of(GgufType::UINT64);
        u64s.ai = {int64_t(0xFFFFFFFFFFFFFFFFull), 7};
        w.set_value("t.u64s", u64s);
        GgufValue nested = array_of(GgufType::ARRAY);
        GgufValue inner1 = array_of(GgufType::INT32), inner2 = array_of(GgufType::STRING);
        inner1.ai = {3, 2, 1};
        inner2.as = {"x", "yz"};
        nested.aa = {inner1, inner2};
        w.set_value("t.nested", nested);
        w.set_value("t.empty_array", array_of(GgufType::INT16));
        w.set_u32("t.u32", 42);  // setting a key again replaces it
        w.finish();
    }
    GgufFile f = GgufFile::open(path);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.tensors().size(), 0u);
    ASSERT_EQ(f.metadata().size(), 22u);
    EXPECT_EQ(f.metadata()[0].first, "t.u32");  // file order kept
    EXPECT_EQ(f.find("t.u32")->type, GgufType::UINT32);
    EXPECT_EQ(f.get_int("t.u32", 0), 42);
    EXPECT_EQ(f.get_int("t.i32", 0), -123456);
    EXPECT_EQ(uint64_t(f.get_int("t.u64", 0)), 0xFEDCBA9876543210ull);
    EXPECT_EQ(f.get_float("t.f32", 0), 0.15625);
    EXPECT_EQ(f.get_bool("t.bool", false), true);
    EXPECT_EQ(f.get_string("t.string"), std::string("h\xC3\xA9llo\0world", 12));
    EXPECT_EQ(f.get_string("t.empty", "fallback"), "");
    EXPECT_EQ(f.get_strings("t.strings"), (std::vector<std::string>{"a", "", "\xE2\x96\x81the", std::string(1000, 'x')}));
    EXPECT_EQ(f.get_ints("t.i32s"), (std::vector<int64_t>{-1, 0, 2147483647, -2147483648ll}));
    EXPECT_EQ(f.get_floats("t.f32s"), (std::vector<double>{1.5, -0.0, double(3e38f)}));
    EXPECT_EQ(f.get_int("t.u8", 0), 255);
    EXPECT_EQ(f.find("t.u8")->type, GgufType::UINT8);
    EXPECT_EQ(f.get_int("t.i8", 0), -128);
    EXPECT_EQ(f.get_int("t.u16", 0), 65535);
    EXPECT_EQ(f.get_int("t.i16", 0), -32768);
    EXPECT_EQ(f.get_int("t.i64", 0), INT64_MIN);
    EXPECT_EQ(f.get_float("t.f64", 0), 1e300);
    EXPECT_EQ(f.get_float("t.u8", 0), 255.0);  // get_float accepts integers
    EXPECT_EQ(f.get_ints("t.u8s"), (std::vector<int64_t>{0, 1, 255}));
    EXPECT_EQ(f.get_ints("t.bools"), (std::vector<int64_t>{1, 0, 1}));
    EXPECT_EQ(f.find("t.bools")->elem, GgufType::BOOL);
    EXPECT_EQ(f.get_floats("t.f64s"), (std::vector<double>{-2.5, 1e-300}));
    EXPECT_EQ(f.get_ints("t.u64s"), (std::vector<int64_t>{-1, 7}));
    const GgufValue* n = f.find("t.nested");
    ASSERT_NE(n, nullptr);
    ASSERT_EQ(n->array_size(), 2u);
    EXPECT_EQ(n->aa[0].elem, GgufType::INT32);
    EXPECT_EQ(n->aa[0].ai, (std::vector<int64_t>{3, 2, 1}));
    EXPECT_EQ(n->aa[1].as, (std::vector<std::string>{"x", "yz"}));
    EXPECT_EQ(f.find("t.empty_array")->array_size(), 0u);
    EXPECT_EQ(f.find("t.empty_array")->elem, GgufType::INT16);

    // Missing keys fall back; wrong types name the file and key.
    EXPECT_EQ(f.get_int("nope", 7), 7);
    EXPECT_TRUE(f.get_strings("nope").empty());
    EXPECT_NE(error_of([&] { f.get_int("t.string", 0); }).find(path + ": metadata t.string is string, expected"),
              std::string::npos);
    EXPECT_NE(error_of([&] { f.get_strings("t.i32s"); }).find("t.i32s is array of i32"), std::string::npos);
    EXPECT_NE(error_of([&] { f.require_int("general.block_count"); }).find("missing metadata general.block_count"),
              std::string::npos);
    EXPECT_NE(error_of([&] { f.get_floats("t.strings"); }).find("t.strings"), std::string::npos);
}

TEST(GgufRoundTrip, TensorsAndData) {
    for (uint64_t alignment : {32ull, 64ull, 4096ull}) {
        SCOPED_TRACE(alignment);
        std::string path = temp_path("tensors.gguf");
        struct Decl {
            std::string name;
            GgmlType type;
            std::vector<int64_t> ne;
            uint64_t nbytes;  // computed by hand from the block sizes
        };
        std::vector<Decl> decls = {
            {"a.weight", GgmlType::F32, {8, 3}, 8 * 3 * 4},
            {"b.weight", GgmlType::Q4_K, {512, 3}, 2 * 144 * 3},
            {"c.weight", GgmlType::Q8_0, {64}, 2 * 34},
            {"d.weight", GgmlType::BF16, {4, 2, 3, 2}, 48 * 2},
            {"e.weight", GgmlType::MXFP4, {32, 5, 2}, 10 * 17},
            {"f.weight", GgmlType::Q6_K, {256, 1}, 210},
        };
        {
            GgufWriter w(path, alignment);
            w.set_string("general.architecture", "test");
            for (auto& d : decls) w.add_tensor(d.name, d.type, d.ne);
            w.begin_data();
            for (size_t i = 0; i < decls.size(); ++i) {
                auto data = pattern(decls[i].nbytes, uint32_t(i));
                // Stream in uneven chunks to exercise the buffering.
                size_t half = data.size() / 3;
                w.write_tensor_data(data.data(), half);
                w.write_tensor_data(data.data() + half, data.size() - half);
            }
            w.finish();
            EXPECT_EQ(w.bytes_written(), fs::file_size(path));
        }
        GgufFile f = GgufFile::open(path);
        EXPECT_EQ(f.alignment(), alignment);
        EXPECT_EQ(f.get_int("general.alignment", 32), int64_t(alignment));
        ASSERT_EQ(f.tensors().size(), decls.size());
        uint64_t prev_end = 0;
        for (size_t i = 0; i < decls.size(); ++i) {
            const GgufTensor& t = f.tensors()[i];
            EXPECT_EQ(t.name, decls[i].name);
            EXPECT_EQ(t.type, decls[i].type);
            EXPECT_EQ(t.n_dims, decls[i].ne.size());
            for (size_t d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], d < decls[i].ne.size() ? decls[i].ne[d] : 1);
            EXPECT_EQ(t.nbytes, decls[i].nbytes);
            EXPECT_EQ(t.offset % alignment, 0u);
            EXPECT_GE(t.offset, prev_end);
            prev_end = t.offset + t.nbytes;
            std::vector<uint8_t> got(t.nbytes);
            f.read_tensor(t, got.data());
            EXPECT_EQ(got, pattern(decls[i].nbytes, uint32_t(i))) << t.name;
        }
        EXPECT_EQ(f.tensor("c.weight"), &f.tensors()[2]);
        EXPECT_EQ(f.tensor("zzz"), nullptr);
        // Reads past the end name the path and offset.
        std::vector<uint8_t> buf(16);
        uint64_t size = f.file_sizes()[0];
        EXPECT_NE(error_of([&] { f.read(0, size - 8, buf.data(), 16); }).find(path + ": read failed at " + std::to_string(size - 8)),
                  std::string::npos);
    }
}

TEST(GgufRoundTrip, LargeStreamedTensorBypassesBuffer) {
    // 40 MB in one call: larger than the writer's buffer, written directly.
    std::string path = temp_path("big.gguf");
    const int64_t cols = 4096, rows = 2560;
    auto data = pattern(size_t(cols * rows * 4), 9);
    {
        GgufWriter w(path);
        w.add_tensor("small", GgmlType::F32, {32});
        w.add_tensor("big", GgmlType::F32, {cols, rows});
        w.begin_data();
        w.write_tensor_data(data.data(), 128);
        w.write_tensor_data(data.data(), data.size());
        w.finish();
    }
    GgufFile f = GgufFile::open(path);
    std::vector<uint8_t> got(data.size());
    f.read_tensor(*f.tensor("big"), got.data());
    EXPECT_TRUE(got == data);
    fs::remove(path);
}

TEST(GgufWriterErrors, DeclaredSizesAreEnforced) {
    std::string path = temp_path("bad.gguf");
    {
        GgufWriter w(path);
        w.add_tensor("x", GgmlType::F32, {4});
        w.add_tensor("y", GgmlType::F32, {4});
        w.begin_data();
        std::vector<uint8_t> d(12);
        w.write_tensor_data(d.data(), d.size());
        EXPECT_NE(error_of([&] { w.finish(); }).find(path + ": finish(): tensor x has 12 of 16 bytes and 1 more"),
                  std::string::npos);
    }
    // An unfinished writer removes its partial file.
    EXPECT_FALSE(fs::exists(path));
    {
        GgufWriter w(path);
        w.add_tensor("x", GgmlType::F32, {4});
        w.begin_data();
        std::vector<uint8_t> d(20);
        EXPECT_NE(error_of([&] { w.write_tensor_data(d.data(), d.size()); }).find("past the last declared tensor"),
                  std::string::npos);
    }
    GgufWriter w(path);
    EXPECT_NE(error_of([&] { w.add_tensor("q", GgmlType::Q4_K, {100}); }).find("q: row length 100 is not a multiple of the Q4_K block size 256"),
              std::string::npos);
    EXPECT_NE(error_of([&] { w.add_tensor("q", GgmlType(4), {32}); }).find("unknown type id 4"), std::string::npos);
    EXPECT_NE(error_of([&] { w.add_tensor("z", GgmlType::F32, {1, 0}); }).find("must be positive"), std::string::npos);
    EXPECT_NE(error_of([&] { w.add_tensor("z", GgmlType::F32, {1, 1, 1, 1, 1}); }).find("5 dimensions"),
              std::string::npos);
    w.add_tensor("ok", GgmlType::F32, {1});
    EXPECT_NE(error_of([&] { w.add_tensor("ok", GgmlType::F32, {1}); }).find("duplicate tensor ok"), std::string::npos);
    EXPECT_NE(error_of([] { GgufWriter w2("/tmp/x.gguf", 48); }).find("alignment 48 is not a power of two"),
              std::string::npos);
}

TEST(GgufWriterErrors, DiskFullIsReported) {
    if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
    GgufWriter w("/dev/full");
    w.add_tensor("x", GgmlType::F32, {1024});
    w.begin_data();
    std::vector<uint8_t> d(4096);
    w.write_tensor_data(d.data(), d.size());
    EXPECT_NE(error_of([&] { w.finish(); }).find("/dev/full: write failed: No space left on device"), std::string::npos);
    // (the writer only removes regular files it failed to finish)
}

TEST(GgufWriterErrors, UnwritablePath) {
    EXPECT_NE(error_of([] {
                  GgufWriter w("/nonexistent-dir/x.gguf");
                  w.begin_data();
              }).find("/nonexistent-dir/x.gguf: cannot create"),
              std::string::npos);
}

namespace {

// Writes a split set the way llama.cpp's gguf-split does: every part a full
// GGUF with split.no (0-based), split.count and split.tensors.count; part 1
// carries the model metadata. parts[i] lists the tensor names of part i.
std::vector<std::string> write_split(const std::string& prefix, const std::vector<std::vector<std::string>>& parts,
                                     int tamper_part = -1, const char* tamper_key = nullptr, int64_t tamper_value = 0) {
    int total = 0;
    for (auto& p : parts) total += int(p.size());
    std::vector<std::string> paths;
    for (size_t i = 0; i < parts.size(); ++i) {
        char name[64];
        std::snprintf(name, sizeof name, "-%05zu-of-%05zu.gguf", i + 1, parts.size());
        paths.push_back(prefix + name);
        GgufWriter w(paths.back());
        if (i == 0) w.set_string("general.architecture", "test");
        w.set_value("split.no", make(GgufType::UINT16, int64_t(i)));
        w.set_value("split.count", make(GgufType::UINT16, int64_t(parts.size())));
        w.set_value("split.tensors.count", make(GgufType::INT32, total));
        if (int(i) == tamper_part) w.set_value(tamper_key, make(GgufType::INT32, tamper_value));
        w.set_u32("part.only_" + std::to_string(i), uint32_t(i));
        for (auto& n : parts[i]) w.add_tensor(n, GgmlType::F32, {16, 2});
        w.begin_data();
        for (auto& n : parts[i]) {
            auto d = pattern(128, uint32_t(std::hash<std::string>()(n)));
            w.write_tensor_data(d.data(), d.size());
        }
        w.finish();
    }
    return paths;
}

}  // namespace

TEST(GgufSplit, OpensTheWholeSetFromAnyPart) {
    std::string prefix = temp_path("model");
    std::vector<std::vector<std::string>> parts = {{"t0", "t1"}, {"t2"}, {"t3", "t4", "t5"}};
    auto paths = write_split(prefix, parts);
    for (const auto& open_as : paths) {
        SCOPED_TRACE(open_as);
        GgufFile f = GgufFile::open(open_as);
        EXPECT_EQ(f.paths(), paths);
        EXPECT_EQ(f.path(), paths[0]);
        ASSERT_EQ(f.tensors().size(), 6u);
        EXPECT_EQ(f.get_string("general.architecture"), "test");
        EXPECT_EQ(f.get_int("split.no", -1), 0);  // part 1's value
        for (int i = 0; i < 3; ++i) EXPECT_EQ(f.get_int("part.only_" + std::to_string(i), -1), i);
        uint64_t total = 0;
        for (size_t i = 0; i < 3; ++i) {
            EXPECT_EQ(f.file_sizes()[i], fs::file_size(paths[i]));
            total += f.file_sizes()[i];
        }
        EXPECT_EQ(f.total_bytes(), total);
        const char* expect_name[] = {"t0", "t1", "t2", "t3", "t4", "t5"};
        int expect_split[] = {0, 0, 1, 2, 2, 2};
        for (int i = 0; i < 6; ++i) {
            const GgufTensor& t = f.tensors()[size_t(i)];
            EXPECT_EQ(t.name, expect_name[i]);
            EXPECT_EQ(t.split, expect_split[i]);
            std::vector<uint8_t> got(t.nbytes);
            f.read_tensor(t, got.data());
            EXPECT_EQ(got, pattern(128, uint32_t(std::hash<std::string>()(t.name))));
        }
    }
}

TEST(GgufSplit, MissingOrInconsistentParts) {
    std::string prefix = temp_path("broken");
    std::vector<std::vector<std::string>> parts = {{"a"}, {"b"}, {"c"}};
    auto paths = write_split(prefix, parts);
    fs::remove(paths[2]);
    EXPECT_NE(error_of([&] { GgufFile::open(paths[0]); }).find(paths[2] + ": cannot open part 3 of 3 of the split model"),
              std::string::npos);

    paths = write_split(prefix, parts, 1, "split.no", 2);
    EXPECT_NE(error_of([&] { GgufFile::open(paths[0]); }).find(paths[1] + ": split.no is 2, expected 1 for part 2"),
              std::string::npos);
    paths = write_split(prefix, parts, 2, "split.count", 4);
    EXPECT_NE(error_of([&] { GgufFile::open(paths[0]); }).find("split.count is 4 but the file name says 3 parts"),
              std::string::npos);
    paths = write_split(prefix, parts, 1, "split.tensors.count", 5);
    EXPECT_NE(error_of([&] { GgufFile::open(paths[0]); }).find(paths[1] + ": split.tensors.count differs"),
              std::string::npos);
    paths = write_split(prefix, parts, 0, "split.tensors.count", 4);
    EXPECT_NE(error_of([&] { GgufFile::open(paths[0]); }).find("split.tensors.count differs"), std::string::npos);
    paths = write_split(prefix, {{"a"}, {"b"}, {"a"}});
    EXPECT_NE(error_of([&] { GgufFile::open(paths[1]); }).find(paths[2] + ": duplicate tensor a (also in an earlier part)"),
              std::string::npos);

    // A part renamed so its name no longer says it is a split.
    paths = write_split(prefix, parts);
    std::string lone = temp_path("lone.gguf");
    fs::copy_file(paths[0], lone, fs::copy_options::overwrite_existing);
    EXPECT_NE(error_of([&] { GgufFile::open(lone); }).find("is part of a split set (split.count 3)"),
              std::string::npos);
    // A file named like a split that is not one.
    std::string fake = temp_path("fake-00001-of-00002.gguf");
    {
        GgufWriter w(fake);
        w.finish();
    }
    GgufWriter w2(temp_path("fake-00002-of-00002.gguf"));
    w2.finish();
    EXPECT_NE(error_of([&] { GgufFile::open(fake); }).find("named as part 1 of 2 but has no split.count"),
              std::string::npos);
}
