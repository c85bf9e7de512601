#!/usr/bin/env bash
# Runs a test executable with GEMMASERVE_CPU_ISA=LEVEL when this CPU has that kernel level and
# it is not already the best one (the plain CTest entries run that); prints SKIP: otherwise.
# Usage: run_at_isa_level.sh portable|avx2|avxvnni TEST_EXECUTABLE [ARGS...]
set -euo pipefail
level=$1
shift
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done; }
best=portable
has avx2 fma f16c && best=avx2
has avx2 fma f16c avx_vnni && best=avxvnni
has avx2 fma f16c avx512f avx512bw avx512dq avx512vl && best=avx512
case $level in
  portable) have=true ;;
  avx2) has avx2 fma f16c && have=true || have=false ;;
  avxvnni) has avx2 fma f16c avx_vnni && have=true || have=false ;;
  *) echo "run_at_isa_level.sh: unknown level '$level'" >&2; exit 2 ;;
esac
if [ "$have" != true ]; then
  echo "SKIP: this CPU has no $level level"
  exit 0
fi
if [ "$level" = "$best" ]; then
  echo "SKIP: $level is this CPU's best level, which the plain entries run"
  exit 0
fi
GEMMASERVE_CPU_ISA=$level exec "$@"
