#!/usr/bin/env bash
# The server end-to-end suite (server_e2e.sh), unchanged, against `serve --data-parallel-size 2`:
# two engine replicas behind one server, and every replica must have served (per-replica
# metrics). Usage: server_e2e_data_parallel.sh BINARY REPO_ROOT
set -euo pipefail
SERVER_E2E_FLAGS="--data-parallel-size 2" SERVER_E2E_ENGINES=2 \
  exec "$(dirname "$0")/server_e2e.sh" "$@"
