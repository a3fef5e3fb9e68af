#include "bench/model_experts.h"

#include <stdexcept>

#include "gguf/gguf.h"
#include "store/layout.h"

namespace ms {

ModelExperts read_model_experts(const std::string& path) {
    GgufFile f = GgufFile::open(path);
    ModelExperts m;
    m.path = path;
    m.files = f.paths();
    m.file_bytes = f.total_bytes();
    std::string arch = f.get_string("general.architecture");
    m.n_expert_used = int(f.get_int(arch + ".expert_used_count", 0));
    for (ExpertLayer& l : find_expert_layers(f)) {
        if (l.n_expert == 0) continue;
        m.n_expert = std::max(m.n_expert, l.n_expert);
        m.layers.push_back(std::move(l));
    }
    m.n_layers = int(m.layers.size());
    if (m.layers.empty()) throw std::runtime_error(path + ": no routed-expert tensors (not a MoE model)");
    return m;
}

std::vector<uint64_t> expert_part_sizes(const ModelExperts& m, int layer) {
    const ExpertLayer& l = m.layers.at(layer >= 0 && layer < m.n_layers ? size_t(layer) : 0);
    return {l.gate.bytes, l.up.bytes, l.down.bytes};
}

}  // namespace ms
