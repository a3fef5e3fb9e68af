// Chat templates: renders a model's own tokenizer.chat_template (Jinja2) the way
// Hugging Face transformers does (sandboxed Jinja2 3.1, trim_blocks, lstrip_blocks,
// tojson without ASCII escaping, raise_exception, strftime_now).
#pragma once
#include <cstdint>
#include <ctime>
#include <memory>
#include <stdexcept>
#include <string>

#include "json/json.h"

namespace ms {

namespace jinja { struct Program; }

// A template failed while rendering: the raise_exception message as given, or
// "template: line L: problem" for other runtime errors (undefined values, type
// errors, limits).
class TemplateError : public std::runtime_error {
public:
    explicit TemplateError(const std::string& msg, bool raised_by_template = false)
        : std::runtime_error(msg), raised(raised_by_template) {}
    bool raised;  // the template's own raise_exception()
};

// Bounds that keep a hostile template from hanging or exhausting memory.
struct TemplateLimits {
    size_t max_output = size_t(64) << 20;  // bytes of rendered text (and of any one string)
    uint64_t max_steps = 50'000'000;       // evaluated nodes + loop iterations
    int max_depth = 200;                   // nested macro calls
    size_t max_stack = size_t(4) << 20;    // bytes of C++ stack rendering may use
};

class ChatTemplate {
public:
    // Parses; throws std::runtime_error "template: line L: problem" on syntax
    // errors, unknown filters or tests.
    explicit ChatTemplate(std::string source);
    ~ChatTemplate();
    ChatTemplate(ChatTemplate&&) noexcept;
    ChatTemplate& operator=(ChatTemplate&&) noexcept;

    // Renders with the context's keys as template variables. Throws TemplateError.
    std::string render(const Json& context) const;

    // strftime_now() formats this time instead of the current local time.
    void set_now(const std::tm& t) { now_ = t; fixed_now_ = true; }
    void set_limits(const TemplateLimits& l) { limits_ = l; }

private:
    std::unique_ptr<jinja::Program> program_;
    std::tm now_{};
    bool fixed_now_ = false;
    TemplateLimits limits_;
};

// The variables a chat template expects, shaped like the contexts in
// golden/chat/cases.json. tools: an array of tool schemas, or null for none
// (then `tools` stays undefined); enable_thinking < 0 leaves it undefined.
struct ChatContextOptions {
    bool add_generation_prompt = true;
    std::string bos_token, eos_token;
    Json tools;
    int enable_thinking = -1;
};
Json chat_context(const Json& messages, const ChatContextOptions& opt);

}  // namespace ms
