"""Every file in ../shared/cases2 gives its right outcome (cases2/README.md)."""

import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from conftest import SHARED, drain

CASES2 = os.path.join(SHARED, "cases2")
# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = [pytest.mark.skipif(not os.path.isdir(CASES2), reason="needs ../shared/cases2"),
              pytest.mark.stack]


def _one(path, **kw):
    kw = {"image_size": None, "batch_size": None, "shuffle": False, **kw}
    return next(iter(pipeline.from_paths([path], **kw))).numpy()


@pytest.mark.parametrize("name", ["bmp_pal8_colour.bmp", "bmp_rle8.bmp"])
# 3 channels on every stack; 1 and 4 (pipeline's own conversions) on the current one
@pytest.mark.parametrize("channels", [pytest.param(1, marks=pytest.mark.sweep), 3,
                                      pytest.param(4, marks=pytest.mark.sweep)])
def test_bmp_palette_and_rle_give_the_palette_colours(name, channels):
    ref = Image.open(os.path.join(CASES2, "bmp_expected_rgb.png"))
    want = np.asarray(ref.convert({1: "L", 3: "RGB", 4: "RGBA"}[channels]))
    got = _one(os.path.join(CASES2, name), channels=channels)
    assert got.shape == want.reshape(got.shape).shape
    assert np.abs(got.astype(int) - want.reshape(got.shape).astype(int)).max() <= 1
    if channels == 3:
        assert got[0, 0].tolist() == [53, 101, 197]


@pytest.mark.parametrize("name", ["bmp_pal8_colour.bmp", "bmp_rle8.bmp"])
def test_bmp_variants_under_another_extension_go_through_the_fallback(tmp_path, name):
    """Not named .bmp: the graph decoder is not built, the Pillow fallback decodes it."""
    path = tmp_path / (name + ".jpg")
    path.write_bytes(open(os.path.join(CASES2, name), "rb").read())
    got = _one(str(path))
    assert got[0, 0].tolist() == [53, 101, 197]


@pytest.mark.parametrize("name,axis", [("wide_10000x3.png", 0), ("tall_3x10000.png", 1)])
@pytest.mark.parametrize("size", [(224, 224), (31, 17)])
def test_thin_images_padded_fit_centred_at_least_one_pixel(name, axis, size):
    got = _one(os.path.join(CASES2, name), image_size=size, resize="pad")
    assert got.shape == size + (3,)
    lit = np.where(got.max(axis=(1, 2) if axis == 0 else (0, 2)) > 0)[0]
    full = np.where(got.max(axis=(0, 2) if axis == 0 else (1, 2)) > 0)[0]
    assert len(lit) == 1 and lit[0] == (size[axis] - 1) // 2          # one line, centred
    assert full.min() == 0 and full.max() == size[1 - axis] - 1         # the whole length


def test_a_resize_failure_is_not_blamed_on_the_file(tmp_path):
    """A valid file that a later stage cannot process is named as such, with its size."""
    from pipeline.decode import guard
    png = os.path.join(CASES2, "wide_10000x3.png")
    reason = guard.diagnose(open(png, "rb").read(), "",
                            lambda c: (tf.io.decode_png(c, channels=3), tf.constant("")),
                            lambda img: tf.image.resize(img, (0, 4)))
    assert reason.startswith("the file decodes (PNG 10000x3), but the resize/augment stage "
                             "failed on it"), reason


@pytest.mark.parametrize("name", ["phone_photo.HEIC", "heic_named.png"])
def test_heic_is_listed_and_named(name):
    path = os.path.join(CASES2, name)
    ds = pipeline.from_paths([path], image_size=(8, 8), on_error="skip")
    assert drain(ds) == []
    (rec,) = pipeline.errors(ds)
    assert rec.path == path and "HEIC/HEIF" in rec.reason
    installed = "heif" in __import__("pipeline.stack").stack.pillow_plugins()
    assert installed or "pip install pillow-heif" in rec.reason
    with pytest.raises(tf.errors.InvalidArgumentError, match="HEIC/HEIF"):
        list(pipeline.from_paths([path], image_size=(8, 8)))


def test_heic_is_not_left_out_of_a_folder(tmp_path):
    d = tmp_path / "photos" / "a"
    d.mkdir(parents=True)
    (d / "phone.HEIC").write_bytes(open(os.path.join(CASES2, "phone_photo.HEIC"), "rb").read())
    Image.new("RGB", (4, 4), (9, 9, 9)).save(d / "ok.png")
    ds = pipeline.from_directory(str(tmp_path / "photos"), image_size=(4, 4), on_error="skip")
    assert len(ds.file_paths) == 2
    assert sum(int(x.shape[0]) for x, _ in ds) == 1
    assert [os.path.basename(r.path) for r in pipeline.errors(ds)] == ["phone.HEIC"]
    report = pipeline.scan(str(tmp_path / "photos"), progress=False)
    assert report.per_format.get("heif") == 1 and report.per_variant.get("HEIC/HEIF (heic)") == 1


def test_avif_reason_names_avif():
    path = os.path.join(CASES2, "avif_named.avif")
    ds = pipeline.from_paths([path], image_size=(8, 8), on_error="skip")
    assert drain(ds) == []
    (rec,) = pipeline.errors(ds)
    assert "AVIF" in rec.reason and "not an image" not in rec.reason


def test_files_left_out_are_counted_and_listed_by_scan(tmp_path, caplog):
    d = tmp_path / "photos" / "a"
    d.mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(d / "ok.png")
    (d / "notes.txt").write_text("x")
    (d / "scan.pdf").write_bytes(b"%PDF")
    (d / ".hidden.png").write_bytes(b"x")
    import logging
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_directory(str(tmp_path / "photos"), image_size=(4, 4))
    assert ds.file_paths == [str(d / "ok.png")]
    assert any("left out 2 file(s)" in r.getMessage() for r in caplog.records)
    report = pipeline.scan(str(tmp_path / "photos"), progress=False)
    assert sorted(os.path.basename(p) for p in report.left_out) == ["notes.txt", "scan.pdf"]
    assert "left out: not an image extension (2)" in report.table()
