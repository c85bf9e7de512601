#!/usr/bin/env bash
# The soak (scripts/bench/soak.sh) in short: 32 clients for 20 s of mixed traffic; 0 unexpected
# statuses, 0 connection errors, idle and answering afterwards. A 3-second warm-up leaves the
# allocator still growing, so RSS may move 15 % here (the 10-minute soak holds 5 %); under ASan,
# whose quarantine holds freed memory, RSS is not judged.
# Usage: soak_short.sh BINARY REPO_ROOT
set -euo pipefail
BIN="$1"
ROOT="$2"
# shellcheck source=lib/tiny_server.sh
source "$(dirname "$0")/lib/tiny_server.sh"
# shellcheck source=lib/skip.sh
source "$(dirname "$0")/lib/skip.sh"
[ -f "$VOCAB" ] && [ -f "$TEMPLATE" ] || skip "shared data missing: $VOCAB, $TEMPLATE"
tolerance=0.15
if grep -q "GEMMASERVE_SANITIZE:BOOL=ON" "$(dirname "$BIN")/CMakeCache.txt" 2>/dev/null; then
  tolerance=100
fi
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
"$ROOT/scripts/bench/soak.sh" --bin "$BIN" --clients 32 --duration 20 --warmup 3 \
  --rss-tolerance "$tolerance" --out "$OUT"
