"""Test clips made with Debian's python3-av (FFmpeg's encoders): a colour ramp that moves, so
every frame differs. Imported by tests/scripts/*.sh's Python, or run as
  /usr/bin/python3 video_clip.py OUT CODEC SECONDS FPS WIDTH HEIGHT
"""
import sys
from fractions import Fraction

import av
import numpy as np


def clip(path, codec, seconds, fps, width, height, pix_fmt="yuv420p", tint=0):
    with av.open(path, "w") as container:
        stream = container.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        y, x = np.mgrid[0:height, 0:width]
        for i in range(int(seconds * fps)):
            rgb = np.stack([(x * 4 + i * 3 + tint) % 256, (y * 4 + i) % 256,
                            np.full_like(x, (i * 7 + tint) % 256)], -1).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


if __name__ == "__main__":
    out, codec, seconds, fps, width, height = sys.argv[1:]
    clip(out, codec, float(seconds), float(fps), int(width), int(height))
