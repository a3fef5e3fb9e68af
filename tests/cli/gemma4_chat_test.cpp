// `chat` on a golden gemma4 file with Gemma 4's own chat template (the golden
// google-gemma-4-31B-it.jinja): the prompt it renders (--verbose-prompt) with
// --think on, --think off and --tools is, byte for byte, what Jinja2 renders
// for the same conversation (tests/tokenizer/jinja_reference.json's
// thinking_on / thinking_off contexts; the golden chat "tools" case up to the
// model's turn), with the model's own BOS text where the references have
// <|bos|>. A call the model writes is parsed by assistant_message
// (tests/server/tool_calls_test.cpp checks it on the golden Gemma 4 call).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "json/json.h"
#include "run_cli.h"
#include "../golden_required.h"

using ms::Json;

namespace {

const std::string kGolden = MOESTREAM_GOLDEN_DIR;
const std::string kModel = kGolden + "/models/gemma4-Q8_0.gguf";
const std::string kTemplate = kGolden + "/chat/templates/google-gemma-4-31B-it.jinja";

class Gemma4Chat : public ::testing::Test {
protected:
    void SetUp() override { tmp_ = "/tmp/moestream-g4chat-" + std::to_string(getpid()); }
    void TearDown() override {
        for (const char* ext : {".in", ".tools.json"}) std::remove((tmp_ + ext).c_str());
    }

    // The prompts `chat ARGS` renders for the user lines `input`, in order.
    std::vector<std::string> prompts(const std::string& args, const std::string& input) {
        std::ofstream(tmp_ + ".in", std::ios::binary) << input;
        CliResult r = run_shell(std::string(MOESTREAM_BINARY) + " chat -m " + kModel + " --chat-template-file " +
                                kTemplate + " --verbose-prompt -n 3 -c 512 -t 2 --temp 0 " + args + " < " + tmp_ +
                                ".in 2>&1 >/dev/null");
        EXPECT_EQ(r.rc, 0) << r.out;
        std::vector<std::string> out;
        const std::string mark = "prompt (";
        for (size_t at = r.out.find(mark); at != std::string::npos; at = r.out.find(mark, at)) {
            const size_t colon = r.out.find(" bytes):\n", at);
            if (colon == std::string::npos) break;
            const size_t n = std::stoul(r.out.substr(at + mark.size(), colon - at - mark.size()));
            const size_t text = colon + 9;
            out.push_back(r.out.substr(text, n));
            at = text + n;
        }
        return out;
    }

    // A reference rendering with the model's BOS text for the context's.
    static std::string with_model_bos(const std::string& expected, const std::string& bos) {
        EXPECT_EQ(expected.rfind(bos, 0), 0u);
        CliResult t = run_cli("tokenize -m " + kModel + " -p x", false);  // first line: 2  '<bos>'
        const size_t q = t.out.find('\'');
        return t.out.substr(q + 1, t.out.find('\'', q + 1) - q - 1) + expected.substr(bos.size());
    }

    // Jinja2's rendering of jinja_reference.json's context `name` with the
    // Gemma 4 template.
    static std::string jinja_reference(const std::string& name, Json* context) {
        const Json ref = Json::parse_file(std::string(MOESTREAM_SOURCE_DIR) + "/tests/tokenizer/jinja_reference.json");
        *context = ref.at("chat_contexts").at(name);
        for (const Json& c : ref.at("chat").as_array()) {
            if (c.at("template").as_string() == "google-gemma-4-31B-it.jinja" && c.at("context").as_string() == name)
                return c.at("expected").as_string();
        }
        ADD_FAILURE() << "no Gemma 4 rendering of " << name;
        return "";
    }

    std::string tmp_;
};

TEST_F(Gemma4Chat, ThinkOnRendersAsJinja2) {
    Json ctx;
    const std::string want = jinja_reference("thinking_on", &ctx);
    // system "  sys with spaces  ", user "hi", enable_thinking true.
    const Json& m = ctx.at("messages");
    ASSERT_TRUE(ctx.at("enable_thinking").as_bool());
    const std::vector<std::string> got =
        prompts("--think on --system '" + m[0].at("content").as_string() + "'", m[1].at("content").as_string() + "\n");
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0], with_model_bos(want, ctx.at("bos_token").as_string()));
}

TEST_F(Gemma4Chat, ThinkOffRendersAsJinja2AndTheReplyStaysInTheConversation) {
    Json ctx;
    const std::string want = jinja_reference("thinking_off", &ctx);
    ASSERT_FALSE(ctx.at("enable_thinking").as_bool());
    const std::string user = ctx.at("messages")[0].at("content").as_string();
    const std::vector<std::string> got = prompts("--think off", user + "\n" + user + "\n");
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], with_model_bos(want, ctx.at("bos_token").as_string()));
    // The second turn renders the first, the reply closed by <turn|>, then
    // the second user turn.
    EXPECT_EQ(got[1].rfind(got[0].substr(0, got[0].find("<|turn>model\n")), 0), 0u);
    EXPECT_NE(got[1].find("<turn|>\n<|turn>user\n" + user + "<turn|>\n<|turn>model\n"), std::string::npos);
}

TEST_F(Gemma4Chat, ToolsRenderAsTheGoldenCase) {
    const Json cases = Json::parse_file(kGolden + "/chat/cases.json");
    const Json* tools_case = nullptr;
    for (const Json& c : cases.as_array())
        if (c.at("template").as_string() == "google-gemma-4-31B-it.jinja" && c.at("case").as_string() == "tools")
            tools_case = &c;
    ASSERT_NE(tools_case, nullptr);
    const Json& ctx = tools_case->at("context");
    std::ofstream(tmp_ + ".tools.json") << ctx.at("tools").dump();
    // The golden conversation up to the model's turn, which then writes its
    // call: the tool declarations in the system turn, the user's question.
    const std::string expected = tools_case->at("expected").as_string();
    const std::string head = "<|turn>model\n";
    const size_t model_turn = expected.find(head);
    ASSERT_NE(model_turn, std::string::npos);
    const std::string want =
        with_model_bos(expected.substr(0, model_turn + head.size()), ctx.at("bos_token").as_string());
    const std::vector<std::string> got =
        prompts("--tools " + tmp_ + ".tools.json", ctx.at("messages")[0].at("content").as_string() + "\n");
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].substr(0, want.size()), want);
}

}  // namespace
