// `moestream version` (and `moestream --version`): the build's version, type
// and compiler, the SIMD levels compiled in and the one this CPU runs, CUDA
// and the GPU found, as text or as the JSON object every report carries
// under "build" (telemetry/build_info.h).
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "telemetry/build_info.h"

namespace ms {

namespace {

std::string joined(const Json& words) {
    std::string out;
    for (const Json& w : words.as_array()) out += (out.empty() ? "" : " ") + w.as_string();
    return out;
}

}  // namespace

int cmd_version(int argc, char** argv) {
    Args a("moestream version [--json]",
           "Print the version (git describe of the source tree at build time), the build type and compiler, the "
           "SIMD levels compiled in and the one this CPU runs (MOESTREAM_SIMD caps it), whether CUDA is compiled "
           "in, and the GPU found. `moestream --version` is the same.");
    bool json = false;
    a.flag("--json", &json, "print the JSON object every report carries as \"build\"");
    if (!a.parse(argc, argv)) return 0;
    const Json b = build_info();
    if (json) {
        printf("%s\n", b.dump(2).c_str());
        return 0;
    }
    printf("moestream %s\n", b.at("version").as_string().c_str());
    std::string build = b.at("build_type").as_string() + ", " + b.at("compiler").as_string();
    if (const Json* s = b.find("sanitizers")) build += ", sanitizers " + s->as_string();
    printf("build:  %s\n", build.c_str());
    const Json& simd = b.at("simd");
    printf("simd:   compiled %s; this CPU: %s, chosen: %s\n", joined(simd.at("compiled")).c_str(),
           simd.at("cpu_best").as_string().c_str(), simd.at("active").as_string().c_str());
    const Json& cuda = b.at("cuda");
    if (cuda.at("compiled").as_bool()) {
        printf("cuda:   compiled in (runtime %s, kernels for sm_%s)\n", cuda.at("runtime").as_string().c_str(),
               joined(cuda.at("architectures")).c_str());
    } else {
        printf("cuda:   not compiled in\n");
    }
    const Json& g = b.at("gpu");
    if (g.at("found").as_bool()) printf("gpu:    %s\n", g.at("device").as_string().c_str());
    else printf("gpu:    none (%s)\n", g.at("reason").as_string().c_str());
    return 0;
}

}  // namespace ms
