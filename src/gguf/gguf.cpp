// GGUF reader. The header (metadata + tensor table) is parsed through a large
// read buffer; every count, length and offset is checked against the bytes the
// file really has before anything is allocated or read, so a bogus header
// costs an error message, not memory.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace ms {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
// Sanity caps far above anything a real model has (the largest vocabularies
// have ~260k tokens and ~500k merges; chat templates are tens of KB), so a
// corrupt length is refused before it becomes an allocation.
constexpr uint64_t kMaxString = 64ull << 20;
constexpr uint64_t kMaxArray = 1ull << 24;
constexpr int kMaxNesting = 4;
constexpr size_t kBufferBytes = 4u << 20;

[[noreturn]] void fail(const std::string& path, const std::string& msg) {
    throw std::runtime_error(path + ": " + msg);
}

std::string errno_text() { return std::strerror(errno); }

// A key or tensor name as it may appear in a one-line error: control bytes
// escaped, very long names cut.
std::string show(const std::string& name) {
    std::string out;
    for (size_t i = 0; i < name.size() && i < 120; ++i) {
        unsigned char c = uint8_t(name[i]);
        if (c < 0x20 || c == 0x7f) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\x%02x", c);
            out += esc;
        } else {
            out += char(c);
        }
    }
    if (name.size() > 120) out += "...";
    return out;
}

// Smallest number of bytes one value of type t occupies on disk; 0 for an
// unknown type.
uint64_t min_value_bytes(uint32_t t) {
    switch (GgufType(t)) {
        case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
        case GgufType::UINT16: case GgufType::INT16: return 2;
        case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
        case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
        case GgufType::STRING: return 8;       // the length
        case GgufType::ARRAY: return 4 + 8;    // element type + count
    }
    return 0;
}

bool is_integer(GgufType t) {
    switch (t) {
        case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
        case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
        case GgufType::BOOL:
            return true;
        default:
            return false;
    }
}

bool is_float(GgufType t) { return t == GgufType::FLOAT32 || t == GgufType::FLOAT64; }

// Sequential little-endian reader over a file through a big buffer: one pread
// per few MB instead of one per field.
struct HeaderReader {
    const std::string& path;
    int fd;
    uint64_t size;
    uint64_t pos = 0;
    std::vector<uint8_t> buf;
    uint64_t buf_off = 0;
    size_t buf_len = 0;

    HeaderReader(const std::string& p, int f, uint64_t s) : path(p), fd(f), size(s) {}

    uint64_t remaining() const { return size - pos; }

    // Returns a pointer to the next n bytes (valid until the next call).
    const uint8_t* take(uint64_t n, const char* what) {
        if (n > remaining())
            fail(path, "truncated: " + std::string(what) + " at offset " + std::to_string(pos) + " needs " +
                           std::to_string(n) + " bytes, file ends at " + std::to_string(size));
        if (pos < buf_off || pos + n > buf_off + buf_len) fill(size_t(n));
        const uint8_t* p = buf.data() + (pos - buf_off);
        pos += n;
        return p;
    }

    void fill(size_t n) {
        size_t want = std::max(n, kBufferBytes);
        want = size_t(std::min<uint64_t>(want, size - pos));
        if (buf.size() < want) buf.resize(want);
        size_t got = 0;
        while (got < want) {
            ssize_t r = ::pread(fd, buf.data() + got, want - got, off_t(pos + got));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) fail(path, "read failed at " + std::to_string(pos + got) + ": " + errno_text());
            if (r == 0) fail(path, "read failed at " + std::to_string(pos + got) + ": unexpected end of file");
            got += size_t(r);
        }
        buf_off = pos;
        buf_len = want;
    }

    template <class T>
    T get(const char* what) {
        T v;
        std::memcpy(&v, take(sizeof(T), what), sizeof(T));
        return v;
    }

    std::string get_string(const std::string& what) {
        uint64_t at = pos;
        uint64_t n = get<uint64_t>(what.c_str());
        if (n > remaining())
            fail(path, what + ": string length " + std::to_string(n) + " at offset " + std::to_string(at) +
                           " runs past the end of the file");
        if (n > kMaxString)
            fail(path, what + ": string length " + std::to_string(n) + " at offset " + std::to_string(at) +
                           " is implausibly large");
        const uint8_t* p = take(n, what.c_str());
        return std::string(reinterpret_cast<const char*>(p), size_t(n));
    }
};

struct Part {
    uint32_t version = 0;
    uint64_t alignment = 32;
    std::vector<std::pair<std::string, GgufValue>> kv;
    std::vector<GgufTensor> tensors;
};

int64_t read_integer(HeaderReader& r, GgufType t, const char* what) {
    switch (t) {
        case GgufType::UINT8: return r.get<uint8_t>(what);
        case GgufType::INT8: return r.get<int8_t>(what);
        case GgufType::BOOL: return r.get<uint8_t>(what) != 0;
        case GgufType::UINT16: return r.get<uint16_t>(what);
        case GgufType::INT16: return r.get<int16_t>(what);
        case GgufType::UINT32: return r.get<uint32_t>(what);
        case GgufType::INT32: return r.get<int32_t>(what);
        case GgufType::UINT64: return int64_t(r.get<uint64_t>(what));
        case GgufType::INT64: return r.get<int64_t>(what);
        default: return 0;
    }
}

double read_float(HeaderReader& r, GgufType t, const char* what) {
    return t == GgufType::FLOAT32 ? double(r.get<float>(what)) : r.get<double>(what);
}

void read_value(HeaderReader& r, const std::string& key, uint32_t type, GgufValue& v, int depth);

void read_array(HeaderReader& r, const std::string& key, GgufValue& v, int depth) {
    const char* what = "array header";
    uint32_t et = r.get<uint32_t>(what);
    uint64_t n = r.get<uint64_t>(what);
    uint64_t min = min_value_bytes(et);
    if (min == 0) fail(r.path, "key " + show(key) + ": unknown array element type " + std::to_string(et));
    if (GgufType(et) == GgufType::ARRAY && depth + 1 >= kMaxNesting)
        fail(r.path, "key " + show(key) + ": arrays nested deeper than " + std::to_string(kMaxNesting));
    uint64_t need;
    if (__builtin_mul_overflow(n, min, &need) || need > r.remaining())
        fail(r.path, "key " + show(key) + ": array of " + std::to_string(n) + " elements at offset " +
                         std::to_string(r.pos) + " cannot fit in the file");
    if (n > kMaxArray)
        fail(r.path, "key " + show(key) + ": array of " + std::to_string(n) + " elements is implausibly large");
    v.type = GgufType::ARRAY;
    v.elem = GgufType(et);
    GgufType e = v.elem;
    // Vectors grow with what is actually parsed (the reserve is capped), so
    // memory follows the bytes present, not the count claimed.
    size_t hint = size_t(std::min<uint64_t>(n, 1u << 20));
    if (is_integer(e)) {
        v.ai.reserve(hint);
        for (uint64_t i = 0; i < n; ++i) v.ai.push_back(read_integer(r, e, "array data"));
    } else if (is_float(e)) {
        v.af.reserve(hint);
        for (uint64_t i = 0; i < n; ++i) v.af.push_back(read_float(r, e, "array data"));
    } else if (e == GgufType::STRING) {
        v.as.reserve(hint);
        const std::string what = "key " + show(key);
        for (uint64_t i = 0; i < n; ++i) v.as.push_back(r.get_string(what));
    } else {
        v.aa.reserve(hint);
        for (uint64_t i = 0; i < n; ++i) read_value(r, key, et, v.aa.emplace_back(), depth + 1);
    }
}

void read_value(HeaderReader& r, const std::string& key, uint32_t type, GgufValue& v, int depth) {
    if (min_value_bytes(type) == 0) fail(r.path, "key " + show(key) + ": unknown value type " + std::to_string(type));
    v.type = GgufType(type);
    if (is_integer(v.type)) v.i = read_integer(r, v.type, "value");
    else if (is_float(v.type)) v.f = read_float(r, v.type, "value");
    else if (v.type == GgufType::STRING) v.s = r.get_string("key " + show(key));
    else read_array(r, key, v, depth);
}

std::string range_text(uint64_t a, uint64_t b) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "[%llu, %llu)", (unsigned long long)a, (unsigned long long)b);
    return buf;
}

void read_metadata(HeaderReader& r, uint64_t n_kv, Part& part) {
    const std::string& path = r.path;
    std::unordered_map<std::string, size_t> seen;
    part.kv.reserve(size_t(std::min<uint64_t>(n_kv, 1024)));
    for (uint64_t k = 0; k < n_kv; ++k) {
        std::string key = r.get_string("metadata key");
        if (key.empty()) fail(path, "empty metadata key at entry " + std::to_string(k));
        if (!seen.emplace(key, k).second) fail(path, "duplicate key " + show(key));
        uint32_t type = r.get<uint32_t>("metadata type");
        GgufValue v;
        read_value(r, key, type, v, 0);
        if (key == "general.alignment") {
            if (!is_integer(v.type) || v.type == GgufType::BOOL || v.i <= 0)
                fail(path, "general.alignment must be a positive integer");
            uint64_t a = uint64_t(v.i);
            if ((a & (a - 1)) != 0) fail(path, "general.alignment " + std::to_string(a) + " is not a power of two");
            if (a > (1u << 30)) fail(path, "general.alignment " + std::to_string(a) + " is implausibly large");
            part.alignment = a;
        }
        part.kv.emplace_back(std::move(key), std::move(v));
    }
}

// One tensor table entry; *rel gets its offset relative to the data section.
GgufTensor read_tensor_info(HeaderReader& r, uint64_t index, uint64_t* rel) {
    const std::string& path = r.path;
    GgufTensor t;
    t.name = r.get_string("tensor name");
    if (t.name.empty()) fail(path, "tensor " + std::to_string(index) + " has an empty name");
    const std::string tn = show(t.name);
    t.n_dims = r.get<uint32_t>("tensor dims");
    if (t.n_dims < 1 || t.n_dims > 4)
        fail(path, "tensor " + tn + ": " + std::to_string(t.n_dims) + " dimensions (must be 1 to 4)");
    for (uint32_t d = 0; d < t.n_dims; ++d) {
        uint64_t ne = r.get<uint64_t>("tensor shape");
        if (ne == 0) fail(path, "tensor " + tn + ": dimension " + std::to_string(d) + " is 0");
        if (ne > uint64_t(INT64_MAX))
            fail(path, "tensor " + tn + ": dimension " + std::to_string(d) + " is " + std::to_string(ne) + ", too large");
        t.ne[d] = int64_t(ne);
    }
    uint32_t type = r.get<uint32_t>("tensor type");
    const TypeTraits& tr = type_traits(type);
    if (!tr.valid) fail(path, "tensor " + tn + ": unknown or retired type id " + std::to_string(type));
    t.type = GgmlType(type);
    *rel = r.get<uint64_t>("tensor offset");

    int64_t n_el;
    if (__builtin_mul_overflow(t.ne[0], t.ne[1], &n_el) || __builtin_mul_overflow(n_el, t.ne[2], &n_el) ||
        __builtin_mul_overflow(n_el, t.ne[3], &n_el))
        fail(path, "tensor " + tn + ": element count overflows");
    if (t.ne[0] % tr.block_size != 0)
        fail(path, "tensor " + tn + ": row length " + std::to_string(t.ne[0]) + " is not a multiple of the " + tr.name +
                       " block size " + std::to_string(tr.block_size));
    uint64_t rows = uint64_t(n_el / t.ne[0]), row;
    if (__builtin_mul_overflow(uint64_t(t.ne[0] / tr.block_size), uint64_t(tr.type_size), &row) ||
        __builtin_mul_overflow(row, rows, &t.nbytes))
        fail(path, "tensor " + tn + ": byte size overflows");
    return t;
}

// Turns relative offsets into absolute ones and checks every tensor lies in
// the file and no two overlap.
void place_tensors(const std::string& path, uint64_t size, uint64_t data_start, uint64_t a,
                   const std::vector<uint64_t>& rel, std::vector<GgufTensor>& tensors) {
    for (size_t ti = 0; ti < tensors.size(); ++ti) {
        GgufTensor& t = tensors[ti];
        if (rel[ti] % a)
            fail(path, "tensor " + show(t.name) + ": offset " + std::to_string(rel[ti]) +
                           " is not a multiple of the alignment " + std::to_string(a));
        uint64_t begin, end;
        if (__builtin_add_overflow(data_start, rel[ti], &begin) || begin > size)
            fail(path, "tensor " + show(t.name) + ": offset " + std::to_string(rel[ti]) + " lies outside the file (" +
                           std::to_string(size) + " bytes)");
        if (__builtin_add_overflow(begin, t.nbytes, &end) || end > size)
            fail(path, "tensor " + show(t.name) + ": data of " + std::to_string(t.nbytes) + " bytes at offset " +
                           std::to_string(begin) + " lies outside the file (" + std::to_string(size) + " bytes)");
        t.offset = begin;
    }
    std::vector<const GgufTensor*> order;
    order.reserve(tensors.size());
    for (const GgufTensor& t : tensors) order.push_back(&t);
    std::stable_sort(order.begin(), order.end(),
                     [](const GgufTensor* x, const GgufTensor* y) { return x->offset < y->offset; });
    for (size_t i = 1; i < order.size(); ++i) {
        const GgufTensor& p = *order[i - 1];
        const GgufTensor& q = *order[i];
        if (p.offset + p.nbytes > q.offset)
            fail(path, "tensors " + show(p.name) + " " + range_text(p.offset, p.offset + p.nbytes) + " and " +
                           show(q.name) + " " + range_text(q.offset, q.offset + q.nbytes) + " overlap");
    }
}

// Parses and validates one GGUF file (one part of a split set).
Part parse_part(const std::string& path, int fd, uint64_t size, int split) {
    if (size == 0) fail(path, "empty file (not GGUF)");
    if (size < 4) fail(path, "not a GGUF file (only " + std::to_string(size) + " bytes)");
    HeaderReader r(path, fd, size);
    Part part;
    uint32_t magic = r.get<uint32_t>("magic");
    if (magic != kMagic) fail(path, "not a GGUF file (bad magic)");
    uint32_t version = r.get<uint32_t>("version");
    if (version == 0x02000000u || version == 0x03000000u) fail(path, "big-endian GGUF is not supported");
    if (version != 2 && version != 3)
        fail(path, "unsupported GGUF version " + std::to_string(version) + " (only versions 2 and 3 are supported)");
    part.version = version;
    uint64_t n_tensors = r.get<uint64_t>("tensor count");
    uint64_t n_kv = r.get<uint64_t>("metadata count");
    // Each key-value needs at least a key length, a 1-byte key, a type and a
    // 1-byte value; each tensor entry a name length, a 1-byte name, n_dims,
    // one dimension, a type and an offset.
    constexpr uint64_t kMinKv = 8 + 1 + 4 + 1, kMinTensor = 8 + 1 + 4 + 8 + 4 + 8;
    if (n_kv > r.remaining() / kMinKv)
        fail(path, "metadata count " + std::to_string(n_kv) + " cannot fit in a file of " + std::to_string(size) +
                       " bytes");
    if (n_tensors > r.remaining() / kMinTensor)
        fail(path, "tensor count " + std::to_string(n_tensors) + " cannot fit in a file of " + std::to_string(size) +
                       " bytes");

    read_metadata(r, n_kv, part);

    std::unordered_map<std::string, size_t> names;
    std::vector<uint64_t> rel;
    part.tensors.reserve(size_t(std::min<uint64_t>(n_tensors, 1u << 16)));
    rel.reserve(part.tensors.capacity());
    for (uint64_t ti = 0; ti < n_tensors; ++ti) {
        rel.push_back(0);
        GgufTensor t = read_tensor_info(r, ti, &rel.back());
        if (!names.emplace(t.name, ti).second) fail(path, "duplicate tensor " + show(t.name));
        t.split = split;
        part.tensors.push_back(std::move(t));
    }

    // The data section starts at the first aligned offset after the table.
    uint64_t a = part.alignment;
    uint64_t data_start = r.pos + (a - r.pos % a) % a;
    place_tensors(path, size, data_start, a, rel, part.tensors);
    return part;
}

// "x-00002-of-00003.gguf" -> prefix "x", part 2, count 3.
bool parse_split_name(const std::string& path, std::string* prefix, int* no, int* count) {
    const std::string tail = ".gguf";
    // -NNNNN-of-MMMMM.gguf is 20 characters.
    if (path.size() < 20 + 1) return false;
    size_t s = path.size() - 20;
    const char* p = path.c_str() + s;
    auto digits = [](const char* d) {
        for (int i = 0; i < 5; ++i)
            if (d[i] < '0' || d[i] > '9') return -1;
        return std::atoi(std::string(d, 5).c_str());
    };
    if (p[0] != '-' || std::strncmp(p + 6, "-of-", 4) != 0 || path.compare(path.size() - 5, 5, tail) != 0)
        return false;
    int a = digits(p + 1), b = digits(p + 10);
    if (a < 1 || b < 1 || a > b) return false;
    *prefix = path.substr(0, s);
    *no = a;
    *count = b;
    return true;
}

std::string split_name(const std::string& prefix, int no, int count) {
    char tail[32];
    std::snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", no, count);
    return prefix + tail;
}

// Opens path read-only; a directory or device is refused. Part and parts
// (1 for a plain file) only shape the error message.
int open_regular_file(const std::string& path, size_t part, size_t parts, uint64_t* size) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (parts > 1)
            fail(path, "cannot open part " + std::to_string(part + 1) + " of " + std::to_string(parts) +
                           " of the split model: " + errno_text());
        fail(path, "cannot open: " + errno_text());
    }
    struct stat st;
    std::string problem;
    if (fstat(fd, &st) != 0) problem = "cannot stat: " + errno_text();
    else if (S_ISDIR(st.st_mode)) problem = "is a directory, not a GGUF file";
    else if (!S_ISREG(st.st_mode)) problem = "not a regular file";
    if (!problem.empty()) {
        ::close(fd);
        fail(path, problem);
    }
    *size = uint64_t(st.st_size);
    return fd;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
    switch (t) {
        case GgufType::UINT8: return "u8";
        case GgufType::INT8: return "i8";
        case GgufType::UINT16: return "u16";
        case GgufType::INT16: return "i16";
        case GgufType::UINT32: return "u32";
        case GgufType::INT32: return "i32";
        case GgufType::FLOAT32: return "f32";
        case GgufType::BOOL: return "bool";
        case GgufType::STRING: return "string";
        case GgufType::ARRAY: return "array";
        case GgufType::UINT64: return "u64";
        case GgufType::INT64: return "i64";
        case GgufType::FLOAT64: return "f64";
    }
    return "unknown";
}

size_t GgufValue::array_size() const {
    if (!is_array()) return 0;
    return ai.size() + af.size() + as.size() + aa.size();  // only one of them is in use
}

GgufFile GgufFile::open(const std::string& path) {
    GgufFile f;
    std::string prefix;
    int no = 0, count = 0;
    std::vector<std::string> paths;
    if (parse_split_name(path, &prefix, &no, &count) && count > 1) {
        for (int i = 1; i <= count; ++i) paths.push_back(split_name(prefix, i, count));
    } else {
        paths.push_back(path);
    }

    uint64_t expected_tensors = 0;
    for (size_t i = 0; i < paths.size(); ++i) {
        const std::string& p = paths[i];
        uint64_t size = 0;
        int fd = open_regular_file(p, i, paths.size(), &size);
        f.fds_.push_back(fd);  // owned from here on, closed by ~GgufFile on error
        Part part = parse_part(p, fd, size, int(i));
        f.paths_.push_back(p);
        f.sizes_.push_back(size);

        // Split sets as llama.cpp's gguf-split writes them: every part is a
        // full GGUF carrying split.no (0-based), split.count and
        // split.tensors.count (the total over all parts).
        auto find_int = [&](const char* key, int64_t* out) {
            for (auto& [k, v] : part.kv)
                if (k == key) {
                    if (!is_integer(v.type)) fail(p, std::string(key) + " is not an integer");
                    *out = v.i;
                    return true;
                }
            return false;
        };
        int64_t sno = 0, scount = 1, stensors = 0;
        bool has_count = find_int("split.count", &scount);
        find_int("split.no", &sno);
        bool has_total = find_int("split.tensors.count", &stensors);
        if (paths.size() > 1) {
            if (!has_count)
                fail(p, "named as part " + std::to_string(i + 1) + " of " + std::to_string(paths.size()) +
                            " but has no split.count metadata");
            if (scount != int64_t(paths.size()))
                fail(p, "split.count is " + std::to_string(scount) + " but the file name says " +
                            std::to_string(paths.size()) + " parts");
            if (sno != int64_t(i))
                fail(p, "split.no is " + std::to_string(sno) + ", expected " + std::to_string(i) +
                            " for part " + std::to_string(i + 1));
        } else if (has_count && scount > 1) {
            fail(p, "is part of a split set (split.count " + std::to_string(scount) +
                        "); its name must end in -0000N-of-0000M.gguf to open the whole set");
        }
        if (i == 0) {
            f.version_ = part.version;
            f.alignment_ = part.alignment;
            expected_tensors = has_total ? uint64_t(stensors) : part.tensors.size();
            f.kv_ = std::move(part.kv);
            for (size_t k = 0; k < f.kv_.size(); ++k) f.kv_index_.emplace(f.kv_[k].first, k);
        } else {
            if (!has_total || uint64_t(stensors) != expected_tensors)
                fail(p, "split.tensors.count differs from part 1 (" + std::to_string(expected_tensors) + ")");
            for (auto& kv : part.kv) {
                if (f.kv_index_.count(kv.first)) continue;
                f.kv_index_.emplace(kv.first, f.kv_.size());
                f.kv_.push_back(std::move(kv));
            }
        }
        for (GgufTensor& t : part.tensors) {
            if (!f.tensor_index_.emplace(t.name, f.tensors_.size()).second)
                fail(p, "duplicate tensor " + show(t.name) + " (also in an earlier part)");
            f.tensors_.push_back(std::move(t));
        }
    }
    if (paths.size() > 1 && f.tensors_.size() != expected_tensors)
        fail(f.paths_[0], "split set has " + std::to_string(f.tensors_.size()) + " tensors but split.tensors.count is " +
                              std::to_string(expected_tensors));
    return f;
}

uint64_t GgufFile::total_bytes() const {
    uint64_t s = 0;
    for (uint64_t x : sizes_) s += x;
    return s;
}

const GgufValue* GgufFile::find(std::string_view key) const {
    auto it = kv_index_.find(std::string(key));
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
    auto it = tensor_index_.find(std::string(name));
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const GgufValue& v, const char* want) {
    std::string got = gguf_type_name(v.type);
    if (v.is_array()) got += std::string(" of ") + gguf_type_name(v.elem);
    fail(path, "metadata " + std::string(key) + " is " + got + ", expected " + want);
}
}  // namespace

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
    const GgufValue* v = find(key);
    if (!v) return fallback;
    if (!is_integer(v->type)) wrong_type(path(), key, *v, "an integer");
    return v->i;
}

double GgufFile::get_float(std::string_view key, double fallback) const {
    const GgufValue* v = find(key);
    if (!v) return fallback;
    if (is_float(v->type)) return v->f;
    if (is_integer(v->type)) return v->type == GgufType::UINT64 ? double(uint64_t(v->i)) : double(v->i);
    wrong_type(path(), key, *v, "a number");
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
    const GgufValue* v = find(key);
    if (!v) return fallback;
    if (!is_integer(v->type)) wrong_type(path(), key, *v, "a bool");
    return v->i != 0;
}

std::string GgufFile::get_string(std::string_view key, const std::string& fallback) const {
    const GgufValue* v = find(key);
    if (!v) return fallback;
    if (v->type != GgufType::STRING) wrong_type(path(), key, *v, "a string");
    return v->s;
}

int64_t GgufFile::require_int(std::string_view key) const {
    if (!find(key)) fail(path(), "missing metadata " + std::string(key));
    return get_int(key, 0);
}

std::string GgufFile::require_string(std::string_view key) const {
    if (!find(key)) fail(path(), "missing metadata " + std::string(key));
    return get_string(key);
}

const std::vector<std::string>& GgufFile::get_strings(std::string_view key) const {
    static const std::vector<std::string> empty;
    const GgufValue* v = find(key);
    if (!v) return empty;
    if (!v->is_array() || v->elem != GgufType::STRING) wrong_type(path(), key, *v, "an array of strings");
    return v->as;
}

std::vector<int64_t> GgufFile::get_ints(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return {};
    if (!v->is_array() || !is_integer(v->elem)) wrong_type(path(), key, *v, "an array of integers");
    return v->ai;
}

std::vector<double> GgufFile::get_floats(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return {};
    if (!v->is_array()) wrong_type(path(), key, *v, "an array of numbers");
    if (is_float(v->elem)) return v->af;
    if (is_integer(v->elem)) return std::vector<double>(v->ai.begin(), v->ai.end());
    wrong_type(path(), key, *v, "an array of numbers");
}

void GgufFile::read(int split, uint64_t offset, void* dst, size_t n) const {
    if (split < 0 || size_t(split) >= fds_.size())
        fail(path(), "read of split " + std::to_string(split) + " of " + std::to_string(fds_.size()));
    const std::string& p = paths_[size_t(split)];
    uint64_t end;
    if (__builtin_add_overflow(offset, uint64_t(n), &end) || end > sizes_[size_t(split)])
        fail(p, "read failed at " + std::to_string(offset) + ": " + std::to_string(n) +
                    " bytes run past the end of the file");
    uint8_t* out = static_cast<uint8_t*>(dst);
    size_t got = 0;
    while (got < n) {
        ssize_t r = ::pread(fds_[size_t(split)], out + got, n - got, off_t(offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) fail(p, "read failed at " + std::to_string(offset + got) + ": " + errno_text());
        if (r == 0) fail(p, "read failed at " + std::to_string(offset + got) + ": unexpected end of file");
        got += size_t(r);
    }
}

GgufFile::GgufFile(GgufFile&& o) noexcept { *this = std::move(o); }

GgufFile& GgufFile::operator=(GgufFile&& o) noexcept {
    if (this != &o) {
        for (int fd : fds_) ::close(fd);
        paths_ = std::move(o.paths_);
        sizes_ = std::move(o.sizes_);
        fds_ = std::move(o.fds_);
        o.fds_.clear();
        version_ = o.version_;
        alignment_ = o.alignment_;
        kv_ = std::move(o.kv_);
        kv_index_ = std::move(o.kv_index_);
        tensors_ = std::move(o.tensors_);
        tensor_index_ = std::move(o.tensor_index_);
    }
    return *this;
}

GgufFile::~GgufFile() {
    for (int fd : fds_) ::close(fd);
}

}  // namespace ms
