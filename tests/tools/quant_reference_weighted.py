"""An independent, deliberately plain Python implementation of ggml's quantizers that take an
importance matrix (ggml-quants.c: quantize_row_{q2,q3,q4,q5,q6}_K_impl, quantize_row_q{4,5}_{0,1}_impl,
quantize_iq4_nl / quantize_iq4_xs with quant_weights) and of the reference quantizers
quant_reference.py leaves out (quantize_row_{q8_0,q4_K,q6_K}_ref), written from the algorithms.

Conventions are quant_reference.py's: every float operation is one binary32 operation, wrapped
in F(); C's operand order is kept (w*x*l is (w*x)*l).
"""
import numpy as np

import quant_reference as ref
from quant_reference import F, nearest_int, put16, to_half, from_half

EPS = F(1e-15)  # GROUP_MAX_EPS


def clamp(v, lo, hi):
    return max(lo, min(hi, v))


def fsum(values):
    s = F(0)
    for v in values:
        s = F(s + v)
    return s


def sqrtf(v):
    return F(np.sqrt(F(v)))


def imp_weights(x, qw, sigma2):
    return [F(qw[i] * sqrtf(F(sigma2 + F(x[i] * x[i])))) for i in range(len(x))]


# ---------------------------------------------------------------------------- searches
def make_qx(x, nmax, qw):
    """make_qx_quants(n, nmax, x, L, rmse_type=1, qw): (scale, L biased by nmax)."""
    n = len(x)
    amax, mx = F(0), F(0)
    for v in x:
        if abs(v) > amax:
            amax, mx = abs(v), v
    if amax < EPS:
        return F(0), [0] * n
    w = qw if qw is not None else [F(v * v) for v in x]

    def levels(iscale):
        return [clamp(nearest_int(F(iscale * v)), -nmax, nmax - 1) for v in x]

    def sums(ls):
        slx = sl2 = F(0)
        for i in range(n):
            slx = F(slx + F(F(w[i] * x[i]) * F(ls[i])))
            sl2 = F(sl2 + F(F(w[i] * F(ls[i])) * F(ls[i])))
        return slx, sl2

    ls = levels(F(F(-nmax) / mx))
    L = [l + nmax for l in ls]
    slx, sl2 = sums(ls)
    scale = F(slx / sl2) if sl2 != 0 else F(0)
    best = F(scale * slx)
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = F(F(-F(F(nmax) + F(F(0.1) * F(step)))) / mx)
        ls = levels(iscale)
        slx, sl2 = sums(ls)
        if sl2 > 0 and F(slx * slx) > F(best * sl2):
            L = [l + nmax for l in ls]
            scale = F(slx / sl2)
            best = F(scale * slx)
    return scale, L


def make_qkx3(x, w, nmax):
    """make_qkx3_quants(n, nmax, x, w, L, &the_min, Laux, -0.9, 0.05, 36, false): (scale, -min, L)."""
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
    if mx <= mn:
        return F(0), F(-mn), [0] * n
    iscale = F(F(nmax) / F(mx - mn))
    scale = F(F(1) / iscale)
    L = [clamp(nearest_int(F(iscale * F(v - mn))), 0, nmax) for v in x]
    best = F(0)
    for i in range(n):
        diff = F(F(F(scale * F(L[i])) + mn) - x[i])
        best = F(best + F(w[i] * F(diff * diff)))
    for step in range(37):
        iscale = F(F(F(F(-0.9) + F(F(0.05) * F(step))) + F(nmax)) / F(mx - mn))
        la = []
        for v in x:
            t = F(iscale * F(v - mn))
            la.append(nearest_int(t if t < F(nmax) else F(nmax)) if t > 0 else 0)
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
        mad = F(0)
        for i in range(n):
            diff = F(F(F(this_scale * F(la[i])) + this_min) - x[i])
            mad = F(mad + F(w[i] * F(diff * diff)))
        if mad < best:
            L, best, scale, mn = la, mad, this_scale, this_min
    return scale, F(-mn), L


def make_qp(x, nmax, qw):
    """make_qp_quants(n, nmax, x, L, qw): (scale, L). L is uint8_t there: a negative level (IQ2_XXS
    hands over one flipped value per odd-parity group of 8) is stored wrapped, and the refinement
    reads the stored byte while the first sums use the signed level."""
    n = len(x)
    mx = F(0)
    for v in x:
        mx = mx if mx > v else v
    if mx < EPS:
        return F(0), [0] * n
    iscale = F(F(nmax) / mx)
    L = [nearest_int(F(iscale * v)) & 0xFF for v in x]
    scale = F(F(1) / iscale)
    best = F(0)
    for i in range(n):
        diff = F(x[i] - F(scale * F(L[i])))
        best = F(best + F(F(qw[i] * diff) * diff))
    for step in range(-4, 5):
        if step == 0:
            continue
        iscale_is = F(F(F(F(0.1) * F(step)) + F(nmax)) / mx)
        scale_is = F(F(1) / iscale_is)
        mse = F(0)
        for i in range(n):
            l = min(nmax, nearest_int(F(iscale_is * x[i])))
            diff = F(x[i] - F(scale_is * F(l)))
            mse = F(mse + F(F(qw[i] * diff) * diff))
        if mse < best:
            best, iscale = mse, iscale_is
    slx = sl2 = F(0)
    for i in range(n):
        l = min(nmax, nearest_int(F(iscale * x[i])))
        L[i] = l & 0xFF
        slx = F(slx + F(F(qw[i] * x[i]) * F(l)))
        sl2 = F(sl2 + F(F(qw[i] * F(l)) * F(l)))
    for _ in range(5):
        changed = 0
        for i in range(n):
            w = qw[i]
            a = F(slx - F(F(w * x[i]) * F(L[i])))
            b = F(sl2 - F(F(w * F(L[i])) * F(L[i])))
            if not (a > 0 and b > 0):
                continue
            nl = min(nmax, nearest_int(F(F(x[i] * b) / a)))
            if nl == L[i]:
                continue
            a = F(a + F(F(w * x[i]) * F(nl)))
            b = F(b + F(F(w * F(nl)) * F(nl)))
            if F(F(a * a) * sl2) > F(F(slx * slx) * b):
                L[i], slx, sl2 = nl & 0xFF, a, b
                changed += 1
        if not changed:
            break
    return (F(slx / sl2) if sl2 > 0 else F(0)), L


# ---------------------------------------------------------------------------- K-quants
def sigma2_of(x, factor, n):
    return F(F(F(factor) * fsum([F(v * v) for v in x])) / F(n))


def q2_k_w(x, qw):
    sigma2 = sigma2_of(x, 1, 256)
    L, scales, mins, sw = [0] * 256, [], [], []
    for j in range(16):
        xs = x[16 * j:16 * j + 16]
        w = imp_weights(xs, qw[16 * j:16 * j + 16], sigma2)
        sw.append(fsum(w))
        s, m, l = make_qkx3(xs, w, 3)
        scales.append(s)
        mins.append(m)
        L[16 * j:16 * j + 16] = l
    dm, Ls = make_qp(scales, 15, sw)
    mm, Lm = make_qp(mins, 15, sw)
    d_bits, m_bits = to_half(dm), to_half(mm)
    sc = [(Ls[j] | (Lm[j] << 4)) & 0xFF for j in range(16)]
    for j in range(16):
        d = F(from_half(d_bits) * F(sc[j] & 15))
        if d == 0:
            continue
        m = F(from_half(m_bits) * F(sc[j] >> 4))
        for i in range(16):
            L[16 * j + i] = clamp(nearest_int(F(F(x[16 * j + i] + m) / d)), 0, 3)
    b = bytearray(sc) + ref.pack2(L) + bytearray(4)
    put16(b, 80, d_bits)
    put16(b, 82, m_bits)
    return b


def q3_k_w(x, qw):
    sigma2 = sigma2_of(x, 2, 256)
    L, scales, sw = [0] * 256, [], []
    for j in range(16):
        xs = x[16 * j:16 * j + 16]
        w = imp_weights(xs, qw[16 * j:16 * j + 16], sigma2)
        sw.append(fsum(w))
        s, l = make_qx(xs, 4, w)
        scales.append(s)
        L[16 * j:16 * j + 16] = l
    d_block, Ls = make_qx(scales, 32, sw)
    sc = bytearray(12)
    for j in range(16):
        l = Ls[j]
        if j < 8:
            sc[j] = l & 15
        else:
            sc[j - 8] |= (l & 15) << 4
        sc[8 + j % 4] |= (l >> 4) << (2 * (j // 4))
    d_bits = to_half(d_block)
    for j in range(16):
        d = F(from_half(d_bits) * F(ref.q3_scale(sc, j) - 32))
        if d == 0:
            continue
        for i in range(16):
            L[16 * j + i] = clamp(nearest_int(F(x[16 * j + i] / d)), -4, 3) + 4
    hmask = bytearray(32)
    for e in range(256):
        if L[e] > 3:
            hmask[e % 32] |= 1 << (e // 32)
    low = [l - 4 if l > 3 else l for l in L]
    b = hmask + ref.pack2(low) + sc + bytearray(2)
    put16(b, 108, d_bits)
    return b


def pack_k4_scales(Ls, Lm):
    sc = bytearray(12)
    for j in range(8):
        if j < 4:
            sc[j], sc[j + 4] = Ls[j], Lm[j]
        else:
            sc[j + 4] = (Ls[j] & 15) | ((Lm[j] & 15) << 4)
            sc[j - 4] |= (Ls[j] >> 4) << 6
            sc[j] |= (Lm[j] >> 4) << 6
    return sc


def requant_k4(x, d_bits, m_bits, sc, nmax):
    L = [0] * 256
    for j in range(8):
        s, m = ref.k4_scale_min(sc, j)
        d = F(from_half(d_bits) * F(s))
        if d == 0:
            continue
        dm = F(from_half(m_bits) * F(m))
        for i in range(32):
            L[32 * j + i] = clamp(nearest_int(F(F(x[32 * j + i] + dm) / d)), 0, nmax)
    return L


def k4_search_w(x, qw, nmax):
    sigma2 = sigma2_of(x, 2, 256)
    scales, mins, sw, L = [], [], [], [0] * 256
    for j in range(8):
        xs = x[32 * j:32 * j + 32]
        w = imp_weights(xs, qw[32 * j:32 * j + 32], sigma2)
        sw.append(fsum(w))
        s, m, l = make_qkx3(xs, w, nmax)
        scales.append(s)
        mins.append(m)
        L[32 * j:32 * j + 32] = l
    d_block, Ls = make_qp(scales, 63, sw)
    m_block, Lm = make_qp(mins, 63, sw)
    sc = pack_k4_scales(Ls, Lm)
    d_bits, m_bits = to_half(d_block), to_half(m_block)
    return d_bits, m_bits, sc, L


def pack_q4_k(d_bits, m_bits, sc, L):
    qs = bytearray(128)
    for c in range(4):
        for l in range(32):
            qs[32 * c + l] = L[64 * c + l] | (L[64 * c + 32 + l] << 4)
    b = bytearray(4) + sc + qs
    put16(b, 0, d_bits)
    put16(b, 2, m_bits)
    return b


def pack_q5_k(d_bits, m_bits, sc, L):
    qh, qs = bytearray(32), bytearray(128)
    for e in range(256):
        c, l, hi = e // 64, e % 32, (e // 32) % 2
        qs[32 * c + l] |= (L[e] & 15) << (4 * hi)
        qh[l] |= (L[e] >> 4) << (2 * c + hi)
    b = bytearray(4) + sc + qh + qs
    put16(b, 0, d_bits)
    put16(b, 2, m_bits)
    return b


def q4_k_w(x, qw):
    d_bits, m_bits, sc, _ = k4_search_w(x, qw, 15)
    return pack_q4_k(d_bits, m_bits, sc, requant_k4(x, d_bits, m_bits, sc, 15))


def q5_k_w(x, qw):
    d_bits, m_bits, sc, _ = k4_search_w(x, qw, 31)
    return pack_q5_k(d_bits, m_bits, sc, requant_k4(x, d_bits, m_bits, sc, 31))


def finish_q6_k(x, scales, L):
    amax, mx = F(0), F(0)
    for s in scales:
        if abs(s) > amax:
            amax, mx = abs(s), s
    if amax < EPS:
        return bytearray(210)
    iscale = F(F(-128) / mx)
    d_bits = to_half(F(F(1) / iscale))
    sc = [min(127, nearest_int(F(iscale * s))) for s in scales]
    for j in range(16):
        d = F(from_half(d_bits) * F(sc[j]))
        if d == 0:
            continue
        for i in range(16):
            L[16 * j + i] = clamp(nearest_int(F(x[16 * j + i] / d)), -32, 31) + 32
    ql, qh = bytearray(128), bytearray(64)
    for e in range(256):
        h, r = e // 128, e % 128
        g, l = r // 32, r % 32
        ql[64 * h + l + 32 * (g % 2)] |= (L[e] & 15) << (4 * (g // 2))
        qh[32 * h + l] |= (L[e] >> 4) << (2 * g)
    b = ql + qh + bytearray(s & 0xFF for s in sc) + bytearray(2)
    put16(b, 208, d_bits)
    return b


def q6_k_w(x, qw):
    scales, L = [], [0] * 256
    for j in range(16):
        s, l = make_qx(x[16 * j:16 * j + 16], 32, qw[16 * j:16 * j + 16])
        scales.append(s)
        L[16 * j:16 * j + 16] = l
    return finish_q6_k(x, scales, L)


# ---------------------------------------------------------------------------- reference quantizers
def q8_0(x):
    amax = F(0)
    for v in x:
        amax = amax if amax > abs(v) else abs(v)
    d = F(amax / F(127))
    idv = F(F(1) / d) if d != 0 else F(0)
    b = bytearray(2)
    for v in x:  # roundf: halves away from zero
        t = float(F(v * idv))
        b.append(int(np.sign(t) * np.floor(abs(t) + 0.5)) & 0xFF)
    put16(b, 0, to_half(d))
    return b


def q4_k(x):
    scales, mins, L = [], [], [0] * 256
    for j in range(8):
        xs = x[32 * j:32 * j + 32]
        av = sqrtf(F(fsum([F(v * v) for v in xs]) / F(32)))
        s, m, l = ref.make_qkx2(xs, [F(av + abs(v)) for v in xs], 15, -1.0, 0.1, 20, False)
        scales.append(s)
        mins.append(m)
        L[32 * j:32 * j + 32] = l
    max_scale, max_min = F(0), F(0)
    for s, m in zip(scales, mins):
        max_scale = s if s > max_scale else max_scale
        max_min = m if m > max_min else max_min
    inv_s = F(F(63) / max_scale) if max_scale > 0 else F(0)
    inv_m = F(F(63) / max_min) if max_min > 0 else F(0)
    Ls = [min(63, nearest_int(F(inv_s * s)) & 0xFF) for s in scales]
    Lm = [min(63, nearest_int(F(inv_m * m)) & 0xFF) for m in mins]
    sc = pack_k4_scales(Ls, Lm)
    d_bits, m_bits = to_half(F(max_scale / F(63))), to_half(F(max_min / F(63)))
    return pack_q4_k(d_bits, m_bits, sc, requant_k4(x, d_bits, m_bits, sc, 15))


def q6_k(x):
    scales, L = [], [0] * 256
    for j in range(16):
        s, l = make_qx(x[16 * j:16 * j + 16], 32, None)
        scales.append(s)
        L[16 * j:16 * j + 16] = l
    return finish_q6_k(x, scales, L)


# ---------------------------------------------------------------------------- legacy types
def legacy_row_w(row, qw, kind):
    """quantize_row_{q4_0,q4_1,q5_0,q5_1}_impl over a whole row (sigma2 is the row's mean square)."""
    n = len(row)
    sigma2 = F(fsum([F(v * v) for v in row]) / F(n))
    out = bytearray()
    for b0 in range(0, n, 32):
        xs, w = row[b0:b0 + 32], imp_weights(row[b0:b0 + 32], qw[b0:b0 + 32], sigma2)
        if kind.endswith("_0"):
            d, L = make_qx(xs, 8 if kind == "q4_0" else 16, w)
            blk = bytearray(2)
            put16(blk, 0, to_half(d))
        else:
            d, neg_min, L = make_qkx3(xs, w, 15 if kind == "q4_1" else 31)
            blk = bytearray(4)
            put16(blk, 0, to_half(d))
            put16(blk, 2, to_half(F(-neg_min)))
        if kind.startswith("q5"):
            qh = 0
            for j in range(32):
                qh |= ((L[j] >> 4) & 1) << j
            blk += qh.to_bytes(4, "little")
        blk += bytearray((L[j] & 15) | ((L[j + 16] & 15) << 4) for j in range(16))
        out += blk
    return out


# ---------------------------------------------------------------------------- IQ4 with weights
def iq4_fit_w(x, w):
    amax, mx = F(0), F(0)
    for v in x:
        if abs(v) > amax:
            amax, mx = abs(v), v
    if amax < EPS:
        return F(0)

    def sums(idv):
        sqx = sq2 = F(0)
        for v, wv in zip(x, w):
            q = F(ref.IQ4[ref.iq4_index(F(idv * v))])
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


def iq4_sigma2(x):
    return F(fsum([F(v * v) for v in x]) * F(F(2) / F(len(x))))


def iq4_nl_w(x, qw):
    d = iq4_fit_w(x, imp_weights(x, qw, iq4_sigma2(x)))
    idv = F(F(1) / d) if d != 0 else F(0)
    b = bytearray(2) + ref.pack_iq4_group([ref.iq4_index(F(idv * v)) for v in x])
    put16(b, 0, to_half(d))
    return b


def iq4_xs_w(x, qw):
    sigma2 = iq4_sigma2(x)
    scales = [iq4_fit_w(x[32 * i:32 * i + 32], imp_weights(x[32 * i:32 * i + 32], qw[32 * i:32 * i + 32], sigma2))
              for i in range(8)]
    amax, max_scale = F(0), F(0)
    for s in scales:
        if abs(s) > amax:
            amax, max_scale = abs(s), s
    d = F(F(-max_scale) / F(32))
    idv = F(F(1) / d) if d != 0 else F(0)
    sl, sh, qs = bytearray(4), 0, bytearray()
    for ib in range(8):
        l = clamp(nearest_int(F(idv * scales[ib])), -32, 31)
        dl = F(d * F(l))
        idl = F(F(1) / dl) if dl != 0 else F(0)
        qs += ref.pack_iq4_group([ref.iq4_index(F(idl * v)) for v in x[32 * ib:32 * ib + 32]])
        l += 32
        sl[ib // 2] |= (l & 15) << (4 * (ib % 2))
        sh |= (l >> 4) << (2 * ib)
    b = bytearray(4) + sl + qs
    put16(b, 0, to_half(d))
    put16(b, 2, sh)
    return b


# Block quantizers with importance, per block: name -> (block elements, function(x, qw)).
WEIGHTED = {
    "q2_k": (256, q2_k_w), "q3_k": (256, q3_k_w), "q4_k": (256, q4_k_w), "q5_k": (256, q5_k_w),
    "q6_k": (256, q6_k_w), "iq4_nl": (32, iq4_nl_w), "iq4_xs": (256, iq4_xs_w),
}
# Row quantizers with importance (the legacy types' sigma2 spans the row).
WEIGHTED_ROWS = {k: (lambda kind: lambda row, qw: legacy_row_w(row, qw, kind))(k) for k in ("q4_0", "q4_1", "q5_0", "q5_1")}
# The reference quantizers quant_reference.QUANTIZERS lacks.
MORE_QUANTIZERS = {"q8_0": q8_0, "q4_k": q4_k, "q6_k": q6_k}
