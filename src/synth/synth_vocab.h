// The vocabularies synth generates, so the binary needs no vocabulary file:
// merges learned deterministically from English text compiled into the
// binary (models/demo-heldout.txt, public domain), then padded to the
// preset's vocabulary size with tokens encoding never produces (pairs of
// learned words), then the family's special tokens and a chat template of
// our own. Token statistics of English text are what realistic routing
// needs (docs/routing.md), not the identities of a published vocabulary.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ms {

class GgufWriter;

// The tokenizer.* metadata of one vocabulary.
struct SynthVocab {
    std::string model;                 // tokenizer.ggml.model
    std::string pre;                   // tokenizer.ggml.pre ("" for SentencePiece)
    std::vector<std::string> tokens;
    std::vector<int32_t> token_types;  // tokenizer.h's TokenType values
    std::vector<float> scores;         // SentencePiece merge priorities (empty for BPE)
    std::vector<std::string> merges;   // byte-level BPE merges, "left right" (empty for SentencePiece)
    int32_t bos = -1, eos = -1, unk = -1, pad = -1;
    bool add_bos = false;
    std::string chat_template;
};

// tokenizer "gpt2": byte-level BPE with the qwen2 pre-tokenizer, ChatML
// special tokens (<|endoftext|>, <|im_start|>, <|im_end|>, <think>,
// <tool_call>, <tool_response> and their closing forms) and a ChatML
// template that offers tools and honours enable_thinking, as Qwen3's
// vocabulary has (under 1,000 tokens, as tiny's 499, only the first three). tokenizer "llama": SentencePiece with <unk>, <s>, </s>,
// byte fallback and an [INST] template, as Llama 2 / Mixtral have.
// Exactly n_vocab tokens; the same arguments give the same vocabulary.
// Throws std::runtime_error for an unknown tokenizer or a size too small
// for the byte tokens and specials.
SynthVocab make_synth_vocab(const std::string& tokenizer, int64_t n_vocab);

// Writes v as tokenizer.* keys.
void write_synth_vocab(GgufWriter& w, const SynthVocab& v);

}  // namespace ms
