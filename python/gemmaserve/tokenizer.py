"""The model's tokenizer with Hugging Face's method names (what ``LLM.get_tokenizer`` returns)."""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from gemmaserve import _gemmaserve

# Renders a conversation: (messages JSON, options) -> (text, token ids). Set by LLM.
_ChatRenderer = Callable[[str, Dict[str, Any]], Tuple[str, List[int]]]


class BatchEncoding(dict):
    """Hugging Face's BatchEncoding: a dict of ``input_ids`` / ``attention_mask`` with
    attribute access (``enc.input_ids``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(name) from e


class Tokenizer:
    """Text <-> token ids with Hugging Face tokenizer semantics (``encode``, ``decode``,
    ``__call__``, ``apply_chat_template``, ``eos_token_id``, ``bos_token_id``, ``vocab_size``).

    Decoding and encoding are the engine's own (the same ids as the server and the CLI).
    """

    def __init__(self, native: "_gemmaserve.Tokenizer",
                 chat_renderer: Optional[_ChatRenderer] = None) -> None:
        self._native = native
        self._render = chat_renderer

    @classmethod
    def from_pretrained(cls, path: str) -> "Tokenizer":
        """Loads a tokenizer.json, a GGUF vocabulary or a folder holding tokenizer.json.

        A tokenizer loaded this way has no chat template (``apply_chat_template`` needs the
        one from ``LLM.get_tokenizer()``).
        """
        return cls(_gemmaserve.Tokenizer.from_path(path))

    @property
    def vocab_size(self) -> int:
        """Number of token ids (one past the largest id, added tokens included)."""
        return self._native.vocab_size()

    def __len__(self) -> int:
        return self._native.vocab_size()

    @property
    def bos_token_id(self) -> Optional[int]:
        bos = self._native.bos_id()
        return None if bos < 0 else bos

    @property
    def eos_token_id(self) -> Optional[int]:
        eos = self._native.eos_ids()
        return eos[0] if eos else None

    @property
    def bos_token(self) -> Optional[str]:
        bos = self.bos_token_id
        return None if bos is None else self._native.id_to_piece(bos)

    @property
    def eos_token(self) -> Optional[str]:
        eos = self.eos_token_id
        return None if eos is None else self._native.id_to_piece(eos)

    @property
    def pad_token_id(self) -> Optional[int]:
        return self._native.piece_to_id("<pad>")

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """Token ids of ``text``; ``add_special_tokens`` adds the BOS as Hugging Face does.
        Special tokens written in the text ("<start_of_turn>") are recognised."""
        return self._native.encode(text, add_special_tokens, True)

    def decode(self, token_ids: Union[int, Sequence[int]],
               skip_special_tokens: bool = False) -> str:
        """Text of ``token_ids`` exactly as Hugging Face decodes (invalid UTF-8 becomes U+FFFD).
        ValueError for an id outside the vocabulary."""
        ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        return self._native.decode(ids, skip_special_tokens)

    def batch_decode(self, sequences: Sequence[Sequence[int]],
                     skip_special_tokens: bool = False) -> List[str]:
        """``decode`` of each sequence."""
        return [self.decode(s, skip_special_tokens) for s in sequences]

    def __call__(self, text: Union[str, Sequence[str]],
                 add_special_tokens: bool = True) -> BatchEncoding:
        """``{"input_ids": ..., "attention_mask": ...}`` for one text or a list of texts."""
        if isinstance(text, str):
            ids = self.encode(text, add_special_tokens)
            return BatchEncoding(input_ids=ids, attention_mask=[1] * len(ids))
        batch = [self.encode(t, add_special_tokens) for t in text]
        return BatchEncoding(input_ids=batch, attention_mask=[[1] * len(i) for i in batch])

    def convert_ids_to_tokens(self, ids: Union[int, Sequence[int]]) -> Union[str, List[str]]:
        """The stored pieces of ids ("<bos>", "▁Hello"); ValueError for an unknown id."""
        if isinstance(ids, int):
            return self._native.id_to_piece(ids)
        return [self._native.id_to_piece(i) for i in ids]

    def convert_tokens_to_ids(self, tokens: Union[str, Sequence[str]]
                              ) -> Union[Optional[int], List[Optional[int]]]:
        """The ids of stored pieces (None for a piece not in the vocabulary)."""
        if isinstance(tokens, str):
            return self._native.piece_to_id(tokens)
        return [self._native.piece_to_id(t) for t in tokens]

    def apply_chat_template(self, conversation: List[Dict[str, Any]],
                            tools: Optional[List[Dict[str, Any]]] = None,
                            documents: Optional[List[Dict[str, Any]]] = None,
                            chat_template: Optional[str] = None,
                            add_generation_prompt: bool = False,
                            continue_final_message: bool = False, tokenize: bool = True,
                            return_dict: bool = False, **kwargs: Any
                            ) -> Union[str, List[int], BatchEncoding]:
        """Renders ``conversation`` with the model's chat template exactly as ``LLM.chat`` and
        the server do (Hugging Face's rules); extra keyword arguments become template variables
        (e.g. ``enable_thinking=True``). Returns the text with ``tokenize=False``, else the
        token ids (a BatchEncoding with ``return_dict=True``)."""
        if self._render is None:
            raise ValueError("apply_chat_template needs the tokenizer of an LLM "
                             "(LLM.get_tokenizer()), which knows the chat template")
        template_kwargs = dict(kwargs)
        if documents is not None:
            template_kwargs["documents"] = documents
        options = {
            "tools": None if tools is None else json.dumps(tools),
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final_message,
            "chat_template": chat_template,
            "chat_template_kwargs": json.dumps(template_kwargs),
        }
        text, ids = self._render(json.dumps(conversation), options)
        if not tokenize:
            return text
        if return_dict:
            return BatchEncoding(input_ids=ids, attention_mask=[1] * len(ids))
        return ids
