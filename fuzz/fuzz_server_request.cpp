// libFuzzer harness for the server's request reading (src/server/request):
// the input is a POST body. Every body is either a request or an ApiError
// (an HTTP status in 400..499 with a message): never another exception,
// never a crash. An accepted chat request has its messages as an array and
// every accepted request a max_tokens of -1 or from 1 to kMaxRequestTokens
// (past the context the server caps it; the parser does not refuse it).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/request.h"

namespace {

void check(const ms::GenerationRequest& r) {
    if (r.max_tokens < -1 || r.max_tokens == 0 || r.max_tokens > ms::kMaxRequestTokens) abort();
    if (r.chat && !r.messages.is_array()) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string body(reinterpret_cast<const char*>(data), size);
    ms::RequestDefaults d;
    d.model_id = "tiny";
    d.n_ctx = 512;
    ms::Json j;
    try {
        j = ms::parse_body(body, 1 << 20);
    } catch (const ms::ApiError& e) {
        if (e.status < 400 || e.status > 499) abort();
        return 0;
    }
    for (int chat = 0; chat < 2; chat++) {
        try {
            check(chat ? ms::parse_chat_request(j, d) : ms::parse_completion_request(j, d));
        } catch (const ms::ApiError& e) {
            if (e.status < 400 || e.status > 499 || std::string(e.what()).empty()) abort();
        }
    }
    return 0;
}
