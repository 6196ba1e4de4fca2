// src/grammar/json_schema.cpp - JSON Schema to GBNF: dispatch on keywords, objects (properties in
// the schema's order, optional ones skippable), arrays, anyOf/oneOf, const/enum and $ref (one
// rule per target, so recursion is a rule calling itself).
#include "json_schema_gbnf.h"
#include "utf8_ranges.h"

#include "tandem/error.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

namespace tandem {

using namespace grammar_detail;
using nlohmann::ordered_json;

namespace grammar_detail {

[[noreturn]] void schema_fail(const std::string &pointer, const std::string &message) {
    throw error(error_kind::invalid_request, fmt::format("json schema at #{}: {}", pointer, message));
}

std::string json_builtin_rules(const json_schema_options &options) {
    std::string ws = options.whitespace == json_whitespace::compact ? R"(json-ws ::= "")"
                                                                    : R"(json-ws ::= ( " " | "\n" [ \t]{0,20} )?)";
    return ws + "\n" + R"(json-value ::= json-object | json-array | json-string | json-number | "true" | "false" | "null"
json-object ::= "{" json-ws ( json-member ( json-ws "," json-ws json-member )* json-ws )? "}"
json-member ::= json-string json-ws ":" json-ws json-value
json-array ::= "[" json-ws ( json-value ( json-ws "," json-ws json-value )* json-ws )? "]"
json-string ::= "\"" json-char* "\""
json-char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" json-hex4 )
json-hex4 ::= [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}
json-plain ::= [^"\\\x00-\x1F]
json-number ::= json-integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
json-integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
)";
}

std::string json_builtin_gbnf(json_builtin which, const json_schema_options &options) {
    return std::string("root ::= ") + (which == json_builtin::object ? "json-object" : "json-value") + "\n" +
           json_builtin_rules(options);
}

std::string gbnf_literal(std::string_view bytes) {
    std::string out = "\"";
    for (char ch : bytes) {
        const uint8_t c = uint8_t(ch);
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c < 0x20 || c == 0x7F) {
                out += fmt::format("\\x{:02X}", c);
            } else {
                out.push_back(ch);
            }
        }
    }
    return out + "\"";
}

namespace {

std::string class_char(uint32_t cp) {
    if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return std::string(1, char(cp));
    if (cp < 0x100) return fmt::format("\\x{:02X}", cp);
    if (cp < 0x10000) return fmt::format("\\u{:04X}", cp);
    return fmt::format("\\U{:08X}", cp);
}

}  // namespace

std::string gbnf_class(const std::vector<cp_range> &ranges) {
    std::string out = "[";
    for (const cp_range &r : ranges) {
        out += class_char(r.lo);
        if (r.hi != r.lo) out += "-" + class_char(r.hi);
    }
    return out + "]";
}

std::string json_char_set(const std::vector<cp_range> &ranges) {
    std::vector<cp_range> raw;
    std::vector<uint32_t> escaped;
    for (const cp_range &r : ranges) {
        for (uint32_t c = r.lo; c <= std::min<uint32_t>(r.hi, 0x5C); ++c) {
            if (c < 0x20 || c == '"' || c == '\\') escaped.push_back(c);
        }
        // Raw pieces: r minus the control characters, '"' and '\'.
        uint32_t lo = std::max<uint32_t>(r.lo, 0x20);
        for (uint32_t cut : {uint32_t('"'), uint32_t('\\')}) {
            if (lo <= cut && cut <= r.hi) {
                if (lo < cut) raw.push_back({lo, cut - 1});
                lo = cut + 1;
            }
        }
        if (lo <= r.hi) raw.push_back({lo, r.hi});
    }
    std::vector<std::string> alternatives;
    if (!raw.empty()) alternatives.push_back(gbnf_class(raw));
    for (uint32_t c : escaped) {
        switch (c) {
        case '"': alternatives.push_back(gbnf_literal("\\\"")); break;
        case '\\': alternatives.push_back(gbnf_literal("\\\\")); break;
        case '\b': alternatives.push_back(gbnf_literal("\\b")); break;
        case '\f': alternatives.push_back(gbnf_literal("\\f")); break;
        case '\n': alternatives.push_back(gbnf_literal("\\n")); break;
        case '\r': alternatives.push_back(gbnf_literal("\\r")); break;
        case '\t': alternatives.push_back(gbnf_literal("\\t")); break;
        default: {
            const char *hex = "0123456789abcdef";
            const uint32_t low = c & 0xF;
            std::string tail = low < 10 ? gbnf_literal(std::string(1, hex[low]))
                                        : fmt::format("[{}{}]", hex[low], char(hex[low] - 'a' + 'A'));
            alternatives.push_back(gbnf_literal(fmt::format("\\u00{}", hex[c >> 4])) + " " + tail);
        }
        }
    }
    if (alternatives.empty()) return "";
    if (alternatives.size() == 1) return alternatives[0];
    std::string out = "(";
    for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? " | " : "") + alternatives[i];
    return out + ")";
}

}  // namespace grammar_detail

namespace {

const std::set<std::string> &unsupported_keywords() {
    static const std::set<std::string> k = {
        "not", "if", "then", "else", "dependentSchemas", "dependentRequired", "dependencies",
        "patternProperties", "propertyNames", "maxProperties", "contains", "minContains", "maxContains",
        "unevaluatedProperties", "unevaluatedItems", "multipleOf", "$dynamicRef", "$recursiveRef"};
    return k;
}

// Keywords that constrain a value (anything else is an annotation or an identifier).
const std::set<std::string> &value_keywords() {
    static const std::set<std::string> k = {
        "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
        "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref"};
    return k;
}

std::string pointer_escape(const std::string &token) {
    std::string out;
    for (char c : token) {
        if (c == '~') {
            out += "~0";
        } else if (c == '/') {
            out += "~1";
        } else {
            out.push_back(c);
        }
    }
    return out;
}

bool matches_type(const ordered_json &v, const std::string &type) {
    if (type == "null") return v.is_null();
    if (type == "boolean") return v.is_boolean();
    if (type == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (type == "number") return v.is_number();
    if (type == "string") return v.is_string();
    if (type == "array") return v.is_array();
    if (type == "object") return v.is_object();
    return false;
}

std::string alternatives(const std::vector<std::string> &alts) {
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
}

class schema_compiler {
public:
    schema_compiler(const ordered_json &root, const json_schema_options &options) : root_(root), options_(options) {}

    std::string run() {
        reserve_rule("root");
        define("root", schema(root_, "", "root"));
        std::string text;
        for (const auto &[name, body] : rules_) text += name + " ::= " + body + "\n";
        text += json_builtin_rules(options_);
        if (text.size() > max_gbnf_bytes) schema_fail("", fmt::format("the schema compiles to a grammar over {} bytes", max_gbnf_bytes));
        return text;
    }

private:
    const ordered_json &root_;
    json_schema_options options_;
    std::vector<std::pair<std::string, std::string>> rules_;  // in creation order
    std::unordered_map<std::string, size_t> rule_index_;
    std::unordered_map<std::string, std::string> ref_rules_;  // "$ref" value -> rule name
    uint32_t depth_ = 0;

    std::string reserve_rule(const std::string &hint) {
        std::string base;
        for (char c : hint) {
            const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
            if (ok) {
                base.push_back(c);
            } else if (!base.empty() && base.back() != '-') {
                base.push_back('-');
            }
        }
        while (!base.empty() && base.back() == '-') base.pop_back();
        if (base.size() > 48) base.resize(48);
        std::string name = base;
        for (int i = 2; rule_index_.count(name); ++i) name = base + "-" + std::to_string(i);
        if (rules_.size() >= max_rules) schema_fail("", fmt::format("the schema needs more than {} grammar rules", max_rules));
        rule_index_[name] = rules_.size();
        rules_.push_back({name, ""});
        return name;
    }

    void define(const std::string &name, std::string body) { rules_[rule_index_.at(name)].second = std::move(body); }

    static std::string sep() { return R"(json-ws "," json-ws)"; }

    uint32_t count(const ordered_json &s, const char *key, const std::string &ptr) const {
        const auto it = s.find(key);
        if (it == s.end()) return 0;
        if (!it->is_number_integer() || it->get<int64_t>() < 0) schema_fail(ptr + "/" + key, "must be a non-negative integer");
        if (it->get<int64_t>() > int64_t(max_repeat)) schema_fail(ptr + "/" + key, fmt::format("above the limit of {}", max_repeat));
        return uint32_t(it->get<int64_t>());
    }

    void check_keywords(const ordered_json &s, const std::string &ptr) const {
        for (const auto &[key, value] : s.items()) {
            if (unsupported_keywords().count(key)) schema_fail(ptr + "/" + key, "'" + key + "' is not supported");
            if (key == "uniqueItems" && !(value.is_boolean() && !value.get<bool>())) schema_fail(ptr + "/" + key, "'uniqueItems' is not supported");
            if (key == "minProperties" && !(value.is_number_integer() && value.get<int64_t>() == 0)) {
                schema_fail(ptr + "/" + key, "'minProperties' is not supported");
            }
        }
    }

    bool has_value_keywords_besides(const ordered_json &s, std::initializer_list<const char *> allowed) const {
        for (const auto &[key, value] : s.items()) {
            if (!value_keywords().count(key)) continue;
            if (std::none_of(allowed.begin(), allowed.end(), [&](const char *a) { return key == a; })) return true;
        }
        return false;
    }

    struct depth_guard {
        uint32_t &d;
        depth_guard(uint32_t &depth, const std::string &ptr) : d(depth) {
            if (++d > max_nesting) schema_fail(ptr, fmt::format("schemas nested deeper than {}", max_nesting));
        }
        ~depth_guard() { --d; }
    };

    std::string schema(const ordered_json &s, const std::string &ptr, const std::string &hint) {
        depth_guard guard(depth_, ptr);
        if (s.is_boolean()) {
            if (s.get<bool>()) return "json-value";
            schema_fail(ptr, "the schema 'false' accepts no value");
        }
        if (!s.is_object()) schema_fail(ptr, "a schema must be an object or a boolean");
        check_keywords(s, ptr);
        if (s.contains("$ref")) {
            if (has_value_keywords_besides(s, {"$ref"})) schema_fail(ptr, "keywords beside '$ref' are not supported");
            if (!s["$ref"].is_string()) schema_fail(ptr + "/$ref", "must be a string");
            return ref(s["$ref"].get<std::string>(), ptr + "/$ref");
        }
        if (s.contains("allOf")) {
            const ordered_json &all = s["allOf"];
            if (!all.is_array() || all.size() != 1) schema_fail(ptr + "/allOf", "only an allOf of one schema is supported");
            if (has_value_keywords_besides(s, {"allOf"})) schema_fail(ptr, "keywords beside 'allOf' are not supported");
            return schema(all[0], ptr + "/allOf/0", hint);
        }
        if (s.contains("anyOf") || s.contains("oneOf")) return any_of(s, ptr, hint);
        std::vector<std::string> types;
        if (s.contains("type")) {
            const ordered_json &t = s["type"];
            if (t.is_string()) {
                types.push_back(t.get<std::string>());
            } else if (t.is_array() && !t.empty() && std::all_of(t.begin(), t.end(), [](const ordered_json &x) { return x.is_string(); })) {
                for (const ordered_json &x : t) types.push_back(x.get<std::string>());
            } else {
                schema_fail(ptr + "/type", "must be a type name or a non-empty array of them");
            }
        }
        if (s.contains("const")) return enum_values(ordered_json::array({s["const"]}), types, ptr + "/const");
        if (s.contains("enum")) return enum_values(s["enum"], types, ptr + "/enum");
        if (types.empty()) {
            const auto has = [&](std::initializer_list<const char *> keys) {
                return std::any_of(keys.begin(), keys.end(), [&](const char *k) { return s.contains(k); });
            };
            if (has({"properties", "additionalProperties", "required"})) return typed(s, "object", ptr, hint);
            if (has({"items", "prefixItems", "minItems", "maxItems"})) return typed(s, "array", ptr, hint);
            if (has({"pattern", "minLength", "maxLength", "format"})) return typed(s, "string", ptr, hint);
            if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) return typed(s, "number", ptr, hint);
            return "json-value";
        }
        std::vector<std::string> alts;
        for (const std::string &t : types) alts.push_back(typed(s, t, ptr, hint));
        return alternatives(alts);
    }

    std::string any_of(const ordered_json &s, const std::string &ptr, const std::string &hint) {
        if (s.contains("anyOf") && s.contains("oneOf")) schema_fail(ptr, "'anyOf' together with 'oneOf' is not supported");
        const char *key = s.contains("anyOf") ? "anyOf" : "oneOf";
        const ordered_json &list = s[key];
        if (!list.is_array() || list.empty()) schema_fail(ptr + "/" + key, "must be a non-empty array of schemas");
        if (has_value_keywords_besides(s, {key})) {
            schema_fail(ptr, fmt::format("keywords beside '{}' are not supported (move them into each alternative)", key));
        }
        std::vector<std::string> alts;
        for (size_t i = 0; i < list.size(); ++i) {
            alts.push_back(schema(list[i], fmt::format("{}/{}/{}", ptr, key, i), fmt::format("{}-{}", hint, i)));
        }
        return alternatives(alts);
    }

    std::string enum_values(const ordered_json &values, const std::vector<std::string> &types, const std::string &ptr) {
        if (!values.is_array() || values.empty()) schema_fail(ptr, "must be a non-empty array");
        std::vector<std::string> alts;
        for (const ordered_json &v : values) {
            const bool typed_ok = types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string &t) { return matches_type(v, t); });
            if (typed_ok) alts.push_back(gbnf_literal(v.dump()));
        }
        if (alts.empty()) schema_fail(ptr, "no value matches the schema's 'type'");
        return alternatives(alts);
    }

    std::string typed(const ordered_json &s, const std::string &type, const std::string &ptr, const std::string &hint) {
        if (type == "null") return R"("null")";
        if (type == "boolean") return R"(("true" | "false"))";
        if (type == "integer") return integer_gbnf(s, ptr);
        if (type == "number") return number_gbnf(s, ptr);
        if (type == "string") return string_gbnf(s, ptr);
        if (type == "object") return object(s, ptr, hint);
        if (type == "array") return array(s, ptr, hint);
        schema_fail(ptr + "/type", fmt::format("unknown type '{}' (allowed: string, number, integer, boolean, null, object, array)", type));
    }

    std::string ref(const std::string &target, const std::string &ptr) {
        const auto known = ref_rules_.find(target);
        if (known != ref_rules_.end()) return known->second;
        if (target.empty() || target[0] != '#') schema_fail(ptr, "only references inside the schema ('#/...') are supported");
        const ordered_json *node = &root_;
        std::string last = "root";
        size_t pos = 1;
        if (pos < target.size() && target[pos] != '/') schema_fail(ptr, "'" + target + "' is not a JSON pointer ('#/...')");
        while (pos < target.size()) {
            const size_t next = target.find('/', pos + 1);
            std::string token = target.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
            pos = next == std::string::npos ? target.size() : next;
            token = unescape_token(token);
            if (node->is_object() && node->contains(token)) {
                node = &(*node)[token];
            } else if (node->is_array() && !token.empty() && token.size() < 10 &&
                       std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                       std::stoul(token) < node->size()) {
                node = &(*node)[std::stoul(token)];
            } else {
                schema_fail(ptr, "'" + target + "' does not resolve inside the schema");
            }
            last = token;
        }
        const std::string name = reserve_rule("ref-" + last);
        ref_rules_[target] = name;
        define(name, schema(*node, target.substr(1), name));
        return name;
    }

    static std::string unescape_token(const std::string &token) {
        std::string out;
        for (size_t i = 0; i < token.size(); ++i) {
            if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
                out.push_back(token[++i] == '0' ? '~' : '/');
            } else if (token[i] == '%' && i + 2 < token.size() && isxdigit(uint8_t(token[i + 1])) && isxdigit(uint8_t(token[i + 2]))) {
                out.push_back(char(std::stoi(token.substr(i + 1, 2), nullptr, 16)));
                i += 2;
            } else {
                out.push_back(token[i]);
            }
        }
        return out;
    }

    std::string object(const ordered_json &s, const std::string &ptr, const std::string &hint);
    std::string array(const ordered_json &s, const std::string &ptr, const std::string &hint);
    std::string extra_key(const std::vector<std::string> &names, const std::string &hint);
};

// Keys of additional properties: JSON strings without escapes whose text is none of the
// declared names (a duplicate key could carry a value of the wrong type). One rule per node of
// the names' trie: below a node, either a child's character continues the trie, or any other
// character leaves it for good.
std::string schema_compiler::extra_key(const std::vector<std::string> &names, const std::string &hint) {
    if (names.empty()) return "json-string";
    struct trie {
        std::map<uint32_t, size_t> children;
        bool is_name = false;
    };
    std::vector<trie> nodes(1);
    for (const std::string &name : names) {
        size_t n = 0;
        for (size_t i = 0; i < name.size();) {
            uint32_t cp;
            const size_t len = utf8_decode(name, i, cp);
            i += len ? len : 1;
            const auto [it, inserted] = nodes[n].children.try_emplace(cp, nodes.size());
            if (inserted) nodes.emplace_back();
            n = it->second;
        }
        nodes[n].is_name = true;
    }
    std::vector<std::string> rule_names(nodes.size());
    for (size_t n = 0; n < nodes.size(); ++n) rule_names[n] = reserve_rule(hint + "-k");
    for (size_t n = 0; n < nodes.size(); ++n) {
        std::vector<std::string> alts;
        if (!nodes[n].is_name) alts.push_back(R"("")");
        std::vector<cp_range> excluded{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
        for (const auto &[cp, child] : nodes[n].children) {
            if (cp < 0x20 || cp == '"' || cp == '\\') continue;  // never written raw: no clash possible
            excluded.push_back({cp, cp});
            alts.push_back(gbnf_class({{cp, cp}}) + " " + rule_names[child]);
        }
        const std::vector<cp_range> other = cp_ranges_normalize(excluded, true);
        if (!other.empty()) alts.push_back(gbnf_class(other) + " json-plain*");
        define(rule_names[n], alternatives(alts));
    }
    // The quotes belong to the key's rule: it ends on its closing quote, not inside the text.
    const std::string key = reserve_rule(hint + "-key");
    define(key, R"("\"" )" + rule_names[0] + R"( "\"")");
    return key;
}

std::string schema_compiler::object(const ordered_json &s, const std::string &ptr, const std::string &hint) {
    struct entry {
        std::string name, value;
        bool required;
    };
    std::vector<entry> entries;
    std::set<std::string> required;
    if (s.contains("required")) {
        const ordered_json &r = s["required"];
        if (!r.is_array()) schema_fail(ptr + "/required", "must be an array of property names");
        for (const ordered_json &x : r) {
            if (!x.is_string()) schema_fail(ptr + "/required", "must be an array of property names");
            required.insert(x.get<std::string>());
        }
    }
    if (s.contains("properties")) {
        const ordered_json &props = s["properties"];
        if (!props.is_object()) schema_fail(ptr + "/properties", "must be an object");
        for (const auto &[name, sub] : props.items()) {
            entries.push_back({name, schema(sub, ptr + "/properties/" + pointer_escape(name), hint + "-" + name),
                               required.count(name) > 0});
        }
    }
    if (s.contains("required")) {
        for (const ordered_json &x : s["required"]) {
            const std::string name = x.get<std::string>();
            const bool declared = std::any_of(entries.begin(), entries.end(), [&](const entry &e) { return e.name == name; });
            if (!declared) entries.push_back({name, "json-value", true});
        }
    }
    // Absent additionalProperties: none when properties are declared (outputs stay valid and
    // models stay on the declared keys), any when the schema declares no property at all.
    std::string extra_value;
    if (s.contains("additionalProperties")) {
        const ordered_json &a = s["additionalProperties"];
        if (!(a.is_boolean() && !a.get<bool>())) extra_value = schema(a, ptr + "/additionalProperties", hint + "-extra");
    } else if (entries.empty()) {
        extra_value = "json-value";
    }
    const auto kv = [&](const entry &e) {
        return gbnf_literal(nlohmann::json(e.name).dump()) + R"( json-ws ":" json-ws )" + e.value;
    };
    std::string extra_kv;
    if (!extra_value.empty()) {
        std::vector<std::string> names;
        for (const entry &e : entries) names.push_back(e.name);
        extra_kv = extra_key(names, hint) + R"( json-ws ":" json-ws )" + extra_value;
    }
    // f<j>: the first written property is entry j or a later one; a<j>: one was written before j.
    const size_t n = entries.size();
    const std::string rule = reserve_rule(hint);
    const std::string tail = extra_kv.empty() ? R"("")" : "( " + sep() + " " + extra_kv + " )*";
    std::vector<std::string> after(n + 1);
    for (size_t j = 1; j <= n; ++j) after[j] = reserve_rule(rule + "-a" + std::to_string(j));
    for (size_t j = n + 1; j-- > 1;) {
        if (j == n) {
            define(after[j], tail);
        } else {
            const std::string item = sep() + " " + kv(entries[j]);
            define(after[j], (entries[j].required ? item : "( " + item + " )?") + " " + after[j + 1]);
        }
    }
    std::vector<std::string> starts;  // alternatives for the first written property
    bool all_optional = true;
    for (size_t j = 0; j < n; ++j) {
        starts.push_back(kv(entries[j]) + " " + after[j + 1]);
        if (entries[j].required) {
            all_optional = false;
            break;
        }
    }
    if (all_optional && !extra_kv.empty()) starts.push_back(extra_kv + " " + tail);
    if (starts.empty()) {
        define(rule, R"("{" json-ws "}")");
    } else if (all_optional) {
        define(rule, R"("{" json-ws ( )" + alternatives(starts) + R"( json-ws )? "}")");
    } else {
        define(rule, R"("{" json-ws )" + alternatives(starts) + R"( json-ws "}")");
    }
    return rule;
}

std::string schema_compiler::array(const ordered_json &s, const std::string &ptr, const std::string &hint) {
    const ordered_json *prefix = nullptr;
    std::string prefix_key = "prefixItems", items_key = "items";
    if (s.contains("prefixItems")) prefix = &s["prefixItems"];
    if (s.contains("items") && s["items"].is_array()) {
        if (prefix) schema_fail(ptr + "/items", "an array 'items' together with 'prefixItems'");
        prefix = &s["items"], prefix_key = "items", items_key = "additionalItems";
    }
    if (prefix && !prefix->is_array()) schema_fail(ptr + "/" + prefix_key, "must be an array of schemas");
    const uint32_t min = count(s, "minItems", ptr);
    const bool bounded = s.contains("maxItems");
    const uint32_t max = bounded ? count(s, "maxItems", ptr) : repeat_unbounded;
    if (min > max) schema_fail(ptr, "minItems is above maxItems");
    size_t k = prefix ? std::min<size_t>(prefix->size(), max) : 0;
    std::vector<std::string> parts;
    for (size_t i = 0; i < k; ++i) {
        parts.push_back(schema((*prefix)[i], fmt::format("{}/{}/{}", ptr, prefix_key, i), fmt::format("{}-{}", hint, i)));
    }
    std::string item;
    const bool no_more = s.contains(items_key) && s[items_key].is_boolean() && !s[items_key].get<bool>();
    if (!no_more) item = s.contains(items_key) ? schema(s[items_key], ptr + "/" + items_key, hint + "-item") : "json-value";
    uint32_t rest_lo = min > k ? uint32_t(min - k) : 0;
    uint32_t rest_hi = max == repeat_unbounded ? repeat_unbounded : uint32_t(max - k);
    if (item.empty()) {
        if (rest_lo > 0) schema_fail(ptr, "minItems asks for more items than the schema allows");
        rest_hi = 0;
    }
    const auto repeat = [](const std::string &x, uint32_t lo, uint32_t hi) {
        if (hi == 0) return std::string();
        if (hi == repeat_unbounded) return fmt::format("( {} ){{{},}}", x, lo);
        return fmt::format("( {} ){{{},{}}}", x, lo, hi);
    };
    std::string seq;
    bool nullable = false;
    if (k > 0) {
        seq = parts[0];
        for (size_t i = 1; i < k; ++i) seq += " " + sep() + " " + parts[i];
        if (rest_hi > 0) seq += " " + repeat(sep() + " " + item, rest_lo, rest_hi);
    } else if (rest_hi > 0) {
        seq = item;
        const uint32_t more_hi = rest_hi == repeat_unbounded ? repeat_unbounded : rest_hi - 1;
        if (more_hi > 0) seq += " " + repeat(sep() + " " + item, rest_lo > 0 ? rest_lo - 1 : 0, more_hi);
        nullable = rest_lo == 0;
    } else {
        nullable = true;
    }
    const std::string rule = reserve_rule(hint);
    if (seq.empty()) {
        define(rule, R"("[" json-ws "]")");
    } else if (nullable) {
        define(rule, R"("[" json-ws ( )" + seq + R"( json-ws )? "]")");
    } else {
        define(rule, R"("[" json-ws )" + seq + R"( json-ws "]")");
    }
    return rule;
}

}  // namespace

std::string json_schema_to_gbnf(const ordered_json &schema, const json_schema_options &options) {
    return schema_compiler(schema, options).run();
}

}  // namespace tandem
