"""pipeline.decode.bmp (pure-TF BMP decoder) against Pillow.

BMP variants Pillow does not write are built here with ``struct`` (header fields and
pixel rows by hand), and Pillow opens each of them, so it stays the reference. Where
Pillow cannot decode a variant (2-bit, BI_ALPHABITFIELDS, arbitrary masks) or decodes
it wrongly (see ``test_pillow_gray_palette_bugs``), a numpy reference is computed from
the file's definition. One ``tf.function`` per ``channels`` value, traced once.
"""

import io
import os
import struct

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from pipeline.decode import bmp
from pipeline.decode.bmp import bmp_header, decode_bmp

# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

SHARED = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared"))
CASES2 = os.path.join(SHARED, "cases2")
TOL = 3  # colour levels; alpha is compared exactly

_SPEC = [tf.TensorSpec([], tf.string)]
DECODE = {
    c: tf.function(lambda x, c=c: decode_bmp(x, c), input_signature=_SPEC) for c in (1, 3, 4)
}
HEADER = tf.function(bmp_header, input_signature=_SPEC)


# ------------------------------------------------------------------ file building


def make_bmp(width, height, bits, data, header_size=40, compression=0, palette=None,
             colors=None, masks=None, masks_after=False, top_down=False, offset=None):
    """A BMP file. ``data``: pixel bytes as stored; ``palette``: list of (r, g, b);
    ``masks`` go in the header (V2+) or, with ``masks_after``, after a 40-byte one."""
    if header_size == 12:
        info = struct.pack("<IHHHH", 12, width, height, 1, bits)
        entry = 3
    else:
        ncol = colors if colors is not None else (len(palette) if palette else 0)
        info = struct.pack("<IiiHHIIiiII", header_size, width, -height if top_down else height,
                           1, bits, compression, len(data), 2835, 2835, ncol, 0)
        if masks is not None and not masks_after:
            info += struct.pack("<%dI" % len(masks), *masks)
        info = (info + b"\0" * header_size)[:header_size]
        entry = 4
    after = struct.pack("<%dI" % len(masks), *masks) if masks is not None and masks_after else b""
    pal = b"".join(bytes([b, g, r]) + b"\0" * (entry - 3) for r, g, b in (palette or []))
    body = info + after + pal
    off = 14 + len(body) if offset is None else offset
    gap = b"\0" * max(0, off - 14 - len(body))
    return b"BM" + struct.pack("<IHHI", 14 + len(body) + len(gap) + len(data), 0, 0, off) + body + gap + data


def pack_rows(rows_bytes, bits, width, top_down=False):
    """Stored rows (bottom-up unless ``top_down``), each padded to 4 bytes, from
    top-down rows."""
    stride = (width * bits + 31) // 32 * 4
    order = rows_bytes if top_down else rows_bytes[::-1]
    return b"".join(bytes(r) + b"\0" * (stride - len(r)) for r in order)


def pack_indices(idx, bits, top_down=False):
    """[h, w] palette indices to stored rows (MSB-first sub-byte packing)."""
    h, w = idx.shape
    rows = []
    for row in idx:
        if bits == 8:
            rows.append(row.astype(np.uint8).tobytes())
        else:
            per = 8 // bits
            padded = np.zeros(-(-w // per) * per, np.int64)
            padded[:w] = row
            grouped = padded.reshape(-1, per)
            shifts = 8 - bits * (np.arange(per) + 1)
            rows.append(((grouped << shifts).sum(axis=1)).astype(np.uint8).tobytes())
    return pack_rows(rows, bits, w, top_down)


def pillow(data, mode):
    im = Image.open(io.BytesIO(data))
    out = np.asarray(im.convert(mode))
    return out[..., None] if mode == "L" else out


def decode(data, channels):
    return DECODE[channels](tf.constant(data)).numpy()


def check_vs(data, ref_rgb, ref_alpha=None):
    """Compares all three ``channels`` with an RGB (and alpha) reference."""
    rgb = decode(data, 3)
    assert rgb.shape == ref_rgb.shape
    assert np.abs(rgb.astype(int) - ref_rgb).max() <= TOL
    rgba = decode(data, 4)
    assert np.abs(rgba[..., :3].astype(int) - ref_rgb).max() <= TOL
    alpha = np.full(ref_rgb.shape[:2], 255, np.uint8) if ref_alpha is None else ref_alpha
    np.testing.assert_array_equal(rgba[..., 3], alpha)
    gray = decode(data, 1)
    np.testing.assert_array_equal(gray, tf.image.rgb_to_grayscale(rgb).numpy())
    return rgb, rgba, gray


def check_pillow(data, exact_alpha=True):
    """Compares all three ``channels`` with Pillow's RGB / RGBA / L."""
    rgb, rgba, gray = check_vs(data, pillow(data, "RGB"),
                               pillow(data, "RGBA")[..., 3] if exact_alpha else None)
    assert np.abs(gray.astype(int) - pillow(data, "L")).max() <= TOL
    return rgb


def rand_palette(rng, n):
    return [tuple(int(v) for v in rng.integers(0, 256, 3)) for _ in range(n)]


RNG_SEED = 20240601


# ------------------------------------------------------------------ palette images


@pytest.mark.parametrize("bits", [1, 4, 8])
@pytest.mark.parametrize("width", [1, 3, 5, 7, 13, 31])
def test_palette_colour(bits, width):
    rng = np.random.default_rng(RNG_SEED + bits * 100 + width)
    pal = rand_palette(rng, 1 << bits)
    idx = rng.integers(0, 1 << bits, (4, width))
    check_pillow(make_bmp(width, 4, bits, pack_indices(idx, bits), palette=pal))


@pytest.mark.parametrize("width", [1, 3, 5, 7, 13, 31])
def test_palette_2bit(width):
    """2-bit (Windows CE) palette images; Pillow refuses them, so numpy is the reference."""
    rng = np.random.default_rng(RNG_SEED + width)
    pal = rand_palette(rng, 4)
    idx = rng.integers(0, 4, (3, width))
    data = make_bmp(width, 3, 2, pack_indices(idx, 2), palette=pal)
    check_vs(data, np.array(pal, np.uint8)[idx])


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_palette_top_down(bits):
    rng = np.random.default_rng(RNG_SEED + bits)
    pal = rand_palette(rng, 1 << bits)
    idx = rng.integers(0, 1 << bits, (5, 9))
    data = make_bmp(9, 5, bits, pack_indices(idx, bits, top_down=True), palette=pal, top_down=True)
    check_vs(data, np.array(pal, np.uint8)[idx])
    if bits != 2:
        check_pillow(data)
    h, w = HEADER(tf.constant(data))
    assert (int(h), int(w)) == (5, 9)


@pytest.mark.parametrize("bits", [1, 4, 8])
def test_os2_core_header_palette(bits):
    """OS/2 1.x BITMAPCOREHEADER: 12 bytes, 16-bit sizes, 3-byte palette entries."""
    rng = np.random.default_rng(RNG_SEED + 7 * bits)
    pal = rand_palette(rng, 1 << bits)
    idx = rng.integers(0, 1 << bits, (3, 7))
    data = make_bmp(7, 3, bits, pack_indices(idx, bits), header_size=12, palette=pal)
    assert Image.open(io.BytesIO(data)).size == (7, 3)
    rgb = check_pillow(data)
    np.testing.assert_array_equal(rgb, np.array(pal, np.uint8)[idx])


@pytest.mark.parametrize("header_size", [40, 52, 56, 64, 108, 124])
def test_header_kinds_palette8(header_size):
    """BITMAPINFOHEADER, V2, V3, OS/2 2.x (64, read like 40 by Pillow), V4, V5."""
    rng = np.random.default_rng(RNG_SEED + header_size)
    pal = rand_palette(rng, 256)
    idx = rng.integers(0, 256, (4, 5))
    data = make_bmp(5, 4, 8, pack_indices(idx, 8), header_size=header_size, palette=pal)
    check_pillow(data)


def test_pillow_saved_files(tmp_path):
    rng = np.random.default_rng(RNG_SEED)
    arr = rng.integers(0, 256, (7, 13, 3), dtype=np.uint8)
    files = {
        "rgb24": Image.fromarray(arr),
        "rgba32": Image.fromarray(np.dstack([arr, rng.integers(0, 256, (7, 13), dtype=np.uint8)])),
        "p8": Image.fromarray(arr).quantize(37),
        "l8": Image.fromarray(arr[..., 0]),
        "1bit": Image.fromarray(arr[..., 0] > 127),
    }
    for name, im in files.items():
        path = tmp_path / (name + ".bmp")
        im.save(path, "BMP")
        check_pillow(path.read_bytes())


def test_small_palette_and_index_past_end():
    """biClrUsed < 2**bits: an index past the palette is black, as Pillow."""
    pal = [(10, 20, 30), (200, 100, 50), (1, 2, 3)]
    idx = np.array([[0, 1, 2, 3, 4, 200, 255, 7]])
    data = make_bmp(8, 1, 8, pack_indices(idx, 8), palette=pal)
    rgb = check_pillow(data)
    assert rgb[0, 3:].max() == 0
    # 4-bit with a short palette, index past the end
    idx4 = np.array([[0, 1, 2, 15, 9, 1]])
    data = make_bmp(6, 1, 4, pack_indices(idx4, 4), palette=pal)
    rgb = check_pillow(data)
    np.testing.assert_array_equal(rgb[0, :3], np.array(pal, np.uint8)[[0, 1, 2]])
    assert rgb[0, 3:5].max() == 0


def test_gray_ramp_short_palette():
    """Pillow ignores a gray-ramp palette (mode L): an index past its end is its gray level."""
    pal = [(0, 0, 0), (1, 1, 1), (2, 2, 2)]
    idx = np.array([[0, 1, 2, 3, 4, 200, 255, 7]])
    data = make_bmp(8, 1, 8, pack_indices(idx, 8), palette=pal)
    assert Image.open(io.BytesIO(data)).mode == "L"
    rgb = check_pillow(data)
    np.testing.assert_array_equal(rgb[0, :, 0], idx[0])


def test_pillow_gray_palette_bugs():
    """Files Pillow decodes wrongly (it reads 4/8-bit data with a 1-bit or 8-bit raw mode
    when the palette is black/white or a 16-level ramp, or refuses the file); the
    palette lookup is right."""
    cases = [
        (4, [(i, i, i) for i in range(16)], np.array([[0, 1, 2, 3, 15, 7]])),
        (8, [(0, 0, 0), (255, 255, 255)], np.array([[0, 1, 1, 0, 1]])),
        (4, [(0, 0, 0), (255, 255, 255)], np.array([[0, 1, 1, 0, 1]])),
    ]
    for bits, pal, idx in cases:
        data = make_bmp(idx.shape[1], 1, bits, pack_indices(idx, bits), palette=pal)
        ref = np.array(pal, np.uint8)[idx]
        try:  # Pillow's bug still there: wrong pixels or an error
            assert not np.array_equal(pillow(data, "RGB"), ref)
        except OSError:
            pass
        check_vs(data, ref)


def test_offset_quirks():
    """bfOffBits 0 or pointing at the palette (Pillow moves past it) and a gap before the data."""
    rng = np.random.default_rng(RNG_SEED)
    pal = rand_palette(rng, 16)
    idx = rng.integers(0, 16, (3, 5))
    rows = pack_indices(idx, 4)
    ref = np.array(pal, np.uint8)[idx]
    for offset in (0, 54):
        data = make_bmp(5, 3, 4, rows, palette=pal, offset=offset)
        data = data[:10] + struct.pack("<I", offset) + data[14:]
        check_vs(data, ref)
        check_pillow(data)
    data = make_bmp(5, 3, 4, rows, palette=pal, offset=54 + 64 + 10)
    check_vs(data, ref)
    check_pillow(data)


# ------------------------------------------------------------------ RLE


def rle_encode(idx, rle4, eob=True):
    """A valid RLE8/RLE4 stream (bottom-up) mixing encoded and absolute runs, with
    odd-length absolute runs and an EOL per row."""
    out = bytearray()
    for row in idx[::-1]:
        w, x = len(row), 0
        while x < w:
            run = 1
            while x + run < w and run < 255 and row[x + run] == row[x]:
                run += 1
            if run >= 3:
                out += bytes([run, row[x] * 17 if rle4 else row[x]])
                x += run
                continue
            lit = run
            while x + lit < w and lit < 255:
                nxt = 1
                while x + lit + nxt < w and row[x + lit + nxt] == row[x + lit]:
                    nxt += 1
                if nxt >= 3:
                    break
                lit += nxt
            lit = min(lit, 255)
            if lit < 3:
                for v in row[x:x + lit]:
                    out += bytes([1, v * 17 if rle4 else v])
            else:
                px = row[x:x + lit]
                if rle4:
                    body = bytes((int(px[i]) << 4) | (int(px[i + 1]) if i + 1 < lit else 0)
                                 for i in range(0, lit, 2))
                else:
                    body = bytes(int(v) for v in px)
                out += bytes([0, lit]) + body + (b"\0" if len(body) % 2 else b"")
            x += lit
        out += b"\0\0"
    if eob:
        out += b"\0\1"
    return bytes(out)


def runs_image(rng, h, w, ncol):
    """An index image with runs (for RLE) and noisy stretches (for absolute mode)."""
    rows = []
    for _ in range(h):
        row = []
        while len(row) < w:
            if rng.random() < 0.5:
                row += [int(rng.integers(ncol))] * int(rng.integers(1, 9))
            else:
                row += [int(v) for v in rng.integers(0, ncol, int(rng.integers(1, 8)))]
        rows.append(row[:w])
    return np.array(rows)


@pytest.mark.parametrize("rle4", [False, True])
@pytest.mark.parametrize("width", [1, 3, 7, 13, 31, 40])
def test_rle_encoded_and_absolute(rle4, width):
    rng = np.random.default_rng(RNG_SEED + width + 1000 * rle4)
    ncol = 16 if rle4 else 256
    pal = rand_palette(rng, ncol)
    idx = runs_image(rng, 6, width, ncol)
    stream = rle_encode(idx, rle4)
    data = make_bmp(width, 6, 4 if rle4 else 8, stream, compression=2 if rle4 else 1, palette=pal)
    rgb = check_pillow(data)
    np.testing.assert_array_equal(rgb, np.array(pal, np.uint8)[idx])


PAL16 = [(i * 16, 255 - i * 16, (i * 37) % 256) for i in range(16)]


def rle_file(stream, w=6, h=4, rle4=False, top_down=False):
    return make_bmp(w, h, 4 if rle4 else 8, bytes(stream), compression=2 if rle4 else 1,
                    palette=PAL16, top_down=top_down)


# Streams that fill the 6x4 image completely, so that Pillow decodes them too. Rows end
# with EOL: like Pillow (and browsers), an encoded run never continues into the next row.
RLE_CASES = {
    # delta right 2, up 1 from (1, row 0) to (3, row 1), then fill the rest
    "delta": (False, [1, 1, 0, 2, 2, 1, 3, 2, 0, 0, 6, 3, 0, 0, 6, 4, 0, 0, 0, 1]),
    # EOL in the middle of row 0 (rest index 0), then full rows
    "eol": (False, [2, 5, 0, 0, 6, 1, 0, 0, 6, 2, 0, 0, 6, 3, 0, 0, 0, 1]),
    # absolute runs of odd length 3, 5, 7 (word padding); the 7 runs into the next row,
    # where an encoded run is then dropped (the row is "full", as Pillow counts it)
    "absolute_odd": (False, [0, 3, 1, 2, 3, 0, 3, 9, 0, 0,
                             0, 5, 4, 5, 6, 7, 8, 0, 1, 9, 0, 0,
                             0, 7, 1, 2, 3, 4, 5, 6, 7, 0, 5, 10,
                             0, 5, 10, 11, 12, 13, 14, 0, 0, 1]),
    # an encoded run longer than the row is cut at the row's end (Pillow)
    "encoded_past_row": (False, [9, 3, 0, 0, 6, 4, 0, 0, 6, 5, 0, 0, 6, 6, 0, 1]),
    # RLE4: encoded runs alternate the two nibbles, odd lengths
    "rle4_alternate": (True, [5, 0x12, 1, 0x30, 0, 0, 6, 0x45, 0, 0, 3, 0x67, 3, 0x89, 0, 0,
                              6, 0xAB, 0, 1]),
    # RLE4 absolute runs of 3, 5, 6, 4 pixels (2, 3, 3, 2 bytes: word padding)
    "rle4_absolute_odd": (True, [0, 3, 0x12, 0x30, 3, 0x44, 0, 0,
                                 0, 5, 0x45, 0x67, 0x80, 0, 1, 0x99, 0, 0,
                                 0, 6, 0x12, 0x34, 0x56, 0, 0, 0,
                                 0, 4, 0x9A, 0xBC, 2, 0xDE, 0, 1]),
    # trailing codes after the image is full are not read (Pillow)
    "trailing_junk": (False, [6, 1, 0, 0, 6, 2, 0, 0, 6, 3, 0, 0, 6, 4, 0, 0, 0, 1, 7, 7, 7]),
}


@pytest.mark.parametrize("name", sorted(RLE_CASES))
@pytest.mark.parametrize("top_down", [False, True])
def test_rle_escape_codes(name, top_down):
    rle4, stream = RLE_CASES[name]
    check_pillow(rle_file(stream, rle4=rle4, top_down=top_down))


def test_rle_end_of_bitmap_early():
    """EOB before the image is full: the rest is palette index 0. Pillow raises "not enough
    image data"; the reference is the same stream with the zeros written out."""
    early = rle_file([6, 1, 0, 0, 2, 2, 0, 1])
    full = rle_file([6, 1, 0, 0, 2, 2, 4, 0, 0, 0, 6, 0, 0, 0, 6, 0, 0, 1])
    with pytest.raises(Exception):
        pillow(early, "RGB")
    check_vs(early, pillow(full, "RGB"))
    check_vs(rle_file([0, 1]), np.array(PAL16, np.uint8)[np.zeros((4, 6), int)])


def random_rle_stream(rng, w, h, rle4):
    """Random RLE codes, valid or not: runs longer than the row, absolute runs across
    rows, deltas, EOL/EOB anywhere, and sometimes a cut-off end."""
    out = []
    for _ in range(int(rng.integers(1, 3 * h + 4))):
        kind = rng.choice(["enc", "enc", "enc", "abs", "abs", "eol", "eol", "delta", "eob"],
                          p=[.2, .15, .15, .15, .1, .1, .05, .05, .05])
        if kind == "enc":
            out += [int(rng.integers(1, w + 3)), int(rng.integers(0, 256 if rle4 else 16))]
        elif kind == "abs":
            n = int(rng.integers(3, w + 4))
            nbytes = (n + 1) // 2 if rle4 else n
            body = [int(v) for v in rng.integers(0, 256 if rle4 else 16, nbytes)]
            out += [0, n] + body + [0] * (nbytes % 2)
        elif kind == "eol":
            out += [0, 0]
        elif kind == "delta":
            out += [0, 2, int(rng.integers(0, w)), int(rng.integers(0, 2))]
        else:
            out += [0, 1]
    if rng.random() < 0.2:
        out = out[: int(rng.integers(0, len(out) + 1))]
    return out


def test_rle_fuzz_vs_pillow_and_loop():
    """Random streams: the vectorised pass equals the per-code loop wherever it is
    used, and every image both Pillow and decode_bmp return is the same."""
    from pipeline.decode import bmp as bmp_module

    spec = [tf.TensorSpec([None], tf.int32)] + [tf.TensorSpec([], tf.int32)] * 3 + [
        tf.TensorSpec([], tf.bool)]
    fast = tf.function(bmp_module._rle_runs_vectorised, input_signature=spec)
    loop = tf.function(bmp_module._rle_runs_loop, input_signature=spec)
    rng = np.random.default_rng(RNG_SEED)
    same_as_pillow = vectorised = 0
    for trial in range(120):
        rle4 = bool(trial % 2)
        w, h = int(rng.integers(1, 10)), int(rng.integers(1, 6))
        stream = random_rle_stream(rng, w, h, rle4)
        dp = tf.constant(stream + [0, 0, 0, 0], tf.int32)
        args = (dp, tf.constant(len(stream)), tf.constant(w), tf.constant(w * h), tf.constant(rle4))
        f_runs, f_status, f_pos, ok = fast(*args)
        l_runs, l_status, l_pos = loop(*args)
        if ok:
            vectorised += 1
            np.testing.assert_array_equal(f_runs.numpy(), l_runs.numpy())
            assert (int(f_status), int(f_pos)) == (int(l_status), int(l_pos))
        data = make_bmp(w, h, 4 if rle4 else 8, bytes(stream), compression=2 if rle4 else 1,
                        palette=PAL16)
        try:
            ours = decode(data, 3)
        except tf.errors.InvalidArgumentError:
            continue
        try:
            ref = pillow(data, "RGB")
        except (OSError, ValueError):
            continue
        np.testing.assert_array_equal(ours, ref)
        same_as_pillow += 1
    assert vectorised > 40 and same_as_pillow > 10, (vectorised, same_as_pillow)


def test_rle_delta_then_eob():
    data = rle_file([1, 1, 0, 2, 2, 1, 2, 2, 0, 1])
    idx = np.zeros((4, 6), int)
    idx[3, 0] = 1
    idx[2, 3:5] = 2
    check_vs(data, np.array(PAL16, np.uint8)[idx])


@pytest.mark.parametrize("stream,rle4", [
    ([6, 1, 6, 2], False),                         # no EOB, image not full
    ([6, 1, 6, 2, 0, 0], False),                   # ends after an EOL
    ([6, 1, 0, 5, 1, 2], False),                   # absolute run cut short
    ([6, 1, 0, 2, 1], False),                      # delta cut short
    ([6, 1, 3], False),                            # a stray byte
    ([], False),                                   # no data at all
    ([6, 0x11, 0, 5, 0x12], True),                 # RLE4 absolute cut short
])
def test_rle_truncated_raises(stream, rle4):
    with pytest.raises(tf.errors.InvalidArgumentError, match="truncated"):
        decode(rle_file(stream, rle4=rle4), 3)


@pytest.mark.parametrize("stream", [
    [6, 1, 0, 0, 6, 2, 0, 0, 6, 3, 0, 0, 2, 4, 0, 5, 1, 2, 3, 4, 5, 0, 0, 1],  # absolute
    [6, 1, 0, 0, 6, 2, 0, 2, 1, 2, 0, 1],                                     # delta
])
def test_rle_past_image_raises(stream):
    with pytest.raises(tf.errors.InvalidArgumentError, match="past the end"):
        decode(rle_file(stream), 3)


def test_rle_bits_must_match():
    data = make_bmp(6, 4, 4, bytes([6, 1] * 4 + [0, 1]), compression=1, palette=PAL16)
    with pytest.raises(tf.errors.InvalidArgumentError, match="compression"):
        decode(data, 3)


# ------------------------------------------------------------------ 16/24/32-bit


def mask_channel(values, mask):
    if mask == 0:
        return np.zeros(values.shape, np.uint8)
    shift = (mask & -mask).bit_length() - 1
    top = mask >> shift
    return (((values.astype(np.int64) & mask) >> shift) * 255 // top).astype(np.uint8)


def direct_rows(values, bits):
    """[h, w] pixel values to stored bottom-up rows."""
    nbytes = bits // 8
    rows = [b"".join(int(v).to_bytes(nbytes, "little") for v in row) for row in values]
    return pack_rows(rows, bits, values.shape[1])


def test_16bit_all_values_match_pillow_exactly():
    """Every 16-bit value, 5-5-5 (BI_RGB) and 5-6-5 (BITFIELDS): Pillow's floor(v*255/max)."""
    vals = np.arange(65536).reshape(256, 256)
    rows = vals[::-1].astype("<u2").tobytes()
    for data in (make_bmp(256, 256, 16, rows),
                 make_bmp(256, 256, 16, rows, compression=3, masks=[0xF800, 0x7E0, 0x1F],
                          masks_after=True),
                 make_bmp(256, 256, 16, rows, compression=3, masks=[0x7C00, 0x3E0, 0x1F],
                          header_size=56)):
        np.testing.assert_array_equal(decode(data, 3), pillow(data, "RGB"))


@pytest.mark.parametrize("width", [1, 3, 5])
@pytest.mark.parametrize("kind", ["555", "565", "555_v4", "565_v5"])
def test_16bit_vs_pillow(width, kind):
    rng = np.random.default_rng(RNG_SEED + width)
    vals = rng.integers(0, 65536, (3, width))
    rows = direct_rows(vals, 16)
    masks = [0xF800, 0x7E0, 0x1F] if kind.startswith("565") else [0x7C00, 0x3E0, 0x1F]
    if kind == "555":
        data = make_bmp(width, 3, 16, rows)
    elif kind == "565":
        data = make_bmp(width, 3, 16, rows, compression=3, masks=masks, masks_after=True)
    else:
        data = make_bmp(width, 3, 16, rows, compression=3, masks=masks + [0],
                        header_size=108 if kind.endswith("v4") else 124)
    check_pillow(data)


@pytest.mark.parametrize("bits,masks,header", [
    (16, [0xF000, 0x0F00, 0x00F0, 0x000F], 108),                 # 4-4-4-4 with alpha
    (16, [0x001F, 0x07E0, 0xF800, 0], 40),                       # 5-6-5 in RGB order
    (16, [0x7C00, 0x03E0, 0x001F, 0x8000], 124),                 # 1-5-5-5
    (16, [0x0003, 0x001C, 0x00E0, 0], 40),                       # 2-3-3 in the low byte
    (32, [0x3FF00000, 0x000FFC00, 0x000003FF, 0xC0000000], 124), # 10-10-10-2
    (32, [0x0000FF00, 0x00FF0000, 0xFF000000, 0x000000FF], 108), # byte masks in another order
    (24, [0x0000FF, 0x00FF00, 0xFF0000, 0], 40),                 # 24-bit RGB order
])
def test_arbitrary_bitfields(bits, masks, header):
    """Masks Pillow refuses ("Unsupported BMP bitfields layout"): numpy reference."""
    rng = np.random.default_rng(RNG_SEED + bits + header)
    vals = rng.integers(0, 1 << bits, (4, 5), dtype=np.int64)
    if header == 40:
        data = make_bmp(5, 4, bits, direct_rows(vals, bits), compression=3,
                        masks=masks[:3], masks_after=True)
        amask = 0
    else:
        data = make_bmp(5, 4, bits, direct_rows(vals, bits), compression=3,
                        masks=masks, header_size=header)
        amask = masks[3]
    ref = np.stack([mask_channel(vals, m) for m in masks[:3]], axis=-1)
    check_vs(data, ref, mask_channel(vals, amask) if amask else None)


def test_alphabitfields():
    """BI_ALPHABITFIELDS (compression 6): four masks after a 40-byte header."""
    rng = np.random.default_rng(RNG_SEED)
    vals = rng.integers(0, 1 << 32, (3, 4), dtype=np.int64)
    masks = [0x00FF0000, 0x0000FF00, 0x000000FF, 0xFF000000]
    data = make_bmp(4, 3, 32, direct_rows(vals, 32), compression=6, masks=masks, masks_after=True)
    ref = np.stack([mask_channel(vals, m) for m in masks[:3]], axis=-1)
    check_vs(data, ref, mask_channel(vals, masks[3]))
    vals16 = rng.integers(0, 1 << 16, (3, 4), dtype=np.int64)
    masks16 = [0x0F00, 0x00F0, 0x000F, 0xF000]
    data = make_bmp(4, 3, 16, direct_rows(vals16, 16), compression=6, masks=masks16,
                    masks_after=True)
    ref = np.stack([mask_channel(vals16, m) for m in masks16[:3]], axis=-1)
    check_vs(data, ref, mask_channel(vals16, masks16[3]))


@pytest.mark.parametrize("width", [1, 3, 5, 7, 13, 31])
@pytest.mark.parametrize("header_size", [12, 40, 64, 108, 124])
def test_24bit(width, header_size):
    rng = np.random.default_rng(RNG_SEED + width + header_size)
    arr = rng.integers(0, 256, (3, width, 3), dtype=np.uint8)
    rows = [a[:, ::-1].tobytes() for a in arr]
    data = make_bmp(width, 3, 24, pack_rows(rows, 24, width), header_size=header_size)
    np.testing.assert_array_equal(check_pillow(data), arr)


def test_24bit_top_down_and_bitfields():
    rng = np.random.default_rng(RNG_SEED)
    arr = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    rows = [a[:, ::-1].tobytes() for a in arr]
    stored = pack_rows(rows, 24, 5, top_down=True)
    np.testing.assert_array_equal(check_pillow(make_bmp(5, 4, 24, stored, top_down=True)), arr)
    data = make_bmp(5, 4, 24, pack_rows(rows, 24, 5), compression=3,
                    masks=[0xFF0000, 0xFF00, 0xFF], masks_after=True)
    np.testing.assert_array_equal(check_pillow(data), arr)


def bgra_rows(arr4, top_down=False):
    rows = [a[:, [2, 1, 0, 3]].tobytes() for a in arr4]
    return pack_rows(rows, 32, arr4.shape[1], top_down)


@pytest.mark.parametrize("top_down", [False, True])
def test_32bit_bi_rgb_ignores_4th_byte(top_down):
    """Pillow reads 32-bit BI_RGB as BGRX, even with a non-zero 4th byte: alpha 255."""
    rng = np.random.default_rng(RNG_SEED)
    arr = rng.integers(0, 256, (3, 5, 4), dtype=np.uint8)
    for header in (40, 124):
        data = make_bmp(5, 3, 32, bgra_rows(arr, top_down), header_size=header,
                        top_down=top_down,
                        masks=[0xFF0000, 0xFF00, 0xFF, 0xFF000000] if header == 124 else None)
        assert Image.open(io.BytesIO(data)).mode == "RGB"
        np.testing.assert_array_equal(check_pillow(data), arr[..., :3])


@pytest.mark.parametrize("masks,header", [
    ([0xFF0000, 0xFF00, 0xFF], 40),                      # BGRX, no alpha mask
    ([0xFF0000, 0xFF00, 0xFF, 0], 108),                  # V4, alpha mask 0
    ([0xFF0000, 0xFF00, 0xFF, 0xFF000000], 108),         # V4 BGRA
    ([0xFF0000, 0xFF00, 0xFF, 0xFF000000], 124),         # V5 BGRA
    ([0xFF0000, 0xFF00, 0xFF, 0xFF000000], 56),          # V3 BGRA
    ([0xFF, 0xFF00, 0xFF0000, 0xFF000000], 124),         # RGBA
    ([0xFF000000, 0xFF0000, 0xFF00, 0xFF], 108),         # ABGR
    ([0xFF000000, 0xFF0000, 0xFF00, 0], 108),            # XBGR
    ([0, 0, 0], 40),                                     # all-zero masks: Pillow reads BGRA
])
def test_32bit_bitfields_vs_pillow(masks, header):
    rng = np.random.default_rng(RNG_SEED + header)
    vals = rng.integers(0, 1 << 32, (3, 5), dtype=np.int64)
    if header == 40:
        data = make_bmp(5, 3, 32, direct_rows(vals, 32), compression=3, masks=masks,
                        masks_after=True)
    else:
        data = make_bmp(5, 3, 32, direct_rows(vals, 32), compression=3, masks=masks,
                        header_size=header)
    check_pillow(data)


def test_32bit_all_zero_alpha_is_opaque():
    """An alpha mask whose values are all 0 gives alpha 255 (Pillow gives 0)."""
    rng = np.random.default_rng(RNG_SEED)
    arr = rng.integers(0, 256, (3, 5, 4), dtype=np.uint8)
    arr[..., 3] = 0
    data = make_bmp(5, 3, 32, bgra_rows(arr), compression=3,
                    masks=[0xFF0000, 0xFF00, 0xFF, 0xFF000000], header_size=108)
    assert (pillow(data, "RGBA")[..., 3] == 0).all()
    check_vs(data, arr[..., :3])
    arr[1, 2, 3] = 7  # one non-zero alpha: the file's alpha is used as is
    data = make_bmp(5, 3, 32, bgra_rows(arr), compression=3,
                    masks=[0xFF0000, 0xFF00, 0xFF, 0xFF000000], header_size=108)
    check_pillow(data)
    assert decode(data, 4)[..., 3].sum() == 7


# ------------------------------------------------------------------ real files, tf.data


@pytest.mark.skipif(not os.path.isdir(CASES2), reason="needs ../shared/cases and cases2")
def test_shared_colour_palette_and_rle8():
    expected = np.asarray(Image.open(os.path.join(CASES2, "bmp_expected_rgb.png")).convert("RGB"))
    assert expected[0, 0].tolist() == [53, 101, 197]
    for name in ("bmp_pal8_colour.bmp", "bmp_rle8.bmp"):
        with open(os.path.join(CASES2, name), "rb") as f:
            data = f.read()
        np.testing.assert_array_equal(decode(data, 3), expected)
        check_pillow(data)


@pytest.mark.skipif(not os.path.isdir(CASES2), reason="needs ../shared/cases and cases2")
def test_shared_gray8():
    with open(os.path.join(SHARED, "cases", "gray8.bmp"), "rb") as f:
        data = f.read()
    rgb = check_pillow(data)
    np.testing.assert_array_equal(decode(data, 1)[..., 0], pillow(data, "L")[..., 0])
    assert rgb.shape == (36, 50, 3)


@pytest.mark.skipif(not os.path.isdir(CASES2), reason="needs ../shared/cases and cases2")
def test_in_dataset_map(tmp_path):
    """Runs inside tf.data.Dataset.map, with the header read first for a size check."""
    rng = np.random.default_rng(RNG_SEED)
    paths, refs = [], []
    for i, bits in enumerate((24, 8, 32)):
        arr = rng.integers(0, 256, (4 + i, 6 + i, 3), dtype=np.uint8)
        im = Image.fromarray(arr)
        if bits == 8:
            im = im.quantize(50)
        elif bits == 32:
            im = im.convert("RGBA")
        path = str(tmp_path / f"{i}.bmp")
        im.save(path, "BMP")
        paths.append(path)
        refs.append(np.asarray(Image.open(path).convert("RGB")))
    with open(os.path.join(CASES2, "bmp_rle8.bmp"), "rb") as f:
        path = str(tmp_path / "rle.bmp")
        with open(path, "wb") as out:
            out.write(f.read())
    paths.append(path)
    refs.append(np.asarray(Image.open(path).convert("RGB")))

    def load(p):
        contents = tf.io.read_file(p)
        h, w = bmp_header(contents)
        with tf.control_dependencies([tf.debugging.assert_less_equal(h * w, tf.constant(10 ** 6, tf.int64))]):
            return decode_bmp(contents, 3), h, w

    ds = tf.data.Dataset.from_tensor_slices(paths).map(load)
    for (img, h, w), ref in zip(ds, refs):
        np.testing.assert_array_equal(img.numpy(), ref)
        assert (int(h), int(w)) == ref.shape[:2]


# ------------------------------------------------------------------ bad files


def _valid24():
    return make_bmp(3, 2, 24, pack_rows([bytes(9), bytes(9)], 24, 3))


def _patch(data, offset, fmt, value):
    return data[:offset] + struct.pack(fmt, value) + data[offset + struct.calcsize(fmt):]


BAD = {
    "empty": (b"", "signature"),
    "short": (b"BM" + bytes(8), "signature|header"),
    "not_bmp": (b"\x89PNG\r\n\x1a\n" + bytes(60), "signature"),
    "header_size_16": (_patch(_valid24(), 14, "<I", 16), "header size"),
    "header_size_20": (_patch(_valid24(), 14, "<I", 20), "header size"),
    "zero_width": (_patch(_valid24(), 18, "<i", 0), "width"),
    "negative_width": (_patch(_valid24(), 18, "<i", -3), "width"),
    "zero_height": (_patch(_valid24(), 22, "<i", 0), "height"),
    "bits_3": (_patch(_valid24(), 28, "<H", 3), "bits per pixel"),
    "bits_0_jpeg": (_patch(_patch(_valid24(), 28, "<H", 0), 30, "<I", 4), "bits per pixel|compression"),
    "compression_jpeg": (_patch(_valid24(), 30, "<I", 4), "compression"),
    "compression_png": (_patch(_valid24(), 30, "<I", 5), "compression"),
    "compression_7": (_patch(_valid24(), 30, "<I", 7), "compression"),
    "bitfields_8bit": (make_bmp(4, 1, 8, bytes(4), compression=3, palette=PAL16), "compression"),
    "os2v2_huffman": (make_bmp(4, 1, 1, bytes(4), compression=3, palette=PAL16[:2],
                               header_size=64), "compression"),
    "os2v2_rle24": (make_bmp(4, 1, 24, bytes(16), compression=4, header_size=64), "compression"),
    "mask_not_contiguous": (make_bmp(2, 1, 16, bytes(4), compression=3,
                                     masks=[0xF00F, 0x0F0, 0], masks_after=True), "masks"),
    "mask_wider_than_pixel": (make_bmp(2, 1, 16, bytes(4), compression=3,
                                       masks=[0xFF0000, 0xFF00, 0xFF], masks_after=True), "masks"),
    "truncated_24": (_valid24()[:-4], "truncated"),
    "truncated_8": (make_bmp(5, 3, 8, bytes(14), palette=PAL16), "truncated"),
    "truncated_1": (make_bmp(40, 3, 1, bytes(9), palette=PAL16[:2]), "truncated"),
    "truncated_palette": (make_bmp(5, 3, 8, b"", palette=PAL16, colors=256)[:54 + 16 * 4],
                          "palette"),
    "palette_too_big": (make_bmp(1, 1, 8, bytes(4), palette=PAL16, colors=70000), "palette"),
    "offset_past_end": (_patch(_valid24(), 10, "<I", 10 ** 6), "offset|truncated"),
    "bitfields_masks_missing": (make_bmp(2, 1, 16, b"", compression=3)[:54], "header"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_files_raise(name):
    data, message = BAD[name]
    for channels in (3, 4):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            decode(data, channels)


def test_truncated_last_row_padding_is_accepted():
    """Only the last row's padding missing: all pixels are there (Pillow decodes it too)."""
    pal = PAL16
    idx = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    data = make_bmp(3, 3, 8, pack_indices(idx, 8), palette=pal)[:-1]
    np.testing.assert_array_equal(check_pillow(data), np.array(pal, np.uint8)[idx])


def test_header():
    data = make_bmp(7, 3, 8, bytes(24), palette=PAL16, top_down=True)
    assert [int(v) for v in HEADER(tf.constant(data))] == [3, 7]
    data = make_bmp(300, 2, 24, bytes(1800), header_size=12)
    assert [int(v) for v in HEADER(tf.constant(data))] == [2, 300]
    h, w = HEADER(tf.constant(make_bmp(60000, 60000, 24, b"")))  # a bomb: header only
    assert (int(h), int(w)) == (60000, 60000)
    for bad in (b"", b"GIF89a" + bytes(40), _patch(_valid24(), 22, "<i", 0)):
        with pytest.raises(tf.errors.InvalidArgumentError):
            HEADER(tf.constant(bad))
    with pytest.raises(ValueError):
        decode_bmp(tf.constant(data), 2)


def test_unlowered_case_is_one_unlowered_call_over_branches_capturing_different_tensors():
    """bmp.unlowered_case builds one (Stateless)Case from public ops: each branch a traced
    function over the same captured inputs, no switch/merge lowering attribute; each
    index gives its branch's values, an index past the end the last branch's."""
    a, b = tf.constant([1.0, 2.0]), tf.constant("x")

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32), tf.TensorSpec([2], tf.float32)])
    def f(i, x):
        y = x * 3
        return bmp.unlowered_case(i, [lambda: (tf.constant(""), x),
                                      lambda: (b, y),
                                      lambda: (tf.strings.join([b, b]), y + x)])

    got = [(s.numpy(), v.numpy().tolist()) for s, v in (f(tf.constant(i), a) for i in range(4))]
    assert got == [(b"", [1.0, 2.0]), (b"x", [3.0, 6.0]), (b"xx", [4.0, 8.0]),
                   (b"xx", [4.0, 8.0])]
    graph = f.get_concrete_function().graph
    cases = [op for op in graph.get_operations() if op.type in ("Case", "StatelessCase")]
    assert [op.type for op in cases] == ["StatelessCase"]
    assert "_lower_using_switch_merge" not in cases[0].node_def.attr
    assert len(cases[0].get_attr("branches")) == 3
    assert not [op for op in graph.get_operations() if op.type in ("Switch", "Merge")]


def test_unlowered_case_refuses_branches_of_different_dtypes():
    @tf.function
    def f(i):
        return bmp.unlowered_case(i, [lambda: tf.constant(1), lambda: tf.constant(1.0)])

    with pytest.raises(ValueError, match=r"branch 1 returns dtypes \['float32'\], branch 0 \['int32'\]"):
        f(tf.constant(0))
