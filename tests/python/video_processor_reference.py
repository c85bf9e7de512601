#!/usr/bin/python3
"""Reference pixel values for video frames, both ways a Gemma 4 video is preprocessed.

  video_processor_reference.py DIR

reads DIR/request.json {"frames": [{"file", "width", "height"}], "max_soft_tokens": 70} (raw
uint8 RGB frames as the decoder gives them) and writes, per frame, DIR/<file>.vllm.f32 and
DIR/<file>.hf.f32 with DIR/manifest.json:
  vllm: the frame as a PIL image through Gemma4ImageProcessorPil's rules at the video budget,
        which is what vLLM's Gemma 4 does with a video's frames (pil_image_reference.py);
  hf:   transformers' Gemma4VideoProcessor: torchvision's F.resize(antialias=True, BICUBIC) on
        the uint8 tensor, rescale and normalize fused in float32, the same patches.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torchvision
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pil_image_reference import hf_preprocess, target_size  # noqa: E402

PATCH, POOLING = 16, 3


def video_processor(rgb, max_soft_tokens):
    max_patches = max_soft_tokens * POOLING ** 2
    height, width = rgb.shape[:2]
    th, tw = target_size(height, width, PATCH, max_patches, POOLING)
    video = torch.from_numpy(rgb).permute(2, 0, 1)[None].contiguous()
    if (th, tw) != (height, width):
        video = F.resize(video, [th, tw], interpolation=InterpolationMode.BICUBIC, antialias=True)
    # rescale_and_normalize fused: mean 0 and std 1 scaled by 1 / rescale_factor.
    video = (video.to(torch.float32) - 0.0) / torch.tensor(255.0, dtype=torch.float32)
    frames, channels, h, w = video.shape
    patches = video.reshape(frames, channels, h // PATCH, PATCH, w // PATCH, PATCH)
    patches = patches.permute(0, 2, 4, 3, 5, 1).reshape(frames, (h // PATCH) * (w // PATCH), -1)
    values = np.zeros((max_patches, patches.shape[-1]), dtype=np.float32)
    values[: patches.shape[1]] = patches[0].numpy()
    return values


def main():
    out_dir = sys.argv[1]
    with open(os.path.join(out_dir, "request.json")) as f:
        request = json.load(f)
    budget = request["max_soft_tokens"]
    manifest = {"torch": torch.__version__, "torchvision": torchvision.__version__, "frames": []}
    for frame in request["frames"]:
        rgb = np.fromfile(os.path.join(out_dir, frame["file"]), dtype=np.uint8)
        rgb = rgb.reshape(frame["height"], frame["width"], 3)
        _, _, vllm, _, tokens = hf_preprocess(rgb, PATCH, POOLING, budget)
        vllm.astype("<f4").tofile(os.path.join(out_dir, frame["file"] + ".vllm.f32"))
        video_processor(rgb, budget).astype("<f4").tofile(
            os.path.join(out_dir, frame["file"] + ".hf.f32"))
        manifest["frames"].append({"file": frame["file"], "num_soft_tokens": tokens})
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f)


if __name__ == "__main__":
    main()
