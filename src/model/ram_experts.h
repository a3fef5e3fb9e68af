// The simplest ExpertSource: every routed expert read into RAM at start, so
// every acquire is a hit. The reference the streaming store is tested
// against, and the right choice when the whole model fits in memory.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/expert_source.h"
#include "ops/buffer.h"

namespace ms {

class GgufFile;

class RamExperts : public ExpertSource {
public:
    // Reads all experts of `layers` from `file`; progress(done, total) in bytes.
    RamExperts(const GgufFile& file, const std::vector<ExpertLayer>& layers,
               const std::function<void(uint64_t, uint64_t)>& progress = {});

    ~RamExperts() override;

    uint64_t bytes() const { return bytes_; }

    int capacity() const override;
    void acquire(int layer, const int32_t* ids, int n, const int32_t* rows = nullptr) override;
    int next_ready(int layer, ExpertView* view) override;
    void release(int layer) override;
    std::vector<std::pair<uint8_t*, size_t>> host_memory() const override;

private:
    struct Layer {
        int n_expert = 0;
        const uint8_t* gate = nullptr;  // expert 0's matrix; expert e at + e * stride
        const uint8_t* up = nullptr;
        const uint8_t* down = nullptr;
        uint64_t gate_stride = 0, up_stride = 0, down_stride = 0;
        // The current acquire.
        std::vector<int32_t> ids;
        int n = 0, next = 0;
    };
    std::vector<AlignedBuffer> buffers_;  // one per distinct tensor
    std::vector<Layer> layers_;
    uint64_t bytes_ = 0;
};

}  // namespace ms
