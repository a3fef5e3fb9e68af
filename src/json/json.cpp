#include "json/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ms {

namespace {

struct Parser {
    std::string_view s;
    size_t i = 0;
    const std::string& what;
    const JsonLimits& limits;
    int depth = 0;

    [[noreturn]] void fail(const char* msg) const {
        size_t line = 1, col = 1;
        for (size_t k = 0; k < i && k < s.size(); ++k) {
            if (s[k] == '\n') { ++line; col = 1; } else { ++col; }
        }
        throw std::runtime_error(what + ": JSON error at line " + std::to_string(line) + " col " +
                                 std::to_string(col) + ": " + msg);
    }
    void ws() {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
    }
    bool eat(char c) {
        ws();
        if (i < s.size() && s[i] == c) { ++i; return true; }
        return false;
    }
    void expect(char c) {
        if (!eat(c)) {
            char msg[32];
            snprintf(msg, sizeof msg, "expected '%c'", c);
            fail(msg);
        }
    }
    uint32_t hex4() {
        if (i + 4 > s.size()) fail("truncated \\u escape");
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
            char c = s[i++];
            v <<= 4;
            if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
            else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
            else fail("bad hex digit in \\u escape");
        }
        return v;
    }
    std::string string() {
        expect('"');
        std::string out;
        while (true) {
            if (i >= s.size()) fail("unterminated string");
            char c = s[i++];
            if (c == '"') break;
            if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
            if (c != '\\') { out += c; continue; }
            if (i >= s.size()) fail("unterminated escape");
            char e = s[i++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    uint32_t cp = hex4();
                    if (cp >= 0xD800 && cp < 0xDC00 && i + 6 <= s.size() && s[i] == '\\' && s[i + 1] == 'u') {
                        size_t save = i;
                        i += 2;
                        uint32_t lo = hex4();
                        if (lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        else i = save;
                    }
                    utf8_append(out, cp);
                    break;
                }
                default: fail("bad escape");
            }
        }
        return out;
    }
    Json number() {
        size_t start = i;
        bool is_int = true;
        if (i < s.size() && s[i] == '-') ++i;
        if (i >= s.size() || !isdigit(static_cast<unsigned char>(s[i]))) fail("bad number");
        // RFC 8259: an integer part is 0 or starts with 1-9 (01 is no JSON number).
        if (s[i] == '0' && i + 1 < s.size() && isdigit(static_cast<unsigned char>(s[i + 1]))) fail("bad number (leading zero)");
        while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) ++i;
        if (i < s.size() && s[i] == '.') {
            is_int = false;
            ++i;
            if (i >= s.size() || !isdigit(static_cast<unsigned char>(s[i]))) fail("bad number");
            while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) ++i;
        }
        if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
            is_int = false;
            ++i;
            if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
            if (i >= s.size() || !isdigit(static_cast<unsigned char>(s[i]))) fail("bad number");
            while (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) ++i;
        }
        std::string tok(s.substr(start, i - start));
        // "-0" stays a double, so -0.0 dumps and parses back as itself.
        if (is_int && tok.size() < 19 && tok != "-0") return Json(int64_t(std::stoll(tok)));
        return Json(std::strtod(tok.c_str(), nullptr));
    }
    // Keys are appended as read and checked once per object, so an object of
    // n keys costs n log n, not the n^2 of a lookup per key.
    void merge_duplicates(Json::Object& obj) {
        if (obj.size() < 2) return;
        std::vector<size_t> order(obj.size());
        for (size_t k = 0; k < order.size(); k++) order[k] = k;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return obj[a].first < obj[b].first; });
        std::vector<bool> drop(obj.size(), false);
        bool any = false;
        for (size_t r = 0; r < order.size();) {
            size_t e = r + 1;
            while (e < order.size() && obj[order[e]].first == obj[order[r]].first) e++;
            if (e - r > 1) {
                if (!limits.allow_duplicate_keys) fail(("duplicate key '" + obj[order[r]].first + "'").c_str());
                obj[order[r]].second = std::move(obj[order[e - 1]].second);
                for (size_t k = r + 1; k < e; k++) drop[order[k]] = true;
                any = true;
            }
            r = e;
        }
        if (!any) return;
        size_t w = 0;
        for (size_t k = 0; k < obj.size(); k++)
            if (!drop[k]) {
                if (w != k) obj[w] = std::move(obj[k]);
                w++;
            }
        obj.resize(w);
    }
    Json value() {
        ws();
        if (i >= s.size()) fail("unexpected end of input");
        Json out;
        const char c = s[i];
        const bool nested = c == '{' || c == '[';
        if (nested && ++depth > limits.max_depth) fail("nesting too deep");
        if (c == '{') {
            ++i;
            out = Json::object();
            if (!eat('}')) {
                Json::Object& obj = out.as_object();
                do {
                    ws();
                    std::string key = string();
                    expect(':');
                    obj.emplace_back(std::move(key), value());
                } while (eat(','));
                expect('}');
                merge_duplicates(obj);
            }
        } else if (c == '[') {
            ++i;
            out = Json::array();
            if (!eat(']')) {
                do { out.push_back(value()); } while (eat(','));
                expect(']');
            }
        } else if (c == '"') {
            out = Json(string());
        } else if (s.substr(i, 4) == "true") {
            i += 4; out = Json(true);
        } else if (s.substr(i, 5) == "false") {
            i += 5; out = Json(false);
        } else if (s.substr(i, 4) == "null") {
            i += 4;
        } else {
            out = number();
        }
        if (nested) --depth;
        return out;
    }
};

[[noreturn]] void kind_error(const char* want) {
    throw std::runtime_error(std::string("JSON value is not ") + want);
}

void format_number(std::string& out, double v) {
    if (!std::isfinite(v)) { out += "null"; return; }
    char buf[32];
    // Shortest representation that round-trips.
    for (int prec = 6; prec <= 17; ++prec) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    out += buf;
}

}  // namespace

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

Json Json::parse(std::string_view text, const std::string& what, const JsonLimits& limits) {
    if (text.size() > limits.max_bytes) {
        throw std::runtime_error(what + ": JSON text of " + std::to_string(text.size()) + " bytes exceeds the limit of " +
                                 std::to_string(limits.max_bytes));
    }
    Parser p{text, 0, what, limits};
    Json v = p.value();
    p.ws();
    if (p.i != text.size()) p.fail("trailing characters after the value");
    return v;
}

Json Json::parse_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    std::stringstream ss;
    ss << f.rdbuf();
    return parse(ss.str(), path);
}

bool Json::as_bool() const { if (kind_ != Kind::Bool) kind_error("a bool"); return bool_; }
double Json::as_number() const { if (kind_ != Kind::Number) kind_error("a number"); return num_; }
int64_t Json::as_int() const {
    if (kind_ != Kind::Number) kind_error("a number");
    return is_int_ ? int_ : int64_t(num_);
}
const std::string& Json::as_string() const { if (kind_ != Kind::String) kind_error("a string"); return str_; }
const Json::Array& Json::as_array() const { if (kind_ != Kind::Array) kind_error("an array"); return arr_; }
Json::Array& Json::as_array() { if (kind_ != Kind::Array) kind_error("an array"); return arr_; }
const Json::Object& Json::as_object() const { if (kind_ != Kind::Object) kind_error("an object"); return obj_; }
Json::Object& Json::as_object() { if (kind_ != Kind::Object) kind_error("an object"); return obj_; }

Json& Json::operator[](const std::string& key) {
    if (kind_ == Kind::Null) kind_ = Kind::Object;
    if (kind_ != Kind::Object) kind_error("an object");
    for (auto& kv : obj_)
        if (kv.first == key) return kv.second;
    obj_.emplace_back(key, Json());
    return obj_.back().second;
}

const Json* Json::find(std::string_view key) const {
    if (kind_ != Kind::Object) return nullptr;
    for (auto& kv : obj_)
        if (kv.first == key) return &kv.second;
    return nullptr;
}

const Json& Json::at(std::string_view key) const {
    const Json* v = find(key);
    if (!v) throw std::runtime_error("JSON object has no key '" + std::string(key) + "'");
    return *v;
}

void Json::push_back(Json v) {
    if (kind_ == Kind::Null) kind_ = Kind::Array;
    if (kind_ != Kind::Array) kind_error("an array");
    arr_.push_back(std::move(v));
}

const Json& Json::operator[](size_t i) const {
    if (kind_ != Kind::Array) kind_error("an array");
    if (i >= arr_.size()) throw std::runtime_error("JSON array index out of range");
    return arr_[i];
}

size_t Json::size() const {
    switch (kind_) {
        case Kind::Array: return arr_.size();
        case Kind::Object: return obj_.size();
        case Kind::String: return str_.size();
        default: return 0;
    }
}

void json_quote(std::string& out, std::string_view s, bool ensure_ascii) {
    out += '"';
    for (size_t k = 0; k < s.size(); ++k) {
        unsigned char c = static_cast<unsigned char>(s[k]);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else if (c >= 0x80 && ensure_ascii) {
                    // Decode one UTF-8 sequence; invalid bytes pass through as U+FFFD.
                    uint32_t cp = 0xFFFD;
                    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
                    if (len > 1 && k + len <= s.size()) {
                        cp = c & (0x3F >> (len - 1));
                        for (int j = 1; j < len; ++j) cp = (cp << 6) | (static_cast<unsigned char>(s[k + j]) & 0x3F);
                        k += len - 1;
                    }
                    char buf[16];
                    if (cp >= 0x10000) {
                        cp -= 0x10000;
                        snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
                    } else {
                        snprintf(buf, sizeof buf, "\\u%04x", cp);
                    }
                    out += buf;
                } else {
                    out += char(c);
                }
        }
    }
    out += '"';
}

std::string Json::dump(int indent, bool ensure_ascii) const {
    std::string out;
    dump_to(out, indent, 0, ensure_ascii);
    return out;
}

void Json::dump_to(std::string& out, int indent, int depth, bool ensure_ascii) const {
    auto newline = [&](int d) {
        if (indent < 0) return;
        out += '\n';
        out.append(size_t(indent) * size_t(d), ' ');
    };
    switch (kind_) {
        case Kind::Null: out += "null"; break;
        case Kind::Bool: out += bool_ ? "true" : "false"; break;
        case Kind::Number:
            if (is_int_) out += std::to_string(int_);
            else format_number(out, num_);
            break;
        case Kind::String: json_quote(out, str_, ensure_ascii); break;
        case Kind::Array:
            out += '[';
            for (size_t k = 0; k < arr_.size(); ++k) {
                if (k) out += indent < 0 ? ", " : ",";
                newline(depth + 1);
                arr_[k].dump_to(out, indent, depth + 1, ensure_ascii);
            }
            if (!arr_.empty()) newline(depth);
            out += ']';
            break;
        case Kind::Object:
            out += '{';
            for (size_t k = 0; k < obj_.size(); ++k) {
                if (k) out += indent < 0 ? ", " : ",";
                newline(depth + 1);
                json_quote(out, obj_[k].first, ensure_ascii);
                out += ": ";
                obj_[k].second.dump_to(out, indent, depth + 1, ensure_ascii);
            }
            if (!obj_.empty()) newline(depth);
            out += '}';
            break;
    }
}

}  // namespace ms
