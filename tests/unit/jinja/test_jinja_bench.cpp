// tests/unit/jinja/test_jinja_bench.cpp - hidden ([.bench]) timing of a long agent conversation
// (about 24k tokens: tools, tool-call rounds, reasoning) through the published templates; prints
// milliseconds per render and asserts nothing about them. Run: test_jinja "[.bench]"
#include "jinja_test_util.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>

using json = nlohmann::ordered_json;

namespace {

json agent_conversation(bool object_arguments) {
    json tools = json::array();
    for (int t = 0; t < 6; ++t)
        tools.push_back({{"type", "function"},
                         {"function",
                          {{"name", "tool_" + std::to_string(t)},
                           {"description", std::string(200, 'd')},
                           {"parameters",
                            {{"type", "object"},
                             {"properties",
                              {{"path", {{"type", "string"}, {"description", "A path"}}},
                               {"limit", {{"type", "integer"}, {"default", 10}}},
                               {"mode", {{"type", "string"}, {"enum", {"read", "write"}}}}}},
                             {"required", {"path"}}}}}}});
    json messages = json::array({{{"role", "system"}, {"content", std::string(2000, 's')}}});
    for (int r = 0; r < 40; ++r) {
        messages.push_back({{"role", "user"}, {"content", std::string(300, 'u')}});
        json calls = json::array();
        for (int c = 0; c < 2; ++c) {
            const json args = {{"path", "src/file_" + std::to_string(r) + ".cpp"}, {"limit", 20}};
            calls.push_back({{"id", "call_" + std::to_string(r * 2 + c)},
                             {"type", "function"},
                             {"function", {{"name", "tool_" + std::to_string(c)},
                                           {"arguments", object_arguments ? args : json(args.dump())}}}});
        }
        messages.push_back({{"role", "assistant"}, {"content", ""}, {"reasoning_content", std::string(500, 'r')},
                            {"tool_calls", calls}});
        for (int c = 0; c < 2; ++c)
            messages.push_back({{"role", "tool"}, {"tool_call_id", "call_" + std::to_string(r * 2 + c)},
                                {"content", std::string(600, 't')}});
        messages.push_back({{"role", "assistant"}, {"content", std::string(400, 'a')}});
    }
    return {{"messages", messages}, {"tools", tools}};
}

}  // namespace

TEST_CASE("jinja bench: a 24k-token agent conversation through the published templates", "[.bench]") {
    const std::string dir = std::string(TANDEM_SOURCE_DIR) + "/tests/fixtures/templates/";
    for (const char *name : {"Qwen-Qwen3-0.6B.jinja", "Qwen3-Coder.jinja", "openai-gpt-oss-120b.jinja", "GLM-4.6.jinja"}) {
        std::ifstream in(dir + name, std::ios::binary);
        const std::string source(std::istreambuf_iterator<char>(in), {});
        const json request = agent_conversation(std::string(name) != "Qwen-Qwen3-0.6B.jinja");
        using clock = std::chrono::steady_clock;
        const int n = 50;
        double vars_ms = 0, render_ms = 0;
        size_t bytes = 0;
        for (int i = 0; i < n; ++i) {
            const auto t0 = clock::now();
            const auto tmpl = tandem::jinja_template::parse(source);
            const auto vars = tandem::jinja_chat_vars(request, {});
            const auto t1 = clock::now();
            const auto out = tmpl->render(vars);
            const auto t2 = clock::now();
            vars_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
            render_ms += std::chrono::duration<double, std::milli>(t2 - t1).count();
            bytes = out.text.size();
        }
        std::printf("%-28s %7zu bytes: request to variables %.3f ms, render %.3f ms\n", name, bytes, vars_ms / n,
                    render_ms / n);
        CHECK(bytes > 50000);
    }
}
