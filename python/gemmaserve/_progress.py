"""vLLM's "Processed prompts" progress bar: tqdm when installed, else a plain stderr line."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, Union

try:
    from tqdm import tqdm as _tqdm
except ImportError:  # pragma: no cover - exercised by the fallback test with tqdm hidden
    _tqdm = None

_DESC = "Processed prompts"


def _speed_postfix(in_speed: float, out_speed: float) -> str:
    return f"est. speed input: {in_speed:.2f} toks/s, output: {out_speed:.2f} toks/s"


class _PlainBar:
    """A one-line stand-in for tqdm: 'Processed prompts: 50%|...| 1/2 [00:01, est. ...]'."""

    def __init__(self, total: int, desc: str, postfix: str, **_: Any) -> None:
        self.total = total
        self.n = 0
        self.desc = desc
        self.postfix = postfix
        self._start = time.monotonic()
        self._draw()

    @property
    def format_dict(self) -> dict:
        return {"elapsed": time.monotonic() - self._start}

    def update(self, n: int = 1) -> None:
        self.n += n
        self._draw()

    def _draw(self) -> None:
        pct = 100 * self.n // self.total if self.total else 100
        width = 20
        filled = width * self.n // self.total if self.total else width
        elapsed = int(self.format_dict["elapsed"])
        sys.stderr.write(f"\r{self.desc}: {pct:3d}%|{'#' * filled}{' ' * (width - filled)}| "
                         f"{self.n}/{self.total} [{elapsed // 60:02d}:{elapsed % 60:02d}, "
                         f"{self.postfix}]")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


class ProgressBar:
    """Counts finished prompts and the input/output token rates, as vLLM's LLM does."""

    def __init__(self, total: int, use_tqdm: Union[bool, Callable[..., Any]]) -> None:
        self._bar: Optional[Any] = None
        self._in_tokens = 0
        self._out_tokens = 0
        if not use_tqdm:
            return
        factory: Callable[..., Any]
        if callable(use_tqdm):
            factory = use_tqdm
        else:
            factory = _tqdm if _tqdm is not None else _PlainBar
        self._bar = factory(total=total, desc=_DESC, dynamic_ncols=True,
                            postfix=_speed_postfix(0, 0))

    def finished(self, index: int, prompt_tokens: int, output_tokens: int, n: int) -> None:
        """One prompt has finished: its prompt length, generated tokens and sample count."""
        del index
        if self._bar is None:
            return
        self._in_tokens += prompt_tokens * n
        self._out_tokens += output_tokens
        elapsed = max(self._bar.format_dict["elapsed"], 1e-9)
        self._bar.postfix = _speed_postfix(self._in_tokens / elapsed, self._out_tokens / elapsed)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
