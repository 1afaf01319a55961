"""Decode: sniff -> guard -> decode -> channels -> orientation, all in graph.

``Decoder.decode`` turns a file's encoded bytes into a ``uint8`` image
``[height, width, channels]`` plus a reason string ("" when the file is
good). It is the same graph for every source (files, manifests, TFRecord
shards), so a file gives the same pixels whatever the source.

* The format comes from the file's first bytes (``pipeline.decode.formats``), never
  its extension. JPEG, PNG, GIF and BMP are decoded by TensorFlow ops; WebP by
  ``tf.io.decode_webp`` where TensorFlow has it, else tensorflow-io; TIFF by
  tensorflow-io where its ops load (TensorFlow 2.16) and the file is a variant
  it decodes exactly as Pillow does (``tiff_header`` reads IFD0 in graph: 1-8
  bit gray or palette, 8-bit RGB, no alpha), else by the Pillow fallback;
  AVIF by the Pillow fallback (Pillow >= 11.3 reads AVIF; tensorflow-io's
  AVIF colours differ from it), or tensorflow-io where Pillow cannot. The
  tensorflow-io ops are only built into a graph when some file's extension
  names such a format and tensorflow-io loads here.
* Before any decode, the header's width and height are read (PNG IHDR, GIF
  logical screen, BMP info header, WebP VP8/VP8L/VP8X, TIFF IFD0, JPEG SOF via
  ``tf.image.extract_jpeg_shape``) and a file claiming more than
  ``max_pixels`` pixels is refused without allocating its pixels.
* JPEG EXIF orientation (tag 0x0112 of IFD0, EXIF 2.32; the same tag
  Pillow's ``ImageOps.exif_transpose`` applies) is read in graph from the
  APP1 segment by ``exif_orientation``: a few byte reads, and one check for
  the common JFIF layout that has no EXIF block.
* The fast JPEG path (crop-before-decode with ``decode_and_crop_jpeg``)
  applies to files whose orientation is 1 and gives exactly the pixels of
  decode-then-crop; a rotated file is decoded, rotated, then cropped.
* Reduced-scale DCT decoding (``target``): libjpeg's IDCT at 1/2, 1/4 or 1/8
  scale (``ratio``), the largest that keeps the image, or the crop window, at
  least the caller's target size (from the header: a choice per element,
  one lowered ``tf.switch_case`` over the four ratios). A rotated file takes
  its displayed size. Not the pixels of a full decode + resize: a better
  pre-filter (closer to an antialiased resize of the full decode; see
  ``tests/decode/test_dct_scaling.py``).
* BMP: plain 24-bit files by ``tf.io.decode_bmp``; the other variants
  (palettes, RLE4/RLE8, 16/32-bit, bit fields, OS/2, v4/v5 headers,
  top-down) by ``pipeline.decode.bmp``, a graph-op decoder checked against Pillow.
* **Slow fallback (rare path, clearly marked):** files whose format has no
  graph decoder here (HEIC/HEIF with pillow-heif installed, AVIF, animated
  WebP (``tf.io.decode_webp`` crashes on it), every TIFF without tensorflow-io
  and the TIFF variants it does not decode as Pillow does (16-bit, float,
  alpha, CMYK, YCbCr, L*a*b*, JPEG-compressed, planar), BMP variants met
  under another extension, WebP met under another extension) are decoded
  by Pillow inside a ``tf.py_function`` named ``pipeline_pillow_fallback``. It
  holds the GIL, so it is slow, and it cannot run on tf.data service workers:
  with ``service=``, such files are bad files with a reason that says so. It
  is never silent: the factories log how many files it will take by
  extension (``Decoder.fallback_note``), the first file of each kind it
  decodes is logged, and ``scan`` marks the variants it takes
  (``Decoder.takes_fallback``) with the fallback's measured cost per file.
  The fallback returns Pillow's own channels (``pillow_image``: gray, gray +
  alpha, RGB or RGBA, with its rules for 16-bit, float and L*a*b* samples)
  and the channel rules below are applied in graph, as for every format.
* **Other formats in a JPEG-only dataset (rare path, clearly marked):** when
  every file is named as a JPEG (or the TFRecord shards hold only JPEGs),
  the graph holds the JPEG decoder alone, which makes the dataset quicker to
  build and to start (the decoders of the other formats are most of the
  graph). A file whose content is another format all the same (a PNG named
  .jpg) is decoded by the very decoder the full graph would use, run eagerly
  from Python in a ``tf.py_function`` named ``pipeline_other_formats``: the
  same pixels and the same reasons, slowly (it holds the GIL). It is never
  silent: the first file of each kind it decodes is logged, and ``scan``
  (which builds the full graph) marks such files. Not on tf.data service
  workers, where the full graph is built.
* A JPEG cut inside its scan data with an end-of-image marker after the cut
  decodes without an error (libjpeg fills the rest); ``Decoder._jpeg_cut``
  names it truncated (``pipeline.decode.jpegscan``: a corner and SOS check in graph,
  rare paths for the suspects).
* A decoder that still fails (corrupt or truncated data) raises; the guard
  stage (``pipeline.decode.guard``) finds which file it was and why.

Channels: every image comes out with exactly ``channels`` (1, 3 or 4). Gray
is replicated to RGB; RGB to gray uses ITU-R 601 luma
(``tf.image.rgb_to_grayscale``); alpha is dropped when not asked for (colour
under transparent pixels is kept as stored) and set to 255 when asked for and
absent. 16-bit PNG and TIFF samples become 8-bit as ``v >> 8`` (libpng's
strip-16); float TIFF samples are taken as 0.0-1.0, clipped, ``round(v * 255)``.
Animated GIF and WebP give their first frame. CMYK/YCCK JPEGs are converted to
RGB by libjpeg (Adobe inverted CMYK handled).
"""

from __future__ import annotations

import functools
import io
import itertools
import struct
import threading
import time
import weakref
from typing import Callable, Dict, List, Optional, Sequence, Set

import numpy as np
import tensorflow as tf
from absl import logging

from pipeline.decode import bmp as bmp_lib
from pipeline import checks
from pipeline.decode import formats
from pipeline.decode import jpegscan
from pipeline import stack

FALLBACK_OP_NAME = "pipeline_pillow_fallback"
OTHERS_OP_NAME = "pipeline_other_formats"
JPEG_CUT_OP_NAME = "pipeline_jpeg_cut_check"
_F = formats


def _tfio():
    return stack.tfio_module("in-graph WebP/TIFF/AVIF decoding", "this dataset")  # lazily


def _plain_bmp(head: bytes) -> bool:
    """In Python, ``Decoder._bmp``'s test: a BMP that ``tf.io.decode_bmp`` decodes
    (24-bit, uncompressed, 40-byte info header, bottom-up rows)."""
    le = lambda i, n: int.from_bytes(head[i:i + n], "little")
    return (le(28, 2) == 24 and le(30, 4) == 0 and le(14, 4) == 40 and le(22, 4) < 2 ** 31)


def _gif_plain(head: bytes) -> bool:
    """In Python, ``gif_plain``'s test, from the first bytes (False when the first
    image descriptor lies beyond them)."""
    if len(head) < 13:
        return False
    pos = 13 + (3 * 2 ** ((head[10] & 7) + 1) if head[10] & 0x80 else 0)
    transparent = False
    while pos < len(head):
        if head[pos] == 0x2C:
            d = head[pos:pos + 9]
            if len(d) < 9:
                return False
            le = lambda i: d[i] + 256 * d[i + 1]
            return (not transparent and le(1) == 0 and le(3) == 0
                    and (le(5), le(7)) == (head[6] + 256 * head[7], head[8] + 256 * head[9]))
        if head[pos] != 0x21 or pos + 1 >= len(head):
            return False
        if head[pos + 1] == 0xF9 and pos + 3 < len(head):
            transparent |= bool(head[pos + 3] & 1)
        pos += 2
        while pos < len(head) and head[pos]:
            pos += 1 + head[pos]
        pos += 1
    return False


def tiff_in_graph_bytes(head: bytes, read_at: Optional[Callable[[int, int], bytes]] = None
                        ) -> bool:
    """In Python, ``tiff_header``'s ``in_graph`` test (whether tensorflow-io's TIFF
    decoder gives this TIFF's pixels as Pillow does), from the first bytes, or
    from ``read_at(offset, size) -> bytes`` when IFD0 lies beyond them."""
    read = read_at or (lambda o, n: head[o:o + n])
    order = "<" if head[:2] == b"II" else ">"
    if len(head) < 8:
        return False
    ifd = struct.unpack(order + "I", head[4:8])[0]
    raw = read(ifd, 2 + 12 * TIFF_ENTRIES)
    if len(raw) < 2:
        return False
    count = min(struct.unpack(order + "H", raw[:2])[0], TIFF_ENTRIES)
    fields = {}
    for i in range(count):
        e = raw[2 + 12 * i:14 + 12 * i]
        if len(e) < 12:
            break
        tag, typ, n = struct.unpack(order + "HHI", e[:8])
        short = typ == 3
        if short and n > 2:  # a SHORT array held elsewhere: its first value
            at = struct.unpack(order + "I", e[8:12])[0]
            b = read(at, 2)
            value = struct.unpack(order + "H", b)[0] if len(b) == 2 else -1
        else:
            value = struct.unpack(order + ("H" if short else "I"), e[8:10] if short else e[8:12])[0]
        fields[tag] = value
    return _tiff_plain(fields.get)


def _tiff_plain(get) -> bool:
    """The rule shared by ``tiff_header`` and ``tiff_in_graph_bytes``: ``get(tag)``
    gives IFD0's value of a tag (None when absent)."""
    photometric, spp = get(0x0106), get(0x0115) or 1
    bits = 1 if get(0x0102) is None else get(0x0102)
    return (get(0x0100) is not None and get(0x0101) is not None
            and (photometric in (0, 1, 3) and spp == 1 and bits in (1, 2, 4, 8)
                 or photometric == 2 and spp == 3 and bits == 8)
            and get(0x0152) is None and (1 if get(0x0153) is None else get(0x0153)) == 1
            and (1 if get(0x011C) is None else get(0x011C)) == 1
            and (get(0x0103) or 1) in TIFF_GRAPH_COMPRESSIONS)


def bytes_text(values):
    """In graph: byte values (an integer vector) as ``hexdump -C`` shows them, e.g.
    ``68 65 6c 6c 6f 20 74 68 |hello th|`` (``formats.describe_bytes``: the same
    words; no quote or backslash). Built only on the bad-file path."""
    values = tf.cast(values, tf.int32)
    return tf.strings.join([
        tf.strings.reduce_join(tf.gather(tf.constant(_F.BYTE_HEX), values), separator=" "),
        " |", tf.strings.reduce_join(tf.gather(tf.constant(_F.BYTE_TEXT), values)), "|"])


def _like(pos, n: int):
    """``n`` as ``tf.strings.substr`` wants it beside ``pos``: a scalar, or one per
    element of a vector ``pos`` (its positions and lengths must have one shape)."""
    if pos.shape.rank == 0:
        return tf.constant(n, tf.int64)
    return tf.fill(tf.shape(pos), tf.constant(n, tf.int64))


def bytes_at(contents, pos, n: int):
    """``n`` bytes of ``contents`` from byte ``pos`` as int64 ``[n]``, zero-padded.

    Safe for any ``pos`` (past the end gives zeros); ``tf.strings.substr``
    alone raises when ``pos`` is past the end. Of a batch (``contents`` str
    ``[k]``, ``pos`` ``[k]``), ``[k, n]``.
    """
    size = tf.cast(tf.strings.length(contents), tf.int64)
    pos = tf.clip_by_value(tf.cast(pos, tf.int64), 0, size)
    s = tf.strings.substr(contents, pos, _like(pos, n))
    # (``fixed_length`` zero-pads a short read)
    return tf.cast(tf.io.decode_raw(s, tf.uint8, fixed_length=n), tf.int64)


_SIG_EXPECT = np.zeros([len(_F.SIGNATURES), _F.SIGNATURE_BYTES], np.int64)
_SIG_MASK = np.zeros([len(_F.SIGNATURES), _F.SIGNATURE_BYTES], bool)
for _k, (_fid, _parts) in enumerate(_F.SIGNATURES):
    for _o, _b in _parts:
        _SIG_EXPECT[_k, _o:_o + len(_b)] = list(_b)
        _SIG_MASK[_k, _o:_o + len(_b)] = True
_SIG_FORMAT = np.array([fid for fid, _ in _F.SIGNATURES] + [_F.UNKNOWN], np.int32)


def sniff(contents, head=None):
    """Format id (int32 scalar, an index into ``formats.FORMATS``; ``formats.UNKNOWN``
    when no signature matches), from the first 16 bytes: one vectorised
    compare against the whole signature table."""
    if head is None:
        head = bytes_at(contents, 0, _F.SIGNATURE_BYTES)
    match = tf.reduce_all(tf.equal(head[None], _SIG_EXPECT) | ~_SIG_MASK, axis=1)
    first = tf.argmax(tf.concat([tf.cast(match, tf.int32), [1]], 0), output_type=tf.int32)
    return tf.gather(_SIG_FORMAT, first)


def _uint(b, i: int, n: int, little):
    """Unsigned ``n``-byte field at byte ``i`` of int64 bytes ``b`` (along the last
    axis); ``little``: a Python bool (static byte order) or a bool tensor. One
    slice and a weighted sum (few ops to build, whatever ``n``)."""
    le = np.array([256 ** k for k in range(n)], np.int64)
    if isinstance(little, bool):
        weights = le if little else le[::-1].copy()
    else:
        weights = tf.where(little, le, le[::-1].copy())
    return tf.reduce_sum(b[..., i:i + n] * weights, -1)


def _u16(b, i, little):
    """Unsigned 16-bit field at byte ``i`` of int64 bytes ``b`` (``_uint``)."""
    return _uint(b, i, 2, little)


def _u32(b, i, little):
    """Unsigned 32-bit field at byte ``i`` of int64 bytes ``b`` (``_uint``)."""
    return _uint(b, i, 4, little)


# Reduced decoding scales: libjpeg's DCT scaling (``tf.io.decode_jpeg``'s ``ratio``)
# 1/1, 1/2, 1/4, 1/8, and 1/16 as 1/8 then a 2x2 box average (``_halve``).
DCT_RATIOS = (1, 2, 4, 8, 16)
DCT_HALF_FROM = (12, 5)  # 2.4: the 1/2 scale is taken from this reduction on


def window_box(window, r, rows, cols):
    """The pixels of an image reduced ``r``-fold (``rows`` x ``cols``) that cover
    ``window`` = (oy, ox, h, w) of the full image: (y0, x0, h, w) int32 in the
    reduced grid, and box, float32 [4]: the window's offset and size in units
    of those reduced pixels, from their corner (exact; integers when ``r``
    is 1)."""
    oy, ox, ch, cw = (tf.cast(v, tf.int32) for v in window)
    y0, x0 = oy // r, ox // r
    y1 = tf.minimum((oy + ch + r - 1) // r, rows)
    x1 = tf.minimum((ox + cw + r - 1) // r, cols)
    f = lambda v: tf.cast(v, tf.float32)
    rf = f(r)
    box = tf.stack([f(oy) / rf - f(y0), f(ox) / rf - f(x0), f(ch) / rf, f(cw) / rf])
    return y0, x0, y1 - y0, x1 - x0, box


def whole_box(image):
    """The box (``window_box``) of a whole image: float32 [0, 0, height, width]."""
    s = tf.cast(tf.shape(image)[:2], tf.float32)
    return tf.concat([[0.0, 0.0], s], 0)


def _shape(height, width):
    """(height, width) of a whole displayed image as int32 [2] (``Decoder.decode``'s
    ``with_shape``)."""
    return tf.cast(tf.stack([height, width]), tf.int32)


def _halve(image, ratio: int):
    """uint8 [h, w, 3] -> [h // 2, w // 2, 3] by 2x2 box averages when ``ratio`` is
    16 (the 1/8 DCT scale halved: no aliasing left for the resize after it); the
    image as it is otherwise."""
    if ratio <= 8:
        return image
    half = tf.shape(image)[:2] // 2
    return tf.cast(tf.image.resize(image, half, method="area") + 0.5, tf.uint8)


EXIF_ENTRIES = 32   # IFD0 entries searched for the orientation tag
HEADER_WORDS = 8    # 32-bit words of the file's start read by ``header_words``


def header_words(contents):
    """The first 32 bytes of ``contents`` as 8 big-endian unsigned 32-bit words
    (int64 ``[8]``), zero-padded past the end: one read for every check the hot
    path makes on a file's start (four ops, whatever the file's size)."""
    n = 4 * HEADER_WORDS
    w = tf.cast(tf.io.decode_raw(tf.strings.substr(contents, 0, n), tf.int32,
                                 little_endian=False, fixed_length=n), tf.int64)
    return tf.bitwise.bitwise_and(w, 0xFFFFFFFF)


def is_jpeg(words):
    """bool scalar: the file starts with a JPEG SOI marker and a marker (FF D8 FF),
    from ``header_words``' int64 ``[8]``
    (``[k]`` from ``[k, 8]``)."""
    return tf.equal(tf.bitwise.right_shift(words[..., 0], 8), 0xFFD8FF)


# The EXIF walk's step over each 16-bit marker value: -1, a segment stepped over
# by its length; 1, a fill byte (FF FF); 0, the walk ends (any other marker, or bytes
# that are not a marker). The EXIF walk steps over APPn and COM segments only (the EXIF and JFIF standards put
# their APP segments right after SOI, before any table): walking on through the tables
# to the scan cost some 300 us more per file on the sample photos that carry an ICC or
# Photoshop segment (a third of them) for EXIF blocks no standard writer places there.
_SEGMENT_SKIP = np.zeros([1 << 16], np.int8)
_SEGMENT_SKIP[0xFFE0:0xFFF0] = -1
_SEGMENT_SKIP[0xFFFE] = -1
_SEGMENT_SKIP[0xFFFF] = 1
# (uint8/int8: a bool constant of this size takes TensorFlow ~35 ms to build, int8 0.1 ms)


def _route_patterns():
    """(mask [7, 8], pattern [7, 8], table [128]) for ``exif_route``: seven masked
    matches on the first 8 big-endian words, and the route for each of their
    128 combinations."""
    mask = np.zeros([7, HEADER_WORDS], np.int64)
    pat = np.zeros([7, HEADER_WORDS], np.int64)
    rows = [
        {0: (0xFFF0, 0xFFE0)},                                          # A: APPn at byte 2
        {0: (0xFFFF, 0xFFFE)},                                          # B: COM at byte 2
        {0: (0xFFFF, 0xFFE1), 1: (0xFFFF, 0x4578),                      # C: "Exif\0\0" APP1
         2: (0xFFFFFFFF, 0x69660000)},                                  #    at byte 2
        {0: (0xFFFF, 0xFFE0), 1: (0xFFFF0000, 0x00100000)},             # D: 16-byte APP0
        {0: (0xFFFF, 0xFFE0), 1: (0xFFFF0000, 0x00100000),              # E: D, then APPn
         5: (0xFFF00000, 0xFFE00000)},                                  #    at byte 20
        {0: (0xFFFF, 0xFFE0), 1: (0xFFFF0000, 0x00100000),              # F: D, then COM
         5: (0xFFFF0000, 0xFFFE0000)},
        {0: (0xFFFF, 0xFFE0), 1: (0xFFFF0000, 0x00100000),              # G: D, then an
         5: (0xFFFF0000, 0xFFE10000), 6: (0xFFFFFFFF, 0x45786966),      #    "Exif\0\0" APP1
         7: (0xFFFF0000, 0)},
    ]
    for k, row in enumerate(rows):
        for i, (m, v) in row.items():
            mask[k, i], pat[k, i] = m, v
    table = np.zeros([128], np.int32)
    for bits in range(128):
        a, b, c, d, e, f, g = ((bits >> k) & 1 for k in range(7))
        if not (a or b):
            table[bits] = ROUTE_NONE       # no APPn/COM segment at all
        elif c:
            table[bits] = ROUTE_AT_2
        elif d and not (e or f):
            table[bits] = ROUTE_NONE       # JFIF APP0 alone
        elif g:
            table[bits] = ROUTE_AT_20
        else:
            table[bits] = ROUTE_WALK
    return mask, pat, table


ROUTE_NONE, ROUTE_AT_2, ROUTE_AT_20, ROUTE_WALK = range(4)
_ROUTE_MASK, _ROUTE_PATTERN, _ROUTE_TABLE = _route_patterns()


def exif_route(words):
    """Where a JPEG's EXIF block is, from its first 32 bytes (``header_words``):
    int32 scalar, ``ROUTE_NONE`` (no EXIF block: orientation 1), ``ROUTE_AT_2``
    (right after SOI), ``ROUTE_AT_20`` (after a 16-byte JFIF APP0) or
    ``ROUTE_WALK`` (other layouts: walk the segments). Eight ops: seven masked
    matches and a table lookup, no branch (the hot path of every JPEG). Of a batch's
    ``[k, 8]`` words, int32 ``[k]``."""
    match = tf.reduce_all(tf.equal(tf.bitwise.bitwise_and(words[..., None, :], _ROUTE_MASK),
                                   _ROUTE_PATTERN), axis=-1)
    bits = tf.reduce_sum(tf.cast(match, tf.int32) * (1 << np.arange(7, dtype=np.int32)), -1)
    return tf.gather(_ROUTE_TABLE, bits)


def exif_orientation(contents, words=None):
    """The EXIF orientation tag (int32 scalar, 1-8; 1 when absent or invalid) of a JPEG.

    Finds the first APP1 "Exif" block among the APPn and COM segments that
    follow SOI (however many) and reads tag 0x0112 of its IFD0 as Pillow does,
    malformed blocks included (``app1_orientation``: EXIF 2.32 section 4.6, and
    Pillow's rules for field types, counts, offsets and repeated tags). The first two segments are read from ``words``
    (``header_words``, the first 32 bytes) by ``exif_route``, which settles the
    common layouts (no segment; EXIF first; JFIF APP0 alone; JFIF APP0 then
    EXIF) without a branch; other layouts (an ICC or Photoshop segment after
    APP0, XMP and extended-XMP chunks, comments, say) walk on, one read per
    segment, however many segments there are, unless the bytes ``Exif\\0\\0``
    occur nowhere in the file (``exif_signature_in``: then there is no block to
    find, orientation 1, for one literal search): the walk ends at the EXIF block,
    the first segment that is not APPn or COM (a table, a frame header, the
    scan), or the end of the bytes (its cost is bounded by the file's own
    size). An EXIF block placed after a table segment, which the EXIF and JFIF
    standards do not allow (their APP segments come first) and Pillow still
    reads, is not read: such a file is taken as orientation 1
    (docs/limitations.md). Both the walk and the IFD0 read
    sit in one function call (``bmp.unlowered_case``) that files with no EXIF
    block never make: in a tf.data map, even a while loop that is not entered
    costs some 30 µs per element.

    Built with few ops (multi-byte fields by ``decode_raw``, scalars by
    ``unstack``): every op costs some 0.2-0.5 ms of Python to build, paid by
    every process before its first batch.
    """
    words = header_words(contents) if words is None else words
    route = exif_route(words)

    def read():  # one function call (``stack.traced_once``)
        return _exif_block_orientation(contents, words, route)

    def after_route():
        # A layout that needs the walk and has no "Exif\0\0" anywhere in its bytes has no
        # EXIF block to find: one literal search (RE2's unanchored search runs over bytes)
        # instead of the walk, for most such files (an ICC profile or a Photoshop block, no
        # EXIF: 331 of the 1,000 sample photos; ~60 µs against ~300 µs for the walk).
        # (searched only for that layout: where the route placed the block, no search)
        no_block = tf.cond(tf.equal(route, ROUTE_WALK),
                           lambda: tf.logical_not(exif_signature_in(contents)),
                           lambda: tf.constant(False))
        return tf.cond(no_block, lambda: tf.constant(1, tf.int32), read)

    return tf.cond(tf.equal(route, ROUTE_NONE), lambda: tf.constant(1, tf.int32), after_route)


@stack.traced_once(tf.TensorSpec([], tf.string), tf.TensorSpec([HEADER_WORDS], tf.int64),
                   tf.TensorSpec([], tf.int32))
def _exif_block_orientation(contents, words, route):
    """``exif_orientation``'s rare path, a file whose first segments say an EXIF block may
    be there (``route`` is ``ROUTE_AT_2``, ``ROUTE_AT_20`` or ``ROUTE_WALK``): the walk to
    the block, then its IFD0 read (``app1_orientation``). int32 scalar, 1-8."""
    shr, band = tf.bitwise.right_shift, tf.bitwise.bitwise_and

    def walk():
        size = tf.cast(tf.strings.length(contents), tf.int64)
        w0, w1, _, _, _, w5, _, _ = tf.unstack(words, num=HEADER_WORDS)
        # the third segment's position when the first is a 16-byte APP0, else the second's
        start = tf.where(tf.equal(band(w0, 0xFFFF), 0xFFE0) & tf.equal(shr(w1, 16), 16),
                         22 + band(w5, 0xFFFF), 4 + shr(w1, 16))

        def step(pos, found):
            # One marker + length read per step (the loop condition keeps it in the
            # file). Every segment up to the scan is stepped over by its length, as
            # Pillow reads them (fill bytes FF FF and the length-less RSTn / TEM
            # markers too); ``pos`` becomes -1 when the walk ends (EXIF found, a
            # scan or the end of image, a byte that is not a marker, a length
            # below 2). ``pos`` grows by at least 1 per step: the walk is bounded
            # by the file's own bytes, whatever its number of segments.
            s = tf.strings.substr(contents, pos, 10)
            marker, length = tf.unstack(tf.cast(tf.io.decode_raw(
                s, tf.uint16, little_endian=False, fixed_length=4), tf.int64), num=2)
            exif = tf.equal(marker, 0xFFE1) & tf.equal(tf.strings.substr(s, 4, 6),
                                                       b"Exif\x00\x00")
            skip = tf.gather(_SEGMENT_SKIP, marker)  # 0: ends the walk; -1: by its length
            nxt = tf.where(skip < 0, pos + 2 + length, pos + tf.cast(skip, tf.int64))
            stop = exif | tf.equal(skip, 0) | ((skip < 0) & (length < 2))
            return tf.where(stop, tf.constant(-1, tf.int64), nxt), tf.where(exif, pos, found)

        return tf.while_loop(
            lambda pos, found: (pos >= 0) & (pos + 4 <= size),
            step, (start, tf.constant(-1, tf.int64)))[1]

    at = tf.where(tf.equal(route, ROUTE_AT_2), tf.constant(2, tf.int64),
                  tf.constant(20, tf.int64))
    found = tf.cond(tf.equal(route, ROUTE_WALK), walk, lambda: at)
    # read whether found or not (fewer ops than a branch); -1 reads past SOI
    return tf.where(found >= 0, app1_orientation(contents, found), 1)


def exif_signature_in(contents):
    r"""bool scalar: the bytes ``Exif\0\0`` (an EXIF APP1 block's identifier, EXIF 2.32
    section 4.7.2) occur somewhere in ``contents``. A necessary condition for an EXIF
    block: ``exif_orientation`` skips the segment walk without it. One literal search
    (``regex_replace`` of the first occurrence; RE2's unanchored search steps over
    bytes, so binary data does not hide a match) and a length compare."""
    found = tf.strings.regex_replace(contents, r"Exif\x00\x00", "", replace_global=False)
    return tf.strings.length(found) < tf.strings.length(contents)


def jpeg_sof_offset(contents):
    """Byte offset (int64 scalar) of a JPEG's start-of-frame marker, -1 when none.

    Walks the segments after SOI by their lengths, one 4-byte marker + length
    read per segment, however many (the walk is bounded by the file's own
    bytes: each step moves on by at least one), with the rules of
    ``formats.variant``: fill bytes (FF FF) and RSTn / TEM markers (no
    length) are stepped over; a scan (SOS), the end of image, a byte that is
    not a marker or a length below 2 ends the walk. ``pipeline.scan`` keeps
    a JPEG's bytes up to its frame header with it, so that segments before it
    (a large ICC profile, an EXIF thumbnail) do not hide its variant.
    """
    size = tf.cast(tf.strings.length(contents), tf.int64)
    sof = tf.constant(_F.JPEG_SOF, tf.int64)

    def step(pos, found):
        b = bytes_at(contents, pos, 4)
        marker, length = b[1], 256 * b[2] + b[3]
        is_ff = tf.equal(b[0], 0xFF)
        fill = is_ff & tf.equal(marker, 0xFF)
        no_length = is_ff & (((marker >= 0xD0) & (marker <= 0xD7)) | tf.equal(marker, 0x01))
        is_sof = is_ff & tf.reduce_any(tf.equal(marker, sof))
        stop = ~is_ff | tf.equal(marker, 0xD9) | tf.equal(marker, 0xDA) | (
            ~fill & ~no_length & (length < 2))
        nxt = tf.where(fill, pos + 1, tf.where(no_length, pos + 2, pos + 2 + length))
        return (tf.where(stop | is_sof, tf.constant(-1, tf.int64), nxt),
                tf.where(is_sof, pos, found))

    return tf.while_loop(
        lambda pos, found: (pos >= 0) & (pos + 4 <= size) & (found < 0),
        step, (tf.constant(2, tf.int64), tf.constant(-1, tf.int64)))[1]


# ------------------------------------------------------------- checks on a batch

# The batched header walk's kind of each 16-bit value at a segment's start
# (``jpeg_headers``): a conservative subset of libjpeg's ``read_markers``. Any value
# not listed (not a marker, SOS or EOI before a frame, SOF of a variant other than
# baseline, extended or progressive Huffman, reserved markers) leaves the file
# unsettled: its checks run per file, as without the batch.
WALK_BAD, WALK_FILL, WALK_NO_LENGTH, WALK_SOF, WALK_TABLE, WALK_APP = range(6)
_WALK_KIND = np.zeros([1 << 16], np.int8)
_WALK_KIND[0xFFFF] = WALK_FILL
_WALK_KIND[[0xFF01] + list(range(0xFFD0, 0xFFD8))] = WALK_NO_LENGTH
_WALK_KIND[[0xFFC0, 0xFFC1, 0xFFC2]] = WALK_SOF
_WALK_KIND[[0xFFDB, 0xFFC4, 0xFFDD, 0xFFCC, 0xFFDC]] = WALK_TABLE
_WALK_KIND[list(range(0xFFE0, 0xFFF0)) + [0xFFFE]] = WALK_APP
_EXIF_WORD = int.from_bytes(b"Exif", "big")


def _walk_step(contents, size):
    """One step of ``jpeg_headers``' walk, every file of the batch at once."""
    twelve = tf.fill(tf.shape(size), tf.constant(12, tf.int64))

    def step(pos, in_app, exif, sof, bad, done):
        w = tf.bitwise.bitwise_and(tf.cast(tf.io.decode_raw(
            tf.strings.substr(contents, tf.minimum(pos, size), twelve), tf.int32,
            little_endian=False,
            fixed_length=12), tf.int64), 0xFFFFFFFF)
        marker = tf.bitwise.right_shift(w[:, 0], 16)
        length = tf.bitwise.bitwise_and(w[:, 0], 0xFFFF)
        kind = tf.cast(tf.gather(_WALK_KIND, marker), tf.int32)
        sized = (kind == WALK_TABLE) | (kind == WALK_APP)
        here = (in_app & tf.equal(marker, 0xFFE1) & tf.equal(w[:, 1], _EXIF_WORD)
                & tf.equal(tf.bitwise.right_shift(w[:, 2], 16), 0) & ~done)
        stop_bad = ~done & ((kind == WALK_BAD) | (sized & (length < 2)) | (pos + 4 > size))
        at_sof = ~done & (kind == WALK_SOF)
        nxt = pos + tf.gather(tf.constant([0, 1, 2, 0, 2, 2], tf.int64), kind) + tf.where(
            sized, length, 0)
        return (tf.where(done | at_sof | stop_bad, pos, nxt),
                in_app & ~here & ((kind == WALK_APP) | (kind == WALK_FILL)),
                tf.where(here & (exif < 0), pos, exif), tf.where(at_sof, pos, sof),
                bad | stop_bad, done | at_sof | stop_bad)
    return step


def scan_markers(contents):
    """SOS markers (FF DA) in each file of ``contents`` (str ``[k]``): int32 ``[k]``.
    One byte split for the batch (``tf.strings.split`` would build a RaggedTensor: some
    60 ops)."""
    parts = tf.raw_ops.StringSplitV2(input=contents, sep=b"\xff\xda")
    k = tf.shape(contents)[0]
    return tf.math.bincount(tf.cast(parts.indices[:, 0], tf.int32), minlength=k,
                            maxlength=k) - 1


def jpeg_headers(contents):
    """In graph, over a batch of JPEG files (str ``[k]``): one segment walk for all of
    them (a ``tf.while_loop`` whose state is a position per file; it runs as many
    steps as the file with the most segments before its frame header needs).

    Each file's walk steps from byte 2 over segments by their lengths, fill bytes
    (FF FF) and RSTn / TEM markers, and stops at its first SOF0/1/2 marker. A file
    whose walk meets anything else first (a byte that is not a marker, another SOF,
    SOS, EOI, a length below 2, a marker libjpeg would not take, the end of its
    bytes) is ``bad``: its checks are left to the per-file path.

    Returns int64 ``[k]`` each: ``sof`` (the SOF marker's offset, -1 if none),
    ``exif`` (the offset of the first APP1 "Exif\\0\\0" segment among the APPn / COM
    segments and fill bytes right after SOI, -1 if none: ``exif_orientation``'s
    walk), and bool ``[k]`` ``bad``.
    """
    size = tf.cast(tf.strings.length(contents), tf.int64)
    k = tf.shape(contents)[0]
    minus1 = tf.fill([k], tf.constant(-1, tf.int64))
    false = tf.zeros([k], tf.bool)
    init = (tf.fill([k], tf.constant(2, tf.int64)), tf.ones([k], tf.bool), minus1, minus1,
            false, false)
    _, _, exif, sof, bad, _ = tf.while_loop(
        lambda *state: tf.logical_not(tf.reduce_all(state[-1])), _walk_step(contents, size),
        init)
    return sof, exif, bad


def _sequential_cut_reason(contents, fallback: bool, decoded=None, whole=None):
    """The reason (str scalar, "" when whole) of a sequential JPEG cut in its scan with an
    end marker after the cut. In graph first: its restart markers counted
    (``jpegscan.restarts_short``), then libjpeg's own answer (``jpegscan.reads_past_end``:
    one more decode where ``whole`` says that ``decoded``, uint8 [h, w, 3], is the file
    decoded as stored; two otherwise). A file flagged there is then walked in Python
    (``jpegscan.cut_reason``, a py_function named ``JPEG_CUT_OP_NAME``), which names the
    MCU where its data ends; a file not flagged is whole, and costs no walk (about a second
    per megapixel: a complete photo whose corner happens to be mid-gray took 0.35 CPU-s).
    Without the Python fallback (tf.data service workers), the graph's answer alone."""
    cut = jpegscan.restarts_short(contents, jpeg_sof_offset(contents))
    cut = tf.cond(cut, lambda: tf.constant(True),
                  lambda: jpegscan.reads_past_end(contents, decoded, whole))
    if not fallback:
        return tf.where(cut, jpegscan.PROBE_REASON, "")

    def walk():
        out = tf.py_function(lambda b: jpegscan.cut_reason(b.numpy()), [contents], tf.string,
                             name=JPEG_CUT_OP_NAME)
        out.set_shape([])
        return out
    return tf.cond(cut, walk, lambda: tf.constant(""))


@functools.lru_cache(maxsize=None)
def _sequential_cut_call(fallback: bool):
    """``_sequential_cut_reason`` traced once per process (``stack.traced_once``):
    ``f(contents, decoded, whole) -> reason``, so that every decode graph holds one call
    for it, not its ops (some 300: the restart-marker count and libjpeg's probe)."""
    @stack.traced_once(tf.TensorSpec([], tf.string), tf.TensorSpec([None, None, 3], tf.uint8),
                       tf.TensorSpec([], tf.bool))
    def reason(contents, decoded, whole):
        return _sequential_cut_reason(contents, fallback, decoded, whole)
    return reason


@functools.lru_cache(maxsize=None)
def _progressive_cut_reason(fallback: bool):
    """``Decoder._jpeg_cut``'s rare path for a JPEG with several SOS markers, traced once per
    process: ``f(contents, mid_gray, decoded, whole, sof) -> reason`` (str scalar, "" when
    whole; ``sof``: the frame marker's offset, int64, or -1 to find it here).
    A progressive file's scan headers are checked in graph
    (``jpegscan.progressive_scans_complete``), and when they are all there, its last scan's
    data (``jpegscan.reads_past_end``: one more decode where ``whole`` says that ``decoded``,
    uint8 [h, w, 3], is the file decoded as stored; two otherwise); another (an EXIF
    thumbnail's scan) is checked as sequential when a corner is mid-gray."""
    @stack.traced_once(tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.bool),
                       tf.TensorSpec([None, None, 3], tf.uint8), tf.TensorSpec([], tf.bool),
                       tf.TensorSpec([], tf.int64))
    def reason(contents, mid_gray, decoded, whole, known_sof):
        # the frame's offset from ``check_batch`` where it walked the file (a walk here
        # is some 3 ms per file: a while_loop of some 25 ops per segment)
        sof = tf.cond(known_sof >= 0, lambda: known_sof, lambda: jpeg_sof_offset(contents))
        marker = bytes_at(contents, sof + 1, 1)[0]
        is_prog = (sof >= 0) & tf.reduce_any(tf.equal(marker, jpegscan.PROGRESSIVE_SOF))
        last = lambda: tf.where(jpegscan.reads_past_end(contents, decoded, whole),
                                jpegscan.PROBE_REASON, "")
        short = lambda: tf.cond(jpegscan.progressive_scans_complete(contents, sof), last,
                                lambda: tf.constant(jpegscan.SCANS_REASON))
        # several SOS but not progressive (an EXIF thumbnail's scan): sequential
        other = lambda: tf.cond(mid_gray, lambda: _sequential_cut_reason(
            contents, fallback, decoded, whole), lambda: tf.constant(""))
        return tf.cond(is_prog, short, other)
    return reason


# Pillow's TIFF field types (``ImageFileDirectory_v2._load_dispatch``): the size of
# one value in bytes, 0 for a type Pillow skips (its entry is ignored).
_TIFF_UNIT = np.zeros([64], np.int64)
for _t, _n in {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8,
               13: 4, 16: 8}.items():
    _TIFF_UNIT[_t] = _n
# Types whose value Pillow gives as a number (BYTE, ASCII and UNDEFINED come as
# bytes or text: never an orientation).
_TIFF_NUMERIC = np.zeros([64], bool)
_TIFF_NUMERIC[[3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 16]] = True


def app1_orientation(contents, seg):
    """The EXIF orientation (int32 scalar, 2-8, else 1) of the APP1 "Exif" segment
    whose marker is at byte ``seg`` (int64 scalar, >= 0), as Pillow 13 reads it
    (``Image.getexif().get(0x0112)`` and ``ImageOps.exif_transpose``): the TIFF
    structure is the segment's payload after "Exif\0\0" (once or twice), and
    nothing past the segment's end is read; byte order "II" or "MM" with 42 in
    either byte order; IFD0 at its offset, its entries while whole; the first
    entry of tag 0x0112 that Pillow keeps wins: of a type Pillow reads (1-13,
    16), a non-zero size, its data inside the structure (a value over 4 bytes
    at its offset; the sizes of such values, summed over the entries so far,
    no larger than the structure) -- later entries of the tag are ignored. Its
    first value (a count above 1 gives the first) is the orientation when it
    is a number equal to 2-8 (SHORT, LONG, signed, IFD, LONG8, RATIONAL 12/2,
    FLOAT 6.0 alike); BYTE, ASCII and UNDEFINED values never are.

    Vectorised over the first ``EXIF_ENTRIES`` entries (no loop): Pillow reads
    every entry, so a tag past them is not seen here (docs/limitations.md).
    Also over a batch: ``contents`` str ``[k]`` and ``seg`` int64 ``[k]`` give int32
    ``[k]`` (``Decoder.check_batch``), the same ops.
    """
    tiff, ifd, limit, little, ok = _tiff_header(contents, seg)
    kept, t, u, at = _orientation_entry(contents, tiff, ifd, limit, little)
    number = _tiff_number(bytes_at(contents, at, 8), t, little)
    numeric = tf.gather(_TIFF_NUMERIC, tf.minimum(t, 63)) & (u > 0)
    o = tf.cast(tf.clip_by_value(number, 0, 9), tf.int32)
    good = (ok & kept & numeric & tf.equal(tf.cast(o, tf.float64), number)
            & (o >= 2) & (o <= 8))
    return tf.where(good, o, 1)


# Little-endian byte weights of an unsigned integer of up to 8 bytes (reversed: big-endian).
_TIFF_LE = np.array([1, 256, 65536, 16777216, 2 ** 32, 2 ** 40, 2 ** 48, 2 ** 56], np.int64)


def _tiff_uint(b, n: int, little):
    """Unsigned integers of the first ``n`` bytes of int64 bytes ``b`` (along the last
    axis), little-endian where the bool tensor ``little`` (one per integer) is True,
    else big-endian."""
    le = tf.reduce_sum(b[..., :n] * _TIFF_LE[:n], -1)
    be = tf.reduce_sum(b[..., :n] * _TIFF_LE[:n][::-1].copy(), -1)
    return tf.where(little, le, be)


def _tiff_header(contents, seg):
    """``app1_orientation``'s TIFF header: the structure starts after "Exif\0\0" (once
    or twice) and ends with the segment. Returns ``(tiff, ifd, limit, little, ok)``:
    the structure's byte offset in ``contents``, IFD0's offset in it, the structure's
    size in bytes (int64), its byte order (bool, "II"), and whether the header is
    whole ("II" or "MM", 42 in either byte order, IFD0's entry count inside)."""
    size = tf.cast(tf.strings.length(contents), tf.int64)
    seg_len = _u16(bytes_at(contents, seg + 2, 2), 0, False)
    end = tf.minimum(seg + 2 + seg_len, size)
    tiff = seg + 10
    again = tf.equal(tf.strings.substr(contents, tf.minimum(tiff, size), _like(tiff, 6)),
                     b"Exif\x00\x00")
    tiff = tf.where(again, tiff + 6, tiff)
    limit = end - tiff  # bytes of the TIFF structure
    hdr = bytes_at(contents, tiff, 8)
    little = tf.equal(hdr[..., 0], ord("I")) & tf.equal(hdr[..., 1], ord("I"))
    big = tf.equal(hdr[..., 0], ord("M")) & tf.equal(hdr[..., 1], ord("M"))
    magic = ((tf.equal(hdr[..., 2], 42) & tf.equal(hdr[..., 3], 0))
             | (tf.equal(hdr[..., 2], 0) & tf.equal(hdr[..., 3], 42)))
    ifd = _tiff_uint(hdr[..., 4:8], 4, little)
    ok = (little | big) & magic & (limit >= 8) & (ifd + 2 <= limit)
    return tiff, ifd, limit, little, ok


def _orientation_entry(contents, tiff, ifd, limit, little):
    """IFD0's first entry of tag 0x0112 that Pillow keeps, among its first
    ``EXIF_ENTRIES`` whole entries: a type Pillow reads, a non-zero size, its data
    inside the structure. Returns ``(kept, typ, unit, at)``: whether there is one, its
    TIFF type, the size of one value (bytes) and the byte offset of its first value in
    ``contents``."""
    col = lambda v: v[..., None]  # a per-file value against its entries
    count = _tiff_uint(bytes_at(contents, tiff + ifd, 2), 2, little)
    raw = bytes_at(contents, tiff + ifd + 2, 12 * EXIF_ENTRIES)
    raw = tf.reshape(raw, tf.concat([tf.shape(raw)[:-1], [EXIF_ENTRIES, 12]], 0))
    index = tf.range(EXIF_ENTRIES, dtype=tf.int64)
    whole = (index < col(count)) & (col(ifd) + 2 + 12 * (index + 1) <= col(limit))
    lt = col(little)
    tag, typ = _tiff_uint(raw[..., 0:2], 2, lt), _tiff_uint(raw[..., 2:4], 2, lt)
    cnt = _tiff_uint(raw[..., 4:8], 4, lt)
    unit = tf.gather(_TIFF_UNIT, tf.minimum(typ, 63))
    nbytes = cnt * unit
    outside = nbytes > 4
    offset = _tiff_uint(raw[..., 8:12], 4, lt)
    total = tf.cumsum(tf.where(whole & (unit > 0) & outside, nbytes, 0), axis=-1)
    fits = ~outside | ((total <= col(limit)) & (offset + nbytes <= col(limit)))
    kept = whole & tf.equal(tag, 0x0112) & (unit > 0) & (nbytes > 0) & fits
    first = tf.argmax(tf.cast(kept, tf.int32), axis=-1)
    pick = lambda v: tf.gather(v, first, axis=-1, batch_dims=first.shape.rank)
    at = tf.where(pick(outside), tiff + pick(offset), tiff + ifd + 2 + 12 * first + 8)
    return tf.reduce_any(kept, -1), pick(typ), pick(unit), at


def _tiff_number(b, t, little):
    """The first value of TIFF type ``t`` at int64 bytes ``b`` (``[..., 8]``) as float64:
    SHORT, LONG, RATIONAL, signed, FLOAT, DOUBLE, IFD, LONG8 (a zero denominator:
    NaN); BYTE, ASCII and UNDEFINED values give a number ``_TIFF_NUMERIC`` leaves out."""
    val = lambda n: _tiff_uint(b, n, little)
    signed = lambda v, bits: tf.where(v >= 2 ** (bits - 1), v - 2 ** bits, v)
    v1, v2, v4 = val(1), val(2), val(4)
    second = _tiff_uint(b[..., 4:8], 4, little)
    f32 = tf.cast(tf.bitcast(tf.cast(v4, tf.uint32), tf.float32), tf.float64)
    f64 = tf.bitcast(tf.cast(val(8), tf.uint64), tf.float64)
    as_f = lambda v: tf.cast(v, tf.float64)
    ratio = lambda n, d: tf.where(tf.equal(d, 0), tf.constant(np.nan, tf.float64),
                                  as_f(n) / as_f(tf.where(tf.equal(d, 0), tf.ones_like(d), d)))
    which = tf.argmax(tf.cast(tf.equal(t[..., None], [3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 16]),
                              tf.int32), axis=-1)
    return tf.gather(tf.stack([
        as_f(v2), as_f(v4), ratio(v4, second), as_f(signed(v1, 8)), as_f(signed(v2, 16)),
        as_f(signed(v4, 32)), ratio(signed(v4, 32), signed(second, 32)), f32, f64, as_f(v4),
        as_f(val(8))], -1), which, axis=-1, batch_dims=t.shape.rank)


def gif_plain(contents):
    """bool scalar: a GIF whose first frame ``tf.io.decode_gif`` gives as displayed.

    That is a first frame covering the whole logical screen from (0, 0) with no
    transparent index in the Graphic Control Extension before it (GIF89a,
    sections 18, 20, 23). Other GIFs (an offset or smaller first frame, a
    transparent index) are decoded by Pillow, whose first frame is the
    displayed one: ``decode_gif`` gives such a frame at its own size or the
    transparent pixels as black. Walks the blocks before the first image
    descriptor (extensions, by their sub-blocks): one byte read per step, a
    loop bounded by the file's bytes.
    """
    size = tf.cast(tf.strings.length(contents), tf.int64)
    head = bytes_at(contents, 0, 13)
    flags = head[10]
    start = 13 + tf.where(tf.bitwise.bitwise_and(flags, 0x80) > 0,
                          3 * tf.bitwise.left_shift(tf.constant(2, tf.int64),
                                                    tf.bitwise.bitwise_and(flags, 7)), 0)

    def step(pos, sub, transparent, found):
        b = bytes_at(contents, pos, 4)
        # in an extension's sub-blocks: a size byte, 0 ends the extension
        in_sub = sub > 0
        block_end = in_sub & tf.equal(b[0], 0)
        descriptor = ~in_sub & tf.equal(b[0], 0x2C)
        extension = ~in_sub & tf.equal(b[0], 0x21)
        gce = extension & tf.equal(b[1], 0xF9)
        transparent = transparent | (gce & tf.equal(tf.bitwise.bitwise_and(b[3], 1), 1))
        nxt = tf.where(in_sub, pos + 1 + b[0], pos + 2)
        nxt = tf.where(descriptor | ~(in_sub | extension), tf.constant(-1, tf.int64), nxt)
        new_sub = tf.where(extension, 1, tf.where(block_end, 0, sub))
        return nxt, new_sub, transparent, tf.where(descriptor, pos, found)

    _, _, transparent, found = tf.while_loop(
        lambda pos, sub, t, found: (pos >= 0) & (pos < size) & (found < 0), step,
        (start, tf.constant(0), tf.constant(False), tf.constant(-1, tf.int64)))
    d = bytes_at(contents, found, 9)
    le = lambda i: d[i] + 256 * d[i + 1]
    screen = lambda i: head[i] + 256 * head[i + 1]
    return (found < 0) | (~transparent & tf.equal(le(1), 0) & tf.equal(le(3), 0)
                          & tf.equal(le(5), screen(6)) & tf.equal(le(7), screen(8)))


TIFF_ENTRIES = 32  # IFD0 entries read by ``tiff_header``
# compressions tensorflow-io's TIFF decoder (libtiff) gives as Pillow does: none, CCITT
# 1D/G3/G4, LZW, Deflate (both codes), PackBits; others (JPEG, ...) take the fallback
TIFF_GRAPH_COMPRESSIONS = (1, 2, 3, 4, 5, 8, 32773, 32946)
_TIFF_INDEX = np.arange(TIFF_ENTRIES, dtype=np.int64)


def tiff_header(contents):
    """In graph: (height, width, in_graph) of a TIFF from IFD0's fields (TIFF 6.0,
    section 2; int64 scalars, -1 when absent; a bool scalar).

    ``in_graph`` is True for the variants that tensorflow-io's decoder gives
    exactly as Pillow does (checked in ``tests/decode/test_tiff_avif.py``): 1/2/4/8-bit
    gray (either polarity) and palette, 8-bit RGB, one plane, no extra samples
    (alpha), unsigned integer samples, compressed by none/CCITT/LZW/Deflate/
    PackBits. Every other variant (16-bit, float, CMYK, YCbCr, CIE L*a*b*,
    alpha, JPEG-compressed, planar) takes the Pillow fallback. The first
    ``TIFF_ENTRIES`` entries are read; two reads, no branch.
    """
    size = tf.cast(tf.strings.length(contents), tf.int64)
    little = tf.equal(tf.strings.substr(contents, 0, 1), b"I")

    def raw(s, dtype, n):
        return tf.cast(tf.where(little, tf.io.decode_raw(s, dtype, little_endian=True,
                                                         fixed_length=n),
                                tf.io.decode_raw(s, dtype, little_endian=False,
                                                 fixed_length=n)), tf.int64)

    def u32(v0, v1):
        return tf.where(little, v0 + v1 * 65536, v0 * 65536 + v1)

    hdr = raw(tf.strings.substr(contents, 0, 8), tf.uint16, 8)
    ifd = u32(hdr[2], hdr[3])
    n = 2 + 12 * TIFF_ENTRIES
    u = raw(tf.strings.substr(contents, tf.minimum(ifd, size), n), tf.uint16, n)
    tags, types, c0, c1, v0, v1 = tf.unstack(tf.reshape(u[1:], [TIFF_ENTRIES, 6]), num=6,
                                             axis=1)
    valid = _TIFF_INDEX < u[0]
    count = u32(c0, c1)
    value = tf.where(tf.equal(types, 3), v0, u32(v0, v1))  # SHORT: the first 2 bytes

    def get(tag, default=None):
        hit = valid & tf.equal(tags, tag)
        v = tf.reduce_max(tf.where(hit, value, -1))
        return v if default is None else tf.where(tf.reduce_any(hit), v, default)

    def first_short(tag, default):
        """A per-sample SHORT (BitsPerSample, SampleFormat): held elsewhere past two
        values; its first value."""
        at = tf.reduce_max(tf.where(valid & tf.equal(tags, tag) & (count > 2), u32(v0, v1), -1))
        far = raw(tf.strings.substr(contents, tf.clip_by_value(at, 0, size), 2), tf.uint16, 2)[0]
        return tf.where(at >= 0, far, get(tag, default))

    bits = first_short(0x0102, 1)
    photometric, spp = get(0x0106), get(0x0115, 1)
    compression = get(0x0103, 1)
    h, w = get(0x0101), get(0x0100)
    in_graph = ((h >= 0) & (w >= 0)
                & ((((photometric == 0) | (photometric == 1) | (photometric == 3)) & (spp == 1)
                    & ((bits == 1) | (bits == 2) | (bits == 4) | (bits == 8)))
                   | ((photometric == 2) & (spp == 3) & (bits == 8)))
                & (get(0x0152) < 0) & (first_short(0x0153, 1) == 1) & (get(0x011C, 1) == 1)
                & tf.reduce_any(tf.equal(compression, TIFF_GRAPH_COMPRESSIONS)))
    return h, w, in_graph


def header_size(contents, fmt, head=None, tfio_tiff: bool = False):
    """(height, width) as int64 scalars read from the header, -1 when unknown.

    Reads only header fields: nothing is decoded or allocated by image size (a
    TIFF's come from IFD0, ``tiff_header``). ``tfio_tiff`` is ignored (kept for
    callers).
    """
    b = bytes_at(contents, 0, 32) if head is None else head
    little = True
    minus1 = (tf.constant(-1, tf.int64), tf.constant(-1, tf.int64))

    def jpeg():
        s = tf.cast(tf.image.extract_jpeg_shape(contents), tf.int64)
        return s[0], s[1]

    def others():
        """PNG IHDR, GIF screen, BMP info header, WebP VP8/VP8L/VP8X: arithmetic on
        the head, one branch (fewer functions to trace than a switch)."""
        core = tf.equal(_u32(b, 14, little), 12)  # BMP OS/2 1.x: 16-bit fields
        bmp_w = tf.where(core, _u16(b, 18, little), _u32(b, 18, little))
        bmp_h = tf.where(core, _u16(b, 20, little), _u32(b, 22, little))
        bmp_h = tf.where(bmp_h >= 2 ** 31, 2 ** 32 - bmp_h, bmp_h)  # top-down: -height
        # a negative width is signed too: a bad header (the decoder refuses it), not a
        # 4-billion-pixel-wide image for the max_pixels guard
        bmp_w = tf.where(bmp_w >= 2 ** 31, bmp_w - 2 ** 32, bmp_w)
        chunk = b[15]  # "VP8X" / "VP8L" / "VP8 ": the 4th byte of the chunk name
        webp_h = tf.where(tf.equal(chunk, ord("X")), 1 + b[27] + 256 * (b[28] + 256 * b[29]),
                          tf.where(tf.equal(chunk, ord("L")),
                                   1 + (b[22] // 64 + b[23] * 4 + (b[24] % 16) * 1024),
                                   _u16(b, 28, little) % 16384))
        webp_w = tf.where(tf.equal(chunk, ord("X")), 1 + b[24] + 256 * (b[25] + 256 * b[26]),
                          tf.where(tf.equal(chunk, ord("L")), 1 + (b[21] + (b[22] % 64) * 256),
                                   _u16(b, 26, little) % 16384))
        hs = tf.stack([_u32(b, 20, False), _u16(b, 8, little), bmp_h, webp_h, -1])
        ws = tf.stack([_u32(b, 16, False), _u16(b, 6, little), bmp_w, webp_w, -1])
        k = tf.clip_by_value(tf.cast(fmt, tf.int64) - 1, 0, 4)
        def tiff():
            h, w, _ = tiff_header(contents)
            return h, w
        return tf.cond(tf.equal(fmt, _F.TIFF), tiff, lambda: (hs[k], ws[k]))

    return tf.cond(tf.equal(fmt, _F.JPEG), jpeg, others)


def webp_is_animated(head):
    """True for an extended WebP (VP8X) whose animation flag is set (head: int64 [>=21])."""
    vp8x = tf.equal(head[12], ord("V")) & tf.equal(head[13], ord("P")) & tf.equal(
        head[14], ord("8")) & tf.equal(head[15], ord("X"))
    return vp8x & tf.not_equal(tf.bitwise.bitwise_and(head[20], 2), 0)


def to_channels(image, channels: int):
    """Converts a uint8 image [h, w, n] (n in 1..4, dynamic) to exactly ``channels``.

    1 <- RGB(A) by ITU-R 601 luma; 3 <- gray by replication; alpha dropped when
    not requested, set to 255 when requested and absent.
    """
    n = tf.shape(image)[-1]

    def gray(x):
        return tf.image.rgb_to_grayscale(x[..., :3])

    def opaque(x):
        return tf.ones_like(x[..., :1]) * 255

    def from1(x):
        g = x[..., :1]
        return {1: g, 3: tf.concat([g, g, g], -1), 4: tf.concat([g, g, g, opaque(x)], -1)}[channels]

    def from2(x):
        g = x[..., :1]
        return {1: g, 3: tf.concat([g, g, g], -1), 4: tf.concat([g, g, g, x[..., 1:2]], -1)}[channels]

    def from3(x):
        rgb = x[..., :3]
        return {1: gray(rgb), 3: rgb, 4: tf.concat([rgb, opaque(x)], -1)}[channels]

    def from4(x):
        return {1: gray(x), 3: x[..., :3], 4: x[..., :4]}[channels]

    branches = [lambda: from1(image), lambda: from2(image), lambda: from3(image),
                lambda: from4(image)]
    out = tf.switch_case(tf.clip_by_value(n - 1, 0, 3), branches)
    out.set_shape([None, None, channels])
    return out


def from_rgb(image, channels: int):
    """A uint8 RGB image [h, w, 3] (static) as ``channels``: no switch, as ``to_channels``."""
    if channels == 3:
        return image
    if channels == 1:
        return tf.image.rgb_to_grayscale(image)
    return tf.concat([image, tf.ones_like(image[..., :1]) * 255], -1)


def apply_orientation(image, orientation):
    """Applies an EXIF orientation tag (int, 1-8; others mean 1) to [h, w, c].

    2 mirror, 3 rotate 180, 4 flip vertically, 5 transpose, 6 rotate 90 CW,
    7 transverse, 8 rotate 90 CCW (EXIF 2.32, tag 0x0112): a transpose for
    5-8, then a left-right flip for 2, 3, 6, 7 and an up-down flip for 3, 4, 7,
    8: ``perm`` and the flipped axes looked up by tag (no branch to trace).
    """
    o = tf.cast(orientation, tf.int32)
    o = tf.where((o >= 1) & (o <= 8), o, 0)
    # ``Reverse`` (bool per axis) takes the looked-up axes as they are
    return tf.raw_ops.Reverse(tensor=tf.transpose(image, tf.gather(_ORIENT_PERM, o)),
                              dims=tf.gather(_ORIENT_FLIP, o))


# per tag 0-8 (0: invalid, as 1): the transpose, and the axes flipped after it
_ORIENT_PERM = np.array([[0, 1, 2]] * 5 + [[1, 0, 2]] * 4, np.int32)
_ORIENT_FLIP = np.array([[o in (3, 4, 7, 8), o in (2, 3, 6, 7), False] for o in range(9)])


def diagnose(contents, fmt):
    """In graph: a reason string for a file whose decoder failed, from its bytes.

    The Python diagnosis (``pipeline.decode.guard.diagnose``), which also names the
    stage that failed, is used wherever Python can run; this one serves
    tf.data service workers.
    """
    size = tf.strings.length(contents)
    tail2 = tf.strings.substr(contents, tf.maximum(size - 2, 0), 2)
    tail = tf.strings.substr(contents, tf.maximum(size - 64, 0), 64)
    # byte-wise search (a regex would read the bytes as UTF-8 and miss it)
    no_iend = tf.size(tf.strings.split(tail, sep="IEND")) < 2
    name = tf.gather(tf.constant(_F.NAMES + ("unknown",)), fmt)
    first = bytes_text(tf.io.decode_raw(tf.strings.substr(contents, 0, 8), tf.uint8))
    reason = tf.strings.join(["corrupt ", name, " data (the decoder failed on it)"])
    reason = tf.where((fmt == _F.GIF) & tf.not_equal(
        tf.strings.substr(contents, tf.maximum(size - 1, 0), 1), b"\x3b"),
        "truncated GIF (no trailer byte)", reason)
    reason = tf.where((fmt == _F.PNG) & no_iend, "truncated PNG (no IEND end chunk)", reason)
    reason = tf.where((fmt == _F.JPEG) & tf.not_equal(tail2, b"\xff\xd9"),
                      "truncated JPEG (no end-of-image marker)", reason)
    reason = tf.cond(fmt == _F.JPEG, lambda: _unsupported_jpeg(contents, reason),
                     lambda: reason)
    reason = tf.where(fmt == _F.UNKNOWN, tf.strings.join(
        ["not an image (first bytes ", first, ")"]), reason)
    reason = tf.where(size == 0, "empty file (0 bytes)", reason)
    return reason


def _unsupported_jpeg(contents, reason):
    """In graph (``diagnose``): ``formats.jpeg_unsupported``'s name for a JPEG whose
    frame header (SOF marker and precision) is a valid variant TensorFlow's
    decoder does not read (a DHP segment is not looked for here), else ``reason``."""
    sof = jpeg_sof_offset(contents)
    b = bytes_at(contents, sof, 5)
    marker, precision = b[1], b[4]
    names = ["SOF%d" % i for i in range(16)]
    for m, name in _F.JPEG_PROCESS.items():
        names[m - 0xC0] = name
    name = tf.gather(tf.constant(names), tf.clip_by_value(marker - 0xC0, 0, 15))
    lossless_or_diff = tf.reduce_any(tf.equal(marker, [0xC3, 0xCB, 0xC5, 0xC6, 0xC7, 0xCD,
                                                       0xCE, 0xCF]))
    wide = tf.reduce_any(tf.equal(marker, [0xC1, 0xC2, 0xC9, 0xCA])) & (precision != 8)
    text = tf.strings.format("unsupported JPEG variant: {}-bit {} JPEG (SOF{}, P={}), a valid "
                             "JPEG that TensorFlow's decoder does not read; convert it to PNG "
                             "or an 8-bit baseline JPEG", (precision, name, marker - 0xC0,
                                                           precision))
    return tf.where((sof >= 0) & (lossless_or_diff | wide), text, reason)


# ---------------------------------------------------------------- PNG colour key

# Chunks walked after IHDR to find tRNS (it must come before IDAT).
PNG_MAX_CHUNKS = 64


def png_colour_key(contents):
    """In graph: a gray or RGB PNG's colour key (its ``tRNS`` chunk, PNG 1.2 §4.2.1.1).

    Args:
        contents: tf.string scalar, a PNG file.

    Returns:
        ``(keyed, key)``: bool scalar, True for colour type 0 (gray) or 2 (RGB)
        with a ``tRNS`` chunk before the first ``IDAT`` (within the first
        ``PNG_MAX_CHUNKS`` chunks) at least one key long (2 bytes gray, 6
        RGB: a shorter one is ignored, as libpng does; Pillow raises on it);
        int32 ``[3]``, the key's 16-bit values (gray: the first, repeated).
        Palette, gray + alpha and RGBA PNGs are never keyed here (palette
        transparency is libpng's own, exact).
    """
    ctype = bytes_at(contents, 25, 1)[0]
    size = tf.cast(tf.strings.length(contents), tf.int64)

    def be32(pos):
        b = bytes_at(contents, pos, 4)
        return ((b[0] * 256 + b[1]) * 256 + b[2]) * 256 + b[3]

    def find():
        def cond(i, pos, found):
            return (i < PNG_MAX_CHUNKS) & (found < 0) & (pos + 8 <= size)

        def body(i, pos, found):
            kind = tf.strings.substr(contents, pos + 4, 4)
            is_trns = tf.equal(kind, b"tRNS")
            stop = is_trns | tf.equal(kind, b"IDAT")
            found = tf.where(stop, tf.where(is_trns, pos, tf.constant(-2, tf.int64)), found)
            return i + 1, pos + 12 + be32(pos), found

        _, _, found = tf.while_loop(
            cond, body, (tf.constant(0), tf.constant(8, tf.int64), tf.constant(-1, tf.int64)))
        need = tf.where(tf.equal(ctype, 2), tf.constant(6, tf.int64), 2)
        ok = (found >= 8) & (be32(found) >= need) & (found + 8 + need <= size)
        b = bytes_at(contents, found + 8, 6)
        values = tf.cast(b[0::2] * 256 + b[1::2], tf.int32)
        key = tf.where(tf.equal(ctype, 2), values, tf.fill([3], values[0]))
        return ok, key

    return tf.cond(tf.equal(ctype, 0) | tf.equal(ctype, 2), find,
                   lambda: (tf.constant(False), tf.zeros([3], tf.int32)))


def png_keyed(contents, key):
    """In graph: a colour-keyed gray or RGB PNG as uint8 RGBA ``[h, w, 4]``, with
    Pillow's alpha (``Image.open(f).convert("RGBA")``, Pillow 13): 0 where the
    pixel matches the key, else 255; colour as ``decode_png`` gives it (1-4 bit
    gray scaled to 0-255, 16-bit as ``v >> 8``).

    Pillow's match, kept exactly (it departs from the PNG specification, which
    compares raw samples): Pillow's 8-bit pixel against the key's low byte
    (``rgbT2a`` in Pillow's ``Convert.c``), where that pixel is, for 1-bit
    gray, 0 or 255 with a key of 255 when non-zero; for 2- and 4-bit gray, the
    sample scaled to 0-255 (so of those only key 0 can match); for 8-bit, the
    sample; for 16-bit gray, the sample clipped to 255; for 16-bit RGB, the
    sample's high byte.

    Args:
        contents: tf.string scalar, a PNG of colour type 0 or 2.
        key: int32 ``[3]``, from ``png_colour_key``.
    """
    depth = tf.cast(bytes_at(contents, 24, 1)[0], tf.int32)
    wide = tf.cast(tf.io.decode_png(contents, channels=0, dtype=tf.uint16), tf.int32)
    n = tf.shape(wide)[-1]
    gray = tf.equal(n, 1)
    image = tf.where(depth == 16, tf.bitwise.right_shift(wide, 8), wide // 257)
    seen = tf.where((depth == 16) & gray, tf.minimum(wide, 255), image)
    key = tf.where(depth == 1, tf.where(key > 0, 255, 0), tf.bitwise.bitwise_and(key, 255))
    clear = tf.reduce_all(tf.equal(seen, key[:n]), axis=-1, keepdims=True)
    rgb = tf.cast(tf.gather(image, tf.where(gray, [0, 0, 0], [0, 1, 2]), axis=-1), tf.uint8)
    alpha = tf.where(clear, tf.constant(0, tf.uint8), tf.constant(255, tf.uint8))
    out = tf.concat([rgb, alpha], -1)
    out.set_shape([None, None, 4])
    return out


# ---------------------------------------------------------------- fallback

def pillow_image(contents: bytes) -> np.ndarray:
    """Slow fallback, in Python: the first frame (page) of an image, decoded by
    Pillow, as uint8 ``[height, width, n]``: n = 1 (gray), 2 (gray + alpha),
    3 (RGB) or 4 (RGBA), for ``to_channels`` to apply the module's channel rules.

    Sample rules beyond 8-bit (the same as for other formats where one exists):
    16-bit integer samples become ``v >> 8`` (as libpng's strip-16; Pillow
    already does so for 16-bit RGB); floating-point samples are taken as
    0.0-1.0 (the common convention of float images), clipped to it, and scaled
    as ``round(v * 255)`` (NaN as 0); 32-bit integer samples become ``v >> 24``
    (negative values 0). CIE L*a*b* (TIFF photometric 8) becomes sRGB through
    LittleCMS (``PIL.ImageCms``, D50 L*a*b* to sRGB, perceptual intent);
    CMYK and YCbCr by Pillow's own conversions; palettes expanded, with alpha
    when the palette has transparency. JPEGs are oriented by their EXIF tag.
    Raises whatever Pillow raises for a file it cannot decode.
    """
    from PIL import Image, ImageCms, ImageOps  # pylint: disable=import-outside-toplevel
    stack.pillow_plugins()
    with Image.open(io.BytesIO(contents)) as im:
        im.seek(0)
        im.load()
        im = ImageOps.exif_transpose(im) if im.format == "JPEG" else im
        mode = im.mode
        if mode.startswith("I;16"):
            arr = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
        elif mode == "I":
            arr = (np.clip(np.asarray(im, np.int64), 0, None) >> 24).astype(np.uint8)
        elif mode == "F":
            v = np.nan_to_num(np.asarray(im, np.float64), nan=0.0)
            arr = np.round(np.clip(v, 0.0, 1.0) * 255).astype(np.uint8)
        elif mode == "LAB":
            to_rgb = ImageCms.buildTransform(ImageCms.createProfile("LAB"),
                                             ImageCms.createProfile("sRGB"), "LAB", "RGB")
            arr = np.asarray(ImageCms.applyTransform(im, to_rgb), np.uint8)
        elif mode in ("1", "L"):
            arr = np.asarray(im.convert("L"), np.uint8)
        elif mode in ("LA", "La"):
            arr = np.asarray(im.convert("LA"), np.uint8)
        elif mode in ("RGBA", "RGBa", "PA") or "transparency" in im.info:
            arr = np.asarray(im.convert("RGBA"), np.uint8)
        else:
            arr = np.asarray(im.convert("RGB"), np.uint8)
    return arr.reshape(arr.shape[0], arr.shape[1], -1)


def pillow_decode(contents: bytes, channels: int) -> np.ndarray:
    """``pillow_image`` with exactly ``channels`` (1, 3 or 4), in NumPy: gray
    replicated, alpha dropped or set to 255; RGB to gray by Pillow's ITU-R 601
    luma (``convert("L")``, which may differ by 1 from ``to_channels``'s; the
    pipeline's fallback applies ``to_channels`` in graph instead)."""
    arr = pillow_image(contents)
    n = arr.shape[-1]
    if channels == 1 and n >= 3:
        from PIL import Image  # pylint: disable=import-outside-toplevel
        return np.asarray(Image.fromarray(arr[..., :3]).convert("L"))[..., None]
    gray = arr[..., :1]
    rgb = np.concatenate([gray] * 3, -1) if n <= 2 else arr[..., :3]
    alpha = arr[..., n - 1:] if n in (2, 4) else np.full_like(gray, 255)
    return {1: gray, 3: rgb, 4: np.concatenate([rgb, alpha], -1)}[channels]


class Decoder:
    """Builds the in-graph ``decode(contents) -> (image, reason)`` function.

    Args:
        channels: 1, 3 or 4, output channels.
        max_pixels: int, header width*height above this is refused (pixels).
        exif_orientation: bool, apply the JPEG EXIF orientation.
        tfio_formats: the optional formats ("webp", "tiff", "avif") whose
            tensorflow-io decoders are built into the graph (only where
            tensorflow-io's ops load; see ``pipeline.stack``).
        tfio_unusable: "" or why tensorflow-io cannot be used here (when it
            was probed): TIFF and AVIF files are then refused with it.
        bmp_in_graph: bool, build ``pipeline.decode.bmp``'s graph decoder for BMP
            variants (it is large: built when some file is named .bmp/.dib).
        fallback: bool, build the Pillow fallback (False on tf.data service
            workers, where Python cannot run).
        others_in_graph: bool, build the decoders of every format but JPEG into
            the graph. False (for datasets whose files are all named as JPEGs)
            leaves them out: a file whose content is not a JPEG is then decoded
            by the same decoder run eagerly from Python (``OTHERS_OP_NAME``; the
            same pixels and reasons, slowly). Ignored (True) without ``fallback``.

    Building the graph never imports tensorflow-io unless ``tfio_formats``
    asks for its decoders (it costs seconds).
    """

    def __init__(self, channels: int = 3, max_pixels: int = checks.DEFAULT_MAX_PIXELS,
                 exif_orientation: bool = True, tfio_formats=(), tfio_unusable: str = "",
                 bmp_in_graph: bool = False, fallback: bool = True,
                 others_in_graph: bool = True):
        self.channels = channels
        self.max_pixels = max_pixels
        self.exif = bool(exif_orientation)
        self.tfio_formats = set(tfio_formats)
        self.tfio_unusable = tfio_unusable
        self.bmp_in_graph = bmp_in_graph
        self.fallback = fallback
        self.others_in_graph = others_in_graph or not fallback
        self.core_webp = stack.core_webp()
        self.plugins = stack.pillow_plugins() if fallback else set()
        # The state of the Pillow fallback's Python side, per decoder (the graph of every
        # other format is shared by decoders of one configuration: ``_shared_others``, whose
        # py_functions find this decoder's state by its token).
        self._token = next(_DECODER_TOKENS)
        self._fallback_seen, self._fallback_lock, self.fallback_stats = _fallback_state(
            self._token)
        weakref.finalize(self, _FALLBACK_STATE.pop, self._token, None)
        self._graph_token = None  # the token tensor while ``_shared_others`` traces

    def graph_key(self) -> tuple:
        """What decides the graph this decoder builds: every attribute but the fallback's
        per-decoder state (hashable; sets as frozensets), and but ``tfio_unusable`` where
        no reason that quotes it can be met (``_optional_reasons``: with the fallback and
        Pillow's AVIF plugin), so that decoders that differ only there share one graph."""
        unread = ("tfio_unusable",) if self.fallback and "avif" in self.plugins else ()
        return (type(self),) + tuple(sorted(
            (k, frozenset(v) if isinstance(v, set) else v) for k, v in vars(self).items()
            if k not in _DECODER_STATE and k not in unread))

    def check_key(self) -> tuple:
        """What decides the graph of ``check_batch``: ``max_pixels`` and ``exif``."""
        return (type(self), self.max_pixels, self.exif)

    def placeholder(self):
        return tf.zeros([1, 1, self.channels], tf.uint8)

    # ------------------------------------------------------- the fallback, marked
    def takes_fallback(self, head: bytes,
                       read_at: Optional[Callable[[int, int], bytes]] = None) -> bool:
        """Whether a file with these first bytes (at least 64; 4 KB for a TIFF) is
        decoded by a slow Python path here (the Pillow fallback; or, without
        ``others_in_graph``, any file that is not a JPEG): the routing of
        ``decode`` in Python, for ``scan``'s report and the factories' log line.
        ``read_at(offset, size) -> bytes`` reads a TIFF's IFD0 past ``head``."""
        if not self.fallback:
            return False
        fmt = _F.sniff_bytes(head)
        if not self.others_in_graph and fmt != "jpeg":
            return True
        if fmt == "bmp":
            return not self.bmp_in_graph and not _plain_bmp(head)
        if fmt == "gif":
            return not _gif_plain(head)
        if fmt == "webp":
            animated = head[12:16] == b"VP8X" and len(head) > 20 and bool(head[20] & 2)
            return animated or not (self.core_webp or "webp" in self.tfio_formats)
        if fmt == "tiff":
            return "tiff" not in self.tfio_formats or not tiff_in_graph_bytes(head, read_at)
        if fmt == "heif":
            return "heif" in self.plugins
        if fmt == "avif":
            return "avif" in self.plugins
        return False

    def fallback_extensions(self) -> Set[str]:
        """The formats whose files are all decoded by the Pillow fallback here, by
        their extension ("heif", ...): counted at build time (``fallback_note``)."""
        if not self.fallback:
            return set()
        out = set()
        if "heif" in self.plugins:
            out.add("heif")
        if "avif" in self.plugins:
            out.add("avif")
        if not self.core_webp and "webp" not in self.tfio_formats:
            out.add("webp")
        if "tiff" not in self.tfio_formats:
            out.add("tiff")
        return out

    def fallback_note(self, paths: Sequence[str]) -> str:
        """"" or one line: how many of ``paths`` the Pillow fallback will decode, by
        extension (files whose content differs from their name are logged when
        met, see ``_fallback``)."""
        slow = self.fallback_extensions()
        if slow:
            slow &= _F.hinted_formats(paths)  # one str.endswith per path
        if not slow:
            return ""
        counts: Dict[str, int] = {}
        for p in paths:
            f = _F.from_extension(p)
            if f in slow:
                counts[f] = counts.get(f, 0) + 1
        if not counts:
            return ""
        kinds = ", ".join(f"{n} {_F.NAMES[_F.FORMATS.index(f)]}" for f, n in sorted(counts.items()))
        return (f"pipeline: {sum(counts.values())} file(s) decoded by the Pillow fallback "
                f"(slow path: Python in a py_function, holds the GIL): {kinds}")

    def _fallback(self, contents):
        """Slow path: Pillow in a py_function (see the module docstring). The first
        file of each kind (``formats.variant``) decoded here is logged, once per
        decoder: the fallback is never silent."""
        token = self._graph_token
        if token is None:
            token = tf.constant(self._token, tf.int64)

        def run(b, t):
            seen, lock, stats = _fallback_state(int(t))
            t0 = time.perf_counter()
            data = b.numpy()
            kind = _F.variant(data[:4096])
            with lock:
                first = kind not in seen
                seen.add(kind)
            if first:
                logging.warning("pipeline: %s file(s) are decoded by the Pillow fallback "
                                "(slow path: Python in a py_function, holds the GIL); "
                                "converting them to JPEG or PNG avoids it", kind)
            try:
                return pillow_image(data)
            finally:
                with lock:
                    stats[0] += 1
                    stats[1] += time.perf_counter() - t0

        img = tf.py_function(run, [contents, token], tf.uint8, name=FALLBACK_OP_NAME)
        img.set_shape([None, None, None])
        return to_channels(img, self.channels)

    def _png(self, contents):
        if self.channels == 4:
            # decode_png(channels=4) gives 1-, 2- and 4-bit gray and palette
            # PNGs an alpha of 1, 3 or 15 (their bit depth's maximum), not
            # 255: decode as stored and add an opaque alpha ourselves; a gray
            # or RGB PNG with a colour key (tRNS) takes ``png_keyed``.
            keyed, key = png_colour_key(contents)
            return tf.cond(keyed, lambda: png_keyed(contents, key),
                           lambda: to_channels(tf.io.decode_png(contents, channels=0), 4))
        return tf.io.decode_png(contents, channels=self.channels)

    def _gif(self, contents):
        """GIF -> (uint8 [h, w, channels], reason): the displayed first frame.
        ``tf.io.decode_gif`` for a first frame covering the screen with no
        transparency (``gif_plain``); the others by the Pillow fallback
        (transparent pixels: the stored palette colour, alpha 0), or refused
        where it cannot run."""
        plain = gif_plain(contents)
        decode = lambda: from_rgb(tf.io.decode_gif(contents)[0], self.channels)
        slow = (lambda: self._fallback(contents)) if self.fallback else self.placeholder
        img = tf.cond(plain, decode, slow)
        img.set_shape([None, None, self.channels])
        reason = tf.constant("") if self.fallback else tf.where(
            plain, "", _NO_FALLBACK % "a GIF with a transparent index or a first frame that "
            "does not cover the screen")
        return img, reason

    def _bmp(self, contents, head):
        """Plain BMPs (24-bit, uncompressed, 40-byte header, bottom-up rows) by
        TensorFlow's decoder; every other variant (palettes, RLE, 16/32-bit,
        bit fields, OS/2, v4/v5 headers, top-down) by ``pipeline.decode.bmp``'s graph
        decoder where the dataset has files named .bmp (or no Python), else by
        the Pillow fallback (TensorFlow's decoder reads palette indices as gray)."""
        little = True
        plain = (tf.equal(_u16(head, 28, little), 24) & tf.equal(_u32(head, 30, little), 0)
                 & tf.equal(_u32(head, 14, little), 40) & (_u32(head, 22, little) < 2 ** 31))
        decode = lambda: from_rgb(tf.io.decode_bmp(contents, channels=3), self.channels)
        if self.bmp_in_graph or not self.fallback:
            variant = lambda: bmp_lib.decode_bmp(contents, self.channels)
        else:
            variant = lambda: self._fallback(contents)
        img = tf.cond(plain, decode, variant)
        img.set_shape([None, None, self.channels])
        return img, tf.constant("")

    def _optional_reasons(self):
        """Per format id: "" (decoded here) or why it is refused (a static table)."""
        reasons = []
        for fid, name in enumerate(_F.FORMATS):
            why = ""
            if not self.fallback and name not in self.tfio_formats and fid in _F.OPTIONAL:
                why = _NO_FALLBACK % f"this {_F.NAMES[fid]} file"
                if fid in (_F.TIFF, _F.AVIF) and self.tfio_unusable:
                    why += (f" (tensorflow-io, which decodes it in graph, is unusable here: "
                            f"{self.tfio_unusable}; {stack.TFIO_STACK_HINT})")
            elif fid == _F.HEIF and "heif" not in self.plugins:
                why = ("HEIC/HEIF image (ISO-BMFF ftyp box, brand heic/mif1): no decoder for it is "
                       "installed; pip install pillow-heif to decode it (through the Pillow "
                       "fallback), or convert it to JPEG")
            elif fid == _F.AVIF and name not in self.tfio_formats and "avif" not in self.plugins:
                why = ("AVIF image (ISO-BMFF ftyp box, brand avif): no decoder for it is usable here"
                       + (f" (tensorflow-io: {self.tfio_unusable})" if self.tfio_unusable else "")
                       + "; files named .avif use tensorflow-io on the TensorFlow 2.16 stack, or "
                       "pip install pillow-avif-plugin (Pillow fallback), or convert to JPEG")
            reasons.append(why)
        return tf.constant(reasons + [""])

    def _optional(self, contents, fmt, head):
        """WebP (without a TensorFlow op), TIFF, HEIF, AVIF: tensorflow-io where it
        was built in and decodes the file as Pillow does (a still WebP; a TIFF
        that ``tiff_header`` finds plain; an AVIF only where Pillow cannot read
        AVIF), else the Pillow fallback (which names what is missing when it
        cannot decode a file), else a refusal."""
        reason = tf.gather(self._optional_reasons(), fmt)
        tfio = self.tfio_formats
        slow = (lambda: self._fallback(contents)) if self.fallback else self.placeholder
        tiff_ok = tiff_header(contents)[2] if "tiff" in tfio else None

        def branch(name):
            if name == "webp" and "webp" in tfio:
                fast = lambda: to_channels(_tfio().image.decode_webp(contents), self.channels)
                return lambda: tf.cond(webp_is_animated(head), slow, fast)
            if name == "tiff" and "tiff" in tfio:
                fast = lambda: to_channels(
                    _tfio().experimental.image.decode_tiff(contents, index=0), self.channels)
                return lambda: tf.cond(tiff_ok, fast, slow)
            if name == "avif" and "avif" in tfio and "avif" not in self.plugins:
                # tensorflow-io's AVIF colour conversion differs from Pillow's (up to
                # 63 levels on noise): Pillow's decoder is preferred where present
                return lambda: to_channels(
                    _tfio().experimental.image.decode_avif(contents), self.channels)
            return slow

        def decode():
            if not tfio:
                return slow()
            fids = list(_F.OPTIONAL)
            which = tf.constant([fids.index(f) if f in fids else 0
                                 for f in range(len(_F.FORMATS))])
            return tf.switch_case(tf.gather(which, tf.minimum(fmt, len(_F.FORMATS) - 1)),
                                  [branch(_F.FORMATS[f]) for f in fids])

        if not self.fallback and "webp" in tfio:
            reason = tf.where(tf.equal(fmt, _F.WEBP) & webp_is_animated(head),
                              _NO_FALLBACK % "an animated WebP (TensorFlow < 2.18)", reason)
        if not self.fallback and "tiff" in tfio:
            reason = tf.where(tf.equal(fmt, _F.TIFF) & ~tiff_ok, _NO_FALLBACK % (
                "a TIFF of a variant that tensorflow-io does not decode as Pillow does "
                "(16-bit, float, alpha, CMYK, YCbCr, L*a*b*, JPEG-compressed or planar)"), reason)
        img = tf.cond(tf.strings.length(reason) > 0, self.placeholder, decode)
        img.set_shape([None, None, self.channels])
        return img, reason

    # --------------------------------------------------------------- JPEG
    def _jpeg(self, contents, ratio=1, window=None):
        """JPEG -> uint8 [h, w, channels] (libjpeg always gives RGB: it converts
        gray, YCbCr and Adobe CMYK/YCCK; asking it for 1 channel fails on CMYK)."""
        if window is not None:
            img = tf.io.decode_and_crop_jpeg(contents, tf.stack(window), channels=3,
                                             ratio=ratio)
        else:
            img = tf.io.decode_jpeg(contents, channels=3, ratio=ratio)
        return from_rgb(img, self.channels)

    @staticmethod
    def dct_ratio_index(height, width, target, ceil: bool):
        """Which reduced scale (int32 scalar, an index into ``DCT_RATIOS``) keeps
        ``height`` x ``width`` pixels (a whole image: ``ceil``, as libjpeg rounds
        its scaled size up; a window: floor) at least ``target`` = (height,
        width) in both sides: the largest such reduction, except that 1/2 is
        taken from 2.4x on (``DCT_HALF_FROM``, 12/5: from 2x to about 2.3x a full
        decode + bilinear resize is the closer one to an antialiased resize,
        measured in ``benchmarks/resize_quality.py``). Of ``[k]`` sides, int32 ``[k]``.
        ``target``: two ints, or an int ``[2]`` tensor."""
        # one row per reduction (1/2, 1/4, 1/8, 1/16): the scaled side is
        # (side * p + a) // q -- 5 side // 12 >= t is "side >= 2.4 t"; ceil(side / 8)
        # // 2 >= t is (side + 7) // 16 >= t -- seven ops, whatever the rows
        num, den = DCT_HALF_FROM
        rows = np.array([[den, 0, num]] + [
            [1, (r - 1) if ceil else 0, r] for r in DCT_RATIOS[2:]], np.int64)
        if ceil:
            rows[-1, 1] = 7  # 1/16: ceil(side / 8) // 2, as _halve gives it
        sides = tf.cast(tf.stack([height, width], -1), tf.int64)
        scaled = (sides[..., None, :] * rows[:, :1] + rows[:, 1:2]) // rows[:, 2:]
        fits = tf.reduce_all(scaled >= tf.reshape(tf.cast(target, tf.int64), [1, 2]), axis=-1)
        return tf.reduce_sum(tf.cast(fits, tf.int32), -1)

    def _jpeg_scaled(self, contents, index, window=None, height=None, width=None):
        """A JPEG decoded at scale ``1 / DCT_RATIOS[index]`` (one lowered switch:
        ``ratio`` is an attribute of the decode op; 1/16 is libjpeg's 1/8 then
        a 2x2 box average). Whole (``index=None``: full scale, no switch), or
        only ``window`` = (oy, ox, h, w) in full-size pixels of an image
        ``height`` x ``width``: then (image, box), the reduced pixels that
        cover the window and the window in their units (``window_box``)."""
        if window is None and index is None:
            return self._jpeg(contents)
        if window is None:
            img = tf.switch_case(index, [
                (lambda r=r: _halve(tf.io.decode_jpeg(contents, channels=3, ratio=min(r, 8)), r))
                for r in DCT_RATIOS])
            return from_rgb(img, self.channels)
        if index is None:
            r, d = 1, 1
        else:
            r = tf.gather(tf.constant(DCT_RATIOS, tf.int32), index)
            d = tf.gather(tf.constant([min(r, 8) for r in DCT_RATIOS], tf.int32), index)
        m = r // d  # 2 at 1/16 (decoded at 1/8, then halved), else 1
        rows = (tf.cast(height, tf.int32) + d - 1) // d // m
        cols = (tf.cast(width, tf.int32) + d - 1) // d // m
        y0, x0, hh, ww, box = window_box(window, r, rows, cols)
        # in the decoded (1/d) grid
        oy, ox, ch, cw = y0 * m, x0 * m, hh * m, ww * m
        wide = cols * m
        # libjpeg-turbo's cropped decode upsamples subsampled chroma (4:2:0,
        # 4:2:2: a triangle filter over the neighbouring chroma samples) at
        # the decoded columns' edges as if they were the image's: its first
        # column (an iMCU boundary, so a multiple of 8) and, when odd, its
        # last one came out up to ~60 levels off decode-then-crop. One more column on such a side (clamped to the image) gives
        # every window pixel its real neighbours; the slice trims it and is
        # a no-copy identity when nothing was added.
        xa = tf.where((ox % 8 == 0) & (ox > 0), ox - 1, ox)
        xb = ox + cw + tf.cast(((ox + cw) % 2 == 0) & (ox + cw < wide), tf.int32)
        if index is None:
            img = self._jpeg(contents, window=(oy, xa, ch, xb - xa))[:, ox - xa:ox - xa + cw]
            return img, box
        crop = tf.stack([oy, xa, ch, xb - xa])
        img = tf.switch_case(index, [
            (lambda r=r: _halve(tf.io.decode_and_crop_jpeg(
                contents, crop, channels=3, ratio=min(r, 8))[:, ox - xa:ox - xa + cw], r))
            for r in DCT_RATIOS])
        return from_rgb(img, self.channels), box

    def _jpeg_fast(self, contents, h, w, window_fn, target, scale=None):
        """A JPEG displayed as stored: the window only, at the largest DCT scale
        that keeps it (or the whole image) at least ``target``, or whole. With
        a window and a target: (image, box) (``_jpeg_scaled``). ``scale``: the DCT
        scale index planned for the whole image (``check_batch``), or None."""
        if window_fn is None and target is None:
            return self._jpeg(contents)
        if window_fn is None:
            if scale is None:
                scale = self.dct_ratio_index(h, w, target, ceil=True)
            return self._jpeg_scaled(contents, scale)
        shape = tf.stack([tf.cast(h, tf.int32), tf.cast(w, tf.int32), tf.constant(3)])
        window = window_fn(shape)
        index = (None if target is None
                 else self.dct_ratio_index(window[2], window[3], target, ceil=False))
        img, box = self._jpeg_scaled(contents, index, window, h, w)
        return img if target is None else (img, box)

    def _jpeg_special(self, contents, h, w, too_big, orientation, window_fn, target):
        """The rare JPEGs: a header over ``max_pixels`` (refused), or an EXIF
        orientation other than 1 (decoded whole, at the DCT scale the displayed
        image or window allows, oriented, then cropped). One function call
        (``bmp.unlowered_case``) that runs only the branch taken. Returns as
        ``_jpeg_path``."""
        with_box = window_fn is not None and target is not None
        boxed = (lambda img: (whole_box(img),)) if with_box else (lambda img: ())

        def refuse():
            img = self.placeholder()
            return (img, tf.strings.format(
                "header claims {}x{} pixels > max_pixels={}", (w, h, self.max_pixels))) + \
                boxed(img) + (_shape(h, w),)

        def oriented():
            o = tf.cast(orientation, tf.int32)
            swap = (o >= 5) & (o <= 8)  # transposed: displayed height is the stored width
            dh, dw = tf.where(swap, w, h), tf.where(swap, h, w)
            window = None
            if window_fn is not None:
                window = window_fn(tf.cast(tf.stack([dh, dw, 3]), tf.int32))
            if target is None:
                index = None
            elif window is None:
                index = self.dct_ratio_index(dh, dw, target, ceil=True)
            else:
                index = self.dct_ratio_index(window[2], window[3], target, ceil=False)
            img = apply_orientation(self._jpeg_scaled(contents, index), orientation)
            if window is None:
                img.set_shape([None, None, self.channels])
                return (img, tf.constant("")) + boxed(img) + (_shape(dh, dw),)
            r = 1 if index is None else tf.gather(tf.constant(DCT_RATIOS, tf.int32), index)
            s = tf.shape(img)
            oy, ox, ch, cw, box = window_box(window, r, s[0], s[1])
            img = img[oy:oy + ch, ox:ox + cw]
            img.set_shape([None, None, self.channels])
            return (img, tf.constant("")) + ((box,) if with_box else ()) + (_shape(dh, dw),)

        return bmp_lib.unlowered_case(tf.cast(tf.logical_not(too_big), tf.int32),
                                      [refuse, oriented])

    def _jpeg_path(self, contents, words, window_fn, target, checked=None):
        """The hot path, for files that start as a JPEG: the header's size
        (``extract_jpeg_shape``: SOF only), the bomb guard and the EXIF
        orientation (``exif_orientation``: no branch taken unless the first 32
        bytes say an EXIF block may be there), then one lowered cond whose
        common branch is the decode alone and whose rare branch (refused or
        rotated) is one function call (``bmp.unlowered_case``). Returns (image,
        reason[, box with a window and a target], displayed full-size shape
        int32 [2]).

        Measured (one thread, the 1,000 sample photos, ``decode_jpeg`` alone
        1,478 µs per image): a decode inside a function call costs some 450 µs
        more than the same decode inline, so only refused and rotated files
        (0.3% of the sample) decode there; the 31% whose EXIF segments must be
        walked make a small call that returns the orientation.

        Returns the branch's (image, reason[, box]), then the frame's component count
        (int32 scalar) and whether the image is the file decoded as stored (bool scalar:
        full scale, whole, not turned), both for ``_jpeg_cut``. ``checked``: this file's
        entries of ``check_batch`` when it settled them (the header, orientation and
        scale are then not read again)."""
        scale = None
        if checked is None:
            h, w, comps = tf.unstack(tf.cast(tf.image.extract_jpeg_shape(contents), tf.int64),
                                     num=3)
            too_big = h * w > self.max_pixels
            o = exif_orientation(contents, words) if self.exif else tf.constant(1, tf.int32)
        else:  # settled by ``check_batch``: never over max_pixels
            h, w, comps, o = (checked[k] for k in ("height", "width", "components",
                                                   "orientation"))
            too_big = tf.constant(False)
            scale = checked.get("scale") if window_fn is None else None
        special = too_big | (o > 1) if self.exif else too_big

        def fast():
            out = self._jpeg_fast(contents, h, w, window_fn, target, scale)
            img, box = out if isinstance(out, tuple) else (out, None)
            img.set_shape([None, None, self.channels])
            return (img, tf.constant("")) + (() if box is None else (box,)) + (_shape(h, w),)

        def rare():
            return self._jpeg_special(contents, h, w, too_big, o, window_fn, target)

        out = tf.cond(special, rare, fast)
        out[0].set_shape([None, None, self.channels])
        # the image is the file decoded as stored (full scale, whole, not turned): the cut
        # check's probe reuses it
        if window_fn is None:
            whole = tf.logical_not(special) & tf.reduce_all(tf.equal(
                tf.shape(out[0])[:2], tf.cast(tf.stack([h, w]), tf.int32)))
        else:
            whole = tf.constant(False)
        return tuple(out) + (tf.cast(comps, tf.int32), whole)

    def _jpeg_cut(self, contents, img, reason, components, scans=None, whole=None, sof=None):
        """The reason of a JPEG cut inside its scan data with an end-of-image
        marker after the cut (it decodes without error; ``pipeline.decode.jpegscan``),
        or ``reason`` as it was. Hot path: four corner pixels compared with
        mid-gray (a cut sequential JPEG decodes as level 128 from the cut on)
        and one byte split counting SOS markers (a progressive JPEG has
        several). ``components`` (int32 scalar, the frame's, 4 for Adobe
        CMYK / YCCK) gives the level of that fill. Rare paths: a progressive
        file's scan headers checked in graph
        (``jpegscan.progressive_scans_complete``), then whether its decoder
        reads past its data (``jpegscan.reads_past_end``, two decodes: a cut
        inside the last scan); a file with a mid-gray corner (4 of the 1,000
        sample photos) checked in graph (``jpegscan.restarts_short``, then
        ``reads_past_end``), and walked in Python only when those flag it
        (``_sequential_cut_reason``: the walk names the MCU where the data ends). ``scans``: the SOS
        count (int32 scalar) when ``check_batch`` counted it. ``whole``: bool scalar,
        True when ``img`` is the file decoded as stored (``_jpeg_path``): the progressive
        check then decodes the file once more instead of twice. ``sof``: the frame
        marker's offset (int64 scalar) when ``check_batch`` found it."""
        c = min(self.channels, 3)
        last = tf.maximum(tf.shape(img)[:2] - 1, 0)
        corners = tf.gather_nd(img, tf.stack([last * 0, [0, last[1]], [last[0], 0], last]))
        # zero coefficients: level 128 (127: rgb_to_grayscale of (128, 128, 128) with
        # channels=1); a 4-component (Adobe CMYK / YCCK) file's 128s are (64, 64, 64) once
        # TensorFlow converts them to RGB (R = C K / 255), 63 for YCCK
        top = tf.where(tf.equal(components, 4), tf.constant(64, tf.uint8), 128)
        corners = corners[:, :c]
        mid_gray = tf.reduce_any(tf.reduce_all((corners >= top - 1) & (corners <= top), axis=1))
        mid_gray = mid_gray & (tf.size(img) > c)
        # the split op alone: ``tf.strings.split`` builds a RaggedTensor (some 60 ops)
        if scans is None:  # else counted by ``check_batch``
            scans = scan_markers(contents[None])[0]
        good = tf.equal(reason, "")

        if whole is None or self.channels != 3:
            decoded, whole = tf.zeros([0, 0, 3], tf.uint8), tf.constant(False)
        else:
            decoded = img
        sof = tf.constant(-1, tf.int64) if sof is None else tf.cast(sof, tf.int64)
        progressive = lambda: _progressive_cut_reason(self.fallback)(contents, mid_gray,
                                                                     decoded, whole, sof)
        sequential = lambda: _sequential_cut_call(self.fallback)(contents, decoded, whole)
        index = tf.where(good & (scans > 1), 1, tf.where(good & mid_gray, 2, 0))
        # the call only for a suspect (a lowered cond around it: a function call costs
        # some 100 us even when its branch returns "")
        why = tf.cond(index > 0, lambda: bmp_lib.unlowered_case(
            index - 1, [progressive, sequential]), lambda: tf.constant(""))
        return tf.where(tf.equal(why, ""), reason, why)

    # ------------------------------------------------------- checks on a batch
    def check_batch(self, contents, target=None):
        """The header checks of ``decode`` for a batch of files, as vector ops.

        Args:
            contents: str ``[k]``, the files' bytes (``Dataset.batch`` of the read).
            target: the ``target`` that ``decode`` will get, to plan a whole image's
                DCT scale here (give it only when ``decode`` gets no ``window_fn``).

        Returns:
            dict of ``[k]`` tensors, for ``decode(..., checked=)`` once unbatched:
            ``settled`` (bool: a JPEG whose route is chosen here: an 8-bit
            baseline, extended or progressive frame (SOF0/1/2) of 1, 3 or 4
            components found by ``jpeg_headers``' walk, within ``max_pixels``);
            ``height``, ``width``, ``components`` (int64, the frame's);
            ``orientation`` (int32, 1-8, ``exif_orientation``'s value; 1 without
            ``exif_orientation``); ``scans`` (int32, SOS markers, for the cut
            check of a progressive frame; 1 for a sequential one, whose count
            does not change that check's answer); ``sof`` (int64, the frame
            marker's offset, for the cut check of a progressive frame); with
            ``target``, ``scale`` (int32, ``dct_ratio_index``).
            Every other file (other formats, a bomb, an unusual or damaged header)
            is not settled: ``decode`` checks it alone, as without the batch, so
            reasons and per-file errors are unchanged.

        Never raises on bad bytes (nothing here fails: a file that does not parse
        is unsettled), so one bad file cannot fail its batch. Some 90 ops for the
        batch, plus about 20 per walk step (``jpeg_headers``).
        """
        words = header_words(contents)
        sof, exif_at, bad = jpeg_headers(contents)
        frame = bytes_at(contents, sof, 10)  # FF Cn, length, P, Y, X, Nf
        precision, nf = frame[:, 4], frame[:, 9]
        h, w = frame[:, 5] * 256 + frame[:, 6], frame[:, 7] * 256 + frame[:, 8]
        settled = (is_jpeg(words) & ~bad & (sof >= 0) & tf.equal(precision, 8) & (h > 0)
                   & (w > 0) & (tf.equal(nf, 1) | tf.equal(nf, 3) | tf.equal(nf, 4))
                   & (h * w <= self.max_pixels))
        o = tf.ones_like(sof, tf.int32)
        if self.exif:
            route = exif_route(words)
            seg = tf.where(tf.equal(route, ROUTE_AT_2), tf.constant(2, tf.int64), tf.where(
                tf.equal(route, ROUTE_AT_20), tf.constant(20, tf.int64),
                tf.where(tf.equal(route, ROUTE_WALK), exif_at, -1)))
            # read in the files that have an EXIF block alone (8% of the sample photos)
            has = tf.where(seg >= 0)[:, 0]
            o = tf.tensor_scatter_nd_update(o, has[:, None], app1_orientation(
                tf.gather(contents, has), tf.gather(seg, has)))
        # SOS markers, counted in the progressive files alone (a byte split copies
        # the file: ~75 us for a 110 KB photo); in a sequential frame the count does
        # not change the cut check's answer (``_jpeg_cut``: several scans of a
        # sequential frame are checked as one), so 1 stands for it
        prog = tf.where(settled & tf.equal(frame[:, 1], 0xC2))[:, 0]
        scans = tf.tensor_scatter_nd_update(tf.ones_like(o), prog[:, None],
                                            scan_markers(tf.gather(contents, prog)))
        out = {"settled": settled, "height": h, "width": w, "components": nf,
               "orientation": o, "scans": scans, "sof": sof}
        if target is not None:
            swap = (o >= 5) & (o <= 8)
            out["scale"] = self.dct_ratio_index(tf.where(swap, w, h), tf.where(swap, h, w),
                                                target, ceil=True)
        return out

    # -------------------------------------------------------------- entry
    def decode(self, contents, window_fn: Optional[Callable] = None, target=None,
               with_box: bool = False, with_shape: bool = False, checked=None):
        """Encoded bytes -> (uint8 image [h, w, channels], reason: str scalar, "" when good).

        Args:
            contents: str scalar, the file's bytes.
            window_fn: optional ``f(shape [3] int32) -> (offset_y, offset_x,
                height, width)``, pixels: only that window of the displayed
                (oriented) image is returned; JPEGs decode only it.
            target: optional (height, width) the caller resizes to: a JPEG
                (or its window) at least 2x, 4x or 8x larger in both sides is
                decoded at that reduced scale (libjpeg's DCT scaling), leaving
                less to resize: the result is then ``ceil(h / r)`` x
                ``ceil(w / r)`` pixels (a window: each of its offsets and sides
                floor-divided by ``r``). Not the pixels of a full decode +
                resize (a different filter, closer to an antialiased resize).
                With a window, the reduced pixels that cover it are returned
                (its edges need not fall on the reduced grid): ``with_box``
                says where the window lies in them.
            with_box: also return ``box``, float32 ``[4]`` (offset_y,
                offset_x, height, width) of the asked window in the returned
                image's pixels (the whole image when there is no window or
                no target); ``transform.resize_box`` resamples exactly it.
            with_shape: also return ``shape``, int32 ``[2]``: (height, width)
                of the whole displayed image at full scale (EXIF orientation
                applied; what ``window_fn`` is given), whatever was decoded
                (a window, a reduced scale); a refused file's header size or
                (1, 1).
            checked: optional dict, this file's entries of ``check_batch`` (scalars,
                after ``unbatch``): a file it settled is decoded by the route it chose,
                without reading its header again; any other file is checked here.

        Returns (image, reason), then ``box`` with ``with_box``, then ``shape``
        with ``with_shape``.

        Faults found before decoding (unknown format, a header over
        ``max_pixels``, a format with no decoder here) give a reason and a
        1x1 placeholder. A decoder that fails on corrupt data raises.

        Cost: the graph is split so that a JPEG runs few ops besides its
        decode: one lowered ``tf.cond`` on the first bytes, whose other
        branch (every other format) is a single function call
        (``bmp.unlowered_case``). Measured on the 1,000 sample photos, one
        thread (``benchmarks/decode_cost.py``): about 230 µs per image over a
        bare ``decode_jpeg`` (1,485 µs), most of it the EXIF read of files
        whose segments must be walked.
        """
        if window_fn is None and self._graph_token is None and not tf.executing_eagerly():
            return _shared_decode(self, target, with_box, with_shape, checked)(
                self, contents, checked)
        return self._decode(contents, window_fn, target, with_box, with_shape, checked)

    def _decode(self, contents, window_fn, target, with_box, with_shape, checked):
        """``decode``, built here (``_shared_decode`` builds it once per configuration)."""
        c = self.channels
        boxed = window_fn is not None and target is not None
        if checked is not None:  # (``check_stage`` carries its int32 entries as int64)
            checked = {k: tf.cast(v, tf.int32) if k in CHECKED_INT32 else v
                       for k, v in checked.items()}

        def jpeg(words):  # (image, reason[, box], shape)
            out = self._jpeg_path(contents, words, window_fn, target)
            return (out[0], self._jpeg_cut(contents, out[0], out[1], out[-2],
                                           whole=out[-1])) + tuple(out[2:-2])

        def routed():  # the per-file checks
            words = header_words(contents)
            return tf.cond(is_jpeg(words), lambda: jpeg(words),
                           lambda: self._other_formats(contents, window_fn, boxed))

        if checked is None:
            out = routed()
        else:
            def settled():  # (the same as ``jpeg``, with the header read by the batch)
                out = self._jpeg_path(contents, None, window_fn, target, checked)
                return (out[0], self._jpeg_cut(
                    contents, out[0], out[1], out[-2], checked["scans"], whole=out[-1],
                    sof=checked.get("sof"))) + tuple(out[2:-2])
            out = tf.cond(checked["settled"], settled, routed)
        img, reason, shape = out[0], out[1], out[-1]
        img.set_shape([None, None, c])
        shape.set_shape([2])
        extra = (out[2] if boxed else whole_box(img),) if with_box else ()
        return (img, reason) + extra + ((shape,) if with_shape else ())

    def _other_formats(self, contents, window_fn, boxed: bool):
        """``decode``'s branch for every format but JPEG: one function call
        (``bmp.unlowered_case``), in graph or, in a JPEG-only graph, from Python.
        Returns (image, reason[, box], shape) as ``decode``'s JPEG branch."""
        if not self.others_in_graph and not tf.executing_eagerly():
            out = bmp_lib.unlowered_case(tf.constant(0), [
                lambda: self._others_from_python(contents, window_fn)])
        else:
            out = bmp_lib.unlowered_case(tf.constant(0), [
                lambda: self._others(contents, window_fn)])
        return (out[0], out[1]) + ((whole_box(out[0]),) if boxed else ()) + (out[2],)

    def _others_from_python(self, contents, window_fn):
        """Rare path of a JPEG-only graph (``others_in_graph=False``): a file that
        is not a JPEG, decoded by ``_others`` run eagerly in a ``tf.py_function``
        (the ops the full graph runs, so the same pixels and reason), then
        windowed in graph as ``_others`` does (and returns as it does). The first
        file of each kind (``formats.variant``) is logged, once per decoder."""
        c = self.channels
        token = self._graph_token
        if token is None:
            token = tf.constant(self._token, tf.int64)

        def run(b, t):
            seen, lock, _ = _fallback_state(int(t))
            head = b.numpy()[:4096]
            kind = _F.variant(head)
            with lock:  # bytes of no known format are bad files, named by the guard
                first = _F.sniff_bytes(head) is not None and "other: " + kind not in seen
                seen.add("other: " + kind)
            if first:
                logging.warning("pipeline: %s file(s) met in a dataset whose files are all "
                                "named as JPEGs: their decoder runs from Python (slow path: the "
                                "graph holds the JPEG decoder only); naming files by their "
                                "format (.png, ...) decodes them in graph", kind)
            return self._others_whole(b, t)[:2]

        img, reason = tf.py_function(run, [contents, token], [tf.uint8, tf.string],
                                     name=OTHERS_OP_NAME)
        img.set_shape([None, None, c])
        reason.set_shape([])
        shape = tf.shape(img)[:2]
        if window_fn is not None:
            oy, ox, ch, cw = window_fn(tf.shape(img))
            img = img[oy:oy + ch, ox:ox + cw]
        return img, reason, shape

    def _others(self, contents, window_fn):
        """Every format but JPEG: sniff, header size and bomb guard, one Case (built once
        per process for decoders of one ``graph_key``: ``_shared_others``), then the window
        of a good image. Returns (image, reason, the whole image's shape int32 [2])."""
        token = self._graph_token
        if token is None:
            token = tf.constant(self._token, tf.int64)
        if tf.executing_eagerly():
            img, reason, shape = self._others_whole(contents, token)
        else:
            img, reason, shape = _shared_others(self)(contents, token)
        if window_fn is not None:
            def crop():
                oy, ox, ch, cw = window_fn(tf.shape(img))
                return img[oy:oy + ch, ox:ox + cw]
            img = tf.cond(tf.equal(reason, ""), crop, lambda: img)
        img.set_shape([None, None, self.channels])
        return img, reason, shape

    def _others_whole(self, contents, token):
        """``_others`` without the window: (image, reason, shape int32 [2]); ``token``
        (int64 scalar) names the decoder whose fallback state the py_functions use."""
        outer, self._graph_token = self._graph_token, token
        try:
            return self._others_cases(contents)
        finally:
            self._graph_token = outer

    def _others_cases(self, contents):
        head = bytes_at(contents, 0, 64)
        fmt = sniff(contents, head[:_F.SIGNATURE_BYTES])
        h, w = header_size(contents, fmt, head, tfio_tiff="tiff" in self.tfio_formats)
        too_big = h * w > self.max_pixels
        c = self.channels

        def bad():
            reason = tf.strings.format("header claims {}x{} pixels > max_pixels={}",
                                       (w, h, self.max_pixels))
            n = tf.minimum(8, tf.strings.length(contents))  # no made-up zero padding
            first = bytes_text(head[:n])
            unknown = tf.where(tf.equal(tf.strings.length(contents), 0), "empty file (0 bytes)",
                               tf.strings.join(["not an image (first bytes ", first, ")"]))
            img = self.placeholder()
            return img, tf.where(fmt == _F.UNKNOWN, unknown, reason), tf.shape(img)[:2]

        def other(fn):
            def run():
                img, reason = fn()
                img.set_shape([None, None, c])
                return img, reason, tf.shape(img)[:2]
            return run

        branches = [
            bad,  # JPEG: never here (``decode`` routes it by the same signature)
            other(lambda: (self._png(contents), tf.constant(""))),
            other(lambda: self._gif(contents)),
            other(lambda: self._bmp(contents, head)),
        ]
        # Formats past BMP: WebP by TensorFlow's own op where it exists, the
        # rest (and WebP otherwise) through ``_optional``.
        if self.core_webp:
            # tf.io.decode_webp corrupts the heap on animated WebP (TensorFlow 2.21: the
            # process aborts with "free(): corrupted unsorted chunks"): those take the
            # Pillow fallback (its first frame), or are refused without Python.
            def webp():
                still = lambda: to_channels(tf.io.decode_webp(contents)[0], c)
                animated = webp_is_animated(head)
                if self.fallback:
                    return tf.cond(animated, lambda: self._fallback(contents), still), \
                        tf.constant("")
                return tf.cond(animated, self.placeholder, still), tf.where(
                    animated, _NO_FALLBACK % "an animated WebP (TensorFlow's WebP decoder "
                    "crashes on it)", "")
            branches.append(other(webp))
        branches.append(other(lambda: self._optional(contents, fmt, head)))
        branches.append(bad)
        first_optional = len(branches) - 2
        index = tf.where(too_big | (fmt == _F.UNKNOWN) | (fmt == _F.JPEG), len(branches) - 1,
                         tf.minimum(fmt, first_optional))
        img, reason, shape = tf.switch_case(index, branches)
        img.set_shape([None, None, c])
        return img, reason, shape


CHECK_BATCH = 64  # files per ``check_stage`` batch: the per-op cost shared by 64


def check_stage(ds, decoder: "Decoder", contents_at: int, target=None,
                batch: int = CHECK_BATCH, parallelism=None):
    """``ds`` (tuples whose item ``contents_at`` is a file's bytes, str scalar) with one
    item more: the file's ``Decoder.check_batch`` entries (a dict of scalars, for
    ``decode(..., checked=)``), from a ``batch`` of files at a time, then unbatched
    (order kept). ``target``: as ``check_batch`` (only when ``decode`` gets no
    ``window_fn``). The input must not raise (put ``ignore_errors`` after a read
    that can): an error in a batch would lose its other files."""
    checks = _shared_check(decoder, None if target is None else tuple(int(t) for t in target))

    def add(*el):
        out = checks(el[contents_at])
        # int32 entries travel as int64: a function returning an int32 it computed cannot
        # run on its one device (``stack.map_on_its_device``); ``decode`` casts them back
        return el + ({k: tf.cast(v, tf.int64) if k in CHECKED_INT32 else v
                      for k, v in out.items()},)
    add = tf.autograph.experimental.do_not_convert(add)
    # on its device: the multi-device runtime would run Grappler over its ~950 ops at every
    # iterator (each epoch), some 0.15 CPU-s
    return stack.map_on_its_device(ds.batch(batch), add, parallelism,
                                   None if parallelism is None else True).unbatch()


# ``check_batch``'s int32 entries (``check_stage`` passes them on as int64)
CHECKED_INT32 = ("orientation", "scans", "scale")


# Decoders' tokens; the fallback's Python state of each live decoder, by token: (kinds
# logged, lock, [files decoded, seconds]); an entry leaves with its decoder.
_DECODER_TOKENS = itertools.count(1)
_FALLBACK_STATE: Dict[int, tuple] = {}
_DECODER_STATE = ("_token", "_fallback_seen", "_fallback_lock", "fallback_stats",
                  "_graph_token")
_SHARED_OTHERS: Dict[tuple, Callable] = {}


_SHARED_DECODES: Dict[tuple, Callable] = {}


def _shared_decode(decoder: "Decoder", target, with_box: bool, with_shape: bool,
                   checked) -> Callable:
    """``f(caller, contents, checked) -> caller.decode(contents, target=target, with_box=,
    with_shape=, checked=checked)`` without a ``window_fn``: ``decoder._decode`` traced once
    per process for each ``graph_key``, outputs and ``checked`` entries
    (``stack.traced_once``), so that a factory call does not build the JPEG path, its rare
    branches and the other formats' call again (about 1 CPU-s of Python). The target size
    and the calling decoder's token are inputs: one graph serves every image size, and the
    py_functions inside find the fallback state of the decoder that calls them."""
    sized = target is not None
    names = () if checked is None else tuple(sorted(checked))
    dtypes = tuple(tf.as_dtype(checked[k].dtype) for k in names)
    key = (decoder.graph_key(), sized, bool(with_box), bool(with_shape), names, dtypes)
    call = _SHARED_DECODES.get(key)
    if call is None:
        specs = [tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int64),
                 tf.TensorSpec([2], tf.int64)] + [tf.TensorSpec([], d) for d in dtypes]

        def body(contents, token, size, *values):
            decoder._graph_token = token
            try:
                return tuple(decoder._decode(contents, None, size if sized else None, with_box,
                                             with_shape, dict(zip(names, values)) or None))
            finally:
                decoder._graph_token = None
        call = _SHARED_DECODES.setdefault(key, stack.traced_once(*specs)(body))

    def fn(caller: "Decoder", contents, checked):
        values = [] if checked is None else [checked[k] for k in names]
        size = tf.constant(list(target) if sized else [0, 0], tf.int64)
        return call(contents, tf.constant(caller._token, tf.int64), size, *values)
    return fn


def _fallback_state(token: int) -> tuple:
    """The fallback state of the decoder with ``token`` (a new one if it is gone)."""
    return _FALLBACK_STATE.setdefault(token, (set(), threading.Lock(), [0, 0.0]))


def _shared_others(decoder: "Decoder") -> Callable:
    """``f(contents, token) -> (image, reason, shape)``: ``decoder._others_whole`` traced
    once per process for each ``graph_key`` (``stack.traced_once``), so that a factory call
    does not build the decoders of every other format again (about 1 CPU-s of Python)."""
    key = decoder.graph_key()
    fn = _SHARED_OTHERS.get(key)
    if fn is None:
        fn = stack.traced_once(tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int64))(
            decoder._others_whole)  # pylint: disable=protected-access
        fn = _SHARED_OTHERS.setdefault(key, fn)
    return fn


_SHARED_CHECKS: Dict[tuple, Callable] = {}


def _shared_check(decoder: "Decoder", target) -> Callable:
    """``f(contents str [k]) -> dict``: ``decoder.check_batch(contents, target)`` traced once
    per process for each ``check_key``, with or without a target (``stack.traced_once``;
    the target size is an input): its vector
    ops (some 950) are built once, not at every factory call (about 0.5 CPU-s each);
    at run time it is one ``Case`` op per batch of files."""
    sized = target is not None
    key = (decoder.check_key(), sized)
    shared = _SHARED_CHECKS.get(key)
    if shared is None:
        names: List[str] = []

        def flat(contents, size):
            out = decoder.check_batch(contents, size if sized else None)
            names[:] = sorted(out)
            return tuple(out[k] for k in names)

        shared = _SHARED_CHECKS.setdefault(key, (stack.traced_once(
            tf.TensorSpec([None], tf.string), tf.TensorSpec([2], tf.int64))(flat), names))
    call, names = shared

    def fn(contents):
        size = tf.constant(list(target) if sized else [0, 0], tf.int64)
        values = call(contents, size)  # traces on the first call, which fills ``names``
        values = values if isinstance(values, tuple) else (values,)
        return dict(zip(names, values))
    return fn


_NO_FALLBACK = ("%s needs the Pillow fallback decoder, which cannot run on tf.data service "
                "workers (service=)")
