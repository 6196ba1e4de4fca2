#!/usr/bin/env python3
"""scripts/perf_gate.py - checks `tandem bench --json` results against perf/floors.json.

usage: perf_gate.py --floors perf/floors.json --bench B.json [B2.json ...] [--gpu NAME --preset P
                    --type T [--gpus N --plan single|tp|pipeline|serve|chunked|draft]] [--fairness F.json]
Without --gpu: the CPU gate, a ratio of two session counts within each run (robust to the
machine's speed), the median over the runs given (robust to its noise).
With --gpu: the GPU floors of that (gpu, preset, type, gpus, plan) entry (gpus 1 / plan single
when an entry does not say); an entry checks the floors it lists (plan serve: decode only, in the
server's slots and KV type after long prompts; plan chunked: prefill only, in the 128-token chunks
the server interleaves with decoding sessions; plan draft: the --draft-oracle decode, 4 rows of each
slot a step, and every draft kept); an entry with a kv_type also fails a bench of another KV type.
Exit 0: pass (warnings printed for values within 5% of a floor); 1: below a floor; 2: bad input.
"""
import argparse
import json
import sys

WARN_MARGIN = 0.05


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"perf-gate: cannot read {path}: {e}", file=sys.stderr)
        sys.exit(2)


def check(name, value, floor, failures, higher_is_better=True):
    if floor is None:
        print(f"  {name:32s} {value:12.3f}   (no floor set yet)")
        return
    ok = value >= floor if higher_is_better else value <= floor
    near = abs(value - floor) <= WARN_MARGIN * abs(floor)
    verdict = "FAIL" if not ok else ("warn: within 5% of the floor" if near else "ok")
    rel = ">=" if higher_is_better else "<="
    print(f"  {name:32s} {value:12.3f}   floor {rel} {floor:<10g} {verdict}")
    if not ok:
        failures.append(name)


def decode_rate(bench, sessions):
    for row in bench.get("decode", []):
        if row.get("sessions") == sessions:
            return row["tok_per_s"]
    print(f"perf-gate: bench has no decode row for {sessions} sessions", file=sys.stderr)
    sys.exit(2)


def draft_oracle(bench, sessions, failures):
    """Tokens a second of the bench's --draft-oracle run at `sessions`; every draft must have been
    kept (each was the session's own greedy continuation: a miss means a row's logits changed with
    the rows of its slot beside it)."""
    for row in bench.get("decode_draft_oracle", []):
        if row.get("sessions") == sessions:
            if row["accepted"] != row["drafted"] or row["drafted"] == 0:
                print(f"  FAIL draft_oracle_{sessions}_kept: {row['accepted']} of {row['drafted']} drafts kept (all must be)")
                failures.append(f"draft_oracle_{sessions}_kept")
            return row["tok_per_s"]
    print(f"perf-gate: bench has no --draft-oracle row for {sessions} sessions", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--floors", required=True)
    ap.add_argument("--bench", required=True, nargs="+",
                    help="bench JSON; several CPU runs: the gate takes the median of their ratios")
    ap.add_argument("--gpu")
    ap.add_argument("--preset", default="qwen3-30b-a3b")
    ap.add_argument("--type", default="q4_K")
    ap.add_argument("--gpus", type=int, default=1, help="GPUs the bench ran on")
    ap.add_argument("--plan", default="single", choices=["single", "tp", "pipeline", "serve", "chunked", "draft"])
    ap.add_argument("--fairness", help="JSON from the server fairness scenario: {\"ratio\": r, ...}")
    args = ap.parse_args()
    floors = load(args.floors)
    benches = [load(b) for b in args.bench]
    bench = benches[0]
    failures = []
    print(f"perf-gate: commit {bench.get('commit')} backend {bench.get('backend')}")
    print(f"  {bench.get('layout', '')}")
    if args.gpu:
        entry = next((e for e in floors.get("gpu", []) if e["gpu"] == args.gpu and e["preset"] == args.preset
                      and e["type"].lower() == args.type.lower() and e.get("gpus", 1) == args.gpus
                      and e.get("plan", "single") == args.plan), None)
        if entry is None:
            print(f"perf-gate: no GPU floors for ({args.gpu}, {args.preset}, {args.type}, {args.gpus} GPUs, "
                  f"{args.plan})", file=sys.stderr)
            return 2
        f = entry["floors"]
        # An entry measured with one KV cache type holds only for benches of that type (bench's
        # flags.kv_type, the resolved type; a bench that does not record it cannot be checked).
        if "kv_type" in entry:
            got = bench.get("flags", {}).get("kv_type")
            if got != entry["kv_type"]:
                print(f"perf-gate: the floors need KV type {entry['kv_type']}, the bench ran {got or 'an unrecorded one'}")
                failures.append("kv_type")
        for sessions in (1, 16):
            name = f"decode_{sessions}_tok_per_s"
            if name in f:
                check(name, decode_rate(bench, sessions), f[name]["floor"], failures)
        for sessions in (1, 16):
            name = f"draft_oracle_{sessions}_tok_per_s"
            if name in f:
                check(name, draft_oracle(bench, sessions, failures), f[name]["floor"], failures)
        if "prefill_2048_tok_per_s" in f:
            check("prefill_2048_tok_per_s", bench["prefill"]["tok_per_s"], f["prefill_2048_tok_per_s"]["floor"], failures)
    else:
        ratios = floors["cpu"]["ratios"]
        runs = sorted(decode_rate(b, 16) / decode_rate(b, 1) for b in benches)
        ratio = runs[len(runs) // 2] if len(runs) % 2 else (runs[len(runs) // 2 - 1] + runs[len(runs) // 2]) / 2
        if len(runs) > 1:
            print(f"  decode 16 / 1 over {len(runs)} runs: {' '.join(f'{r:.3f}' for r in runs)} (median taken)")
        check("decode_16_over_1_aggregate", ratio, ratios["decode_16_over_1_aggregate"]["floor"], failures)
    if args.fairness:
        fair = load(args.fairness)
        limit = floors.get("fairness", {}).get("max_ratio", 3.0)
        check("prefill_yield_fairness_ratio", fair["ratio"], limit, failures, higher_is_better=False)
    if failures:
        print(f"perf-gate: FAILED ({', '.join(failures)})")
        return 1
    print("perf-gate: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
