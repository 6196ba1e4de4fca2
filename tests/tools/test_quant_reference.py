"""Tandem's dequantizers and quantizers against quant_reference.py, byte for byte.

Usage: test_quant_reference.py QUANT_ORACLE GRID_DATA_HEADER
Dequantization: random blocks of every computable block type (scales random finite fp16) are
dequantized by both; the float32 outputs must be identical bits. Quantization: seeded data of
several shapes (gaussian, uniform, heavy outliers, a coarse grid full of ties, IQ4's level
midpoints, constant, zero, tiny) is quantized by both; the blocks must be identical bytes.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant_reference as ref  # noqa: E402
import quant_reference_weighted as refw  # noqa: E402

ORACLE, HEADER = sys.argv[1], sys.argv[2]
GRIDS = ref.load_grids(HEADER)
failures = []


def run_oracle(op, type_name, data):
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        with open(src, "wb") as f:
            f.write(data)
        subprocess.run([ORACLE, op, type_name, src, dst], check=True)
        with open(dst, "rb") as f:
            return f.read()


def random_blocks(type_name, n_blocks, rng):
    elems, nbytes, _, halves, _ = ref.TYPES[type_name]
    out = bytearray()
    for _ in range(n_blocks):
        b = bytearray(rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes())
        for off in halves:  # finite scales of either sign, including subnormals
            ref.put16(b, off, int(rng.integers(0, 0x7C00)) | (int(rng.integers(0, 2)) << 15))
        if type_name == "iq1_m":  # keep the spread fp16 scale finite: its exponent's top bit clear
            b[55] &= 0xBF
        out += b
    return bytes(out)


def check_dequantize(type_name, rng):
    elems, nbytes, deq, _, grids = ref.TYPES[type_name]
    data = random_blocks(type_name, 24, rng)
    got = np.frombuffer(run_oracle("dequantize", type_name, data), dtype=np.float32)
    want = []
    for i in range(0, len(data), nbytes):
        block = list(data[i:i + nbytes])
        want += deq(block, GRIDS) if grids else deq(block)
    want = np.array(want, dtype=np.float32)
    diff = np.nonzero(got.view(np.uint32) != want.view(np.uint32))[0]
    if len(got) != len(want) or len(diff):
        first = int(diff[0]) if len(diff) else -1
        failures.append(f"dequantize {type_name}: first difference at element {first}"
                        + (f" (got {got[first]!r}, want {want[first]!r})" if first >= 0 else " (length)"))


def make_data(kind, n, rng):
    if kind == "gaussian":
        return rng.standard_normal(n).astype(np.float32)
    if kind == "uniform":
        return rng.uniform(-1, 1, n).astype(np.float32)
    if kind == "outliers":
        x = rng.standard_normal(n).astype(np.float32)
        x[rng.integers(0, n, n // 50)] *= 40
        return x
    if kind == "grid":  # multiples of 1/8 in [-2, 2]: exact ties in every rounding step
        return (rng.integers(-16, 17, n) / 8).astype(np.float32)
    if kind == "iq4_ties":
        # Per 256: a first 32-group of exact levels times -32 (IQ4's fitted group scale is then
        # exactly -32, so IQ4_XS's d is exactly 1), then groups of the levels' midpoints (-115.5,
        # ..., 101) led by -127, whose scales round to +-1: the final indices of IQ4_XS, and the
        # trial fits of both IQ4 types (scale -1 and 1), land exactly on best_index's boundaries,
        # where the tie rule decides.
        mids = [(a + b) / 2 for a, b in zip(ref.IQ4, ref.IQ4[1:])]
        x = np.array([rng.choice(mids) * rng.choice([-1, 1]) for _ in range(n)], dtype=np.float32)
        x[::32] = -127
        for b in range(0, n, 256):
            x[b:b + 32] = -32 * np.array(ref.IQ4, dtype=np.float32)[rng.integers(0, 16, 32)]
            x[b] = -32 * -127
        return x
    if kind == "constant":
        return np.full(n, -0.37, dtype=np.float32)
    if kind == "zero":
        return np.zeros(n, dtype=np.float32)
    return (rng.standard_normal(n) * 1e-4).astype(np.float32)


KINDS = ("gaussian", "uniform", "outliers", "grid", "iq4_ties", "constant", "zero", "tiny")


def check_quantize(type_name, quantizer, rng):
    elems = ref.TYPES[type_name][0]
    for kind in KINDS:
        x = make_data(kind, 4 * 256, rng)
        got = run_oracle("quantize", type_name, x.tobytes())
        want = bytearray()
        for i in range(0, len(x), elems):
            want += quantizer([ref.F(v) for v in x[i:i + elems]])
        if got != bytes(want):
            first = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), -1)
            failures.append(f"quantize {type_name} ({kind}): first differing byte {first} of {len(want)}")


rng = np.random.default_rng(59)
for name in ref.TYPES:
    check_dequantize(name, rng)
quantizers = dict(ref.QUANTIZERS, **refw.MORE_QUANTIZERS)
for name, fn in quantizers.items():
    check_quantize(name, fn, rng)
for f in failures:
    print("FAIL", f)
checked = len(ref.TYPES) + len(quantizers)
print(f"{checked - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
