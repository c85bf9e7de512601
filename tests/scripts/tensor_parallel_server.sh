#!/usr/bin/env bash
# `gemmaserve serve --tensor-parallel-size 2` end to end: the server starts its two ranks itself
# (mpirun), a greedy completion equals the one-process answer, and when rank 1 is killed the
# server ends within seconds with an error naming the rank (never a hang).
# Usage: tensor_parallel_server.sh BINARY REPO_ROOT
set -euo pipefail
# shellcheck source=lib/mpi_ranks.sh
source "$(dirname "$0")/lib/mpi_ranks.sh"  # LeakSanitizer off in the ranks

BIN="$1"
ROOT="$2"
# shellcheck source=lib/tiny_server.sh
source "$(dirname "$0")/lib/tiny_server.sh"  # SHARED VOCAB TEMPLATE, the server
# shellcheck source=lib/skip.sh
source "$(dirname "$0")/lib/skip.sh"

fail() {
  echo "FAIL: $1"
  exit 1
}

[ -f "$VOCAB" ] || skip "shared data missing: $VOCAB (set GEMMASERVE_SHARED)"
[ -f "$TEMPLATE" ] || skip "shared data missing: $TEMPLATE"
command -v mpirun >/dev/null || fail "mpirun is not installed (run scripts/setup)"

TMP="$(mktemp -d)"
trap 'stop_tiny_server; rm -rf "$TMP"' EXIT
MODEL="$TMP/tiny"
make_tiny_model "$VOCAB" "$TEMPLATE" "$MODEL"
FLAGS=(--max-model-len 256 --kv-cache-memory 32M --max-num-seqs 4)

# The one-process answer first.
expected="$("$BIN" generate "$MODEL" "${FLAGS[@]}" --prompt "The capital of France" \
  --max-tokens 8 --temperature 0 --ignore-eos --json 2>/dev/null | tail -n 1)"
expected_text="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["text"])' "$expected")"

start_tiny_server "$MODEL" --served-model-name tiny "${FLAGS[@]}" --tensor-parallel-size 2
grep -q "tensor parallel rank 1 of 2" "$TMP/server.log" || fail "rank 1 did not start"
body='{"model": "tiny", "prompt": "The capital of France", "max_tokens": 8, "temperature": 0,
       "ignore_eos": true}'
answer="$(curl -sf "$BASE_URL/v1/completions" -H 'Content-Type: application/json' -d "$body")" ||
  fail "completion request failed"
text="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["choices"][0]["text"])' \
  "$answer")"
[ "$text" = "$expected_text" ] || fail "TP=2 answered '$text', one process '$expected_text'"

# Rank 1 is a child of mpirun (the server's process after it re-executed itself).
rank1=""
for pid in $(pgrep -P "$SERVER_PID"); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
    rank1="$pid"
  fi
done
[ -n "$rank1" ] || fail "no rank 1 process under the server (pid $SERVER_PID)"
kill -9 "$rank1"
for _ in $(seq 100); do
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$SERVER_PID" 2>/dev/null; then
  fail "the server still runs 10 s after rank 1 was killed"
fi
wait "$SERVER_PID" && fail "the server exited 0 after losing rank 1" || true
SERVER_PID=""
grep "process rank 1" "$TMP/server.log" || {
  tail -n 20 "$TMP/server.log"
  fail "the server's error does not name rank 1"
}
echo "PASS: TP=2 serves the one-process answer ('$text'); a killed rank ends the server"
