#!/usr/bin/env bash
# Overload (issue 27): a full waiting queue answers 503 + Retry-After with an OpenAI error,
# --request-timeout aborts a request at its deadline (504, or an error event when streamed),
# --max-connections refuses one connection more with a 503 then closes, and 1,000 simultaneous
# requests each get 200 or 503 (no connection error) without the queue passing its bound.
# Usage: server_overload.sh BINARY REPO_ROOT
set -euo pipefail
BIN="$1"
ROOT="$2"
# shellcheck source=lib/harden_setup.sh
source "$(dirname "$0")/lib/harden_setup.sh"  # TMP, $TMP/tiny, CHECKS, the server

status=0
start_tiny_server "$TMP/tiny" --served-model-name tiny --max-model-len 2048 --max-num-seqs 1 \
  --max-waiting-requests 2 --request-timeout 3 --max-connections 8
python3 "$CHECKS" queue_full_and_deadline --base-url "$BASE_URL" || status=1
python3 "$CHECKS" connection_cap --base-url "$BASE_URL" --max-connections 8 || status=1
[ "$status" -eq 0 ] || finish_with_server_log "$status"
stop_tiny_server

start_tiny_server "$TMP/tiny" --served-model-name tiny --max-model-len 256 --max-num-seqs 8 \
  --max-waiting-requests 16 --max-connections 1100
# The client holds every socket open: ask for descriptors, fewer connections if refused.
ulimit -n 4096 2>/dev/null || true
connections=$(( $(ulimit -n) > 1200 ? 1000 : $(ulimit -n) - 200 ))
python3 "$CHECKS" thousand_connections --base-url "$BASE_URL" --connections "$connections" \
  --max-waiting 16 || status=1
finish_with_server_log "$status"
