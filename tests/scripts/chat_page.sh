#!/usr/bin/env bash
# The chat page at GET / in a real browser: serves a tiny random checkpoint (the unified preset,
# which takes images, audio and video; real Gemma 4 tokenizer and chat template) with --api-key,
# then tests/node/chat_page.mjs drives Debian's chromium through playwright-core: the key prompt,
# a streamed answer, a stop mid-stream (the server must count the request as aborted), thinking
# and tool calls, an image, an audio file and a recording, a video clip (an H.264 MP4 made here by
# Debian's python3-av) and a truncated one the server refuses, and screenshots saved as
# BUILD_DIR/chat_page.png and BUILD_DIR/chat_page_video.png.
# Usage: chat_page.sh BINARY REPO_ROOT
# Without chromium, python3-av or the shared data it skips outside CI and fails under CI=true.
set -euo pipefail

BIN="$1"
ROOT="$2"
BUILD_DIR="$(cd "$(dirname "$BIN")" && pwd)"
# shellcheck source=lib/tiny_server.sh
source "$(dirname "$0")/lib/tiny_server.sh"  # SHARED VOCAB TEMPLATE, the server

fail() {
  echo "FAIL: $1"
  exit 1
}
missing() {
  [ "${CI:-}" != true ] || fail "$1 (required under CI)"
  echo "SKIP: $1"
  exit 0
}

CHROMIUM="${GEMMASERVE_CHROMIUM:-/usr/bin/chromium}"
NODE_DIR="$ROOT/tests/node"
[ -x "$CHROMIUM" ] || missing "no browser at $CHROMIUM (scripts/setup installs Debian's chromium)"
[ -f "$VOCAB" ] || missing "shared data missing: $VOCAB (set GEMMASERVE_SHARED)"
[ -f "$TEMPLATE" ] || missing "shared data missing: $TEMPLATE"
/usr/bin/python3 -c 'import av' 2>/dev/null || missing "Debian's python3-av is not installed (run scripts/setup)"
command -v node >/dev/null || fail "node is not installed (run scripts/setup)"
[ -d "$NODE_DIR/node_modules/playwright-core" ] ||
  fail "npm package playwright-core missing (run scripts/setup)"

TMP="$(mktemp -d)"
trap 'stop_tiny_server; rm -rf "$TMP"' EXIT
MODEL="$TMP/tiny"
make_tiny_model "$VOCAB" "$TEMPLATE" "$MODEL" tiny-unified
# A 2-second clip, and its first half: the 'mdat' box promises bytes the file does not have.
/usr/bin/python3 "$(dirname "$0")/lib/video_clip.py" "$TMP/clip.mp4" libx264 2 8 64 48
head -c "$(($(stat -c %s "$TMP/clip.mp4") / 2))" "$TMP/clip.mp4" >"$TMP/truncated.mp4"
API_KEY="chat-page-test-key"
start_tiny_server "$MODEL" --served-model-name tiny --max-model-len 4096 --api-key "$API_KEY"

status=0
node "$NODE_DIR/chat_page.mjs" --base-url "$BASE_URL" --model tiny --api-key "$API_KEY" \
  --chromium "$CHROMIUM" --screenshot "$BUILD_DIR/chat_page.png" \
  --audio "$ROOT/tests/data/audio/speech_16k_mono_s16.wav" \
  --video "$TMP/clip.mp4" --corrupt-video "$TMP/truncated.mp4" || status=$?
finish_with_server_log "$status"
