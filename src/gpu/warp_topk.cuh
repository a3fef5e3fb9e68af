// The routing kernels' shared step (kernels.cu's softmax routing,
// kernels_layers.cu's sigmoid routing): one warp picks the k best of n
// values, the lower id on a tie, as model/moe.cpp's selection does.
#pragma once
#include <cstdint>

namespace ms::gpu {

// k rounds of a warp-wide argmax over v[0..n) (n <= 1024, k <= 32), each
// skipping what earlier rounds took: chosen[r] (shared) and ids[r] get the
// r-th pick. taken: 32 words of shared scratch. Every lane of the warp calls
// it; chosen is complete for all of them on return.
__device__ inline void warp_topk(const float* v, int n, int k, uint32_t* taken, int32_t* chosen, int32_t* ids) {
    const int lane = threadIdx.x % 32;
    taken[lane] = 0;
    __syncwarp();
    for (int r = 0; r < k; r++) {
        float best = -INFINITY;
        int arg = n;
        for (int e = lane; e < n; e += 32) {
            if (taken[e / 32] & (1u << (e % 32))) continue;
            if (arg == n || v[e] > best) best = v[e], arg = e;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const int oa = __shfl_xor_sync(0xffffffffu, arg, o);
            if (oa < n && (arg == n || ob > best || (ob == best && oa < arg))) best = ob, arg = oa;
        }
        if (lane == 0) {
            taken[arg / 32] |= 1u << (arg % 32);
            chosen[r] = arg;
            ids[r] = arg;
        }
        __syncwarp();
    }
}

}  // namespace ms::gpu
