// `moestream template` end to end: every golden chat case rendered through
// the command line byte for byte (no added newline), raised errors as one
// line with exit status 1, and -m reading the template and BOS/EOS text from
// a GGUF.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <sys/wait.h>
#include <unistd.h>

#include "json/json.h"
#include "../golden_required.h"

namespace {

struct CliResult {
    int status;
    std::string out, err;
};

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Every temporary file the tests make, removed when the process ends (they
// were left in /tmp before).
struct TempFiles {
    std::set<std::string> paths;
    ~TempFiles() {
        for (const std::string& p : paths) std::remove(p.c_str());
    }
};

std::string tmp_path(const std::string& name) {
    static TempFiles files;
    std::string path = testing::TempDir() + "/template_test_" + std::to_string(getpid()) + "_" + name;
    files.paths.insert(path);
    return path;
}

void write_file(const std::string& path, const std::string& data) {
    std::ofstream f(path, std::ios::binary);
    f << data;
}

CliResult run(const std::string& args) {
    std::string out = tmp_path("stdout"), err = tmp_path("stderr");
    std::string cmd = std::string(MOESTREAM_BINARY) + " template " + args + " >" + out + " 2>" + err;
    int rc = system(cmd.c_str());
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(out), slurp(err)};
}

const std::string kGolden = MOESTREAM_GOLDEN_DIR;

TEST(TemplateCli, EveryGoldenCase) {
    ms::Json cases = ms::Json::parse_file(kGolden + "/chat/cases.json");
    int checked = 0;
    for (const ms::Json& c : cases.as_array()) {
        std::string name = c.at("template").as_string() + "/" + c.at("case").as_string();
        std::string ctx = tmp_path("ctx.json");
        write_file(ctx, c.at("context").dump());
        CliResult r = run("--template " + kGolden + "/chat/templates/" + c.at("template").as_string() + " --context " + ctx +
                    " --date 2026-01-15");
        if (c.contains("error")) {
            EXPECT_EQ(r.status, 1) << name;
            EXPECT_EQ(r.out, "") << name;
            EXPECT_EQ(r.err, "moestream template: error: " + c.at("error").as_string() + "\n") << name;
        } else {
            EXPECT_EQ(r.status, 0) << name << ": " << r.err;
            EXPECT_EQ(r.out, c.at("expected").as_string()) << name;
        }
        checked++;
    }
    EXPECT_GE(checked, 59);
}

// A minimal GGUF v3 with only metadata: a chat template, a vocabulary and
// BOS/EOS ids, written here byte by byte.
std::string tiny_gguf(const std::string& chat_template, bool with_ids = true) {
    std::string b;
    auto u32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
    auto u64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
    auto str = [&](const std::string& s) { u64(s.size()); b += s; };
    b += "GGUF";
    u32(3);
    u64(0);  // tensors
    u64(with_ids ? 5 : 3);  // metadata pairs
    str("general.architecture"); u32(8); str("llama");
    str("tokenizer.chat_template"); u32(8); str(chat_template);
    str("tokenizer.ggml.tokens"); u32(9); u32(8); u64(3); str("<unk>"); str("<s>"); str("</s>");
    if (with_ids) {
        str("tokenizer.ggml.bos_token_id"); u32(4); u32(1);
        str("tokenizer.ggml.eos_token_id"); u32(4); u32(2);
    }
    while (b.size() % 32) b += '\0';
    return b;
}

TEST(TemplateCli, ModelSuppliesTemplateAndSpecialTokens) {
    std::string model = tmp_path("tiny.gguf"), ctx = tmp_path("ctx2.json");
    write_file(model, tiny_gguf("{{ bos_token }}[{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}]{{ eos_token }}"));
    write_file(ctx, R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})");
    CliResult r = run("-m " + model + " --context " + ctx);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "<s>[user:hi;]</s>");
    // The context's own tokens win over the model's.
    write_file(ctx, R"({"messages": [], "bos_token": "B", "eos_token": "E"})");
    r = run("-m " + model + " --context " + ctx);
    EXPECT_EQ(r.out, "B[]E");
    // A model without BOS/EOS ids leaves them undefined.
    write_file(model, tiny_gguf("{{ bos_token is defined }} {{ eos_token is defined }}", false));
    write_file(tmp_path("empty.json"), "{}");
    r = run("-m " + model + " --context " + tmp_path("empty.json"));
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "False False");
}

TEST(TemplateCli, QwenVocabularyCarriesTheQwen3Template) {
    // qwen3-vocab.gguf embeds Qwen3's template: rendering a golden Qwen3
    // context through -m must give that case's expected text.
    ms::Json cases = ms::Json::parse_file(kGolden + "/chat/cases.json");
    for (const ms::Json& c : cases.as_array()) {
        if (c.at("template").as_string() != "Qwen-Qwen3-0.6B.jinja" || c.at("case").as_string() != "tools") continue;
        std::string ctx = tmp_path("ctx3.json");
        write_file(ctx, c.at("context").dump());
        CliResult r = run("-m " + kGolden + "/tokenizer/qwen3-vocab.gguf --context " + ctx);
        EXPECT_EQ(r.status, 0) << r.err;
        EXPECT_EQ(r.out, c.at("expected").as_string());
        return;
    }
    FAIL() << "no Qwen3 tools case in cases.json";
}

// The golden model of each family that runs carries its family's template in
// miniature (the GGUF's tokenizer.chat_template); -m renders it with the
// model's own BOS/EOS text. Expected strings: those templates applied by hand.
TEST(TemplateCli, EveryFamilyRendersItsOwnTemplate) {
    std::string ctx = tmp_path("ctx_families.json");
    write_file(ctx, R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                                     {"role": "user", "content": "ok"}], "add_generation_prompt": true})");
    const std::pair<const char*, const char*> cases[] = {
        {"mixtral-Q8_0", "<s>[INST] hi [/INST]yo</s>[INST] ok [/INST]"},
        {"qwen2moe-Q8_0", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
                          "<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n"},
        {"glm4moe-Q8_0", "[gMASK]<sop><|user|>\nhi<|assistant|>\nyo<|user|>\nok<|assistant|>"},
        {"gpt-oss-MXFP4_MOE", "<|start|>user<|message|>hi<|end|><|start|>assistant<|message|>yo<|end|>"
                              "<|start|>user<|message|>ok<|end|><|start|>assistant"},
    };
    for (const auto& [model, expected] : cases) {
        CliResult r = run("-m " + kGolden + "/models/" + model + ".gguf --context " + ctx);
        EXPECT_EQ(r.status, 0) << model << ": " << r.err;
        EXPECT_EQ(r.out, expected) << model;
    }
    // The golden OLMoE file ships no template: one line saying so.
    CliResult r = run("-m " + kGolden + "/models/olmoe-Q8_0.gguf --context " + ctx);
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("tokenizer.chat_template"), std::string::npos) << r.err;
}

TEST(TemplateCli, DateFlagFeedsStrftimeNow) {
    std::string tmpl = tmp_path("date.jinja"), ctx = tmp_path("ctx4.json");
    write_file(tmpl, "{{ strftime_now('%Y-%m-%d %A %d %b %Y') }}");
    write_file(ctx, "{}");
    CliResult r = run("--template " + tmpl + " --context " + ctx + " --date 2024-02-29");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "2024-02-29 Thursday 29 Feb 2024");
    EXPECT_EQ(run("--template " + tmpl + " --context " + ctx + " --date 2023-02-29").status, 1);
}

TEST(TemplateCli, BadInputIsAOneLineError) {
    std::string tmpl = tmp_path("bad.jinja"), ctx = tmp_path("ctx5.json");
    write_file(ctx, R"({"messages": []})");
    write_file(tmpl, "line one\n{% for m in messages %}\n{{ m.content }");
    CliResult r = run("--template " + tmpl + " --context " + ctx);
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.err.find("line 3"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

    write_file(tmpl, "{{ raise_exception('first\nsecond') }}");
    r = run("--template " + tmpl + " --context " + ctx);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "moestream template: error: first second\n");

    write_file(ctx, "[1, 2]");
    EXPECT_EQ(run("--template " + tmpl + " --context " + ctx).status, 1);
    EXPECT_EQ(run("--template " + tmpl).status, 1);                              // no context
    EXPECT_EQ(run("--context " + ctx).status, 1);                                // no template
    EXPECT_EQ(run("--template /nonexistent.jinja --context " + ctx).status, 1);  // unreadable
}

TEST(TemplateCli, HelpListsEveryFlag) {
    CliResult r = run("--help");
    EXPECT_EQ(r.status, 0);
    for (const char* flag : {"--model", "--template", "--template-name", "--context", "--date"})
        EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
}

}  // namespace
