#!/usr/bin/python3
"""How far transformers' Gemma4VideoProcessor resize is from the frames gemmaserve (and vLLM) use.

vLLM's Gemma 4 hands a video's frames to the image processor as PIL images (Pillow's BICUBIC,
which gemmaserve matches bit for bit); transformers' Gemma4VideoProcessor resizes uint8 tensors
with torchvision's F.resize(antialias=True, BICUBIC). This prints, for frame sizes from tiny to
1080p resized to the 70-soft-token target, the largest per-channel difference of the two (in
uint8 levels; pixel_values differ by that / 255) with Debian's torch / torchvision.
Usage: /usr/bin/python3 tools/video_resize_bound.py
"""
import math

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F


def target(height, width, patch=16, max_soft_tokens=70, pooling=3):
    """Gemma 4's aspect-ratio-preserving resize target (get_aspect_ratio_preserving_size)."""
    unit = patch * pooling
    scale = math.sqrt(max_soft_tokens * pooling * pooling / ((height / patch) * (width / patch)))
    return (max(unit, int(math.floor(height * scale / unit)) * unit),
            max(unit, int(math.floor(width * scale / unit)) * unit))


def frames(height, width, rng):
    y, x = np.mgrid[0:height, 0:width]
    smooth = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1),
                       (x + y) * 255 // max(width + height - 2, 1)], -1).astype(np.uint8)
    return {"noise": rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "gradient": smooth}


def main():
    rng = np.random.default_rng(0)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}")
    print("frame      -> target     kind      max diff  differing")
    for height, width in [(48, 64), (240, 320), (360, 640), (480, 854), (720, 1280),
                          (1080, 1920), (1920, 1080)]:
        th, tw = target(height, width)
        for kind, img in frames(height, width, rng).items():
            pil = np.asarray(Image.fromarray(img).resize((tw, th), Image.BICUBIC)).astype(int)
            tensor = torch.from_numpy(img).permute(2, 0, 1).contiguous()
            tv = F.resize(tensor, [th, tw], interpolation=InterpolationMode.BICUBIC, antialias=True)
            diff = np.abs(pil - tv.permute(1, 2, 0).numpy().astype(int))
            print(f"{height:4d}x{width:<5d} -> {th:3d}x{tw:<5d}  {kind:8s}  {diff.max():3d}/255  "
                  f"{(diff > 0).mean():8.2%}")


if __name__ == "__main__":
    main()
