#!/usr/bin/env python3
"""scripts/sass_round_trips.py - where a kernel's warps wait on global loads, read from its SASS.

A warp issues in order: an instruction that reads the destination of a global load still in flight
stalls the warp, and every load after it in program order waits too. So a loop or an unrolled body
that consumes each load before issuing the next pays one memory round trip per load instead of one
for all of them (e.g. a routing launch's logit loads, or a combine's slots, consumed one by one).
This script marks, in program order, each instruction that reads a register an earlier global
load (LDG, LD, a returning ATOMG) wrote and that no wait has covered yet: a "wait point". The
count along straight-line code is the number of dependent round trips there; inside a loop, the
body's wait points repeat every iteration.

On the GPU machine (cuobjdump ships with the CUDA toolkit there, not on the Debian build box):
    cuobjdump -sass build/tandem > tandem.sass          # or an object file, or a test binary
Here:
    python3 scripts/sass_round_trips.py tandem.sass [NAME_REGEX] [--list]
prints, for each function whose mangled name matches NAME_REGEX (default: all), its global loads
and wait points, most waits first; --list also prints each wait point (address, the instruction,
the address of the load it waits for).

A heuristic: code is read top to bottom along forward branches only: the loads in flight at an
address are those of every forward path into it (the fall-through, unless an unconditional BRA or
EXIT ends it, and each forward BRA to it), so the two sides of a branch diamond do not see each
other's loads; loops are not followed (a body's wait points repeat each iteration). A wait is
assumed to cover every load issued before it on its path, shared-memory loads are not counted
(tens of cycles, not hundreds), and predicated-off loads count as issued.
"""
import re
import sys

INSTR = re.compile(r'^\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?)\s*;')
FUNC = re.compile(r'^\s*Function\s*:\s*(\S+)')
REG = re.compile(r'(?<![A-Z_])R(\d+)(\.64|\.128)?')

GLOBAL_LOADS = ('LDG', 'LD.', 'ATOMG')
NOT_LOADS = ('LDGSTS', 'LDGDEPBAR')  # cp.async into shared memory and its commit: no register written
NO_DEST = ('ST', 'RED', 'BRA', 'BAR', 'EXIT', 'BSSY', 'BSYNC', 'WARPSYNC', 'CALL', 'RET', 'NOP', 'MEMBAR',
           'BPT', 'YIELD', 'ERRBAR', 'CCTL', 'ARRIVES', 'SYNCS', 'UBLKCP', 'UTMA', 'PREEXIT', 'ACQBULK',
           'DEPBAR', 'ELECT')


def regs_of(token):
    """Registers a SASS operand names (R4.64 is R4 and R5; RZ is none)."""
    out = []
    for m in REG.finditer(token):
        base = int(m.group(1))
        width = {'.64': 2, '.128': 4}.get(m.group(2) or '', 1)
        out.extend(base + i for i in range(width))
    return out


def dest_width(opcode):
    for suffix, w in (('.128', 4), ('.64', 2)):
        if suffix in opcode:
            return w
    return 1


def is_global_load(opcode):
    return (opcode.startswith(GLOBAL_LOADS) or opcode == 'LD') and not opcode.startswith(NOT_LOADS)


def merge(into, other):
    """Loads in flight on either path: each register's earliest load."""
    for r, a in other.items():
        if r not in into or int(a, 16) < int(into[r], 16):
            into[r] = a


def scan(lines):
    """[(name, loads, [(addr, text, load_addr), ...])] for each function of a cuobjdump listing."""
    funcs, name, loads, waits, pending = [], None, 0, [], {}
    arriving, live = {}, True  # forward branches' in-flight loads by target; whether the fall-through reaches here
    for line in lines:
        f = FUNC.match(line)
        if f:
            if name:
                funcs.append((name, loads, waits))
            name, loads, waits, pending, arriving, live = f.group(1), 0, [], {}, {}, True
            continue
        m = INSTR.match(line)
        if not m or not name:
            continue
        addr, pred, opcode, operands = m.group(1), m.group(2), m.group(3), m.group(4)
        at = int(addr, 16)
        if not live:
            pending = {}
        if at in arriving:
            merge(pending, arriving.pop(at))
        live = True
        ops = [o.strip() for o in operands.split(',')] if operands else []
        has_dest = bool(ops) and not opcode.startswith(NO_DEST) and ops[0].startswith('R') and ops[0] != 'RZ'
        dest = []
        if has_dest:
            base = regs_of(ops[0])
            dest = [base[0] + i for i in range(dest_width(opcode))] if base else []
        sources = [r for o in (ops[1:] if has_dest else ops) for r in regs_of(o)]
        hit = [pending[r] for r in sources + dest if r in pending]
        if hit:
            waits.append((addr, f'{opcode} {operands}'.strip(), min(hit, key=lambda a: int(a, 16))))
            pending = {}
        if is_global_load(opcode):
            loads += 1
            for r in dest:
                pending[r] = addr
        if opcode.startswith('BRA') and ops and re.fullmatch(r'0x[0-9a-f]+', ops[-1]):
            target = int(ops[-1], 16)
            if target > at:
                merge(arriving.setdefault(target, {}), pending)
            if not pred:
                live = False
        elif opcode.startswith(('EXIT', 'RET')) and not pred:
            live = False
    if name:
        funcs.append((name, loads, waits))
    return funcs


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    if not args:
        sys.exit(__doc__)
    pattern = re.compile(args[1]) if len(args) > 1 else None
    with open(args[0], errors='replace') as f:
        funcs = scan(f)
    funcs = [fn for fn in funcs if not pattern or pattern.search(fn[0])]
    if not funcs:
        sys.exit(f'{args[0]}: no function matched (is it cuobjdump -sass output?)')
    for name, loads, waits in sorted(funcs, key=lambda fn: -len(fn[2])):
        print(f'{len(waits):4} wait points {loads:4} global loads  {name}')
        if '--list' in sys.argv:
            for addr, text, load_addr in waits:
                print(f'       {addr}  {text[:70]:70}  (load at {load_addr})')


if __name__ == '__main__':
    main()
