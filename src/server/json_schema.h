// JSON Schema (the subset structured output needs) to a GBNF grammar whose
// sentences are JSON documents valid against the schema, for constrained
// decoding (sampling/grammar.h). Keywords it cannot enforce are refused by
// name rather than ignored.
#pragma once
#include <string>

#include "json/json.h"

namespace ms {

// Supported: type (object, array, string, number, integer, boolean, null, or
// a list of them), properties, required, additionalProperties false (absent
// or true: only the declared properties are generated, which the schema
// allows), enum, const, items, minItems, maxItems, minLength, maxLength,
// anyOf, oneOf (when no two branches can accept one value: different types,
// or consts and enums with no value in common; otherwise refused, since a
// grammar cannot exclude a sentence that fits two branches), and the
// annotations title, description, $schema, $id, default, examples.
// An empty schema is any JSON value. Throws std::runtime_error
// "json_schema: <path>: '<keyword>' is not supported" and the like.
std::string json_schema_to_gbnf(const Json& schema);

// Any JSON object (response_format json_object).
std::string json_object_gbnf();

}  // namespace ms
