# Sourced by tests/scripts/*.sh: a tiny random Gemma 4 checkpoint with the real vocabulary and chat
# template, served by `gemmaserve serve` on a free loopback port. Needs BIN and ROOT set before
# sourcing, TMP before starting, and stop_tiny_server in the caller's EXIT trap.
SERVER_PID=""
BASE_URL=""
SHARED="${GEMMASERVE_SHARED:-$ROOT/../shared}"
VOCAB="$SHARED/data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf"
TEMPLATE="$SHARED/data/chat-templates/google-gemma-4-31B-it.jinja"

# make_tiny_model VOCAB TEMPLATE OUT_DIR [PRESET (tiny)]
make_tiny_model() {
  "$BIN" make-test-model --preset "${4:-tiny}" --dtype bf16 --seed 0 --out "$3" >/dev/null
  "$BIN" export-tokenizer --from "$1" --out "$3" >/dev/null
  cp "$2" "$3/chat_template.jinja"
}

# start_tiny_server MODEL_DIR [serve flags...]: serves on port 0, waits (bounded) for /health and
# sets BASE_URL; exits the test with the server's log when it dies or never answers. The server
# runs under $SERVER_E2E_LAUNCHER when set (e.g. "mpirun -n 2", word-split). MODEL_DIR may be left
# to a --config file's model: key.
start_tiny_server() {
  local log="$TMP/server.log" port=""
  # The log exists before the first poll: the background job opens it only when it gets to run,
  # and sed on a missing file would end the test (set -e) before the server ever started.
  : >"$log"
  # shellcheck disable=SC2086
  ${SERVER_E2E_LAUNCHER:-} "$BIN" serve --host 127.0.0.1 --port 0 "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 600); do
    port="$(sed -n 's/.*Uvicorn running on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")"
    if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then
      BASE_URL="http://127.0.0.1:$port"
      return 0
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.5
  done
  echo "server did not become healthy; its log:"
  tail -n 40 "$log"
  echo "FAIL: gemmaserve serve did not start"
  exit 1
}

stop_tiny_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}

# wait_server_exit SECONDS: reaps the server once it exits (polled, bounded); returns 1, saying
# why, unless it exited 0 within SECONDS.
wait_server_exit() {
  local server_rc=0
  for _ in $(seq "$(($1 * 10))"); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "server still running $1 s after SIGTERM"
    return 1
  fi
  wait "$SERVER_PID" || server_rc=$?
  SERVER_PID=""
  [ "$server_rc" -eq 0 ] || echo "server exited with $server_rc after SIGTERM"
  [ "$server_rc" -eq 0 ]
}

# finish_with_server_log STATUS: exits with STATUS, failing when the server died meanwhile and
# showing its log on any failure.
finish_with_server_log() {
  local status="$1"
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "server exited early; its log:"
    tail -n 40 "$TMP/server.log"
    status=1
  elif [ "$status" -ne 0 ]; then
    echo "server log (last 40 lines):"
    tail -n 40 "$TMP/server.log"
  fi
  exit "$status"
}
