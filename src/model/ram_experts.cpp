#include "model/ram_experts.h"

#include <climits>
#include <map>
#include <stdexcept>
#include <string>

#include "gguf/gguf.h"

namespace ms {

RamExperts::RamExperts(const GgufFile& file, const std::vector<ExpertLayer>& layers,
                       const std::function<void(uint64_t, uint64_t)>& progress) {
    // A fused gate_up tensor is named by two matrices: read each tensor once.
    std::map<std::string, const GgufTensor*> tensors;
    for (const ExpertLayer& l : layers) {
        if (l.n_expert == 0) continue;
        for (const ExpertMatrix* m : {&l.gate, &l.up, &l.down}) {
            const GgufTensor* t = file.tensor(m->tensor);
            if (!t) throw std::runtime_error(file.path() + ": missing tensor " + m->tensor);
            if (tensors.emplace(m->tensor, t).second) bytes_ += t->nbytes;
        }
    }
    std::map<std::string, const uint8_t*> data;
    buffers_.reserve(tensors.size());
    uint64_t done = 0;
    for (const auto& [name, t] : tensors) {
        buffers_.emplace_back(t->nbytes, PageSize::Huge);
        file.read_tensor(*t, buffers_.back().data());
        data[name] = buffers_.back().data();
        done += t->nbytes;
        if (progress) progress(done, bytes_);
    }

    layers_.resize(layers.size());
    for (size_t i = 0; i < layers.size(); i++) {
        const ExpertLayer& l = layers[i];
        Layer& r = layers_[i];
        r.n_expert = l.n_expert;
        if (l.n_expert == 0) continue;
        // Where expert 0's matrix starts inside its tensor's buffer.
        auto start = [&](const ExpertMatrix& m) {
            return data[m.tensor] + (m.base - tensors[m.tensor]->offset);
        };
        r.gate = start(l.gate);
        r.up = start(l.up);
        r.down = start(l.down);
        r.gate_stride = l.gate.stride;
        r.up_stride = l.up.stride;
        r.down_stride = l.down.stride;
        r.ids.resize(size_t(l.n_expert));
    }
}

int RamExperts::capacity() const { return INT_MAX; }

void RamExperts::acquire(int layer, const int32_t* ids, int n, const int32_t* rows) {
    (void)rows;  // every expert is in memory: nothing to count
    Layer& l = layers_.at(size_t(layer));
    // Callers pass distinct ids, so n never exceeds the layer's expert count.
    for (int i = 0; i < n; i++) l.ids[size_t(i)] = ids[i];
    l.n = n;
    l.next = 0;
}

int RamExperts::next_ready(int layer, ExpertView* view) {
    Layer& l = layers_[size_t(layer)];
    if (l.next == l.n) return -1;
    const int i = l.next++;
    const uint64_t e = uint64_t(l.ids[size_t(i)]);
    view->gate = l.gate + e * l.gate_stride;
    view->up = l.up + e * l.up_stride;
    view->down = l.down + e * l.down_stride;
    return i;
}

void RamExperts::release(int layer) {
    Layer& l = layers_[size_t(layer)];
    l.n = 0;
    l.next = 0;
}

RamExperts::~RamExperts() {
    if (unpin) {
        for (AlignedBuffer& b : buffers_) unpin(b.data());
    }
}

std::vector<std::pair<uint8_t*, size_t>> RamExperts::host_memory() const {
    std::vector<std::pair<uint8_t*, size_t>> out;
    for (const AlignedBuffer& b : buffers_) out.emplace_back(const_cast<uint8_t*>(b.data()), b.size());
    return out;
}

}  // namespace ms
