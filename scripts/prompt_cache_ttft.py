#!/usr/bin/env python3
"""scripts/prompt_cache_ttft.py - time to first token of a conversation restored from the host
prompt cache, against its cold prefill.

Against a server with one slot and the cache on, e.g.
    tandem-server -m F --ctx 33000 --batched-session 1 --cache-ram 8
run `scripts/prompt_cache_ttft.py http://127.0.0.1:8080 32000`: prompt A (about that many tokens)
cold, prompt B (which moves A to the cache), then A again with a few tokens more, each for one
output token; it prints each request's wall time, prefill time and cached tokens, and the ratio.
"""
import json, random, sys, time, urllib.request
base = sys.argv[1]
def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    t0 = time.time()
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.loads(r.read())
    return out, time.time() - t0
words = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "seven", "orbit", "maple", "quartz", "lunar"]
def text(n_words, seed):
    r = random.Random(seed)
    return " ".join(r.choice(words) + str(r.randint(0, 99)) for _ in range(n_words))
want = int(sys.argv[2]) if len(sys.argv) > 2 else 32000
n = 8000
for _ in range(4):
    toks = post("/tokenize", {"content": text(n, 1)})[0]["tokens"]
    n = int(n * want / max(1, len(toks)))
a, b = text(n, 1), text(n, 2)
print("prompt tokens", len(post("/tokenize", {"content": a})[0]["tokens"]))
def ask(p):
    out, wall = post("/v1/completions", {"prompt": p, "max_tokens": 1, "temperature": 0})
    t = out.get("timings", {})
    return wall, t.get("prompt_ms"), t.get("cache_n"), out["usage"]
cold = ask(a)
print("cold A: wall %.3f s prompt_ms %s cache_n %s usage %s" % cold)
print("B: wall %.3f s prompt_ms %s cache_n %s usage %s" % ask(b))
warm = ask(a + " return")
print("returning A: wall %.3f s prompt_ms %s cache_n %s usage %s" % warm)
print("ttft ratio restored/cold: %.3f" % (warm[0] / cold[0]))
