#include "server/json_schema.h"

#include <cmath>
#include <iterator>
#include <set>
#include <stdexcept>
#include <vector>

namespace ms {

namespace {

// JSON's own grammar. Whitespace is at most one character at a time so a weak
// model cannot fill its reply with it; numbers have at most 16 digits each
// side of the point and two in the exponent (a double holds them); \u
// escapes name no surrogates (a lone one is not a character).
const char kJsonRules[] = R"(ws ::= [ \t\n]?
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" (hex-not-d hex{3} | [dD] [0-7] hex{2}))
hex ::= [0-9a-fA-F]
hex-not-d ::= [0-9a-cA-Ce-fE-F]
int-part ::= "0" | [1-9] [0-9]{0,15}
integer ::= "-"? int-part
number ::= "-"? int-part ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws (string ws ":" ws value ws ("," ws string ws ":" ws value ws)*)? "}"
array ::= "[" ws (value ws ("," ws value ws)*)? "]"
)";

constexpr int64_t kMaxCount = 4096;  // the grammar's repetition bound

// A GBNF literal for bytes (a JSON text here).
std::string literal(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += char(c);
        } else if (c < 0x20) {
            static const char hex[] = "0123456789ABCDEF";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += char(c);
        }
    }
    return out + "\"";
}

// Whether two JSON values are equal as JSON Schema compares them (numbers
// by value, so 1 and 1.0 are one; object members in any order).
bool same_value(const Json& a, const Json& b) {
    if (a.kind() != b.kind()) return false;
    if (a.is_number()) return a.as_number() == b.as_number();
    if (a.is_array()) {
        if (a.size() != b.size()) return false;
        for (size_t i = 0; i < a.size(); i++)
            if (!same_value(a[i], b[i])) return false;
        return true;
    }
    if (a.is_object()) {
        if (a.size() != b.size()) return false;
        for (const auto& [k, v] : a.as_object()) {
            const Json* w = b.find(k);
            if (!w || !same_value(v, *w)) return false;
        }
        return true;
    }
    return a.dump() == b.dump();
}

// What a schema accepts, over-approximated: a finite set of values (const,
// enum) or a set of JSON kinds (integer counts as number: 1.0 is both).
// oneOf is enforced only where its branches' footprints do not meet, so
// whatever one branch generates no other accepts.
struct Footprint {
    bool values_only = false;
    std::vector<Json> values;
    std::set<std::string> kinds;
};

const char* kind_of(const Json& v) {
    if (v.is_object()) return "object";
    if (v.is_array()) return "array";
    if (v.is_string()) return "string";
    if (v.is_number()) return "number";
    if (v.is_bool()) return "boolean";
    return "null";
}

Footprint footprint(const Json& s) {
    Footprint f;
    static const char* const kAll[] = {"object", "array", "string", "number", "boolean", "null"};
    if (!s.is_object()) {
        f.kinds.insert(std::begin(kAll), std::end(kAll));
        return f;
    }
    if (const Json* c = s.find("const")) {
        f.values_only = true;
        f.values.push_back(*c);
        return f;
    }
    if (const Json* e = s.find("enum"); e && e->is_array()) {
        f.values_only = true;
        f.values = e->as_array();
        return f;
    }
    for (const char* key : {"anyOf", "oneOf"}) {
        if (const Json* a = s.find(key); a && a->is_array()) {
            f.values_only = true;
            for (const Json& b : a->as_array()) {
                Footprint g = footprint(b);
                f.values_only = f.values_only && g.values_only;
                f.values.insert(f.values.end(), g.values.begin(), g.values.end());
                f.kinds.insert(g.kinds.begin(), g.kinds.end());
            }
            if (!f.values_only) {
                for (const Json& v : f.values) f.kinds.insert(kind_of(v));
            }
            return f;
        }
    }
    if (const Json* t = s.find("type")) {
        std::vector<Json> names = t->is_array() ? t->as_array() : std::vector<Json>{*t};
        for (const Json& n : names) {
            if (!n.is_string()) continue;
            f.kinds.insert(n.as_string() == "integer" ? "number" : n.as_string());
        }
        return f;
    }
    f.kinds.insert(std::begin(kAll), std::end(kAll));  // properties, items... constrain only their own kind
    return f;
}

bool disjoint(const Footprint& a, const Footprint& b) {
    if (a.values_only && b.values_only) {
        for (const Json& x : a.values)
            for (const Json& y : b.values)
                if (same_value(x, y)) return false;
        return true;
    }
    if (a.values_only || b.values_only) {
        const Footprint& v = a.values_only ? a : b;
        const Footprint& k = a.values_only ? b : a;
        for (const Json& x : v.values)
            if (k.kinds.count(kind_of(x))) return false;
        return true;
    }
    for (const std::string& k : a.kinds)
        if (b.kinds.count(k)) return false;
    return true;
}

class Converter {
public:
    std::string run(const Json& schema) {
        const std::string root = visit(schema, "schema");
        return "root ::= " + root + "\n" + rules_ + kJsonRules;
    }

private:
    [[noreturn]] static void fail(const std::string& path, const std::string& what) {
        throw std::runtime_error("json_schema: " + path + ": " + what);
    }

    std::string rule(const std::string& body) {
        std::string name = "s";
        name += std::to_string(next_++);
        rules_ += name + " ::= " + body + "\n";
        return name;
    }

    static int64_t count(const Json& s, const char* key, const std::string& path, int64_t def) {
        const Json* v = s.find(key);
        if (!v) return def;
        if (!v->is_number() || v->as_number() != std::floor(v->as_number()) || v->as_number() < 0 ||
            v->as_number() > double(kMaxCount)) {
            fail(path, std::string("'") + key + "' must be an integer from 0 to " + std::to_string(kMaxCount));
        }
        return v->as_int();
    }

    // "x{lo,hi}" with hi < 0 meaning unbounded.
    static std::string times(const std::string& x, int64_t lo, int64_t hi) {
        if (hi < 0) return "(" + x + "){" + std::to_string(lo) + ",}";
        return "(" + x + "){" + std::to_string(lo) + "," + std::to_string(hi) + "}";
    }

    std::string visit(const Json& s, const std::string& path) {
        if (++depth_ > 64) fail(path, "nested too deep");
        struct Leave {
            int& d;
            ~Leave() { d--; }
        } leave{depth_};
        if (s.is_bool()) {
            if (!s.as_bool()) fail(path, "the schema false matches nothing");
            return "value";
        }
        if (!s.is_object()) fail(path, "a schema must be an object");
        static const char* const kKnown[] = {"type", "properties", "required", "additionalProperties", "enum", "const",
                                             "items", "minItems", "maxItems", "minLength", "maxLength", "anyOf",
                                             "oneOf", "title", "description", "$schema", "$id", "default", "examples"};
        for (const auto& [key, v] : s.as_object()) {
            bool known = false;
            for (const char* k : kKnown) known = known || key == k;
            if (!known) fail(path, "'" + key + "' is not supported");
        }
        if (const Json* c = s.find("const")) return literal(c->dump());
        if (const Json* e = s.find("enum")) {
            if (!e->is_array() || e->size() == 0) fail(path, "'enum' must be a non-empty array");
            std::string alts;
            for (const Json& v : e->as_array()) alts += (alts.empty() ? "" : " | ") + literal(v.dump());
            return rule(alts);
        }
        for (const char* key : {"anyOf", "oneOf"}) {
            if (const Json* a = s.find(key)) {
                if (!a->is_array() || a->size() == 0) fail(path, std::string("'") + key + "' must be a non-empty array");
                if (std::string(key) == "oneOf") {
                    // Exactly one: the grammar can only choose among
                    // branches, so they must never accept the same value.
                    std::vector<Footprint> f;
                    for (const Json& b : a->as_array()) f.push_back(footprint(b));
                    for (size_t i = 0; i < f.size(); i++) {
                        for (size_t j = i + 1; j < f.size(); j++) {
                            if (!disjoint(f[i], f[j])) {
                                fail(path, "'oneOf' branches " + std::to_string(i) + " and " + std::to_string(j) +
                                               " may accept the same value, so exactly one cannot be enforced: use "
                                               "'anyOf', or branches of different types or consts");
                            }
                        }
                    }
                }
                std::string alts;
                for (size_t i = 0; i < a->size(); i++) {
                    alts += (alts.empty() ? "" : " | ") + visit((*a)[i], path + "." + key + "[" + std::to_string(i) + "]");
                }
                return rule(alts);
            }
        }
        const Json* type = s.find("type");
        if (!type) {
            if (s.find("properties")) return object(s, path);
            if (s.find("items")) return array(s, path);
            return "value";
        }
        if (type->is_string()) return typed(s, type->as_string(), path);
        if (!type->is_array() || type->size() == 0) fail(path, "'type' must be a string or a non-empty array of strings");
        std::string alts;
        for (const Json& t : type->as_array()) {
            if (!t.is_string()) fail(path, "'type' must be a string or a non-empty array of strings");
            alts += (alts.empty() ? "" : " | ") + typed(s, t.as_string(), path);
        }
        return rule(alts);
    }

    std::string typed(const Json& s, const std::string& type, const std::string& path) {
        if (type == "object") return object(s, path);
        if (type == "array") return array(s, path);
        if (type == "string") {
            const int64_t lo = count(s, "minLength", path, 0), hi = count(s, "maxLength", path, -1);
            if (hi >= 0 && hi < lo) fail(path, "'maxLength' is below 'minLength'");
            if (lo == 0 && hi < 0) return "string";
            return rule("\"\\\"\" " + times("char", lo, hi) + " \"\\\"\"");
        }
        if (type == "number" || type == "integer" || type == "boolean" || type == "null") return type;
        fail(path, "unknown type '" + type + "'");
    }

    std::string object(const Json& s, const std::string& path) {
        const Json* props = s.find("properties");
        const Json* extra = s.find("additionalProperties");
        if (extra && !extra->is_bool()) fail(path, "'additionalProperties' as a schema is not supported (only false or true)");
        if (props && !props->is_object()) fail(path, "'properties' must be an object");
        std::vector<std::string> required;
        if (const Json* r = s.find("required")) {
            if (!r->is_array()) fail(path, "'required' must be an array of names");
            for (const Json& n : r->as_array()) {
                if (!n.is_string()) fail(path, "'required' must be an array of names");
                if (!props || !props->find(n.as_string())) {
                    fail(path, "'required' names '" + n.as_string() + "', which is not in 'properties'");
                }
                required.push_back(n.as_string());
            }
        }
        if (!props) return extra && !extra->as_bool() ? rule("\"{\" ws \"}\"") : "object";
        // The declared properties in their order, each required one present.
        // first_i: none written yet, from property i on; after_i: some
        // written, from i on (each one then needs a comma before it).
        const auto& p = props->as_object();
        const size_t n = p.size();
        std::vector<std::string> kv(n);
        std::vector<bool> req(n);
        for (size_t i = 0; i < n; i++) {
            kv[i] = literal(Json(p[i].first).dump()) + " ws \":\" ws " + visit(p[i].second, path + ".properties." + p[i].first);
            for (const std::string& r : required) req[i] = req[i] || r == p[i].first;
        }
        std::string after = "", first = "";  // rules for i = n: nothing left
        for (size_t i = n; i-- > 0;) {
            const std::string a = "\",\" ws " + kv[i] + " ws " + after;
            const std::string f = kv[i] + " ws " + after;
            const std::string new_after = rule(req[i] ? a : a + " | " + (after.empty() ? "\"\"" : after));
            const std::string new_first = rule(req[i] ? f : f + " | " + (first.empty() ? "\"\"" : first));
            after = new_after;
            first = new_first;
        }
        return rule("\"{\" ws " + (n ? first : std::string()) + " \"}\"");
    }

    std::string array(const Json& s, const std::string& path) {
        const Json* items = s.find("items");
        const std::string item = items ? visit(*items, path + ".items") : "value";
        const int64_t lo = count(s, "minItems", path, 0), hi = count(s, "maxItems", path, -1);
        if (hi >= 0 && hi < lo) fail(path, "'maxItems' is below 'minItems'");
        if (hi == 0) return rule("\"[\" ws \"]\"");
        const std::string more = times("\",\" ws " + item + " ws", lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
        const std::string list = item + " ws " + more;
        return rule("\"[\" ws " + (lo > 0 ? list : "(" + list + ")?") + " \"]\"");
    }

    std::string rules_;
    int next_ = 0, depth_ = 0;
};

}  // namespace

std::string json_schema_to_gbnf(const Json& schema) { return Converter().run(schema); }

std::string json_object_gbnf() { return std::string("root ::= object\n") + kJsonRules; }

}  // namespace ms
