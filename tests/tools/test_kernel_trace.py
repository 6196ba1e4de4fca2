#!/usr/bin/env python3
"""tests/tools/test_kernel_trace.py ANALYZE_PY - scripts/kernel-trace/analyze.py on a made-up trace.

Decode steps of 4 layers of 3 launches (a product, a down of two kinds in alternate layers, the
combine), behind an embedding and its norm and ahead of a head of three or four launches, each launch
starting a known time before its predecessor ends (after that one started, as PDL launches do: the
analysis orders launches by their start) and ending a known time after it. The per-layer
table must give each position's increment, head start and duration, a row for each kind of down with
its count of layers, and the layer's total weighted by those counts."""
import os
import re
import subprocess
import sys
import tempfile

US = 1000  # the trace is in nanoseconds


def step(t, rows, digits_head):
    """One step's records from time t: (start, end, grid x, name), and the end time."""
    recs = []

    def launch(name, inc, early, gx=1):
        nonlocal t
        recs.append((t - early, t + inc, gx, name))
        t += inc

    launch("embed_kernel", 3 * US, 0, rows)
    launch("rmsnorm_kernel", 2 * US, 0, rows)
    for layer in range(4):
        launch("qkv_matvec_kernel", 1 * US, 300, 320)
        if layer % 2 == 0:
            launch("down_a_kernel", 2 * US, 500, 128)
        else:
            launch("down_b_kernel", 4 * US, 700, 128)
        launch("moe_combine_kernel", US // 2, 100, rows)
    if digits_head:
        launch("digits_quantize_kernel", 3 * US, 0, rows)
    launch("head_matvec_kernel", 40 * US, 200, 9496)
    launch("logits_top_slice_kernel", 12 * US, 0, 38)
    launch("logits_top_merge_kernel", 10 * US, 0, 1)
    return recs, t + 50 * US


def main():
    analyze = sys.argv[1]
    lines = []
    t = 10**9
    for rows, digits_head in ((1, True), (16, False)):
        for _ in range(6):
            recs, t = step(t, rows, digits_head)
            lines += [f"{s} {e} 0 {gx} 1 128 {name}" for s, e, gx, name in recs]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.txt")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        out = subprocess.run([sys.executable, analyze, path, "--demangled", "--layers", "4"], capture_output=True, text=True,
                             check=True).stdout
    print(out)
    failures = []

    def expect(pattern, what):
        if not re.search(pattern, out, re.MULTILINE):
            failures.append(f"{what}: no line matching {pattern!r}")

    # A step of one row: 2 + 12 + 4 launches (a head on digits); of 16 rows: 2 + 12 + 3.
    expect(r"^== steps of 18 launches, 1 rows: 4 steps", "the one-row steps, warm-up left out")
    expect(r"^== steps of 17 launches, 16 rows: 4 steps", "the 16-row steps")
    # Increment, head start, duration (us) at each position; the two downs a row each, 2 layers each.
    expect(r"^\s+0\s+1\.00 us \|\s+0\.30\s+1\.30\s+qkv_matvec_kernel g320x1 b128$", "position 0")
    expect(r"^\s+1\s+2\.00 us \|\s+0\.50\s+2\.50\s+down_a_kernel g128x1 b128\s+\(2 layers\)$", "the first kind of down")
    expect(r"^\s+1\s+4\.00 us \|\s+0\.70\s+4\.70\s+down_b_kernel g128x1 b128\s+\(2 layers\)$", "the second kind of down")
    expect(r"^\s+2\s+0\.50 us \|\s+0\.10\s+0\.60\s+moe_combine_kernel g1x1 b128$", "position 2 of one row")
    # A layer: 1 + (2 x 2 + 2 x 4) / 4 + 0.5.
    if len(re.findall(r"^\s+a layer: 4\.50 us$", out, re.MULTILINE)) != 2:
        failures.append("a layer is 4.50 us at both step sizes")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
