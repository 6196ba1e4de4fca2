#!/usr/bin/env python3
"""tests/tools/test_logits_cli.py TANDEM - `tandem logits --decode-logits` on a tiny synthetic model.

The flag exists for bitwise A/B checks of the decode path (the prompt's last logits alone go through
the prompt path only). Checked on the CPU backend: one decode row per greedy token after the first,
each as wide as the prompt's logits, each step's argmax the next greedy token, the rows not all
equal (the steps see different tokens), and the flag refused without --json."""
import json
import subprocess
import sys
import tempfile

tandem = sys.argv[1]
with tempfile.TemporaryDirectory() as tmp:
    model = f"{tmp}/tiny.gguf"
    subprocess.run([tandem, "synth", "--preset", "tiny", "--out", model], check=True, capture_output=True)
    base = [tandem, "logits", "-m", model, "--backend", "cpu", "--ids", "1,2,3,4,5", "--greedy", "4"]
    out = json.loads(subprocess.run(base + ["--json", "--decode-logits"], check=True, capture_output=True, text=True).stdout)
    greedy, rows, last = out["greedy"], out["decode_logits"], out["logits"]
    assert len(greedy) == 4, greedy
    assert len(rows) == 3, len(rows)
    for i, row in enumerate(rows):
        assert len(row) == len(last), (i, len(row), len(last))
        best = max(range(len(row)), key=lambda j: row[j])
        assert best == greedy[i + 1], (i, best, greedy)
    assert any(rows[i] != rows[0] for i in range(1, len(rows))), "every decode step gave the same logits"
    plain = json.loads(subprocess.run(base + ["--json"], check=True, capture_output=True, text=True).stdout)
    assert "decode_logits" not in plain and plain["logits"] == last and plain["greedy"] == greedy
    bad = subprocess.run(base + ["--decode-logits"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--decode-logits needs --json" in bad.stderr, (bad.returncode, bad.stderr)
print("logits cli: ok")
