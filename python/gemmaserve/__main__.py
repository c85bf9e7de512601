"""``python3 -m gemmaserve serve MODEL_DIR [flags]``: the same server as ``gemmaserve serve``
(vLLM's ``vllm serve``), run in this process by the C++ entry point."""

from __future__ import annotations

import sys
from typing import List, Optional

from gemmaserve._serve import run_serve

_USAGE = ("usage: python3 -m gemmaserve serve MODEL_DIR [options]\n"
          "  (the gemmaserve binary has the other commands: generate, bench, tokenize, ...)\n")


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        (sys.stdout if args else sys.stderr).write(_USAGE)
        return 0 if args else 2
    if args[0] != "serve":
        sys.stderr.write(f"gemmaserve: unknown command '{args[0]}'\n{_USAGE}")
        return 2
    return run_serve(args[1:])


if __name__ == "__main__":
    sys.exit(main())
