// Float32 products on f16 tensor cores (mma.sync m16n8k16, f16 x f16 ->
// f32) with each operand split into two f16 halves, hi and what rounding
// left, and three MMAs a product: within float32's rounding of a float32
// product, where one f16 MMA a product moved the golden deepseek3 file's
// logits 3e-4 (run23 call 1). The prompt attention kernels
// (kernels_attention.cu) and the float32 weights' products
// (kernels_mma.cu's mma_matmul_f32) share these pieces: fragments loaded
// with ldmatrix from rows of hi halves then lo halves in shared memory,
// and cp.async for tiles copied as they are.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace ms::gpu {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return uint32_t(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices of halves (lanes 8i..8i+7 give matrix i's row
// addresses); .trans: each transposed on the way.
__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address)
                 : "memory");
}
__device__ __forceinline__ void load_matrices_transposed(uint32_t (&r)[4], uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address)
                 : "memory");
}

// d (16 x 8, float) += a (16 x 16, f16, row-major) . b (16 x 8, f16).
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a . b with each operand split in two f16 halves (split_pair): the
// cross terms, then hi.hi; the lo.lo term is below float32's rounding. ah,
// al: a's A fragments; b: b's hi B fragment, then its lo one.
__device__ __forceinline__ void mma_split(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                          const uint32_t (&b)[4]) {
    mma_f16(d, al, b[0], b[1]);
    mma_f16(d, ah, b[2], b[3]);
    mma_f16(d, ah, b[0], b[1]);
}

// Two floats as two pairs of halves: hi, each rounded to f16, and lo, what
// rounding left, rounded. hi + lo keeps some 22 bits of the mantissa, so
// hi.hi + hi.lo + lo.hi (the lo.lo term is below float32's rounding) is
// within float32's rounding of the product.
__device__ __forceinline__ void split_pair(float a, float b, uint32_t& hi, uint32_t& lo) {
    const __half2 h = __floats2half2_rn(a, b);
    const float2 back = __half22float2(h);
    const __half2 r = __floats2half2_rn(a - back.x, b - back.y);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = *reinterpret_cast<const uint32_t*>(&r);
}

// Four floats split into the hi plane at `hi` and the lo plane at `lo`.
__device__ __forceinline__ void split_store(const float4& v, __half* hi, __half* lo) {
    uint32_t h0, l0, h1, l1;
    split_pair(v.x, v.y, h0, l0);
    split_pair(v.z, v.w, h1, l1);
    *reinterpret_cast<uint2*>(hi) = make_uint2(h0, h1);
    *reinterpret_cast<uint2*>(lo) = make_uint2(l0, l1);
}

// 16 bytes from global to shared memory without passing registers; zeros
// where !valid.
__device__ __forceinline__ void copy_async(uint32_t to, const void* from, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(from), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void copy_async_wait() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

}  // namespace ms::gpu
