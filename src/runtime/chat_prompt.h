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
    // source: a template to use instead of the model's (empty: the model's).
    explicit ChatPrompt(const Session& session, const std::string& source = "");
    // The model's template rendered with its `tools` (an array of function
    // definitions, null for none) and `enable_thinking` (-1: undefined, as
    // the template's default; 0 or 1): Gemma 4, Qwen3 and others switch
    // their reasoning channel and tool-call format on these.
    ChatPrompt(const Session& session, const Json& tools, int enable_thinking, const std::string& source = "");
    // messages: [{"role", "content"}...]. Throws TemplateError when the
    // template refuses the conversation (e.g. roles out of order).
    // tools: the functions the template offers the model (null: those given
    // at construction, if any).
    std::vector<int32_t> tokens(const Json& messages, const Json& tools = Json()) const;
    // The rendered text those tokens are made from.
    std::string text(const Json& messages, const Json& tools = Json()) const;
    // The template's source (tool-call formats are read off it).
    const std::string& source() const { return source_; }

private:
    const Session* session_;
    std::string source_;
    ChatTemplate template_;
    ChatContextOptions options_;
};

}  // namespace ms
