#!/usr/bin/env python3
# tests/server/ops_server.py - running tandem-server for a team, against the real server (CPU
# engine, tiny synth model, loopback): /v1/models/{id}, /tokenize and /detokenize in
# llama-server's shapes, /slots?fail_on_no_slot; key files with named keys and several --api-key
# flags; the per-request log line in text and JSON; the latency histograms and per-key counters
# through prometheus_client's parser; settings from TANDEM_* variables and a TOML --config file,
# their precedence and their errors; llama-server's short flags; the routing profile read while serving
# (GET /expert-traffic).
# Usage: ops_server.py --build-dir B [--only NAME,...]
import argparse
import json
import os
import subprocess
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness as h  # noqa: E402

failures = []
CHAT = "/v1/chat/completions"


def check(cond, what):
    print(f"  {'ok' if cond else 'FAIL'}: {what}", flush=True)
    if not cond:
        failures.append(what)
    return cond


def chat(srv, n=8, headers=None, stream=False):
    body = {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": n, "temperature": 0}
    if stream:
        body["stream"] = True
        got = []
        h.stream_events(srv.port, CHAT, body, lambda d, t: got.append(d), headers=headers)
        return 200, got
    return srv.post_json(CHAT, body, headers)


def work_dir(build_dir):
    d = os.path.join(build_dir, "server-tests", "ops")
    os.makedirs(d, exist_ok=True)
    return d


def start_fails(build_dir, args, env=None, name="ops-refused.log"):
    """Runs the server with arguments it must refuse; returns (exit code, its log)."""
    srv = h.server(build_dir, args, name, env=env)
    try:
        code = srv.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        srv.stop()
        return None, srv.log_tail(40)
    srv.log.close()
    with open(srv.log_path) as f:
        return code, f.read()


# ---- 1. API conveniences ----

def test_api(build_dir):
    # A context long enough that a stream holds the only slot for seconds on the tiny model.
    with h.running(build_dir, ["--ctx", "16384", "--batched-session", "1", "--threads", "1"], "ops-api.log") as srv:
        status, m = srv.get_json("/v1/models/tiny.gguf")
        check(status == 200 and m["id"] == "tiny.gguf" and m["object"] == "model", "/v1/models/{id} names the model")
        status, e = srv.get_json("/v1/models/gpt-9")
        check(status == 404 and "gpt-9" in e["error"]["message"], "/v1/models/{unknown} is 404")

        status, t = srv.post_json("/tokenize", {"content": "Hello world"})
        ids = t["tokens"]
        check(status == 200 and ids and all(isinstance(i, int) for i in ids), "/tokenize gives ids")
        status, tp = srv.post_json("/tokenize", {"content": "Hello world", "with_pieces": True})
        check(status == 200 and [p["id"] for p in tp["tokens"]] == ids, "with_pieces keeps the ids")
        joined = "".join(p["piece"] if isinstance(p["piece"], str) else bytes(p["piece"]).decode("latin-1")
                         for p in tp["tokens"])
        check(joined == "Hello world", "the pieces spell the text")
        status, d = srv.post_json("/detokenize", {"tokens": ids})
        check(status == 200 and d["content"] == "Hello world", "/detokenize inverts /tokenize")
        status, e = srv.post_json("/tokenize", {"content": "x", "add_bos": True})
        check(status == 400 and "add_bos" in e["error"]["message"], "an unknown /tokenize field is 400")
        status, e = srv.post_json("/detokenize", {"tokens": [10 ** 9]})
        check(status == 400, "an out-of-range token id is 400")

        status, _ = srv.get_json("/slots?fail_on_no_slot=1")
        check(status == 200, "/slots?fail_on_no_slot=1 is 200 while a slot is free")
        status, e = srv.get_json("/slots?verbose=1")
        check(status == 400 and "verbose" in e["error"]["message"], "an unknown /slots parameter is 400")
        busy = threading.Event()
        done = threading.Event()

        def long_stream():
            body = {"messages": [{"role": "user", "content": "Go on"}], "max_tokens": 16000, "stream": True,
                    "temperature": 0}
            h.stream_events(srv.port, CHAT, body, lambda d, t: (busy.set(), not done.is_set())[1])

        th = threading.Thread(target=long_stream)
        th.start()
        deadline = time.time() + 60
        while busy.wait(60) and srv.slots_busy() == 0 and time.time() < deadline:
            time.sleep(0.01)
        check(srv.slots_busy() == 1, "a stream holds the only slot")
        status, e = srv.get_json("/slots?fail_on_no_slot=1")
        check(status == 503 and "no slot" in e["error"]["message"], "fail_on_no_slot=1 is 503 while every slot is busy")
        done.set()
        th.join(60)


# ---- 2. keys, 3. log lines, 4. metrics ----

def write_key_file(path):
    with open(path, "w") as f:
        f.write("# the team's keys\n\nalice: sk-alice-1\nbob:sk-bob-2\n   \nsk-bare-3\n")


def test_keys_logs_metrics(build_dir):
    key_file = os.path.join(work_dir(build_dir), "keys")
    write_key_file(key_file)
    args = ["--ctx", "512", "--batched-session", "2", "--threads", "1", "--api-key-file", key_file,
            "--api-key", "sk-flag-a", "--api-key", "sk-flag-b"]
    srv = h.server(build_dir, args, "ops-keys.log")
    try:
        srv.wait_ready()
        made = 0
        for key, name in [("sk-alice-1", "alice"), ("sk-bob-2", "bob"), ("sk-bare-3", "keys:6"),
                          ("sk-flag-a", "flag-1"), ("sk-flag-b", "flag-2")]:
            status, _ = chat(srv, headers={"Authorization": "Bearer " + key})
            made += 1
            check(status == 200, f"key {name} is accepted")
        status, _ = chat(srv, headers={"Authorization": "Bearer sk-alice-"})
        check(status == 401, "a prefix of a key is refused")
        status, _ = srv.post_json("/v1/messages", {"model": "tiny.gguf", "max_tokens": 4,
                                                   "messages": [{"role": "user", "content": "Hi"}]},
                                  {"x-api-key": "sk-bob-2"})
        check(status == 200, "x-api-key with a named key on Anthropic's route")
        made += 1
        status, _ = chat(srv, n=6, headers={"Authorization": "Bearer sk-alice-1"}, stream=True)
        made += 1
        check_metrics(srv, made, {"Authorization": "Bearer sk-alice-1"})
    finally:
        srv.stop()
    with open(srv.log_path) as f:
        lines = [ln for ln in f if " request " in ln and "route=" + CHAT in ln and "status=200" in ln]
    check(len(lines) == 6, f"one log line per chat request ({len(lines)} of 6)")
    alice = [ln for ln in lines if "key=alice" in ln]
    check(len(alice) == 2, "the key's name is in its requests' lines")
    check(not any("sk-alice-1" in ln for ln in lines), "no key in the log")
    need = ["id=req-", "status=200", "model=tiny.gguf", "prompt_tokens=", "cached_tokens=", "generated_tokens=",
            "ttft_ms=", "tok_s=", "finish=", "client=127.0.0.1:"]
    check(all(all(n in ln for n in need) for ln in lines), "each line carries the request's fields: " + (lines[0].strip() if lines else ""))
    check(any("status=401" in ln for ln in open(srv.log_path)), "a refused request has its line too")


def check_metrics(srv, made, headers):
    from prometheus_client.parser import text_string_to_metric_families
    status, _, body = srv.request("GET", "/metrics", headers=headers)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    for name in ["tandem_time_to_first_token_seconds", "tandem_inter_token_latency_seconds",
                 "tandem_request_duration_seconds", "tandem_queue_wait_seconds", "tandem_prompt_tokens"]:
        fam = families.get(name)
        if not check(fam is not None and fam.type == "histogram", f"{name} is a histogram"):
            continue
        buckets = [(s.labels["le"], s.value) for s in fam.samples if s.name.endswith("_bucket")]
        counts = [v for _, v in buckets]
        check(counts == sorted(counts) and buckets[-1][0] == "+Inf", f"{name}: buckets non-decreasing up to +Inf")
        count = next(s.value for s in fam.samples if s.name == name + "_count")
        check(count == buckets[-1][1], f"{name}: _count equals the +Inf bucket")
        if name != "tandem_inter_token_latency_seconds":
            check(count == made, f"{name}: _count {count} equals the {made} generation requests made")
    itl = next(s.value for s in families["tandem_inter_token_latency_seconds"].samples if s.name.endswith("_count"))
    check(itl > 0, "inter-token gaps were observed")
    codes = {s.labels["code"]: s.value for s in families["tandem_http_responses"].samples}
    check(codes.get("401", 0) >= 1 and codes.get("200", 0) >= made, f"responses by status code: {codes}")
    per_key = {s.labels["key"]: s.value for s in families["tandem_key_requests"].samples}
    check(per_key.get("alice", 0) >= 2 and per_key.get("bob") == 2, f"requests by key name: {per_key}")
    gen = {s.labels["key"]: s.value for s in families["tandem_key_generated_tokens"].samples}
    check(gen.get("alice", 0) > 0, "generated tokens by key name")
    check("tandem_slots_in_use" in families and "llamacpp:requests_processing" in families, "the gauges are kept")


def test_json_log(build_dir):
    srv = h.server(build_dir, ["--ctx", "512", "--batched-session", "1", "--threads", "1", "--log-format", "json"],
                   "ops-json.log")
    try:
        srv.wait_ready()
        chat(srv)
    finally:
        srv.stop()
    with open(srv.log_path) as f:
        lines = [ln for ln in f if ln.strip()]
    parsed = []
    for ln in lines:
        try:
            parsed.append(json.loads(ln))
        except ValueError:
            check(False, f"a log line that is not JSON: {ln.strip()}")
    check(len(parsed) == len(lines) and all({"time", "level", "msg"} <= set(p) for p in parsed),
          f"every one of {len(lines)} lines is a JSON object with time, level and msg")
    req = [p for p in parsed if p["msg"] == "request" and p.get("route") == CHAT]
    check(len(req) == 1 and req[0]["status"] == 200 and isinstance(req[0]["generated_tokens"], int)
          and req[0]["finish"] in ("stop", "length"), f"the request line's fields are typed: {req}")


def test_bad_key_files(build_dir):
    d = work_dir(build_dir)
    for name, text, want in [("keys-space", "alice:sk a\n", ":1:"), ("keys-name", "# x\nal ice:sk-1\n", ":2:"),
                             ("keys-dup", "a:sk-1\nb:sk-1\n", ":2:"), ("keys-empty", "# none\n\n", "no key")]:
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(text)
        code, log = start_fails(build_dir, ["--api-key-file", path], name=f"ops-{name}.log")
        check(code == 2 and (path + want in log or want in log), f"{name}: refused at start, exit 2, naming {path}{want}")


# ---- 5. configuration ----

def props(srv):
    return srv.get_json("/props")[1]


def test_config(build_dir):
    d = work_dir(build_dir)
    conf = os.path.join(d, "good.toml")
    with open(conf, "w") as f:
        f.write('# a team server\nctx = 640\nbatched-session = 3\nalias = "from-file"\nthreads = 1\n'
                'cors-origin = ["https://a.example", "https://b.example"]\ntensor-parallel = false\n')
    srv = h.server(build_dir, ["--config", conf, "--alias", "from-flag"], "ops-config.log",
                   env={"TANDEM_BATCHED_SESSION": "2"})
    try:
        srv.wait_ready()
        p = props(srv)
        check(p["default_generation_settings"]["n_ctx"] == 640, "ctx from the file")
        check(p["total_slots"] == 2, "the environment wins over the file")
        check(p["model_alias"] == "from-flag", "a flag wins over the file")
    finally:
        srv.stop()
    srv = h.server(build_dir, ["--batched-session", "1", "--threads", "1"], "ops-env.log",
                   env={"TANDEM_BATCHED_SESSION": "2", "TANDEM_CTX": "768"})
    try:
        srv.wait_ready()
        p = props(srv)
        check(p["total_slots"] == 1 and p["default_generation_settings"]["n_ctx"] == 768,
              "TANDEM_CTX applies; --batched-session wins over TANDEM_BATCHED_SESSION")
    finally:
        srv.stop()
    for name, text, want in [("bad-syntax", "ctx = 640\nbatched-session = = 3\n", "bad-syntax.toml:2:"),
                             ("unknown", "ctx = 640\n\ncontext-size = 9\n", "bad-unknown.toml:3: context-size: unknown"),
                             ("range", "ctx = 5\n", "bad-range.toml:1: ctx"),
                             ("table", "[server]\nctx = 640\n", "bad-table.toml:1: server")]:
        path = os.path.join(d, f"bad-{name}.toml")
        with open(path, "w") as f:
            f.write(text)
        code, log = start_fails(build_dir, ["--config", path], name=f"ops-conf-{name}.log")
        check(code == 2 and want in log, f"config {name}: exit 2 naming '{want}' ({log.strip().splitlines()[-1:]})")
    code, log = start_fails(build_dir, ["--threads", "1"], env={"TANDEM_CTX": "lots"}, name="ops-env-bad.log")
    check(code == 2 and "ctx" in log.lower(), "a malformed TANDEM_CTX is refused")


def test_short_flags(build_dir):
    srv = h.server(build_dir, ["-c", "384", "-np", "2", "-t", "1", "-ngl", "99"], "ops-short.log")
    try:
        srv.wait_ready()
        p = props(srv)
        check(p["default_generation_settings"]["n_ctx"] == 384 and p["total_slots"] == 2, "-c and -np")
    finally:
        srv.stop()
    check("-ngl" in open(srv.log_path).read(), "-ngl is noted in the log")
    # -a and -m spelled as llama-server users type them, without the harness's names.
    port = h.free_port()
    proc = subprocess.Popen([os.path.join(build_dir, "tandem-server"), "-m", h.tiny_model(build_dir), "-a", "team-model",
                             "--port", str(port), "--parallel", "1", "-c", "256", "-t", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        srv.port = port
        deadline = time.time() + 60
        ok = False
        while time.time() < deadline and not ok:
            try:
                ok = srv.request("GET", "/health", timeout=2)[0] == 200
            except OSError:
                time.sleep(0.1)
        status, m = srv.get_json("/v1/models/team-model")
        check(status == 200 and m["id"] == "team-model", "-a names the model")
    finally:
        proc.terminate()
        proc.wait(30)


# ---- 7. the routing profile while serving ----

def test_expert_traffic(build_dir):
    out = os.path.join(work_dir(build_dir), "traffic.json")
    if os.path.exists(out):
        os.remove(out)
    with h.running(build_dir, ["--expert-traffic-out", out], "ops-traffic.log") as srv:
        chat(srv, 4)
        status, first = srv.get_json("/expert-traffic")
        ok = status == 200 and first["n_layer"] == len(first["counts"]) > 0 and \
            all(len(row) == first["n_expert"] for row in first["counts"])
        check(ok, "GET /expert-traffic gives the profile in the file's shape")
        total = sum(map(sum, first["counts"])) if ok else 0
        check(total > 0, "the profile counts the rows routed so far")
        chat(srv, 4)
        status, second = srv.get_json("/expert-traffic")
        check(status == 200 and sum(map(sum, second["counts"])) > total, "a later GET counts the newer rows too")
    with open(out) as f:
        saved = json.load(f)
    check(sum(map(sum, saved["counts"])) >= sum(map(sum, second["counts"])), "the file written at shutdown holds at least as much")
    with h.running(build_dir, [], "ops-no-traffic.log") as srv:
        status, e = srv.get_json("/expert-traffic")
        check(status == 404 and "--expert-traffic-out" in e["error"]["message"], "without recording, /expert-traffic is 404 saying how to start it")


TESTS = {
    "api": test_api,
    "keys_logs_metrics": test_keys_logs_metrics,
    "json_log": test_json_log,
    "bad_key_files": test_bad_key_files,
    "config": test_config,
    "short_flags": test_short_flags,
    "expert_traffic": test_expert_traffic,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    for name, fn in TESTS.items():
        if a.only and name not in a.only.split(","):
            continue
        print(f"[{name}]", flush=True)
        try:
            fn(a.build_dir)
        except Exception:  # noqa: BLE001 - report and go on with the other parts
            check(False, f"{name} raised:\n{traceback.format_exc()}")
    print(f"ops_server: {len(failures)} failed" if failures else "ops_server: all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
