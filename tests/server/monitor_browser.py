#!/usr/bin/env python3
# tests/server/monitor_browser.py - /monitor in a real headless browser (Debian's chromium driven
# by puppeteer-core) against a CPU server with a key and a small load: the page asks for the key,
# renders, its charts get points, the slot table shows the busy slots, and the browser logs no
# errors but the one 401 that made the page ask for the key. The screenshot is saved under the
# build folder. Exits 77 (ctest: Skipped) where chromium is not installed.
# Usage: monitor_browser.py --build-dir B --npm-dir D
import argparse
import json
import os
import shutil
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import server_harness as h  # noqa: E402

KEY = "sk-monitor-test"


def load(srv, stop):
    """Streams requests back to back until stopped, so slots stay busy and tokens flow."""
    body = {"messages": [{"role": "user", "content": "Tell me a long story"}], "max_tokens": 300, "stream": True}
    auth = {"Authorization": "Bearer " + KEY}
    while not stop.is_set():
        h.stream_events(srv.port, "/v1/chat/completions", body, lambda d, t: not stop.is_set(), headers=auth)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--npm-dir", required=True)
    a = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("SKIPPED: chromium is not installed (apt-get install chromium; make deps installs it)")
        return 77
    out_dir = os.path.join(a.build_dir, "server-tests")
    shot = os.path.join(out_dir, "monitor.png")
    if os.path.exists(shot):
        os.remove(shot)
    stop = threading.Event()
    with h.running(a.build_dir, ["--ctx", "1024", "--batched-session", "3", "--threads", "1", "--api-key", KEY],
                   "monitor-browser.log") as srv:
        status, _, _ = srv.request("GET", "/monitor/data")
        data_needs_key = status == 401
        workers = [threading.Thread(target=load, args=(srv, stop)) for _ in range(2)]
        for w in workers:
            w.start()
        try:
            run = subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "monitor_browser.cjs"),
                                  a.npm_dir, chromium, f"http://{h.HOST}:{srv.port}", KEY, shot],
                                 capture_output=True, text=True, timeout=240)
        finally:
            stop.set()
            for w in workers:
                w.join(60)
    print(run.stderr[-2000:])
    seen = json.loads(run.stdout.strip().splitlines()[-1]) if run.stdout.strip() else {}
    print(json.dumps(seen, indent=1))
    unexpected = [e for e in seen.get("console_errors", []) if "401" not in e]
    checks = [
        (data_needs_key, "/monitor/data needs the key"),
        ("failure" not in seen, f"the page reached every state ({seen.get('failure')})"),
        (seen.get("page_status") == 200 and "default-src 'none'" in seen.get("csp", ""), "the page is served with a strict CSP"),
        (seen.get("asked_for_key") and seen.get("key_stored"), "the page asked for the key and kept it in sessionStorage"),
        (seen.get("decode_points", 0) >= 2 and seen.get("decode_peak", 0) > 0, "the decode chart has points above zero"),
        (seen.get("prefill_points", 0) >= 2, "the prefill chart has points"),
        (seen.get("slot_rows") == 3 and seen.get("busy_rows", 0) >= 1, "the slot table shows 3 slots, the busy ones marked"),
        (all(s in ("prefill", "decode") for s in seen.get("busy_states", [])), "busy slots say prefill or decode"),
        (seen.get("model") == "tiny.gguf" and "cpu" in seen.get("layout", ""), "the model and its layout line"),
        (len(seen.get("device_cells", [])) == 5 and seen["device_cells"][0] == "cpu0"
         and seen["device_cells"][1].endswith(("KiB", "MiB")) and seen["device_cells"][4] == "host memory",
         f"the device table: one CPU device, its weights in host memory ({seen.get('device_cells')})"),
        (not unexpected and not seen.get("page_errors"), f"no console errors ({unexpected + seen.get('page_errors', [])})"),
        (os.path.exists(shot) and os.path.getsize(shot) > 10000, f"a screenshot at {shot}"),
    ]
    failed = 0
    for ok, what in checks:
        print(f"  {'ok' if ok else 'FAIL'}: {what}")
        failed += 0 if ok else 1
    print("monitor_browser: all passed" if not failed else f"monitor_browser: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
