// tests/fuzz/fuzz_http.cpp - libFuzzer target for the HTTP request path as a connection runs it:
// bytes -> Beast's request parser (the server's body type and limits) -> the service's head checks
// -> the body's JSON mapping to an api_request -> the chat templates' pieces -> the tokenizer.
// Any input must end in a reply decision or a typed request error, never a crash, a hang or an
// unbounded allocation; request text must never come out as a control token.
// Also compiled into test_api, which replays the seed corpus (corpus_http/) in every build.
#include "src/server/http_request.h"
#include "src/server/service.h"
#include "tandem/chat_template.h"
#include "tandem/error.h"
#include "tandem/tokenizer.h"
#include "tests/unit/tokenizer/toy_vocab.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace {

using namespace tandem;
using namespace tandem::server;
namespace http = boost::beast::http;

server_config fuzz_config() {
    server_config c;  // loopback without a key: the Host and Origin checks are on
    c.body_limit = 1u << 20;
    c.cors_origins = {"http://app.example"};
    return c;
}

const service &fuzz_service() {
    static service svc(fuzz_config());
    static const bool ready = [] {
        svc.set_ready(model_context{});  // no model: only its readiness matters to the head checks
        return true;
    }();
    (void)ready;
    return svc;
}

const tokenizer &fuzz_tokenizer() {
    static const tokenizer tok = tokenizer::from_vocab(test::toy_vocab());
    return tok;
}

int32_t control_tokens(const std::vector<int32_t> &ids) {
    int32_t n = 0;
    for (int32_t id : ids) n += fuzz_tokenizer().type(id) == token_type::control;
    return n;
}

// Every string in a value with '|' taken out, so no marker can be spelled there.
void scrub(json &j) {
    if (j.is_string()) {
        std::string s = j.get<std::string>();
        std::replace(s.begin(), s.end(), '|', '!');
        j = s;
    }
    if (j.is_structured())
        for (auto &v : j) scrub(v);
}

// Every template renders the request; the pieces must alternate, and the request's text must add
// no control token to those the template writes (counted on the same request scrubbed of '|').
void check_rendering(const api_request &req) {
    if (req.route == route_kind::completion) return;
    json clean = req.chat;
    scrub(clean);
    static const chat_template templates[] = {
        chat_template::builtin("qwen3"),
        chat_template::detect("<|im_start|>system\\nYou are a helpful assistant.<|im_end|>"),
        chat_template::builtin("plain"),
        chat_template::from_jinja("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
                                  "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
                                  "<|im_end|>\n{% endfor %}{{ tools | tojson if tools }}<|im_start|>assistant\n",
                                  "fuzz", std::nullopt, std::nullopt),
    };
    for (const auto &t : templates) {
        rendered_prompt r;
        try {
            r = t.render_request(req.chat);
        } catch (const error &e) {
            if (e.kind() != error_kind::invalid_request) std::abort();
            continue;
        }
        std::vector<text_piece> pieces;
        for (size_t i = 0; i < r.pieces.size(); ++i) {
            if (r.pieces[i].text.empty() || (i > 0 && r.pieces[i].special == r.pieces[i - 1].special)) std::abort();
            pieces.push_back({r.pieces[i].text, r.pieces[i].special});
        }
        try {
            const int32_t template_controls = control_tokens(fuzz_tokenizer().encode(t.render_request(clean).text(), true));
            const auto ids = fuzz_tokenizer().encode(pieces);
            if (control_tokens(ids) > template_controls) std::abort();
            const auto budget = fuzz_tokenizer().encode(pieces, false, 8);
            if (budget.size() > 9 || budget.size() > ids.size() || !std::equal(budget.begin(), budget.end(), ids.begin()))
                std::abort();
        } catch (const error &e) {
            if (e.kind() != error_kind::invalid_request) std::abort();  // text that is not UTF-8
        }
    }
}

void check_body(const head_decision &d, const std::string &body) {
    if (d.reply || d.route == nullptr || !d.route->heavy) return;
    if (body.size() > d.body_limit) std::abort();  // the parser must have enforced the route's limit
    try {
        const api_request req = api_parse_request(d.route->id, body, json_limits{});
        check_rendering(req);
    } catch (const error &e) {
        if (e.kind() != error_kind::invalid_request && e.kind() != error_kind::not_found) std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // The first byte picks the connection's lane; the rest is what the client sent.
    if (size == 0) return 0;
    const bool overflow = data[0] & 1;
    ++data;
    --size;
    request_parser parser;
    parser.header_limit(http_header_limit);
    parser.body_limit(fuzz_service().config().body_limit);
    boost::beast::error_code ec;
    size_t used = 0;
    head_decision decision;
    bool decided = false;
    while (!ec && used < size && !parser.is_done()) {
        const size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
        if (ec == http::error::need_more) {
            ec = {};
            if (n == 0) break;
        }
        used += n;
        if (!ec && parser.is_header_done() && !decided) {
            decision = fuzz_service().check_head(http_head_view(parser), overflow);
            decided = true;
            if (decision.reply) break;  // the server never reads the body
            parser.body_limit(decision.body_limit);
            parser.eager(true);  // as the server's body read: the head alone first, then all of the body
        }
        if (n == 0) break;
    }
    if (!ec && !parser.is_done() && used == size && parser.is_header_done() && !decision.reply) parser.put_eof(ec);
    if (decided && decision.reply) {
        const int s = decision.reply->status;
        if (s != 204 && (s < 400 || s > 599)) std::abort();
        return 0;
    }
    if (!ec && parser.is_done() && decided) check_body(decision, parser.get().body());
    return 0;
}
