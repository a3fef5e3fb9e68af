// A small random gemma4 model (F32) with chosen dimensions, written with
// moestream's GGUF writer: tests/model/gemma4_dims_test.cpp writes it to check
// moestream against llama.cpp's logits (tests/data/gemma4-dims/README.md) and
// scripts/gemma4_dims/make_model writes it for the reference run.
// Deterministic: the same dimensions and seed give the same bytes.
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace ms::gemma4_dims {

struct Dims {
    int embd = 32, heads = 2, head_swa = 16, head_full = 32, experts = 12, used = 4, ff = 32, ff_exp = 32,
        window = 6;
    bool v_full = false;  // full layers get attn_v too (else V is the K projection)
    uint64_t seed = 7;
    std::vector<int> kv = {2, 2, 1, 2, 2, 1};   // KV heads per layer
    std::vector<int> swa = {1, 1, 0, 1, 1, 0};  // 1: sliding-window layer
};

// splitmix64, and normals by Box-Muller: fixed here so the bytes never
// depend on the standard library's distributions.
struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
    double normal() {
        const double u = uniform() + 1e-300, v = uniform();
        return std::sqrt(-2 * std::log(u)) * std::cos(2 * M_PI * v);
    }
};

// Writes the model to `out`, its tokenizer copied from the GGUF `vocab`.
// Throws std::runtime_error on bad dimensions or I/O errors.
inline void write_model(const std::string& vocab, const std::string& out, const Dims& d) {
    struct Tensor {
        std::string name;
        std::vector<int64_t> ne;
        std::vector<float> data;
    };
    const int embd = d.embd, heads = d.heads, head_swa = d.head_swa, head_full = d.head_full,
              experts = d.experts, used = d.used, ff = d.ff, ff_exp = d.ff_exp, window = d.window;
    const bool v_full = d.v_full;
    const std::vector<int>& kv = d.kv;
    const std::vector<int>& swa = d.swa;
    if (kv.size() != swa.size() || kv.empty()) throw std::runtime_error("gemma4_dims: kv and swa need one value per layer");
    for (int k : kv) {
        if (k < 1 || heads % k != 0) throw std::runtime_error("gemma4_dims: KV heads must divide the heads");
    }
    const int L = int(kv.size());
    const GgufFile voc = GgufFile::open(vocab);
    const int64_t V = int64_t(voc.get_strings("tokenizer.ggml.tokens").size());
    Rng rng{d.seed};
    std::vector<Tensor> ts;
    auto random = [&](const std::string& name, std::vector<int64_t> ne, double scale) {
        Tensor t{name, ne, {}};
        int64_t n = 1;
        for (int64_t e : ne) n *= e;
        t.data.resize(size_t(n));
        for (float& x : t.data) x = float(rng.normal() * scale);
        ts.push_back(std::move(t));
    };
    // Norm weights near 1 (plus noise, so a weight applied to the wrong
    // element shows).
    auto norm = [&](const std::string& name, int64_t n) {
        Tensor t{name, {n}, std::vector<float>(size_t(n))};
        for (float& x : t.data) x = float(1 + 0.2 * rng.normal());
        ts.push_back(std::move(t));
    };
    auto values = [&](const std::string& name, std::vector<float> v) {
        ts.push_back(Tensor{name, {int64_t(v.size())}, std::move(v)});
    };
    const double in = 1 / std::sqrt(double(embd));
    random("token_embd.weight", {embd, V}, 1.0);
    std::vector<float> freqs(size_t(head_full / 2), 1e30f);
    for (int i = 0; i < head_full / 8; i++) freqs[size_t(i)] = 1.0f;
    values("rope_freqs.weight", freqs);
    for (int l = 0; l < L; l++) {
        const std::string b = "blk." + std::to_string(l) + ".";
        const bool full = swa[size_t(l)] == 0;
        const int64_t hd = full ? head_full : head_swa, Q = heads * hd, KV = kv[size_t(l)] * hd;
        norm(b + "attn_norm.weight", embd);
        random(b + "attn_q.weight", {embd, Q}, in);
        random(b + "attn_k.weight", {embd, KV}, in);
        if (!full || v_full) random(b + "attn_v.weight", {embd, KV}, in);
        norm(b + "attn_q_norm.weight", hd);
        norm(b + "attn_k_norm.weight", hd);
        random(b + "attn_output.weight", {Q, embd}, 1 / std::sqrt(double(Q)));
        norm(b + "post_attention_norm.weight", embd);
        norm(b + "ffn_norm.weight", embd);
        random(b + "ffn_gate.weight", {embd, ff}, in);
        random(b + "ffn_up.weight", {embd, ff}, in);
        random(b + "ffn_down.weight", {ff, embd}, 1 / std::sqrt(double(ff)));
        norm(b + "post_ffw_norm.weight", embd);
        random(b + "ffn_gate_inp.weight", {embd, experts}, 1.0);
        values(b + "ffn_gate_inp.scale", std::vector<float>(size_t(embd), float(std::sqrt(double(embd)))));
        random(b + "ffn_gate_up_exps.weight", {embd, 2 * ff_exp, experts}, in);
        random(b + "ffn_down_exps.weight", {ff_exp, embd, experts}, 1 / std::sqrt(double(ff_exp)));
        {
            std::vector<float> s(static_cast<size_t>(experts));
            for (float& x : s) x = float(0.5 + rng.uniform());
            values(b + "ffn_down_exps.scale", s);
        }
        norm(b + "pre_ffw_norm_2.weight", embd);
        norm(b + "post_ffw_norm_1.weight", embd);
        norm(b + "post_ffw_norm_2.weight", embd);
        values(b + "layer_output_scale.weight", {float(0.6 + 0.4 * rng.uniform())});
    }
    norm("output_norm.weight", embd);

    GgufWriter w(out);
    const std::string a = "gemma4.";
    w.set_string("general.architecture", "gemma4");
    w.set_string("general.name", "gemma4-dims");
    w.set_u32("general.file_type", 0);
    w.set_u32(a + "block_count", uint32_t(L));
    w.set_u32(a + "context_length", 4096);
    w.set_u32(a + "embedding_length", uint32_t(embd));
    w.set_u32(a + "feed_forward_length", uint32_t(ff));
    w.set_u32(a + "attention.head_count", uint32_t(heads));
    w.set_i32s(a + "attention.head_count_kv", std::vector<int32_t>(kv.begin(), kv.end()));
    GgufValue pattern;
    pattern.type = GgufType::ARRAY;
    pattern.elem = GgufType::BOOL;
    for (int s : swa) pattern.ai.push_back(s != 0);
    w.set_value(a + "attention.sliding_window_pattern", pattern);
    w.set_u32(a + "attention.sliding_window", uint32_t(window));
    w.set_u32(a + "attention.key_length", uint32_t(head_full));
    w.set_u32(a + "attention.value_length", uint32_t(head_full));
    w.set_u32(a + "attention.key_length_swa", uint32_t(head_swa));
    w.set_u32(a + "attention.value_length_swa", uint32_t(head_swa));
    w.set_u32(a + "rope.dimension_count", uint32_t(head_full));
    w.set_u32(a + "rope.dimension_count_swa", uint32_t(head_swa));
    w.set_f32(a + "rope.freq_base", 1e6f);
    w.set_f32(a + "rope.freq_base_swa", 1e4f);
    w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
    w.set_f32(a + "final_logit_softcapping", 30.0f);
    w.set_u32(a + "embedding_length_per_layer_input", 0);
    w.set_u32(a + "expert_count", uint32_t(experts));
    w.set_u32(a + "expert_used_count", uint32_t(used));
    w.set_u32(a + "expert_feed_forward_length", uint32_t(ff_exp));
    for (const auto& [key, value] : voc.metadata()) {
        if (key.rfind("tokenizer.", 0) == 0) w.set_value(key, value);
    }
    for (const Tensor& t : ts) w.add_tensor(t.name, GgmlType::F32, t.ne);
    w.begin_data();
    for (const Tensor& t : ts) w.write_tensor_data(t.data.data(), t.data.size() * 4);
    w.finish();
}

}  // namespace ms::gemma4_dims
