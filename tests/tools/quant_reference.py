"""An independent, deliberately plain Python implementation of ggml's tensor-type dequantizers
and of the quantizers ggml runs without an importance matrix (ggml-quants.c:
quantize_row_{q4_0,q4_1,q5_0,q5_1,q2_K,q3_K,q5_K,mxfp4}_ref, quantize_iq4_nl and quantize_iq4_xs
with ntry 7), written from the algorithms, not from Tandem's C++.

Every float operation is one IEEE binary32 operation: values are numpy.float32 and every
result is rounded back to float32 with F() (numpy promotes float32 op python-int to float64;
one float64 op rounded once to float32 is the float32 result, since 53 >= 2 * 24 + 2).
Rounding to fp16 uses numpy's float16 conversion (round to nearest even), not Tandem's.
"""
import math
import re

import numpy as np

F = np.float32
QK_K = 256


def nearest_int(v):
    """ggml's nearest_int: round half to even."""
    return int(np.rint(np.float64(v)))


def to_half(v):
    return int(np.array([v], dtype=np.float32).astype(np.float16).view(np.uint16)[0])


def from_half(bits):
    return F(np.array([bits], dtype=np.uint16).view(np.float16)[0])


def u16(b, off):
    return b[off] | (b[off + 1] << 8)


def put16(b, off, v):
    b[off] = v & 0xFF
    b[off + 1] = (v >> 8) & 0xFF


# ---------------------------------------------------------------------------- grids
# Levels each grid value stands for in ggml-common.h's expanded tables.
LEVELS = {
    "iq2xxs": [0x08, 0x19, 0x2B], "iq2xs": [0x08, 0x19, 0x2B], "iq2s": [0x08, 0x19, 0x2B],
    "iq1s": [-1, 0, 1], "iq3xxs": [4, 12, 20, 28, 36, 44, 52, 62], "iq3s": [1, 3, 5, 7, 9, 11, 13, 15],
}


def load_grids(header_path):
    text = open(header_path).read()
    grids = {}
    for name, n, body in re.findall(r"kgrid_(\w+)\[(\d+)\] = \{([^}]*)\}", text):
        values = [int(v) for v in body.replace(",", " ").split()]
        assert len(values) == int(n)
        bits, count = (3, 4) if name.startswith("iq3") else (2, 8)
        grids[name] = [[LEVELS[name][(k >> (bits * i)) & ((1 << bits) - 1)] for i in range(count)] for k in values]
    return grids


def sign_byte(seven):
    return seven | ((bin(seven).count("1") & 1) << 7)


IQ4 = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]
MXFP4 = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]


def e8m0_half(e):
    return F(math.ldexp(1.0, e - 128))


# ---------------------------------------------------------------------------- dequantizers
def deq_q4_0(b):
    d = from_half(u16(b, 0))
    out = [F(0)] * 32
    for j in range(16):
        out[j] = F(F((b[2 + j] & 15) - 8) * d)
        out[j + 16] = F(F((b[2 + j] >> 4) - 8) * d)
    return out


def deq_q4_1(b):
    d, m = from_half(u16(b, 0)), from_half(u16(b, 2))
    out = [F(0)] * 32
    for j in range(16):
        out[j] = F(F(F(b[4 + j] & 15) * d) + m)
        out[j + 16] = F(F(F(b[4 + j] >> 4) * d) + m)
    return out


def deq_q5(b, has_min):
    d = from_half(u16(b, 0))
    m = from_half(u16(b, 2)) if has_min else None
    o = 4 if has_min else 2
    qh = int.from_bytes(bytes(b[o:o + 4]), "little")
    out = [F(0)] * 32
    for j in range(32):
        nib = (b[o + 4 + j % 16] >> (4 * (j // 16))) & 15
        q = nib | (((qh >> j) & 1) << 4)
        out[j] = F(F(q) * d) + m if has_min else F(F(q - 16) * d)
        out[j] = F(out[j])
    return out


def deq_q8_0(b):
    d = from_half(u16(b, 0))
    return [F(F(np.int8(np.uint8(b[2 + j]))) * d) for j in range(32)]


def deq_q2_k(b):
    scales, qs = b[0:16], b[16:80]
    d, dmin = from_half(u16(b, 80)), from_half(u16(b, 82))
    out = []
    for e in range(256):
        s, h, g, l = e // 16, e // 128, (e // 32) % 4, e % 32
        dl, ml = F(d * F(scales[s] & 15)), F(dmin * F(scales[s] >> 4))
        out.append(F(F(dl * F((qs[32 * h + l] >> (2 * g)) & 3)) - ml))
    return out


def q3_scale(sc, j):
    low = sc[j] & 15 if j < 8 else sc[j - 8] >> 4
    return low | (((sc[8 + j % 4] >> (2 * (j // 4))) & 3) << 4)


def deq_q3_k(b):
    hmask, qs, sc = b[0:32], b[32:96], b[96:108]
    d = from_half(u16(b, 108))
    out = []
    for e in range(256):
        dl = F(d * F(q3_scale(sc, e // 16) - 32))
        low = (qs[32 * (e // 128) + e % 32] >> (2 * ((e // 32) % 4))) & 3
        high = (hmask[e % 32] >> (e // 32)) & 1
        out.append(F(dl * F(low - (0 if high else 4))))
    return out


def k4_scale_min(sc, j):
    if j < 4:
        return sc[j] & 63, sc[j + 4] & 63
    return (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4), (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)


def deq_q4_k(b):
    d, dmin, sc, qs = from_half(u16(b, 0)), from_half(u16(b, 2)), b[4:16], b[16:144]
    out = []
    for e in range(256):
        s, m = k4_scale_min(sc, e // 32)
        c, l = e // 64, e % 32
        q = (qs[32 * c + l] >> (4 * ((e // 32) % 2))) & 15
        out.append(F(F(F(d * F(s)) * F(q)) - F(dmin * F(m))))
    return out


def deq_q5_k(b):
    d, dmin, sc, qh, qs = from_half(u16(b, 0)), from_half(u16(b, 2)), b[4:16], b[16:48], b[48:176]
    out = []
    for e in range(256):
        s, m = k4_scale_min(sc, e // 32)
        c, l, hi = e // 64, e % 32, (e // 32) % 2
        q = ((qs[32 * c + l] >> (4 * hi)) & 15) + (16 if (qh[l] >> (2 * c + hi)) & 1 else 0)
        out.append(F(F(F(d * F(s)) * F(q)) - F(dmin * F(m))))
    return out


def deq_q6_k(b):
    ql, qh, sc = b[0:128], b[128:192], b[192:208]
    d = from_half(u16(b, 208))
    out = []
    for e in range(256):
        h, r = e // 128, e % 128
        g, l = r // 32, r % 32
        low = (ql[64 * h + l + 32 * (g % 2)] >> (4 * (g // 2))) & 15
        q = (low | (((qh[32 * h + l] >> (2 * g)) & 3) << 4)) - 32
        s = int(np.int8(np.uint8(sc[e // 16])))
        out.append(F(F(d * F(s)) * F(q)))
    return out


def deq_iq4_nl(b):
    d = from_half(u16(b, 0))
    return [F(d * F(IQ4[(b[2 + j % 16] >> (4 * (j // 16))) & 15])) for j in range(32)]


def deq_iq4_xs(b):
    d, sh, sl, qs = from_half(u16(b, 0)), u16(b, 2), b[4:8], b[8:136]
    out = []
    for e in range(256):
        ib, j = e // 32, e % 32
        ls = ((sl[ib // 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4)
        dl = F(d * F(ls - 32))
        out.append(F(dl * F(IQ4[(qs[16 * ib + j % 16] >> (4 * (j // 16))) & 15])))
    return out


def deq_mxfp4(b):
    d = e8m0_half(b[0])
    return [F(F(MXFP4[(b[1 + j % 16] >> (4 * (j // 16))) & 15]) * d) for j in range(32)]


def signed(v, neg):
    return F(-v) if neg else v


def deq_iq2_xxs(b, G):
    d = from_half(u16(b, 0))
    out = []
    for ib in range(8):
        a0 = int.from_bytes(bytes(b[2 + 8 * ib:6 + 8 * ib]), "little")
        a1 = int.from_bytes(bytes(b[6 + 8 * ib:10 + 8 * ib]), "little")
        db = F(F(d * F(F(0.5) + F(a1 >> 28))) * F(0.25))
        for l in range(4):
            grid, signs = G["iq2xxs"][(a0 >> (8 * l)) & 255], sign_byte((a1 >> (7 * l)) & 127)
            out += [signed(F(db * F(grid[j])), (signs >> j) & 1) for j in range(8)]
    return out


def deq_iq2_xs(b, G):
    d = from_half(u16(b, 0))
    out = []
    for ib in range(8):
        s = b[66 + ib]
        db = [F(F(d * F(F(0.5) + F(s & 15))) * F(0.25)), F(F(d * F(F(0.5) + F(s >> 4))) * F(0.25))]
        for l in range(4):
            q = u16(b, 2 + 2 * (4 * ib + l))
            grid, signs = G["iq2xs"][q & 511], sign_byte(q >> 9)
            out += [signed(F(db[l // 2] * F(grid[j])), (signs >> j) & 1) for j in range(8)]
    return out


def deq_iq2_s(b, G):
    d = from_half(u16(b, 0))
    qs, qh, sc = b[2:66], b[66:74], b[74:82]
    out = []
    for ib in range(8):
        db = [F(F(d * F(F(0.5) + F(sc[ib] & 15))) * F(0.25)), F(F(d * F(F(0.5) + F(sc[ib] >> 4))) * F(0.25))]
        for l in range(4):
            grid = G["iq2s"][qs[4 * ib + l] | (((qh[ib] >> (2 * l)) & 3) << 8)]
            signs = qs[32 + 4 * ib + l]
            out += [signed(F(db[l // 2] * F(grid[j])), (signs >> j) & 1) for j in range(8)]
    return out


def deq_iq3_xxs(b, G):
    d = from_half(u16(b, 0))
    qs = b[2:98]
    out = []
    for ib in range(8):
        aux = int.from_bytes(bytes(qs[64 + 4 * ib:68 + 4 * ib]), "little")
        db = F(F(d * F(F(0.5) + F(aux >> 28))) * F(0.5))
        for l in range(4):
            signs = sign_byte((aux >> (7 * l)) & 127)
            vals = G["iq3xxs"][qs[8 * ib + 2 * l]] + G["iq3xxs"][qs[8 * ib + 2 * l + 1]]
            out += [signed(F(db * F(vals[j])), (signs >> j) & 1) for j in range(8)]
    return out


def deq_iq3_s(b, G):
    d = from_half(u16(b, 0))
    qs, qh, signs, sc = b[2:66], b[66:74], b[74:106], b[106:110]
    out = []
    for ib in range(8):
        db = F(d * F(1 + 2 * ((sc[ib // 2] >> (4 * (ib % 2))) & 15)))
        for l in range(4):
            i0 = qs[8 * ib + 2 * l] | (((qh[ib] >> (2 * l)) & 1) << 8)
            i1 = qs[8 * ib + 2 * l + 1] | (((qh[ib] >> (2 * l + 1)) & 1) << 8)
            vals = G["iq3s"][i0] + G["iq3s"][i1]
            out += [signed(F(db * F(vals[j])), (signs[4 * ib + l] >> j) & 1) for j in range(8)]
    return out


def deq_iq1_s(b, G):
    d = from_half(u16(b, 0))
    out = []
    for ib in range(8):
        qh = u16(b, 34 + 2 * ib)
        dl = F(d * F(2 * ((qh >> 12) & 7) + 1))
        delta = F(-0.125) if qh & 0x8000 else F(0.125)
        for l in range(4):
            grid = G["iq1s"][b[2 + 4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)]
            out += [F(dl * F(F(grid[j]) + delta)) for j in range(8)]
    return out


def deq_iq1_m(b, G):
    qs, qh = b[0:32], b[32:48]
    sc = [u16(b, 48 + 2 * i) for i in range(4)]
    bits = (sc[0] >> 12) | ((sc[1] >> 8) & 0xF0) | ((sc[2] >> 4) & 0xF00) | (sc[3] & 0xF000)
    d = from_half(bits)
    out = []
    for ib in range(8):
        s = sc[ib // 2] >> (6 * (ib % 2))
        dl = [F(d * F(2 * (s & 7) + 1)), F(d * F(2 * ((s >> 3) & 7) + 1))]
        for l in range(4):
            h = qh[2 * ib + l // 2] >> (4 * (l % 2))
            grid = G["iq1s"][qs[4 * ib + l] | ((h & 7) << 8)]
            delta = F(-0.125) if h & 8 else F(0.125)
            out += [F(dl[l // 2] * F(F(grid[j]) + delta)) for j in range(8)]
    return out


# name: (block elements, block bytes, dequantizer, offsets of fp16 scale fields, needs grids)
TYPES = {
    "q4_0": (32, 18, deq_q4_0, [0], False), "q4_1": (32, 20, deq_q4_1, [0, 2], False),
    "q5_0": (32, 22, lambda b: deq_q5(b, False), [0], False), "q5_1": (32, 24, lambda b: deq_q5(b, True), [0, 2], False),
    "q8_0": (32, 34, deq_q8_0, [0], False), "q2_k": (256, 84, deq_q2_k, [80, 82], False),
    "q3_k": (256, 110, deq_q3_k, [108], False), "q4_k": (256, 144, deq_q4_k, [0, 2], False),
    "q5_k": (256, 176, deq_q5_k, [0, 2], False), "q6_k": (256, 210, deq_q6_k, [208], False),
    "iq4_nl": (32, 18, deq_iq4_nl, [0], False), "iq4_xs": (256, 136, deq_iq4_xs, [0], False),
    "mxfp4": (32, 17, deq_mxfp4, [], False),
    "iq2_xxs": (256, 66, deq_iq2_xxs, [0], True), "iq2_xs": (256, 74, deq_iq2_xs, [0], True),
    "iq2_s": (256, 82, deq_iq2_s, [0], True), "iq3_xxs": (256, 98, deq_iq3_xxs, [0], True),
    "iq3_s": (256, 110, deq_iq3_s, [0], True), "iq1_s": (256, 50, deq_iq1_s, [0], True),
    "iq1_m": (256, 56, deq_iq1_m, [], True),
}


# ---------------------------------------------------------------------------- quantizers
def trunc_int(v):
    """C's float -> integer conversion (truncation toward zero)."""
    return int(np.trunc(np.float64(v)))


def q_legacy(x, kind):
    """quantize_row_q{4,5}_{0,1}_ref for one 32-block."""
    b = bytearray({"q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24}[kind])
    bits = 4 if kind.startswith("q4") else 5
    if kind.endswith("_0"):
        amax, mx = F(0), F(0)
        for v in x:
            if amax < abs(v):
                amax, mx = abs(v), v
        d = F(mx / F(-(1 << (bits - 1))))
        lo = F(0)
        put16(b, 0, to_half(d))
        off = F(8.5) if bits == 4 else F(16.5)
    else:
        lo, hi = F(np.finfo(np.float32).max), F(-np.finfo(np.float32).max)
        for v in x:
            lo = v if v < lo else lo
            hi = v if v > hi else hi
        d = F(F(hi - lo) / F((1 << bits) - 1))
        put16(b, 0, to_half(d))
        put16(b, 2, to_half(lo))
        off = F(0.5)
    idv = F(F(1) / d) if d != 0 else F(0)
    q = []
    for v in x:
        t = F(F(F(v - lo) * idv) + off) if kind.endswith("_1") else F(F(v * idv) + off)
        n = trunc_int(t)
        q.append(n if kind == "q5_1" else min((1 << bits) - 1, n))
    base = 2 if kind.endswith("_0") else 4
    if bits == 5:
        qh = 0
        for j in range(32):
            qh |= ((q[j] >> 4) & 1) << j
        b[base:base + 4] = qh.to_bytes(4, "little")
        base += 4
    for j in range(16):
        b[base + j] = (q[j] & 15) | ((q[j + 16] & 15) << 4)
    return b


def make_qkx2(x, w, nmax, rmin, rdelta, nstep, use_mad):
    n = len(x)
    mn, mx = x[0], x[0]
    sum_w = w[0]
    sum_x = F(sum_w * x[0])
    for i in range(1, n):
        mn = x[i] if x[i] < mn else mn
        mx = x[i] if x[i] > mx else mx
        sum_w = F(sum_w + w[i])
        sum_x = F(sum_x + F(w[i] * x[i]))
    if mn > 0:
        mn = F(0)
    if mx == mn:
        return F(0), -mn, [0] * n

    def err(diff):
        return abs(diff) if use_mad else F(diff * diff)

    iscale = F(F(nmax) / F(mx - mn))
    scale = F(F(1) / iscale)
    L = [min(max(nearest_int(F(iscale * F(x[i] - mn))), 0), nmax) for i in range(n)]
    best = F(0)
    for i in range(n):
        best = F(best + F(w[i] * err(F(F(F(scale * F(L[i])) + mn) - x[i]))))
    for step in range(nstep + 1):
        iscale = F(F(F(F(rmin) + F(F(rdelta) * F(step))) + F(nmax)) / F(mx - mn))
        la = [min(max(nearest_int(F(iscale * F(x[i] - mn))), 0), nmax) for i in range(n)]
        sl = sl2 = sxl = F(0)
        for i in range(n):
            wl = F(w[i] * F(la[i]))
            sl = F(sl + wl)
            sl2 = F(sl2 + F(wl * F(la[i])))
            sxl = F(sxl + F(wl * x[i]))
        D = F(F(sum_w * sl2) - F(sl * sl))
        if not D > 0:
            continue
        this_scale = F(F(F(sum_w * sxl) - F(sum_x * sl)) / D)
        this_min = F(F(F(sl2 * sum_x) - F(sl * sxl)) / D)
        if this_min > 0:
            this_min = F(0)
            this_scale = F(sxl / sl2)
        cur = F(0)
        for i in range(n):
            cur = F(cur + F(w[i] * err(F(F(F(this_scale * F(la[i])) + this_min) - x[i]))))
        if cur < best:
            L, best, scale, mn = la, cur, this_scale, this_min
    return scale, F(-mn), L


def pack2(L):
    qs = bytearray(64)
    for e in range(256):
        qs[32 * (e // 128) + e % 32] |= L[e] << (2 * ((e // 32) % 4))
    return qs


def q_q2_k(x):
    L, scales, mins = [0] * 256, [], []
    for j in range(16):
        xs = x[16 * j:16 * j + 16]
        s, m, l = make_qkx2(xs, [abs(v) for v in xs], 3, -0.5, 0.1, 15, True)
        scales.append(s)
        mins.append(m)
        L[16 * j:16 * j + 16] = l
    max_scale, max_min = F(0), F(0)
    for s, m in zip(scales, mins):
        max_scale = s if s > max_scale else max_scale
        max_min = m if m > max_min else max_min
    sc = [0] * 16
    d_bits = dmin_bits = 0
    if max_scale > 0:
        iscale = F(F(15) / max_scale)
        sc = [nearest_int(F(iscale * s)) & 0xFF for s in scales]
        d_bits = to_half(F(max_scale / F(15)))
    if max_min > 0:
        iscale = F(F(15) / max_min)
        sc = [(sc[j] | (nearest_int(F(iscale * mins[j])) << 4)) & 0xFF for j in range(16)]
        dmin_bits = to_half(F(max_min / F(15)))
    for j in range(16):
        d = F(from_half(d_bits) * F(sc[j] & 15))
        if d == 0:
            continue
        dm = F(from_half(dmin_bits) * F(sc[j] >> 4))
        for i in range(16):
            L[16 * j + i] = min(max(nearest_int(F(F(x[16 * j + i] + dm) / d)), 0), 3)
    b = bytearray(sc) + pack2(L) + bytearray(4)
    put16(b, 80, d_bits)
    put16(b, 82, dmin_bits)
    return b


def make_q3(x, nmax):
    amax, mx = F(0), F(0)
    for v in x:
        if abs(v) > amax:
            amax, mx = abs(v), v
    if amax < F(1e-15):
        return F(0), [0] * len(x)
    iscale = F(F(-nmax) / mx)
    L, slx_t, sl2_t = [], F(0), F(0)
    for v in x:
        l = min(max(nearest_int(F(iscale * v)), -nmax), nmax - 1)
        L.append(l)
        w = F(v * v)
        slx_t = F(slx_t + F(F(w * v) * F(l)))
        sl2_t = F(sl2_t + F(F(w * F(l)) * F(l)))
    for _ in range(5):
        changed = 0
        for i, v in enumerate(x):
            w = F(v * v)
            slx = F(slx_t - F(F(w * v) * F(L[i])))
            if not slx > 0:
                continue
            sl2 = F(sl2_t - F(F(w * F(L[i])) * F(L[i])))
            nl = min(max(nearest_int(F(F(v * sl2) / slx)), -nmax), nmax - 1)
            if nl == L[i]:
                continue
            slx = F(slx + F(F(w * v) * F(nl)))
            sl2 = F(sl2 + F(F(w * F(nl)) * F(nl)))
            if sl2 > 0 and F(F(slx * slx) * sl2_t) > F(F(slx_t * slx_t) * sl2):
                L[i], slx_t, sl2_t = nl, slx, sl2
                changed += 1
        if not changed:
            break
    return (F(slx_t / sl2_t) if sl2_t > 0 else F(0)), [l + nmax for l in L]


def q_q3_k(x):
    L, scales = [0] * 256, []
    for j in range(16):
        s, l = make_q3(x[16 * j:16 * j + 16], 4)
        scales.append(s)
        L[16 * j:16 * j + 16] = l
    amax, max_scale = F(0), F(0)
    for s in scales:
        if abs(s) > amax:
            amax, max_scale = abs(s), s
    sc = bytearray(12)
    d_bits = 0
    if max_scale != 0:
        iscale = F(F(-32) / max_scale)
        for j in range(16):
            l = ((nearest_int(F(iscale * scales[j])) + 128) & 0xFF) - 128  # stored in an int8_t first
            l = min(max(l, -32), 31) + 32
            if j < 8:
                sc[j] = l & 15
            else:
                sc[j - 8] |= (l & 15) << 4
            sc[8 + j % 4] |= (l >> 4) << (2 * (j // 4))
        d_bits = to_half(F(F(1) / iscale))
    for j in range(16):
        d = F(from_half(d_bits) * F(q3_scale(sc, j) - 32))
        if d == 0:
            continue
        for i in range(16):
            L[16 * j + i] = min(max(nearest_int(F(x[16 * j + i] / d)), -4), 3) + 4
    hmask = bytearray(32)
    low = [0] * 256
    for e in range(256):
        if L[e] > 3:
            hmask[e % 32] |= 1 << (e // 32)
        low[e] = L[e] - 4 if L[e] > 3 else L[e]
    b = hmask + pack2(low) + sc + bytearray(2)
    put16(b, 108, d_bits)
    return b


def q_q5_k(x):
    L, scales, mins = [0] * 256, [], []
    for j in range(8):
        xs = x[32 * j:32 * j + 32]
        sx2 = F(0)
        for v in xs:
            sx2 = F(sx2 + F(v * v))
        av = F(np.sqrt(F(sx2 / F(32))))
        s, m, l = make_qkx2(xs, [F(av + abs(v)) for v in xs], 31, -0.5, 0.1, 15, False)
        scales.append(s)
        mins.append(m)
        L[32 * j:32 * j + 32] = l
    max_scale, max_min = F(0), F(0)
    for s, m in zip(scales, mins):
        max_scale = s if s > max_scale else max_scale
        max_min = m if m > max_min else max_min
    inv_s = F(F(63) / max_scale) if max_scale > 0 else F(0)
    inv_m = F(F(63) / max_min) if max_min > 0 else F(0)
    ls = [min(63, nearest_int(F(inv_s * s)) & 0xFF) for s in scales]
    lm = [min(63, nearest_int(F(inv_m * m)) & 0xFF) for m in mins]
    sc = bytearray(12)
    for j in range(8):
        if j < 4:
            sc[j], sc[j + 4] = ls[j], lm[j]
        else:
            sc[j + 4] = (ls[j] & 15) | ((lm[j] & 15) << 4)
            sc[j - 4] |= (ls[j] >> 4) << 6
            sc[j] |= (lm[j] >> 4) << 6
    d_bits, dmin_bits = to_half(F(max_scale / F(63))), to_half(F(max_min / F(63)))
    for j in range(8):
        s, m = k4_scale_min(sc, j)
        d = F(from_half(d_bits) * F(s))
        if d == 0:
            continue
        dm = F(from_half(dmin_bits) * F(m))
        for i in range(32):
            L[32 * j + i] = min(max(nearest_int(F(F(x[32 * j + i] + dm) / d)), 0), 31)
    qh, qs = bytearray(32), bytearray(128)
    for e in range(256):
        c, l, hi = e // 64, e % 32, (e // 32) % 2
        qs[32 * c + l] |= (L[e] & 15) << (4 * hi)
        qh[l] |= (L[e] >> 4) << (2 * c + hi)
    b = bytearray(4) + sc + qh + qs
    put16(b, 0, d_bits)
    put16(b, 2, dmin_bits)
    return b


def iq4_index(v):
    """The nearest level; exactly halfway goes to the upper one."""
    best = 0
    for j in range(1, 16):
        if F(v + v) >= F(IQ4[j - 1] + IQ4[j]):
            best = j
    return best


def iq4_fit(x):
    w = [F(v * v) for v in x]
    amax, mx = F(0), F(0)
    for v in x:
        if abs(v) > amax:
            amax, mx = abs(v), v
    if amax < F(1e-15):
        return F(0)

    def sums(idv):
        sqx = sq2 = F(0)
        for v, wv in zip(x, w):
            q = F(IQ4[iq4_index(F(idv * v))])
            sqx = F(sqx + F(F(wv * q) * v))
            sq2 = F(sq2 + F(F(wv * q) * q))
        return sqx, sq2

    d = F(F(-mx) / F(-127))
    sqx, sq2 = sums(F(F(1) / d))
    d = F(sqx / sq2) if sq2 > 0 else F(0)
    best = F(d * sqx)
    for t in range(-7, 8):
        sqx, sq2 = sums(F(F(t - 127) / mx))
        if sq2 > 0 and F(sqx * sqx) > F(best * sq2):
            d = F(sqx / sq2)
            best = F(d * sqx)
    return d


def pack_iq4_group(L):
    return bytearray((L[j] | (L[j + 16] << 4)) for j in range(16))


def q_iq4_nl(x):
    d = iq4_fit(x)
    idv = F(F(1) / d) if d != 0 else F(0)
    b = bytearray(2) + pack_iq4_group([iq4_index(F(idv * v)) for v in x])
    put16(b, 0, to_half(d))
    return b


def q_iq4_xs(x):
    scales = [iq4_fit(x[32 * i:32 * i + 32]) for i in range(8)]
    amax, max_scale = F(0), F(0)
    for s in scales:
        if abs(s) > amax:
            amax, max_scale = abs(s), s
    d = F(F(-max_scale) / F(32))
    idv = F(F(1) / d) if d != 0 else F(0)
    sl, sh, qs = bytearray(4), 0, bytearray()
    for ib in range(8):
        l = min(max(nearest_int(F(idv * scales[ib])), -32), 31)
        dl = F(d * F(l))
        idl = F(F(1) / dl) if dl != 0 else F(0)
        qs += pack_iq4_group([iq4_index(F(idl * v)) for v in x[32 * ib:32 * ib + 32]])
        l += 32
        sl[ib // 2] |= (l & 15) << (4 * (ib % 2))
        sh |= (l >> 4) << (2 * ib)
    b = bytearray(4) + sl + qs
    put16(b, 0, to_half(d))
    put16(b, 2, sh)
    return b


def q_mxfp4(x):
    amax = F(0)
    for v in x:
        amax = abs(v) if amax < abs(v) else amax
    if amax > 0:
        # floor(log2f(amax)): numpy's float32 log2, which rounds like the C library's log2f
        # except within an ulp of an integer; the data keep clear of those.
        e = (int(np.floor(np.log2(amax))) - 2 + 127) & 0xFF
    else:
        e = 0
    d = e8m0_half(e)

    def code(v):
        best, best_err = 0, abs(F(F(MXFP4[0]) * d) - v)
        for i in range(1, 16):
            err = abs(F(F(F(MXFP4[i]) * d) - v))
            if err < best_err:
                best, best_err = i, err
        return best
    return bytearray([e]) + bytearray(code(x[j]) | (code(x[j + 16]) << 4) for j in range(16))


QUANTIZERS = {
    "q4_0": lambda x: q_legacy(x, "q4_0"), "q4_1": lambda x: q_legacy(x, "q4_1"),
    "q5_0": lambda x: q_legacy(x, "q5_0"), "q5_1": lambda x: q_legacy(x, "q5_1"),
    "q2_k": q_q2_k, "q3_k": q_q3_k, "q5_k": q_q5_k, "iq4_nl": q_iq4_nl, "iq4_xs": q_iq4_xs, "mxfp4": q_mxfp4,
}
