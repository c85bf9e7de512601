#!/usr/bin/env bash
# `gemmaserve quantize --format gguf` (issue 36): a tiny model with the real Gemma 4 vocabulary and
# chat template, quantized to a Q4_K GGUF and its mmproj, serves from those files alone: the
# GGUF's tokenizer encodes as the folder's tokenizer.json does, its chat template renders chats,
# completions answer, and the folder of both files answers an image through the mmproj.
# Usage: quantize_gguf.sh BINARY REPO_ROOT
set -euo pipefail
BIN="$1"
ROOT="$2"
# shellcheck source=lib/tiny_server.sh
source "$(dirname "$0")/lib/tiny_server.sh"
# shellcheck source=lib/skip.sh
source "$(dirname "$0")/lib/skip.sh"
# shellcheck source=lib/answers.sh
source "$(dirname "$0")/lib/answers.sh"
[ -f "$VOCAB" ] && [ -f "$TEMPLATE" ] || skip "shared data missing: $VOCAB, $TEMPLATE"
TMP="$(mktemp -d)"
trap 'stop_tiny_server; rm -rf "$TMP"' EXIT

failures=0
check() {  # check NAME COMMAND...
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}

make_tiny_model "$VOCAB" "$TEMPLATE" "$TMP/tiny"
"$BIN" quantize "$TMP/tiny" "$TMP/gguf/tiny-Q4_K.gguf" --type q4_k >"$TMP/quantize.log" 2>&1 ||
  { cat "$TMP/quantize.log"; exit 1; }
check "the model and its mmproj" test "$(ls "$TMP/gguf" | tr '\n' ' ')" = \
  "mmproj-tiny-Q4_K.gguf tiny-Q4_K.gguf "
check "the summary names the files" \
  grep -q "wrote $TMP/gguf/tiny-Q4_K.gguf $TMP/gguf/mmproj-tiny-Q4_K.gguf" "$TMP/quantize.log"

# The same ids from the GGUF's tokenizer as from the folder's tokenizer.json.
same_ids() {  # same_ids TEXT [tokenize flags...]
  local text="$1"
  shift
  [ "$("$BIN" tokenize --tokenizer "$TMP/gguf/tiny-Q4_K.gguf" "$@" -- "$text")" = \
    "$("$BIN" tokenize --tokenizer "$TMP/tiny" "$@" -- "$text")" ]
}
for text in "Hello world" "<start_of_turn>user
Hi there<end_of_turn>" "naïve café 日本語 🙂 <|image|>" "  spaces	tabs

newlines" 'def f(x): return {"a": x ** 2}'; do
  check "tokenize: ${text:0:20}" same_ids "$text" --add-special
  check "tokenize (no parse special): ${text:0:20}" same_ids "$text" --no-parse-special
done
check "the chat template is in the file" grep -qaF "tokenizer.chat_template" "$TMP/gguf/tiny-Q4_K.gguf"

# Served from the GGUF alone: tokenizer and chat template come from the file.
start_tiny_server "$TMP/gguf/tiny-Q4_K.gguf" --served-model-name tiny
check_completion_and_chat  # the chat template comes from the file
stop_tiny_server

# The folder of both files: the model finds its mmproj, and an image goes through the tower.
start_tiny_server "$TMP/gguf" --served-model-name tiny
check "chat with an image through the written mmproj" test "$(post_image_chat "$TMP/image.json")" = 200
check "image answer" has_text "$TMP/image.json"
check "the prompt holds the image's soft tokens" has_image_tokens "$TMP/image.json"
stop_tiny_server

[ "$failures" -eq 0 ] || { tail -n 30 "$TMP/server.log" 2>/dev/null; exit 1; }
echo "all quantize --format gguf checks passed"
