"""Image quality against a reference resize: PSNR per image, median and 5th percentile.

The reference for an image resized to ``(height, width)`` is an antialiased
resize of its full decode, upright: ``tf.image.resize(image, size,
antialias=True)`` (bilinear; with ``antialias=True`` TensorFlow widens the
kernel by the reduction factor, as Pillow's reducing filters do), kept in
float32 (not rounded). The benchmarks (``benchmarks/hires_set.py``,
``python -m pipeline bench``) and ``write_tfrecords(max_resolution=...)``'s
tests measure against it.

PSNR (peak signal-to-noise ratio, dB) = ``10 * log10(255**2 / MSE)`` over all
pixels and channels of one image, values on the 0-255 scale (a float32 image
in [0, 1] is scaled by 255 first); ``inf`` for identical images.
"""

from __future__ import annotations

import math
from typing import Dict, Iterable, List, Sequence

import numpy as np

PEAK = 255.0


def psnr(image, reference) -> float:
    """PSNR (dB) of ``image`` against ``reference``.

    Args:
        image, reference: arrays of the same shape ([h, w, c] or [h, w]),
            any numeric dtype, values in 0-255.

    Returns:
        float, ``10 * log10(255**2 / mean((image - reference)**2))``; ``inf``
        when they are equal.

    Raises:
        ValueError: the shapes differ (both are named).
    """
    a = np.asarray(image, np.float64)
    b = np.asarray(reference, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"image and reference must have the same shape. Received: "
                         f"image.shape={a.shape}, reference.shape={b.shape}")
    mse = float(np.mean((a - b) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(PEAK * PEAK / mse)


def summary(values: Iterable[float]) -> Dict[str, float]:
    """``{"psnr_db_median", "psnr_db_p5", "psnr_images"}`` of per-image PSNRs.

    The 5th percentile is numpy's linear interpolation (``np.percentile(v, 5)``):
    the level that 95% of the images reach. An empty input gives NaN figures.
    """
    v = np.asarray([float(x) for x in values], np.float64)
    if not len(v):
        return {"psnr_db_median": math.nan, "psnr_db_p5": math.nan, "psnr_images": 0}
    finite = np.where(np.isinf(v), 99.0, v)  # identical images: above any lossy figure
    return {"psnr_db_median": float(np.median(finite)),
            "psnr_db_p5": float(np.percentile(finite, 5)), "psnr_images": int(len(v))}


def full_decode(path: str) -> np.ndarray:
    """A file's whole image, upright: uint8 [h, w, 3].

    ``tf.io.decode_image`` (libjpeg-turbo for JPEG, every pixel: no DCT
    scaling) with the EXIF orientation (read by Pillow) applied by
    ``pipeline.decode.image.apply_orientation``.
    """
    import tensorflow as tf
    from PIL import Image
    from pipeline.decode import image as decode

    with open(path, "rb") as f:
        contents = f.read()
    image = tf.io.decode_image(contents, channels=3, expand_animations=False)
    with Image.open(path) as im:
        orientation = int(im.getexif().get(0x0112, 1) or 1)
    if orientation != 1:
        image = decode.apply_orientation(image, orientation)
    return image.numpy()


def reference(image, size: Sequence[int]) -> np.ndarray:
    """The reference resize of a whole image: float32 [height, width, c], 0-255.

    Args:
        image: uint8 (or float, 0-255) [h, w, c].
        size: (height, width) pixels.
    """
    import tensorflow as tf
    out = tf.image.resize(tf.cast(image, tf.float32), [int(size[0]), int(size[1])],
                          method="bilinear", antialias=True)
    return np.clip(out.numpy(), 0.0, PEAK)


def reference_for(path: str, size: Sequence[int]) -> np.ndarray:
    """``reference(full_decode(path), size)``."""
    return reference(full_decode(path), size)


def as_pixels(batch_images) -> np.ndarray:
    """A batch as float64 [b, h, w, c] on the 0-255 scale.

    Accepts numpy arrays, TensorFlow or torch tensors (CPU). A float batch
    whose maximum is at most 1.0 is taken as [0, 1] and scaled by 255; other
    floats (Keras' ``image_dataset_from_directory``) are already 0-255.
    """
    x = np.asarray(batch_images)
    if x.dtype.kind == "f":
        x = x.astype(np.float64)
        if x.size and float(x.max()) <= 1.0:
            x = x * PEAK
    return x.astype(np.float64)


def match_psnr(outputs: np.ndarray, references: List[np.ndarray]) -> List[float]:
    """PSNR of each output image against its own reference, found by content.

    A loader's output order need not be its input order (shuffles, parallel
    maps that do not keep order): each output is matched to the reference it
    is closest to (highest PSNR). The references must be of distinct photos
    (tens of dB apart), as a benchmark's subset is.

    Args:
        outputs: [n, h, w, c] on the 0-255 scale.
        references: the references (each [h, w, c]) of the files the outputs
            come from.

    Returns:
        one PSNR (dB) per output image, in output order.
    """
    out = []
    for img in outputs:
        out.append(max(psnr(img, r) for r in references if np.shape(r) == img.shape)
                   if any(np.shape(r) == img.shape for r in references) else math.nan)
    return out
