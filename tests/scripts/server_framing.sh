#!/usr/bin/env bash
# HTTP framing after an early answer (issue 35): every answer given before the request's body
# was read (401 of --api-key, 404/405, 413, 414, 431, 400s of ambiguous framing, the overload and
# drain 503s) either reads and drops the rest of the body or says Connection: close and closes,
# so a body that is itself a request never runs; and --max-http-workers bounds the server's
# threads, a burst past it getting the 503 at once. Checks in lib/framing_checks.py.
# Usage: server_framing.sh BINARY REPO_ROOT
set -euo pipefail
BIN="$1"
ROOT="$2"
# shellcheck source=lib/harden_setup.sh
source "$(dirname "$0")/lib/harden_setup.sh"  # TMP, $TMP/tiny, the server
FRAMING="$ROOT/tests/scripts/lib/framing_checks.py"

status=0
rc=0
got="$("$BIN" serve "$TMP/tiny" --max-http-workers 0 2>&1)" || rc=$?
if [ "$rc" -ne 2 ] || [ "$got" != "error: --max-http-workers must be positive" ]; then
  echo "FAIL: serve --max-http-workers 0: exit $rc, '$got'"
  status=1
fi

start_tiny_server "$TMP/tiny" --served-model-name tiny --max-model-len 2048 --api-key sesame \
  --max-request-size-mb 1
python3 "$FRAMING" early_answers --base-url "$BASE_URL" --api-key sesame || status=1
[ "$status" -eq 0 ] || finish_with_server_log "$status"
stop_tiny_server

start_tiny_server "$TMP/tiny" --served-model-name tiny --max-model-len 2048 --max-num-seqs 1 \
  --max-waiting-requests 1 --shutdown-timeout 30
python3 "$FRAMING" overload_then_drain --base-url "$BASE_URL" --server-pid "$SERVER_PID" ||
  status=1
[ "$status" -eq 0 ] || finish_with_server_log "$status"
wait_server_exit 30 || finish_with_server_log 1

start_tiny_server "$TMP/tiny" --served-model-name tiny --max-model-len 2048 --max-http-workers 16
python3 "$FRAMING" worker_bound --base-url "$BASE_URL" --server-pid "$SERVER_PID" \
  --max-http-workers 16 --connections 200 || status=1
finish_with_server_log "$status"
