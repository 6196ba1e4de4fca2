#!/usr/bin/env python3
"""tests/tools/test_sass_round_trips.py SCRIPT_PY - scripts/sass_round_trips.py on made-up SASS.

Six functions in cuobjdump's layout: one that adds each group's loads before loading the next
group (a wait point a group, like a routing kernel consuming its logits group by group; a store
of a loaded value waits too), one that loads everything first (one wait point; a 64- and a
128-bit load), one whose load is never read (none; a copy into shared memory, LDGSTS, is not a
register load), one that writes a loaded register again before reading it (the write waits as a
read would), one past address 0xffff (the earliest load found by value), and a branch diamond
whose one side loads a register the other side writes (no wait there: the sides are different
paths; the read after the join waits). The counts, the order and the addresses must come out
exactly."""
import subprocess
import sys
import tempfile

SASS = """
        code for sm_90a
                Function : serial_kernel
        .headerflags    @"EF_CUDA_ACCELERATORS EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                  /* 0x00000a00ff017b82 */
                                                                            /* 0x000fe20000000800 */
        /*0010*/              @P0  LDG.E R13, desc[UR12][R10.64] ;        /* 0x0000000c0a0d0981 */
        /*0020*/              @P1  LDG.E R14, desc[UR12][R4.64] ;         /* 0x0000000c040e1981 */
        /*0030*/              @P1  FADD R13, R13, R14 ;                   /* 0x0000000e0d0d1221 */
        /*0040*/                   LDG.E R12, desc[UR12][R10.64+0x80] ;   /* 0x0000800c0a0c0981 */
        /*0050*/                   LDG.E.64 R16, desc[UR12][R4.64+0x80] ; /* 0x0000800c04101981 */
        /*0060*/                   FADD R12, R12, R17 ;                   /* 0x0000000e0d0d1221 */
        /*0070*/                   LDG.E R20, desc[UR12][R8.64] ;         /* 0x0000000c08145981 */
        /*0080*/                   STG.E desc[UR12][R6.64], R20 ;         /* 0x0000001308007986 */
        /*0090*/                   EXIT ;                                 /* 0x000000000000794d */
                Function : batched_kernel
        /*0000*/                   LDG.E R13, desc[UR12][R10.64] ;        /* 0x0000000c0a0d0981 */
        /*0010*/                   LDG.E R14, desc[UR12][R10.64+0x80] ;   /* 0x0000000c0a0d0981 */
        /*0020*/                   LDG.E.128 R16, desc[UR12][R10.64+0x100] ; /* 0x0000000c0a0d0981 */
        /*0030*/                   IMAD.MOV.U32 R2, RZ, RZ, R3 ;          /* 0x000000ffff0d7224 */
        /*0040*/                   FADD R13, R13, R19 ;                   /* 0x0000000e0d0d1221 */
        /*0050*/                   FADD R13, R13, R14 ;                   /* 0x0000000e0d0d1221 */
        /*0060*/                   EXIT ;                                 /* 0x000000000000794d */
                Function : unread_kernel
        /*0000*/                   LDG.E R13, desc[UR12][R10.64] ;        /* 0x0000000c0a0d0981 */
        /*0010*/                   ISETP.GE.AND P0, PT, R12, 0x1, PT ;    /* 0x000000010c00780c */
        /*0020*/                   BRA 0x40 ;                             /* 0x000000000000794d */
        /*0030*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR12][R10.64] ; /* 0x0000000c0a0d0981 */
        /*0040*/                   LDGDEPBAR ;                            /* 0x000000000000794d */
        /*0050*/                   EXIT ;                                 /* 0x000000000000794d */
                Function : rewrite_kernel
        /*0000*/                   LDG.E R13, desc[UR12][R10.64] ;        /* 0x0000000c0a0d0981 */
        /*0010*/                   MOV R13, 0xff800000 ;                  /* 0xff800000000e7802 */
        /*0020*/                   EXIT ;                                 /* 0x000000000000794d */
                Function : long_kernel
        /*9fc0*/                   LDG.E R20, desc[UR12][R10.64] ;        /* 0x0000000c0a0d0981 */
        /*10a40*/                  LDG.E R21, desc[UR12][R10.64+0x4] ;    /* 0x0000000c0a0d0981 */
        /*10a50*/                  FADD R22, R21, R20 ;                   /* 0x0000000e0d0d1221 */
                Function : diamond_kernel
        /*0000*/              @!P0 BRA 0x30 ;                             /* 0x0000000000148947 */
        /*0010*/                   LDG.E R5, desc[UR12][R2.64] ;          /* 0x0000000c02057981 */
        /*0020*/                   BRA 0x40 ;                             /* 0x0000000000047947 */
        /*0030*/                   LDS R5, [R4] ;                         /* 0x0000000004057984 */
        /*0040*/                   FADD R6, R5, R5 ;                      /* 0x0000000505067221 */
        /*0050*/                   EXIT ;                                 /* 0x000000000000794d */
"""


def main():
    script = sys.argv[1]
    with tempfile.NamedTemporaryFile('w', suffix='.sass', delete=False) as f:
        f.write(SASS)
        path = f.name
    out = subprocess.run([sys.executable, script, path, '--list'], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    summary = {line.split()[-1]: (int(line.split()[0]), int(line.split()[3])) for line in lines if 'wait points' in line}
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    check(summary.get('serial_kernel') == (3, 5), f'serial_kernel: 3 wait points, 5 loads, got {summary.get("serial_kernel")}')
    check(summary.get('batched_kernel') == (1, 3), f'batched_kernel: 1 wait point, 3 loads, got {summary.get("batched_kernel")}')
    check(summary.get('unread_kernel') == (0, 1), f'unread_kernel: no wait point, 1 load, got {summary.get("unread_kernel")}')
    check(summary.get('rewrite_kernel') == (1, 1), f'rewrite_kernel: 1 wait point, 1 load, got {summary.get("rewrite_kernel")}')
    # Most waits first, and each wait names the earliest load it waits for.
    names = [line.split()[-1] for line in lines if 'wait points' in line]
    check(names[0] == 'serial_kernel' and names[-1] == 'unread_kernel', f'order by wait points, got {names}')
    waits = [line.split() for line in lines if line.startswith('       ')]
    check([w[0] for w in waits][:3] == ['0030', '0060', '0080'], f'wait addresses, got {[w[0] for w in waits]}')
    # Each wait names the earliest load in flight it reads (0040 for R12, not 0050 for R17).
    check([w[-1].rstrip(')') for w in waits][:3] == ['0010', '0040', '0070'], 'the loads waited for')
    # Addresses past 0xffff: the earliest load is found by value, not by the text of its address.
    long_wait = [w for w in waits if w[0] == '10a50']
    check(len(long_wait) == 1 and long_wait[0][-1].rstrip(')') == '9fc0', 'earliest load past 0xffff')
    # A diamond: the other side's write is no wait; the read after the join waits for the load.
    check(summary.get('diamond_kernel') == (1, 1), f'diamond_kernel: 1 wait point, 1 load, got {summary.get("diamond_kernel")}')
    diamond = [w for w in waits if w[0] in ('0030', '0040') and w[1] in ('LDS', 'FADD') and 'R5,' in ' '.join(w)]
    check([w[0] for w in diamond] == ['0040'] and diamond[0][-1].rstrip(')') == '0010', f'diamond wait at 0040, got {diamond}')
    # A name filter.
    only = subprocess.run([sys.executable, script, path, 'batched'], capture_output=True, text=True, check=True).stdout
    check(only.count('wait points') == 1 and 'batched_kernel' in only, 'NAME_REGEX filter')
    if failures:
        print(out)
        sys.exit('FAILED: ' + '; '.join(failures))
    print('sass_round_trips: all checks passed')


if __name__ == '__main__':
    main()
