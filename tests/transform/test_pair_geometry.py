"""Segmentation pairs take the geometry of an image read alone: the image of a pair is the
image alone, pixel for pixel (the same decode window, reduced DCT scale, resize with
``antialias``, augmentation), for every resize mode; the mask gets that geometry
(nearest-neighbour, from the full-size mask) and stays aligned with the image."""

import os

import numpy as np
import pytest
from PIL import Image

import pipeline
from pipeline import config as config_lib

SIZE = (32, 40)  # every photo is over 4x this in both sides (in its crop windows too)
# (height, width) stored, EXIF orientation: odd sides, one portrait, one EXIF-rotated
PHOTOS = [((310, 391), 1), ((413, 263), 1), ((297, 405), 6)]


def _photo(h, w, seed):
    """Photo-like uint8 [h, w, 3]: smooth gradients and blobs under fine noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:h, :w] / np.array([h, w])[:, None, None]
    base = np.stack([200 * x + 30, 180 * y + 40, 120 * np.sin(6 * x * y + seed) + 128], -1)
    base += 40 * np.sin(17 * x + 11 * y)[..., None]
    return np.clip(base + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8)


def _save_jpeg(arr, path, orientation=1):
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    Image.fromarray(arr).save(path, quality=95, subsampling=0, exif=exif.tobytes())


def _displayed(h, w, orientation):
    return (w, h) if orientation >= 5 else (h, w)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """(image paths, mask paths): noisy JPEG photos with random masks of their displayed size."""
    root = tmp_path_factory.mktemp("photos")
    paths, masks = [], []
    for i, ((h, w), o) in enumerate(PHOTOS):
        paths.append(str(root / f"p{i}.jpg"))
        _save_jpeg(_photo(h, w, i), paths[-1], o)
        dh, dw = _displayed(h, w, o)
        masks.append(str(root / f"p{i}.png"))
        Image.fromarray(np.random.default_rng(i).integers(0, 5, (dh, dw), np.uint8)).save(
            masks[-1])
    return paths, masks


def _pair_and_alone(paths, masks, **options):
    """(images of the pairs, their masks, the images read alone), uint8 numpy."""
    kw = dict(image_size=SIZE, batch_size=None, shuffle=False, seed=7, **options)
    pairs = list(pipeline.from_paths(paths, masks=masks, **kw).as_numpy_iterator())
    alone = list(pipeline.from_paths(paths, **kw).as_numpy_iterator())
    return [x for x, _ in pairs], [y for _, y in pairs], alone


def _max_difference(a, b):
    return max(int(np.abs(x.astype(int) - y.astype(int)).max()) for x, y in zip(a, b))


def _check_same_as_alone(photos, **options):
    paths, masks = photos
    images, out_masks, alone = _pair_and_alone(paths, masks, **options)
    assert len(images) == len(alone) == len(paths)
    assert _max_difference(images, alone) == 0
    for y in out_masks:  # (255: the letterbox of "pad", mask_pad_value)
        assert y.shape == SIZE + (1,) and set(np.unique(y)) <= set(range(5)) | {255}


_CHEAP = ("crop", True)
_SWEEP = [(m, a) for m in config_lib.RESIZE_MODES for a in (False, True)]


def test_pair_image_equals_image_alone_crop_antialiased(photos):
    _check_same_as_alone(photos, resize=_CHEAP[0], antialias=_CHEAP[1])


@pytest.mark.slow
@pytest.mark.parametrize("resize,antialias", [c for c in _SWEEP if c != _CHEAP])
def test_pair_image_equals_image_alone_every_mode(photos, resize, antialias):
    _check_same_as_alone(photos, resize=resize, antialias=antialias)


@pytest.mark.slow
@pytest.mark.parametrize("options", [
    dict(resize="center_crop", jpeg_dct_scaling=False),
    dict(resize="crop", fast_jpeg=False, antialias=True),
    dict(augment=pipeline.Augment(random_resized_crop=True, horizontal_flip=True),
         antialias=True),
    dict(augment=pipeline.Augment(random_resized_crop=True), jpeg_dct_scaling=False),
    dict(resize="center_crop", augment=pipeline.Augment(horizontal_flip=True, rotation=10)),
])
def test_pair_image_equals_image_alone_other_paths(photos, options):
    _check_same_as_alone(photos, **options)


# Alignment: the image's red and green encode the source column and row, the mask's class
# the source band (16 x 16 bands), so each output pixel's mask class can be checked against
# the position its image pixel came from, whatever the geometry did.
BANDS = 16
TOLERANCE = 5  # source pixels: a level is ~1.6 px, plus JPEG and resampling blur


def _position_pair(root, h, w, name):
    y, x = np.mgrid[:h, :w]
    image = np.stack([np.rint(x * 255 / (w - 1)), np.rint(y * 255 / (h - 1)),
                      np.full((h, w), 128)], -1).astype(np.uint8)
    path = os.path.join(root, name + ".jpg")
    _save_jpeg(image, path)
    mask = ((y * BANDS // h) * BANDS + x * BANDS // w).astype(np.uint8)
    mask_path = os.path.join(root, name + ".png")
    Image.fromarray(mask).save(mask_path)
    return path, mask_path


def _misaligned(image, mask, h, w):
    """Output pixels whose mask band is over TOLERANCE source pixels from where the image
    pixel came from (read back from its red and green)."""
    sx = image[..., 0].astype(float) * (w - 1) / 255
    sy = image[..., 1].astype(float) * (h - 1) / 255
    c = mask[..., 0].astype(int)
    by, bx = c // BANDS, c % BANDS
    off_x = np.maximum(bx * w / BANDS - sx, sx - (bx + 1) * w / BANDS)
    off_y = np.maximum(by * h / BANDS - sy, sy - (by + 1) * h / BANDS)
    return int(((off_x > TOLERANCE) | (off_y > TOLERANCE)).sum())


@pytest.mark.parametrize("options", [
    dict(resize="center_crop", antialias=True),
    pytest.param(dict(augment=pipeline.Augment(random_resized_crop=True, horizontal_flip=True)),
                 marks=pytest.mark.slow),
])
def test_mask_lands_where_its_image_pixels_came_from(tmp_path, options):
    (h, w) = (300, 380)
    path, mask_path = _position_pair(str(tmp_path), h, w, "pos")
    kw = dict(image_size=SIZE, batch_size=None, shuffle=False, **options)
    ds = pipeline.from_paths([path] * 4, masks=[mask_path] * 4, seed=3, **kw)
    for x, y in ds.as_numpy_iterator():
        assert _misaligned(x, y, h, w) == 0
        if "augment" not in options:  # the centre window: rows 75-225 and cols 95-285 only
            c = y[..., 0].astype(int)
            assert (c // BANDS).min() == 4 and (c // BANDS).max() == 11
            assert (c % BANDS).min() == 4 and (c % BANDS).max() == 11
