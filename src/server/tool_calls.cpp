#include "server/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace ms {

namespace {

const char* const kDeepSeekBegin = "<｜tool▁calls▁begin｜>";
const char* const kDeepSeekEnd = "<｜tool▁calls▁end｜>";
const char* const kDeepSeekCall = "<｜tool▁call▁begin｜>";
const char* const kDeepSeekSep = "<｜tool▁sep｜>";
const char* const kDeepSeekCallEnd = "<｜tool▁call▁end｜>";
const char* const kGemmaQuote = "<|\"|>";

// Where a call opens and closes in each format.
struct Markers {
    const char* open;
    const char* close;
};

Markers markers(ToolFormat f) {
    switch (f) {
        case ToolFormat::QwenJson:
        case ToolFormat::QwenXml:
        case ToolFormat::Glm: return {"<tool_call>", "</tool_call>"};
        case ToolFormat::MiniMax: return {"<minimax:tool_call>", "</minimax:tool_call>"};
        case ToolFormat::DeepSeek: return {kDeepSeekBegin, kDeepSeekEnd};
        case ToolFormat::Gemma4: return {"<|tool_call>", "<tool_call|>"};
        case ToolFormat::Mistral: return {"[TOOL_CALLS]", nullptr};  // a JSON array to the end
        case ToolFormat::None: break;
    }
    return {nullptr, nullptr};
}

std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The text between open and close after *at (advancing past close), or
// false when either is missing.
bool between(const std::string& s, size_t* at, const std::string& open, const std::string& close, std::string* out) {
    const size_t b = s.find(open, *at);
    if (b == std::string::npos) return false;
    const size_t e = s.find(close, b + open.size());
    if (e == std::string::npos) return false;
    *out = s.substr(b + open.size(), e - b - open.size());
    *at = e + close.size();
    return true;
}

// The JSON type a tool's schema gives parameter `key` ("" when it does not say).
std::string schema_type(const Json& tools, const std::string& name, const std::string& key) {
    if (!tools.is_array()) return "";
    for (const Json& t : tools.as_array()) {
        const Json* fn = t.find("function");
        const Json* n = fn ? fn->find("name") : nullptr;
        if (!n || !n->is_string() || n->as_string() != name) continue;
        const Json* props = fn->find("parameters") ? fn->at("parameters").find("properties") : nullptr;
        const Json* p = props && props->is_object() ? props->find(key) : nullptr;
        const Json* type = p && p->is_object() ? p->find("type") : nullptr;
        return type && type->is_string() ? type->as_string() : "";
    }
    return "";
}

// A value written as plain text (XML formats): a string where the schema
// says so or where it is not JSON, else the JSON it spells.
Json xml_value(const Json& tools, const std::string& name, const std::string& key, const std::string& raw) {
    const std::string v = trim(raw);
    if (schema_type(tools, name, key) != "string") {
        try {
            return Json::parse(v);
        } catch (const std::runtime_error&) {
        }
    }
    return Json(v);
}

// {"name", "arguments"} from a JSON call (Qwen3, Mistral); arguments may be
// an object or a string holding one.
bool json_call(const Json& j, ToolCall* out) {
    const Json* name = j.is_object() ? j.find("name") : nullptr;
    if (!name || !name->is_string() || name->as_string().empty()) return false;
    out->name = name->as_string();
    const Json* args = j.find("arguments");
    if (!args || args->is_null()) {
        out->arguments = "{}";
    } else if (args->is_string()) {
        out->arguments = Json::parse(args->as_string()).dump();
    } else {
        out->arguments = args->dump();
    }
    return true;
}

// Gemma 4's argument syntax: bare keys, strings between <|"|> marks; as JSON.
std::string gemma_json(const std::string& s) {
    std::string out;
    const std::string q = kGemmaQuote;
    for (size_t i = 0; i < s.size();) {
        if (s.compare(i, q.size(), q) == 0) {
            const size_t e = s.find(q, i + q.size());
            if (e == std::string::npos) throw std::runtime_error("unterminated string");
            out += Json(s.substr(i + q.size(), e - i - q.size())).dump();
            i = e + q.size();
        } else if (std::isalpha(static_cast<unsigned char>(s[i])) || s[i] == '_') {
            size_t e = i;
            while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) e++;
            const std::string word = s.substr(i, e - i);
            const bool key = e < s.size() && s[e] == ':';
            out += key || (word != "true" && word != "false" && word != "null") ? Json(word).dump() : word;
            i = e;
        } else {
            out += s[i++];
        }
    }
    return out;
}

// One call's body (between the format's markers) -> name and arguments.
bool parse_call(ToolFormat f, const std::string& body, const Json& tools, ToolCall* out) {
    switch (f) {
        case ToolFormat::QwenJson: return json_call(Json::parse(trim(body)), out);
        case ToolFormat::QwenXml:
        case ToolFormat::MiniMax: {
            const bool xml = f == ToolFormat::QwenXml;
            size_t at = 0;
            std::string name;
            if (xml) {
                const size_t b = body.find("<function="), e = body.find('>', b);
                if (b == std::string::npos || e == std::string::npos) return false;
                name = body.substr(b + 10, e - b - 10);
                at = e + 1;
            } else {
                const size_t b = body.find("<invoke name=\""), e = body.find("\">", b);
                if (b == std::string::npos || e == std::string::npos) return false;
                name = body.substr(b + 14, e - b - 14);
                at = e + 2;
            }
            Json args = Json::object();
            for (;;) {
                const size_t b = body.find(xml ? "<parameter=" : "<parameter name=\"", at);
                if (b == std::string::npos) break;
                const size_t kb = b + (xml ? 11 : 17);
                const size_t ke = body.find(xml ? ">" : "\">", kb);
                const size_t ve = ke == std::string::npos ? ke : body.find("</parameter>", ke);
                if (ve == std::string::npos) return false;
                const std::string key = body.substr(kb, ke - kb);
                const size_t vb = ke + (xml ? 1 : 2);
                args[key] = xml_value(tools, name, key, body.substr(vb, ve - vb));
                at = ve + 12;
            }
            out->name = trim(name);
            out->arguments = args.dump();
            return !out->name.empty();
        }
        case ToolFormat::Glm: {
            const size_t first = body.find("<arg_key>");
            out->name = trim(body.substr(0, first));
            Json args = Json::object();
            size_t at = first == std::string::npos ? body.size() : first;
            std::string key, value;
            while (between(body, &at, "<arg_key>", "</arg_key>", &key) &&
                   between(body, &at, "<arg_value>", "</arg_value>", &value)) {
                args[trim(key)] = xml_value(tools, out->name, trim(key), value);
            }
            out->arguments = args.dump();
            return !out->name.empty();
        }
        case ToolFormat::Gemma4: {
            if (body.compare(0, 5, "call:") != 0) return false;
            const size_t brace = body.find('{');
            if (brace == std::string::npos) return false;
            out->name = trim(body.substr(5, brace - 5));
            out->arguments = Json::parse(gemma_json(body.substr(brace))).dump();
            return !out->name.empty();
        }
        default: return false;
    }
}

}  // namespace

ToolFormat tool_format(const std::string& t) {
    if (t.find("minimax:tool_call") != std::string::npos) return ToolFormat::MiniMax;
    if (t.find("tool▁calls▁begin") != std::string::npos) return ToolFormat::DeepSeek;
    if (t.find("<|tool_call>") != std::string::npos) return ToolFormat::Gemma4;
    if (t.find("[TOOL_CALLS]") != std::string::npos) return ToolFormat::Mistral;
    if (t.find("<arg_key>") != std::string::npos) return ToolFormat::Glm;
    if (t.find("<function=") != std::string::npos) return ToolFormat::QwenXml;
    if (t.find("<tool_call>") != std::string::npos) return ToolFormat::QwenJson;
    return ToolFormat::None;
}

bool tool_markers_are_control(ToolFormat f) {
    return f == ToolFormat::DeepSeek || f == ToolFormat::Gemma4 || f == ToolFormat::Mistral;
}

ParsedReply parse_tool_calls(ToolFormat f, const std::string& text, const Json& tools) {
    ParsedReply r;
    const Markers m = markers(f);
    if (!m.open) {
        r.content = text;
        return r;
    }
    const std::string open = m.open;
    std::string rest;  // text outside the calls
    size_t at = 0;      // the text from here on is not yet in rest
    size_t search = 0;  // where the next call may open
    for (;;) {
        const size_t b = text.find(open, search);
        if (b == std::string::npos) break;
        const size_t body = b + open.size();
        const size_t e = m.close ? text.find(m.close, body) : text.size();
        if (e == std::string::npos) break;  // unfinished: left as text
        std::vector<ToolCall> calls;
        try {
            const std::string inner = text.substr(body, e - body);
            if (f == ToolFormat::Mistral) {
                const Json a = Json::parse(trim(inner));
                for (const Json& c : a.is_array() ? a.as_array() : Json::Array{a}) {
                    ToolCall call;
                    if (!json_call(c, &call)) throw std::runtime_error("not a call");
                    calls.push_back(call);
                }
            } else if (f == ToolFormat::DeepSeek) {
                size_t p = 0;
                std::string one;
                while (between(inner, &p, kDeepSeekCall, kDeepSeekCallEnd, &one)) {
                    const size_t sep = one.find(kDeepSeekSep);
                    if (sep == std::string::npos) throw std::runtime_error("no separator");
                    ToolCall call{trim(one.substr(0, sep)),
                                  Json::parse(trim(one.substr(sep + std::string(kDeepSeekSep).size()))).dump()};
                    calls.push_back(call);
                }
                if (calls.empty()) throw std::runtime_error("no call");
            } else {
                ToolCall call;
                if (!parse_call(f, inner, tools, &call)) throw std::runtime_error("not a call");
                calls.push_back(call);
            }
        } catch (const std::runtime_error&) {
            search = body;  // not a call after all: text
            continue;
        }
        rest += text.substr(at, b - at);
        r.calls.insert(r.calls.end(), calls.begin(), calls.end());
        at = search = m.close ? e + std::string(m.close).size() : text.size();
    }
    rest += text.substr(at);
    r.content = r.calls.empty() ? text : trim(rest);
    return r;
}

Json assistant_message(ToolFormat f, const std::string& reply, const Json& tools) {
    const ParsedReply parsed = parse_tool_calls(f, reply, tools);
    Json m = Json::object();
    m["role"] = "assistant";
    m["content"] = parsed.content;
    if (parsed.calls.empty()) return m;
    Json calls = Json::array();
    for (const ToolCall& c : parsed.calls) {
        Json fn = Json::object();
        fn["name"] = c.name;
        fn["arguments"] = Json::parse(c.arguments);
        Json call = Json::object();
        call["type"] = "function";
        call["function"] = fn;
        calls.push_back(std::move(call));
    }
    m["tool_calls"] = calls;
    return m;
}

size_t tool_free_prefix(ToolFormat f, const std::string& text) {
    const Markers m = markers(f);
    if (!m.open) return text.size();
    const std::string open = m.open;
    const size_t b = text.find(open);
    if (b != std::string::npos) return b;
    for (size_t k = std::min(open.size() - 1, text.size()); k > 0; k--) {
        if (text.compare(text.size() - k, k, open, 0, k) == 0) return text.size() - k;
    }
    return text.size();
}

}  // namespace ms
