#!/usr/bin/env python3
# tests/server/e2e_server.py - end-to-end tests of the real tandem-server (CPU engine, tiny synth
# model) over loopback HTTP: curl, malformed input, auth, cancellation on disconnect (streaming
# and queued), greedy batch invariance (alone vs among 15 others), a 64-client load test with no
# slot leaked, /metrics through prometheus_client's strict parser, the official npm SDKs,
# /health 503 while the model loads, and SIGTERM exit 0.
# Usage: e2e_server.py --build-dir B [--only NAME] [--npm-dir D]
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness as h  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = "tiny.gguf"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"  FAIL: {what}", flush=True)
    return cond


def completion(srv, prompt, n=8, **extra):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": n, "temperature": 0}
    body.update(extra)
    return srv.post_json("/v1/completions", body)


def working_request(srv, what):
    status, r = completion(srv, "after an error", 2)
    check(status == 200 and r["choices"][0]["finish_reason"] in ("stop", "length"), f"a request works after {what}")


def test_curl_and_basics(srv):
    out = subprocess.run(["curl", "-sS", "--max-time", "120", f"http://127.0.0.1:{srv.port}/v1/chat/completions",
                          "-H", "Content-Type: application/json", "-d",
                          json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                                      "max_tokens": 6, "temperature": 0})],
                         capture_output=True, timeout=150)
    r = json.loads(out.stdout)
    check(r["object"] == "chat.completion" and r["usage"]["completion_tokens"] >= 1, "curl chat completion")
    check("timings" in r and r["timings"]["prompt_n"] + r["timings"]["cache_n"] == r["usage"]["prompt_tokens"],
          "timings object matches usage")
    out = subprocess.run(["curl", "-sSN", "--max-time", "120", f"http://127.0.0.1:{srv.port}/v1/chat/completions",
                          "-H", "Content-Type: application/json", "-d",
                          json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                                      "max_tokens": 6, "temperature": 0, "stream": True})],
                         capture_output=True, timeout=150)
    lines = [ln[6:] for ln in out.stdout.decode("utf-8", "replace").splitlines() if ln.startswith("data: ")]
    check(lines and lines[-1] == "[DONE]", "curl stream ends with [DONE]")
    text = "".join(json.loads(ln)["choices"][0]["delta"].get("content", "") for ln in lines[:-1]
                   if json.loads(ln)["choices"])
    check(text == r["choices"][0]["message"]["content"], "greedy streamed text equals the non-streamed text")
    # The same prompt again reuses the slot's cached prefix (all but the last prompt token).
    final = [json.loads(ln) for ln in lines[:-1] if "timings" in json.loads(ln)]
    check(final and final[-1]["timings"]["cache_n"] == r["usage"]["prompt_tokens"] - 1,
          f"a repeated prompt reuses its cached prefix ({final[-1]['timings'] if final else None})")
    # A body over 1 KiB makes curl send "Expect: 100-continue"; the reply must not wait for curl's
    # one-second fallback, but no timing is asserted: only that the request succeeds.
    out = subprocess.run(["curl", "-sS", "--max-time", "120", f"http://127.0.0.1:{srv.port}/v1/completions",
                          "-H", "Content-Type: application/json", "-w", "\n%{http_code}", "-d",
                          json.dumps({"model": MODEL, "prompt": "x " * 700, "max_tokens": 2, "temperature": 0})],
                         capture_output=True, timeout=150)
    check(out.stdout.decode().rstrip().endswith("200"), f"curl with a large body (Expect: 100-continue): {out.stdout[-80:]!r}")
    status, models = srv.get_json("/v1/models")
    check(status == 200 and models["data"][0]["id"] == MODEL, "/v1/models lists the model")
    status, props = srv.get_json("/props")
    check(status == 200 and props["total_slots"] >= 1, "/props")
    # --kv-type auto: f16 on the CUDA backend, f32 on the CPU one (the layout line names the backend).
    kv_want = "f16" if "| cuda " in props.get("layout", "") else "f32"
    check(props.get("kv_type") == kv_want and models["data"][0]["meta"].get("kv_type") == kv_want,
          f"/props and /v1/models report the KV cache type ({props.get('kv_type')}, want {kv_want})")
    status, _, body = srv.request("GET", "/health")
    check(status == 200 and json.loads(body) == {"status": "ok"}, "/health ok")


def test_malformed(srv, ctx):
    cases = [
        ("bad JSON", "/v1/chat/completions", b"{not json", 400, "openai"),
        ("wrong type", "/v1/chat/completions", {"messages": "hi"}, 400, "openai"),
        ("wrong max_tokens type", "/v1/completions", {"prompt": "x", "max_tokens": "9"}, 400, "openai"),
        ("unknown model", "/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404, "openai"),
        ("prompt longer than the context", "/v1/completions", {"prompt": "lorem ipsum " * (ctx * 2)}, 413, "openai"),
        ("anthropic missing max_tokens", "/v1/messages", {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}, 400, "anthropic"),
        ("anthropic bad JSON", "/v1/messages", b"[", 400, "anthropic"),
        ("unknown route", "/v1/nothing", {}, 404, "openai"),
    ]
    for what, path, body, want, shape in cases:
        status, _, data = srv.request("POST", path, body)
        ok = check(status == want, f"{what}: status {status}, want {want}")
        if ok:
            j = json.loads(data)
            if shape == "openai":
                check(isinstance(j.get("error", {}).get("message"), str), f"{what}: OpenAI error shape")
            else:
                check(j.get("type") == "error" and "type" in j.get("error", {}), f"{what}: Anthropic error shape")
        working_request(srv, what)
    # A body over --body-limit (64 KiB in this server).
    status, _, data = srv.request("POST", "/v1/messages", b'{"x":"' + b"a" * 200000 + b'"}')
    check(status == 413 and json.loads(data)["error"]["type"] == "request_too_large", f"oversized body: {status}")
    working_request(srv, "an oversized body")
    # Garbage that is not HTTP.
    with socket.create_connection((h.HOST, srv.port), timeout=10) as s:
        s.sendall(b"\x16\x03\x01 definitely not http\r\n\r\n")
        reply = s.recv(200)
    check(reply.startswith(b"HTTP/1.1 400"), f"non-HTTP bytes get a 400: {reply[:40]!r}")
    working_request(srv, "non-HTTP bytes")


def test_cancel_streaming(srv):
    got = []

    def on_data(d, t):
        got.append(d)
        return len(got) < 3  # disconnect after a few chunks
    h.stream_events(srv.port, "/v1/completions", {"model": MODEL, "prompt": "cancel me", "max_tokens": 400,
                                                   "temperature": 0, "stream": True}, on_data)
    check(srv.wait_idle(20), "a client that disconnects mid-stream frees its slot")


def test_cancel_queued(build_dir):
    # One slot: a streaming request holds it, a second waits in the queue, then disconnects.
    with h.running(build_dir, ["--ctx", "1024", "--batched-session", "1", "--max-queue", "1"], "e2e-queue.log") as srv:
        holder_started = threading.Event()
        release = threading.Event()

        def hold():
            def on_data(d, t):
                holder_started.set()
                return not release.is_set()
            h.stream_events(srv.port, "/v1/completions", {"model": MODEL, "prompt": "hold", "max_tokens": 900,
                                                           "temperature": 0, "stream": True}, on_data)
        t = threading.Thread(target=hold)
        t.start()
        holder_started.wait(60)
        body = json.dumps({"model": MODEL, "prompt": "queued", "max_tokens": 4}).encode()
        s = socket.create_connection((h.HOST, srv.port), timeout=10)
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {h.HOST}:{srv.port}\r\nContent-Type: application/json\r\n".encode() +
                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

        def deferred():
            _, _, m = srv.request("GET", "/metrics")
            return [float(ln.split()[1]) for ln in m.decode().splitlines() if ln.startswith("llamacpp:requests_deferred ")][0]
        deadline = time.time() + 10
        while deferred() < 1 and time.time() < deadline:
            time.sleep(0.05)
        check(deferred() == 1, "the second request is queued")
        # The queue (--max-queue 1) is full now: 503 with Retry-After, in each API's shape.
        status, hdrs, data = srv.request("POST", "/v1/completions", {"prompt": "third", "max_tokens": 2})
        check(status == 503 and "Retry-After" in hdrs and "error" in json.loads(data), f"a full queue answers 503 + Retry-After ({status})")
        status, _, data = srv.request("POST", "/v1/messages", {"model": MODEL, "max_tokens": 2,
                                                               "messages": [{"role": "user", "content": "x"}]})
        check(status == 503 and json.loads(data)["error"]["type"] == "overloaded_error", "a full queue on /v1/messages: overloaded_error")
        s.close()
        deadline = time.time() + 10
        while deferred() > 0 and time.time() < deadline:
            time.sleep(0.05)
        check(deferred() == 0, "a queued request whose client left is dropped")
        release.set()
        t.join(60)
        check(srv.wait_idle(20), "the holder's slot is freed after it disconnects")
        working_request(srv, "cancellations")


def test_batch_invariance(srv):
    prompts = [f"invariance prompt {i}: " + "abc " * (i % 5) for i in range(16)]
    alone = []
    # 48 tokens each: long enough that all 16 requests are in flight together even when the
    # threads' requests arrive a few tens of ms apart (the check below needs them to overlap).
    for p in prompts:
        status, r = completion(srv, p, 48)
        alone.append(r["choices"][0]["text"] if status == 200 else None)
    together = [None] * 16

    def run(i):
        status, r = completion(srv, prompts[i], 48)
        together[i] = r["choices"][0]["text"] if status == 200 else None
    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for i in range(16):
        check(alone[i] is not None and alone[i] == together[i], f"greedy output {i} identical alone and among 15 others")
    m = srv.request("GET", "/metrics")[2].decode()
    rows = [float(ln.split()[1]) for ln in m.splitlines() if ln.startswith("tandem_max_rows_per_decode_step ")]
    check(rows and rows[0] >= 8, f"concurrent requests decoded together (max rows per step {rows})")


def test_load(srv):
    prompts = [f"load prompt {k}" for k in range(4)]
    expected = {}
    for p in prompts:
        status, r = completion(srv, p, 6)
        expected[p] = r["choices"][0]["text"]
    results = [None] * 64

    def client(i):
        p = prompts[i % 4]
        try:
            status, r = completion(srv, p, 6)
            results[i] = status == 200 and r["choices"][0]["text"] == expected[p]
        except Exception as e:  # noqa: BLE001 - any failure is a wrong answer
            results[i] = f"{type(e).__name__}: {e}"
    threads = [threading.Thread(target=client, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    bad = [(i, r) for i, r in enumerate(results) if r is not True]
    check(not bad, f"64 concurrent clients answered correctly (bad: {bad[:5]})")
    check(srv.wait_idle(20), "no slot leaked after the load test")


def test_metrics(srv):
    from prometheus_client.parser import text_string_to_metric_families
    status, headers, body = srv.request("GET", "/metrics")
    check(status == 200 and headers.get("Content-Type", "").startswith("text/plain"), "/metrics content type")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    want = {
        "llamacpp:prompt_tokens": "counter", "llamacpp:prompt_seconds": "counter",
        "llamacpp:tokens_predicted": "counter", "llamacpp:tokens_predicted_seconds": "counter",
        "llamacpp:n_decode": "counter", "llamacpp:prompt_tokens_seconds": "gauge",
        "llamacpp:predicted_tokens_seconds": "gauge", "llamacpp:requests_processing": "gauge",
        "llamacpp:requests_deferred": "gauge", "tandem_slots_in_use": "gauge", "tandem_queue_depth": "gauge",
        "tandem_rows_per_decode_step": "gauge", "tandem_prefill_yields": "counter", "tandem_kv_tokens_cached": "gauge",
        "tandem_prefill_budget_tokens": "gauge", "tandem_draft_tokens": "counter", "tandem_draft_accepted": "counter",
    }
    for name, typ in want.items():
        check(name in families and families[name].type == typ, f"metric {name} ({typ}) present")
    pt = families["llamacpp:prompt_tokens"].samples[0].value
    check(pt > 0, f"prompt tokens counted ({pt})")


def test_draft(build_dir):
    # --draft feeds prompt-lookup guesses as extra decode rows and keeps only what the sampler draws
    # anyway: greedy and seeded outputs, streamed or not, equal those of a server without drafts.
    prompts = ["one two three one two three one two three one two", "abc abc abc abc abc", "draft check: x y z x y"]
    def outputs(args, log):
        out = []
        with h.running(build_dir, ["--ctx", "512", "--batched-session", "2"] + args, log) as srv:
            for i, p in enumerate(prompts):
                for extra in ({}, {"temperature": 0.7, "seed": 11 + i}):
                    status, r = completion(srv, p, 40, **extra)
                    out.append(r["choices"][0]["text"] if status == 200 else None)
            body = {"model": MODEL, "prompt": prompts[0], "max_tokens": 40, "temperature": 0, "stream": True}
            status, _, data = srv.request("POST", "/v1/completions", body)
            chunks = [ln[6:] for ln in data.decode().splitlines() if ln.startswith("data: ") and ln != "data: [DONE]"]
            out.append("".join(c["text"] for ch in chunks for c in json.loads(ch)["choices"]) if status == 200 else None)
            status, _, body = srv.request("GET", "/props")
            props = json.loads(body) if status == 200 else {}
            metrics = srv.request("GET", "/metrics")[2].decode()
        return out, props, metrics
    plain, _, _ = outputs([], "e2e-draft-off.log")
    drafted, props, metrics = outputs(["--draft", "4"], "e2e-draft-on.log")
    check(None not in plain and plain == drafted, f"outputs with --draft 4 equal those without ({plain} vs {drafted})")
    check(props.get("draft") == 4, f"/props reports draft 4 ({props.get('draft')})")
    fed = [float(ln.split()[1]) for ln in metrics.splitlines() if ln.startswith("tandem_draft_tokens_total ")]
    kept = [float(ln.split()[1]) for ln in metrics.splitlines() if ln.startswith("tandem_draft_accepted_total ")]
    print(f"  drafts fed {fed}, kept {kept}", flush=True)
    check(fed and fed[0] > 0 and kept and kept[0] > 0, f"the repetitive prompts got drafts fed and kept ({fed}, {kept})")
    out = subprocess.run([os.path.join(build_dir, "tandem-server"), "-m", "x.gguf", "--draft", "17"], capture_output=True, text=True)
    check(out.returncode != 0 and "--draft" in out.stderr, f"--draft 17 refused ({out.returncode}: {out.stderr.strip()[:200]})")


def test_sdks(srv, npm_dir):
    if not npm_dir or not os.path.isdir(os.path.join(npm_dir, "node_modules", "openai")):
        check(False, f"npm SDKs installed under {npm_dir}")
        return
    env = dict(os.environ, NODE_PATH=os.path.join(npm_dir, "node_modules"), TANDEM_URL=f"http://127.0.0.1:{srv.port}",
               TANDEM_MODEL=MODEL, TANDEM_KEY="sdk-key")
    out = subprocess.run(["node", os.path.join(HERE, "sdk_clients.cjs")], capture_output=True, env=env, timeout=300,
                         cwd=npm_dir)
    print(out.stdout.decode()[-3000:], out.stderr.decode()[-3000:])
    check(out.returncode == 0, "openai and @anthropic-ai/sdk clients")


def test_auth(build_dir, npm_dir):
    key = "sdk-key"
    with h.running(build_dir, ["--ctx", "512", "--batched-session", "2", "--api-key", key], "e2e-auth.log") as srv:
        status, _, _ = srv.request("GET", "/health")
        check(status == 200, "/health needs no key")
        for path in ["/v1/models", "/metrics", "/slots", "/props"]:
            status, _, _ = srv.request("GET", path)
            check(status == 401, f"{path} without a key is 401")
        status, _, _ = srv.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
        check(status == 401, "a wrong Bearer key is 401")
        status, _, _ = srv.request("GET", "/v1/models", headers={"Authorization": f"Bearer {key}"})
        check(status == 200, "the right Bearer key works")
        msg = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
        status, r = srv.post_json("/v1/messages", msg, headers={"x-api-key": key})
        check(status == 200 and r["type"] == "message", "x-api-key works on Anthropic routes")
        status, r = srv.post_json("/v1/messages", msg)
        check(status == 401 and r["error"]["type"] == "authentication_error", "Anthropic route without a key: 401 in its shape")
        status, _, _ = srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1}, headers={"x-api-key": key})
        check(status == 401, "x-api-key is not accepted on OpenAI routes")
        test_sdks(srv, npm_dir)
        check(srv.stop() == 0, "SIGTERM exits 0")


def test_shutdown_in_flight(build_dir):
    srv = h.server(build_dir, ["--ctx", "1024", "--batched-session", "2", "--shutdown-grace", "1"], "e2e-shutdown.log")
    srv.wait_ready()
    got = []

    def on_data(d, t):
        got.append(d)
        if len(got) == 2:
            srv.proc.send_signal(15)  # SIGTERM while this stream is generating
        return True
    try:
        h.stream_events(srv.port, "/v1/completions", {"model": MODEL, "prompt": "long", "max_tokens": 1000,
                                                       "temperature": 0, "stream": True}, on_data, timeout=60)
    finally:
        code = srv.stop(30)
    last = got[-1] if got else None
    check(last == "[DONE]" or (isinstance(last, dict) and "error" in last),
          f"an in-flight stream ends cleanly on SIGTERM (last event {str(last)[:80]})")
    check(code == 0, f"SIGTERM with work in flight exits 0 (got {code})")


def test_signal_storm(build_dir):
    """SIGTERM after SIGTERM until the process is gone, starting while a stream generates, so the
    shutdown lasts (grace 1 s) and later signals land in every phase of it, some while the process
    exits (a late second SIGTERM must not kill the server with -15 after it has logged 'stopped').
    The exit status must be 0."""
    srv = h.server(build_dir, ["--ctx", "1024", "--batched-session", "2", "--shutdown-grace", "1"], "e2e-signals.log")
    srv.wait_ready()
    streaming = threading.Event()

    def on_data(d, t):
        streaming.set()
        return True

    def stream():
        try:
            h.stream_events(srv.port, "/v1/completions", {"model": MODEL, "prompt": "long", "max_tokens": 1000,
                                                           "temperature": 0, "stream": True}, on_data, timeout=60)
        except Exception:  # noqa: BLE001 - the server may cut the stream at the end of the grace
            pass
    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    check(streaming.wait(60), "a stream is generating before the signals")
    sent = 0
    deadline = time.time() + 30
    while srv.proc.poll() is None and time.time() < deadline:
        try:
            srv.proc.send_signal(15)
            sent += 1
        except ProcessLookupError:
            break
        time.sleep(0.0005)
    code = srv.stop(30)
    reader.join(60)
    check(sent >= 2, f"more than one SIGTERM reached the server during its shutdown (sent {sent})")
    check(code == 0, f"a storm of SIGTERMs still exits 0 (got {code}, {sent} sent)")


def test_loading(build_dir, test_server):
    """/health is 503 while the model loads, then 200; other routes are 503 in their API's shape.
    The test build's TANDEM_TEST_LOAD_DELAY_MS holds the loading state: the tiny model loads at once."""
    delay_ms = 3000
    srv = h.server(build_dir, ["--ctx", "256", "--batched-session", "2"], "e2e-loading.log",
                   env={"TANDEM_TEST_LOAD_DELAY_MS": str(delay_ms)}, binary=test_server)
    seen, first_503 = [], None
    try:
        deadline = time.time() + 60 + delay_ms / 1e3
        while time.time() < deadline and srv.proc.poll() is None:
            try:
                status, headers, body = srv.request("GET", "/health", timeout=2)
            except OSError:
                time.sleep(0.02)  # not listening yet (the memory plan comes first)
                continue
            if not seen or seen[-1] != status:
                seen.append(status)
            if status == 503 and first_503 is None:
                first_503 = json.loads(body)
                s1, h1, b1 = srv.request("GET", "/v1/models")
                check(s1 == 503 and "loading" in json.loads(b1)["error"]["message"] and h1.get("Retry-After") == "1",
                      f"GET /v1/models while loading: 503 in OpenAI's error shape with Retry-After ({s1} {b1[:120]!r})")
                s2, r2 = srv.post_json("/v1/messages", {"model": MODEL, "max_tokens": 1,
                                                        "messages": [{"role": "user", "content": "x"}]})
                check(s2 == 503 and r2.get("type") == "error" and "loading" in r2["error"]["message"],
                      f"POST /v1/messages while loading: 503 in Anthropic's error shape ({s2} {r2})")
                s3, r3 = completion(srv, "x", 1)
                check(s3 == 503 and "loading" in r3["error"]["message"], f"a completion while loading: 503 ({s3})")
            if status == 200:
                break
            time.sleep(0.05)
        check(seen == [503, 200], f"/health goes 503 -> 200 while the model loads (saw {seen})")
        check(first_503 is not None and first_503.get("status") == "loading model"
              and 0 <= first_503.get("progress_percent", -1) <= 100
              and first_503.get("bytes_loaded", -1) <= first_503.get("bytes_total", -1),
              f"/health body while loading: its status and progress ({first_503})")
        status, r = completion(srv, "after loading", 2)
        check(status == 200, f"a completion works once /health is 200 ({status})")
        model_bytes = os.path.getsize(h.tiny_model(build_dir))
        loaded = re.search(r"weights loaded: ([0-9.]+) (MiB|GiB) in [0-9.]+ s \(100%\)", srv.log_tail(400))
        check(loaded is not None and 0 < float(loaded.group(1)) * 2**(20 if loaded.group(2) == "MiB" else 30) <= model_bytes * 1.01,
              f"the log's last load line: 100% of the file's weights ({loaded and loaded.group(0)})")
    finally:
        code = srv.stop()
    check(code == 0, f"SIGTERM after loading exits 0 (got {code})")

    # A signal while loading ends the process at once instead of after the load.
    srv = h.server(build_dir, ["--ctx", "256", "--batched-session", "2"], "e2e-loading-stop.log",
                   env={"TANDEM_TEST_LOAD_DELAY_MS": "60000"}, binary=test_server)
    try:
        deadline = time.time() + 60
        status = None
        while time.time() < deadline and status != 503 and srv.proc.poll() is None:
            try:
                status, _, _ = srv.request("GET", "/health", timeout=2)
            except OSError:
                time.sleep(0.02)
        check(status == 503, f"/health is 503 during a 60 s load ({status})")
        t0 = time.time()
        code = srv.stop(limit_s=20)
        check(code == 0 and time.time() - t0 < 10, f"SIGTERM while loading exits 0 at once (exit {code} after "
              f"{time.time() - t0:.1f} s)")
    finally:
        srv.stop()


def test_memory_plan(build_dir):
    out = subprocess.run([os.path.join(build_dir, "tandem-server"), "-m", h.tiny_model(build_dir), "--port", "0",
                          "--mem-budget", "0.01", "--ctx", "4096"], capture_output=True, timeout=60)
    err = out.stdout.decode() + out.stderr.decode()
    check(out.returncode == 2 and "short" in err and "--batched-session" in err,
          f"a memory plan over budget refuses to start naming the shortfall (exit {out.returncode}: {err[-300:]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--npm-dir", default="")
    ap.add_argument("--only", default="")
    ap.add_argument("--test-server", default="", help="tandem-server-test (the build with test hooks)")
    a = ap.parse_args()
    a.npm_dir = os.path.abspath(a.npm_dir) if a.npm_dir else ""
    ctx = 1024
    tests = {
        "basic": lambda srv: test_curl_and_basics(srv),
        "malformed": lambda srv: test_malformed(srv, ctx),
        "cancel": lambda srv: test_cancel_streaming(srv),
        "invariance": lambda srv: test_batch_invariance(srv),
        "load": lambda srv: test_load(srv),
        "metrics": lambda srv: test_metrics(srv),
    }
    selected = [n for n in tests if not a.only or n in a.only.split(",")]
    srv = h.server(a.build_dir, ["--ctx", str(ctx), "--batched-session", "16", "--max-queue", "64",
                                 "--body-limit", "0.0625"], "e2e.log")
    try:
        srv.wait_ready()
        for name in selected:
            print(f"[{name}]", flush=True)
            t0 = time.time()
            try:
                tests[name](srv)
            except Exception:  # noqa: BLE001 - report and go on with the other scenarios
                check(False, f"{name} raised:\n{traceback.format_exc()}")
            print(f"  {time.time() - t0:.1f} s", flush=True)
    finally:
        code = srv.stop()
    check(code == 0, f"SIGTERM exits 0 (got {code})")
    for name, fn in [("queue", lambda: test_cancel_queued(a.build_dir)), ("auth", lambda: test_auth(a.build_dir, a.npm_dir)),
                     ("shutdown", lambda: test_shutdown_in_flight(a.build_dir)),
                     ("signals", lambda: test_signal_storm(a.build_dir)), ("plan", lambda: test_memory_plan(a.build_dir)),
                     ("loading", lambda: test_loading(a.build_dir, a.test_server or
                                                      os.path.join(a.build_dir, "tests", "server", "tandem-server-test"))), ("draft", lambda: test_draft(a.build_dir))]:
        if a.only and name not in a.only.split(","):
            continue
        print(f"[{name}]", flush=True)
        try:
            fn()
        except Exception:  # noqa: BLE001
            check(False, f"{name} raised:\n{traceback.format_exc()}")
    n_fail = len(failures)
    print(f"e2e_server: {n_fail} failed" if n_fail else "e2e_server: all passed")
    if n_fail:
        print(srv.log_tail(30))
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
