// Tool calls parsed out of replies: each golden chat template's "tools" case
// (rendered by the reference Jinja2) writes an assistant's call to
// get_weather({"city": "Paris"}) in its model's own format; reading the
// format off the template and parsing the rendered call gives that call back.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "json/json.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "../golden_required.h"

namespace ms {
namespace {

const std::string kChat = std::string(MOESTREAM_GOLDEN_DIR) + "/chat";

std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST(ToolCalls, EachTemplatesOwnFormatParses) {
    const Json cases = Json::parse_file(kChat + "/cases.json");
    int parsed = 0;
    for (const Json& c : cases.as_array()) {
        if (c.at("case").as_string() != "tools" || !c.contains("expected")) continue;
        const std::string name = c.at("template").as_string();
        SCOPED_TRACE(name);
        const ToolFormat f = tool_format(read(kChat + "/templates/" + name));
        // Formats this server does not parse: gpt-oss's harmony channels and
        // Llama 3.1's bare JSON.
        if (name.rfind("openai-gpt-oss", 0) == 0 || name.rfind("meta-llama", 0) == 0) {
            EXPECT_EQ(f, ToolFormat::None);
            continue;
        }
        ASSERT_NE(f, ToolFormat::None);
        const Json& ctx = c.at("context");
        const Json& want = ctx.at("messages")[1].at("tool_calls")[0].at("function");
        const std::string& expected = c.at("expected").as_string();
        const std::string question = ctx.at("messages")[0].at("content").as_string();
        const size_t from = expected.find(question);
        ASSERT_NE(from, std::string::npos);
        const ParsedReply r = parse_tool_calls(f, expected.substr(from + question.size()), ctx.at("tools"));
        ASSERT_GE(r.calls.size(), 1u);
        EXPECT_EQ(r.calls[0].name, want.at("name").as_string());
        EXPECT_EQ(Json::parse(r.calls[0].arguments).dump(), want.at("arguments").dump());
        parsed++;
    }
    EXPECT_GE(parsed, 7);
}

// What `chat` keeps of a Gemma 4 reply that calls a tool: the golden "tools"
// case's call, as its model writes it, becomes an assistant message with
// that call; rendered back in the golden conversation, it gives the golden
// text byte for byte.
TEST(ToolCalls, Gemma4ReplyRendersBackAsTheGoldenConversation) {
    const std::string name = "google-gemma-4-31B-it.jinja";
    const Json cases = Json::parse_file(kChat + "/cases.json");
    for (const Json& c : cases.as_array()) {
        if (c.at("template").as_string() != name || c.at("case").as_string() != "tools") continue;
        const std::string source = read(kChat + "/templates/" + name);
        const ToolFormat f = tool_format(source);
        ASSERT_EQ(f, ToolFormat::Gemma4);
        const std::string& expected = c.at("expected").as_string();
        const size_t b = expected.find("<|tool_call>"), e = expected.find("<tool_call|>");
        ASSERT_NE(b, std::string::npos);
        ASSERT_NE(e, std::string::npos);
        const std::string reply = expected.substr(b, e + std::string("<tool_call|>").size() - b);
        Json ctx = c.at("context");
        const Json m = assistant_message(f, reply, ctx.at("tools"));
        const Json& want = ctx.at("messages")[1].at("tool_calls")[0].at("function");
        ASSERT_EQ(m.at("tool_calls").as_array().size(), 1u);
        EXPECT_EQ(m.at("tool_calls")[0].at("function").at("name").as_string(), want.at("name").as_string());
        EXPECT_EQ(m.at("tool_calls")[0].at("function").at("arguments").dump(), want.at("arguments").dump());
        EXPECT_EQ(m.at("content").as_string(), "");
        ctx["messages"].as_array()[1] = m;
        EXPECT_EQ(ChatTemplate(source).render(ctx), expected);
        // Without a call, the reply's exact text.
        EXPECT_EQ(assistant_message(f, "It is 18C.", ctx.at("tools")).at("content").as_string(), "It is 18C.");
        EXPECT_EQ(assistant_message(f, "It is 18C.", ctx.at("tools")).find("tool_calls"), nullptr);
        return;
    }
    FAIL() << "no Gemma 4 tools case";
}

TEST(ToolCalls, TextWithoutACallIsContent) {
    const ParsedReply r = parse_tool_calls(ToolFormat::QwenJson, "<tool_call>not json</tool_call> hi", Json());
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, "<tool_call>not json</tool_call> hi");
    const ParsedReply two = parse_tool_calls(
        ToolFormat::QwenJson,
        "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{}\"}\n</tool_call>",
        Json());
    ASSERT_EQ(two.calls.size(), 2u);
    EXPECT_EQ(two.content, "Let me check.");
    EXPECT_EQ(two.calls[0].arguments, Json::parse("{\"x\": 1}").dump());
    EXPECT_EQ(two.calls[1].name, "b");
}

TEST(ToolCalls, StreamingHoldsBackWhatMayOpenACall) {
    EXPECT_EQ(tool_free_prefix(ToolFormat::QwenJson, "Sure. <tool"), 6u);
    EXPECT_EQ(tool_free_prefix(ToolFormat::QwenJson, "Sure. <tool_call>{"), 6u);
    EXPECT_EQ(tool_free_prefix(ToolFormat::QwenJson, "Sure."), 5u);
    EXPECT_EQ(tool_free_prefix(ToolFormat::None, "Sure. <tool"), 11u);
}

}  // namespace
}  // namespace ms
