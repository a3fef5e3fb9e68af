// Where each routed expert's bytes live on disk and how one read of them lands
// in a cache slot. Two layouts: `gguf` reads the expert's slices of the
// ffn_*_exps tensors straight from the model; `packed` reads one contiguous,
// 4 KiB-aligned, checksummed record from the sidecar MODEL.gguf.experts that
// `moestream pack` writes. Per-expert bias and scale rows (gpt-oss, gemma4)
// are a few KiB per layer and stay resident in the model, not here.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/expert_source.h"

namespace ms {

// O_DIRECT needs file offsets, lengths and buffer addresses aligned to the
// device's logical block; 4 KiB covers every NVMe/SATA drive we target.
constexpr uint64_t kIoAlign = 4096;
inline uint64_t align_down(uint64_t x, uint64_t a) { return x / a * a; }
inline uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// The routed-expert tensors of every block of a GGUF (blk.N.ffn_{gate,up,down}_exps
// or the fused blk.N.ffn_gate_up_exps). One entry per block, n_expert == 0 for
// blocks without routed experts. Throws "PATH: TENSOR: problem" on
// inconsistent shapes.
std::vector<ExpertLayer> find_expert_layers(const GgufFile& f);

// One aligned read of a run of the expert's bytes: [offset, offset+len) of
// file `file` into slot bytes [slot_offset, slot_offset+len). `need` is how
// many of those bytes must arrive (the rest is alignment padding that may lie
// past the end of the file).
struct ExpertRead {
    int file = 0;
    uint64_t offset = 0;
    uint64_t len = 0;
    uint64_t slot_offset = 0;
    uint64_t need = 0;
};

// Everything needed to load expert (layer, expert) into a slot and view it.
struct ExpertPlacement {
    int n_reads = 0;
    ExpertRead reads[3];
    uint64_t gate = 0, up = 0, down = 0;  // matrix offsets inside the slot
    uint64_t bytes = 0;                   // the expert's own bytes (without padding)
    uint64_t checksum = 0;                // xxh3-64 of gate|up|down (packed, or gguf with a checksum table)
    bool has_checksum = false;
};

// Fingerprint of a source GGUF stored in a sidecar header: changes whenever
// the model file is replaced or rewritten.
struct SourceFingerprint {
    uint64_t size = 0;        // sum of the split files' sizes
    int64_t mtime_ns = 0;     // latest modification time among the splits
    uint64_t table_hash = 0;  // xxh3 of the tensor table (names, types, shapes, offsets)
};
SourceFingerprint fingerprint(const GgufFile& f);

enum class LayoutKind { Gguf, Packed };

class ExpertLayout {
public:
    // Experts read from the GGUF itself.
    static ExpertLayout gguf(const GgufFile& f, std::vector<ExpertLayer> layers);
    // Experts read from a sidecar written by write_sidecar; throws naming what
    // differs when it is stale (source changed), foreign or damaged.
    static ExpertLayout packed(const GgufFile& f, std::vector<ExpertLayer> layers, const std::string& sidecar);
    // mode "gguf", "packed" (sidecar = model path + ".experts") or "auto":
    // the sidecar when present and valid, else gguf; a present but unusable
    // sidecar is skipped with *note saying why.
    static ExpertLayout open(const GgufFile& f, std::vector<ExpertLayer> layers, const std::string& mode,
                             std::string* note);
    // gguf layout: checks every expert read against the xxh3 table of the
    // sidecar `moestream pack` wrote (read from its header only), so damaged
    // reads are caught without reading from the sidecar. Throws when the
    // sidecar is missing, stale or damaged.
    void adopt_checksums(const GgufFile& f, const std::string& sidecar);

    LayoutKind kind() const { return kind_; }
    const char* name() const { return kind_ == LayoutKind::Packed ? "packed" : "gguf"; }
    // Paths the file indices of ExpertRead refer to: the GGUF splits, or the sidecar.
    const std::vector<std::string>& files() const { return files_; }
    const std::vector<ExpertLayer>& layers() const { return layers_; }
    int n_layers() const { return int(layers_.size()); }
    int max_experts() const { return max_experts_; }
    int total_experts() const { return total_experts_; }

    ExpertPlacement place(int layer, int expert) const;
    // Whether place() gives checksums (packed, or gguf after adopt_checksums).
    bool has_checksums() const { return kind_ == LayoutKind::Packed || !records_.empty(); }
    // Bytes of the largest slot any expert needs (a multiple of kIoAlign).
    uint64_t slot_bytes() const { return slot_bytes_; }
    // Sum of all experts' own bytes.
    uint64_t expert_bytes_total() const { return expert_bytes_total_; }

private:
    void finish_init();
    LayoutKind kind_ = LayoutKind::Gguf;
    std::vector<std::string> files_;
    std::vector<ExpertLayer> layers_;
    struct Record {
        uint64_t offset, size, checksum;
    };
    std::vector<std::vector<Record>> records_;  // packed: [layer][expert]
    int max_experts_ = 0, total_experts_ = 0;
    uint64_t slot_bytes_ = 0, expert_bytes_total_ = 0;
};

// The sidecar path `moestream pack` uses by default.
inline std::string sidecar_path(const std::string& model_path) { return model_path + ".experts"; }

// Writes the packed sidecar for f to out (through out + ".tmp", renamed when
// complete). progress(done, total) is called with bytes written.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;
void write_sidecar(const GgufFile& f, const std::vector<ExpertLayer>& layers, const std::string& out,
                   const ProgressFn& progress = nullptr);

// The absolute path of the model a sidecar was packed from, as its header
// records it; throws when the file is not a sound sidecar.
std::string sidecar_source(const std::string& sidecar);

struct VerifyResult {
    uint64_t experts = 0, bytes = 0;
};
// Checks a sidecar's header and fingerprint against f and every expert's
// checksum; throws "SIDECAR: layer L expert E: checksum mismatch" and the like.
VerifyResult verify_sidecar(const GgufFile& f, const std::vector<ExpertLayer>& layers, const std::string& sidecar,
                            const ProgressFn& progress = nullptr);

}  // namespace ms
