"""An independent, deliberately plain Python implementation of ggml's grid quantizers
(ggml-quants.c: quantize_row_iq2_{xxs,xs,s}_impl, quantize_row_iq3_{xxs,s}_impl,
quantize_row_iq1_{s,m}_impl, with iq2xs_init_impl / iq3xs_init_impl's neighbour lists computed
on demand with numpy), written from the algorithms, not from Tandem's C++.

Conventions are quant_reference.py's: every float operation is one binary32 operation in F().
The grids come from the packed kgrid tables (one u16 per point, `bits` bits a level).
"""
import re

import numpy as np

from quant_reference import F, nearest_int, put16, to_half
from quant_reference_weighted import make_qp, fsum, sqrtf

FLT_MAX = F(np.finfo(np.float32).max)
DELTA = F(0.125)  # IQ1S_DELTA, IQ1M_DELTA

# kind: (values a point, bits a level, packed points searched (kmap_size), distinct distances kept)
KINDS = {"iq2xxs": (8, 2, 43692, 2), "iq2xs": (8, 2, 43692, 2), "iq2s": (8, 2, 43692, 1),
         "iq1s": (8, 2, 43692, 3), "iq3xxs": (4, 3, 4096, 2), "iq3s": (4, 3, 4096, 3)}


class Grid:
    def __init__(self, kgrid, kind):
        self.nv, self.bits, self.map_size, self.nwant = KINDS[kind]
        mask = (1 << self.bits) - 1
        self.points = np.array([[2 * ((k >> (self.bits * i)) & mask) + 1 for i in range(self.nv)] for k in kgrid])
        self.map = {}
        for j, k in enumerate(kgrid):
            self.map[sum(((k >> (self.bits * i)) & mask) << (self.bits * i) for i in range(self.nv))] = j
        self.cache = {}

    def neighbours(self, u):
        """Grid indices at the nwant smallest squared distances from packed point u, by (distance, index)."""
        if u not in self.cache:
            mask = (1 << self.bits) - 1
            pos = np.array([2 * ((u >> (self.bits * i)) & mask) + 1 for i in range(self.nv)])
            d2 = ((self.points - pos) ** 2).sum(axis=1)
            self.cache[u] = [int(j) for dv in np.unique(d2)[:self.nwant] for j in np.nonzero(d2 == dv)[0]]
        return self.cache[u]

    def levels(self, j):
        return [(int(p) - 1) // 2 for p in self.points[j]]


def load_grids(header_path):
    text = open(header_path).read()
    out = {}
    for name, n, body in re.findall(r"kgrid_(\w+)\[(\d+)\] = \{([^}]*)\}", text):
        values = [int(v) for v in body.replace(",", " ").split()]
        assert len(values) == int(n)
        out[name] = Grid(values, name)
    return out


def weights(x, qw, sigma2):
    return [F(qw[i] * sqrtf(F(sigma2 + F(x[i] * x[i])))) for i in range(len(x))]


def sigma2_256(x, factor):
    return F(F(F(factor) * fsum([F(v * v) for v in x])) / F(256))


def signs8(x, w, parity):
    xval, s, neg = [], 0, 0
    for i, v in enumerate(x):
        if v >= 0:
            xval.append(v)
        else:
            xval.append(F(-v))
            neg += 1
            s |= 1 << i
    if parity and neg % 2:
        imin, mn = 0, F(F(w[0] * x[0]) * x[0])
        for i in range(1, 8):
            a = F(F(w[i] * x[i]) * x[i])
            if a < mn:
                mn, imin = a, i
        xval[imin] = F(-xval[imin])
        s ^= 1 << imin
    return xval, s


def fmax(values):
    m = values[0]
    for v in values[1:]:
        m = m if m > v else v
    return m


def level_of(id_, v, top):
    return max(0, min(top, nearest_int(F(F(0.5) * F(F(id_ * v) - F(1))))))


def best_neighbour(g, u, xval, waux, scale):
    best_d2, best = FLT_MAX, -1
    for j in g.neighbours(u):
        d2 = F(0)
        for i in range(g.nv):
            diff = F(F(scale * F(int(g.points[j][i]))) - xval[i])
            d2 = F(d2 + F(F(waux[i] * diff) * diff))
        if d2 < best_d2:
            best_d2, best = d2, j
    assert best >= 0
    return g.levels(best)


def project(g, xval, id_, scale, waux, top):
    """Levels of one group at inverse scale id_, moved to the best neighbour when off the grid."""
    L = [level_of(id_, v, top) for v in xval]
    u = sum(l << (g.bits * i) for i, l in enumerate(L))
    if u in g.map:
        return L, True
    return best_neighbour(g, u, xval, waux, scale), False


def sums(xval, w, L):
    sqx = sq2 = F(0)
    for i in range(len(xval)):
        q = F(2 * L[i] + 1)
        sqx = F(sqx + F(F(w[i] * xval[i]) * q))
        sq2 = F(sq2 + F(F(w[i] * q) * q))
    return sqx, sq2


def grid_search(g, xval, w, waux, mx, top, is_range, step, start_on, refit_all):
    n, nv = len(xval), g.nv
    ng = n // nv
    best, scale = F(0), F(mx / F(2 * top + 1))
    L, on = [0] * n, [start_on] * ng
    for t in range(-is_range, is_range + 1):
        id_ = F(F(F(2 * top + 1) + F(F(t) * F(step))) / mx)
        this_scale = F(F(1) / id_)
        la, on_aux = [], []
        for k in range(ng):
            lk, ok = project(g, xval[nv * k:nv * k + nv], id_, this_scale, waux[nv * k:nv * k + nv], top)
            la += lk
            on_aux.append(ok)
        sqx, sq2 = sums(xval, w, la)
        if sq2 > 0 and F(sqx * sqx) > F(best * sq2):
            scale = F(sqx / sq2)
            best = F(scale * sqx)
            L, on = la, on_aux
    if not all(on) and scale > 0:
        id_ = F(F(1) / scale)
        for k in range(ng):
            if on[k] and not refit_all:
                continue
            L[nv * k:nv * k + nv], _ = project(g, xval[nv * k:nv * k + nv], id_, scale, waux[nv * k:nv * k + nv], top)
        sqx, sq2 = sums(xval, w, L)
        if sq2 > 0:
            scale = F(sqx / sq2)
    return scale, L


def sub_scale(id_, s, top):
    return max(0, min(top, nearest_int(F(F(0.5) * F(F(id_ * s) - F(1))))))


def index_of(g, L):
    return g.map[sum(l << (g.bits * i) for i, l in enumerate(L))]


# ---------------------------------------------------------------------------- IQ2
def iq2_xxs(x, qw, G):
    g = G["iq2xxs"]
    sigma2 = sigma2_256(x, 1)
    q2, scales, max_scale = [0] * 16, [F(0)] * 8, F(0)
    for ib in range(8):
        xb = x[32 * ib:32 * ib + 32]
        w = weights(xb, qw[32 * ib:32 * ib + 32], sigma2)
        waux = [sqrtf(v) for v in w]
        xval, signs = [], []
        for k in range(4):
            xv, s = signs8(xb[8 * k:8 * k + 8], w[8 * k:8 * k + 8], True)
            xval += xv
            signs.append(s & 127)
        mx = fmax(xval)
        if mx < F(1e-15):
            continue
        scale, _ = make_qp(xval, 4, w)
        eff_max = F(scale * F(3))
        if eff_max <= 0:
            continue
        best, L = F(0), [0] * 32
        for t in range(-6, 7):
            id_ = F(F(F(5) + F(F(t) * F(0.1))) / eff_max)
            this_scale = F(F(1) / id_)
            la = []
            for k in range(4):
                la += project(g, xval[8 * k:8 * k + 8], id_, this_scale, waux[8 * k:8 * k + 8], 2)[0]
            sqx, sq2 = sums(xval, w, la)
            if sq2 > 0 and F(sqx * sqx) > F(best * sq2):
                scale = F(sqx / sq2)
                best = F(scale * sqx)
                L = la
        if scale > 0:
            id_ = F(F(1) / scale)
            L = []
            for k in range(4):
                L += project(g, xval[8 * k:8 * k + 8], id_, scale, waux[8 * k:8 * k + 8], 2)[0]
            sqx, sq2 = sums(xval, w, L)
            if sq2 > 0:
                scale = F(sqx / sq2)
        if scale < 0:
            scale = F(-scale)
            signs = [~s & 127 for s in signs]
        for k in range(4):
            q2[2 * ib] |= index_of(g, L[8 * k:8 * k + 8]) << (8 * k)
            q2[2 * ib + 1] |= signs[k] << (7 * k)
        scales[ib] = scale
        max_scale = max_scale if max_scale > scale else scale
    b = bytearray(66)
    if max_scale == 0:
        return b
    d = F(max_scale / F(31))
    put16(b, 0, to_half(d))
    id_ = F(F(1) / d)
    for ib in range(8):
        q2[2 * ib + 1] |= sub_scale(id_, scales[ib], 15) << 28
    b[2:66] = b"".join(v.to_bytes(4, "little") for v in q2)
    return b


def iq2_group16(g, xb, w, parity, eps):
    waux = [sqrtf(v) for v in w]
    xval, signs = [], []
    for k in range(2):
        xv, s = signs8(xb[8 * k:8 * k + 8], w[8 * k:8 * k + 8], parity)
        xval += xv
        signs.append(s & 127 if parity else s)
    mx = fmax(xval)
    if mx < eps:
        return None
    scale, L = grid_search(g, xval, w, waux, mx, 2, 9, 0.1, True, False)
    if scale < 0:
        scale = F(-scale)
        signs = [(~s & 127) if parity else (~s & 255) for s in signs]
    return scale, [index_of(g, L[0:8]), index_of(g, L[8:16])], signs


def pack_scales16(scales, max_scale):
    id_ = F(F(1) / F(max_scale / F(31)))
    out = bytearray(8)
    for ib in range(16):
        out[ib // 2] |= sub_scale(id_, scales[ib], 15) << (4 * (ib % 2))
    return out


def iq2_xs(x, qw, G):
    g = G["iq2xs"]
    sigma2 = sigma2_256(x, 1)
    q2, scales, max_scale = [0] * 32, [F(0)] * 16, F(0)
    for ib in range(16):
        r = iq2_group16(g, x[16 * ib:16 * ib + 16], weights(x[16 * ib:16 * ib + 16], qw[16 * ib:16 * ib + 16], sigma2),
                        True, F(1e-15))
        if r is None:
            continue
        scales[ib], idx, signs = r
        for k in range(2):
            q2[2 * ib + k] = idx[k] | (signs[k] << 9)
        max_scale = max_scale if max_scale > scales[ib] else scales[ib]
    b = bytearray(74)
    if max_scale == 0:
        return b
    put16(b, 0, to_half(F(max_scale / F(31))))
    b[2:66] = b"".join(v.to_bytes(2, "little") for v in q2)
    b[66:74] = pack_scales16(scales, max_scale)
    return b


def iq2_s(x, qw, G):
    g = G["iq2s"]
    sigma2 = sigma2_256(x, 2)
    b = bytearray(82)
    scales, max_scale = [F(0)] * 16, F(0)
    for ib in range(16):
        xb = x[16 * ib:16 * ib + 16]
        if qw is None:
            w = [F(F(F(0.25) * sigma2) + F(v * v)) for v in xb]
        else:
            w = weights(xb, qw[16 * ib:16 * ib + 16], sigma2)
        r = iq2_group16(g, xb, w, False, F(1e-8))
        if r is None:
            continue
        scales[ib], idx, signs = r
        for k in range(2):
            i8 = 2 * ib + k
            b[2 + i8] = idx[k] & 255
            b[66 + i8 // 4] |= (idx[k] >> 8) << (2 * (i8 % 4))
            b[2 + 32 + i8] = signs[k]
        max_scale = max_scale if max_scale > scales[ib] else scales[ib]
    if max_scale == 0:
        return b
    put16(b, 0, to_half(F(F(max_scale / F(31)) * F(0.9875))))
    b[74:82] = pack_scales16(scales, max_scale)
    return b


# ---------------------------------------------------------------------------- IQ3
def iq3_group32(g, xb, qw, sigma2, parity):
    w = weights(xb, qw, sigma2) if qw is not None else [F(v * v) for v in xb]
    waux = [sqrtf(v) for v in w]
    xval, signs = [], []
    for k in range(4):
        xv, s = signs8(xb[8 * k:8 * k + 8], w[8 * k:8 * k + 8], parity)
        xval += xv
        signs.append(s & 127 if parity else s)
    return w, waux, xval, signs


def iq3_xxs(x, qw, G):
    g = G["iq3xxs"]
    sigma2 = sigma2_256(x, 2)
    q3, sas, scales, max_scale = bytearray(64), [0] * 8, [F(0)] * 8, F(0)
    for ib in range(8):
        w, waux, xval, signs = iq3_group32(g, x[32 * ib:32 * ib + 32], None if qw is None else qw[32 * ib:32 * ib + 32],
                                           sigma2, True)
        mx = fmax(xval)
        if mx < F(1e-8):
            continue
        scale, L = grid_search(g, xval, w, waux, mx, 7, 15, 0.2, True, False)
        if scale < 0:
            scale = F(-scale)
            signs = [~s & 127 for s in signs]
        for k in range(8):
            q3[8 * ib + k] = index_of(g, L[4 * k:4 * k + 4])
        sas[ib] = signs[0] | (signs[1] << 7) | (signs[2] << 14) | (signs[3] << 21)
        scales[ib] = scale
        max_scale = max_scale if max_scale > scale else scale
    b = bytearray(98)
    if max_scale == 0:
        return b
    d = F(max_scale / F(31))
    put16(b, 0, to_half(F(d * F(1.0125))))
    id_ = F(F(1) / d)
    for ib in range(8):
        sas[ib] |= sub_scale(id_, scales[ib], 15) << 28
    b[2:66] = q3
    b[66:98] = b"".join(v.to_bytes(4, "little") for v in sas)
    return b


def iq3_s(x, qw, G):
    g = G["iq3s"]
    sigma2 = sigma2_256(x, 2)
    b = bytearray(110)
    scales, max_scale, stored = [F(0)] * 8, F(0), 0
    for ib in range(8):
        w, waux, xval, signs = iq3_group32(g, x[32 * ib:32 * ib + 32], None if qw is None else qw[32 * ib:32 * ib + 32],
                                           sigma2, False)
        mx = fmax(xval)
        if mx == 0:
            continue
        scale, L = grid_search(g, xval, w, waux, mx, 7, 9, 0.2, False, True)
        if scale < 0:
            scale = F(-scale)
            signs = [~s & 255 for s in signs]
        for k in range(8):
            idx = index_of(g, L[4 * k:4 * k + 4])
            b[2 + 8 * stored + k] = idx & 255  # ggml's qs pointer skips empty groups
            b[66 + ib] |= (idx >> 8) << k
        b[74 + 4 * stored:78 + 4 * stored] = bytes(signs)
        stored += 1
        scales[ib] = scale
        max_scale = max_scale if max_scale > scale else scale
    if max_scale == 0:
        return b
    d = F(max_scale / F(31))
    put16(b, 0, to_half(F(d * F(1.033))))
    id_ = F(F(1) / d)
    for ib in range(0, 8, 2):
        b[106 + ib // 2] = sub_scale(id_, scales[ib], 15) | (sub_scale(id_, scales[ib + 1], 15) << 4)
    return b


# ---------------------------------------------------------------------------- IQ1
XP = [F(F(-1) + DELTA), DELTA, F(F(1) + DELTA)]
XM = [F(F(-1) - DELTA), F(-DELTA), F(F(1) - DELTA)]


def iq1_neighbour(g, u, xb, w, scale, xx):
    best_d2, best = FLT_MAX, -1
    for j in g.neighbours(u):
        d2 = F(0)
        for i in range(8):
            diff = F(F(scale * xx[(int(g.points[j][i]) - 1) // 2]) - xb[i])
            d2 = F(d2 + F(F(w[i] * diff) * diff))
        if d2 < best_d2:
            best_d2, best = d2, j
    assert best >= 0
    return best


def iq1_snap(g, xb, w, scale, xxs, L):
    """Grid indices of the groups of 8 and whether all were on the grid."""
    index, all_on = [], True
    for k in range(len(xxs)):
        u = sum(L[8 * k + j] << (2 * j) for j in range(8))
        if u in g.map:
            index.append(g.map[u])
        else:
            all_on = False
            index.append(iq1_neighbour(g, u, xb[8 * k:8 * k + 8], w[8 * k:8 * k + 8], scale, xxs[k]))
    if not all_on:
        sqx = sq2 = F(0)
        for k, idx in enumerate(index):
            for j in range(8):
                q = xxs[k][(int(g.points[idx][j]) - 1) // 2]
                sqx = F(sqx + F(F(w[8 * k + j] * q) * xb[8 * k + j]))
                sq2 = F(sq2 + F(F(w[8 * k + j] * q) * q))
        if sqx > 0 and sq2 > 0:
            scale = F(sqx / sq2)
    return index, scale


def sorted_idx(xb):
    return sorted(range(len(xb)), key=lambda i: (float(xb[i]), i))


def iq1_s(x, qw, G):
    g = G["iq1s"]
    sigma2 = sigma2_256(x, 2)
    b = bytearray(50)
    qh, scales, shifts, max_scale = [0] * 8, [F(0)] * 8, [1] * 8, F(0)
    for ib in range(8):
        xb = x[32 * ib:32 * ib + 32]
        w = weights(xb, qw[32 * ib:32 * ib + 32], sigma2)
        if fmax([abs(v) for v in xb]) < F(1e-12):
            continue
        idx = sorted_idx(xb)
        sx, sw = [F(0)], [F(0)]
        for i in idx:
            sx.append(F(sx[-1] + F(w[i] * xb[i])))
            sw.append(F(sw[-1] + w[i]))
        best, scale, best_split = F(-FLT_MAX), fmax([abs(v) for v in xb]), None
        for i1 in range(33):
            for i2 in range(i1, 33):
                for shift, v in ((1, XP), (-1, XM)):
                    sqx = F(F(F(F(sx[i1] - sx[0]) * v[0]) + F(F(sx[i2] - sx[i1]) * v[1])) + F(F(sx[32] - sx[i2]) * v[2]))
                    sq2 = F(F(F(F(F(sw[i1] - sw[0]) * v[0]) * v[0]) + F(F(F(sw[i2] - sw[i1]) * v[1]) * v[1]))
                            + F(F(F(sw[32] - sw[i2]) * v[2]) * v[2]))
                    if sq2 > 0 and F(sqx * sqx) > F(best * sq2):
                        scale = F(sqx / sq2)
                        best = F(scale * sqx)
                        best_split = (i1, i2, shift)
        if best_split is None:
            continue
        i1, i2, shift = best_split
        L = [0] * 32
        for j, i in enumerate(idx):
            L[i] = 0 if j < i1 else 1 if j < i2 else 2
        if scale < 0:
            L = [2 - l for l in L]
            scale, shift = F(-scale), -shift
        xx = XP if shift == 1 else XM
        index, scale = iq1_snap(g, xb, w, scale, [xx] * 4, L)
        h = 0
        for k in range(4):
            b[2 + 4 * ib + k] = index[k] & 255
            h |= (index[k] >> 8) << (3 * k)
        qh[ib], scales[ib], shifts[ib] = h, scale, shift
        max_scale = max_scale if max_scale > scale else scale
    if max_scale != 0:
        d = F(max_scale / F(15))
        put16(b, 0, to_half(F(d * F(1.125))))
        id_ = F(F(1) / d)
        for ib in range(8):
            l = sub_scale(id_, scales[ib], 7) | (8 if shifts[ib] == -1 else 0)
            qh[ib] |= l << 12
    b[34:50] = b"".join(v.to_bytes(2, "little") for v in qh)
    return b


def iq1m_xx(k, half):
    return XP if (k < 2 if half == 0 else k % 2 == 0) else XM


def iq1_m(x, qw, G):
    g = G["iq1s"]
    sigma2 = sigma2_256(x, 2)
    qs, qh = bytearray(32), bytearray(16)
    scales, shifts, max_scale = [F(0)] * 16, [0] * 16, F(0)

    def group_w(ib):
        xb = x[16 * ib:16 * ib + 16]
        return weights(xb, qw[16 * ib:16 * ib + 16], sigma2) if qw is not None else [F(v * v) for v in xb]

    cp1, cp2 = F(F(XP[0] * XP[0]) - F(XP[1] * XP[1])), F(F(XP[1] * XP[1]) - F(XP[2] * XP[2]))
    cm1, cm2 = F(F(XM[0] * XM[0]) - F(XM[1] * XM[1])), F(F(XM[1] * XM[1]) - F(XM[2] * XM[2]))
    for ib in range(16):
        xb, w = x[16 * ib:16 * ib + 16], group_w(ib)
        if fmax([abs(v) for v in xb]) < F(1e-7):
            continue
        idx = sorted_idx(xb)
        px, pw = [[F(0)], [F(0)]], [[F(0)], [F(0)]]
        for i in idx:
            h = 0 if i < 8 else 1
            px[h].append(F(px[h][-1] + F(w[i] * xb[i])))
            pw[h].append(F(pw[h][-1] + w[i]))
            px[1 - h].append(px[1 - h][-1])
            pw[1 - h].append(pw[1 - h][-1])
        best, scale, best_split = F(-FLT_MAX), fmax([abs(v) for v in xb]), None
        for i1 in range(17):
            for i2 in range(i1, 17):
                qxp, qxm, q2p, q2m = [], [], [], []
                for h in range(2):
                    sx = F(px[h][i1] + px[h][i2])
                    qxp.append(F(F(px[h][16] * XP[2]) - sx))
                    qxm.append(F(F(px[h][16] * XM[2]) - sx))
                    q2p.append(F(F(F(F(pw[h][16] * XP[2]) * XP[2]) + F(pw[h][i1] * cp1)) + F(pw[h][i2] * cp2)))
                    q2m.append(F(F(F(F(pw[h][16] * XM[2]) * XM[2]) + F(pw[h][i1] * cm1)) + F(pw[h][i2] * cm2)))
                sqx = [F(qxp[0] + qxp[1]), F(qxp[0] + qxm[1]), F(qxm[0] + qxp[1]), F(qxm[0] + qxm[1])]
                sq2 = [F(q2p[0] + q2p[1]), F(q2p[0] + q2m[1]), F(q2m[0] + q2p[1]), F(q2m[0] + q2m[1])]
                for k in range(4):
                    if sq2[k] > 0 and F(sqx[k] * sqx[k]) > F(best * sq2[k]):
                        scale = F(sqx[k] / sq2[k])
                        best = F(scale * sqx[k])
                        best_split = (i1, i2, k)
        if best_split is None:
            continue
        i1, i2, bk = best_split
        L = [0] * 16
        for j, i in enumerate(idx):
            L[i] = 0 if j < i1 else 1 if j < i2 else 2
        if scale < 0:
            L = [2 - l for l in L]
            scale, bk = F(-scale), 3 - bk
        index, scale = iq1_snap(g, xb, w, scale, [iq1m_xx(bk, 0), iq1m_xx(bk, 1)], L)
        qs[2 * ib], qs[2 * ib + 1] = index[0] & 255, index[1] & 255
        qh[ib] = (index[0] >> 8) | ((index[1] >> 8) << 4)
        scales[ib], shifts[ib] = scale, bk
        max_scale = max_scale if max_scale > scale else scale
    b = bytearray(56)
    if max_scale == 0:
        return b
    sc = [0] * 4
    d = F(max_scale / F(15))
    id_ = F(F(1) / d)
    sqx = sq2 = F(0)
    for ib in range(16):
        l = sub_scale(id_, scales[ib], 7)
        sc[ib // 4] |= l << (3 * (ib % 4))
        qh[ib] |= (0x00, 0x80, 0x08, 0x88)[shifts[ib]]
        xb, w = x[16 * ib:16 * ib + 16], group_w(ib)
        for k in range(2):
            xx = iq1m_xx(shifts[ib], k)
            gi = qs[2 * ib + k] + ((qh[ib] << (8 - 4 * k)) & 0x700)
            for j in range(8):
                q = F(xx[(int(g.points[gi][j]) - 1) // 2] * F(2 * l + 1))
                sqx = F(sqx + F(F(w[8 * k + j] * q) * xb[8 * k + j]))
                sq2 = F(sq2 + F(F(w[8 * k + j] * q) * q))
    if sq2 > 0:
        d = F(sqx / sq2)
    s = to_half(F(d * F(1.1125)))
    sc[0] |= (s & 0x000F) << 12
    sc[1] |= (s & 0x00F0) << 8
    sc[2] |= (s & 0x0F00) << 4
    sc[3] |= s & 0xF000
    return qs + qh + b"".join(v.to_bytes(2, "little") for v in sc)


# name: (function(x[256], importance or None, grids), importance required)
GRID_QUANTIZERS = {
    "iq2_xxs": (iq2_xxs, True), "iq2_xs": (iq2_xs, True), "iq2_s": (iq2_s, False),
    "iq3_xxs": (iq3_xxs, False), "iq3_s": (iq3_s, False), "iq1_s": (iq1_s, True), "iq1_m": (iq1_m, False),
}
