// GLM-5 (architecture `glm-dsa`): DeepSeek V3's layers (MLA in the split
// form with q compression, dense first layers, sigmoid routing with
// exp_probs_b, a shared expert; model/deepseek2.cpp) with DeepSeek sparse
// attention: a lightning indexer (model/dsa_indexer.h) picks the top_k
// positions each query attends to, in the layers attention.indexer.types
// marks (every layer without the key); the others reuse the nearest earlier
// layer's choice. The trailing MTP block is checked but not read and not run
// (model/decoder.h).
#include <stdexcept>

#include "gguf/gguf.h"
#include "model/decoder.h"

namespace ms {

DecoderSpec glm_dsa_spec(const GgufFile& file, const ModelConfig& c) {
    const std::string p = c.arch + ".attention.indexer.";
    DecoderSpec s = deepseek2_spec(file, c);
    s.indexer.n_head = int(file.require_int(p + "head_count"));
    s.indexer.head_dim = int(file.require_int(p + "key_length"));
    s.indexer.top_k = int(file.require_int(p + "top_k"));
    if (s.indexer.top_k <= 0 || s.indexer.top_k > (1 << 20)) {
        throw std::runtime_error(file.path() + ": " + p + "top_k " + std::to_string(s.indexer.top_k) +
                                 " is out of range (1 .. 1048576)");
    }
    // Without the key every layer has its own indexer (the reference's rule
    // for contexts below 2^20 positions, as in the files at hand).
    for (int64_t t : file.get_ints(p + "types")) s.indexer_layers.push_back(t != 0);
    return s;
}

}  // namespace ms
