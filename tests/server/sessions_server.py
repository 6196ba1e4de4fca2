#!/usr/bin/python3
# tests/server/sessions_server.py - conversations that outlive their slot, end to end through the
# real tandem-server (CPU engine, tiny synth model) and the official `openai` npm client:
#   - eviction: with --batched-session 2, conversations A, B, C, then A again: A's return is served
#     from the host prompt cache (cached_tokens >= 90% of its prompt) and its output equals, token
#     for token, a server that never evicted A (--cache-ram 0), greedy and with a seeded draw;
#   - shared prefix: 8 requests sent at once with one long system prompt: only the first computes
#     it (llamacpp:prompt_tokens_total and each reply's cached_tokens say so), outputs equal to a
#     server without the cache, which computes it more than once;
#   - slot files: save, erase, restore into a slot that held something else since; the continuation
#     equals the reference's; file names that leave the folder, foreign, truncated, altered and
#     oversized files are 400s with a message; without --slot-save-path, 501.
#   - disk tier: with one slot and host memory for one conversation, A, B, C, then A again: A's
#     return is read back from DIR/prompt-cache (cached_tokens >= 90%, output equal to a server
#     without the cache); a restart reuses the files and skips truncated, junk and foreign ones with
#     a log line; --cache-disk without --slot-save-path or without the host cache is refused.
# The settings come through each layer: flags, TANDEM_SLOT_SAVE_PATH, a --config file's cache-ram.
# Usage: sessions_server.py --build-dir B --npm-dir D [--only NAME]
import argparse
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness as h  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = "tiny.gguf"
# The system prompt of the shared-prefix part, in tokens.
SYSTEM_TOKENS = 2000
failures = []


def check(cond, what):
    print(f"  {'ok' if cond else 'FAIL'}: {what}", flush=True)
    if not cond:
        failures.append(what)
    return cond


def words(seed, n):
    rng = random.Random(seed)
    pool = ["river", "stone", "cloud", "ember", "maple", "quartz", "harbor", "lantern", "meadow", "signal",
            "copper", "willow", "orbit", "canyon", "velvet", "summit", "tundra", "prism", "falcon", "delta"]
    return " ".join(rng.choice(pool) for _ in range(n))


def run_plan(srv, npm_dir, plan, name):
    """Sends the plan's rounds through the openai npm client; returns the replies in plan order."""
    path = os.path.join(work_dir(srv.build_dir), f"{name}.json")
    with open(path, "w") as f:
        json.dump(plan, f)
    env = dict(os.environ, NODE_PATH=os.path.join(npm_dir, "node_modules"), TANDEM_URL=f"http://{h.HOST}:{srv.port}")
    out = subprocess.run(["node", os.path.join(HERE, "sdk_sessions.cjs"), path], capture_output=True, env=env,
                         timeout=600, cwd=npm_dir, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the openai client failed on {name}: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def work_dir(build_dir):
    d = os.path.join(build_dir, "server-tests", "sessions")
    os.makedirs(d, exist_ok=True)
    return d


def metric(srv, name):
    _, _, body = srv.request("GET", "/metrics")
    m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", body.decode(), re.M)
    return float(m.group(1)) if m else None


def chat(messages, **kw):
    body = {"model": MODEL, "messages": messages, "max_tokens": 12, "temperature": 0}
    body.update(kw)
    return body


def cached(reply):
    return (reply["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def same_output(a, b, what):
    check(a["tokens"] == b["tokens"] and a["text"] == b["text"] and len(a["tokens"]) > 0,
          f"{what}: the same {len(a['tokens'])} tokens ({a['text']!r} vs {b['text']!r})")


def start(build_dir, args, name, env=None):
    return h.server(build_dir, ["--threads", "1", "--ctx", "4096"] + args, f"sessions-{name}.log", env=env).wait_ready()


# ---- 1. a conversation whose slot went to others comes back from host memory ----

def conversation(seed, n_words):
    return [{"role": "user", "content": f"Story {seed}: " + words(seed, n_words)}]


def test_eviction(cached_srv, plain_srv, npm_dir):
    a, b, c = conversation(1, 500), conversation(2, 500), conversation(3, 500)
    first = run_plan(plain_srv, npm_dir, [[chat(a)]], "evict-a")[0]
    a2 = a + [{"role": "assistant", "content": first["text"]}, {"role": "user", "content": "And then?"}]
    greedy, seeded = chat(a2), chat(a2, temperature=0.9, seed=17)
    ref = run_plan(plain_srv, npm_dir, [[greedy], [seeded]], "evict-ref")
    hits_before = metric(cached_srv, "tandem_prompt_cache_hits_total")
    got = run_plan(cached_srv, npm_dir, [[chat(a)], [chat(b)], [chat(c)], [greedy], [chat(b)], [chat(c)], [seeded]],
                   "evict-run")
    same_output(got[0], first, "A's first turn")
    for reply, want, how in [(got[3], ref[0], "greedy"), (got[6], ref[1], "seeded")]:
        n_prompt, n_cached = reply["usage"]["prompt_tokens"], cached(reply)
        check(n_cached >= 0.9 * n_prompt, f"A's return ({how}) reports {n_cached} of {n_prompt} prompt tokens cached")
        same_output(reply, want, f"A's return ({how}) against a server that never evicted it")
    hits = metric(cached_srv, "tandem_prompt_cache_hits_total") - hits_before
    check(hits >= 2, f"tandem_prompt_cache_hits_total counted both returns ({hits})")
    check(metric(cached_srv, "tandem_prompt_cache_bytes") > 0, "tandem_prompt_cache_bytes shows what the cache holds")
    check(metric(cached_srv, "tandem_prompt_cache_tokens_restored_total") >= 0.9 * got[6]["usage"]["prompt_tokens"],
          "tandem_prompt_cache_tokens_restored_total counts the restored tokens")
    check(metric(cached_srv, "tandem_prompt_cache_misses_total") >= 3, "the first turns were misses")


# ---- 2. one long system prompt, many questions ----

def system_prompt(srv):
    """A system prompt of about SYSTEM_TOKENS tokens, and its count alone."""
    n = SYSTEM_TOKENS
    for _ in range(4):
        text = "Rules of the house. " + words(99, n)
        _, r = srv.post_json("/v1/messages/count_tokens",
                             {"model": MODEL, "system": text, "messages": [{"role": "user", "content": "x"}]})
        got = r["input_tokens"]
        if abs(got - SYSTEM_TOKENS) < SYSTEM_TOKENS // 10:
            break
        n = max(16, int(n * SYSTEM_TOKENS / got))
    return text, got


def test_shared_prefix(cached_srv, plain_srv, npm_dir):
    system, n_system = system_prompt(cached_srv)
    bodies = [chat([{"role": "system", "content": system}, {"role": "user", "content": f"Question {i}: {words(i, 6)}?"}],
                   max_tokens=6) for i in range(8)]
    computed = {}
    replies = {}
    for name, srv in [("cache", cached_srv), ("plain", plain_srv)]:
        before = metric(srv, "llamacpp:prompt_tokens_total")
        replies[name] = run_plan(srv, npm_dir, [bodies], f"shared-{name}")
        computed[name] = metric(srv, "llamacpp:prompt_tokens_total") - before
    total = sum(r["usage"]["prompt_tokens"] for r in replies["cache"])
    from_cache = sorted(cached(r) for r in replies["cache"])
    # The template's markers around the system text make the shared prefix a few tokens shorter
    # than the count with one user message.
    shared = n_system - 16
    check(from_cache[0] < shared and all(n >= shared for n in from_cache[1:]),
          f"one request computed the {n_system}-token system prompt, seven took it cached: {from_cache}")
    check(computed["cache"] == total - sum(from_cache),
          f"llamacpp:prompt_tokens_total grew by the tokens not cached ({computed['cache']} of {total})")
    check(computed["cache"] < n_system + 8 * (total // 8 - shared),
          f"the system prompt was computed once ({computed['cache']} tokens computed)")
    check(computed["plain"] >= computed["cache"] + shared,
          f"without the cache it is computed more than once ({computed['plain']} vs {computed['cache']} tokens)")
    for i, (a, b) in enumerate(zip(replies["cache"], replies["plain"])):
        same_output(a, b, f"question {i} with and without the cache")


# ---- 3. slot files ----

HEADER = struct.Struct("<8sIIQQ8s")  # magic, version, n_tokens, model hash, bytes a token, KV type


def slot_post(srv, slot, action, body=None):
    return srv.post_json(f"/slots/{slot}?action={action}", body if body is not None else {})


def test_slot_files(files_srv, plain_srv, npm_dir, save_dir):
    d = conversation(5, 400)
    first = run_plan(plain_srv, npm_dir, [[chat(d)]], "files-ref-d")[0]
    d2 = d + [{"role": "assistant", "content": first["text"]}, {"role": "user", "content": "Go on."}]
    ref = run_plan(plain_srv, npm_dir, [[chat(d2)]], "files-ref-d2")[0]

    same_output(run_plan(files_srv, npm_dir, [[chat(d)]], "files-d")[0], first, "D's first turn")
    status, saved = slot_post(files_srv, 0, "save", {"filename": "d.bin"})
    check(status == 200 and saved["id_slot"] == 0 and saved["filename"] == "d.bin" and saved["n_saved"] > 400
          and saved["n_written"] == os.path.getsize(os.path.join(save_dir, "d.bin")) and "save_ms" in saved["timings"],
          f"save answers llama-server's shape: {saved}")
    status, erased = slot_post(files_srv, 0, "erase")
    check(status == 200 and erased == {"id_slot": 0, "n_erased": saved["n_saved"]}, f"erase: {erased}")
    check(files_srv.get_json("/slots")[1][0]["n_cached"] == 0, "the erased slot holds nothing")
    run_plan(files_srv, npm_dir, [[chat(conversation(6, 300))]], "files-other")  # the slot holds another now
    status, restored = slot_post(files_srv, 0, "restore", {"filename": "d.bin"})
    check(status == 200 and restored["n_restored"] == saved["n_saved"] and restored["n_read"] == saved["n_written"]
          and "restore_ms" in restored["timings"], f"restore: {restored}")
    got = run_plan(files_srv, npm_dir, [[chat(d2)]], "files-d2")[0]
    check(cached(got) >= first["usage"]["prompt_tokens"] - 1,
          f"the continuation took D's {first['usage']['prompt_tokens']} prompt tokens from the restored slot ({cached(got)})")
    same_output(got, ref, "the continuation after save, erase and restore")
    refusals(files_srv, save_dir)
    status, r = slot_post(plain_srv, 0, "save", {"filename": "x.bin"})
    check(status == 501 and "--slot-save-path" in r["error"]["message"], f"without --slot-save-path: 501 ({status})")


def refusals(srv, save_dir):
    for name in ["../escape.bin", "..", "sub/x.bin", "/etc/passwd", "a\\b.bin", "", "x..y", "nul\x01.bin"]:
        status, r = slot_post(srv, 0, "save", {"filename": name})
        check(status == 400 and r["error"]["message"], f"save {name!r}: 400 ({status}, {r['error']['message']})")
        status, r = slot_post(srv, 0, "restore", {"filename": name})
        check(status == 400, f"restore {name!r}: 400 ({status})")
    check(not os.path.exists(os.path.join(save_dir, "..", "escape.bin")), "nothing was written outside the folder")
    for target, body, want in [("/slots/0?action=fly", {}, 400), ("/slots/9?action=erase", {}, 404),
                               ("/slots/x?action=erase", {}, 404), ("/slots/0", {}, 400),
                               ("/slots/0?action=save", {"filename": 3}, 400),
                               ("/slots/0?action=restore", {"filename": "missing.bin"}, 404)]:
        status, r = srv.post_json(target, body)
        check(status == want, f"POST {target} {body}: {want} ({status}: {r})")

    good = open(os.path.join(save_dir, "d.bin"), "rb").read()
    magic, version, n_tokens, model_hash, token_bytes, kv_type = HEADER.unpack_from(good)
    n_ctx = srv.get_json("/props")[1]["default_generation_settings"]["n_ctx"]
    body = good[HEADER.size:]
    tokens, kv = body[:4 * n_tokens], body[4 * n_tokens:]
    reps = n_ctx // n_tokens + 1
    held = srv.get_json("/slots")[1][0]["n_cached"]
    bad = {
        "junk.bin": (bytes(random.Random(3).randrange(256) for _ in range(4096)), "not a tandem slot file"),
        "short.bin": (good[:len(good) - 100], "truncated"),
        "long.bin": (good + b"\0" * 8, "longer"),
        "empty.bin": (b"", "not a tandem slot file"),
        "version.bin": (HEADER.pack(magic, version + 1, n_tokens, model_hash, token_bytes, kv_type) + body, "version"),
        "model.bin": (HEADER.pack(magic, version, n_tokens, model_hash ^ 1, token_bytes, kv_type) + body, "another model"),
        "kvtype.bin": (HEADER.pack(magic, version, n_tokens, model_hash, token_bytes, b"f16") + body, "KV cache"),
        "huge.bin": (HEADER.pack(magic, version, 1 << 31, model_hash, token_bytes, kv_type) + body, "tokens"),
        "big.bin": (HEADER.pack(magic, version, n_tokens * reps, model_hash, token_bytes, kv_type) + tokens * reps + kv * reps,
                    "tokens"),
    }
    for name, (data, want) in bad.items():
        with open(os.path.join(save_dir, name), "wb") as f:
            f.write(data)
        status, r = slot_post(srv, 0, "restore", {"filename": name})
        msg = r["error"]["message"] if r and "error" in r else ""
        check(status == 400 and want in msg, f"restore {name}: 400 saying '{want}' ({status}: {msg})")
    check(srv.get_json("/slots")[1][0]["n_cached"] == held, f"refused files leave the slot as it was ({held} tokens)")


# ---- 4. the disk tier: what the host cache evicts, read back, and reused by the next run ----

# The tiny model's KV a token on the CPU engine: 4 layers x (K + V) x 2 KV heads x 64 x f32.
TINY_TOKEN_BYTES = 4 * 2 * 2 * 64 * 4


def disk_args(save_dir, n_tokens):
    # Room in host memory for one conversation of about n_tokens, so a second one evicts it.
    ram_gib = 1.5 * n_tokens * (TINY_TOKEN_BYTES + 4) / (1 << 30)
    return ["--batched-session", "1", "--cache-ram", f"{ram_gib:.9f}", "--cache-disk", "0.5", "--slot-save-path", save_dir]


def test_disk(plain_srv, npm_dir, build_dir):
    save_dir = os.path.join(work_dir(build_dir), "disk-slots")
    shutil.rmtree(save_dir, ignore_errors=True)
    os.makedirs(save_dir)
    a, b, c = conversation(11, 500), conversation(12, 500), conversation(13, 500)
    first = run_plan(plain_srv, npm_dir, [[chat(a)]], "disk-ref-a")[0]
    a2 = a + [{"role": "assistant", "content": first["text"]}, {"role": "user", "content": "And then?"}]
    greedy, seeded = chat(a2), chat(a2, temperature=0.9, seed=23)
    ref = run_plan(plain_srv, npm_dir, [[greedy], [seeded]], "disk-ref")
    args = disk_args(save_dir, first["usage"]["prompt_tokens"] + 12)

    srv = start(build_dir, args, "disk")
    try:
        # One slot: B takes A's slot (A to host memory), C takes B's (B to host memory, A to disk).
        got = run_plan(srv, npm_dir, [[chat(a)], [chat(b)], [chat(c)], [greedy], [chat(b)], [chat(c)], [seeded]], "disk-run")
        same_output(got[0], first, "A's first turn")
        for reply, want, how in [(got[3], ref[0], "greedy"), (got[6], ref[1], "seeded")]:
            n_prompt, n_cached = reply["usage"]["prompt_tokens"], cached(reply)
            check(n_cached >= 0.9 * n_prompt, f"A's return from disk ({how}) reports {n_cached} of {n_prompt} prompt tokens cached")
            same_output(reply, want, f"A's return from disk ({how}) against a server without the cache")
        hits, restored = metric(srv, "tandem_prompt_cache_disk_hits_total"), metric(srv, "tandem_prompt_cache_disk_tokens_restored_total")
        check(hits >= 4, f"tandem_prompt_cache_disk_hits_total counted A's returns and B's and C's ({hits})")
        check(restored >= 0.9 * (got[3]["usage"]["prompt_tokens"] + got[6]["usage"]["prompt_tokens"]),
              f"tandem_prompt_cache_disk_tokens_restored_total counts the tokens read back ({restored})")
        check(metric(srv, "tandem_prompt_cache_hits_total") == 0, "nothing came from host memory: each return found it on disk")
        disk_bytes = metric(srv, "tandem_prompt_cache_disk_bytes")
        check(0 < disk_bytes <= 0.5 * (1 << 30), f"tandem_prompt_cache_disk_bytes shows the files ({disk_bytes})")
    finally:
        srv.stop()
    folder = os.path.join(save_dir, "prompt-cache")
    names = sorted(os.listdir(folder))
    check(len(names) >= 2 and all(n.endswith(".bin") for n in names), f"the files live in DIR/prompt-cache: {names}")
    check(sum(os.path.getsize(os.path.join(folder, n)) for n in names) == disk_bytes,
          "tandem_prompt_cache_disk_bytes is what the files take")

    # A later run of the same model indexes them; damaged and foreign files are skipped with a line.
    good = open(os.path.join(folder, names[0]), "rb").read()
    magic, version, n_tokens, model_hash, token_bytes, kv_type = HEADER.unpack_from(good)
    check(token_bytes == TINY_TOKEN_BYTES, f"the tiny model's KV takes {token_bytes} bytes a token")
    bad = {"truncated.bin": good[:-100], "junk.bin": b"junk" * 100,
           "foreign.bin": HEADER.pack(magic, version, n_tokens, model_hash ^ 1, token_bytes, kv_type) + good[HEADER.size:]}
    for name, data in bad.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    srv = start(build_dir, args, "disk-again")
    try:
        log = srv.log_tail(400)
        for name, why in [("truncated.bin", "truncated"), ("junk.bin", "not a tandem slot file"), ("foreign.bin", "another model")]:
            check(re.search(rf"skipping {re.escape(name)} .*{why}", log) is not None, f"{name} is skipped with a log line saying '{why}'")
        check(f"reused {len(names)} files" in log and "skipped 3" in log, "the earlier run's files are indexed at start")
        again = run_plan(srv, npm_dir, [[greedy]], "disk-again")[0]
        check(cached(again) >= 0.9 * again["usage"]["prompt_tokens"],
              f"after a restart A comes back from disk ({cached(again)} of {again['usage']['prompt_tokens']} cached)")
        same_output(again, ref[0], "A after a restart against a server without the cache")
        check(metric(srv, "tandem_prompt_cache_disk_hits_total") == 1, "the restart's first request was a disk hit")
    finally:
        srv.stop()
    for name in bad:
        check(os.path.exists(os.path.join(folder, name)), f"{name} is left as it was")


def test_disk_refused(build_dir):
    model = h.tiny_model(build_dir)
    for args, want in [(["--cache-disk", "1"], "--cache-disk 1 needs --slot-save-path DIR"),
                       (["--cache-disk", "1", "--cache-ram", "0", "--slot-save-path", work_dir(build_dir)],
                        "give --cache-ram GiB too")]:
        out = subprocess.run([os.path.join(build_dir, "tandem-server"), "-m", model, "--port", "0"] + args,
                             capture_output=True, text=True, timeout=120)
        check(out.returncode == 2 and want in out.stdout + out.stderr,
              f"{' '.join(args)}: exit 2 saying '{want}' ({out.returncode}: {(out.stdout + out.stderr)[-300:]})")


# ---- 5. the settings' layers ----

def test_settings(cached_srv, plain_srv, save_dir):
    check("prompt cache: 0.25 GiB of host memory" in cached_srv.log_tail(200), "cache-ram from the --config file")
    check("prompt cache: off" in plain_srv.log_tail(200), "--cache-ram 0 turns the cache off")
    status, r = slot_post(cached_srv, 0, "save", {"filename": "from-env.bin"})
    check(status == 200 and os.path.exists(os.path.join(save_dir, "from-env.bin")),
          f"TANDEM_SLOT_SAVE_PATH enables slot files ({status}: {r})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--npm-dir", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    a.build_dir, a.npm_dir = os.path.abspath(a.build_dir), os.path.abspath(a.npm_dir)
    if not os.path.isdir(os.path.join(a.npm_dir, "node_modules", "openai")):
        print(f"the openai npm package is not installed under {a.npm_dir}")
        return 1
    d = work_dir(a.build_dir)
    save_dir = os.path.join(d, "slots")
    shutil.rmtree(save_dir, ignore_errors=True)
    os.makedirs(save_dir)
    conf = os.path.join(d, "cache.toml")
    with open(conf, "w") as f:
        f.write("cache-ram = 0.25\nbatched-session = 2\n")
    servers = []
    try:
        plain = start(a.build_dir, ["--batched-session", "2", "--cache-ram", "0"], "plain")
        servers.append(plain)
        cached_srv = start(a.build_dir, ["--config", conf], "cache", env={"TANDEM_SLOT_SAVE_PATH": save_dir})
        servers.append(cached_srv)
        files_srv = start(a.build_dir, ["--batched-session", "1", "--cache-ram", "0", "--slot-save-path", save_dir], "files")
        servers.append(files_srv)
        tests = {
            "eviction": lambda: test_eviction(cached_srv, plain, a.npm_dir),
            "shared_prefix": lambda: test_shared_prefix(cached_srv, plain, a.npm_dir),
            "slot_files": lambda: test_slot_files(files_srv, plain, a.npm_dir, save_dir),
            "settings": lambda: test_settings(cached_srv, plain, save_dir),
            "disk": lambda: test_disk(plain, a.npm_dir, a.build_dir),
            "disk_refused": lambda: test_disk_refused(a.build_dir),
        }
        for name, fn in tests.items():
            if a.only and name not in a.only.split(","):
                continue
            print(f"[{name}]", flush=True)
            try:
                fn()
            except Exception:  # noqa: BLE001 - report and go on with the other parts
                check(False, f"{name} raised:\n{traceback.format_exc()}")
    finally:
        for s in servers:
            s.stop()
    print(f"sessions_server: {len(failures)} failed" if failures else "sessions_server: all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
