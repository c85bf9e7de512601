#!/usr/bin/env bash
# `gemmaserve serve model.gguf` as `llama-server -m` serves it (issue 36): the tokenizer comes from
# the file, completions and chat answer; with --mmproj the vision tower answers an image; a
# folder holding a model GGUF and its mmproj serves the same way; a wrong file is refused at
# start-up with its reason.
# Usage: server_gguf.sh BINARY REPO_ROOT
set -euo pipefail
BIN="$1"
ROOT="$2"
# shellcheck source=lib/tiny_server.sh
source "$(dirname "$0")/lib/tiny_server.sh"
# shellcheck source=lib/skip.sh
source "$(dirname "$0")/lib/skip.sh"
# shellcheck source=lib/answers.sh
source "$(dirname "$0")/lib/answers.sh"
GGUF="$SHARED/fixtures/gguf/models"
[ -d "$GGUF" ] && [ -f "$TEMPLATE" ] || skip "shared data missing: $GGUF, $TEMPLATE"
TMP="$(mktemp -d)"
trap 'stop_tiny_server; rm -rf "$TMP"' EXIT

failures=0
check() {  # check NAME COMMAND...
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}

start_tiny_server "$GGUF/dense-Q4_0.gguf" --chat-template "$TEMPLATE" --served-model-name tiny
check_completion_and_chat  # the tokenizer comes from the GGUF
stop_tiny_server

# The real-geometry Q4_K_M mix (Q4_K native, Q6_K converted to Q8_0 at load, BF16, F32) serves;
# the conversion is logged with its precision.
start_tiny_server "$GGUF/e2b-shape-Q4_K_M.gguf" --chat-template "$TEMPLATE" --served-model-name tiny
check_completion_and_chat
check "the Q6_K conversion is logged" grep -q "no CPU kernel for Q6_K.*to Q8_0" "$TMP/server.log"
stop_tiny_server

# A folder of GGUF files: the model and its mmproj are found by their metadata.
mkdir "$TMP/folder"
ln -s "$GGUF/vision-Q8_0.gguf" "$TMP/folder/model-Q8_0.gguf"
ln -s "$GGUF/vision-mmproj-f16.gguf" "$TMP/folder/mmproj-f16.gguf"
start_tiny_server "$TMP/folder" --chat-template "$TEMPLATE" --served-model-name tiny
check "chat with an image through the mmproj tower" test "$(post_image_chat "$TMP/image.json")" = 200
check "image answer" has_text "$TMP/image.json"
check "the prompt holds the image's soft tokens" has_image_tokens "$TMP/image.json"
stop_tiny_server

# Refused at start-up, with the reason.
refused() {  # refused EXPECTED_TEXT SERVE_ARGS...
  local expected="$1"
  shift
  ! "$BIN" serve "$@" --port 0 >"$TMP/refused.log" 2>&1 && grep -qF -- "$expected" "$TMP/refused.log"
}
check "an mmproj as the model" refused "is a multimodal projector (mmproj) file" \
  "$GGUF/vision-mmproj-f16.gguf"
check "a text GGUF as --mmproj" refused "--mmproj needs a multimodal projector GGUF" \
  "$GGUF/dense-Q4_0.gguf" --mmproj "$GGUF/dense-Q4_0.gguf"
head -c 100000 "$GGUF/dense-Q4_0.gguf" >"$TMP/truncated.gguf"
check "a truncated file" refused "truncated.gguf" "$TMP/truncated.gguf"

[ "$failures" -eq 0 ] || { tail -n 30 "$TMP/server.log" 2>/dev/null; exit 1; }
echo "all GGUF serving checks passed"
