#!/usr/bin/env bash
# tests/server/fairness.sh - the fairness scenario for the perf gate: fairness.sh BUILD_DIR OUT.json
# [fairness.py flags]. Defaults are the CPU/CI scale (see tests/server/CMakeLists.txt) with the
# server's default --prefill-yield and --itl-budget; on a GPU pass e.g. --prompt-tokens 8000
# --sessions 8 --server-args "--backend cuda".
set -euo pipefail
build="$1"; out="$2"; shift 2
here="$(cd "$(dirname "$0")" && pwd)"
/usr/bin/python3 "$here/fairness.py" --build-dir "$build" --prompt-tokens 400 --sessions 4 --prefill-yield 128 \
  --server-args "--threads 1" "$@" > "$out"
cat "$out"
