// What binary this is and what it found to run on: the version (from git at
// build time), build type, compiler, the SIMD levels compiled in and the one
// chosen on this CPU, whether CUDA is compiled in and the GPU found. One
// object, written by `moestream version --json` and as "build" in every
// JSON report, so a figure can always be traced to the build that made it.
#pragma once
#include "json/json.h"

namespace ms {

// `git describe --tags --always --dirty` of the source tree when it was
// built, or the project's version where it had no .git (generated at build
// time by cmake/version.cmake).
const char* moestream_version();

// {version, build_type, compiler, sanitizers (when any), simd {compiled,
// cpu_best, active, cpu_features}, cuda {compiled, runtime, architectures},
// gpu {found, device | reason}}. Never throws and never takes the GPU: its
// device is only probed (gpu::probe, once a process). probe_gpu false (a run
// with --gpu off) leaves the driver unloaded: on a GPU machine loading it
// would add tens of MB to the peak RSS the same report states; gpu is then
// {probed: false}.
Json build_info(bool probe_gpu = true);

}  // namespace ms
