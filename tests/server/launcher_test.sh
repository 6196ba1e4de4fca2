#!/usr/bin/env bash
# tests/server/launcher_test.sh - launcher/run-tp-server.sh start, status, stop, restart and its
# exit codes, against the real tandem-server on a free loopback port. Usage: launcher_test.sh BUILD_DIR
set -uo pipefail
build="$(cd "$1" && pwd)"
src="$(cd "$(dirname "$0")/../.." && pwd)"
launcher="$src/launcher/run-tp-server.sh"
state="$(mktemp -d "$build/server-tests/launcher.XXXXXX")"
model="$build/server-tests/tiny.gguf"
[[ -f "$model" ]] || "$build/tandem" synth --preset tiny --out "$model" --seed 1 >/dev/null 2>&1
port="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
export TANDEM_MODEL="$model" TANDEM_PORT="$port" TANDEM_STATE_DIR="$state" TANDEM_SERVER_BIN="$build/tandem-server"
export TANDEM_SESSIONS=3 TANDEM_CTX=256 TANDEM_START_TIMEOUT=60 TANDEM_STOP_TIMEOUT=20 TANDEM_API_KEY=launcher-key
failed=0
expect() {  # expect CODE WHAT -- command...
  local want="$1" what="$2"; shift 3
  local out code
  out="$("$@" 2>&1)"; code=$?
  if [[ "$code" != "$want" ]]; then echo "FAIL: $what: exit $code, want $want"; echo "$out"; failed=$((failed + 1))
  else echo "ok: $what"; fi
  last="$out"
}
cleanup() { [[ -f "$state/tandem-server.pid" ]] && kill -KILL "$(cat "$state/tandem-server.pid")" 2>/dev/null; }
trap cleanup EXIT

expect 2 "usage error" -- "$launcher" frobnicate
expect 3 "status before start" -- "$launcher" status
expect 0 "start" -- "$launcher" start -- --prefill-yield 8
grep -q 'layout: ' <<<"$last" || { echo "FAIL: start prints the layout line"; failed=$((failed + 1)); }
pid="$(cat "$state/tandem-server.pid")"
grep -q -- '--prefill-yield' "/proc/$pid/cmdline" || { echo "FAIL: extra flags after -- reach the server"; failed=$((failed + 1)); }
grep -q -- '--kv-type' "/proc/$pid/cmdline" || { echo "FAIL: TANDEM_KV_TYPE reaches the server as --kv-type"; failed=$((failed + 1)); }
expect 3 "a second start is refused" -- "$launcher" start
expect 0 "status" -- "$launcher" status
grep -q "slots 0/3 in use" <<<"$last" || { echo "FAIL: status shows slot use: $last"; failed=$((failed + 1)); }
grep -q "^tandem-server [0-9.]* (commit" <<<"$last" || { echo "FAIL: status shows no version: $last"; failed=$((failed + 1)); }
grep -q ", up [0-9:-]*," <<<"$last" || { echo "FAIL: status shows no uptime: $last"; failed=$((failed + 1)); }
code="$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")"
[[ "$code" == 401 ]] || { echo "FAIL: TANDEM_API_KEY protects the server ($code)"; failed=$((failed + 1)); }
expect 0 "restart" -- "$launcher" restart
[[ "$(cat "$state/tandem-server.pid")" != "$pid" ]] || { echo "FAIL: restart made a new process"; failed=$((failed + 1)); }
expect 0 "stop" -- "$launcher" stop
expect 3 "stop when stopped" -- "$launcher" stop
expect 3 "status when stopped" -- "$launcher" status
printf 'not a gguf file' > "$state/bad.gguf"
TANDEM_MODEL="$state/bad.gguf" expect 1 "a model that fails to load: start fails with the log tail" -- "$launcher" start
grep -q "log tail" <<<"$last" || { echo "FAIL: the failed start shows the log tail"; failed=$((failed + 1)); }
TANDEM_MODEL="$state/missing.gguf" expect 2 "a missing model file" -- "$launcher" start
rm -rf "$state"
echo "launcher: $failed failed"
[[ "$failed" == 0 ]]
