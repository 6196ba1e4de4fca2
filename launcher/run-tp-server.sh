#!/usr/bin/env bash
# launcher/run-tp-server.sh - starts, stops and inspects one tandem-server daemon. Assembles
# flags from the environment and manages the process (pid file, log); no logic the binary owns.
#
# Usage: run-tp-server.sh start|stop|restart|status [-- extra tandem-server flags]
#
# Settings (environment, with defaults):
#   TANDEM_MODEL         GGUF model file                       (required for start)
#   TANDEM_HOST          listen address                        127.0.0.1
#   TANDEM_PORT          TCP port                              8080
#   TANDEM_SESSIONS      --batched-session (KV slots)          16
#   TANDEM_CTX           --ctx (tokens per slot)               32768
#   TANDEM_KV_TYPE       --kv-type (f32, f16, auto: f16 on CUDA, f32 on the CPU) auto
#   TANDEM_GPU_DEVICES   --gpu-devices (e.g. 0,2,1,3; empty: not passed, the server decides)
#   TANDEM_API_KEY       --api-key via a 0600 key file in the state dir (empty: no auth)
#   TANDEM_STATE_DIR     pid file and log                      ${XDG_STATE_HOME:-$HOME/.local/state}/tandem
#   TANDEM_SERVER_BIN    the binary                            tandem-server next to this script's
#                                                              ../build, else on PATH
#   TANDEM_START_TIMEOUT seconds start waits for /health 200   600
#   TANDEM_STOP_TIMEOUT  seconds stop waits before SIGKILL     30
#
# Exit codes: 0 success; 1 start failed (the server exited or /health did not turn 200 in time;
# the log tail is shown); 2 usage or configuration error; 3 already running (start) or not
# running (stop, status); 4 stop needed SIGKILL.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TANDEM_HOST="${TANDEM_HOST:-127.0.0.1}"
TANDEM_PORT="${TANDEM_PORT:-8080}"
TANDEM_SESSIONS="${TANDEM_SESSIONS:-16}"
TANDEM_CTX="${TANDEM_CTX:-32768}"
TANDEM_KV_TYPE="${TANDEM_KV_TYPE:-auto}"
TANDEM_GPU_DEVICES="${TANDEM_GPU_DEVICES:-}"
TANDEM_API_KEY="${TANDEM_API_KEY:-}"
TANDEM_STATE_DIR="${TANDEM_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/tandem}"
TANDEM_START_TIMEOUT="${TANDEM_START_TIMEOUT:-600}"
TANDEM_STOP_TIMEOUT="${TANDEM_STOP_TIMEOUT:-30}"
# NVLink multicast (NVLS) stays off for NCCL unless the environment says otherwise.
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
if [[ -z "${TANDEM_SERVER_BIN:-}" ]]; then
  if [[ -x "$here/../build/tandem-server" ]]; then TANDEM_SERVER_BIN="$here/../build/tandem-server"
  else TANDEM_SERVER_BIN="$(command -v tandem-server || true)"; fi
fi

pid_file="$TANDEM_STATE_DIR/tandem-server.pid"
log_file="$TANDEM_STATE_DIR/tandem-server.log"
key_file="$TANDEM_STATE_DIR/api-key"

usage() {
  sed -n '4,5p' "${BASH_SOURCE[0]}" | sed 's/^# //' >&2
  exit 2
}

die() { echo "run-tp-server: $*" >&2; exit "${2:-2}"; }

running_pid() {  # prints the pid when the pid file names a live tandem-server
  [[ -f "$pid_file" ]] || return 1
  local pid
  pid="$(cat "$pid_file" 2>/dev/null)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  grep -q tandem-server "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

curl_auth() {
  local args=(-s --max-time 5)
  [[ -n "$TANDEM_API_KEY" ]] && args+=(-H "Authorization: Bearer $TANDEM_API_KEY")
  curl "${args[@]}" "$@"
}

health_code() { curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://$TANDEM_HOST:$TANDEM_PORT/health"; }

cmd_start() {
  local pid
  if pid="$(running_pid)"; then die "already running (pid $pid, $pid_file)" 3; fi
  [[ -n "${TANDEM_MODEL:-}" ]] || die "TANDEM_MODEL is not set (the GGUF file to serve)"
  [[ -f "$TANDEM_MODEL" ]] || die "TANDEM_MODEL=$TANDEM_MODEL: no such file"
  [[ -n "$TANDEM_SERVER_BIN" && -x "$TANDEM_SERVER_BIN" ]] || die "tandem-server not found (set TANDEM_SERVER_BIN)"
  mkdir -p "$TANDEM_STATE_DIR" || die "cannot create TANDEM_STATE_DIR=$TANDEM_STATE_DIR"
  local flags=(-m "$TANDEM_MODEL" --host "$TANDEM_HOST" --port "$TANDEM_PORT" --batched-session "$TANDEM_SESSIONS"
               --ctx "$TANDEM_CTX" --kv-type "$TANDEM_KV_TYPE")
  [[ -n "$TANDEM_GPU_DEVICES" ]] && flags+=(--gpu-devices "$TANDEM_GPU_DEVICES")
  if [[ -n "$TANDEM_API_KEY" ]]; then
    # A file keeps the key out of `ps` output.
    (umask 077 && printf '%s\n' "$TANDEM_API_KEY" > "$key_file") || die "cannot write $key_file"
    flags+=(--api-key-file "$key_file")
  fi
  flags+=("${extra[@]}")
  echo "run-tp-server: starting $TANDEM_SERVER_BIN ${flags[*]}" >&2
  # The server reads TANDEM_<FLAG> variables too; the key reaches it through the file alone.
  nohup setsid env -u TANDEM_API_KEY "$TANDEM_SERVER_BIN" "${flags[@]}" >"$log_file" 2>&1 </dev/null &
  pid=$!
  echo "$pid" > "$pid_file"
  local waited=0
  while (( waited < TANDEM_START_TIMEOUT * 10 )); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "run-tp-server: tandem-server exited during start-up; log tail ($log_file):" >&2
      tail -n 20 "$log_file" >&2
      rm -f "$pid_file"
      exit 1
    fi
    [[ "$(health_code)" == 200 ]] && break
    sleep 0.1
    waited=$((waited + 1))
  done
  if [[ "$(health_code)" != 200 ]]; then
    echo "run-tp-server: /health not 200 after ${TANDEM_START_TIMEOUT}s; log tail ($log_file):" >&2
    tail -n 20 "$log_file" >&2
    kill -TERM "$pid" 2>/dev/null
    rm -f "$pid_file"
    exit 1
  fi
  grep -m1 -o 'layout: .*' "$log_file" || true
  echo "run-tp-server: running (pid $pid) at http://$TANDEM_HOST:$TANDEM_PORT, log $log_file"
}

cmd_stop() {
  local pid
  pid="$(running_pid)" || { rm -f "$pid_file"; die "not running" 3; }
  kill -TERM "$pid" 2>/dev/null
  local waited=0
  while kill -0 "$pid" 2>/dev/null && (( waited < TANDEM_STOP_TIMEOUT * 10 )); do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "run-tp-server: pid $pid still running after ${TANDEM_STOP_TIMEOUT}s; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null
    rm -f "$pid_file"
    exit 4
  fi
  rm -f "$pid_file"
  echo "run-tp-server: stopped (pid $pid)"
}

cmd_status() {
  local pid
  pid="$(running_pid)" || { echo "tandem-server: not running"; exit 3; }
  local code slots busy total
  code="$(health_code)"
  slots="$(curl_auth "http://$TANDEM_HOST:$TANDEM_PORT/slots" || true)"
  total="$(grep -o '"is_processing"' <<<"$slots" | wc -l)"
  busy="$(grep -o '"is_processing":true' <<<"$slots" | wc -l)"
  local version uptime
  version="$("$TANDEM_SERVER_BIN" --version 2>/dev/null || echo "tandem-server (version unknown)")"
  uptime="$(ps -o etime= -p "$pid" 2>/dev/null | tr -d ' ')"
  echo "$version"
  echo "tandem-server: pid $pid, up ${uptime:-?}, http://$TANDEM_HOST:$TANDEM_PORT, health $code, slots $busy/$total in use"
  [[ "$code" == 200 ]] || exit 1
}

[[ $# -ge 1 ]] || usage
action="$1"
shift
extra=()
if [[ $# -gt 0 ]]; then
  [[ "$1" == "--" ]] || usage
  shift
  extra=("$@")
fi
case "$action" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  restart) if running_pid >/dev/null; then (cmd_stop) || true; fi; cmd_start ;;
  status) cmd_status ;;
  *) usage ;;
esac
