// Pre-tokenizers: the regexes each tokenizer.ggml.pre name stands for (as
// published in the models' tokenizer.json files) and their application
// through PCRE2 with UTF and Unicode properties.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdio>
#include <stdexcept>

#include "tokenizer/tokenizer_impl.h"

namespace ms {

class Regex {
public:
    explicit Regex(const std::string& pattern) {
        int err = 0;
        PCRE2_SIZE at = 0;
        // MATCH_INVALID_UTF: bytes that are not UTF-8 are never matched, so they
        // fall into gaps and reach BPE unchanged. DOLLAR_ENDONLY: `$` means the
        // end of the piece, as in the ECMAScript regexes of the reference.
        code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &err, &at,
                              nullptr);
        if (!code_) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            throw std::runtime_error("pre-tokenizer regex /" + pattern + "/ at " + std::to_string(at) + ": " +
                                     reinterpret_cast<const char*>(msg));
        }
        pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
    }
    ~Regex() { pcre2_code_free(code_); }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Appends matches and the gaps between them, covering [0, n) of s.
    void split(const char* s, uint32_t n, uint32_t base, std::vector<Span>& out, pcre2_match_data* md) const {
        auto subject = reinterpret_cast<PCRE2_SPTR>(s);
        uint32_t pos = 0;
        while (pos < n) {
            int rc = pcre2_match(code_, subject, n, pos, 0, md, nullptr);
            // No match, or a matcher limit hit on pathological input: the rest
            // stays one piece (BPE still encodes it losslessly).
            if (rc < 0) break;
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            uint32_t b = uint32_t(ov[0]), e = uint32_t(ov[1]);
            if (e == b) {  // an empty match: none of our patterns makes one, but never loop
                if (b >= n) break;
                pos = b + 1;
                continue;
            }
            if (b > pos) out.push_back({base + pos, b - pos});
            out.push_back({base + b, e - b});
            pos = e;
        }
        if (pos < n) out.push_back({base + pos, n - pos});
    }

private:
    pcre2_code* code_ = nullptr;
};

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) {
    for (const std::string& p : patterns) regexes_.push_back(std::make_shared<const Regex>(p));
}

void* PreTokenizer::new_match_data() { return pcre2_match_data_create(32, nullptr); }
void PreTokenizer::free_match_data(void* md) { pcre2_match_data_free(static_cast<pcre2_match_data*>(md)); }

void PreTokenizer::split(std::string_view text, std::vector<Span>& out, std::vector<Span>& tmp,
                         void* match_data) const {
    auto md = static_cast<pcre2_match_data*>(match_data);
    out.clear();
    if (text.empty()) return;
    out.push_back({0, uint32_t(text.size())});
    // Each regex sees one piece at a time, so look-aheads and `$` stop at
    // the piece's end, as in the reference implementation.
    for (const auto& re : regexes_) {
        tmp.clear();
        for (Span p : out) re->split(text.data() + p.start, p.len, p.start, tmp, md);
        out.swap(tmp);
    }
}

// ---- the pre-tokenizer table ------------------------------------------------

namespace {

// 's 't 're 've 'm 'll 'd, case-insensitive for ASCII only.
#define CONTRACTIONS R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"

const std::string kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const std::string kLlama3 = CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen2 = CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kQwen35 = CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// o200k (gpt-4o, gpt-oss, llama4): upper-case runs then lower-case runs.
const std::string kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)" CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)" CONTRACTIONS
    R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string kBailing =
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
const std::string kSeedCoder = CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek LLM's letters (from its tokenizer.json), as code point ranges;
// written as \x{...} so no editor or normalizer can change them.
const uint32_t kDeepseekLetters[][2] = {
    {'A', 'Z'}, {'a', 'z'}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA}, {0x1BC, 0x1BF},
    {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D}, {0x37F, 0x37F},
    {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481},
    {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D},
    {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102},
    {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3},
    {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF},
    {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F},
    {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF},
    {0x1E900, 0x1E943},
};

// "[a-b...]" with every bound as \x{...}.
template <size_t N>
std::string char_class(const uint32_t (&ranges)[N][2]) {
    std::string s = "[";
    char buf[40];
    for (const auto& r : ranges) {
        snprintf(buf, sizeof buf, r[0] == r[1] ? "\\x{%X}" : "\\x{%X}-\\x{%X}", r[0], r[1]);
        s += buf;
    }
    return s + "]";
}

// CJK ideographs (and everything from U+0800 up to them) and Hangul.
const uint32_t kCjkHangul[][2] = {{0x4E00, 0x9FA5}, {0x800, 0x4E00}, {0xAC00, 0xD7FF}};
// CJK ideographs, hiragana, katakana.
const uint32_t kCjkKana[][2] = {{0x4E00, 0x9FA5}, {0x3040, 0x309F}, {0x30A0, 0x30FF}};
// ASCII and full-width punctuation, quotation marks, ideographic space to full stop.
const uint32_t kDeepseekPunct[][2] = {{'!', '/'}, {':', '~'}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
                                      {0x2018, 0x201F}, {0x3000, 0x3002}};

std::vector<PreTokenizerDef> make_table() {
    std::vector<PreTokenizerDef> t;
    auto add = [&](std::initializer_list<const char*> names, std::vector<std::string> patterns,
                   bool ignore_merges = false, bool add_bos = false) {
        for (const char* n : names) t.push_back({n, patterns, ignore_merges, add_bos});
    };
    add({"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"});
    add({"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
         "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4", "jina-v1-en",
         "jina-v2-code", "roberta-bpe"},
        {kGpt2});
    add({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"}, {kLlama3},
        true, true);
    add({"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"}, {kLlama3});
    add({"qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "megrez", "grok-2", "solar-open", "kormo"}, {kQwen2});
    add({"qwen35"}, {kQwen35});
    add({"gpt-4o", "llama4", "minimax-m2", "kanana2"}, {kGpt4o});
    add({"tekken"}, {kTekken}, true, true);
    add({"deepseek-llm"},
        {R"([\r\n])", R"(\s?)" + char_class(kDeepseekLetters) + "+", R"(\s?)" + char_class(kDeepseekPunct) + "+",
         R"(\s+$)", char_class(kCjkHangul) + "+", R"(\p{N}+)"});
    add({"deepseek-coder"}, {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", char_class(kCjkHangul) + "+", R"(\p{N})"});
    add({"deepseek-v3", "hunyuan-dense", "joyai-llm"},
        {R"(\p{N}{1,3})", char_class(kCjkKana) + "+",
         R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"});
    add({"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"});
    add({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {R"(\p{N})", kGpt2});
    add({"bailingmoe", "bailingmoe2", "llada-moe"}, {kBailing});
    add({"seed-coder"}, {kSeedCoder});
    // Gemma 4: spaces are already U+2581; only runs of newlines are split off.
    add({"gemma4"}, {R"([^\n]+|[\n]+)"});
    return t;
}

}  // namespace

const PreTokenizerDef* find_pre_tokenizer(std::string_view name) {
    static const std::vector<PreTokenizerDef> table = make_table();
    for (const PreTokenizerDef& d : table)
        if (name == d.name) return &d;
    return nullptr;
}

}  // namespace ms
