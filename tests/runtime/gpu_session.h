// Opening a golden file on the GPU for tests, with its experts streamed
// through the store from a packed sidecar where asked (runtime's GPU tests,
// server's GPU metrics test).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "../model/golden.h"
#include "../store/test_util.h"
#include "gguf/gguf.h"
#include "gpu/gpu.h"
#include "model/gpu_decoder.h"
#include "runtime/session.h"
#include "store/layout.h"
#include "store/store.h"

namespace ms {

// sidecar: the experts come through the store (slots for all of them), read
// from this packed sidecar (every expert's gate, up and down at the same
// offsets, which the mapped RAM tier needs), instead of RamExperts.
// ubatch: the tokens a prompt pass takes (-ub; 0: the backend's default).
inline std::unique_ptr<Session> open_gpu(const std::string& gguf, GpuOptions gpu_options, const std::string& sidecar = "",
                                         int ubatch = 0) {
    SessionOptions o;
    o.n_ubatch = ubatch;
    o.model_path = gguf;
    o.n_ctx = 64;
    o.kv_type = GgmlType::F32;
    o.n_threads = 2;
    o.sampling.temp = 0;
    o.gpu = "auto";
    o.gpu_options = gpu_options;
    ExpertSourceFactory experts;
    if (!sidecar.empty()) {
        experts = [sidecar](const GgufFile& f, const Model& m, uint64_t) -> std::unique_ptr<ExpertSource> {
            static StoreCounters counters;
            int n = 0;
            for (const ExpertLayer& l : m.expert_layers()) n += l.n_expert;
            StoreOptions so;
            so.io = "pread";
            so.io_options = {4, 2, 2};
            return std::make_unique<Store>(ExpertLayout::packed(f, m.expert_layers(), sidecar), n, so, &counters);
        };
    }
    return Session::open(o, experts);
}

// Why a streaming test cannot run here ("" when it can).
inline std::string streaming_skip(const char* name) {
    std::string why;
    if (!gpu::available(&why)) return why;
    const std::string gguf = golden::models_dir() + "/" + name + ".gguf";
    return std::filesystem::exists(gguf) ? "" : gguf + " is not here";
}

// The golden file's experts packed into a sidecar in dir (the store reads
// them from it, so the RAM tier's mapped and copied modes both run).
inline std::string packed_sidecar(const golden::Case& g, test::TempDir& dir) {
    const std::string sidecar = dir.file("m.experts");
    write_sidecar(GgufFile::open(g.gguf), find_expert_layers(GgufFile::open(g.gguf)), sidecar);
    return sidecar;
}

}  // namespace ms
