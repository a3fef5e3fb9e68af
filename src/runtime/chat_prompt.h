// A conversation as the model's prompt tokens: the model's own chat template
// (tokenizer.chat_template) rendered with its BOS/EOS tokens and the
// generation prompt, then tokenized, BOS added only where the template did
// not write it. Shared by `chat` and `serve`; safe to use from many threads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "json/json.h"
#include "runtime/session.h"
#include "tokenizer/chat_template.h"

namespace ms {

class ChatPrompt {
public:
    // Throws when the model has no chat template or it does not parse.
    explicit ChatPrompt(const Session& session);
    // The same, rendering with the template's `tools` (an array of function
    // definitions, null for none) and `enable_thinking` (-1: undefined, as
    // the template's default; 0 or 1): Gemma 4, Qwen3 and others switch
    // their reasoning channel and tool-call format on these.
    ChatPrompt(const Session& session, const Json& tools, int enable_thinking);
    // messages: [{"role", "content"}...]. Throws TemplateError when the
    // template refuses the conversation (e.g. roles out of order).
    std::vector<int32_t> tokens(const Json& messages) const;

private:
    const Session* session_;
    ChatTemplate template_;
    ChatContextOptions options_;
};

}  // namespace ms
