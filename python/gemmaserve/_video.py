"""multi_modal_data's videos as the extension takes them. Decoded frames in vLLM's forms (a
(frames, height, width, 3) uint8 array, a list of frames, a (frames, metadata) tuple) are checked
here and become one RGB buffer with each frame's time; encoded clips (bytes or a path) go to the
engine's decoder (io/video with the LLM's media_io_kwargs), so offline and served videos agree."""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from gemmaserve._images import is_pil_image, pil_rgb

# An encoded clip, or (frame count, height, width, RGB bytes of the frames in order, each
# frame's time in seconds).
EngineVideo = Union[bytes, Tuple[int, int, int, bytes, List[float]]]

_DEFAULT_FPS = 24  # Hugging Face's processor without video metadata (the server's default too)
# The keys of vLLM's video metadata (Hugging Face's VideoMetadata and do_sample_frames).
_METADATA_KEYS = ("fps", "frames_indices", "total_num_frames", "duration", "width", "height",
                  "video_backend", "do_sample_frames")
_FORMS = ("a (frames, height, width, 3) uint8 array, a list of frames (PIL images or (height, "
          "width, 3) uint8 arrays), a (frames, metadata) tuple, encoded clip bytes or a file path")


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "ndim")


def _is_frame(value: Any) -> bool:
    return is_pil_image(value) or (_is_array(value) and value.ndim == 3)


def _is_one_video(data: Any) -> bool:
    """vLLM's rule for multi_modal_data["video"]: a 4-D array, a frame list and any pair that is
    not two frames are one video; a 5-D array or another list holds one video per entry."""
    if isinstance(data, (bytes, bytearray, memoryview, str, os.PathLike)):
        return True
    if _is_array(data):
        return data.ndim != 5
    if isinstance(data, tuple) and len(data) == 2 and not _is_frame(data[1]):
        return True
    return isinstance(data, (list, tuple)) and bool(data) and _is_frame(data[0])


def engine_videos(index: int, data: Any, do_convert_rgb: bool) -> List[EngineVideo]:
    """``{"video": V}``, V one video or a list of them, one per bare ``<|video|>`` of prompt
    `index`, for the extension. TypeError / ValueError name the prompt and the video."""
    videos = [data] if _is_one_video(data) else data
    if _is_array(videos):
        videos = list(videos)
    if not isinstance(videos, (list, tuple)):
        raise TypeError(f"prompt {index}: multi_modal_data['video'] takes a video or a list of "
                        f"them ({_FORMS}), got {type(data).__name__}")
    return [_engine_video(f"prompt {index}: video {n}", video, do_convert_rgb)
            for n, video in enumerate(videos)]


def _engine_video(where: str, video: Any, do_convert_rgb: bool) -> EngineVideo:
    if isinstance(video, (bytes, bytearray, memoryview)):
        return bytes(video)
    if isinstance(video, (str, os.PathLike)):
        try:
            return Path(video).read_bytes()
        except OSError as e:  # the same OSError subclass, naming the prompt and video
            raise OSError(e.errno, f"{where}: {e.strerror}", e.filename) from None
    metadata: Optional[Dict[str, Any]] = None
    if isinstance(video, tuple) and len(video) == 2 and not _is_frame(video[1]):
        video, metadata = video
        if not isinstance(metadata, dict):
            raise TypeError(f"{where}: the metadata of a (frames, metadata) tuple must be a dict "
                            f"(vLLM's fps, frames_indices, ...), got {type(metadata).__name__}")
    count, height, width, rgb = _rgb_frames(where, video, do_convert_rgb)
    return (count, height, width, rgb, _timestamps(where, metadata, count))


def _uint8_array(where: str, value: Any, shape: str, ndim: int) -> Any:
    import numpy  # only array inputs need it, and they bring it

    array = numpy.asarray(value)
    if array.dtype != numpy.uint8:
        raise TypeError(f"{where}: frames must be uint8 RGB (0-255), got dtype {array.dtype}")
    if array.ndim != ndim or array.shape[-1] != 3:
        raise ValueError(f"{where}: frames must be a {shape} RGB array, got shape "
                         f"{tuple(array.shape)}")
    return numpy.ascontiguousarray(array)


def _rgb_frames(where: str, frames: Any, do_convert_rgb: bool) -> Tuple[int, int, int, bytes]:
    """(count, height, width, RGB bytes of every frame in order)."""
    if _is_array(frames):
        array = _uint8_array(where, frames, "(frames, height, width, 3)", 4)
        count, height, width = (int(n) for n in array.shape[:3])
        if count == 0:
            raise ValueError(f"{where} has no frames")
        if height == 0 or width == 0:
            raise ValueError(f"{where}: its frames are {width}x{height}, no pixels")
        return count, height, width, array.tobytes()
    if not isinstance(frames, (list, tuple)):
        raise TypeError(f"{where} must be {_FORMS}, got {type(frames).__name__}")
    if not frames:
        raise ValueError(f"{where} has no frames")
    pixels: List[bytes] = []
    first: Tuple[int, int] = (0, 0)
    for n, frame in enumerate(frames):
        width, height, rgb = _rgb_frame(f"{where}: frame {n}", frame, do_convert_rgb)
        if n == 0:
            first = (width, height)
        elif (width, height) != first:
            raise ValueError(f"{where}: frame {n} is {width}x{height} but frame 0 is "
                             f"{first[0]}x{first[1]}; a video's frames share one size")
        pixels.append(rgb)
    return len(frames), first[1], first[0], b"".join(pixels)


def _rgb_frame(where: str, frame: Any, do_convert_rgb: bool) -> Tuple[int, int, bytes]:
    """(width, height, RGB bytes) of one frame of a frame list."""
    if is_pil_image(frame):
        try:
            return pil_rgb(frame, do_convert_rgb)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    if not _is_array(frame):
        raise TypeError(f"{where} must be a PIL image or a (height, width, 3) uint8 array, got "
                        f"{type(frame).__name__}")
    array = _uint8_array(where, frame, "(height, width, 3)", 3)
    height, width = int(array.shape[0]), int(array.shape[1])
    if height == 0 or width == 0:
        raise ValueError(f"{where} is {width}x{height}, no pixels")
    return width, height, array.tobytes()


def _timestamps(where: str, metadata: Optional[Dict[str, Any]], count: int) -> List[float]:
    """Each frame's time as Hugging Face's VideoMetadata gives it: frames_indices[i] / fps
    (indices 0, 1, ... and 24 fps where the metadata has none)."""
    metadata = metadata or {}
    unknown = sorted(str(k) for k in metadata if k not in _METADATA_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown metadata key(s) {', '.join(unknown)} (vLLM's video "
                         f"metadata: {', '.join(_METADATA_KEYS)})")
    if metadata.get("do_sample_frames"):
        raise ValueError(f"{where}: metadata do_sample_frames true is not supported; the frames "
                         f"are taken as given (pass bytes or a path to sample a clip)")
    fps = metadata.get("fps")
    if fps is None:
        fps = _DEFAULT_FPS
    elif (isinstance(fps, bool) or not isinstance(fps, numbers.Real) or
          not math.isfinite(fps) or fps <= 0):
        raise ValueError(f"{where}: metadata fps must be a positive number of frames per second, "
                         f"got {fps!r}")
    indices = metadata.get("frames_indices")
    if indices is None:
        return [n / float(fps) for n in range(count)]
    indices = list(indices)
    if len(indices) != count:
        raise ValueError(f"{where}: metadata has {len(indices)} frames_indices for {count} "
                         f"frames; give one per frame")
    for n in indices:
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"{where}: metadata frames_indices must be non-negative whole "
                             f"numbers, got {n!r}")
    return [int(n) / float(fps) for n in indices]
