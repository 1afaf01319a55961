"""Segmentation pairs whose image carries an EXIF orientation: the image is oriented before
pairing (masks are drawn on the displayed image, as annotation tools show it), every
orientation 2-8, square and not; ``exif_orientation=False`` pairs on the stored grid; a mask
that matches the stored grid of a transposed image is refused naming the orientation, and an
oriented pair is never silent (one warning)."""

import os

import numpy as np
import pytest
import logging
from PIL import Image, ImageOps

import pipeline
from conftest import drain

pytestmark = pytest.mark.stack

LEVEL = 40  # image level per class: class = round(red / LEVEL)


def _classes(h, w):
    y, x = np.mgrid[:h, :w]
    return ((x * 3 // w) + 3 * (y * 2 // h)).astype(np.uint8)  # 6 blocks, no symmetry


def _write(folder, name, size, orientation, mask_grid):
    """An EXIF-oriented JPEG and a PNG mask drawn on its displayed (or stored) grid."""
    w, h = size
    classes = _classes(h, w)
    img = np.stack([classes * LEVEL, np.full_like(classes, 90), np.full_like(classes, 60)], -1)
    path = os.path.join(folder, "images", name + ".jpg")
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(img.astype(np.uint8)).save(path, quality=95, exif=exif.tobytes())
    mask = Image.fromarray(classes)
    if mask_grid == "displayed":  # as Pillow displays the image
        mask = ImageOps.exif_transpose(_with_exif(mask, exif))
    mask.save(os.path.join(folder, "masks", name + ".png"))


def _with_exif(im, exif):
    im = im.copy()
    im.getexif()[0x0112] = exif[0x0112]
    return im


def _folder(tmp_path, mask_grid, sizes=((48, 48), (64, 40))):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "images"))
    os.makedirs(os.path.join(root, "masks"))
    for o in range(1, 9):
        for w, h in sizes:
            _write(root, f"o{o}_{w}x{h}", (w, h), o, mask_grid)
    return root


def _agreement(image, mask):
    return float((np.rint(image[..., 0] / LEVEL) == mask[..., 0]).mean())


def _read(root, **kw):
    ds = pipeline.from_directory(os.path.join(root, "images"),
                                 masks_dir=os.path.join(root, "masks"), labels=None,
                                 image_size=None, batch_size=None, shuffle=False,
                                 on_error="skip", **kw)
    return drain(ds), pipeline.errors(ds)


def test_masks_drawn_on_the_displayed_image_agree(tmp_path):
    root = _folder(tmp_path, "displayed")
    out, errors = _read(root)
    assert not errors and len(out) == 16
    for image, mask in out:
        assert _agreement(image, mask) > 0.9  # JPEG blurs block edges


def test_exif_orientation_false_pairs_on_the_stored_grid(tmp_path):
    root = _folder(tmp_path, "stored")
    out, errors = _read(root, exif_orientation=False)
    assert not errors and len(out) == 16
    for image, mask in out:
        assert _agreement(image, mask) > 0.9  # JPEG blurs block edges


def test_stored_grid_mask_of_a_transposed_image_is_refused_naming_the_orientation(tmp_path):
    root = _folder(tmp_path, "stored", sizes=((64, 40),))
    out, errors = _read(root)
    reasons = {os.path.basename(r.path): r.reason for r in errors}
    assert set(reasons) == {f"o{o}_64x40.jpg" for o in (5, 6, 7, 8)}
    for name, why in reasons.items():
        o = name[1]
        assert f"EXIF orientation {o}" in why and "40x64" in why and "64x40" in why, why
        assert "exif_orientation=False" in why, why
    assert len(out) == 4  # orientations 1-4 keep their size


def test_an_oriented_pair_is_never_silent(tmp_path):
    """A square (or flipped) pair whose mask follows the stored grid keeps its size: it cannot
    be told from a right one, so the first oriented pair is logged with the rule."""
    root = _folder(tmp_path, "stored", sizes=((48, 48),))
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("absl")  # pipeline logs through absl
    logger.addHandler(handler)
    try:
        out, _ = _read(root)
    finally:
        logger.removeHandler(handler)
    assert len(out) == 8
    # the premise: such a pair disagrees (stored-grid masks, oriented images), sizes equal
    assert sorted(_agreement(i, m) < 0.8 for i, m in out) == [False] + [True] * 7
    lines = [m for m in seen if "EXIF orientation" in m]
    assert len(lines) == 1, seen
    assert "exif_orientation=False" in lines[0] and "displayed" in lines[0]
