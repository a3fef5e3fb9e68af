// libFuzzer harness for chat templates (src/tokenizer/jinja_*, chat_template):
// the input is a template's source. Parsing must either succeed or throw
// std::runtime_error; rendering it with a fixed conversation (messages with
// tool calls and content parts, tools, special tokens) must either return or
// throw TemplateError. Tight step, depth and output limits keep every input
// fast, so a hang is a bug in the limits.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tokenizer/chat_template.h"

namespace {

const ms::Json& context() {
    static const ms::Json ctx = ms::Json::parse(R"({
      "messages": [
        {"role": "system", "content": "Be brief. \u00e9\u4e2d"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]},
        {"role": "assistant", "content": "<think>\nx\n</think>\n\nok", "reasoning_content": "r",
         "tool_calls": [{"id": "call00001", "type": "function",
                         "function": {"name": "f", "arguments": {"a": 1, "b": [true, null, 2.5]}}}]},
        {"role": "tool", "tool_call_id": "call00001", "content": "{\"r\": 1}"},
        {"role": "user", "content": "again"}
      ],
      "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                 "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}],
      "add_generation_prompt": true, "enable_thinking": false,
      "bos_token": "<s>", "eos_token": "</s>"
    })");
    return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string source(reinterpret_cast<const char*>(data), size);
    ms::TemplateLimits lim;
    lim.max_output = 1 << 16;
    lim.max_steps = 20000;
    lim.max_depth = 40;
    lim.max_stack = 1 << 20;
    try {
        ms::ChatTemplate tmpl(source);
        tmpl.set_limits(lim);
        std::tm date{};
        date.tm_year = 126;
        date.tm_mday = 15;
        tmpl.set_now(date);
        std::string out = tmpl.render(context());
        if (out.size() > lim.max_output) __builtin_trap();
    } catch (const ms::TemplateError&) {
    } catch (const std::runtime_error&) {
    }
    return 0;
}
