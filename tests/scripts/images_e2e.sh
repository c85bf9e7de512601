#!/usr/bin/env bash
# End to end, images (issue 21): `gemmaserve serve` on the tiny Gemma 4 preset (it has a vision
# tower) with the real vocabulary and chat template, driven by the official openai npm SDK
# (tests/node/images_openai.mjs) with PNG / JPEG / WebP files made here by python3-pil.
# Usage: images_e2e.sh BINARY REPO_ROOT   (IMAGES_E2E_ONLY="name ..." runs only those checks)
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
/usr/bin/python3 -c 'import PIL' 2>/dev/null || skip "Debian's python3-pil is not installed (run scripts/setup)"

TMP="$(mktemp -d)"
trap 'stop_tiny_server; rm -rf "$TMP"' EXIT
MODEL="$TMP/model"
IMAGES="$TMP/images"
mkdir -p "$IMAGES"
make_tiny_model "$VOCAB" "$TEMPLATE" "$MODEL"

/usr/bin/python3 - "$IMAGES" <<'EOF'
import sys
from PIL import Image

out = sys.argv[1]

def gradient(w, h, tint):
    img = Image.new("RGB", (w, h))
    img.putdata([((x * 255 // w + tint[0]) % 256, (y * 255 // h + tint[1]) % 256, tint[2])
                 for y in range(h) for x in range(w)])
    return img

gradient(64, 48, (200, 10, 30)).save(f"{out}/red.png")
gradient(64, 48, (10, 40, 220)).save(f"{out}/blue.png")
gradient(80, 60, (90, 160, 20)).save(f"{out}/photo.jpg", quality=90)
gradient(50, 70, (30, 90, 150)).save(f"{out}/pic.webp", quality=90)
gradient(1280, 960, (120, 60, 200)).save(f"{out}/big.png")
with open(f"{out}/photo.jpg", "rb") as f:
    jpeg = f.read()
with open(f"{out}/truncated.jpg", "wb") as f:
    f.write(jpeg[: len(jpeg) // 2])
with open(f"{out}/corrupt.png", "wb") as f:
    f.write(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
EOF

start_tiny_server "$MODEL" --served-model-name gemma4 --block-size 16 \
  --limit-mm-per-prompt '{"image": 2}' --allowed-media-domains 127.0.0.1
status=0
# shellcheck disable=SC2086  # the names are separate arguments
node "$NODE_DIR/images_openai.mjs" "$BASE_URL" "$IMAGES" "$BIN" ${IMAGES_E2E_ONLY:-} || status=$?
[ "$status" -eq 0 ] || finish_with_server_log "$status"
stop_tiny_server

# chat_image URL: one user message holding this image URL; prints the body then the status.
chat_image() {
  curl -s -w '\n%{http_code}' "$BASE_URL/v1/chat/completions" -H "Content-Type: application/json" \
    -d '{"model": "gemma4", "max_tokens": 2, "messages": [{"role": "user", "content": [
         {"type": "image_url", "image_url": {"url": "'"$1"'"}}]}]}'
}
# expect NAME STATUS BODY_PART ANSWER
expect() {
  if [ "$(tail -n1 <<<"$4")" = "$2" ] && grep -qF -- "$3" <<<"$(head -n -1 <<<"$4")"; then
    echo "ok   $1"
  else
    echo "FAIL $1: $4"
    status=1
  fi
}

# The serve flags: file:// under --allowed-local-media-path, and no network at all.
start_tiny_server "$MODEL" --served-model-name gemma4 --allowed-local-media-path "$IMAGES" \
  --disable-media-url-fetch
expect "file:// URL under --allowed-local-media-path" 200 '"object":"chat.completion"' \
  "$(chat_image "file://$IMAGES/red.png")"
expect "file:// URL outside it" 400 'must be a subpath of `--allowed-local-media-path' \
  "$(chat_image "file://$IMAGES/../model/config.json")"
expect "--disable-media-url-fetch" 400 \
  '"message":"Fetching media from http(s) URLs is disabled on this server (--disable-media-url-fetch); send the image inline as a data:image/...;base64, URL.","type":"BadRequestError","param":"messages"' \
  "$(chat_image "http://127.0.0.1:9/red.png")"
stop_tiny_server

# The same checkpoint without its vision tower refuses images with a clear 400.
/usr/bin/python3 -c 'import json, sys
config = json.load(open(sys.argv[1]))
config["vision_config"] = None
json.dump(config, open(sys.argv[1], "w"))' "$MODEL/config.json"
start_tiny_server "$MODEL" --served-model-name gemma4
expect "a model without a vision tower answers images with a 400" 400 \
  '{"error":{"message":"This model does not accept image input: gemma4 has no vision encoder.","type":"BadRequestError","param":"messages","code":400}}' \
  "$(chat_image "data:image/png;base64,iVBORw0KGgo=")"
finish_with_server_log "$status"
