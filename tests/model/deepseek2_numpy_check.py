#!/usr/bin/env python3
# tests/model/deepseek2_numpy_check.py - the CPU engine's deepseek2 forward against an independent
# float64 NumPy forward written from the published DeepSeek-V2/V3 modeling (expanded attention,
# decompressed keys and values, interleaved rope, YaRN, grouped routing), on tiny synth files.
#     deepseek2_numpy_check.py TANDEM_BINARY SCRATCH_DIR
# Exits 77 (reported Skipped) when NumPy is missing.
"""Checks `tandem logits` on random f32 deepseek2 files against a float64 NumPy forward."""

import json
import math
import os
import struct
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("SKIP: python3-numpy is not installed")
    sys.exit(77)

GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path):
    """(metadata dict, {name: float64 array in numpy order}) of a GGUF v3 file of f32 tensors."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = buf[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            item, n = take("<I"), take("<Q")
            return [value(item) for _ in range(n)]
        return take(GGUF_SCALARS[t])

    if buf[:4] != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    pos = 4
    version, n_tensors, n_kv = take("<I"), take("<Q"), take("<Q")
    if version != 3:
        raise SystemExit(f"{path}: GGUF version {version}")
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        ne = [take("<Q") for _ in range(take("<I"))]
        infos.append((name, ne, take("<I"), take("<Q")))
    align = meta.get("general.alignment", 32)
    data = (pos + align - 1) // align * align
    tensors = {}
    for name, ne, ttype, off in infos:
        if ttype != 0:
            raise SystemExit(f"{path}: tensor {name} is not f32 (type {ttype}); synth the check's files as f32")
        count = int(np.prod(ne))
        arr = np.frombuffer(buf, dtype="<f4", count=count, offset=data + off)
        tensors[name] = arr.astype(np.float64).reshape(list(reversed(ne)))
    return meta, tensors


class DeepSeek2:
    """Float64 forward of a deepseek2 GGUF, following the Hugging Face DeepSeek modeling."""

    def __init__(self, meta, w):
        a = "deepseek2."
        self.w = w
        self.n_layer = meta[a + "block_count"]
        self.n_head = meta[a + "attention.head_count"]
        self.lora = meta[a + "attention.kv_lora_rank"]
        self.q_lora = meta.get(a + "attention.q_lora_rank", 0)
        self.rope = meta[a + "rope.dimension_count"]
        mla_form = a + "attention.key_length_mla" in meta
        self.dk = meta[a + ("attention.key_length_mla" if mla_form else "attention.key_length")]
        self.dv = meta[a + ("attention.value_length_mla" if mla_form else "attention.value_length")]
        self.nope = self.dk - self.rope
        self.eps = meta[a + "attention.layer_norm_rms_epsilon"]
        self.n_expert_used = meta[a + "expert_used_count"]
        self.n_dense = meta.get(a + "leading_dense_block_count", 0)
        self.sigmoid = meta.get(a + "expert_gating_func", 1) == 2
        self.norm_topk = meta.get(a + "expert_weights_norm", False)
        self.scale_w = meta.get(a + "expert_weights_scale", 1.0) or 1.0
        self.n_group = max(1, meta.get(a + "expert_group_count", 1))
        self.n_group_used = max(1, meta.get(a + "expert_group_used_count", 1))
        theta = meta[a + "rope.freq_base"]
        self.softmax_scale = 1.0 / math.sqrt(self.dk)
        inv = 1.0 / theta ** (np.arange(0, self.rope, 2, dtype=np.float64) / self.rope)
        if meta.get(a + "rope.scaling.type", "none") == "yarn":
            factor = meta[a + "rope.scaling.factor"]
            orig = meta[a + "rope.scaling.original_context_length"]
            fast = meta.get(a + "rope.scaling.yarn_beta_fast", 32.0)
            slow = meta.get(a + "rope.scaling.yarn_beta_slow", 1.0)

            def dim_of(rot):
                return self.rope * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))

            low, high = max(math.floor(dim_of(fast)), 0), min(math.ceil(dim_of(slow)), self.rope - 1)
            if low == high:
                high += 0.001
            ramp = np.clip((np.arange(self.rope // 2) - low) / (high - low), 0.0, 1.0)
            keep = 1.0 - ramp  # share of each pair's original frequency
            inv = inv / factor * (1.0 - keep) + inv * keep
            mscale_all = meta.get(a + "rope.scaling.yarn_log_multiplier", 0.0) / 0.1
            if mscale_all > 0 and factor > 1:
                m = 0.1 * mscale_all * math.log(factor) + 1.0
                self.softmax_scale *= m * m
        self.inv_freq = inv

    def rms(self, x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * g

    def rotate(self, x, positions):
        """x [T, H, rope]: pairs (2i, 2i+1) turned by position * inv_freq[i]."""
        ang = positions[:, None] * self.inv_freq[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = b * c + a * s
        return out

    def up_projection(self, p):
        """(W_UK [H, nope, lora], W_UV [H, dv, lora]) from attn_kv_b or attn_k_b/attn_v_b."""
        w = self.w
        if p + "attn_kv_b.weight" in w:
            kv_b = w[p + "attn_kv_b.weight"].reshape(self.n_head, self.nope + self.dv, self.lora)
            return kv_b[:, :self.nope, :], kv_b[:, self.nope:, :]
        return np.transpose(w[p + "attn_k_b.weight"], (0, 2, 1)), w[p + "attn_v_b.weight"]

    def attention(self, p, h, positions):
        w, t, nh = self.w, h.shape[0], self.n_head
        if self.q_lora:
            q = self.rms(h @ w[p + "attn_q_a.weight"].T, w[p + "attn_q_a_norm.weight"]) @ w[p + "attn_q_b.weight"].T
        else:
            q = h @ w[p + "attn_q.weight"].T
        q = q.reshape(t, nh, self.dk)
        ckv = h @ w[p + "attn_kv_a_mqa.weight"].T
        latent = self.rms(ckv[:, :self.lora], w[p + "attn_kv_a_norm.weight"])
        k_pe = self.rotate(ckv[:, None, self.lora:], positions)
        w_uk, w_uv = self.up_projection(p)
        k_nope = np.einsum("hjl,tl->thj", w_uk, latent)
        v = np.einsum("hil,tl->thi", w_uv, latent)
        q_full = np.concatenate([q[..., :self.nope], self.rotate(q[..., self.nope:], positions)], -1)
        k_full = np.concatenate([k_nope, np.broadcast_to(k_pe, (t, nh, self.rope))], -1)
        out = np.empty((t, nh, self.dv))
        mask = np.triu(np.full((t, t), -np.inf), 1)
        for hh in range(nh):
            s = q_full[:, hh] @ k_full[:, hh].T * self.softmax_scale + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            out[:, hh] = s @ v[:, hh]
        return out.reshape(t, nh * self.dv) @ w[p + "attn_output.weight"].T

    @staticmethod
    def swiglu(x, gate, up, down):
        g = x @ gate.T
        return (g / (1.0 + np.exp(-g)) * (x @ up.T)) @ down.T

    def route(self, p, h):
        """Per row: (expert ids, weights)."""
        w = self.w
        logits = h @ w[p + "ffn_gate_inp.weight"].T
        if self.sigmoid:
            scores = 1.0 / (1.0 + np.exp(-logits))
        else:
            scores = np.exp(logits - logits.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
        bias = w.get(p + "exp_probs_b.bias")
        sel = scores + bias if bias is not None else scores.copy()
        n_expert = scores.shape[1]
        per = n_expert // self.n_group
        out = []
        for r in range(h.shape[0]):
            s = sel[r].copy()
            if self.n_group > 1:
                groups = s.reshape(self.n_group, per)
                gscore = np.sort(groups, axis=1)[:, -1] + np.sort(groups, axis=1)[:, -2]
                keep = np.argsort(-gscore, kind="stable")[: self.n_group_used]
                masked = np.full(self.n_group, True)
                masked[keep] = False
                s[np.repeat(masked, per)] = -np.inf
            top = np.argsort(-s, kind="stable")[: self.n_expert_used]
            wt = scores[r, top]
            if self.norm_topk:
                wt = wt / wt.sum()
            out.append((top, wt * self.scale_w))
        return out

    def ffn(self, p, layer, h):
        w = self.w
        if layer < self.n_dense:
            return self.swiglu(h, w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"], w[p + "ffn_down.weight"])
        routed = np.zeros_like(h)
        gate, up, down = w[p + "ffn_gate_exps.weight"], w[p + "ffn_up_exps.weight"], w[p + "ffn_down_exps.weight"]
        for r, (top, wt) in enumerate(self.route(p, h)):
            for e, we in zip(top, wt):
                routed[r] += we * self.swiglu(h[r], gate[e], up[e], down[e])
        if p + "ffn_gate_shexp.weight" in w:
            routed += self.swiglu(h, w[p + "ffn_gate_shexp.weight"], w[p + "ffn_up_shexp.weight"],
                                  w[p + "ffn_down_shexp.weight"])
        return routed

    def logits(self, ids):
        w = self.w
        x = w["token_embd.weight"][ids]
        positions = np.arange(len(ids), dtype=np.float64)
        for layer in range(self.n_layer):
            p = f"blk.{layer}."
            x = x + self.attention(p, self.rms(x, w[p + "attn_norm.weight"]), positions)
            x = x + self.ffn(p, layer, self.rms(x, w[p + "ffn_norm.weight"]))
        head = w.get("output.weight", w["token_embd.weight"])
        return self.rms(x, w["output_norm.weight"]) @ head.T


def rel_l2(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def check(tandem, scratch, preset, extra, n_prompt, seed):
    name = preset + ("-kv_b" if extra else "")
    path = os.path.join(scratch, name + ".gguf")
    subprocess.run([tandem, "synth", "--preset", preset, "--type", "f32", "--out", path, "--seed", str(seed)] + extra,
                   check=True, capture_output=True)
    meta, tensors = read_gguf(path)
    model = DeepSeek2(meta, tensors)
    rng = np.random.default_rng(seed)
    ids = [int(v) for v in rng.integers(0, tensors["token_embd.weight"].shape[0], n_prompt)]
    n_greedy = 6
    run = subprocess.run([tandem, "logits", "-m", path, "--backend", "cpu", "--threads", "2", "--ids",
                          ",".join(map(str, ids)), "--greedy", str(n_greedy), "--json", "--decode-logits"],
                         check=True, capture_output=True, text=True)
    got = json.loads(run.stdout)
    failures = []
    ref = model.logits(ids)
    err = rel_l2(got["logits"], ref[-1])
    print(f"{name}: prompt of {n_prompt}: last-position logits rel L2 {err:.3e}")
    if err > 1e-4:
        failures.append(f"{name}: prompt logits rel L2 {err:.3e} > 1e-4")
    # Greedy decoding: each step's logits against the NumPy forward of the whole sequence so far.
    seq = list(ids)
    want = int(np.argmax(ref[-1]))
    for step, tok in enumerate(got["greedy"]):
        if tok != want:
            failures.append(f"{name}: greedy step {step}: engine {tok}, numpy {want}")
            break
        seq.append(tok)
        if step + 1 == len(got["greedy"]):
            break
        ref_step = model.logits(seq)[-1]
        err = rel_l2(got["decode_logits"][step], ref_step)
        print(f"{name}: decode step {step} (position {len(seq) - 1}) rel L2 {err:.3e}")
        if err > 1e-4:
            failures.append(f"{name}: decode step {step} rel L2 {err:.3e} > 1e-4")
        want = int(np.argmax(ref_step))
    return failures


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    tandem, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    failures = []
    failures += check(tandem, scratch, "tiny-deepseek-v3", [], 19, 3)
    failures += check(tandem, scratch, "tiny-deepseek-v2", [], 23, 4)
    failures += check(tandem, scratch, "tiny-deepseek-v2", ["--mla-kv-b"], 11, 5)
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
