// `bench gemm` on the GPU in a build without CUDA (MOESTREAM_CUDA off): every
// entry point says so.
#include <stdexcept>

#include "bench/gemm_gpu.h"

namespace ms {

bool gpu_built() { return false; }

bool gpu_probe(GpuDevice*, std::string* why) {
    *why = "built without CUDA";
    return false;
}

void gpu_gemm(GpuType, int64_t, int64_t, int64_t, const float*, const float*, float*) {
    throw std::runtime_error("bench gemm: GPU not available: built without CUDA");
}

GpuGemmReport run_gpu_gemm_bench(const GpuGemmPlan&) {
    throw std::runtime_error("bench gemm: GPU not available: built without CUDA");
}

}  // namespace ms
