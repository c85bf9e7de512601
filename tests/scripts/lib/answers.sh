# Sourced by the GGUF serving scripts: requests to the tiny server (BASE_URL) and checks of its
# answers. Needs ROOT set.

# post ROUTE BODY OUT: the status code; the body goes to OUT.
post() {
  curl -s -o "$3" -w '%{http_code}' "$BASE_URL$1" -H "Content-Type: application/json" -d "$2"
}

# has_text FILE: a body whose first choice holds text or message content, stopped by length.
has_text() {
  python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
text = c.get("text") if "text" in c else c["message"]["content"]
sys.exit(0 if isinstance(text, str) and c["finish_reason"] == "length" else 1)' "$1"
}

# post_image_chat OUT: a chat with the 16x16 test image; the status code, the body in OUT.
post_image_chat() {
  local image
  image="data:image/png;base64,$(base64 -w0 "$ROOT/tests/data/images/gradient_16x16.png")"
  post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \
\"image_url\", \"image_url\": {\"url\": \"$image\"}}, {\"type\": \"text\", \"text\": \"What is \
it?\"}]}], \"max_tokens\": 3, \"ignore_eos\": true}" "$1"
}

# has_image_tokens FILE: the answer's prompt held more tokens than the text alone (soft tokens).
has_image_tokens() {
  python3 -c '
import json, sys
sys.exit(0 if json.load(open(sys.argv[1]))["usage"]["prompt_tokens"] > 16 else 1)' "$1"
}

# check_completion_and_chat: a completion and a chat answer with text (through the caller's
# `check NAME COMMAND...`; bodies go to $TMP).
check_completion_and_chat() {
  check "completions" test "$(post /v1/completions \
    '{"prompt": "Hello there", "max_tokens": 4, "ignore_eos": true}' "$TMP/c.json")" = 200
  check "completion text" has_text "$TMP/c.json"
  check "chat" test "$(post /v1/chat/completions \
    '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "ignore_eos": true}' \
    "$TMP/chat.json")" = 200
  check "chat text" has_text "$TMP/chat.json"
}
