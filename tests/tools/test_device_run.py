#!/usr/bin/env python3
"""tests/tools/test_device_run.py DEVICE_RUN_SH SOURCE_DIR - scripts/device-run.sh against made-up programs.

Every program the script runs (tandem, the test_cuda_* tests, nvidia-smi, compute-sanitizer) is a
stub that logs its name, arguments and LD_LIBRARY_PATH. Checked: with BIN_DIR a build tree the
tests are found under tests/AREA/, with BIN_DIR a flat folder beside it; LIB_DIR (default
BIN_DIR/lib) leads LD_LIBRARY_PATH; every test of `tests` mode runs, the sanitizers on the same
programs; a missing program shows as a failed row of the summary, not as a stop."""
import os
import subprocess
import sys
import tempfile

script, source = sys.argv[1], sys.argv[2]
STUB = '''#!/bin/sh
echo "$(basename "$0") $* LD=$LD_LIBRARY_PATH" >> "$STUB_LOG"
echo "test cases: 1 | 1 passed"
'''
TESTS = {  # program: its folder in a build tree
    'test_cuda_kernels': 'kernels', 'test_cuda_matmul_prompt': 'kernels', 'test_cuda_attention_prompt': 'kernels',
    'test_cuda_logits_top': 'kernels', 'test_cuda_logits_draw': 'kernels', 'test_cuda_matvec_digits': 'kernels',
    'test_cuda_matmul_digits': 'kernels', 'test_cuda_engine': 'gpu', 'test_cuda_placement': 'multi_device',
}


def stub(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(STUB)
    os.chmod(path, 0o755)


def run(tmp, mode, env_extra):
    log = os.path.join(tmp, 'log')
    if os.path.exists(log):
        os.remove(log)
    out = os.path.join(tmp, 'out-' + mode)
    env = dict(os.environ, STUB_LOG=log, OUT=out, PATH=os.path.join(tmp, 'path') + ':' + os.environ['PATH'])
    env.pop('LIB_DIR', None)
    env.pop('BIN_DIR', None)
    env.update(env_extra)
    r = subprocess.run(['bash', script, mode], cwd=source, env=env, capture_output=True, text=True, timeout=60)
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    return r, lines


with tempfile.TemporaryDirectory() as tmp:
    for tool in ('nvidia-smi', 'compute-sanitizer'):
        stub(os.path.join(tmp, 'path', tool))
    tree = os.path.join(tmp, 'build')
    stub(os.path.join(tree, 'tandem'))
    for name, area in TESTS.items():
        stub(os.path.join(tree, 'tests', area, name))

    # A build tree: each test found in its area's folder; LD_LIBRARY_PATH led by BIN_DIR/lib.
    r, lines = run(tmp, 'tests', {'BIN_DIR': tree})
    assert r.returncode == 0, r.stderr
    ran = [l for l in lines if l.startswith('test_cuda_')]
    assert {l.split()[0] for l in ran} == set(TESTS) - {'test_cuda_placement'}, lines
    assert all(l.split(' LD=')[1].startswith(os.path.join(tree, 'lib') + ':') for l in lines), lines
    sanitized = [l for l in lines if l.startswith('compute-sanitizer')]
    assert len(sanitized) == 11, sanitized
    for l in sanitized:
        prog = next(w for w in l.split() if 'test_cuda_' in w)
        name = os.path.basename(prog)
        assert prog == os.path.join(tree, 'tests', TESTS[name], name), l
    assert 'racecheck' in ' '.join(sanitized) and 'synccheck' in ' '.join(sanitized), sanitized
    summary = r.stdout[r.stdout.index('== summary'):]
    assert summary.count('rc=0') == 19 and 'rc=1' not in summary, summary

    # A flat folder (a relative BIN_DIR, from the source root) with its own LIB_DIR; one test missing.
    flat = os.path.join(tmp, 'flat')
    stub(os.path.join(flat, 'tandem'))
    for name in TESTS:
        if name != 'test_cuda_engine':
            stub(os.path.join(flat, name))
    libs = os.path.join(tmp, 'libs')
    r, lines = run(tmp, 'draws', {'BIN_DIR': os.path.relpath(flat, source), 'LIB_DIR': libs})
    assert r.returncode == 0, r.stderr
    assert all(l.split(' LD=')[1].startswith(libs + ':') for l in lines), lines
    assert any(l.startswith('test_cuda_placement [draw]') for l in lines), lines
    # The script joins the relative BIN_DIR to the source root as given ('root/../elsewhere/...').
    want = os.path.join(flat, 'test_cuda_logits_draw')
    assert any(l.startswith('compute-sanitizer') and any(os.path.normpath(w) == want for w in l.split()) for l in lines), lines
    benches = [l for l in lines if l.startswith('tandem bench')]
    assert len(benches) == 7 and all('--backend cuda' in l for l in benches), benches
    engine_row = next(l for l in r.stdout.splitlines() if l.startswith('engine_draw'))
    assert 'rc=127' in engine_row, engine_row
    assert 'No such file' in open(os.path.join(tmp, 'out-draws', 'engine_draw.log')).read()

print('device-run.sh: programs found in build trees and flat folders; LIB_DIR leads; missing ones fail their row')
