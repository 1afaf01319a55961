"""Coverage-guided fuzzing (atheris) of the byte readers: the header reads (format sniff, the
variant name, the header size of every format), the EXIF orientation (against Pillow), the
BMP decoder (against Pillow) and the PNG chunk readers (colour key and palette, against
Pillow's alpha).

    python tests/decode/fuzz_readers.py -runs=2000 CORPUS_DIR [SEED_DIR ...]

A crash (an exception other than a decode failure TensorFlow reports for a bad file) or a
disagreement with Pillow stops the run and prints the input (atheris writes it as
``crash-*``); each one found becomes a regular test (tests/decode/test_fuzz_atheris.py). Run by
``tests/decode/test_fuzz_atheris.py`` (the slow tier), which builds the seed corpus.
"""

import io
import os
import struct
import sys
import warnings

import atheris

with atheris.instrument_imports(include=["pipeline"]):
    import numpy as np
    import tensorflow as tf
    from PIL import Image

    from pipeline.decode import bmp as bmp_lib
    from pipeline.decode import image as decode_lib
    from pipeline.decode import formats

warnings.simplefilter("ignore")
Image.MAX_IMAGE_PIXELS = 1 << 20  # fuzzed headers claim huge images: Pillow refuses them

_DEC = decode_lib.Decoder(channels=4, max_pixels=1 << 20, bmp_in_graph=True, fallback=False)
_decode = tf.function(lambda b: _DEC.decode(b))
_orientation = tf.function(lambda b: decode_lib.exif_orientation(b))


def _header(b):
    fmt = decode_lib.sniff(b)
    return decode_lib.header_size(b, fmt)


_header_fn = tf.function(_header)
_BASE = None


def base_jpeg() -> bytes:
    global _BASE
    if _BASE is None:
        buf = io.BytesIO()
        Image.fromarray(np.arange(48, dtype=np.uint8).reshape(6, 8)).save(buf, "JPEG")
        _BASE = buf.getvalue()
    return _BASE


def with_app1(payload: bytes) -> bytes:
    j = base_jpeg()
    payload = payload[:65533]
    return j[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + j[2:]


def pillow_orientation(data: bytes) -> int:
    try:
        with Image.open(io.BytesIO(data)) as im:
            o = im.getexif().get(0x0112, 1)
    except Exception:  # noqa: BLE001 - Pillow cannot read the block: no orientation
        return 1
    try:
        return {2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8}.get(o, 1)
    except TypeError:  # an unhashable value
        return 1


def pillow_opens(data: bytes) -> bool:
    """Whether Pillow opens a whole file (one it cannot open, cut in its headers, is a bad
    file for the decoder too: its orientation is not compared)."""
    try:
        with Image.open(io.BytesIO(data)):
            return True
    except Exception:  # noqa: BLE001
        return False


def pillow_pixels(data: bytes):
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.width * im.height > (1 << 20):
                return None
            return np.asarray(im.convert("RGBA"))
    except Exception:  # noqa: BLE001 - Pillow cannot read it: nothing to compare
        return None


def leading_exif(data: bytes) -> bool:
    """Whether a JPEG's first EXIF APP1 lies among the APPn/COM segments after SOI, where
    the reader looks (an EXIF block after a table is a documented limitation:
    docs/limitations.md)."""
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        m = data[pos + 1]
        if m == 0xFF:
            pos += 1
            continue
        if not (0xE0 <= m <= 0xEF or m == 0xFE):
            return False
        if m == 0xE1 and data[pos + 4:pos + 10] == b"Exif\x00\x00":
            return True
        length = data[pos + 2] * 256 + data[pos + 3]
        if length < 2:
            return False
        pos += 2 + length
    return False


def check(data: bytes) -> None:
    """One input: raises AssertionError on a disagreement, anything else on a crash."""
    formats.variant(data[:4096])
    formats.sniff_bytes(data[:formats.SIGNATURE_BYTES])
    formats.jpeg_unsupported(data)
    bmp_lib.describe_problem(data)
    c = tf.constant(data)
    try:
        _header_fn(c)
    except tf.errors.InvalidArgumentError:
        pass  # libjpeg refuses a JPEG header (extract_jpeg_shape): a bad file, named
    # EXIF: the bytes as an APP1 payload, and as a whole file when they are a JPEG
    for jpeg in ((with_app1(b"Exif\x00\x00" + data), with_app1(data))
                 + ((data,) if data[:3] == b"\xff\xd8\xff" and pillow_opens(data) and (
                     leading_exif(data) or b"Exif\x00\x00" not in data) else ())):
        try:
            got = int(_orientation(tf.constant(jpeg)))
        except tf.errors.InvalidArgumentError:
            continue
        want = pillow_orientation(jpeg)
        assert got == want, f"EXIF orientation {got}, Pillow {want}"
    fmt = formats.sniff_bytes(data[:formats.SIGNATURE_BYTES])
    if fmt not in ("bmp", "png"):
        return
    try:
        image, reason = _decode(c)
    except tf.errors.InvalidArgumentError:
        return  # a decoder failure: a bad file, named by the guard
    if reason.numpy():
        return
    want = pillow_pixels(data)
    if want is None:
        return
    got = image.numpy()
    if fmt == "png":  # the colour key and palette readers: Pillow's alpha
        assert got.shape == want.shape, f"PNG shape {got.shape}, Pillow {want.shape}"
        assert (got[..., 3] == want[..., 3]).all(), "PNG alpha differs from Pillow's"
    else:
        assert got.shape[:2] == want.shape[:2], f"BMP shape {got.shape}, Pillow {want.shape}"
        assert (got[..., :3] == want[..., :3]).all(), "BMP colours differ from Pillow's"


def one_input(data: bytes) -> None:
    check(data)


def main(argv):
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
