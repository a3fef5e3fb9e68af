// libFuzzer harness for the expert sidecar reader (header, expert table,
// source path, records): every way a model opens a sidecar (packed layout,
// --verify-experts checksums, pack --verify, the source lookup) on bytes
// derived from a real sidecar of a small model written at start-up.
// The sidecar's own checksum over header and table stops random bytes at the
// door, so most inputs are edits of the valid file with that checksum (and
// the recorded size) recomputed, which reaches the table's range checks.
// A std::runtime_error is the expected answer; anything else is a bug.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "store/layout.h"
#include <xxhash.h>

namespace {

// Offsets in the sidecar header (store/layout.cpp: magic 8, version,
// n_layers, n_entries, source_path_len 4 each, then 8-byte fields).
constexpr size_t kHeaderBytes = 72, kEntryBytes = 32;
constexpr size_t kEntriesAt = 16, kPathLenAt = 20, kFileSizeAt = 56, kHashAt = 64;

struct Fixture {
    std::string model_path;
    std::vector<uint8_t> valid;  // the sidecar `pack` writes for it
    std::optional<ms::GgufFile> model;
    std::vector<ms::ExpertLayer> layers;
    int fd = -1;
    std::string fd_path;
};

// Two MoE layers of 3 experts, F32 and Q8_0, so records differ in size.
std::string write_model() {
    const std::string path = "/tmp/fuzz_store_sidecar-" + std::to_string(getpid()) + ".gguf";
    ms::GgufWriter w(path);
    w.set_string("general.architecture", "qwen3moe");
    const int64_t E = 64, F = 32, X = 3;
    const ms::GgmlType types[2] = {ms::GgmlType::F32, ms::GgmlType::Q8_0};
    for (int l = 0; l < 2; l++) {
        const std::string b = "blk." + std::to_string(l) + ".";
        w.add_tensor(b + "ffn_gate_exps.weight", types[l], {E, F, X});
        w.add_tensor(b + "ffn_up_exps.weight", types[l], {E, F, X});
        w.add_tensor(b + "ffn_down_exps.weight", types[l], {F, E, X});
    }
    w.begin_data();
    for (int l = 0; l < 2; l++) {
        const size_t n = ms::row_bytes(types[l], E) * size_t(F * X);
        std::vector<uint8_t> bytes(n);
        for (size_t i = 0; i < n; i++) bytes[i] = uint8_t(i * 131 + size_t(l) * 7);
        if (types[l] == ms::GgmlType::Q8_0)  // keep every block's f16 scale finite
            for (size_t i = 0; i < n; i += 34) bytes[i + 1] = 0x3c;
        for (int m = 0; m < 3; m++) w.write_tensor_data(bytes.data(), n);
    }
    w.finish();
    return path;
}

Fixture& fixture() {
    static Fixture* fx = [] {
        auto* f = new Fixture{};
        f->model_path = write_model();
        static std::string to_remove = f->model_path;
        std::atexit([] { unlink(to_remove.c_str()); });
        f->model.emplace(ms::GgufFile::open(f->model_path));
        f->layers = ms::find_expert_layers(*f->model);
        const std::string side = f->model_path + ".experts";
        ms::write_sidecar(*f->model, f->layers, side);
        std::ifstream in(side, std::ios::binary);
        f->valid.assign(std::istreambuf_iterator<char>(in), {});
        unlink(side.c_str());
        f->fd = memfd_create("fuzz_store_sidecar", 0);
        if (f->fd < 0 || f->valid.size() < kHeaderBytes) std::abort();
        f->fd_path = "/proc/self/fd/" + std::to_string(f->fd);
        return f;
    }();
    return *fx;
}

template <class T>
T get(const std::vector<uint8_t>& b, size_t at) {
    T v;
    memcpy(&v, b.data() + at, sizeof v);
    return v;
}

template <class T>
void put(std::vector<uint8_t>& b, size_t at, T v) {
    memcpy(b.data() + at, &v, sizeof v);
}

// Makes the recorded size and the header checksum agree with the bytes, as
// a sidecar damaged in a way its checksum cannot see would.
void reseal(std::vector<uint8_t>& b) {
    if (b.size() < kHeaderBytes) return;
    put<uint64_t>(b, kFileSizeAt, b.size());
    const uint64_t table = uint64_t(get<uint32_t>(b, kEntriesAt)) * kEntryBytes + get<uint32_t>(b, kPathLenAt);
    if (table > b.size() - kHeaderBytes) return;
    put<uint64_t>(b, kHashAt, 0);
    put<uint64_t>(b, kHashAt, XXH3_64bits(b.data(), kHeaderBytes + size_t(table)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Fixture& fx = fixture();
    if (size == 0) return 0;
    // data[0] picks how the rest becomes a sidecar: 0 the rest XORed onto the
    // valid file (longer inputs extend it), 1 the same and resealed, 2 the
    // valid file cut to the rest's length, 3 the rest as it is.
    const uint8_t mode = data[0] % 4;
    const uint8_t* rest = data + 1;
    const size_t n = size - 1;
    std::vector<uint8_t> side;
    if (mode == 3) {
        side.assign(rest, rest + n);
    } else if (mode == 2) {
        side.assign(fx.valid.begin(), fx.valid.begin() + long(std::min(n, fx.valid.size())));
    } else {
        side = fx.valid;
        if (n > side.size()) side.resize(n, 0);
        for (size_t i = 0; i < n; i++) side[i] ^= rest[i];
        if (mode == 1) reseal(side);
    }
    if (ftruncate(fx.fd, 0) != 0 || pwrite(fx.fd, side.data(), side.size(), 0) != ssize_t(side.size())) std::abort();

    try {
        ms::ExpertLayout lay = ms::ExpertLayout::packed(*fx.model, fx.layers, fx.fd_path);
        // An accepted table places every expert inside the file.
        for (int l = 0; l < lay.n_layers(); l++)
            for (int e = 0; e < lay.layers()[size_t(l)].n_expert; e++) {
                const ms::ExpertPlacement p = lay.place(l, e);
                for (int r = 0; r < p.n_reads; r++)
                    if (p.reads[r].offset + p.reads[r].need > side.size()) std::abort();
            }
    } catch (const std::runtime_error&) {
    }
    try {
        ms::ExpertLayout lay = ms::ExpertLayout::gguf(*fx.model, fx.layers);
        lay.adopt_checksums(*fx.model, fx.fd_path);
    } catch (const std::runtime_error&) {
    }
    try {
        ms::verify_sidecar(*fx.model, fx.layers, fx.fd_path);
    } catch (const std::runtime_error&) {
    }
    try {
        (void)ms::sidecar_source(fx.fd_path);
    } catch (const std::runtime_error&) {
    }
    return 0;
}
