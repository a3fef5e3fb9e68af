// libFuzzer harness for the JSON parser (src/json/): the input is a request
// body, parsed with the limits the server uses. Parsing must either succeed
// or throw std::runtime_error; what parses must dump to text that parses back
// to the same dump (the writer and parser agree), with no duplicate keys left.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "json/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    ms::JsonLimits lim;
    lim.max_bytes = 1 << 20;
    lim.max_depth = 64;
    lim.allow_duplicate_keys = false;
    ms::Json j;
    try {
        j = ms::Json::parse(text, "body", lim);
    } catch (const std::runtime_error&) {
        // Duplicates allowed must not change whether other input parses.
        lim.allow_duplicate_keys = true;
        try {
            ms::Json::parse(text, "body", lim);
        } catch (const std::runtime_error&) {
        }
        return 0;
    }
    const std::string once = j.dump();
    const std::string twice = ms::Json::parse(once, "dump", lim).dump();
    if (once != twice) abort();
    return 0;
}
