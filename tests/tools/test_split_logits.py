#!/usr/bin/env python3
"""tests/tools/test_split_logits.py TANDEM - a tiny synthetic model written whole and split into
three llama.cpp split files (--split-max-size) gives bitwise the same logits on the CPU engine,
opened by its first part; without a part it is refused, naming the missing file."""
import glob
import json
import os
import subprocess
import sys
import tempfile

tandem = sys.argv[1]


def logits(model):
    cmd = [tandem, "logits", "-m", model, "--backend", "cpu", "--ids", "1,2,3,4,5", "--greedy", "3", "--json"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


with tempfile.TemporaryDirectory() as tmp:
    whole, split = f"{tmp}/whole.gguf", f"{tmp}/split.gguf"
    synth = [tandem, "synth", "--preset", "tiny", "--seed", "7"]
    subprocess.run(synth + ["--out", whole], check=True, capture_output=True)
    # The smallest whole-megabyte limit that gives three parts.
    parts = []
    for mb in range(1, 64):
        for old in glob.glob(f"{tmp}/split-*-of-*.gguf"):
            os.remove(old)
        subprocess.run(synth + ["--out", split, "--split-max-size", f"{mb}M"], check=True, capture_output=True)
        parts = sorted(glob.glob(f"{tmp}/split-*-of-*.gguf"))
        if len(parts) <= 3:
            break
    assert len(parts) == 3, (os.path.getsize(whole), parts)
    a, b = logits(whole), logits(parts[0])
    assert a == b, "split model's logits differ from the unsplit model's"
    os.remove(parts[1])
    bad = subprocess.run([tandem, "logits", "-m", parts[0], "--backend", "cpu", "--ids", "1", "--json"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "00002-of-00003" in bad.stderr and "missing" in bad.stderr, bad.stderr
print("split logits: 1 passed, 0 failed")
