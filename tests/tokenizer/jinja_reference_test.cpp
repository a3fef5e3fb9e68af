// The interpreter against Jinja2 itself: jinja_reference.json holds small
// templates exercising each feature (whitespace control, loops, macros,
// expressions, filters, tests, scoping, undefined values) and the golden
// chat templates under richer conversations (tool calls, reasoning, content
// parts), all rendered by Jinja2 3.1 with transformers' settings by
// jinja_reference.py. Each output must match byte for byte; where Jinja2
// raised, we must raise with the same message.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/chat_template.h"
#include "../golden_dir.h"

namespace {

struct RefCase {
    std::string name, source;
    ms::Json context;
    bool raises = false;
    std::string expected;  // output, or Jinja2's error message
};

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string safe_name(std::string s) {
    for (char& c : s)
        if (!isalnum(uint8_t(c))) c = '_';
    return s;
}

std::vector<RefCase> load() {
    ms::Json ref = ms::Json::parse_file(std::string(MOESTREAM_SOURCE_DIR) + "/tests/tokenizer/jinja_reference.json");
    std::vector<RefCase> cases;
    auto finish = [&](RefCase c, const ms::Json& j) {
        c.raises = j.contains("error");
        c.expected = (c.raises ? j.at("error") : j.at("expected")).as_string();
        cases.push_back(std::move(c));
    };
    for (const ms::Json& p : ref.at("probes").as_array()) {
        RefCase c;
        c.name = safe_name(p.at("name").as_string());
        c.source = p.at("template").as_string();
        c.context = p.at("context");
        finish(std::move(c), p);
    }
    // The chat cases render golden templates: without them only the
    // probes are generated, and the chat cases are logged as skipped.
    if (!ms::golden::available()) {
        static const std::string logged = ms::golden::skip_reason(int(ref.at("chat").as_array().size()));
        printf("%s\n", logged.c_str());
        return cases;
    }
    for (const ms::Json& p : ref.at("chat").as_array()) {
        RefCase c;
        std::string file = p.at("template").as_string();
        c.name = safe_name(file.substr(0, file.rfind('.')) + "_" + p.at("context").as_string());
        c.source = read_file(std::string(MOESTREAM_GOLDEN_DIR) + "/chat/templates/" + file);
        c.context = ref.at("chat_contexts").at(p.at("context").as_string());
        finish(std::move(c), p);
    }
    return cases;
}

class JinjaReference : public ::testing::TestWithParam<RefCase> {};

TEST_P(JinjaReference, MatchesJinja2) {
    const RefCase& c = GetParam();
    ms::ChatTemplate tmpl(c.source);
    std::tm date{};
    date.tm_year = 2026 - 1900;
    date.tm_mday = 15;
    date.tm_wday = 4;
    date.tm_yday = 14;
    tmpl.set_now(date);
    if (!c.raises) {
        EXPECT_EQ(tmpl.render(c.context), c.expected) << c.source;
        return;
    }
    try {
        std::string out = tmpl.render(c.context);
        ADD_FAILURE() << "Jinja2 raised \"" << c.expected << "\" but we rendered: " << out;
    } catch (const ms::TemplateError& e) {
        // Ours carry "template: line L: " before Jinja2's message.
        std::string msg = e.what();
        EXPECT_TRUE(msg.size() >= c.expected.size() && msg.compare(msg.size() - c.expected.size(), c.expected.size(), c.expected) == 0)
            << "ours: " << msg << "\nJinja2: " << c.expected;
    }
}

TEST(JinjaReferenceFile, IsComplete) {
    SKIP_WITHOUT_GOLDEN();
    std::vector<RefCase> cases = load();
    EXPECT_GE(cases.size(), 300u);
}

INSTANTIATE_TEST_SUITE_P(Corpus, JinjaReference, ::testing::ValuesIn(load()),
                         [](const ::testing::TestParamInfo<RefCase>& info) { return info.param.name; });

}  // namespace
