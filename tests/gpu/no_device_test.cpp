// Why there is no GPU, in plain words: CUDA's errors for a machine without
// the driver, with an old driver and without a device map to the sentences
// gpu.h promises, and this machine's answer (whatever it has) is one of
// them, never CUDA's raw "driver version is insufficient".
#include <gtest/gtest.h>

#include <string>

#include "gpu/gpu.h"

namespace ms::gpu {
namespace {

TEST(NoDeviceReason, NamesTheMissingDriverAndDevice) {
    const std::string raw = "CUDA driver version is insufficient for CUDA runtime version";
    // cudaDriverGetVersion answers 0 where libcuda.so.1 cannot be loaded.
    EXPECT_EQ(no_device_reason(kCudaErrorInsufficientDriver, raw, 0, 13000), "no NVIDIA driver found");
    EXPECT_EQ(no_device_reason(kCudaErrorInsufficientDriver, raw, 12040, 13000),
              "the NVIDIA driver supports CUDA 12.4, this build needs 13.0 or newer (update the driver)");
    EXPECT_EQ(no_device_reason(kCudaErrorNoDevice, "no CUDA-capable device is detected", 13000, 13000),
              "no NVIDIA GPU found");
    EXPECT_EQ(no_device_reason(999, "unknown error", 13000, 13000), "CUDA: unknown error");
}

TEST(NoDeviceReason, ThisMachineSaysOneOfThem) {
    std::string why;
    const bool ok = available(&why);
    std::string probed_why;
    const std::string device = probe(&probed_why);
    if (ok) {
        EXPECT_FALSE(device.empty());
        EXPECT_EQ(describe(), device);
        GTEST_SKIP() << "a usable GPU is here: " << device;
    }
    printf("no GPU: %s\n", why.c_str());
    EXPECT_EQ(why.find("insufficient"), std::string::npos) << why;
    if (runtime_version().empty()) {
        EXPECT_EQ(why, "built without CUDA");
    }
    // No device at all: the probe says the same; a device too old for this
    // build's kernels is found by the probe but refused by available().
    if (device.empty()) {
        EXPECT_EQ(probed_why, why);
    }
}

}  // namespace
}  // namespace ms::gpu
