// src/jinja/jinja_template.cpp - the public face: errors, render variables, the parse cache keyed
// by template text, and render(), which lets nothing but jinja_error out.
#include "jinja_eval.h"

#include <list>
#include <mutex>
#include <new>
#include <unordered_map>

namespace tandem {

namespace {

std::string error_text(jinja_error_kind kind, int line, int column, const std::string &message) {
    if (kind == jinja_error_kind::raised || line == 0) return message;
    return fmt::format("line {}, column {}: {}", line, column, message);
}

// Templates beyond this size are refused; published chat templates are under 20 KB.
constexpr size_t max_template_bytes = 1u << 20;
// Distinct templates kept parsed; a server renders with one or two.
constexpr size_t cache_capacity = 16;

}  // namespace

jinja_error::jinja_error(jinja_error_kind kind, int line, int column, const std::string &message)
    : error(error_kind::invalid_request, error_text(kind, line, column, message)),
      jinja_kind_(kind), line_(line), column_(column), message_(message) {}

// ---- variables ----

struct jinja_vars::impl {
    std::vector<std::pair<std::string, jinja::value>> vars;
};

jinja_vars::jinja_vars() : impl_(std::make_unique<impl>()) {}
jinja_vars::~jinja_vars() = default;
jinja_vars::jinja_vars(jinja_vars &&) noexcept = default;
jinja_vars &jinja_vars::operator=(jinja_vars &&) noexcept = default;

void jinja_vars::set(const std::string &name, const nlohmann::ordered_json &value, bool marked) {
    jinja::value v = jinja::from_json(value, marked);
    for (auto &[k, old] : impl_->vars)
        if (k == name) {
            old = std::move(v);
            return;
        }
    impl_->vars.emplace_back(name, std::move(v));
}

bool jinja_vars::has(const std::string &name) const {
    for (const auto &kv : impl_->vars)
        if (kv.first == name) return true;
    return false;
}

// ---- templates ----

struct jinja_template::impl {
    std::unique_ptr<jinja::program> prog;
};

jinja_template::jinja_template(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
jinja_template::~jinja_template() = default;

std::shared_ptr<const jinja_template> jinja_template::parse(std::string_view source) {
    static std::mutex mu;
    static std::list<std::pair<std::string, std::shared_ptr<const jinja_template>>> lru;
    static std::unordered_map<std::string_view, decltype(lru)::iterator> index;
    {
        std::lock_guard lock(mu);
        if (auto it = index.find(source); it != index.end()) {
            lru.splice(lru.begin(), lru, it->second);
            return it->second->second;
        }
    }
    if (source.size() > max_template_bytes)
        throw jinja_error(jinja_error_kind::syntax, 1, 1,
                          fmt::format("the template is {} bytes, more than the {} allowed", source.size(), max_template_bytes));
    std::shared_ptr<const jinja_template> t;
    try {
        auto p = std::make_unique<impl>();
        p->prog = jinja::parse_program(source);
        t = std::make_shared<const jinja_template>(std::move(p));
    } catch (const std::bad_alloc &) {
        throw jinja_error(jinja_error_kind::limit, 0, 0, "out of memory while parsing the template");
    }
    std::lock_guard lock(mu);
    if (auto it = index.find(source); it != index.end()) return it->second->second;
    lru.emplace_front(std::string(source), t);
    index.emplace(lru.front().first, lru.begin());
    if (lru.size() > cache_capacity) {
        index.erase(lru.back().first);
        lru.pop_back();
    }
    return t;
}

jinja_output jinja_template::render(const jinja_vars &vars, const jinja_render_options &options) const {
    try {
        jinja::interp in(*impl_->prog, options);
        return in.run(vars.get().vars);
    } catch (const std::bad_alloc &) {
        throw jinja_error(jinja_error_kind::limit, 0, 0, "out of memory while rendering the template");
    } catch (const std::length_error &) {
        throw jinja_error(jinja_error_kind::limit, 0, 0, "a value grew beyond what the render may hold");
    }
}

}  // namespace tandem
