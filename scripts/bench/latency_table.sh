#!/bin/bash
# The docs/PERFORMANCE.md latency table: one `bench latency` run per MODEL:BATCH[:EXTRA FLAGS],
# JSON (with the text summary first) into OUTDIR/<model><flags>-b<batch>.json.
# usage: scripts/bench/latency_table.sh GEMMASERVE OUTDIR /tmp/e2b-bf16:1 "/tmp/e2b-bf16:1:--cpu-matmul-precision bf16" ...
set -euo pipefail
bin=$1 out=$2
shift 2
mkdir -p "$out"
for spec in "$@"; do
  model=${spec%%:*} rest=${spec#*:}
  batch=${rest%%:*} extra=""
  [ "$rest" != "$batch" ] && extra=${rest#*:}
  tag=$(basename "$model")$(echo "$extra" | tr -d ' -')-b$batch
  # shellcheck disable=SC2086
  "$bin" bench latency "$model" --input-len 512 --output-len 128 --batch-size "$batch" \
    --threads 2 --num-iters 3 --num-iters-warmup 1 --max-model-len 1024 $extra --json \
    > "$out/$tag.json" 2> "$out/$tag.err"
  grep -E '^(pp|Roofline|Prefill)' "$out/$tag.json"
done
