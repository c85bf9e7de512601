#!/usr/bin/env bash
# End to end, audio (issue 38): `gemmaserve serve` on the tiny unified preset (the 12B's
# encoder-free audio and image embedders) with the real vocabulary and chat template, driven by
# the official openai npm SDK (tests/node/audio_openai.mjs) with the fixture WAV files.
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

start_tiny_server "$MODEL" --served-model-name gemma4 --limit-mm-per-prompt '{"audio": 2}'
node "$NODE_DIR/audio_openai.mjs" "$BASE_URL" "$ROOT/tests/data/audio" \
  "$ROOT/tests/data/golden/media"
echo "PASS: audio end to end"
