#include "synth/synth_vocab.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <queue>
#include <span>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "gguf/gguf.h"
#include "json/json.h"
#include "tokenizer/tokenizer_impl.h"

namespace ms {

// models/demo-heldout.txt, compiled in by CMake (a generated synth_text.cpp).
extern const char kSynthText[];

namespace {

constexpr int32_t kNormal = int32_t(TokenType::Normal), kControl = int32_t(TokenType::Control),
                  kUserDefined = int32_t(TokenType::UserDefined), kUnknown = int32_t(TokenType::Unknown),
                  kByte = int32_t(TokenType::Byte);
const char* const kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// Our own ChatML template: an optional system turn (with the tool list when
// tools are given), the turns, tool results as <tool_response> in a user
// turn, tool calls as <tool_call> JSON, and with enable_thinking false an
// empty <think> block that asks for no reasoning.
const char* const kChatMlTemplate =
    R"tmpl({%- if tools %})tmpl" "\n"
    R"tmpl({{- '<|im_start|>system\n' }})tmpl" "\n"
    R"tmpl({%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %})tmpl" "\n"
    R"tmpl({{- 'You may call these tools. To call one, reply with <tool_call>{"name": NAME, "arguments": ARGUMENTS}</tool_call>, ARGUMENTS a JSON object.\n<tools>' }})tmpl" "\n"
    R"tmpl({%- for t in tools %}{{- '\n' + (t | tojson) }}{%- endfor %})tmpl" "\n"
    R"tmpl({{- '\n</tools><|im_end|>\n' }})tmpl" "\n"
    R"tmpl({%- elif messages[0].role == 'system' %})tmpl" "\n"
    R"tmpl({{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }})tmpl" "\n"
    R"tmpl({%- endif %})tmpl" "\n"
    R"tmpl({%- for m in messages %})tmpl" "\n"
    R"tmpl({%- if m.role == 'tool' %})tmpl" "\n"
    R"tmpl({{- '<|im_start|>user\n<tool_response>\n' + m.content + '\n</tool_response><|im_end|>\n' }})tmpl" "\n"
    R"tmpl({%- elif m.role != 'system' or not loop.first %})tmpl" "\n"
    R"tmpl({{- '<|im_start|>' + m.role + '\n' }})tmpl" "\n"
    R"tmpl({%- if m.content is string %}{{- m.content }}{%- endif %})tmpl" "\n"
    R"tmpl({%- if m.tool_calls %}{%- for c in m.tool_calls %})tmpl" "\n"
    R"tmpl({{- '\n<tool_call>\n{"name": ' + (c.function.name | tojson) + ', "arguments": ' }})tmpl" "\n"
    R"tmpl({%- if c.function.arguments is string %}{{- c.function.arguments }}{%- else %}{{- c.function.arguments | tojson }}{%- endif %})tmpl" "\n"
    R"tmpl({{- '}\n</tool_call>' }})tmpl" "\n"
    R"tmpl({%- endfor %}{%- endif %})tmpl" "\n"
    R"tmpl({{- '<|im_end|>\n' }})tmpl" "\n"
    R"tmpl({%- endif %})tmpl" "\n"
    R"tmpl({%- endfor %})tmpl" "\n"
    R"tmpl({%- if add_generation_prompt %})tmpl" "\n"
    R"tmpl({{- '<|im_start|>assistant\n' }})tmpl" "\n"
    R"tmpl({%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\n\n</think>\n\n' }}{%- endif %})tmpl" "\n"
    R"tmpl({%- endif %})tmpl";

// Our own [INST] template: system and user turns in [INST] ... [/INST],
// assistant turns closed by EOS.
const char* const kInstTemplate =
    "{{ bos_token }}{%- for m in messages %}\n"
    "{%- if m.role == 'assistant' %}{{ m.content }}{{ eos_token }}\n"
    "{%- else %}[INST] {{ m.content }} [/INST]{%- endif %}\n"
    "{%- endfor %}";

// Byte-pair merges learned from word counts: the most frequent adjacent
// pair of symbols becomes a new symbol, until `max_symbols` symbols exist or
// no pair occurs twice. Ties go to the pair of earlier symbols, so the
// result depends only on the words. A max-heap with lazy deletion finds the
// top pair; only the words holding it are rescanned.
struct BpeTrainer {
    std::vector<std::string> symbols;
    std::unordered_map<std::string, int32_t> symbol_ids;
    std::vector<std::pair<int32_t, int32_t>> merges;  // in the order learned

    int32_t symbol(const std::string& s) {
        auto [it, added] = symbol_ids.try_emplace(s, int32_t(symbols.size()));
        if (added) symbols.push_back(s);
        return it->second;
    }

    void train(std::vector<std::vector<int32_t>> words, const std::vector<int64_t>& counts, size_t max_symbols) {
        auto key = [](int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); };
        std::unordered_map<uint64_t, int64_t> pair_count;
        std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;  // may hold stale or repeated words
        auto account = [&](int32_t w, int64_t sign) {
            const std::vector<int32_t>& s = words[size_t(w)];
            for (size_t i = 0; i + 1 < s.size(); i++) {
                const uint64_t k = key(s[i], s[i + 1]);
                pair_count[k] += sign * counts[size_t(w)];
                if (sign > 0) pair_words[k].push_back(w);
            }
        };
        for (size_t w = 0; w < words.size(); w++) account(int32_t(w), +1);
        // Highest count first, then the smaller key.
        using Entry = std::pair<int64_t, uint64_t>;
        auto later = [](const Entry& a, const Entry& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; };
        std::priority_queue<Entry, std::vector<Entry>, decltype(later)> heap(later);
        for (const auto& [k, c] : pair_count) heap.push({c, k});
        std::vector<int32_t> seen(words.size(), -1);
        while (symbols.size() < max_symbols && !heap.empty()) {
            const auto [c, k] = heap.top();
            heap.pop();
            const int64_t now = pair_count[k];
            if (now != c) {  // stale: the pair's count changed since this entry
                if (now > 0) heap.push({now, k});
                continue;
            }
            if (c < 2) break;
            const int32_t a = int32_t(k >> 32), b = int32_t(uint32_t(k));
            const int32_t m = symbol(symbols[size_t(a)] + symbols[size_t(b)]);
            merges.push_back({a, b});
            const std::vector<int32_t> holders = std::move(pair_words[k]);
            pair_words.erase(k);
            for (int32_t w : holders) {
                if (seen[size_t(w)] == int32_t(merges.size())) continue;
                seen[size_t(w)] = int32_t(merges.size());
                std::vector<int32_t>& s = words[size_t(w)];
                bool has = false;
                for (size_t i = 0; i + 1 < s.size() && !has; i++) has = s[i] == a && s[i + 1] == b;
                if (!has) continue;
                account(w, -1);
                std::vector<int32_t> out;
                for (size_t i = 0; i < s.size(); i++) {
                    if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) out.push_back(m), i++;
                    else out.push_back(s[i]);
                }
                s = std::move(out);
                account(w, +1);
                for (size_t i = 0; i + 1 < s.size(); i++)
                    if (s[i] == m || s[i + 1] == m) heap.push({pair_count[key(s[i], s[i + 1])], key(s[i], s[i + 1])});
            }
        }
    }
};

// Distinct pieces of the text in order of first appearance, with counts.
struct WordCounts {
    std::vector<std::string> words;
    std::vector<int64_t> counts;
    std::unordered_map<std::string, size_t> index;
    void add(std::string w) {
        auto [it, added] = index.try_emplace(w, words.size());
        if (added) words.push_back(std::move(w)), counts.push_back(0);
        counts[it->second]++;
    }
};

// Tokens encoding never produces, made of learned words (a letters-only
// token after `space`): "<space>w1" + joint + w2, listed pairs never
// colliding because each w has no space inside. They decode to English-like
// text, so what a random model generates from them stays readable.
std::vector<std::string> padding_tokens(const std::vector<std::string>& learned, const std::string& space,
                                        const std::string& joint, size_t n) {
    std::vector<std::string> words;
    for (const std::string& t : learned) {
        if (t.size() <= space.size() + 1 || t.compare(0, space.size(), space) != 0) continue;
        if (std::all_of(t.begin() + long(space.size()), t.end(), [](char c) { return std::isalpha((unsigned char)c); }))
            words.push_back(t.substr(space.size()));
    }
    if (words.size() * words.size() < n) throw std::runtime_error("synth vocabulary: too few learned words to pad");
    std::vector<std::string> out;
    out.reserve(n);
    for (size_t i = 0; i < n; i++)
        out.push_back(space + words[i % words.size()] + joint + words[i / words.size()]);
    return out;
}

// Byte-level BPE: 256 byte tokens, learned merges, padding, specials.
SynthVocab byte_bpe(int64_t n_vocab) {
    struct Special {
        const char* text;
        int32_t type;
    };
    const Special specials[] = {{"<|endoftext|>", kControl},   {"<|im_start|>", kControl},    {"<|im_end|>", kControl},
                                {"<tool_call>", kUserDefined},  {"</tool_call>", kUserDefined}, {"<tool_response>", kUserDefined},
                                {"</tool_response>", kUserDefined}, {"<think>", kUserDefined}, {"</think>", kUserDefined}};
    // A demo-sized vocabulary (tiny's 499) keeps only the three ChatML
    // controls: a random model would otherwise print a marker every few
    // dozen tokens. Its template's tool markers are then plain text.
    const int64_t n_special = n_vocab < 1000 ? 3 : int64_t(std::size(specials));
    if (n_vocab < 256 + n_special) throw std::runtime_error("synth vocabulary: gpt2 needs at least 265 tokens");

    std::string byte_text[256];
    for (int b = 0; b < 256; b++) utf8_append(byte_text[b], gpt2_byte_to_cp(uint8_t(b)));
    const PreTokenizerDef* def = find_pre_tokenizer("qwen2");
    const PreTokenizer pre(def->patterns);
    const std::string_view text(kSynthText);
    std::vector<Span> spans, tmp;
    void* md = PreTokenizer::new_match_data();
    pre.split(text, spans, tmp, md);
    PreTokenizer::free_match_data(md);
    WordCounts wc;
    for (const Span& s : spans) wc.add(std::string(text.substr(s.start, s.len)));

    BpeTrainer bpe;
    for (int b = 0; b < 256; b++) bpe.symbol(byte_text[b]);
    std::vector<std::vector<int32_t>> words;
    for (const std::string& w : wc.words) {
        words.emplace_back();
        for (unsigned char c : w) words.back().push_back(int32_t(c));
    }
    bpe.train(std::move(words), wc.counts, size_t(n_vocab - n_special));

    SynthVocab v;
    v.model = "gpt2";
    v.pre = def->name;
    v.tokens = bpe.symbols;
    v.token_types.assign(v.tokens.size(), kNormal);
    for (const auto& [a, b] : bpe.merges) v.merges.push_back(bpe.symbols[size_t(a)] + " " + bpe.symbols[size_t(b)]);
    const std::string space = byte_text[uint8_t(' ')];
    for (std::string& t : padding_tokens(bpe.symbols, space, space, size_t(n_vocab - n_special) - v.tokens.size()))
        v.tokens.push_back(std::move(t)), v.token_types.push_back(kNormal);
    for (const Special& s : std::span(specials, size_t(n_special))) {
        if (std::string_view(s.text) == "<|endoftext|>") v.pad = int32_t(v.tokens.size());
        if (std::string_view(s.text) == "<|im_end|>") v.eos = int32_t(v.tokens.size());
        v.tokens.push_back(s.text);
        v.token_types.push_back(s.type);
    }
    v.chat_template = kChatMlTemplate;
    return v;
}

// SentencePiece: <unk> <s> </s>, 256 byte-fallback tokens, the text's
// characters, merged pieces scored by merge order, padding. Words are the
// text's space-separated runs with U+2581 in front, as SentencePiece sees
// them; padding holds a plain space, which SentencePiece's input never has.
SynthVocab sentencepiece(int64_t n_vocab) {
    if (n_vocab < 512) throw std::runtime_error("synth vocabulary: llama needs at least 512 tokens");
    WordCounts wc;
    const std::string_view text(kSynthText);
    for (size_t i = 0; i < text.size();) {
        while (i < text.size() && (unsigned char)text[i] <= ' ') i++;
        size_t j = i;
        while (j < text.size() && (unsigned char)text[j] > ' ') j++;
        if (j > i) wc.add(kSpace + std::string(text.substr(i, j - i)));
        i = j;
    }
    BpeTrainer bpe;
    std::vector<std::vector<int32_t>> words;
    for (const std::string& w : wc.words) {
        words.emplace_back();
        for (size_t i = 0; i < w.size();) {
            const int n = std::max(1, utf8_check(reinterpret_cast<const unsigned char*>(w.data() + i), w.size() - i));
            words.back().push_back(bpe.symbol(w.substr(i, size_t(n))));
            i += size_t(n);
        }
    }
    const size_t n_chars = bpe.symbols.size();
    bpe.train(std::move(words), wc.counts, size_t(n_vocab - 3 - 256));

    SynthVocab v;
    v.model = "llama";
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.token_types = {kUnknown, kControl, kControl};
    v.scores = {0, 0, 0};
    v.unk = 0, v.bos = 1, v.eos = 2;
    v.add_bos = true;
    char hex[8];
    for (int b = 0; b < 256; b++) {
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        v.tokens.push_back(hex), v.token_types.push_back(kByte), v.scores.push_back(0);
    }
    // Merged pieces first, best score first; single characters after them.
    for (size_t i = n_chars; i < bpe.symbols.size(); i++)
        v.tokens.push_back(bpe.symbols[i]), v.token_types.push_back(kNormal), v.scores.push_back(-float(i - n_chars));
    for (size_t i = 0; i < n_chars; i++)
        v.tokens.push_back(bpe.symbols[i]), v.token_types.push_back(kNormal), v.scores.push_back(-float(bpe.symbols.size() + i));
    const float last = v.scores.back();
    for (std::string& t : padding_tokens(bpe.symbols, kSpace, " ", size_t(n_vocab) - v.tokens.size()))
        v.tokens.push_back(std::move(t)), v.token_types.push_back(kNormal), v.scores.push_back(last - 1);
    v.chat_template = kInstTemplate;
    return v;
}

}  // namespace

SynthVocab make_synth_vocab(const std::string& tokenizer, int64_t n_vocab) {
    if (n_vocab > (int64_t(1) << 20)) throw std::runtime_error("synth vocabulary: more than 2^20 tokens");
    if (tokenizer == "gpt2") return byte_bpe(n_vocab);
    if (tokenizer == "llama") return sentencepiece(n_vocab);
    throw std::runtime_error("synth vocabulary: unknown tokenizer '" + tokenizer + "' (gpt2 or llama)");
}

void write_synth_vocab(GgufWriter& w, const SynthVocab& v) {
    w.set_string("tokenizer.ggml.model", v.model);
    if (!v.pre.empty()) w.set_string("tokenizer.ggml.pre", v.pre);
    w.set_strings("tokenizer.ggml.tokens", v.tokens);
    w.set_i32s("tokenizer.ggml.token_type", v.token_types);
    if (!v.scores.empty()) w.set_f32s("tokenizer.ggml.scores", v.scores);
    if (!v.merges.empty()) w.set_strings("tokenizer.ggml.merges", v.merges);
    if (v.bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(v.bos));
    if (v.eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(v.eos));
    if (v.unk >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", uint32_t(v.unk));
    if (v.pad >= 0) w.set_u32("tokenizer.ggml.padding_token_id", uint32_t(v.pad));
    w.set_bool("tokenizer.ggml.add_bos_token", v.add_bos);
    w.set_string("tokenizer.chat_template", v.chat_template);
}

}  // namespace ms
