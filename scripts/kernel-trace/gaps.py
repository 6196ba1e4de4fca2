#!/usr/bin/env python3
"""scripts/kernel-trace/gaps.py TRACE - when the GPU waited for the host, from cupti_trace.cpp's output.

analyze.py charges each launch with the time from the previous launch's end to its own end. Inside
a replayed graph that is the launch's own cost; in steps launched kernel by kernel from the host
(prompt steps of more than the graph rows) it also holds any time the GPU sat idle because the
host had not issued the launch yet, so a small kernel can look expensive. This script measures that
idle time: per group of steps (split at logits_top_merge_kernel, like analyze.py; a run of prompt
chunks that want no logits is one group), the span, the time no kernel ran, and the kernel families
the GPU was waiting for when it sat idle. Session 19 found a chunked prefill idle ~7% of its span."""
import collections
import re
import sys


def family(name):
    m = re.search(r"(\w+_kernel)", name)
    return m.group(1) if m else name[:50]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    recs = []
    for line in open(sys.argv[1]):
        p = line.split(" ", 6)
        if len(p) == 7:
            recs.append((int(p[0]), int(p[1]), p[6].strip()))
    recs.sort()
    steps, cur = [], []
    for r in recs:
        cur.append(r)
        if "logits_top_merge" in r[2]:
            steps.append(cur)
            cur = []
    groups = collections.defaultdict(list)
    for s in steps:
        groups[len(s)].append(s)
    for n, ss in sorted(groups.items()):
        span = idle = 0
        before = collections.Counter()
        for s in ss:
            busy_until = s[0][0]
            for start, end, name in s:
                if start > busy_until:
                    idle += start - busy_until
                    before[family(name)] += start - busy_until
                busy_until = max(busy_until, end)
            span += busy_until - s[0][0]
        print(f"== {len(ss)} steps of {n} launches: span {span / 1e6:.2f} ms, GPU idle {idle / 1e6:.2f} ms "
              f"({100.0 * idle / max(span, 1):.1f}%)")
        for k, v in before.most_common(8):
            print(f"   idle {v / 1e6:8.2f} ms before {k}")


if __name__ == "__main__":
    main()
