// Every case of golden/chat/cases.json: the model family's own chat template,
// rendered with the case's context, must equal what Jinja2 3.1 produced under
// Hugging Face's settings byte for byte, or raise the recorded message.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/chat_template.h"
#include "../golden_required.h"

namespace {

struct Case {
    std::string name, template_file;
    ms::Json context;
    bool raises = false;
    std::string expected;  // rendered text, or the raised message
};

std::string golden(const std::string& rel) { return std::string(MOESTREAM_GOLDEN_DIR) + "/chat/" + rel; }

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::vector<Case> load_cases() {
    std::vector<Case> cases;
    if (!ms::golden::available()) return cases;  // the program skips (golden_required.h)
    ms::Json all = ms::Json::parse_file(golden("cases.json"));
    for (const ms::Json& c : all.as_array()) {
        Case k;
        k.template_file = c.at("template").as_string();
        k.name = k.template_file.substr(0, k.template_file.rfind('.')) + "_" + c.at("case").as_string();
        for (char& ch : k.name)
            if (!isalnum(uint8_t(ch))) ch = '_';
        k.context = c.at("context");
        k.raises = c.contains("error");
        k.expected = (k.raises ? c.at("error") : c.at("expected")).as_string();
        cases.push_back(std::move(k));
    }
    return cases;
}

std::tm golden_date() {
    std::tm t{};
    t.tm_year = 2026 - 1900;
    t.tm_mon = 0;
    t.tm_mday = 15;
    t.tm_wday = 4;  // a Thursday
    t.tm_yday = 14;
    return t;
}

class ChatGolden : public ::testing::TestWithParam<Case> {};

TEST_P(ChatGolden, RendersLikeTransformers) {
    const Case& c = GetParam();
    ms::ChatTemplate tmpl(read_file(golden("templates/" + c.template_file)));
    tmpl.set_now(golden_date());
    if (!c.raises) {
        EXPECT_EQ(tmpl.render(c.context), c.expected);
        return;
    }
    try {
        std::string out = tmpl.render(c.context);
        FAIL() << "expected the template to raise \"" << c.expected << "\", but it rendered:\n" << out;
    } catch (const ms::TemplateError& e) {
        EXPECT_EQ(std::string(e.what()), c.expected);
    }
}

TEST(ChatGoldenFile, HasCases) { EXPECT_GE(load_cases().size(), 59u); }

INSTANTIATE_TEST_SUITE_P(Cases, ChatGolden, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
