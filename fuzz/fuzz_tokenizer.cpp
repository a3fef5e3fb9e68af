// libFuzzer harness for the tokenizer. The first byte picks what to do with
// the rest:
//   < 0xF0: encode it with one of the vocabularies (loaded once: the golden
//           qwen3, GPT-2, llama SentencePiece and gemma4 vocabularies when
//           present, plus two built in memory), then check that every id is in
//           range, that decode gives the input back byte for byte (when no
//           special tokens are added or parsed), and that
//           the stream decoder only ever emits valid UTF-8;
//   >= 0xF0: build a vocabulary from it (tokens one per line, merges from
//           neighbouring tokens, types and ids from its bytes): from_spec must
//           either throw std::runtime_error or give a tokenizer that encodes.
// Golden files are found through MOESTREAM_GOLDEN_DIR or beside the source tree.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

using namespace ms;

namespace {

void check(bool ok) {
    if (!ok) abort();
}

VocabSpec byte_level_spec() {
    VocabSpec v;
    v.model = "gpt2";
    v.pre = "llama-bpe";
    for (int b = 0; b < 256; b++) {
        std::string s;
        utf8_append(s, gpt2_byte_to_cp(uint8_t(b)));
        v.tokens.push_back(s);
    }
    v.token_types.assign(256, 1);
    for (const char* m : {"t h", "th e", "h e", "\xC4\xA0 t", "\xC4\xA0t he", "a n", "an d", "i n", "in g"}) {
        std::string s = m;
        size_t sp = s.find(' ');
        v.tokens.push_back(s.substr(0, sp) + s.substr(sp + 1));
        v.token_types.push_back(1);
        v.merges.push_back(s);
    }
    for (const char* t : {"<|begin|>", "<|end|>", "<|end"}) {
        v.tokens.push_back(t);
        v.token_types.push_back(3);
    }
    v.tokens.push_back("<tool>");
    v.token_types.push_back(4);
    v.bos = int64_t(v.tokens.size() - 4);
    v.add_bos = true;
    return v;
}

VocabSpec spm_spec() {
    VocabSpec v;
    v.model = "llama";
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.token_types = {2, 3, 3};
    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        v.tokens.push_back(hex);
        v.token_types.push_back(6);
    }
    const char* pieces[] = {"\xE2\x96\x81", "a", "b", "ab", ("\xE2\x96\x81" "a"), "ba", "aba", "\xC3\xA9", "x"};
    for (const char* p : pieces) {
        v.tokens.push_back(p);
        v.token_types.push_back(1);
    }
    v.token_types.back() = 5;  // "x" is unused: merges may pass through it but never emit it
    v.tokens.push_back("xx");
    v.token_types.push_back(1);
    v.scores.assign(v.tokens.size(), 0.0);
    for (size_t i = 0; i < v.scores.size(); i++) v.scores[i] = -double(i % 7);
    return v;
}

std::vector<Tokenizer> load() {
    std::vector<Tokenizer> t;
    t.push_back(Tokenizer::from_spec(byte_level_spec(), "byte-level"));
    t.push_back(Tokenizer::from_spec(spm_spec(), "spm"));
    const char* env = getenv("MOESTREAM_GOLDEN_DIR");
    std::filesystem::path golden =
        env ? std::filesystem::path(env)
            : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "shared" / "golden";
    for (const char* f : {"tokenizer/qwen3-vocab.gguf", "tokenizer/ggml-vocab-gpt-2.gguf",
                          "tokenizer/ggml-vocab-llama-spm.gguf", "models/gemma4-F32.gguf", "models/deepseek3-F32.gguf"}) {
        std::filesystem::path p = golden / f;
        if (std::filesystem::exists(p)) t.push_back(Tokenizer::from_gguf(GgufFile::open(p.string())));
    }
    return t;
}

void encode_decode(const Tokenizer& t, std::string_view text, uint8_t mode, bool complete) {
    const bool add_bos = mode & 1, parse_special = mode & 2;
    std::vector<int32_t> ids = t.encode(text, add_bos, parse_special);
    for (int32_t id : ids) check(id >= 0 && size_t(id) < t.n_vocab());
    std::string back = t.decode(ids);
    // Exact inverse when the vocabulary covers every byte and nothing special
    // is added or parsed; SentencePiece styles read "▁" back as a space.
    bool spm = t.model() != "gpt2";
    if (complete && !add_bos && !parse_special && !(spm && text.find("\xE2\x96\x81") != std::string_view::npos))
        check(back == text);
    StreamDecoder d(t, !(mode & 4));
    for (int32_t id : ids) check(utf8_valid(d.push(id)));
    check(utf8_valid(d.flush()));
    check(d.pending() == 0);
}

// A vocabulary from the fuzz input: tokens one per line; token types, ids
// and flags from the first bytes.
void build_vocab(std::string_view data) {
    if (data.size() < 4) return;
    VocabSpec v;
    static const char* models[] = {"gpt2", "llama", "gemma4", "bert"};
    static const char* pres[] = {"qwen2", "gpt-4o", "deepseek-llm", "llama-bpe", ""};
    v.model = models[uint8_t(data[0]) % 4];
    v.pre = pres[uint8_t(data[1]) % 5];
    uint8_t flags = uint8_t(data[2]), id_byte = uint8_t(data[3]);
    data.remove_prefix(4);
    for (size_t at = 0; at <= data.size();) {
        size_t nl = data.find('\n', at);
        if (nl == std::string_view::npos) nl = data.size();
        v.tokens.emplace_back(data.substr(at, nl - at));
        at = nl + 1;
    }
    for (size_t i = 0; i < v.tokens.size(); i++) {
        if (flags & 1) v.token_types.push_back(int64_t(uint8_t(v.tokens[i].empty() ? 1 : v.tokens[i][0]) % 8));
        if (flags & 2) v.scores.push_back(double(int(i % 13) - 6));
        // Merges of neighbours; some will not be in the vocabulary.
        if (i + 1 < v.tokens.size()) v.merges.push_back(v.tokens[i] + " " + v.tokens[i + 1]);
    }
    if (flags & 4) v.bos = int64_t(id_byte) - 8;
    if (flags & 8) v.eos = int64_t(id_byte);
    if (flags & 16) v.add_bos = true;
    if (flags & 32) v.add_eos = true;
    if (flags & 64) v.add_space_prefix = false;
    try {
        Tokenizer t = Tokenizer::from_spec(v, "fuzz");
        for (const std::string& s : v.tokens) encode_decode(t, s, 0, false);
        encode_decode(t, data, 3, false);
    } catch (const std::runtime_error&) {
        // rejected: fine
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::vector<Tokenizer> toks = load();
    if (size == 0) return 0;
    const uint8_t mode = data[0];
    std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
    if (mode >= 0xF0) build_vocab(rest);
    else encode_decode(toks[(mode >> 3) % toks.size()], rest, mode, true);
    return 0;
}
