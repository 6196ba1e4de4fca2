#!/usr/bin/python3
# tests/server/controls_server.py - the generation controls end to end through the real
# tandem-server (CPU engine, tiny synth model with random weights):
#   - structured outputs: for each of the 10 schemas of tests/unit/grammar/schemas and --seeds seeds,
#     a chat request with response_format json_schema at temperature 1.0, sent 16 at a time so the
#     server batches them as it batches any load; every output must end with finish_reason "stop",
#     parse as JSON and validate with Debian's python3-jsonschema (the schema's own draft; the
#     formats the grammar enforces checked too);
#   - the official `openai` npm client sending response_format (sdk_controls.cjs);
#   - invalid schemas, grammars, logit_bias ids and unsupported fields: a 400 naming the problem, in
#     each API's error shape;
#   - logit_bias +100 decides every draw; /props reports the sampling defaults, with and without
#     flags;
#   - a forced tool choice (OpenAI chat streamed and not, Anthropic, Responses) gives a call whose
#     arguments validate against the tool's schema on every seed.
# Exits 77 (skipped) without python3-jsonschema.
# Usage: controls_server.py --build-dir B --npm-dir D [--seeds N] [--only NAME]
import argparse
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import time

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is not installed: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness as h  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
SCHEMAS = HERE.parent / "unit" / "grammar" / "schemas"
MODEL = "tiny.gguf"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"  FAIL: {what}", flush=True)
    return cond


def validator_of(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=jsonschema.FormatChecker(formats=["date", "uuid"]))


def structured(srv, name, schema, seed, max_tokens):
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"A {name} record, please ({seed})."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}},
            "temperature": 1.0, "seed": seed, "max_tokens": max_tokens}
    status, r = srv.post_json("/v1/chat/completions", body)
    if status != 200:
        return None, f"status {status}: {r}"
    return r["choices"][0], None


def test_property(srv, seeds, max_tokens):
    files = sorted(SCHEMAS.glob("*.json"))
    check(len(files) >= 10, f"at least 10 schemas in {SCHEMAS}, found {len(files)}")
    total = bad = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        for path in files:
            schema = json.loads(path.read_text())
            validator = validator_of(schema)
            t0 = time.time()
            jobs = [pool.submit(structured, srv, path.stem, schema, seed, max_tokens) for seed in range(1, seeds + 1)]
            for seed, job in enumerate(jobs, start=1):
                total += 1
                choice, err = job.result()
                where = f"{path.name} seed {seed}"
                if err:
                    bad += 1
                    check(False, f"{where}: {err}")
                    continue
                text = choice["message"]["content"]
                if not check(choice["finish_reason"] == "stop", f"{where}: finish_reason {choice['finish_reason']}: {text!r}"):
                    bad += 1
                    continue
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as e:
                    bad += 1
                    check(False, f"{where}: not JSON ({e}): {text!r}")
                    continue
                errors = list(validator.iter_errors(value))
                if errors:
                    bad += 1
                    check(False, f"{where}: {errors[0].message}: {text!r}")
            print(f"  {path.name}: {seeds} outputs in {time.time() - t0:.1f} s", flush=True)
    print(f"  {total} outputs, {bad} failed", flush=True)


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 14},
                                            "unit": {"enum": ["c", "f"]}},
           "required": ["city", "days"], "additionalProperties": False}


def forced_call(srv, api, seed):
    """One forced tool call at temperature 1.0; returns (name, arguments text) or raises."""
    user = [{"role": "user", "content": f"Weather, please ({seed})."}]
    if api == "anthropic":
        body = {"model": MODEL, "max_tokens": 160, "messages": user, "temperature": 1.0, "tool_choice": {"type": "any"},
                "tools": [{"name": "weather", "description": "forecast", "input_schema": WEATHER}]}
        status, r = srv.post_json("/v1/messages", body)
        assert status == 200, f"status {status}: {r}"
        assert r["stop_reason"] == "tool_use", f"stop_reason {r['stop_reason']}: {r['content']}"
        use = [b for b in r["content"] if b["type"] == "tool_use"]
        return use[0]["name"], json.dumps(use[0]["input"])
    if api == "responses":
        body = {"model": MODEL, "max_output_tokens": 160, "input": user[0]["content"], "temperature": 1.0, "tool_choice": "required",
                "tools": [{"type": "function", "name": "weather", "parameters": WEATHER}], "store": False}
        status, r = srv.post_json("/v1/responses", body)
        assert status == 200, f"status {status}: {r}"
        calls = [o for o in r["output"] if o["type"] == "function_call"]
        assert calls, f"no function_call in {r['output']}"
        return calls[0]["name"], calls[0]["arguments"]
    body = {"model": MODEL, "max_tokens": 160, "messages": user, "temperature": 1.0, "seed": seed, "tool_choice": "required",
            "tools": [{"type": "function", "function": {"name": "weather", "parameters": WEATHER}}]}
    if api == "openai":
        status, r = srv.post_json("/v1/chat/completions", body)
        assert status == 200, f"status {status}: {r}"
        choice = r["choices"][0]
        assert choice["finish_reason"] == "tool_calls", f"finish_reason {choice['finish_reason']}: {choice['message']}"
        call = choice["message"]["tool_calls"][0]["function"]
        return call["name"], call["arguments"]
    name, args, finish = [], [], []

    def on_data(d, _t):
        if not isinstance(d, dict):
            return
        for c in d.get("choices", []):
            for tc in c.get("delta", {}).get("tool_calls", []) or []:
                if tc["index"] == 0:
                    name.append(tc.get("function", {}).get("name") or "")
                    args.append(tc.get("function", {}).get("arguments") or "")
            if c.get("finish_reason"):
                finish.append(c["finish_reason"])

    h.stream_events(srv.port, "/v1/chat/completions", dict(body, stream=True), on_data)
    assert finish == ["tool_calls"], f"finish {finish}"
    return "".join(name), "".join(args)


def test_forced_tools(srv, seeds):
    validator = validator_of(WEATHER)
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        for api in ("openai", "openai-stream", "anthropic", "responses"):
            jobs = {seed: pool.submit(forced_call, srv, api, seed) for seed in range(1, seeds + 1)}
            bad = 0
            for seed, job in jobs.items():
                try:
                    name, args = job.result()
                    errors = list(validator.iter_errors(json.loads(args)))
                    ok = check(name == "weather" and not errors, f"{api} seed {seed}: {name} {args!r} {errors[:1]}")
                except Exception as e:  # noqa: BLE001 - one seed's failure, reported
                    ok = check(False, f"{api} seed {seed}: {type(e).__name__}: {e}")
                bad += 0 if ok else 1
            print(f"  {api}: {seeds} forced calls, {bad} failed", flush=True)


def error_message(srv, path, body):
    status, _, data = srv.request("POST", path, body)
    j = json.loads(data)
    if path.startswith("/v1/messages"):
        ok = j.get("type") == "error" and j["error"]["type"] == "invalid_request_error"
    else:
        ok = j.get("error", {}).get("type") == "invalid_request_error"
    return status, j["error"]["message"] if ok else f"(not the API's error shape: {j})"


def test_refusals(srv):
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
    msgs = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}
    cases = [
        ("an unknown type in a schema", "/v1/chat/completions",
         dict(chat, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
             "type": "object", "properties": {"a": {"type": "strnig"}}}}}),
         ["response_format.json_schema.schema", "#/properties/a/type", "strnig"]),
        ("a keyword the grammar cannot enforce", "/v1/chat/completions",
         dict(chat, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {"type": "null"}}}}),
         ["'not' is not supported"]),
        ("a malformed grammar", "/v1/completions", {"model": MODEL, "prompt": "x", "grammar": "root ::= [a-"},
         ["grammar: line 1"]),
        ("a grammar without root", "/v1/chat/completions", dict(chat, grammar='start ::= "a"'), ["root"]),
        ("an unknown response_format type", "/v1/chat/completions", dict(chat, response_format={"type": "xml"}),
         ["'response_format.type' must be"]),
        ("a logit_bias id past the vocabulary", "/v1/chat/completions", dict(chat, logit_bias={"100000": 1}),
         ["logit_bias", "100000", "out of range"]),
        ("a logit_bias out of range", "/v1/chat/completions", dict(chat, logit_bias={"5": 150}), ["[-100, 100]"]),
        ("an unsupported field", "/v1/chat/completions", dict(chat, web_search_options={}),
         ["'web_search_options' is not supported"]),
        ("a tool without its function", "/v1/chat/completions", dict(chat, tools=[{"type": "function"}]),
         ["tools[0].function"]),
        ("a penalty out of range", "/v1/completions", {"model": MODEL, "prompt": "x", "frequency_penalty": 9},
         ["'frequency_penalty' must be in [-2, 2]"]),
        ("Anthropic: a bad schema in output_config", "/v1/messages",
         dict(msgs, output_config={"format": {"type": "json_schema", "schema": {"type": "object", "minProperties": 2}}}),
         ["output_config.format.schema", "minProperties"]),
        ("Anthropic: an unsupported field", "/v1/messages", dict(msgs, mcp_servers=[]), ["'mcp_servers'"]),
    ]
    for what, path, body, needles in cases:
        status, message = error_message(srv, path, body)
        check(status == 400 and all(n in message for n in needles), f"{what}: {status} {message!r} (want 400 naming {needles})")


def test_logit_bias(srv):
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 12, "temperature": 1.0, "seed": 3,
            "logprobs": 1, "logit_bias": {"5": 100}}
    status, r = srv.post_json("/v1/completions", body)
    tokens = r["choices"][0]["logprobs"]["tokens"] if status == 200 else []
    check(status == 200 and len(tokens) == 12 and len(set(tokens)) == 1,
          f"logit_bias +100: every one of 12 draws is that token ({status}: {tokens})")


def test_props(srv, build_dir):
    _, props = srv.get_json("/props")
    params = props["default_generation_settings"]["params"]
    want = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0, "repeat_last_n": 64,
            "presence_penalty": 0.0, "frequency_penalty": 0.0}
    check(all(abs(params[k] - v) < 1e-6 for k, v in want.items()), f"/props: llama-server's defaults without flags: {params}")
    args = ["--ctx", "256", "--batched-session", "1", "--temp", "0.5", "--top-k", "7", "--repeat-penalty", "1.1",
            "--repeat-last-n", "-1", "--presence-penalty", "0.25"]
    with h.running(build_dir, args, "controls-flags.log") as flagged:
        _, props = flagged.get_json("/props")
        p = props["default_generation_settings"]["params"]
        check(abs(p["temperature"] - 0.5) < 1e-6 and p["top_k"] == 7 and abs(p["repeat_penalty"] - 1.1) < 1e-6 and
              p["repeat_last_n"] == -1 and abs(p["presence_penalty"] - 0.25) < 1e-6 and abs(p["top_p"] - 0.95) < 1e-6,
              f"/props reports the flags: {p}")
        check(props.get("default_generation_settings_from", {}).get("temperature") == "flag", f"/props names the flags: {props}")
        status, r = flagged.post_json("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 4})
        check(status == 200, f"a request with penalty defaults runs ({status}: {r})")
    out = subprocess.run([os.path.join(build_dir, "tandem-server"), "-m", h.tiny_model(build_dir), "--top-p", "0"],
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 2 and "--top-p" in out.stderr, f"--top-p 0 is refused ({out.returncode}: {out.stderr.strip()[-200:]})")


def test_sdk(srv, npm_dir):
    if not npm_dir or not os.path.isdir(os.path.join(npm_dir, "node_modules", "openai")):
        check(False, f"npm SDKs installed under {npm_dir}")
        return
    schema = json.loads((SCHEMAS / "nested_objects.json").read_text())
    env = dict(os.environ, NODE_PATH=os.path.join(npm_dir, "node_modules"), TANDEM_URL=f"http://127.0.0.1:{srv.port}",
               TANDEM_MODEL=MODEL, TANDEM_SCHEMA=json.dumps(schema))
    out = subprocess.run(["node", str(HERE / "sdk_controls.cjs")], capture_output=True, env=env, timeout=300, cwd=npm_dir, text=True)
    print(out.stdout[-2000:], out.stderr[-2000:])
    if not check(out.returncode == 0, "the openai npm client with response_format"):
        return
    validator = validator_of(schema)
    outputs = [json.loads(line[len("output: "):]) for line in out.stdout.splitlines() if line.startswith("output: ")]
    check(len(outputs) == 2, f"the client printed its two outputs ({len(outputs)})")
    for text in outputs:
        try:
            errors = list(validator.iter_errors(json.loads(text)))
            check(not errors, f"the client's output validates: {errors[:1]} {text!r}")
        except json.JSONDecodeError as e:
            check(False, f"the client's output is JSON ({e}): {text!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--npm-dir", default="")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--tool-seeds", type=int, default=25)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    a.npm_dir = os.path.abspath(a.npm_dir) if a.npm_dir else ""
    tests = {
        "property": lambda srv: test_property(srv, a.seeds, a.max_tokens),
        "refusals": test_refusals,
        "logit_bias": test_logit_bias,
        "props": lambda srv: test_props(srv, a.build_dir),
        "sdk": lambda srv: test_sdk(srv, a.npm_dir),
        "tools": lambda srv: test_forced_tools(srv, a.tool_seeds),
    }
    with h.running(a.build_dir, ["--ctx", "1024", "--batched-session", "16"], "controls.log") as srv:
        for name, fn in tests.items():
            if a.only and name not in a.only.split(","):
                continue
            print(f"[{name}]", flush=True)
            t0 = time.time()
            try:
                fn(srv)
            except Exception as e:  # noqa: BLE001 - report and go on with the other parts
                check(False, f"{name} raised {type(e).__name__}: {e}")
            print(f"  {time.time() - t0:.1f} s", flush=True)
    print(f"controls_server: {len(failures)} failed" if failures else "controls_server: all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
