#include "model/summary.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

namespace ms {

const char* tensor_class_name(TensorClass c) {
    switch (c) {
        case TensorClass::Resident: return "resident";
        case TensorClass::Expert: return "routed experts";
        case TensorClass::EmbeddingRows: return "embedding rows";
        case TensorClass::Unused: return "NextN (read only with --draft mtp)";
    }
    return "?";
}

int tensor_layer(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    int layer = 0;
    size_t i = 4;
    if (i >= name.size() || !isdigit(static_cast<unsigned char>(name[i]))) return -1;
    for (; i < name.size() && isdigit(static_cast<unsigned char>(name[i])); ++i) {
        layer = layer * 10 + (name[i] - '0');
        if (layer > 1000000) return -1;
    }
    return i < name.size() && name[i] == '.' ? layer : -1;
}

namespace {

bool ends_with(const std::string& s, const char* suffix) {
    size_t n = strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The part of a block tensor's name after "blk.N.": "ffn_up_exps.weight".
std::string block_suffix(const std::string& name) {
    size_t dot = name.find('.', 4);
    return dot == std::string::npos ? name : name.substr(dot + 1);
}

// Routed-expert matrices: 3-D, one slice per expert along ne[2].
bool is_expert_matrix(const GgufTensor& t) {
    if (t.n_dims != 3 || tensor_layer(t.name) < 0) return false;
    std::string s = block_suffix(t.name);
    return s == "ffn_gate_exps.weight" || s == "ffn_up_exps.weight" || s == "ffn_down_exps.weight" ||
           s == "ffn_gate_up_exps.weight";
}

// Per-expert side tensors: biases (ne[1] == n_expert) and scales (ne[0] == n_expert).
bool is_expert_side(const GgufTensor& t) {
    if (tensor_layer(t.name) < 0) return false;
    std::string s = block_suffix(t.name);
    return s.find("_exps.") != std::string::npos && !ends_with(s, ".weight");
}

// Hyper-parameters are clamped to [0, 2^24] (above any real model's layers,
// widths, vocabulary or context): a hostile file then gives nonsense figures,
// never an overflow or a billion-step loop in the memory formulas.
int64_t sane(int64_t v) { return std::clamp<int64_t>(v, 0, int64_t(1) << 24); }

int64_t get_count(const GgufFile& f, const std::string& key, int64_t fallback = 0) {
    return sane(f.get_int(key, fallback));
}

// An integer key that some architectures store per layer: its maximum, and
// the per-layer values when it is an array.
int64_t int_or_max(const GgufFile& f, const std::string& key, std::vector<int64_t>* per_layer = nullptr) {
    const GgufValue* v = f.find(key);
    if (!v) return 0;
    if (!v->is_array()) return get_count(f, key);
    std::vector<int64_t> a = f.get_ints(key);
    for (int64_t& x : a) x = sane(x);
    if (per_layer) *per_layer = a;
    int64_t m = 0;
    for (int64_t x : a) m = std::max(m, x);
    return m;
}

Hparams read_hparams(const GgufFile& f) {
    Hparams h;
    h.arch = f.get_string("general.architecture");
    h.name = f.get_string("general.name");
    auto k = [&](const char* s) { return h.arch + "." + s; };
    h.n_layer = get_count(f, k("block_count"), 0);
    h.n_embd = get_count(f, k("embedding_length"), 0);
    h.n_head = int_or_max(f, k("attention.head_count"));
    h.n_head_kv = int_or_max(f, k("attention.head_count_kv"), &h.n_head_kv_layer);
    if (!f.has(k("attention.head_count_kv"))) h.n_head_kv = h.n_head;
    h.head_dim_k = get_count(f, k("attention.key_length"), h.n_head ? h.n_embd / h.n_head : 0);
    h.head_dim_v = get_count(f, k("attention.value_length"), h.head_dim_k);
    h.n_expert = get_count(f, k("expert_count"), 0);
    h.n_expert_used = get_count(f, k("expert_used_count"), 0);
    h.expert_ffn = get_count(f, k("expert_feed_forward_length"), 0);
    h.ffn = int_or_max(f, k("feed_forward_length"));
    h.n_shared_expert = get_count(f, k("expert_shared_count"), 0);
    h.shared_ffn = get_count(f, k("expert_shared_feed_forward_length"), 0);
    h.n_dense_lead = get_count(f, k("leading_dense_block_count"), 0);
    h.n_nextn = get_count(f, k("nextn_predict_layers"), 0);
    h.moe_layer_step = get_count(f, k("interleave_moe_layer_step"), 0);
    // The reference fixes Llama 4's chunk; sliding_window = 0 turns it off.
    const bool unchunked = f.has(k("attention.sliding_window")) && f.get_int(k("attention.sliding_window"), 0) == 0;
    if (h.arch == "llama4" && !unchunked) h.attention_chunk = 8192;
    h.context = get_count(f, k("context_length"), 0);
    h.sliding_window = get_count(f, k("attention.sliding_window"), 0);
    h.kv_lora_rank = get_count(f, k("attention.kv_lora_rank"), 0);
    h.head_dim_k_mla = get_count(f, k("attention.key_length_mla"), 0);
    h.head_dim_v_mla = get_count(f, k("attention.value_length_mla"), 0);
    h.rope_base = f.get_float(k("rope.freq_base"), 0);
    h.rope_dim = get_count(f, k("rope.dimension_count"), 0);
    h.rope_scaling = f.get_string(k("rope.scaling.type"));
    h.rope_factor = f.get_float(k("rope.scaling.factor"), 0);
    h.full_attention_interval = get_count(f, k("full_attention_interval"), 0);
    h.ssm_conv_kernel = get_count(f, k("ssm.conv_kernel"), 0);
    h.ssm_inner = get_count(f, k("ssm.inner_size"), 0);
    h.ssm_state = get_count(f, k("ssm.state_size"), 0);
    h.ssm_groups = get_count(f, k("ssm.group_count"), 0);
    h.tokenizer_model = f.get_string("tokenizer.ggml.model");
    h.tokenizer_pre = f.get_string("tokenizer.ggml.pre");
    h.n_vocab = int64_t(f.get_strings("tokenizer.ggml.tokens").size());
    if (!h.n_vocab) h.n_vocab = get_count(f, k("vocab_size"));
    h.chat_template = f.has("tokenizer.chat_template");
    return h;
}

// Shapes fill what the metadata leaves out (Mixtral-style files give the
// expert width only as feed_forward_length; the shared-expert width is
// rarely stored).
void complete_from_tensors(const GgufFile& f, Hparams& h) {
    for (const GgufTensor& t : f.tensors()) {
        std::string s = block_suffix(t.name);
        if (!h.expert_ffn && s == "ffn_gate_exps.weight") h.expert_ffn = t.ne[1];
        if (!h.expert_ffn && s == "ffn_gate_up_exps.weight") h.expert_ffn = t.ne[1] / 2;
        if (!h.shared_ffn && s == "ffn_up_shexp.weight") h.shared_ffn = t.ne[1];
        if (!h.n_shared_expert && s == "ffn_up_shexp.weight") h.n_shared_expert = 1;
        if (!h.n_expert && is_expert_matrix(t)) h.n_expert = t.ne[2];
        if (!h.n_vocab && t.name == "token_embd.weight") h.n_vocab = t.ne[1];
    }
}

bool is_recurrent_layer(const Hparams& h, int64_t l) {
    return h.full_attention_interval > 0 && h.ssm_inner > 0 && (l + 1) % h.full_attention_interval != 0;
}

// DeepSeek V4 (model/deepseek4_attention.h) keeps, per layer and in F32, a
// window of one head_dim vector per token and, on compressed layers (ratio
// R), a head_dim block per R tokens plus an indexer key per R tokens where
// there is an indexer, and the unpooled tokens' values and scores (R rows, 2R
// with overlapping blocks, of 2 x the compressor's width).
void deepseek4_memory(const GgufFile& f, const Hparams& h, MemoryNeed& m) {
    const std::vector<int64_t> ratios = f.get_ints(h.arch + ".attention.compress_ratios");
    const int64_t index_dim = get_count(f, h.arch + ".attention.indexer.key_length");
    const uint64_t D = uint64_t(h.head_dim_k);
    double per_token = 0;
    for (int64_t l = 0; l < h.n_layer - h.n_nextn; ++l) {
        m.state_bytes += 4 * uint64_t(std::min(m.ctx, h.sliding_window)) * D;
        m.full_kv_token_bytes += 2 * uint64_t(h.n_head) * 2 * D;
        const int64_t r = size_t(l) < ratios.size() ? ratios[size_t(l)] : 0;
        if (r <= 0) continue;
        const std::string b = "blk." + std::to_string(l) + ".";
        for (const char* c : {"attn_compressor_kv.weight", "indexer_compressor_kv.weight"}) {
            const GgufTensor* t = f.tensor(b + c);
            if (!t) continue;
            const uint64_t width = c[0] == 'a' ? D : uint64_t(index_dim), in = uint64_t(t->ne[1]);
            m.state_bytes += 4 * uint64_t(in > width ? 2 * r : r) * 2 * in;
            m.kv_bytes += 4 * uint64_t(m.ctx / r) * width;
            per_token += 4.0 * double(width) / double(r);
        }
    }
    m.kv_token_bytes = uint64_t(std::llround(per_token));
    m.kv_bytes += m.state_bytes;
}

MemoryNeed memory_need(const GgufFile& f, const Hparams& h, int64_t ctx) {
    MemoryNeed m;
    m.ctx = ctx > 0 ? ctx : std::min<int64_t>(h.context > 0 ? h.context : 4096, 4096);
    if (h.arch == "deepseek4") {
        deepseek4_memory(f, h, m);
        m.logits_bytes = 4 * uint64_t(h.n_vocab);
        return m;
    }
    std::vector<int64_t> swa = f.get_ints(h.arch + ".attention.sliding_window_pattern");
    int64_t k_swa = get_count(f, h.arch + ".attention.key_length_swa", h.head_dim_k);
    int64_t v_swa = get_count(f, h.arch + ".attention.value_length_swa", h.head_dim_v);
    int64_t shared_kv = get_count(f, h.arch + ".attention.shared_kv_layers");
    int64_t n_cached = h.n_layer - h.n_nextn - shared_kv;
    // glm-dsa's lightning indexer keeps one key per position in each layer
    // that has an indexer (attention.indexer.types; every layer without it).
    const int64_t index_dim = get_count(f, h.arch + ".attention.indexer.key_length");
    const std::vector<int64_t> index_types = f.get_ints(h.arch + ".attention.indexer.types");
    for (int64_t l = 0; l < n_cached; ++l) {
        if (is_recurrent_layer(h, l)) {
            uint64_t conv_channels = uint64_t(h.ssm_inner + 2 * h.ssm_groups * h.ssm_state);
            uint64_t conv_rows = uint64_t(std::max<int64_t>(h.ssm_conv_kernel - 1, 0));
            m.state_bytes += 4 * (conv_rows * conv_channels + uint64_t(h.ssm_inner) * uint64_t(h.ssm_state));
            continue;
        }
        // gpt-oss alternates sliding-window (even) and full (odd) layers
        // without a pattern key.
        bool is_swa = size_t(l) < swa.size() ? swa[size_t(l)] != 0
                                              : (h.arch == "gpt-oss" && h.sliding_window > 0 && l % 2 == 0);
        int64_t tokens = is_swa && h.sliding_window > 0 ? std::min(m.ctx, h.sliding_window) : m.ctx;
        if (h.attention_chunk > 0 && l % 4 < 3) tokens = std::min(m.ctx, h.attention_chunk);
        uint64_t per_token, full_per_token;
        if (h.kv_lora_rank > 0) {
            per_token = uint64_t(h.kv_lora_rank + h.rope_dim);
            full_per_token = uint64_t(h.n_head) * uint64_t(h.head_dim_k_mla + h.head_dim_v_mla);
            const bool indexed = index_types.empty() || (size_t(l) < index_types.size() && index_types[size_t(l)] != 0);
            if (index_dim > 0 && indexed) per_token += uint64_t(index_dim);
        } else {
            int64_t kv = size_t(l) < h.n_head_kv_layer.size() ? h.n_head_kv_layer[size_t(l)] : h.n_head_kv;
            per_token = uint64_t(kv) * uint64_t(is_swa ? k_swa + v_swa : h.head_dim_k + h.head_dim_v);
            full_per_token = per_token;
        }
        m.kv_bytes += 2 * uint64_t(tokens) * per_token;
        if (tokens == m.ctx) {
            m.kv_token_bytes += 2 * per_token;
            m.full_kv_token_bytes += 2 * full_per_token;
        }
    }
    m.kv_bytes += m.state_bytes;
    m.logits_bytes = 4 * uint64_t(h.n_vocab);
    return m;
}

void read_synth_info(const GgufFile& f, const ModelSummary& s, SynthInfo* out) {
    if (!f.has("moestream.synth.router_skew")) return;
    out->present = true;
    out->preset = f.get_string("moestream.synth.preset");
    out->router_skew = f.get_float("moestream.synth.router_skew", 0);
    out->seed = uint64_t(f.get_int("moestream.synth.seed", 0));
    std::vector<double> pop = f.get_floats("moestream.synth.expert_popularity");
    size_t n_expert = size_t(s.hp.n_expert);
    if (!n_expert || pop.size() != s.moe_layers.size() * n_expert) return;
    for (size_t l = 0; l < s.moe_layers.size(); ++l)
        out->popularity.emplace_back(pop.begin() + long(l * n_expert), pop.begin() + long((l + 1) * n_expert));
}

}  // namespace

TensorClass classify_tensor(const GgufTensor& t, int64_t n_layer, int64_t n_nextn, bool tied_output) {
    int layer = tensor_layer(t.name);
    if (layer >= 0 && n_nextn > 0 && layer >= n_layer - n_nextn) return TensorClass::Unused;
    if (is_expert_matrix(t)) return TensorClass::Expert;
    if (t.name == "token_embd.weight") return tied_output ? TensorClass::Resident : TensorClass::EmbeddingRows;
    if (t.name == "per_layer_token_embd.weight") return TensorClass::EmbeddingRows;
    return TensorClass::Resident;
}

std::vector<ByteRange> expert_byte_ranges(const GgufFile& f, const MoeLayer& l, int e) {
    std::vector<ByteRange> r;
    for (size_t i : l.tensors) {
        const GgufTensor& t = f.tensors()[i];
        uint64_t slice = t.nbytes / uint64_t(l.n_expert);
        r.push_back({t.split, t.offset + uint64_t(e) * slice, slice});
    }
    std::sort(r.begin(), r.end(), [](const ByteRange& a, const ByteRange& b) {
        return a.split != b.split ? a.split < b.split : a.offset < b.offset;
    });
    std::vector<ByteRange> merged;
    for (const ByteRange& x : r) {
        if (!merged.empty() && merged.back().split == x.split && merged.back().offset + merged.back().size == x.offset)
            merged.back().size += x.size;
        else
            merged.push_back(x);
    }
    return merged;
}

double top_expert_share(const std::vector<std::vector<double>>& popularity, int top) {
    if (popularity.empty()) return 0;
    double sum_share = 0;
    for (std::vector<double> p : popularity) {
        std::sort(p.begin(), p.end(), std::greater<double>());
        double total = 0, head = 0;
        for (size_t i = 0; i < p.size(); ++i) {
            total += p[i];
            if (int(i) < top) head += p[i];
        }
        sum_share += total > 0 ? head / total : 0;
    }
    return sum_share / double(popularity.size());
}

ModelSummary summarize_model(const GgufFile& f, int64_t ctx) {
    ModelSummary s;
    s.files = f.paths();
    s.file_bytes = f.total_bytes();
    s.version = f.version();
    s.alignment = f.alignment();
    s.n_tensors = int64_t(f.tensors().size());
    s.hp = read_hparams(f);
    complete_from_tensors(f, s.hp);
    const Hparams& h = s.hp;

    bool tied = f.tensor("output.weight") == nullptr;
    std::map<int, MoeLayer> moe;  // by layer
    std::map<GgmlType, TypeUse> types;
    const std::vector<GgufTensor>& ts = f.tensors();
    for (size_t i = 0; i < ts.size(); ++i) {
        const GgufTensor& t = ts[i];
        TensorClass c = classify_tensor(t, h.n_layer, h.n_nextn, tied);
        s.tensor_class.push_back(c);
        uint64_t n = uint64_t(t.n_elements());
        s.params += n;
        s.tensor_bytes += t.nbytes;
        s.params_by_class[int(c)] += n;
        s.bytes_by_class[int(c)] += t.nbytes;
        TypeUse& u = types[t.type];
        u.type = t.type;
        u.tensors++;
        u.bytes += t.nbytes;
        u.params += n;
        if (c == TensorClass::Unused) continue;
        if (c == TensorClass::Expert) {
            MoeLayer& l = moe[tensor_layer(t.name)];
            l.layer = tensor_layer(t.name);
            l.n_expert = int(t.ne[2]);
            l.tensors.push_back(i);
        } else if (is_expert_side(t)) {
            moe[tensor_layer(t.name)].side_tensors.push_back(i);
        }
    }

    for (auto& [layer, l] : moe) {
        if (l.tensors.empty()) continue;  // side tensors without matrices: nothing to stream
        for (size_t i : l.tensors) {
            l.expert_bytes += ts[i].nbytes / uint64_t(l.n_expert);
            l.expert_params += uint64_t(ts[i].n_elements()) / uint64_t(l.n_expert);
        }
        for (size_t i : l.side_tensors) l.side_bytes += ts[i].nbytes / uint64_t(l.n_expert);
        for (int e = 0; e < l.n_expert; ++e)
            l.ranges = std::max(l.ranges, int(expert_byte_ranges(f, l, e).size()));
        s.moe_layers.push_back(l);
    }
    if (!s.moe_layers.empty()) {
        s.expert_bytes_min = UINT64_MAX;
        double sum = 0;
        for (const MoeLayer& l : s.moe_layers) {
            s.expert_bytes_min = std::min(s.expert_bytes_min, l.expert_bytes);
            s.expert_bytes_max = std::max(s.expert_bytes_max, l.expert_bytes);
            s.expert_ranges_max = std::max(s.expert_ranges_max, l.ranges);
            s.expert_side_bytes += l.side_bytes * uint64_t(l.n_expert);
            sum += double(l.expert_bytes);
        }
        s.expert_bytes_avg = sum / double(s.moe_layers.size());
        const std::vector<GgufTensor>& ts = f.tensors();
        for (GgmlType t : {GgmlType::Q2_K, GgmlType::IQ3_XXS, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::MXFP4,
                           GgmlType::Q8_0}) {
            double total = 0;
            bool fits = true;
            for (const MoeLayer& l : s.moe_layers)
                for (size_t i : l.tensors) {
                    const GgufTensor& x = ts[i];
                    fits = fits && x.ne[0] % type_traits(t).block_size == 0;
                    if (fits) total += double(row_bytes(t, x.ne[0])) * double(x.n_elements() / x.ne[0]) / l.n_expert;
                }
            if (fits) s.expert_bytes_as.push_back({t, total / double(s.moe_layers.size())});
        }
    }

    // Per token: every resident weight, n_expert_used experts of each MoE
    // layer, and one row of each embedding-rows tensor.
    s.active_params = s.params_by_class[int(TensorClass::Resident)];
    for (const MoeLayer& l : s.moe_layers)
        s.active_params += uint64_t(std::min<int64_t>(h.n_expert_used, l.n_expert)) * l.expert_params;
    for (size_t i = 0; i < ts.size(); ++i)
        if (s.tensor_class[i] == TensorClass::EmbeddingRows) s.active_params += uint64_t(ts[i].ne[0]);

    for (auto& [type, u] : types) s.types.push_back(u);
    std::sort(s.types.begin(), s.types.end(), [](const TypeUse& a, const TypeUse& b) {
        return a.bytes != b.bytes ? a.bytes > b.bytes : a.type < b.type;
    });

    s.mem = memory_need(f, h, ctx);
    uint64_t resident = s.bytes_by_class[int(TensorClass::Resident)];
    s.mem.ram_streaming =
        resident + s.mem.kv_bytes + uint64_t(std::max<int64_t>(h.n_expert_used, 0)) * s.expert_bytes_max +
        s.mem.logits_bytes;
    s.mem.ram_all = resident + s.bytes_by_class[int(TensorClass::Expert)] +
                    s.bytes_by_class[int(TensorClass::EmbeddingRows)] + s.mem.kv_bytes + s.mem.logits_bytes;
    read_synth_info(f, s, &s.synth);
    return s;
}

}  // namespace ms
