#include "server/reply_text.h"

#include <algorithm>

namespace ms {

ReplyText::ReplyText(const Tokenizer& tok, std::vector<std::string> stops, bool show_control)
    : decoder_(tok, show_control), stops_(std::move(stops)) {}

std::string ReplyText::release(std::string text) {
    if (stopped_) return "";
    // The earliest stop string wins (a later one may overlap it).
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) cut = std::min(cut, text.find(s));
    if (cut != std::string::npos) {
        stopped_ = true;
        held_.clear();
        return text.substr(0, cut);
    }
    // Hold the longest tail that is the start of some stop string.
    size_t hold = 0;
    for (const std::string& s : stops_) {
        for (size_t k = std::min(text.size(), s.size() - 1); k > hold; k--) {
            if (text.compare(text.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    held_ = text.substr(text.size() - hold);
    text.resize(text.size() - hold);
    return text;
}

std::string ReplyText::push(int32_t id) { return release(held_ + decoder_.push(id)); }

std::string ReplyText::finish() {
    std::string out = release(held_ + decoder_.flush());
    if (!stopped_) out += held_;  // no more tokens: the tail was not a stop string after all
    held_.clear();
    return out;
}

}  // namespace ms
