"""Masks: segmentation masks decoded in graph to class indices, uint8 ``[h, w, 1]``.

``mask_mode="index"``: the class of a pixel is the palette *index* of a
palette image (PNG colour type 3, GIF, 1/4/8-bit BMP), or the gray level of
a gray image (or of an RGB image whose three channels are equal). TensorFlow's
decoders return a palette image's *colours* (``tf.io.decode_png`` of a Pascal
VOC mask gives class 15 as (192, 128, 128)), so before decoding, the file's
palette is rewritten, in graph, to the identity gray ramp (entry i = (i, i, i)):

* PNG: the ``PLTE`` chunk (found by walking the chunks after ``IHDR``) is
  replaced by a precomputed chunk of ``2**bit_depth`` gray entries with its
  CRC-32 (one precomputed chunk per bit depth), so that every index a pixel
  can hold maps to itself;
* GIF: the global colour table and the first frame's local one are replaced
  by the gray ramp of the same size, and the first Graphic Control
  Extension's transparency flag is cleared (``tf.io.decode_gif`` leaves
  transparent pixels black);
* BMP: the palette entries after the info header are replaced by the ramp
  (``pipeline.decode.bmp`` decodes every variant: 1/2/4/8-bit, RLE4/RLE8, OS/2).

The rewritten file then decodes through the ordinary ``pipeline.decode.image``
decoder (3 channels) and the first channel is the index: exactly what Pillow
gives (``np.array(Image.open(path))`` of a ``"P"`` image). A mask whose
channels differ somewhere (a colour image) is refused under "index", naming
a colour and where it is. 16-bit gray PNGs are refused (their values do not
fit uint8 classes).

``mask_mode="rgb"``: the decoded RGB colour of each pixel is looked up in
``mask_colors`` ({(r, g, b): class}) with a ``tf.searchsorted`` over the sorted
24-bit keys; a colour not in the table makes the mask bad, naming the colour
and its first position.

Faults are returned as a reason string (empty when good), as
``pipeline.decode.image.Decoder.decode`` does, so that the pipeline's guard raises
or skips and records them.
"""

from __future__ import annotations

import struct
import zlib
from typing import Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from pipeline.decode import bmp as bmp_lib
from pipeline.decode import image as decode_lib
from pipeline.decode import formats as _F

MASK_MODES = ("index", "rgb")
DEFAULT_PAD_VALUE = 255  # the usual "ignore" index of segmentation losses

# Chunks walked after IHDR to find PLTE (it must come before IDAT).
_PNG_MAX_CHUNKS = 64
# GIF blocks (extension sub-blocks) walked before the first image descriptor.
_GIF_MAX_BLOCKS = 4096


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _ramp(n: int, entry: int = 3) -> bytes:
    return b"".join(bytes([i, i, i] + [0] * (entry - 3)) for i in range(n))


# One identity PLTE chunk per palette bit depth (1, 2, 4, 8): 2**depth entries.
_PNG_PLTE = {d: _png_chunk(b"PLTE", _ramp(1 << d)) for d in (1, 2, 4, 8)}
_GIF_RAMP = _ramp(256)           # slice 3 * n bytes for an n-entry colour table
_BMP_RAMP4 = _ramp(256, 4)       # BGRX entries
_BMP_RAMP3 = _ramp(256, 3)       # OS/2 1.x BGR entries
_BYTES = [bytes([i]) for i in range(256)]


def _u8(contents, pos):
    return decode_lib.bytes_at(contents, pos, 1)[0]


def _be32(contents, pos):
    b = decode_lib.bytes_at(contents, pos, 4)
    return ((b[0] * 256 + b[1]) * 256 + b[2]) * 256 + b[3]


def _le32(contents, pos):
    b = decode_lib.bytes_at(contents, pos, 4)
    return ((b[3] * 256 + b[2]) * 256 + b[1]) * 256 + b[0]


def _substr(contents, start, end=None):
    start = tf.cast(start, tf.int64)
    n = tf.cast(tf.strings.length(contents), tf.int64)
    start = tf.clip_by_value(start, 0, n)
    stop = n if end is None else tf.clip_by_value(tf.cast(end, tf.int64), start, n)
    return tf.strings.substr(contents, start, stop - start)


def png_palette_to_indices(contents):
    """A palette PNG's bytes with its ``PLTE`` replaced by the identity gray ramp.

    Args:
        contents: tf.string scalar, a PNG file (any colour type).

    Returns:
        tf.string scalar: for colour type 3 (palette), the file with its
        ``PLTE`` chunk replaced by ``2**bit_depth`` entries (i, i, i) and a
        valid CRC, so that ``tf.io.decode_png(..., channels=3)[..., 0]`` is the
        palette index; any other PNG (or one without a ``PLTE`` in its first
        chunks) unchanged.
    """
    depth = _u8(contents, 24)
    palette = tf.equal(_u8(contents, 25), 3)

    def find():
        def cond(i, pos, found):
            return (i < _PNG_MAX_CHUNKS) & (found < 0) & (pos + 8 <= tf.cast(
                tf.strings.length(contents), tf.int64))

        def body(i, pos, found):
            kind = tf.strings.substr(contents, pos + 4, 4)
            length = _be32(contents, pos)
            is_plte = tf.equal(kind, b"PLTE")
            stop = is_plte | tf.equal(kind, b"IDAT")
            found = tf.where(stop, tf.where(is_plte, pos, tf.constant(-2, tf.int64)), found)
            return i + 1, pos + 12 + length, found

        _, _, found = tf.while_loop(
            cond, body, (tf.constant(0), tf.constant(8, tf.int64), tf.constant(-1, tf.int64)))
        plte_end = found + 12 + _be32(contents, found)
        which = tf.argmax(tf.cast(tf.equal(depth, [1, 2, 4, 8]), tf.int32))
        chunk = tf.gather(tf.constant([_PNG_PLTE[d] for d in (1, 2, 4, 8)]), which)
        rewritten = tf.strings.join([_substr(contents, 0, found), chunk,
                                     _substr(contents, plte_end)])
        return tf.where(found >= 8, rewritten, contents)

    return tf.cond(palette, find, lambda: contents)


def gif_palette_to_indices(contents):
    """A GIF's bytes with its colour tables replaced by the identity gray ramp.

    The global colour table and the first image's local colour table keep
    their sizes; the first Graphic Control Extension before the first image
    loses its transparency flag (``tf.io.decode_gif`` would leave
    transparent pixels 0, where the index is the class). Then
    ``tf.io.decode_gif(...)[0, ..., 0]`` is the palette index.
    """
    packed = _u8(contents, 10)
    gct = tf.where(packed >= 128, 3 * tf.bitwise.left_shift(
        tf.constant(1, tf.int64), (packed & 7) + 1), 0)
    start = 13 + gct
    size = tf.cast(tf.strings.length(contents), tf.int64)

    def cond(i, pos, in_blocks, gce, image):
        return (i < _GIF_MAX_BLOCKS) & (image < 0) & (pos < size)

    def body(i, pos, in_blocks, gce, image):
        b = _u8(contents, pos)
        # inside an extension: a sub-block of b bytes, or its terminator (0)
        nxt_in = tf.where(tf.equal(b, 0), pos + 1, pos + 1 + b)
        # at the top level: an extension (0x21 label ...), an image (0x2C) or the end
        is_ext = tf.equal(b, 0x21)
        is_gce = is_ext & tf.equal(_u8(contents, pos + 1), 0xF9)
        gce_top = tf.where(is_gce & (gce < 0), pos, gce)
        image_top = tf.where(tf.equal(b, 0x2C), pos, tf.where(is_ext, image,
                                                             tf.constant(-2, tf.int64)))
        pos = tf.where(in_blocks, nxt_in, pos + 2)
        return (i + 1, pos, tf.where(in_blocks, tf.not_equal(b, 0), is_ext),
                tf.where(in_blocks, gce, gce_top), tf.where(in_blocks, image, image_top))

    m1 = tf.constant(-1, tf.int64)
    _, _, _, gce, image = tf.while_loop(
        cond, body, (tf.constant(0), start, tf.constant(False), m1, m1))
    ramp = tf.constant(_GIF_RAMP)
    pieces = [_substr(contents, 0, 13), tf.strings.substr(ramp, tf.constant(0, tf.int64), gct)]
    at = start
    # the first GCE's packed byte (at gce + 3), its transparency flag (bit 0) cleared
    has_gce = gce >= 0
    gce_byte = tf.gather(tf.constant(_BYTES), tf.cast(_u8(contents, gce + 3) & 0xFE, tf.int32))
    pieces += [_substr(contents, at, tf.where(has_gce, gce + 3, at)),
               tf.where(has_gce, gce_byte, b"")]
    at = tf.where(has_gce, gce + 4, at)
    ipacked = _u8(contents, image + 9)
    lct = tf.where((image >= 0) & (ipacked >= 128), 3 * tf.bitwise.left_shift(
        tf.constant(1, tf.int64), (ipacked & 7) + 1), 0)
    lct_at = tf.where(lct > 0, image + 10, at)
    pieces += [_substr(contents, at, lct_at), tf.strings.substr(ramp, tf.constant(0, tf.int64), lct),
               _substr(contents, lct_at + lct)]
    return tf.strings.join(pieces)


def bmp_palette_to_indices(contents):
    """A palette BMP's bytes with its palette replaced by the identity gray ramp.

    1-, 2-, 4- and 8-bit BMPs (RLE or not, OS/2 1.x 3-byte entries too): the
    entries an index can reach become (i, i, i); ``pipeline.decode.bmp.decode_bmp``
    then gives the index in every channel (a palette that is the gray ramp
    also gives indices past its end, as Pillow does). Other BMPs unchanged.
    """
    hs = _le32(contents, 14)
    core = tf.equal(hs, 12)
    bits = tf.where(core, decode_lib.bytes_at(contents, 24, 2)[0]
                    + 256 * decode_lib.bytes_at(contents, 24, 2)[1],
                    decode_lib.bytes_at(contents, 28, 2)[0]
                    + 256 * decode_lib.bytes_at(contents, 28, 2)[1])
    paletted = (bits >= 1) & (bits <= 8)
    full = tf.bitwise.left_shift(tf.constant(1, tf.int64), tf.clip_by_value(bits, 0, 8))
    colors = tf.where(core, tf.constant(0, tf.int64), _le32(contents, 46))
    colors = tf.where(tf.equal(colors, 0), full, colors)
    used = tf.minimum(colors, full)
    entry = tf.where(core, tf.constant(3, tf.int64), tf.constant(4, tf.int64))
    ramp = tf.where(core, tf.constant(_BMP_RAMP3), tf.constant(_BMP_RAMP4))
    at = 14 + hs

    def rewrite():
        return tf.strings.join([_substr(contents, 0, at),
                                tf.strings.substr(ramp, tf.constant(0, tf.int64), entry * used),
                                _substr(contents, at + entry * used)])

    return tf.cond(paletted & (at + entry * used <= tf.cast(
        tf.strings.length(contents), tf.int64)), rewrite, lambda: contents)


def to_indices(contents):
    """Any image file's bytes, with a palette (PNG, GIF, BMP) made the gray ramp."""
    fmt = decode_lib.sniff(contents)
    branches = [lambda: contents] * (_F.UNKNOWN + 1)
    branches[_F.PNG] = lambda: png_palette_to_indices(contents)
    branches[_F.GIF] = lambda: gif_palette_to_indices(contents)
    branches[_F.BMP] = lambda: bmp_palette_to_indices(contents)
    return tf.switch_case(tf.cast(fmt, tf.int32), branches)


def color_table(mask_colors: Dict[Tuple[int, int, int], int]):
    """(sorted int32 keys r*65536+g*256+b, uint8 classes in the same order)."""
    items = sorted(((r << 16) | (g << 8) | b, c) for (r, g, b), c in mask_colors.items())
    return (np.array([k for k, _ in items], np.int32), np.array([c for _, c in items], np.uint8))


class MaskDecoder:
    """Builds the in-graph ``decode(contents) -> (mask uint8 [h, w, 1], reason)``.

    Args:
        mask_mode: "index" or "rgb" (see the module docstring).
        mask_colors: {(r, g, b): class} for "rgb" (validated by
            ``pipeline.config.make_options``), else None.
        decoder: a ``pipeline.decode.image.Decoder`` with ``channels=3`` (the masks'
            own: it decodes every format the images' does).
    """

    def __init__(self, mask_mode: str, mask_colors: Optional[dict],
                 decoder: decode_lib.Decoder):
        if decoder.channels != 3:
            raise ValueError(f"MaskDecoder needs a 3-channel Decoder. "
                             f"Received: channels={decoder.channels}")
        self.mode = mask_mode
        self.decoder = decoder
        self.keys, self.classes = (color_table(mask_colors) if mask_mode == "rgb"
                                   else (None, None))

    def decode(self, contents):
        """Encoded mask bytes -> (uint8 [h, w, 1] classes, reason str scalar, "" when good)."""
        if self.mode == "index":
            return self._index(contents)
        return self._rgb(contents)

    def _index(self, contents):
        """Gray 8-bit PNGs (most label-ID masks) by ``decode_png(channels=1)`` alone,
        inline; every other mask by ``_index_general``, in a function call
        (``bmp.unlowered_case``) only they make. Both give the same classes."""
        words = decode_lib.header_words(contents)
        w0, w1, _, w3, width, height, w6, _ = tf.unstack(words, num=decode_lib.HEADER_WORDS)
        # PNG signature, then IHDR: width, height, bit depth 8 and colour type 0 (gray)
        gray8 = (tf.equal(w0, 0x89504E47) & tf.equal(w1, 0x0D0A1A0A)
                 & tf.equal(w3, 0x49484452) & tf.equal(tf.bitwise.right_shift(w6, 16), 0x0800)
                 & (width > 0) & (height > 0)
                 & (width * height <= self.decoder.max_pixels))

        def gray():
            return tf.io.decode_png(contents, channels=1), tf.constant("")

        def general():
            return bmp_lib.unlowered_case(tf.constant(0), [lambda: self._index_general(contents)])

        mask, reason = tf.cond(gray8, gray, general)
        mask.set_shape([None, None, 1])
        return mask, reason

    def _index_general(self, contents):
        is_png = tf.equal(decode_lib.sniff(contents), _F.PNG)
        sixteen = is_png & tf.equal(_u8(contents, 24), 16)
        rgb, reason = self.decoder.decode(to_indices(contents))
        r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
        colour = tf.logical_or(tf.not_equal(r, g), tf.not_equal(r, b))

        def where_colour():
            at = tf.cast(tf.where(colour)[0], tf.int32)
            px = tf.cast(tf.gather_nd(rgb, at[None])[0], tf.int32)
            return tf.strings.format(
                "mask has colours, e.g. ({}, {}, {}) at row {}, column {}: mask_mode='index' "
                "reads palette indices or gray levels; use mask_mode='rgb' with mask_colors",
                (px[0], px[1], px[2], at[0], at[1]))

        reason = tf.where(tf.strings.length(reason) > 0, reason, tf.cond(
            tf.reduce_any(colour), where_colour, lambda: tf.constant("")))
        reason = tf.where(sixteen, "16-bit PNG mask: classes must be 8-bit (0-255); save the "
                          "mask with 8 bits per pixel", reason)
        return rgb[..., :1], reason

    def _rgb(self, contents):
        rgb, reason = self.decoder.decode(contents)
        x = tf.cast(rgb, tf.int32)
        key = x[..., 0] * 65536 + x[..., 1] * 256 + x[..., 2]
        keys = tf.constant(self.keys)
        flat = tf.reshape(key, [-1])
        pos = tf.minimum(tf.searchsorted(keys, flat), len(self.keys) - 1)
        known = tf.equal(tf.gather(keys, pos), flat)
        mask = tf.reshape(tf.gather(tf.constant(self.classes), pos), tf.shape(key))[..., None]

        def unknown():
            first = tf.cast(tf.argmin(tf.cast(known, tf.int32)), tf.int32)
            width = tf.shape(key)[1]
            k = flat[first]
            return tf.strings.format(
                "mask colour ({}, {}, {}) at row {}, column {} is not in mask_colors "
                "({} pixel(s) of unknown colours)",
                (k // 65536, k // 256 % 256, k % 256, first // width, first % width,
                 tf.reduce_sum(1 - tf.cast(known, tf.int32))))

        reason = tf.where(tf.strings.length(reason) > 0, reason, tf.cond(
            tf.reduce_all(known), lambda: tf.constant(""), unknown))
        return mask, reason
