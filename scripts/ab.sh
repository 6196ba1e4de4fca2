#!/usr/bin/env bash
# scripts/ab.sh - an A/B of tandem binaries (or of one binary under environment switches) on the GPU
# machine: the variants' decode logits hashed first (bitwise
# checks of the decode path, `tandem logits --decode-logits`), then decode benches with the
# variants alternating in each run, then each variant's range over the runs.
#   usage: scripts/ab.sh -m MODEL [--runs N] [--short S] [--long S] [--long-prompt P] [--no-hash]
#                        NAME=BINARY[:VAR=VALUE[,VAR=VALUE...]] ...
#   --short S: session counts of `bench --prompt 0 --gen 64` (default 1,16; "" skips)
#   --long S:  session counts after --long-prompt tokens (default 4000) in 32,768-position slots,
#              f16 cache, as a server runs (default ""; skipped)
#   The hashes take `tandem logits` of a 7-token prompt (f32 and f16 caches) and of 4,000 ids up to
#   5,000 (f16): a model of a smaller vocabulary shows "failed" there; --no-hash skips them.
# Example: scripts/ab.sh -m /tmp/m.gguf main=/tmp/cr/bin/tandem.base new=/tmp/cr/bin/tandem.new \
#              switch=/tmp/cr/bin/tandem.new:TANDEM_EXP_X=1
set -euo pipefail
model="" runs=3 short="1,16" long="" long_prompt=4000 hash=1
variants=()
while [ $# -gt 0 ]; do
    case "$1" in
    -m | --runs | --short | --long | --long-prompt)
        [ $# -ge 2 ] || { echo "ab.sh: $1 needs a value" >&2; exit 2; } ;;&
    -m) model=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --short) short=$2; shift 2 ;;
    --long) long=$2; shift 2 ;;
    --long-prompt) long_prompt=$2; shift 2 ;;
    --no-hash) hash=0; shift ;;
    -h | --help) sed -n '2,/^set /p' "$0" | sed '$d'; exit 0 ;;
    *=*) variants+=("$1"); shift ;;
    *) echo "ab.sh: unknown argument '$1' (variants are NAME=BINARY[:VAR=VALUE,...])" >&2; exit 2 ;;
    esac
done
[ -n "$model" ] || { echo "ab.sh: -m MODEL is required" >&2; exit 2; }
[ -f "$model" ] || { echo "ab.sh: no model file '$model'" >&2; exit 2; }
[ ${#variants[@]} -ge 1 ] || { echo "ab.sh: give at least one NAME=BINARY" >&2; exit 2; }
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "ab.sh: --runs must be a positive integer" >&2; exit 2; }
for v in "${variants[@]}"; do
    bin=${v#*=}; bin=${bin%%:*}
    [ -x "$bin" ] || { echo "ab.sh: variant '${v%%=*}': '$bin' is not an executable" >&2; exit 2; }
done

# run_variant NAME=BINARY[:ENV] ARGS...: the binary under its variant's environment.
run_variant() {
    local spec=$1; shift
    local rest=${spec#*=} bin envs=()
    bin=${rest%%:*}
    if [ "$rest" != "$bin" ]; then IFS=, read -r -a envs <<< "${rest#*:}"; fi
    env "${envs[@]}" "$bin" "$@"
}
# decode_line OUTPUT: "S=tok/s ..." from a bench's decode lines (sessions, aggregate tok/s).
decode_line() { awk '/^decode/ {printf "%s%s=%s", (n++ ? " " : ""), $2, $6}' <<< "$1"; }

# logits_hash VARIANT ARGS...: the first 12 hex digits of the variant's `logits --json
# --decode-logits` output, or "failed" where the run fails (not the hash of nothing).
logits_hash() {
    local v=$1 o; shift
    if o=$(run_variant "$v" logits -m "$model" --json --decode-logits "$@" 2>/dev/null) && [ -n "$o" ]; then
        sha256sum <<< "$o" | cut -c1-12
    else
        echo failed
    fi
}

if [ "$hash" = 1 ]; then
    long_ids=$(python3 -c "import random; random.seed(7); print(','.join(str(random.randint(1, 5000)) for _ in range(4000)))")
    for v in "${variants[@]}"; do
        echo "hash ${v%%=*}: f32 $(logits_hash "$v" --ids 1,2,3,4,5,6,7 --greedy 12)" \
             "f16 $(logits_hash "$v" --ids 1,2,3,4,5,6,7 --greedy 12 --kv-type f16)" \
             "long-f16 $(logits_hash "$v" --ids "$long_ids" --greedy 8 --kv-type f16)"
    done
fi
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for r in $(seq 1 "$runs"); do
    for v in "${variants[@]}"; do
        name=${v%%=*}
        if [ -n "$short" ]; then
            out=$(run_variant "$v" bench -m "$model" --backend cuda --prompt 0 --repeats 1 --gen 64 --sessions "$short" 2>&1) || true
            line=$(decode_line "$out")
            echo "short $r $name: ${line:-no decode lines: $(tail -1 <<< "$out")}"
            echo "short $name $line" >> "$results"
        fi
        if [ -n "$long" ]; then
            out=$(run_variant "$v" bench -m "$model" --backend cuda --prompt 0 --ctx 32768 --repeats 1 --gen 32 \
                --decode-prompt "$long_prompt" --sessions "$long" --kv-type f16 2>&1) || true
            line=$(decode_line "$out")
            echo "long $r $name: ${line:-no decode lines: $(tail -1 <<< "$out")}"
            echo "long $name $line" >> "$results"
        fi
    done
done
# Each variant's range over the runs, per kind and session count.
echo "== range over $runs runs (tok/s aggregate, min-max)"
python3 - "$results" <<'EOF'
import collections
import sys

seen = collections.OrderedDict()
for line in open(sys.argv[1]):
    kind, name, *pairs = line.split()
    for p in pairs:
        s, v = p.split('=')
        seen.setdefault((kind, name), collections.OrderedDict()).setdefault(s, []).append(float(v))
for (kind, name), by_s in seen.items():
    cells = ' '.join(f"{s}={min(v):,.1f}-{max(v):,.1f}" for s, v in by_s.items())
    print(f"{kind:5} {name}: {cells}")
EOF
