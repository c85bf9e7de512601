#!/usr/bin/env bash
# The committed demo model (models/gemma4-demo): npm's @huggingface/tokenizers gives the ids
# gemmaserve's tokenizer gives; python3-jinja2 renders its chat template as gemmaserve does; and
# `gemmaserve serve` on it passes tests/node/demo_model.mjs (held-out arithmetic answered in form
# with finish_reason stop and at least MIN_ACCURACY exact, a capital, a tool call received as
# tool_calls and the answer after the tool result, thinking split off, greetings and held-out
# out-of-skill questions answered with the skills text).
# Usage: demo_model.sh BINARY REPO_ROOT
set -euo pipefail

BIN="$1"
ROOT="$2"
MODEL="$ROOT/models/gemma4-demo"
NODE_DIR="$ROOT/tests/node"
# The committed model's measured exact share (docs/demo_model/README.md) less a margin: a floor
# against engine regressions (issue 26 asks for 0.95).
MIN_ACCURACY=0.98

# shellcheck source=lib/skip.sh
source "$(dirname "$0")/lib/skip.sh"
command -v node >/dev/null || skip "node is not installed (run scripts/setup)"
command -v curl >/dev/null || skip "curl is not installed (run scripts/setup)"
[ -d "$NODE_DIR/node_modules/openai" ] || skip "npm packages missing (run scripts/setup)"
[ -d "$NODE_DIR/node_modules/@huggingface/tokenizers" ] || skip "npm packages missing (run scripts/setup)"

TMP="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
failures=0
check() {  # check NAME COMMAND...
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}

# Tokenizer: the demo's prompts (special tokens, digits, unknown characters) and random strings.
COMPARE="$NODE_DIR/tokenizer_compare.mjs"
node "$COMPARE" strings --random 300 --seed 26 --out "$TMP/random.jsonl"
cat - "$TMP/random.jsonl" >"$TMP/strings.jsonl" <<'STRINGS'
"<bos><|turn>user\nWhat is 47 + 38?<turn|>\n<|turn>model\n47 + 38 = 85.<turn|>"
"<|turn>system\n<|think|><turn|>\n<|channel>thought\nThe sum is 1234567890.<channel|>"
"<|tool_call>call:get_weather{city:<|\"|>Lyon<|\"|>}<tool_call|><|tool_response>"
"Caf\u00e9 \u4e2d\u6587 \ud83d\ude00  double  spaces\ttab\n\nWhat's the capital of Peru?"
STRINGS
node "$COMPARE" encode --tokenizer "$MODEL" --strings "$TMP/strings.jsonl" --out "$TMP/npm.jsonl"
"$BIN" tokenize --tokenizer "$MODEL" --jsonl "$TMP/strings.jsonl" >"$TMP/ours.jsonl"
check "tokenizer: @huggingface/tokenizers ids" node "$COMPARE" compare --label demo \
  --strings "$TMP/strings.jsonl" --expected "$TMP/npm.jsonl" --actual "$TMP/ours.jsonl"

# Chat template: python3-jinja2 (HF's environment) and gemmaserve render the same prompts.
if /usr/bin/python3 -c "import jinja2" 2>/dev/null; then
  cat >"$TMP/conversations.json" <<'CONV'
[{"messages": [{"role": "user", "content": "What is 47 + 38?"}], "add_generation_prompt": true},
 {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true,
  "chat_template_kwargs": {"enable_thinking": true}},
 {"messages": [{"role": "user", "content": "What's the weather in Lyon?"},
   {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Lyon\"}"}}]},
   {"role": "tool", "tool_call_id": "c1", "content": "{\"temperature\": 21}"}],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]}}}], "add_generation_prompt": true}]
CONV
  /usr/bin/python3 "$ROOT/tools/render_chat_template.py" --template "$MODEL/chat_template.jinja" \
    --conversations "$TMP/conversations.json" >"$TMP/jinja2.json"
  "$BIN" render-chat-template --template "$MODEL/chat_template.jinja" \
    --conversations "$TMP/conversations.json" >"$TMP/ours.json"
  check "chat template: python3-jinja2 rendering" cmp -s "$TMP/jinja2.json" "$TMP/ours.json"
else
  [ "${CI:-}" = "true" ] && { echo "FAIL: python3-jinja2 missing (required under CI)"; exit 1; }
  echo "SKIP: python3-jinja2 missing"
fi

# The server on the demo model, driven by the openai SDK.
LOG="$TMP/server.log"
"$BIN" serve "$MODEL" --served-model-name gemma4-demo --host 127.0.0.1 --port 0 --threads 2 \
  >"$LOG" 2>&1 &
SERVER_PID=$!
BASE=""
for _ in $(seq 1 600); do
  PORT="$(sed -n 's/.*Uvicorn running on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$LOG" || true)"
  if [ -n "$PORT" ] && curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then
    BASE="http://127.0.0.1:$PORT"
    break
  fi
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
[ -n "$BASE" ] || { echo "FAIL: server did not become healthy"; cat "$LOG"; exit 1; }
check "openai sdk on the demo model" node "$NODE_DIR/demo_model.mjs" "$BASE" \
  "$MODEL/heldout.txt" 200 "$MIN_ACCURACY" "$ROOT/tools/demo_model/skills_heldout.txt"
exit $((failures > 0))
