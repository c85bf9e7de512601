#!/usr/bin/env bash
# The rooms' floors (docs/ARCHITECTURE.md): every include between rooms points down, so the tree
# has no import that runs back up and no cycle. Usage: include_layers.sh BINARY REPO_ROOT
set -euo pipefail
python3 "$2/tools/check_include_layers.py" "$2"
