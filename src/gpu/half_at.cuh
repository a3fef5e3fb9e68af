// An f16 or bf16 value from two bytes of a weight block (as the GGUF stores
// them, 2-byte aligned or not), as float: the kernels' one reader of the
// blocks' scales and of F16/BF16 weights one at a time.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace ms::gpu {

__device__ __forceinline__ float half_at(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ float bf16_at(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return __uint_as_float(uint32_t(h) << 16);
}

}  // namespace ms::gpu
