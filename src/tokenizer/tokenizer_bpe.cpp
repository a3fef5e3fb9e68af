// BPE by merge rank over token ids: byte-level ("gpt2", each byte first
// becomes the token of its GPT-2 printable character) and SentencePiece-style
// ("gemma4", each UTF-8 character becomes its token, "▁" for spaces). The
// lowest-ranked adjacent pair is merged first (leftmost on ties), through a
// heap of candidate pairs, so a word of n bytes costs O(n log n).
#include <algorithm>
#include <iterator>

#include "tokenizer/tokenizer_impl.h"

namespace ms {

// ---- GPT-2 byte <-> printable character --------------------------------------

// Printable bytes map to themselves; the other 68 take 256, 257, ... in order.
static bool gpt2_printable(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174); }

namespace {
struct Gpt2Map {
    uint32_t to_cp[256];
    int16_t to_byte[512];  // code points used are < 324
    Gpt2Map() {
        std::fill(std::begin(to_byte), std::end(to_byte), int16_t(-1));
        uint32_t n = 0;
        for (int b = 0; b < 256; b++) {
            to_cp[b] = gpt2_printable(b) ? uint32_t(b) : 256 + n++;
            to_byte[to_cp[b]] = int16_t(b);
        }
    }
};
const Gpt2Map& gpt2_map() {
    static const Gpt2Map map;
    return map;
}
}  // namespace

uint32_t gpt2_byte_to_cp(uint8_t b) { return gpt2_map().to_cp[b]; }
int gpt2_cp_to_byte(uint32_t cp) { return cp < 512 ? gpt2_map().to_byte[cp] : -1; }

// ---- merge table --------------------------------------------------------------

void MergeTable::reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Entry{kEmpty, 0, 0});
    mask_ = cap - 1;
    count_ = 0;
}

void MergeTable::insert(int32_t left, int32_t right, int32_t rank, int32_t result) {
    if (count_ * 2 >= slots_.size()) {  // keep the load factor under 1/2
        std::vector<Entry> old;
        old.swap(slots_);
        reserve(std::max<size_t>(old.size(), 8));
        for (const Entry& e : old)
            if (e.key != kEmpty) insert(int32_t(e.key >> 32), int32_t(uint32_t(e.key)), e.rank, e.result);
    }
    uint64_t key = uint64_t(uint32_t(left)) << 32 | uint32_t(right);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
        Entry& e = slots_[i];
        if (e.key == key) return;
        if (e.key == kEmpty) {
            e = Entry{key, rank, result};
            count_++;
            return;
        }
    }
}

// ---- the merge loop -------------------------------------------------------------

namespace {

using Symbol = EncodeScratch::Symbol;
using Bigram = EncodeScratch::Bigram;

void push_pair(const Tokenizer::Impl& m, EncodeScratch& s, int32_t left) {
    if (left < 0) return;
    int32_t right = s.symbols[left].next;
    if (right < 0) return;
    int32_t a = s.symbols[left].id, b = s.symbols[right].id;
    if (a < 0 || b < 0) return;
    const MergeTable::Entry* e = m.merges.find(a, b);
    if (!e) return;
    s.push({uint64_t(uint32_t(e->rank)) << 32 | uint32_t(left), a, b, e->result});
}

// Merges s.symbols (a chain 0 -> next -> ... -> -1) until no ranked pair is left.
void merge_symbols(const Tokenizer::Impl& m, EncodeScratch& s) {
    s.heap.clear();
    for (int32_t i = 0; i + 1 < int32_t(s.symbols.size()); i++) push_pair(m, s, i);
    while (!s.heap.empty()) {
        Bigram g = s.pop();
        int32_t left = int32_t(uint32_t(g.key));
        Symbol& l = s.symbols[left];
        // A pair queued before one of its sides changed is stale: ids only
        // change by growing, so equal ids mean an unchanged pair.
        if (l.len == 0 || l.next < 0 || l.id != g.a || s.symbols[l.next].id != g.b) continue;
        l.id = g.c;
        s.join_next(left);
        push_pair(m, s, l.prev);
        push_pair(m, s, left);
    }
}

// Byte-level BPE of one pre-token.
void byte_bpe_word(const Tokenizer::Impl& m, std::string_view word, EncodeScratch& s, std::vector<int32_t>& out) {
    if (word.size() == 1) {  // most punctuation and spaces: no merge possible
        int32_t id = m.byte_token[uint8_t(word[0])];
        if (id >= 0) out.push_back(id);
        else if (m.unk >= 0) out.push_back(m.unk);
        return;
    }
    if (m.ignore_merges) {
        int32_t id = m.word_index.find(word, m.pieces);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }
    s.symbols.clear();
    for (uint32_t i = 0; i < word.size(); i++) s.add_symbol(m.byte_token[uint8_t(word[i])], i, 1);
    merge_symbols(m, s);
    for (int32_t i = 0; i >= 0; i = s.symbols[i].next) {
        int32_t id = s.symbols[i].id;
        // Only a byte whose character is missing from the vocabulary has no id.
        if (id >= 0) out.push_back(id);
        else if (m.unk >= 0) out.push_back(m.unk);
    }
}

}  // namespace

void encode_byte_bpe(const Tokenizer::Impl& m, std::string_view text, EncodeScratch& s, std::vector<int32_t>& out) {
    m.pre_tokenizer.split(text, s.words, s.words_tmp, s.match_data);
    // Long texts repeat words: remember each word's tokens for this call.
    const bool memo = text.size() >= 4096;
    for (Span w : s.words) {
        std::string_view word = text.substr(w.start, w.len);
        if (!memo || word.size() == 1) {
            byte_bpe_word(m, word, s, out);
            continue;
        }
        auto [it, fresh] = s.word_cache.try_emplace(word, 0, 0);
        if (!fresh) {
            out.insert(out.end(), s.cache_tokens.begin() + it->second.first,
                       s.cache_tokens.begin() + it->second.first + it->second.second);
            continue;
        }
        size_t before = out.size();
        byte_bpe_word(m, word, s, out);
        it->second = {uint32_t(s.cache_tokens.size()), uint32_t(out.size() - before)};
        s.cache_tokens.insert(s.cache_tokens.end(), out.begin() + before, out.end());
    }
}

void encode_spm_bpe(const Tokenizer::Impl& m, std::string_view raw, EncodeScratch& s, std::vector<int32_t>& out) {
    // Spaces become "▁" before anything else; newlines are split off below.
    s.text.clear();
    for (char c : raw) {
        if (c == ' ') s.text += "\xE2\x96\x81";
        else s.text += c;
    }
    std::string_view text = s.text;
    m.pre_tokenizer.split(text, s.words, s.words_tmp, s.match_data);
    for (Span w : s.words) {
        std::string_view word = text.substr(w.start, w.len);
        // A run of newlines that is itself a token stays whole (Gemma 4 has
        // "\n", "\n\n", ... tokens that merges would not rebuild).
        if (word.find_first_not_of('\n') == std::string_view::npos) {
            int32_t id = m.index.find(word, m.texts);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
        }
        s.symbols.clear();
        auto p = reinterpret_cast<const unsigned char*>(word.data());
        for (uint32_t i = 0; i < word.size();) {
            int n = utf8_check(p + i, word.size() - i);
            uint32_t len = n > 0 ? uint32_t(n) : 1;  // an invalid byte is a symbol of its own
            s.add_symbol(m.index.find(word.substr(i, len), m.texts), i, len);
            i += len;
        }
        merge_symbols(m, s);
        for (int32_t i = 0; i >= 0; i = s.symbols[i].next) {
            const Symbol& y = s.symbols[i];
            if (y.id >= 0) {
                out.push_back(y.id);
                continue;
            }
            for (uint32_t k = 0; k < y.len; k++) {  // byte fallback
                int32_t id = m.byte_token[uint8_t(word[y.start + k])];
                if (id >= 0) out.push_back(id);
                else if (m.unk >= 0) out.push_back(m.unk);
            }
        }
    }
}

}  // namespace ms
