// Writes the small random gemma4 GGUF (F32) of tests/model/gemma4_dims_model.h
// with chosen dimensions, for running llama.cpp on shapes the golden files do
// not have (tests/data/gemma4-dims/README.md). The tokenizer keys come from a
// vocabulary GGUF (shared/golden/models/gemma4-F32.gguf).
//
//   make_model --vocab V.gguf --out M.gguf [--embd 32] [--heads 2]
//       [--head-swa 16] [--head-full 32] [--kv 2,2,1,2,2,1] [--swa 1,1,0,1,1,0]
//       [--experts 12] [--used 4] [--ff 32] [--ff-exp 32] [--window 6] [--seed 7]
//       [--v-full 0]   (1: full layers get attn_v too)
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "gemma4_dims_model.h"

namespace {

std::vector<int> ints(const std::string& s) {
    std::vector<int> v;
    size_t p = 0;
    while (p < s.size()) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        v.push_back(std::stoi(s.substr(p, q - p)));
        p = q + 1;
    }
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    std::string vocab, out;
    ms::gemma4_dims::Dims d;
    try {
        for (int i = 1; i < argc; i += 2) {
            const std::string k = argv[i];
            if (i + 1 >= argc) throw std::runtime_error("flag " + k + " needs a value");
            const std::string v = argv[i + 1];
            if (k == "--vocab") vocab = v;
            else if (k == "--out") out = v;
            else if (k == "--embd") d.embd = std::stoi(v);
            else if (k == "--heads") d.heads = std::stoi(v);
            else if (k == "--head-swa") d.head_swa = std::stoi(v);
            else if (k == "--head-full") d.head_full = std::stoi(v);
            else if (k == "--kv") d.kv = ints(v);
            else if (k == "--swa") d.swa = ints(v);
            else if (k == "--experts") d.experts = std::stoi(v);
            else if (k == "--used") d.used = std::stoi(v);
            else if (k == "--ff") d.ff = std::stoi(v);
            else if (k == "--ff-exp") d.ff_exp = std::stoi(v);
            else if (k == "--window") d.window = std::stoi(v);
            else if (k == "--seed") d.seed = std::stoull(v);
            else if (k == "--v-full") d.v_full = std::stoi(v) != 0;
            else throw std::runtime_error("unknown flag " + k);
        }
        if (vocab.empty() || out.empty()) throw std::runtime_error("need --vocab and --out");
        ms::gemma4_dims::write_model(vocab, out, d);
    } catch (const std::exception& e) {
        fprintf(stderr, "make_model: %s\n", e.what());
        return 1;
    }
    return 0;
}
