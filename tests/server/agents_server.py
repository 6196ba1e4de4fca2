#!/usr/bin/env python3
# tests/server/agents_server.py - tools, reasoning and the Responses API end to end: the test build
# of tandem-server with its scripted engine (TANDEM_TEST_SCRIPT) replies in each model family's
# syntax (Qwen3/Hermes, Qwen3-Coder, DeepSeek V3.1, GLM-4.6, Kimi K2 Thinking, gpt-oss) under that
# family's real chat template; every API (OpenAI chat, Anthropic Messages, Responses), streamed and
# not, must report the same reasoning, text and tool calls. Also: what the template received
# (chat_template_kwargs, tool results), /props, max_tokens clamped to the context, bad input (400s
# naming the field, then the server still serves), the official SDKs (sdk_agents.cjs) and a real
# agent CLI (OpenAI's Codex) that runs the tool call it is given.
# Usage: agents_server.py --build-dir B --test-server T [--npm-dir D] [--agents-npm-dir A] [--only NAME]
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness as h  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "fixtures", "templates")
MODEL = "tiny.gguf"
failures = []

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TWO_CALLS = [["get_weather", {"city": "Paris"}], ["get_weather", {"city": "Oslo"}]]

# family -> (template file, the scripted reply in its syntax, expected reasoning, text, calls)
FAMILIES = {
    "hermes": ("Qwen-Qwen3-0.6B.jinja",
               "<think>\nPlan: two cities.\n</think>\n\nChecking both.\n<tool_call>\n{\"name\": \"get_weather\", "
               "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
               "{\"city\": \"Oslo\"}}\n</tool_call>", "Plan: two cities.", "Checking both.", TWO_CALLS),
    "qwen3-coder": ("Qwen3-Coder.jinja",
                    "Checking both.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                    "</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n"
                    "</tool_call>", "", "Checking both.", TWO_CALLS),
    "deepseek-v3.1": ("deepseek-ai-DeepSeek-V3.1.jinja",
                      "Plan: two cities.</think>Checking both.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                      "{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}"
                      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "Plan: two cities.", "Checking both.", TWO_CALLS),
    "glm-4.5": ("GLM-4.6.jinja",
                "\n<think>Plan: two cities.</think>\nChecking both.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                "<arg_value>Paris</arg_value>\n</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                "<arg_value>Oslo</arg_value>\n</tool_call>", "Plan: two cities.", "Checking both.", TWO_CALLS),
    "kimi-k2": ("moonshotai-Kimi-K2-Thinking.jinja",
                "<think>Plan: two cities.</think>Checking both.<|tool_calls_section_begin|><|tool_call_begin|>"
                "functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>"
                "functions.get_weather:1<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|>"
                "<|tool_calls_section_end|>", "Plan: two cities.", "Checking both.", TWO_CALLS),
    "harmony": ("openai-gpt-oss-120b.jinja",
                "<|channel|>analysis<|message|>Plan: one city.<|end|><|start|>assistant<|channel|>commentary "
                "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
                "Plan: one city.", "", TWO_CALLS[:1]),
}


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"  FAIL: {what}", flush=True)
    return cond


class scripted:
    """A tandem-server-test whose engine replies from a script file this object rewrites."""

    def __init__(self, build_dir, test_server, template, extra_args=(), log_name="agents.log", ctx=16384):
        self.dir = tempfile.mkdtemp(prefix="tandem-agents-")
        self.script = os.path.join(self.dir, "script.json")
        self.prompts = os.path.join(self.dir, "prompts.jsonl")
        self.set_reply("")
        args = ["--ctx", str(ctx), "--batched-session", "2"] + (["--chat-template-file", template] if template else [])
        self.srv = h.server(build_dir, args + list(extra_args), log_name, env={"TANDEM_TEST_SCRIPT": self.script},
                            binary=test_server)

    def __enter__(self):
        self.srv.wait_ready()
        return self

    def __exit__(self, *exc):
        check(self.srv.stop() == 0, "the scripted server exits 0 on SIGTERM")
        shutil.rmtree(self.dir, ignore_errors=True)

    def set_reply(self, reply, replies=()):
        with open(self.script, "w") as f:
            json.dump({"default": reply, "replies": list(replies), "prompt_log": self.prompts}, f)

    def last_prompt(self):
        with open(self.prompts) as f:
            return json.loads(f.read().splitlines()[-1])["prompt"]


# ---- each API's reply reduced to (reasoning, text, [[name, arguments object], ...]) ----

def chat_reply(srv, body):
    status, r = srv.post_json("/v1/chat/completions", body)
    if not check(status == 200, f"chat status {status}: {r}"):
        return None
    m = r["choices"][0]["message"]
    calls = [[c["function"]["name"], json.loads(c["function"]["arguments"])] for c in m.get("tool_calls") or []]
    return m.get("reasoning_content") or "", m["content"] or "", calls, r["choices"][0]["finish_reason"]


def chat_stream(srv, body):
    reasoning, text, calls, finish = "", "", {}, None
    for c in sse(srv, "/v1/chat/completions", dict(body, stream=True)):
        if c == "[DONE]" or not c["choices"]:
            continue
        ch = c["choices"][0]
        finish = ch["finish_reason"] or finish
        d = ch["delta"]
        reasoning += d.get("reasoning_content") or ""
        text += d.get("content") or ""
        for t in d.get("tool_calls") or []:
            call = calls.setdefault(t["index"], ["", ""])
            call[0] += t.get("function", {}).get("name") or ""
            call[1] += t.get("function", {}).get("arguments") or ""
    return reasoning, text, [[n, json.loads(a)] for _, (n, a) in sorted(calls.items())], finish


def anthropic_body(body):
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in body.get("tools", [])]
    out = {"model": MODEL, "max_tokens": 4000, "messages": body["messages"], "tools": tools}
    if body.get("thinking"):
        out["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    return out


def anthropic_reply(srv, body):
    status, r = srv.post_json("/v1/messages", anthropic_body(body))
    if not check(status == 200, f"anthropic status {status}: {r}"):
        return None
    reasoning = "".join(b["thinking"] for b in r["content"] if b["type"] == "thinking")
    text = "".join(b["text"] for b in r["content"] if b["type"] == "text")
    calls = [[b["name"], b["input"]] for b in r["content"] if b["type"] == "tool_use"]
    return reasoning, text, calls, r["stop_reason"]


def anthropic_stream(srv, body):
    blocks, stop = [], None
    for e in sse(srv, "/v1/messages", dict(anthropic_body(body), stream=True)):
        if e["type"] == "content_block_start":
            blocks.append(dict(e["content_block"], partial=""))
        elif e["type"] == "content_block_delta":
            d, b = e["delta"], blocks[e["index"]]
            if d["type"] == "thinking_delta":
                b["thinking"] += d["thinking"]
            elif d["type"] == "text_delta":
                b["text"] += d["text"]
            elif d["type"] == "input_json_delta":
                b["partial"] += d["partial_json"]
        elif e["type"] == "message_delta":
            stop = e["delta"]["stop_reason"]
    reasoning = "".join(b["thinking"] for b in blocks if b["type"] == "thinking")
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    calls = [[b["name"], json.loads(b["partial"])] for b in blocks if b["type"] == "tool_use"]
    return reasoning, text, calls, stop


def responses_body(body):
    tools = [dict(t["function"], type="function") for t in body.get("tools", [])]
    return {"model": MODEL, "input": body["messages"][-1]["content"], "tools": tools, "store": False}


def responses_items(output):
    reasoning = "".join(p["text"] for i in output if i["type"] == "reasoning" for p in i["content"])
    text = "".join(p["text"] for i in output if i["type"] == "message" for p in i["content"])
    calls = [[i["name"], json.loads(i["arguments"])] for i in output if i["type"] == "function_call"]
    return reasoning, text, calls


def responses_reply(srv, body):
    status, r = srv.post_json("/v1/responses", responses_body(body))
    if not check(status == 200, f"responses status {status}: {r}"):
        return None
    return responses_items(r["output"]) + (r["status"],)


def responses_stream(srv, body):
    final, arguments, sequence = None, {}, []
    for e in sse(srv, "/v1/responses", dict(responses_body(body), stream=True)):
        sequence.append(e["sequence_number"])
        if e["type"] == "response.function_call_arguments.delta":
            arguments[e["item_id"]] = arguments.get(e["item_id"], "") + e["delta"]
        if e["type"] in ("response.completed", "response.incomplete"):
            final = e["response"]
    check(sequence == list(range(len(sequence))), "Responses events are numbered from 0 in order")
    check(all(arguments.get(i["id"]) == i["arguments"] for i in final["output"] if i["type"] == "function_call"),
          "streamed argument deltas add up to each call's arguments")
    return responses_items(final["output"]) + (final["status"],)


def sse(srv, path, body):
    events = []
    h.stream_events(srv.port, path, body, lambda d, t: events.append(d))
    return events


# ---- scenarios ----

def test_families(build_dir, test_server):
    for family, (template, reply, reasoning, text, calls) in FAMILIES.items():
        print(f"  [{family}]", flush=True)
        with scripted(build_dir, test_server, os.path.join(TEMPLATES, template), log_name=f"agents-{family}.log") as s:
            s.set_reply(reply)
            _, props = s.srv.get_json("/props")
            check(props["tool_call_format"] == family and props["chat_template_family"] == "jinja" and
                  props["chat_template_origin"].startswith("--chat-template-file"), f"{family}: /props names the format")
            body = {"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris and Oslo?"}], "tools": [WEATHER]}
            # DeepSeek V3.1 reasons only when asked (its template opens <think> in the prompt then).
            if family == "deepseek-v3.1":
                body["chat_template_kwargs"] = {"thinking": True}
                body["thinking"] = True
            want = (reasoning, text, calls)
            runs = [("chat", chat_reply, "tool_calls"), ("chat stream", chat_stream, "tool_calls"),
                    ("anthropic", anthropic_reply, "tool_use"), ("anthropic stream", anthropic_stream, "tool_use")]
            if family != "deepseek-v3.1":  # the Responses API has no switch for DeepSeek's thinking
                runs += [("responses", responses_reply, "completed"), ("responses stream", responses_stream, "completed")]
            for api, fn, finish in runs:
                got = fn(s.srv, {k: v for k, v in body.items() if k != "thinking" or api.startswith("anthropic")})
                if got is None:
                    continue
                check(got[:3] == want, f"{family} {api}: reasoning, text and calls {got[:3]} == {want}")
                check(got[3] == finish, f"{family} {api}: finish {got[3]} == {finish}")


def test_template_inputs(build_dir, test_server):
    with scripted(build_dir, test_server, os.path.join(TEMPLATES, "Qwen-Qwen3-0.6B.jinja")) as s:
        s.set_reply("It is sunny.")
        base = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        status, r = s.srv.post_json("/v1/chat/completions", dict(base, chat_template_kwargs={"enable_thinking": False}))
        check(status == 200 and s.last_prompt().endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
              "chat_template_kwargs.enable_thinking reaches the template")
        status, r = s.srv.post_json("/v1/messages", {"model": MODEL, "max_tokens": 50, "thinking": {"type": "disabled"},
                                                     "messages": [{"role": "user", "content": "hi"}]})
        check(status == 200 and s.last_prompt().endswith("<think>\n\n</think>\n\n"), "Anthropic thinking disabled reaches the template")
        round_trip = {"model": MODEL, "tools": [WEATHER], "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                                                                   "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24 C"}]}
        status, r = s.srv.post_json("/v1/chat/completions", round_trip)
        prompt = s.last_prompt()
        check(status == 200 and "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>" in prompt
              and "<tool_response>\nsunny, 24 C\n</tool_response>" in prompt and "\"name\": \"get_weather\"" in prompt,
              "a tool-call round trip and the tools reach the template")
        check(r["choices"][0]["message"]["content"] == "It is sunny." and r["choices"][0]["finish_reason"] == "stop",
              "text without calls is the message content")
        # The model's reasoning is left in the text with --reasoning-format none (below), separated here.
        s.set_reply("<think>hm</think>ok")
        status, r = s.srv.post_json("/v1/chat/completions", base)
        check(r["choices"][0]["message"].get("reasoning_content") == "hm" and r["choices"][0]["message"]["content"] == "ok",
              "reasoning is separated by default")
        # Only the first call when parallel_tool_calls is false.
        s.set_reply(FAMILIES["hermes"][1])
        status, r = s.srv.post_json("/v1/chat/completions", dict(base, tools=[WEATHER], parallel_tool_calls=False))
        check(status == 200 and len(r["choices"][0]["message"]["tool_calls"]) == 1, "parallel_tool_calls false: one call")
        # tool_choice none: no tools in the prompt, and call syntax stays text.
        status, r = s.srv.post_json("/v1/chat/completions", dict(base, tools=[WEATHER], tool_choice="none"))
        check(status == 200 and "get_weather" not in s.last_prompt() and "tool_calls" not in r["choices"][0]["message"]
              and "<tool_call>" in r["choices"][0]["message"]["content"], "tool_choice none: no tools offered, no calls parsed")
        # previous_response_id continues a stored response.
        s.set_reply(FAMILIES["hermes"][1])
        status, first = s.srv.post_json("/v1/responses", {"input": "Weather?", "tools": [dict(WEATHER["function"], type="function")]})
        call = [i for i in first["output"] if i["type"] == "function_call"][0]
        s.set_reply("Paris is sunny.")
        status, second = s.srv.post_json("/v1/responses", {"previous_response_id": first["id"], "input": [
            {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]})
        check(status == 200 and second["output"][0]["content"][0]["text"] == "Paris is sunny." and
              "<tool_response>\nsunny\n</tool_response>" in s.last_prompt() and "Weather?" in s.last_prompt(),
              f"previous_response_id continues the stored conversation ({status})")
    with scripted(build_dir, test_server, os.path.join(TEMPLATES, "Qwen-Qwen3-0.6B.jinja"), ["--reasoning-format", "none"],
                  log_name="agents-raw.log") as s:
        s.set_reply("<think>hm</think>ok")
        status, r = s.srv.post_json("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        check(r["choices"][0]["message"]["content"] == "<think>hm</think>ok" and "reasoning_content" not in r["choices"][0]["message"],
              "--reasoning-format none passes the raw text")


def test_max_tokens_clamped(build_dir, test_server):
    # Agents ask for 32,000 tokens whatever the context: the reply stops at the context's end.
    with scripted(build_dir, test_server, None, ctx=256, log_name="agents-clamp.log") as s:
        s.set_reply("word " * 400)
        status, r = s.srv.post_json("/v1/chat/completions", {"model": MODEL, "max_tokens": 32000,
                                                             "messages": [{"role": "user", "content": "write"}]})
        check(status == 200 and r["choices"][0]["finish_reason"] == "length" and
              r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] == 256,
              f"max_tokens beyond the context is clamped to its room ({status}, {r.get('usage')})")
        status, r = s.srv.post_json("/v1/messages", {"model": MODEL, "max_tokens": 32000, "messages": [{"role": "user", "content": "x"}]})
        check(status == 200 and r["stop_reason"] == "max_tokens", "Anthropic: max_tokens clamped, stop_reason max_tokens")
        status, r = s.srv.post_json("/v1/responses", {"input": "x", "max_output_tokens": 32000})
        check(status == 200 and r["status"] == "incomplete" and r["incomplete_details"]["reason"] == "max_output_tokens",
              "Responses: clamped, status incomplete")


def test_bad_input(build_dir, test_server):
    with scripted(build_dir, test_server, os.path.join(TEMPLATES, "openai-gpt-oss-120b.jinja"), log_name="agents-bad.log") as s:
        s.set_reply("fine")
        user = [{"role": "user", "content": "x"}]
        cases = [
            ("/v1/chat/completions", {"messages": user, "tools": [{"type": "function", "function": {"parameters": {}}}]},
             "tools[0].function.name"),
            ("/v1/chat/completions", {"messages": user, "tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
             "tools[0].function.parameters"),
            ("/v1/chat/completions", {"messages": user, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
             "'nope'"),
            ("/v1/chat/completions", {"messages": user + [{"role": "tool", "tool_call_id": "call_x", "content": "r"}]}, "call_x"),
            # gpt-oss's template raises on channel markers in content: its own words come back.
            ("/v1/chat/completions", {"messages": user + [{"role": "assistant", "content": "<|channel|>final<|message|>x"},
                                                          {"role": "user", "content": "y"}]}, "<|channel|> tags"),
            ("/v1/messages", {"model": MODEL, "max_tokens": 5, "messages": user, "tools": [{"name": "f"}]}, "tools.0.input_schema"),
            ("/v1/messages", {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_x", "content": "r"}]}]}, "toolu_x"),
            ("/v1/responses", {"input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
            ("/v1/responses", {"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": 5}}}, "text.format"),
            ("/v1/responses", {"input": "x", "previous_response_id": "resp_missing"}, "resp_missing"),
            ("/v1/responses", {"input": "x", "seed": 3}, "'seed'"),
        ]
        for path, body, field in cases:
            status, r = s.srv.post_json(path, body)
            message = (r or {}).get("error", {}).get("message", "")
            shape = r.get("type") == "error" if path == "/v1/messages" else "error" in r
            check(status == 400 and field in message and shape, f"{path} {field}: 400 in the API's shape naming it ({status} {message})")
            status, ok = s.srv.post_json("/v1/chat/completions", {"messages": user})
            check(status == 200 and ok["choices"][0]["message"]["content"] == "fine", f"the server serves after the 400 for {field}")
    # A template file that does not parse is a configuration error, named at start-up.
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write("{% for m in messages %}{{ m.content }")
    out = subprocess.run([test_server, "-m", h.tiny_model(build_dir), "--port", "0", "--chat-template-file", f.name],
                         capture_output=True, text=True, timeout=60)
    os.unlink(f.name)
    check(out.returncode == 2 and "--chat-template-file" in out.stdout + out.stderr,
          f"a template file that does not parse stops the start (exit {out.returncode})")


def test_sdks(build_dir, test_server, npm_dir):
    if not npm_dir or not os.path.isdir(os.path.join(npm_dir, "node_modules", "openai")):
        check(False, f"npm SDKs installed under {npm_dir}")
        return
    with scripted(build_dir, test_server, os.path.join(TEMPLATES, "Qwen-Qwen3-0.6B.jinja"), log_name="agents-sdk.log") as s:
        s.set_reply(FAMILIES["hermes"][1])
        env = dict(os.environ, NODE_PATH=os.path.join(npm_dir, "node_modules"), TANDEM_URL=f"http://127.0.0.1:{s.srv.port}",
                   TANDEM_MODEL=MODEL)
        out = subprocess.run(["node", os.path.join(HERE, "sdk_agents.cjs")], capture_output=True, env=env, timeout=300, cwd=npm_dir)
        print(out.stdout.decode()[-3000:], out.stderr.decode()[-3000:])
        check(out.returncode == 0, "openai and @anthropic-ai/sdk read tool calls, reasoning and Responses streams")


def test_codex(build_dir, test_server, agents_npm_dir):
    """OpenAI's Codex CLI (Responses API) runs a shell command the scripted model asks for, then
    prints the model's answer. It runs offline against loopback: the provider is configured on the
    command line; web search and sub-agents (hosted and namespaced tools Tandem refuses) are off."""
    codex = os.path.join(agents_npm_dir or "", "node_modules", ".bin", "codex")
    if not check(os.path.exists(codex), f"codex installed under {agents_npm_dir}"):
        return
    work = tempfile.mkdtemp(prefix="tandem-codex-")
    home = os.path.join(work, "home")
    os.makedirs(os.path.join(home, ".codex"))
    project = os.path.join(work, "project")
    os.makedirs(project)
    with scripted(build_dir, test_server, os.path.join(TEMPLATES, "Qwen-Qwen3-0.6B.jinja"), ctx=65536,
                  log_name="agents-codex.log") as s:
        s.set_reply("<think>\nA shell command writes the file.\n</think>\n\n<tool_call>\n{\"name\": \"exec_command\", \"arguments\": "
                    "{\"cmd\": \"printf 'hello from tandem' > agent_out.txt\"}}\n</tool_call>",
                    [{"when": "<tool_response>", "reply": "<think>\nDone.\n</think>\n\nI wrote agent_out.txt. ANSWER-7f3a"}])
        provider = (f'model_providers.tandem={{name="tandem",base_url="http://127.0.0.1:{s.srv.port}/v1",'
                    'wire_api="responses",env_key="TANDEM_KEY"}')
        cmd = [codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-m", MODEL,
               "-c", "web_search=disabled", "--disable", "multi_agent", "--disable", "goals", "-c", "model_provider=tandem",
               "-c", provider, "write hello into a file"]
        env = dict(os.environ, HOME=home, CODEX_HOME=os.path.join(home, ".codex"), TANDEM_KEY="unused")
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=project, stdin=subprocess.DEVNULL, timeout=300)
        print(out.stdout[-2000:], out.stderr[-2000:])
        written = os.path.join(project, "agent_out.txt")
        check(os.path.exists(written) and open(written).read() == "hello from tandem", "Codex ran the tool call: the file is written")
        check(out.returncode == 0 and "ANSWER-7f3a" in out.stdout, f"Codex printed the final answer (exit {out.returncode})")
    shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--test-server", required=True)
    ap.add_argument("--npm-dir", default="")
    ap.add_argument("--agents-npm-dir", default="")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    tests = {
        "families": lambda: test_families(a.build_dir, a.test_server),
        "inputs": lambda: test_template_inputs(a.build_dir, a.test_server),
        "clamp": lambda: test_max_tokens_clamped(a.build_dir, a.test_server),
        "bad": lambda: test_bad_input(a.build_dir, a.test_server),
        "sdks": lambda: test_sdks(a.build_dir, a.test_server, os.path.abspath(a.npm_dir) if a.npm_dir else ""),
        "codex": lambda: test_codex(a.build_dir, a.test_server, os.path.abspath(a.agents_npm_dir) if a.agents_npm_dir else ""),
    }
    for name, fn in tests.items():
        if a.only and name not in a.only.split(","):
            continue
        print(f"[{name}]", flush=True)
        try:
            fn()
        except Exception:  # noqa: BLE001 - report and go on with the other scenarios
            check(False, f"{name} raised:\n{traceback.format_exc()}")
    print(f"agents_server: {len(failures)} failed" if failures else "agents_server: all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
