// What the benchmarks take from a real model with -m: the byte sizes of one
// routed expert's parts, every expert's byte ranges in the file, and the
// matrix shapes its experts multiply (for bench gemm).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/expert_source.h"

namespace ms {

struct ModelExperts {
    std::string path;
    std::vector<std::string> files;    // one per split of the GGUF (ExpertMatrix::split)
    uint64_t file_bytes = 0;
    int n_layers = 0;                  // blocks with routed experts
    int n_expert = 0, n_expert_used = 0;
    std::vector<ExpertLayer> layers;   // only the blocks with routed experts
};

// Opens the GGUF and finds its routed-expert tensors. Throws
// "PATH: no routed-expert tensors" for a dense model.
ModelExperts read_model_experts(const std::string& path);

// Sizes of the gate, up and down parts of one expert of layer `layer` (an
// index into ModelExperts::layers; -1 or out of range: the first).
std::vector<uint64_t> expert_part_sizes(const ModelExperts& m, int layer);

}  // namespace ms
