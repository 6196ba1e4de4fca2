// src/tools/cmd_template.cpp - `tandem template`: the prompt text a chat template makes of an
// OpenAI chat request body, rendered by the Jinja engine exactly as transformers renders it.
#include "commands.h"

#include "tandem/chat_template.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/jinja.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <iostream>
#include <string>

namespace {

struct template_cli {
    std::string model, template_file, request, template_name, bos, eos, tool_arguments = "given";
    std::optional<int64_t> now;
    bool show_marked = false;
};

std::string read_file(const std::string &path, const char *what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) tandem::fail(tandem::error_kind::config, "cannot read {} '{}'", what, path);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

std::optional<std::string> token_text(const tandem::gguf_file &file, const char *id_key) {
    const tandem::gguf_value *id = file.find(id_key);
    const tandem::gguf_value *tokens = file.find("tokenizer.ggml.tokens");
    if (!id || !tokens || !std::holds_alternative<int64_t>(id->data) || !std::holds_alternative<tandem::gguf_array>(tokens->data))
        return std::nullopt;
    const auto &strings = std::get<tandem::gguf_array>(tokens->data).strings;
    const int64_t i = std::get<int64_t>(id->data);
    if (i < 0 || static_cast<size_t>(i) >= strings.size()) return std::nullopt;
    return strings[static_cast<size_t>(i)];
}

// The named templates a GGUF carries (tokenizer.chat_template.<name>), for messages.
std::string template_names(const tandem::gguf_file &file) {
    std::string names;
    const std::string prefix = "tokenizer.chat_template.";
    for (const auto &kv : file.kvs())
        if (kv.key.rfind(prefix, 0) == 0) names += (names.empty() ? "" : ", ") + kv.key.substr(prefix.size());
    return names.empty() ? "none" : names;
}

// transformers' choice among a tokenizer's templates: the one named, else `tool_use` when the
// request offers tools and the file has it, else the default.
std::string gguf_template(const tandem::gguf_file &file, const std::string &name, bool has_tools) {
    std::string key = "tokenizer.chat_template";
    if (!name.empty()) key += "." + name;
    else if (has_tools && file.has("tokenizer.chat_template.tool_use")) key += ".tool_use";
    const tandem::gguf_value *v = file.find(key);
    if (!v || !std::holds_alternative<std::string>(v->data)) {
        if (name.empty())
            tandem::fail(tandem::error_kind::config, "{} has no tokenizer.chat_template; pass --chat-template-file",
                         file.path());
        tandem::fail(tandem::error_kind::config, "{} has no chat template named '{}' (named templates: {})", file.path(),
                     name, template_names(file));
    }
    return std::get<std::string>(v->data);
}

tandem::jinja_tool_arguments parse_tool_arguments(const std::string &s) {
    if (s == "given") return tandem::jinja_tool_arguments::given;
    if (s == "object") return tandem::jinja_tool_arguments::object;
    if (s == "string") return tandem::jinja_tool_arguments::string;
    if (s == "auto") return tandem::jinja_tool_arguments::given;  // replaced by the probed form below
    tandem::fail(tandem::error_kind::config, "--tool-arguments '{}': expected given, object or string", s);
}

int run_template(const template_cli &cli) {
    using namespace tandem;
    const std::string body = cli.request == "-" ? std::string(std::istreambuf_iterator<char>(std::cin.rdbuf()), {})
                                                : read_file(cli.request, "request");
    auto request = nlohmann::ordered_json::parse(body, nullptr, false);
    if (request.is_discarded()) fail(error_kind::config, "{} is not valid JSON", cli.request);
    const bool has_tools = request.is_object() && request.contains("tools") && request["tools"].is_array();

    jinja_chat_options chat;
    chat.tool_arguments = parse_tool_arguments(cli.tool_arguments);
    std::string source;
    if (!cli.model.empty()) {
        auto file = gguf_file::open(cli.model);
        source = gguf_template(*file, cli.template_name, has_tools);
        chat.bos_token = token_text(*file, "tokenizer.ggml.bos_token_id");
        chat.eos_token = token_text(*file, "tokenizer.ggml.eos_token_id");
    } else {
        if (!cli.template_name.empty()) fail(error_kind::config, "--template-name selects among a GGUF's templates; it needs -m");
        source = read_file(cli.template_file, "chat template");
    }
    if (!cli.bos.empty()) chat.bos_token = cli.bos;
    if (!cli.eos.empty()) chat.eos_token = cli.eos;
    // auto: the form tandem-server probes for this template and passes it.
    if (cli.tool_arguments == "auto")
        chat.tool_arguments = chat_template::from_jinja(source, "template", chat.bos_token, chat.eos_token).jinja_options.tool_arguments;

    const auto tmpl = jinja_template::parse(source);
    jinja_render_options options;
    options.now_unix = cli.now;
    const jinja_output out = tmpl->render(jinja_chat_vars(request, chat), options);
    std::fwrite(out.text.data(), 1, out.text.size(), stdout);
    std::fflush(stdout);
    if (cli.show_marked) {
        std::string ranges = "[";
        for (size_t i = 0; i < out.marked.size(); ++i)
            ranges += fmt::format("{}[{}, {}]", i ? ", " : "", out.marked[i].begin, out.marked[i].end);
        std::fprintf(stderr, "%s]\n", ranges.c_str());
    }
    return 0;
}

}  // namespace

TANDEM_COMMAND(template, "Print the prompt a chat template makes of an OpenAI chat request body", [](CLI::App &sub) {
    auto cli = std::make_shared<template_cli>();
    auto *model = sub.add_option("-m,--model", cli->model, "GGUF file whose tokenizer.chat_template to use");
    auto *file = sub.add_option("--chat-template-file", cli->template_file, "Jinja chat template file");
    model->excludes(file);
    sub.add_option("--request", cli->request, "OpenAI chat request body (JSON file, - for stdin)")->required();
    sub.add_option("--bos-token", cli->bos, "bos_token text (default: the GGUF's)");
    sub.add_option("--eos-token", cli->eos, "eos_token text (default: the GGUF's)");
    sub.add_option("--template-name", cli->template_name, "Named template of the GGUF (tokenizer.chat_template.NAME)");
    sub.add_option("--tool-arguments", cli->tool_arguments,
                   "Assistant tool_calls arguments as given (transformers), parsed to objects, as strings, or auto: "
                   "the form tandem-server probes for this template and passes")
        ->check(CLI::IsMember({"given", "object", "string", "auto"}));
    sub.add_option("--now", cli->now, "Clock for strftime_now, in Unix seconds (default: now)");
    sub.add_flag("--show-marked", cli->show_marked, "Print the byte ranges that came from the request to stderr");
    return [cli] {
        if (cli->model.empty() && cli->template_file.empty())
            tandem::fail(tandem::error_kind::config, "pass -m FILE or --chat-template-file FILE");
        return run_template(*cli);
    };
});
