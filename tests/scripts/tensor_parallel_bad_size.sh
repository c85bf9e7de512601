#!/usr/bin/env bash
# A tensor-parallel size the checkpoint cannot split (4 heads over 3 ranks) fails with its error
# printed once, by rank 0, not once per rank. Usage: tensor_parallel_bad_size.sh BINARY REPO_ROOT
set -euo pipefail
# shellcheck source=lib/mpi_ranks.sh
source "$(dirname "$0")/lib/mpi_ranks.sh"  # LeakSanitizer off in the ranks

BIN="$1"
ROOT="$2"
# shellcheck source=lib/skip.sh
source "$(dirname "$0")/lib/skip.sh"
command -v mpirun >/dev/null || skip "mpirun is not installed (run scripts/setup)"
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"

status=0
out="$("$BIN" generate "$ROOT/tests/data/golden/models/dense" --prompt-ids 2,3 --max-tokens 2 \
  --max-model-len 128 --tensor-parallel-size 3 2>&1)" || status=$?
[ "$status" -ne 0 ] || { echo "FAIL: -tp 3 on 4 heads succeeded"; exit 1; }
count="$(grep -c "^error: --tensor-parallel-size 3 does not divide num_attention_heads (4)$" \
  <<<"$out" || true)"
[ "$count" = 1 ] || { echo "$out"; echo "FAIL: the error was printed $count times"; exit 1; }
echo "tensor_parallel_bad_size: ok"
