#!/usr/bin/python3
"""Jinja2 set up exactly as Hugging Face transformers compiles chat templates: the oracle the
engine's tests compare against (Debian's python3-jinja2).

transformers (utils/chat_template_utils.py, _compile_jinja_template) uses an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols extension,
replaces the tojson filter with json.dumps (ensure_ascii, indent, separators, sort_keys), and adds
the raise_exception and strftime_now globals plus a {% generation %} block that renders its body.

Used as a module (make_env, render, chat_variables) and as a line server for the C++ tests:
    jinja_oracle.py --serve    reads {"template", "vars", "now"} lines, answers
                               {"ok": true, "output"} or {"ok": false, "error_type", "error"}
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationBlock(Extension):
    """transformers' AssistantTracker with no tracker active: the body renders as is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(now).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template, variables, now):
    """Returns {"ok": True, "output"} or {"ok": False, "error_type", "error"}."""
    try:
        out = make_env(now).from_string(template).render(**variables)
        return {"ok": True, "output": out}
    except Exception as e:  # the test compares failure with failure, whatever the type
        return {"ok": False, "error_type": type(e).__name__, "error": str(e)}


def chat_variables(request, bos_token=None, eos_token=None):
    """The variables transformers' apply_chat_template passes for an OpenAI chat request body:
    messages as given, tools or None, documents None, add_generation_prompt (default True), the
    special tokens, and chat_template_kwargs as extra variables."""
    variables = {
        "messages": request["messages"],
        "tools": request.get("tools"),
        "documents": None,
        "add_generation_prompt": request.get("add_generation_prompt", True),
    }
    if bos_token is not None:
        variables["bos_token"] = bos_token
    if eos_token is not None:
        variables["eos_token"] = eos_token
    variables.update(request.get("chat_template_kwargs") or {})
    return variables


def serve():
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        res = render(req["template"], req.get("vars", {}), req.get("now", 0))
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        sys.exit(__doc__)
