# Sourced by tests/scripts/*.sh that start OpenMPI ranks: OpenMPI keeps start-up allocations past
# finalize in plugins it unloads, and LeakSanitizer reports (or crashes scanning) them, so ranks
# run with leak checking off, as tests/unit/mpi_test_support.h does; memory errors stay checked.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
