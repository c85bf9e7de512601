#!/usr/bin/env bash
# Soak (issue 27): a tiny Gemma 4 checkpoint (real vocabulary and chat template) served on
# loopback under CLIENTS concurrent clients for DURATION seconds of mixed traffic (see
# scripts/bench/soak_client.py: completions and chat, streamed and not, dropped streams, abandoned
# requests, malformed / oversized bodies, over-long prompts, unknown models, GET routes). RSS and
# /metrics are sampled every second into OUT/soak.csv, the RSS plot goes to OUT/soak_rss.png and
# the verdict to OUT/soak.json: 0 unexpected statuses, 0 connection errors, idle and answering at
# the end, RSS at the end within 5 % of RSS after the warm-up (full concurrency + WARMUP s).
# Usage: scripts/bench/soak.sh [--clients N (200)] [--duration S (600)] [--warmup S (60)] [--out DIR]
#                      [--bin BINARY (build/gemmaserve)] [--rss-tolerance FRACTION (0.05)]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="$ROOT/build/gemmaserve"
CLIENTS=200
DURATION=600
WARMUP=60
RSS_TOLERANCE=0.05
OUT="$ROOT/build/soak"
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) CLIENTS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    --rss-tolerance) RSS_TOLERANCE="$2"; shift 2 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
done
# shellcheck source=../../tests/scripts/lib/tiny_server.sh
source "$ROOT/tests/scripts/lib/tiny_server.sh"
[ -f "$VOCAB" ] && [ -f "$TEMPLATE" ] || { echo "shared data missing: $VOCAB"; exit 1; }
mkdir -p "$OUT"
TMP="$(mktemp -d)"
trap 'stop_tiny_server; rm -rf "$TMP"' EXIT
make_tiny_model "$VOCAB" "$TEMPLATE" "$TMP/tiny"
# Below the connection cap (1024) and the waiting bound (8 x 64): no 503 is expected. The KV
# arena is mapped lazily and the block pool cycles through every block, so a cache much larger
# than the load would add resident pages for many minutes: 8 MB is touched within the warm-up.
start_tiny_server "$TMP/tiny" --served-model-name tiny --max-model-len 512 --max-num-seqs 64 \
  --max-request-size-mb 1 --kv-cache-memory-bytes 8388608 --disable-log-requests \
  --enable-tokenizer-info-endpoint
PORT="${BASE_URL##*:}"
echo "soak: $CLIENTS clients for $DURATION s on port $PORT (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
status=0
python3 "$ROOT/scripts/bench/soak_client.py" --port "$PORT" --server-pid "$SERVER_PID" \
  --clients "$CLIENTS" --duration "$DURATION" --warmup "$WARMUP" --max-model-len 512 \
  --rss-tolerance "$RSS_TOLERANCE" \
  --csv "$OUT/soak.csv" >"$OUT/soak.json" || status=$?
cat "$OUT/soak.json"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
kill -0 "$SERVER_PID" 2>/dev/null || { echo "FAIL: the server died"; tail -n 30 "$TMP/server.log"; exit 1; }
# Debian's matplotlib (scripts/setup) lives with the system Python.
PLOT_PY=/usr/bin/python3
[ -x "$PLOT_PY" ] || PLOT_PY=python3
"$PLOT_PY" - "$OUT/soak.csv" "$OUT/soak.json" "$OUT/soak_rss.png" <<'PY' || echo "no plot (matplotlib missing?)"
import csv, json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
summary = json.load(open(sys.argv[2]))
t = [float(r["seconds"]) for r in rows]
rss = [int(r["rss_kb"]) / 1024 for r in rows]
run = [float(r["running"]) for r in rows]
fig, ax = plt.subplots(figsize=(9, 4))
ax.plot(t, rss, label="server RSS (MiB)")
ax.axvline(summary["warmup_end_s"], color="gray", ls="--", label="end of warm-up")
ax.set_xlabel("seconds")
ax.set_ylabel("RSS (MiB)")
ax2 = ax.twinx()
ax2.plot(t, run, color="tab:orange", alpha=0.4, lw=0.8, label="requests running")
ax2.set_ylabel("requests running")
ax.set_title(f"soak: {summary['clients']} clients, {summary['duration_s']:.0f} s, "
             f"RSS {summary['rss_growth_pct']:+.2f} % after warm-up")
ax.legend(loc="lower right")
fig.tight_layout()
fig.savefig(sys.argv[3], dpi=100)
PY
[ "$status" -eq 0 ] && echo "soak: PASS" || echo "soak: FAIL"
exit "$status"
