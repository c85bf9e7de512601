"""What ``LLM.generate`` and ``LLM.chat`` return: vLLM's RequestOutput and CompletionOutput."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union


@dataclass
class Logprob:
    """The log-probability of one token at one position (vLLM's Logprob).

    ``rank`` is the token's place among the returned top-K (1 = most likely); None for a
    sampled or prompt token that is not among them (its exact rank is not computed).
    ``decoded_token`` is the token's text (None without a tokenizer).
    """

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


SampleLogprobs = List[Dict[int, Logprob]]
PromptLogprobs = List[Optional[Dict[int, Logprob]]]


@dataclass
class ToolCall:
    """A tool call parsed from a chat output (OpenAI's ``tool_calls`` entry)."""

    id: str
    name: str
    arguments: str  # a JSON object as text
    type: str = "function"


@dataclass
class ChatMessage:
    """A chat output split as the server's ``message``: reasoning, content, tool calls.

    Set on ``CompletionOutput.message`` by ``LLM.chat(..., parse_output=True)``.
    """

    content: Optional[str]
    reasoning: Optional[str] = None
    tool_calls: List[ToolCall] = field(default_factory=list)
    finish_reason: Optional[str] = None  # "tool_calls" when the output called tools
    role: str = "assistant"


@dataclass
class CompletionOutput:
    """One completion of a request (vLLM's CompletionOutput).

    Args:
        index: The index of the output in the request (0 .. n-1).
        text: The generated text (empty with ``detokenize=False``).
        token_ids: The generated token ids.
        cumulative_logprob: Sum of the sampled tokens' logprobs; None unless logprobs were
            requested.
        logprobs: Per generated token, {token_id: Logprob} for the top-K plus the sampled token.
        finish_reason: "stop", "length" or "abort".
        stop_reason: The stop string or stop token id that ended the output, else None.
        message: The parsed chat message, with ``LLM.chat(..., parse_output=True)`` only.
    """

    index: int
    text: str
    token_ids: Sequence[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None
    lora_request: Any = None
    message: Optional[ChatMessage] = None

    def finished(self) -> bool:
        """Whether the output has ended."""
        return self.finish_reason is not None

    def __repr__(self) -> str:
        return (f"CompletionOutput(index={self.index}, text={self.text!r}, "
                f"token_ids={self.token_ids}, cumulative_logprob={self.cumulative_logprob}, "
                f"logprobs={self.logprobs}, finish_reason={self.finish_reason}, "
                f"stop_reason={self.stop_reason})")


class RequestOutput:
    """The output of one prompt (vLLM's RequestOutput).

    Args:
        request_id: The request's id (a counter, as vLLM's offline LLM).
        prompt: The prompt text (None for token-id prompts given without text).
        prompt_token_ids: The prompt's token ids.
        prompt_logprobs: Per prompt position {token_id: Logprob}, None at position 0; None
            unless requested.
        outputs: The completions, ``n`` of them.
        finished: Whether the whole request has ended (always True from LLM).
        num_cached_tokens: Prompt tokens whose KV came from the prefix cache.
    """

    def __init__(self, request_id: str, prompt: Optional[str],
                 prompt_token_ids: Optional[List[int]],
                 prompt_logprobs: Optional[PromptLogprobs], outputs: List[CompletionOutput],
                 finished: bool, metrics: Any = None, lora_request: Any = None,
                 encoder_prompt: Optional[str] = None,
                 encoder_prompt_token_ids: Optional[List[int]] = None,
                 num_cached_tokens: Optional[int] = None, **kwargs: Any) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.prompt_logprobs = prompt_logprobs
        self.outputs = outputs
        self.finished = finished
        self.metrics = metrics
        self.lora_request = lora_request
        self.encoder_prompt = encoder_prompt
        self.encoder_prompt_token_ids = encoder_prompt_token_ids
        self.num_cached_tokens = num_cached_tokens

    def __repr__(self) -> str:
        return (f"RequestOutput(request_id={self.request_id}, prompt={self.prompt!r}, "
                f"prompt_token_ids={self.prompt_token_ids}, "
                f"encoder_prompt={self.encoder_prompt!r}, "
                f"encoder_prompt_token_ids={self.encoder_prompt_token_ids}, "
                f"prompt_logprobs={self.prompt_logprobs}, outputs={self.outputs}, "
                f"finished={self.finished}, metrics={self.metrics}, "
                f"lora_request={self.lora_request}, "
                f"num_cached_tokens={self.num_cached_tokens})")


# (token_id, logprob, decoded_token) entries, most likely first, as the extension returns them.
_Entries = List[Tuple[int, float, Optional[str]]]


def _logprob_dict(entries: _Entries, chosen: int, k: Optional[int]) -> Dict[int, Logprob]:
    # The chosen token is an extra entry (rank unknown) when the top-K did not include it.
    extra = chosen if k is not None and k >= 0 and len(entries) > k else None
    out: Dict[int, Logprob] = {}
    rank = 0
    for token_id, logprob, decoded in entries:
        if token_id == extra:
            out[token_id] = Logprob(logprob, None, decoded)
        else:
            rank += 1
            out[token_id] = Logprob(logprob, rank, decoded)
    return out


def _request_output(raw: Dict[str, Any], params: Any, prompt: Optional[str] = None,
                    messages: Optional[List[Dict[str, Any]]] = None) -> RequestOutput:
    """Builds a RequestOutput from the extension's dict and the request's SamplingParams."""
    prompt_ids: List[int] = raw["prompt_token_ids"]
    prompt_logprobs: Optional[PromptLogprobs] = None
    if raw["prompt_logprobs"] is not None:
        prompt_logprobs = [
            None if entries is None else _logprob_dict(entries, prompt_ids[pos],
                                                       params.prompt_logprobs)
            for pos, entries in enumerate(raw["prompt_logprobs"])
        ]
    outputs: List[CompletionOutput] = []
    for i, o in enumerate(raw["outputs"]):
        logprobs: Optional[SampleLogprobs] = None
        cumulative: Optional[float] = None
        if o["logprobs"] is not None:
            logprobs = [_logprob_dict(entries, token, params.logprobs)
                        for entries, token in zip(o["logprobs"], o["token_ids"])]
            cumulative = sum(lp[token].logprob for lp, token in zip(logprobs, o["token_ids"]))
        message = None
        if messages is not None:
            m = messages[i]
            message = ChatMessage(content=m["content"], reasoning=m["reasoning"],
                                  tool_calls=[ToolCall(*c) for c in m["tool_calls"]],
                                  finish_reason=m["finish_reason"])
        outputs.append(CompletionOutput(
            index=o["index"], text=o["text"] if params.detokenize else "",
            token_ids=o["token_ids"], cumulative_logprob=cumulative, logprobs=logprobs,
            finish_reason=o["finish_reason"], stop_reason=o["stop_reason"], message=message))
    return RequestOutput(request_id=raw["request_id"],
                         prompt=prompt if prompt is not None else raw["prompt"],
                         prompt_token_ids=prompt_ids, prompt_logprobs=prompt_logprobs,
                         outputs=outputs, finished=True,
                         num_cached_tokens=raw["num_cached_tokens"])
