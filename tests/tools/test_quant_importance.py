"""Tandem's quantizers with an importance matrix, and the grid quantizers with and without one,
against quant_reference_weighted.py / quant_reference_iq.py, byte for byte.

Usage: test_quant_importance.py QUANT_ORACLE GRID_DATA_HEADER
Seeded data of several shapes is quantized as rows (two rows, so a row-wide statistic such as
the legacy types' sigma2 is per row) with a seeded importance vector per column: positive
spread values, with exact zeros and a few dominant columns. The rows' bytes must be identical.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant_reference as ref  # noqa: E402
import quant_reference_iq as refiq  # noqa: E402
import quant_reference_weighted as refw  # noqa: E402

ORACLE, HEADER = sys.argv[1], sys.argv[2]
GRIDS = refiq.load_grids(HEADER)
failures = []


def run_oracle(type_name, x, row_len, importance):
    with tempfile.TemporaryDirectory() as tmp:
        src, dst, imp = (os.path.join(tmp, n) for n in ("in", "out", "imp"))
        x.tofile(src)
        args = [ORACLE, "quantize", type_name, src, dst, str(row_len)]
        if importance is not None:
            importance.tofile(imp)
            args.append(imp)
        subprocess.run(args, check=True)
        with open(dst, "rb") as f:
            return f.read()


def make_data(kind, n, rng):
    if kind == "gaussian":
        return rng.standard_normal(n).astype(np.float32)
    if kind == "outliers":
        x = rng.standard_normal(n).astype(np.float32)
        x[rng.integers(0, n, n // 40)] *= 30
        return x
    if kind == "grid":  # multiples of 1/8: ties in the rounding and in the IQ1 sorts
        return (rng.integers(-12, 13, n) / 8).astype(np.float32)
    if kind == "sparse":  # whole 16- and 32-groups of zeros beside normal ones
        x = rng.standard_normal(n).astype(np.float32)
        for g in range(0, n, 64):
            x[g:g + 32] = 0
        x[:16] = 0
        return x
    if kind == "skewed":  # one-signed groups: the scale searches' min and shift choices
        return np.abs(rng.standard_normal(n)).astype(np.float32) * np.where(np.arange(n) % 64 < 32, 1, -1).astype(np.float32)
    return (rng.standard_normal(n) * 1e-3).astype(np.float32)


def make_importance(n, rng):
    w = rng.gamma(0.7, 1.0, n).astype(np.float32)
    w[rng.integers(0, n, n // 16)] = 0
    w[rng.integers(0, n, n // 64)] *= 50
    return w


def compare(label, got, want):
    if got != bytes(want):
        first = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), -1)
        failures.append(f"{label}: first differing byte {first} of {len(want)}")


def check(type_name, block_fn, elems, row_len, kinds, with_importance, rng):
    for kind in kinds:
        x = make_data(kind, 2 * row_len, rng)
        imp = make_importance(row_len, rng) if with_importance else None
        got = run_oracle(type_name, x, row_len, imp)
        want = bytearray()
        for r in range(2):
            row = [ref.F(v) for v in x[r * row_len:(r + 1) * row_len]]
            q = None if imp is None else [ref.F(v) for v in imp]
            for b in range(0, row_len, elems):
                want += block_fn(row[b:b + elems], None if q is None else q[b:b + elems])
        compare(f"{type_name} ({kind}, {'importance' if with_importance else 'none'})", got, want)


def check_legacy(type_name, rng):
    for kind in ("gaussian", "outliers", "grid", "sparse", "tiny"):
        row_len = 256
        x = make_data(kind, 2 * row_len, rng)
        imp = make_importance(row_len, rng)
        got = run_oracle(type_name, x, row_len, imp)
        q = [ref.F(v) for v in imp]
        want = bytearray()
        for r in range(2):
            want += refw.WEIGHTED_ROWS[type_name]([ref.F(v) for v in x[r * row_len:(r + 1) * row_len]], q)
        compare(f"{type_name} ({kind}, importance)", got, want)


rng = np.random.default_rng(159)
ALL_KINDS = ("gaussian", "outliers", "grid", "sparse", "skewed", "tiny")
checked = 0
for name, (elems, fn) in refw.WEIGHTED.items():
    check(name, fn, elems, 512, ALL_KINDS, True, rng)
    checked += 1
for name in refw.WEIGHTED_ROWS:
    check_legacy(name, rng)
    checked += 1
for name, (fn, required) in refiq.GRID_QUANTIZERS.items():
    grid_fn = (lambda f: lambda x, q: f(x, q, GRIDS))(fn)
    check(name, grid_fn, 256, 512, ALL_KINDS, True, rng)
    if not required:
        check(name, grid_fn, 256, 256, ("gaussian", "grid", "sparse"), False, rng)
    checked += 1
for f in failures:
    print("FAIL", f)
print(f"{checked} types checked, {len(failures)} failures")
sys.exit(1 if failures else 0)
