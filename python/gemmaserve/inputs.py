"""Prompt shapes accepted by ``LLM.generate``, as vLLM's ``vllm.inputs``."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple, TypedDict, Union


# One audio clip, vLLM's form: (samples, sample_rate). samples: a numpy array (float32, float64
# or int16; 1-D mono or 2-D, channels averaged) or a list of floats; any positive whole rate in
# Hz, resampled to the model's 16 kHz.
AudioItem = Tuple[Any, int]

# One video, vLLM's forms: a (frames, height, width, 3) uint8 RGB numpy array; a list of PIL
# images or (height, width, 3) uint8 arrays; (frames, metadata) with metadata vLLM's dict (fps,
# frames_indices: frame i at frames_indices[i] / fps seconds); or an encoded clip as bytes or a
# path, decoded and sampled as the server decodes a video_url.
VideoItem = Any


class _MultiModal(TypedDict, total=False):
    # {"image": image or [images]}: PIL images, encoded bytes or paths, one per <|image|>;
    # {"audio": AudioItem or [AudioItem]}: one per <|audio|>;
    # {"video": VideoItem or [VideoItem]}: one per <|video|>
    multi_modal_data: Dict[str, Any]
    # {"max_soft_tokens": 70|140|280|560|1120} (images); {"num_frames": N, "fps": F} (the
    # sampling of encoded videos)
    mm_processor_kwargs: Dict[str, Any]


class TextPrompt(_MultiModal):
    """A text prompt: tokenized with the model's tokenizer (one BOS in front)."""

    prompt: str


class _TokensPromptText(_MultiModal, total=False):
    prompt: str  # echoed in RequestOutput.prompt


class TokensPrompt(_TokensPromptText):
    """A prompt given as token ids."""

    prompt_token_ids: List[int]


PromptType = Union[str, TextPrompt, TokensPrompt]
