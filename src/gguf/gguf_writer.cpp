// GGUF v3 writer. Metadata and the tensor table are serialized at
// begin_data(); tensor data is then streamed through one large buffer with
// write(2), so multi-GB files go out at disk speed without sitting in memory.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <unordered_set>

#include "gguf/gguf.h"

namespace ms {

namespace {
constexpr size_t kWriteBuffer = 16u << 20;
}

struct GgufWriter::Impl {
    struct Entry {
        std::string name;
        GgmlType type;
        std::vector<int64_t> ne;
        uint64_t nbytes;
    };
    std::string path;
    uint64_t alignment;
    int fd = -1;
    bool finished = false;
    bool data_started = false;
    std::vector<std::pair<std::string, GgufValue>> kv;
    std::vector<Entry> tensors;
    std::unordered_set<std::string> names;
    std::vector<uint8_t> buf;  // pending bytes not yet written
    size_t cur = 0;            // tensor whose data is being streamed
    uint64_t cur_done = 0;     // bytes of it received so far

    [[noreturn]] void fail(const std::string& msg) const { throw std::runtime_error(path + ": " + msg); }

    // Setting a key again replaces its value in place (file order is kept).
    void set(const std::string& key, GgufValue&& v) {
        if (data_started) fail("metadata " + key + " set after begin_data()");
        for (auto& e : kv)
            if (e.first == key) {
                e.second = std::move(v);
                return;
            }
        kv.emplace_back(key, std::move(v));
    }

    void put(const void* p, size_t n) {
        const uint8_t* b = static_cast<const uint8_t*>(p);
        buf.insert(buf.end(), b, b + n);
    }
    template <class T>
    void put_pod(T v) { put(&v, sizeof v); }
    void put_string(const std::string& s) {
        put_pod<uint64_t>(s.size());
        put(s.data(), s.size());
    }

    void put_scalar(GgufType t, int64_t i, double f) {
        switch (t) {
            case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: put_pod<uint8_t>(uint8_t(i)); break;
            case GgufType::UINT16: case GgufType::INT16: put_pod<uint16_t>(uint16_t(i)); break;
            case GgufType::UINT32: case GgufType::INT32: put_pod<uint32_t>(uint32_t(i)); break;
            case GgufType::UINT64: case GgufType::INT64: put_pod<uint64_t>(uint64_t(i)); break;
            case GgufType::FLOAT32: put_pod<float>(float(f)); break;
            case GgufType::FLOAT64: put_pod<double>(f); break;
            default: break;
        }
    }

    // The value's payload (without its type tag).
    void put_value(const std::string& key, const GgufValue& v) {
        if (uint32_t(v.type) > uint32_t(GgufType::FLOAT64) ||
            (v.type == GgufType::ARRAY && uint32_t(v.elem) > uint32_t(GgufType::FLOAT64)))
            fail("key " + key + ": unknown value type");
        if (v.type == GgufType::STRING) return put_string(v.s);
        if (v.type != GgufType::ARRAY) return put_scalar(v.type, v.i, v.f);
        // The count comes from the vector that matches elem, so a value with
        // stray entries in another vector still writes a consistent array.
        bool floats = v.elem == GgufType::FLOAT32 || v.elem == GgufType::FLOAT64;
        size_t n = v.elem == GgufType::STRING  ? v.as.size()
                   : v.elem == GgufType::ARRAY ? v.aa.size()
                   : floats                    ? v.af.size()
                                               : v.ai.size();
        put_pod<uint32_t>(uint32_t(v.elem));
        put_pod<uint64_t>(n);
        if (v.elem == GgufType::STRING) {
            for (const std::string& s : v.as) put_string(s);
        } else if (v.elem == GgufType::ARRAY) {
            for (const GgufValue& e : v.aa) {
                // Elements carry no type tag of their own: each is an array
                // header (element type, count) and its data.
                if (e.type != GgufType::ARRAY) fail("key " + key + ": nested array element is not an array");
                put_value(key, e);
            }
        } else if (floats) {
            for (double f : v.af) put_scalar(v.elem, 0, f);
        } else {
            for (int64_t i : v.ai) put_scalar(v.elem, i, 0);
        }
    }

    void write_all(const uint8_t* p, size_t n, const std::string& context) {
        size_t done = 0;
        while (done < n) {
            ssize_t r = ::write(fd, p + done, n - done);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) fail("write failed" + context + ": " + (r < 0 ? std::strerror(errno) : "no progress"));
            done += size_t(r);
        }
    }

    void flush() {
        write_all(buf.data(), buf.size(), "");
        buf.clear();
    }

    void pad_to_alignment(uint64_t file_pos) {
        uint64_t pad = (alignment - file_pos % alignment) % alignment;
        buf.insert(buf.end(), size_t(pad), uint8_t(0));
    }
};

GgufWriter::GgufWriter(std::string path, uint64_t alignment) {
    // Checked before impl_ exists: a throwing constructor runs no destructor.
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > (1u << 30))
        throw std::runtime_error(path + ": alignment " + std::to_string(alignment) + " is not a power of two");
    impl_ = new Impl;
    impl_->path = std::move(path);
    impl_->alignment = alignment;
    if (alignment != 32) set_u32("general.alignment", uint32_t(alignment));
}

GgufWriter::~GgufWriter() {
    if (impl_->fd >= 0) {
        // An unfinished file would look like a valid but truncated model;
        // remove it, but only if it is a regular file we created (never a
        // device such as /dev/full).
        struct stat st;
        bool regular = fstat(impl_->fd, &st) == 0 && S_ISREG(st.st_mode);
        ::close(impl_->fd);
        if (!impl_->finished && regular) ::unlink(impl_->path.c_str());
    }
    delete impl_;
}

void GgufWriter::set_value(const std::string& key, const GgufValue& v) { impl_->set(key, GgufValue(v)); }

namespace {
GgufValue scalar(GgufType t, int64_t i, double f) {
    GgufValue v;
    v.type = t;
    v.i = i;
    v.f = f;
    return v;
}

GgufValue array_value(GgufType elem) {
    GgufValue v;
    v.type = GgufType::ARRAY;
    v.elem = elem;
    return v;
}
}  // namespace

void GgufWriter::set_u32(const std::string& key, uint32_t v) { impl_->set(key, scalar(GgufType::UINT32, v, 0)); }
void GgufWriter::set_i32(const std::string& key, int32_t v) { impl_->set(key, scalar(GgufType::INT32, v, 0)); }
void GgufWriter::set_u64(const std::string& key, uint64_t v) {
    impl_->set(key, scalar(GgufType::UINT64, int64_t(v), 0));
}
void GgufWriter::set_f32(const std::string& key, float v) { impl_->set(key, scalar(GgufType::FLOAT32, 0, v)); }
void GgufWriter::set_bool(const std::string& key, bool v) { impl_->set(key, scalar(GgufType::BOOL, v, 0)); }

void GgufWriter::set_string(const std::string& key, const std::string& s) {
    GgufValue v = scalar(GgufType::STRING, 0, 0);
    v.s = s;
    impl_->set(key, std::move(v));
}

void GgufWriter::set_strings(const std::string& key, const std::vector<std::string>& a) {
    GgufValue v = array_value(GgufType::STRING);
    v.as = a;
    impl_->set(key, std::move(v));
}

void GgufWriter::set_i32s(const std::string& key, const std::vector<int32_t>& a) {
    GgufValue v = array_value(GgufType::INT32);
    v.ai.assign(a.begin(), a.end());
    impl_->set(key, std::move(v));
}

void GgufWriter::set_f32s(const std::string& key, const std::vector<float>& a) {
    GgufValue v = array_value(GgufType::FLOAT32);
    v.af.assign(a.begin(), a.end());
    impl_->set(key, std::move(v));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne) {
    Impl& w = *impl_;
    if (w.data_started) w.fail("tensor " + name + " added after begin_data()");
    if (name.empty()) w.fail("tensor with an empty name");
    if (w.names.count(name)) w.fail("duplicate tensor " + name);
    const TypeTraits& tr = type_traits(type);
    if (!tr.valid) w.fail("tensor " + name + ": unknown type id " + std::to_string(uint32_t(type)));
    if (ne.empty() || ne.size() > 4) w.fail("tensor " + name + ": " + std::to_string(ne.size()) + " dimensions (must be 1 to 4)");
    uint64_t rows = 1;
    for (int64_t d : ne) {
        if (d <= 0) w.fail("tensor " + name + ": dimension " + std::to_string(d) + " must be positive");
        if (__builtin_mul_overflow(rows, uint64_t(d), &rows)) w.fail("tensor " + name + ": size overflows");
    }
    rows /= uint64_t(ne[0]);
    if (ne[0] % tr.block_size != 0)
        w.fail("tensor " + name + ": row length " + std::to_string(ne[0]) + " is not a multiple of the " + tr.name +
               " block size " + std::to_string(tr.block_size));
    uint64_t nbytes;
    if (__builtin_mul_overflow(uint64_t(row_bytes(type, ne[0])), rows, &nbytes))
        w.fail("tensor " + name + ": size overflows");
    w.names.insert(name);
    w.tensors.push_back({name, type, std::move(ne), nbytes});
}

void GgufWriter::begin_data() {
    Impl& w = *impl_;
    if (w.data_started) w.fail("begin_data() called twice");
    w.data_started = true;
    w.fd = ::open(w.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w.fd < 0) w.fail("cannot create: " + std::string(std::strerror(errno)));
    w.buf.reserve(kWriteBuffer);

    w.put_pod<uint32_t>(0x46554747);  // "GGUF"
    w.put_pod<uint32_t>(3);
    w.put_pod<uint64_t>(w.tensors.size());
    w.put_pod<uint64_t>(w.kv.size());
    for (const auto& [key, v] : w.kv) {
        w.put_string(key);
        w.put_pod<uint32_t>(uint32_t(v.type));
        w.put_value(key, v);
    }
    uint64_t offset = 0;  // relative to the data section
    for (const Impl::Entry& t : w.tensors) {
        w.put_string(t.name);
        w.put_pod<uint32_t>(uint32_t(t.ne.size()));
        for (int64_t d : t.ne) w.put_pod<uint64_t>(uint64_t(d));
        w.put_pod<uint32_t>(uint32_t(t.type));
        w.put_pod<uint64_t>(offset);
        offset += t.nbytes;
        offset += (w.alignment - offset % w.alignment) % w.alignment;
    }
    w.pad_to_alignment(w.buf.size());
    written_ = w.buf.size();
    if (w.buf.size() >= kWriteBuffer) w.flush();
}

void GgufWriter::write_tensor_data(const void* data, size_t n) {
    Impl& w = *impl_;
    if (!w.data_started || w.finished) w.fail("write_tensor_data() outside begin_data()/finish()");
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
        if (w.cur >= w.tensors.size())
            w.fail("tensor data written past the last declared tensor (" + std::to_string(n) + " bytes too many)");
        const Impl::Entry& t = w.tensors[w.cur];
        uint64_t take = std::min<uint64_t>(n, t.nbytes - w.cur_done);
        if (w.buf.size() + take > kWriteBuffer) w.flush();
        if (take >= kWriteBuffer) {
            // Big chunk: write it straight from the caller's memory.
            w.write_all(p, size_t(take), " in tensor " + t.name);
        } else {
            w.put(p, size_t(take));
        }
        written_ += take;
        w.cur_done += take;
        p += take;
        n -= size_t(take);
        if (w.cur_done == t.nbytes) {
            size_t before = w.buf.size();
            w.pad_to_alignment(written_);
            written_ += w.buf.size() - before;
            ++w.cur;
            w.cur_done = 0;
        }
    }
}

void GgufWriter::finish() {
    Impl& w = *impl_;
    if (!w.data_started) begin_data();
    if (w.finished) return;
    if (w.cur < w.tensors.size())
        w.fail("finish(): tensor " + w.tensors[w.cur].name + " has " + std::to_string(w.cur_done) + " of " +
               std::to_string(w.tensors[w.cur].nbytes) + " bytes" +
               (w.cur + 1 < w.tensors.size() ? " and " + std::to_string(w.tensors.size() - w.cur - 1) +
                                                   " more tensors were never written"
                                             : ""));
    w.flush();
    if (::close(w.fd) != 0) {
        int err = errno;
        w.fd = -1;
        ::unlink(w.path.c_str());
        w.fail("close failed: " + std::string(std::strerror(err)));
    }
    w.fd = -1;
    w.finished = true;
}

}  // namespace ms
