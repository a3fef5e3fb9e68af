// The JSON-schema converter: refusals by keyword, and 100 random schemas
// whose grammars, walked with random token choices over a vocabulary of
// JSON-ish byte strings, only ever give documents that parse and validate
// against the schema (checked by the small validator below, written from
// the JSON Schema rules, not from the converter).
#include "server/json_schema.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "sampling/grammar.h"

namespace ms {
namespace {

std::string refusal(const std::string& schema) {
    try {
        json_schema_to_gbnf(Json::parse(schema));
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

TEST(JsonSchema, RefusesWhatItCannotEnforceByName) {
    EXPECT_EQ(refusal(R"({"type": "string", "format": "date"})"), "json_schema: schema: 'format' is not supported");
    EXPECT_EQ(refusal(R"({"type": "object", "properties": {"a": {"$ref": "#/x"}}})"),
              "json_schema: schema.properties.a: '$ref' is not supported");
    EXPECT_EQ(refusal(R"({"type": "integer", "minimum": 3})"), "json_schema: schema: 'minimum' is not supported");
    EXPECT_EQ(refusal(R"({"type": "blob"})"), "json_schema: schema: unknown type 'blob'");
    EXPECT_EQ(refusal(R"({"type": "object", "properties": {}, "required": ["a"]})"),
              "json_schema: schema: 'required' names 'a', which is not in 'properties'");
    EXPECT_EQ(refusal(R"({"type": "object", "additionalProperties": {"type": "string"}})"),
              "json_schema: schema: 'additionalProperties' as a schema is not supported (only false or true)");
    EXPECT_EQ(refusal(R"({"type": "array", "maxItems": 1, "minItems": 2})"), "json_schema: schema: 'maxItems' is below 'minItems'");
    EXPECT_EQ(refusal(R"({"enum": []})"), "json_schema: schema: 'enum' must be a non-empty array");
    EXPECT_EQ(refusal("false"), "json_schema: schema: the schema false matches nothing");
    EXPECT_EQ(refusal(R"({"type": "object", "description": "ok", "title": "t", "properties": {"a": {"type": "null"}}})"), "");
}

// oneOf is enforced where no two branches can accept one value, and refused
// (naming it) where they might: a grammar cannot exclude such a sentence.
TEST(JsonSchema, OneOfOnlyWithBranchesThatCannotMeet) {
    const std::string overlap = "json_schema: schema: 'oneOf' branches 0 and 1 may accept the same value, so exactly one "
                                "cannot be enforced: use 'anyOf', or branches of different types or consts";
    EXPECT_EQ(refusal(R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})"), overlap);
    EXPECT_EQ(refusal(R"({"oneOf": [{"type": "string"}, {"enum": [3, "a"]}]})"), overlap);
    EXPECT_EQ(refusal(R"({"oneOf": [{"const": 1}, {"const": 1.0}]})"), overlap);
    EXPECT_EQ(refusal(R"({"oneOf": [{"const": {"a": 1, "b": 2}}, {"const": {"b": 2, "a": 1}}]})"), overlap);
    EXPECT_EQ(refusal(R"({"oneOf": [{"properties": {}}, {"type": "string"}]})"), overlap);  // no type: any value
    EXPECT_EQ(refusal(R"({"oneOf": [{"anyOf": [{"type": "null"}, {"type": "array"}]}, {"type": ["string", "array"]}]})"),
              overlap);
    EXPECT_NE(refusal(R"({"oneOf": [{"type": "null"}, {"type": "string"}, {"type": "null"}]})").find("branches 0 and 2"),
              std::string::npos);
    EXPECT_EQ(refusal(R"({"oneOf": [{"type": "string"}, {"type": ["integer", "boolean"]}, {"type": "object", "properties": {}}]})"), "");
    EXPECT_EQ(refusal(R"({"oneOf": [{"const": 1}, {"enum": [2, "1"]}, {"type": "array"}]})"), "");
    EXPECT_EQ(refusal(R"({"oneOf": [{"anyOf": [{"const": 1}, {"const": 2}]}, {"type": "string"}]})"), "");
}

// --- an independent validator of the subset -------------------------------

size_t code_points(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

bool valid(const Json& v, const Json& s) {
    if (s.is_bool()) return s.as_bool();
    if (const Json* c = s.find("const")) return v.dump() == c->dump();
    if (const Json* e = s.find("enum")) {
        for (const Json& x : e->as_array())
            if (x.dump() == v.dump()) return true;
        return false;
    }
    for (const char* k : {"anyOf", "oneOf"}) {
        if (const Json* a = s.find(k)) {
            int matches = 0;
            for (const Json& sub : a->as_array()) matches += valid(v, sub);
            if (matches == 0 || (std::string(k) == "oneOf" && matches > 1)) return false;
        }
    }
    const Json* type = s.find("type");
    if (!type) return true;
    const std::string t = type->as_string();
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_bool();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number() && std::floor(v.as_number()) == v.as_number();
    if (t == "string") {
        if (!v.is_string()) return false;
        const size_t n = code_points(v.as_string());
        if (const Json* lo = s.find("minLength"); lo && n < size_t(lo->as_int())) return false;
        if (const Json* hi = s.find("maxLength"); hi && n > size_t(hi->as_int())) return false;
        return true;
    }
    if (t == "array") {
        if (!v.is_array()) return false;
        if (const Json* lo = s.find("minItems"); lo && v.size() < size_t(lo->as_int())) return false;
        if (const Json* hi = s.find("maxItems"); hi && v.size() > size_t(hi->as_int())) return false;
        for (const Json& x : v.as_array())
            if (s.find("items") && !valid(x, s.at("items"))) return false;
        return true;
    }
    if (t == "object") {
        if (!v.is_object()) return false;
        const Json& props = s.at("properties");
        for (const auto& [k, x] : v.as_object()) {
            const Json* p = props.find(k);
            if (!p) return false;  // additionalProperties false
            if (!valid(x, *p)) return false;
        }
        if (const Json* req = s.find("required")) {
            for (const Json& r : req->as_array())
                if (!v.find(r.as_string())) return false;
        }
        return true;
    }
    return false;
}

Json random_schema(std::mt19937& rng, int depth) {
    auto pick = [&](int n) { return int(rng() % unsigned(n)); };
    Json s = Json::object();
    const int kind = depth > 2 ? 2 + pick(6) : pick(10);
    static const char* kScalars[] = {"string", "integer", "number", "boolean", "null"};
    switch (kind) {
        case 0: {
            s["type"] = "object";
            Json props = Json::object(), req = Json::array();
            const int n = 1 + pick(3);
            for (int i = 0; i < n; i++) {
                const std::string name = std::string(1, char('a' + i)) + (pick(2) ? "\xC3\xA9" : "");
                props[name] = random_schema(rng, depth + 1);
                if (pick(2)) req.push_back(name);
            }
            s["properties"] = props;
            s["required"] = req;
            s["additionalProperties"] = false;
            break;
        }
        case 1:
            s["type"] = "array";
            s["items"] = random_schema(rng, depth + 1);
            s["minItems"] = pick(2);
            s["maxItems"] = 1 + pick(3);
            break;
        case 2: case 3: case 4: case 5:
            s["type"] = kScalars[pick(5)];
            if (s.at("type").as_string() == "string") {
                s["minLength"] = pick(2);
                s["maxLength"] = 2 + pick(5);
            }
            break;
        case 6: {
            Json e = Json::array();
            e.push_back("x\"y");
            e.push_back(int64_t(pick(100)));
            e.push_back(Json());
            s["enum"] = e;
            break;
        }
        case 7:
            s["const"] = Json::parse(R"({"k": [1, "\u00e9"]})");
            break;
        case 8: {
            // oneOf over branches of different kinds: a scalar type or a
            // const (which may equal what another branch allows: then the
            // converter must refuse, and the case is drawn again).
            Json a = Json::array();
            a.push_back(random_schema(rng, depth + 2));
            a.push_back(random_schema(rng, depth + 2));
            if (pick(2)) a.push_back(Json::parse(R"({"const": [true]})"));
            s["oneOf"] = a;
            try {
                json_schema_to_gbnf(s);
            } catch (const std::runtime_error&) {
                return random_schema(rng, depth);
            }
            break;
        }
        default: {
            Json a = Json::array();
            a.push_back(random_schema(rng, depth + 1));
            a.push_back(random_schema(rng, depth + 1));
            s["anyOf"] = a;
        }
    }
    return s;
}

TEST(JsonSchema, RandomSchemasGiveValidDocumentsByConstruction) {
    std::mt19937 rng(35);
    // Every byte alone (so any document can be spelled), and longer pieces
    // of JSON so tokens cross structure boundaries.
    std::vector<std::string> vocab;
    for (int b = 1; b < 256; b++) vocab.push_back(std::string(1, char(b)));
    const std::string alphabet = "{}[]\":, 0123456789.-eEtruefalsnxyzk\\u\xC3\xA9";
    for (int i = 0; i < 3000; i++) {
        std::string t;
        const int len = 2 + int(rng() % 5);
        for (int j = 0; j < len; j++) t += alphabet[rng() % alphabet.size()];
        vocab.push_back(t);
    }
    auto trie = std::make_shared<TokenTrie>(vocab);
    int documents = 0, one_of = 0;
    for (int i = 0; i < 100; i++) {
        const Json schema = random_schema(rng, 0);
        const std::string gbnf = json_schema_to_gbnf(schema);
        auto grammar = std::make_shared<Grammar>(parse_gbnf(gbnf));
        GrammarMatcher m(grammar, trie);
        std::string text;
        for (int step = 0; step < 5000 && !m.must_end(); step++) {
            if (m.can_end() && rng() % 4 == 0) break;
            const std::vector<uint64_t>& mask = m.mask();
            std::vector<int32_t> ok;
            for (size_t t = 0; t < vocab.size(); t++)
                if ((mask[t >> 6] >> (t & 63)) & 1) ok.push_back(int32_t(t));
            ASSERT_FALSE(ok.empty()) << schema.dump() << " after " << text;
            const int32_t t = ok[rng() % ok.size()];
            ASSERT_TRUE(m.accept(t));
            text += vocab[size_t(t)];
        }
        ASSERT_TRUE(m.can_end()) << schema.dump() << ": " << text;
        Json doc;
        ASSERT_NO_THROW(doc = Json::parse(text)) << schema.dump() << ": " << text;
        EXPECT_TRUE(valid(doc, schema)) << schema.dump() << ": " << text;
        documents++;
        one_of += schema.dump().find("oneOf") != std::string::npos;
    }
    EXPECT_EQ(documents, 100);
    EXPECT_GE(one_of, 5);  // the exactly-one rule was put to the test
}

// The validator itself rejects what it should, so the test above can fail.
TEST(JsonSchema, TheValidatorRejectsInvalidDocuments) {
    const Json s = Json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 2}},
                                   "required": ["a"], "additionalProperties": false})");
    EXPECT_TRUE(valid(Json::parse(R"({"a": 1, "b": "xy"})"), s));
    EXPECT_FALSE(valid(Json::parse(R"({"b": "xy"})"), s));
    EXPECT_FALSE(valid(Json::parse(R"({"a": 1.5})"), s));
    EXPECT_FALSE(valid(Json::parse(R"({"a": 1, "b": "xyz"})"), s));
    EXPECT_FALSE(valid(Json::parse(R"({"a": 1, "c": 2})"), s));
}

}  // namespace
}  // namespace ms
