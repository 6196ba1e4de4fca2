// src/grammar/json_schema_gbnf.h - pieces shared by the JSON Schema compiler's files: GBNF text
// helpers, the built-in JSON rules, and the scalar and pattern compilers.
#pragma once

#include "gbnf_ast.h"

#include "tandem/grammar.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace tandem::grammar_detail {

// Rules every generated grammar carries (json-value, json-object, json-array, json-string,
// json-char, json-number, json-ws, ...).
enum class json_builtin { value, object };
std::string json_builtin_rules(const json_schema_options &options);
// A whole grammar whose root is any JSON value / any JSON object.
std::string json_builtin_gbnf(json_builtin which, const json_schema_options &options);

// Throws error(invalid_request) "json schema at #<pointer>: <message>".
[[noreturn]] void schema_fail(const std::string &pointer, const std::string &message);

// GBNF for exactly these bytes (a string literal).
std::string gbnf_literal(std::string_view bytes);
// GBNF character class matching exactly these code points (non-empty).
std::string gbnf_class(const std::vector<cp_range> &ranges);
// JSON string content for one code point of the set: raw UTF-8 where JSON allows it, else its
// escape as Python's json.dumps writes it. Empty string when the set is empty.
std::string json_char_set(const std::vector<cp_range> &ranges);

// GBNF expressions for a schema of one type (the schema object holds the type's keywords).
std::string integer_gbnf(const nlohmann::ordered_json &schema, const std::string &pointer);
std::string number_gbnf(const nlohmann::ordered_json &schema, const std::string &pointer);
std::string string_gbnf(const nlohmann::ordered_json &schema, const std::string &pointer);

// GBNF for the content (between the quotes) of JSON strings in which the ECMAScript regex
// `pattern` finds a match (JSON Schema's unanchored semantics).
std::string pattern_gbnf(std::string_view pattern, const std::string &pointer);

}  // namespace tandem::grammar_detail
