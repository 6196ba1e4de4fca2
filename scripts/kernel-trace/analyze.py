#!/usr/bin/env python3
"""scripts/kernel-trace/analyze.py TRACE [--demangled] [--layers N] - where a step's time goes, from cupti_trace.cpp's
output. A step ends at logits_top_merge_kernel; steps are grouped by their kernel count and their
rows (the embed kernel's grid). For each launch, its increment is end - (previous launch's end):
with PDL a launch starts early, so its own duration overstates it, and the increments add up to
the step. Steps of up to 64 rows whose launches are the model's N layers (default 48, qwen3-30b-a3b)
plus five or six (embed, norm, [digits,] head, two summary launches): for each launch position
within a layer (a row for each kernel a position takes, where layers differ), its median increment,
head start and own time; other steps: the median per step of each kernel family's summed
increments. A head start is how long before its predecessor's end a launch began (PDL lets its
blocks start early where the GPU has room); its own time runs from its start to its end."""
import collections
import re
import statistics as st
import subprocess
import sys


def load(path, demangled):
    text = open(path).read()
    if not demangled:
        try:
            text = subprocess.run(["c++filt"], input=text, capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            pass
    recs = []
    for line in text.splitlines():
        p = line.split(" ", 6)
        if len(p) == 7:
            recs.append((int(p[0]), int(p[1]), int(p[3]), int(p[4]), int(p[5]), p[6]))
    recs.sort()
    return recs


def split_steps(recs):
    """The launches of each step: a step ends at logits_top_merge_kernel."""
    steps, cur = [], []
    for r in recs:
        cur.append(r)
        if "logits_top_merge" in r[5]:
            steps.append(cur)
            cur = []
    return steps


def short(name):
    m = re.search(r"(\w+_kernel\w*)", name)
    base = m.group(1) if m else name[:40]
    t = re.search(r"kernel[^<(]*<([^()]*?)>\(", name)
    return base + ("<" + t.group(1)[:40] + ">" if t else "")


def main():
    recs = load(sys.argv[1], "--demangled" in sys.argv)
    layers = int(sys.argv[sys.argv.index("--layers") + 1]) if "--layers" in sys.argv else 48
    steps = split_steps(recs)
    groups = collections.defaultdict(list)
    for s in steps:
        emb = [r for r in s if "embed_kernel" in r[5]]
        groups[(len(s), emb[0][2] if emb else -1)].append(s)
    for (count, rows), ss in sorted(groups.items()):
        if len(ss) < 2:
            continue
        ss = ss[2:] if len(ss) > 4 else ss  # warm-up steps out
        span = st.median(s[-1][1] - s[0][0] for s in ss) / 1e3
        print(f"== steps of {count} launches, {rows} rows: {len(ss)} steps, median span {span:.1f} us")
        # The layers start after the embedding and its norm; the head's launches follow them: three or
        # four (a head on digits quantises its rows first), the summaries' two among them.
        per = next(((count - 2 - tail) // layers for tail in (3, 4) if (count - 2 - tail) % layers == 0), 0)
        if per and rows <= 64:
            # Keyed by position and kernel: layers of two kinds (a Q4_K_M file's Q6_K down in half of
            # them) get a row each at the positions where they differ, with their count of layers.
            incs = collections.defaultdict(list)
            lead = collections.defaultdict(list)
            own = collections.defaultdict(list)
            for s in ss:
                for i in range(2, 2 + layers * per):
                    r = s[i]
                    key = ((i - 2) % per, f"{short(r[5])} g{r[2]}x{r[3]} b{r[4]}")
                    incs[key].append(r[1] - s[i - 1][1])
                    lead[key].append(s[i - 1][1] - r[0])
                    own[key].append(r[1] - r[0])
            total = 0.0
            print("  pos  increment | starts early by, lasts (median us)")
            for key in sorted(incs):
                pos, label = key
                n_layers = len(incs[key]) // len(ss)
                m = st.median(incs[key]) / 1e3
                total += m * n_layers / layers
                kind = "" if n_layers == layers else f"  ({n_layers} layers)"
                early, lasts = st.median(lead[key]) / 1e3, st.median(own[key]) / 1e3
                print(f"  {pos:2d}  {m:7.2f} us | {early:6.2f} {lasts:6.2f}  {label}{kind}")
            print(f"  a layer: {total:.2f} us")
            continue
        fam = collections.defaultdict(list)
        lead = collections.defaultdict(list)  # per launch: how long before the previous launch's end it started
        own = collections.defaultdict(list)   # per launch: its own start-to-end duration
        for s in ss:
            acc = collections.Counter()
            for i, r in enumerate(s):
                k = f"{short(r[5])} g{r[2]}x{r[3]} b{r[4]}"
                acc[k] += r[1] - (s[i - 1][1] if i else r[0])
                if i:
                    lead[k].append(s[i - 1][1] - r[0])
                own[k].append(r[1] - r[0])
            for k, v in acc.items():
                fam[k].append(v)
        print("     a step (us)  | a launch: starts early by, lasts (median us)")
        for k, v in sorted(fam.items(), key=lambda kv: -st.median(kv[1]))[:20]:
            early = f"{st.median(lead[k]) / 1e3:6.2f}" if lead[k] else "     -"
            print(f"  {st.median(v) / 1e3:10.1f} us  | {early} {st.median(own[k]) / 1e3:7.2f}  {k[:100]}")


if __name__ == "__main__":
    main()
