#!/usr/bin/env bash
# scripts/device-run.sh - what runs on the GPU machine (from the repo root, binaries carried in
# carry-cuda/): the [gpu] tests, compute-sanitizer on the kernel tests, the model comparison and
# `tandem bench` on the qwen3-30b-a3b Q4_K synth model. Logs under $OUT; a short table last.
#   usage: scripts/device-run.sh [tests|bench|all] [extra bench flags...]
set -u
mode=${1:-all}
shift || true
carry=${CARRY:-carry-cuda}
out=${OUT:-/tmp/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$carry/lib:${LD_LIBRARY_PATH:-}"
# The tests find fixtures under the source dir compiled in (/work/main).
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/gpu.txt" 2>&1
summary=()
run() {  # name, command...
    local name=$1; shift
    local t0=$SECONDS
    "$@" > "$out/$name.log" 2>&1
    local rc=$?
    summary+=("$(printf '%-18s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(grep -E 'test cases|ERROR SUMMARY|tok/s' "$out/$name.log" | tail -4 | tr '\n' ' ')")")
}
if [ "$mode" = tests ] || [ "$mode" = all ]; then
    run kernels "$carry/bin/test_cuda_kernels"
    run engine "$carry/bin/test_cuda_engine"
    run sanitizer compute-sanitizer --tool memcheck --error-exitcode 9 "$carry/bin/test_cuda_kernels"
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
    [ -f /tmp/m.gguf ] || "$carry/bin/tandem" synth --preset qwen3-30b-a3b --type q4_k --out /tmp/m.gguf > "$out/synth.log" 2>&1
    run bench "$carry/bin/tandem" bench -m /tmp/m.gguf --backend cuda --prompt 2048 --gen 128 --sessions 1,4,16 \
        --json "$out/bench.json" "$@"
fi
for f in kernels engine sanitizer; do
    [ -f "$out/$f.log" ] && { echo "== $f (tail)"; tail -25 "$out/$f.log"; }
done
[ -f "$out/bench.log" ] && { echo "== bench"; cat "$out/bench.log"; }
echo "== summary"
cat "$out/gpu.txt"
printf '%s\n' "${summary[@]}"
