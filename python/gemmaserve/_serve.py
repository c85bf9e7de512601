"""`gemmaserve serve` in this process: the C++ server entry point of the gemmaserve binary."""

from __future__ import annotations

import sys
from typing import List

from gemmaserve import _gemmaserve


def run_serve(args: List[str]) -> int:
    """Runs the OpenAI-compatible server with the binary's flags (vLLM's); returns the exit
    code. Errors print as the binary prints them: ``error: ...`` (exit 2) for bad input."""
    try:
        return _gemmaserve.serve(list(args))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"internal error: {e}", file=sys.stderr)
        return 1
