"""EXIF orientation found however many segments come before it.

The EXIF APP1 block may follow many other segments: an XMP packet and its
extended-XMP chunks (phone depth photos: 11 segments), comments, dozens of
APPn segments, 64 KB segments. ``pipeline.decode.image.exif_orientation`` walks
every segment up to the scan (a walk bounded by the file's bytes, no fixed
count); ``jpeg_sof_offset`` and ``formats.variant`` walk to the frame header
the same way. Pixels are checked against Pillow's ``ImageOps.exif_transpose``.
"""

import io
import os
import struct

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageOps

import pipeline
from pipeline.decode import image as decode
from pipeline.decode import formats

# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack


def _segment(marker, payload):
    assert len(payload) <= 65533
    return bytes([0xFF, marker]) + struct.pack(">H", 2 + len(payload)) + payload


def _exif(orientation=6):
    ifd = struct.pack("<H", 1) + struct.pack("<HHI", 0x0112, 3, 1) + struct.pack(
        "<HH", orientation, 0) + b"\x00" * 4
    return _segment(0xE1, b"Exif\x00\x00" + b"II*\x00" + struct.pack("<I", 8) + ifd)


def _image():
    """A 40x24 JPEG (no JFIF/EXIF segment), with pixels that show any rotation."""
    y, x = np.mgrid[0:24, 0:40]
    arr = np.stack([x * 6, y * 10, (x * y) % 256], -1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=95, subsampling=0)  # 4:4:4: no
    # chroma upsampling, where the two libjpeg builds differ by a few levels
    data = buf.getvalue()
    assert data[2:4] == b"\xff\xe0"  # Pillow writes JFIF APP0 first: strip it
    return data[4 + struct.unpack(">H", data[4:6])[0]:]


_JFIF = _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
_XMP = _segment(0xE1, b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta/>")


def _extended_xmp(k, n=9, chunk=2000):
    guid = b"0123456789ABCDEF0123456789ABCDEF"
    return _segment(0xE1, b"http://ns.adobe.com/xmp/extension/\x00" + guid + struct.pack(
        ">II", n * chunk, k * chunk) + bytes([65 + k]) * chunk)


LAYOUTS = {
    # name: the segments before the EXIF block (after SOI)
    "xmp+9_extended_xmp": [_XMP] + [_extended_xmp(k) for k in range(9)],
    "jfif+xmp+9_extended_xmp": [_JFIF, _XMP] + [_extended_xmp(k) for k in range(9)],
    "12_comments": [_segment(0xFE, b"comment %d" % k) for k in range(12)],
    "jfif+12_comments": [_JFIF] + [_segment(0xFE, b"comment %d" % k) for k in range(12)],
    "40_app_segments": [_segment(0xE2 + k % 14, b"app%d" % k + bytes(k)) for k in range(40)],
    "6_segments_of_64kb": [_segment(0xE2 + k, bytes(65533)) for k in range(6)],
    "xmp_app1_first": [_XMP],
    "fill_bytes_between": [_segment(0xFE, b"a") + b"\xff\xff\xff", _segment(0xED, b"ps")] * 5,
}


def _dqt_layout(rest):
    """APP0, ICC (APP2), then the file's own first DQT segment moved before the EXIF block."""
    assert rest[:2] == b"\xff\xdb"
    n = 2 + struct.unpack(">H", rest[2:4])[0]
    return [_JFIF, _segment(0xE2, b"ICC_PROFILE\x00\x01\x01" + bytes(500)), rest[:n]], rest[n:]


def _file(name, orientation=6):
    rest = _image()
    if name == "jfif+icc+dqt_between":  # a table segment before the EXIF block
        segs, rest = _dqt_layout(rest)
    else:
        segs = LAYOUTS[name]
    return b"\xff\xd8" + b"".join(segs) + _exif(orientation) + rest


def _pillow(data):
    """(Pillow's ``exif_transpose`` of TensorFlow's own decode of the stored pixels,
    Pillow's ``exif_transpose`` of Pillow's decode): the first is what the pipeline
    must give exactly; the second differs by the two libjpeg builds' rounding
    (a few levels), and by everything if the orientation were wrong."""
    with Image.open(io.BytesIO(data)) as im:
        o = im.getexif().get(0x0112)
        assert o is not None, "Pillow must see the EXIF block"
        own = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    stored = Image.fromarray(tf.io.decode_jpeg(data, channels=3).numpy())
    exif = Image.Exif()
    exif[0x0112] = o
    stored.info["exif"] = exif.tobytes()
    return np.asarray(ImageOps.exif_transpose(stored)), own


def _assert_pixels(img, data):
    exact, own = _pillow(data)
    np.testing.assert_array_equal(img, exact)
    assert np.abs(img.astype(int) - own).mean() < 3


@pytest.fixture(scope="module")
def orientation_fn():
    return tf.function(decode.exif_orientation, autograph=False,
                       input_signature=[tf.TensorSpec([], tf.string)])


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_orientation_after_many_segments(name, orientation_fn):
    for o in (1, 3, 6, 8):
        data = _file(name, o)
        with Image.open(io.BytesIO(data)) as im:
            assert im.getexif().get(0x0112) == o
        assert int(orientation_fn(tf.constant(data))) == o, (name, o)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_decoded_pixels_equal_pillow_exif_transpose(name):
    for o in (3, 6, 8):
        data = _file(name, o)
        img, reason = decode.Decoder(3).decode(tf.constant(data))
        assert reason.numpy() == b""
        assert img.shape == ((24, 40, 3) if o == 3 else (40, 24, 3))
        _assert_pixels(img.numpy(), data)


def test_pipeline_with_crop_before_decode_sees_the_orientation(tmp_path):
    """The factory's path (with a random resized crop: crop-before-decode for files
    displayed as stored) orients a file whose EXIF block follows 11 segments, and
    the DCT-scaled path (``target``) and the windowed path read the same tag."""
    data = _file("xmp+9_extended_xmp", 6)
    path = os.path.join(tmp_path, "depth.jpg")
    with open(path, "wb") as f:
        f.write(data)
    want, _ = _pillow(data)
    ds = pipeline.from_paths([path], image_size=None, batch_size=None, shuffle=False)
    _assert_pixels(next(iter(ds)).numpy(), data)

    dec = decode.Decoder(3)
    window = lambda shape: (tf.constant(2), tf.constant(3), shape[0] - 4, shape[1] - 5)
    img, _ = dec.decode(tf.constant(data), window_fn=window)
    np.testing.assert_array_equal(img.numpy(), want[2:-2, 3:-2])
    img, _ = dec.decode(tf.constant(data), target=(10, 6))
    assert img.shape[0] > img.shape[1]  # oriented (portrait), whatever the scale


def test_sof_walk_and_variant_past_a_thousand_segments():
    """The frame-header walk (``scan``'s head size) and ``formats.variant`` have no
    segment count limit either: 1,100 comment segments before the frame header."""
    rest = _image()
    data = b"\xff\xd8" + _segment(0xFE, b"c") * 1100 + _exif(6) + rest
    sof = int(tf.function(decode.jpeg_sof_offset, autograph=False)(tf.constant(data)))
    assert data[sof:sof + 2] in (b"\xff\xc0", b"\xff\xc1", b"\xff\xc2")
    assert data.find(b"\xff\xc0") == sof
    assert formats.variant(data).startswith("JPEG baseline")
    assert formats.variant(data).endswith("EXIF")


def test_walk_ends_at_the_scan():
    """An EXIF block after the scan (image data) is not the file's: Pillow ignores it."""
    rest = _image()
    eoi = rest.rindex(b"\xff\xd9")
    data = b"\xff\xd8" + _segment(0xFE, b"c") * 3 + rest[:eoi] + _exif(6) + rest[eoi:]
    with Image.open(io.BytesIO(data)) as im:
        assert im.getexif().get(0x0112) is None
    fn = tf.function(decode.exif_orientation, autograph=False)
    assert int(fn(tf.constant(data))) == 1


def test_exif_after_a_table_segment_is_not_read(orientation_fn):
    """The walk covers the APPn / COM segments after SOI (where the EXIF and JFIF
    standards put them), not the tables after them: an EXIF block after a DQT is
    taken as orientation 1 (docs/limitations.md), although Pillow reads it."""
    for o in (3, 6):
        data = _file("jfif+icc+dqt_between", o)
        with Image.open(io.BytesIO(data)) as im:
            assert im.getexif().get(0x0112) == o
        assert int(orientation_fn(tf.constant(data))) == 1


@pytest.mark.parametrize("data, present", [
    (b"\xff\xd8\xff\xe1\x00\x10Exif\x00\x00II*\x00", True),
    (b"\xe1\xff\xc3\x80" * 1000 + b"Exif\x00\x00" + b"\xfe\xff" * 99, True),  # not UTF-8
    (b"\x00" * 5000 + b"Exif\x00\x00", True),                                # at the very end
    (b"Exif\x00\x00", True),
    (b"\xff\xd8" + b"Exif\x00\x01" + b"xif\x00\x00" + b"\xc3" * 300, False),
    (b"Exif\x00", False),
    (b"", False),
])
def test_exif_signature_in_finds_the_bytes_anywhere(data, present):
    """The walk's shortcut (no ``Exif\\0\\0`` in the bytes: no EXIF block) must never miss
    the bytes: binary data around them, the file's end, the file's start."""
    fn = tf.function(decode.exif_signature_in, autograph=False,
                     input_signature=[tf.TensorSpec([], tf.string)])
    assert bool(fn(tf.constant(data))) is present
    assert (b"Exif\x00\x00" in data) is present


@pytest.mark.parametrize("exif_bytes_in_icc", [False, True])
def test_walked_layout_without_exif_block_is_orientation_1(exif_bytes_in_icc, orientation_fn):
    """A layout the walk must step through (JFIF, ICC, Photoshop), with no EXIF block:
    orientation 1 whether or not the bytes ``Exif\\0\\0`` occur inside the ICC profile (then
    the walk runs and finds no block); the same layout with the block after them: read."""
    icc = b"ICC_PROFILE\x00\x01\x01" + bytes(300) + (
        b"Exif\x00\x00MM\x00*" if exif_bytes_in_icc else b"") + bytes(200)
    segs = [_JFIF, _segment(0xE2, icc), _segment(0xED, b"Photoshop 3.0\x00" + bytes(80))]
    plain = b"\xff\xd8" + b"".join(segs) + _image()
    assert int(decode.exif_route(decode.header_words(tf.constant(plain)))) == decode.ROUTE_WALK
    with Image.open(io.BytesIO(plain)) as im:
        assert im.getexif().get(0x0112) is None
    assert int(orientation_fn(tf.constant(plain))) == 1
    for o in (3, 6):
        data = b"\xff\xd8" + b"".join(segs) + _exif(o) + _image()
        assert int(orientation_fn(tf.constant(data))) == o
        img, reason = decode.Decoder(3).decode(tf.constant(data))
        assert reason.numpy() == b""
        _assert_pixels(img.numpy(), data)
