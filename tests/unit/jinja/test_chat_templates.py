#!/usr/bin/python3
"""The published chat templates in tests/fixtures/templates over the conversations beside them,
rendered by `tandem template` and by Jinja2 set up as transformers sets it up (jinja_oracle.py):
the prompts must be byte-identical, or both must fail, a template's raise_exception failing
`tandem template` with the template's own message. Then `tandem template -m` on GGUF files written
here: tokenizer.chat_template, named variants, the bos/eos token texts, and the errors.

Usage: test_chat_templates.py TANDEM_BINARY   (exit 77, skipped, without python3-jinja2)
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TEMPLATES = os.path.join(ROOT, "tests", "fixtures", "templates")
CONVERSATIONS = os.path.join(TEMPLATES, "conversations")
sys.path.insert(0, HERE)

try:
    import jinja_oracle
except ImportError:
    print("SKIPPED: /usr/bin/python3 cannot import jinja2 (Debian package python3-jinja2)")
    sys.exit(77)

NOW = 1709214307
BOS, EOS = "<|bos|>", "<|eos|>"
MIN_RENDERED = 8  # conversations each template must render (the rest may fail on both sides)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run_tandem(tandem, args):
    p = subprocess.run([tandem, "template", "--now", str(NOW)] + args, capture_output=True, timeout=60)
    return p.returncode, p.stdout.decode("utf-8", "surrogateescape"), p.stderr.decode("utf-8", "replace")


def compare(tandem, label, template_text, variables, args):
    """Returns 'ok', 'both-failed' or 'mismatch'."""
    want = jinja_oracle.render(template_text, variables, NOW)
    rc, out, err = run_tandem(tandem, args)
    if want["ok"]:
        if rc != 0:
            check(False, f"{label}: jinja2 renders, tandem failed: {err.strip()}")
            return "mismatch"
        if out != want["output"]:
            at = next((i for i, (a, b) in enumerate(zip(out, want["output"])) if a != b), min(len(out), len(want["output"])))
            check(False, f"{label}: outputs differ at character {at}: jinja2 {want['output'][at:at + 60]!r} "
                         f"tandem {out[at:at + 60]!r}")
            return "mismatch"
        return "ok"
    check(rc != 0, f"{label}: jinja2 fails ({want['error_type']}: {want['error']}), tandem rendered")
    if want["error_type"] == "TemplateError":
        check(want["error"] in err, f"{label}: the template's message {want['error']!r} is not in {err!r}")
    return "both-failed"


def real_templates(tandem):
    templates = sorted(f for f in os.listdir(TEMPLATES) if f.endswith(".jinja"))
    conversations = sorted(f for f in os.listdir(CONVERSATIONS) if f.endswith(".json"))
    check(len(templates) >= 7 and len(conversations) >= 8, "fixtures missing")
    raised = 0
    for t in templates:
        path = os.path.join(TEMPLATES, t)
        text = open(path, encoding="utf-8").read()
        rendered = 0
        for c in conversations:
            conv_path = os.path.join(CONVERSATIONS, c)
            request = json.load(open(conv_path, encoding="utf-8"))
            variables = jinja_oracle.chat_variables(request, BOS, EOS)
            args = ["--chat-template-file", path, "--request", conv_path, "--bos-token", BOS, "--eos-token", EOS]
            outcome = compare(tandem, f"{t} x {c}", text, variables, args)
            rendered += outcome == "ok"
            want = jinja_oracle.render(text, variables, NOW)
            raised += not want["ok"] and want["error_type"] == "TemplateError"
        print(f"{t}: {rendered}/{len(conversations)} conversations rendered identically")
        check(rendered >= MIN_RENDERED, f"{t}: only {rendered} conversations rendered")
    check(raised >= 1, "no conversation made a template raise")


def tool_argument_modes(tandem):
    """--tool-arguments object parses JSON strings (as vLLM does), string serializes objects."""
    cases = [("GLM-4.6.jinja", "05_parallel_tool_calls.json", "object"),
             ("deepseek-ai-DeepSeek-V3.1.jinja", "06_parallel_tool_calls_object_arguments.json", "string"),
             ("Qwen3-Coder.jinja", "15_tool_round_trip_then_question.json", "object")]
    for t, c, mode in cases:
        path, conv_path = os.path.join(TEMPLATES, t), os.path.join(CONVERSATIONS, c)
        request = json.load(open(conv_path, encoding="utf-8"))
        for m in request["messages"]:
            for call in m.get("tool_calls") or []:
                a = call["function"]["arguments"]
                if mode == "object" and isinstance(a, str):
                    call["function"]["arguments"] = json.loads(a)
                if mode == "string" and not isinstance(a, str):
                    call["function"]["arguments"] = json.dumps(a, ensure_ascii=False)
        variables = jinja_oracle.chat_variables(request, BOS, EOS)
        outcome = compare(tandem, f"{t} x {c} --tool-arguments {mode}", open(path, encoding="utf-8").read(), variables,
                          ["--chat-template-file", path, "--request", conv_path, "--bos-token", BOS, "--eos-token", EOS,
                           "--tool-arguments", mode])
        check(outcome == "ok", f"{t} with --tool-arguments {mode} did not render")


# ---- GGUF files, encoded from the format description (magic, version 3, counts, key/values) ----

U32, STR, ARR = 4, 8, 9


def gguf_str(text):
    b = text.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, vtype, v):
    out = gguf_str(key) + struct.pack("<I", vtype)
    if vtype == STR:
        return out + gguf_str(v)
    if vtype == U32:
        return out + struct.pack("<I", v)
    etype, items = v
    return out + struct.pack("<IQ", etype, len(items)) + b"".join(gguf_str(x) for x in items)


def write_gguf(path, kvs):
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))


def gguf_files(tandem, tmp):
    qwen3 = open(os.path.join(TEMPLATES, "Qwen-Qwen3-0.6B.jinja"), encoding="utf-8").read()
    tool_use = "TOOL_USE {{ bos_token }}{% for t in tools %}[{{ t.function.name }}]{% endfor %}{{ eos_token }}"
    tokens = ["<unk>", "<|bos|>", "<|eos|>", "hello"]
    model = os.path.join(tmp, "with-templates.gguf")
    write_gguf(model, [
        gguf_kv("general.architecture", STR, "qwen3moe"),
        gguf_kv("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        gguf_kv("tokenizer.ggml.bos_token_id", U32, 1),
        gguf_kv("tokenizer.ggml.eos_token_id", U32, 2),
        gguf_kv("tokenizer.chat_template", STR, qwen3),
        gguf_kv("tokenizer.chat_template.tool_use", STR, tool_use),
    ])
    plain = os.path.join(CONVERSATIONS, "02_multi_turn.json")
    with_tools = os.path.join(CONVERSATIONS, "04_tools_offered.json")
    req_plain = json.load(open(plain, encoding="utf-8"))
    req_tools = json.load(open(with_tools, encoding="utf-8"))
    # The default template, with the file's token texts.
    compare(tandem, "-m default", qwen3, jinja_oracle.chat_variables(req_plain, "<|bos|>", "<|eos|>"),
            ["-m", model, "--request", plain])
    # Tools offered and a tool_use template present: transformers picks tool_use.
    compare(tandem, "-m tool_use chosen for tools", tool_use, jinja_oracle.chat_variables(req_tools, "<|bos|>", "<|eos|>"),
            ["-m", model, "--request", with_tools])
    # Named explicitly, even without tools; the flags override the file's token texts.
    compare(tandem, "-m --template-name tool_use", tool_use, jinja_oracle.chat_variables(req_plain, "B", "E"),
            ["-m", model, "--request", plain, "--template-name", "tool_use", "--bos-token", "B", "--eos-token", "E"])
    rc, _, err = run_tandem(tandem, ["-m", model, "--request", plain, "--template-name", "nope"])
    check(rc != 0 and "nope" in err and "tool_use" in err, f"unknown --template-name: rc {rc}, {err!r}")

    bare = os.path.join(tmp, "no-template.gguf")
    write_gguf(bare, [gguf_kv("general.architecture", STR, "qwen3moe")])
    rc, _, err = run_tandem(tandem, ["-m", bare, "--request", plain])
    check(rc != 0 and "--chat-template-file" in err, f"GGUF without a template: rc {rc}, {err!r}")


def bad_input(tandem, tmp):
    path = os.path.join(TEMPLATES, "Qwen-Qwen3-0.6B.jinja")
    broken = os.path.join(tmp, "broken.jinja")
    open(broken, "w").write("line one\n{% for x in %}\n")
    rc, _, err = run_tandem(tandem, ["--chat-template-file", broken, "--request", os.path.join(CONVERSATIONS, "01_system_prompt.json")])
    check(rc != 0 and "line 2" in err, f"syntax error: rc {rc}, {err!r}")
    not_json = os.path.join(tmp, "request.json")
    open(not_json, "w").write("{\"messages\": [")
    rc, _, err = run_tandem(tandem, ["--chat-template-file", path, "--request", not_json])
    check(rc != 0 and "JSON" in err, f"malformed request: rc {rc}, {err!r}")
    open(not_json, "w").write("{\"messages\": {}}")
    rc, _, err = run_tandem(tandem, ["--chat-template-file", path, "--request", not_json])
    check(rc != 0 and "messages" in err, f"messages not an array: rc {rc}, {err!r}")


def main():
    tandem = sys.argv[1]
    real_templates(tandem)
    tool_argument_modes(tandem)
    with tempfile.TemporaryDirectory() as tmp:
        gguf_files(tandem, tmp)
        bad_input(tandem, tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("all chat template checks passed")


if __name__ == "__main__":
    main()
