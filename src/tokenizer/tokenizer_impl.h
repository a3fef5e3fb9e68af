// Internals of the tokenizer shared by its files: the vocabulary tables, the
// pre-tokenizer, the special-token matcher and the per-call scratch space of
// the encoders (byte-level/SentencePiece-style BPE and SentencePiece).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "json/json.h"  // utf8_append
#include "tokenizer/tokenizer.h"

namespace ms {

// Classifies the bytes at s (n > 0): > 0 is the length of a complete, valid
// UTF-8 character; 0 a valid but truncated prefix; < 0 minus the length of
// the maximal invalid subpart (Unicode's "maximal subpart" rule, >= 1 byte).
int utf8_check(const unsigned char* s, size_t n);
// True when s is entirely valid UTF-8.
bool utf8_valid(std::string_view s);

// Byte span [start, start + len) of some text.
struct Span {
    uint32_t start, len;
};

// string -> id over strings owned by the caller (open addressing; copies of
// the owning vector stay valid because only ids are stored).
class TextIndex {
public:
    // keep(i) false leaves token i out. On duplicate strings the later id wins.
    template <class Keep>
    void build(const std::vector<std::string>& keys, Keep keep);
    int32_t find(std::string_view s, const std::vector<std::string>& keys) const;

private:
    void insert(int32_t id, const std::vector<std::string>& keys);
    std::vector<int32_t> slots_;
    size_t mask_ = 0;
};

// (left id, right id) -> merge rank and the merged token's id.
class MergeTable {
public:
    struct Entry {
        uint64_t key;  // left << 32 | right; kEmpty marks a free slot
        int32_t rank;
        int32_t result;
    };
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    void reserve(size_t n);
    // The first merge of a pair wins (a later duplicate is ignored).
    void insert(int32_t left, int32_t right, int32_t rank, int32_t result);
    const Entry* find(int32_t left, int32_t right) const {
        if (slots_.empty()) return nullptr;
        uint64_t key = uint64_t(uint32_t(left)) << 32 | uint32_t(right);
        for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
            const Entry& e = slots_[i];
            if (e.key == key) return &e;
            if (e.key == kEmpty) return nullptr;
        }
    }
    size_t size() const { return count_; }

private:
    static size_t hash(uint64_t k) {
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdULL;
        k ^= k >> 33;
        return size_t(k);
    }
    std::vector<Entry> slots_;
    size_t mask_ = 0, count_ = 0;
};

// One compiled PCRE2 pattern (UTF + UCP, invalid UTF-8 never matches).
class Regex;

// A chain of regexes in the llama.cpp sense: each regex splits every piece
// left by the previous one into its matches and the gaps between them.
class PreTokenizer {
public:
    PreTokenizer() = default;
    explicit PreTokenizer(const std::vector<std::string>& patterns);  // throws on a bad pattern
    // Pre-tokens of text as spans (relative to text), in order, covering it.
    // tmp is scratch space.
    void split(std::string_view text, std::vector<Span>& out, std::vector<Span>& tmp, void* match_data) const;
    bool empty() const { return regexes_.empty(); }
    // Match data big enough for every pattern; free with free_match_data.
    static void* new_match_data();
    static void free_match_data(void* md);

private:
    std::vector<std::shared_ptr<const Regex>> regexes_;
};

// What a tokenizer.ggml.pre name selects.
struct PreTokenizerDef {
    const char* name;                   // canonical name
    std::vector<std::string> patterns;  // applied in order
    bool ignore_merges;                 // a pre-token that is a whole token is taken as is (llama3 family)
    bool add_bos;                       // default for tokenizer.ggml.add_bos_token
};
// nullptr for an unknown name.
const PreTokenizerDef* find_pre_tokenizer(std::string_view name);

enum class Algorithm {
    ByteBpe,  // "gpt2": GPT-2 byte<->char mapping, merges by rank
    SpmBpe,   // "gemma4": "▁" for spaces, merges by rank over raw UTF-8, <0xXX> fallback
    Spm,      // "llama": merges by score, <0xXX> fallback, space prefix
};

// Scratch space of one encode call, reused across its pre-tokens so the
// inner loops do not allocate.
struct EncodeScratch {
    struct Symbol {
        int32_t id;  // token id, or -1 for a piece that is not a token
        int32_t prev, next;
        uint32_t start, len;  // bytes in the word being merged
    };
    struct Fragment {
        int32_t id;  // special token, or -1 for raw text
        uint32_t start, len;
    };
    std::vector<Fragment> fragments;
    std::vector<Span> words, words_tmp;
    std::vector<Symbol> symbols;
    // Candidate merges as a min-heap on key. BPE: key = rank << 32 | left,
    // a/b = the two ids when queued, c = merged id. SPM: key orders by
    // score (highest first) then left, a = right, b = merged byte length.
    struct Bigram {
        uint64_t key;
        int32_t a, b, c;
    };
    std::vector<Bigram> heap;
    void push(const Bigram& g) {
        heap.push_back(g);
        std::push_heap(heap.begin(), heap.end(), later);
    }
    Bigram pop() {
        std::pop_heap(heap.begin(), heap.end(), later);
        Bigram g = heap.back();
        heap.pop_back();
        return g;
    }
    static bool later(const Bigram& a, const Bigram& b) { return a.key > b.key; }
    // Appends a symbol to the chain.
    void add_symbol(int32_t id, uint32_t start, uint32_t len) {
        int32_t i = int32_t(symbols.size());
        symbols.push_back({id, i - 1, -1, start, len});
        if (i > 0) symbols[size_t(i) - 1].next = i;
    }
    // Symbol `left` absorbs the one after it.
    void join_next(int32_t left) {
        Symbol& l = symbols[size_t(left)];
        Symbol& r = symbols[size_t(l.next)];
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (l.next >= 0) symbols[size_t(l.next)].prev = left;
    }
    std::string text;                          // escaped text (SentencePiece styles)
    std::unordered_map<std::string_view, uint32_t> unused_splits;  // SPM: unused piece -> left length
    void* match_data = nullptr;
    // Word -> tokens memo for byte-level BPE: most words of a long text repeat.
    std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> word_cache;
    std::vector<int32_t> cache_tokens;

    EncodeScratch();
    ~EncodeScratch();
    EncodeScratch(const EncodeScratch&) = delete;
    EncodeScratch& operator=(const EncodeScratch&) = delete;
};

struct Tokenizer::Impl {
    std::string source;  // file path or name, for messages
    std::string model, pre;
    Algorithm algorithm = Algorithm::ByteBpe;
    std::vector<std::string> texts;   // vocabulary strings
    std::vector<std::string> pieces;  // bytes each token stands for
    std::vector<TokenType> types;
    std::vector<float> scores;
    TextIndex index;        // vocabulary string -> id
    TextIndex word_index;   // ignore_merges: piece bytes of a normal token -> id
    MergeTable merges;
    std::array<int32_t, 256> byte_token{};  // ByteBpe: token of the byte's char; else <0xXX>
    PreTokenizer pre_tokenizer;
    bool ignore_merges = false;

    int32_t bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken, pad = kNoToken;
    bool add_bos = false, add_eos = false, add_space_prefix = false;
    std::vector<int32_t> eog;      // sorted
    std::vector<uint8_t> eog_flag;  // per token

    // Special tokens (control, unknown, user-defined) matched before
    // pre-tokenization, longest first; candidates bucketed by first two bytes.
    std::vector<int32_t> specials;  // priority order
    std::array<uint8_t, 256> special_first{};
    std::unordered_map<uint32_t, std::vector<int32_t>> special_buckets;  // (b0 << 8 | b1) or 0x10000 | b0 -> priorities

    bool valid(int32_t id) const { return id >= 0 && size_t(id) < texts.size(); }
};

// Splits text into special tokens and raw fragments (see tokenizer.cpp).
void partition_specials(const Tokenizer::Impl& m, std::string_view text, bool parse_special,
                        std::vector<EncodeScratch::Fragment>& out);
// Encoders of one raw fragment, appending ids to out.
void encode_byte_bpe(const Tokenizer::Impl& m, std::string_view text, EncodeScratch& s, std::vector<int32_t>& out);
void encode_spm_bpe(const Tokenizer::Impl& m, std::string_view text, EncodeScratch& s, std::vector<int32_t>& out);
void encode_spm(const Tokenizer::Impl& m, std::string_view text, bool space_prefix, EncodeScratch& s,
                std::vector<int32_t>& out);
// The GPT-2 mapping: byte -> printable code point, and back (-1: not a byte).
uint32_t gpt2_byte_to_cp(uint8_t b);
int gpt2_cp_to_byte(uint32_t cp);

template <class Keep>
void TextIndex::build(const std::vector<std::string>& keys, Keep keep) {
    size_t cap = 16;
    while (cap < keys.size() * 2) cap <<= 1;
    slots_.assign(cap, -1);
    mask_ = cap - 1;
    for (size_t i = 0; i < keys.size(); i++)
        if (keep(i)) insert(int32_t(i), keys);
}

}  // namespace ms
