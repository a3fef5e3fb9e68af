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
    // messages: [{"role", "content"}...]. Throws TemplateError when the
    // template refuses the conversation (e.g. roles out of order).
    std::vector<int32_t> tokens(const Json& messages) const;

private:
    const Session* session_;
    ChatTemplate template_;
    ChatContextOptions options_;
};

}  // namespace ms
