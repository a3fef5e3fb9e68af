// The packed sidecar: written from golden models, read back byte-exact through
// the packed layout, verified; a damaged byte, a stale or foreign sidecar, a
// truncated one are each refused with a message naming what is wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "store/layout.h"
#include "test_util.h"
#include "../golden_required.h"

namespace ms {
namespace {

using test::golden_model;
using test::TempDir;

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

TEST(Pack, RoundTripMatchesGgufBytes) {
    for (const char* name : {"qwen3moe-Q4_K_M", "gemma4-Q8_0", "deepseek2-lite-Q8_0", "gpt-oss-MXFP4_MOE"}) {
        SCOPED_TRACE(name);
        TempDir dir;
        GgufFile f = GgufFile::open(golden_model(name));
        std::vector<ExpertLayer> layers = find_expert_layers(f);
        std::string side = dir.file("m.experts");
        uint64_t last_done = 0, total_seen = 0;
        write_sidecar(f, layers, side, [&](uint64_t done, uint64_t total) {
            EXPECT_GE(done, last_done);
            last_done = done;
            total_seen = total;
        });
        EXPECT_EQ(last_done, total_seen);
        ExpertLayout lay = ExpertLayout::packed(f, layers, side);
        EXPECT_EQ(lay.kind(), LayoutKind::Packed);
        test::check_placements(f, lay);
        // One read per expert, each record 4 KiB aligned.
        for (const ExpertLayer& L : layers)
            for (int e = 0; e < L.n_expert; e++) {
                ExpertPlacement p = lay.place(L.layer, e);
                EXPECT_EQ(p.n_reads, 1);
                EXPECT_TRUE(p.has_checksum);
            }
        char* real = realpath(golden_model(name).c_str(), nullptr);
        EXPECT_EQ(sidecar_source(side), std::string(real));
        free(real);
        VerifyResult r = verify_sidecar(f, layers, side);
        EXPECT_EQ(r.experts, uint64_t(lay.total_experts()));
        EXPECT_EQ(r.bytes, lay.expert_bytes_total());
    }
}

// A sidecar of qwen3moe-Q4_K_M in a scratch directory.
struct Packed {
    TempDir dir;
    GgufFile f = GgufFile::open(golden_model("qwen3moe-Q4_K_M"));
    std::vector<ExpertLayer> layers = find_expert_layers(f);
    std::string side = dir.file("m.experts");
    Packed() { write_sidecar(f, layers, side); }
};

TEST(Pack, CorruptedByteNamesLayerAndExpert) {
    Packed p;
    auto& [dir, f, layers, side] = p;
    ExpertLayout lay = ExpertLayout::packed(f, layers, side);
    test::flip_byte(side, lay.place(1, 5).reads[0].offset + 1000);
    std::string err = error_of([&] { verify_sidecar(f, layers, side); });
    EXPECT_NE(err.find("layer 1 expert 5: checksum mismatch"), std::string::npos) << err;
    EXPECT_NE(err.find(side), std::string::npos) << err;
}

TEST(Pack, DamagedTableTruncationAndForeignFiles) {
    Packed p;
    auto& [dir, f, layers, side] = p;

    std::string table = dir.file("table.experts");
    test::copy_file(side, table);
    test::flip_byte(table, 80);  // inside the expert table
    EXPECT_NE(error_of([&] { ExpertLayout::packed(f, layers, table); }).find("damaged"), std::string::npos);

    std::string cut = dir.file("cut.experts");
    test::copy_file(side, cut);
    struct stat st;
    ASSERT_EQ(stat(cut.c_str(), &st), 0);
    ASSERT_EQ(truncate(cut.c_str(), st.st_size - 4096), 0);
    EXPECT_NE(error_of([&] { ExpertLayout::packed(f, layers, cut); }).find("truncated"), std::string::npos);

    std::string junk = dir.file("junk.experts");
    test::copy_file(golden_model("qwen3moe-Q4_K_M"), junk);
    EXPECT_NE(error_of([&] { ExpertLayout::packed(f, layers, junk); }).find("bad magic"), std::string::npos);

    EXPECT_NE(error_of([&] { ExpertLayout::packed(f, layers, dir.file("absent.experts")); }).find("moestream pack"),
              std::string::npos);
}

TEST(Pack, StaleSidecarIsRefusedNamingTheChange) {
    TempDir dir;
    std::string model = dir.file("m.gguf");
    test::copy_file(golden_model("qwen3moe-Q4_K_M"), model);
    std::string side = sidecar_path(model);
    {
        GgufFile f = GgufFile::open(model);
        write_sidecar(f, find_expert_layers(f), side);
        std::string note;
        ExpertLayout lay = ExpertLayout::open(f, find_expert_layers(f), "auto", &note);
        EXPECT_EQ(lay.kind(), LayoutKind::Packed);  // a valid sidecar next to the model is taken
        EXPECT_EQ(note, "");
    }
    // Touch the model: same bytes, new mtime.
    struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, model.c_str(), times, 0), 0);
    GgufFile f = GgufFile::open(model);
    std::vector<ExpertLayer> layers = find_expert_layers(f);
    std::string err = error_of([&] { ExpertLayout::open(f, layers, "packed", nullptr); });
    EXPECT_NE(err.find("stale sidecar"), std::string::npos) << err;
    EXPECT_NE(err.find("mtime"), std::string::npos) << err;
    EXPECT_EQ(err.find("size"), std::string::npos) << err;  // only what differs is named

    std::string note;
    ExpertLayout lay = ExpertLayout::open(f, layers, "auto", &note);
    EXPECT_EQ(lay.kind(), LayoutKind::Gguf);
    EXPECT_NE(note.find("stale sidecar"), std::string::npos) << note;

    EXPECT_EQ(ExpertLayout::open(f, layers, "gguf", nullptr).kind(), LayoutKind::Gguf);
    EXPECT_NE(error_of([&] { ExpertLayout::open(f, layers, "fast", nullptr); }).find("--layout"), std::string::npos);
}

TEST(Pack, ForeignSidecarIsRefused) {
    TempDir dir;
    GgufFile a = GgufFile::open(golden_model("qwen3moe-Q4_K_M"));
    GgufFile b = GgufFile::open(golden_model("qwen3moe-Q8_0"));
    std::string side = dir.file("a.experts");
    write_sidecar(a, find_expert_layers(a), side);
    std::string err = error_of([&] { ExpertLayout::packed(b, find_expert_layers(b), side); });
    EXPECT_NE(err.find("foreign sidecar"), std::string::npos) << err;
    EXPECT_NE(err.find("tensor table differs"), std::string::npos) << err;
}

}  // namespace
}  // namespace ms
