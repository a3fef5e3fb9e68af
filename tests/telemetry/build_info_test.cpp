// build_info(): the build object of every report says the SIMD level that
// runs at the moment it is made (set_simd_level lowers it), whether CUDA is
// in the binary as the GPU backend itself says, and why there is no GPU.
#include <gtest/gtest.h>

#include <string>

#include "gpu/gpu.h"
#include "quant/cpu.h"
#include "telemetry/build_info.h"

namespace ms {
namespace {

TEST(BuildInfo, FollowsTheActiveSimdLevel) {
    const SimdLevel before = simd_level();
    EXPECT_EQ(build_info().at("simd").at("active").as_string(), simd_level_name(before));
    set_simd_level(SimdLevel::Scalar);
    const Json b = build_info();
    set_simd_level(before);
    EXPECT_EQ(b.at("simd").at("active").as_string(), "scalar");
    EXPECT_EQ(b.at("simd").at("cpu_best").as_string(), simd_level_name(best_simd_level()));
    EXPECT_EQ(b.at("version").as_string(), moestream_version());
    EXPECT_FALSE(b.at("build_type").as_string().empty());
}

TEST(BuildInfo, CudaAndGpuAsTheBackendSays) {
    const Json b = build_info();
    EXPECT_EQ(b.at("cuda").at("compiled").as_bool(), !gpu::runtime_version().empty());
    std::string why;
    const std::string device = gpu::probe(&why);
    const Json& g = b.at("gpu");
    EXPECT_EQ(g.at("found").as_bool(), !device.empty());
    if (device.empty()) EXPECT_EQ(g.at("reason").as_string(), why);
    else EXPECT_EQ(g.at("device").as_string(), device);
}

}  // namespace
}  // namespace ms
