// StreamDecoder: token pieces in, complete UTF-8 out.
#include "tokenizer/tokenizer_impl.h"

namespace ms {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool show_control) : tok_(&tok), show_control_(show_control) {}

std::string StreamDecoder::push(int32_t id) {
    if (!show_control_ && tok_->is_control(id)) return {};
    pending_ += tok_->piece(id);
    return take_complete(false);
}

std::string StreamDecoder::flush() { return take_complete(true); }

std::string StreamDecoder::take_complete(bool final) {
    static const char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
    std::string out;
    auto p = reinterpret_cast<const unsigned char*>(pending_.data());
    size_t i = 0, n = pending_.size();
    while (i < n) {
        int r = utf8_check(p + i, n - i);
        if (r > 0) {
            out.append(pending_, i, size_t(r));
            i += size_t(r);
        } else if (r == 0) {  // a character still missing its last bytes
            if (!final) break;
            out += kReplacement;
            i = n;
        } else {
            out += kReplacement;
            i += size_t(-r);
        }
    }
    pending_.erase(0, i);
    return out;
}

}  // namespace ms
