"""Valid JPEG variants TensorFlow's decoder does not read (12-bit precision, lossless,
hierarchical, their arithmetic-coded forms) are named as such, with what reads them, in
every report (the factories' skip and raise, ``scan``, ``write_tfrecords``): never "corrupt"."""

import io
import os
import struct

import numpy as np
import pytest
from PIL import Image

import pipeline
from pipeline.decode import formats
from conftest import drain

pytestmark = pytest.mark.stack

def _seg(marker, body):
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body

def _dht(tc, th, table):  # table: {symbol: (length)} given as counts/symbols
    counts, symbols = table
    return _seg(0xC4, bytes([tc << 4 | th]) + bytes(counts) + bytes(symbols))

# DC/difference table: 17 symbols (categories 0-16), each a 5-bit code
DC = ([0, 0, 0, 0, 17] + [0] * 11, list(range(17)))
AC = ([1] + [0] * 15, [0])  # EOB only, code "0"

def _code(sym):
    return format(sym, "05b")

def _diff_bits(d):
    cat = abs(d).bit_length()
    if cat == 0:
        return _code(0)
    v = d if d > 0 else d + (1 << cat) - 1
    return _code(cat) + format(v, "0%db" % cat)

def _pack(bits):
    bits += "1" * (-len(bits) % 8)
    out = bytearray()
    for i in range(0, len(bits), 8):
        b = int(bits[i:i + 8], 2)
        out.append(b)
        if b == 0xFF:
            out.append(0)
    return bytes(out)

def jpeg_12bit(levels):
    """A valid 12-bit extended sequential (SOF1, P=12) gray JPEG: flat 8x8 blocks of
    ``levels`` [rows, cols] (0-4095), DC only."""
    rows, cols = levels.shape
    dqt = _seg(0xDB, bytes([0x00]) + bytes([1] * 64))
    sof = _seg(0xC1, bytes([12]) + struct.pack(">HH", rows * 8, cols * 8) + bytes([1, 1, 0x11, 0]))
    sos = _seg(0xDA, bytes([1, 1, 0x00, 0, 63, 0]))
    bits, prev = [], 0
    for v in levels.ravel():
        dc = 8 * (int(v) - 2048)
        bits.append(_diff_bits(dc - prev) + "0")
        prev = dc
    return (b"\xff\xd8" + dqt + sof + _dht(0, 0, DC) + _dht(1, 0, AC) + sos
            + _pack("".join(bits)) + b"\xff\xd9")

def jpeg_lossless(img, precision=8):
    """A valid lossless (SOF3) gray JPEG of ``img`` [h, w], predictor 1 (left)."""
    h, w = img.shape
    sof = _seg(0xC3, bytes([precision]) + struct.pack(">HH", h, w) + bytes([1, 1, 0x11, 0]))
    sos = _seg(0xDA, bytes([1, 1, 0x00, 1, 0, 0]))
    bits = []
    x = img.astype(np.int64)
    for r in range(h):
        for c in range(w):
            if r == 0 and c == 0:
                p = 1 << (precision - 1)
            elif r == 0:
                p = x[r, c - 1]
            elif c == 0:
                p = x[r - 1, c]
            else:
                p = x[r, c - 1]
            d = int(x[r, c] - p)
            d = ((d + 32768) % 65536) - 32768
            bits.append(_diff_bits(d) if d != -32768 else _code(16))
    return b"\xff\xd8" + sof + _dht(0, 0, DC) + sos + _pack("".join(bits)) + b"\xff\xd9"


def _baseline(mode="L"):
    buf = io.BytesIO()
    Image.fromarray((np.arange(16 * 24).reshape(16, 24) % 251).astype(np.uint8)).convert(
        mode).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _with_sof(marker: int, precision: int = 8, dhp: bool = False) -> bytes:
    """A baseline JPEG whose frame header says another process (``marker``) and precision:
    what the header names (the data is not re-encoded)."""
    data = bytearray(_baseline())
    i = data.find(b"\xff\xc0")
    data[i + 1] = marker
    data[i + 4] = precision
    if dhp:  # a DHP segment (hierarchical: T.81 B.3.2) before the frame, as the SOF's body
        body = bytes(data[i + 4:i + 2 + struct.unpack(">H", bytes(data[i + 2:i + 4]))[0]])
        data[i:i] = b"\xff\xde" + struct.pack(">H", len(body) + 2) + body
    return bytes(data)


REAL_12 = jpeg_12bit(np.arange(12).reshape(3, 4) * 300 + 100)
REAL_LOSSLESS = jpeg_lossless((np.arange(20 * 16).reshape(20, 16) * 7 % 256).astype(np.uint8))

# (name, bytes, words the reason must hold)
VARIANTS = [
    ("sof1_12bit", REAL_12, ["12-bit extended sequential", "SOF1, P=12",
                             "Pillow cannot read it either"]),
    ("sof3_lossless", REAL_LOSSLESS, ["8-bit lossless", "SOF3", "Pillow reads it"]),
    ("sof2_12bit", _with_sof(0xC2, 12), ["12-bit progressive", "SOF2, P=12"]),
    ("sof9_12bit", _with_sof(0xC9, 12), ["12-bit arithmetic-coded extended", "SOF9"]),
    ("sof10_12bit", _with_sof(0xCA, 12), ["12-bit arithmetic-coded progressive", "SOF10"]),
    ("sof3_16bit", _with_sof(0xC3, 16), ["16-bit lossless", "SOF3, P=16"]),
    ("sof11_lossless", _with_sof(0xCB, 8), ["arithmetic-coded lossless", "SOF11"]),
] + [(f"sof{m - 0xC0}_hierarchical", _with_sof(m, 8, dhp=True),
      ["hierarchical", f"SOF{m - 0xC0}"]) for m in (0xC5, 0xC6, 0xC7, 0xCD, 0xCE, 0xCF)] + [
    ("dhp_then_sof0", _with_sof(0xC0, 8, dhp=True), ["hierarchical", "baseline frame"]),
]


@pytest.mark.parametrize("name,data,words", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_jpeg_unsupported_names_the_variant(name, data, words):
    kind = formats.jpeg_unsupported(data)
    assert kind, name
    for w in words:
        if not w.startswith("Pillow"):
            assert w in kind, (w, kind)


@pytest.mark.parametrize("marker", [0xC0, 0xC1, 0xC2, 0xC9, 0xCA])
def test_variants_tensorflow_reads_are_not_named(marker):
    """8-bit baseline, extended, progressive and arithmetic-coded (TensorFlow reads them)."""
    assert formats.jpeg_unsupported(_with_sof(marker, 8)) == ""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    (root / "cls").mkdir()
    for name, data, _ in VARIANTS:
        (root / "cls" / f"{name}.jpg").write_bytes(data)
    (root / "cls" / "good.jpg").write_bytes(_baseline())
    return root


def _check(reasons):
    assert set(reasons) == {v[0] for v in VARIANTS}
    for name, data, words in VARIANTS:
        r = reasons[name]
        assert r.startswith("unsupported JPEG variant: ") and "corrupt" not in r, r
        for w in words:
            assert w in r, (w, r)


def test_from_paths_skip_names_each_variant(folder):
    paths = sorted(str(p) for p in (folder / "cls").iterdir())
    ds = pipeline.from_paths(paths, image_size=(8, 8), batch_size=None, shuffle=False,
                             on_error="skip")
    assert len(drain(ds)) == 1
    _check({os.path.basename(r.path)[:-4]: r.reason for r in pipeline.errors(ds)})


def test_from_paths_raise_names_the_variant(folder):
    ds = pipeline.from_paths([str(folder / "cls" / "sof3_lossless.jpg")], image_size=None,
                             batch_size=None, shuffle=False)
    with pytest.raises(Exception, match="unsupported JPEG variant: 8-bit lossless"):
        list(ds)


def test_scan_names_each_variant(folder):
    report = pipeline.scan(str(folder), progress=False)
    _check({os.path.basename(b["path"])[:-4]: b["reason"] for b in report.bad_files})


def test_write_tfrecords_skips_with_the_variant_named(folder, tmp_path):
    out = pipeline.write_tfrecords(str(folder), str(tmp_path / "shards"), on_error="skip")
    _check({os.path.basename(s["path"])[:-4]: s["reason"] for s in out["skipped"]})


def test_pillow_reads_the_lossless_file_exactly():
    """The hint is true: Pillow's decoder gives the lossless file's pixels."""
    want = (np.arange(20 * 16).reshape(20, 16) * 7 % 256).astype(np.uint8)
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(REAL_LOSSLESS))), want)


@pytest.mark.parametrize("name,data,words", VARIANTS[:-1], ids=[v[0] for v in VARIANTS[:-1]])
def test_graph_diagnosis_names_the_variant(name, data, words):
    """The in-graph diagnosis (tf.data service workers, no Python) names it too."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from pipeline.decode import image as decode_lib  # pylint: disable=import-outside-toplevel
    c = tf.constant(data)
    why = decode_lib.diagnose(c, decode_lib.sniff(c)).numpy().decode()
    assert why.startswith("unsupported JPEG variant: ") and "corrupt" not in why, why
    assert words[1] in why, (words[1], why)
