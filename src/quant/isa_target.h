// How an ISA unit (*_avx2.cpp, *_avx512.cpp) marks the code that may use its
// instructions. The unit is compiled with the project's baseline flags (no
// -mavx*), includes every header first, then opens MS_ISA_BEGIN(...) around
// its own kernels (all in an anonymous namespace) and closes it with
// MS_ISA_END before the constinit tables that it exports. Why a region and
// not per-file -m flags: code from headers (std:: templates, half.h, blocks.h)
// that such a unit instantiates out of line is an inline function with
// external linkage, and the linker keeps one copy for every caller; compiled
// with -mavx512f, that copy could run AVX-512 on any CPU. Functions declared
// outside the region keep the baseline target wherever they are instantiated,
// and the compiler still inlines them into the region's kernels.
// scripts/isa_scan.py checks the linked binaries for exactly this.
#pragma once

#define MS_ISA_PRAGMA(x) _Pragma(#x)

#if defined(__clang__)
#define MS_ISA_BEGIN(features) \
    MS_ISA_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define MS_ISA_END MS_ISA_PRAGMA(clang attribute pop)
#else
#define MS_ISA_BEGIN(features) MS_ISA_PRAGMA(GCC push_options) MS_ISA_PRAGMA(GCC target(features))
#define MS_ISA_END MS_ISA_PRAGMA(GCC pop_options)
#endif

// quant/cpu.h's SimdLevel::Avx2 and ::Avx512 (AVX512-BF16 instructions are
// used only where cpu_features().avx512bf16 says so).
#define MS_ISA_AVX2 "avx2,fma,f16c,bmi2"
#define MS_ISA_AVX512 "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,avx2,fma,f16c,bmi2"
