"""Log lines from the Python package go to the engine's log (one format, one stream: stderr)."""

from __future__ import annotations

from gemmaserve import _gemmaserve


class _EngineLogger:
    """vLLM's logger calls (debug/info/warning/error) over the engine's C++ logger."""

    def debug(self, message: str) -> None:
        _gemmaserve.log(0, message)

    def info(self, message: str) -> None:
        _gemmaserve.log(1, message)

    def warning(self, message: str) -> None:
        _gemmaserve.log(2, message)

    def error(self, message: str) -> None:
        _gemmaserve.log(3, message)


logger = _EngineLogger()
