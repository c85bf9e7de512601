#!/usr/bin/env bash
# Images under tensor parallelism: rank 0 runs the vision tower and sends the soft-token rows to
# the other ranks in each step's plan, so a greedy image prompt with --tensor-parallel-size 2
# gives the same tokens as one process. Usage: tensor_parallel_images.sh BINARY REPO_ROOT
set -euo pipefail
# shellcheck source=lib/mpi_ranks.sh
source "$(dirname "$0")/lib/mpi_ranks.sh"  # LeakSanitizer off in the ranks

BIN="$1"
ROOT="$2"
# shellcheck source=lib/tiny_server.sh
source "$(dirname "$0")/lib/tiny_server.sh"  # SHARED VOCAB TEMPLATE
# shellcheck source=lib/skip.sh
source "$(dirname "$0")/lib/skip.sh"

[ -f "$VOCAB" ] || skip "shared data missing: $VOCAB (set GEMMASERVE_SHARED)"
[ -f "$TEMPLATE" ] || skip "shared data missing: $TEMPLATE"
command -v mpirun >/dev/null || skip "mpirun is not installed (run scripts/setup)"
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
MODEL="$TMP/tiny"
make_tiny_model "$VOCAB" "$TEMPLATE" "$MODEL"
run() {
  "$BIN" generate "$MODEL" --max-model-len 512 --kv-cache-memory 32M --max-num-seqs 2 \
    --prompt "Describe <|image|> in one word" --image "$ROOT/tests/data/images/gradient_16x16.png" \
    --max-tokens 6 --temperature 0 --ignore-eos --json "$@" 2>"$TMP/err.log" | tail -n 1
}
ids() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["prompt_token_ids"].__len__(), d["token_ids"])' "$1"; }

one="$(run)" || { cat "$TMP/err.log"; echo "FAIL: one process"; exit 1; }
two="$(run --tensor-parallel-size 2)" || { cat "$TMP/err.log"; echo "FAIL: TP=2"; exit 1; }
grep -q "tensor parallel rank 1 of 2" "$TMP/err.log" || { echo "FAIL: rank 1 did not run"; exit 1; }
expected="$(ids "$one")"
got="$(ids "$two")"
echo "one process: $expected; TP=2: $got"
[ "$got" = "$expected" ] || { echo "FAIL: TP=2 differs on an image prompt"; exit 1; }
echo "tensor_parallel_images: ok"
