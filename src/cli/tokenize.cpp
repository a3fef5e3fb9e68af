// moestream tokenize: the token ids (and the bytes each stands for) of a text
// under a model's own tokenizer.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "gguf/gguf.h"
#include "json/json.h"
#include "tokenizer/tokenizer.h"

namespace ms {

namespace {

// A piece as a quoted, readable string: UTF-8 as is, other bytes and
// control characters escaped, so every byte is visible.
std::string show_piece(const std::string& p) {
    std::string out = "'";
    char buf[8];
    for (size_t i = 0; i < p.size();) {
        unsigned char c = uint8_t(p[i]);
        if (c < 0x80) {
            if (c == '\n') out += "\\n";
            else if (c == '\t') out += "\\t";
            else if (c == '\r') out += "\\r";
            else if (c == '\\' || c == '\'') (out += '\\') += char(c);
            else if (c >= 0x20 && c < 0x7F) out += char(c);
            else {
                snprintf(buf, sizeof buf, "\\x%02X", c);
                out += buf;
            }
            i++;
            continue;
        }
        // A complete multi-byte character is printed; anything else byte by byte.
        size_t n = c >= 0xF5 ? 0 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
        bool ok = n && i + n <= p.size();
        for (size_t k = 1; ok && k < n; k++) ok = (uint8_t(p[i + k]) & 0xC0) == 0x80;
        if (ok) {
            out.append(p, i, n);
            i += n;
        } else {
            snprintf(buf, sizeof buf, "\\x%02X", c);
            out += buf;
            i++;
        }
    }
    return out + "'";
}

std::string read_text(const std::string& path) {
    if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot open");
    return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
    std::string model, prompt, file;
    bool ids_only = false, no_special = false, no_bos = false, json = false;
    Args args("moestream tokenize -m MODEL.gguf (-p TEXT | -f FILE) [--ids] [--no-special] [--no-bos] [--json]",
              "Tokenizes a text with the model's own tokenizer (from its GGUF metadata) and prints one line per\n"
              "token: the id and the bytes it stands for, quoted, with control characters and bytes that are not\n"
              "complete UTF-8 escaped as \\n, \\t, \\xNN. BOS is added when the model's metadata asks for it.");
    args.option("-m,--model", &model, "MODEL.gguf", "model (or vocabulary-only) GGUF file; only its metadata is read");
    args.option("-p,--prompt", &prompt, "TEXT", "text to tokenize");
    args.option("-f,--file", &file, "FILE", "read the text from FILE instead ('-' for standard input)");
    args.flag("--ids", &ids_only, "print only the ids, space-separated on one line");
    args.flag("--no-special", &no_special,
              "treat control-token texts such as <|im_end|> as plain text (user-defined tokens still match)");
    args.flag("--no-bos", &no_bos, "never add BOS/EOS, whatever the model's metadata says");
    args.flag("--json", &json, "print one JSON object: ids, pieces and tokenizer facts");
    if (!args.parse(argc, argv)) return 0;
    if (model.empty()) throw std::runtime_error("no model: give -m MODEL.gguf");
    if (args.given("--prompt") == args.given("--file"))
        throw std::runtime_error("give the text with exactly one of -p TEXT or -f FILE");
    const std::string text = args.given("--file") ? read_text(file) : prompt;

    Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(model));
    std::vector<int32_t> ids = tok.encode(text, !no_bos, !no_special);

    if (json) {
        Json j = Json::object();
        j["model"] = model;
        j["tokenizer"] = tok.model();
        j["pre"] = tok.pre();
        j["n_vocab"] = uint64_t(tok.n_vocab());
        j["n_tokens"] = uint64_t(ids.size());
        Json id_list = Json::array(), pieces = Json::array();
        for (int32_t id : ids) {
            id_list.push_back(id);
            pieces.push_back(tok.piece(id));
        }
        j["ids"] = id_list;
        j["pieces"] = pieces;
        printf("%s\n", j.dump(2, true).c_str());  // ASCII: a piece may be part of a character
    } else if (ids_only) {
        std::string line;
        for (int32_t id : ids) {
            if (!line.empty()) line += ' ';
            line += std::to_string(id);
        }
        printf("%s\n", line.c_str());
    } else {
        for (int32_t id : ids) printf("%8d  %s\n", id, show_piece(tok.piece(id)).c_str());
    }
    return 0;
}

}  // namespace ms
