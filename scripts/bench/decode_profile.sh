#!/usr/bin/env bash
# Where one decode step's time goes: `perf record` over the decode of a `bench latency` run (the
# first DELAY_MS, loading and prefill, are not sampled), CPU samples of every thread grouped by
# what the symbol does. A thread that waits for the others shows as "thread waits".
# Usage: scripts/bench/decode_profile.sh GEMMASERVE MODEL BATCH [DELAY_MS (8000)] [OUTPUT_LEN (256)]
set -euo pipefail
bin=$1 model=$2 batch=$3 delay=${4:-8000} out_len=${5:-256}
data=$(mktemp /tmp/decode_profile.XXXXXX)
trap 'rm -f "$data"' EXIT
perf record -q -F 999 -D "$delay" -o "$data" "$bin" bench latency "$model" --input-len 16 \
  --output-len "$out_len" --batch-size "$batch" --threads 2 --num-iters 1 --num-iters-warmup 0 \
  --max-model-len 1024 --membw-size-mib 64 2>&1 | grep -E '^pp|^Roofline' || true
perf report -i "$data" --no-children --sort symbol --stdio 2>/dev/null | awk '
  /^ +[0-9.]+%/ {
    pct = $1; sub(/%/, "", pct); sym = $0
    if (sym ~ /DType\)11|range<\(gemmaserve::DType\)11>/) c = "matmul Q4_0"
    else if (sym ~ /DType\)10/) c = "matmul Q8_0"
    else if (sym ~ /DType\)12|q4k/) c = "matmul Q4_K"
    else if (sym ~ /matmul|tile_f32|dot_f32/) c = "matmul f32/bf16"
    else if (sym ~ /attend|paged_attention|kv_format|store_kv/) c = "attention"
    else if (sym ~ /quantize_act_row/) c = "activation quantization (int8)"
    else if (sym ~ /rms_norm/) c = "norms"
    else if (sym ~ /gelu|soft_cap|exp_scaled|rope|scale_add|add_rows|mul_rows/) c = "element-wise (GELU, soft-cap, RoPE, exp)"
    else if (sym ~ /sample|argmax|logprob|top_k|top_p|softmax|penalt/) c = "sampling"
    else if (sym ~ /wait_for_change|worker_loop|parallel_for|futex|sched_yield/) c = "thread waits"
    else if (sym ~ /\[k\]/) c = "OS kernel"
    else if (sym ~ /sum_lines|run_int8|run_fma|peak/) c = "bench probes"
    else c = "other"
    share[c] += pct
  }
  END { for (c in share) printf "%6.2f %%  %s\n", share[c], c }' | sort -rn
