// Text <-> token ids exactly as the model's own tokenizer does it, built from
// the GGUF tokenizer.ggml.* metadata: byte-level BPE ("gpt2", pre-tokenizer
// regex chosen by tokenizer.ggml.pre, run through PCRE2), SentencePiece
// ("llama") and the SentencePiece-style BPE of Gemma 4 ("gemma4").
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

class GgufFile;

// Values of tokenizer.ggml.token_type.
enum class TokenType : int32_t {
    Undefined = 0,
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
};

// The tokenizer.ggml.* metadata as plain data, so a tokenizer can also be
// built (and fuzzed, and tested with broken input) without a file. Absent
// optional values take the model's defaults (see Tokenizer::from_spec).
struct VocabSpec {
    std::string model;                 // tokenizer.ggml.model: "gpt2", "llama", "gemma4"
    std::string pre;                   // tokenizer.ggml.pre ("" when absent)
    std::vector<std::string> tokens;   // tokenizer.ggml.tokens
    std::vector<int64_t> token_types;  // tokenizer.ggml.token_type (empty: all normal)
    std::vector<double> scores;        // tokenizer.ggml.scores (empty: all 0)
    std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right", rank = index
    std::optional<int64_t> bos, eos, eot, eom, unk, pad;
    std::optional<bool> add_bos, add_eos, add_space_prefix;
};

class Tokenizer {
public:
    static constexpr int32_t kNoToken = -1;

    // Reads tokenizer.ggml.* from the file. A missing or inconsistent
    // vocabulary throws std::runtime_error "PATH: problem".
    static Tokenizer from_gguf(const GgufFile& file);
    // Validates and builds; `source` names the vocabulary in error messages.
    // Defaults: SentencePiece bos 1, eos 2, unk 0, add_bos and
    // add_space_prefix on; BPE add_bos off except the llama3 family; gemma4
    // always adds BOS. An unknown tokenizer.ggml.pre falls back to the
    // "default" pre-tokenizer with a warning on stderr.
    static Tokenizer from_spec(const VocabSpec& spec, const std::string& source = "vocab");

    // add_bos: add BOS (and EOS) when the model's metadata says so.
    // parse_special: control/unknown token texts in `text` (e.g. "<|im_end|>")
    // become those tokens; user-defined tokens are matched either way.
    // Invalid UTF-8 is kept byte for byte (never replaced).
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

    // The exact bytes of the ids; inverse of encode: drops a leading BOS and
    // trailing EOS that encode would have added and the space encode
    // prefixed (add_space_prefix). Control tokens render as their text.
    // Ids outside the vocabulary are skipped.
    std::string decode(const std::vector<int32_t>& ids) const;

    // Bytes one token stands for ("" for an id outside the vocabulary and for
    // unused tokens). Control tokens give their text.
    const std::string& piece(int32_t id) const;
    // The token's string as stored in the vocabulary (e.g. "Ġthe", "▁the").
    const std::string& text(int32_t id) const;
    // Id of the token whose vocabulary string is exactly `token_text`.
    int32_t find(std::string_view token_text) const;
    TokenType type(int32_t id) const;
    // Control or unknown: a marker, not text (a chat UI hides these).
    bool is_control(int32_t id) const;
    // End of generation: eos, eot, eom and end-of-turn markers such as
    // <|im_end|>, <|endoftext|>, <|eot_id|>, <end_of_turn>, <turn|>, and for
    // harmony vocabularies (<|return|> and <|call|> present) those two
    // instead of <|end|>.
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_ids() const;

    size_t n_vocab() const;
    int32_t bos() const;  // kNoToken when the model has none
    int32_t eos() const;
    int32_t eot() const;
    int32_t eom() const;
    int32_t unk() const;
    int32_t pad() const;
    bool add_bos() const;
    bool add_eos() const;
    bool add_space_prefix() const;
    const std::string& model() const;  // tokenizer.ggml.model
    const std::string& pre() const;    // pre-tokenizer in use (after any fallback)

    struct Impl;

private:
    Tokenizer() = default;  // built only by from_gguf / from_spec
    std::shared_ptr<const Impl> impl_;  // immutable once built: copies share it, encode is thread-safe
};

// Turns generated token ids into printable text one token at a time: emits
// only complete UTF-8, holding back the bytes of a character split across
// tokens. Bytes that can never form valid UTF-8 come out as U+FFFD, so the
// output is always valid UTF-8.
class StreamDecoder {
public:
    // show_control=false drops control/unknown tokens (e.g. <|im_end|>).
    explicit StreamDecoder(const Tokenizer& tok, bool show_control = true);

    // Text that became complete with this token (often "", sometimes more
    // than this token's own piece when it completes an earlier character).
    std::string push(int32_t id);
    // At the end: whatever is still held back (an incomplete character)
    // as U+FFFD.
    std::string flush();
    // Bytes held back, waiting for the rest of a character.
    size_t pending() const { return pending_.size(); }

private:
    std::string take_complete(bool final);
    const Tokenizer* tok_;
    bool show_control_;
    std::string pending_;
};

}  // namespace ms
