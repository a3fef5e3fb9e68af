#include "runtime/draft.h"

#include <algorithm>
#include <stdexcept>

namespace ms {

DraftMode parse_draft_mode(const std::string& s) {
    if (s == "off") return DraftMode::Off;
    if (s == "ngram") return DraftMode::Ngram;
    if (s == "mtp") return DraftMode::Mtp;
    if (s == "auto") return DraftMode::Auto;
    if (s == "forced") return DraftMode::Forced;
    throw std::runtime_error("--draft must be off, ngram, mtp, auto or forced, not '" + s + "'");
}

const char* draft_mode_name(DraftMode m) {
    switch (m) {
        case DraftMode::Off: return "off";
        case DraftMode::Ngram: return "ngram";
        case DraftMode::Mtp: return "mtp";
        case DraftMode::Auto: return "auto";
        case DraftMode::Forced: return "forced";
    }
    return "?";
}

int propose_ngram(const int32_t* h, size_t len, int k, const DraftOptions& o, std::vector<int32_t>* out) {
    const size_t start = out->size();
    if (k <= 0 || len == 0) return 0;
    for (int n = std::min<int>(o.ngram_max, int(len) - 1); n >= std::max(o.ngram_min, 1) && out->size() == start;
         n--) {
        const int32_t* tail = h + len - size_t(n);
        // Latest first: recent text predicts best. The match must leave at
        // least one token after it.
        for (size_t i = len - size_t(n); i-- > 0;) {
            if (!std::equal(tail, tail + n, h + i)) continue;
            for (size_t j = i + size_t(n); j < len && out->size() - start < size_t(k); j++) out->push_back(h[j]);
            break;
        }
    }
    if (o.mode == DraftMode::Forced)
        while (out->size() - start < size_t(k)) out->push_back(h[len - 1]);
    return int(out->size() - start);
}

}  // namespace ms
