#include "model/config.h"

#include <algorithm>
#include <stdexcept>

#include "gguf/gguf.h"

namespace ms {

namespace {

int64_t checked(const GgufFile& f, const std::string& key, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
        throw std::runtime_error(f.path() + ": " + key + " = " + std::to_string(v) + " is out of range [" +
                                 std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return v;
}

}  // namespace

ModelConfig read_config(const GgufFile& f) {
    ModelConfig c;
    c.arch = f.require_string("general.architecture");
    c.name = f.get_string("general.name");
    const std::string p = c.arch + ".";
    // Families that vary a size by layer (gemma4's KV heads) store an array:
    // the configuration holds its largest value, the family reads the rest.
    auto value = [&](const std::string& key, int64_t fallback) {
        const GgufValue* v = f.find(key);
        if (!v || !v->is_array()) return f.get_int(key, fallback);
        const std::vector<int64_t> a = f.get_ints(key);
        if (a.empty()) return fallback;
        int64_t m = a[0];
        for (int64_t x : a) m = std::max(m, x);
        return m;
    };
    auto need = [&](const char* key, int64_t lo, int64_t hi) {
        if (!f.has(p + key)) f.require_int(p + key);  // throws "missing metadata"
        return checked(f, p + key, value(p + key, 0), lo, hi);
    };
    auto opt = [&](const char* key, int64_t fallback, int64_t lo, int64_t hi) {
        return checked(f, p + key, value(p + key, fallback), lo, hi);
    };

    c.n_layer = int(need("block_count", 1, 4096));
    c.n_embd = need("embedding_length", 1, 1 << 20);
    c.n_head = int(need("attention.head_count", 1, 1 << 14));
    c.n_head_kv = int(opt("attention.head_count_kv", c.n_head, 1, c.n_head));
    if (c.n_head % c.n_head_kv != 0) {
        throw std::runtime_error(f.path() + ": " + p + "attention.head_count " + std::to_string(c.n_head) +
                                 " is not a multiple of head_count_kv " + std::to_string(c.n_head_kv));
    }
    c.head_dim = int(opt("attention.key_length", c.n_embd / c.n_head, 1, 1 << 14));
    c.head_dim_v = int(opt("attention.value_length", c.head_dim, 1, 1 << 14));
    c.n_rot = int(opt("rope.dimension_count", c.head_dim, 0, c.head_dim));
    if (c.n_rot % 2 != 0) throw std::runtime_error(f.path() + ": " + p + "rope.dimension_count must be even");
    c.n_ctx_train = opt("context_length", 4096, 1, int64_t(1) << 32);
    c.rope_freq_base = float(f.get_float(p + "rope.freq_base", 10000.0));
    c.rms_eps = float(f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-6));
    c.n_ff = opt("feed_forward_length", 0, 0, int64_t(1) << 24);
    c.n_expert = int(opt("expert_count", 0, 0, 1 << 16));
    c.n_expert_used = int(opt("expert_used_count", 0, 0, c.n_expert));
    c.n_ff_exp = opt("expert_feed_forward_length", 0, 0, int64_t(1) << 24);
    c.expert_gating = int(opt("expert_gating_func", 0, 0, 16));
    c.expert_weights_norm = f.get_bool(p + "expert_weights_norm", false);
    c.expert_weights_scale = float(f.get_float(p + "expert_weights_scale", 1.0));
    if (c.expert_weights_scale == 0.0f) c.expert_weights_scale = 1.0f;
    c.n_expert_shared = int(opt("expert_shared_count", 0, 0, 1 << 16));
    c.n_ff_shexp = opt("expert_shared_feed_forward_length", 0, 0, int64_t(1) << 24);
    c.n_nextn = int(opt("nextn_predict_layers", 0, 0, c.n_layer - 1));
    c.n_dense_lead = int(opt("leading_dense_block_count", 0, 0, c.n_layer));
    c.sliding_window = int(opt("attention.sliding_window", 0, 0, int64_t(1) << 30));
    c.rope_scaling = f.get_string(p + "rope.scaling.type");
    c.rope_factor = float(f.get_float(p + "rope.scaling.factor", 1.0));
    if (!(c.rope_factor > 0.0f)) throw std::runtime_error(f.path() + ": " + p + "rope.scaling.factor must be > 0");
    c.rope_n_ctx_orig = opt("rope.scaling.original_context_length", c.n_ctx_train, 1, int64_t(1) << 32);
    return c;
}

}  // namespace ms
