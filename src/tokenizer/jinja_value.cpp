#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja_text.h"

namespace ms::jinja {

static uint16_t child_depth(const Value& v) { return v.depth; }

Value Value::make_list(List items, Kind k) {
    uint16_t d = 0;
    for (const Value& x : items) d = std::max(d, child_depth(x));
    if (d + 1 > kMaxValueDepth) throw RenderError("value nested too deeply");
    Value v;
    v.kind = k;
    v.depth = uint16_t(d + 1);
    v.list = std::make_shared<const List>(std::move(items));
    return v;
}

Value Value::make_dict(std::shared_ptr<Dict> dict, Kind k) {
    uint16_t d = 0;
    if (k == Kind::Dict)
        for (const auto& [key, val] : dict->entries) d = std::max({d, child_depth(key), child_depth(val)});
    if (d + 1 > kMaxValueDepth) throw RenderError("value nested too deeply");
    Value v;
    v.kind = k;
    v.depth = uint16_t(d + 1);
    v.dict = std::move(dict);
    return v;
}

const Value* Dict::find(const Value& key) const {
    for (const auto& e : entries)
        if (equals(e.first, key)) return &e.second;
    return nullptr;
}

const Value* Dict::find(std::string_view key) const {
    for (const auto& e : entries)
        if (e.first.kind == Kind::String && e.first.s == key) return &e.second;
    return nullptr;
}

void Dict::set(Value key, Value val) {
    for (auto& e : entries)
        if (equals(e.first, key)) { e.second = std::move(val); return; }
    entries.emplace_back(std::move(key), std::move(val));
}

const char* type_name(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined: return "Undefined";
        case Kind::None: return "NoneType";
        case Kind::Bool: return "bool";
        case Kind::Int: return "int";
        case Kind::Float: return "float";
        case Kind::String: return v.markup ? "Markup" : "str";
        case Kind::List: return "list";
        case Kind::Tuple: return "tuple";
        case Kind::Dict: return "dict";
        case Kind::Namespace: return "Namespace";
        case Kind::Object: return "LoopContext";
        case Kind::Callable: return "function";
    }
    return "object";
}

static void repr_to(std::string& out, const Value& v, int depth);

static void str_to(std::string& out, const Value& v, int depth) {
    switch (v.kind) {
        case Kind::Undefined: return;
        case Kind::None: out += "None"; return;
        case Kind::Bool: out += v.b ? "True" : "False"; return;
        case Kind::Int: out += std::to_string(v.i); return;
        case Kind::Float: out += py_float_repr(v.f); return;
        case Kind::String: out += v.s; return;
        case Kind::Object: out += "<LoopContext>"; return;
        case Kind::Callable: out += "<" + v.fn->name + ">"; return;
        default: repr_to(out, v, depth);
    }
}

static void repr_to(std::string& out, const Value& v, int depth) {
    if (depth > kMaxValueDepth) throw RenderError("value nested too deeply to print");
    switch (v.kind) {
        case Kind::Undefined: out += "Undefined"; return;
        case Kind::String:
            if (v.markup) out += "Markup(" + py_repr_str(v.s) + ")";
            else out += py_repr_str(v.s);
            return;
        case Kind::List:
        case Kind::Tuple: {
            bool tuple = v.kind == Kind::Tuple;
            out += tuple ? '(' : '[';
            const List& l = v.items();
            for (size_t k = 0; k < l.size(); k++) {
                if (k) out += ", ";
                repr_to(out, l[k], depth + 1);
            }
            if (tuple && l.size() == 1) out += ',';
            out += tuple ? ')' : ']';
            return;
        }
        case Kind::Dict:
        case Kind::Namespace: {
            if (v.kind == Kind::Namespace) out += "<Namespace ";
            out += '{';
            bool first = true;
            for (const auto& [key, val] : v.dict->entries) {
                if (!first) out += ", ";
                first = false;
                repr_to(out, key, depth + 1);
                out += ": ";
                repr_to(out, val, depth + 1);
            }
            out += '}';
            if (v.kind == Kind::Namespace) out += '>';
            return;
        }
        default: str_to(out, v, depth);
    }
}

std::string to_str(const Value& v) {
    if (v.kind == Kind::String) return v.s;
    std::string out;
    str_to(out, v, 0);
    return out;
}

std::string repr(const Value& v) {
    std::string out;
    repr_to(out, v, 0);
    return out;
}

bool truthy(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined:
        case Kind::None: return false;
        case Kind::Bool: return v.b;
        case Kind::Int: return v.i != 0;
        case Kind::Float: return v.f != 0;
        case Kind::String: return !v.s.empty();
        case Kind::List:
        case Kind::Tuple: return !v.list->empty();
        case Kind::Dict: return !v.dict->entries.empty();
        default: return true;
    }
}

bool equals(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind == Kind::Float || b.kind == Kind::Float) return a.as_double() == b.as_double();
        return a.as_int() == b.as_int();
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case Kind::Undefined:
        case Kind::None: return true;
        case Kind::String: return a.s == b.s;
        case Kind::List:
        case Kind::Tuple: {
            const List &x = a.items(), &y = b.items();
            if (x.size() != y.size()) return false;
            for (size_t k = 0; k < x.size(); k++)
                if (!equals(x[k], y[k])) return false;
            return true;
        }
        case Kind::Dict: {
            if (a.dict->entries.size() != b.dict->entries.size()) return false;
            for (const auto& [key, val] : a.dict->entries) {
                const Value* o = b.dict->find(key);
                if (!o || !equals(val, *o)) return false;
            }
            return true;
        }
        case Kind::Namespace:
        case Kind::Object: return a.dict == b.dict;
        case Kind::Callable: return a.fn == b.fn;
        default: return false;
    }
}

int compare(const Value& a, const Value& b, const char* op) {
    if (a.is_undefined()) throw RenderError(a.s);
    if (b.is_undefined()) throw RenderError(b.s);
    if (a.is_number() && b.is_number()) {
        if (a.kind == Kind::Float || b.kind == Kind::Float) {
            double x = a.as_double(), y = b.as_double();
            return x < y ? -1 : x > y ? 1 : x == y ? 0 : 2;
        }
        return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    if (a.kind == Kind::String && b.kind == Kind::String) {
        int c = a.s.compare(b.s);
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is_seq() && a.kind == b.kind) {
        const List &x = a.items(), &y = b.items();
        for (size_t k = 0; k < x.size() && k < y.size(); k++)
            if (!equals(x[k], y[k])) return compare(x[k], y[k], op);
        return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    throw RenderError(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" +
                      type_name(b) + "'");
}

List iterate(const Value& v) {
    switch (v.kind) {
        case Kind::Undefined: return {};
        case Kind::List:
        case Kind::Tuple: return v.items();
        case Kind::Dict: {
            List keys;
            keys.reserve(v.dict->entries.size());
            for (const auto& e : v.dict->entries) keys.push_back(e.first);
            return keys;
        }
        case Kind::String: {
            List chars;
            for (size_t i = 0; i < v.s.size();) {
                size_t start = i;
                utf8_next(v.s, i);
                chars.push_back(Value::string(v.s.substr(start, i - start)));
            }
            return chars;
        }
        default: throw RenderError(std::string("'") + type_name(v) + "' object is not iterable");
    }
}

static void json_number(std::string& out, const Value& v) {
    if (v.kind == Kind::Float) {
        if (std::isnan(v.f)) out += "NaN";
        else if (std::isinf(v.f)) out += v.f < 0 ? "-Infinity" : "Infinity";
        else out += py_float_repr(v.f);
    } else if (v.kind == Kind::Bool) {
        out += v.b ? "true" : "false";
    } else {
        out += std::to_string(v.i);
    }
}

void to_json(std::string& out, const Value& v, const JsonStyle& st, int level) {
    if (level > kMaxValueDepth) throw RenderError("value nested too deeply for tojson");
    auto newline = [&](int lvl) {
        if (!st.indent_set) return;
        out += '\n';
        for (int k = 0; k < lvl; k++) out += st.indent;
    };
    switch (v.kind) {
        case Kind::None: out += "null"; return;
        case Kind::Bool:
        case Kind::Int:
        case Kind::Float: json_number(out, v); return;
        case Kind::String: json_string(out, v.s, st.ensure_ascii); return;
        case Kind::List:
        case Kind::Tuple: {
            const List& l = v.items();
            if (l.empty()) { out += "[]"; return; }
            out += '[';
            newline(level + 1);
            for (size_t k = 0; k < l.size(); k++) {
                if (k) {
                    out += st.item_sep;
                    newline(level + 1);
                }
                to_json(out, l[k], st, level + 1);
            }
            newline(level);
            out += ']';
            return;
        }
        case Kind::Dict: {
            std::vector<const std::pair<Value, Value>*> entries;
            for (const auto& e : v.dict->entries) entries.push_back(&e);
            if (entries.empty()) { out += "{}"; return; }
            if (st.sort_keys)
                std::stable_sort(entries.begin(), entries.end(),
                                 [](auto* a, auto* b) { return less(a->first, b->first); });
            out += '{';
            newline(level + 1);
            bool first = true;
            for (const auto* e : entries) {
                if (!first) {
                    out += st.item_sep;
                    newline(level + 1);
                }
                first = false;
                const Value& key = e->first;
                if (key.kind == Kind::String) {
                    json_string(out, key.s, st.ensure_ascii);
                } else if (key.is_number() || key.is_none()) {
                    std::string k;
                    if (key.is_none()) k = "null";
                    else if (key.kind == Kind::Float) k = py_float_repr(key.f);
                    else json_number(k, key);
                    json_string(out, k, st.ensure_ascii);
                } else {
                    throw RenderError(std::string("keys must be str, int, float, bool or None, not ") + type_name(key));
                }
                out += st.key_sep;
                to_json(out, e->second, st, level + 1);
            }
            newline(level);
            out += '}';
            return;
        }
        default:
            throw RenderError(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
    }
}

Value from_json(const Json& j) {
    switch (j.kind()) {
        case Json::Kind::Null: return Value::none();
        case Json::Kind::Bool: return Value::boolean(j.as_bool());
        case Json::Kind::Number: return j.is_int() ? Value::integer(j.as_int()) : Value::number(j.as_number());
        case Json::Kind::String: return Value::string(j.as_string());
        case Json::Kind::Array: {
            List l;
            for (const Json& e : j.as_array()) l.push_back(from_json(e));
            return Value::make_list(std::move(l));
        }
        case Json::Kind::Object: {
            auto d = std::make_shared<Dict>();
            for (const auto& [k, e] : j.as_object()) d->entries.emplace_back(Value::string(k), from_json(e));
            return Value::make_dict(std::move(d));
        }
    }
    return Value::none();
}

std::string missing_message(const Value& obj, const Value& key) {
    std::string what;
    if (obj.is_none()) what = "None";
    else if (obj.kind == Kind::Namespace) what = "jinja2.utils.Namespace object";
    else if (obj.kind == Kind::Object) what = "jinja2.runtime.LoopContext object";
    else if (obj.kind == Kind::Callable) what = "jinja2.runtime.Macro object";
    else what = std::string(type_name(obj)) + " object";
    if (key.kind == Kind::String) return "'" + what + "' has no attribute " + repr(key);
    return what + " has no element " + repr(key);
}

}  // namespace ms::jinja
