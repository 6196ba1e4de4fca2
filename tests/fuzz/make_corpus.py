#!/usr/bin/env python3
# tests/fuzz/make_corpus.py - writes the GGUF seed corpus (corpus/*.bin; the repo ignores *.gguf)
# for fuzz_gguf and for test_gguf's replay. Encodes GGUF with struct from the format description,
# independently of Tandem's writer, so the replay also checks the reader against a second encoder.
# valid_* files must parse; bad_* files must be refused. Run: python3 tests/fuzz/make_corpus.py
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
          U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (block elements, block bytes)
GGML = {0: (1, 4), 1: (1, 2), 8: (32, 34), 12: (256, 144), 14: (256, 210), 30: (1, 2)}


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def value(vtype, v):
    if vtype == STR:
        return s(v)
    if vtype == ARR:
        etype, items = v
        return struct.pack("<IQ", etype, len(items)) + b"".join(value(etype, x) for x in items)
    return struct.pack(SCALAR[vtype], v)


def kv(key, vtype, v):
    return s(key) + struct.pack("<I", vtype) + value(vtype, v)


def pad(n, a):
    return (a - n % a) % a


def gguf(kvs, tensors, version=3, alignment=32, magic=b"GGUF"):
    """tensors: (name, ne list, ggml type); laid out in order, each padded to the alignment."""
    head = magic + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    infos, data, offset = b"", b"", 0
    for i, (name, ne, gtype) in enumerate(tensors):
        elems, nbytes = GGML[gtype]
        n = 1
        for d in ne:
            n *= d
        size = n // elems * nbytes
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", d) for d in ne)
        infos += struct.pack("<IQ", gtype, offset)
        blob = bytes((i * 31 + j * 7) & 0xFF for j in range(size))
        data += blob + bytes(pad(size, alignment))
        offset += size + pad(size, alignment)
    meta = head + infos
    if tensors:
        meta += bytes(pad(len(meta), alignment))
    return meta + data


def main():
    os.makedirs(OUT, exist_ok=True)
    # The values test_gguf_corpus.cpp reads back from valid_all_types.bin.
    all_types = [
        kv("general.architecture", STR, "fuzzseed"),
        kv("t.u8", U8, 200), kv("t.i8", I8, -100), kv("t.u16", U16, 60000), kv("t.i16", I16, -30000),
        kv("t.u32", U32, 123456789), kv("t.i32", I32, -123456789), kv("t.f32", F32, 0.25),
        kv("t.bool", BOOL, 1), kv("t.u64", U64, 2**40 + 3), kv("t.i64", I64, -(2**40)),
        kv("t.f64", F64, -1.5),
        kv("t.tokens", ARR, (STR, ["<s>", "a", "\u00e9"])),
        kv("t.ids", ARR, (I32, [1, -2, 3])),
        kv("t.scores", ARR, (F32, [0.5, -1.0])),
        kv("t.flags", ARR, (BOOL, [1, 0])),
        kv("t.empty", ARR, (U64, [])),
    ]
    files = {
        "valid_minimal.bin": gguf([], []),
        "valid_all_types.bin": gguf(all_types, [("token_embd.weight", [4, 2], 0), ("blk.0.q8", [32], 8)]),
        "valid_v2.bin": gguf([kv("general.name", STR, "v2")], [("w", [3], 0)], version=2),
        "valid_align64.bin": gguf([kv("general.alignment", U32, 64)],
                                   [("a", [3], 0), ("b", [5], 0)], alignment=64),
        "valid_quant_types.bin": gguf([kv("general.architecture", STR, "qwen3moe")],
                                       [("q4k", [256, 2], 12), ("q6k", [256], 14),
                                        ("bf16", [8, 2], 30), ("f16", [5], 1)]),
        "bad_magic.bin": gguf([], [("w", [3], 0)], magic=b"GGML"),
        "bad_version1.bin": gguf([], [], version=1),
        "bad_dup_key.bin": gguf([kv("k", U8, 1), kv("k", U8, 2)], []),
        "bad_nested_array.bin": gguf([kv("k", ARR, (ARR, []))], []),
        # One key whose u32 array claims 2^62 elements, followed by 8 bytes.
        "bad_huge_array.bin": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k")
        + struct.pack("<IIQ", ARR, U32, 2**62) + bytes(8),
    }
    base = gguf([], [("w", [8], 0)])
    files["bad_truncated.bin"] = files["valid_all_types.bin"][:-40]
    # Dimension 2^40 x 2^40 overflows the element count: patch the shape of a one-tensor file.
    t = gguf([], [("w", [1, 1], 0)])
    at = 24 + 8 + 1 + 4
    files["bad_overflow_dims.bin"] = t[:at] + struct.pack("<qq", 2**40, 2**40) + t[at + 16:]
    # Offset past the end of the data.
    at = 24 + 8 + 1 + 4 + 8 + 4
    files["bad_offset.bin"] = base[:at] + struct.pack("<Q", 4096) + base[at + 8:]
    for name, data in sorted(files.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
