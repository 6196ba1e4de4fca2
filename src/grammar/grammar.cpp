// src/grammar/grammar.cpp - the public grammar front ends: GBNF text, JSON Schemas, built-in JSON.
#include "gbnf_ast.h"
#include "json_schema_gbnf.h"

#include "tandem/error.h"
#include "tandem/grammar.h"

#include <nlohmann/json.hpp>

namespace tandem {

using namespace grammar_detail;

grammar grammar::from_gbnf(std::string_view text) {
    const ast_grammar ast = gbnf_parse(text);
    return grammar(grammar_compile(ast, std::string(text)));
}

grammar grammar::from_json_schema(const nlohmann::ordered_json &schema, const json_schema_options &options) {
    const std::string text = json_schema_to_gbnf(schema, options);
    try {
        return from_gbnf(text);
    } catch (const error &e) {
        // Only reachable through $ref cycles that match no text (the compiler emits valid GBNF).
        fail(error_kind::invalid_request, "json schema: {}", e.what());
    }
}

grammar grammar::from_json_schema_text(std::string_view schema_text, const json_schema_options &options) {
    nlohmann::ordered_json schema;
    try {
        schema = nlohmann::ordered_json::parse(schema_text);
    } catch (const nlohmann::json::exception &e) {
        fail(error_kind::invalid_request, "json schema: not valid JSON: {}", e.what());
    }
    return from_json_schema(schema, options);
}

grammar grammar::json_object(const json_schema_options &options) {
    return from_gbnf(json_builtin_gbnf(json_builtin::object, options));
}

grammar grammar::json_value(const json_schema_options &options) {
    return from_gbnf(json_builtin_gbnf(json_builtin::value, options));
}

const std::string &grammar::gbnf() const { return impl_->source; }
int32_t grammar::n_rules() const { return int32_t(impl_->rule_start.size()); }
int32_t grammar::n_states() const { return int32_t(impl_->states.size()); }

}  // namespace tandem
