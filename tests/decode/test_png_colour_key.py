"""PNG transparency by colour key (a ``tRNS`` chunk on gray or RGB, bit depth 1-16): with
``channels=4`` the alpha is Pillow's (``Image.open(f).convert("RGBA")``), on every stack."""

import io
import os
import struct
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from pipeline.decode import image as decode_lib
from conftest import drain

pytestmark = pytest.mark.stack


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png(samples, colour_type: int, depth: int, trns=None, before=b"", after=b"") -> bytes:
    """A PNG of raw ``samples`` [h, w, 1|3] (values < 2**depth), with a ``tRNS`` chunk of
    16-bit values ``trns`` (raw bytes when ``trns`` is bytes), ``before``/``after`` it."""
    h, w = samples.shape[:2]
    rows = []
    for r in samples.reshape(h, -1):
        if depth == 16:
            raw = r.astype(">u2").tobytes()
        elif depth == 8:
            raw = r.astype(np.uint8).tobytes()
        else:
            bits = "".join(format(int(v), "0%db" % depth) for v in r)
            bits += "0" * (-len(bits) % 8)
            raw = bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
        rows.append(b"\0" + raw)
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth,
                                                              colour_type, 0, 0, 0))
    out += before
    if trns is not None:
        data = trns if isinstance(trns, bytes) else b"".join(struct.pack(">H", v) for v in trns)
        out += _chunk(b"tRNS", data)
    out += after
    return out + _chunk(b"IDAT", zlib.compress(b"".join(rows))) + _chunk(b"IEND", b"")


def _variants():
    """(name, bytes): gray 1/2/4/8/16-bit and RGB 8/16-bit, keys present, absent, in raw and
    scaled form, out of range; other chunks around tRNS."""
    rng = np.random.default_rng(38)
    out = []
    for ctype, depths in ((0, (1, 2, 4, 8, 16)), (2, (8, 16))):
        ch = 1 if ctype == 0 else 3
        for depth in depths:
            top = 2 ** depth
            # few distinct values so that a key in the image matches many pixels
            levels = rng.integers(0, top, (4, ch))
            if depth == 16:  # high bytes shared by some levels (Pillow compares them)
                levels[:2] = rng.integers(0, 3, (2, ch))
            levels[1] = (levels[0] + 1) % top  # at least two values
            s = levels[rng.integers(0, 4, (9, 7))]
            first = [int(v) for v in s[0, 0]]
            keys = {"present": first, "absent": [top - 1 - v for v in first],
                    "zero": [0] * ch, "max": [top - 1] * ch, "out_of_range": [65535] * ch}
            if depth < 8:
                scale = 255 // (top - 1)
                keys["scaled"] = [v * scale for v in first]
            if depth == 16:
                keys["high_byte"] = [v >> 8 for v in first]
                keys["clipped"] = [255] * ch
            keys["wrapped"] = [(v & 255) + 256 for v in first]  # Pillow: the low byte
            for kname, key in keys.items():
                out.append((f"c{ctype}_d{depth}_{kname}", _png(s, ctype, depth, key)))
            # other chunks first (gAMA, tEXt) and after (pHYs)
            out.append((f"c{ctype}_d{depth}_chunks", _png(
                s, ctype, depth, first, before=_chunk(b"gAMA", struct.pack(">I", 45455))
                + _chunk(b"tEXt", b"Comment\0tRNS IDAT"),
                after=_chunk(b"pHYs", struct.pack(">IIB", 2835, 2835, 1)))))
            out.append((f"c{ctype}_d{depth}_no_trns", _png(s, ctype, depth)))
            # a longer chunk than needed: Pillow reads the first value(s)
            out.append((f"c{ctype}_d{depth}_long", _png(
                s, ctype, depth, b"".join(struct.pack(">H", v) for v in first) + b"\0\7")))
    return out


VARIANTS = _variants()
# variants whose key matches some pixels and not others by Pillow's rule (see png_keyed)
MIXED = {"c0_d1_present", "c0_d2_scaled", "c0_d4_scaled", "c0_d8_present", "c0_d8_chunks",
         "c0_d16_clipped", "c2_d8_present", "c2_d8_chunks", "c2_d16_high_byte"}


def _pillow_rgba(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGBA"))


@pytest.fixture(scope="module")
def decoded4():
    """Every variant decoded by ``Decoder(channels=4)`` in one traced function."""
    dec = decode_lib.Decoder(channels=4)
    fn = tf.function(lambda b: dec.decode(b))
    return {name: fn(tf.constant(data)) for name, data in VARIANTS}


@pytest.mark.parametrize("name,data", VARIANTS, ids=[n for n, _ in VARIANTS])
def test_colour_key_alpha_is_pillows(decoded4, name, data):
    img, reason = decoded4[name]
    assert reason.numpy() == b""
    want = _pillow_rgba(data)[..., 3]
    got = img.numpy()[..., 3]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if name in MIXED:
        assert (got == 0).any() and (got == 255).any()  # the key is really in the image


@pytest.mark.parametrize("name,data", VARIANTS, ids=[n for n, _ in VARIANTS])
def test_colour_key_leaves_colour_as_channels3(decoded4, name, data):
    """The colour under the key is kept as stored: the RGB of channels=4 is that of 3."""
    img, _ = decoded4[name]
    np.testing.assert_array_equal(img.numpy()[..., :3],
                                  tf.io.decode_png(data, channels=3).numpy())


def test_truncated_trns_is_ignored_and_the_image_read():
    """A tRNS shorter than one key (Pillow raises "Truncated tRNS chunk"; libpng warns and
    ignores it): the image is read, opaque."""
    s = np.arange(12).reshape(2, 2, 3) * 20
    dec = decode_lib.Decoder(channels=4)
    for ctype, samples, short in ((0, s[..., :1], b"\0"), (2, s, b"\0\0\0\x14")):
        img, reason = dec.decode(tf.constant(_png(samples, ctype, 8, short)))
        assert reason.numpy() == b""
        assert (img.numpy()[..., 3] == 255).all()


@pytest.mark.parametrize("channels", [1, 3])
def test_colour_key_does_not_change_channels_1_and_3(channels):
    s = (np.arange(12).reshape(2, 2, 3) * 20)
    data = _png(s, 2, 8, [int(v) for v in s[0, 0]])
    img, reason = decode_lib.Decoder(channels=channels).decode(tf.constant(data))
    assert reason.numpy() == b""
    np.testing.assert_array_equal(img.numpy(), tf.io.decode_png(data, channels=channels).numpy())


def test_from_paths_gives_pillows_alpha_for_colour_keyed_pngs(tmp_path):
    """End to end: a folder of colour-keyed PNGs read with channels=4, every file Pillow's."""
    paths = []
    for name, data in VARIANTS[::3]:
        p = os.path.join(str(tmp_path), name + ".png")
        with open(p, "wb") as f:
            f.write(data)
        paths.append(p)
    ds = pipeline.from_paths(paths, image_size=None, batch_size=None, shuffle=False,
                             channels=4, on_error="skip")
    out = drain(ds)
    assert len(out) == len(paths) and not pipeline.errors(ds)
    for p, img in zip(paths, out):
        with open(p, "rb") as f:
            np.testing.assert_array_equal(img[..., 3], _pillow_rgba(f.read())[..., 3], err_msg=p)
