// `bench gemm` on the GPU through cuBLAS (built with MOESTREAM_CUDA). The
// CUDA runtime and cuBLAS are opened with dlopen the first time the GPU is
// asked for: linking them maps ~200 MB (cuBLASLt) into every moestream
// process, which `run`'s memory budget and RSS figures would carry, and the
// same binary still runs where the CUDA libraries are missing. No kernels of
// our own, so no CUDA compiler: host code against the toolkit's headers.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include "bench/gemm_gpu.h"
#include "bench/readers.h"
#include "bench/table.h"
#include "gpu/gpu.h"
#include "quant/half.h"

namespace ms {

namespace {

#define MS_STR_(x) #x
#define MS_STR(x) MS_STR_(x)

// Every entry point used, by its header name. The headers #define some names
// to versioned symbols (cublasCreate -> cublasCreate_v2); the list's
// arguments are expanded before use, so fields and dlsym names follow.
#define MS_CUDART_FUNCS(X)                                                                                 \
    X(cudaGetDeviceCount) X(cudaGetErrorString) X(cudaSetDevice) X(cudaGetDeviceProperties)                 \
    X(cudaDeviceGetAttribute) X(cudaDriverGetVersion) X(cudaRuntimeGetVersion) X(cudaMalloc) X(cudaFree)     \
    X(cudaMemcpy) X(cudaStreamCreate) X(cudaStreamDestroy) X(cudaEventCreate) X(cudaEventDestroy)             \
    X(cudaEventRecord) X(cudaEventSynchronize) X(cudaEventElapsedTime) X(cudaDeviceGetPCIBusId)
#define MS_CUBLAS_FUNCS(X) \
    X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasGetProperty) X(cublasGetStatusString)

// cublasGemmEx has a C++ overload (computeType as cudaDataType), so its
// field names the C signature.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                    const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                    const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

struct CudaApi {
#define MS_FIELD(f) decltype(&::f) f = nullptr;
    MS_CUDART_FUNCS(MS_FIELD)
    MS_CUBLAS_FUNCS(MS_FIELD)
#undef MS_FIELD
    GemmExFn cublasGemmEx = nullptr;
};

// The soname first (LD_LIBRARY_PATH, ld.so.cache), then the toolkit's
// library folder found at configure time.
void* open_library(const std::string& soname, std::string* why) {
    void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    std::string err = dlerror();
#ifdef MOESTREAM_CUDA_LIBDIR
    h = dlopen((std::string(MOESTREAM_CUDA_LIBDIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
#endif
    *why = "cannot load " + soname + ": " + err;
    return nullptr;
}

// Loaded once per process; nullptr with `why` when a library or symbol is
// missing.
const CudaApi* cuda_api(std::string* why) {
    static std::string load_error;
    static const CudaApi* api = [] () -> const CudaApi* {
        static CudaApi a;
        void* rt = open_library("libcudart.so." + std::to_string(CUDART_VERSION / 1000), &load_error);
        if (!rt) return nullptr;
        void* bl = open_library("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR), &load_error);
        if (!bl) return nullptr;
        bool ok = true;
#define MS_LOAD(lib, f)                                                              \
    a.f = reinterpret_cast<decltype(a.f)>(dlsym(lib, MS_STR(f)));                     \
    if (!a.f && ok) load_error = std::string("missing symbol ") + MS_STR(f), ok = false;
#define MS_LOAD_RT(f) MS_LOAD(rt, f)
#define MS_LOAD_BLAS(f) MS_LOAD(bl, f)
        MS_CUDART_FUNCS(MS_LOAD_RT)
        MS_CUBLAS_FUNCS(MS_LOAD_BLAS)
        MS_LOAD_BLAS(cublasGemmEx)
#undef MS_LOAD_BLAS
#undef MS_LOAD_RT
#undef MS_LOAD
        return ok ? &a : nullptr;
    }();
    if (!api) *why = load_error;
    return api;
}

const CudaApi& api() {
    std::string why;
    const CudaApi* a = cuda_api(&why);
    if (!a) throw std::runtime_error("bench gemm: " + why);
    return *a;
}

// Clock, power and temperature through NVML (the driver's libnvidia-ml.so.1),
// to show when a rate is power- or heat-limited. Its header is not in every
// toolkit, so the entry points are declared here by their documented C
// signatures; every reading is optional (0 when NVML is missing).
struct Nvml {
    using Device = struct NvmlDevice*;
    int (*init)() = nullptr;                                  // nvmlInit_v2
    int (*by_pci_bus)(const char*, Device*) = nullptr;        // nvmlDeviceGetHandleByPciBusId_v2
    int (*clock)(Device, int, unsigned*) = nullptr;           // nvmlDeviceGetClockInfo
    int (*power)(Device, unsigned*) = nullptr;                // nvmlDeviceGetPowerUsage (mW)
    int (*power_limit)(Device, unsigned*) = nullptr;          // nvmlDeviceGetEnforcedPowerLimit (mW)
    int (*temperature)(Device, int, unsigned*) = nullptr;     // nvmlDeviceGetTemperature
    static constexpr int kClockSm = 1, kTemperatureGpu = 0, kSuccess = 0;
    Device dev = nullptr;

    // NVML's handle of CUDA device 0, matched by PCI bus id (NVML numbers
    // devices its own way).
    explicit Nvml(const CudaApi& a) {
        void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        char bus[32] = {};
        if (!lib || a.cudaDeviceGetPCIBusId(bus, sizeof bus, 0) != cudaSuccess) return;
        init = reinterpret_cast<decltype(init)>(dlsym(lib, "nvmlInit_v2"));
        by_pci_bus = reinterpret_cast<decltype(by_pci_bus)>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
        clock = reinterpret_cast<decltype(clock)>(dlsym(lib, "nvmlDeviceGetClockInfo"));
        power = reinterpret_cast<decltype(power)>(dlsym(lib, "nvmlDeviceGetPowerUsage"));
        power_limit = reinterpret_cast<decltype(power_limit)>(dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit"));
        temperature = reinterpret_cast<decltype(temperature)>(dlsym(lib, "nvmlDeviceGetTemperature"));
        if (!init || !by_pci_bus || !clock || !power || !power_limit || !temperature || init() != kSuccess ||
            by_pci_bus(bus, &dev) != kSuccess)
            dev = nullptr;
    }
    double sm_mhz() const {
        unsigned v = 0;
        return dev && clock(dev, kClockSm, &v) == kSuccess ? v : 0;
    }
    double celsius() const {
        unsigned v = 0;
        return dev && temperature(dev, kTemperatureGpu, &v) == kSuccess ? v : 0;
    }
    double watts() const {
        unsigned mw = 0;
        return dev && power(dev, &mw) == kSuccess ? mw / 1e3 : 0;
    }
    double limit_watts() const {
        unsigned mw = 0;
        return dev && power_limit(dev, &mw) == kSuccess ? mw / 1e3 : 0;
    }
};

// Means of NVML readings taken once per timed batch.
struct Readings {
    double mhz = 0, watts = 0, celsius = 0;
    int n = 0;
    void add(const Nvml& nv) {
        mhz += nv.sm_mhz(), watts += nv.watts(), celsius += nv.celsius();
        ++n;
    }
    double mean(double sum) const { return n ? sum / n : 0; }
};

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(strf("bench gemm: %s: %s", what, api().cudaGetErrorString(e)));
}

size_t input_bytes(GpuType t) {
    switch (t) {
        case GpuType::F32:
        case GpuType::TF32: return 4;
        case GpuType::F16:
        case GpuType::BF16: return 2;
        case GpuType::I8: return 1;
    }
    return 4;
}

// Floats to the type's storage: f16/bf16 rounded to nearest even, int8
// rounded and clamped.
std::vector<uint8_t> to_type(GpuType t, const float* v, size_t count) {
    std::vector<uint8_t> out(count * input_bytes(t));
    for (size_t i = 0; i < count; ++i) {
        switch (t) {
            case GpuType::F32:
            case GpuType::TF32: memcpy(&out[i * 4], &v[i], 4); break;
            case GpuType::F16: {
                uint16_t h = fp32_to_fp16(v[i]);
                memcpy(&out[i * 2], &h, 2);
                break;
            }
            case GpuType::BF16: {
                uint16_t h = fp32_to_bf16(v[i]);
                memcpy(&out[i * 2], &h, 2);
                break;
            }
            case GpuType::I8: out[i] = uint8_t(int8_t(std::clamp(std::lrint(v[i]), -128L, 127L))); break;
        }
    }
    return out;
}

struct DeviceBuffer {
    void* p = nullptr;
    explicit DeviceBuffer(size_t bytes) { check(api().cudaMalloc(&p, bytes), "cudaMalloc"); }
    ~DeviceBuffer() { api().cudaFree(p); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// One product's operands on the device: X (m x k), W (n x k), Y (m x n).
struct Operands {
    DeviceBuffer x, w, y;
    Operands(GpuType t, const GpuShape& s, const float* xf, const float* wf)
        : x(size_t(s.m * s.k) * input_bytes(t)), w(size_t(s.n * s.k) * input_bytes(t)), y(size_t(s.m * s.n) * 4) {
        std::vector<uint8_t> hx = to_type(t, xf, size_t(s.m * s.k)), hw = to_type(t, wf, size_t(s.n * s.k));
        check(api().cudaMemcpy(x.p, hx.data(), hx.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
        check(api().cudaMemcpy(w.p, hw.data(), hw.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    }
};

// Device 0 with a stream, a cuBLAS handle on it and two timing events.
struct Gpu {
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    Gpu() {
        const CudaApi& a = api();
        check(a.cudaSetDevice(0), "cudaSetDevice");
        check(a.cudaStreamCreate(&stream), "cudaStreamCreate");
        check(a.cudaEventCreate(&start), "cudaEventCreate");
        check(a.cudaEventCreate(&stop), "cudaEventCreate");
        cublasStatus_t st = a.cublasCreate(&blas);
        if (st != CUBLAS_STATUS_SUCCESS)
            throw std::runtime_error(std::string("bench gemm: cublasCreate: ") + a.cublasGetStatusString(st));
        a.cublasSetStream(blas, stream);
    }
    ~Gpu() {
        const CudaApi& a = api();
        if (blas) a.cublasDestroy(blas);
        a.cudaEventDestroy(start);
        a.cudaEventDestroy(stop);
        a.cudaStreamDestroy(stream);
    }
    Gpu(const Gpu&) = delete;
    Gpu& operator=(const Gpu&) = delete;

    // Our row-major Y[m x n] = X[m x k] . W^T is, to column-major cuBLAS,
    // Y^T (n x m) = op(W) . X^T with W stored as k x n and transposed: the
    // "TN" layout int8 tensor cores want (they need k and n multiples of 4).
    cublasStatus_t multiply(GpuType t, const GpuShape& s, const Operands& o) {
        static const float f_one = 1, f_zero = 0;
        static const int32_t i_one = 1, i_zero = 0;
        bool i8 = t == GpuType::I8;
        cudaDataType in = t == GpuType::F16 ? CUDA_R_16F : t == GpuType::BF16 ? CUDA_R_16BF : i8 ? CUDA_R_8I : CUDA_R_32F;
        cublasComputeType_t compute = i8 ? CUBLAS_COMPUTE_32I
                                      : t == GpuType::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        return api().cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(s.n), int(s.m), int(s.k),
                                  i8 ? static_cast<const void*>(&i_one) : &f_one, o.w.p, in, int(s.k), o.x.p, in,
                                  int(s.k), i8 ? static_cast<const void*>(&i_zero) : &f_zero, o.y.p,
                                  i8 ? CUDA_R_32I : CUDA_R_32F, int(s.n), compute, CUBLAS_GEMM_DEFAULT);
    }

    // Seconds of GPU time for `calls` products back to back.
    double time_calls(GpuType t, const GpuShape& s, const Operands& o, int64_t calls) {
        const CudaApi& a = api();
        check(a.cudaEventRecord(start, stream), "cudaEventRecord");
        for (int64_t i = 0; i < calls; ++i) multiply(t, s, o);
        check(a.cudaEventRecord(stop, stream), "cudaEventRecord");
        check(a.cudaEventSynchronize(stop), "cudaEventSynchronize");
        float ms = 0;
        check(a.cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        return double(ms) / 1e3;
    }

    // Warm-up (cuBLAS picks and loads its kernel on the first call), then
    // the number of calls that fill about 20 ms, so the host's wait between
    // timed batches is noise. 0 when cuBLAS refuses the shape (`error` says).
    int64_t warm_up(GpuType t, const GpuShape& s, const Operands& o, std::string* error) {
        cublasStatus_t st = multiply(t, s, o);
        if (st != CUBLAS_STATUS_SUCCESS) {
            *error = std::string("cublasGemmEx: ") + api().cublasGetStatusString(st);
            return 0;
        }
        time_calls(t, s, o, 3);
        double one = time_calls(t, s, o, 1);
        return std::clamp<int64_t>(int64_t(0.02 / std::max(one, 1e-7)), 1, 100000);
    }
};

void check_dims(const GpuShape& s) {
    if (s.m < 1 || s.k < 1 || s.n < 1 || s.m > INT32_MAX || s.k > INT32_MAX || s.n > INT32_MAX)
        throw std::runtime_error(strf("bench gemm: GPU shape M=%lld K=%lld N=%lld out of range", (long long)s.m,
                                      (long long)s.k, (long long)s.n));
}

// Random operands: uniform in [-1, 1], or whole numbers in [-127, 127] for
// int8 (zeros would flatter the tensor cores' power draw).
std::vector<float> random_values(GpuType t, size_t count, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(count);
    for (float& f : v) f = t == GpuType::I8 ? std::round(u(rng) * 127) : u(rng);
    return v;
}

Operands random_operands(GpuType t, const GpuShape& s) {
    std::vector<float> x = random_values(t, size_t(s.m * s.k), 7), w = random_values(t, size_t(s.n * s.k), 11);
    return Operands(t, s, x.data(), w.data());
}

}  // namespace

bool gpu_built() { return true; }

bool gpu_probe(GpuDevice* dev, std::string* why) {
    const CudaApi* a = cuda_api(why);
    if (!a) return false;
    int count = 0;
    cudaError_t e = a->cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count < 1) e = cudaErrorNoDevice;
    if (e != cudaSuccess) {
        int driver = 0, runtime = 0;
        a->cudaDriverGetVersion(&driver);  // 0 where libcuda is absent
        a->cudaRuntimeGetVersion(&runtime);
        *why = gpu::no_device_reason(e, a->cudaGetErrorString(e), driver, runtime);
        return false;
    }
    cudaDeviceProp p;
    e = a->cudaGetDeviceProperties(&p, 0);
    int clock_khz = 0;
    if (e == cudaSuccess) e = a->cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    if (e == cudaSuccess) e = a->cudaDriverGetVersion(&dev->driver_version);
    if (e == cudaSuccess) e = a->cudaRuntimeGetVersion(&dev->runtime_version);
    if (e != cudaSuccess) {
        *why = strf("CUDA device 0 unusable (%s)", a->cudaGetErrorString(e));
        return false;
    }
    dev->name = p.name;
    dev->sm_count = p.multiProcessorCount;
    dev->cc_major = p.major;
    dev->cc_minor = p.minor;
    dev->clock_mhz = clock_khz / 1000.0;
    dev->memory_bytes = p.totalGlobalMem;
    int major = 0, minor = 0, patch = 0;
    a->cublasGetProperty(MAJOR_VERSION, &major);
    a->cublasGetProperty(MINOR_VERSION, &minor);
    a->cublasGetProperty(PATCH_LEVEL, &patch);
    dev->cublas_version = major * 10000 + minor * 100 + patch;
    return true;
}

void gpu_gemm(GpuType t, int64_t m, int64_t k, int64_t n, const float* x, const float* w, float* y) {
    GpuShape s{"check", m, k, n};
    check_dims(s);
    Gpu g;
    Operands o(t, s, x, w);
    cublasStatus_t st = g.multiply(t, s, o);
    if (st != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string("bench gemm: cublasGemmEx: ") + api().cublasGetStatusString(st));
    // cudaMemcpy runs on the legacy default stream, which waits for work on
    // our (blocking) stream: the product is done before the copy starts.
    std::vector<uint8_t> out(size_t(m * n) * 4);
    check(api().cudaMemcpy(out.data(), o.y.p, out.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (size_t i = 0; i < size_t(m * n); ++i) {
        if (t == GpuType::I8) {
            int32_t v;
            memcpy(&v, &out[i * 4], 4);
            y[i] = float(v);
        } else {
            memcpy(&y[i], &out[i * 4], 4);
        }
    }
}

GpuGemmReport run_gpu_gemm_bench(const GpuGemmPlan& plan) {
    GpuGemmReport r;
    std::string why;
    if (!gpu_probe(&r.device, &why)) throw std::runtime_error("bench gemm: GPU not available: " + why);
    r.measured = true;
    Gpu g;
    Nvml nvml(api());
    r.device.power_limit_watts = nvml.limit_watts();
    uint64_t step = 0, steps = plan.types.size() * plan.shapes.size() + (plan.sustain_seconds > 0 ? 1 : 0);
    for (GpuType t : plan.types) {
        for (const GpuShape& s : plan.shapes) {
            if (plan.progress) plan.progress(strf("GPU %s M=%lld", gpu_type_name(t), (long long)s.m), step++, steps);
            check_dims(s);
            GpuGemmResult res;
            res.shape = s;
            res.type = t;
            Operands o = random_operands(t, s);
            int64_t batch = g.warm_up(t, s, o, &res.error);
            if (batch > 0) {
                Readings rd;
                do {
                    res.seconds += g.time_calls(t, s, o, batch);
                    res.iterations += batch;
                    rd.add(nvml);
                } while (res.seconds < plan.min_seconds);
                res.sm_clock_mhz = rd.mean(rd.mhz);
            }
            r.results.push_back(res);
        }
    }

    r.sustain = plan.sustain;
    r.sustain_type = plan.sustain_type;
    if (plan.sustain_seconds <= 0) return r;
    if (plan.progress) plan.progress("GPU sustained", step, steps);
    check_dims(plan.sustain);
    Operands o = random_operands(plan.sustain_type, plan.sustain);
    std::string error;
    int64_t batch = g.warm_up(plan.sustain_type, plan.sustain, o, &error);
    if (batch == 0)
        throw std::runtime_error(strf("bench gemm: GPU sustained run, %s M=%lld K=%lld N=%lld: %s",
                                      gpu_type_name(plan.sustain_type), (long long)plan.sustain.m,
                                      (long long)plan.sustain.k, (long long)plan.sustain.n, error.c_str()));
    // A sample closes at the first batch that ends past its boundary; its
    // rate is over the GPU time of its batches.
    int64_t t0 = now_ns(), win = t0, calls = 0;
    double gpu_seconds = 0;
    Readings rd;
    for (;;) {
        gpu_seconds += g.time_calls(plan.sustain_type, plan.sustain, o, batch);
        calls += batch;
        rd.add(nvml);
        int64_t now = now_ns();
        bool done = double(now - t0) / 1e9 >= plan.sustain_seconds;
        if (double(now - win) / 1e9 >= plan.sample_seconds || done) {
            GpuSample smp;
            smp.t_start = double(win - t0) / 1e9;
            smp.t_end = double(now - t0) / 1e9;
            smp.gflops = plan.sustain.flops() * double(calls) / gpu_seconds / 1e9;
            smp.sm_clock_mhz = rd.mean(rd.mhz);
            smp.power_watts = rd.mean(rd.watts);
            smp.temperature_c = rd.mean(rd.celsius);
            rd = Readings();
            r.samples.push_back(smp);
            if (plan.progress) plan.progress("GPU sustained", step, steps);
            win = now;
            calls = 0;
            gpu_seconds = 0;
            if (done) break;
        }
    }
    if (r.samples.size() >= 2 && r.samples.front().gflops > 0)
        r.sag_percent = (r.samples.front().gflops - r.samples.back().gflops) / r.samples.front().gflops * 100;
    return r;
}

}  // namespace ms
