#!/usr/bin/env bash
# Shutdown and faults (issue 27): on SIGTERM the server answers new requests and /health with
# 503, lets running requests finish within --shutdown-timeout and exits 0; requests that need
# longer are aborted (503 / an error event) and it still exits 0; an engine thread that fails
# (test-only hook GEMMASERVE_FAULT_ENGINE_STEP, in builds with -DGEMMASERVE_FAULT_INJECTION=ON
# as scripts/test makes) turns /health to 503 and the server exits non-zero by itself.
# Usage: server_shutdown.sh BINARY REPO_ROOT
set -euo pipefail
BIN="$1"
ROOT="$2"
# shellcheck source=lib/harden_setup.sh
source "$(dirname "$0")/lib/harden_setup.sh"  # TMP, $TMP/tiny, CHECKS, the server

fail() {
  echo "FAIL: $1"
  tail -n 30 "$TMP/server.log"
  exit 1
}

# sigterm_run CHECK SHUTDOWN_TIMEOUT: the check starts its requests and prints READY; then
# SIGTERM; the check's verdict and the server's exit code (0, within a bounded time) both count.
sigterm_run() {
  local check="$1" timeout="$2" rc=0
  start_tiny_server "$TMP/tiny" --served-model-name tiny --max-model-len 2048 \
    --shutdown-timeout "$timeout"
  coproc CHECK_PROC { python3 "$CHECKS" "$check" --base-url "$BASE_URL"; }
  local line=""
  read -r -t 60 line <&"${CHECK_PROC[0]}" || true
  [ "$line" = "READY" ] || fail "$check did not start its requests: '$line'"
  kill -TERM "$SERVER_PID"
  local check_pid=$CHECK_PROC_PID
  cat <&"${CHECK_PROC[0]}" || true
  wait "$check_pid" || rc=$?
  [ "$rc" -eq 0 ] || fail "$check failed"
  wait_server_exit 30 || fail "$check: no clean exit"
  echo "$check: server exited 0"
}

sigterm_run drain_in_flight 60
sigterm_run abort_at_timeout 1

if grep -q "GEMMASERVE_FAULT_INJECTION:BOOL=ON" "$(dirname "$BIN")/CMakeCache.txt" 2>/dev/null; then
  GEMMASERVE_FAULT_ENGINE_STEP=3 start_tiny_server "$TMP/tiny" --served-model-name tiny
  python3 "$CHECKS" failed_engine --base-url "$BASE_URL" || finish_with_server_log 1
  # A failed engine serves nobody again: the server exits by itself, non-zero, for a supervisor.
  for _ in $(seq 300); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$SERVER_PID" 2>/dev/null && fail "the server still runs 30 s after its engine failed"
  rc=0
  wait "$SERVER_PID" || rc=$?
  SERVER_PID=""
  [ "$rc" -ne 0 ] || fail "the server exited 0 after its engine failed"
  grep -q "exiting so that a supervisor restarts the server" "$TMP/server.log" ||
    fail "no log line saying why the server exits"
  echo "failed engine: the server exited with $rc"
  exit 0
else
  skip "failed-engine check: this build has no fault injection (-DGEMMASERVE_FAULT_INJECTION=ON)"
fi
finish_with_server_log 0
