#include "store/layout.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "store/io.h"

namespace ms {

// ---------------------------------------------------------------------------
// Finding the expert tensors

static ExpertMatrix expert_matrix(const GgufFile& f, const GgufTensor& t) {
    auto fail = [&](const std::string& why) { return std::runtime_error(f.path() + ": " + t.name + ": " + why); };
    const TypeTraits& tr = type_traits(t.type);
    if (!tr.valid) throw fail("unknown tensor type");
    if (t.n_dims != 3) throw fail("expected 3 dimensions (cols, rows, experts), got " + std::to_string(t.n_dims));
    if (t.ne[0] <= 0 || t.ne[1] <= 0 || t.ne[2] <= 0 || t.ne[0] % tr.block_size != 0)
        throw fail("bad shape for type " + std::string(tr.name));
    ExpertMatrix m;
    m.tensor = t.name;
    m.type = t.type;
    m.cols = t.ne[0];
    m.rows = t.ne[1];
    m.split = t.split;
    m.base = t.offset;
    m.stride = uint64_t(row_bytes(t.type, t.ne[0])) * uint64_t(t.ne[1]);
    m.bytes = size_t(m.stride);
    if (m.stride * uint64_t(t.ne[2]) != t.nbytes) throw fail("size does not match its shape");
    return m;
}

std::vector<ExpertLayer> find_expert_layers(const GgufFile& f) {
    struct Found {
        const GgufTensor *gate = nullptr, *up = nullptr, *down = nullptr, *gate_up = nullptr;
    };
    std::vector<Found> found;
    int n_blocks = 0;
    for (const GgufTensor& t : f.tensors()) {
        int blk = -1, used = 0;
        if (sscanf(t.name.c_str(), "blk.%d.%n", &blk, &used) != 1 || blk < 0 || used == 0) continue;
        n_blocks = std::max(n_blocks, blk + 1);
        if (size_t(blk) >= found.size()) found.resize(size_t(blk) + 1);
        std::string rest = t.name.substr(size_t(used));
        Found& b = found[size_t(blk)];
        if (rest == "ffn_gate_exps.weight" || rest == "ffn_gate_exps") b.gate = &t;
        else if (rest == "ffn_up_exps.weight" || rest == "ffn_up_exps") b.up = &t;
        else if (rest == "ffn_down_exps.weight" || rest == "ffn_down_exps") b.down = &t;
        else if (rest == "ffn_gate_up_exps.weight" || rest == "ffn_gate_up_exps") b.gate_up = &t;
    }
    std::vector<ExpertLayer> layers(static_cast<size_t>(n_blocks));
    for (int l = 0; l < n_blocks; l++) {
        ExpertLayer& L = layers[size_t(l)];
        L.layer = l;
        if (size_t(l) >= found.size()) continue;
        const Found& b = found[size_t(l)];
        if (!b.gate && !b.up && !b.down && !b.gate_up) continue;
        std::string blk = "blk." + std::to_string(l) + ".";
        if (!b.down) throw std::runtime_error(f.path() + ": " + blk + "ffn_down_exps missing");
        if (b.gate_up) {
            ExpertMatrix gu = expert_matrix(f, *b.gate_up);
            if (gu.rows % 2 != 0) throw std::runtime_error(f.path() + ": " + gu.tensor + ": odd row count");
            L.gate = gu;
            L.gate.rows = gu.rows / 2;
            L.gate.bytes = gu.bytes / 2;
            L.up = L.gate;
            L.up.base = gu.base + L.gate.bytes;
            L.n_expert = int(b.gate_up->ne[2]);
        } else {
            if (!b.gate || !b.up)
                throw std::runtime_error(f.path() + ": " + blk + (b.gate ? "ffn_up_exps" : "ffn_gate_exps") +
                                         " missing");
            L.gate = expert_matrix(f, *b.gate);
            L.up = expert_matrix(f, *b.up);
            L.n_expert = int(b.gate->ne[2]);
            if (b.up->ne[2] != b.gate->ne[2] || L.up.cols != L.gate.cols || L.up.rows != L.gate.rows)
                throw std::runtime_error(f.path() + ": " + blk + "ffn_up_exps: shape differs from ffn_gate_exps");
        }
        L.down = expert_matrix(f, *b.down);
        if (b.down->ne[2] != L.n_expert || L.down.cols != L.gate.rows || L.down.rows != L.gate.cols)
            throw std::runtime_error(f.path() + ": " + L.down.tensor + ": shape does not match the gate/up experts");
    }
    return layers;
}

// ---------------------------------------------------------------------------
// Fingerprint

SourceFingerprint fingerprint(const GgufFile& f) {
    SourceFingerprint fp;
    for (const std::string& p : f.paths()) {
        struct stat st;
        if (stat(p.c_str(), &st) != 0) throw std::runtime_error(p + ": " + strerror(errno));
        fp.size += uint64_t(st.st_size);
        fp.mtime_ns = std::max(fp.mtime_ns, int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
    }
    XXH3_state_t* h = XXH3_createState();
    XXH3_64bits_reset(h);
    for (const GgufTensor& t : f.tensors()) {
        XXH3_64bits_update(h, t.name.data(), t.name.size() + 1);  // include the NUL as separator
        uint64_t fields[9] = {uint64_t(t.type), t.n_dims,   uint64_t(t.ne[0]), uint64_t(t.ne[1]), uint64_t(t.ne[2]),
                              uint64_t(t.ne[3]), uint64_t(t.split), t.offset,  t.nbytes};
        XXH3_64bits_update(h, fields, sizeof fields);
    }
    fp.table_hash = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return fp;
}

// ---------------------------------------------------------------------------
// Sidecar format (little-endian, as the structs lie in memory on x86-64):
//   SidecarHeader | SidecarEntry x n_entries | source path | padding to 4 KiB | records
// Each record is one expert's gate|up|down bytes at a 4 KiB-aligned offset,
// zero-padded to a multiple of 4 KiB, so one O_DIRECT read fetches it whole.

namespace {

constexpr char kMagic[8] = {'M', 'S', 'E', 'X', 'P', 'R', 'T', 'S'};
constexpr uint32_t kVersion = 1;

struct SidecarHeader {
    char magic[8];
    uint32_t version;
    uint32_t n_layers;
    uint32_t n_entries;
    uint32_t source_path_len;  // the model's absolute path follows the table (for `pack --verify SIDECAR`)
    uint64_t source_size;
    int64_t source_mtime_ns;
    uint64_t table_hash;
    uint64_t data_offset;
    uint64_t file_size;
    uint64_t header_hash;  // xxh3 of this header (with header_hash = 0) and the entries
};
static_assert(sizeof(SidecarHeader) == 72);

struct SidecarEntry {
    uint32_t layer;
    uint32_t expert;
    uint64_t offset;
    uint64_t size;
    uint64_t checksum;
};
static_assert(sizeof(SidecarEntry) == 32);

uint64_t header_hash(SidecarHeader h, const std::vector<SidecarEntry>& entries, const std::string& source) {
    h.header_hash = 0;
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, &h, sizeof h);
    XXH3_64bits_update(st, entries.data(), entries.size() * sizeof(SidecarEntry));
    XXH3_64bits_update(st, source.data(), source.size());
    uint64_t v = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return v;
}

std::string describe_time(int64_t ns) {
    time_t s = time_t(ns / 1000000000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char buf[64];
    strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return buf;
}

struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) close(fd);
    }
};

void read_exact(int fd, const std::string& path, void* dst, uint64_t n, uint64_t off, const std::string& what) {
    int64_t r = pread_full(fd, dst, n, off);
    if (r < 0) throw std::runtime_error(path + ": " + what + ": read failed: " + strerror(int(-r)));
    if (uint64_t(r) != n) throw std::runtime_error(path + ": " + what + ": file is truncated");
}

// A sidecar's header, table and source path, checked for internal
// consistency (not yet against a model).
struct SidecarTable {
    SidecarHeader h;
    std::vector<SidecarEntry> entries;
    std::string source;
    uint64_t file_size = 0;
};

SidecarTable read_sidecar_table(const std::string& path, int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) throw std::runtime_error(path + ": " + strerror(errno));
    SidecarTable t;
    SidecarHeader& h = t.h;
    t.file_size = uint64_t(st.st_size);
    if (t.file_size < sizeof h) throw std::runtime_error(path + ": not an expert sidecar (too small)");
    read_exact(fd, path, &h, sizeof h, 0, "header");
    if (memcmp(h.magic, kMagic, 8) != 0)
        throw std::runtime_error(path + ": not a moestream expert sidecar (bad magic)");
    if (h.version != kVersion)
        throw std::runtime_error(path + ": sidecar version " + std::to_string(h.version) + ", this build reads " +
                                 std::to_string(kVersion) + " (run `moestream pack` again)");
    if (h.file_size != t.file_size)
        throw std::runtime_error(path + ": sidecar is " + std::to_string(t.file_size) + " bytes, its header says " +
                                 std::to_string(h.file_size) + " (truncated or incomplete pack)");
    uint64_t table_end = sizeof h + uint64_t(h.n_entries) * sizeof(SidecarEntry) + h.source_path_len;
    if (table_end > t.file_size || h.data_offset < table_end || h.data_offset > t.file_size)
        throw std::runtime_error(path + ": sidecar header is damaged (table out of range)");
    t.entries.resize(h.n_entries);
    read_exact(fd, path, t.entries.data(), t.entries.size() * sizeof(SidecarEntry), sizeof h, "expert table");
    t.source.resize(h.source_path_len);
    read_exact(fd, path, t.source.data(), t.source.size(), sizeof h + t.entries.size() * sizeof(SidecarEntry),
               "source path");
    if (header_hash(h, t.entries, t.source) != h.header_hash)
        throw std::runtime_error(path + ": sidecar header or expert table is damaged (checksum mismatch)");
    return t;
}

// Reads and checks a sidecar's header and table against the model; throws
// naming the first problem, with every fingerprint field that differs.
std::vector<SidecarEntry> load_sidecar_table(const GgufFile& f, const std::vector<ExpertLayer>& layers,
                                             const std::string& path, int fd) {
    SidecarTable t = read_sidecar_table(path, fd);
    const SidecarHeader& h = t.h;
    const std::vector<SidecarEntry>& entries = t.entries;
    const uint64_t file_size = t.file_size;
    SourceFingerprint fp = fingerprint(f);
    if (fp.table_hash != h.table_hash || fp.size != h.source_size || fp.mtime_ns != h.source_mtime_ns) {
        std::string diff;
        auto add = [&](const std::string& s) { diff += (diff.empty() ? "" : "; ") + s; };
        if (fp.table_hash != h.table_hash) add("tensor table differs");
        if (fp.size != h.source_size)
            add("size " + std::to_string(h.source_size) + " -> " + std::to_string(fp.size) + " bytes");
        if (fp.mtime_ns != h.source_mtime_ns)
            add("mtime " + describe_time(h.source_mtime_ns) + " -> " + describe_time(fp.mtime_ns));
        const char* kind = fp.table_hash != h.table_hash ? "foreign sidecar (packed from a different model)"
                                                          : "stale sidecar (the model changed since it was packed)";
        throw std::runtime_error(path + ": " + kind + " for " + f.path() + ": " + diff +
                                 "; run `moestream pack " + f.path() + "` again");
    }

    // The model may use fewer layers than the file holds (e.g. a next-token
    // prediction block it skips), so match entries by (layer, expert) and
    // return them in the model's order.
    std::unordered_map<uint64_t, size_t> by_key;
    for (size_t i = 0; i < entries.size(); i++)
        by_key[uint64_t(entries[i].layer) << 32 | entries[i].expert] = i;
    std::vector<SidecarEntry> out;
    for (const ExpertLayer& L : layers)
        for (int e = 0; e < (L.rows ? 0 : L.n_expert); e++) {
            std::string who = "layer " + std::to_string(L.layer) + " expert " + std::to_string(e);
            auto it = by_key.find(uint64_t(L.layer) << 32 | uint32_t(e));
            if (it == by_key.end()) throw std::runtime_error(path + ": " + who + ": missing from the sidecar");
            const SidecarEntry& en = entries[it->second];
            if (en.size != L.expert_bytes())
                throw std::runtime_error(path + ": " + who + ": " + std::to_string(en.size) +
                                         " bytes in the sidecar, the model needs " +
                                         std::to_string(L.expert_bytes()));
            if (en.offset % kIoAlign != 0 || en.offset < h.data_offset ||
                en.offset + align_up(en.size, kIoAlign) > file_size)
                throw std::runtime_error(path + ": " + who + ": record out of range (damaged sidecar)");
            out.push_back(en);
        }
    return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// ExpertLayout

ExpertLayout ExpertLayout::gguf(const GgufFile& f, std::vector<ExpertLayer> layers) {
    ExpertLayout lay;
    lay.kind_ = LayoutKind::Gguf;
    lay.files_ = f.paths();
    lay.layers_ = std::move(layers);
    lay.finish_init();
    return lay;
}

ExpertLayout ExpertLayout::packed(const GgufFile& f, std::vector<ExpertLayer> layers, const std::string& sidecar) {
    Fd fd;
    fd.fd = ::open(sidecar.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd.fd < 0) throw std::runtime_error(sidecar + ": " + strerror(errno) + " (write it with `moestream pack`)");
    std::vector<SidecarEntry> entries = load_sidecar_table(f, layers, sidecar, fd.fd);
    ExpertLayout lay;
    lay.kind_ = LayoutKind::Packed;
    // Rows (per-layer embeddings) are not packed: they are read from the
    // GGUF, whose splits follow the sidecar.
    lay.files_ = {sidecar};
    for (const std::string& p : f.paths()) lay.files_.push_back(p);
    lay.layers_ = std::move(layers);
    lay.records_.resize(lay.layers_.size());
    size_t i = 0;
    for (size_t l = 0; l < lay.layers_.size(); l++)
        for (int e = 0; e < (lay.layers_[l].rows ? 0 : lay.layers_[l].n_expert); e++, i++)
            lay.records_[l].push_back({entries[i].offset, entries[i].size, entries[i].checksum});
    lay.finish_init();
    return lay;
}

ExpertLayout ExpertLayout::open(const GgufFile& f, std::vector<ExpertLayer> layers, const std::string& mode,
                                std::string* note) {
    std::string side = sidecar_path(f.path());
    if (mode == "gguf") return gguf(f, std::move(layers));
    if (mode == "packed") return packed(f, std::move(layers), side);
    if (mode != "auto") throw std::runtime_error("--layout: expected auto, gguf or packed, got '" + mode + "'");
    if (access(side.c_str(), F_OK) != 0) return gguf(f, std::move(layers));
    try {
        return packed(f, layers, side);
    } catch (const std::exception& e) {
        if (note) *note = std::string("not using the sidecar: ") + e.what() + "; reading experts from the GGUF";
        return gguf(f, std::move(layers));
    }
}

void ExpertLayout::adopt_checksums(const GgufFile& f, const std::string& sidecar) {
    if (kind_ != LayoutKind::Gguf) return;  // a packed layout has them already
    Fd fd;
    fd.fd = ::open(sidecar.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd.fd < 0)
        throw std::runtime_error(sidecar + ": " + strerror(errno) +
                                 " (--verify-experts checks against the table `moestream pack` writes there)");
    std::vector<SidecarEntry> entries = load_sidecar_table(f, layers_, sidecar, fd.fd);
    records_.assign(layers_.size(), {});
    size_t i = 0;
    for (size_t l = 0; l < layers_.size(); l++)
        for (int e = 0; e < (layers_[l].rows ? 0 : layers_[l].n_expert); e++, i++)
            records_[l].push_back({entries[i].offset, entries[i].size, entries[i].checksum});
}

ExpertPlacement ExpertLayout::place(int layer, int expert) const {
    const ExpertLayer& L = layers_[size_t(layer)];
    ExpertPlacement p;
    p.bytes = L.expert_bytes();
    if (kind_ == LayoutKind::Gguf && !records_.empty() && !L.rows) {
        p.checksum = records_[size_t(layer)][size_t(expert)].checksum;
        p.has_checksum = true;
    }
    if (kind_ == LayoutKind::Packed && !L.rows) {
        const Record& r = records_[size_t(layer)][size_t(expert)];
        p.n_reads = 1;
        p.reads[0] = {0, r.offset, align_up(r.size, kIoAlign), 0, r.size};
        p.gate = 0;
        p.up = L.gate.bytes;
        p.down = L.gate.bytes + L.up.bytes;
        p.checksum = r.checksum;
        p.has_checksum = true;
        return p;
    }
    // gguf: gate, up and down are separate slices (adjacent ones, like a fused
    // gate_up's halves, merge into one run). Each run is read as its aligned
    // superset into its own 4 KiB-aligned stretch of the slot; the matrix
    // views point at the real bytes inside it.
    const ExpertMatrix* mats[3] = {&L.gate, &L.up, &L.down};
    uint64_t* view[3] = {&p.gate, &p.up, &p.down};
    uint64_t slot_pos = 0;
    int run_split = -1;
    uint64_t run_start = 0, run_end = 0;
    int run_first = 0;
    const int first_split = kind_ == LayoutKind::Packed ? 1 : 0;  // packed: the GGUF splits follow the sidecar
    auto flush = [&](int last) {
        ExpertRead& r = p.reads[p.n_reads++];
        r.file = first_split + run_split;
        r.offset = align_down(run_start, kIoAlign);
        r.len = align_up(run_end, kIoAlign) - r.offset;
        r.slot_offset = slot_pos;
        r.need = run_end - r.offset;
        for (int m = run_first; m <= last; m++) *view[m] = slot_pos + (mats[m]->offset(expert) - r.offset);
        slot_pos += r.len;
    };
    for (int m = 0; m < 3; m++) {
        uint64_t off = mats[m]->offset(expert);
        if (m > 0 && mats[m]->split == run_split && off == run_end) {
            run_end += mats[m]->bytes;
            continue;
        }
        if (m > 0) flush(m - 1);
        run_split = mats[m]->split;
        run_start = off;
        run_end = off + mats[m]->bytes;
        run_first = m;
    }
    flush(2);
    return p;
}

void ExpertLayout::finish_init() {
    max_experts_ = total_experts_ = 0;
    slot_bytes_ = expert_bytes_total_ = 0;
    for (const ExpertLayer& L : layers_) {
        max_experts_ = std::max(max_experts_, L.n_expert);
        total_experts_ += L.n_expert;
        for (int e = 0; e < L.n_expert; e++) {
            ExpertPlacement p = place(L.layer, e);
            const ExpertRead& last = p.reads[p.n_reads - 1];
            slot_bytes_ = std::max(slot_bytes_, last.slot_offset + last.len);
            expert_bytes_total_ += p.bytes;
        }
    }
}

// ---------------------------------------------------------------------------
// Writing and verifying sidecars

// Reads expert (L, e)'s gate|up|down bytes from the GGUF into dst.
static void read_expert_from_gguf(const GgufFile& f, const ExpertLayer& L, int e, uint8_t* dst) {
    f.read(L.gate.split, L.gate.offset(e), dst, L.gate.bytes);
    f.read(L.up.split, L.up.offset(e), dst + L.gate.bytes, L.up.bytes);
    f.read(L.down.split, L.down.offset(e), dst + L.gate.bytes + L.up.bytes, L.down.bytes);
}

void write_sidecar(const GgufFile& f, const std::vector<ExpertLayer>& layers, const std::string& out,
                   const ProgressFn& progress) {
    std::vector<SidecarEntry> entries;
    uint64_t max_bytes = 0, total = 0;
    for (const ExpertLayer& L : layers)
        for (int e = 0; e < L.n_expert; e++) {
            entries.push_back({uint32_t(L.layer), uint32_t(e), 0, L.expert_bytes(), 0});
            max_bytes = std::max<uint64_t>(max_bytes, L.expert_bytes());
            total += L.expert_bytes();
        }
    if (entries.empty()) throw std::runtime_error(f.path() + ": no routed experts to pack");

    SidecarHeader h{};
    memcpy(h.magic, kMagic, 8);
    h.version = kVersion;
    h.n_layers = uint32_t(layers.size());
    h.n_entries = uint32_t(entries.size());
    SourceFingerprint fp = fingerprint(f);
    h.source_size = fp.size;
    h.source_mtime_ns = fp.mtime_ns;
    h.table_hash = fp.table_hash;
    char* real = realpath(f.path().c_str(), nullptr);
    std::string source = real ? real : f.path();
    free(real);
    h.source_path_len = uint32_t(source.size());
    h.data_offset = align_up(sizeof h + entries.size() * sizeof(SidecarEntry) + source.size(), kIoAlign);
    uint64_t pos = h.data_offset;
    for (SidecarEntry& en : entries) {
        en.offset = pos;
        pos += align_up(en.size, kIoAlign);
    }
    h.file_size = pos;

    std::string tmp = out + ".tmp";
    Fd fd;
    fd.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd.fd < 0) throw std::runtime_error(tmp + ": " + strerror(errno));
    auto write_at = [&](const void* src, uint64_t n, uint64_t off) {
        const uint8_t* p = static_cast<const uint8_t*>(src);
        while (n > 0) {
            ssize_t w = pwrite(fd.fd, p, n, off_t(off));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                std::string why = w < 0 ? strerror(errno) : "no progress";
                unlink(tmp.c_str());
                throw std::runtime_error(tmp + ": write failed at " + std::to_string(off) + ": " + why);
            }
            p += w, n -= uint64_t(w), off += uint64_t(w);
        }
    };
    std::vector<uint8_t> buf(align_up(max_bytes, kIoAlign));
    uint64_t done = 0;
    size_t i = 0;
    for (const ExpertLayer& L : layers)
        for (int e = 0; e < L.n_expert; e++, i++) {
            SidecarEntry& en = entries[i];
            read_expert_from_gguf(f, L, e, buf.data());
            uint64_t padded = align_up(en.size, kIoAlign);
            memset(buf.data() + en.size, 0, padded - en.size);
            en.checksum = XXH3_64bits(buf.data(), en.size);
            write_at(buf.data(), padded, en.offset);
            done += en.size;
            if (progress) progress(done, total);
        }
    h.header_hash = header_hash(h, entries, source);
    std::vector<uint8_t> head(h.data_offset, 0);
    memcpy(head.data(), &h, sizeof h);
    memcpy(head.data() + sizeof h, entries.data(), entries.size() * sizeof(SidecarEntry));
    memcpy(head.data() + sizeof h + entries.size() * sizeof(SidecarEntry), source.data(), source.size());
    write_at(head.data(), head.size(), 0);
    if (fdatasync(fd.fd) != 0 || rename(tmp.c_str(), out.c_str()) != 0) {
        std::string why = strerror(errno);
        unlink(tmp.c_str());
        throw std::runtime_error(out + ": " + why);
    }
}

std::string sidecar_source(const std::string& sidecar) {
    Fd fd;
    fd.fd = ::open(sidecar.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd.fd < 0) throw std::runtime_error(sidecar + ": " + strerror(errno));
    return read_sidecar_table(sidecar, fd.fd).source;
}

VerifyResult verify_sidecar(const GgufFile& f, const std::vector<ExpertLayer>& layers, const std::string& sidecar,
                            const ProgressFn& progress) {
    Fd fd;
    fd.fd = ::open(sidecar.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd.fd < 0) throw std::runtime_error(sidecar + ": " + strerror(errno));
    std::vector<SidecarEntry> entries = load_sidecar_table(f, layers, sidecar, fd.fd);
    uint64_t total = 0, max_bytes = 0;
    for (const SidecarEntry& en : entries) total += en.size, max_bytes = std::max(max_bytes, en.size);
    std::vector<uint8_t> buf(max_bytes);
    VerifyResult res;
    for (const SidecarEntry& en : entries) {
        std::string who = "layer " + std::to_string(en.layer) + " expert " + std::to_string(en.expert);
        read_exact(fd.fd, sidecar, buf.data(), en.size, en.offset, who);
        if (XXH3_64bits(buf.data(), en.size) != en.checksum)
            throw std::runtime_error(sidecar + ": " + who + ": checksum mismatch (the sidecar is damaged; run " +
                                     "`moestream pack` again)");
        res.experts++;
        res.bytes += en.size;
        if (progress) progress(res.bytes, total);
    }
    return res;
}

}  // namespace ms
