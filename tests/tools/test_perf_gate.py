#!/usr/bin/env python3
"""tests/tools/test_perf_gate.py PERF_GATE_PY - scripts/perf_gate.py's GPU plans on made-up bench JSON.

Checked with a floors file of known values: a decode and a prefill floor pass above and fail below;
an entry naming a KV type fails a bench of another type (or of none recorded); the draft plan
passes when every oracle draft was kept and fails when one was not (even above the speed floor),
and a bench without the rows a plan needs is bad input (exit 2)."""
import json
import os
import subprocess
import sys
import tempfile

gate = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


FLOORS = {"version": 2, "gpu": [
    {"gpu": "G", "preset": "qwen3-30b-a3b", "type": "q4_K",
     "floors": {"decode_1_tok_per_s": {"floor": 400.0}, "decode_16_tok_per_s": {"floor": 2000.0},
                "prefill_2048_tok_per_s": {"floor": 10000.0}}},
    {"gpu": "G", "plan": "serve", "preset": "qwen3-30b-a3b", "type": "q4_K", "kv_type": "f16",
     "floors": {"decode_1_tok_per_s": {"floor": 400.0}, "decode_16_tok_per_s": {"floor": 2000.0}}},
    {"gpu": "G", "plan": "draft", "preset": "qwen3-30b-a3b", "type": "q4_K",
     "floors": {"draft_oracle_1_tok_per_s": {"floor": 1000.0}, "draft_oracle_16_tok_per_s": {"floor": 4000.0}}},
]}


def run(bench, plan):
    with tempfile.TemporaryDirectory() as d:
        fl, b = os.path.join(d, "floors.json"), os.path.join(d, "bench.json")
        json.dump(FLOORS, open(fl, "w"))
        json.dump(bench, open(b, "w"))
        p = subprocess.run([sys.executable, gate, "--floors", fl, "--bench", b, "--gpu", "G", "--plan", plan],
                           capture_output=True, text=True)
        return p.returncode, p.stdout + p.stderr


def single(d1, d16, prefill):
    return {"decode": [{"sessions": 1, "tok_per_s": d1}, {"sessions": 16, "tok_per_s": d16}],
            "prefill": {"tok_per_s": prefill}}


def draft(t1, t16, kept16=64 * 48):
    return {"decode_draft_oracle": [{"sessions": 1, "tok_per_s": t1, "drafted": 192, "accepted": 192},
                                    {"sessions": 16, "tok_per_s": t16, "drafted": 64 * 48, "accepted": kept16}]}


rc, out = run(single(500, 3000, 20000), "single")
check(rc == 0 and "passed" in out, f"single plan above its floors passes ({rc}: {out})")
rc, out = run(single(500, 1999, 20000), "single")
check(rc == 1 and "decode_16_tok_per_s" in out, f"decode below its floor fails ({rc}: {out})")
rc, out = run(single(500, 3000, 9000), "single")
check(rc == 1 and "prefill_2048_tok_per_s" in out, f"prefill below its floor fails ({rc}: {out})")
serve = single(500, 3000, 0)
del serve["prefill"]
rc, out = run(dict(serve, flags={"kv_type": "f16"}), "serve")
check(rc == 0 and "passed" in out, f"serve plan of its KV type passes ({rc}: {out})")
for flags in ({"kv_type": "f32"}, {}):
    rc, out = run(dict(serve, flags=flags), "serve")
    check(rc == 1 and "kv_type" in out, f"serve plan of another or no KV type fails ({flags}: {rc}: {out})")
rc, out = run(draft(1200, 5000), "draft")
check(rc == 0 and "passed" in out, f"draft plan with every draft kept passes ({rc}: {out})")
rc, out = run(draft(1200, 5000, kept16=64 * 48 - 1), "draft")
check(rc == 1 and "draft_oracle_16_kept" in out, f"a missed oracle draft fails the gate ({rc}: {out})")
rc, out = run(draft(900, 5000), "draft")
check(rc == 1 and "draft_oracle_1_tok_per_s" in out, f"draft speed below its floor fails ({rc}: {out})")
rc, out = run(single(500, 3000, 20000), "draft")
check(rc == 2, f"a bench without oracle rows is bad input for the draft plan ({rc}: {out})")

print("test_perf_gate: " + (f"{len(failures)} failed" if failures else "all passed"))
sys.exit(1 if failures else 0)
