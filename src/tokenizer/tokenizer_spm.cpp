// SentencePiece BPE ("llama" vocabularies): spaces become "▁" (with one
// prefixed when add_space_prefix says so), the text starts as one symbol per
// UTF-8 character, and the adjacent pair whose concatenation is the
// highest-scoring piece is merged first (leftmost on ties). Characters
// without a piece fall back to <0xXX> byte tokens. As in SentencePiece,
// merges may pass through unused pieces, which are split back at the end.
#include <algorithm>
#include <bit>
#include <cstring>

#include "tokenizer/tokenizer_impl.h"

namespace ms {

namespace {

using Symbol = EncodeScratch::Symbol;
using Bigram = EncodeScratch::Bigram;

// Orders floats as unsigned integers; inverted so the highest score sorts first.
uint64_t score_key(float score, int32_t left) {
    uint32_t u = std::bit_cast<uint32_t>(score);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return uint64_t(~u) << 32 | uint32_t(left);
}

bool mergeable(TokenType t) {
    return t == TokenType::Normal || t == TokenType::UserDefined || t == TokenType::Unused ||
           t == TokenType::Undefined;
}

void push_pair(const Tokenizer::Impl& m, EncodeScratch& s, int32_t left) {
    if (left < 0) return;
    int32_t right = s.symbols[left].next;
    if (right < 0) return;
    const Symbol& l = s.symbols[left];
    const Symbol& r = s.symbols[right];
    std::string_view joined(s.text.data() + l.start, l.len + r.len);
    int32_t id = m.index.find(joined, m.texts);
    if (id < 0 || !mergeable(m.types[id])) return;
    s.push({score_key(m.scores[id], left), right, int32_t(joined.size()), id});
}

void emit_bytes(const Tokenizer::Impl& m, std::string_view bytes, std::vector<int32_t>& out) {
    for (char c : bytes) {
        int32_t id = m.byte_token[uint8_t(c)];
        if (id < 0) id = m.index.find(std::string_view(&c, 1), m.texts);
        if (id < 0) id = m.unk;
        if (id >= 0) out.push_back(id);
    }
}

// Emits a final symbol: its piece, or for an unused piece the two halves it
// was merged from, or its bytes.
void emit(const Tokenizer::Impl& m, const EncodeScratch& s, std::string_view piece, std::vector<int32_t>& out) {
    int32_t id = m.index.find(piece, m.texts);
    if (id >= 0 && m.types[id] != TokenType::Unused) {
        out.push_back(id);
        return;
    }
    auto it = s.unused_splits.find(piece);
    if (it != s.unused_splits.end()) {
        emit(m, s, piece.substr(0, it->second), out);
        emit(m, s, piece.substr(it->second), out);
        return;
    }
    emit_bytes(m, piece, out);
}

}  // namespace

void encode_spm(const Tokenizer::Impl& m, std::string_view raw, bool space_prefix, EncodeScratch& s,
                std::vector<int32_t>& out) {
    s.text.clear();
    if (space_prefix) s.text += "\xE2\x96\x81";
    for (char c : raw) {
        if (c == ' ') s.text += "\xE2\x96\x81";
        else s.text += c;
    }
    s.symbols.clear();
    s.unused_splits.clear();
    auto p = reinterpret_cast<const unsigned char*>(s.text.data());
    for (uint32_t i = 0; i < s.text.size();) {
        int n = utf8_check(p + i, s.text.size() - i);
        uint32_t len = n > 0 ? uint32_t(n) : 1;  // an invalid byte is a symbol of its own
        s.add_symbol(-1, i, len);
        i += len;
    }
    if (s.symbols.empty()) return;

    s.heap.clear();
    for (int32_t i = 0; i + 1 < int32_t(s.symbols.size()); i++) push_pair(m, s, i);
    while (!s.heap.empty()) {
        Bigram g = s.pop();
        int32_t left = int32_t(uint32_t(g.key));
        Symbol& l = s.symbols[left];
        Symbol& r = s.symbols[g.a];
        // Stale if either side has merged since: symbols only grow, so the
        // joined length tells.
        if (l.len == 0 || r.len == 0 || l.len + r.len != uint32_t(g.b)) continue;
        if (m.types[g.c] == TokenType::Unused)
            s.unused_splits[std::string_view(s.text.data() + l.start, l.len + r.len)] = l.len;
        s.join_next(left);
        push_pair(m, s, l.prev);
        push_pair(m, s, left);
    }
    for (int32_t i = 0; i >= 0; i = s.symbols[i].next)
        emit(m, s, std::string_view(s.text.data() + s.symbols[i].start, s.symbols[i].len), out);
}

}  // namespace ms
