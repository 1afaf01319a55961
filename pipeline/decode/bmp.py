"""BMP decoding in pure TensorFlow graph ops (usable inside ``tf.data.Dataset.map``).

Which paths are vectorised and which loop:

* 24-bit BGR and 32-bit BGRX/BGRA (BI_RGB, or BI_BITFIELDS with the byte-aligned
  masks): vectorised. One ``decode_raw`` (zero-padded to the full size), a row
  ``gather`` that flips bottom-up rows, a crop of the row padding, one
  ``tf.reverse`` for BGR -> RGB. No per-pixel work.
* 1/2/4/8-bit palette images: vectorised. Sub-byte indices are unpacked with bit
  shifts, then one ``tf.gather`` on a 256-entry colour table (the table is made
  gray/RGBA first, so ``channels`` costs nothing per pixel).
* 16/24/32-bit BI_BITFIELDS / BI_ALPHABITFIELDS with any contiguous masks:
  vectorised int64 bit ops (and, shift, scale).
* RLE8 / RLE4: vectorised for ordinary streams. Every RLE code starts on an even
  byte, so the chain of codes is found by pointer doubling over all even offsets
  (a ``tf.while_loop`` of log2(codes) rounds), the pixel position after each code
  by a parallel prefix scan (adds and "round up to the next row" compose
  associatively; log2(codes) rounds), and the pixels by ``searchsorted`` +
  ``gather``. Streams with an encoded run that overflows its row (Pillow clips
  it, so positions stop being a prefix sum) fall back to a ``tf.while_loop``
  with one iteration per 2-byte code: tens of µs per code, only for such
  malformed-but-decodable streams.

The header is parsed with a few vectorised ops and all checks go into one
``Assert``. Per-image cost is dominated by op overhead, not pixels, so the path
is picked in two steps: a ``tf.switch_case`` lowered to switch/merge for the
common paths (24/32-bit, 8-bit palette), and one unlowered Case (a function
call, only the chosen branch runs) for the rare ones (1/2/4-bit, bitfields, RLE),
which hold most of the graph's ops. Format sources: the Microsoft BMP
documentation (BITMAPFILEHEADER, BITMAPCOREHEADER, BITMAPINFOHEADER,
BITMAPV4HEADER, BITMAPV5HEADER, "Bitmap Compression"), the bmpsuite test corpus
by Jason Summers, and Pillow's ``BmpImagePlugin``, which is the reference the
tests compare with.

This module is standalone: it imports only TensorFlow's public API.
"""

import tensorflow as tf

__all__ = ["decode_bmp", "bmp_header", "describe_problem", "unlowered_case"]

# Bytes of the file read for the header: BITMAPFILEHEADER (14) + BITMAPV5HEADER (124)
# + up to 4 colour masks stored after a 40-byte BITMAPINFOHEADER (16).
_HEAD = 14 + 124 + 16
# BITMAPCOREHEADER (OS/2 1.x), BITMAPINFOHEADER, V2, V3, OS/2 2.x, V4, V5.
_HEADER_SIZES = (12, 40, 52, 56, 64, 108, 124)
_BI_RGB, _BI_RLE8, _BI_RLE4, _BI_BITFIELDS, _BI_JPEG, _BI_PNG = 0, 1, 2, 3, 4, 5
_BI_ALPHABITFIELDS = 6
_PATH_BGR24, _PATH_BGRA32, _PATH_PALETTE8, _PATH_PALETTE_LOW, _PATH_MASKS, _PATH_RLE = range(6)
# Little-endian fields read from the first _HEAD bytes, by file offset.
_U32 = (10, 14, 18, 22, 30, 46, 54, 58, 62, 66)
_U16 = (18, 20, 24, 28)


_COMPRESSIONS = {0: "BI_RGB", 1: "RLE8", 2: "RLE4", 3: "BITFIELDS", 4: "JPEG-in-BMP",
                 5: "PNG-in-BMP", 6: "ALPHABITFIELDS"}


def describe_problem(contents: bytes):
    """Why ``decode_bmp`` (or ``tf.io.decode_bmp``) refuses a BMP, read in Python
    from its header, or None when the header passes every check.

    The same checks as the graph decoder's, with the values they failed on:
    e.g. "unsupported BMP variant (7 bits per pixel)", "truncated BMP header
    (12 bytes; the header needs 54)", "negative width (-50)", "pixel data
    offset 1000000000 is beyond the end of the file (60 bytes)". A negative
    height is legal (a top-down BMP). RLE data is not walked: a BMP whose header
    passes but whose RLE stream is bad gives None.

    Args:
        contents: bytes, the whole file.

    Returns:
        str (one line, no TensorFlow text) or None.
    """
    n = len(contents)
    if contents[:2] != b"BM":
        return "not a BMP file (no 'BM' signature)"
    if n < 18:
        return f"truncated BMP header ({n} bytes; the smallest BMP header is 26)"
    head = contents[:_HEAD] + bytes(max(0, _HEAD - n))
    hs = _u32_at(head, 14)
    if hs not in _HEADER_SIZES:
        return (f"unsupported or corrupt BMP info header size ({hs} bytes; known: "
                f"{', '.join(map(str, _HEADER_SIZES))})")
    need = 14 + hs
    if n < need:
        return f"truncated BMP header ({n} bytes; the header needs {need})"
    core = hs == 12
    width = _u16_at(head, 18) if core else _s32_at(head, 18)
    height = _u16_at(head, 20) if core else _s32_at(head, 22)
    if width < 0:
        return f"negative width ({width}) in the BMP header"
    if width == 0 or height == 0:
        return f"zero {'width' if width == 0 else 'height'} in the BMP header ({width}x{height})"
    height = abs(height)  # negative: a top-down BMP
    bits = _u16_at(head, 24) if core else _u16_at(head, 28)
    comp = 0 if core else _u32_at(head, 30)
    is_bf, is_abf = comp == _BI_BITFIELDS, comp == _BI_ALPHABITFIELDS
    mask_extra = ((12 if is_bf else 16 if is_abf else 0) if hs == 40 else
                  4 if hs == 52 and is_abf else 0)
    header_end = 14 + hs + mask_extra
    if n < header_end:
        return (f"truncated BMP header ({n} bytes; the header and its colour masks need "
                f"{header_end})")
    return (_variant_problem(head, hs, bits, comp)
            or _layout_problem(head, n, hs, header_end, width, height, bits, comp))


def _u32_at(head, o):
    return int.from_bytes(head[o:o + 4], "little")


def _s32_at(head, o):
    v = _u32_at(head, o)
    return v - 2 ** 32 if v >= 2 ** 31 else v


def _u16_at(head, o):
    return int.from_bytes(head[o:o + 2], "little")


def _variant_problem(head, hs, bits, comp):
    """``describe_problem``'s bit depth, compression and colour-mask checks."""
    is_bf, is_abf = comp == _BI_BITFIELDS, comp == _BI_ALPHABITFIELDS
    if bits not in (1, 2, 4, 8, 16, 24, 32):
        return f"unsupported BMP variant ({bits} bits per pixel)"
    direct = bits >= 16 and hs != 64
    if not (comp == _BI_RGB or (comp == _BI_RLE8 and bits == 8)
            or (comp == _BI_RLE4 and bits == 4) or ((is_bf or is_abf) and direct)):
        name = _COMPRESSIONS.get(comp, f"code {comp}")
        return f"unsupported BMP variant (compression {name} with {bits} bits per pixel)"
    if (is_bf or is_abf) and bits >= 16:
        masks = [_u32_at(head, o) for o in (54, 58, 62)] + (
            [_u32_at(head, 66)] if is_abf or hs >= 56 else [])
        if any(masks):
            for m in masks:
                low = m & -m
                if m and (((m // low) & (m // low + 1)) or m >> bits):
                    return (f"unsupported BMP variant (BITFIELDS colour mask {m:#x} is not "
                            f"contiguous or is wider than {bits} bits)")
    return None


def _layout_problem(head, n, hs, header_end, width, height, bits, comp):
    """``describe_problem``'s palette, pixel-offset, data-size and size checks."""
    core = hs == 12
    colors = 0 if core else _u32_at(head, 46)
    paletted = bits <= 8
    entry = 3 if core else 4
    full = 1 << bits if paletted else 0
    colors = full if core or colors == 0 else colors
    pal_bytes = entry * colors if paletted else 0
    if paletted:
        pal_end = header_end + entry * min(colors, full)
        if colors > 65536 or pal_end > n:
            return (f"bad or truncated BMP colour palette ({colors} colours; the palette "
                    f"ends at byte {pal_end}, the file has {n})")
    off = _u32_at(head, 10)
    off = header_end + pal_bytes if off == 0 else off
    off = off + pal_bytes if off == 14 + hs and paletted else off
    if off > n:
        return f"pixel data offset {off} is beyond the end of the file ({n} bytes)"
    rle = comp in (_BI_RLE8, _BI_RLE4)
    data_need = off + (width * bits + 31) // 32 * 4 * (height - 1) + (width * bits + 7) // 8
    if not rle and data_need > n:
        return (f"truncated BMP pixel data ({n} bytes; {width}x{height} pixels at {bits} bits "
                f"from offset {off} need {data_need})")
    if width * height * 4 >= 2 ** 31:
        return f"BMP image too large ({width}x{height} pixels)"
    return None


def _c(value):
    return tf.constant(value, tf.int64)


def _assert_all(checks):
    """One Assert for a list of (condition, message); reports the first failing one."""
    ok = tf.stack([c for c, _ in checks])
    messages = tf.constant(["BMP: " + m for _, m in checks])
    first_bad = tf.argmin(tf.cast(ok, tf.int32), output_type=tf.int32)
    return tf.debugging.Assert(tf.reduce_all(ok), [tf.gather(messages, first_bad)])


class _Header:
    """Header fields as int64 scalar tensors, and the checks that validate them."""

    def __init__(self, contents):
        contents = tf.convert_to_tensor(contents, tf.string)
        contents.shape.assert_has_rank(0)
        self.contents = contents
        raw = tf.cast(tf.io.decode_raw(contents, tf.uint8, fixed_length=_HEAD), tf.int64)
        self.n = tf.cast(tf.strings.length(contents), tf.int64)
        offs = tf.constant([[o + k for k in range(4)] for o in _U32 + _U16])
        weights = tf.constant([1, 1 << 8, 1 << 16, 1 << 24], tf.int64)
        mask16 = tf.constant([[1, 1, 1, 1]] * len(_U32) + [[1, 1, 0, 0]] * len(_U16), tf.int64)
        values = tf.reduce_sum(tf.gather(raw, offs) * weights * mask16, axis=1)
        off, hs, w32, h32, comp, colors, r, g, b, a, w16, h16, bits16, bits32 = tf.unstack(values)
        signature = raw[0] * 256 + raw[1]

        self.magic_ok = tf.equal(signature, 66 * 256 + 77)  # "BM"
        self.hs = hs
        self.core = core = tf.equal(hs, 12)  # OS/2 1.x BITMAPCOREHEADER: 16-bit fields
        h32 = tf.where(h32 >= 2 ** 31, h32 - 2 ** 32, h32)
        w32 = tf.where(w32 >= 2 ** 31, w32 - 2 ** 32, w32)
        self.width = tf.where(core, w16, w32)
        height = tf.where(core, h16, h32)
        self.top_down = tf.less(height, 0)
        self.height = tf.abs(height)
        self.bits = bits = tf.where(core, bits16, bits32)
        self.comp = comp = tf.where(core, _c(0), comp)

        # Colour masks: in the header from V2 on, after a 40-byte header otherwise;
        # in both cases at file offsets 54, 58, 62 (and 66 for alpha).
        is_bf = tf.equal(comp, _BI_BITFIELDS)
        is_abf = tf.equal(comp, _BI_ALPHABITFIELDS)
        has_a = tf.logical_or(is_abf, tf.logical_and(is_bf, hs >= 56))
        a = tf.where(has_a, a, 0)
        use_file = tf.logical_or(is_bf, is_abf)
        zero_rgb = tf.equal(r | g | b | a, 0)
        # BI_RGB defaults: 16-bit is 5-5-5; 32-bit is BGRX (the 4th byte is
        # ignored, as Pillow does). All-zero BITFIELDS masks mean the defaults
        # (Pillow reads 32-bit all-zero masks as BGRA).
        is16 = tf.equal(bits, 16)
        default = tf.logical_or(tf.logical_not(use_file), zero_rgb)
        self.masks = [
            tf.where(default, tf.where(is16, _c(d16), _c(d)), m)
            for d16, d, m in ((0x7C00, 0xFF0000, r), (0x3E0, 0xFF00, g), (0x1F, 0xFF, b))
        ]
        da = tf.where(tf.logical_and(tf.equal(bits, 32), use_file), _c(0xFF000000), _c(0))
        self.masks.append(tf.where(default, da, a))
        mask_extra = tf.where(
            tf.equal(hs, 40),
            tf.where(is_bf, _c(12), tf.where(is_abf, _c(16), _c(0))),
            tf.where(tf.logical_and(tf.equal(hs, 52), is_abf), _c(4), _c(0)),
        )
        self.header_end = 14 + hs + mask_extra

        # Palette: right after the header (Pillow reads it there), 3-byte entries
        # for OS/2 1.x, 4-byte otherwise; biClrUsed == 0 means 2**bits entries.
        self.paletted = bits <= 8
        self.entry = tf.where(core, _c(3), _c(4))
        colors = tf.where(core, _c(0), colors)
        full = tf.bitwise.left_shift(_c(1), tf.clip_by_value(bits, 0, 8))
        self.colors = tf.where(tf.equal(colors, 0), full, colors)
        self.palette_used = tf.minimum(self.colors, full)  # entries an index can reach
        pal_bytes = tf.where(self.paletted, self.entry * self.colors, 0)

        # Pixel data offset (bfOffBits). Like Pillow: 0 means "right after the
        # header and palette", and an offset that points at the palette is moved
        # past it.
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
            (self.magic_ok, "not a BMP file (no 'BM' signature)"),
            (known, "unsupported or corrupt info header size"),
            (self.n >= 14 + tf.minimum(self.hs, 124), "file truncated in the header"),
            (
                tf.logical_and(self.width > 0, self.height > 0),
                "bad header: width and height must be positive",
            ),
        ]

    def decode_checks(self):
        bits, comp, hs = self.bits, self.comp, self.hs
        bits_ok = tf.reduce_any(tf.equal(bits, tf.constant([1, 2, 4, 8, 16, 24, 32], tf.int64)))
        direct = tf.logical_and(bits >= 16, tf.not_equal(hs, 64))  # 64: OS/2 2.x
        comp_ok = tf.reduce_any(
            tf.stack(
                [
                    tf.equal(comp, _BI_RGB),
                    tf.logical_and(tf.equal(comp, _BI_RLE8), tf.equal(bits, 8)),
                    tf.logical_and(tf.equal(comp, _BI_RLE4), tf.equal(bits, 4)),
                    tf.logical_and(tf.equal(comp, _BI_BITFIELDS), direct),
                    tf.logical_and(tf.equal(comp, _BI_ALPHABITFIELDS), direct),
                ]
            )
        )
        m = tf.stack(self.masks)
        top = tf.bitwise.right_shift(m, tf.minimum(_ctz(m), 63))
        contiguous = tf.equal(tf.bitwise.bitwise_and(top, top + 1), 0)
        fits = tf.equal(tf.bitwise.right_shift(m, tf.clip_by_value(bits, 0, 63)), 0)
        masks_ok = tf.logical_or(
            bits <= 8, tf.reduce_all(tf.logical_or(tf.equal(m, 0), tf.logical_and(contiguous, fits)))
        )
        n, off = self.n, self.offset
        pal_end = self.header_end + self.entry * self.palette_used
        data_need = off + self.stride * (self.height - 1) + self.row_bytes
        return self.dims_checks() + [
            (self.n >= self.header_end, "file truncated in the header"),
            (bits_ok, "unsupported bits per pixel"),
            (
                comp_ok,
                "unsupported compression (JPEG/PNG-in-BMP, OS/2 Huffman/RLE24, or a "
                "compression that does not fit the bit depth)",
            ),
            (masks_ok, "unsupported BITFIELDS colour masks (not contiguous or wider than a pixel)"),
            (
                tf.logical_or(
                    tf.logical_not(self.paletted), tf.logical_and(self.colors <= 65536, pal_end <= n)
                ),
                "bad or truncated colour palette",
            ),
            (off <= n, "pixel data offset past the end of the file"),
            (tf.logical_or(self.rle, data_need <= n), "pixel data truncated"),
            (self.width * self.height * 4 < 2 ** 31, "image too large"),
        ]

    def path(self):
        r, g, b, a = self.masks
        bgr = tf.logical_and(
            tf.logical_and(tf.equal(r, 0xFF0000), tf.equal(g, 0xFF00)), tf.equal(b, 0xFF)
        )
        bits = self.bits
        conditions = [
            self.rle,
            tf.equal(bits, 8),
            self.paletted,
            tf.logical_and(tf.logical_and(tf.equal(bits, 24), bgr), tf.equal(a, 0)),
            tf.logical_and(
                tf.logical_and(tf.equal(bits, 32), bgr),
                tf.logical_or(tf.equal(a, 0), tf.equal(a, 0xFF000000)),
            ),
            tf.constant(True),
        ]
        paths = [_PATH_RLE, _PATH_PALETTE8, _PATH_PALETTE_LOW, _PATH_BGR24, _PATH_BGRA32, _PATH_MASKS]
        first = tf.argmax(tf.cast(tf.stack(conditions), tf.int32), output_type=tf.int32)
        return tf.gather(tf.constant(paths, tf.int32), first)


def _ctz(m):
    """Trailing zero bits of int64 ``m`` (64 for 0)."""
    low = tf.bitwise.bitwise_and(m, -m)
    return tf.cast(tf.raw_ops.PopulationCount(x=low - 1), tf.int64)


def bmp_header(contents, name=None):
    """Reads a BMP file's size from its header, without decoding any pixels.

    Args:
      contents: scalar ``tf.string``, the whole BMP file (or at least its first
        26 bytes for OS/2 1.x, 54 otherwise).
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
        with tf.control_dependencies([_assert_all(h.dims_checks())]):
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
      tf.errors.InvalidArgumentError (when run), message starting "BMP:": not a
      BMP, an unknown header size, a bad size, a bit depth other than
      1/2/4/8/16/24/32, an unsupported compression (JPEG or PNG inside BMP, OS/2
      Huffman or RLE24, RLE whose bit depth does not match), non-contiguous colour
      masks, a truncated palette, truncated pixel data, or an RLE stream that is
      truncated or writes/moves past the end of the image. It never returns
      pixels for such files.
    """
    if channels not in (1, 3, 4):
        raise ValueError(f"channels must be 1, 3 or 4, got {channels!r}")
    with tf.name_scope(name or "decode_bmp"):
        h = _Header(contents)
        with tf.control_dependencies([_assert_all(h.decode_checks())]):
            path = tf.identity(h.path())
        # Dispatch. In a tf.data map, a Case that is lowered to switch/merge still
        # visits every op of the branches not taken, and one that is not lowered
        # costs a function call per image. So the common paths (24/32-bit,
        # 8-bit palette: few ops) share a lowered Case, and the rare ones (1/2/4-bit,
        # bitfields, RLE: most of the ops) sit behind one unlowered Case.
        rare = [
            lambda: _palette_image(h, _palette_low_indices(h), channels),
            lambda: _masks(h, channels),
            lambda: _palette_image(h, _rle_indices(h), channels),
        ]
        common = [
            lambda: _bgr24(h, channels),
            lambda: _bgra32(h, channels),
            lambda: _palette_image(h, _rows(h), channels),
            lambda: unlowered_case(path - _PATH_PALETTE_LOW, rare),
        ]
        image = tf.switch_case(tf.minimum(path, _PATH_PALETTE_LOW), common)
        image.set_shape([None, None, channels])
        return image


# ----------------------------------------------------------------------------- helpers


def _i32(x):
    return tf.cast(x, tf.int32)


def unlowered_case(index, branches):
    """``tf.switch_case(index, branches)`` as one Case op that is not lowered to
    switch/merge: only the chosen branch's function runs (a function call,
    some µs), where a lowered Case makes the executor visit every op of every
    branch. Inside a lowered ``tf.cond`` branch that is not taken, the whole
    Case is one dead node: its branches cost nothing. Eagerly, it calls the
    chosen branch.

    Built with public ops only: each branch is traced as a ``tf.function`` (its
    ``ConcreteFunction``), and ``tf.raw_ops.StatelessCase`` (``Case`` when a branch
    holds a stateful op) calls the chosen one (a raw Case carries no
    ``_lower_using_switch_merge``, so TensorFlow keeps it a call). Every
    branch of a Case takes the same inputs: the outer tensors any branch captures
    (``captured_inputs``), in one order; a branch that captured fewer or others is
    traced again, touching that list first (``tf.identity``, pruned when the function
    is instantiated), so it captures exactly it.

    Args:
        index: int32 scalar tensor, the branch to run (0 <= index < len(branches);
            out of range runs the last, as ``tf.switch_case`` does).
        branches: list of zero-argument callables returning tensors, all with one
            structure and the same dtypes.

    Returns:
        The chosen branch's output, in the branches' structure; static shapes are
        the most specific shapes every branch's output has.

    Raises:
        ValueError: the branches return different structures or dtypes.
    """
    if tf.executing_eagerly():
        return branches[int(index)]()
    traced = [_trace_branch(b, ()) for b in branches]
    inputs, seen = [], set()
    for fn in traced:
        for t in fn.captured_inputs:
            if t.ref() not in seen:
                seen.add(t.ref())
                inputs.append(t)
    refs = [t.ref() for t in inputs]
    for i, fn in enumerate(traced):
        if [t.ref() for t in fn.captured_inputs] != refs:
            traced[i] = _trace_branch(branches[i], inputs)
            if [t.ref() for t in traced[i].captured_inputs] != refs:
                raise ValueError(f"unlowered_case: branch {i} captures {len(traced[i].captured_inputs)} "
                                 f"tensors where the Case passes {len(inputs)}")
    structure = traced[0].structured_outputs
    flat = [tf.nest.flatten(fn.structured_outputs) for fn in traced]
    for i, fn in enumerate(traced[1:], 1):
        tf.nest.assert_same_structure(structure, fn.structured_outputs)
        if [t.dtype for t in flat[i]] != [t.dtype for t in flat[0]]:
            raise ValueError(f"unlowered_case: branch {i} returns dtypes "
                             f"{[t.dtype.name for t in flat[i]]}, branch 0 "
                             f"{[t.dtype.name for t in flat[0]]}")
    shapes = [t.shape for t in flat[0]]
    for outs in flat[1:]:
        shapes = [s.most_specific_compatible_shape(t.shape) for s, t in zip(shapes, outs)]
    stateful = any(op.op_def.is_stateful for fn in traced for op in fn.graph.get_operations())
    case = tf.raw_ops.Case if stateful else tf.raw_ops.StatelessCase
    outs = case(branch_index=tf.cast(index, tf.int32), input=inputs,
                Tout=[t.dtype for t in flat[0]], branches=traced, output_shapes=shapes)
    for t, shape in zip(outs, shapes):
        t.set_shape(shape)
    return tf.nest.pack_sequence_as(structure, list(outs))


def _trace_branch(branch, capture_first):
    """``branch`` traced as a zero-argument tf.function (a ConcreteFunction) that
    captures ``capture_first`` first, in that order."""
    def body():
        for t in capture_first:
            tf.identity(t)
        return branch()
    return tf.function(body, autograph=False).get_concrete_function()


def _rows(h):
    """The pixel rows as uint8 ``[height, row_bytes]``, top-down, padding cropped."""
    height, stride, row_bytes = _i32(h.height), _i32(h.stride), _i32(h.row_bytes)
    off = _i32(h.offset)
    # fixed_length zero-pads a missing last-row padding (Pillow accepts that too);
    # the checks have made sure every pixel byte is there.
    size = stride * height
    raw = tf.io.decode_raw(h.contents, tf.uint8, fixed_length=tf.maximum(off + size, 1))
    mat = tf.reshape(raw[off : off + size], [height, stride])
    # Bottom-up rows are flipped by a row gather: much faster than tf.reverse or a
    # negative-stride slice, which go byte by byte.
    return tf.gather(mat, _display_rows(h))[:, :row_bytes]


def _display_rows(h):
    """Stored row index of each displayed row, top to bottom."""
    height = _i32(h.height)
    rows = tf.range(height)
    return tf.where(h.top_down, rows, height - 1 - rows)


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
    opaque = tf.logical_not(tf.logical_and(use, tf.reduce_any(tf.not_equal(alpha, 0))))
    return tf.bitwise.bitwise_or(alpha, tf.cast(opaque, tf.uint8) * 255)


def _bgr24(h, channels):
    px = tf.reshape(_rows(h), [_i32(h.height), _i32(h.width), 3])
    return _finish(tf.reverse(px, [2]), None, channels)


def _bgra32(h, channels):
    px = tf.reshape(_rows(h), [_i32(h.height), _i32(h.width), 4])
    rgb = tf.reverse(px[..., :3], [2])
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
        shift = tf.where(tf.equal(mask, 0), _c(0), _ctz(mask))
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
    start = _i32(h.header_end)
    raw = tf.io.decode_raw(h.contents, tf.uint8, fixed_length=start + used * entry)
    rgb = tf.reverse(tf.reshape(raw[start:], [used, entry])[:, :3], [1])  # BGR(X) -> RGB
    ramp = tf.range(256, dtype=tf.int32)
    # Pillow ignores a palette that is the gray ramp 0, 1, ..., colors-1 and
    # decodes the indices as gray levels; only visible for indices past the end.
    gray = tf.logical_and(
        tf.not_equal(used, 2),
        tf.reduce_all(tf.equal(tf.cast(rgb, tf.int32), ramp[:used, None])),
    )
    gathered = tf.gather(rgb, tf.minimum(ramp, used - 1))
    past = tf.cast(ramp, tf.uint8) * tf.cast(gray, tf.uint8)
    table = tf.where((ramp < used)[:, None], gathered, past[:, None])
    if channels == 3:
        return table
    if channels == 1:
        return tf.image.rgb_to_grayscale(table)
    return tf.pad(table, [[0, 0], [0, 1]], constant_values=255)


def _palette_image(h, indices, channels):
    return tf.gather(_palette_table(h, channels), tf.cast(indices, tf.int32))


def _palette_low_indices(h):
    """Uncompressed 1/2/4-bit indices, uint8 ``[height, width]`` (MSB first)."""
    rows = _rows(h)
    bits = _i32(h.bits)
    per_byte = 8 // bits
    shifts = tf.cast(8 - bits - bits * tf.range(per_byte), tf.uint8)
    mask = tf.cast(tf.bitwise.left_shift(1, bits) - 1, tf.uint8)
    px = tf.bitwise.bitwise_and(tf.bitwise.right_shift(rows[..., None], shifts), mask)
    return tf.reshape(px, [tf.shape(rows)[0], -1])[:, : _i32(h.width)]


def _rle_indices(h):
    """RLE8/RLE4 indices, int32 ``[height, width]``.

    Semantics follow Pillow's BmpRleDecoder: an encoded run stops at the end of
    its row (the row as counted from the last end of line or delta); an absolute
    run may continue into the next row; end of line and delta skip pixels (index
    0); codes after the image is full are not read. Absolute runs are padded to
    a 16-bit boundary counted from the start of the pixel data (the Microsoft
    rule; Pillow counts from the start of the file, the same whenever bfOffBits
    is even). Stricter than Pillow: data that ends before the image is full
    without an end-of-bitmap code, and a delta or absolute run that goes past the
    end of the image, raise instead of being cut short. An end-of-bitmap code
    before the image is full leaves the rest at index 0 (Pillow raises "not
    enough image data" there).
    """
    width, height = _i32(h.width), _i32(h.height)
    total = width * height
    rle4 = tf.equal(h.comp, _BI_RLE4)
    off = _i32(h.offset)
    n = _i32(h.n)
    data = tf.io.decode_raw(h.contents, tf.uint8, fixed_length=tf.maximum(n, 1))[off:n]
    data = tf.cast(data, tf.int32)
    length = tf.size(data)
    padded = tf.concat([data, tf.zeros([4], tf.int32)], 0)  # reads past the end see 0

    fast_runs, fast_status, fast_pos, fast_ok = _rle_runs_vectorised(
        padded, length, width, total, rle4
    )
    # The loop runs (on the whole stream) only when the vectorised pass cannot be
    # used; otherwise it sees no data and stops at once.
    loop_runs, loop_status, loop_pos = _rle_runs_loop(
        padded, tf.where(fast_ok, 0, length), width, total, rle4
    )
    runs = tf.concat([fast_runs[: tf.where(fast_ok, tf.shape(fast_runs)[0], 0)], loop_runs], 0)
    status = tf.where(fast_ok, fast_status, loop_status)
    pos = tf.where(fast_ok, fast_pos, loop_pos)
    check = _assert_all(
        [
            (tf.not_equal(status, 2), "RLE data truncated"),
            (tf.not_equal(status, 3), "RLE data runs past the end of the image"),
            (
                tf.logical_or(tf.equal(status, 1), pos >= total),
                "RLE data truncated (ends before the image is full, with no end-of-bitmap)",
            ),
        ]
    )
    # Expand the runs (start, length, kind, value) to pixels. A zero-length
    # sentinel run at 0 makes sure every pixel has a run at or before it.
    runs = tf.concat([tf.zeros([1, 4], tf.int32), runs], 0)
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
    with tf.control_dependencies([check]):
        idx = tf.reshape(idx, [height, width])
    return tf.gather(idx, _display_rows(h))


def _rle_codes(dp, at, rle4):
    """The fields of RLE codes starting at byte offsets ``at``."""
    c, b = tf.gather(dp, at), tf.gather(dp, at + 1)
    dx, dy = tf.gather(dp, at + 2), tf.gather(dp, at + 3)
    enc = c > 0
    esc = tf.logical_not(enc)
    eol = tf.logical_and(esc, tf.equal(b, 0))
    eob = tf.logical_and(esc, tf.equal(b, 1))
    delta = tf.logical_and(esc, tf.equal(b, 2))
    absolute = tf.logical_and(esc, b >= 3)
    abs_bytes = tf.where(absolute, tf.where(rle4, (b + 1) // 2, b), 0)
    need = 2 + tf.where(delta, 2, 0) + abs_bytes  # bytes the code needs
    size = need + abs_bytes % 2  # bytes it takes, word padding included
    return c, b, dx, dy, enc, eol, eob, delta, absolute, need, size


def _rle_code_offsets(dp, length, rle4):
    """Byte offsets (int32 [k]) of the RLE codes reachable from the first one, by
    pointer doubling over every even offset (log2(codes) rounds)."""
    n = length // 2  # codes start at even offsets; a stray odd last byte is none
    node = tf.range(n)
    _, _, _, _, _, _, eob, _, _, _, size = _rle_codes(dp, 2 * node, rle4)
    nxt = tf.where(eob, n, tf.minimum(node + size // 2, n))

    # Codes reachable from code 0: pointer doubling. After the round with jump
    # 2**k, ``reached`` holds every node reachable in fewer than 2**(k+1) steps.
    def double(span, jump, reached):
        reached = tf.maximum(reached, tf.math.unsorted_segment_max(reached, jump, n + 1))
        return span * 2, tf.gather(jump, jump), reached

    _, _, reached = tf.while_loop(
        lambda span, jump, reached: span <= tf.cast(n, tf.int64),
        double,
        [_c(1), tf.concat([nxt, [n]], 0), tf.one_hot(0, n + 1, dtype=tf.int32)],
    )
    return 2 * tf.cast(tf.where(reached[:n] > 0)[:, 0], tf.int32)


def _rle_positions(width, c, b, dx, dy, enc, eol, delta, absolute):
    """Pixel position (int64 [k]) after each code, and before it."""
    # Pixel position after each code: a prefix scan of the maps
    #   p -> p + a                      (runs, delta, end of bitmap)
    #   p -> ceil((p + a) / W) * W + s  (end of line, and compositions with it)
    # which compose associatively (Hillis-Steele, log2(codes) rounds).
    w64 = tf.cast(width, tf.int64)

    def ceil_row(v):
        return (v + w64 - 1) // w64 * w64

    r = eol
    a = tf.cast(tf.where(enc, c, tf.where(absolute, b, tf.where(delta, dx + dy * width, 0))), tf.int64)
    s = tf.zeros_like(a)
    count = tf.size(c)

    def scan(step, r, a, s):
        pad = tf.minimum(step, count)
        rf = tf.concat([tf.zeros([pad], tf.bool), r[: count - pad]], 0)
        af = tf.concat([tf.zeros([pad], tf.int64), a[: count - pad]], 0)
        sf = tf.concat([tf.zeros([pad], tf.int64), s[: count - pad]], 0)
        new_s = tf.where(
            tf.logical_and(rf, r),
            ceil_row(sf + a) + s,
            tf.where(rf, sf + a, tf.where(r, s, tf.zeros_like(s))),
        )
        return step * 2, tf.logical_or(rf, r), tf.where(rf, af, af + a), new_s

    _, r, a, s = tf.while_loop(lambda step, *_: step < count, scan, [1, r, a, s])
    after = tf.where(r, ceil_row(a) + s, a)
    before = tf.concat([[_c(0)], after], 0)[:count]
    return after, before


def _rle_runs_vectorised(dp, length, width, total, rle4):
    """Runs of an RLE stream without a per-code loop.

    Returns (runs [k, 4] int32: start pixel, length, kind 0 encoded / 1 absolute,
    value or source byte; status: 0 data ended, 1 end of bitmap, 2 truncated,
    3 past the image; position after the last code read; ok). ``ok`` is False
    when an encoded run would overflow its row: the caller then uses the loop.
    """
    at = _rle_code_offsets(dp, length, rle4)
    c, b, dx, dy, enc, eol, eob, delta, absolute, need, _ = _rle_codes(dp, at, rle4)
    truncated = at + need > length

    after, before = _rle_positions(width, c, b, dx, dy, enc, eol, delta, absolute)
    w64 = tf.cast(width, tf.int64)
    count = tf.size(at)

    # Column before each code, as Pillow counts it: reset by end of line / delta.
    reset = tf.logical_or(eol, delta)
    segment = tf.cumsum(tf.cast(reset, tf.int32), exclusive=True)
    reset_at = tf.gather(tf.concat([[_c(0)], tf.boolean_mask(after, reset)], 0), segment)
    x = before - reset_at + reset_at % w64

    index = tf.range(count)
    cut = tf.minimum(
        tf.reduce_min(tf.where(after >= tf.cast(total, tf.int64), index + 1, count)), count
    )  # codes read: up to the one that fills the image
    read = index < cut
    overflow = tf.logical_and(read, tf.logical_and(enc, x + tf.cast(c, tf.int64) > w64))
    bad_trunc = tf.reduce_any(tf.logical_and(read, truncated))
    bad_past = tf.reduce_any(
        tf.logical_and(
            read,
            tf.logical_and(tf.logical_or(delta, absolute), after > tf.cast(total, tf.int64)),
        )
    )
    ended_eob = tf.gather(tf.concat([[False], eob], 0), cut)
    status = tf.where(bad_trunc, 2, tf.where(bad_past, 3, tf.where(ended_eob, 1, 0)))
    pos = tf.gather(tf.concat([[_c(0)], after], 0), cut)
    pos = _i32(tf.minimum(pos, tf.cast(total, tf.int64)))
    runs = tf.stack(
        [
            _i32(tf.minimum(before, tf.cast(total, tf.int64))),
            tf.where(enc, c, tf.where(absolute, b, 0)),
            tf.cast(absolute, tf.int32),
            tf.where(absolute, at + 2, b),
        ],
        axis=1,
    )[:cut]
    return runs, status, pos, tf.logical_not(tf.reduce_any(overflow))


def _rle_runs_loop(dp, length, width, total, rle4):
    """Same result as ``_rle_runs_vectorised``, one loop iteration per code, for
    streams whose encoded runs overflow their row (Pillow clips those)."""
    zero = tf.constant(0, tf.int32)

    # state: i (byte), pos (pixel), x (column as Pillow counts it), status, runs.
    def cond(i, pos, x, status, runs):
        return tf.logical_and(
            tf.logical_and(i + 2 <= length, pos < total), tf.equal(status, 0)
        )

    def body(i, pos, x, status, runs):
        c, b, dx, dy, enc, eol, eob, delta, absolute, need, size = _rle_codes(dp, i, rle4)
        n_enc = tf.minimum(c, tf.maximum(0, width - x))
        new_pos = tf.where(
            enc,
            pos + n_enc,
            tf.where(
                eol,
                (pos + width - 1) // width * width,
                tf.where(delta, pos + dx + dy * width, tf.where(absolute, pos + b, pos)),
            ),
        )
        new_x = tf.where(
            enc,
            x + n_enc,
            tf.where(eol, zero, tf.where(delta, new_pos % width, tf.where(absolute, x + b, x))),
        )
        truncated = i + need > length
        past = tf.logical_and(tf.logical_or(delta, absolute), new_pos > total)
        new_status = tf.where(truncated, 2, tf.where(past, 3, tf.where(eob, 1, zero)))
        run = tf.stack(
            [
                tf.minimum(pos, total),
                tf.where(enc, n_enc, tf.where(absolute, b, zero)),
                tf.cast(absolute, tf.int32),
                tf.where(absolute, i + 2, b),
            ]
        )
        return i + size, new_pos, new_x, new_status, runs.write(runs.size(), run)

    runs = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[4])
    _, pos, _, status, runs = tf.while_loop(
        cond, body, [zero, zero, zero, zero, runs], parallel_iterations=1
    )
    return runs.stack(), status, tf.minimum(pos, total)
