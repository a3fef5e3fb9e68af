// The device-side timer the kernel benchmarks in docs/gpu/run*/ share: a
// launch f(stream) once to warm up, then reps times between two events;
// microseconds a launch.
#pragma once
#include "gpu/gpu.h"

template <class F>
double time_us(F f, int reps) {
    ms::gpu::Stream s = ms::gpu::new_stream();
    ms::gpu::Event a = ms::gpu::new_event(), b = ms::gpu::new_event();
    f(s);
    ms::gpu::sync(s);
    ms::gpu::record(a, s);
    for (int i = 0; i < reps; i++) f(s);
    ms::gpu::record(b, s);
    ms::gpu::sync(s);
    return ms::gpu::elapsed_ms(a, b) * 1000.0 / reps;
}
