#!/bin/bash
# Seconds from starting `gemmaserve serve` to its first /health 200, RUNS times (the docs/
# PERFORMANCE.md time-to-ready table): "wall W cpu C", C the server's user + system CPU seconds
# by then (what a shared machine's other jobs do not inflate). The server is stopped after each.
# usage: scripts/bench/time_to_ready.sh GEMMASERVE MODEL_DIR RUNS PORT [serve flags...]
set -euo pipefail
bin=$1 model=$2 runs=$3 port=$4
shift 4
for _ in $(seq "$runs"); do
  start=$(date +%s.%N)
  "$bin" serve "$model" --port "$port" "$@" > /dev/null 2>&1 &
  pid=$!
  until curl -sf -o /dev/null "http://127.0.0.1:$port/health"; do
    if ! kill -0 "$pid" 2> /dev/null; then
      echo "serve exited before /health answered" >&2
      exit 1
    fi
    sleep 0.01
  done
  end=$(date +%s.%N)
  ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  kill "$pid"
  wait "$pid" || true
  printf "wall %.2f cpu %.2f\n" "$(echo "$end - $start" | bc -l)" \
    "$(echo "$ticks / $(getconf CLK_TCK)" | bc -l)"
done
