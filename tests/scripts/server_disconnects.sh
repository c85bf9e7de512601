#!/usr/bin/env bash
# Disconnects and slow clients (issue 27): a client that leaves, streaming (mid-prefill,
# mid-decode) or not, gets its request aborted and its KV blocks freed at once; one that leaves
# mid-write leaves the server healthy; one that stops reading its stream, or sends its headers
# or body slowly, is cut after --http-timeout; a preempted request whose client leaves is
# aborted too. Checks in lib/harden_checks.py.
# Usage: server_disconnects.sh BINARY REPO_ROOT
set -euo pipefail
BIN="$1"
ROOT="$2"
# shellcheck source=lib/harden_setup.sh
source "$(dirname "$0")/lib/harden_setup.sh"  # TMP, $TMP/tiny, CHECKS, the server

status=0
start_tiny_server "$TMP/tiny" --served-model-name tiny --max-model-len 2048 \
  --max-num-batched-tokens 64 --http-timeout 2
for check in nonstream_disconnect stream_disconnect_prefill stream_disconnect_decode \
  disconnect_mid_write slow_reader slow_sender; do
  python3 "$CHECKS" "$check" --base-url "$BASE_URL" --http-timeout 2 || status=1
done
[ "$status" -eq 0 ] || finish_with_server_log "$status"
stop_tiny_server

# A KV cache for about 1.3 requests of 700 tokens: six of them preempt each other.
start_tiny_server "$TMP/tiny" --served-model-name tiny --max-model-len 700 \
  --kv-cache-memory-bytes 700000 --max-num-seqs 6
python3 "$CHECKS" preempted_abort --base-url "$BASE_URL" --requests 6 || status=1
finish_with_server_log "$status"
