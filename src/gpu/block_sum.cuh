// Warp-wide sum and maximum, and a block-wide sum that gives the same bits
// on every run (norms, and the DeltaNet kernels' head norms), shared by
// the CUDA kernel files.
#pragma once
#include <cuda_runtime.h>

namespace ms::gpu {

// Every lane's v summed (maximum taken) over the warp, returned to every lane.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The sum over the block (at most 32 warps, every thread taking part) of
// every thread's `sum`, in double, warps' partial sums added in a fixed tree
// so every run gives the same bits; returned to every thread. part: 32
// doubles of shared memory, free again when it returns.
__device__ __forceinline__ double block_sum(double sum, double* part) {
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        double t = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0;
        for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
        if (threadIdx.x == 0) part[0] = t;
    }
    __syncthreads();
    const double total = part[0];
    __syncthreads();  // part may be written again at once
    return total;
}

}  // namespace ms::gpu
