#!/usr/bin/env python3
"""scripts/ncu_source_stalls.py - where a kernel's warps wait, from ncu's per-instruction source view.

On the GPU machine (one kernel, sampled with its SASS):
    ncu --kernel-name-base demangled --kernel-name "regex:NAME" --launch-skip N --launch-count 1 \\
        --section SourceCounters --section WarpStateStats -o /tmp/k CMD...
    ncu -i /tmp/k.ncu-rep --page source --csv --print-source sass > k.csv
Here:
    python3 scripts/ncu_source_stalls.py k.csv [TOP] [--marks]
prints the share of warp-stall samples by stall reason and by opcode, the TOP instructions with the
most samples (with their reasons), and with --marks the running share at each barrier, copy, ldmatrix
and branch instruction, which splits a kernel's loop into its phases.
"""
import collections
import csv
import gzip
import sys


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    marks = '--marks' in sys.argv
    if not args:
        sys.exit(__doc__)
    path, top = args[0], int(args[1]) if len(args) > 1 else 20
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rt') as f:
        rows = list(csv.reader(f))
    header = next((i for i, r in enumerate(rows) if r and r[0] == 'Address'), None)
    if header is None:
        sys.exit(f"{path}: no SASS rows (did ncu profile a kernel? Its --kernel-name regex sees template "
                 "arguments written as (bool)1, (int)4: e.g. \"regex:NAME<.bool.1\")")
    hdr = rows[header]
    ix = {h: i for i, h in enumerate(hdr)}
    data = [r for r in rows[header + 1:] if len(r) >= len(hdr)]
    stall_cols = [h for h in hdr if h.startswith('stall_') and '(Not Issued)' not in h]

    def num(r, col):
        try:
            return int(r[ix[col]])
        except ValueError:
            return 0

    samples = sum(num(r, 'Warp Stall Sampling (All Samples)') for r in data)
    if samples == 0:
        sys.exit('no stall samples in ' + path)
    reasons, opcodes, insts = collections.Counter(), collections.Counter(), []
    for r in data:
        s = num(r, 'Warp Stall Sampling (All Samples)')
        words = r[ix['Source']].split()
        op = (words[1] if words and words[0].startswith('@') and len(words) > 1 else words[0] if words else '?').split('.')[0]
        opcodes[op] += s
        for c in stall_cols:
            reasons[c[6:]] += num(r, c)
        insts.append((s, r[ix['Address']], r[ix['Source']].strip(), {c[6:]: num(r, c) for c in stall_cols if num(r, c)}))
    print(f'{samples} samples, {sum(num(r, "Instructions Executed") for r in data)} warp instructions executed')
    print('reasons:', ', '.join(f'{k} {100 * v / samples:.1f}%' for k, v in reasons.most_common(10)))
    print('opcodes:', ', '.join(f'{k} {100 * v / samples:.1f}%' for k, v in opcodes.most_common(14)))
    for s, addr, src, why in sorted(insts, key=lambda x: -x[0])[:top]:
        print(f'{100 * s / samples:5.1f}% {addr[-6:]} {src[:64]:64s} {why}')
    if marks:
        running = 0
        for s, addr, src, _ in insts:
            running += s
            if any(k in src for k in ('BAR.', 'LDGSTS', 'DEPBAR', 'LDSM', 'UBLKCP', 'SYNCS', 'EXIT', 'BRA')):
                print(f'{addr[-6:]} {100 * running / samples:5.1f}%  {src[:64]}')


if __name__ == '__main__':
    main()
