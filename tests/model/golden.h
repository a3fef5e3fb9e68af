// Reading the golden reference files (../shared/golden/models) in tests:
// the json, the float32 logits, and the comparison measures the golden
// README defines.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../golden_dir.h"
#include "json/json.h"

namespace ms::golden {

inline std::string models_dir() { return dir() + "/models"; }

// The golden families the forward pass runs (file name prefixes; mixtral's
// architecture is `llama`; gemma4 includes gemma4-ple; deepseek2-lite and
// deepseek3 are both `deepseek2`).
inline std::vector<std::string> runnable_families() {
    return {"qwen3moe", "gemma4",    "mixtral",   "olmoe",          "qwen2moe",  "glm4moe",
            "gpt-oss",  "qwen35moe", "qwen3next", "deepseek2-lite", "deepseek3", "glm-dsa",
            "deepseek4", "llama4",   "minimax-m2"};
}

// Names like "qwen3moe-Q4_K_M" of every model of a family, sorted.
inline std::vector<std::string> family(const std::string& name) {
    std::vector<std::string> out;
    if (!available()) return out;  // no golden data: the program skips (golden_required.h)
    for (const auto& e : std::filesystem::directory_iterator(models_dir())) {
        const std::string f = e.path().filename().string();
        if (f.rfind(name + "-", 0) == 0 && e.path().extension() == ".gguf") out.push_back(e.path().stem().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

// Every model of every runnable family.
inline std::vector<std::string> runnable_models() {
    std::vector<std::string> out;
    for (const std::string& f : runnable_families()) {
        for (const std::string& m : family(f)) out.push_back(m);
    }
    return out;
}

// A golden model name as a test name: "qwen3moe-Q4_K_M" -> "qwen3moe_Q4_K_M".
inline std::string identifier(std::string name) {
    for (char& c : name) if (c == '-') c = '_';
    return name;
}

inline std::vector<float> read_f32(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    in.seekg(0, std::ios::end);
    const size_t n = size_t(in.tellg()) / 4;
    in.seekg(0);
    std::vector<float> v(n);
    in.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * 4));
    return v;
}

inline std::vector<int32_t> ints(const Json& a) {
    std::vector<int32_t> out;
    for (const Json& v : a.as_array()) out.push_back(int32_t(v.as_int()));
    return out;
}

struct Case {
    std::string name;  // "qwen3moe-Q4_K_M"
    std::string gguf;
    Json meta;
    std::vector<int32_t> prompt, greedy;
    int64_t n_vocab = 0;
    std::vector<float> logits;  // prompt x n_vocab
    std::vector<float> gen;     // greedy steps x n_vocab
};

// The files NAME.{gguf,json,logits.f32,gen.f32} in dir (the golden models
// by default; tests/data holds more in the same format).
inline Case load(const std::string& name, const std::string& dir = models_dir()) {
    Case c;
    c.name = name;
    const std::string base = dir + "/" + name;
    c.gguf = base + ".gguf";
    c.meta = Json::parse_file(base + ".json");
    c.prompt = ints(c.meta.at("prompt_tokens"));
    c.greedy = ints(c.meta.at("greedy_tokens"));
    c.n_vocab = c.meta.at("n_vocab").as_int();
    c.logits = read_f32(base + ".logits.f32");
    c.gen = read_f32(base + ".gen.f32");
    return c;
}

// The exact/ logits of a quantized model (its weights dequantized, float32
// activations throughout); empty for F32 files, which have none.
inline std::vector<float> exact_logits(const std::string& name) {
    const std::string path = models_dir() + "/exact/" + name + ".logits.f32";
    if (!std::filesystem::exists(path)) return {};
    return read_f32(path);
}

// ||a - ref|| / ||ref|| over n values.
inline double rel_l2(const float* a, const float* ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = double(a[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    return std::sqrt(num / den);
}

inline int argmax(const float* x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return int(best);
}

// Gap between the largest and second-largest value.
inline float top2_gap(const float* x, int64_t n) {
    float a = -INFINITY, b = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] > a) { b = a; a = x[i]; } else if (x[i] > b) { b = x[i]; }
    }
    return a - b;
}

// The README's bound on the prompt logits of a main (non-exact/) file. F16
// gets the quantized bound: the README holds qwen3moe-F16 to its exact/ file
// instead (the reference's F16 run is 0.007 from exact).
inline double tolerance(const std::string& type) { return type == "F32" ? 1e-3 : 2e-2; }

}  // namespace ms::golden
