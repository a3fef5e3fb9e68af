// The text a client sees of a reply as it is generated: complete UTF-8 only
// (StreamDecoder), cut at the first stop string, and the bytes that might
// begin a stop string held back until the next tokens show they do not.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ms {

class ReplyText {
public:
    // show_control=false: control tokens (<|im_end|>...) are not text.
    ReplyText(const Tokenizer& tok, std::vector<std::string> stops, bool show_control = false);

    // Text released by this token (often ""). After a stop string completes,
    // stopped() is true and nothing more is released.
    std::string push(int32_t id);
    // At the end of generation: whatever is still held back.
    std::string finish();
    bool stopped() const { return stopped_; }

private:
    std::string release(std::string text);
    StreamDecoder decoder_;
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
};

}  // namespace ms
