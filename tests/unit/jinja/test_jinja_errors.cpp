// tests/unit/jinja/test_jinja_errors.cpp - errors name what and where (syntax errors by line and
// column, runtime errors by line), raise_exception carries the template's own words, the sandbox's
// refusals are security errors, chat requests are checked field by field; and the parse cache and
// concurrent renders.
#include "jinja_test_util.h"

#include <catch2/catch.hpp>

#include <thread>

using json = nlohmann::ordered_json;
using tandem::jinja_error;
using tandem::jinja_error_kind;

namespace {

jinja_error parse_error(const std::string &tmpl) {
    try {
        tandem::jinja_template::parse(tmpl);
    } catch (const jinja_error &e) {
        return e;
    }
    FAIL("parsed: " << tmpl);
    throw std::logic_error("unreachable");
}

jinja_error render_error(const std::string &tmpl, const json &vars = json::object()) {
    tandem::jinja_vars v;
    for (const auto &[k, x] : vars.items()) v.set(k, x, true);
    try {
        tandem::jinja_template::parse(tmpl)->render(v);
    } catch (const jinja_error &e) {
        return e;
    }
    FAIL("rendered: " << tmpl);
    throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("jinja errors: syntax errors name the line and column", "[jinja]") {
    // Line 2, and the `%}` where an expression was expected starts at byte 13.
    auto e = parse_error("line one\n{% for x in %}{% endfor %}");
    CHECK(e.jinja_kind() == jinja_error_kind::syntax);
    CHECK(e.line() == 2);
    CHECK(e.column() == 13);
    CHECK(std::string(e.what()).rfind("line 2, column 13: ", 0) == 0);

    e = parse_error("a\nb\n  {{ x + }}");
    CHECK(e.line() == 3);
    CHECK(e.column() == 10);

    e = parse_error("{% if x %}\n{% endfor %}");
    CHECK(e.line() == 2);
    CHECK(e.message().find("endfor") != std::string::npos);

    e = parse_error("ok\n\n{% include 'secrets.txt' %}");
    CHECK(e.line() == 3);
    CHECK(e.message().find("'include' is not supported") != std::string::npos);

    e = parse_error("{{ 'never closed }}");
    CHECK(e.line() == 1);
    CHECK(e.column() == 4);

    CHECK(parse_error("{% if true %}\nno end").message().find("endif") != std::string::npos);
    CHECK(parse_error("{{ x|nosuch }}").message() == "No filter named 'nosuch'.");
    CHECK(parse_error("{{ x is nosuch }}").message() == "No test named 'nosuch'.");
    CHECK(parse_error("{% for x in y recursive %}{% endfor %}").message().find("recursive") != std::string::npos);
}

TEST_CASE("jinja errors: runtime errors name the line; the error is a request error", "[jinja]") {
    auto e = render_error("one\ntwo\n{{ m.a.b }}", {{"m", json::object()}});
    CHECK(e.jinja_kind() == jinja_error_kind::runtime);
    CHECK(e.line() == 3);
    CHECK(e.message() == "'dict object' has no attribute 'a'");
    CHECK(e.kind() == tandem::error_kind::invalid_request);

    e = render_error("{{ missing.x }}");
    CHECK(e.message() == "'missing' is undefined");
    e = render_error("{{ 'a' + 1 }}");
    CHECK(e.message() == "can only concatenate str (not \"int\") to str");
}

TEST_CASE("jinja errors: raise_exception carries the template's own message", "[jinja]") {
    const auto e = render_error("x\n{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}");
    CHECK(e.jinja_kind() == jinja_error_kind::raised);
    CHECK(std::string(e.what()) == "Conversation roles must alternate user/assistant/user/assistant/...");
    CHECK(e.line() == 2);
}

TEST_CASE("jinja errors: the immutable sandbox refuses list and dict mutation", "[jinja]") {
    for (const char *t : {"{{ xs.append(1) }}", "{{ xs.extend([1]) }}", "{{ d.update({}) }}", "{{ d.setdefault('a') }}",
                          "{{ d.pop('a') }}", "{{ xs.sort() }}"}) {
        const auto e = render_error(t, {{"xs", {1}}, {"d", {{"a", 1}}}});
        INFO(t);
        CHECK(e.jinja_kind() == jinja_error_kind::security);
        CHECK(e.message().find("is unsafe") != std::string::npos);
    }
}

TEST_CASE("jinja errors: chat requests are checked field by field", "[jinja]") {
    auto chat_error = [](const json &request, tandem::jinja_chat_options o = {}) {
        try {
            tandem::jinja_chat_vars(request, o);
        } catch (const tandem::error &e) {
            CHECK(e.kind() == tandem::error_kind::invalid_request);
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    const json user = {{"role", "user"}, {"content", "hi"}};
    CHECK(chat_error(json::array()).find("JSON object") != std::string::npos);
    CHECK(chat_error({{"model", "x"}}).find("'messages'") != std::string::npos);
    CHECK(chat_error({{"messages", {user}}, {"tools", "x"}}).find("'tools'") != std::string::npos);
    CHECK(chat_error({{"messages", {user}}, {"add_generation_prompt", 1}}).find("add_generation_prompt") != std::string::npos);
    CHECK(chat_error({{"messages", {user}}, {"chat_template_kwargs", {1}}}).find("chat_template_kwargs") != std::string::npos);
    CHECK(chat_error({{"messages", {user}}, {"chat_template_kwargs", {{"messages", 1}}}}).find("messages") != std::string::npos);
    tandem::jinja_chat_options as_objects;
    as_objects.tool_arguments = tandem::jinja_tool_arguments::object;
    const json bad_args = {{"messages", {{{"role", "assistant"}, {"content", ""},
                                          {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "{not json"}}}}}}}}}};
    CHECK(chat_error(bad_args, as_objects).find("messages[0].tool_calls[0].function.arguments") != std::string::npos);
    CHECK(chat_error({{"messages", {user}}}) == "accepted");
}

TEST_CASE("jinja errors: chat variables as transformers passes them", "[jinja]") {
    const json request = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"chat_template_kwargs", {{"enable_thinking", false}}}};
    tandem::jinja_chat_options o;
    o.bos_token = "<s>";
    const auto vars = tandem::jinja_chat_vars(request, o);
    const auto out = tandem::jinja_template::parse(
                         "{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} {{ bos_token }} "
                         "{{ eos_token is defined }} {{ enable_thinking }} {{ messages[0].content }}")
                         ->render(vars);
    CHECK(out.text == "True True True <s> False False hi");
}

TEST_CASE("jinja errors: templates are parsed once and render from many threads", "[jinja]") {
    const std::string src = "{% for m in messages %}{{ m.role }}:{{ m.content|upper }};{% endfor %}";
    const auto a = tandem::jinja_template::parse(src);
    CHECK(tandem::jinja_template::parse(src) == a);
    CHECK(tandem::jinja_template::parse(src + " ") != a);

    json messages = json::array();
    for (int i = 0; i < 50; ++i) messages.push_back({{"role", "user"}, {"content", "message " + std::to_string(i)}});
    tandem::jinja_vars vars;
    vars.set("messages", messages, true);
    const std::string want = a->render(vars).text;
    std::vector<std::string> got(4);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < got.size(); ++t)
        threads.emplace_back([&, t] {
            for (int k = 0; k < 20; ++k) got[t] = tandem::jinja_template::parse(src)->render(vars).text;
        });
    for (auto &th : threads) th.join();
    for (const auto &g : got) CHECK(g == want);
}

TEST_CASE("jinja errors: values that refer back to what holds them render (and, under ASan, are freed)", "[jinja]") {
    const auto r = jinja_test::engine_render(
        "{% set ns = namespace(self=none, loops=[]) %}{% set ns.self = ns %}"
        "{% for i in range(3) %}{% macro m() %}{{ i }}{% endmacro %}{% set ns.keep = m %}{% set ns.loop = loop %}{% endfor %}"
        "{{ ns.keep() }}{{ ns.self.self.loop.index }}{% set ns.d = {'ns': ns, 'list': [ns]} %}{{ ns.d.list[0].self is defined }}",
        json::object());
    REQUIRE(r.ok);
    CHECK(r.output == "23True");
}
