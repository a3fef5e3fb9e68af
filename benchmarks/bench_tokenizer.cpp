// Tokenizer throughput on English text with the Qwen3 vocabulary (151,669
// tokens, qwen2 pre-tokenizer), one thread. The text is every license in
// /usr/share/common-licenses plus the golden tokenizer inputs (about 200 KB of
// real prose, no repetition). Reported as bytes/s of input:
//   Encode/whole      the corpus in one call
//   Encode/paragraphs one call per paragraph (chat-sized inputs)
//   Decode            ids back to text
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The golden folder: $MOESTREAM_GOLDEN_DIR, else ../shared/golden beside the
// source tree.
fs::path golden_dir() {
    if (const char* e = getenv("MOESTREAM_GOLDEN_DIR")) return e;
    return fs::path(__FILE__).parent_path().parent_path().parent_path() / "shared" / "golden";
}

const std::string& corpus() {
    static const std::string text = [] {
        std::string t;
        std::set<fs::path> seen;  // GPL -> GPL-3 and the like are links to the same file
        std::error_code ec;
        for (const auto& e : fs::directory_iterator("/usr/share/common-licenses", ec)) {
            fs::path real = fs::canonical(e.path(), ec);
            if (ec || !fs::is_regular_file(real) || !seen.insert(real).second) continue;
            t += slurp(real);
        }
        for (const char* name : {"qwen3-vocab.gguf.inp", "ggml-vocab-llama-spm.gguf.inp"})
            t += slurp(golden_dir() / "tokenizer" / name);
        return t;
    }();
    return text;
}

const ms::Tokenizer& qwen3() {
    static const ms::Tokenizer tok =
        ms::Tokenizer::from_gguf(ms::GgufFile::open((golden_dir() / "tokenizer" / "qwen3-vocab.gguf").string()));
    return tok;
}

void EncodeWhole(benchmark::State& state) {
    const std::string& text = corpus();
    const ms::Tokenizer& tok = qwen3();
    size_t n = 0;
    for (auto _ : state) {
        auto ids = tok.encode(text, false, true);
        n = ids.size();
        benchmark::DoNotOptimize(ids.data());
    }
    state.SetBytesProcessed(int64_t(state.iterations() * text.size()));
    state.counters["bytes"] = double(text.size());
    state.counters["tokens"] = double(n);
}

void EncodeParagraphs(benchmark::State& state) {
    const std::string& text = corpus();
    const ms::Tokenizer& tok = qwen3();
    std::vector<std::string_view> paragraphs;
    for (size_t at = 0; at < text.size();) {
        size_t end = text.find("\n\n", at);
        end = end == std::string::npos ? text.size() : end + 2;
        paragraphs.push_back(std::string_view(text).substr(at, end - at));
        at = end;
    }
    for (auto _ : state) {
        for (std::string_view p : paragraphs) {
            auto ids = tok.encode(p, false, true);
            benchmark::DoNotOptimize(ids.data());
        }
    }
    state.SetBytesProcessed(int64_t(state.iterations() * text.size()));
    state.counters["calls"] = double(paragraphs.size());
}

void Decode(benchmark::State& state) {
    const std::string& text = corpus();
    const ms::Tokenizer& tok = qwen3();
    std::vector<int32_t> ids = tok.encode(text, false, true);
    for (auto _ : state) {
        std::string s = tok.decode(ids);
        benchmark::DoNotOptimize(s.data());
    }
    state.SetBytesProcessed(int64_t(state.iterations() * text.size()));
}

}  // namespace

BENCHMARK(EncodeWhole)->Name("Encode/whole")->Unit(benchmark::kMillisecond);
BENCHMARK(EncodeParagraphs)->Name("Encode/paragraphs")->Unit(benchmark::kMillisecond);
BENCHMARK(Decode)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
