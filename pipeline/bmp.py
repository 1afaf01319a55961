"""BMP decoding in pure TensorFlow graph ops (usable inside ``tf.data.Dataset.map``).

Which paths are vectorised and which loop:

* 24-bit BGR and 32-bit BGRX/BGRA (BI_RGB, or BI_BITFIELDS with the byte-aligned
  masks): vectorised. One ``substr`` + ``decode_raw``, one strided slice that crops
  the row padding and flips bottom-up rows, one channel reverse. No per-pixel work.
* 1/2/4/8-bit palette images: vectorised. Sub-byte indices are unpacked with bit
  shifts, then one ``tf.gather`` on a 256-entry colour table (the table is made
  gray/RGBA first, so ``channels`` costs nothing per pixel).
* 16/24/32-bit BI_BITFIELDS / BI_ALPHABITFIELDS with any contiguous masks:
  vectorised int64 bit ops (and, shift, scale).
* RLE8 / RLE4: a ``tf.while_loop`` with one iteration per 2-byte RLE code (not per
  pixel) that records runs; the pixels are then expanded vectorised
  (``searchsorted`` + ``gather``). RLE is rare; this path is the slow one.

The path is picked from the header with ``tf.switch_case``; only the chosen branch
runs. Format sources: the Microsoft BMP documentation (BITMAPFILEHEADER,
BITMAPCOREHEADER, BITMAPINFOHEADER, BITMAPV4HEADER, BITMAPV5HEADER, "Bitmap
Compression"), the bmpsuite test corpus by Jason Summers, and Pillow's
``BmpImagePlugin``, which is the reference the tests compare with.

This module is standalone: it imports only TensorFlow.
"""

import tensorflow as tf

__all__ = ["decode_bmp", "bmp_header"]

# Bytes of the file read for the header: BITMAPFILEHEADER (14) + BITMAPV5HEADER (124)
# + up to 4 colour masks stored after a 40-byte BITMAPINFOHEADER (16).
_HEAD = 14 + 124 + 16
# BITMAPCOREHEADER (OS/2 1.x), BITMAPINFOHEADER, V2, V3, OS/2 2.x, V4, V5.
_HEADER_SIZES = (12, 40, 52, 56, 64, 108, 124)
_BI_RGB, _BI_RLE8, _BI_RLE4, _BI_BITFIELDS, _BI_JPEG, _BI_PNG = 0, 1, 2, 3, 4, 5
_BI_ALPHABITFIELDS = 6
_PATH_PALETTE, _PATH_RLE, _PATH_BGR24, _PATH_BGRA32, _PATH_MASKS = range(5)


def _c(value):
    return tf.constant(value, tf.int64)


def _check(cond, message):
    return tf.debugging.Assert(cond, ["BMP: " + message])


class _Header:
    """Header fields as int64 scalar tensors, plus the asserts that validate them."""

    def __init__(self, contents):
        contents = tf.convert_to_tensor(contents, tf.string)
        contents.shape.assert_has_rank(0)
        self.contents = contents
        raw = tf.io.decode_raw(tf.strings.substr(contents, 0, _HEAD), tf.uint8)
        raw = tf.cast(tf.pad(raw, [[0, _HEAD - tf.size(raw)]]), tf.int64)
        self.n = tf.cast(tf.strings.length(contents), tf.int64)

        def u16(o):
            return raw[o] + raw[o + 1] * 256

        def u32(o):
            return u16(o) + u16(o + 2) * 65536

        self.magic_ok = tf.logical_and(tf.equal(raw[0], 66), tf.equal(raw[1], 77))
        hs = u32(14)
        self.hs = hs
        self.core = tf.equal(hs, 12)  # OS/2 1.x BITMAPCOREHEADER: 16-bit fields
        core = self.core
        h32 = u32(22)
        h32 = tf.where(h32 >= 2 ** 31, h32 - 2 ** 32, h32)
        w32 = u32(18)
        w32 = tf.where(w32 >= 2 ** 31, w32 - 2 ** 32, w32)
        self.width = tf.where(core, u16(18), w32)
        height = tf.where(core, u16(20), h32)
        self.top_down = tf.less(height, 0)
        self.height = tf.abs(height)
        self.bits = tf.where(core, u16(24), u16(28))
        self.comp = tf.where(core, tf.constant(0, tf.int64), u32(30))
        bits, comp = self.bits, self.comp

        # Colour masks: in the header from V2 on, after a 40-byte header otherwise;
        # in both cases at file offsets 54, 58, 62 (and 66 for alpha).
        is_bf = tf.equal(comp, _BI_BITFIELDS)
        is_abf = tf.equal(comp, _BI_ALPHABITFIELDS)
        has_a = tf.logical_or(is_abf, tf.logical_and(is_bf, hs >= 56))
        r, g, b = u32(54), u32(58), u32(62)
        a = tf.where(has_a, u32(66), 0)
        use_file = tf.logical_or(is_bf, is_abf)
        zero_rgb = tf.logical_and(tf.equal(r | g | b, 0), tf.equal(a, 0))
        # BI_RGB defaults: 16-bit is 5-5-5; 32-bit is BGRX (the 4th byte is
        # ignored, as Pillow does). All-zero BITFIELDS masks mean the defaults
        # (Pillow reads 32-bit all-zero masks as BGRA).
        is16, is32 = tf.equal(bits, 16), tf.equal(bits, 32)
        dr = tf.where(is16, _c(0x7C00), _c(0xFF0000))
        dg = tf.where(is16, _c(0x3E0), _c(0xFF00))
        db = tf.where(is16, _c(0x1F), _c(0xFF))
        da = tf.where(tf.logical_and(is32, use_file), _c(0xFF000000), _c(0))
        default = tf.logical_or(tf.logical_not(use_file), zero_rgb)
        self.masks = [
            tf.cast(tf.where(default, d, m), tf.int64)
            for d, m in ((dr, r), (dg, g), (db, b), (da, a))
        ]
        mask_extra = tf.where(
            tf.equal(hs, 40),
            tf.where(is_bf, 12, tf.where(is_abf, 16, 0)),
            tf.where(tf.logical_and(tf.equal(hs, 52), is_abf), 4, 0),
        )
        self.header_end = 14 + hs + tf.cast(mask_extra, tf.int64)

        # Palette: right after the header (Pillow reads it there), 3-byte entries
        # for OS/2 1.x, 4-byte otherwise; biClrUsed == 0 means 2**bits entries.
        self.paletted = bits <= 8
        self.entry = tf.where(core, _c(3), _c(4))
        colors = tf.where(core, tf.constant(0, tf.int64), u32(46))
        full = tf.bitwise.left_shift(tf.constant(1, tf.int64), tf.minimum(bits, 8))
        self.colors = tf.where(tf.equal(colors, 0), full, colors)
        self.palette_used = tf.minimum(self.colors, full)  # entries an index can reach
        pal_bytes = tf.where(self.paletted, self.entry * self.colors, 0)

        # Pixel data offset (bfOffBits). Like Pillow: 0 means "right after the
        # header and palette", and an offset that points at the palette is moved
        # past it.
        off = u32(10)
        off = tf.where(tf.equal(off, 0), self.header_end + pal_bytes, off)
        off = tf.where(
            tf.logical_and(tf.equal(off, 14 + hs), self.paletted), off + pal_bytes, off
        )
        self.offset = off
        self.row_bytes = (self.width * bits + 7) // 8
        self.stride = (self.width * bits + 31) // 32 * 4
        self.rle = tf.logical_or(tf.equal(comp, _BI_RLE8), tf.equal(comp, _BI_RLE4))

    def dims_checks(self):
        known = tf.reduce_any(tf.equal(self.hs, tf.constant(_HEADER_SIZES, tf.int64)))
        return [
            _check(self.magic_ok, "not a BMP file (no 'BM' signature)"),
            _check(known, "unsupported or corrupt info header size"),
            _check(self.n >= 14 + tf.minimum(self.hs, 124), "file truncated in the header"),
            _check(
                tf.logical_and(self.width > 0, self.height > 0),
                "bad header: width and height must be positive",
            ),
        ]

    def decode_checks(self):
        bits, comp, hs = self.bits, self.comp, self.hs
        os2v2 = tf.equal(hs, 64)
        bits_ok = tf.reduce_any(tf.equal(bits, tf.constant([1, 2, 4, 8, 16, 24, 32], tf.int64)))
        direct = tf.logical_and(bits >= 16, tf.logical_not(os2v2))
        comp_ok = tf.logical_or(
            tf.equal(comp, _BI_RGB),
            tf.logical_or(
                tf.logical_or(
                    tf.logical_and(tf.equal(comp, _BI_RLE8), tf.equal(bits, 8)),
                    tf.logical_and(tf.equal(comp, _BI_RLE4), tf.equal(bits, 4)),
                ),
                tf.logical_and(
                    tf.logical_or(tf.equal(comp, _BI_BITFIELDS), tf.equal(comp, _BI_ALPHABITFIELDS)),
                    direct,
                ),
            ),
        )
        masks_ok = tf.constant(True)
        for m in self.masks:
            low = tf.bitwise.bitwise_and(m, -m)
            top = tf.bitwise.right_shift(m, tf.bitwise.bitwise_and(_ctz(m), 63))
            contiguous = tf.equal(tf.bitwise.bitwise_and(top, top + 1), 0)
            fits = tf.equal(tf.bitwise.right_shift(m, bits), 0)
            masks_ok = tf.logical_and(
                masks_ok, tf.logical_or(tf.equal(low, 0), tf.logical_and(contiguous, fits))
            )
        masks_ok = tf.logical_or(bits <= 8, masks_ok)
        n, off = self.n, self.offset
        pal_end = self.header_end + self.entry * self.palette_used
        data_need = off + self.stride * (self.height - 1) + self.row_bytes
        pixels = self.width * self.height
        return [
            _check(self.n >= self.header_end, "file truncated in the header"),
            _check(bits_ok, "unsupported bits per pixel"),
            _check(
                comp_ok,
                "unsupported compression (JPEG/PNG-in-BMP, OS/2 Huffman/RLE24, or a "
                "compression that does not fit the bit depth)",
            ),
            _check(masks_ok, "unsupported BITFIELDS colour masks (not contiguous or wider than a pixel)"),
            _check(
                tf.logical_or(
                    tf.logical_not(self.paletted), tf.logical_and(self.colors <= 65536, pal_end <= n)
                ),
                "bad or truncated colour palette",
            ),
            _check(off <= n, "pixel data offset past the end of the file"),
            _check(
                tf.logical_or(self.rle, data_need <= n), "pixel data truncated"
            ),
            _check(pixels * 4 < 2 ** 31, "image too large"),
        ]

    def path(self):
        r, g, b, a = self.masks
        bgr = tf.logical_and(
            tf.logical_and(tf.equal(r, 0xFF0000), tf.equal(g, 0xFF00)), tf.equal(b, 0xFF)
        )
        bits = self.bits
        return tf.where(
            self.rle,
            _PATH_RLE,
            tf.where(
                self.paletted,
                _PATH_PALETTE,
                tf.where(
                    tf.logical_and(tf.logical_and(tf.equal(bits, 24), bgr), tf.equal(a, 0)),
                    _PATH_BGR24,
                    tf.where(
                        tf.logical_and(
                            tf.logical_and(tf.equal(bits, 32), bgr),
                            tf.logical_or(tf.equal(a, 0), tf.equal(a, 0xFF000000)),
                        ),
                        _PATH_BGRA32,
                        _PATH_MASKS,
                    ),
                ),
            ),
        )


def _ctz(m):
    """Trailing zero bits of int64 ``m`` (64 for 0)."""
    low = tf.bitwise.bitwise_and(m, -m)
    return tf.cast(tf.raw_ops.PopulationCount(x=low - 1), tf.int64)


def _popcount(m):
    return tf.cast(tf.raw_ops.PopulationCount(x=m), tf.int64)


def bmp_header(contents, name=None):
    """Reads a BMP file's size from its header, without decoding any pixels.

    Args:
      contents: scalar ``tf.string``, the whole BMP file (or at least its first
        54 bytes).
      name: optional name scope.

    Returns:
      ``(height, width)``: int64 scalar tensors, both > 0. A top-down BMP stores a
      negative height; it is returned positive. OS/2 1.x headers store 16-bit
      unsigned sizes; Windows headers (BITMAPINFOHEADER, V4, V5, ...) signed
      32-bit ones.

    Raises:
      tf.errors.InvalidArgumentError (when run): no ``BM`` signature, an info
      header size other than 12, 40, 52, 56, 64, 108 or 124, a file shorter than
      its header, or a zero/negative width or a zero height.
    """
    with tf.name_scope(name or "bmp_header"):
        h = _Header(contents)
        with tf.control_dependencies(h.dims_checks()):
            return tf.identity(h.height), tf.identity(h.width)


def decode_bmp(contents, channels=3, name=None):
    """Decodes a BMP file to a uint8 image, in graph ops only.

    Supports every BMP variant Pillow reads, and a few more: 1, 2, 4 and 8-bit
    palette images (any palette size), RLE8 and RLE4 (all escape codes: end of
    line, end of bitmap, delta, absolute runs), 16/24/32-bit BI_RGB, BI_BITFIELDS
    and BI_ALPHABITFIELDS with any contiguous masks, bottom-up and top-down rows,
    and the OS/2 1.x (12-byte), BITMAPINFOHEADER (40), V2 (52), V3 (56), OS/2 2.x
    (64, uncompressed/RLE only), V4 (108) and V5 (124) headers.

    Pixel values follow Pillow: an n-bit mask channel becomes
    ``floor(v * 255 / (2**n - 1))``; a 32-bit BI_RGB file's 4th byte is ignored
    (alpha 255). A palette index past the palette's end is black (as Pillow),
    except that a palette which is the gray ramp 0, 1, 2, ... gives the index
    itself as the gray level (as Pillow, which ignores such palettes). Pixels an
    RLE stream skips (end of line, delta, end of bitmap) take palette index 0.

    Args:
      contents: scalar ``tf.string``, the whole BMP file.
      channels: Python int, 1, 3 or 4. 3: RGB. 4: RGBA, the alpha from the file
        when it has an alpha mask (BI_BITFIELDS with a V3+ header alpha mask,
        BI_ALPHABITFIELDS, or 32-bit all-zero masks, which Pillow reads as BGRA)
        and at least one pixel's alpha is non-zero; otherwise 255. 1: ITU-R 601
        luma, exactly ``tf.image.rgb_to_grayscale`` of the RGB result.
      name: optional name scope.

    Returns:
      uint8 tensor ``[height, width, channels]``, values 0-255, rows top-down as
      displayed.

    Raises:
      ValueError: ``channels`` not in (1, 3, 4).
      tf.errors.InvalidArgumentError (when run): not a BMP, an unknown header
      size, a bad size, a bit depth other than 1/2/4/8/16/24/32, an unsupported
      compression (JPEG or PNG inside BMP, OS/2 Huffman or RLE24, RLE whose bit
      depth does not match), non-contiguous colour masks, a truncated palette,
      truncated pixel data, or an RLE stream that is truncated or writes/moves
      past the end of the image. It never returns pixels for such files.
    """
    if channels not in (1, 3, 4):
        raise ValueError(f"channels must be 1, 3 or 4, got {channels!r}")
    with tf.name_scope(name or "decode_bmp"):
        h = _Header(contents)
        with tf.control_dependencies(h.dims_checks()):
            with tf.control_dependencies(h.decode_checks()):
                path = tf.cast(tf.identity(h.path()), tf.int32)
        branches = [
            lambda: _palette_image(h, _palette_indices(h), channels),
            lambda: _palette_image(h, _rle_indices(h), channels),
            lambda: _bgr24(h, channels),
            lambda: _bgra32(h, channels),
            lambda: _masks(h, channels),
        ]
        image = tf.switch_case(path, branches)
        image.set_shape([None, None, channels])
        return image


# ----------------------------------------------------------------------------- helpers


def _i32(x):
    return tf.cast(x, tf.int32)


def _rows(h):
    """The pixel rows as uint8 ``[height, row_bytes]``, top-down, padding cropped."""
    height, stride, row_bytes = _i32(h.height), _i32(h.stride), _i32(h.row_bytes)
    size = stride * height
    raw = tf.io.decode_raw(tf.strings.substr(h.contents, _i32(h.offset), size), tf.uint8)
    # The last row's padding may be missing (Pillow accepts that too).
    raw = tf.cond(
        tf.equal(tf.size(raw), size),
        lambda: raw,
        lambda: tf.pad(raw, [[0, size - tf.size(raw)]]),
    )
    mat = tf.reshape(raw, [height, stride])
    return tf.cond(
        h.top_down, lambda: mat[:, :row_bytes], lambda: mat[::-1, :row_bytes]
    )


def _finish(rgb, alpha, channels):
    """[h, w, 3] uint8 RGB (+ optional [h, w] alpha) to ``channels``."""
    if channels == 3:
        return rgb
    if channels == 1:
        return tf.image.rgb_to_grayscale(rgb)
    if alpha is None:
        return tf.pad(rgb, [[0, 0], [0, 0], [0, 1]], constant_values=255)
    return tf.concat([rgb, alpha[..., None]], axis=-1)


def _file_alpha(alpha, use):
    """The file's alpha where ``use`` and some alpha is non-zero, else 255."""
    return tf.cond(
        tf.logical_and(use, tf.reduce_any(tf.not_equal(alpha, 0))),
        lambda: alpha,
        lambda: tf.fill(tf.shape(alpha), tf.constant(255, tf.uint8)),
    )


def _bgr24(h, channels):
    width = _i32(h.width)
    px = tf.reshape(_rows(h), [_i32(h.height), width, 3])
    return _finish(px[..., ::-1], None, channels)


def _bgra32(h, channels):
    px = tf.reshape(_rows(h), [_i32(h.height), _i32(h.width), 4])
    rgb = px[..., 2::-1]
    if channels != 4:
        return _finish(rgb, None, channels)
    return _finish(rgb, _file_alpha(px[..., 3], tf.not_equal(h.masks[3], 0)), channels)


def _masks(h, channels):
    """16/24/32-bit pixels with arbitrary contiguous masks."""
    nbytes = _i32(h.bits // 8)
    px = tf.reshape(_rows(h), [_i32(h.height), _i32(h.width), nbytes])
    weights = tf.constant([1, 1 << 8, 1 << 16, 1 << 24], tf.int64)[:nbytes]
    value = tf.reduce_sum(tf.cast(px, tf.int64) * weights, axis=-1)

    def channel(mask):
        shift = tf.where(tf.equal(mask, 0), tf.constant(0, tf.int64), _ctz(mask))
        top = tf.maximum(tf.bitwise.right_shift(mask, shift), 1)  # 2**n - 1
        c = tf.bitwise.right_shift(tf.bitwise.bitwise_and(value, mask), shift)
        return tf.cast(c * 255 // top, tf.uint8)

    r, g, b, a = h.masks
    rgb = tf.stack([channel(r), channel(g), channel(b)], axis=-1)
    if channels != 4:
        return _finish(rgb, None, channels)
    return _finish(rgb, _file_alpha(channel(a), tf.not_equal(a, 0)), channels)


def _palette_table(h, channels):
    """The colour table, ``[256, channels]`` uint8."""
    used = _i32(h.palette_used)
    entry = _i32(h.entry)
    raw = tf.io.decode_raw(
        tf.strings.substr(h.contents, _i32(h.header_end), used * entry), tf.uint8
    )
    rgb = tf.reshape(raw, [used, entry])[:, 2::-1]  # BGR(X) -> RGB
    ramp = tf.range(256, dtype=tf.int32)
    rgb_i = tf.cast(rgb, tf.int32)
    # Pillow ignores a palette that is the gray ramp 0, 1, ..., colors-1 and
    # decodes the indices as gray levels; only visible for indices past the end.
    gray = tf.logical_and(
        tf.not_equal(used, 2),
        tf.reduce_all(tf.equal(rgb_i, ramp[:used, None])),
    )
    gathered = tf.gather(rgb, tf.minimum(ramp, used - 1))
    past = tf.where(gray, tf.cast(ramp, tf.uint8), tf.constant(0, tf.uint8))
    table = tf.where((ramp < used)[:, None], gathered, tf.tile(past[:, None], [1, 3]))
    if channels == 3:
        return table
    if channels == 1:
        return tf.image.rgb_to_grayscale(table)
    return tf.pad(table, [[0, 0], [0, 1]], constant_values=255)


def _palette_image(h, indices, channels):
    return tf.gather(_palette_table(h, channels), indices)


def _palette_indices(h):
    """Uncompressed 1/2/4/8-bit indices, int32 ``[height, width]``."""
    rows = _rows(h)
    bits = _i32(h.bits)
    width = _i32(h.width)

    def unpack():
        per_byte = 8 // bits
        shifts = tf.cast(8 - bits - bits * tf.range(per_byte), tf.uint8)
        mask = tf.cast(tf.bitwise.left_shift(1, bits) - 1, tf.uint8)
        px = tf.bitwise.bitwise_and(tf.bitwise.right_shift(rows[..., None], shifts), mask)
        return tf.reshape(px, [tf.shape(rows)[0], -1])[:, :width]

    idx = tf.cond(tf.equal(bits, 8), lambda: rows, unpack)
    return tf.cast(idx, tf.int32)


def _rle_indices(h):
    """RLE8/RLE4 indices, int32 ``[height, width]``.

    Semantics follow Pillow's BmpRleDecoder: an encoded run stops at the end of
    its row; an absolute run may continue into the next row; end of line and
    delta skip pixels (index 0). Absolute runs are padded to a 16-bit boundary
    counted from the start of the pixel data (the Microsoft rule; Pillow counts
    from the start of the file, the same whenever bfOffBits is even).
    Stricter than Pillow: data that ends before the image is full without an
    end-of-bitmap code, and a delta or absolute run that goes past the end of the
    image, raise instead of being cut short. An end-of-bitmap code before the
    image is full leaves the rest at index 0 (Pillow raises "not enough image
    data" there).
    """
    width, height = _i32(h.width), _i32(h.height)
    total = width * height
    rle4 = tf.equal(h.comp, _BI_RLE4)
    off = _i32(h.offset)
    data = tf.io.decode_raw(
        tf.strings.substr(h.contents, off, _i32(h.n) - off), tf.uint8
    )
    data = tf.cast(data, tf.int32)
    length = tf.size(data)
    padded = tf.concat([data, tf.zeros([4], tf.int32)], 0)
    zero = tf.constant(0, tf.int32)

    # state: i (byte), pos (pixel), x (column as Pillow counts it), status
    # (0 running, 1 end of bitmap, 2 truncated, 3 past the image), runs.
    def cond(i, pos, x, status, runs):
        return tf.logical_and(
            tf.logical_and(i + 2 <= length, pos < total), tf.equal(status, 0)
        )

    def body(i, pos, x, status, runs):
        code = padded[i : i + 4]
        c, b, dx, dy = code[0], code[1], code[2], code[3]
        enc = c > 0
        esc = tf.logical_not(enc)
        eol = tf.logical_and(esc, tf.equal(b, 0))
        eob = tf.logical_and(esc, tf.equal(b, 1))
        delta = tf.logical_and(esc, tf.equal(b, 2))
        absolute = tf.logical_and(esc, b >= 3)

        n_enc = tf.minimum(c, tf.maximum(0, width - x))
        abs_bytes = tf.where(rle4, (b + 1) // 2, b)
        step = 2 + tf.where(delta, 2, 0) + tf.where(
            absolute, abs_bytes + abs_bytes % 2, 0
        )
        advance = dx + dy * width
        new_pos = tf.where(
            enc,
            pos + n_enc,
            tf.where(
                eol,
                (pos + width - 1) // width * width,
                tf.where(delta, pos + advance, tf.where(absolute, pos + b, pos)),
            ),
        )
        new_x = tf.where(
            enc,
            x + n_enc,
            tf.where(
                eol,
                zero,
                tf.where(delta, new_pos % width, tf.where(absolute, x + b, x)),
            ),
        )
        truncated = tf.logical_or(
            tf.logical_and(delta, i + 4 > length),
            tf.logical_and(absolute, i + 2 + abs_bytes > length),
        )
        past = tf.logical_and(tf.logical_or(delta, absolute), new_pos > total)
        new_status = tf.where(
            truncated, 2, tf.where(past, 3, tf.where(eob, 1, zero))
        )
        run = tf.stack(
            [
                pos,
                tf.where(enc, n_enc, tf.where(absolute, b, zero)),
                tf.cast(absolute, tf.int32),
                tf.where(absolute, i + 2, b),
            ]
        )
        runs = runs.write(runs.size(), run)
        return i + step, new_pos, new_x, new_status, runs

    runs = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[4])
    _, pos, _, status, runs = tf.while_loop(
        cond, body, [zero, zero, zero, zero, runs], parallel_iterations=1
    )
    checks = [
        _check(tf.not_equal(status, 2), "RLE data truncated"),
        _check(tf.not_equal(status, 3), "RLE data runs past the end of the image"),
        _check(
            tf.logical_or(tf.equal(status, 1), pos >= total),
            "RLE data truncated (ends before the image is full, with no end-of-bitmap)",
        ),
    ]
    # A zero-length sentinel run at 0 so every pixel has a run at or before it.
    runs = tf.concat([tf.zeros([1, 4], tf.int32), runs.stack()], 0)
    start, count, kind, value = tf.unstack(runs, axis=1)
    p = tf.range(total)
    k = tf.searchsorted(start[None], p[None], side="right")[0] - 1
    j = p - tf.gather(start, k)
    inside = j < tf.gather(count, k)
    is_abs = tf.logical_and(inside, tf.equal(tf.gather(kind, k), 1))
    val = tf.gather(value, k)
    src = tf.where(is_abs, val + tf.where(rle4, j // 2, j), 0)
    byte = tf.where(is_abs, tf.gather(padded, src), val)
    nibble = tf.where(
        tf.equal(j % 2, 0), tf.bitwise.right_shift(byte, 4), tf.bitwise.bitwise_and(byte, 15)
    )
    idx = tf.where(inside, tf.where(rle4, nibble, byte), 0)
    with tf.control_dependencies(checks):
        idx = tf.reshape(idx, [height, width])
    return tf.cond(h.top_down, lambda: idx, lambda: idx[::-1])
