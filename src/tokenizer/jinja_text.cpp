#include "tokenizer/jinja_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ms::jinja {

uint32_t utf8_next(std::string_view s, size_t& i) {
    auto b = [&](size_t k) { return uint8_t(s[k]); };
    uint8_t c = b(i);
    if (c < 0x80) { i += 1; return c; }
    int n = c >= 0xF5 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : 0;
    if (n == 0 || i + size_t(n) >= s.size()) { i += 1; return 0xDC00 + c; }
    uint32_t cp = c & (0x3F >> n);
    for (int k = 1; k <= n; k++) {
        uint8_t d = b(i + size_t(k));
        if ((d & 0xC0) != 0x80) { i += 1; return 0xDC00 + c; }
        cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid bytes too.
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp < 0xE000)) {
        i += 1;
        return 0xDC00 + c;
    }
    i += size_t(n) + 1;
    return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp >= 0xDC80 && cp <= 0xDCFF) {
        out += char(cp - 0xDC00);  // an undecodable byte, passed through
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

bool is_ascii(std::string_view s) {
    for (char c : s)
        if (uint8_t(c) >= 0x80) return false;
    return true;
}

size_t utf8_length(std::string_view s) {
    if (is_ascii(s)) return s.size();
    size_t n = 0;
    for (size_t i = 0; i < s.size(); n++) utf8_next(s, i);
    return n;
}

std::vector<uint32_t> utf8_decode(std::string_view s) {
    std::vector<uint32_t> cps;
    cps.reserve(s.size());
    for (size_t i = 0; i < s.size();) cps.push_back(utf8_next(s, i));
    return cps;
}

size_t utf8_offset(std::string_view s, size_t cp) {
    if (is_ascii(s)) return cp < s.size() ? cp : s.size();
    size_t i = 0;
    for (size_t k = 0; k < cp && i < s.size(); k++) utf8_next(s, i);
    return i;
}

size_t utf8_index(std::string_view s, size_t off) {
    size_t n = 0;
    for (size_t i = 0; i < off && i < s.size(); n++) utf8_next(s, i);
    return n;
}

static std::string encode(const std::vector<uint32_t>& cps) {
    std::string out;
    out.reserve(cps.size());
    for (uint32_t c : cps) utf8_append(out, c);
    return out;
}

bool py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

bool py_islinebreak(uint32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
}

bool py_isdigit(uint32_t c) { return (c >= '0' && c <= '9') || (c >= 0xFF10 && c <= 0xFF19); }

// Simple one-to-one case pairs for Latin, Greek, Cyrillic, Armenian and
// fullwidth Latin: the scripts chat text and schemas actually use. Special
// multi-character mappings (ß -> SS) are handled at the string level.
uint32_t py_lower(uint32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
    if (c == 0x178) return 0xFF;
    if (c == 0x130) return 'i';
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return c | 1;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 37;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 63;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F)) return c | 1;
    if (c >= 0x531 && c <= 0x556) return c + 48;
    if ((c >= 0x1E00 && c <= 0x1E95) || (c >= 0x1EA0 && c <= 0x1EFF)) return c | 1;
    if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
    return c;
}

uint32_t py_upper(uint32_t c) {
    if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0xB5) return 0x39C;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if ((c >= 0x100 && c <= 0x137 && c != 0x130) || (c >= 0x14A && c <= 0x177)) return c & ~1u;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x3B1 && c <= 0x3C9) return c - 32;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x3AD && c <= 0x3AF) return c - 37;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 63;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F)) return c & ~1u;
    if (c >= 0x561 && c <= 0x586) return c - 48;
    if ((c >= 0x1E00 && c <= 0x1E95) || (c >= 0x1EA0 && c <= 0x1EFF)) return c & ~1u;
    if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
    return c;
}

bool py_iscased(uint32_t c) { return py_lower(c) != c || py_upper(c) != c || c == 0xDF; }

bool py_isalpha(uint32_t c) {
    if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
    if (py_iscased(c) || c == 0xAA || c == 0xBA) return true;
    // CJK ideographs, kana and hangul count as letters in Python.
    return (c >= 0x3040 && c <= 0x30FF) || (c >= 0x3400 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3) ||
           (c >= 0x20000 && c <= 0x2FFFF);
}

std::string str_lower(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) utf8_append(out, py_lower(utf8_next(s, i)));
    return out;
}

std::string str_upper(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        uint32_t c = utf8_next(s, i);
        if (c == 0xDF) out += "SS";
        else utf8_append(out, py_upper(c));
    }
    return out;
}

std::string str_title(std::string_view s) {
    std::string out;
    bool prev_cased = false;
    for (size_t i = 0; i < s.size();) {
        uint32_t c = utf8_next(s, i);
        if (py_iscased(c)) {
            if (prev_cased) utf8_append(out, py_lower(c));
            else if (c == 0xDF) out += "Ss";
            else utf8_append(out, py_upper(c));
            prev_cased = true;
        } else {
            utf8_append(out, c);
            prev_cased = false;
        }
    }
    return out;
}

std::string str_capitalize(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        bool first = i == 0;
        uint32_t c = utf8_next(s, i);
        if (first && c == 0xDF) out += "Ss";
        else utf8_append(out, first ? py_upper(c) : py_lower(c));
    }
    return out;
}

std::string str_swapcase(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        uint32_t c = utf8_next(s, i);
        uint32_t l = py_lower(c);
        if (c == 0xDF) out += "SS";
        else utf8_append(out, l != c ? l : py_upper(c));
    }
    return out;
}

static bool cased_test(std::string_view s, bool want_lower) {
    bool any = false;
    for (size_t i = 0; i < s.size();) {
        uint32_t c = utf8_next(s, i);
        if (!py_iscased(c)) continue;
        bool is_lower = py_upper(c) != c || c == 0xDF;
        if (is_lower != want_lower) return false;
        any = true;
    }
    return any;
}
bool str_islower(std::string_view s) { return cased_test(s, true); }
bool str_isupper(std::string_view s) { return cased_test(s, false); }

std::string str_strip(std::string_view s, const std::string* chars, bool left, bool right) {
    std::vector<uint32_t> set;
    if (chars) set = utf8_decode(*chars);
    auto strip = [&](uint32_t c) {
        if (!chars) return py_isspace(c);
        for (uint32_t x : set)
            if (x == c) return true;
        return false;
    };
    std::vector<uint32_t> cps = utf8_decode(s);
    size_t b = 0, e = cps.size();
    if (left)
        while (b < e && strip(cps[b])) b++;
    if (right)
        while (e > b && strip(cps[e - 1])) e--;
    return encode(std::vector<uint32_t>(cps.begin() + long(b), cps.begin() + long(e)));
}

std::vector<std::string> str_split(std::string_view s, const std::string* sep, int64_t maxsplit) {
    std::vector<std::string> out;
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (sep) {
        size_t pos = 0;
        while (int64_t(out.size()) < maxsplit) {
            size_t f = s.find(*sep, pos);
            if (f == std::string_view::npos) break;
            out.emplace_back(s.substr(pos, f - pos));
            pos = f + sep->size();
        }
        out.emplace_back(s.substr(pos));
        return out;
    }
    std::vector<uint32_t> cps = utf8_decode(s);
    size_t i = 0, n = cps.size();
    while (true) {
        while (i < n && py_isspace(cps[i])) i++;
        if (i == n) break;
        if (int64_t(out.size()) == maxsplit) {
            out.push_back(encode(std::vector<uint32_t>(cps.begin() + long(i), cps.end())));
            break;
        }
        size_t j = i;
        while (j < n && !py_isspace(cps[j])) j++;
        out.push_back(encode(std::vector<uint32_t>(cps.begin() + long(i), cps.begin() + long(j))));
        i = j;
    }
    return out;
}

std::vector<std::string> str_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
    std::vector<std::string> out;
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (sep) {
        size_t end = s.size();
        while (int64_t(out.size()) < maxsplit) {
            if (end < sep->size()) break;
            size_t f = s.rfind(*sep, end - sep->size());
            if (f == std::string_view::npos) break;
            out.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
            end = f;
        }
        out.emplace_back(s.substr(0, end));
    } else {
        std::vector<uint32_t> cps = utf8_decode(s);
        size_t j = cps.size();
        while (true) {
            while (j > 0 && py_isspace(cps[j - 1])) j--;
            if (j == 0) break;
            if (int64_t(out.size()) == maxsplit) {
                out.push_back(encode(std::vector<uint32_t>(cps.begin(), cps.begin() + long(j))));
                break;
            }
            size_t i = j;
            while (i > 0 && !py_isspace(cps[i - 1])) i--;
            out.push_back(encode(std::vector<uint32_t>(cps.begin() + long(i), cps.begin() + long(j))));
            j = i;
        }
    }
    return std::vector<std::string>(out.rbegin(), out.rend());
}

std::vector<std::string> str_splitlines(std::string_view s, bool keepends) {
    std::vector<std::string> out;
    std::string line;
    for (size_t i = 0; i < s.size();) {
        uint32_t c = utf8_next(s, i);
        if (!py_islinebreak(c)) {
            utf8_append(line, c);
            continue;
        }
        std::string brk;
        utf8_append(brk, c);
        if (c == '\r' && i < s.size() && s[i] == '\n') {
            brk += '\n';
            i++;
        }
        if (keepends) line += brk;
        out.push_back(std::move(line));
        line.clear();
    }
    if (!line.empty()) out.push_back(std::move(line));
    return out;
}

std::string str_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
    if (count < 0) count = INT64_MAX;
    std::string out;
    if (old.empty()) {
        // Python inserts the replacement before every character and at the end.
        int64_t done = 0;
        size_t i = 0;
        while (i < s.size()) {
            if (done < count) { out += repl; done++; }
            size_t start = i;
            utf8_next(s, i);
            out.append(s.substr(start, i - start));
        }
        if (done < count) out += repl;
        return out;
    }
    size_t pos = 0;
    for (int64_t done = 0; done < count; done++) {
        size_t f = s.find(old, pos);
        if (f == std::string_view::npos) break;
        out.append(s.substr(pos, f - pos));
        out.append(repl);
        pos = f + old.size();
    }
    out.append(s.substr(pos));
    return out;
}

int64_t str_count(std::string_view s, std::string_view sub) {
    if (sub.empty()) return int64_t(utf8_length(s)) + 1;
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) n++;
    return n;
}

// Characters str.isprintable() rejects besides controls: separators other
// than the ASCII space, format characters, surrogates and private use.
static bool py_printable(uint32_t c) {
    if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD) return false;
    if (c < 0x80) return true;
    if (py_isspace(c) || (c >= 0x200B && c <= 0x200F) || (c >= 0x202A && c <= 0x202E) ||
        (c >= 0x2060 && c <= 0x2064) || c == 0xFEFF || (c >= 0xD800 && c <= 0xF8FF) || c >= 0xF0000)
        return false;
    return true;
}

std::string py_repr_str(std::string_view s) {
    bool has_single = s.find('\'') != std::string_view::npos;
    bool has_double = s.find('"') != std::string_view::npos;
    char q = has_single && !has_double ? '"' : '\'';
    std::string out(1, q);
    char buf[16];
    for (size_t i = 0; i < s.size();) {
        uint32_t c = utf8_next(s, i);
        if (c == uint32_t(q) || c == '\\') {
            out += '\\';
            out += char(c);
        } else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (py_printable(c)) utf8_append(out, c);
        else {
            if (c < 0x100) snprintf(buf, sizeof buf, "\\x%02x", c);
            else if (c < 0x10000) snprintf(buf, sizeof buf, "\\u%04x", c);
            else snprintf(buf, sizeof buf, "\\U%08x", c);
            out += buf;
        }
    }
    out += q;
    return out;
}

std::string html_escape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&#34;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
    char buf[16];
    out += '"';
    for (size_t i = 0; i < s.size();) {
        uint8_t b = uint8_t(s[i]);
        if (b >= 0x20 && b < 0x7F && b != '"' && b != '\\') {
            out += char(b);
            i++;
            continue;
        }
        uint32_t c = utf8_next(s, i);
        switch (c) {
            case '"': out += "\\\""; continue;
            case '\\': out += "\\\\"; continue;
            case '\n': out += "\\n"; continue;
            case '\r': out += "\\r"; continue;
            case '\t': out += "\\t"; continue;
            case '\b': out += "\\b"; continue;
            case '\f': out += "\\f"; continue;
            default: break;
        }
        if (c < 0x20 || (ensure_ascii && c >= 0x7F && c < 0x10000)) {
            snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else if (ensure_ascii && c >= 0x10000) {
            uint32_t v = c - 0x10000;
            snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            out += buf;
        } else {
            utf8_append(out, c);
        }
    }
    out += '"';
}

std::string py_float_repr(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string sci(buf, r.ptr);  // "-d.ddde+XX", shortest round-trip digits
    std::string sign;
    if (sci[0] == '-') { sign = "-"; sci.erase(0, 1); }
    size_t epos = sci.find('e');
    int exp = atoi(sci.c_str() + epos + 1);
    std::string digits;
    for (size_t k = 0; k < epos; k++)
        if (sci[k] != '.') digits += sci[k];
    int nd = int(digits.size());
    int decpt = exp + 1;
    std::string out;
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) out = "0." + std::string(size_t(-decpt), '0') + digits;
        else if (decpt >= nd) out = digits + std::string(size_t(decpt - nd), '0') + ".0";
        else out = digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
    } else {
        out = digits.substr(0, 1);
        if (nd > 1) out += "." + digits.substr(1);
        snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        out += buf;
    }
    return sign + out;
}

}  // namespace ms::jinja
