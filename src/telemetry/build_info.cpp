#include "telemetry/build_info.h"

#include <string>

#include "gpu/gpu.h"
#include "quant/cpu.h"

namespace ms {

namespace {

std::string compiler() {
#if defined(__clang__)
    return "clang " + std::to_string(__clang_major__) + "." + std::to_string(__clang_minor__) + "." +
           std::to_string(__clang_patchlevel__);
#elif defined(__GNUC__)
    return "gcc " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
           std::to_string(__GNUC_PATCHLEVEL__);
#else
    return "unknown";
#endif
}

// "a b c" -> ["a", "b", "c"] (the configure-time lists come as words).
Json words(const std::string& s) {
    Json out = Json::array();
    size_t i = 0;
    while (i < s.size()) {
        const size_t e = s.find(' ', i);
        const size_t end = e == std::string::npos ? s.size() : e;
        if (end > i) out.push_back(Json(s.substr(i, end - i)));
        i = end + 1;
    }
    return out;
}

Json cpu_feature_names() {
    const CpuFeatures& f = cpu_features();
    const std::pair<const char*, bool> named[] = {
        {"avx2", f.avx2},         {"fma", f.fma},               {"f16c", f.f16c},
        {"bmi2", f.bmi2},         {"avx512f", f.avx512f},       {"avx512bw", f.avx512bw},
        {"avx512vl", f.avx512vl}, {"avx512dq", f.avx512dq},     {"avx512vnni", f.avx512vnni},
        {"avx512bf16", f.avx512bf16}, {"avxvnni", f.avxvnni},
    };
    Json out = Json::array();
    for (const auto& [name, has] : named) {
        if (has) out.push_back(Json(name));
    }
    return out;
}

}  // namespace

Json build_info(bool probe_gpu) {
    Json b = Json::object();
    b["version"] = moestream_version();
    b["build_type"] = MOESTREAM_BUILD_TYPE;
    b["compiler"] = compiler();
    if (*MOESTREAM_SANITIZERS) b["sanitizers"] = MOESTREAM_SANITIZERS;
    Json simd = Json::object();
    // Every level's kernels are in an x86-64 binary (quant/dot_avx2.cpp,
    // dot_avx512.cpp, chosen at run time); elsewhere only the scalar ones.
    Json compiled = Json::array();
    compiled.push_back(Json(simd_level_name(SimdLevel::Scalar)));
#if defined(__x86_64__)
    compiled.push_back(Json(simd_level_name(SimdLevel::Avx2)));
    compiled.push_back(Json(simd_level_name(SimdLevel::Avx512)));
#endif
    simd["compiled"] = compiled;
    simd["cpu_best"] = simd_level_name(best_simd_level());  // capped by MOESTREAM_SIMD
    simd["active"] = simd_level_name(simd_level());
    simd["cpu_features"] = cpu_feature_names();
    b["simd"] = simd;
    Json cuda = Json::object();
    const std::string runtime = gpu::runtime_version();
    cuda["compiled"] = !runtime.empty();
    if (!runtime.empty()) {
        cuda["runtime"] = runtime;
        cuda["architectures"] = words(MOESTREAM_CUDA_ARCHS);
    }
    b["cuda"] = cuda;
    Json g = Json::object();
    if (!probe_gpu) {
        g["probed"] = false;
        g["reason"] = "not probed: this run did not use the GPU (--gpu off)";
        b["gpu"] = g;
        return b;
    }
    std::string why;
    const std::string device = gpu::probe(&why);
    g["found"] = !device.empty();
    if (!device.empty()) g["device"] = device;
    else g["reason"] = why;
    b["gpu"] = g;
    return b;
}

}  // namespace ms
