#!/usr/bin/python3
"""Reference frames for gemmaserve's video tests, from Debian's python3-av (PyAV 10 over the
system's FFmpeg 5.1), python3-pil and python3-numpy.

  video_reference.py DIR

reads DIR/request.json:
  {"clips": [{"file": "c0.mp4", "indices": [0, 4, 9], "rotation": 90}, ...],
   "linspace": [[total, n], ...]}
and writes DIR/manifest.json plus one raw uint8 RGB file per requested frame:
  {"clips": [{"file", "nb_frames", "guessed_rate": [num, den], "decoded", "width", "height",
              "frames": {"<index>": "<raw file>"}, "opencv": {...} when python3-opencv is there}],
   "linspace": [[indices], ...]}

FFmpeg clips: each frame as vLLM's OpenCV loader gets it, frame.reformat("bgr24", BICUBIC) (what
OpenCV's FFmpeg backend does), turned clockwise by `rotation` as cv2.rotate does, then BGR -> RGB.
Animated WebP (FFmpeg 5.1 cannot decode it): Pillow's frames (libwebp's WebPAnimDecoder) in RGB.
"""
import json
import os
import sys

import av
import numpy as np
from PIL import Image


def turned(bgr, rotation):
    # cv2.rotate: ROTATE_90_CLOCKWISE for 90, ROTATE_180, ROTATE_90_COUNTERCLOCKWISE for 270.
    return np.rot90(bgr, k=-(rotation // 90)) if rotation else bgr


def ffmpeg_clip(out_dir, clip):
    path = os.path.join(out_dir, clip["file"])
    wanted = set(clip["indices"])
    rotation = clip.get("rotation", 0)
    result = {"file": clip["file"], "frames": {}}
    with av.open(path) as container:
        stream = container.streams.video[0]
        result["nb_frames"] = stream.frames
        rate = stream.guessed_rate
        result["guessed_rate"] = [rate.numerator, rate.denominator] if rate else None
        decoded = 0
        for frame in container.decode(stream):
            if decoded in wanted:
                bgr = frame.reformat(format="bgr24", interpolation="BICUBIC").to_ndarray()
                rgb = np.ascontiguousarray(turned(bgr, rotation)[:, :, ::-1])
                name = "%s.%d.rgb" % (clip["file"], decoded)
                rgb.tofile(os.path.join(out_dir, name))
                result["frames"][str(decoded)] = name
                result["height"], result["width"] = rgb.shape[:2]
            decoded += 1
        result["decoded"] = decoded
    result["opencv"] = opencv_clip(path, wanted)
    return result


def opencv_clip(path, wanted):
    """OpenCV's own view where python3-opencv is installed (it is not a test requirement)."""
    try:
        import cv2
    except ImportError:
        return None
    capture = cv2.VideoCapture(path, cv2.CAP_FFMPEG)
    if not capture.isOpened():
        return {"opened": False}
    result = {"opened": True, "version": cv2.__version__,
              "frame_count": int(capture.get(cv2.CAP_PROP_FRAME_COUNT)),
              "fps": capture.get(cv2.CAP_PROP_FPS),
              "rotation": int(capture.get(cv2.CAP_PROP_ORIENTATION_META)), "frames": {}}
    index = 0
    while capture.grab():
        if index in wanted:
            ok, bgr = capture.retrieve()
            if ok:
                name = "%s.%d.opencv.rgb" % (os.path.basename(path), index)
                np.ascontiguousarray(bgr[:, :, ::-1]).tofile(
                    os.path.join(os.path.dirname(path), name))
                result["frames"][str(index)] = name
        index += 1
    return result


def webp_clip(out_dir, clip):
    path = os.path.join(out_dir, clip["file"])
    wanted = set(clip["indices"])
    result = {"file": clip["file"], "frames": {}, "durations_ms": []}
    with Image.open(path) as image:
        result["nb_frames"] = image.n_frames
        result["width"], result["height"] = image.size
        for index in range(image.n_frames):
            image.seek(index)
            image.load()  # Pillow sets the frame's duration when it decodes it
            result["durations_ms"].append(image.info.get("duration", 0))
            if index in wanted:
                name = "%s.%d.rgb" % (clip["file"], index)
                np.asarray(image.convert("RGB")).tofile(os.path.join(out_dir, name))
                result["frames"][str(index)] = name
    return result


def main():
    out_dir = sys.argv[1]
    with open(os.path.join(out_dir, "request.json")) as f:
        request = json.load(f)
    clips = []
    for clip in request.get("clips", []):
        if clip["file"].endswith(".webp"):
            clips.append(webp_clip(out_dir, clip))
        else:
            clips.append(ffmpeg_clip(out_dir, clip))
    linspace = [np.linspace(0, total - 1, n, dtype=int).tolist()
                for total, n in request.get("linspace", [])]
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump({"clips": clips, "linspace": linspace}, f)


if __name__ == "__main__":
    main()
