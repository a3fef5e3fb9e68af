// moestream logits: the logits at every prompt position (and optionally a
// greedy continuation) written in the golden reference's format, so our
// output and the reference engine's compare directly.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/session_flags.h"
#include "json/json.h"
#include "ops/activation.h"
#include "telemetry/build_info.h"

namespace ms {

namespace {

void write_f32(const std::string& path, const float* data, size_t n) {
    std::ofstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot write");
    f.write(reinterpret_cast<const char*>(data), std::streamsize(n * sizeof(float)));
    if (!f) throw std::runtime_error(path + ": write failed");
}

std::vector<float> read_f32(const std::string& path, size_t n) {
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    if (!f) throw std::runtime_error(path + ": cannot read");
    if (size_t(f.tellg()) != n * sizeof(float)) {
        throw std::runtime_error(path + ": holds " + std::to_string(size_t(f.tellg()) / 4) + " floats, expected " +
                                 std::to_string(n) + " (the same prompt and vocabulary)");
    }
    std::vector<float> v(n);
    f.seekg(0);
    f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float)));
    return v;
}

}  // namespace

int cmd_logits(int argc, char** argv) {
    Args a("moestream logits -m MODEL -p PROMPT -o PREFIX [-n N] [--compare PREFIX2]",
           "Evaluates the prompt as one batch from an empty cache and writes PREFIX.logits.f32 (float32 "
           "little-endian, prompt tokens x n_vocab, row i = logits at position i) and PREFIX.json (arch, prompt, "
           "n_vocab, prompt_tokens). With -n N it also follows the greedy continuation for N steps: "
           "greedy_tokens in the json and PREFIX.gen.f32 (N x n_vocab, row s = logits after feeding "
           "greedy_tokens[s]). The format of the golden reference files; the KV cache defaults to f32 as the "
           "reference's was. --compare PREFIX2 prints how far these prompt logits are from PREFIX2.logits.f32 "
           "(another run over the same prompt, e.g. with another --experts-per-token): relative L2 and the "
           "share of positions whose most likely next token is the same.");
    SessionFlags flags;
    flags.kv_type = "f32";
    std::string prompt, prefix;
    int n_greedy = 0;
    std::string compare;
    a.option("-p,--prompt", &prompt, "TEXT", "the prompt (special tokens like <|im_start|> are parsed)");
    a.option("-o,--output", &prefix, "PREFIX", "output path prefix");
    a.option("-n,--n-greedy", &n_greedy, "N", "greedy steps to follow after the prompt");
    a.option("--compare", &compare, "PREFIX2", "print relative L2 and next-token agreement against PREFIX2.logits.f32");
    flags.declare(a, false);
    if (!a.parse(argc, argv)) return 0;
    if (prefix.empty()) throw std::runtime_error("no output prefix given (-o PREFIX)");
    if (n_greedy < 0) throw std::runtime_error("-n must be >= 0");

    auto s = flags.open();
    const std::vector<int32_t> tokens = s->tokenize(prompt);
    if (tokens.empty()) throw std::runtime_error("the prompt gives no tokens");
    const int64_t V = s->config().n_vocab;
    std::vector<float> logits(tokens.size() * size_t(V));
    s->prefill_all(tokens, logits.data());
    write_f32(prefix + ".logits.f32", logits.data(), logits.size());
    if (!compare.empty()) {
        const std::vector<float> other = read_f32(compare + ".logits.f32", logits.size());
        double num = 0, den = 0;
        size_t same = 0;
        for (size_t i = 0; i < logits.size(); i++) {
            num += double(logits[i] - other[i]) * double(logits[i] - other[i]);
            den += double(other[i]) * double(other[i]);
        }
        for (size_t t = 0; t < tokens.size(); t++) {
            same += argmax(logits.data() + t * size_t(V), V) == argmax(other.data() + t * size_t(V), V);
        }
        printf("vs %s: prompt logits relative L2 %.4e, same next token at %zu of %zu positions (%.1f %%)\n",
               compare.c_str(), den > 0 ? std::sqrt(num / den) : 0.0, same, tokens.size(),
               100.0 * double(same) / double(tokens.size()));
    }

    Json j = Json::object();
    j["arch"] = s->config().arch;
    j["build"] = build_info(flags.gpu != "off");
    j["prompt"] = prompt;
    j["n_vocab"] = V;
    Json pt = Json::array();
    for (int32_t t : tokens) pt.push_back(Json(int64_t(t)));
    j["prompt_tokens"] = pt;
    if (n_greedy > 0) {
        std::vector<float> gen(size_t(n_greedy) * size_t(V));
        Json gt = Json::array();
        int32_t next = argmax(s->logits(), V);
        for (int step = 0; step < n_greedy; step++) {
            gt.push_back(Json(int64_t(next)));
            s->decode(next);
            std::copy(s->logits(), s->logits() + V, gen.begin() + int64_t(step) * V);
            next = argmax(s->logits(), V);
        }
        j["greedy_tokens"] = gt;
        write_f32(prefix + ".gen.f32", gen.data(), gen.size());
    }
    std::ofstream f(prefix + ".json");
    if (!f) throw std::runtime_error(prefix + ".json: cannot write");
    f << j.dump(1) << "\n";
    if (!f) throw std::runtime_error(prefix + ".json: write failed");
    flags.finish("logits", *s);
    return 0;
}

}  // namespace ms
