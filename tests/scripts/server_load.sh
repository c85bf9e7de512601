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

fail() {
  echo "FAIL: $1"
  exit 1
}

help_out="$("$BIN" serve --help 2>&1 || true)"
if grep -q "unknown command 'serve'" <<<"$help_out"; then
  echo "SKIP: this gemmaserve has no 'serve' command yet (server_load runs once it exists)"
  exit 0
fi

SHARED="${GEMMASERVE_SHARED:-$ROOT/../shared}"
VOCAB="$SHARED/data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf"
TEMPLATE="$SHARED/data/chat-templates/google-gemma-4-31B-it.jinja"
NODE_DIR="$ROOT/tests/node"
[ -f "$VOCAB" ] || fail "shared data missing: $VOCAB (set GEMMASERVE_SHARED)"
[ -f "$TEMPLATE" ] || fail "shared data missing: $TEMPLATE"
command -v node >/dev/null || fail "node is not installed (run scripts/setup)"
[ -d "$NODE_DIR/node_modules/openai" ] || fail "npm package openai missing (run scripts/setup)"

TMP="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

MODEL="$TMP/tiny"
"$BIN" make-test-model --preset tiny --out "$MODEL" >/dev/null
"$BIN" export-tokenizer --from "$VOCAB" --out "$MODEL" >/dev/null
cp "$TEMPLATE" "$MODEL/chat_template.jinja"

# A free port: bind port 0, read what the kernel chose, release it.
PORT="$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();});')"
BASE_URL="http://127.0.0.1:$PORT"

"$BIN" serve "$MODEL" --host 127.0.0.1 --port "$PORT" --served-model-name tiny \
  --max-model-len 512 >"$TMP/server.log" 2>&1 &
SERVER_PID=$!

# Wait (bounded) for the port to open, failing at once if the server dies while loading.
for _ in $(seq 600); do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "server exited before listening; its log:"
    tail -n 40 "$TMP/server.log"
    fail "gemmaserve serve did not start"
  fi
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
  sleep 0.5
done

status=0
node "$NODE_DIR/load_disconnect.mjs" --base-url "$BASE_URL" --model tiny --requests 64 --abort 32 \
  --max-tokens 32 --health-retries 600 --metrics-retries 120 || status=$?
if ! kill -0 "$SERVER_PID" 2>/dev/null; then
  echo "server exited early; its log:"
  tail -n 40 "$TMP/server.log"
  status=1
elif [ "$status" -ne 0 ]; then
  echo "server log (last 40 lines):"
  tail -n 40 "$TMP/server.log"
fi
exit "$status"
