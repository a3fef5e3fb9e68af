#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tokenizer/jinja_text.h"

namespace ms::jinja {
namespace {

// ---------------------------------------------------------------- arguments

// Binds call arguments to a Python-style parameter list (excluding the
// filter's subject); missing ones are null.
std::vector<const Value*> bind_args(const char* fname, const CallArgs& a, std::initializer_list<const char*> names) {
    std::vector<const Value*> out(names.size(), nullptr);
    if (a.pos.size() > names.size())
        throw RenderError(std::string(fname) + "() takes at most " + std::to_string(names.size()) + " argument(s) (" +
                          std::to_string(a.pos.size()) + " given)");
    for (size_t k = 0; k < a.pos.size(); k++) out[k] = &a.pos[k];
    for (const auto& [key, val] : a.kw) {
        size_t k = 0;
        for (const char* n : names) {
            if (key == n) break;
            k++;
        }
        if (k == names.size()) throw RenderError(std::string(fname) + "() got an unexpected keyword argument '" + key + "'");
        if (out[k]) throw RenderError(std::string(fname) + "() got multiple values for argument '" + key + "'");
        out[k] = &val;
    }
    return out;
}

bool is_given(const Value* v) { return v && !v->is_none(); }

int64_t int_arg(const Value* v, int64_t def, const char* what) {
    if (!is_given(v)) return def;
    if (!v->is_integral()) throw RenderError(std::string(what) + ": '" + type_name(*v) + "' object cannot be interpreted as an integer");
    return v->as_int();
}

bool bool_arg(const Value* v, bool def) { return v ? truthy(*v) : def; }

std::string str_arg(const Value* v, const std::string& def) { return v ? to_str(*v) : def; }

Value soft_str(const Value& v) { return v.kind == Kind::String ? v : Value::string(to_str(v)); }

[[noreturn]] void no_len(const Value& v) {
    throw RenderError(std::string("object of type '") + type_name(v) + "' has no len()");
}

int64_t py_len(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined: return 0;
        case Kind::String: return int64_t(utf8_length(v.s));
        case Kind::List:
        case Kind::Tuple: return int64_t(v.items().size());
        case Kind::Dict: return int64_t(v.dict->entries.size());
        default: no_len(v);
    }
    return 0;
}

Value make_tuple(Value a, Value b) { return Value::make_list({std::move(a), std::move(b)}, Kind::Tuple); }

Value lower_if_str(const Value& v) { return v.kind == Kind::String ? Value::string(str_lower(v.s)) : v; }

// The parts of an attribute path like "a.b.0" (digits become indexes).
std::vector<Value> attribute_parts(const Value& attribute) {
    std::vector<Value> parts;
    if (attribute.kind != Kind::String) {
        parts.push_back(attribute);
        return parts;
    }
    std::string dot = ".";
    for (const std::string& p : str_split(attribute.s, &dot, -1)) {
        bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (digits && p.size() < 18) parts.push_back(Value::integer(strtoll(p.c_str(), nullptr, 10)));
        else parts.push_back(Value::string(p));
    }
    return parts;
}

Value lookup_path(Interp& in, Value item, const std::vector<Value>& parts, const Value* def) {
    for (const Value& part : parts) {
        item = get_item(in, item, part);
        if (def && item.is_undefined()) item = *def;
    }
    return item;
}

// ---------------------------------------------------------------- string methods

// Python's str.find family over code points, with optional start/end.
struct Window {
    std::string text;  // s[start:end]
    int64_t offset;    // code point index of text[0] in s
};

Window window(const std::string& s, const Value* start, const Value* end) {
    if (!is_given(start) && !is_given(end)) return {s, 0};
    int64_t n = int64_t(utf8_length(s));
    auto clamp = [&](const Value* v, int64_t def) {
        int64_t x = int_arg(v, def, "slice index");
        if (x < 0) x += n;
        return std::clamp<int64_t>(x, 0, n);
    };
    int64_t b = clamp(start, 0), e = clamp(end, n);
    if (e < b) e = b;
    size_t bo = utf8_offset(s, size_t(b)), eo = utf8_offset(s, size_t(e));
    return {s.substr(bo, eo - bo), b};
}

int64_t find_in(const std::string& s, const std::string& sub, const Value* start, const Value* end, bool reverse) {
    Window w = window(s, start, end);
    size_t f = reverse ? w.text.rfind(sub) : w.text.find(sub);
    if (f == std::string::npos) return -1;
    return w.offset + int64_t(utf8_index(w.text, f));
}

std::string pad(const std::string& s, int64_t width, char align, const std::string& fill) {
    int64_t len = int64_t(utf8_length(s));
    if (width <= len) return s;
    int64_t total = width - len, left = 0;
    if (align == '>') left = total;
    else if (align == '^') left = total / 2 + (total & width & 1);
    std::string out;
    for (int64_t k = 0; k < left; k++) out += fill;
    out += s;
    for (int64_t k = 0; k < total - left; k++) out += fill;
    return out;
}

// One printf conversion of a number; spec holds flags, width and precision
// (each at most six digits, so the text stays under a few MB).
std::string format_number(const Value& v, std::string spec, char conv) {
    if (spec.size() > 40) throw RenderError("format specification too long");
    std::string out;
    auto print = [&](const std::string& f, auto x) {
        int n = snprintf(nullptr, 0, f.c_str(), x);
        if (n < 0) throw RenderError("bad format specification '" + f + "'");
        out.resize(size_t(n) + 1);
        snprintf(out.data(), out.size(), f.c_str(), x);
        out.resize(size_t(n));
    };
    if (strchr("diouxXc", conv)) {
        if (v.kind == Kind::Float && !(std::fabs(v.f) < 9.2e18))
            throw RenderError("%" + std::string(1, conv) + " format: number out of range");
        int64_t x = v.kind == Kind::Float ? int64_t(v.f) : v.as_int();
        if (conv == 'c') {
            if (x < 0 || x > 0x10FFFF) throw RenderError("%c arg not in range(0x110000)");
            utf8_append(out, uint32_t(x));
            return out;
        }
        print("%" + spec + "ll" + (conv == 'i' || conv == 'u' ? 'd' : conv), (long long)x);
    } else {
        print("%" + spec + conv, v.as_double());
    }
    return out;
}

// str.format with automatic/positional/keyword fields and simple specs
// ([[fill]align][width][.precision][type]).
std::string brace_format(Interp& in, const std::string& fmt, const CallArgs& a) {
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < fmt.size(); i++) {
        char c = fmt[i];
        if (c == '}') {
            if (i + 1 < fmt.size() && fmt[i + 1] == '}') { out += '}'; i++; continue; }
            throw RenderError("Single '}' encountered in format string");
        }
        if (c != '{') { out += c; continue; }
        if (i + 1 < fmt.size() && fmt[i + 1] == '{') { out += '{'; i++; continue; }
        size_t close = fmt.find('}', i);
        if (close == std::string::npos) throw RenderError("Single '{' encountered in format string");
        std::string field = fmt.substr(i + 1, close - i - 1);
        i = close;
        std::string spec;
        size_t colon = field.find(':');
        if (colon != std::string::npos) {
            spec = field.substr(colon + 1);
            field = field.substr(0, colon);
        }
        const Value* v = nullptr;
        if (field.empty()) {
            if (auto_index >= a.pos.size()) throw RenderError("Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
            v = &a.pos[auto_index++];
        } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
            size_t k = field.size() < 9 ? size_t(atoi(field.c_str())) : SIZE_MAX;
            if (k >= a.pos.size()) throw RenderError("Replacement index " + field + " out of range for positional args tuple");
            v = &a.pos[k];
        } else {
            for (const auto& [key, val] : a.kw)
                if (key == field) v = &val;
            if (!v) throw RenderError("KeyError: '" + field + "'");
        }
        std::string fill = " ";
        char align = 0;
        size_t p = 0;
        if (spec.size() >= 2 && strchr("<>^", spec[1])) { fill = spec.substr(0, 1); align = spec[1]; p = 2; }
        else if (!spec.empty() && strchr("<>^", spec[0])) { align = spec[0]; p = 1; }
        if (p < spec.size() && spec[p] == '0' && !align) { fill = "0"; align = '>'; p++; }
        int64_t width = 0;
        while (p < spec.size() && isdigit(uint8_t(spec[p])) && width < 100000) width = width * 10 + (spec[p++] - '0');
        int precision = -1;
        if (p < spec.size() && spec[p] == '.') {
            precision = 0;
            p++;
            while (p < spec.size() && isdigit(uint8_t(spec[p])) && precision < 1000) precision = precision * 10 + (spec[p++] - '0');
        }
        char type = p < spec.size() ? spec[p++] : 0;
        if (p != spec.size()) throw RenderError("unsupported format specifier '" + spec + "'");
        std::string text;
        if (type && strchr("dfeEgGxXob%", type)) {
            if (!v->is_number()) throw RenderError(std::string("Unknown format code '") + type + "' for object of type '" + type_name(*v) + "'");
            if (type == '%') {
                Value scaled = Value::number(v->as_double() * 100);
                text = format_number(scaled, "." + std::to_string(precision < 0 ? 6 : precision), 'f') + "%";
            } else if (type == 'b') {
                uint64_t x = uint64_t(v->as_int());
                do { text.insert(text.begin(), char('0' + (x & 1))); x >>= 1; } while (x);
            } else {
                text = format_number(*v, precision >= 0 && !strchr("dxXo", type) ? "." + std::to_string(precision) : "", type);
            }
            if (!align) align = '>';
        } else {
            text = v->kind == Kind::Float && precision >= 0 && !type ? format_number(*v, "." + std::to_string(precision), 'g')
                                                                     : to_str(*v);
            if (precision >= 0 && v->kind == Kind::String) text = text.substr(0, utf8_offset(text, size_t(precision)));
            if (!align) align = v->is_number() ? '>' : '<';
        }
        out += pad(text, width, align, fill);
        in.check_size(out.size());
    }
    return out;
}

Value str_list(std::vector<std::string> parts) {
    List l;
    l.reserve(parts.size());
    for (auto& p : parts) l.push_back(Value::string(std::move(p)));
    return Value::make_list(std::move(l));
}

bool affix_match(const std::string& s, const Value& affix, const Value* start, const Value* end, bool prefix) {
    Window w = window(s, start, end);
    auto one = [&](const Value& x) {
        if (x.kind != Kind::String)
            throw RenderError(std::string(prefix ? "startswith" : "endswith") + " first arg must be str or a tuple of str, not " + type_name(x));
        if (x.s.size() > w.text.size()) return false;
        return prefix ? w.text.compare(0, x.s.size(), x.s) == 0 : w.text.compare(w.text.size() - x.s.size(), x.s.size(), x.s) == 0;
    };
    if (affix.kind == Kind::Tuple) {
        for (const Value& x : affix.items())
            if (one(x)) return true;
        return false;
    }
    return one(affix);
}

const char* const kStrMethods[] = {
    "capitalize", "casefold", "center", "count", "endswith", "find", "format", "index", "isalnum", "isalpha",
    "isdecimal", "isdigit", "islower", "isnumeric", "isspace", "isupper", "join", "ljust", "lower", "lstrip",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
    "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill",
};

Value str_method(Interp& in, const Value& self, const std::string& name, CallArgs& a) {
    const std::string& s = self.s;
    auto bound = [&](std::initializer_list<const char*> names) { return bind_args(name.c_str(), a, names); };
    auto need_str = [&](const Value* v, const char* what) -> const std::string& {
        if (!v) throw RenderError(name + "() missing required argument '" + what + "'");
        if (v->kind != Kind::String) throw RenderError(name + "() argument must be str, not " + type_name(*v));
        return v->s;
    };
    auto opt_str = [&](const Value* v) -> const std::string* {
        if (!is_given(v)) return nullptr;
        if (v->kind != Kind::String) throw RenderError(name + " arg must be None or str");
        return &v->s;
    };
    auto cp_all = [&](bool (*pred)(uint32_t)) {
        if (s.empty()) return false;
        for (size_t i = 0; i < s.size();)
            if (!pred(utf8_next(s, i))) return false;
        return true;
    };
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        auto b = bound({"chars"});
        return Value::string(str_strip(s, opt_str(b[0]), name != "rstrip", name != "lstrip"));
    }
    if (name == "split" || name == "rsplit") {
        auto b = bound({"sep", "maxsplit"});
        const std::string* sep = opt_str(b[0]);
        if (sep && sep->empty()) throw RenderError("empty separator");
        int64_t maxsplit = int_arg(b[1], -1, name.c_str());
        auto parts = name == "split" ? str_split(s, sep, maxsplit) : str_rsplit(s, sep, maxsplit);
        in.step(parts.size());
        return str_list(std::move(parts));
    }
    if (name == "splitlines") return str_list(str_splitlines(s, bool_arg(bound({"keepends"})[0], false)));
    if (name == "startswith" || name == "endswith") {
        auto b = bound({"prefix", "start", "end"});
        if (!b[0]) throw RenderError(name + "() takes at least 1 argument (0 given)");
        return Value::boolean(affix_match(s, *b[0], b[1], b[2], name == "startswith"));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
        auto b = bound({"sub", "start", "end"});
        int64_t r = find_in(s, need_str(b[0], "sub"), b[1], b[2], name[0] == 'r');
        if (r < 0 && name.find("index") != std::string::npos) throw RenderError("substring not found");
        return Value::integer(r);
    }
    if (name == "count") {
        auto b = bound({"sub", "start", "end"});
        return Value::integer(str_count(window(s, b[1], b[2]).text, need_str(b[0], "sub")));
    }
    if (name == "replace") {
        auto b = bound({"old", "new", "count"});
        std::string r = str_replace(s, need_str(b[0], "old"), need_str(b[1], "new"), int_arg(b[2], -1, "replace"));
        in.check_size(r.size());
        return Value::string(std::move(r));
    }
    if (name == "upper") { bound({}); return Value::string(str_upper(s)); }
    if (name == "lower" || name == "casefold") { bound({}); return Value::string(str_lower(s)); }
    if (name == "title") { bound({}); return Value::string(str_title(s)); }
    if (name == "capitalize") { bound({}); return Value::string(str_capitalize(s)); }
    if (name == "swapcase") { bound({}); return Value::string(str_swapcase(s)); }
    if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") { bound({}); return Value::boolean(cp_all(py_isdigit)); }
    if (name == "isalpha") { bound({}); return Value::boolean(cp_all(py_isalpha)); }
    if (name == "isalnum") { bound({}); return Value::boolean(cp_all([](uint32_t c) { return py_isalpha(c) || py_isdigit(c); })); }
    if (name == "isspace") { bound({}); return Value::boolean(cp_all(py_isspace)); }
    if (name == "islower") { bound({}); return Value::boolean(str_islower(s)); }
    if (name == "isupper") { bound({}); return Value::boolean(str_isupper(s)); }
    if (name == "join") {
        auto b = bound({"iterable"});
        if (!b[0]) throw RenderError("join() takes exactly one argument (0 given)");
        std::string out;
        bool first = true;
        for (const Value& v : iterate(*b[0])) {
            if (v.kind != Kind::String)
                throw RenderError(std::string("sequence item: expected str instance, ") + type_name(v) + " found");
            if (!first) out += s;
            first = false;
            out += v.s;
            in.check_size(out.size());
        }
        return Value::string(std::move(out));
    }
    if (name == "center" || name == "ljust" || name == "rjust") {
        auto b = bound({"width", "fillchar"});
        std::string fill = b[1] ? need_str(b[1], "fillchar") : " ";
        if (utf8_length(fill) != 1) throw RenderError("The fill character must be exactly one character long");
        int64_t width = std::min<int64_t>(int_arg(b[0], 0, name.c_str()), int64_t(in.limits().max_output));
        return Value::string(pad(s, width, name == "center" ? '^' : name == "ljust" ? '<' : '>', fill));
    }
    if (name == "zfill") {
        int64_t width = std::min<int64_t>(int_arg(bound({"width"})[0], 0, "zfill"), int64_t(in.limits().max_output));
        int64_t len = int64_t(utf8_length(s));
        if (width <= len) return self;
        size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
        return Value::string(s.substr(0, sign) + std::string(size_t(width - len), '0') + s.substr(sign));
    }
    if (name == "removeprefix" || name == "removesuffix") {
        const std::string& x = need_str(bound({"affix"})[0], "affix");
        bool pre = name == "removeprefix";
        if (x.size() <= s.size() && (pre ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0))
            return Value::string(pre ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
        return self;
    }
    if (name == "partition" || name == "rpartition") {
        const std::string& sep = need_str(bound({"sep"})[0], "sep");
        if (sep.empty()) throw RenderError("empty separator");
        size_t f = name == "partition" ? s.find(sep) : s.rfind(sep);
        if (f == std::string::npos)
            return name == "partition" ? Value::make_list({self, Value::string(""), Value::string("")}, Kind::Tuple)
                                       : Value::make_list({Value::string(""), Value::string(""), self}, Kind::Tuple);
        return Value::make_list({Value::string(s.substr(0, f)), Value::string(sep), Value::string(s.substr(f + sep.size()))}, Kind::Tuple);
    }
    if (name == "format") return Value::string(brace_format(in, s, a));
    throw RenderError("'str' object has no attribute '" + name + "'");
}

// ---------------------------------------------------------------- dict and list methods

Value dict_items(const Value& d) {
    List l;
    l.reserve(d.dict->entries.size());
    for (const auto& [k, v] : d.dict->entries) l.push_back(make_tuple(k, v));
    return Value::make_list(std::move(l));
}

Value dict_method(const Value& self, const std::string& name, CallArgs& a) {
    if (name == "get") {
        auto b = bind_args("get", a, {"key", "default"});
        if (!b[0]) throw RenderError("get expected at least 1 argument, got 0");
        const Value* v = self.dict->find(*b[0]);
        return v ? *v : b[1] ? *b[1] : Value::none();
    }
    bind_args(name.c_str(), a, {});
    if (name == "items") return dict_items(self);
    List l;
    for (const auto& [k, v] : self.dict->entries) l.push_back(name == "keys" ? k : v);
    if (name == "copy") return self;
    return Value::make_list(std::move(l));
}

Value list_method(const Value& self, const std::string& name, CallArgs& a) {
    auto b = bind_args(name.c_str(), a, {"value"});
    if (name == "copy") return self;
    if (!b[0]) throw RenderError(name + "() takes exactly one argument (0 given)");
    const List& l = self.items();
    int64_t n = 0;
    for (size_t k = 0; k < l.size(); k++) {
        if (!equals(l[k], *b[0])) continue;
        if (name == "index") return Value::integer(int64_t(k));
        n++;
    }
    if (name == "index") throw RenderError(repr(*b[0]) + " is not in " + type_name(self));
    return Value::integer(n);
}

Value bound_method(const Value& self, const std::string& name, Value (*fn)(Interp&, const Value&, const std::string&, CallArgs&)) {
    auto c = std::make_shared<Callable>();
    c->name = "built-in method " + name + " of " + type_name(self) + " object";
    c->fn = [self, name, fn](Interp& in, CallArgs& a) { return fn(in, self, name, a); };
    return Value::callable(std::move(c));
}

Value unsafe(const Value& obj, const std::string& name) {
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.");
}

bool one_of(const std::string& name, std::initializer_list<const char*> names) {
    for (const char* n : names)
        if (name == n) return true;
    return false;
}

// An attribute of a for loop's `loop` (see Interp::run_loop).
Value loop_attr(const Value& loop, const std::string& name, bool* found) {
    const List& items = *loop.list;
    int64_t k = loop.i, n = int64_t(items.size());
    if (name == "index") return Value::integer(k + 1);
    if (name == "index0") return Value::integer(k);
    if (name == "revindex") return Value::integer(n - k);
    if (name == "revindex0") return Value::integer(n - k - 1);
    if (name == "first") return Value::boolean(k == 0);
    if (name == "last") return Value::boolean(k == n - 1);
    if (name == "previtem") return k > 0 ? items[size_t(k - 1)] : Value::undefined("there is no previous item");
    if (name == "nextitem") return k + 1 < n ? items[size_t(k + 1)] : Value::undefined("there is no next item");
    if (name == "cycle") {
        auto c = std::make_shared<Callable>();
        c->name = "bound method LoopContext.cycle";
        c->fn = [k](Interp&, CallArgs& a) -> Value {
            if (a.pos.empty()) throw RenderError("no items for cycling given");
            return a.pos[size_t(k) % a.pos.size()];
        };
        return Value::callable(std::move(c));
    }
    if (const Value* v = loop.dict->find(std::string_view(name))) return *v;
    *found = false;
    return Value();
}

// Methods only (no mapping keys): the `attr` filter and the first step of
// obj.name.
Value method_of(const Value& obj, const std::string& name, bool* found) {
    *found = true;
    switch (obj.kind) {
        case Kind::String:
            for (const char* m : kStrMethods)
                if (name == m) return bound_method(obj, name, str_method);
            break;
        case Kind::Dict:
            if (one_of(name, {"get", "items", "keys", "values", "copy"}))
                return bound_method(obj, name, [](Interp&, const Value& s, const std::string& n, CallArgs& a) { return dict_method(s, n, a); });
            if (one_of(name, {"pop", "popitem", "setdefault", "update", "clear"})) return unsafe(obj, name);
            break;
        case Kind::List:
        case Kind::Tuple:
            if (one_of(name, {"count", "index"}) || (obj.kind == Kind::List && name == "copy"))
                return bound_method(obj, name, [](Interp&, const Value& s, const std::string& n, CallArgs& a) { return list_method(s, n, a); });
            if (obj.kind == Kind::List && one_of(name, {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"}))
                return unsafe(obj, name);
            break;
        case Kind::Object:
            if (obj.list) return loop_attr(obj, name, found);
            [[fallthrough]];
        case Kind::Namespace:
            if (const Value* v = obj.dict->find(std::string_view(name))) return *v;
            break;
        default: break;
    }
    *found = false;
    return Value();
}

// ---------------------------------------------------------------- filters

using FilterFn = Value (*)(Interp&, const Value&, CallArgs&);

Value f_abs(Interp&, const Value& v, CallArgs& a) {
    bind_args("abs", a, {});
    if (v.kind == Kind::Float) return Value::number(std::fabs(v.f));
    if (v.is_integral()) {
        if (v.as_int() == INT64_MIN) throw RenderError("integer overflow");
        return Value::integer(std::llabs(v.as_int()));
    }
    if (v.is_undefined()) throw RenderError(v.s);
    throw RenderError(std::string("bad operand type for abs(): '") + type_name(v) + "'");
}

Value f_attr(Interp&, const Value& v, CallArgs& a) {
    auto b = bind_args("attr", a, {"name"});
    std::string name = str_arg(b[0], "");
    if (v.is_undefined()) throw RenderError(v.s);
    bool found;
    Value r = method_of(v, name, &found);
    return found ? r : Value::undefined(missing_message(v, Value::string(name)));
}

Value f_batch(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("batch", a, {"linecount", "fill_with"});
    int64_t n = int_arg(b[0], 0, "batch");
    if (n <= 0) throw RenderError("batch() linecount must be positive");
    List out, cur;
    for (Value& x : iterate(v)) {
        cur.push_back(std::move(x));
        if (int64_t(cur.size()) == n) {
            out.push_back(Value::make_list(std::move(cur)));
            cur.clear();
        }
    }
    if (!cur.empty()) {
        if (is_given(b[1])) {
            in.check_size(size_t(n - int64_t(cur.size())) * sizeof(Value));
            while (int64_t(cur.size()) < n) cur.push_back(*b[1]);
        }
        out.push_back(Value::make_list(std::move(cur)));
    }
    in.step(out.size());
    return Value::make_list(std::move(out));
}

Value f_capitalize(Interp&, const Value& v, CallArgs& a) {
    bind_args("capitalize", a, {});
    return Value::string(str_capitalize(to_str(v)));
}

Value f_center(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("center", a, {"width"});
    int64_t width = std::min<int64_t>(int_arg(b[0], 80, "center"), int64_t(in.limits().max_output));
    return Value::string(pad(to_str(v), width, '^', " "));
}

Value f_default(Interp&, const Value& v, CallArgs& a) {
    auto b = bind_args("default", a, {"default_value", "boolean"});
    if (v.is_undefined() || (bool_arg(b[1], false) && !truthy(v))) return b[0] ? *b[0] : Value::string("");
    return v;
}

Value sort_key(const Value& item, bool case_sensitive) { return case_sensitive ? item : lower_if_str(item); }

Value f_dictsort(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("dictsort", a, {"case_sensitive", "by", "reverse"});
    bool cs = bool_arg(b[0], false), rev = bool_arg(b[2], false);
    std::string by = str_arg(b[1], "key");
    if (by != "key" && by != "value") throw RenderError("You can only sort by either \"key\" or \"value\"");
    size_t pos = by == "key" ? 0 : 1;
    if (v.kind != Kind::Dict) throw RenderError(std::string("'") + type_name(v) + "' object has no attribute 'items'");
    List items = dict_items(v).items();
    in.step(items.size());
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        Value kx = sort_key(x.items()[pos], cs), ky = sort_key(y.items()[pos], cs);
        return rev ? less(ky, kx) : less(kx, ky);
    });
    return Value::make_list(std::move(items));
}

Value f_escape(Interp&, const Value& v, CallArgs& a) {
    bind_args("escape", a, {});
    if (v.kind == Kind::String && v.markup) return v;
    return Value::string(html_escape(to_str(v)), true);
}

Value f_first(Interp&, const Value& v, CallArgs& a) {
    bind_args("first", a, {});
    if (v.kind == Kind::String && !v.s.empty()) {
        size_t i = 0;
        utf8_next(v.s, i);
        return Value::string(v.s.substr(0, i));
    }
    List l = iterate(v);
    return l.empty() ? Value::undefined("No first item, sequence was empty.") : l.front();
}

Value f_last(Interp&, const Value& v, CallArgs& a) {
    bind_args("last", a, {});
    List l = iterate(v);
    return l.empty() ? Value::undefined("No last item, sequence was empty.") : l.back();
}

bool parse_py_float(const std::string& text, double* out) {
    std::string t = str_strip(text, nullptr, true, true);
    std::string clean;
    for (size_t k = 0; k < t.size(); k++) {
        if (t[k] == '_' && k > 0 && k + 1 < t.size() && isdigit(uint8_t(t[k - 1])) && isdigit(uint8_t(t[k + 1]))) continue;
        clean += t[k];
    }
    if (clean.empty()) return false;
    std::string low = str_lower(clean);
    std::string body = low[0] == '-' || low[0] == '+' ? low.substr(1) : low;
    if (body == "inf" || body == "infinity" || body == "nan") {
        double x = body == "nan" ? NAN : INFINITY;
        *out = low[0] == '-' ? -x : x;
        return true;
    }
    if (body.find_first_not_of("0123456789.e+-") != std::string::npos || body.find("0x") != std::string::npos) return false;
    char* end = nullptr;
    *out = strtod(clean.c_str(), &end);
    return end && *end == 0;
}

bool parse_py_int(const std::string& text, int base, int64_t* out) {
    std::string t = str_strip(text, nullptr, true, true);
    size_t k = 0;
    bool neg = false;
    if (k < t.size() && (t[k] == '-' || t[k] == '+')) neg = t[k++] == '-';
    if (base == 16 && t.compare(k, 2, "0x") == 0) k += 2;
    if (k >= t.size()) return false;
    uint64_t v = 0;
    bool prev_digit = false;
    for (; k < t.size(); k++) {
        char c = char(tolower(t[k]));
        if (c == '_' && prev_digit && k + 1 < t.size()) { prev_digit = false; continue; }
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
        if (d >= base) return false;
        if (v > (uint64_t(INT64_MAX) - uint64_t(d)) / uint64_t(base)) throw RenderError("integer too large");
        v = v * uint64_t(base) + uint64_t(d);
        prev_digit = true;
    }
    if (!prev_digit) return false;
    *out = neg ? -int64_t(v) : int64_t(v);
    return true;
}

Value f_float(Interp&, const Value& v, CallArgs& a) {
    auto b = bind_args("float", a, {"default"});
    Value def = b[0] ? *b[0] : Value::number(0.0);
    if (v.is_number()) return Value::number(v.as_double());
    double x;
    if (v.kind == Kind::String && parse_py_float(v.s, &x)) return Value::number(x);
    return def;
}

Value f_int(Interp&, const Value& v, CallArgs& a) {
    auto b = bind_args("int", a, {"default", "base"});
    Value def = b[0] ? *b[0] : Value::integer(0);
    int base = int(int_arg(b[1], 10, "int"));
    if (base < 2 || base > 36) throw RenderError("int() base must be >= 2 and <= 36, or 0");
    if (v.is_integral()) return Value::integer(v.as_int());
    if (v.kind == Kind::Float) {
        if (!std::isfinite(v.f)) throw RenderError("cannot convert float " + to_str(v) + " to integer");
        if (std::fabs(v.f) >= 9.2e18) throw RenderError("integer too large");
        return Value::integer(int64_t(v.f));
    }
    if (v.kind == Kind::String) {
        int64_t x;
        if (parse_py_int(v.s, base, &x)) return Value::integer(x);
        double d;
        if (parse_py_float(v.s, &d)) {
            if (!std::isfinite(d)) throw RenderError("cannot convert float " + py_float_repr(d) + " to integer");
            if (std::fabs(d) >= 9.2e18) throw RenderError("integer too large");
            return Value::integer(int64_t(d));
        }
    }
    return def;
}

Value f_format(Interp& in, const Value& v, CallArgs& a) {
    if (!a.pos.empty() && !a.kw.empty()) throw RenderError("can't handle positional and keyword arguments at the same time");
    Value args;
    if (!a.kw.empty()) {
        auto d = std::make_shared<Dict>();
        for (auto& [k, x] : a.kw) d->set(Value::string(k), x);
        args = Value::make_dict(std::move(d));
    } else {
        args = Value::make_list(a.pos, Kind::Tuple);
    }
    std::string s = percent_format(to_str(v), args);
    in.check_size(s.size());
    return Value::string(std::move(s));
}

// Sorted by the attribute, then runs of equal keys: (key, items) pairs.
Value f_groupby(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("groupby", a, {"attribute", "default", "case_sensitive"});
    if (!b[0]) throw RenderError("groupby() missing required argument 'attribute'");
    std::vector<Value> parts = attribute_parts(*b[0]);
    bool cs = bool_arg(b[2], false);
    List items = iterate(v);
    in.step(items.size());
    std::vector<std::pair<Value, size_t>> keyed;
    for (size_t k = 0; k < items.size(); k++) keyed.emplace_back(sort_key(lookup_path(in, items[k], parts, b[1]), cs), k);
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) { return less(x.first, y.first); });
    List out;
    for (size_t k = 0; k < keyed.size();) {
        size_t e = k;
        List group;
        while (e < keyed.size() && equals(keyed[e].first, keyed[k].first)) group.push_back(items[keyed[e++].second]);
        // the key as written in the first item, not lower-cased
        Value key = lookup_path(in, group[0], parts, b[1]);
        out.push_back(make_tuple(key, Value::make_list(std::move(group))));
        k = e;
    }
    return Value::make_list(std::move(out));
}

Value f_indent(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("indent", a, {"width", "first", "blank"});
    std::string ind;
    if (b[0] && b[0]->kind == Kind::String) ind = b[0]->s;
    else ind = std::string(size_t(std::clamp<int64_t>(int_arg(b[0], 4, "indent"), 0, 4096)), ' ');
    bool first = bool_arg(b[1], false), blank = bool_arg(b[2], false);
    std::vector<std::string> lines = str_splitlines(to_str(v) + "\n", false);
    std::string out;
    for (size_t k = 0; k < lines.size(); k++) {
        if (k) {
            out += '\n';
            if (blank || !lines[k].empty()) out += ind;
        }
        out += lines[k];
        in.check_size(out.size());
    }
    if (first) out = ind + out;
    return Value::string(std::move(out));
}

Value f_items(Interp&, const Value& v, CallArgs& a) {
    bind_args("items", a, {});
    if (v.is_undefined()) return Value::make_list({});
    if (v.kind != Kind::Dict) throw RenderError("Can only get item pairs from a mapping.");
    return dict_items(v);
}

Value f_join(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("join", a, {"d", "attribute"});
    std::string sep = str_arg(b[0], "");
    std::vector<Value> parts;
    if (is_given(b[1])) parts = attribute_parts(*b[1]);
    std::string out;
    bool first = true;
    for (const Value& x : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(parts.empty() ? x : lookup_path(in, x, parts, nullptr));
        in.check_size(out.size());
    }
    in.step(out.size() / 256);
    return Value::string(std::move(out));
}

Value f_length(Interp&, const Value& v, CallArgs& a) {
    bind_args("length", a, {});
    return Value::integer(py_len(v));
}

Value f_list(Interp&, const Value& v, CallArgs& a) {
    bind_args("list", a, {});
    return Value::make_list(iterate(v));
}

Value f_lower(Interp&, const Value& v, CallArgs& a) {
    bind_args("lower", a, {});
    return Value::string(str_lower(to_str(v)));
}

Value f_upper(Interp&, const Value& v, CallArgs& a) {
    bind_args("upper", a, {});
    return Value::string(str_upper(to_str(v)));
}

Value f_map(Interp& in, const Value& v, CallArgs& a) {
    List out;
    List items = iterate(v);
    in.step(items.size());
    if (a.pos.empty()) {
        auto b = bind_args("map", a, {"attribute", "default"});
        if (!b[0]) throw RenderError("map requires a filter argument");
        std::vector<Value> parts = attribute_parts(*b[0]);
        for (const Value& x : items) out.push_back(lookup_path(in, x, parts, b[1]));
    } else {
        if (a.pos[0].kind != Kind::String) throw RenderError("map filter name must be a string");
        int f = find_filter(a.pos[0].s);
        if (f < 0) throw RenderError("No filter named '" + a.pos[0].s + "'.");
        CallArgs rest;
        rest.pos.assign(a.pos.begin() + 1, a.pos.end());
        rest.kw = a.kw;
        for (const Value& x : items) {
            CallArgs each = rest;
            out.push_back(apply_filter(in, f, x, each));
        }
    }
    return Value::make_list(std::move(out));
}

Value f_minmax(Interp& in, const Value& v, CallArgs& a, bool want_max) {
    auto b = bind_args(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
    bool cs = bool_arg(b[0], false);
    std::vector<Value> parts;
    if (is_given(b[1])) parts = attribute_parts(*b[1]);
    List items = iterate(v);
    if (items.empty()) return Value::undefined(want_max ? "No largest item, sequence was empty." : "No smallest item, sequence was empty.");
    auto key = [&](const Value& x) { return sort_key(parts.empty() ? x : lookup_path(in, x, parts, nullptr), cs); };
    size_t best = 0;
    Value best_key = key(items[0]);
    for (size_t k = 1; k < items.size(); k++) {
        Value kk = key(items[k]);
        if (want_max ? less(best_key, kk) : less(kk, best_key)) {
            best = k;
            best_key = kk;
        }
    }
    return items[best];
}
Value f_max(Interp& in, const Value& v, CallArgs& a) { return f_minmax(in, v, a, true); }
Value f_min(Interp& in, const Value& v, CallArgs& a) { return f_minmax(in, v, a, false); }

// select/reject/selectattr/rejectattr: an optional attribute path, then an
// optional test name and its arguments (no test: truthiness).
Value select_common(Interp& in, const Value& v, CallArgs& a, bool want, bool by_attr) {
    size_t k = 0;
    std::vector<Value> parts;
    if (by_attr) {
        if (a.pos.empty()) throw RenderError("Missing parameter for attribute name");
        parts = attribute_parts(a.pos[0]);
        k = 1;
    }
    int test = -1;
    CallArgs rest;
    if (k < a.pos.size()) {
        if (a.pos[k].kind != Kind::String) throw RenderError("test name must be a string");
        test = find_test(a.pos[k].s);
        if (test < 0) throw RenderError("No test named '" + a.pos[k].s + "'.");
        rest.pos.assign(a.pos.begin() + long(k) + 1, a.pos.end());
    }
    rest.kw = a.kw;
    List out;
    List items = iterate(v);
    in.step(items.size());
    for (const Value& x : items) {
        Value subject = parts.empty() ? x : lookup_path(in, x, parts, nullptr);
        bool ok;
        if (test < 0) {
            ok = truthy(subject);
        } else {
            CallArgs each = rest;
            ok = apply_test(in, test, subject, each);
        }
        if (ok == want) out.push_back(x);
    }
    return Value::make_list(std::move(out));
}
Value f_select(Interp& in, const Value& v, CallArgs& a) { return select_common(in, v, a, true, false); }
Value f_reject(Interp& in, const Value& v, CallArgs& a) { return select_common(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, CallArgs& a) { return select_common(in, v, a, true, true); }
Value f_rejectattr(Interp& in, const Value& v, CallArgs& a) { return select_common(in, v, a, false, true); }

Value f_replace(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("replace", a, {"old", "new", "count"});
    if (!b[0] || !b[1]) throw RenderError("replace() missing required arguments 'old' and 'new'");
    std::string r = str_replace(to_str(v), to_str(*b[0]), to_str(*b[1]), int_arg(b[2], -1, "replace"));
    in.check_size(r.size());
    return Value::string(std::move(r), v.markup);
}

Value f_reverse(Interp&, const Value& v, CallArgs& a) {
    bind_args("reverse", a, {});
    if (v.kind == Kind::String) {
        std::vector<uint32_t> cps = utf8_decode(v.s);
        std::string out;
        for (size_t k = cps.size(); k-- > 0;) utf8_append(out, cps[k]);
        return Value::string(std::move(out));
    }
    List l = iterate(v);
    std::reverse(l.begin(), l.end());
    return Value::make_list(std::move(l));
}

Value f_round(Interp&, const Value& v, CallArgs& a) {
    auto b = bind_args("round", a, {"precision", "method"});
    int64_t prec = std::clamp<int64_t>(int_arg(b[0], 0, "round"), -30, 30);
    std::string method = str_arg(b[1], "common");
    if (method != "common" && method != "ceil" && method != "floor")
        throw RenderError("method must be common, ceil or floor");
    if (!v.is_number()) throw RenderError(std::string("type ") + type_name(v) + " doesn't define __round__ method");
    double scale = std::pow(10.0, double(prec));
    if (method == "ceil") return Value::number(std::ceil(v.as_double() * scale) / scale);
    if (method == "floor") return Value::number(std::floor(v.as_double() * scale) / scale);
    if (v.is_integral()) {
        if (prec >= 0) return Value::integer(v.as_int());
        // round half to even at a power of ten
        int64_t x = v.as_int(), unit = 1;
        for (int64_t k = 0; k < -prec && unit < INT64_MAX / 10; k++) unit *= 10;
        int64_t q = x / unit, rem = x % unit;
        if (rem < 0) { rem += unit; q--; }
        if (rem * 2 > unit || (rem * 2 == unit && (q & 1))) q++;
        return Value::integer(q * unit);
    }
    if (!std::isfinite(v.f)) return v;
    if (prec >= 0) {
        // printf rounds the exact binary value half-to-even, as Python's round does.
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", int(prec), v.f);
        return Value::number(strtod(buf, nullptr));
    }
    double y = v.f / std::pow(10.0, double(-prec));
    double r = std::nearbyint(y);
    return Value::number(r * std::pow(10.0, double(-prec)));
}

Value f_safe(Interp&, const Value& v, CallArgs& a) {
    bind_args("safe", a, {});
    return Value::string(to_str(v), true);
}

Value f_slice(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("slice", a, {"slices", "fill_with"});
    int64_t slices = int_arg(b[0], 0, "slice");
    if (slices <= 0) throw RenderError("slice() slices must be positive");
    List items = iterate(v);
    int64_t n = int64_t(items.size()), per = n / slices, extra = n % slices, offset = 0;
    in.step(size_t(std::min<int64_t>(slices, 1 << 20)));
    if (slices > (1 << 20)) throw RenderError("slice() slices too large");
    List out;
    for (int64_t k = 0; k < slices; k++) {
        int64_t start = offset + k * per;
        if (k < extra) offset++;
        int64_t end = offset + (k + 1) * per;
        List part(items.begin() + start, items.begin() + end);
        if (is_given(b[1]) && k >= extra) part.push_back(*b[1]);
        out.push_back(Value::make_list(std::move(part)));
    }
    return Value::make_list(std::move(out));
}

Value f_sort(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("sort", a, {"reverse", "case_sensitive", "attribute"});
    bool rev = bool_arg(b[0], false), cs = bool_arg(b[1], false);
    std::vector<std::vector<Value>> paths;
    if (is_given(b[2])) {
        if (b[2]->kind == Kind::String) {
            std::string comma = ",";
            for (const std::string& p : str_split(b[2]->s, &comma, -1)) paths.push_back(attribute_parts(Value::string(str_strip(p, nullptr, true, true))));
        } else {
            paths.push_back(attribute_parts(*b[2]));
        }
    }
    List items = iterate(v);
    in.step(items.size());
    std::vector<std::pair<Value, size_t>> keyed;
    for (size_t k = 0; k < items.size(); k++) {
        Value key;
        if (paths.empty()) key = sort_key(items[k], cs);
        else if (paths.size() == 1) key = sort_key(lookup_path(in, items[k], paths[0], nullptr), cs);
        else {
            List parts;
            for (auto& p : paths) parts.push_back(sort_key(lookup_path(in, items[k], p, nullptr), cs));
            key = Value::make_list(std::move(parts), Kind::Tuple);
        }
        keyed.emplace_back(std::move(key), k);
    }
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        return rev ? less(y.first, x.first) : less(x.first, y.first);
    });
    List out;
    for (auto& [key, k] : keyed) out.push_back(items[k]);
    return Value::make_list(std::move(out));
}

Value f_string(Interp&, const Value& v, CallArgs& a) {
    bind_args("string", a, {});
    return soft_str(v);
}

Value f_sum(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("sum", a, {"attribute", "start"});
    std::vector<Value> parts;
    if (is_given(b[0])) parts = attribute_parts(*b[0]);
    Value total = b[1] ? *b[1] : Value::integer(0);
    for (const Value& x : iterate(v)) total = binary_op(in, Op::Add, total, parts.empty() ? x : lookup_path(in, x, parts, nullptr));
    return total;
}

Value f_title(Interp&, const Value& v, CallArgs& a) {
    bind_args("title", a, {});
    // Jinja's title: each run of word or separator characters ("-", space,
    // "(", "{", "[", "<") gets its first character upper-cased, the rest lowered.
    std::string s = to_str(v), out;
    auto is_sep = [](uint32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
    bool start = true, prev_sep = false;
    for (size_t i = 0; i < s.size();) {
        uint32_t c = utf8_next(s, i);
        bool sep = is_sep(c);
        if (!start && sep != prev_sep) start = true;
        if (start) {
            if (c == 0xDF) out += "SS";
            else utf8_append(out, py_upper(c));
        } else {
            utf8_append(out, py_lower(c));
        }
        start = false;
        prev_sep = sep;
    }
    return Value::string(std::move(out));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), not Jinja2's HTML-safe one.
Value f_tojson(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonStyle st;
    st.ensure_ascii = bool_arg(b[0], false);
    st.sort_keys = bool_arg(b[3], false);
    if (is_given(b[1])) {
        st.indent_set = true;
        if (b[1]->kind == Kind::String) st.indent = b[1]->s;
        else st.indent = std::string(size_t(std::clamp<int64_t>(int_arg(b[1], 0, "indent"), 0, 4096)), ' ');
        st.item_sep = ",";
    }
    if (is_given(b[2])) {
        List seps = iterate(*b[2]);
        if (seps.size() != 2) throw RenderError("separators must be a pair of strings");
        st.item_sep = to_str(seps[0]);
        st.key_sep = to_str(seps[1]);
    }
    std::string out;
    to_json(out, v, st);
    in.check_size(out.size());
    in.step(out.size() / 256);
    return Value::string(std::move(out));
}

Value f_trim(Interp&, const Value& v, CallArgs& a) {
    auto b = bind_args("trim", a, {"chars"});
    std::string chars;
    if (is_given(b[0])) chars = to_str(*b[0]);
    return Value::string(str_strip(to_str(v), is_given(b[0]) ? &chars : nullptr, true, true));
}

Value f_truncate(Interp&, const Value& v, CallArgs& a) {
    auto b = bind_args("truncate", a, {"length", "killwords", "end", "leeway"});
    int64_t length = int_arg(b[0], 255, "truncate");
    bool killwords = bool_arg(b[1], false);
    std::string end = str_arg(b[2], "...");
    int64_t leeway = int_arg(b[3], 5, "truncate");
    int64_t end_len = int64_t(utf8_length(end));
    if (length < end_len) throw RenderError("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
    if (leeway < 0) throw RenderError("expected leeway >= 0, got " + std::to_string(leeway));
    std::string s = to_str(v);
    if (int64_t(utf8_length(s)) <= length + leeway) return Value::string(s);
    std::string head = s.substr(0, utf8_offset(s, size_t(length - end_len)));
    if (killwords) return Value::string(head + end);
    std::string space = " ";
    return Value::string(str_rsplit(head, &space, 1)[0] + end);
}

Value f_unique(Interp& in, const Value& v, CallArgs& a) {
    auto b = bind_args("unique", a, {"case_sensitive", "attribute"});
    bool cs = bool_arg(b[0], false);
    std::vector<Value> parts;
    if (is_given(b[1])) parts = attribute_parts(*b[1]);
    List out, seen;
    List items = iterate(v);
    in.step(items.size() * items.size() / 64 + items.size());
    for (const Value& x : items) {
        Value key = sort_key(parts.empty() ? x : lookup_path(in, x, parts, nullptr), cs);
        bool dup = false;
        for (const Value& s : seen)
            if (equals(s, key)) { dup = true; break; }
        if (dup) continue;
        seen.push_back(key);
        out.push_back(x);
    }
    return Value::make_list(std::move(out));
}

Value f_wordcount(Interp&, const Value& v, CallArgs& a) {
    bind_args("wordcount", a, {});
    std::string s = to_str(v);
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.size();) {
        uint32_t c = utf8_next(s, i);
        bool w = c == '_' || py_isalpha(c) || py_isdigit(c);
        if (w && !in_word) n++;
        in_word = w;
    }
    return Value::integer(n);
}

struct FilterDef {
    const char* name;
    FilterFn fn;
};

const FilterDef kFilters[] = {
    {"abs", f_abs},           {"attr", f_attr},           {"batch", f_batch},
    {"capitalize", f_capitalize}, {"center", f_center},   {"count", f_length},
    {"d", f_default},         {"default", f_default},     {"dictsort", f_dictsort},
    {"e", f_escape},          {"escape", f_escape},       {"first", f_first},
    {"float", f_float},       {"forceescape", f_escape},  {"format", f_format},
    {"groupby", f_groupby},
    {"indent", f_indent},     {"int", f_int},             {"items", f_items},
    {"join", f_join},         {"last", f_last},           {"length", f_length},
    {"list", f_list},         {"lower", f_lower},         {"map", f_map},
    {"max", f_max},           {"min", f_min},             {"reject", f_reject},
    {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round},       {"safe", f_safe},           {"select", f_select},
    {"selectattr", f_selectattr}, {"slice", f_slice},     {"sort", f_sort},
    {"string", f_string},     {"sum", f_sum},             {"title", f_title},
    {"tojson", f_tojson},     {"trim", f_trim},           {"truncate", f_truncate},
    {"unique", f_unique},     {"upper", f_upper},         {"wordcount", f_wordcount},
};

// ---------------------------------------------------------------- tests

using TestFn = bool (*)(Interp&, const Value&, CallArgs&);

const Value& one_arg(const char* name, CallArgs& a) {
    auto b = bind_args(name, a, {"other"});
    if (!b[0]) throw RenderError(std::string(name) + "() missing 1 required positional argument");
    return *b[0];
}

bool t_boolean(Interp&, const Value& v, CallArgs& a) { bind_args("boolean", a, {}); return v.kind == Kind::Bool; }
bool t_callable(Interp&, const Value& v, CallArgs& a) { bind_args("callable", a, {}); return v.is_callable(); }
bool t_defined(Interp&, const Value& v, CallArgs& a) { bind_args("defined", a, {}); return !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, CallArgs& a) { bind_args("undefined", a, {}); return v.is_undefined(); }
bool t_none(Interp&, const Value& v, CallArgs& a) { bind_args("none", a, {}); return v.is_none(); }
bool t_true(Interp&, const Value& v, CallArgs& a) { bind_args("true", a, {}); return v.kind == Kind::Bool && v.b; }
bool t_false(Interp&, const Value& v, CallArgs& a) { bind_args("false", a, {}); return v.kind == Kind::Bool && !v.b; }
bool t_string(Interp&, const Value& v, CallArgs& a) { bind_args("string", a, {}); return v.kind == Kind::String; }
bool t_number(Interp&, const Value& v, CallArgs& a) { bind_args("number", a, {}); return v.is_number(); }
bool t_integer(Interp&, const Value& v, CallArgs& a) { bind_args("integer", a, {}); return v.kind == Kind::Int; }
bool t_float(Interp&, const Value& v, CallArgs& a) { bind_args("float", a, {}); return v.kind == Kind::Float; }
bool t_mapping(Interp&, const Value& v, CallArgs& a) { bind_args("mapping", a, {}); return v.kind == Kind::Dict; }
bool t_escaped(Interp&, const Value& v, CallArgs& a) { bind_args("escaped", a, {}); return v.kind == Kind::String && v.markup; }
bool t_iterable(Interp&, const Value& v, CallArgs& a) {
    bind_args("iterable", a, {});
    return v.is_undefined() || v.kind == Kind::String || v.is_seq() || v.kind == Kind::Dict || (v.kind == Kind::Object && v.list);
}
bool t_sequence(Interp&, const Value& v, CallArgs& a) {
    bind_args("sequence", a, {});
    return v.is_undefined() || v.kind == Kind::String || v.is_seq() || v.kind == Kind::Dict;
}
bool t_lower(Interp&, const Value& v, CallArgs& a) { bind_args("lower", a, {}); return str_islower(to_str(v)); }
bool t_upper(Interp&, const Value& v, CallArgs& a) { bind_args("upper", a, {}); return str_isupper(to_str(v)); }

int64_t int_mod(Interp& in, const Value& v, const Value& n) {
    Value r = binary_op(in, Op::Mod, v, n);
    return r.kind == Kind::Float ? (r.f == 0 ? 0 : 1) : r.as_int();
}
bool t_odd(Interp& in, const Value& v, CallArgs& a) { bind_args("odd", a, {}); return int_mod(in, v, Value::integer(2)) == 1; }
bool t_even(Interp& in, const Value& v, CallArgs& a) { bind_args("even", a, {}); return int_mod(in, v, Value::integer(2)) == 0; }
bool t_divisibleby(Interp& in, const Value& v, CallArgs& a) { return int_mod(in, v, one_arg("divisibleby", a)) == 0; }

bool t_eq(Interp&, const Value& v, CallArgs& a) { return equals(v, one_arg("eq", a)); }
bool t_ne(Interp&, const Value& v, CallArgs& a) { return !equals(v, one_arg("ne", a)); }
bool t_lt(Interp&, const Value& v, CallArgs& a) { return compare_op(Op::Lt, v, one_arg("lt", a)); }
bool t_le(Interp&, const Value& v, CallArgs& a) { return compare_op(Op::Le, v, one_arg("le", a)); }
bool t_gt(Interp&, const Value& v, CallArgs& a) { return compare_op(Op::Gt, v, one_arg("gt", a)); }
bool t_ge(Interp&, const Value& v, CallArgs& a) { return compare_op(Op::Ge, v, one_arg("ge", a)); }
bool t_in(Interp&, const Value& v, CallArgs& a) { return contains(one_arg("in", a), v); }
bool t_sameas(Interp&, const Value& v, CallArgs& a) {
    const Value& o = one_arg("sameas", a);
    if (v.kind != o.kind) return false;
    switch (v.kind) {
        case Kind::Undefined:
        case Kind::None: return true;
        case Kind::Bool: return v.b == o.b;
        case Kind::Int: return v.i == o.i;
        case Kind::String: return v.s == o.s;
        case Kind::Float: return false;
        case Kind::List:
        case Kind::Tuple: return v.list == o.list;
        case Kind::Callable: return v.fn == o.fn;
        default: return v.dict == o.dict;
    }
}
bool t_filter(Interp&, const Value& v, CallArgs& a) { bind_args("filter", a, {}); return v.kind == Kind::String && find_filter(v.s) >= 0; }
bool t_test(Interp&, const Value& v, CallArgs& a) { bind_args("test", a, {}); return v.kind == Kind::String && find_test(v.s) >= 0; }

struct TestDef {
    const char* name;
    TestFn fn;
};

const TestDef kTests[] = {
    {"boolean", t_boolean},   {"callable", t_callable}, {"defined", t_defined},   {"divisibleby", t_divisibleby},
    {"eq", t_eq},             {"equalto", t_eq},        {"==", t_eq},             {"escaped", t_escaped},
    {"even", t_even},         {"false", t_false},       {"filter", t_filter},     {"float", t_float},
    {"ge", t_ge},             {">=", t_ge},             {"gt", t_gt},             {"greaterthan", t_gt},
    {">", t_gt},              {"in", t_in},             {"integer", t_integer},   {"iterable", t_iterable},
    {"le", t_le},             {"<=", t_le},             {"lower", t_lower},       {"lt", t_lt},
    {"lessthan", t_lt},       {"<", t_lt},              {"mapping", t_mapping},   {"ne", t_ne},
    {"!=", t_ne},             {"none", t_none},         {"number", t_number},     {"odd", t_odd},
    {"sameas", t_sameas},     {"sequence", t_sequence}, {"string", t_string},     {"test", t_test},
    {"true", t_true},         {"undefined", t_undefined}, {"upper", t_upper},
};

// ---------------------------------------------------------------- globals

// Jinja2's sandbox refuses ranges longer than this.
constexpr int64_t kMaxRange = 100000;

Value g_range(Interp& in, CallArgs& a) {
    if (!a.kw.empty()) throw RenderError("range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3) throw RenderError("range expected 1 to 3 arguments, got " + std::to_string(a.pos.size()));
    int64_t v[3] = {0, 0, 0};
    for (size_t k = 0; k < a.pos.size(); k++) {
        if (a.pos[k].is_undefined()) throw RenderError(a.pos[k].s);
        if (!a.pos[k].is_integral()) throw RenderError(std::string("'") + type_name(a.pos[k]) + "' object cannot be interpreted as an integer");
        v[k] = a.pos[k].as_int();
    }
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) stop = v[0];
    else { start = v[0]; stop = v[1]; }
    if (a.pos.size() == 3) step = v[2];
    if (step == 0) throw RenderError("range() arg 3 must not be zero");
    double count = step > 0 ? std::ceil((double(stop) - double(start)) / double(step)) : std::ceil((double(start) - double(stop)) / double(-step));
    if (count > double(kMaxRange))
        throw RenderError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    List out;
    out.reserve(size_t(std::max(0.0, count)));
    for (int64_t x = start; step > 0 ? x < stop : x > stop; x += step) {
        out.push_back(Value::integer(x));
        if (step > 0 ? x > INT64_MAX - step : x < INT64_MIN - step) break;
    }
    in.step(out.size());
    return Value::make_list(std::move(out));
}

std::vector<std::pair<Value, Value>> dict_entries(const CallArgs& a, const char* what) {
    std::vector<std::pair<Value, Value>> entries;
    Dict d;
    if (a.pos.size() > 1) throw RenderError(std::string(what) + " expected at most 1 argument, got " + std::to_string(a.pos.size()));
    if (!a.pos.empty()) {
        const Value& src = a.pos[0];
        if (src.kind == Kind::Dict || src.kind == Kind::Namespace) {
            for (const auto& e : src.dict->entries) d.set(e.first, e.second);
        } else {
            for (const Value& pair : iterate(src)) {
                List kv = iterate(pair);
                if (kv.size() != 2) throw RenderError(std::string(what) + " update sequence element has length " + std::to_string(kv.size()) + "; 2 is required");
                d.set(kv[0], kv[1]);
            }
        }
    }
    for (const auto& [k, v] : a.kw) d.set(Value::string(k), v);
    return std::move(d.entries);
}

Value g_namespace(Interp& in, CallArgs& a) { return in.make_namespace(dict_entries(a, "namespace")); }

Value g_dict(Interp&, CallArgs& a) {
    auto d = std::make_shared<Dict>();
    d->entries = dict_entries(a, "dict");
    return Value::make_dict(std::move(d));
}

Value g_joiner(Interp&, CallArgs& a) {
    std::string sep = str_arg(bind_args("joiner", a, {"sep"})[0], ", ");
    auto used = std::make_shared<bool>(false);
    auto c = std::make_shared<Callable>();
    c->name = "joiner";
    c->fn = [sep, used](Interp&, CallArgs&) -> Value {
        if (!*used) {
            *used = true;
            return Value::string("");
        }
        return Value::string(sep);
    };
    return Value::callable(std::move(c));
}

Value g_cycler(Interp&, CallArgs& a) {
    if (a.pos.empty()) throw RenderError("at least one item has to be provided");
    struct State {
        List items;
        size_t pos = 0;
    };
    auto st = std::make_shared<State>();
    st->items = a.pos;
    auto d = std::make_shared<Dict>();
    std::weak_ptr<Dict> self = d;  // the methods update `current` in the object they belong to
    auto method = [&](const char* name, bool advance) {
        auto c = std::make_shared<Callable>();
        c->name = std::string("cycler.") + name;
        c->fn = [st, self, advance](Interp&, CallArgs&) -> Value {
            Value rv = st->items[st->pos];
            if (advance) st->pos = (st->pos + 1) % st->items.size();
            else st->pos = 0;
            if (auto obj = self.lock()) obj->set(Value::string("current"), st->items[st->pos]);
            return advance ? rv : Value::none();
        };
        return Value::callable(std::move(c));
    };
    d->entries.emplace_back(Value::string("current"), st->items[0]);
    d->entries.emplace_back(Value::string("next"), method("next", true));
    d->entries.emplace_back(Value::string("reset"), method("reset", false));
    d->entries.emplace_back(Value::string("items"), Value::make_list(st->items));
    return Value::make_dict(std::move(d), Kind::Object);
}

}  // namespace

int find_filter(std::string_view name) {
    for (size_t k = 0; k < std::size(kFilters); k++)
        if (name == kFilters[k].name) return int(k);
    return -1;
}

int find_test(std::string_view name) {
    for (size_t k = 0; k < std::size(kTests); k++)
        if (name == kTests[k].name) return int(k);
    return -1;
}

Value apply_filter(Interp& in, int index, const Value& subject, CallArgs& args) {
    return kFilters[index].fn(in, subject, args);
}

bool apply_test(Interp& in, int index, const Value& subject, CallArgs& args) {
    return kTests[index].fn(in, subject, args);
}

Value get_attr(Interp&, const Value& obj, const std::string& name) {
    if (obj.is_undefined()) throw RenderError(obj.s);
    bool found;
    Value m = method_of(obj, name, &found);
    if (found) return m;
    if (obj.kind == Kind::Dict)
        if (const Value* v = obj.dict->find(std::string_view(name))) return *v;
    return Value::undefined(missing_message(obj, Value::string(name)));
}

Value get_item(Interp& in, const Value& obj, const Value& key) {
    if (obj.is_undefined()) throw RenderError(obj.s);
    switch (obj.kind) {
        case Kind::List:
        case Kind::Tuple:
        case Kind::String:
            if (key.is_integral()) {
                int64_t n = obj.kind == Kind::String ? int64_t(utf8_length(obj.s)) : int64_t(obj.items().size());
                int64_t k = key.as_int();
                if (k < 0) k += n;
                if (k >= 0 && k < n) {
                    if (obj.kind != Kind::String) return obj.items()[size_t(k)];
                    size_t off = utf8_offset(obj.s, size_t(k)), end = off;
                    utf8_next(obj.s, end);
                    return Value::string(obj.s.substr(off, end - off));
                }
                return Value::undefined(missing_message(obj, key));
            }
            break;
        case Kind::Dict:
            if (const Value* v = obj.dict->find(key)) return *v;
            break;
        default: break;
    }
    if (key.kind == Kind::String) return get_attr(in, obj, key.s);
    return Value::undefined(missing_message(obj, key));
}

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
    for (const Value* v : {&start, &stop, &step})
        if (!v->is_none() && !v->is_integral())
            return Value::undefined(missing_message(obj, Value::string("slice")));
    if (obj.kind != Kind::String && !obj.is_seq()) return Value::undefined(missing_message(obj, Value::string("slice")));
    int64_t st = step.is_none() ? 1 : step.as_int();
    if (st == 0) throw RenderError("slice step cannot be zero");
    bool ascii = obj.kind == Kind::String && is_ascii(obj.s);
    std::vector<uint32_t> cps;
    if (obj.kind == Kind::String && !ascii) cps = utf8_decode(obj.s);
    int64_t n = obj.kind != Kind::String ? int64_t(obj.items().size()) : ascii ? int64_t(obj.s.size()) : int64_t(cps.size());
    // CPython's PySlice_AdjustIndices
    auto adjust = [&](const Value& v, bool is_start) {
        int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? n : n - 1;
        if (v.is_none()) return st > 0 ? (is_start ? lower : upper) : (is_start ? upper : lower);
        int64_t x = v.as_int();
        if (x < 0) {
            x = x < -n ? lower : x + n;
            return std::max(x, lower);
        }
        return std::min(x, upper);
    };
    int64_t b = adjust(start, true), e = adjust(stop, false);
    if (obj.kind == Kind::String) {
        std::string out;
        for (int64_t k = b; st > 0 ? k < e : k > e; k += st) {
            if (ascii) out += obj.s[size_t(k)];
            else utf8_append(out, cps[size_t(k)]);
        }
        return Value::string(std::move(out));
    }
    List out;
    for (int64_t k = b; st > 0 ? k < e : k > e; k += st) out.push_back(obj.items()[size_t(k)]);
    return Value::make_list(std::move(out), obj.kind);
}

void install_globals(Scope& globals) {
    // The display names are what Python prints for these classes.
    auto add = [&](const char* name, const char* shown, Value (*fn)(Interp&, CallArgs&)) {
        globals.set(name, Value::callable(std::make_shared<Callable>(Callable{shown, fn})));
    };
    add("range", "class 'range'", g_range);
    add("namespace", "class 'jinja2.utils.Namespace'", g_namespace);
    add("dict", "class 'dict'", g_dict);
    add("joiner", "class 'jinja2.utils.Joiner'", g_joiner);
    add("cycler", "class 'jinja2.utils.Cycler'", g_cycler);
}

std::string percent_format(const std::string& fmt, const Value& args) {
    List positional;
    const Value* mapping = nullptr;
    if (args.kind == Kind::Tuple) positional = args.items();
    else positional.push_back(args);
    if (args.kind == Kind::Dict) mapping = &args;
    size_t next = 0;
    std::string out;
    auto take = [&]() -> const Value& {
        if (next >= positional.size()) throw RenderError("not enough arguments for format string");
        return positional[next++];
    };
    for (size_t i = 0; i < fmt.size(); i++) {
        if (fmt[i] != '%') { out += fmt[i]; continue; }
        if (++i >= fmt.size()) throw RenderError("incomplete format");
        const Value* arg = nullptr;
        if (fmt[i] == '(') {
            size_t close = fmt.find(')', i);
            if (close == std::string::npos) throw RenderError("incomplete format key");
            if (!mapping) throw RenderError("format requires a mapping");
            const Value* v = mapping->dict->find(std::string_view(fmt).substr(i + 1, close - i - 1));
            if (!v) throw RenderError("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
            arg = v;
            i = close + 1;
        }
        std::string flags;
        while (i < fmt.size() && strchr("-+ #0", fmt[i]) && fmt[i]) flags += fmt[i++];
        std::string width, prec;
        if (i < fmt.size() && fmt[i] == '*') { width = std::to_string(int_arg(&take(), 0, "*")); i++; }
        while (i < fmt.size() && isdigit(uint8_t(fmt[i]))) width += fmt[i++];
        if (i < fmt.size() && fmt[i] == '.') {
            i++;
            prec = ".";
            if (i < fmt.size() && fmt[i] == '*') { prec += std::to_string(int_arg(&take(), 0, "*")); i++; }
            while (i < fmt.size() && isdigit(uint8_t(fmt[i]))) prec += fmt[i++];
        }
        while (i < fmt.size() && strchr("hlL", fmt[i]) && fmt[i]) i++;
        if (i >= fmt.size()) throw RenderError("incomplete format");
        char conv = fmt[i];
        if (conv == '%') { out += '%'; continue; }
        if (width.size() > 6 || prec.size() > 6) throw RenderError("format width too large");
        const Value& v = arg ? *arg : take();
        std::string text;
        if (conv == 's' || conv == 'r' || conv == 'a') {
            text = conv == 's' ? to_str(v) : repr(v);
            if (prec.size() > 1) text = text.substr(0, utf8_offset(text, size_t(atoi(prec.c_str() + 1))));
            int64_t w = width.empty() ? 0 : atoi(width.c_str());
            text = pad(text, w, flags.find('-') != std::string::npos ? '<' : '>', " ");
        } else if (strchr("diouxXeEfFgGc", conv)) {
            if (!v.is_number()) {
                if (v.is_undefined()) throw RenderError(v.s);
                throw RenderError(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
            }
            text = format_number(v, flags + width + prec, conv);
        } else {
            throw RenderError(std::string("unsupported format character '") + conv + "'");
        }
        out += text;
    }
    if (next < positional.size() && !mapping) throw RenderError("not all arguments converted during string formatting");
    return out;
}

}  // namespace ms::jinja
