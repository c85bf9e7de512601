#!/usr/bin/python3
"""Reference pixels from Debian's python3-pil (Pillow 9.4) for gemmaserve's image tests.

  files DIR       sample PNG/JPEG/WebP/GIF files + what Pillow (and vLLM's RGBA rule) decodes
  resize DIR      random RGB images + Image.resize(size, BICUBIC) of each
  preprocess DIR  Hugging Face's Gemma4ImageProcessorPil rules, re-implemented on numpy + PIL

Each writes DIR/manifest.json and raw files (uint8 RGB, float32, int32; little-endian).
"""
import io
import json
import math
import os
import struct
import sys
import warnings
import zlib

import numpy as np
from PIL import Image, ImageOps


def save_raw(out_dir, name, array):
    path = os.path.join(out_dir, name)
    np.ascontiguousarray(array).tofile(path)
    return name


# ---------------------------------------------------------------------------------------------
# files


def png_bytes(width, height, color_type, bit_depth, raw_rows, palette=None, trns=None, exif=None):
    """A minimal PNG writer: Pillow cannot write every colour type / depth (16-bit RGB, 2-bit)."""

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    out = b"\x89PNG\r\n\x1a\n"
    out += chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0))
    if palette is not None:
        out += chunk(b"PLTE", bytes(palette))
    if trns is not None:
        out += chunk(b"tRNS", bytes(trns))
    if exif is not None:
        out += chunk(b"eXIf", exif)
    out += chunk(b"IDAT", zlib.compress(b"".join(b"\x00" + r for r in raw_rows)))
    out += chunk(b"IEND", b"")
    return out


def adam7_png(rgb):
    """An interlaced 8-bit RGB PNG (Pillow does not write Adam7)."""
    h, w, _ = rgb.shape
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
              (0, 1, 1, 2)]
    rows = []
    for x0, y0, dx, dy in passes:
        sub = rgb[y0::dy, x0::dx]
        if sub.shape[0] and sub.shape[1]:
            rows.extend(r.tobytes() for r in sub)
    data = png_bytes(w, h, 2, 8, rows)
    # png_bytes writes interlace method 0 into IHDR; patch it to 1 and fix the CRC.
    ihdr = bytearray(data[12:29])
    ihdr[-1] = 1
    return data[:12] + bytes(ihdr) + struct.pack(">I", zlib.crc32(ihdr) & 0xFFFFFFFF) + data[33:]


def pack_bits(values, bits):
    out = bytearray()
    per = 8 // bits
    for i in range(0, len(values), per):
        byte = 0
        for j in range(per):
            v = values[i + j] if i + j < len(values) else 0
            byte |= v << (8 - bits * (j + 1))
        out.append(byte)
    return bytes(out)


def gif_bytes(screen, frame_box, indices, global_palette=None, local_palette=None,
              transparency=None, min_code_size=2):
    """A hand-made GIF (Pillow only writes full-screen frames): LZW with a clear code before the
    code width would grow, so every pixel is a literal."""

    def table(palette):
        bits = max(1, (len(palette) // 3 - 1).bit_length())
        return bits, bytes(palette) + bytes(3 * (1 << bits) - len(palette))

    out = b"GIF89a" + struct.pack("<HH", *screen)
    if global_palette:
        bits, data = table(global_palette)
        out += bytes([0x80 | (bits - 1), 0, 0]) + data
    else:
        out += bytes([0, 0, 0])
    if transparency is not None:
        out += bytes([0x21, 0xF9, 4, 1, 0, 0, transparency, 0])
    x, y, w, h = frame_box
    flags, palette_data = 0, b""
    if local_palette:
        bits, palette_data = table(local_palette)
        flags = 0x80 | (bits - 1)
    out += b"," + struct.pack("<HHHH", x, y, w, h) + bytes([flags]) + palette_data
    clear, end, width = 1 << min_code_size, (1 << min_code_size) + 1, min_code_size + 1
    codes = []
    for i, v in enumerate(indices):
        if i % ((1 << min_code_size) - 2) == 0:
            codes.append(clear)
        codes.append(int(v))
    codes.append(end)
    bitstream, nbits, packed = 0, 0, bytearray()
    for code in codes:
        bitstream |= code << nbits
        nbits += width
        while nbits >= 8:
            packed.append(bitstream & 0xFF)
            bitstream >>= 8
            nbits -= 8
    if nbits:
        packed.append(bitstream & 0xFF)
    out += bytes([min_code_size])
    for i in range(0, len(packed), 255):
        out += bytes([len(packed[i:i + 255])]) + packed[i:i + 255]
    return out + b"\x00;"


def pil_save(image, fmt, **kwargs):
    buffer = io.BytesIO()
    image.save(buffer, fmt, **kwargs)
    return buffer.getvalue()


def vllm_rgb(image):
    """vLLM's ImageMediaIO: RGBA -> pasted on white with its alpha; everything else convert()."""
    if image.mode == "RGBA":
        converted = Image.new("RGB", image.size, (255, 255, 255))
        converted.paste(image, mask=image.split()[3])
        return converted
    return image.convert("RGB")


def exif_bytes(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def sample_files(rng):
    w, h = 37, 23  # odd sizes: partial MCUs, chroma edges
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    # A smooth image for the lossy codecs (noise would be all artefacts).
    yy, xx = np.mgrid[0:h, 0:w]
    smooth = np.stack([xx * 255 // (w - 1), yy * 255 // (h - 1), (xx + yy) * 255 // (w + h - 2)],
                      axis=-1).astype(np.uint8)
    alpha = rng.integers(0, 256, (h, w), dtype=np.uint8)
    alpha[0, :4] = [0, 255, 1, 254]
    grey = rng.integers(0, 256, (h, w), dtype=np.uint8)
    files = {}

    im_rgb = Image.fromarray(rgb, "RGB")
    im_rgba = Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
    im_l = Image.fromarray(grey, "L")
    im_la = Image.fromarray(np.dstack([grey, alpha]), "LA")
    im_p = im_rgb.quantize(colors=200)
    files["png_rgb.png"] = pil_save(im_rgb, "PNG")
    files["png_rgba.png"] = pil_save(im_rgba, "PNG")
    files["png_grey.png"] = pil_save(im_l, "PNG")
    files["png_grey_alpha.png"] = pil_save(im_la, "PNG")
    files["png_palette.png"] = pil_save(im_p, "PNG")
    files["png_palette_trns.png"] = pil_save(im_p, "PNG", transparency=3)
    files["png_1bit.png"] = pil_save(Image.fromarray(grey > 127), "PNG")
    # 16-bit, 2-bit, 4-bit palette and short palettes through the hand-made writer.
    rgb16 = rng.integers(0, 65536, (h, w, 3), dtype=np.uint16)
    files["png_rgb16.png"] = png_bytes(w, h, 2, 16, [r.astype(">u2").tobytes() for r in rgb16])
    rgba16 = rng.integers(0, 65536, (h, w, 4), dtype=np.uint16)
    files["png_rgba16.png"] = png_bytes(w, h, 6, 16, [r.astype(">u2").tobytes() for r in rgba16])
    grey16 = rng.integers(0, 600, (h, w), dtype=np.uint16)  # mode "I": clipped to 255 by RGB
    files["png_grey16.png"] = png_bytes(w, h, 0, 16, [r.astype(">u2").tobytes() for r in grey16])
    la16 = rng.integers(0, 65536, (h, w, 2), dtype=np.uint16)
    files["png_grey_alpha16.png"] = png_bytes(w, h, 4, 16, [r.astype(">u2").tobytes() for r in la16])
    grey2 = rng.integers(0, 4, (h, w))
    files["png_grey2.png"] = png_bytes(w, h, 0, 2, [pack_bits(list(r), 2) for r in grey2])
    pal4 = rng.integers(0, 16, (h, w))
    palette = list(rng.integers(0, 256, 16 * 3, dtype=np.uint8))
    files["png_palette4.png"] = png_bytes(w, h, 3, 4, [pack_bits(list(r), 4) for r in pal4],
                                          palette=palette, trns=[0, 128])
    files["png_interlaced.png"] = adam7_png(rgb)
    files["png_exif6.png"] = png_bytes(w, h, 2, 8, [r.tobytes() for r in rgb], exif=exif_bytes(6)[6:])

    im_smooth = Image.fromarray(smooth, "RGB")
    files["jpeg_420.jpg"] = pil_save(im_smooth, "JPEG", quality=90, subsampling=2)
    files["jpeg_422.jpg"] = pil_save(im_smooth, "JPEG", quality=85, subsampling=1)
    files["jpeg_444.jpg"] = pil_save(im_rgb, "JPEG", quality=95, subsampling=0)
    files["jpeg_progressive.jpg"] = pil_save(im_smooth, "JPEG", quality=80, progressive=True)
    files["jpeg_grey.jpg"] = pil_save(im_l, "JPEG", quality=90)
    files["jpeg_cmyk.jpg"] = pil_save(im_smooth.convert("CMYK"), "JPEG", quality=90)
    files["jpeg_exif6.jpg"] = pil_save(im_smooth, "JPEG", quality=90, exif=exif_bytes(6))
    files["jpeg_exif8.jpg"] = pil_save(im_smooth, "JPEG", quality=90, exif=exif_bytes(8))
    files["jpeg_exif3.jpg"] = pil_save(im_rgb, "JPEG", quality=90, exif=exif_bytes(3))
    files["jpeg_exif5.jpg"] = pil_save(im_rgb, "JPEG", quality=90, exif=exif_bytes(5))
    files["jpeg_exif7.jpg"] = pil_save(im_rgb, "JPEG", quality=90, exif=exif_bytes(7))
    files["jpeg_exif2.jpg"] = pil_save(im_rgb, "JPEG", quality=90, exif=exif_bytes(2))
    files["jpeg_exif4.jpg"] = pil_save(im_rgb, "JPEG", quality=90, exif=exif_bytes(4))

    files["webp_lossy.webp"] = pil_save(im_smooth, "WEBP", quality=80)
    files["webp_lossless.webp"] = pil_save(im_rgb, "WEBP", lossless=True)
    files["webp_lossless_alpha.webp"] = pil_save(im_rgba, "WEBP", lossless=True)
    smooth_rgba = Image.fromarray(np.dstack([smooth, alpha]), "RGBA")
    files["webp_lossy_alpha.webp"] = pil_save(smooth_rgba, "WEBP", quality=80)
    frame2 = Image.fromarray(255 - rgb, "RGB")
    files["webp_animated.webp"] = pil_save(im_rgb, "WEBP", lossless=True, save_all=True,
                                           append_images=[frame2], duration=100)

    files["gif_palette.gif"] = pil_save(im_p, "GIF")
    files["gif_transparency.gif"] = pil_save(im_p, "GIF", transparency=5)
    files["gif_grey.gif"] = pil_save(im_l, "GIF")
    files["gif_animated.gif"] = pil_save(im_p, "GIF", save_all=True,
                                         append_images=[frame2.quantize(colors=50)], duration=100)
    files["gif_interlaced.gif"] = pil_save(im_p, "GIF", interlace=True)
    pal4 = [200, 0, 0, 0, 200, 0, 0, 0, 200, 90, 90, 90]
    small = rng.integers(0, 4, 5 * 4)
    files["gif_small_frame_transparent.gif"] = gif_bytes((10, 8), (2, 3, 5, 4), small, pal4,
                                                         transparency=2)
    files["gif_small_frame.gif"] = gif_bytes((10, 8), (2, 3, 5, 4), small, pal4)
    files["gif_frame_past_screen.gif"] = gif_bytes((4, 4), (2, 2, 5, 3), small[:15], pal4)
    files["gif_local_palette.gif"] = gif_bytes((5, 4), (0, 0, 5, 4), small, None, pal4[::-1])
    files["gif_no_palette.gif"] = gif_bytes((5, 4), (0, 0, 5, 4), small)
    files["gif_grey_ramp.gif"] = gif_bytes((5, 4), (0, 0, 5, 4), small, [0, 0, 0, 1, 1, 1, 2, 2,
                                                                         2, 3, 3, 3])
    wide = rng.integers(0, 8, 5 * 4)  # indices past the 4-entry palette
    files["gif_index_past_palette.gif"] = gif_bytes((5, 4), (0, 0, 5, 4), wide, pal4,
                                                    min_code_size=3)
    return files


def cmd_files(out_dir):
    rng = np.random.default_rng(21)
    cases = []
    for name, data in sample_files(rng).items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
        image = Image.open(io.BytesIO(data))
        mode = image.mode
        drop = np.array(image.convert("RGB"))
        vllm = np.array(vllm_rgb(Image.open(io.BytesIO(data))))
        oriented = np.array(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
        cases.append({
            "file": name, "mode": mode, "width": drop.shape[1], "height": drop.shape[0],
            "drop": save_raw(out_dir, name + ".drop.rgb", drop),
            "vllm": save_raw(out_dir, name + ".vllm.rgb", vllm),
            "oriented_width": oriented.shape[1], "oriented_height": oriented.shape[0],
            "oriented": save_raw(out_dir, name + ".oriented.rgb", oriented),
        })
    return {"cases": cases}


# ---------------------------------------------------------------------------------------------
# resize

RESIZE_PAIRS = [
    # (src_w, src_h, dst_w, dst_h): down, up, odd, prime, 1xN, Nx1, extreme ratios
    (64, 64, 32, 32), (64, 64, 128, 128), (37, 23, 96, 48), (101, 103, 48, 48),
    (997, 13, 224, 48), (13, 997, 48, 224), (1, 1, 48, 48), (1, 50, 48, 768),
    (50, 1, 768, 48), (3, 5, 768, 768), (7, 3, 96, 48), (640, 480, 336, 240),
    (480, 640, 240, 336), (1000, 1000, 768, 768), (896, 896, 768, 768), (127, 251, 144, 288),
    (251, 127, 288, 144), (300, 200, 768, 528), (17, 19, 23, 29), (29, 23, 19, 17),
    (2, 2, 3, 3), (3, 3, 2, 2), (5, 1, 1, 1), (1, 5, 1, 1), (400, 30, 400, 48),
    (30, 400, 48, 400), (256, 256, 256, 96), (256, 256, 96, 256), (800, 600, 48, 48),
    (1920, 1080, 1008, 576), (1080, 1920, 576, 1008), (4000, 50, 1536, 48), (50, 4000, 48, 1536),
    (333, 333, 768, 768), (769, 767, 768, 768), (48, 48, 768, 768), (97, 89, 672, 624),
    (211, 199, 720, 672), (512, 384, 864, 624), (61, 1009, 96, 1536), (160, 90, 1008, 576),
    (720, 1280, 576, 1008), (999, 998, 997, 996), (12, 400, 48, 1536),
]


def cmd_resize(out_dir):
    rng = np.random.default_rng(7)
    cases = []
    for i, (sw, sh, dw, dh) in enumerate(RESIZE_PAIRS):
        if i % 3 == 2:  # hard edges: saturated blocks push the negative lobes past 0 and 255
            src = (rng.integers(0, 2, (sh, sw, 3)) * 255).astype(np.uint8)
        else:
            src = rng.integers(0, 256, (sh, sw, 3), dtype=np.uint8)
        out = np.array(Image.fromarray(src, "RGB").resize((dw, dh), Image.BICUBIC))
        cases.append({"src_width": sw, "src_height": sh, "dst_width": dw, "dst_height": dh,
                      "src": save_raw(out_dir, f"resize{i}.src.rgb", src),
                      "dst": save_raw(out_dir, f"resize{i}.dst.rgb", out)})
    return {"cases": cases}


# ---------------------------------------------------------------------------------------------
# preprocess: Hugging Face's image_processing_pil_gemma4.py rules, re-implemented


def target_size(height, width, patch_size, max_patches, pooling):
    total_px = height * width
    target_px = max_patches * (patch_size ** 2)
    factor = math.sqrt(target_px / total_px)
    side = pooling * patch_size
    th = int(math.floor(factor * height / side)) * side
    tw = int(math.floor(factor * width / side)) * side
    max_side = (max_patches // pooling ** 2) * side
    if th == 0:
        th = side
        tw = min(int(math.floor(width / height)) * side, max_side)
    elif tw == 0:
        tw = side
        th = min(int(math.floor(height / width)) * side, max_side)
    assert th * tw <= target_px
    return th, tw


def hf_preprocess(rgb, patch_size, pooling, max_soft_tokens, do_resize=True, resample=3,
                  do_rescale=True, rescale_factor=1 / 255, do_normalize=False,
                  image_mean=(0.0, 0.0, 0.0), image_std=(1.0, 1.0, 1.0)):
    max_patches = max_soft_tokens * pooling ** 2
    image = np.transpose(rgb, (2, 0, 1))  # PIL backend: channels first
    height, width = image.shape[-2:]
    th, tw = (height, width)
    if do_resize:
        th, tw = target_size(height, width, patch_size, max_patches, pooling)
    if (th, tw) != (height, width):
        resized = Image.fromarray(rgb, "RGB").resize((tw, th), resample=resample)
        image = np.transpose(np.array(resized), (2, 0, 1))
    if do_rescale:  # image_transforms.rescale
        image = (image.astype(np.float64) * rescale_factor).astype(np.float32)
    if do_normalize:  # image_transforms.normalize, channels first
        if not np.issubdtype(image.dtype, np.floating):
            image = image.astype(np.float32)
        mean = np.array(image_mean, dtype=image.dtype)
        std = np.array(image_std, dtype=image.dtype)
        image = ((image.T - mean) / std).T
    c, h, w = image.shape
    hp, wp = h // patch_size, w // patch_size
    patches = image.reshape(c, hp, patch_size, wp, patch_size).transpose(1, 3, 2, 4, 0)
    patches = patches.reshape(hp * wp, -1)
    gx, gy = np.meshgrid(np.arange(wp), np.arange(hp), indexing="xy")
    positions = np.stack([gx, gy], axis=-1).reshape(patches.shape[0], 2)
    pad = max_patches - patches.shape[0]
    patches = np.pad(patches, [(0, pad), (0, 0)], mode="constant", constant_values=0)
    positions = np.pad(positions, [(0, pad), (0, 0)], mode="constant", constant_values=-1)
    return th, tw, patches.astype(np.float32), positions.astype(np.int32), hp * wp // pooling ** 2


PREPROCESS_CASES = [
    # (width, height, max_soft_tokens, patch_size, pooling)
    (896, 896, 280, 16, 3), (640, 480, 280, 16, 3), (37, 23, 70, 16, 3), (1, 1, 70, 16, 3),
    (4000, 50, 140, 16, 3), (50, 4000, 140, 16, 3), (300, 200, 560, 16, 3),
    (768, 768, 280, 16, 3), (1200, 90, 1120, 16, 3), (24, 32, 16, 4, 2), (32, 32, 16, 4, 2),
]

# Checkpoint processor configs that differ from Gemma 4's defaults, with the case they run on.
CONFIG_CASES = [
    ((37, 23, 140, 16, 3), {"rescale_factor": 1 / 127.5, "do_normalize": True,
                            "image_mean": [0.5, 0.25, 0.125], "image_std": [0.5, 0.3, 0.7]}),
    ((24, 40, 70, 4, 2), {"do_rescale": False, "do_normalize": True,
                          "image_mean": [100.0, 127.5, 3.0], "image_std": [58.4, 57.1, 57.4]}),
    ((24, 40, 70, 4, 2), {"do_rescale": False}),
    ((48, 32, 70, 4, 2), {"do_resize": False, "rescale_factor": 0.0078125}),
    ((37, 23, 140, 16, 3), {"resample": 1}), ((300, 200, 70, 16, 3), {"resample": 1}),
    ((37, 23, 140, 16, 3), {"resample": 2}), ((300, 200, 70, 16, 3), {"resample": 2}),
    ((37, 23, 140, 16, 3), {"resample": 4}), ((300, 200, 70, 16, 3), {"resample": 4}),
    ((37, 23, 140, 16, 3), {"resample": 5}), ((300, 200, 70, 16, 3), {"resample": 5}),
    ((672, 480, 560, 16, 3), {"do_resize": False, "do_normalize": True,
                              "image_mean": [0.48145466, 0.4578275, 0.40821073],
                              "image_std": [0.26862954, 0.26130258, 0.27577711]}),
]


def cmd_preprocess(out_dir):
    rng = np.random.default_rng(3)
    cases = []
    all_cases = [(c, {}) for c in PREPROCESS_CASES] + CONFIG_CASES
    for i, ((w, h, budget, patch, pool), config) in enumerate(all_cases):
        rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        th, tw, values, positions, tokens = hf_preprocess(rgb, patch, pool, budget, **config)
        cases.append({"width": w, "height": h, "max_soft_tokens": budget, "patch_size": patch,
                      "pooling_kernel_size": pool, "config": config, "resized_width": tw,
                      "resized_height": th, "num_soft_tokens": tokens,
                      "max_patches": values.shape[0], "patch_dim": values.shape[1],
                      "src": save_raw(out_dir, f"pre{i}.src.rgb", rgb),
                      "pixel_values": save_raw(out_dir, f"pre{i}.f32", values.astype("<f4")),
                      "position_ids": save_raw(out_dir, f"pre{i}.i32", positions.astype("<i4"))})
    return {"cases": cases}


def main():
    warnings.simplefilter("ignore")  # Pillow's notes on palette transparency
    command, out_dir = sys.argv[1], sys.argv[2]
    manifest = {"files": cmd_files, "resize": cmd_resize, "preprocess": cmd_preprocess}[command](
        out_dir)
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, default=int)


if __name__ == "__main__":
    main()
