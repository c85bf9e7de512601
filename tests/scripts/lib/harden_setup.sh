# Sourced by the connection-rule tests (server_disconnects / overload / shutdown.sh, issue 27) and
# serve_config_file.sh: needs BIN and ROOT; sources tiny_server.sh, makes TMP with a tiny model in
# $TMP/tiny (removed on exit, with the server stopped) and sets CHECKS to the Python checks.
# shellcheck source=tiny_server.sh
source "$(dirname "${BASH_SOURCE[0]}")/tiny_server.sh"
# shellcheck source=skip.sh
source "$(dirname "${BASH_SOURCE[0]}")/skip.sh"
[ -f "$VOCAB" ] && [ -f "$TEMPLATE" ] || skip "shared data missing: $VOCAB, $TEMPLATE"
TMP="$(mktemp -d)"
trap 'stop_tiny_server; rm -rf "$TMP"' EXIT
make_tiny_model "$VOCAB" "$TEMPLATE" "$TMP/tiny"
CHECKS="$ROOT/tests/scripts/lib/harden_checks.py"
