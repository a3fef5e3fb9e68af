// ChatTemplate's contract beyond rendering correctly (which the golden and
// reference tests cover): malformed templates are one clear error naming the
// line, hostile templates stop at the step, depth and size limits instead of
// hanging or crashing, raise_exception passes its message through unchanged,
// and chat_context builds the variables templates expect.
#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "tokenizer/chat_template.h"

namespace {

std::string render(const std::string& src, const std::string& ctx = "{}", ms::TemplateLimits lim = {}) {
    ms::ChatTemplate t(src);
    t.set_limits(lim);
    return t.render(ms::Json::parse(ctx));
}

// The message of the error constructing (parsing) src raises.
std::string parse_error(const std::string& src) {
    try {
        ms::ChatTemplate t(src);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "(no error)";
}

std::string render_error(const std::string& src, ms::TemplateLimits lim = {}) {
    try {
        render(src, "{}", lim);
    } catch (const ms::TemplateError& e) {
        return e.what();
    }
    return "(no error)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ChatTemplate, MalformedTemplatesNameTheLine) {
    struct Bad {
        const char* src;
        const char* line;
        const char* says;
    } bad[] = {
        {"hello {{ name", "line 1", "expected '}}'"},
        {"a\n{% if x %}\nb", "line 3", "'endif'"},
        {"{% for x in %}{% endfor %}", "line 1", "expected an expression"},
        {"{% for in y %}{% endfor %}", "line 1", "expected an expression, got 'in'"},
        {"\n\n{{ 1 + }}", "line 3", "unexpected"},
        {"{{ x | no_such_filter }}", "line 1", "no filter named 'no_such_filter'"},
        {"{{ x is no_such_test }}", "line 1", "no test named 'no_such_test'"},
        {"{% frobnicate %}", "line 1", "unknown tag 'frobnicate'"},
        {"{% endfor %}", "line 1", "unknown tag 'endfor'"},
        {"{% for x in y %}{% endif %}", "line 1", "looking for the following tags: 'endfor' or 'else'"},
        {"{{ 'abc }}", "line 1", "unterminated string"},
        {"{# never closed", "line 1", "missing end of comment"},
        {"{% raw %} no end", "line 1", "missing end of raw"},
        {"{{ (1] }}", "line 1", "unexpected ']', expected ')'"},
        {"{{ 1) }}", "line 1", "unexpected ')'"},
        {"{% macro m(a=1, b) %}{% endmacro %}", "line 1", "non-default argument follows default argument"},
        {"{% break %}", "line 1", "'break' outside of a loop"},
        {"{% include 'other.jinja' %}", "line 1", "not supported"},
        {"{{ '\\x4' }}", "line 1", "truncated \\x escape"},
        {"{{ 99999999999999999999 }}", "line 1", "integer literal too large"},
        {"{{ a ? b }}", "line 1", "unexpected char '?'"},
        {"{% set %}", "line 1", "can't assign"},
        {"{% call m %}{% endcall %}", "line 1", "expected call"},
    };
    for (const Bad& b : bad) {
        std::string msg = parse_error(b.src);
        EXPECT_TRUE(contains(msg, "template: ")) << b.src << " -> " << msg;
        EXPECT_TRUE(contains(msg, b.line)) << b.src << " -> " << msg;
        EXPECT_TRUE(contains(msg, b.says)) << b.src << " -> " << msg;
    }
}

TEST(ChatTemplate, DeepNestingIsRefusedNotOverflowed) {
    std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
    EXPECT_TRUE(contains(parse_error(parens), "nested too deeply")) << parse_error(parens).substr(0, 200);
    std::string nots = "{{ ";
    for (int k = 0; k < 5000; k++) nots += "not ";
    nots += "1 }}";
    EXPECT_TRUE(contains(parse_error(nots), "nested too deeply"));
    std::string ifs;
    for (int k = 0; k < 5000; k++) ifs += "{% if 1 %}";
    EXPECT_TRUE(contains(parse_error(ifs), "nested too deeply"));
    std::string minus = "{{ " + std::string(5000, '-') + "1 }}";
    EXPECT_TRUE(contains(parse_error(minus), "nested too deeply"));
    // Moderate nesting is fine.
    EXPECT_EQ(render("{{ " + std::string(40, '(') + "2" + std::string(40, ')') + " }}"), "2");
}

TEST(ChatTemplate, HugeLoopsStopAtTheStepLimit) {
    ms::TemplateLimits lim;
    lim.max_steps = 300'000;
    std::string msg = render_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", lim);
    EXPECT_TRUE(contains(msg, "exceeded 300000 evaluation steps")) << msg;
    EXPECT_TRUE(contains(msg, "line 1")) << msg;
}

TEST(ChatTemplate, RunawayRecursionStopsAtTheDepthLimit) {
    std::string msg = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    EXPECT_TRUE(contains(msg, "nested deeper than 200")) << msg;
    msg = render_error("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}");
    EXPECT_TRUE(contains(msg, "nested deeper than 200")) << msg;
    // Legitimate recursion well inside the limit works.
    EXPECT_EQ(render("{% macro f(n) %}{% if n %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"), "54321");
}

TEST(ChatTemplate, StackUseIsBounded) {
    // Each recursion level nests 90 statements: fewer than 200 levels
    // already need more stack than the limit allows, in any build.
    std::string body;
    for (int k = 0; k < 90; k++) body += "{% if 1 %}";
    body += "{{ f(n + 1) }}";
    for (int k = 0; k < 90; k++) body += "{% endif %}";
    std::string msg = render_error("{% macro f(n) %}{% if n < 199 %}" + body + "{% endif %}{% endmacro %}{{ f(0) }}");
    EXPECT_TRUE(contains(msg, "template nested too deeply (over 4096 KiB of stack)")) << msg;
    ms::TemplateLimits small;
    small.max_stack = 64 << 10;
    msg = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", small);
    EXPECT_TRUE(contains(msg, "over 64 KiB of stack")) << msg;
}

TEST(ChatTemplate, OutputAndValueSizesAreBounded) {
    ms::TemplateLimits lim;
    lim.max_output = 1 << 20;
    EXPECT_TRUE(contains(render_error("{% for a in range(1000) %}{{ 'x' * 10000 }}{% endfor %}", lim), "rendered output exceeds"));
    // Doubling a string or a list inside a namespace would need 2^60 bytes.
    EXPECT_TRUE(contains(render_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", lim),
                         "output limit"));
    EXPECT_TRUE(contains(render_error("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", lim),
                         "output limit"));
    EXPECT_TRUE(contains(render_error("{{ 'ab' * 1000000000000 }}", lim), "output limit"));
    EXPECT_TRUE(contains(render_error("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}"),
                         "nested too deeply"));
}

TEST(ChatTemplate, SelfReferencesAreSafe) {
    // A namespace holding itself: printing stops at the depth limit; the
    // cycle is freed afterwards (checked by LeakSanitizer in the ASan build).
    EXPECT_TRUE(contains(render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"), "nested too deeply"));
    EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns.me.me.me.a }}"), "1");
    EXPECT_EQ(render("{% for x in [1, 2] %}{{ loop.changed(loop) }}{% endfor %}"), "TrueFalse");  // one LoopContext, as in Jinja2
}

TEST(ChatTemplate, InvalidUtf8BytesPassThroughUnchanged) {
    // Python would refuse such a template; we keep the bytes as they are,
    // also through code-point operations (each bad byte counts as one).
    EXPECT_EQ(render("a\xff\xfe{{ 'c\xc3' }}"), "a\xff\xfe" "c\xc3");
    EXPECT_EQ(render("{{ 'a\xff" "b'[::-1] }}|{{ 'a\xff" "b' | length }}|{{ 'x\xe2\x82' | upper }}"), "b\xff" "a|3|X\xe2\x82");
    EXPECT_EQ(render("{{ '\xf0\x9f' | tojson }}"), "\"\xf0\x9f\"");
}

TEST(ChatTemplate, IntegersBeyondSixtyFourBitsAreAnError) {
    // Python has big integers; we refuse rather than wrap.
    EXPECT_TRUE(contains(render_error("{{ 2 ** 64 }}"), "integer overflow"));
    EXPECT_TRUE(contains(render_error("{{ 9223372036854775807 + 1 }}"), "integer overflow"));
    EXPECT_EQ(render("{{ 2 ** 62 + (2 ** 62 - 1) }}"), "9223372036854775807");
}

TEST(ChatTemplate, RaiseExceptionPassesTheMessageThrough) {
    ms::ChatTemplate t("{% if messages | length == 0 %}{{ raise_exception('No messages: ' ~ 3) }}{% endif %}ok");
    try {
        t.render(ms::Json::parse(R"({"messages": []})"));
        FAIL() << "should raise";
    } catch (const ms::TemplateError& e) {
        EXPECT_STREQ(e.what(), "No messages: 3");
        EXPECT_TRUE(e.raised);
    }
    EXPECT_EQ(t.render(ms::Json::parse(R"({"messages": [1]})")), "ok");
}

TEST(ChatTemplate, RuntimeErrorsNameTheLine) {
    try {
        render("line 1\n{% set x = {} %}\n{{ x.a.b }}");
        FAIL() << "should raise";
    } catch (const ms::TemplateError& e) {
        EXPECT_STREQ(e.what(), "template: line 3: 'dict object' has no attribute 'a'");
        EXPECT_FALSE(e.raised);
    }
}

TEST(ChatTemplate, ContextMustBeAnObject) {
    ms::ChatTemplate t("x");
    EXPECT_THROW(t.render(ms::Json::parse("[1]")), ms::TemplateError);
    EXPECT_EQ(t.render(ms::Json::object()), "x");
}

TEST(ChatTemplate, StrftimeNowDefaultsToToday) {
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char want[32];
    strftime(want, sizeof want, "%Y-%m-%d", &local);
    std::string got = render("{{ strftime_now('%Y-%m-%d') }}");
    // Rendering could straddle midnight; accept the day after too.
    std::time_t later = now + 5;
    std::tm local2{};
    localtime_r(&later, &local2);
    char want2[32];
    strftime(want2, sizeof want2, "%Y-%m-%d", &local2);
    EXPECT_TRUE(got == want || got == want2) << got;

    ms::ChatTemplate t("{{ strftime_now('%d %B %Y') }}");
    std::tm fixed{};
    fixed.tm_year = 2026 - 1900;
    fixed.tm_mday = 15;
    t.set_now(fixed);
    EXPECT_EQ(t.render(ms::Json::object()), "15 January 2026");
}

TEST(ChatTemplate, ChatContextShapesTheVariables) {
    ms::Json messages = ms::Json::parse(R"([{"role": "user", "content": "hi"}])");
    ms::ChatContextOptions opt;
    opt.bos_token = "<s>";
    opt.eos_token = "</s>";
    ms::Json ctx = ms::chat_context(messages, opt);
    EXPECT_EQ(ctx.dump(), R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
    opt.tools = ms::Json::parse(R"([{"type": "function"}])");
    opt.enable_thinking = 0;
    opt.add_generation_prompt = false;
    ctx = ms::chat_context(messages, opt);
    EXPECT_EQ(ctx.dump(),
              R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}], "add_generation_prompt": false, )"
              R"("bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false})");
    ms::ChatTemplate t("{{ bos_token }}{% for m in messages %}{{ m.role }}={{ m.content }}{% endfor %}"
                       "{{ tools is defined }}{{ enable_thinking }}{{ add_generation_prompt }}");
    EXPECT_EQ(t.render(ctx), "<s>user=hiTrueFalseFalse");
}

TEST(ChatTemplate, MovesKeepTheProgram) {
    ms::ChatTemplate a("{{ 1 + 1 }}");
    ms::ChatTemplate b = std::move(a);
    EXPECT_EQ(b.render(ms::Json::object()), "2");
    ms::ChatTemplate c("x");
    c = std::move(b);
    EXPECT_EQ(c.render(ms::Json::object()), "2");
}

}  // namespace
