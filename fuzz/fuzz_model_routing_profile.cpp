// libFuzzer harness for the routing-profile reader (--routing-profile): a
// std::runtime_error is the expected answer to bad input; a profile that
// parses has the asked shape and can be ranked.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "model/routing_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    // The model's shape from the first two bytes: 1-16 layers of 1-64 experts.
    const int layers = 1 + data[0] % 16, experts = 1 + data[1] % 64;
    try {
        const ms::RoutingProfile p = ms::RoutingProfile::parse(
            std::string_view(reinterpret_cast<const char*>(data) + 2, size - 2), "fuzz", layers, experts);
        if (p.uses.size() != size_t(layers) * size_t(experts)) std::abort();
        volatile size_t n = p.hottest(size_t(experts)).size();
        (void)n;
    } catch (const std::runtime_error&) {
    }
    return 0;
}
