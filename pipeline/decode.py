"""Decode: sniff -> guard -> decode -> channels -> orientation, all in graph.

``load`` turns a file path into a ``uint8`` image ``[height, width, channels]``
plus a reason string ("" when the file is good). Every fault found before
decoding becomes a reason that travels with the element; the assemble stage
turns it into an error naming the path (``on_error="raise"``) or a recorded
skip (``on_error="skip"``).

* The decoder is chosen from the file's first bytes, never its extension:
  JPEG, PNG, GIF and BMP by TensorFlow; WebP and TIFF by tensorflow-io, whose
  ops are only put in the graph (and the module only imported) when the index
  found such a file or cannot know (remote URIs).
* Before any decode, the header's width and height are read (PNG IHDR, GIF
  logical screen, BMP info header, WebP VP8/VP8L/VP8X, JPEG SOF via
  ``tf.image.extract_jpeg_shape``, TIFF via tensorflow-io) and a file claiming
  more than ``max_pixels`` pixels is refused without allocating its pixels.
* A decoder that still fails (corrupt or truncated data) raises; the assemble
  stage drops that element with ``ignore_errors()``, finds which file it was
  from the element positions, and ``diagnose`` names the fault from the bytes
  (truncated JPEG without its EOI marker, PNG without IEND, ...).

Channels: every image comes out with exactly ``channels`` (1, 3 or 4) whatever
the file holds. Gray is replicated to RGB; RGB to gray uses ITU-R 601 luma
(``tf.image.rgb_to_grayscale``); alpha is dropped when not asked for (colour
under transparent pixels is kept as stored, not composited) and set to 255 when
asked for and absent. 16-bit PNG samples become 8-bit as ``v >> 8`` (libpng's
strip-16). Animated GIF and WebP give their first frame. CMYK/YCCK JPEGs are
converted to RGB by libjpeg (Adobe inverted CMYK handled).

EXIF orientation (tags 1-8, as in the EXIF 2.32 spec / Pillow's
``ImageOps.exif_transpose``) is applied to JPEGs when ``exif_orientation`` is
on. The tag is read at index time with Pillow (headers only; see
``pipeline.index.read_orientation``) and travels with the element as an int
code; only where it could not be read there (remote URIs, TFRecords, headers
Pillow cannot parse) is it read in graph by
``tfio.experimental.image.decode_jpeg_exif``.
"""

from __future__ import annotations

import tensorflow as tf

FORMATS = ("jpeg", "png", "gif", "bmp", "webp", "tiff")
JPEG, PNG, GIF, BMP, WEBP, TIFF, UNKNOWN = range(7)
FORMAT_NAMES = ("JPEG", "PNG", "GIF", "BMP", "WebP", "TIFF", "unknown")


def _tfio():
    import tensorflow_io as tfio  # lazily: only when a format needs it
    return tfio


def _padded_head(contents, n=16):
    """The first n bytes, zero-padded: safe to slice whatever the file's length
    (``tf.strings.substr`` raises when its position is past the end)."""
    return tf.strings.join([tf.strings.substr(contents, 0, n), b"\x00" * n])


def sniff(contents):
    """Format id (int32 scalar, see ``FORMATS``; 6 = unknown) from the first bytes."""
    head = _padded_head(contents)
    at = lambda pos, n: tf.strings.substr(head, pos, n)
    checks = [
        (JPEG, tf.equal(at(0, 3), b"\xff\xd8\xff")),
        (PNG, tf.equal(at(0, 8), b"\x89PNG\r\n\x1a\n")),
        (GIF, tf.logical_or(tf.equal(at(0, 6), b"GIF87a"), tf.equal(at(0, 6), b"GIF89a"))),
        (BMP, tf.equal(at(0, 2), b"BM")),
        (WEBP, tf.logical_and(tf.equal(at(0, 4), b"RIFF"), tf.equal(at(8, 4), b"WEBP"))),
        (TIFF, tf.logical_or(tf.equal(at(0, 4), b"II*\x00"), tf.equal(at(0, 4), b"MM\x00*"))),
    ]
    fmt = tf.constant(UNKNOWN, tf.int32)
    for fid, cond in reversed(checks):
        fmt = tf.where(cond, tf.constant(fid, tf.int32), fmt)
    return fmt


def _head_bytes(contents, n=32):
    """The first n bytes as int64 [n], zero-padded for short files."""
    head = tf.strings.substr(contents, 0, n)
    pad = tf.strings.substr(tf.constant(b"\x00" * n), 0, n - tf.strings.length(head))
    return tf.cast(tf.io.decode_raw(tf.strings.join([head, pad]), tf.uint8), tf.int64)


def header_size(contents, fmt, use_tfio: bool):
    """(height, width) as int64 scalars read from the header, -1 when unknown.

    Reads only header fields: nothing is decoded or allocated by image size.
    """
    b = _head_bytes(contents, 32)

    def le(i, n):
        v = tf.constant(0, tf.int64)
        for k in reversed(range(n)):
            v = v * 256 + b[i + k]
        return v

    def be(i, n):
        v = tf.constant(0, tf.int64)
        for k in range(n):
            v = v * 256 + b[i + k]
        return v

    def png():
        return be(20, 4), be(16, 4)

    def gif():
        return le(8, 2), le(6, 2)

    def bmp():
        w = le(18, 4)
        h = le(22, 4)
        h = tf.where(h >= 2 ** 31, 2 ** 32 - h, h)  # top-down BMPs store -height
        return h, w

    def webp():
        chunk = tf.strings.substr(_padded_head(contents, 16), 12, 4)
        vp8x = (1 + le(27, 3), 1 + le(24, 3))
        vp8l = (1 + (b[22] // 64 + b[23] * 4 + (b[24] % 16) * 1024),
                1 + (b[21] + (b[22] % 64) * 256))
        vp8 = (le(28, 2) % 16384, le(26, 2) % 16384)
        h = tf.where(tf.equal(chunk, b"VP8X"), vp8x[0],
                     tf.where(tf.equal(chunk, b"VP8L"), vp8l[0], vp8[0]))
        w = tf.where(tf.equal(chunk, b"VP8X"), vp8x[1],
                     tf.where(tf.equal(chunk, b"VP8L"), vp8l[1], vp8[1]))
        return h, w

    def jpeg():
        s = tf.cast(tf.image.extract_jpeg_shape(contents), tf.int64)
        return s[0], s[1]

    def tiff():
        if not use_tfio:
            return tf.constant(-1, tf.int64), tf.constant(-1, tf.int64)
        shape, _ = _tfio().experimental.image.decode_tiff_info(contents)
        return shape[0, 0], shape[0, 1]

    def unknown():
        return tf.constant(-1, tf.int64), tf.constant(-1, tf.int64)

    return tf.switch_case(fmt, [jpeg, png, gif, bmp, webp, tiff], default=unknown)


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


def apply_orientation(image, orientation):
    """Applies an EXIF orientation tag (int, 1-8; others mean 1) to [h, w, c].

    2 mirror, 3 rotate 180, 4 flip vertically, 5 transpose, 6 rotate 90 CW,
    7 transverse, 8 rotate 90 CCW (EXIF 2.32, tag 0x0112).
    """
    o = tf.cast(orientation, tf.int32)
    o = tf.where((o >= 1) & (o <= 8), o, 1)
    t = lambda x: tf.transpose(x, [1, 0, 2])
    branches = [
        lambda: image,
        lambda: image[:, ::-1],
        lambda: image[::-1, ::-1],
        lambda: image[::-1],
        lambda: t(image),
        lambda: t(image)[:, ::-1],
        lambda: t(image)[::-1, ::-1],
        lambda: t(image)[::-1],
    ]
    return tf.switch_case(o - 1, branches)


def exif_code(exif):
    """Per-element orientation code, int32 scalar: 0 or 1 = as stored, 2-8 =
    apply that EXIF tag, -1 = read the tag in graph. A bool (the file has an
    EXIF segment, tag unknown) becomes -1 / 0."""
    exif = tf.convert_to_tensor(exif)
    if exif.dtype == tf.bool:
        return tf.where(exif, -1, 0)
    return tf.cast(exif, tf.int32)


def diagnose(contents, fmt):
    """A reason string for a file whose decoder failed, from its bytes."""
    size = tf.strings.length(contents)
    tail2 = tf.strings.substr(contents, tf.maximum(size - 2, 0), 2)
    tail = tf.strings.substr(contents, tf.maximum(size - 64, 0), 64)
    # byte-wise search (a regex would read the bytes as UTF-8 and miss it)
    no_iend = tf.size(tf.strings.split(tail, sep="IEND")) < 2
    name = tf.gather(tf.constant(FORMAT_NAMES), fmt)
    first = tf.strings.reduce_join(
        tf.strings.as_string(tf.io.decode_raw(tf.strings.substr(contents, 0, 8), tf.uint8)),
        separator=" ")
    reason = tf.strings.join(["corrupt ", name, " data (the decoder failed on it)"])
    reason = tf.where((fmt == GIF) & tf.not_equal(
        tf.strings.substr(contents, tf.maximum(size - 1, 0), 1), b"\x3b"),
        "truncated GIF (no trailer byte)", reason)
    reason = tf.where((fmt == PNG) & no_iend, "truncated PNG (no IEND end chunk)", reason)
    reason = tf.where((fmt == JPEG) & tf.not_equal(tail2, b"\xff\xd9"),
                      "truncated JPEG (no end-of-image marker)", reason)
    reason = tf.where(fmt == UNKNOWN, tf.strings.join(
        ["not an image (first bytes ", first, ")"]), reason)
    reason = tf.where(size == 0, "empty file (0 bytes)", reason)
    return reason


class Decoder:
    """Builds the in-graph ``load(path, exif, pre_error)`` function.

    Args:
        channels: 1, 3 or 4, output channels.
        max_pixels: int, header width*height above this is refused (pixels).
        exif_orientation: bool, apply the JPEG EXIF orientation.
        use_tfio: bool, put tensorflow-io decoders (WebP, TIFF, EXIF) in the graph.
        exif_in_graph: bool, some file may need orienting (else no orientation
            branch is built). Elements carry an ``exif`` code (see
            ``exif_code``); code -1 reads the tag with tensorflow-io when
            ``use_tfio``, and is left as stored otherwise.
    """

    def __init__(self, channels=3, max_pixels=178_956_970, exif_orientation=True,
                 use_tfio=False, exif_in_graph=False, only_format=None,
                 pre_errors=True):
        self.channels = channels
        self.max_pixels = max_pixels
        self.use_tfio = use_tfio
        self.exif = bool(exif_orientation and exif_in_graph)
        self.exif_tfio = self.exif and use_tfio
        # only_format: the index saw only this format (e.g. "jpeg"): the graph
        # then holds that decoder alone, with no format dispatch. A file that
        # changed since indexing makes its decoder raise and is reported.
        self.only = FORMATS.index(only_format) if only_format in FORMATS[:4] else None
        self.pre_errors = pre_errors

    def placeholder(self):
        return tf.zeros([1, 1, self.channels], tf.uint8)

    @staticmethod
    def _needs_orienting(code):
        return (code < 0) | (code > 1)

    def _orientation(self, contents, code):
        """The EXIF tag for an element whose code says it needs orienting."""
        if not self.exif_tfio:
            return code  # -1 (unknown) is left as stored by apply_orientation
        return tf.cond(code < 0, lambda: tf.cast(
            _tfio().experimental.image.decode_jpeg_exif(contents), tf.int32), lambda: code)

    def _orient(self, img, contents, code):
        if not self.exif:
            return img
        return tf.cond(self._needs_orienting(code),
                       lambda: apply_orientation(img, self._orientation(contents, code)),
                       lambda: img)

    def _decode(self, contents, fmt, code, ratio=1):
        c = self.channels

        def jpeg():
            img = tf.io.decode_jpeg(contents, channels=3, ratio=ratio)  # RGB (see _jpeg)
            if c != 3:
                img = to_channels(img, c)
            return self._orient(img, contents, code)

        def png():
            if c == 4:
                # decode_png(channels=4) gives 1-, 2- and 4-bit gray and palette
                # PNGs an alpha of 1, 3 or 15 (their bit depth's maximum), not
                # 255: decode as stored and add an opaque alpha ourselves.
                return to_channels(tf.io.decode_png(contents, channels=0), 4)
            return tf.io.decode_png(contents, channels=c)

        def gif():
            return to_channels(tf.io.decode_gif(contents)[0], c)

        def bmp():
            return to_channels(tf.io.decode_bmp(contents, channels=0), c)

        def webp():
            return to_channels(_tfio().image.decode_webp(contents), c)

        def tiff():
            return to_channels(_tfio().experimental.image.decode_tiff(contents, index=0), c)

        branches = [jpeg, png, gif, bmp]
        if self.use_tfio:
            branches += [webp, tiff]
        if self.only is not None:
            img = branches[self.only]()
            img.set_shape([None, None, c])
            return img
        img = tf.switch_case(tf.minimum(fmt, len(branches) - 1), branches)
        img.set_shape([None, None, c])
        return img

    @staticmethod
    def _crop(img, window_fn):
        oy, ox, ch, cw = window_fn(tf.shape(img))
        return img[oy:oy + ch, ox:ox + cw]

    def _jpeg(self, contents, ratio=1, window=None, orientation=None):
        """JPEG -> uint8 [h, w, channels]; optional DCT ``ratio``, crop ``window``
        (decode_and_crop_jpeg: only the window is decoded) or EXIF orientation."""
        c = self.channels
        # Always RGB from libjpeg: it converts gray, YCbCr and (Adobe) CMYK /
        # YCCK; asking it for 1 channel fails on CMYK files.
        if window is not None:
            img = tf.io.decode_and_crop_jpeg(contents, tf.stack(window), channels=3)
        else:
            img = tf.io.decode_jpeg(contents, channels=3, ratio=ratio)
        if c != 3:
            img = to_channels(img, c)
        if orientation is not None:
            img = apply_orientation(img, orientation)
        img.set_shape([None, None, c])
        return img

    def _checked(self, path, code, window_fn=None, target=None):
        """Reads and decodes; returns (image, reason). May raise on corrupt data."""
        return self._checked_bytes(tf.io.read_file(path), code, window_fn, target)

    def _checked_bytes(self, contents, code, window_fn=None, target=None):
        """Decodes encoded bytes; returns (image, reason). May raise on corrupt data.

        window_fn: optional ``f(shape [3] int32) -> (oy, ox, h, w)``: only that
            window of the (displayed) image is returned; JPEGs decode only it.
        target: optional (height, width): a JPEG at least 2x, 4x or 8x larger
            in both dimensions is decoded at that reduced scale (libjpeg's DCT
            scaling, ``ratio``), leaving less to resize.
        """
        jpeg_only = self.only == JPEG
        if self.only is not None:
            fmt = tf.constant(self.only, tf.int32)
            if jpeg_only:
                shape = tf.image.extract_jpeg_shape(contents)
                s = tf.cast(shape, tf.int64)
                h, w = s[0], s[1]
            else:
                h, w = header_size(contents, fmt, self.use_tfio)
            unsupported = tf.constant(False)
        else:
            fmt = sniff(contents)
            h, w = header_size(contents, fmt, self.use_tfio)
            unsupported = (fmt == UNKNOWN) | ((fmt >= WEBP) & (not self.use_tfio))
        too_big = h * w > self.max_pixels

        def why():  # only runs for a bad file
            name = tf.gather(tf.constant(FORMAT_NAMES), fmt)
            reason = tf.strings.format("header claims {}x{} pixels > max_pixels={}",
                                       (w, h, self.max_pixels))
            reason = tf.where(unsupported, tf.strings.join(
                [name, " needs tensorflow-io, which this graph was built without"]), reason)
            return self.placeholder(), tf.where(fmt == UNKNOWN, diagnose(contents, fmt), reason)

        ok = tf.constant("")
        if jpeg_only:
            # One switch per element: 0 bad header; the last branch decodes a
            # file with EXIF orientation whole and orients it; the others are
            # the fast paths (window only, or reduced DCT scale).
            def oriented():
                img = self._jpeg(contents, orientation=self._orientation(contents, code))
                return (self._crop(img, window_fn) if window_fn is not None else img), ok

            if window_fn is not None:
                fast = [lambda: (self._jpeg(contents, window=window_fn(shape)), ok)]
                normal = tf.constant(1)
            elif target is not None:
                fast = [(lambda r=r: (self._jpeg(contents, ratio=r), ok)) for r in (1, 2, 4, 8)]
                need = tf.cast(max(target), tf.int64)
                small = tf.minimum(h, w)
                normal = 1 + tf.add_n([tf.cast(small >= r * need, tf.int32) for r in (2, 4, 8)])
            else:
                fast = [lambda: (self._jpeg(contents), ok)]
                normal = tf.constant(1)
            branches = [why] + fast
            if self.exif:
                branches.append(oriented)
                normal = tf.where(self._needs_orienting(code), len(branches) - 1, normal)
            return tf.switch_case(tf.where(too_big, 0, normal), branches)
        if window_fn is not None:
            return tf.cond(too_big | unsupported, why, lambda: (
                self._crop(self._decode(contents, fmt, code), window_fn), ok))
        return tf.cond(too_big | unsupported, why,
                       lambda: (self._decode(contents, fmt, code), ok))

    def load(self, path, exif, pre_error, window_fn=None, target=None):
        """Path -> (uint8 image [h, w, channels], reason str; "" when good).

        Args:
            path: str scalar, file path or URI.
            exif: int32 scalar orientation code (``exif_code``: 0 none, 2-8
                apply that tag, -1 read it in graph), or a bool scalar (the
                index saw an EXIF segment, tag unknown).
            pre_error: str scalar, a reason found at index time ("" if none).
            window_fn: optional ``f(shape) -> (offset_y, offset_x, h, w)``,
                pixels: return only that window of the displayed image
                (JPEG: decode only it).
            target: optional (height, width) the caller will resize to: JPEGs
                at least 2x/4x/8x larger in both sides decode at reduced scale.

        Faults found before decoding (pre_error from the index, unknown
        format, header over ``max_pixels``) give a reason and a 1x1
        placeholder. A decoder that fails on corrupt data raises, as do
        read errors; the assemble stage catches those with
        ``ignore_errors`` and names the file by its position (see
        ``pipeline.build``), so this hot path carries no per-element
        exception machinery.
        """
        return self._guarded(path, exif, pre_error,
                             lambda p, e: self._checked(p, e, window_fn, target))

    def load_bytes(self, contents, exif, pre_error, window_fn=None, target=None):
        """Encoded bytes (e.g. from a TFRecord) -> (uint8 image [h, w, channels], reason).

        Same arguments, checks and reasons as ``load``; nothing is read from disk.
        """
        return self._guarded(contents, exif, pre_error,
                             lambda c, e: self._checked_bytes(c, e, window_fn, target))

    def _guarded(self, source, exif, pre_error, checked):
        code = exif_code(exif)
        if not self.pre_errors:  # the index found no bad file: no check needed
            img, reason = checked(source, code)
        else:
            img, reason = tf.cond(tf.strings.length(pre_error) > 0,
                                  lambda: (self.placeholder(), pre_error),
                                  lambda: checked(source, code))
        img.set_shape([None, None, self.channels])
        return img, reason
