// tests/server/test_request_guard.cpp - what a request's head decides before its body is read
// (Host, Origin, CORS, route and method, key, content type, size), the key comparison and Bearer
// parsing, and the JSON body limits and integer reader.
#include "src/server/api_common.h"
#include "src/server/request_guard.h"
#include "src/server/service.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <random>

using namespace tandem;
using namespace tandem::server;

namespace {

std::string header(const http_reply &r, const std::string &name) {
    for (const auto &[k, v] : r.headers)
        if (k == name) return v;
    return {};
}

http_request_view head(std::string method, std::string target, std::string host = "127.0.0.1:8080") {
    http_request_view v;
    v.method = std::move(method);
    v.target = std::move(target);
    v.host = std::move(host);
    return v;
}

http_request_view post_json(std::string target, uint64_t length = 10) {
    http_request_view v = head("POST", std::move(target));
    v.content_type = "application/json";
    v.content_length = length;
    v.has_body = length > 0;
    return v;
}

// The status check_head answers with; 0 when it lets the request through.
int status_of(const service &svc, const http_request_view &v, bool overflow = false) {
    head_decision d = svc.check_head(v, overflow);
    return d.reply ? d.reply->status : 0;
}

// Every check passed: a server without a model answers the loading 503 as its last word.
constexpr int passed = 503;

server_config loopback_config() {
    server_config c;
    c.host = "127.0.0.1";
    c.port = 8080;
    return c;
}

json error_json(const service &svc, const http_request_view &v) { return json::parse(svc.check_head(v, false).reply->body); }

}  // namespace

TEST_CASE("constant_time_equal compares whole strings", "[guard]") {
    CHECK(constant_time_equal("", ""));
    CHECK(constant_time_equal("secret-key", "secret-key"));
    CHECK_FALSE(constant_time_equal("secret-key", "secret-kez"));
    CHECK_FALSE(constant_time_equal("secret-key", "secret-ke"));
    CHECK_FALSE(constant_time_equal("secret", std::string_view("secret\0x", 8)));
    CHECK_FALSE(constant_time_equal("", "x"));
    CHECK_FALSE(constant_time_equal(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

TEST_CASE("bearer_token takes the scheme in any case", "[guard]") {
    CHECK(bearer_token("Bearer abc") == std::optional<std::string_view>("abc"));
    CHECK(bearer_token("bearer abc") == std::optional<std::string_view>("abc"));
    CHECK(bearer_token("BEARER   abc  ") == std::optional<std::string_view>("abc"));
    CHECK_FALSE(bearer_token("Bearerabc").has_value());
    CHECK_FALSE(bearer_token("Basic abc").has_value());
    CHECK_FALSE(bearer_token("Bearer ").has_value());
    CHECK_FALSE(bearer_token("Bearer").has_value());
    CHECK_FALSE(bearer_token("").has_value());
}

TEST_CASE("Host parsing and loopback names", "[guard]") {
    auto hp = parse_host("LocalHost:8080");
    REQUIRE(hp);
    CHECK(hp->name == "localhost");
    CHECK(hp->port == 8080);
    hp = parse_host("[::1]:80");
    REQUIRE(hp);
    CHECK(hp->name == "[::1]");
    CHECK(hp->port == 80);
    CHECK(parse_host("example.com")->port == -1);
    for (const char *bad : {"", "a:b", "a:", "a:99999", "[::1", "[zz]:1", "a b", "user@host", "[::1]x", "h:1:2"})
        CHECK_FALSE(parse_host(bad).has_value());
    for (const char *name : {"localhost", "app.localhost", "127.0.0.1", "127.1.2.3", "[::1]"}) CHECK(is_loopback_name(name));
    for (const char *name : {"localhost.evil.com", "xlocalhost", "10.0.0.1", "0.0.0.0", "[::2]", "evil.com"})
        CHECK_FALSE(is_loopback_name(name));
    for (const char *ip : {"127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"}) CHECK(is_loopback_address(ip));
    for (const char *ip : {"0.0.0.0", "::", "192.168.1.1", "localhost", ""}) CHECK_FALSE(is_loopback_address(ip));
}

TEST_CASE("the origin policy of a loopback server without a key", "[guard]") {
    origin_policy p;
    p.guard = true;
    p.port = 8080;
    p.allowed_hosts = {"proxy.internal"};
    for (const char *ok : {"127.0.0.1:8080", "localhost:8080", "LOCALHOST:8080", "[::1]:8080", "ui.localhost:8080",
                           "proxy.internal", "proxy.internal:443"})
        CHECK(p.host_allowed(ok));
    // A rebound DNS name, another port, or no port on a non-default one: refused.
    for (const char *bad : {"evil.com:8080", "127.0.0.1:9999", "127.0.0.1", "localhost", "127.0.0.1:8080:1"})
        CHECK_FALSE(p.host_allowed(bad));
    CHECK(p.host_allowed(""));  // only HTTP/1.0 gets here without a Host: no browser sends that
    CHECK(p.origin_allowed("", "127.0.0.1:8080"));
    CHECK(p.origin_allowed("http://127.0.0.1:8080", "127.0.0.1:8080"));
    CHECK_FALSE(p.origin_allowed("http://evil.com", "127.0.0.1:8080"));
    CHECK_FALSE(p.origin_allowed("null", "127.0.0.1:8080"));
    CHECK_FALSE(p.origin_allowed("http://localhost:3000", "localhost:8080"));
    CHECK(p.cors_headers("http://evil.com").empty());
    p.cors_origins = {"http://localhost:3000"};
    CHECK(p.origin_allowed("http://localhost:3000", "localhost:8080"));
    auto h = p.cors_headers("http://localhost:3000");
    REQUIRE(h.size() == 2);
    CHECK(h[0] == std::pair<std::string, std::string>{"Access-Control-Allow-Origin", "http://localhost:3000"});
    p.cors_origins = {"*"};
    CHECK(p.cors_headers("http://any.where")[0].second == "*");
    // Without the guard (a key, or a public address) nothing is refused for Host or Origin.
    origin_policy open;
    CHECK(open.host_allowed("evil.com"));
    CHECK(open.origin_allowed("http://evil.com", "evil.com"));
    origin_policy port80;
    port80.guard = true;
    port80.port = 80;
    CHECK(port80.host_allowed("localhost"));
}

TEST_CASE("JSON content types", "[guard]") {
    for (const char *ok : {"application/json", "Application/JSON", "application/json; charset=utf-8", " application/json "})
        CHECK(is_json_content_type(ok));
    for (const char *bad : {"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data", "application/jsonx"})
        CHECK_FALSE(is_json_content_type(bad));
}

TEST_CASE("check_head: HTTP/1.1 Host rules, routes and methods", "[guard]") {
    const service svc(loopback_config());
    auto no_host = head("GET", "/v1/models");
    no_host.n_host = 0;
    no_host.host.clear();
    CHECK(status_of(svc, no_host) == 400);
    no_host.version = 10;  // HTTP/1.0 may omit it
    CHECK(status_of(svc, no_host) == passed);
    auto two = head("GET", "/v1/models");
    two.n_host = 2;
    CHECK(status_of(svc, two) == 400);

    CHECK(status_of(svc, head("GET", "/nothing")) == 404);
    auto get_chat = head("GET", "/v1/chat/completions");
    head_decision d = svc.check_head(get_chat, false);
    REQUIRE(d.reply);
    CHECK(d.reply->status == 405);
    CHECK(header(*d.reply, "Allow") == "POST");
    d = svc.check_head(post_json("/health"), false);
    CHECK(d.reply->status == 405);
    CHECK(header(*d.reply, "Allow") == "GET");
    // On Anthropic's routes the error is in Anthropic's shape.
    const json j = error_json(svc, head("GET", "/v1/messages"));
    CHECK(j["type"] == "error");
    CHECK(j["error"]["type"] == "invalid_request_error");

    // /health needs no model, the rest waits for it.
    CHECK(status_of(svc, head("GET", "/health")) == 0);
    CHECK(status_of(svc, head("GET", "/v1/health?x=1")) == 0);
    CHECK(status_of(svc, post_json("/v1/chat/completions")) == passed);
}

TEST_CASE("check_head: body checks before the body is read", "[guard]") {
    server_config c = loopback_config();
    c.body_limit = 1000;
    const service svc(c);
    auto plain = post_json("/v1/chat/completions");
    plain.content_type = "text/plain";
    CHECK(status_of(svc, plain) == 415);
    plain.content_type.clear();
    CHECK(status_of(svc, plain) == 415);
    CHECK(status_of(svc, post_json("/v1/completions", 1000)) == passed);
    CHECK(status_of(svc, post_json("/v1/completions", 1001)) == 413);
    // A POST without a body is left to the JSON reader (400 there).
    auto empty = post_json("/v1/completions", 0);
    empty.content_type.clear();
    CHECK(status_of(svc, empty) == passed);
    // Routes that take no body accept only a small one.
    auto get_big = head("GET", "/v1/models");
    get_big.content_length = c.small_body_limit + 1;
    get_big.has_body = true;
    CHECK(status_of(svc, get_big) == 413);
    CHECK(svc.check_head(post_json("/v1/completions"), false).body_limit == 1000);
}

TEST_CASE("check_head: the API key, in constant time and any Bearer case", "[guard]") {
    server_config c = loopback_config();
    c.api_keys = {{"team", "sk-test"}};
    const service svc(c);
    auto req = post_json("/v1/chat/completions");
    CHECK(status_of(svc, req) == 401);
    for (const char *auth : {"Bearer sk-test", "bearer sk-test", "BEARER sk-test"}) {
        req.authorization = auth;
        CHECK(status_of(svc, req) == passed);
    }
    for (const char *auth : {"Bearer sk-tesT", "Bearer sk-test2", "Bearer sk-tes", "Basic sk-test", "sk-test"}) {
        req.authorization = auth;
        CHECK(status_of(svc, req) == 401);
    }
    // x-api-key only on Anthropic's routes, whose 401 is in Anthropic's shape.
    auto msg = post_json("/v1/messages");
    msg.x_api_key = "sk-test";
    CHECK(status_of(svc, msg) == passed);
    auto oai = post_json("/v1/completions");
    oai.x_api_key = "sk-test";
    CHECK(status_of(svc, oai) == 401);
    msg.x_api_key = "wrong";
    const json j = error_json(svc, msg);
    CHECK(j["error"]["type"] == "authentication_error");
    // /health needs no key; the key comes before the content type and the size.
    CHECK(status_of(svc, head("GET", "/health")) == 0);
    auto plain = post_json("/v1/completions", 1u << 30);
    plain.content_type = "text/plain";
    CHECK(status_of(svc, plain) == 401);
    // With a key, Host and Origin are not checked (no browser can send the key cross-site
    // without a preflight this server refuses).
    auto foreign = post_json("/v1/completions");
    foreign.host = "evil.com";
    foreign.origin = "http://evil.com";
    foreign.authorization = "Bearer sk-test";
    CHECK(status_of(svc, foreign) == passed);
}

TEST_CASE("check_head: Host and Origin on a loopback server without a key", "[guard]") {
    server_config c = loopback_config();
    c.cors_origins = {"http://localhost:3000"};
    c.allowed_hosts = {"Tandem.Internal"};
    service svc(c);
    auto req = post_json("/v1/chat/completions");
    req.host = "evil.com:8080";
    CHECK(status_of(svc, req) == 403);
    req.host = "tandem.internal";
    CHECK(status_of(svc, req) == passed);
    req.host = "localhost:8080";
    req.origin = "http://evil.com";
    CHECK(status_of(svc, req) == 403);
    req.content_type = "text/plain";  // a cross-site "simple" request: refused for its origin first
    CHECK(status_of(svc, req) == 403);
    req.origin = "http://localhost:3000";
    CHECK(status_of(svc, req) == 415);
    req.content_type = "application/json";
    head_decision d = svc.check_head(req, false);
    REQUIRE(d.reply);
    CHECK(header(*d.reply, "Access-Control-Allow-Origin") == "http://localhost:3000");

    // Preflights: answered for the allowed origin, refused for others.
    auto pre = head("OPTIONS", "/v1/chat/completions", "localhost:8080");
    pre.origin = "http://localhost:3000";
    pre.cors_request_method = "POST";
    pre.cors_request_headers = "content-type, authorization";
    d = svc.check_head(pre, false);
    REQUIRE(d.reply);
    CHECK(d.reply->status == 204);
    CHECK(header(*d.reply, "Access-Control-Allow-Origin") == "http://localhost:3000");
    CHECK(header(*d.reply, "Access-Control-Allow-Methods").find("POST") != std::string::npos);
    CHECK(header(*d.reply, "Access-Control-Allow-Headers") == "content-type, authorization");
    pre.cors_request_headers = "x\r\nInjected: 1";
    CHECK(header(*svc.check_head(pre, false).reply, "Access-Control-Allow-Headers").find('\n') == std::string::npos);
    pre.origin = "http://evil.com";
    CHECK(status_of(svc, pre) == 403);

    // The port the server really listens on (a --port 0 server learns it when bound).
    svc.set_port(9000);
    req.origin.clear();
    CHECK(status_of(svc, req) == 403);
    req.host = "127.0.0.1:9000";
    CHECK(status_of(svc, req) == passed);

    // Bound to another address, no Host or Origin check.
    server_config pub = loopback_config();
    pub.host = "0.0.0.0";
    const service open(pub);
    auto any = post_json("/v1/completions");
    any.host = "10.1.2.3:8080";
    any.origin = "http://evil.com";
    CHECK(status_of(open, any) == passed);
}

TEST_CASE("check_head: past the connection limit only cheap routes are served", "[guard]") {
    const service svc(loopback_config());
    CHECK(status_of(svc, head("GET", "/health"), true) == 0);
    CHECK(status_of(svc, post_json("/v1/chat/completions"), true) == 503);
    const auto d = svc.check_head(post_json("/v1/messages"), true);
    CHECK(header(*d.reply, "Retry-After") == "1");
    CHECK(json::parse(d.reply->body)["error"]["type"] == "overloaded_error");
}

TEST_CASE("JSON bodies: depth and value limits, named in the error", "[json]") {
    const json_limits limits{8, 100};
    auto message = [&](const std::string &body) -> std::string {
        try {
            json_parse_body(body, limits);
        } catch (const error &e) {
            CHECK(e.kind() == error_kind::invalid_request);
            return e.what();
        }
        return "";
    };
    CHECK(message(R"({"a":[[[[[[[1]]]]]]]})").empty());  // depth 8: the object and seven arrays
    CHECK(message(R"({"a":[[[[[[[[1]]]]]]]]})").find("depth limit") != std::string::npos);
    CHECK(message(std::string(1 << 20, '[')).find("depth limit") != std::string::npos);
    std::string flat = R"({"a":[)";
    for (int i = 0; i < 98; ++i) flat += i ? ",1" : "1";
    CHECK(message(flat + "]}").empty());  // 100 values: the object, the array, 98 numbers
    CHECK(message(flat + ",1]}").find("limit on values") != std::string::npos);
    CHECK(message("{\"a\":").find("not valid JSON") != std::string::npos);
    CHECK(message("[1]").find("must be a JSON object") != std::string::npos);
    CHECK(message("").find("not valid JSON") != std::string::npos);
    CHECK(message(R"({"a":1} x)").find("not valid JSON") != std::string::npos);
}

TEST_CASE("JSON bodies parse as json::parse does within the limits", "[json]") {
    // Random documents, compared with nlohmann's own DOM parser.
    std::mt19937 rng(57);
    std::function<json(int)> random_value = [&](int depth) -> json {
        switch (depth > 5 ? rng() % 4 : rng() % 7) {
        case 0: return nullptr;
        case 1: return rng() % 2 == 0;
        case 2: return static_cast<int64_t>(rng()) - (1ll << 31);
        case 3: return std::string(rng() % 5, static_cast<char>('a' + rng() % 26));
        case 4: {
            json a = json::array();
            for (int i = rng() % 4; i > 0; --i) a.push_back(random_value(depth + 1));
            return a;
        }
        case 5: return static_cast<double>(rng()) / 7.0;
        default: {
            json o = json::object();
            for (int i = rng() % 4; i > 0; --i) o[std::string(1, static_cast<char>('a' + rng() % 3))] = random_value(depth + 1);
            return o;
        }
        }
    };
    for (int i = 0; i < 300; ++i) {
        json doc = json::object();
        doc["k"] = random_value(0);
        const std::string text = doc.dump();
        INFO(text);
        CHECK(json_parse_body(text) == json::parse(text));
    }
    // A repeated key keeps its last value, as json::parse does.
    CHECK(json_parse_body(R"({"a":1,"a":{"b":2}})") == json::parse(R"({"a":1,"a":{"b":2}})"));
}

TEST_CASE("the integer reader refuses out-of-range numbers without undefined casts", "[json]") {
    auto kind = [](const char *text) {
        try {
            json_integer(json::parse(text), "n");
        } catch (const error &e) {
            return e.kind();
        }
        return error_kind::internal;  // "did not throw"
    };
    CHECK(json_integer(json::parse(R"({"n":16.0})"), "n") == 16);
    CHECK(json_integer(json::parse(R"({"n":-3})"), "n") == -3);
    CHECK(json_integer(json::parse(R"({"n":9223372036854775807})"), "n") == INT64_MAX);
    for (const char *bad : {R"({"n":1e300})", R"({"n":-1e300})", R"({"n":9.3e18})", R"({"n":18446744073709551615})",
                            R"({"n":16.5})", R"({"n":"16"})", R"({"n":1e16})"})
        CHECK(kind(bad) == error_kind::invalid_request);
    CHECK_FALSE(json_integer(json::parse(R"({"n":null})"), "n").has_value());
}

TEST_CASE("check_head: several named keys; the decision names the key presented", "[guard][keys]") {
    server_config c = loopback_config();
    c.api_keys = {{"alice", "sk-alice"}, {"bob", "sk-bob"}, {"flag-1", "sk-a-longer-key"}};
    const service svc(c);
    auto req = post_json("/v1/chat/completions");
    for (const auto &[key, name] : std::vector<std::pair<std::string, std::string>>{
             {"sk-alice", "alice"}, {"sk-bob", "bob"}, {"sk-a-longer-key", "flag-1"}}) {
        req.authorization = "Bearer " + key;
        const head_decision d = svc.check_head(req, false);
        CHECK(d.reply->status == passed);
        CHECK(d.key_name == name);
    }
    for (const char *wrong : {"sk-alic", "sk-alicee", "sk-bob sk-alice", ""}) {
        req.authorization = std::string("Bearer ") + wrong;
        CHECK(status_of(svc, req) == 401);
    }
    // Without keys, every request is "-".
    CHECK(service(loopback_config()).check_head(post_json("/v1/chat/completions"), false).key_name == "-");
}

TEST_CASE("api_keys: key files, flags and their errors", "[keys]") {
    const std::string path = "test_request_guard_keys.txt";
    auto write = [&](const std::string &text) {
        std::ofstream(path) << text;
        return path;
    };
    auto keys = api_keys_read_file(write("# team\n\nalice:sk-1\n  bob : sk-2  \nsk-3\n"));
    REQUIRE(keys.size() == 3);
    CHECK(keys[0].name == "alice");
    CHECK(keys[1].name == "bob");
    CHECK(keys[1].key == "sk-2");
    CHECK(keys[2].name == path + ":5");
    CHECK(api_keys_match(keys, "sk-2") == std::optional<std::string>("bob"));
    CHECK(!api_keys_match(keys, "sk-"));
    auto error_of = [&](const std::string &text) {
        try {
            api_keys_read_file(write(text));
        } catch (const error &e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(error_of("a:sk-1\nb:sk 2\n").find(path + ":2:") != std::string::npos);
    CHECK(error_of("a b:sk-1\n").find(path + ":1:") != std::string::npos);
    CHECK(error_of("a:sk-1\na:sk-2\n").find(path + ":2: the key name 'a'") != std::string::npos);
    CHECK(error_of("a:sk-1\nb:sk-1\n").find(path + ":2:") != std::string::npos);
    CHECK(error_of("# nothing\n").find("holds no key") != std::string::npos);
    const auto flags = api_keys_from_flags({"k1", "k2"});
    CHECK(flags[1].name == "flag-2");
    CHECK_THROWS_AS(api_keys_from_flags({"k 1"}), error);
    std::remove(path.c_str());
}
