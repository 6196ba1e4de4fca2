#!/usr/bin/env bash
# scripts/device-run.sh - what runs on the GPU machine (from the repo root): the [gpu] tests,
# compute-sanitizer (memcheck on the kernel tests, racecheck and synccheck on the routing/experts
# test), the model comparison and `tandem bench` on the qwen3-30b-a3b Q4_K synth model. Logs under
# $OUT; a short table last.
#   usage: scripts/device-run.sh [tests|bench|fairness|server|profile|trace|sass|draws|all] [extra bench flags...]
# BIN_DIR: a CUDA build folder (default build), or a flat folder holding copies of its programs
# (tandem, tandem-server, the test_cuda_* tests); absolute or relative to the repo. LIB_DIR: shared
# libraries the programs need that this machine lacks (default BIN_DIR/lib).
# draws: the exact draws on the device (the default; --no-device-draws: on the host): their tests, and decode at temperature 0.8
# (and with top_p 0.9) with the draws on the host and on the GPU (not in `all`).
# server: the HTTP end-to-end suite (tests/server/e2e_server.py) against the CUDA backend (the
# server's --backend auto picks it here), with the tiny synth model; the npm SDK checks need node
# and are left to CI's CPU run.
# fairness: a 4,000-token prompt beside 1 and 15 streaming sessions on the synth model
# (QA_BEFORE_RELEASES.md item 7), and the prefill of 1,024 tokens in 16- and 64-row chunks.
# profile: ncu per-kernel durations of one decode step (PROFILE_SESSIONS, default 1), summed by
# kernel name and grid (so Q/K/V, wo, the experts and the head stand apart).
# trace: every launch of decode steps at 1 and 16 sessions timed inside the replayed graph
# (scripts/kernel-trace): each launch's share of a layer's critical path (not in `all`).
# sass: each kernel's wait points on global loads, from its SASS (scripts/sass_round_trips.py; not in `all`).
set -u
mode=${1:-all}
shift || true
bin_dir=${BIN_DIR:-build}
case "$bin_dir" in /*) ;; *) bin_dir="$PWD/$bin_dir" ;; esac
lib_dir=${LIB_DIR:-$bin_dir/lib}
case "$lib_dir" in /*) ;; *) lib_dir="$PWD/$lib_dir" ;; esac
out=${OUT:-/tmp/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$lib_dir:${LD_LIBRARY_PATH:-}"
# A program: BIN_DIR/NAME, else a test program in a build tree (BIN_DIR/tests/AREA/NAME).
prog() {
    local p
    for p in "$bin_dir/$1" "$bin_dir"/tests/*/"$1"; do
        [ -x "$p" ] && { echo "$p"; return 0; }
    done
    echo "$bin_dir/$1"  # missing: its run logs the failure
}
tandem=$(prog tandem)
# The tests find fixtures under the source dir compiled into them (TANDEM_SOURCE_DIR at build
# time); set TANDEM_BUILD_SOURCE to that path and this copy of the tree is linked there.
if [ -n "${TANDEM_BUILD_SOURCE:-}" ] && [ ! -e "$TANDEM_BUILD_SOURCE" ]; then
    mkdir -p "$(dirname "$TANDEM_BUILD_SOURCE")" && ln -s "$PWD" "$TANDEM_BUILD_SOURCE"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/gpu.txt" 2>&1
summary=()
run() {  # name, command...
    local name=$1; shift
    local t0=$SECONDS
    "$@" > "$out/$name.log" 2>&1
    local rc=$?
    summary+=("$(printf '%-18s rc=%-3s %4ss  %s' "$name" "$rc" "$((SECONDS - t0))" "$(grep -E 'test cases|ERROR SUMMARY|RACECHECK SUMMARY|tok/s' "$out/$name.log" | tail -4 | tr '\n' ' ')")")
}
if [ "$mode" = tests ] || [ "$mode" = all ]; then
    run kernels "$(prog test_cuda_kernels)"
    run matmul_prompt "$(prog test_cuda_matmul_prompt)"
    run attn_prompt "$(prog test_cuda_attention_prompt)"
    run logits_top "$(prog test_cuda_logits_top)"
    run logits_draw "$(prog test_cuda_logits_draw)"
    run digits "$(prog test_cuda_matvec_digits)"
    run digit_tiles "$(prog test_cuda_matmul_digits)"
    run engine "$(prog test_cuda_engine)"
    run sanitizer compute-sanitizer --tool memcheck --error-exitcode 9 "$(prog test_cuda_kernels)"
    run sanitizer_mm compute-sanitizer --tool memcheck --error-exitcode 9 "$(prog test_cuda_matmul_prompt)"
    run sanitizer_top compute-sanitizer --tool memcheck --error-exitcode 9 "$(prog test_cuda_logits_top)"
    run sanitizer_draw compute-sanitizer --tool memcheck --error-exitcode 9 "$(prog test_cuda_logits_draw)"
    # The digit products: memcheck of both, and racecheck / synccheck of the prompt tiles (shared-memory
    # stages and barriers).
    run sanitizer_dig compute-sanitizer --tool memcheck --error-exitcode 9 "$(prog test_cuda_matvec_digits)"
    run sanitizer_tiles compute-sanitizer --tool memcheck --error-exitcode 9 "$(prog test_cuda_matmul_digits)"
    run racecheck_tiles compute-sanitizer --tool racecheck --error-exitcode 9 "$(prog test_cuda_matmul_digits)"
    # The decode digit products' cases but the grouped SwiGLU one, whose racecheck passes every check
    # with 0 hazards and then runs the host out of memory (~130 GB).
    run racecheck_dig compute-sanitizer --tool racecheck --error-exitcode 9 "$(prog test_cuda_matvec_digits)" \
        "dense digit products match*,a one-row*,a block with*,grouped plain*,the norm and*"
    run synccheck_tiles compute-sanitizer --tool synccheck --error-exitcode 9 "$(prog test_cuda_matmul_digits)"
    # Shared-memory races and barrier misuse in the routing, grouping and grouped-expert kernels.
    # racecheck also prints warnings pairing the staged products' mbarrier init and expect (thread 0,
    # program order): known, reported as warnings, not errors.
    run racecheck compute-sanitizer --tool racecheck --error-exitcode 9 "$(prog test_cuda_kernels)" "routing*"
    run synccheck compute-sanitizer --tool synccheck --error-exitcode 9 "$(prog test_cuda_kernels)" "routing*"
fi
if [ "$mode" = draws ]; then
    # The exact draws on the device (the default): the kernel against its host twin (and
    # racecheck of its shared-memory passes), the engine's draws against forward's rows, then decode
    # at temperature 0.8, plain and with top_p 0.9, with the draws on the host (whole rows) and on
    # the GPU, beside greedy.
    run logits_draw "$(prog test_cuda_logits_draw)"
    run sanitizer_draw compute-sanitizer --tool memcheck --error-exitcode 9 "$(prog test_cuda_logits_draw)"
    # racecheck and synccheck on the short rows at every cluster size (the 152 K-id cases take
    # minutes under racecheck)
    run racecheck_draw compute-sanitizer --tool racecheck --error-exitcode 9 "$(prog test_cuda_logits_draw)" "logits_draw: every cluster size*"
    run synccheck_draw compute-sanitizer --tool synccheck --error-exitcode 9 "$(prog test_cuda_logits_draw)" "logits_draw: every cluster size*"
    run racecheck_best compute-sanitizer --tool racecheck --error-exitcode 9 "$(prog test_cuda_logits_top)" "logits_best*"
    run synccheck_best compute-sanitizer --tool synccheck --error-exitcode 9 "$(prog test_cuda_logits_top)" "logits_best*"
    run engine_draw "$(prog test_cuda_engine)" "[draw]"
    run placement_draw "$(prog test_cuda_placement)" "[draw]"
    [ -f /tmp/m.gguf ] || "$tandem" synth --preset qwen3-30b-a3b --type q4_k --out /tmp/m.gguf > "$out/synth.log" 2>&1
    run greedy "$tandem" bench -m /tmp/m.gguf --backend cuda --prompt 0 --gen 64 --sessions 1,4,16 --json "$out/greedy.json"
    for p in 1 0.9; do
        run "temp_host_$p" "$tandem" bench -m /tmp/m.gguf --backend cuda --prompt 0 --gen 64 --sessions 1,4,16 \
            --temperature 0.8 --top-p "$p" --no-device-draws --json "$out/temp_host_$p.json"
        run "temp_device_$p" "$tandem" bench -m /tmp/m.gguf --backend cuda --prompt 0 --gen 64 --sessions 1,4,16 \
            --temperature 0.8 --top-p "$p" --device-draws --json "$out/temp_device_$p.json"
        run "temp_summaries_$p" "$tandem" bench -m /tmp/m.gguf --backend cuda --prompt 0 --gen 64 --sessions 1,4,16 \
            --temperature 0.8 --top-p "$p" --device-draws --summaries --json "$out/temp_summaries_$p.json"
        # The same draws (host, device beside the best token, device beside the summaries): the
        # decoded tokens' hashes agree.
        python3 -c 'import json,sys; h=[[r["tokens_fnv"] for r in json.load(open(f))["decode"]] for f in sys.argv[1:]]; print("draws agree" if h[0]==h[1]==h[2] else "DRAWS DIFFER", h)' \
            "$out/temp_host_$p.json" "$out/temp_device_$p.json" "$out/temp_summaries_$p.json" >> "$out/draws_agree.log" 2>&1
    done
    # tandem generate steps as the server does: the same text with the draws on the host and the GPU.
    for where in host device; do
        "$tandem" generate -m /tmp/m.gguf -p "The quick brown fox" -n 48 --temp 0.8 --seed 3 --$([ $where = host ] && echo no-)device-draws \
            > "$out/generate_$where.txt" 2> "$out/generate_$where.log"
    done
    cmp -s "$out/generate_host.txt" "$out/generate_device.txt" && echo "generate agrees" >> "$out/draws_agree.log" \
        || echo "GENERATE DIFFERS" >> "$out/draws_agree.log"
    summary+=("$(cat "$out/draws_agree.log")")
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
    [ -f /tmp/m.gguf ] || "$tandem" synth --preset qwen3-30b-a3b --type q4_k --out /tmp/m.gguf > "$out/synth.log" 2>&1
    run bench "$tandem" bench -m /tmp/m.gguf --backend cuda --prompt 2048 --gen 128 --sessions 1,4,16 \
        --json "$out/bench.json" "$@"
fi
if [ "$mode" = fairness ] || [ "$mode" = all ]; then
    [ -f /tmp/m.gguf ] || "$tandem" synth --preset qwen3-30b-a3b --type q4_k --out /tmp/m.gguf > "$out/synth.log" 2>&1
    for ch in 16 64; do
        run "chunks_$ch" "$tandem" bench -m /tmp/m.gguf --backend cuda --prompt 1024 --prefill-chunk "$ch" \
            --repeats 1 --gen 2 --sessions 1
    done
    for n in 1 15; do
        run "fairness_$n" python3 tests/server/fairness.py --build-dir "$bin_dir" --model /tmp/m.gguf \
            --prompt-tokens 4000 --sessions "$n" --max-prefill-seconds 25
        summary+=("  $(tail -1 "$out/fairness_$n.log" | cut -c1-300)")
    done
fi
if [ "$mode" = server ] || [ "$mode" = all ]; then
    scenarios=basic,malformed,cancel,invariance,load,queue,shutdown,signals,plan,loading
    python3 -c "import prometheus_client" 2>/dev/null && scenarios=$scenarios,metrics
    run server_e2e timeout 600 python3 tests/server/e2e_server.py --build-dir "$bin_dir" --only "$scenarios"
    summary+=("  $(grep -E 'FAIL|e2e_server:' "$out/server_e2e.log" | head -6 | tr '\n' ' ')")
    cp "$bin_dir"/server-tests/*.log "$out/" 2>/dev/null
fi
if [ "$mode" = profile ] || [ "$mode" = all ]; then
    [ -f /tmp/m.gguf ] || "$tandem" synth --preset qwen3-30b-a3b --type q4_k --out /tmp/m.gguf > "$out/synth.log" 2>&1
    # One decode step's launches (bench --json reports launches_per_step), after 40 steps: past the
    # prompt steps of every session, whichever step the window starts in.
    steps=${PROFILE_LAUNCHES:-531}
    sessions=${PROFILE_SESSIONS:-1}
    ncu --cache-control none --clock-control none --metrics gpu__time_duration.sum --launch-skip "$((40 * steps))" \
        --launch-count "$steps" --csv "$tandem" bench -m /tmp/m.gguf --backend cuda --prompt 0 --gen 48 \
        --sessions "$sessions" > "$out/ncu.csv" 2> "$out/ncu.err"
    python3 - "$out/ncu.csv" > "$out/profile.txt" <<'PY'
import csv, sys, collections
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6, "ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
tot = collections.defaultdict(float); cnt = collections.Counter()
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
for row in csv.DictReader(lines):
    if row.get("Metric Name") != "gpu__time_duration.sum": continue
    kn = row["Kernel Name"].replace("void ", "").replace("tandem::cuda::", "").replace("(anonymous namespace)::", "")
    full = (kn.split(">(")[0] + ">") if ">(" in kn else kn.split("(")[0]
    full = full.replace("(tandem::ggml_type)", "t")[:60] + " " + row.get("Grid Size", "")  # one product per shape
    us = float(row["Metric Value"].replace(",", "")) * scale.get(row["Metric Unit"], 1.0)
    tot[full] += us; cnt[full] += 1
all_us = sum(tot.values())
print(f"kernels {sum(cnt.values())}  sum of durations {all_us:.1f} us")
for k, v in sorted(tot.items(), key=lambda kv: -kv[1])[:16]:
    print(f"{v:9.1f} us {100*v/all_us:5.1f}%  n={cnt[k]:4d}  avg {v/cnt[k]:7.2f} us  {k}")
PY
    summary+=("profile: $(head -1 "$out/profile.txt")")
fi
if [ "$mode" = trace ]; then
    # Where a decode step's time goes inside the replayed graph (PDL overlap kept): the CUPTI
    # injection library of scripts/kernel-trace, built here against this machine's CUPTI.
    [ -f /tmp/m.gguf ] || "$tandem" synth --preset qwen3-30b-a3b --type q4_k --out /tmp/m.gguf > "$out/synth.log" 2>&1
    cuda=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
    inc=$(dirname "$(find "$cuda/" -name cupti_activity.h | head -1)")
    krec=$(grep -o "CUpti_ActivityKernel[0-9]*;" "$inc/cupti_activity.h" | sort -V | tail -1 | tr -d ';')
    lib=$(dirname "$(find "$cuda/" -name 'libcupti.so' | head -1)")
    if [ -z "$krec" ] || ! g++ -O2 -shared -fPIC -DKREC="$krec" -I"$inc" -I"$cuda/include" scripts/kernel-trace/cupti_trace.cpp \
        -L"$lib" -lcupti -Wl,-rpath,"$lib" -o /tmp/libtrace.so > "$out/trace-build.log" 2>&1; then
        summary+=("trace: no CUPTI tracer built here (CUPTI under $cuda?); see trace-build.log")
    else
        CUDA_INJECTION64_PATH=/tmp/libtrace.so TRACE_OUT="$out/trace.txt" "$tandem" bench -m /tmp/m.gguf --backend cuda \
            --prompt 0 --repeats 1 --gen 32 --sessions "${TRACE_SESSIONS:-1,16}" > "$out/trace-bench.log" 2>&1
        python3 scripts/kernel-trace/analyze.py "$out/trace.txt" > "$out/trace-steps.txt" 2>&1
        python3 scripts/kernel-trace/gaps.py "$out/trace.txt" >> "$out/trace-steps.txt" 2>&1  # time the GPU waited on the host
        gzip -f "$out/trace.txt"
        summary+=("trace: $(grep -c '' "$out/trace-steps.txt") lines in trace-steps.txt")
    fi
fi
if [ "$mode" = sass ]; then
    # Where the kernels' warps wait on global loads one after another (scripts/sass_round_trips.py
    # on cuobjdump's SASS of the tandem binary; cuobjdump is on this machine, not on the
    # Debian build box). SASS_MATCH narrows the kernels (a regex of the mangled names).
    cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
    if "$cuobjdump" -sass "$tandem" > "$out/tandem.sass" 2> "$out/sass.err"; then
        python3 scripts/sass_round_trips.py "$out/tandem.sass" "${SASS_MATCH:-.}" --list > "$out/sass-waits.txt" 2>&1
        gzip -f "$out/tandem.sass"
        summary+=("sass: $(grep -c 'wait points' "$out/sass-waits.txt") kernels in sass-waits.txt")
    else
        summary+=("sass: cuobjdump failed; see sass.err")
    fi
fi
for f in kernels engine sanitizer; do
    [ -f "$out/$f.log" ] && { echo "== $f (tail)"; tail -12 "$out/$f.log"; }
done
[ -f "$out/profile.txt" ] && { echo "== profile"; cat "$out/profile.txt"; tail -3 "$out/ncu.err"; }
[ -f "$out/bench.log" ] && { echo "== bench"; cat "$out/bench.log"; }
[ -f "$out/trace-steps.txt" ] && { echo "== trace"; cat "$out/trace-steps.txt"; }
echo "== summary"
cat "$out/gpu.txt"
printf '%s\n' "${summary[@]}"
