// Building a Tokenizer from GGUF metadata (with validation: a broken
// vocabulary is an error naming the key, never a crash), splitting special
// tokens out of the text, and the encode/decode entry points.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer_impl.h"

namespace ms {

// ---- UTF-8 ---------------------------------------------------------------------

int utf8_check(const unsigned char* s, size_t n) {
    unsigned char b0 = s[0];
    if (b0 < 0x80) return 1;
    int len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode table 3-7)
    if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
    else if (b0 == 0xE0) len = 3, lo = 0xA0;
    else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) len = 3;
    else if (b0 == 0xED) len = 3, hi = 0x9F;  // no surrogates
    else if (b0 == 0xF0) len = 4, lo = 0x90;
    else if (b0 >= 0xF1 && b0 <= 0xF3) len = 4;
    else if (b0 == 0xF4) len = 4, hi = 0x8F;  // nothing above U+10FFFF
    else return -1;
    for (int i = 1; i < len; i++) {
        if (size_t(i) >= n) return 0;
        if (s[i] < lo || s[i] > hi) return -i;
        lo = 0x80, hi = 0xBF;
    }
    return len;
}

bool utf8_valid(std::string_view s) {
    auto p = reinterpret_cast<const unsigned char*>(s.data());
    for (size_t i = 0; i < s.size();) {
        int n = utf8_check(p + i, s.size() - i);
        if (n <= 0) return false;
        i += size_t(n);
    }
    return true;
}

// ---- string index ---------------------------------------------------------------

void TextIndex::insert(int32_t id, const std::vector<std::string>& keys) {
    const std::string& k = keys[size_t(id)];
    for (size_t i = std::hash<std::string_view>{}(k) & mask_;; i = (i + 1) & mask_) {
        if (slots_[i] < 0 || keys[size_t(slots_[i])] == k) {
            slots_[i] = id;
            return;
        }
    }
}

int32_t TextIndex::find(std::string_view s, const std::vector<std::string>& keys) const {
    if (slots_.empty()) return Tokenizer::kNoToken;
    for (size_t i = std::hash<std::string_view>{}(s) & mask_;; i = (i + 1) & mask_) {
        int32_t id = slots_[i];
        if (id < 0) return Tokenizer::kNoToken;
        if (keys[size_t(id)] == s) return id;
    }
}

// ---- loading ---------------------------------------------------------------------

namespace {

// Texts of end-of-generation markers across model families, in the order
// used to pick the end-of-turn token when the metadata names none.
const char* const kEndOfTurn[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                  "<|end_of_text|>", "<EOT>", "<｜end▁of▁sentence｜>"};
const char* const kEndOfGeneration[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "<|end_of_text|>", "<eos>", "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>"};

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

std::string piece_of(Algorithm alg, TokenType type, const std::string& text) {
    switch (type) {
        case TokenType::Control:
        case TokenType::Unknown:
        case TokenType::UserDefined:
            return text;
        case TokenType::Byte: {
            if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>' && is_hex(text[3]) &&
                is_hex(text[4]))
                return std::string(1, char(std::stoi(text.substr(3, 2), nullptr, 16)));
            return text;
        }
        case TokenType::Unused:
        case TokenType::Undefined:
            return {};
        case TokenType::Normal:
            break;
    }
    std::string out;
    if (alg != Algorithm::ByteBpe) {  // "▁" stands for a space
        for (size_t i = 0; i < text.size(); i++) {
            if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
                out += ' ';
                i += 2;
            } else {
                out += text[i];
            }
        }
        return out;
    }
    // Byte-level: every character stands for one byte; anything else is kept.
    auto p = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size();) {
        int n = utf8_check(p + i, text.size() - i);
        if (n <= 0) {
            out += text[i++];
            continue;
        }
        uint32_t cp = n == 1 ? p[i] : n == 2 ? (p[i] & 0x1Fu) << 6 | (p[i + 1] & 0x3Fu) : 0x110000;
        int b = gpt2_cp_to_byte(cp);
        if (b >= 0) out += char(b);
        else out.append(text, i, size_t(n));
        i += size_t(n);
    }
    return out;
}

}  // namespace

Tokenizer Tokenizer::from_spec(const VocabSpec& v, const std::string& source) {
    auto fail = [&](const std::string& what) { throw std::runtime_error(source + ": " + what); };
    auto m = std::make_shared<Impl>();
    m->source = source;
    m->model = v.model;
    // The gemma4 pre-tokenizer implies Gemma 4's style of BPE whatever the model name.
    if (v.model == "gpt2" && v.pre != "gemma4") m->algorithm = Algorithm::ByteBpe;
    else if (v.model == "gemma4" || v.model == "gpt2") m->algorithm = Algorithm::SpmBpe;
    else if (v.model == "llama") m->algorithm = Algorithm::Spm;
    else if (v.model.empty()) fail("no tokenizer (tokenizer.ggml.model is missing)");
    else fail("unsupported tokenizer.ggml.model '" + v.model + "' (supported: gpt2, llama, gemma4)");

    const size_t n = v.tokens.size();
    if (n == 0) fail("tokenizer.ggml.tokens is missing or empty");
    if (n > size_t(INT32_MAX)) fail("tokenizer.ggml.tokens has too many entries");
    m->texts = v.tokens;
    if (!v.token_types.empty() && v.token_types.size() < n)
        fail("tokenizer.ggml.token_type has " + std::to_string(v.token_types.size()) + " entries for " +
             std::to_string(n) + " tokens");
    if (!v.scores.empty() && v.scores.size() < n)
        fail("tokenizer.ggml.scores has " + std::to_string(v.scores.size()) + " entries for " + std::to_string(n) +
             " tokens");
    m->types.resize(n, TokenType::Normal);
    m->scores.resize(n, 0.0f);
    for (size_t i = 0; i < n; i++) {
        if (!v.token_types.empty()) {
            int64_t t = v.token_types[i];
            if (t < 0 || t > 6)
                fail("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(t) +
                     " is not a token type (0-6)");
            m->types[i] = TokenType(t);
        }
        if (!v.scores.empty()) {
            if (!std::isfinite(v.scores[i]))
                fail("tokenizer.ggml.scores[" + std::to_string(i) + "] is not a finite number");
            m->scores[i] = float(v.scores[i]);
        }
    }
    m->index.build(m->texts, [&](size_t i) { return !m->texts[i].empty(); });

    // Pre-tokenizer and the defaults each family implies.
    bool add_bos_default = false;
    if (m->algorithm == Algorithm::Spm) {
        m->pre = "";
        m->bos = n > 1 ? 1 : kNoToken;
        m->eos = n > 2 ? 2 : kNoToken;
        m->unk = 0;
        add_bos_default = true;
    } else {
        std::string name = m->algorithm == Algorithm::SpmBpe ? "gemma4" : v.pre.empty() ? "default" : v.pre;
        const PreTokenizerDef* def = find_pre_tokenizer(name);
        if (!def) {
            fprintf(stderr, "warning: %s: unknown tokenizer.ggml.pre '%s', using the default pre-tokenizer\n",
                    source.c_str(), name.c_str());
            def = find_pre_tokenizer("default");
        }
        m->pre = def->name;
        m->pre_tokenizer = PreTokenizer(def->patterns);
        m->ignore_merges = def->ignore_merges;
        add_bos_default = def->add_bos;
    }

    auto set_id = [&](const std::optional<int64_t>& value, int32_t& id, const char* key) {
        if (!value) return;
        // -1 (also as uint32) is the common spelling of "none".
        if (*value == -1 || *value == 0xFFFFFFFFll) {
            id = kNoToken;
            return;
        }
        if (*value < 0 || uint64_t(*value) >= n)
            fail(std::string("tokenizer.ggml.") + key + " = " + std::to_string(*value) +
                 " is outside the vocabulary (" + std::to_string(n) + " tokens)");
        id = int32_t(*value);
    };
    set_id(v.bos, m->bos, "bos_token_id");
    set_id(v.eos, m->eos, "eos_token_id");
    set_id(v.eot, m->eot, "eot_token_id");
    set_id(v.eom, m->eom, "eom_token_id");
    set_id(v.unk, m->unk, "unknown_token_id");
    set_id(v.pad, m->pad, "padding_token_id");
    // Gemma 4 always starts with BOS, whatever the metadata says.
    m->add_bos = (v.add_bos.value_or(add_bos_default) || m->algorithm == Algorithm::SpmBpe) && m->bos >= 0;
    m->add_eos = v.add_eos.value_or(false) && m->eos >= 0;
    m->add_space_prefix = m->algorithm == Algorithm::Spm && v.add_space_prefix.value_or(true);

    // Merges: "left right", rank = position. Both sides and their
    // concatenation must be tokens.
    if (m->algorithm != Algorithm::Spm) {
        if (v.merges.empty()) fail("tokenizer.ggml.merges is missing (a BPE vocabulary needs it)");
        if (v.merges.size() > size_t(INT32_MAX)) fail("tokenizer.ggml.merges has too many entries");
        m->merges.reserve(v.merges.size());
        std::string joined;
        for (size_t i = 0; i < v.merges.size(); i++) {
            const std::string& mg = v.merges[i];
            auto bad = [&](const std::string& why) {
                fail("tokenizer.ggml.merges[" + std::to_string(i) + "] '" + mg + "': " + why);
            };
            size_t sp = mg.find(' ', 1);
            if (sp == std::string::npos || sp + 1 >= mg.size()) bad("not two tokens separated by a space");
            std::string_view left(mg.data(), sp), right(mg.data() + sp + 1, mg.size() - sp - 1);
            int32_t a = m->index.find(left, m->texts), b = m->index.find(right, m->texts);
            if (a < 0) bad("'" + std::string(left) + "' is not in the vocabulary");
            if (b < 0) bad("'" + std::string(right) + "' is not in the vocabulary");
            joined.assign(left).append(right);
            int32_t c = m->index.find(joined, m->texts);
            if (c < 0) bad("the merged token '" + joined + "' is not in the vocabulary");
            m->merges.insert(a, b, int32_t(i), c);
        }
    }

    for (int b = 0; b < 256; b++) {
        std::string key;
        if (m->algorithm == Algorithm::ByteBpe) {
            utf8_append(key, gpt2_byte_to_cp(uint8_t(b)));
        } else {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            key = hex;
        }
        m->byte_token[size_t(b)] = m->index.find(key, m->texts);
    }

    // End of generation. Tokens that look like end markers count as control
    // whatever their recorded type, so they are matched as special tokens.
    auto has = [&](const char* t) { return m->index.find(t, m->texts) >= 0; };
    const bool harmony = has("<|return|>") && has("<|call|>");
    m->eog_flag.assign(n, 0);
    for (const char* t : kEndOfGeneration) {
        int32_t id = m->index.find(t, m->texts);
        if (id < 0) continue;
        if (harmony && !strcmp(t, "<|end|>")) continue;  // gpt-oss: <|end|> closes a message, not the turn
        m->eog_flag[size_t(id)] = 1;
        m->types[size_t(id)] = TokenType::Control;
    }
    if (m->eot == kNoToken && !v.eot) {
        for (const char* t : kEndOfTurn) {
            if (harmony && !strcmp(t, "<|end|>")) continue;
            if ((m->eot = m->index.find(t, m->texts)) >= 0) break;
        }
    }
    for (int32_t id : {m->eos, m->eot, m->eom})
        if (id >= 0) m->eog_flag[size_t(id)] = 1;
    for (size_t i = 0; i < n; i++)
        if (m->eog_flag[i]) m->eog.push_back(int32_t(i));
    if (harmony) {
        // gpt-oss structure markers are part of the visible output (the
        // caller parses channels from them), as in the reference.
        for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", "<|end|>"}) {
            int32_t id = m->index.find(t, m->texts);
            if (id >= 0) m->types[size_t(id)] = TokenType::UserDefined;
        }
    }

    m->pieces.resize(n);
    for (size_t i = 0; i < n; i++) m->pieces[i] = piece_of(m->algorithm, m->types[i], m->texts[i]);
    if (m->ignore_merges)
        m->word_index.build(m->pieces, [&](size_t i) {
            return m->types[i] == TokenType::Normal && !m->pieces[i].empty();
        });

    // Special tokens, longest first (ties by id), bucketed by their first
    // two bytes (one-byte tokens by 0x10000 | byte).
    for (size_t i = 0; i < n; i++) {
        TokenType t = m->types[i];
        if ((t == TokenType::Control || t == TokenType::Unknown || t == TokenType::UserDefined) &&
            !m->texts[i].empty())
            m->specials.push_back(int32_t(i));
    }
    std::stable_sort(m->specials.begin(), m->specials.end(), [&](int32_t a, int32_t b) {
        return m->texts[size_t(a)].size() > m->texts[size_t(b)].size();
    });
    for (size_t prio = 0; prio < m->specials.size(); prio++) {
        const std::string& t = m->texts[size_t(m->specials[prio])];
        uint8_t b0 = uint8_t(t[0]);
        m->special_first[b0] = 1;
        uint32_t key = t.size() == 1 ? 0x10000u | b0 : uint32_t(b0) << 8 | uint8_t(t[1]);
        m->special_buckets[key].push_back(int32_t(prio));
    }

    Tokenizer tok;
    tok.impl_ = std::move(m);
    return tok;
}

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
    VocabSpec v;
    v.model = f.get_string("tokenizer.ggml.model");
    v.pre = f.get_string("tokenizer.ggml.pre");
    v.tokens = f.get_strings("tokenizer.ggml.tokens");
    v.token_types = f.get_ints("tokenizer.ggml.token_type");
    v.scores = f.get_floats("tokenizer.ggml.scores");
    v.merges = f.get_strings("tokenizer.ggml.merges");
    auto id = [&](const char* key) -> std::optional<int64_t> {
        if (!f.has(key)) return std::nullopt;
        return f.get_int(key, -1);
    };
    auto flag = [&](const char* key) -> std::optional<bool> {
        if (!f.has(key)) return std::nullopt;
        return f.get_bool(key, false);
    };
    v.bos = id("tokenizer.ggml.bos_token_id");
    v.eos = id("tokenizer.ggml.eos_token_id");
    v.eot = id("tokenizer.ggml.eot_token_id");
    v.eom = id("tokenizer.ggml.eom_token_id");
    v.unk = id("tokenizer.ggml.unknown_token_id");
    v.pad = id("tokenizer.ggml.padding_token_id");
    v.add_bos = flag("tokenizer.ggml.add_bos_token");
    v.add_eos = flag("tokenizer.ggml.add_eos_token");
    v.add_space_prefix = flag("tokenizer.ggml.add_space_prefix");
    return from_spec(v, f.path());
}

// ---- encode ----------------------------------------------------------------------

// Special tokens are taken longest first; each claims its occurrences left
// to right wherever the text is not yet claimed (the reference's order, so
// overlapping candidates resolve the same way).
void partition_specials(const Tokenizer::Impl& m, std::string_view text, bool parse_special,
                        std::vector<EncodeScratch::Fragment>& out) {
    out.clear();
    const uint32_t n = uint32_t(text.size());
    auto p = reinterpret_cast<const unsigned char*>(text.data());
    std::vector<std::pair<int32_t, uint32_t>> hits;  // (priority, position)
    auto probe = [&](uint32_t key, uint32_t pos) {
        auto it = m.special_buckets.find(key);
        if (it == m.special_buckets.end()) return;
        for (int32_t prio : it->second) {
            int32_t id = m.specials[size_t(prio)];
            if (!parse_special && m.types[size_t(id)] != TokenType::UserDefined) continue;
            const std::string& t = m.texts[size_t(id)];
            if (t.size() <= n - pos && memcmp(p + pos, t.data(), t.size()) == 0) hits.push_back({prio, pos});
        }
    };
    for (uint32_t i = 0; i < n; i++) {
        if (!m.special_first[p[i]]) continue;
        if (i + 1 < n) probe(uint32_t(p[i]) << 8 | p[i + 1], i);
        probe(0x10000u | p[i], i);
    }
    if (hits.empty()) {
        if (n) out.push_back({Tokenizer::kNoToken, 0, n});
        return;
    }
    std::sort(hits.begin(), hits.end());
    std::vector<uint8_t> taken(n, 0);
    std::vector<EncodeScratch::Fragment> found;
    for (auto [prio, pos] : hits) {
        int32_t id = m.specials[size_t(prio)];
        uint32_t len = uint32_t(m.texts[size_t(id)].size());
        if (std::find(taken.begin() + pos, taken.begin() + pos + len, 1) != taken.begin() + pos + len) continue;
        std::fill(taken.begin() + pos, taken.begin() + pos + len, 1);
        found.push_back({id, pos, len});
    }
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
    uint32_t at = 0;
    for (const auto& f : found) {
        if (f.start > at) out.push_back({Tokenizer::kNoToken, at, f.start - at});
        out.push_back(f);
        at = f.start + f.len;
    }
    if (at < n) out.push_back({Tokenizer::kNoToken, at, n - at});
}

EncodeScratch::EncodeScratch() : match_data(PreTokenizer::new_match_data()) {
    if (!match_data) throw std::bad_alloc();
}
EncodeScratch::~EncodeScratch() { PreTokenizer::free_match_data(match_data); }

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    const Impl& m = *impl_;
    if (text.size() >= UINT32_MAX) throw std::runtime_error("tokenize: text larger than 4 GiB");
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos && m.add_bos) out.push_back(m.bos);
    EncodeScratch s;
    partition_specials(m, text, parse_special, s.fragments);
    bool after_special = true;  // SentencePiece prefixes a space to the text and to text after a special token
    for (const auto& f : s.fragments) {
        if (f.id >= 0) {
            out.push_back(f.id);
            after_special = true;
            continue;
        }
        std::string_view raw = text.substr(f.start, f.len);
        switch (m.algorithm) {
            case Algorithm::ByteBpe: encode_byte_bpe(m, raw, s, out); break;
            case Algorithm::SpmBpe: encode_spm_bpe(m, raw, s, out); break;
            case Algorithm::Spm: encode_spm(m, raw, m.add_space_prefix && after_special, s, out); break;
        }
        after_special = false;
    }
    if (add_bos && m.add_eos) out.push_back(m.eos);
    return out;
}

// ---- decode and accessors -------------------------------------------------------

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    const Impl& m = *impl_;
    size_t b = 0, e = ids.size();
    if (m.add_bos && b < e && ids[b] == m.bos) b++;
    if (m.add_eos && b < e && ids[e - 1] == m.eos) e--;
    std::string out;
    for (size_t i = b; i < e; i++)
        if (m.valid(ids[i])) out += m.pieces[size_t(ids[i])];
    if (m.add_space_prefix && b < e && m.valid(ids[b]) && m.types[size_t(ids[b])] != TokenType::Control &&
        !out.empty() && out[0] == ' ')
        out.erase(0, 1);
    return out;
}

static const std::string kEmpty;

const std::string& Tokenizer::piece(int32_t id) const { return impl_->valid(id) ? impl_->pieces[size_t(id)] : kEmpty; }
const std::string& Tokenizer::text(int32_t id) const { return impl_->valid(id) ? impl_->texts[size_t(id)] : kEmpty; }
int32_t Tokenizer::find(std::string_view t) const { return impl_->index.find(t, impl_->texts); }
TokenType Tokenizer::type(int32_t id) const {
    return impl_->valid(id) ? impl_->types[size_t(id)] : TokenType::Undefined;
}
bool Tokenizer::is_control(int32_t id) const {
    TokenType t = type(id);
    return t == TokenType::Control || t == TokenType::Unknown;
}
bool Tokenizer::is_eog(int32_t id) const { return impl_->valid(id) && impl_->eog_flag[size_t(id)]; }
const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog; }
size_t Tokenizer::n_vocab() const { return impl_->texts.size(); }
int32_t Tokenizer::bos() const { return impl_->bos; }
int32_t Tokenizer::eos() const { return impl_->eos; }
int32_t Tokenizer::eot() const { return impl_->eot; }
int32_t Tokenizer::eom() const { return impl_->eom; }
int32_t Tokenizer::unk() const { return impl_->unk; }
int32_t Tokenizer::pad() const { return impl_->pad; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->add_space_prefix; }
const std::string& Tokenizer::model() const { return impl_->model; }
const std::string& Tokenizer::pre() const { return impl_->pre; }

}  // namespace ms
