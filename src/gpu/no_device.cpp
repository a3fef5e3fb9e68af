// Why there is no GPU, in the words a user needs (gpu.h's
// no_device_reason): CUDA's own message for a machine without the NVIDIA
// driver, "CUDA driver version is insufficient for CUDA runtime version",
// reads as if a driver were there but old. Compiled in both builds, so
// the test of the wording runs everywhere.
#include <string>

#include "gpu/gpu.h"

namespace ms::gpu {

namespace {

// 13000 -> "13.0" (CUDA's encoding: 1000 * major + 10 * minor).
std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

}  // namespace

std::string no_device_reason(int cuda_error, const std::string& error_text, int driver_version, int runtime) {
    if (cuda_error == kCudaErrorInsufficientDriver) {
        if (driver_version <= 0) return "no NVIDIA driver found";
        return "the NVIDIA driver supports CUDA " + cuda_version_text(driver_version) + ", this build needs " +
               cuda_version_text(runtime) + " or newer (update the driver)";
    }
    if (cuda_error == kCudaErrorNoDevice) return "no NVIDIA GPU found";
    return "CUDA: " + error_text;
}

}  // namespace ms::gpu
