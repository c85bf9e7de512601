"""multi_modal_data's audio clips as the extension takes them: vLLM's ``(samples, sample_rate)``
tuples checked here, then averaged to mono and resampled to 16 kHz by the engine's own code
(io/audio: the server's down-mix and libsoxr resampler), so offline and served audio agree."""

from __future__ import annotations

import array
import numbers
from typing import Any, List, Tuple

# (float32 samples as bytes, frames x channels in C order; channels; sample rate in Hz).
EngineClip = Tuple[bytes, int, int]

_DTYPES = ("float32", "float64", "int16")
_MAX_RATE = 2**31 - 1  # the extension's int


def _is_clip(data: Any) -> bool:
    return isinstance(data, tuple) and len(data) == 2 and not isinstance(data[1], (tuple, list))


def engine_audios(index: int, data: Any) -> List[EngineClip]:
    """``{"audio": (samples, sample_rate)}`` or a list of such tuples, one per bare
    ``<|audio|>`` of prompt `index`, for the extension. TypeError / ValueError name the clip."""
    clips = [data] if _is_clip(data) else data
    if not isinstance(clips, (list, tuple)):
        raise TypeError(f"prompt {index}: multi_modal_data['audio'] takes a (samples, "
                        f"sample_rate) tuple or a list of them, got {type(data).__name__} (pass "
                        f"(samples, 16000) for samples at 16 kHz)")
    return [_engine_clip(f"prompt {index}: audio clip {n}", clip) for n, clip in enumerate(clips)]


def _engine_clip(where: str, clip: Any) -> EngineClip:
    if not isinstance(clip, tuple) or len(clip) != 2:
        raise TypeError(f"{where} must be a (samples, sample_rate) tuple, got "
                        f"{type(clip).__name__}")
    samples, rate = clip
    sample_rate = _sample_rate(where, rate)
    data, channels = _float32_frames(where, samples)
    return (data, channels, sample_rate)


def _sample_rate(where: str, rate: Any) -> int:
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real):
        raise TypeError(f"{where}: the sample rate must be a number of Hz, got "
                        f"{type(rate).__name__}")
    if not (0 < rate <= _MAX_RATE) or not float(rate).is_integer():
        raise ValueError(f"{where}: the sample rate must be a positive whole number of Hz, got "
                         f"{rate!r}")
    return int(rate)


def _float32_frames(where: str, samples: Any) -> Tuple[bytes, int]:
    """The samples as float32 bytes of interleaved frames, and the channel count. numpy arrays
    keep vLLM's layout rule: 2-D is (frames, channels) when it has more rows than columns, else
    (channels, frames); int16 is 16-bit PCM, scaled by 1/32768 as the decoder scales it."""
    if hasattr(samples, "dtype") and hasattr(samples, "ndim") and hasattr(samples, "astype"):
        dtype = str(samples.dtype)
        if dtype not in _DTYPES:
            raise TypeError(f"{where}: samples of dtype {dtype} are not supported; give float32, "
                            f"float64 or int16 (16-bit PCM)")
        if samples.ndim not in (1, 2):
            raise ValueError(f"{where}: samples must be 1-D (mono) or 2-D (frames, channels), "
                             f"got shape {tuple(samples.shape)}")
        if samples.size == 0:
            raise ValueError(f"{where} is empty")
        channels = 1
        if samples.ndim == 2:
            rows, columns = samples.shape
            samples = samples if rows > columns else samples.T
            channels = min(rows, columns)
        values = samples.astype("float32")
        if dtype == "int16":
            values *= 1 / 32768  # a power of two: exact
        return values.tobytes(order="C"), channels
    if isinstance(samples, (list, tuple)):
        if any(isinstance(v, bool) or not isinstance(v, numbers.Real) for v in samples):
            raise TypeError(f"{where}: a list of samples must hold numbers only (mono floats)")
        if not samples:
            raise ValueError(f"{where} is empty")
        return array.array("f", samples).tobytes(), 1
    raise TypeError(f"{where}: samples must be a numpy array (float32, float64 or int16) or a "
                    f"list of floats, got {type(samples).__name__}")
