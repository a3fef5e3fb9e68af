#include "runtime/chat_prompt.h"

#include <stdexcept>

namespace ms {

namespace {

std::string template_source(const Session& s) {
    std::string source = s.file().get_string("tokenizer.chat_template");
    if (source.empty()) {
        throw std::runtime_error(s.file().path() + ": the model has no chat template (tokenizer.chat_template)");
    }
    return source;
}

}  // namespace

ChatPrompt::ChatPrompt(const Session& session, const std::string& source)
    : session_(&session), source_(source.empty() ? template_source(session) : source), template_(source_) {
    const Tokenizer& tok = session.tokenizer();
    options_.add_generation_prompt = true;
    if (tok.bos() != Tokenizer::kNoToken) options_.bos_token = tok.text(tok.bos());
    if (tok.eos() != Tokenizer::kNoToken) options_.eos_token = tok.text(tok.eos());
}

ChatPrompt::ChatPrompt(const Session& session, const Json& tools, int enable_thinking, const std::string& source)
    : ChatPrompt(session, source) {
    options_.tools = tools;
    options_.enable_thinking = enable_thinking;
}

std::string ChatPrompt::text(const Json& messages, const Json& tools) const {
    ChatContextOptions o = options_;
    if (!tools.is_null()) o.tools = tools;
    return template_.render(chat_context(messages, o));
}

std::vector<int32_t> ChatPrompt::tokens(const Json& messages, const Json& tools) const {
    const std::string text = this->text(messages, tools);
    const bool has_bos = !options_.bos_token.empty() && text.rfind(options_.bos_token, 0) == 0;
    return session_->tokenize(text, !has_bos);
}

}  // namespace ms
