#!/usr/bin/env python3
"""tests/tools/test_ab_script.py AB_SH - scripts/ab.sh against a made-up tandem binary.

The fake binary answers `logits` with JSON that depends on an environment variable (so a variant's
switch shows in its hash) and `bench` with decode lines whose tok/s count the bench calls made so
far (so the order in which variants ran, and each variant's range over runs, are known exactly).
Checked: the hashes (equal where the bits are, different where the switch changes them, "failed"
where the binary fails), the variants alternating within each run, the short and long benches'
flags, the ranges, the usage text, and clear errors for bad arguments."""
import os
import re
import subprocess
import sys
import tempfile

ab = sys.argv[1]
FAKE = r'''#!/usr/bin/env bash
counter=$(dirname "$0")/count
case "$1" in
logits) [ -n "${FAKE_FAIL:-}" ] && exit 1; echo "{\"logits\": [1.5], \"decode_logits\": [[${FAKE_BITS:-0}]], \"args\": \"$*\"}" ;;
bench)
    n=$(( $(cat "$counter" 2>/dev/null || echo 0) + 1 )); echo $n > "$counter"
    echo "$*" >> "$(dirname "$0")/bench_args"
    sessions=""; prev=""
    for a in "$@"; do [ "$prev" = --sessions ] && sessions=$a; prev=$a; done
    for s in ${sessions//,/ }; do
        printf 'decode    %s sessions      2.00 ms/step      %d.0 tok/s aggregate\n' "$s" $((100 * s + n))
    done ;;
*) exit 3 ;;
esac
'''


def run(args):
    return subprocess.run(['bash', ab] + args, capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:
    fake = os.path.join(tmp, 'tandem')
    with open(fake, 'w') as f:
        f.write(FAKE)
    os.chmod(fake, 0o755)
    model = os.path.join(tmp, 'm.gguf')
    open(model, 'w').close()

    out = run(['-m', model, '--runs', '2', '--short', '1,16', '--long', '16',
               f'a={fake}', f'b={fake}', f'c={fake}:FAKE_BITS=7'])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    hashes = {m.group(1): m.group(2) for m in (re.match(r'hash (\w+): (.*)', l) for l in lines) if m}
    assert set(hashes) == {'a', 'b', 'c'}, lines
    assert hashes['a'] == hashes['b'] != hashes['c'], hashes
    # Benches in order: run 1 a short, a long, b short, b long, c ...; run 2 the same (benches 7-12).
    order = [l for l in lines if re.match(r'(short|long) \d', l)]
    assert order == [
        'short 1 a: 1=101.0 16=1601.0', 'long 1 a: 16=1602.0', 'short 1 b: 1=103.0 16=1603.0', 'long 1 b: 16=1604.0',
        'short 1 c: 1=105.0 16=1605.0', 'long 1 c: 16=1606.0', 'short 2 a: 1=107.0 16=1607.0', 'long 2 a: 16=1608.0',
        'short 2 b: 1=109.0 16=1609.0', 'long 2 b: 16=1610.0', 'short 2 c: 1=111.0 16=1611.0', 'long 2 c: 16=1612.0',
    ], order
    ranges = lines[lines.index('== range over 2 runs (tok/s aggregate, min-max)') + 1:]
    assert ranges[0] == 'short a: 1=101.0-107.0 16=1,601.0-1,607.0', ranges
    assert ranges[1] == 'long  a: 16=1,602.0-1,608.0', ranges
    assert len(ranges) == 6, ranges
    bench_args = open(os.path.join(tmp, 'bench_args')).read().splitlines()
    assert '--decode-prompt 4000' in bench_args[1] and '--kv-type f16' in bench_args[1] and '--ctx 32768' in bench_args[1]
    assert '--prompt 0' in bench_args[0] and '--kv-type' not in bench_args[0]

    # A variant whose logits fail shows "failed", not the hash of an empty output.
    out = run(['-m', model, '--runs', '1', '--short', '1', f'x={fake}:FAKE_FAIL=1'])
    assert out.returncode == 0 and 'hash x: f32 failed f16 failed long-f16 failed' in out.stdout, out.stdout

    # Bad arguments: a clear message and exit status 2.
    for args, words in [([f'a={fake}'], '-m MODEL is required'),
                        (['-m', model], 'at least one NAME=BINARY'),
                        (['-m', model, f'a={tmp}/none'], 'is not an executable'),
                        (['-m', model, '--runs', '0', f'a={fake}'], '--runs must be a positive integer'),
                        (['-m', model, 'oops'], "unknown argument 'oops'"),
                        (['-m', model, f'a={fake}', '--runs'], '--runs needs a value')]:
        bad = run(args)
        assert bad.returncode == 2 and words in bad.stderr, (args, bad.returncode, bad.stderr)
    # The usage text: the header comment, without the code after it.
    usage = run(['--help'])
    assert usage.returncode == 0 and 'usage: scripts/ab.sh -m MODEL' in usage.stdout and 'set -e' not in usage.stdout, usage.stdout
print("ab.sh: ok")
