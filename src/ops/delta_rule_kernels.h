// Internal to ops/: the SIMD loop of delta_rule_step (delta_rule_avx2.cpp,
// delta_rule_avx512.cpp), chosen by delta_rule.cpp at the active quant/cpu.h
// level. The scalar loop in delta_rule.cpp is the reference it is tested
// against.
#pragma once

namespace ms {

struct DeltaRuleKernels {
    // delta_rule_step over the first columns of S, a multiple of the vector
    // width; returns how many it did (the caller does the rest).
    int (*step)(float* S, int head_k, int head_v, const float* q, const float* k, const float* v, float beta,
                float decay, float scale, float* out);
};

extern const DeltaRuleKernels kDeltaRuleAvx2;
extern const DeltaRuleKernels kDeltaRuleAvx512;

}  // namespace ms
