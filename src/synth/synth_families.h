// What a synthetic file of each architecture other than qwen3moe holds: its
// metadata keys and its tensors (names, shapes, how each is filled), laid
// out as the family's loader in model/ reads them. synth.cpp turns the list
// into bytes; qwen3moe keeps its own plan there because its weights carry
// the designed elements that make routing realistic.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "synth/synth.h"
#include "synth/synth_routing.h"

namespace ms {

class GgufWriter;

// Random: quantized by the recipe; RandomF32: Gaussian floats (small tensors
// the loaders want in F32, like a convolution's taps); Values: given floats
// (qwen3moe's designed norms); Router: calibrated router rows;
// TokenExperts: an I32 table of n_expert_used distinct experts per token
// (hash-routed layers).
enum class SynthFill { Random, RandomF32, Ones, Zeros, Values, Router, TokenExperts };

struct SynthTensor {
    std::string name;
    std::vector<int64_t> ne;
    SynthFill fill = SynthFill::Random;
    double sigma = 0;  // Random: the standard deviation of the values
    int layer = -1;    // -1: not in a block
    std::vector<float> values = {};  // Values: the F32 contents
    // Realistic routing (synth/synth_routing.h): the designed element, and
    // for QkRecency the head size and which dims of a head carry position.
    SynthDesign design = SynthDesign::None;
    int head_dim = 0;
    std::vector<uint8_t> recency = {};
    float value = INFINITY;  // CarrierMax, QkRecency: the designed value (infinity: the type's largest)
    bool pure = false;       // QkRecency: every other element of the tensor near zero
    int own_rows = 0;        // rows [carrier, carrier + own_rows) of each matrix exact zeros, whatever the design
};

// Architectures synth writes besides qwen3moe: llama (Mixtral), gpt-oss,
// deepseek2 (DeepSeek V3), glm4moe, qwen35moe, glm-dsa (GLM-5), llama4,
// minimax-m2, gemma4.
bool synth_family_known(const std::string& arch);

// Throws std::runtime_error naming the first size the family cannot use.
void validate_family(const SynthSpec& s);

// Tensors in file order; routers (ffn_gate_inp) are SynthFill::Router with
// shape {n_embd, n_expert}.
std::vector<SynthTensor> family_tensors(const SynthSpec& s, int64_t n_vocab);

// Every `<arch>.*` key the family's loader reads (general.* and tokenizer.*
// are the caller's).
void write_family_metadata(GgufWriter& w, const SynthSpec& s);

// Whether layer `il` routes to experts (false: a dense layer).
bool family_layer_has_experts(const SynthSpec& s, int il);

// DeepSeek V4's compressed layers rope at this theta (YaRN on top), its
// window-only layers at the spec's rope_base.
constexpr double kDeepseek4CompressRopeBase = 160000;

}  // namespace ms
