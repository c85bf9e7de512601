"""multi_modal_data's images as the extension takes them: encoded bytes and paths (decoded by the
engine as the server decodes an image_url) or a PIL image's RGB pixels."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List, Tuple, Union

# Encoded image bytes, or (width, height, RGB bytes) of a decoded picture.
EngineImage = Union[bytes, Tuple[int, int, bytes]]


def is_pil_image(value: Any) -> bool:
    return hasattr(value, "convert") and hasattr(value, "tobytes") and hasattr(value, "mode")


def pil_rgb(image: Any, do_convert_rgb: bool) -> Tuple[int, int, bytes]:
    """A PIL image's RGB pixels as Hugging Face's processor makes them, which is where vLLM
    sends a decoded picture: convert("RGB") (alpha dropped, not composited) under the
    checkpoint's do_convert_rgb; without it only RGB pictures fit Gemma 4's 3 channels."""
    if image.mode != "RGB":
        if not do_convert_rgb:
            raise ValueError(f"a PIL image of mode {image.mode!r} needs converting to RGB, and "
                             f"the checkpoint's image processor has do_convert_rgb false")
        image = image.convert("RGB")
    return (image.width, image.height, image.tobytes())


def engine_images(index: int, images: Any, do_convert_rgb: bool) -> List[EngineImage]:
    """multi_modal_data's images for the extension: encoded bytes (decoded as the server
    decodes, RGBA on white as vLLM's media loader) or (width, height, RGB) of a PIL image."""
    if not isinstance(images, (list, tuple)):
        images = [images]
    out: List[EngineImage] = []
    for image in images:
        if isinstance(image, (bytes, bytearray, memoryview)):
            out.append(bytes(image))
        elif isinstance(image, (str, os.PathLike)):
            out.append(Path(image).read_bytes())
        elif is_pil_image(image):
            out.append(pil_rgb(image, do_convert_rgb))
        else:
            raise ValueError(f"prompt {index}: an image must be a PIL image, encoded image bytes "
                             f"or a file path, got {type(image).__name__}")
    return out
