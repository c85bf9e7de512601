#!/bin/bash
# Kernel sweep: read bandwidth and matmul rates at decode and prefill shapes (E2B widths).
# usage: scripts/bench/kernel_sweep.sh [path/to/gemmaserve]
B=${1:-build/gemmaserve}
lscpu | grep -E "Model name|^CPU\(s\)|MHz|L2|L3|Flags" | cut -c1-200
for t in 1 2 4; do $B bench membw --threads $t --size-mib 1024; done
for th in 1 2; do
  for s in "1 1536 6144" "1 6144 1536" "1 1536 262144" "8 1536 6144" "32 1536 6144" "512 1536 6144" "512 6144 1536"; do
    set -- $s; it=20; [ $1 -ge 512 ] && it=3
    $B bench matmul --t $1 --k $2 --n $3 --threads $th --iters $it
  done
done
