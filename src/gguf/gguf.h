// Reads and validates GGUF v2/v3 files (one file or a -0000N-of-0000M split
// set, opened as one model) and writes new ones. Every size, count and offset
// is checked against the real file sizes before use: a bad file is a
// std::runtime_error "PATH: problem", never a crash.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "quant/types.h"

namespace ms {

enum class GgufType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
    BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars: integers and bools in i (uint64 bit-cast),
// floats in f, strings in s. Arrays: elements of type elem in the matching
// vector (ai for integers/bools, af for floats, as for strings, aa for nested
// arrays).
struct GgufValue {
    GgufType type = GgufType::UINT32;
    GgufType elem = GgufType::UINT32;  // element type when type == ARRAY
    int64_t i = 0;
    double f = 0;
    std::string s;
    std::vector<int64_t> ai;
    std::vector<double> af;
    std::vector<std::string> as;
    std::vector<GgufValue> aa;

    bool is_array() const { return type == GgufType::ARRAY; }
    size_t array_size() const;
};

struct GgufTensor {
    std::string name;
    GgmlType type = GgmlType::F32;
    uint32_t n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the innermost (row) dimension
    int split = 0;                 // which file of a split set holds the data
    uint64_t offset = 0;           // absolute byte offset of the data in that file
    uint64_t nbytes = 0;

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    size_t row_bytes() const { return ms::row_bytes(type, ne[0]); }
};

class GgufFile {
public:
    // Opens PATH; a name like "x-00001-of-00003.gguf" opens the whole split set.
    static GgufFile open(const std::string& path);

    const std::string& path() const { return paths_.at(0); }
    const std::vector<std::string>& paths() const { return paths_; }   // one per split
    const std::vector<uint64_t>& file_sizes() const { return sizes_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t total_bytes() const;  // sum of file sizes

    // Metadata in file order (first split's keys, then any new keys of others).
    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
    const GgufValue* find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }
    // Typed getters: missing key -> fallback; wrong type -> runtime_error naming
    // the file and key. get_int accepts any integer/bool type, get_float any
    // numeric type.
    int64_t get_int(std::string_view key, int64_t fallback) const;
    double get_float(std::string_view key, double fallback) const;
    bool get_bool(std::string_view key, bool fallback) const;
    std::string get_string(std::string_view key, const std::string& fallback = "") const;
    // Required variants throw "PATH: missing metadata KEY".
    int64_t require_int(std::string_view key) const;
    std::string require_string(std::string_view key) const;
    // Arrays; empty when missing; throw on wrong element kind.
    const std::vector<std::string>& get_strings(std::string_view key) const;
    std::vector<int64_t> get_ints(std::string_view key) const;
    std::vector<double> get_floats(std::string_view key) const;

    const std::vector<GgufTensor>& tensors() const { return tensors_; }
    const GgufTensor* tensor(std::string_view name) const;  // nullptr if absent

    // Reads [offset, offset+n) of split `split` into dst (pread, retries short
    // reads and EINTR). Throws "PATH: read failed at OFFSET: reason".
    void read(int split, uint64_t offset, void* dst, size_t n) const;
    void read_tensor(const GgufTensor& t, void* dst) const { read(t.split, t.offset, dst, t.nbytes); }

    // File descriptor of split i (opened O_RDONLY, owned by this object).
    int fd(int split = 0) const { return fds_.at(size_t(split)); }

    GgufFile(GgufFile&&) noexcept;
    GgufFile& operator=(GgufFile&&) noexcept;
    GgufFile(const GgufFile&) = delete;
    GgufFile& operator=(const GgufFile&) = delete;
    ~GgufFile();

private:
    GgufFile() = default;
    std::vector<std::string> paths_;
    std::vector<uint64_t> sizes_;
    std::vector<int> fds_;
    uint32_t version_ = 3;
    uint64_t alignment_ = 32;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::unordered_map<std::string, size_t> kv_index_;
    std::vector<GgufTensor> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;
};

// Writes a GGUF v3 file: metadata, then the tensor table, then aligned data.
// Tensors are declared first (name, type, shape), then their data is streamed
// in declaration order, so multi-GB files never sit in memory.
class GgufWriter {
public:
    explicit GgufWriter(std::string path, uint64_t alignment = 32);
    ~GgufWriter();  // an unfinished (failed) output file is removed
    GgufWriter(const GgufWriter&) = delete;
    GgufWriter& operator=(const GgufWriter&) = delete;

    void set_u32(const std::string& key, uint32_t v);
    void set_i32(const std::string& key, int32_t v);
    void set_u64(const std::string& key, uint64_t v);
    void set_f32(const std::string& key, float v);
    void set_bool(const std::string& key, bool v);
    void set_string(const std::string& key, const std::string& v);
    void set_strings(const std::string& key, const std::vector<std::string>& v);
    void set_i32s(const std::string& key, const std::vector<int32_t>& v);
    void set_f32s(const std::string& key, const std::vector<float>& v);
    void set_value(const std::string& key, const GgufValue& v);  // copy any value (e.g. from a GgufFile)

    // ne[0] is the row length; up to 4 dims.
    void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne);

    // After all set_*/add_tensor: writes header + table. Then write_tensor_data
    // for each tensor in declaration order (may be called several times per
    // tensor with consecutive chunks), then finish().
    void begin_data();
    void write_tensor_data(const void* data, size_t n);
    void finish();

    uint64_t bytes_written() const { return written_; }

private:
    struct Impl;
    Impl* impl_;
    uint64_t written_ = 0;
};

}  // namespace ms
