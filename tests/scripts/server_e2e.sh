#!/usr/bin/env bash
# End to end: `gemmaserve serve` on the tiny random-weight Gemma 4 model with the real vocabulary
# and chat template, driven by curl (the seed requests) and the official openai npm SDK
# (tests/node/server_openai.mjs): chat and completions, streaming, tools, logprobs, the
# end-of-turn stop (also under --override-generation-config), 64 concurrent streams and client
# disconnects returning every KV block. Usage: server_e2e.sh BINARY REPO_ROOT
# The parallel wrappers (server_e2e_*_parallel.sh) rerun it through the environment:
#   SERVER_E2E_FLAGS      extra serve flags (e.g. --data-parallel-size 2), word-split
#   SERVER_E2E_LAUNCHER   a command the server runs under (e.g. mpirun -n 2), word-split
#   SERVER_E2E_SUBSET=1   only the seed requests, models, metrics and the SDK's stop checks
#   SERVER_E2E_ENGINES=N  also check that each of N data-parallel replicas generated tokens
set -euo pipefail

BIN="$1"
ROOT="$2"
# shellcheck source=lib/tiny_server.sh
source "$(dirname "$0")/lib/tiny_server.sh"  # SHARED VOCAB TEMPLATE, the server

# shellcheck source=lib/skip.sh
source "$(dirname "$0")/lib/skip.sh"

NODE_DIR="$ROOT/tests/node"
[ -f "$VOCAB" ] || skip "shared data missing: $VOCAB"
command -v node >/dev/null || skip "node is not installed (run scripts/setup)"
command -v curl >/dev/null || skip "curl is not installed (run scripts/setup)"
[ -d "$NODE_DIR/node_modules/openai" ] || skip "npm package openai missing (run scripts/setup)"

TMP="$(mktemp -d)"
trap 'stop_tiny_server; rm -rf "$TMP"' EXIT
MODEL="$TMP/model"
make_tiny_model "$VOCAB" "$TEMPLATE" "$MODEL"

# Starts the server on a free port and waits for /health, bounded.
start_server() {
  # shellcheck disable=SC2086
  start_tiny_server "$MODEL" --served-model-name gemma4 ${SERVER_E2E_FLAGS:-} "$@"
  BASE="$BASE_URL"
}
stop_server() { stop_tiny_server; }

failures=0
check() {  # check NAME COMMAND...
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}

start_server

# The seed requests, verbatim but for the port.
seed_completion() {
  local out
  out="$(curl -s -w '\n%{http_code}' "$BASE/v1/completions" \
    -H "Content-Type: application/json" \
    -d '{
    "model": "gemma4",
    "prompt": "Explain why graph execution improves decode performance.",
    "max_tokens": 128,
    "temperature": 0
  }')"
  [ "$(tail -n1 <<<"$out")" = 200 ] && head -n -1 <<<"$out" | grep -q '"choices":\[{"index":0,"text":'
}
seed_chat() {
  local out
  out="$(curl -s -w '\n%{http_code}' "$BASE/v1/chat/completions" \
    -H "Content-Type: application/json" \
    -d '{
    "model": "gemma4",
    "messages": [
      {"role": "user", "content": "Explain why graph execution improves decode performance."}
    ],
    "max_tokens": 128,
    "temperature": 0
  }')"
  [ "$(tail -n1 <<<"$out")" = 200 ] && head -n -1 <<<"$out" | grep -q '"message":{"role":"assistant"'
}
seed_stream() {
  curl -sN "$BASE/v1/completions" -H "Content-Type: application/json" \
    -d '{"model":"gemma4","prompt":"<start_of_turn>user\nTell me a story<end_of_turn>\n<start_of_turn>model\n","max_tokens":20,"stream":true}' \
    | tail -n 2 | grep -q '^data: \[DONE\]$'
}
seed_models() { curl -s "$BASE/v1/models" | grep -q '"id":"gemma4"'; }
metrics_names() {
  local m
  m="$(curl -s "$BASE/metrics")"
  for name in vllm:num_requests_running vllm:num_requests_waiting vllm:kv_cache_usage_perc \
    vllm:prefix_cache_queries_total vllm:prefix_cache_hits_total vllm:prompt_tokens_total \
    vllm:generation_tokens_total 'vllm:request_success_total{engine="0",model_name="gemma4",finished_reason="length"}' \
    vllm:time_to_first_token_seconds_bucket vllm:inter_token_latency_seconds_bucket \
    vllm:e2e_request_latency_seconds_bucket gemmaserve:kv_blocks_in_use; do
    grep -qF "$name" <<<"$m" || { echo "metric $name missing"; return 1; }
  done
}

check "seed completions request" seed_completion
check "seed chat request" seed_chat
check "seed streaming request" seed_stream
check "models list" seed_models
check "metrics names" metrics_names
if [ "${SERVER_E2E_SUBSET:-0}" != 1 ]; then
  check "openai sdk: api + stop" node "$NODE_DIR/server_openai.mjs" "$BASE" api stop
else
  check "openai sdk: stop" node "$NODE_DIR/server_openai.mjs" "$BASE" stop
fi
# Every data-parallel replica generated tokens (vllm:generation_tokens_total{engine="R"} > 0).
every_engine_served() {
  local m r
  m="$(curl -s "$BASE/metrics")"
  for r in $(seq 0 $((SERVER_E2E_ENGINES - 1))); do
    grep -qE "^vllm:generation_tokens_total\{engine=\"$r\",[^}]*\} [1-9]" <<<"$m" ||
      { echo "engine $r generated nothing"; return 1; }
  done
}
if [ "${SERVER_E2E_SUBSET:-0}" != 1 ]; then
  check "openai sdk: 64 streams + disconnects" node "$NODE_DIR/server_openai.mjs" "$BASE" load
  check "openai sdk: tool history as apply_chat_template" \
    node "$NODE_DIR/tool_history_openai.mjs" "$BASE" "$MODEL" "$TEMPLATE" "$ROOT"
fi
if [ -n "${SERVER_E2E_ENGINES:-}" ]; then
  check "every data-parallel replica served" every_engine_served
fi
stop_server

if [ "${SERVER_E2E_SUBSET:-0}" != 1 ]; then
  # The stop must not depend on the sampling defaults (vLLM #45591).
  start_server --override-generation-config '{"temperature": 0.5}'
  check "stop under --override-generation-config" node "$NODE_DIR/server_openai.mjs" "$BASE" stop
  stop_server
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed; last server log:"
  tail -n 50 "$TMP/server.log"
  exit 1
fi
echo "server_e2e: all checks passed"
