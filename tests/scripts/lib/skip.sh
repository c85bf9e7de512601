# skip MESSAGE: a script test's missing prerequisite skips it outside CI and fails it under CI=true.
skip() {
  if [ "${CI:-}" = "true" ]; then
    echo "FAIL: $1 (required under CI)"
    exit 1
  fi
  echo "SKIP: $1"
  exit 0
}
