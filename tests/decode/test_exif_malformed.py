"""Malformed EXIF (IFD loops, counts past the end, offsets out of range, field types, repeated
orientation tags, truncated APP1, Exif header variants): the orientation read in graph is
Pillow's (``Image.getexif().get(0x0112)`` as ``ImageOps.exif_transpose`` applies it), or 1 where
Pillow applies none. An enumeration of the kinds, and a bounded hypothesis fuzz over the
structures."""

import io
import struct
import warnings

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings, strategies as st
from PIL import Image

from pipeline.decode import image as d

# the reference is Pillow's reader, the same on both stacks; the reader is graph ops
pytestmark = pytest.mark.stack

_BASE = None
def base_jpeg():
    global _BASE
    if _BASE is None:
        b = io.BytesIO(); Image.fromarray(np.arange(48, dtype=np.uint8).reshape(6, 8)).save(b, "JPEG"); _BASE = b.getvalue()
    return _BASE
def with_app1(payload, after_jfif=False):
    j = base_jpeg()
    seg = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    return j[:2] + seg + j[2:] if not after_jfif else j[:20] + seg + j[20:]
def pillow_orientation(data):
    """Pillow's applied orientation (1 when it applies none, or cannot read the block)."""
    warnings.simplefilter("ignore")
    try:
        with Image.open(io.BytesIO(data)) as im:
            o = im.getexif().get(0x0112, 1)
    except Exception:
        return 1
    return {2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8}.get(o, 1) if not isinstance(o, (list, dict, bytearray)) else 1
def tiff(order, entries, ifd=8, nxt=0, magic=None, extra=b"", header=None):
    e = "<" if order == "II" else ">"
    head = order.encode() + (magic if magic is not None else struct.pack(e + "H", 42)) + struct.pack(e + "I", ifd)
    if header is not None: head = header
    body = struct.pack(e + "H", len(entries))
    for tag, typ, cnt, val in entries:
        body += struct.pack(e + "HHI", tag, typ, cnt) + (val if isinstance(val, bytes) else struct.pack(e + "I", val))
    return head + body + struct.pack(e + "I", nxt) + extra
def inline(order, typ, v):
    e = "<" if order == "II" else ">"
    if typ in (3, 8): return struct.pack(e + "HH", v & 0xFFFF, 0)
    if typ in (1, 2, 6, 7): return bytes([v & 0xFF, 0, 0, 0])
    if typ == 11: return struct.pack(e + "f", float(v))
    return struct.pack(e + "I", v & 0xFFFFFFFF)


def _cases():
    cases = []
    cases = []
    for order in ("II", "MM"):
        e = "<" if order == "II" else ">"
        for typ in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 13, 99):
            for cnt in (0, 1, 2, 3):
                for v in (6, 3):
                    if typ in (5, 10):
                        val = struct.pack(e + "I", 26 + 12 * 1 + 4)  # offset to extra
                        extra = struct.pack(e + "II", v * 2, 2)
                    elif typ == 12:
                        val = struct.pack(e + "I", 26 + 4); extra = struct.pack(e + "d", float(v))
                    else:
                        val = inline(order, typ, v); extra = b""
                        if cnt * {1:1,2:1,3:2,4:4,6:1,7:1,8:2,9:4,11:4}.get(typ, 1) > 4:
                            val = struct.pack(e + "I", 26); extra = inline(order, typ, v) * 4
                    t = tiff(order, [(0x0112, typ, cnt, val)], extra=extra)
                    cases.append((f"{order} type{typ} count{cnt} v{v}", b"Exif\0\0" + t))
        for a, b in ((6, 3), (3, 6), (0, 6), (9, 6)):
            t = tiff(order, [(0x0112, 3, 1, inline(order, 3, a)), (0x0112, 3, 1, inline(order, 3, b))])
            cases.append((f"{order} dup {a},{b}", b"Exif\0\0" + t))
            t = tiff(order, [(0x0112, 3, 0, inline(order, 3, a)), (0x0112, 3, 1, inline(order, 3, b))])
            cases.append((f"{order} dup count0 {a},{b}", b"Exif\0\0" + t))
            t = tiff(order, [(0x0112, 99, 1, inline(order, 3, a)), (0x0112, 3, 1, inline(order, 3, b))])
            cases.append((f"{order} dup badtype {a},{b}", b"Exif\0\0" + t))
        for v in (0, 1, 9, 65535, 256 + 6):
            cases.append((f"{order} value {v}", b"Exif\0\0" + tiff(order, [(0x0112, 3, 1, inline(order, 3, v))])))
        for ifd in (0, 4, 7, 1000, 2**31, 26):
            cases.append((f"{order} ifd {ifd}", b"Exif\0\0" + tiff(order, [(0x0112, 3, 1, inline(order, 3, 6))], ifd=ifd)))
        for nxt in (8, 0xFFFFFFFF, 26):
            cases.append((f"{order} next {nxt}", b"Exif\0\0" + tiff(order, [(0x0112, 3, 1, inline(order, 3, 6))], nxt=nxt)))
        full = b"Exif\0\0" + tiff(order, [(0x0100, 3, 1, inline(order, 3, 8)), (0x0112, 3, 1, inline(order, 3, 6))])
        for cut in range(8, len(full)):
            cases.append((f"{order} cut {cut}", full[:cut]))
        for hdr in (b"Exif\0\0Exif\0\0", b"Exif\0\xff", b"exif\0\0", b"Exif", b"Exif\0\0\0\0"):
            cases.append((f"{order} header {hdr!r}", hdr + tiff(order, [(0x0112, 3, 1, inline(order, 3, 6))])))
        # (43, BigTIFF, is left out: no EXIF writer makes one; docs/limitations.md)
        for magic in (struct.pack(e + "H", 0), b"\x2a\x2a", struct.pack(">H", 42) if e == "<" else struct.pack("<H", 42)):
            cases.append((f"{order} magic {magic!r}", b"Exif\0\0" + tiff(order, [(0x0112, 3, 1, inline(order, 3, 6))], magic=magic)))
        many = [(0x0100 + i, 3, 1, inline(order, 3, 1)) for i in range(40)] + [(0x0112, 3, 1, inline(order, 3, 6))]
        cases.append((f"{order} entry 40", b"Exif\0\0" + tiff(order, many)))
        for n in (0, 1000):
            t = bytearray(tiff(order, [(0x0112, 3, 1, inline(order, 3, 6))])); t[8:10] = struct.pack(e + "H", n)
            cases.append((f"{order} count field {n}", b"Exif\0\0" + bytes(t)))
    cases.append(("bad order", b"Exif\0\0" + b"XX" + tiff("II", [(0x0112, 3, 1, inline("II", 3, 6))])[2:]))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def orientation():
    return tf.function(lambda b: d.exif_orientation(b))


@pytest.mark.parametrize("after_jfif", [False, True])
def test_every_malformed_kind_gives_pillows_orientation(orientation, after_jfif):
    wrong = []
    for name, payload in CASES:
        data = with_app1(payload, after_jfif)
        want, got = pillow_orientation(data), int(orientation(tf.constant(data)))
        if want != got:
            wrong.append((name, want, got))
    assert not wrong, wrong[:20]
    assert len(CASES) > 350


def test_the_enumeration_holds_orientations_pillow_applies():
    """The reference is not trivially 1: many variants are applied by Pillow."""
    applied = sum(pillow_orientation(with_app1(p)) != 1 for _, p in CASES)
    assert applied > 100


# ------------------------------------------------------------------ fuzz

_TYPES = st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 99])
_TAGS = st.sampled_from([0x0112, 0x0112, 0x0112, 0x0100, 0x0110, 0x8769, 0x0000, 0xFFFF])
_VALUES = st.one_of(st.sampled_from([0, 1, 2, 3, 6, 8, 9, 65535, 0x10006, 0x60000, 2 ** 32 - 1]),
                    st.integers(0, 2 ** 32 - 1))


@st.composite
def exif_payloads(draw):
    order = draw(st.sampled_from(["II", "MM"]))
    e = "<" if order == "II" else ">"
    entries = []
    for _ in range(draw(st.integers(0, 6))):
        typ, tag = draw(_TYPES), draw(_TAGS)
        cnt = draw(st.one_of(st.sampled_from([0, 1, 1, 1, 2, 3, 8]), st.integers(0, 2 ** 32 - 1)))
        if draw(st.booleans()):
            val = inline(order, typ, draw(_VALUES))
        else:  # an offset: into the structure, past it, or anywhere
            val = struct.pack(e + "I", draw(st.one_of(st.integers(0, 120),
                                                      st.integers(0, 2 ** 32 - 1))))
        entries.append((tag, typ, cnt, val))
    extra = draw(st.binary(max_size=40)) + b"".join(
        struct.pack(e + v, n) for v, n in draw(st.lists(st.tuples(
            st.sampled_from(["H", "I", "d", "f"]), st.sampled_from([6, 3, 8, 2, 12, 1])),
            max_size=4)) if v in "HI") + draw(st.sampled_from([b"", struct.pack(e + "II", 12, 2),
                                                            struct.pack(e + "d", 6.0),
                                                            struct.pack(e + "f", 8.0)]))
    ifd = draw(st.one_of(st.just(8), st.sampled_from([0, 2, 4, 7, 9, 1000, 2 ** 32 - 1]),
                         st.integers(0, 80)))
    nxt = draw(st.sampled_from([0, 8, 2 ** 32 - 1, 26]))
    magic = draw(st.sampled_from([None, None, None, b"\x00\x2a", b"\x2a\x00", b"\x00\x00"]))
    t = bytearray(tiff(order, entries, ifd=ifd, nxt=nxt, magic=magic, extra=extra))
    if draw(st.booleans()) and len(t) >= 10:  # an entry count that is not the entries'
        t[8:10] = struct.pack(e + "H", draw(st.integers(0, 65535)))
    prefix = draw(st.sampled_from([b"Exif\0\0", b"Exif\0\0", b"Exif\0\0Exif\0\0",
                                   b"Exif\0\xff"]))
    payload = prefix + bytes(t)
    cut = draw(st.one_of(st.just(len(payload)), st.integers(0, len(payload))))
    return payload[:cut]


@settings(max_examples=300, derandomize=True, database=None)
@given(payload=exif_payloads(), after_jfif=st.booleans())
def test_fuzz_malformed_exif_gives_pillows_orientation(orientation, payload, after_jfif):
    data = with_app1(payload, after_jfif)
    assert int(orientation(tf.constant(data))) == pillow_orientation(data), payload


# Found by the atheris harness (tests/decode/fuzz_readers.py): a JPEG cut inside its Huffman tables
# after a valid EXIF block (orientation 6). Pillow cannot open it; it is a bad file, named,
# never delivered (rotated or not).
_FUZZ_CUT_TABLES = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffe100224578696600004d4d002a0000000800010112"
    "0003000000010006000000000000ffdb004300080606070605080707070909080a0c140d0c0b0b0c1912"
    "130f141d1a1f1e1d1a1c1c20242e2720222c231c1c2837292c30313434341f27393d38323c2e333432ff"
    "db0043010909090c0b0c180d0d1832211c21323232323232323232323232323232323232323232323232"
    "3232323232323232323232323232323232323232323232323232ffc00011080009000703012200021101"
    "031101ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b51000"
    "02010303020403050504040000017d01020300041105122131d3d426d6d7d8d9dae2e3e4e5e6e7e8e9ea"
    "f2f3f4f5f6f7f8f9faffda000c03010002110311003f004b0b3b6f0bda2dada240d7814191a5388e207a"
    "6e391c9ec33df3d31b8a82ff00fd65effd84e4ff00da9457257af18b4e71e66d27bb5bf449745ff059cf"
    "8dc652cbaa2a1ec94dd936ddef767fffd9")


def test_fuzz_found_jpeg_cut_in_its_tables_is_a_named_bad_file(tmp_path):
    import pipeline  # pylint: disable=import-outside-toplevel
    from conftest import drain  # pylint: disable=import-outside-toplevel
    with pytest.raises(Exception):
        Image.open(io.BytesIO(_FUZZ_CUT_TABLES)).load()
    p = tmp_path / "cut.jpg"
    p.write_bytes(_FUZZ_CUT_TABLES)
    ds = pipeline.from_paths([str(p)], image_size=None, batch_size=None, shuffle=False,
                             on_error="skip")
    assert drain(ds) == []
    (record,) = pipeline.errors(ds)
    assert record.path == str(p) and "JPEG" in record.reason
