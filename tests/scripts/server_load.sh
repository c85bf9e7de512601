#!/usr/bin/env bash
# Load and client-disconnect test of `gemmaserve serve`: serves a tiny random checkpoint (with the
# real Gemma 4 tokenizer and chat template), then tests/node/load_disconnect.mjs opens 64
# concurrent streaming chat completions with the openai SDK, aborts 32 mid-stream, and checks the
# rest finish and /metrics returns to no running requests and an empty KV cache.
# Usage: server_load.sh BINARY REPO_ROOT
# Skips (exit 0) only while the binary has no `serve` command; any other gap is a failure.
set -euo pipefail

BIN="$1"
ROOT="$2"
# shellcheck source=lib/tiny_server.sh
source "$(dirname "$0")/lib/tiny_server.sh"  # SHARED VOCAB TEMPLATE, the server

fail() {
  echo "FAIL: $1"
  exit 1
}

help_out="$("$BIN" serve --help 2>&1 || true)"
if grep -q "unknown command 'serve'" <<<"$help_out"; then
  echo "SKIP: this gemmaserve has no 'serve' command yet (server_load runs once it exists)"
  exit 0
fi

NODE_DIR="$ROOT/tests/node"
[ -f "$VOCAB" ] || fail "shared data missing: $VOCAB (set GEMMASERVE_SHARED)"
[ -f "$TEMPLATE" ] || fail "shared data missing: $TEMPLATE"
command -v node >/dev/null || fail "node is not installed (run scripts/setup)"
[ -d "$NODE_DIR/node_modules/openai" ] || fail "npm package openai missing (run scripts/setup)"

TMP="$(mktemp -d)"
trap 'stop_tiny_server; rm -rf "$TMP"' EXIT
MODEL="$TMP/tiny"
make_tiny_model "$VOCAB" "$TEMPLATE" "$MODEL"
start_tiny_server "$MODEL" --served-model-name tiny --max-model-len 512

status=0
node "$NODE_DIR/load_disconnect.mjs" --base-url "$BASE_URL" --model tiny --requests 64 --abort 32 \
  --max-tokens 32 --health-retries 600 --metrics-retries 120 || status=$?
finish_with_server_log "$status"
