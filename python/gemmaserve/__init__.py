"""gemmaserve: Gemma 4 inference on CPU with vLLM's Python API.

    from gemmaserve import LLM, SamplingParams

    llm = LLM(model="/path/to/gemma4")
    outputs = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=32))
    print(outputs[0].outputs[0].text)

The engine is the C++ library (the compiled ``gemmaserve._gemmaserve`` extension), running in
this process: one LLM loads the model once and serves every call.
"""

from gemmaserve._gemmaserve import __version__
from gemmaserve.inputs import PromptType, TextPrompt, TokensPrompt
from gemmaserve.llm import LLM
from gemmaserve.outputs import (ChatMessage, CompletionOutput, Logprob, RequestOutput,
                                ToolCall)
from gemmaserve.sampling_params import (RequestOutputKind, SamplingParams,
                                        StructuredOutputsParams)
from gemmaserve.tokenizer import Tokenizer

__all__ = [
    "__version__", "LLM", "SamplingParams", "StructuredOutputsParams", "RequestOutputKind",
    "RequestOutput", "CompletionOutput", "Logprob", "ChatMessage", "ToolCall", "Tokenizer",
    "PromptType", "TextPrompt", "TokensPrompt",
]
