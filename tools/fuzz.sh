#!/usr/bin/env bash
# Runs one libFuzzer target for a while: tools/fuzz.sh TARGET SECONDS
# Builds it first if needed (clang, ASan+UBSan, GEMMASERVE_FUZZ=ON, in build-asan: the sanitizer
# pass's build folder), on one core. New inputs go to build-asan/fuzz/corpus/TARGET (seeded from
# fuzz/corpus/TARGET), crashes to build-asan/fuzz/artifacts/TARGET/. Prints executions, execs/s,
# corpus size and edge coverage (cov:), and appends them to build-asan/fuzz/runs.tsv.
# A crash, once fixed, goes into fuzz/corpus/TARGET/ so CI's smoke run replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 2 ]; then
  echo "usage: tools/fuzz.sh TARGET SECONDS   (targets: $(ls fuzz/*_fuzz.cpp | sed 's|fuzz/||; s|_fuzz.cpp||' | tr '\n' ' '))" >&2
  exit 2
fi
target=$1 seconds=$2
[ -f "fuzz/${target}_fuzz.cpp" ] || { echo "fuzz.sh: no target fuzz/${target}_fuzz.cpp" >&2; exit 2; }
build=${GEMMASERVE_FUZZ_BUILD:-build-asan}

if ! grep -q "GEMMASERVE_FUZZ:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null; then
  # The same configuration as scripts/test's sanitizer pass.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGEMMASERVE_SANITIZE=ON \
    -DCMAKE_CXX_COMPILER=clang++ -DGEMMASERVE_FUZZ=ON >/dev/null
fi
mkdir -p "$build/fuzz"
# Runs side by side (one per core) share the build folder: one ninja at a time.
flock "$build/fuzz/.build.lock" nice -n 10 ninja -C "$build" -j"${JOBS:-1}" "fuzz_${target}" >/dev/null

work="$build/fuzz/corpus/$target" artifacts="$build/fuzz/artifacts/$target"
mkdir -p "$work" "$artifacts"
log="$build/fuzz/$target.log"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
nice -n 10 "$build/fuzz/fuzz_${target}" -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=4096 -print_final_stats=1 -dict="fuzz/dict/${target}.dict" \
  -artifact_prefix="$artifacts/" "$work" "fuzz/corpus/$target" >"$log" 2>&1 || status=$?

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
corpus=$(find "$work" -type f | wc -l)
echo "$target: execs ${execs:-?}  execs/s ${rate:-?}  corpus ${corpus} files  cov: ${cov:-?}  ft: ${ft:-?}  (${seconds}s, log $log)"
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$target" "$seconds" "${execs:-0}" \
  "${rate:-0}" "$corpus" "${cov:-0}" >>"$build/fuzz/runs.tsv"
if [ "$status" -ne 0 ]; then
  echo "fuzz.sh: $target FAILED (exit $status); the input is in $artifacts/:" >&2
  grep -E "ERROR|FUZZ FAILURE|SUMMARY|Test unit written" "$log" | head -5 >&2
  exit "$status"
fi
