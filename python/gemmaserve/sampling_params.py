"""Sampling parameters for text generation, named and defaulted as vLLM's SamplingParams."""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional, Union

from gemmaserve import _gemmaserve
from gemmaserve._log import logger

_SAMPLING_EPS = 1e-5
_MAX_TEMP = 1e-2


class RequestOutputKind(enum.Enum):
    """vLLM's output kinds; the offline LLM always returns the final output."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@dataclass
class StructuredOutputsParams:
    """Constraints on the output, as vLLM's structured outputs.

    gemmaserve implements ``json_object=True`` (one JSON object), ``json`` (a JSON schema, as a
    dict or its text), ``regex``, ``choice`` and ``grammar`` (xgrammar's EBNF), as the server's
    ``response_format`` / ``structured_outputs``; ``structural_tag`` raises ValueError at
    generate time, as the server answers 501.
    """

    json: Union[str, Dict[str, Any], None] = None
    regex: Optional[str] = None
    choice: Optional[List[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: Optional[str] = None
    structural_tag: Optional[str] = None

    def __post_init__(self) -> None:
        kinds = [self.json, self.regex, self.choice, self.grammar, self.json_object,
                 self.structural_tag]
        count = sum(k is not None for k in kinds)
        if count > 1:
            raise ValueError("You can only use one kind of structured outputs constraint "
                             f"but multiple are specified: {self.__dict__}")
        if count < 1:
            raise ValueError("You must use one kind of structured outputs constraint "
                             f"but none are specified: {self.__dict__}")


@dataclass
class SamplingParams:
    """Sampling parameters for text generation (vLLM's fields, names and defaults).

    Every field the engine implements is honoured: ``n``, the penalties, ``temperature`` (0 is
    greedy), ``top_p``, ``top_k`` (0 or -1: off), ``min_p``, ``seed``, ``stop`` (strings),
    ``stop_token_ids``, ``ignore_eos``, ``max_tokens`` (None: up to the context length),
    ``min_tokens``, ``logprobs`` / ``prompt_logprobs`` (top-K per position, -1 the whole
    vocabulary), ``skip_special_tokens``, ``include_stop_str_in_output``, ``logit_bias``,
    ``allowed_token_ids``, ``bad_words`` and ``structured_outputs`` (json_object).
    ``detokenize=False`` leaves ``text`` empty. ``spaces_between_special_tokens``,
    ``output_kind`` and ``extra_args`` are accepted for compatibility and have no effect.

    Values out of range raise ValueError with vLLM's messages when the object is built; token
    ids are checked against the model's vocabulary by ``LLM.generate``.
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Union[str, List[str], None] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    structured_outputs: Optional[StructuredOutputsParams] = None
    logit_bias: Optional[Dict[int, float]] = None
    allowed_token_ids: Optional[List[int]] = None
    extra_args: Optional[Dict[str, Any]] = None
    bad_words: Optional[List[str]] = None

    def __post_init__(self) -> None:
        if 0 < self.temperature < _MAX_TEMP:
            logger.warning(
                f"temperature {self.temperature} is less than {_MAX_TEMP}, which may cause "
                f"numerical errors nan or inf in tensors. We have maxed it out to {_MAX_TEMP}.")
            self.temperature = max(self.temperature, _MAX_TEMP)
        if self.seed == -1:
            self.seed = None
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        else:
            self.stop = list(self.stop)
        self.stop_token_ids = ([] if self.stop_token_ids is None else
                               list(dict.fromkeys(self.stop_token_ids)))
        self.bad_words = [] if self.bad_words is None else list(dict.fromkeys(self.bad_words))
        if self.logprobs is True:
            self.logprobs = 1
        if self.prompt_logprobs is True:
            self.prompt_logprobs = 1
        if self.logit_bias is not None:
            self.logit_bias = {int(k): float(v) for k, v in self.logit_bias.items()}
        self._verify_args()
        if self.temperature < _SAMPLING_EPS:
            # Zero temperature means greedy sampling.
            self.top_p = 1.0
            self.top_k = 0
            self.min_p = 0.0

    def _verify_args(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            # The engine also takes 0 (prompt scoring); vLLM's offline API does not.
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.stop and not self.detokenize:
            raise ValueError("stop strings are only supported when detokenize is True. "
                             "Set detokenize=True to use stop.")
        _gemmaserve.validate_sampling_params(self)

    @staticmethod
    def from_optional(**kwargs: Any) -> "SamplingParams":
        """Like the constructor, with None meaning the default (vLLM's from_optional)."""
        defaults = {f.name: f.default for f in fields(SamplingParams)}
        for name in ("n", "presence_penalty", "frequency_penalty", "repetition_penalty",
                     "temperature", "top_p"):
            if kwargs.get(name, 0) is None:
                kwargs[name] = defaults[name]
        if kwargs.get("logit_bias") is not None:
            kwargs["logit_bias"] = {int(k): min(100.0, max(-100.0, float(v)))
                                    for k, v in kwargs["logit_bias"].items()}
        return SamplingParams(**kwargs)

    def clone(self) -> "SamplingParams":
        """A deep copy."""
        return copy.deepcopy(self)
