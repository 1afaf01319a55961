"""Segmentation benchmark candidates (image + mask pairs), for ``benchmarks/segmentation.py``.

Importing this module registers them with the harness (``pipeline.tools.bench.harness.register``);
the harness's subprocess worker imports it again. Every candidate reads the pairs of
``spec["data_dir"]`` (photos, found recursively, sorted) and ``spec["masks_dir"]``
(the mask of ``data_dir/a/b/x.jpg`` is ``masks_dir/a/b/x.png``, a gray PNG of class
indices) and delivers batches ``(images [b, h, w, 3], masks [b, h, w, 1])`` at
``spec["image_size"]``, shuffled with ``spec["seed"]``:

    seg_pipeline: ``pipeline.from_paths(images, masks=masks)`` (uint8; the mask resized
        nearest-neighbour).
    seg_pipeline_train: the same with ``Augment(random_resized_crop=True,
        horizontal_flip=True)`` (one window and flip for image and mask).
    seg_plain: a hand-written tf.data paired map: ``from_tensor_slices((images, masks))``
        -> shuffle -> ``map(read_file, decode_jpeg, decode_png, resize)`` (image bilinear,
        cast to uint8; mask nearest) -> batch -> prefetch, ``AUTOTUNE`` parallelism.
    seg_keras: the Keras recipe: two ``keras.utils.image_dataset_from_directory`` calls
        (``labels=None``, the same ``seed``; the masks with ``color_mode="grayscale"``,
        ``interpolation="nearest"``) zipped with ``tf.data.Dataset.zip`` (float32, as
        Keras delivers). Keras 3 has no ``ImageDataGenerator``, whose two-generator
        recipe this is the tf.data form of; it pairs by sorted position and shuffle seed.

With ``spec["check_pairs"]``, each delivered pair is also checked (inside the timed loop:
leave it off when timing): its image's luminance is thresholded as the
mask was made (``mask_of``) and compared with the mask pixel by pixel, and the images of
each epoch are hashed; ``bench_extra`` then holds ``pairs_per_epoch`` (distinct images
per epoch), ``pair_agreement_min`` and ``pair_agreement_median`` (the fraction of pixels
where the mask equals the class read back from its image: near 1 for a right pair, far
lower for a wrong one).
"""

from __future__ import annotations

import hashlib
import os
import statistics
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from pipeline.tools.bench import harness as bench  # noqa: E402

# The luminance bounds of the classes: 4 classes, 0 (dark) to 3 (bright).
THRESHOLDS = (64, 128, 192)
IMAGE_EXTENSIONS = (".jpg", ".jpeg")


def mask_of(rgb) -> np.ndarray:
    """Class indices of an RGB image: its luminance (ITU-R 601-2, as Pillow's
    ``convert("L")``) thresholded at ``THRESHOLDS``; uint8 [h, w], values 0-3."""
    rgb = np.asarray(rgb, np.float32)
    lum = rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114
    return np.digitize(lum, THRESHOLDS).astype(np.uint8)


def pairs(data_dir: str, masks_dir: str):
    """(image paths, mask paths), sorted by image path; the mask of ``data_dir/r/x.jpg``
    is ``masks_dir/r/x.png``."""
    images = sorted(os.path.join(d, f) for d, _, fs in os.walk(data_dir, followlinks=True)
                    for f in fs if f.lower().endswith(IMAGE_EXTENSIONS))
    masks = [os.path.join(masks_dir, os.path.splitext(os.path.relpath(p, data_dir))[0] + ".png")
             for p in images]
    return images, masks


class CheckedPairs:
    """Iterates ``ds`` (batches of (images, masks)) and checks every pair (module doc)."""

    def __init__(self, ds):
        self.ds = ds
        self.per_epoch, self.agreement = [], []

    def __iter__(self):
        seen = set()
        for images, masks in self.ds:
            images = np.asarray(images)
            masks = np.asarray(masks)
            for img, m in zip(images, masks):
                seen.add(hashlib.sha1(np.ascontiguousarray(img).tobytes()).hexdigest())
                self.agreement.append(float(np.mean(mask_of(img) == m[..., 0])))
            yield images, masks
        self.per_epoch.append(len(seen))

    @property
    def bench_extra(self):
        return {"pairs_per_epoch": self.per_epoch,
                "pair_agreement_min": min(self.agreement, default=float("nan")),
                "pair_agreement_median": (statistics.median(self.agreement)
                                          if self.agreement else float("nan"))}


def _checked(ds, spec):
    return CheckedPairs(ds) if spec.get("check_pairs") else ds


def _pipeline(spec, augment=None):
    import pipeline
    images, masks = pairs(spec["data_dir"], spec["masks_dir"])
    ds = pipeline.from_paths(images, masks=masks, image_size=tuple(spec["image_size"]),
                             batch_size=spec["batch_size"], seed=spec.get("seed"),
                             augment=augment)
    return _checked(ds, spec)


def _pipeline_train(spec):
    import pipeline
    return _pipeline(spec, pipeline.Augment(random_resized_crop=True, horizontal_flip=True))


def _plain(spec):
    import tensorflow as tf
    images, masks = pairs(spec["data_dir"], spec["masks_dir"])
    size = tuple(spec["image_size"])

    def load(image_path, mask_path):
        image = tf.io.decode_jpeg(tf.io.read_file(image_path), channels=3)
        mask = tf.io.decode_png(tf.io.read_file(mask_path), channels=1)
        image = tf.cast(tf.clip_by_value(tf.image.resize(image, size), 0, 255), tf.uint8)
        mask = tf.image.resize(mask, size, method="nearest")
        return image, mask

    ds = (tf.data.Dataset.from_tensor_slices((images, masks))
          .shuffle(len(images), seed=spec.get("seed"))
          .map(load, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(spec["batch_size"]).prefetch(tf.data.AUTOTUNE))
    return _checked(ds, spec)


def _keras(spec):
    import keras
    import tensorflow as tf
    common = dict(labels=None, image_size=tuple(spec["image_size"]),
                  batch_size=spec["batch_size"], shuffle=True, seed=spec.get("seed"),
                  verbose=False)
    images = keras.utils.image_dataset_from_directory(spec["data_dir"], **common)
    masks = keras.utils.image_dataset_from_directory(
        spec["masks_dir"], color_mode="grayscale", interpolation="nearest", **common)
    return _checked(tf.data.Dataset.zip((images, masks)), spec)


bench.register("seg_pipeline", _pipeline, "pipeline.from_paths(images, masks=masks)",
               quality=False)
bench.register("seg_pipeline_train", _pipeline_train, "pipeline.from_paths(images, masks=masks,"
               " augment=Augment(random_resized_crop, horizontal_flip))", quality=False)
bench.register("seg_plain", _plain, "tf.data paired map: read_file, decode_jpeg + decode_png, "
               "resize (mask nearest)", quality=False)
bench.register("seg_keras", _keras, "two keras.utils.image_dataset_from_directory (same seed; "
               "masks grayscale, nearest) zipped", quality=False)
