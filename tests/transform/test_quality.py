"""pipeline.transform.quality: PSNR, its summary, the reference resize and content matching."""

import math
import os

import numpy as np
import pytest
from PIL import Image

from pipeline.transform import quality

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..",
                      "shared", "data", "imagenet-sample")


def test_psnr_of_known_errors():
    a = np.zeros((4, 6, 3), np.uint8)
    # every value 1 off: MSE 1, PSNR = 20 log10(255) = 48.1308 dB
    assert quality.psnr(a + 1, a) == pytest.approx(48.130803608679)
    # half the values 2 off, half exact: MSE = (4 * 36) / 72 = 2
    b = a.astype(np.float32)
    b[:2] = 2.0
    assert quality.psnr(b, a) == pytest.approx(10 * math.log10(255 ** 2 / 2.0))
    # one value 255 off among 72: MSE = 255**2 / 72 -> 10 log10(72) = 18.573 dB
    c = a.copy()
    c[0, 0, 0] = 255
    assert quality.psnr(c, a) == pytest.approx(18.5733249643)
    assert quality.psnr(a, a) == math.inf


def test_psnr_refuses_different_shapes():
    with pytest.raises(ValueError, match=r"Received: image.shape=\(2, 2, 3\), "
                                         r"reference.shape=\(2, 3, 3\)"):
        quality.psnr(np.zeros((2, 2, 3)), np.zeros((2, 3, 3)))


def test_summary_is_median_and_5th_percentile():
    values = list(range(10, 31))  # 21 values: median 20, 5th percentile 10 + 0.05 * 20 = 11
    s = quality.summary(values)
    assert s == {"psnr_db_median": 20.0, "psnr_db_p5": 11.0, "psnr_images": 21}
    s = quality.summary([])
    assert math.isnan(s["psnr_db_median"]) and s["psnr_images"] == 0


def test_as_pixels_scales_unit_floats_only():
    assert quality.as_pixels(np.full((1, 2, 2, 3), 0.5, np.float32)).max() == 127.5
    assert quality.as_pixels(np.full((1, 2, 2, 3), 200.0, np.float32)).max() == 200.0
    assert quality.as_pixels(np.full((1, 2, 2, 3), 7, np.uint8)).dtype == np.float64


def test_match_psnr_finds_each_outputs_own_reference():
    rng = np.random.RandomState(0)
    refs = [rng.randint(0, 256, (8, 8, 3)).astype(np.float32) for _ in range(5)]
    noisy = [np.clip(r + rng.normal(0, 2, r.shape), 0, 255) for r in refs]
    order = [3, 0, 4, 1, 2]  # a loader that does not keep order
    got = quality.match_psnr(np.stack([noisy[k] for k in order]), refs)
    assert got == pytest.approx([quality.psnr(noisy[k], refs[k]) for k in order])
    assert min(got) > 40  # noise of sigma 2: about 42 dB, far above another photo's ~8 dB


def _first_sample_photos(n):
    if not os.path.isdir(SAMPLE):
        pytest.skip(f"no sample photos at {SAMPLE}")
    out = []
    for c in sorted(os.listdir(SAMPLE)):
        for f in sorted(os.listdir(os.path.join(SAMPLE, c))):
            out.append(os.path.join(SAMPLE, c, f))
        if len(out) >= n:
            return out[:n]
    return out


def test_reference_is_close_to_pillows_reducing_bilinear():
    """The reference (tf.image.resize(antialias=True)) against Pillow's BILINEAR resize,
    whose support widens by the reduction factor: the same filter up to rounding and
    edge handling, on real photos reduced 1.5-2.3x."""
    for path in _first_sample_photos(4):
        full = quality.full_decode(path)
        with Image.open(path) as im:
            assert full.shape == (im.height, im.width, 3)
            pil = np.asarray(im.convert("RGB").resize((160, 120), Image.BILINEAR))
        ref = quality.reference(full, (120, 160))
        assert ref.shape == (120, 160, 3) and ref.dtype == np.float32
        assert quality.psnr(ref, pil) > 40, path


def test_full_decode_applies_exif_orientation(tmp_path):
    """A file stored sideways with orientation 6 (rotate 90 CW) decodes upright."""
    upright = np.zeros((40, 60, 3), np.uint8)
    upright[:, :30] = 250  # left half bright
    stored = np.rot90(upright, 1)  # what a camera stores for orientation 6: 60x40
    exif = Image.Exif()
    exif[0x0112] = 6
    path = str(tmp_path / "rot.jpg")
    Image.fromarray(np.ascontiguousarray(stored)).save(path, quality=95, exif=exif)
    got = quality.full_decode(path)
    assert got.shape == (40, 60, 3)
    assert got[:, :25].mean() > 240 and got[:, 35:].mean() < 15
