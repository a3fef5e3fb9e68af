// GGML tensor types as data: ids as stored in GGUF, block geometry and byte
// sizes for every type, and which ones moestream can dequantize and compute.
// Layouts of the individual block formats live in quant/blocks.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ms {

// Ids are the on-disk GGUF type ids; gaps are ids retired upstream.
enum class GgmlType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
    TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};
constexpr uint32_t kGgmlTypeCount = 40;

struct TypeTraits {
    const char* name;      // "Q4_K"; "unknown" for retired/unassigned ids
    uint32_t block_size;   // elements per block (1 for plain types)
    uint32_t type_size;    // bytes per block
    bool valid;            // a real type id
    bool dequant;          // we can dequantize it (quant/dequant.h)
};

// Traits for any id; ids >= kGgmlTypeCount or unassigned give valid=false.
const TypeTraits& type_traits(uint32_t id);
inline const TypeTraits& type_traits(GgmlType t) { return type_traits(uint32_t(t)); }
inline const char* type_name(GgmlType t) { return type_traits(t).name; }

// Bytes of a row of n elements; n must be a multiple of block_size.
inline size_t row_bytes(GgmlType t, int64_t n) {
    const TypeTraits& tr = type_traits(t);
    return size_t(n / tr.block_size) * tr.type_size;
}

// Parses "Q4_K", "q8_0", "bf16"...; returns false when unknown.
bool parse_type_name(const std::string& s, GgmlType* out);

}  // namespace ms
