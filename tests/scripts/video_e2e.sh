#!/usr/bin/env bash
# End to end, video (issue 41): `gemmaserve serve` on the tiny Gemma 4 preset (it has a vision
# tower) with the real vocabulary and chat template, driven by the official openai npm SDK
# (tests/node/video_openai.mjs) with clips made here by Debian's python3-av (FFmpeg's encoders):
# H.264 MP4, VP9 WebM, a GIF, a 40-second clip over --max-video-seconds and a truncated MP4.
# Usage: video_e2e.sh BINARY REPO_ROOT
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
/usr/bin/python3 -c 'import av' 2>/dev/null || skip "Debian's python3-av is not installed (run scripts/setup)"

TMP="$(mktemp -d)"
trap 'stop_tiny_server; rm -rf "$TMP"' EXIT
MODEL="$TMP/model"
CLIPS="$TMP/clips"
mkdir -p "$CLIPS"
make_tiny_model "$VOCAB" "$TEMPLATE" "$MODEL"

/usr/bin/python3 - "$CLIPS" "$(dirname "$0")/lib" <<'PYEOF'
import sys

sys.path.insert(0, sys.argv[2])
from video_clip import clip

out = sys.argv[1]
clip(f"{out}/short.mp4", "libx264", 3, 10, 64, 48)
clip(f"{out}/other.mp4", "libx264", 3, 10, 64, 48, tint=90)
clip(f"{out}/clip.webm", "libvpx-vp9", 2, 12, 80, 60)
clip(f"{out}/anim.gif", "gif", 1, 8, 40, 30, pix_fmt="rgb8")
clip(f"{out}/long.mp4", "libx264", 40, 2, 32, 32)
from PIL import Image
for i, tint in enumerate([(200, 10, 30), (10, 40, 220)]):
    Image.new("RGB", (64, 48), tint).save(f"{out}/frame{i}.jpg", quality=90)
with open(f"{out}/short.mp4", "rb") as f:
    data = f.read()
with open(f"{out}/truncated.mp4", "wb") as f:
    f.write(data[: len(data) // 2])
PYEOF

start_tiny_server "$MODEL" --served-model-name gemma4 --block-size 16 \
  --limit-mm-per-prompt '{"video": 2}' --max-video-seconds 30 \
  --media-io-kwargs '{"video": {"num_frames": 8}}'
node "$NODE_DIR/video_openai.mjs" "$BASE_URL" "$CLIPS" "$BIN"
stop_tiny_server

# The unified 12B layout embeds the frames with its encoder-free patch embedder: 8 frames of a
# 64x48 clip, each <|image> + 63 x <|video|> + <image|> (its merged 48x48 patches, one each).
UNIFIED="$TMP/unified"
make_tiny_model "$VOCAB" "$TEMPLATE" "$UNIFIED" tiny-unified
start_tiny_server "$UNIFIED" --served-model-name gemma4 \
  --media-io-kwargs '{"video": {"num_frames": 8}}'
/usr/bin/python3 - "$BASE_URL" "$CLIPS/short.mp4" <<'PYEOF'
import base64, json, sys, urllib.request

base, clip = sys.argv[1], sys.argv[2]
url = "data:video/mp4;base64," + base64.b64encode(open(clip, "rb").read()).decode()
body = {"model": "gemma4", "max_tokens": 4, "return_token_ids": True, "messages": [
    {"role": "user", "content": [{"type": "text", "text": "What happens?"},
                                 {"type": "video_url", "video_url": {"url": url}}]}]}
request = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(request))
ids = answer["prompt_token_ids"]
assert ids.count(258884) == 8 * 63, ids.count(258884)
assert ids.count(255999) == 8, ids.count(255999)
assert answer["usage"]["prompt_tokens"] == len(ids)
print("ok   unified model: 8 frames x 63 soft tokens, answer", repr(answer["choices"][0]["message"]["content"]))
PYEOF
echo "PASS: video end to end"
