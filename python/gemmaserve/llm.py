"""The offline ``LLM``: vLLM's class over gemmaserve's C++ engine, in this process."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from gemmaserve import _gemmaserve
from gemmaserve._audio import EngineClip, engine_audios
from gemmaserve._images import EngineImage, engine_images
from gemmaserve._log import logger
from gemmaserve._progress import ProgressBar
from gemmaserve._video import EngineVideo, engine_videos
from gemmaserve.inputs import PromptType
from gemmaserve.outputs import RequestOutput, _request_output
from gemmaserve.sampling_params import SamplingParams
from gemmaserve.tokenizer import Tokenizer

ChatMessages = List[Dict[str, Any]]

# vLLM arguments with no meaning on one CPU process: accepted and logged, as the server's flags.
_IGNORED_DEFAULTS: Dict[str, Any] = {
    "trust_remote_code": False, "pipeline_parallel_size": 1,
    "compilation_config": None, "enforce_eager": False,
    "swap_space": 4, "cpu_offload_gb": 0, "disable_custom_all_reduce": False,
    "tokenizer_mode": "auto", "revision": None, "tokenizer_revision": None,
    "hf_token": None, "hf_overrides": None, "enable_chunked_prefill": None,
    "distributed_executor_backend": None, "max_seq_len_to_capture": 8192,
    "disable_log_stats": True,
    "task": "auto", "load_format": "auto", "async_scheduling": False,
}


# (text, token ids, images, mm_processor_kwargs as JSON, audio clips, videos) as the extension
# takes a prompt.
_EnginePrompt = Tuple[Optional[str], Optional[List[int]], List[EngineImage], Optional[str],
                      List[EngineClip], List[EngineVideo]]


def _multi_modal_data(index: int, data: Any) -> Dict[str, Any]:
    if not data:
        return {}
    if not isinstance(data, dict) or set(data) - {"image", "audio", "video"}:
        raise ValueError(f"prompt {index}: multi_modal_data takes {{'image': ..., 'audio': ..., "
                         f"'video': ...}} only (Gemma 4's modalities), got {data!r:.80}")
    return data


class LLM:
    """An LLM for generating texts from prompts, as vLLM's ``LLM``: the checkpoint is loaded once
    and every ``generate`` / ``chat`` call runs its prompts as one batch on the engine.

    Args:
        model: A Hugging Face checkpoint folder (Gemma 4), a Gemma 4 GGUF file (first part of a
            split one) or a folder of GGUF files.
        tokenizer: A tokenizer.json, GGUF vocabulary or folder; default: the model's.
        mmproj: The vision projector GGUF of a GGUF model (llama-server's ``--mmproj``).
        dtype: Accepted for vLLM compatibility; gemmaserve computes in float32 from the
            checkpoint's weights (see ``cpu_matmul_precision``). Other values are logged.
        quantization: None, "q8_0", "q4_0" or "q4_k" (applied at load), or the checkpoint's
            own method as vLLM names it ("gptq", "awq", "compressed-tensors": checked).
        max_model_len: Context length; default the config's.
        max_num_seqs: Sequences per step (256).
        max_num_batched_tokens: Token budget of a step (2048).
        enable_prefix_caching: Reuse KV blocks of shared prompt prefixes (True).
        kv_cache_memory_bytes: KV cache size in bytes; else ``gpu_memory_utilization`` of the
            memory left after loading; else min(4 GiB, half of it).
        gpu_memory_utilization: Share of the available memory for the KV cache (None).
        seed: Seeds the draws of requests without their own seed (0 when None).
        block_size, kv_cache_dtype, long_prefill_token_threshold, generation_config,
        override_generation_config (a dict), threads, cpu_matmul_precision: the engine flags
            of ``gemmaserve serve`` under their vLLM names.
        limit_mm_per_prompt: Most items per prompt, ``{"image": N, "audio": M, "video": V}``
            (None: no limit).
        mm_processor_kwargs: Default image budget, ``{"max_soft_tokens": 280}`` (70, 140, 280,
            560 or 1120; None: the checkpoint's processor config, else 280), and the sampling of
            encoded videos, ``{"num_frames": N, "fps": F}``; a prompt's own
            ``mm_processor_kwargs`` win.
        mm_processor_cache_gb: Cache of encoded images in GiB (4; 0 disables).
        media_io_kwargs: vLLM's media loader options (``--media-io-kwargs``), for encoded videos
            (bytes, paths and chat ``video_url`` parts): ``{"video": {"num_frames": 32, "fps":
            -1}}`` (num_frames -1: every frame; fps > 0: at most duration x fps frames),
            ``"video_backend": "opencv"`` and ``"frame_recovery": False`` accepted.
        max_video_seconds: Longest encoded video taken, in seconds (600), from its header before
            any frame is decoded.
        structured_outputs_cache_gb: Cache of compiled grammars and token masks in GiB (1; 0
            disables).
        data_parallel_size: Engine replicas in this process, each with its own KV cache and a
            share of the threads; prompts go to the replica with the longest cached prefix,
            else the least loaded (1).
        tensor_parallel_size: Ranks the model is split over (1). N > 1 needs the script to run
            under ``mpirun -n N`` (every rank but 0 serves the model inside this constructor and
            exits when rank 0's LLM ends); elsewhere it raises ValueError saying so, rather than
            run the whole model in one process.
        speculative_config: vLLM's speculative decoding dict, e.g. ``{"method": "ngram",
            "num_speculative_tokens": 4}`` (None: off).
        **kwargs: GPU-only and unknown vLLM arguments (``trust_remote_code``,
            ``compilation_config``, ...) are accepted and logged.

    Raises:
        ValueError: a bad checkpoint or argument (the engine's message).
    """

    def __init__(self, model: str, *, tokenizer: Optional[str] = None,
                 mmproj: Optional[str] = None, dtype: str = "auto",
                 quantization: Optional[str] = None, max_model_len: Optional[int] = None,
                 max_num_seqs: Optional[int] = None,
                 max_num_batched_tokens: Optional[int] = None,
                 enable_prefix_caching: Optional[bool] = None,
                 kv_cache_memory_bytes: Optional[int] = None,
                 gpu_memory_utilization: Optional[float] = None, seed: Optional[int] = None,
                 block_size: Optional[int] = None, kv_cache_dtype: str = "auto",
                 long_prefill_token_threshold: Optional[int] = None,
                 generation_config: str = "auto",
                 override_generation_config: Optional[Dict[str, Any]] = None,
                 threads: Optional[int] = None, cpu_matmul_precision: Optional[str] = None,
                 limit_mm_per_prompt: Optional[Dict[str, Any]] = None,
                 mm_processor_kwargs: Optional[Dict[str, Any]] = None,
                 mm_processor_cache_gb: Optional[float] = None,
                 media_io_kwargs: Optional[Dict[str, Dict[str, Any]]] = None,
                 max_video_seconds: Optional[float] = None,
                 structured_outputs_cache_gb: Optional[float] = None,
                 data_parallel_size: int = 1, tensor_parallel_size: int = 1,
                 enable_expert_parallel: bool = False,
                 speculative_config: Optional[Dict[str, Any]] = None,
                 **kwargs: Any) -> None:
        args: Dict[str, Any] = {"model": str(model), "kv_cache_dtype": kv_cache_dtype,
                                "generation_config": generation_config}
        optional = {
            "tokenizer": tokenizer, "mmproj": mmproj, "quantization": quantization,
            "max_model_len": max_model_len,
            "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
            "enable_prefix_caching": enable_prefix_caching,
            "kv_cache_memory_bytes": kv_cache_memory_bytes,
            "gpu_memory_utilization": gpu_memory_utilization, "seed": seed,
            "block_size": block_size,
            "long_prefill_token_threshold": long_prefill_token_threshold, "threads": threads,
            "cpu_matmul_precision": cpu_matmul_precision,
            "mm_processor_cache_gb": mm_processor_cache_gb,
            "max_video_seconds": max_video_seconds,
            "structured_outputs_cache_gb": structured_outputs_cache_gb,
        }
        args.update({k: (str(v) if k in ("tokenizer", "mmproj") else v)
                     for k, v in optional.items() if v is not None})
        if override_generation_config:
            args["override_generation_config"] = json.dumps(override_generation_config)
        if limit_mm_per_prompt is not None:
            args["limit_mm_per_prompt"] = json.dumps(limit_mm_per_prompt)
        if mm_processor_kwargs is not None:
            args["mm_processor_kwargs"] = json.dumps(mm_processor_kwargs)
        if media_io_kwargs is not None:
            args["media_io_kwargs"] = json.dumps(media_io_kwargs)
        if speculative_config is not None:
            args["speculative_config"] = json.dumps(speculative_config)
        if dtype not in ("auto", None):
            logger.warning(f"LLM(dtype={dtype!r}) is accepted for vLLM compatibility and "
                           "ignored: gemmaserve computes in float32 from the checkpoint's weights")
        if data_parallel_size != 1:
            args["data_parallel_size"] = data_parallel_size
        if enable_expert_parallel:
            args["enable_expert_parallel"] = True
        if tensor_parallel_size != 1:
            self._join_tensor_parallel_ranks(args, tensor_parallel_size)
        for name, value in kwargs.items():
            if name in _IGNORED_DEFAULTS and value == _IGNORED_DEFAULTS[name]:
                logger.info(f"LLM({name}={value!r}) is accepted for vLLM compatibility; "
                            "no effect here")
            else:
                logger.warning(f"LLM({name}={value!r}) is accepted for vLLM compatibility and "
                               "ignored: gemmaserve runs one CPU process")
        self._engine = _gemmaserve.Engine(args)

    @staticmethod
    def _join_tensor_parallel_ranks(args: Dict[str, Any], size: int) -> None:
        """Tensor parallelism needs `size` processes started by mpirun; rank 0 returns to build
        the engine, the others serve the model here and end the process with rank 0's LLM."""
        ranks = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
        if ranks != size:
            where = "a process outside mpirun" if ranks == 1 else f"one of {ranks} mpirun ranks"
            raise ValueError(f"LLM(tensor_parallel_size={size}) needs {size} ranks, and this is "
                             f"{where}: run the script under `mpirun -n {size}`, serve the model "
                             f"with `gemmaserve serve MODEL --tensor-parallel-size {size}`, or "
                             "pass tensor_parallel_size=1")
        args["tensor_parallel_size"] = size
        args["distributed_executor_backend"] = "mpi"
        if int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")) != 0:
            _gemmaserve.run_tensor_parallel_follower_and_exit(args)

    # -- vLLM's accessors -------------------------------------------------------------------

    def get_tokenizer(self) -> Tokenizer:
        """The model's tokenizer with Hugging Face's methods. ValueError if it has none."""
        native = self._engine.tokenizer()
        if native is None:
            raise ValueError("this model has no tokenizer; pass LLM(tokenizer=...)")
        return Tokenizer(native, self._engine.render_chat)

    def get_default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the checkpoint's generation_config.json defaults (what
        ``generate`` uses when given no sampling_params)."""
        return SamplingParams(**self._engine.default_sampling_params())

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len()

    @property
    def eos_token_ids(self) -> List[int]:
        """Ids that end generation unless ignore_eos (the checkpoint's, never hard-coded)."""
        return self._engine.eos_token_ids()

    def num_unfinished_requests(self) -> int:
        """Requests the engine still holds: 0 between calls (interrupted calls included)."""
        return self._engine.num_unfinished_requests()

    # -- generation -------------------------------------------------------------------------

    def generate(self, prompts: Union[PromptType, Sequence[PromptType], Sequence[int]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 *, use_tqdm: Union[bool, Callable[..., Any]] = True, lora_request: Any = None,
                 priority: Optional[List[int]] = None) -> List[RequestOutput]:
        """Generates completions for the prompts, all submitted as one batch.

        Args:
            prompts: A prompt or a list of them: strings, ``{"prompt": text}``,
                ``{"prompt_token_ids": [...]}`` (optionally with ``"prompt"`` text to echo), or
                a mix. A flat list of ints is one token-id prompt. A dict may carry
                ``"multi_modal_data": {"image": image or [images]}`` (a PIL image, encoded
                PNG/JPEG/WebP/GIF bytes or a path), one per bare ``<|image|>`` of the prompt, in
                order, and ``"mm_processor_kwargs": {"max_soft_tokens": N}``. As in vLLM, a PIL
                image goes through Hugging Face's ``convert("RGB")`` (alpha dropped); bytes and
                paths are decoded as the server decodes (RGBA composited on white). Audio is
                vLLM's ``"multi_modal_data": {"audio": (samples, sample_rate)}`` (or a list of
                such tuples), one clip per bare ``<|audio|>``, on a model with an audio
                embedder: samples a numpy array (float32, float64, or int16 scaled by 1/32768
                as 16-bit PCM; 1-D mono, or 2-D averaged over its channels, (frames, channels)
                when it has more rows than columns, else (channels, frames)) or a list of
                floats, converted to float32; any positive whole sample_rate, resampled to
                16 kHz by the server's resampler (libsoxr, librosa's soxr_hq). Video, on a
                model with vision and a tokenizer (the frames' "mm:ss" stamps are text), is
                ``"multi_modal_data": {"video": V}``, V one video or a list of them, one per
                bare ``<|video|>``, in order, each expanded as Hugging Face's Gemma4Processor
                lays it out (per frame "mm:ss", then the frame as an image at 70 soft tokens).
                A video is vLLM's: a numpy array (frames, height, width, 3) of uint8 RGB; a list
                of frames (PIL images or (height, width, 3) uint8 arrays, one size); a
                ``(frames, metadata)`` tuple as vLLM's video loader returns it, where frame i's
                time is ``metadata["frames_indices"][i] / metadata["fps"]`` (no fps: 24; no
                frames_indices: 0, 1, ...; without metadata the same); or an encoded clip
                (MP4/MOV, WebM/MKV, GIF, animated WebP) as bytes or a path, decoded as the
                server decodes a ``video_url``: ``media_io_kwargs``' sampling (32 frames spread
                evenly by default), overridden by the prompt's ``mm_processor_kwargs``
                ``{"num_frames": N, "fps": F}``, and ``max_video_seconds``.
            sampling_params: One SamplingParams for every prompt or one per prompt; None uses
                ``get_default_sampling_params()``.
            use_tqdm: Show vLLM's "Processed prompts" bar (or pass a tqdm-like callable).

        Returns:
            One RequestOutput per prompt, in prompt order.

        Raises:
            ValueError: a bad prompt or parameter (the engine's message, naming the prompt).
            TypeError: an audio clip or a video of the wrong type or dtype (naming the prompt
                and the clip or video).
            KeyboardInterrupt: Ctrl+C; the call's requests are aborted first.
        """
        if lora_request is not None:
            raise ValueError("LoRA adapters are not supported by gemmaserve")
        if priority is not None:
            logger.info("generate(priority=...) is accepted; the offline LLM runs its prompts "
                        "as one batch")
        items = self._prompt_list(prompts)
        params = self._params_list(sampling_params, len(items))
        engine_prompts: List[_EnginePrompt] = []
        echo: List[Optional[str]] = []
        for i, p in enumerate(items):
            if isinstance(p, str):
                engine_prompts.append((p, None, [], None, [], []))
                echo.append(p)
                continue
            if not isinstance(p, dict):
                raise ValueError(f"prompt {i} must be a str or a dict with 'prompt' or "
                                 f"'prompt_token_ids', got {type(p).__name__}")
            data = _multi_modal_data(i, p.get("multi_modal_data"))
            pictures = "image" in data or "video" in data
            rgb = pictures and self._engine.image_processor()["do_convert_rgb"]
            images = engine_images(i, data["image"], rgb) if "image" in data else []
            audios = engine_audios(i, data["audio"]) if "audio" in data else []
            videos = engine_videos(i, data["video"], rgb) if "video" in data else []
            kwargs = p.get("mm_processor_kwargs")
            kwargs_json = json.dumps(kwargs) if kwargs is not None else None
            if "prompt_token_ids" in p:
                engine_prompts.append((None, [int(t) for t in p["prompt_token_ids"]], images,
                                       kwargs_json, audios, videos))
                echo.append(p.get("prompt"))
            elif "prompt" in p:
                engine_prompts.append((p["prompt"], None, images, kwargs_json, audios, videos))
                echo.append(p["prompt"])
            else:
                raise ValueError(f"prompt {i} has neither 'prompt' nor 'prompt_token_ids'")
        to_context = [sp.max_tokens is None for sp in self._per_prompt(params, len(items))]
        bar = ProgressBar(len(items), use_tqdm)
        try:
            raw = self._engine.generate(engine_prompts, params, to_context, bar.finished)
        finally:
            bar.close()
        per_prompt = self._per_prompt(params, len(items))
        return [_request_output(r, per_prompt[i], prompt=echo[i]) for i, r in enumerate(raw)]

    def chat(self, messages: Union[ChatMessages, List[ChatMessages]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
             use_tqdm: Union[bool, Callable[..., Any]] = True, lora_request: Any = None,
             chat_template: Optional[str] = None,
             chat_template_content_format: str = "auto", add_generation_prompt: bool = True,
             continue_final_message: bool = False,
             tools: Optional[List[Dict[str, Any]]] = None,
             chat_template_kwargs: Optional[Dict[str, Any]] = None,
             mm_processor_kwargs: Optional[Dict[str, Any]] = None, *,
             reasoning_effort: Optional[str] = None,
             tool_choice: Union[str, Dict[str, Any], None] = None,
             parse_output: bool = False) -> List[RequestOutput]:
        """Generates replies to conversations, rendered with the chat template exactly as the
        server renders them (the same code).

        Args:
            messages: One conversation (a list of OpenAI message dicts) or a list of them.
                Content parts may hold images (``image_url``) and, on a model with an audio
                embedder, audio: ``{"type": "input_audio", "input_audio": {"data": BASE64,
                "format": "wav"}}`` or ``{"type": "audio_url", "audio_url": {"url": URL}}``
                (data: or http(s) URLs), decoded and resampled as the server does; and, on a
                model with vision, video: ``{"type": "video_url", "video_url": {"url": URL}}``
                (data: or http(s) URLs of MP4/MOV, WebM/MKV, AVI, GIF or animated WebP, or
                vLLM's ``data:video/jpeg;base64,F1,F2,...`` frame list), sampled with
                ``LLM(media_io_kwargs=...)`` as the server samples.
            sampling_params: One for all conversations or one per conversation.
            chat_template: Template text to use instead of the model's.
            chat_template_content_format: vLLM's: "auto" (detected from the template), "string"
                (content parts joined into one string) or "openai" (kept as part lists).
            add_generation_prompt, continue_final_message: Hugging Face's template flags.
            tools: OpenAI tool definitions, given to the template.
            chat_template_kwargs: Extra template variables (e.g. ``{"enable_thinking": True}``).
            reasoning_effort: Gemma 4: maps to enable_thinking, as the server does.
            tool_choice: gemmaserve's addition, the server's field: "auto" / "none" / None
                leave the model free; "required" or ``{"type": "function", "function":
                {"name": NAME}}`` force the reply to open with a call (of NAME), as the
                server enforces it (token masks).
            parse_output: gemmaserve's addition. False (vLLM's behaviour): ``text`` is the raw
                generated text. True: each output also gets ``message`` (a ChatMessage with
                the reasoning, content and tool calls the server would return); ``text`` then
                keeps the marker text the parsers read (special tokens are not skipped).

        Returns:
            One RequestOutput per conversation; ``prompt`` is the rendered chat prompt.
        """
        if lora_request is not None:
            raise ValueError("LoRA adapters are not supported by gemmaserve")
        if mm_processor_kwargs:
            logger.info("chat(mm_processor_kwargs=...) is accepted and ignored: chat images take "
                        "the engine's budget, LLM(mm_processor_kwargs=...)")
        if isinstance(messages, (list, tuple)) and messages and isinstance(messages[0],
                                                                           (list, tuple)):
            conversations = [list(c) for c in messages]
        else:
            conversations = [list(messages)]
        params = self._params_list(sampling_params, len(conversations))
        options = {
            "tools": None if tools is None else json.dumps(tools),
            "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final_message,
            "chat_template": chat_template,
            "chat_template_kwargs": json.dumps(chat_template_kwargs or {}),
            "reasoning_effort": reasoning_effort,
            "parse_output": parse_output,
            "tool_choice": self._tool_choice_name(tool_choice),
            "chat_template_content_format": chat_template_content_format,
        }
        per_prompt = self._per_prompt(params, len(conversations))
        to_context = [sp.max_tokens is None for sp in per_prompt]
        bar = ProgressBar(len(conversations), use_tqdm)
        try:
            raw = self._engine.chat([json.dumps(c) for c in conversations], params, options,
                                    to_context, bar.finished)
        finally:
            bar.close()
        return [
            _request_output(r["output"], per_prompt[i], prompt=r["prompt"],
                            messages=r["messages"] if parse_output else None)
            for i, r in enumerate(raw)
        ]

    # -- helpers ----------------------------------------------------------------------------

    @staticmethod
    def _tool_choice_name(tool_choice: Union[str, Dict[str, Any], None]) -> Optional[str]:
        if tool_choice is None or isinstance(tool_choice, str):
            if tool_choice not in (None, "auto", "none", "required"):
                raise ValueError(f"tool_choice must be 'auto', 'none', 'required' or "
                                 f"{{'type': 'function', 'function': {{'name': ...}}}}, "
                                 f"got {tool_choice!r}")
            return tool_choice
        try:
            return str(tool_choice["function"]["name"])
        except (KeyError, TypeError) as e:
            raise ValueError("tool_choice must be 'auto', 'none', 'required' or "
                             "{'type': 'function', 'function': {'name': ...}}, "
                             f"got {tool_choice!r}") from e

    @staticmethod
    def _prompt_list(prompts: Any) -> List[Any]:
        if isinstance(prompts, (str, dict)):
            return [prompts]
        items = list(prompts)
        if items and all(isinstance(t, int) for t in items):
            return [{"prompt_token_ids": items}]  # vLLM's legacy single token-id prompt
        return [{"prompt_token_ids": p} if isinstance(p, list) and all(
            isinstance(t, int) for t in p) else p for p in items]

    def _params_list(self, sampling_params: Any, count: int) -> List[SamplingParams]:
        if sampling_params is None:
            return [self.get_default_sampling_params()]
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params]
        params = list(sampling_params)
        if len(params) != count:
            raise ValueError("The lengths of prompts and params must be the same.")
        for p in params:
            if not isinstance(p, SamplingParams):
                raise TypeError(f"sampling_params must be SamplingParams, got {type(p).__name__}")
        return params

    @staticmethod
    def _per_prompt(params: List[SamplingParams], count: int) -> List[SamplingParams]:
        return params * count if len(params) == 1 else params
