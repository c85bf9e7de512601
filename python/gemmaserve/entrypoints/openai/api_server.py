"""``python3 -m gemmaserve.entrypoints.openai.api_server --model MODEL_DIR [flags]``: vLLM's
module entry point, starting the same server as ``gemmaserve serve`` (in this process)."""

from __future__ import annotations

import sys
from typing import List, Optional

from gemmaserve._serve import run_serve


def main(argv: Optional[List[str]] = None) -> int:
    return run_serve(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
