// moestream template: renders a chat template (a model's own
// tokenizer.chat_template, or a .jinja file) with a context JSON and prints
// the prompt exactly, so a template can be checked against transformers.
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "gguf/gguf.h"
#include "json/json.h"
#include "tokenizer/chat_template.h"

namespace ms {

namespace {

std::string read_text(const std::string& path) {
    std::stringstream ss;
    if (path == "-") {
        ss << std::cin.rdbuf();
        return ss.str();
    }
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot open");
    ss << f.rdbuf();
    return ss.str();
}

// Sets context[name] to the text of the token the model's `id_key` names
// (e.g. tokenizer.ggml.bos_token_id), unless the context already has it or
// the model names none (then the template sees it undefined).
void default_token(Json& context, const char* name, const GgufFile& f, const char* id_key) {
    if (context.contains(name)) return;
    int64_t id = f.get_int(id_key, -1);
    const std::vector<std::string>& tokens = f.get_strings("tokenizer.ggml.tokens");
    if (id >= 0 && id < int64_t(tokens.size())) context[name] = tokens[size_t(id)];
}

std::tm parse_date(const std::string& s) {
    std::tm t{};
    int y, m, d;
    char tail;
    if (sscanf(s.c_str(), "%d-%d-%d%c", &y, &m, &d, &tail) != 3 || m < 1 || m > 12 || d < 1 || d > 31)
        throw std::runtime_error("--date: expected YYYY-MM-DD, got '" + s + "'");
    t.tm_year = y - 1900;
    t.tm_mon = m - 1;
    t.tm_mday = d;
    t.tm_hour = 12;
    std::tm norm = t;
    timegm(&norm);  // fills in the weekday and day of the year
    if (norm.tm_mday != d) throw std::runtime_error("--date: no such day '" + s + "'");
    norm.tm_hour = 0;
    return norm;
}

// Messages may span lines; the CLI prints errors as one line.
std::string one_line(std::string s) {
    for (char& c : s)
        if (c == '\n' || c == '\r') c = ' ';
    return s;
}

}  // namespace

int cmd_template(int argc, char** argv) {
    std::string model, file, context_path, date, name;
    Args args("moestream template (-m MODEL.gguf | --template FILE.jinja) --context CONTEXT.json",
              "Renders a chat template with the variables in CONTEXT.json and prints the prompt exactly as\n"
              "transformers' apply_chat_template would (no newline is added). CONTEXT.json is an object like the\n"
              "`context` of golden/chat/cases.json: messages, add_generation_prompt, and optionally tools,\n"
              "enable_thinking, bos_token, eos_token or anything else the template reads. With -m the template\n"
              "is the model's tokenizer.chat_template and bos_token/eos_token default to the model's BOS/EOS token\n"
              "text. A template that calls raise_exception() fails with its message and exit status 1.");
    args.option("-m,--model", &model, "MODEL.gguf", "take the template (and BOS/EOS text) from this model");
    args.option("--template", &file, "FILE.jinja", "take the template from this file instead");
    args.option("--template-name", &name, "NAME",
                "with -m: use the named template tokenizer.chat_template.NAME (e.g. tool_use)");
    args.option("--context", &context_path, "CONTEXT.json", "the template variables as a JSON object ('-': stdin)");
    args.option("--date", &date, "YYYY-MM-DD", "the date strftime_now() formats (default: today)");
    if (!args.parse(argc, argv)) return 0;
    if (model.empty() == file.empty()) throw std::runtime_error("give exactly one of -m MODEL.gguf or --template FILE.jinja");
    if (context_path.empty()) throw std::runtime_error("--context CONTEXT.json is required");
    if (!name.empty() && model.empty()) throw std::runtime_error("--template-name needs -m");

    Json context = Json::parse(read_text(context_path), context_path);
    if (!context.is_object()) throw std::runtime_error(context_path + ": expected a JSON object");

    std::string source;
    if (!model.empty()) {
        GgufFile f = GgufFile::open(model);
        std::string key = name.empty() ? "tokenizer.chat_template" : "tokenizer.chat_template." + name;
        source = f.require_string(key);
        default_token(context, "bos_token", f, "tokenizer.ggml.bos_token_id");
        default_token(context, "eos_token", f, "tokenizer.ggml.eos_token_id");
    } else {
        source = read_text(file);
    }

    std::string where = model.empty() ? file : model;
    std::string prompt;
    try {
        ChatTemplate tmpl(source);
        if (!date.empty()) tmpl.set_now(parse_date(date));
        prompt = tmpl.render(context);
    } catch (const TemplateError& e) {
        throw std::runtime_error(e.raised ? one_line(e.what()) : where + ": " + one_line(e.what()));
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(where + ": " + one_line(e.what()));  // syntax errors
    }
    fwrite(prompt.data(), 1, prompt.size(), stdout);
    fflush(stdout);
    return 0;
}

}  // namespace ms
