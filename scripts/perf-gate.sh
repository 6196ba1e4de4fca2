#!/usr/bin/env bash
# scripts/perf-gate.sh BUILD_DIR - the perf gate: on a machine with a GPU (and a CUDA build) the
# GPU floors of perf/floors.json; otherwise the CPU ratio gate that CI runs. Exit 1 below a floor.
set -euo pipefail
build=${1:-build}
dir="$build/perf"
mkdir -p "$dir"
tandem="$build/tandem"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && [ "${TANDEM_GATE:-}" != cpu ]; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
    model="$dir/qwen3-30b-a3b-q4_k.gguf"
    [ -f "$model" ] || "$tandem" synth --preset qwen3-30b-a3b --type q4_k --out "$model"
    "$tandem" bench -m "$model" --backend cuda --prompt 2048 --gen 128 --sessions 1,4,16 --json "$dir/bench-gpu.json"
    python3 scripts/perf_gate.py --floors perf/floors.json --bench "$dir/bench-gpu.json" --gpu "$gpu"
    # The server's configuration: 32,768-position slots, its KV type on CUDA (f16), decode after
    # 4,000-token prompts (the attention's share of a step, which the run-sized slots above hide).
    "$tandem" bench -m "$model" --backend cuda --prompt 0 --ctx 32768 --gen 64 --decode-prompt 4000 --sessions 1,16 \
        --kv-type f16 --json "$dir/bench-gpu-serve.json"
    python3 scripts/perf_gate.py --floors perf/floors.json --bench "$dir/bench-gpu-serve.json" --gpu "$gpu" --plan serve
    # A prompt in the 128-token chunks the server gives a prefill while others decode (--prefill-yield):
    # the time to first token under load.
    "$tandem" bench -m "$model" --backend cuda --prompt 2048 --prefill-chunk 128 --repeats 3 --gen 2 --sessions 1 \
        --json "$dir/bench-gpu-chunked.json"
    python3 scripts/perf_gate.py --floors perf/floors.json --bench "$dir/bench-gpu-chunked.json" --gpu "$gpu" --plan chunked
    # Speculative verification: each session's next token and 3 drafts (its own greedy continuation,
    # so all must be kept) as 4 decode rows of its slot a step: the rows of one slot together.
    "$tandem" bench -m "$model" --backend cuda --prompt 0 --gen 64 --sessions 1,16 --draft 3 --draft-oracle \
        --draft-step-rows 64 --json "$dir/bench-gpu-draft.json"
    python3 scripts/perf_gate.py --floors perf/floors.json --bench "$dir/bench-gpu-draft.json" --gpu "$gpu" --plan draft
    # llama.cpp's Q4_K_M mix (Q6_K head, and Q6_K attn_v and experts' down in half the layers), as
    # published Qwen3-30B-A3B Q4_K_M files are: what a user's real file runs at.
    model_m="$dir/qwen3-30b-a3b-q4_k_m.gguf"
    [ -f "$model_m" ] || "$tandem" synth --preset qwen3-30b-a3b --type q4_k_m --out "$model_m"
    "$tandem" bench -m "$model_m" --backend cuda --prompt 2048 --gen 128 --sessions 1,4,16 --json "$dir/bench-gpu-q4_k_m.json"
    python3 scripts/perf_gate.py --floors perf/floors.json --bench "$dir/bench-gpu-q4_k_m.json" --gpu "$gpu" --type q4_K_M
    # Two or more GPUs: the first two as a tensor-parallel pair, and as two pipeline stages.
    if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
        export NCCL_NVLS_ENABLE=0
        for plan in tp pipeline; do
            flag=(); [ "$plan" = tp ] && flag=(--tensor-parallel)
            "$tandem" bench -m "$model" --backend cuda --gpu-devices 0,1 "${flag[@]}" --prompt 2048 --repeats 1 --gen 64 \
                --sessions 1,16 --json "$dir/bench-gpu2-$plan.json"
            python3 scripts/perf_gate.py --floors perf/floors.json --bench "$dir/bench-gpu2-$plan.json" --gpu "$gpu" \
                --gpus 2 --plan "$plan"
        done
    fi
    exit 0
fi
model="$dir/qwen3-30b-a3b-2l-q4_k.gguf"
[ -f "$model" ] || "$tandem" synth --preset qwen3-30b-a3b --layers 2 --type q4_k --out "$model"
# Three short runs, the gate takes the median ratio: one run on a 2-core VM varied 1.43-2.10.
for i in 1 2 3; do
    "$tandem" bench -m "$model" --backend cpu --prompt 0 --gen 6 --sessions 1,16 --json "$dir/bench-cpu-$i.json"
done
fair=()
if [ -x tests/server/fairness.sh ] && [ -x "$build/tandem-server" ]; then
    tests/server/fairness.sh "$build" "$dir/fairness.json"
    fair=(--fairness "$dir/fairness.json")
fi
exec python3 scripts/perf_gate.py --floors perf/floors.json --bench "$dir"/bench-cpu-{1,2,3}.json "${fair[@]}"
