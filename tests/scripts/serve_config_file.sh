#!/usr/bin/env bash
# `--config FILE.yaml` end to end (issue 40, item 1) on a tiny model: `serve --config` with the
# model and settings in the file gives the same /v1/models and greedy completions as the same
# settings given as flags; command-line flags override the file's, before or after --config; a
# bad file stops serve with its error; `generate --config` generates as its flags do.
# Usage: serve_config_file.sh BINARY REPO_ROOT
set -euo pipefail
BIN="$1"
ROOT="$2"
# shellcheck source=lib/harden_setup.sh
source "$(dirname "$0")/lib/harden_setup.sh"  # TMP, $TMP/tiny, the server

fail() {
  echo "FAIL: $1"
  tail -n 30 "$TMP/server.log"
  exit 1
}

# The server's /v1/models without the times of the call and the permissions' random ids.
models() {
  curl -sf "$BASE_URL/v1/models" | python3 -c '
import json, sys
models = json.load(sys.stdin)
for card in models["data"]:
    card.pop("created")
    for permission in card["permission"]:
        permission.pop("created")
        permission.pop("id")
print(json.dumps(models, sort_keys=True))'
}

# Two completions without a temperature (the override makes them greedy), their texts.
completions() {
  local prompt
  for prompt in "The capital of France is" "1, 2, 3,"; do
    curl -sf "$BASE_URL/v1/completions" -H "Content-Type: application/json" \
      -d "{\"model\": \"tiny-config\", \"prompt\": \"$prompt\", \"max_tokens\": 12}" |
      python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["text"]))'
  done
}

# host: an address this machine cannot bind, so the server starts only if --host overrides it.
cat >"$TMP/serve.yaml" <<YAML
model: $TMP/tiny
host: 192.0.2.1
served-model-name: [tiny-config, tiny-alias]
max_model_len: 1536
max-num-seqs: 4
enable-prefix-caching: false
override-generation-config:
  temperature: 0.0
YAML

start_tiny_server --config "$TMP/serve.yaml"
from_file_models="$(models)"
from_file_text="$(completions)"
stop_tiny_server
echo "$from_file_models" | grep -q '"id": "tiny-alias"' || fail "no tiny-alias in $from_file_models"
echo "$from_file_models" | grep -q '"max_model_len": 1536' || fail "not 1536: $from_file_models"

start_tiny_server "$TMP/tiny" --served-model-name tiny-config tiny-alias --max-model-len 1536 \
  --max-num-seqs 4 --no-enable-prefix-caching --override-generation-config '{"temperature": 0.0}'
[ "$(models)" = "$from_file_models" ] ||
  fail "/v1/models: flags gave $(models), the file $from_file_models"
[ "$(completions)" = "$from_file_text" ] ||
  fail "completions: flags gave $(completions), the file $from_file_text"
stop_tiny_server
echo "serve --config: the same /v1/models and greedy completions as its flags"

# Command-line flags win, before --config and after it.
start_tiny_server --max-model-len 1024 --config "$TMP/serve.yaml" --served-model-name cli-name
overridden="$(models)"
stop_tiny_server
echo "$overridden" | grep -q '"id": "cli-name"' || fail "--served-model-name lost: $overridden"
echo "$overridden" | grep -q '"id": "tiny-alias"' && fail "the file's names kept: $overridden"
echo "$overridden" | grep -q '"max_model_len": 1024' || fail "--max-model-len lost: $overridden"
echo "serve --config: command-line flags override the file"

printf 'model: %s\nmax-model-len: 1536\nserved-model-name:\n  tiny: 1\n' "$TMP/tiny" >"$TMP/bad.yaml"
rc=0
"$BIN" serve --config "$TMP/bad.yaml" >"$TMP/bad.out" 2>&1 || rc=$?
expected="error: --config $TMP/bad.yaml: line 3: 'served-model-name' takes one value, got a mapping"
if [ "$rc" -ne 2 ] || [ "$(cat "$TMP/bad.out")" != "$expected" ]; then
  fail "bad file: exit $rc, '$(cat "$TMP/bad.out")'"
fi
echo "serve --config: a bad file is refused with its line"

cat >"$TMP/generate.yaml" <<YAML
model: $TMP/tiny
prompt: [Hello, "1, 2, 3,"]
max_tokens: 8
temperature: 0
YAML
from_file="$("$BIN" generate --config "$TMP/generate.yaml" 2>/dev/null)"
from_flags="$("$BIN" generate "$TMP/tiny" --prompt Hello --prompt "1, 2, 3," --max-tokens 8 \
  --temperature 0 2>/dev/null)"
if [ -z "$from_file" ] || [ "$from_file" != "$from_flags" ]; then
  fail "generate: the file gave '$from_file', the flags '$from_flags'"
fi
shorter="$("$BIN" generate --max-tokens 2 --config "$TMP/generate.yaml" 2>/dev/null)"
shorter_flags="$("$BIN" generate "$TMP/tiny" --prompt Hello --prompt "1, 2, 3," --max-tokens 2 \
  --temperature 0 2>/dev/null)"
if [ "$shorter" != "$shorter_flags" ] || [ "$shorter" = "$from_file" ]; then
  fail "generate --max-tokens 2 over the file: '$shorter', flags '$shorter_flags'"
fi
echo "generate --config: the same output as its flags, and the command line wins"
echo "PASS"
