#include "model/model.h"

#include <atomic>
#include <exception>
#include <mutex>
#include <stdexcept>

#include "gguf/gguf.h"
#include "model/decoder.h"
#include "quant/dequant.h"

namespace ms {

namespace {

std::string shape_string(const int64_t* ne, size_t n) {
    std::string s = "[";
    for (size_t i = 0; i < n; i++) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

// Finds `name` and checks its shape; nullptr when absent.
const GgufTensor* find_shaped(const GgufFile& f, const std::string& name, const std::vector<int64_t>& shape) {
    const GgufTensor* t = f.tensor(name);
    if (!t) return nullptr;
    bool same = t->n_dims == shape.size();
    for (size_t i = 0; same && i < shape.size(); i++) same = t->ne[i] == shape[i];
    if (!same) {
        throw std::runtime_error(f.path() + ": tensor " + name + " has shape " + shape_string(t->ne, t->n_dims) +
                                 ", expected " + shape_string(shape.data(), shape.size()));
    }
    return t;
}

// find_shaped, and a type the kernels run (F32 for 1-D tensors).
const GgufTensor* find_checked(const GgufFile& f, const std::string& name, const std::vector<int64_t>& shape) {
    const GgufTensor* t = find_shaped(f, name, shape);
    if (!t) return nullptr;
    check_runnable(t->type, name);
    if (shape.size() == 1 && t->type != GgmlType::F32) {
        throw std::runtime_error(f.path() + ": tensor " + name + " has type " + type_name(t->type) +
                                 ", expected F32 for a 1-D tensor");
    }
    return t;
}

}  // namespace

void check_state_options(const StateOptions& o) {
    if (o.kv_type != GgmlType::F16 && o.kv_type != GgmlType::F32 && o.kv_type != GgmlType::Q8_0) {
        throw std::runtime_error(std::string("KV cache type must be f16, f32 or q8_0, not ") + type_name(o.kv_type));
    }
    if (o.n_ctx < 1 || o.max_batch < 1 || o.n_threads < 1) {
        throw std::runtime_error("context, batch and thread count must be at least 1");
    }
}

namespace {

struct Architecture {
    const char* name;  // general.architecture
    std::unique_ptr<Model> (*open)(const GgufFile&, ModelConfig);  // a forward pass of its own, or
    DecoderSpec (*spec)(const GgufFile&, const ModelConfig&);      // the decoder's layers, as they differ
};

// `llama` with experts is Mixtral.
const Architecture kArchitectures[] = {
    {"qwen3moe", nullptr, qwen3moe_spec},     {"gemma4", open_gemma4, nullptr},
    {"llama", nullptr, mixtral_spec},         {"olmoe", nullptr, olmoe_spec},
    {"qwen2moe", nullptr, qwen2moe_spec},     {"glm4moe", nullptr, glm4moe_spec},
    {"gpt-oss", nullptr, gpt_oss_spec},       {"qwen35moe", nullptr, qwen35moe_spec},
    {"qwen3next", nullptr, qwen3next_spec},   {"deepseek2", nullptr, deepseek2_spec},
    {"glm-dsa", nullptr, glm_dsa_spec},       {"deepseek4", open_deepseek4, nullptr},
    {"llama4", nullptr, llama4_spec},         {"minimax-m2", nullptr, minimax_m2_spec},
};

const Architecture& find_architecture(const GgufFile& file) {
    const std::string arch = file.require_string("general.architecture");
    for (const Architecture& a : kArchitectures) {
        if (arch == a.name) return a;
    }
    std::string list;
    for (const std::string& a : Model::architectures()) list += (list.empty() ? "" : ", ") + a;
    throw std::runtime_error(file.path() + ": unknown architecture '" + arch + "' (supported: " + list + ")");
}

}  // namespace

void Model::enable_nextn(const GgufFile& file) {
    throw std::runtime_error(file.path() + ": --draft mtp: " + config_.arch +
                             (config_.n_nextn > 0 ? "'s NextN (multi-token prediction) block does not run yet"
                                                  : " file has no NextN (multi-token prediction) layers"));
}

int Model::draft_nextn(ModelState&, ExpertSource&, ThreadPool&, int32_t, int, int32_t*) const { return 0; }

std::vector<std::string> Model::architectures() {
    std::vector<std::string> out;
    for (const Architecture& a : kArchitectures) out.push_back(a.name);
    return out;
}

std::vector<std::string> Model::decoder_architectures() {
    std::vector<std::string> out;
    for (const Architecture& a : kArchitectures) {
        if (a.spec) out.push_back(a.name);
    }
    return out;
}

std::unique_ptr<Model> Model::open(const GgufFile& file) {
    const Architecture& a = find_architecture(file);
    ModelConfig c = read_config(file);
    if (a.open) return a.open(file, std::move(c));
    const DecoderSpec spec = a.spec(file, c);
    return open_decoder(file, std::move(c), spec);
}

bool decoder_spec(const GgufFile& file, const ModelConfig& config, DecoderSpec* out) {
    const Architecture& a = find_architecture(file);
    if (!a.spec) return false;
    *out = a.spec(file, config);
    return true;
}

void Model::set_experts_per_token(int k) {
    if (fixed_experts_per_token()) {
        throw std::runtime_error(config_.arch + ": some layers take the experts their table names for a token, "
                                 "exactly expert_used_count; the number of experts per token cannot change");
    }
    if (k < 1 || k > config_.n_expert) {
        throw std::runtime_error("experts per token must be in [1, " + std::to_string(config_.n_expert) + "], not " +
                                 std::to_string(k));
    }
    config_.n_expert_used = k;
}

void Model::forward_batch(ModelState* const* states, int n, ExpertSource& experts, ThreadPool& pool,
                          const int32_t* tokens, float* logits) const {
    for (int i = 0; i < n; i++) forward(*states[i], experts, pool, tokens + i, 1, logits + int64_t(i) * config_.n_vocab, false);
}

void Model::forward_rows(ModelState* const* states, const int* counts, int n, ExpertSource& experts,
                         ThreadPool& pool, const int32_t* tokens, float* logits) const {
    int64_t row = 0;
    for (int i = 0; i < n; i++) {
        forward(*states[i], experts, pool, tokens + row, counts[i], logits + row * config_.n_vocab, true);
        row += counts[i];
    }
}

bool Model::maybe(const GgufFile& f, const std::string& name, std::vector<int64_t> shape, Tensor* out) {
    const GgufTensor* t = find_checked(f, name, shape);
    if (!t) return false;
    declare(*t, name, shape, out);
    return true;
}

void Model::need_i32(const GgufFile& f, const std::string& name, std::vector<int64_t> shape, Tensor* out) {
    const GgufTensor* t = find_shaped(f, name, shape);
    if (!t) throw std::runtime_error(f.path() + ": missing tensor " + name);
    if (t->type != GgmlType::I32) {
        throw std::runtime_error(f.path() + ": tensor " + name + " has type " + type_name(t->type) +
                                 ", expected I32");
    }
    declare(*t, name, shape, out);
}

void Model::declare(const GgufTensor& t, const std::string& name, const std::vector<int64_t>& shape, Tensor* out) {
    *out = Tensor{t.type, t.ne[0], shape.size() > 1 ? t.ne[1] : 1, nullptr};
    uint64_t offset = (resident_bytes_ + 63) & ~uint64_t(63);
    pending_.push_back({name, out, offset, t.nbytes});
    resident_bytes_ = offset + t.nbytes;
}

bool Model::present(const GgufFile& f, const std::string& name, std::vector<int64_t> shape) const {
    return find_checked(f, name, shape) != nullptr;
}

void Model::need(const GgufFile& f, const std::string& name, std::vector<int64_t> shape, Tensor* out) {
    if (!maybe(f, name, shape, out)) throw std::runtime_error(f.path() + ": missing tensor " + name);
}

void Model::need_experts(const GgufFile& f, int layer, int n_expert, int64_t n_embd, int64_t n_ff) {
    const std::string prefix = "blk." + std::to_string(layer) + ".";
    auto matrix = [&](const char* what, int64_t cols, int64_t rows) {
        const std::string name = prefix + what + ".weight";
        const GgufTensor* t = find_checked(f, name, {cols, rows, n_expert});
        if (!t) throw std::runtime_error(f.path() + ": missing tensor " + name);
        ExpertMatrix m;
        m.tensor = name;
        m.type = t->type;
        m.cols = cols;
        m.rows = rows;
        m.split = t->split;
        m.base = t->offset;
        m.bytes = t->row_bytes() * size_t(rows);
        m.stride = m.bytes;
        return m;
    };
    if (expert_layers_.size() < size_t(layer + 1)) expert_layers_.resize(size_t(layer + 1));
    ExpertLayer& e = expert_layers_[size_t(layer)];
    e.layer = layer;
    e.n_expert = n_expert;
    if (f.tensor(prefix + "ffn_gate_up_exps.weight")) {
        // Fused: each expert's gate rows, then its up rows.
        const ExpertMatrix gu = matrix("ffn_gate_up_exps", n_embd, 2 * n_ff);
        e.gate = gu;
        e.gate.rows = n_ff;
        e.gate.bytes = gu.bytes / 2;
        e.up = e.gate;
        e.up.base = gu.base + e.gate.bytes;
    } else {
        e.gate = matrix("ffn_gate_exps", n_embd, n_ff);
        e.up = matrix("ffn_up_exps", n_embd, n_ff);
    }
    e.down = matrix("ffn_down_exps", n_ff, n_embd);
}

void Model::load_resident(const GgufFile& f, const std::function<void(uint64_t, uint64_t)>& progress,
                          ThreadPool* pool) {
    // Pieces of at most 16 MiB, so the threads share even a few big tensors
    // and progress moves; each piece's pages are faulted in by the thread
    // that then writes them.
    struct Piece {
        int split;
        uint64_t file_offset;
        uint8_t* dst;
        size_t bytes;
    };
    constexpr size_t kPiece = size_t(16) << 20;
    arena_.resize(resident_bytes_, PageSize::Huge);
    std::vector<Piece> pieces;
    for (const Pending& p : pending_) {
        const GgufTensor* t = f.tensor(p.name);
        if (!t || t->nbytes != p.bytes) throw std::runtime_error(f.path() + ": tensor " + p.name + " changed");
        for (uint64_t off = 0; off < p.bytes; off += kPiece)
            pieces.push_back({t->split, t->offset + off, arena_.data() + p.offset + off,
                              size_t(std::min<uint64_t>(kPiece, p.bytes - off))});
        p.out->data = arena_.data() + p.offset;
    }
    std::atomic<uint64_t> done{0};
    std::mutex failed_mutex;
    std::exception_ptr failed;
    auto load = [&](int64_t begin, int64_t end, int thread) {
        for (int64_t i = begin; i < end; ++i) {
            const Piece& pc = pieces[size_t(i)];
            try {
                prefault(pc.dst, pc.bytes);
                f.read(pc.split, pc.file_offset, pc.dst, pc.bytes);
            } catch (...) {
                std::lock_guard<std::mutex> lock(failed_mutex);
                if (!failed) failed = std::current_exception();
                return;
            }
            const uint64_t now = done.fetch_add(pc.bytes) + pc.bytes;
            if (progress && thread == 0) progress(now, resident_bytes_);
        }
    };
    if (pool) {
        // One piece a chunk: ThreadPool cuts n into a few chunks a thread.
        pool->parallel_for(int64_t(pieces.size()), load);
    } else {
        load(0, int64_t(pieces.size()), 0);
    }
    if (failed) std::rethrow_exception(failed);
    if (progress) progress(resident_bytes_, resident_bytes_);
}

}  // namespace ms
