#!/usr/bin/env python3
"""scripts/kernel-trace/gaps.py TRACE [--demangled] - when the GPU waited for the host, from cupti_trace.cpp's output.

analyze.py charges each launch with the time from the previous launch's end to its own end. Inside
a replayed graph that is the launch's own cost; in steps launched kernel by kernel from the host
(prompt steps of more than the graph rows) it also holds any time the GPU sat idle because the
host had not issued the launch yet, so a small kernel can look expensive. This script measures that
idle time: per group of steps (split at logits_top_merge_kernel, like analyze.py; a run of prompt
chunks that want no logits is one group), the span, the time no kernel ran, and the kernel families
the GPU was waiting for when it sat idle, each group's first step apart from the rest (a process's
first launches wait for CUDA's lazy module loading: a chunked prefill's first run can sit idle ~4% of
its span for it, where the later steps idle 0.1-0.7%)."""
import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from analyze import load, split_steps  # noqa: E402  (the same records and steps as analyze.py)


def family(name):
    m = re.search(r"(\w+_kernel)", name)
    return m.group(1) if m else name[:50]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    steps = split_steps(load(sys.argv[1], "--demangled" in sys.argv))
    groups = collections.defaultdict(list)
    for s in steps:
        groups[len(s)].append(s)
    for n, ss in sorted(groups.items()):
        # A group's first step is reported apart: a process's first launch of each kernel waits for
        # CUDA's lazy module loading (~35 ms over a first prefill on an H200), which is
        # not the steady state the later steps show.
        for label, part in (("first step", ss[:1]), (f"{len(ss) - 1} later steps", ss[1:])):
            if not part:
                continue
            span = idle = 0
            before = collections.Counter()
            for s in part:
                busy_until = s[0][0]
                for start, end, _gx, _gy, _bx, name in s:
                    if start > busy_until:
                        idle += start - busy_until
                        before[family(name)] += start - busy_until
                    busy_until = max(busy_until, end)
                span += busy_until - s[0][0]
            print(f"== {label} of {n} launches: span {span / 1e6:.2f} ms, GPU idle {idle / 1e6:.2f} ms "
                  f"({100.0 * idle / max(span, 1):.1f}%)")
            for k, v in before.most_common(8):
                print(f"   idle {v / 1e6:8.2f} ms before {k}")

if __name__ == "__main__":
    main()
