// A JSON value, a strict parser and a writer. Used for reports, golden-file
// metadata, chat-template contexts and the server's request bodies; object
// keys keep their insertion order because reports and template contexts are
// read by people and by Jinja loops.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ms {

// Bounds for untrusted text (HTTP request bodies). Parsing takes time and
// memory linear in the text whatever the limits; these add refusals.
struct JsonLimits {
    size_t max_bytes = SIZE_MAX;
    int max_depth = 512;                // arrays/objects inside each other (the parser recurses)
    bool allow_duplicate_keys = true;   // when allowed, the last value wins at the first key's place
};

class Json {
public:
    enum class Kind { Null, Bool, Number, String, Array, Object };
    using Array = std::vector<Json>;
    using Object = std::vector<std::pair<std::string, Json>>;

    Json() = default;
    Json(std::nullptr_t) {}
    Json(bool b) : kind_(Kind::Bool), bool_(b) {}
    Json(int v) : kind_(Kind::Number), num_(v), is_int_(true), int_(v) {}
    Json(int64_t v) : kind_(Kind::Number), num_(double(v)), is_int_(true), int_(v) {}
    Json(uint64_t v) : kind_(Kind::Number), num_(double(v)), is_int_(true), int_(int64_t(v)) {}
    Json(uint32_t v) : kind_(Kind::Number), num_(double(v)), is_int_(true), int_(int64_t(v)) {}
    Json(double v) : kind_(Kind::Number), num_(v) {}
    Json(const char* s) : kind_(Kind::String), str_(s) {}
    Json(std::string s) : kind_(Kind::String), str_(std::move(s)) {}
    Json(std::string_view s) : kind_(Kind::String), str_(s) {}
    Json(Array a) : kind_(Kind::Array), arr_(std::move(a)) {}

    static Json object() { Json j; j.kind_ = Kind::Object; return j; }
    static Json array() { Json j; j.kind_ = Kind::Array; return j; }

    // Throws std::runtime_error("<what>: JSON error at line L col C: ...").
    static Json parse(std::string_view text, const std::string& what = "json", const JsonLimits& limits = {});
    static Json parse_file(const std::string& path);

    Kind kind() const { return kind_; }
    bool is_null() const { return kind_ == Kind::Null; }
    bool is_bool() const { return kind_ == Kind::Bool; }
    bool is_number() const { return kind_ == Kind::Number; }
    bool is_int() const { return kind_ == Kind::Number && is_int_; }
    bool is_string() const { return kind_ == Kind::String; }
    bool is_array() const { return kind_ == Kind::Array; }
    bool is_object() const { return kind_ == Kind::Object; }

    // Typed access; throws std::runtime_error on a kind mismatch.
    bool as_bool() const;
    double as_number() const;
    int64_t as_int() const;
    const std::string& as_string() const;
    const Array& as_array() const;
    Array& as_array();
    const Object& as_object() const;
    Object& as_object();

    // Object access. operator[] inserts (turning null into an object);
    // find returns nullptr when absent; at throws naming the key.
    Json& operator[](const std::string& key);
    const Json* find(std::string_view key) const;
    const Json& at(std::string_view key) const;
    bool contains(std::string_view key) const { return find(key) != nullptr; }

    // Array access.
    void push_back(Json v);
    const Json& operator[](size_t i) const;
    size_t size() const;  // array or object element count, string length

    // indent < 0: compact. ensure_ascii=false keeps UTF-8 as is.
    std::string dump(int indent = -1, bool ensure_ascii = false) const;

private:
    void dump_to(std::string& out, int indent, int depth, bool ensure_ascii) const;
    Kind kind_ = Kind::Null;
    bool bool_ = false;
    double num_ = 0;
    bool is_int_ = false;
    int64_t int_ = 0;
    std::string str_;
    Array arr_;
    Object obj_;
};

// Appends code point cp (< 0x110000) to out as UTF-8.
void utf8_append(std::string& out, uint32_t cp);

// Appends s as a JSON string literal (quoted, escaped) to out.
void json_quote(std::string& out, std::string_view s, bool ensure_ascii = false);

}  // namespace ms
