#!/usr/bin/env bash
# End to end, audio (issues 37, 38): `gemmaserve serve` on the tiny unified preset (the 12B's
# encoder-free audio and image embedders) with the real vocabulary and chat template, driven by
# the official openai npm SDK: audio in chat (tests/node/audio_openai.mjs, the fixture WAV
# files) and speech-to-text (tests/node/speech_openai.mjs).
# Usage: audio_e2e.sh BINARY REPO_ROOT
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
[ -d "$NODE_DIR/node_modules/openai" ] || skip "npm package openai missing (run scripts/setup)"

TMP="$(mktemp -d)"
trap 'stop_tiny_server; rm -rf "$TMP"' EXIT
MODEL="$TMP/model"
make_tiny_model "$VOCAB" "$TEMPLATE" "$MODEL" tiny-unified

# Speech-to-text's limits are set low so the tests' files cross them: 190 s, 7 MiB.
VLLM_MAX_AUDIO_CLIP_FILESIZE_MB=7 start_tiny_server "$MODEL" --served-model-name gemma4 \
  --limit-mm-per-prompt '{"audio": 2}' --max-audio-seconds 190
node "$NODE_DIR/audio_openai.mjs" "$BASE_URL" "$ROOT/tests/data/audio" \
  "$ROOT/tests/data/golden/media"
node "$NODE_DIR/speech_openai.mjs" "$BASE_URL" "$ROOT/tests/data/audio"
echo "PASS: audio end to end"
