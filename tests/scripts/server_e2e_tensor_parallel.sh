#!/usr/bin/env bash
# A subset of the server end-to-end suite (server_e2e.sh with SERVER_E2E_SUBSET=1: the seed
# requests, models, metrics and the openai SDK's end-of-turn stop checks) against two
# tensor-parallel ranks, started both ways: by the server itself (--tensor-parallel-size 2, the
# mp backend) and under `mpirun -n 2` (--distributed-executor-backend mpi). The subset keeps the
# CI share small; SERVER_E2E_SUBSET=0 runs the whole suite both ways.
# Usage: server_e2e_tensor_parallel.sh BINARY REPO_ROOT
set -euo pipefail
# shellcheck source=lib/mpi_ranks.sh
source "$(dirname "$0")/lib/mpi_ranks.sh"  # LeakSanitizer off in the ranks
# shellcheck source=lib/skip.sh
source "$(dirname "$0")/lib/skip.sh"
command -v mpirun >/dev/null || skip "mpirun is not installed (run scripts/setup)"
# OpenMPI refuses to run as root (CI, containers) without these.
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
SUITE="$(dirname "$0")/server_e2e.sh"

echo "== --tensor-parallel-size 2 (the server starts its ranks)"
SUBSET="${SERVER_E2E_SUBSET:-1}"
SERVER_E2E_SUBSET="$SUBSET" SERVER_E2E_FLAGS="--tensor-parallel-size 2" "$SUITE" "$@"

echo "== mpirun -n 2 ... --tensor-parallel-size 2 --distributed-executor-backend mpi"
SERVER_E2E_SUBSET="$SUBSET" SERVER_E2E_LAUNCHER="mpirun -n 2 --bind-to none --oversubscribe" \
  SERVER_E2E_FLAGS="--tensor-parallel-size 2 --distributed-executor-backend mpi" "$SUITE" "$@"
