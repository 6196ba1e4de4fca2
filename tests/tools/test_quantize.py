#!/usr/bin/env python3
"""tests/tools/test_quantize.py TANDEM - `tandem quantize` on a tiny synthetic F16 Qwen3-MoE model.

1. Each mix gives every tensor the type llama-quantize's rules give it (the tables below are read
   off llama-quant.cpp for this shape: 4 layers, 8 experts, n_gqa 2), writes llama-quantize's
   metadata, and the result runs on the CPU engine with finite logits.
2. An importance matrix in llama-imatrix's GGUF format (written here) is read, used and recorded.
3. Quantized tensors are byte for byte the independent reference quantizers' blocks
   (quant_reference*.py) of the source values, with each expert's slice of the importance matrix.
4. A file holding every tensor type Tandem computes with gives bitwise the logits of its copy
   dequantized to F32 (the CPU engine dequantizes a tile of rows to F32 for every type, so the
   products are the same float operations).
"""
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant_reference as ref  # noqa: E402
import quant_reference_weighted as refw  # noqa: E402

tandem = sys.argv[1]
N_LAYER = 4


def run(*args):
    return subprocess.run([tandem, *args], check=True, capture_output=True, text=True)


# --- a minimal GGUF reader and writer --------------------------------------------------------
TYPE_NAMES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 10: "q2_k",
              11: "q3_k", 12: "q4_k", 13: "q5_k", 14: "q6_k", 16: "iq2_xxs", 17: "iq2_xs", 18: "iq3_xxs",
              19: "iq1_s", 20: "iq4_nl", 21: "iq3_s", 22: "iq2_s", 23: "iq4_xs", 29: "iq1_m", 30: "bf16",
              39: "mxfp4"}
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path, with_data=False):
    """(metadata dict, {tensor name: (type name, shape)}, [tensor names in file order]); with_data,
    also {tensor name: its bytes}."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode()
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        return take(SCALAR[t])

    assert data[:4] == b"GGUF"
    pos = 8
    n_tensors, n_kv = take("<Q"), take("<Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("<I"))
    tensors, order, offsets = {}, [], []
    for _ in range(n_tensors):
        name = string()
        ne = [take("<Q") for _ in range(take("<I"))]
        t = take("<I")
        offsets.append(take("<Q"))
        tensors[name] = (TYPE_NAMES[t], ne)
        order.append(name)
    if not with_data:
        return meta, tensors, order
    align = meta.get("general.alignment", 32)
    start = pos + (-pos % align)
    ends = offsets[1:] + [len(data) - start]
    blobs = {n: data[start + a:start + b] for n, a, b in zip(order, offsets, ends)}
    return meta, tensors, order, blobs


def write_imatrix(path, entries, chunks):
    """llama-imatrix's GGUF: general.type, imatrix.*, NAME.in_sum2 [ne0][n_mat], NAME.counts [1][n_mat]."""
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    kvs = [s("general.type") + struct.pack("<I", 8) + s("imatrix"),
           s("imatrix.datasets") + struct.pack("<IIQ", 9, 8, 1) + s("calibration.txt"),
           s("imatrix.chunk_count") + struct.pack("<II", 4, chunks),
           s("imatrix.chunk_size") + struct.pack("<II", 4, 512)]
    infos, blobs, off = [], [], 0
    for name, (ne0, n_mat, sums, counts) in entries.items():
        for suffix, ne, vals in ((".in_sum2", [ne0, n_mat], sums), (".counts", [1, n_mat], counts)):
            infos.append(s(name + suffix) + struct.pack("<I", 2) + struct.pack("<QQ", *ne) + struct.pack("<IQ", 0, off))
            blob = struct.pack(f"<{len(vals)}f", *vals)
            blob += b"\0" * (-len(blob) % 32)
            blobs.append(blob)
            off += len(blob)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(infos), len(kvs)) + b"".join(kvs) + b"".join(infos)
    head += b"\0" * (-len(head) % 32)
    with open(path, "wb") as f:
        f.write(head + b"".join(blobs))


def logits(model, ids="1,2,3,4,5"):
    # Exact arithmetic: a quantized file and its F32 copy agree bitwise only on dequantised weights.
    out = run("logits", "-m", model, "--backend", "cpu", "--cpu-arithmetic", "exact", "--ids", ids, "--json").stdout
    return json.loads(out)["logits"]


# --- the expected types: llama_tensor_get_type for 4 layers, 8 experts, n_gqa 2 ----------------
# n/8 = 0 and n/16 = 0: no "first eighth" bumps; use_more_bits(i, 4) holds for i = 2 (i % 3 == 2)
# and i = 3 (i >= 7n/8). With 8 experts (Mixtral's rule) attn_v and attn_k are Q8_0 in the
# K-quant and IQ3/IQ4 mixes, attn_output Q5_K in the mixes listed for it.
def expected(ftype, layer, tensor):
    base = {"Q4_K_M": "q4_k", "Q6_K": "q6_k", "Q8_0": "q8_0", "Q2_K": "q2_k", "Q4_0": "q4_0",
            "IQ4_XS": "iq4_xs", "IQ3_XXS": "iq3_xxs", "IQ2_XXS": "iq2_xxs", "MXFP4_MOE": "q8_0"}[ftype]
    if tensor.endswith("norm") or tensor == "ffn_gate_inp":
        return "f32"
    if ftype == "MXFP4_MOE":
        return "mxfp4" if tensor.endswith("_exps") else "q8_0"
    if tensor == "output":
        return {"Q8_0": "q8_0", "IQ3_XXS": "q5_k", "IQ2_XXS": "q5_k"}.get(ftype, "q6_k")
    if tensor == "token_embd":
        return {"Q2_K": "q2_k", "IQ3_XXS": "iq3_s", "IQ2_XXS": "q2_k"}.get(ftype, base)
    if ftype == "IQ2_XXS":  # the IQ1/IQ2 branch: attn_v Q4_K (>= 4 experts), attn_k Q4_K and attn_output Q5_K (8)
        return {"attn_v": "q4_k", "attn_k": "q4_k", "attn_output": "q5_k"}.get(tensor, base)
    if tensor in ("attn_v", "attn_k"):
        return "q8_0"
    if tensor == "attn_output":
        return "q5_k" if ftype in ("Q4_K_M", "Q2_K", "IQ4_XS", "IQ3_XXS") else base
    if tensor == "attn_q" and ftype == "IQ3_XXS":
        return "iq2_s"
    if tensor == "ffn_down_exps":
        if ftype == "Q2_K":
            return "q3_k"
        if ftype == "Q4_K_M" and layer in (2, 3):
            return "q6_k"
    return base


def check_types(path, ftype):
    _, tensors, order = read_gguf(path)
    bad = []
    for name in order:
        parts = name.split(".")
        layer, tensor = (int(parts[1]), parts[2]) if parts[0] == "blk" else (-1, parts[0])
        want = expected(ftype, layer, tensor)
        if tensors[name][0] != want:
            bad.append(f"{name}: {tensors[name][0]}, expected {want}")
    assert not bad, f"{ftype}: " + "; ".join(bad)
    # llama.cpp's order: names outside blk.N first, then by layer, by name within one.
    key = [(int(n.split(".")[1]) if n.startswith("blk.") else -1, n) for n in order]
    assert key == sorted(key), f"{ftype}: tensors not in llama.cpp's order"


# Bytes per block and per-block reference quantizers (without and with importance).
BLOCK = {"q4_k": (256, 144), "q6_k": (256, 210), "q8_0": (32, 34), "iq4_xs": (256, 136)}
REF = {"q4_k": refw.q4_k, "q6_k": refw.q6_k, "q8_0": refw.q8_0}
REF_W = {"q4_k": refw.q4_k_w, "q6_k": refw.q6_k_w, "iq4_xs": refw.iq4_xs_w}


def check_reference_bytes(src_path, out_path, name, expert, n_rows, importance=None):
    """The first n_rows rows of one expert of `name` against the reference quantizer of its type."""
    _, src, _, src_data = read_gguf(src_path, True)
    _, out, _, out_data = read_gguf(out_path, True)
    ne = src[name][1]
    assert src[name][0] == "f16", name
    x = np.frombuffer(src_data[name], dtype=np.float16).astype(np.float32).reshape(-1, ne[1], ne[0])[expert]
    t = out[name][0]
    elems, nbytes = BLOCK[t]
    row_bytes = ne[0] // elems * nbytes
    qw = None if importance is None else importance[expert * ne[0]:(expert + 1) * ne[0]]
    for r in range(n_rows):
        want = bytearray()
        for b in range(0, ne[0], elems):
            xs = [ref.F(v) for v in x[r, b:b + elems]]
            want += REF[t](xs) if qw is None else REF_W[t](xs, [ref.F(v) for v in qw[b:b + elems]])
        at = (expert * ne[1] + r) * row_bytes
        got = out_data[name][at:at + row_bytes]
        assert bytes(want) == got, f"{out_path} {name} ({t}) expert {expert} row {r} differs from the reference"


with tempfile.TemporaryDirectory() as tmp:
    f16 = f"{tmp}/f16.gguf"
    run("synth", "--preset", "tiny", "--type", "f16", "--seed", "3", "--out", f16)
    _, src, src_order = read_gguf(f16)

    # An importance matrix for every matrix but the embedding: positive column weights per expert.
    rng = random.Random(11)
    entries = {}
    for name in src_order:
        t, ne = src[name]
        if len(ne) >= 2 and "norm" not in name and "gate_inp" not in name and name != "token_embd.weight":
            n_mat = ne[2] if len(ne) > 2 else 1
            entries[name] = (ne[0], n_mat, [rng.uniform(0.5, 40.0) for _ in range(ne[0] * n_mat)],
                             [float(rng.randint(1, 9)) for _ in range(n_mat)])
    imatrix = f"{tmp}/imatrix.gguf"
    write_imatrix(imatrix, entries, chunks=17)

    passed = 0
    for ftype, ftype_id, use_imatrix in (("Q4_K_M", 15, False), ("Q6_K", 18, False), ("Q8_0", 7, False),
                                          ("Q2_K", 10, False), ("Q4_0", 2, False), ("IQ4_XS", 30, False),
                                          ("IQ3_XXS", 23, True), ("IQ2_XXS", 19, True), ("MXFP4_MOE", 38, False)):
        out = f"{tmp}/{ftype}.gguf"
        extra = ["--imatrix", imatrix] if use_imatrix else []
        run("quantize", f16, out, ftype, "--threads", "2", *extra)
        check_types(out, ftype)
        meta, _, _ = read_gguf(out)
        assert meta["general.file_type"] == ftype_id and meta["general.quantization_version"] == 2, ftype
        keys = list(meta)
        assert keys[-2:] == ["general.quantization_version", "general.file_type"] or use_imatrix, keys[-3:]
        if use_imatrix:
            assert meta["quantize.imatrix.file"] == imatrix and meta["quantize.imatrix.dataset"] == "calibration.txt"
            assert meta["quantize.imatrix.entries_count"] == len(entries)
            assert meta["quantize.imatrix.chunks_count"] == 17
            assert keys[-6:-4] == ["general.quantization_version", "general.file_type"], keys[-6:]
        lg = logits(out)
        assert all(math.isfinite(v) for v in lg) and len(set(lg)) > 1, f"{ftype}: logits not finite or constant"
        passed += 1

    # Blocks as the reference quantizers make them: Q4_K_M's Q4_K, Q6_K (ffn_down of layer 2) and
    # Q8_0 (attn_v), and IQ4_XS with the last expert's slice of the importance matrix.
    check_reference_bytes(f16, f"{tmp}/Q4_K_M.gguf", "blk.0.attn_q.weight", 0, 4)
    check_reference_bytes(f16, f"{tmp}/Q4_K_M.gguf", "blk.2.ffn_down_exps.weight", 5, 2)
    check_reference_bytes(f16, f"{tmp}/Q4_K_M.gguf", "blk.1.attn_v.weight", 0, 2)
    passed += 1

    # The importance matrix changes the result (IQ4_XS quantizes with it), and the types needing
    # one are refused without it, naming the tensor.
    run("quantize", f16, f"{tmp}/iq4_im.gguf", "IQ4_XS", "--imatrix", imatrix)
    ne0, n_mat, sums, counts = entries["blk.3.ffn_up_exps.weight"]
    values = [np.float32(sums[j * ne0 + i]) / np.float32(counts[j]) for j in range(n_mat) for i in range(ne0)]
    check_reference_bytes(f16, f"{tmp}/iq4_im.gguf", "blk.3.ffn_up_exps.weight", 7, 2, values)
    with open(f"{tmp}/IQ4_XS.gguf", "rb") as a, open(f"{tmp}/iq4_im.gguf", "rb") as b:
        assert a.read()[-4096:] != b.read()[-4096:], "the importance matrix changed nothing"
    r = subprocess.run([tandem, "quantize", f16, f"{tmp}/x.gguf", "IQ2_XXS"], capture_output=True, text=True)
    assert r.returncode != 0 and "importance matrix" in r.stderr and "blk.0." in r.stderr, r.stderr
    passed += 1

    # Every type in one file: overrides spread them over the tensors.
    spread = {"blk\\.0\\.attn_q": "q4_1", "blk\\.0\\.attn_k": "q5_0", "blk\\.0\\.attn_v": "q8_0",
              "blk\\.0\\.attn_output": "q2_k", "blk\\.0\\.ffn_gate": "q3_k", "blk\\.0\\.ffn_up": "q4_k",
              "blk\\.0\\.ffn_down": "q5_k", "blk\\.1\\.attn_q": "q6_k", "blk\\.1\\.attn_k": "iq4_nl",
              "blk\\.1\\.attn_v": "iq4_xs", "blk\\.1\\.attn_output": "iq2_xxs", "blk\\.1\\.ffn_gate": "iq2_xs",
              "blk\\.1\\.ffn_up": "iq2_s", "blk\\.1\\.ffn_down": "iq3_xxs", "blk\\.2\\.attn_q": "iq3_s",
              "blk\\.2\\.attn_k": "iq1_s", "blk\\.2\\.attn_v": "iq1_m", "blk\\.2\\.attn_output": "mxfp4",
              "blk\\.2\\.ffn_gate": "bf16", "blk\\.2\\.ffn_up": "f16", "blk\\.2\\.ffn_down": "f32"}
    every = f"{tmp}/every.gguf"
    args = ["quantize", f16, every, "Q4_K_M", "--imatrix", imatrix, "--token-embedding-type", "q4_0",
            "--output-tensor-type", "q5_1"]
    for pattern, t in spread.items():
        args += ["--tensor-type", f"{pattern}={t}"]
    run(*args)
    _, got, _ = read_gguf(every)
    types = {t for t, _ in got.values()}
    assert types == set(TYPE_NAMES.values()), sorted(set(TYPE_NAMES.values()) - types)
    deq = f"{tmp}/every-f32.gguf"
    run("quantize", every, deq, "F32")
    _, got_f32, _ = read_gguf(deq)
    assert {t for t, _ in got_f32.values()} == {"f32"}
    for ids in ("1,2,3,4,5", "7"):
        a, b = logits(every, ids), logits(deq, ids)
        assert a == b, f"every-type model and its F32 copy differ at {[i for i in range(len(a)) if a[i] != b[i]][:5]}"
    passed += 1

print(f"quantize: {passed} passed, 0 failed")
