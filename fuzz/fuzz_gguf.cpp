// libFuzzer harness for the GGUF reader: the input becomes a file (a memfd,
// opened by path like any model) and everything the reader exposes is
// touched. A std::runtime_error is the expected answer to bad input; any
// crash, sanitizer report, other exception or huge allocation is a bug.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace {

int memfd() {
    static int fd = memfd_create("fuzz_gguf", 0);
    if (fd < 0) std::abort();
    return fd;
}

// Reads every getter a consumer might use, on every key; wrong-type errors
// are expected.
size_t touch_metadata(const ms::GgufFile& f) {
    size_t n = 0;
    for (const auto& [key, v] : f.metadata()) {
        n += v.array_size() + v.s.size();
        try { n += size_t(f.get_int(key, 0)); } catch (const std::runtime_error&) {}
        try { n += size_t(f.get_float(key, 0)); } catch (const std::runtime_error&) {}
        try { n += f.get_string(key).size(); } catch (const std::runtime_error&) {}
        try { n += f.get_strings(key).size(); } catch (const std::runtime_error&) {}
        try { n += f.get_ints(key).size(); } catch (const std::runtime_error&) {}
        try { n += f.get_floats(key).size(); } catch (const std::runtime_error&) {}
        n += f.find(key) == &v;
    }
    return n;
}

size_t touch_tensors(const ms::GgufFile& f) {
    size_t n = 0;
    std::vector<uint8_t> buf(256);
    for (const ms::GgufTensor& t : f.tensors()) {
        n += f.tensor(t.name) == &t;
        n += size_t(t.n_elements()) + t.row_bytes();
        // The reader promised the range is inside the file: reading its first
        // and last bytes must succeed.
        size_t k = size_t(std::min<uint64_t>(t.nbytes, buf.size()));
        f.read(t.split, t.offset, buf.data(), k);
        f.read(t.split, t.offset + t.nbytes - k, buf.data(), k);
        n += buf[0];
    }
    return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    int fd = memfd();
    if (ftruncate(fd, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
        ssize_t r = pwrite(fd, data + done, size - done, off_t(done));
        if (r <= 0) std::abort();
        done += size_t(r);
    }
    static const std::string path = "/proc/self/fd/" + std::to_string(fd);
    try {
        ms::GgufFile f = ms::GgufFile::open(path);
        volatile size_t sink = touch_metadata(f) + touch_tensors(f);
        (void)sink;
    } catch (const std::runtime_error&) {
    }
    return 0;
}
