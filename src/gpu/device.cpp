// The CUDA runtime half of gpu.h: device probing, memory, streams, events and
// copies (host C++ against the runtime's header; the kernels are in
// kernels.cu). The runtime is linked statically (cudart_static), which opens
// the driver (libcuda.so.1) only when first called, so this file costs a
// machine without a GPU nothing but a one-line answer from available().
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>
#include <string>

#include "gpu/gpu.h"

namespace ms::gpu {

namespace {

void check(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return;
    // Cleared, so that a caller who catches this (an allocation it can do
    // without) does not see it again at the next launch's check_last.
    cudaGetLastError();
    throw std::runtime_error("CUDA: " + what + ": " + cudaGetErrorString(e));
}

cudaStream_t native(Stream s) { return reinterpret_cast<cudaStream_t>(s); }
cudaEvent_t native(Event e) { return reinterpret_cast<cudaEvent_t>(e); }

}  // namespace

static_assert(kCudaErrorInsufficientDriver == cudaErrorInsufficientDriver);
static_assert(kCudaErrorNoDevice == cudaErrorNoDevice);

namespace {

// Device 0's properties, or false with *why in plain words. Asks the driver
// only (cudaGetDeviceCount, cudaGetDeviceProperties): no context is made.
bool first_device(cudaDeviceProp* p, std::string* why) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n == 0) e = cudaErrorNoDevice;
    if (e == cudaSuccess) e = cudaGetDeviceProperties(p, 0);
    if (e == cudaSuccess) return true;
    cudaGetLastError();  // clear it
    int driver = 0;
    cudaDriverGetVersion(&driver);  // 0 where libcuda is absent
    *why = no_device_reason(e, cudaGetErrorString(e), driver, CUDART_VERSION);
    return false;
}

std::string description(const cudaDeviceProp& p) {
    return std::string(p.name) + ", " + std::to_string(p.totalGlobalMem >> 30) + " GiB, sm_" +
           std::to_string(p.major) + std::to_string(p.minor) + ", " + std::to_string(p.multiProcessorCount) + " SMs";
}

}  // namespace

bool available(std::string* why) {
    static std::string reason;
    static const bool ok = [] {
        cudaDeviceProp p{};
        if (!first_device(&p, &reason)) return false;
        if (p.major < 9) {
            reason = "CUDA device 0 (" + std::string(p.name) + ") is sm_" + std::to_string(p.major) +
                     std::to_string(p.minor) + "; this build has sm_90 kernels";
            return false;
        }
        const cudaError_t e = cudaSetDevice(0);
        if (e != cudaSuccess) {
            cudaGetLastError();
            reason = std::string("CUDA: cannot use device 0: ") + cudaGetErrorString(e);
            return false;
        }
        return true;
    }();
    if (!ok && why) *why = reason;
    return ok;
}

std::string describe() {
    std::string why;
    if (!available(&why)) return "";
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
    return description(p);
}

std::string probe(std::string* why) {
    // Once a process: every report of a run asks, the answer does not change.
    static std::string reason;
    static const std::string device = [] {
        cudaDeviceProp p{};
        return first_device(&p, &reason) ? description(p) : std::string();
    }();
    if (device.empty() && why) *why = reason;
    return device;
}

std::string runtime_version() { return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10); }

void memory_info(size_t* free_bytes, size_t* total_bytes) {
    check(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

void* alloc(size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc of " + std::to_string(bytes) + " bytes");
    return p;
}
void release(void* p) {
    if (p) cudaFree(p);
}
void* alloc_pinned(size_t bytes) {
    void* p = nullptr;
    check(cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost of " + std::to_string(bytes) + " bytes");
    return p;
}
void release_pinned(void* p) {
    if (p) cudaFreeHost(p);
}

bool pin_host(void* p, size_t bytes, std::string* why) {
    const cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e == cudaSuccess) return true;
    cudaGetLastError();
    if (why) *why = cudaGetErrorString(e);
    return false;
}
const uint8_t* device_view(const void* p) {
    void* d = nullptr;
    if (cudaHostGetDevicePointer(&d, const_cast<void*>(p), 0) == cudaSuccess) return static_cast<const uint8_t*>(d);
    cudaGetLastError();
    return nullptr;
}
void unpin_host(void* p) {
    if (p) cudaHostUnregister(p);
}

Stream new_stream() {
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    return reinterpret_cast<Stream>(s);
}
void delete_stream(Stream s) {
    if (s) cudaStreamDestroy(native(s));
}
Event new_event() {
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate");
    return reinterpret_cast<Event>(e);
}
void delete_event(Event e) {
    if (e) cudaEventDestroy(native(e));
}
void record(Event e, Stream s) { check(cudaEventRecord(native(e), native(s)), "cudaEventRecord"); }
void wait(Stream s, Event e) { check(cudaStreamWaitEvent(native(s), native(e), 0), "cudaStreamWaitEvent"); }
void sync(Stream s) { check(cudaStreamSynchronize(native(s)), "cudaStreamSynchronize"); }
void sync_event(Event e) { check(cudaEventSynchronize(native(e)), "cudaEventSynchronize"); }
float elapsed_ms(Event start, Event end) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, native(start), native(end)), "cudaEventElapsedTime");
    return ms;
}

void copy_to_device(void* dst, const void* src, size_t bytes, Stream s) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, native(s)), "copy to device");
}
void copy_to_host(void* dst, const void* src, size_t bytes, Stream s) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, native(s)), "copy to host");
}
void copy_on_device(void* dst, const void* src, size_t bytes, Stream s) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, native(s)), "copy on device");
}
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows, Stream s) {
    check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice, native(s)),
          "copy rows on device");
}
void fill(void* dst, int byte, size_t bytes, Stream s) {
    check(cudaMemsetAsync(dst, byte, bytes, native(s)), "cudaMemset");
}
void check_last(const char* what) { check(cudaGetLastError(), what); }

void capture_begin(Stream s) {
    check(cudaStreamBeginCapture(native(s), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}
Graph capture_end(Stream s) {
    cudaGraph_t g = nullptr;
    check(cudaStreamEndCapture(native(s), &g), "cudaStreamEndCapture");
    cudaGraphExec_t e = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&e, g, 0);
    cudaGraphDestroy(g);
    check(err, "cudaGraphInstantiate");
    return reinterpret_cast<Graph>(e);
}
void launch(Graph g, Stream s) {
    check(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(g), native(s)), "cudaGraphLaunch");
}
void delete_graph(Graph g) {
    if (g) cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(g));
}

namespace {

// Median milliseconds of reps runs of f on the default stream, after one.
template <class F>
double median_ms(int reps, F f) {
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "cudaEventCreate");
    check(cudaEventCreate(&b), "cudaEventCreate");
    f();
    std::vector<double> ms;
    for (int i = 0; i < reps; i++) {
        check(cudaEventRecord(a, nullptr), "cudaEventRecord");
        f();
        check(cudaEventRecord(b, nullptr), "cudaEventRecord");
        check(cudaEventSynchronize(b), "cudaEventSynchronize");
        float t = 0;
        check(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
        ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

double gbs(size_t bytes, double ms) { return double(bytes) / (ms * 1e6); }

}  // namespace

Rates measure_rates(size_t bytes, int reps) {
    Rates r;
    void* d0 = alloc(bytes);
    void* d1 = alloc(bytes);
    void* pinned = alloc_pinned(bytes);
    std::vector<uint8_t> pageable(bytes);
    std::mt19937 rng(1);
    for (size_t i = 0; i < bytes; i += 4096) pageable[i] = uint8_t(rng());  // touched, not zeros
    memcpy(pinned, pageable.data(), bytes);
    check(cudaMemcpy(d0, pinned, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    r.device_copy = gbs(2 * bytes, median_ms(reps, [&] { copy_on_device(d1, d0, bytes, nullptr); }));
    r.h2d_pinned = gbs(bytes, median_ms(reps, [&] { copy_to_device(d1, pinned, bytes, nullptr); }));
    r.h2d_pageable = gbs(bytes, median_ms(reps, [&] { copy_to_device(d1, pageable.data(), bytes, nullptr); }));
    r.d2h_pinned = gbs(bytes, median_ms(reps, [&] { copy_to_host(pinned, d0, bytes, nullptr); }));
    // Matvec: the weights are random bytes (any K-quant byte is valid; the
    // fp16 scales come out finite or not, which costs the same).
    float* x = static_cast<float*>(alloc(1 << 20));
    float* y = static_cast<float*>(alloc(size_t(1) << 22));
    check(cudaMemset(x, 0x3c, 1 << 20), "cudaMemset");
    const int64_t cols = 4096;
    // Quantized weights read 8-bit x, as the decode's kernels do.
    void* xq = alloc(act_bytes(cols));
    quantize_act(x, 1, cols, xq, nullptr);
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::F16}) {
        const int64_t rows = int64_t(bytes / row_bytes(t, cols));
        const size_t w = row_bytes(t, cols) * size_t(rows);
        // Two matrices in turn, so neither sits in L2 from the last run.
        const double ms = median_ms(reps, [&] {
            matvec(t, d0, rows, cols, {x, xq}, y, nullptr);
            matvec(t, d1, rows, cols, {x, xq}, y, nullptr);
        });
        check(cudaGetLastError(), "matvec");
        r.matvec.emplace_back(t, gbs(2 * w, ms));
    }
    r.chain_us = chain_us(512, reps);
    release(x);
    release(xq);
    release(y);
    release(d0);
    release(d1);
    release_pinned(pinned);
    return r;
}

}  // namespace ms::gpu
