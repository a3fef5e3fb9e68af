#include "quant/types.h"

#include <algorithm>
#include <cctype>

namespace ms {

namespace {

// Block geometry of every GGML type id (public format facts: elements per
// block and bytes per block).
const TypeTraits kTraits[kGgmlTypeCount] = {
    /* 0 */ {"F32", 1, 4, true, true},
    /* 1 */ {"F16", 1, 2, true, true},
    /* 2 */ {"Q4_0", 32, 18, true, true},
    /* 3 */ {"Q4_1", 32, 20, true, true},
    /* 4 */ {"unknown", 0, 0, false, false},
    /* 5 */ {"unknown", 0, 0, false, false},
    /* 6 */ {"Q5_0", 32, 22, true, true},
    /* 7 */ {"Q5_1", 32, 24, true, true},
    /* 8 */ {"Q8_0", 32, 34, true, true},
    /* 9 */ {"Q8_1", 32, 36, true, false},
    /* 10 */ {"Q2_K", 256, 84, true, true},
    /* 11 */ {"Q3_K", 256, 110, true, true},
    /* 12 */ {"Q4_K", 256, 144, true, true},
    /* 13 */ {"Q5_K", 256, 176, true, true},
    /* 14 */ {"Q6_K", 256, 210, true, true},
    /* 15 */ {"Q8_K", 256, 292, true, false},
    /* 16 */ {"IQ2_XXS", 256, 66, true, false},
    /* 17 */ {"IQ2_XS", 256, 74, true, false},
    /* 18 */ {"IQ3_XXS", 256, 98, true, false},
    /* 19 */ {"IQ1_S", 256, 50, true, false},
    /* 20 */ {"IQ4_NL", 32, 18, true, true},
    /* 21 */ {"IQ3_S", 256, 110, true, false},
    /* 22 */ {"IQ2_S", 256, 82, true, false},
    /* 23 */ {"IQ4_XS", 256, 136, true, true},
    /* 24 */ {"I8", 1, 1, true, false},
    /* 25 */ {"I16", 1, 2, true, false},
    /* 26 */ {"I32", 1, 4, true, false},
    /* 27 */ {"I64", 1, 8, true, false},
    /* 28 */ {"F64", 1, 8, true, false},
    /* 29 */ {"IQ1_M", 256, 56, true, false},
    /* 30 */ {"BF16", 1, 2, true, true},
    /* 31 */ {"unknown", 0, 0, false, false},
    /* 32 */ {"unknown", 0, 0, false, false},
    /* 33 */ {"unknown", 0, 0, false, false},
    /* 34 */ {"TQ1_0", 256, 54, true, false},
    /* 35 */ {"TQ2_0", 256, 66, true, false},
    /* 36 */ {"unknown", 0, 0, false, false},
    /* 37 */ {"unknown", 0, 0, false, false},
    /* 38 */ {"unknown", 0, 0, false, false},
    /* 39 */ {"MXFP4", 32, 17, true, true},
};

const TypeTraits kUnknown = {"unknown", 0, 0, false, false};

}  // namespace

const TypeTraits& type_traits(uint32_t id) {
    return id < kGgmlTypeCount ? kTraits[id] : kUnknown;
}

bool parse_type_name(const std::string& s, GgmlType* out) {
    std::string up = s;
    std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return char(std::toupper(c)); });
    for (uint32_t id = 0; id < kGgmlTypeCount; ++id) {
        if (kTraits[id].valid && up == kTraits[id].name) {
            *out = GgmlType(id);
            return true;
        }
    }
    return false;
}

}  // namespace ms
