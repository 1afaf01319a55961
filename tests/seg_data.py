"""Segmentation pairs written with Pillow: images whose colour encodes the class of each pixel.

Each class k is a flat colour ``PALETTE[k]``, the same in the image (RGB) and in
the mask's palette, so the class of any output pixel can be read back from the
image (the nearest palette colour) and compared with the mask.
"""

import os

import numpy as np
from PIL import Image

# Colours far apart (no pair closer than 120 in any channel sum), none black: black is
# the image's padding, read back as the pad class.
PALETTE = np.array([[255, 255, 255], [230, 20, 20], [20, 200, 30], [30, 40, 230],
                    [240, 220, 10], [200, 30, 220], [10, 210, 220]], np.uint8)
PAD_COLOUR = np.array([0, 0, 0], np.uint8)


def palette_bytes():
    return PALETTE.reshape(-1).tolist() + [0] * (768 - PALETTE.size)


def class_map(h, w, seed=0, classes=len(PALETTE), splits=2, margin=6):
    """A map of axis-aligned class blocks, uint8 [h, w]: ``splits`` cuts per axis, each at
    least ``margin`` pixels from the sides (a block narrower than the downscale factor
    could vanish from a nearest-neighbour mask while it still tints the image); a
    ``margin`` < 1 is a fraction of each side."""
    rng = np.random.default_rng(seed)
    out = np.zeros((h, w), np.uint8)
    if margin < 1:  # a fraction of each side
        my, mx = int(margin * h), int(margin * w)
    else:
        my, mx = min(margin, h // 2 - 1), min(margin, w // 2 - 1)
    ys = np.sort(rng.choice(np.arange(my, max(my + splits, h - my)), splits, replace=False))
    xs = np.sort(rng.choice(np.arange(mx, max(mx + splits, w - mx)), splits, replace=False))
    for i, (y0, y1) in enumerate(zip([0, *ys], [*ys, h])):
        for j, (x0, x1) in enumerate(zip([0, *xs], [*xs, w])):
            out[y0:y1, x0:x1] = rng.integers(0, classes)
    return out


def write_pair(image_path, mask_path, classes, image_fmt=None, mask_fmt=None, **mask_save):
    """Writes the image (class colours) and the palette mask (class indices) of ``classes``."""
    for p in (image_path, mask_path):
        os.makedirs(os.path.dirname(p), exist_ok=True)
    Image.fromarray(PALETTE[classes]).save(image_path, format=image_fmt,
                                           **({"quality": 100} if image_fmt == "JPEG" else {}))
    m = Image.fromarray(classes, "P")
    m.putpalette(palette_bytes())
    m.save(mask_path, format=mask_fmt, **mask_save)
    return image_path, mask_path


def classes_of(image):
    """The class of each pixel of an RGB image (nearest palette colour; black -> 255)."""
    colours = np.concatenate([PALETTE, PAD_COLOUR[None]]).astype(np.int32)
    d = np.abs(np.asarray(image, np.int32)[..., None, :] - colours).sum(-1)
    k = d.argmin(-1)
    return np.where(k == len(PALETTE), 255, k).astype(np.uint8)


def near_boundary(mask):
    """True where a pixel's 3x3 neighbourhood holds another class; the outer ring of the
    image counts (beyond it may lie the image's edge, where a bilinear image blends in
    the fill while the nearest-neighbour mask does not)."""
    m = np.asarray(mask)[..., 0] if np.ndim(mask) == 3 else np.asarray(mask)
    p = np.pad(m.astype(np.int32), 1, constant_values=-1)
    out = np.zeros(m.shape, bool)
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            out |= p[dy:dy + m.shape[0], dx:dx + m.shape[1]] != m
    return out


def mismatches(image, mask):
    """Pixels whose class read from the image differs from the mask's, off boundaries."""
    m = np.asarray(mask)[..., 0]
    bad = (classes_of(image) != m) & ~near_boundary(m)
    return int(bad.sum())
