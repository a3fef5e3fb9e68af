#include "tokenizer/chat_template.h"

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_render.h"

namespace ms {

ChatTemplate::ChatTemplate(std::string source) : program_(std::make_unique<jinja::Program>()) {
    jinja::parse(source, *program_);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

namespace {

using jinja::CallArgs;
using jinja::Interp;
using jinja::RenderError;
using jinja::Value;

Value native(const char* name, std::function<Value(Interp&, CallArgs&)> fn) {
    return Value::callable(std::make_shared<jinja::Callable>(jinja::Callable{name, std::move(fn)}));
}

const Value& only_arg(const char* name, const CallArgs& a) {
    if (a.pos.size() != 1 || !a.kw.empty()) throw RenderError(std::string(name) + "() takes exactly one argument");
    return a.pos[0];
}

}  // namespace

std::string ChatTemplate::render(const Json& context) const {
    if (!context.is_object()) throw TemplateError("template: the context must be a JSON object");
    auto globals = std::make_shared<jinja::Scope>();
    jinja::install_globals(*globals);
    // The two functions transformers adds to every chat template.
    globals->set("raise_exception", native("raise_exception", [](Interp&, CallArgs& a) -> Value {
                     throw jinja::RaisedError(jinja::to_str(only_arg("raise_exception", a)));
                 }));
    std::tm now = now_;
    if (!fixed_now_) {
        std::time_t t = std::time(nullptr);
        localtime_r(&t, &now);
    }
    globals->set("strftime_now", native("strftime_now", [now](Interp&, CallArgs& a) -> Value {
                     const Value& fmt = only_arg("strftime_now", a);
                     if (fmt.kind != jinja::Kind::String) throw RenderError("strftime_now() argument must be str");
                     if (fmt.s.empty()) return Value::string("");
                     char buf[1024];
                     size_t n = strftime(buf, sizeof buf, fmt.s.c_str(), &now);
                     if (n == 0) throw RenderError("strftime_now(): format produced no output or is too long");
                     return Value::string(std::string(buf, n));
                 }));
    jinja::Limits lim;
    lim.max_output = limits_.max_output;
    lim.max_steps = limits_.max_steps;
    lim.max_depth = limits_.max_depth;
    lim.max_stack = limits_.max_stack;
    try {
        auto root = std::make_shared<jinja::Scope>(globals);
        for (const auto& [key, val] : context.as_object()) root->set(key, jinja::from_json(val));
        Interp interp(*program_, lim);
        return interp.render(root);
    } catch (const jinja::RaisedError& e) {
        throw TemplateError(e.what(), true);
    } catch (const RenderError& e) {
        throw TemplateError("template: line " + std::to_string(e.line) + ": " + e.what());
    }
}

Json chat_context(const Json& messages, const ChatContextOptions& opt) {
    Json ctx = Json::object();
    ctx["messages"] = messages;
    if (!opt.tools.is_null()) ctx["tools"] = opt.tools;
    ctx["add_generation_prompt"] = opt.add_generation_prompt;
    ctx["bos_token"] = opt.bos_token;
    ctx["eos_token"] = opt.eos_token;
    if (opt.enable_thinking >= 0) ctx["enable_thinking"] = opt.enable_thinking != 0;
    return ctx;
}

}  // namespace ms
