// Draft tokens for speculative decoding: guesses of the next few tokens that
// one forward pass then checks (Session::step). Prompt lookup (n-gram) finds
// the latest earlier occurrence of the context's last tokens and proposes
// what followed it; it costs no model and pays where text repeats (edits,
// quotes, code). MTP drafts come from the model's own NextN layers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ms {

enum class DraftMode {
    Off,
    Ngram,   // prompt lookup
    Mtp,     // the model's multi-token-prediction layers
    Auto,    // resolved at open: see resolve_draft_mode
    Forced,  // always draft_max tokens (the n-gram continuation, else the last token repeated): the verify pass's cost
};

struct DraftOptions {
    DraftMode mode = DraftMode::Off;
    int max = 4;      // most drafted tokens per forward pass
    int ngram_max = 4, ngram_min = 2;  // n-gram lengths tried, longest first
    // When set (and mode is not Off), drafts come from here instead, with
    // propose_ngram's contract: (history, length, k, out) -> appended count.
    // For tests and experiments with other drafters.
    std::function<int(const int32_t*, size_t, int, std::vector<int32_t>*)> custom;
};

// "off" | "ngram" | "mtp" | "auto" | "forced"; throws on anything else.
DraftMode parse_draft_mode(const std::string& s);
const char* draft_mode_name(DraftMode m);

// Up to k tokens that followed the most recent earlier occurrence of the
// last n tokens of history[0..len), for n from ngram_max down to ngram_min;
// appends them to *out and returns how many. Forced mode pads to k with the
// last token. Allocates nothing when *out has capacity k.
int propose_ngram(const int32_t* history, size_t len, int k, const DraftOptions& o, std::vector<int32_t>* out);

// What speculation did: forward passes that checked drafts, tokens drafted
// and accepted, and tokens that passes added to the context (each pass adds
// its first token plus the accepted drafts).
struct DraftStats {
    int64_t passes = 0;    // decode forward passes (step()), with or without drafts
    int64_t drafted = 0;
    int64_t accepted = 0;
    int64_t tokens = 0;    // tokens those passes added to the context
    double acceptance() const { return drafted > 0 ? double(accepted) / double(drafted) : 0; }
    double tokens_per_pass() const { return passes > 0 ? double(tokens) / double(passes) : 0; }
};

}  // namespace ms
