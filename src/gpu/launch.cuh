// How the kernels of kernels.cu and kernels_layers.cu are launched: every
// launch may start before the kernel ahead of it on the stream has finished
// (programmatic dependent launch, sm_90), so a decode token's chain of small
// kernels does not pay each one's launch latency after the last one's tail.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "gpu/gpu.h"

namespace ms::gpu {

inline cudaStream_t native(Stream s) { return reinterpret_cast<cudaStream_t>(s); }

inline unsigned blocks(int64_t n, int per) { return unsigned((n + per - 1) / per); }

// Called by every kernel before its first read of anything an earlier
// kernel writes, and before its first write: it returns once the kernel
// ahead of it has finished and its writes are visible (reads of what no
// kernel writes, the weights, may come before it). Then it lets the next
// kernel on the stream be launched at once; that one's blocks wait here in
// turn, so at most two kernels of the chain are resident. A no-op for a
// kernel launched the usual way.
__device__ __forceinline__ void chain_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Asks L2 to fetch the bytes [p, p + bytes) ahead of their use (the
// 16-byte pieces wholly inside: the bulk prefetch takes no others): weights,
// before chain_start(), while the kernel ahead still runs.
__device__ __forceinline__ void prefetch_l2(const void* p, size_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uintptr_t first = (reinterpret_cast<uintptr_t>(p) + 15) & ~uintptr_t(15);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~uintptr_t(15);
    if (end > first) {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(first), "r"(uint32_t(end - first))
                     : "memory");
    }
#endif
}

// Row t of a pass's KV writes and attention: its position and caches. One
// sequence (seq null): position *pos + t of k_cache and v_cache. Rows of
// several sequences (batched decode, gpu.h's SeqCaches): position pos[t] of
// the caches seq[2t] (k; multi-head latent attention's one cache) and
// seq[2t + 1] (v).
__device__ __forceinline__ int64_t row_position(const int32_t* pos, float* const* seq, int64_t t, float** k_cache,
                                                float** v_cache) {
    if (!seq) return *pos + t;
    *k_cache = seq[2 * t];
    *v_cache = seq[2 * t + 1];
    return pos[t];
}

// kernel<<<grid, block, smem, s>>>(args...), allowed to start early (see
// chain_start); throws, naming `what`, when the launch (or an earlier
// kernel's run) failed.
template <class... Params, class... Args>
void launch(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
            Args&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;  // overlapped: +5 % decode measured on the 30B (docs/gpu.md, fourth session)
    const cudaError_t sent = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
    const cudaError_t last = cudaGetLastError();  // also an earlier kernel's failure; clears both
    const cudaError_t e = sent != cudaSuccess ? sent : last;
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace ms::gpu
