"""The in-graph EXIF orientation reader against Pillow on many segment layouts.

``pipeline.decode.image.exif_orientation`` reads the first two segments from one
32-byte read and walks on only for other layouts (issue #16: the walk was a
tenth of a decode). Every layout a writer may produce must give Pillow's
answer: APP0 JFIF with and without a thumbnail, EXIF first or after
APP0 / ICC (APP2) / Photoshop (APP13) / XMP (APP1) / comment (COM) segments,
both byte orders, the tag at any entry of IFD0, no tag, several EXIF blocks.
"""

import io
import struct

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from pipeline.decode import image as decode

# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

SEED = 1612


def _plain_jpeg():
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(buf, "JPEG")
    data = buf.getvalue()
    assert data[2:4] == b"\xff\xe0"  # Pillow writes JFIF APP0 first: strip it
    return data[4 + struct.unpack(">H", data[4:6])[0]:]


def _segment(marker, payload):
    return bytes([0xFF, marker]) + struct.pack(">H", 2 + len(payload)) + payload


def _exif(orientation, big, position, extra_entries):
    e = ">" if big else "<"
    entries = [(0x0131 + k, 2, 4, b"cam\x00") for k in range(extra_entries)]
    if orientation is not None:
        entries.insert(position % (len(entries) + 1),
                       (0x0112, 3, 1, struct.pack(e + "HH", orientation, 0)))
    ifd = struct.pack(e + "H", len(entries)) + b"".join(
        struct.pack(e + "HHI", tag, typ, count) + value for tag, typ, count, value in entries)
    tiff = (b"MM\x00*" if big else b"II*\x00") + struct.pack(e + "I", 8) + ifd + b"\x00" * 4
    return _segment(0xE1, b"Exif\x00\x00" + tiff)


def _layouts(rng, n):
    others = {
        "jfif": lambda: _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"),
        "jfif_thumb": lambda: _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x01\x01"
                                       + bytes(3)),
        "icc": lambda: _segment(0xE2, b"ICC_PROFILE\x00\x01\x01" + bytes(int(rng.integers(0, 3000)))),
        "photoshop": lambda: _segment(0xED, b"Photoshop 3.0\x00" + bytes(int(rng.integers(0, 9000)))),
        "xmp": lambda: _segment(0xE1, b"http://ns.adobe.com/xap/1.0/\x00<x/>"),
        "comment": lambda: _segment(0xFE, b"a comment"),
        "app14": lambda: _segment(0xEE, b"Adobe\x00" + bytes(6)),
    }
    names = sorted(others)
    for _ in range(n):
        k = int(rng.integers(0, 14))
        segs = [others[names[int(i)]]() for i in rng.integers(0, len(names), k)]
        if rng.random() < 0.5 and (not segs or rng.random() < 0.5):
            segs.insert(0, others["jfif"]())
        exifs = int(rng.integers(0, 3))
        for _ in range(exifs):
            o = None if rng.random() < 0.1 else int(rng.integers(1, 9))
            segs.insert(int(rng.integers(0, len(segs) + 1)), _exif(
                o, bool(rng.random() < 0.5), int(rng.integers(0, 6)), int(rng.integers(0, 5))))
        yield segs


def test_orientation_matches_pillow_on_random_layouts():
    fn = tf.function(decode.exif_orientation, autograph=False,
                     input_signature=[tf.TensorSpec([], tf.string)])
    rng = np.random.default_rng(SEED)
    rest = _plain_jpeg()
    seen = {"walked": 0, "rotated": 0}
    for segs in _layouts(rng, 400):
        data = b"\xff\xd8" + b"".join(segs) + rest
        with Image.open(io.BytesIO(data)) as im:
            want = im.getexif().get(0x0112, 1)
        want = want if 1 <= want <= 8 else 1
        got = int(fn(tf.constant(data)))
        assert got == want, [s[:2].hex() + ":" + str(len(s)) for s in segs]
        seen["rotated"] += want > 1
        seen["walked"] += len(segs) > 2
    assert seen["rotated"] > 100 and seen["walked"] > 50, seen  # the sweep covered both


@pytest.mark.parametrize("first", ["exif", "jfif+exif"])
def test_orientation_from_the_first_words_alone(first):
    """The two layouts settled from the first 32 bytes (no walk): EXIF right after
    SOI, and JFIF APP0 (16 bytes) then EXIF."""
    fn = tf.function(decode.exif_orientation, autograph=False,
                     input_signature=[tf.TensorSpec([], tf.string)])
    head = _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00") \
        if first == "jfif+exif" else b""
    for o in range(1, 9):
        for big in (False, True):
            data = b"\xff\xd8" + head + _exif(o, big, 1, 2) + _plain_jpeg()
            assert int(fn(tf.constant(data))) == o
