// Values of the Jinja interpreter, with Python's semantics: truthiness, str()
// and repr(), ==, ordering, and json.dumps. Lists and dicts are immutable once
// built (the sandbox forbids mutating them), so they are shared freely; a
// namespace() is the one mutable container.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "json/json.h"

namespace ms::jinja {

// A runtime error inside the template; line 0 until the evaluator attaches
// the line of the innermost node being evaluated.
struct RenderError : std::runtime_error {
    int line;
    explicit RenderError(const std::string& m, int l = 0) : std::runtime_error(m), line(l) {}
};

// raise_exception(msg) from the template: passes through unchanged.
struct RaisedError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Object, Callable };

struct Value;
struct Dict;
struct Callable;
using List = std::vector<Value>;

// Values nested deeper than this are refused (they would overflow the C++
// stack in repr, ==, tojson or destruction).
constexpr int kMaxValueDepth = 400;

struct Value {
    Kind kind = Kind::Undefined;
    bool markup = false;   // String: a markupsafe.Markup (from |safe, |escape)
    uint16_t depth = 0;    // container nesting: 0 for scalars
    bool b = false;
    int64_t i = 0;
    double f = 0;
    std::string s;                    // String; Undefined: the message if it is used
    std::shared_ptr<const List> list; // List, Tuple; a for-loop's items (the `loop` Object, index in i)
    std::shared_ptr<Dict> dict;       // Dict, Namespace and Object attributes
    std::shared_ptr<Callable> fn;     // Callable; a recursive loop's `loop`

    Value() = default;
    static Value undefined(std::string message) { Value v; v.s = std::move(message); return v; }
    static Value none() { Value v; v.kind = Kind::None; return v; }
    static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
    static Value integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
    static Value number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
    static Value string(std::string x, bool markup = false) {
        Value v; v.kind = Kind::String; v.s = std::move(x); v.markup = markup; return v;
    }
    static Value make_list(List items, Kind k = Kind::List);
    static Value make_dict(std::shared_ptr<Dict> d, Kind k = Kind::Dict);
    static Value callable(std::shared_ptr<Callable> c) { Value v; v.kind = Kind::Callable; v.fn = std::move(c); return v; }

    bool is_undefined() const { return kind == Kind::Undefined; }
    bool is_none() const { return kind == Kind::None; }
    bool is_string() const { return kind == Kind::String; }
    bool is_number() const { return kind == Kind::Bool || kind == Kind::Int || kind == Kind::Float; }
    bool is_integral() const { return kind == Kind::Bool || kind == Kind::Int; }
    bool is_seq() const { return kind == Kind::List || kind == Kind::Tuple; }
    bool is_mapping() const { return kind == Kind::Dict; }
    bool is_callable() const { return fn != nullptr; }
    int64_t as_int() const { return kind == Kind::Bool ? int64_t(b) : i; }
    double as_double() const { return kind == Kind::Float ? f : double(as_int()); }
    const List& items() const { return *list; }
};

// Insertion-ordered mapping with Python key equality (1 == 1.0 == True).
struct Dict {
    std::vector<std::pair<Value, Value>> entries;
    const Value* find(const Value& key) const;
    const Value* find(std::string_view key) const;
    void set(Value key, Value val);
};

struct CallArgs {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
};

class Interp;
struct Callable {
    std::string name;
    std::function<Value(Interp&, CallArgs&)> fn;
};

// Python type name, as used in error messages ("str", "NoneType", "dict").
const char* type_name(const Value& v);
// str(v): what {{ v }} prints.
std::string to_str(const Value& v);
std::string repr(const Value& v);
bool truthy(const Value& v);
// Python ==; never throws.
bool equals(const Value& a, const Value& b);
// Python ordering of numbers, strings and same-kind sequences: -1, 0, 1, or
// 2 when unordered (NaN). Other pairs are a RenderError naming the operator.
int compare(const Value& a, const Value& b, const char* op);
inline bool less(const Value& a, const Value& b) { return compare(a, b, "<") == -1; }
// The elements a for-loop visits: list/tuple items, dict keys, string
// characters, nothing for undefined. Throws for non-iterables.
List iterate(const Value& v);

struct JsonStyle {
    bool ensure_ascii = false;
    bool indent_set = false;
    std::string indent;                          // used when indent_set
    std::string item_sep = ", ", key_sep = ": ";
    bool sort_keys = false;
};
// Python json.dumps.
void to_json(std::string& out, const Value& v, const JsonStyle& st, int level = 0);

Value from_json(const Json& j);

// The Undefined message for a failed attribute or item lookup of key on obj
// ("'dict object' has no attribute 'x'", "list object has no element 3").
std::string missing_message(const Value& obj, const Value& key);

}  // namespace ms::jinja
