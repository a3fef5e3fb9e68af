// The reference run for scripts/gemma4_dims (built against llama.cpp's
// llama.h by build.sh; llama.cpp itself stays outside this repository):
// evaluates a prompt as one batch (causal, empty cache, F32 KV cache,
// context 1024, 2 threads), then 8 greedy single-token steps, and writes
// them in the golden format (shared/golden/README.md): OUT.logits.f32
// (every prompt position), OUT.gen.f32 (the 8 steps) and OUT.json.
//
//   reference MODEL.gguf OUT TYPE "PROMPT"
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

namespace {

int argmax(const float* v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) {
        if (v[i] > v[best]) best = i;
    }
    return best;
}

void write_floats(const std::string& path, const std::vector<float>& v) {
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || fwrite(v.data(), 4, v.size(), f) != v.size() || fclose(f) != 0) {
        fprintf(stderr, "reference: %s: cannot write\n", path.c_str());
        exit(1);
    }
}

std::string json_string(const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        o += c;
    }
    return o + "\"";
}

std::string json_ints(const std::vector<llama_token>& v) {
    std::string o = "[";
    for (size_t i = 0; i < v.size(); i++) o += (i ? ", " : "") + std::to_string(v[i]);
    return o + "]";
}

void quiet(ggml_log_level level, const char* text, void*) {
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: reference MODEL.gguf OUT TYPE PROMPT [FLASH_ATTN: off (default, as the golden files) | on | auto]\n");
        return 2;
    }
    const std::string model_path = argv[1], out = argv[2], type = argv[3], prompt = argv[4];
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) {
        fprintf(stderr, "reference: %s: cannot load\n", model_path.c_str());
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = 1024;
    cp.n_ubatch = 1024;
    cp.n_seq_max = 1;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    const std::string fa = argc == 6 ? argv[5] : "off";  // the golden files: off
    cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "reference: cannot make a context\n");
        return 1;
    }
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    std::vector<llama_token> tokens(prompt.size() + 8);
    const int n = llama_tokenize(vocab, prompt.data(), int(prompt.size()), tokens.data(), int(tokens.size()),
                                 /*add_special=*/true, /*parse_special=*/true);
    if (n <= 0) {
        fprintf(stderr, "reference: cannot tokenize the prompt\n");
        return 1;
    }
    tokens.resize(size_t(n));

    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = tokens[size_t(i)];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    if (llama_decode(ctx, batch) != 0) {
        fprintf(stderr, "reference: prompt decode failed\n");
        return 1;
    }
    std::vector<float> logits(size_t(n) * size_t(n_vocab));
    for (int i = 0; i < n; i++) {
        const float* row = llama_get_logits_ith(ctx, i);
        std::copy(row, row + n_vocab, logits.begin() + ptrdiff_t(i) * n_vocab);
    }
    llama_batch_free(batch);

    std::vector<llama_token> greedy = {argmax(logits.data() + size_t(n - 1) * size_t(n_vocab), n_vocab)};
    std::vector<float> gen;
    for (int s = 0; s < 8; s++) {
        llama_batch one = llama_batch_init(1, 0, 1);
        one.token[0] = greedy[size_t(s)];
        one.pos[0] = n + s;
        one.n_seq_id[0] = 1;
        one.seq_id[0][0] = 0;
        one.logits[0] = 1;
        one.n_tokens = 1;
        if (llama_decode(ctx, one) != 0) {
            fprintf(stderr, "reference: step %d failed\n", s);
            return 1;
        }
        const float* row = llama_get_logits_ith(ctx, 0);
        gen.insert(gen.end(), row, row + n_vocab);
        if (s < 7) greedy.push_back(argmax(row, n_vocab));
        llama_batch_free(one);
    }
    write_floats(out + ".logits.f32", logits);
    write_floats(out + ".gen.f32", gen);

    char arch[64] = "";
    llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch);
    FILE* f = fopen((out + ".json").c_str(), "w");
    if (!f) {
        fprintf(stderr, "reference: %s.json: cannot write\n", out.c_str());
        return 1;
    }
    fprintf(f, "{\n \"arch\": %s,\n \"type\": %s,\n \"prompt\": %s,\n \"n_vocab\": %d,\n \"prompt_tokens\": %s,\n"
               " \"greedy_tokens\": %s\n}\n",
            json_string(arch).c_str(), json_string(type).c_str(), json_string(prompt).c_str(), n_vocab,
            json_ints(tokens).c_str(), json_ints(greedy).c_str());
    fclose(f);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
