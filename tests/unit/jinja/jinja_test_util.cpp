// tests/unit/jinja/jinja_test_util.cpp - the oracle process (one per test run, spoken to in JSON
// lines) and the engine/oracle comparison.
#include "jinja_test_util.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <memory>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace jinja_test {

namespace {

const char *const python = "/usr/bin/python3";
const std::string script = std::string(TANDEM_SOURCE_DIR) + "/tests/unit/jinja/jinja_oracle.py";

class oracle_process {
public:
    oracle_process() {
        int to_child[2], from_child[2];
        if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
        posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
        posix_spawn_file_actions_addclose(&actions, to_child[1]);
        posix_spawn_file_actions_addclose(&actions, from_child[0]);
        const char *argv[] = {python, script.c_str(), "--serve", nullptr};
        const int rc = posix_spawn(&pid_, python, &actions, nullptr, const_cast<char **>(argv), environ);
        posix_spawn_file_actions_destroy(&actions);
        close(to_child[0]);
        close(from_child[1]);
        if (rc != 0) {
            close(to_child[1]);
            close(from_child[0]);
            pid_ = -1;
            return;
        }
        in_ = fdopen(to_child[1], "w");
        out_ = fdopen(from_child[0], "r");
    }
    ~oracle_process() {
        if (in_) std::fclose(in_);
        if (out_) std::fclose(out_);
        if (pid_ > 0) waitpid(pid_, nullptr, 0);
    }

    nlohmann::json ask(const nlohmann::ordered_json &request) {
        const std::string line = request.dump() + "\n";
        if (!in_ || std::fwrite(line.data(), 1, line.size(), in_) != line.size() || std::fflush(in_) != 0)
            throw std::runtime_error("the Jinja2 oracle is not running");
        std::string reply;
        char buf[65536];
        while (std::fgets(buf, sizeof buf, out_)) {
            reply += buf;
            if (!reply.empty() && reply.back() == '\n') break;
        }
        if (reply.empty()) throw std::runtime_error("the Jinja2 oracle exited");
        return nlohmann::json::parse(reply);
    }

private:
    pid_t pid_ = -1;
    FILE *in_ = nullptr;
    FILE *out_ = nullptr;
};

oracle_process &oracle() {
    static oracle_process p;
    return p;
}

const char *kind_name(tandem::jinja_error_kind k) {
    switch (k) {
    case tandem::jinja_error_kind::syntax: return "syntax";
    case tandem::jinja_error_kind::runtime: return "runtime";
    case tandem::jinja_error_kind::raised: return "raised";
    case tandem::jinja_error_kind::security: return "security";
    case tandem::jinja_error_kind::limit: return "limit";
    }
    return "?";
}

}  // namespace

bool oracle_available() {
    const std::string cmd = std::string(python) + " -c 'import jinja2' >/dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
}

result oracle_render(const std::string &tmpl, const nlohmann::ordered_json &vars, int64_t now) {
    nlohmann::ordered_json req = {{"template", tmpl}, {"vars", vars}, {"now", now}};
    const nlohmann::json res = oracle().ask(req);
    result r;
    r.ok = res.at("ok").get<bool>();
    if (r.ok) {
        r.output = res.at("output").get<std::string>();
    } else {
        r.error_type = res.at("error_type").get<std::string>();
        r.error = res.at("error").get<std::string>();
    }
    return r;
}

result engine_render(const std::string &tmpl, const nlohmann::ordered_json &vars, int64_t now, bool marked,
                     const tandem::jinja_limits &limits) {
    result r;
    try {
        tandem::jinja_vars v;
        for (const auto &[k, x] : vars.items()) v.set(k, x, marked);
        tandem::jinja_render_options opts;
        opts.now_unix = now;
        opts.limits = limits;
        auto out = tandem::jinja_template::parse(tmpl)->render(v, opts);
        r.ok = true;
        r.output = std::move(out.text);
        r.marked = std::move(out.marked);
    } catch (const tandem::jinja_error &e) {
        r.error_type = kind_name(e.jinja_kind());
        r.error = e.message();
    }
    return r;
}

result check_same(const std::string &tmpl, const nlohmann::ordered_json &vars) {
    const result want = oracle_render(tmpl, vars);
    const result got = engine_render(tmpl, vars);
    INFO("template: " << tmpl);
    INFO("variables: " << vars.dump());
    INFO("jinja2: " << (want.ok ? "ok [" + want.output + "]" : want.error_type + ": " + want.error));
    INFO("engine: " << (got.ok ? "ok [" + got.output + "]" : got.error_type + ": " + got.error));
    CHECK(got.ok == want.ok);
    if (got.ok && want.ok) CHECK(got.output == want.output);
    // A template's own raise_exception message must come through unchanged.
    if (!want.ok && want.error_type == "TemplateError") {
        CHECK(got.error_type == "raised");
        CHECK(got.error == want.error);
    }
    return got;
}

}  // namespace jinja_test
