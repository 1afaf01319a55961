"""Format variants (issue #12): TIFF encodings and pages, animated WebP, and the
format variants ``scan`` lists. Each decodes to Pillow's pixels or is a named refusal."""

import os

import numpy as np
import pytest
from PIL import Image

import pipeline
from pipeline import formats

BASE = (np.indices((37, 53)).sum(0)[..., None] * [3, 5, 7] % 256).astype(np.uint8)


def _decode(path, **kw):
    ds = pipeline.from_paths([path], image_size=None, batch_size=None, shuffle=False,
                             on_error="skip", **kw)
    out = [x for x in ds.as_numpy_iterator()]
    return (out[0] if out else None), pipeline.errors(ds)


def _save(tmp_path, name, img, **kw):
    path = str(tmp_path / name)
    img.save(path, **kw)
    return path


@pytest.mark.needs_tfio
@pytest.mark.parametrize("name,kw", [
    ("raw.tif", {}), ("lzw.tif", {"compression": "tiff_lzw"}),
    ("deflate.tif", {"compression": "tiff_adobe_deflate"}),
    ("jpeg.tif", {"compression": "jpeg", "quality": 95}),
])
def test_tiff_compressions_match_pillow(tmp_path, name, kw):
    path = _save(tmp_path, name, Image.fromarray(BASE), **kw)
    got, errs = _decode(path)
    assert not errs
    ref = np.asarray(Image.open(path).convert("RGB")).astype(int)
    assert got.shape == ref.shape and np.abs(got.astype(int) - ref).max() <= 3


@pytest.mark.needs_tfio
def test_tiff_palette_16bit_multipage_and_alpha(tmp_path):
    pal = _save(tmp_path, "pal.tif", Image.fromarray(BASE).convert("P"))
    got, _ = _decode(pal)
    assert np.array_equal(got, np.asarray(Image.open(pal).convert("RGB")))
    g16 = _save(tmp_path, "g16.tif", Image.fromarray(BASE[..., 0].astype(np.uint16) * 257))
    got, _ = _decode(g16)
    assert np.array_equal(got[..., 0], BASE[..., 0])            # 16-bit -> 8-bit as v >> 8
    pages = [Image.fromarray(BASE), Image.fromarray(255 - BASE)]
    multi = str(tmp_path / "multi.tif")
    pages[0].save(multi, save_all=True, append_images=pages[1:])
    got, _ = _decode(multi)
    assert np.array_equal(got, BASE)                            # the first page
    # tensorflow-io premultiplies colour by alpha: such files take the Pillow fallback,
    # which keeps the colour stored under transparent pixels, as for PNG
    rgba = _save(tmp_path, "rgba.tif", Image.fromarray(np.concatenate([BASE, BASE[..., :1]], -1)))
    got, _ = _decode(rgba, channels=4)
    assert np.array_equal(got[..., :3], BASE) and np.array_equal(got[..., 3], BASE[..., 0])


@pytest.mark.needs_tfio
def test_float_tiff_is_a_named_unsupported_variant(tmp_path):
    path = _save(tmp_path, "f.tif", Image.fromarray(BASE[..., 0].astype(np.float32) / 255))
    got, errs = _decode(path)
    assert got is None and len(errs) == 1
    assert errs[0].reason.startswith("unsupported TIFF variant"), errs[0].reason


@pytest.mark.parametrize("name", ["anim.webp", "anim_named.jpg"])
def test_animated_webp_gives_its_first_frame(tmp_path, name):
    frames = [Image.fromarray(BASE), Image.fromarray(255 - BASE)]
    path = str(tmp_path / name)
    frames[0].save(path, "WEBP", save_all=True, append_images=frames[1:], duration=100,
                   lossless=True)
    got, errs = _decode(path)
    assert not errs, errs
    assert np.array_equal(got, BASE)


def test_scan_lists_format_variants(tmp_path):
    d = tmp_path / "a"
    d.mkdir()
    img = Image.fromarray(BASE)
    img.save(d / "base.jpg", quality=90)
    img.save(d / "prog.jpg", quality=90, progressive=True, subsampling=0)
    exif = Image.Exif()
    exif[0x0112] = 6
    img.save(d / "exif.jpg", quality=90, subsampling=1, exif=exif.tobytes())
    img.convert("P").save(d / "pal.png")
    img.convert("P").save(d / "pal8.bmp")
    report = pipeline.scan(str(tmp_path), progress=False)
    assert report.per_variant == {
        "JPEG baseline 4:2:0": 1, "JPEG progressive 4:4:4": 1, "JPEG baseline 4:2:2 EXIF": 1,
        "PNG 8-bit palette": 1, "BMP 8-bit v3": 1}, report.per_variant
    assert "format variants (from headers)" in report.table()


@pytest.mark.parametrize("head,want", [
    (b"GIF89a" + b"\x00" * 10, "GIF 89a"),
    (b"RIFF\x00\x00\x00\x00WEBPVP8L" + b"\x00" * 16, "WebP lossless"),
    (b"RIFF\x00\x00\x00\x00WEBPVP8X\x00\x00\x00\x00\x02" + b"\x00" * 16, "WebP animated"),
    (b"II*\x00" + b"\x00" * 12, "TIFF little-endian"),
    (b"\x00\x00\x00\x18ftypheic" + b"\x00" * 8, "HEIC/HEIF (heic)"),
    (b"\x00\x00\x00\x18ftypavif" + b"\x00" * 8, "AVIF (avif)"),
    (b"hello world" + b"\x00" * 8, "unknown"),
])
def test_variant_names(head, want):
    assert formats.variant(head) == want
