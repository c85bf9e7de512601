#!/usr/bin/env bash
# Overload (issue 27): a full waiting queue answers 503 + Retry-After with an OpenAI error,
# --request-timeout aborts a request at its deadline (504, or an error event when streamed),
# --max-connections refuses one connection more with a 503 then closes, and 1,000 simultaneous
# requests each get 200 or 503 (no connection error) without the queue passing its bound; bad
# values of the connection flags are refused with their messages.
# Usage: server_overload.sh BINARY REPO_ROOT
set -euo pipefail
BIN="$1"
ROOT="$2"
# shellcheck source=lib/harden_setup.sh
source "$(dirname "$0")/lib/harden_setup.sh"  # TMP, $TMP/tiny, CHECKS, the server

status=0
# The connection flags' bad values: exit 2 with their messages, before the model loads.
for case in "--max-connections 0|--max-connections must be positive" \
  "--request-timeout -1|--request-timeout must not be negative" \
  "--shutdown-timeout -2|--shutdown-timeout must not be negative" \
  "--http-timeout 0|--http-timeout must be positive"; do
  flags="${case%%|*}"
  want="error: ${case#*|}"
  rc=0
  # shellcheck disable=SC2086
  got="$("$BIN" serve "$TMP/tiny" $flags 2>&1)" || rc=$?
  if [ "$rc" -ne 2 ] || [ "$got" != "$want" ]; then
    echo "FAIL: serve $flags: exit $rc, '$got' (wanted exit 2, '$want')"
    status=1
  fi
done
start_tiny_server "$TMP/tiny" --served-model-name tiny --max-model-len 2048 --max-num-seqs 1 \
  --max-waiting-requests 2 --request-timeout 3 --max-connections 8
python3 "$CHECKS" queue_full_and_deadline --base-url "$BASE_URL" || status=1
python3 "$CHECKS" connection_cap --base-url "$BASE_URL" --max-connections 8 || status=1
[ "$status" -eq 0 ] || finish_with_server_log "$status"
stop_tiny_server

start_tiny_server "$TMP/tiny" --served-model-name tiny --max-model-len 256 --max-num-seqs 8 \
  --max-waiting-requests 16 --max-connections 1100 --max-http-workers 1100
# The client holds every socket open: ask for descriptors, fewer connections if refused.
ulimit -n 4096 2>/dev/null || true
connections=$(( $(ulimit -n) > 1200 ? 1000 : $(ulimit -n) - 200 ))
python3 "$CHECKS" thousand_connections --base-url "$BASE_URL" --connections "$connections" \
  --max-waiting 16 || status=1
finish_with_server_log "$status"
