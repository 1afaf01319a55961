"""``Decoder.check_batch`` (the header checks as vector ops over a batch) against the
per-file checks of ``Decoder.decode``, on every file of the corpora at hand.

For each file the batch either leaves it unsettled (``decode`` then checks it alone,
as without a batch) or settles it; a settled file must have the per-file path's
route (a JPEG whose header ``extract_jpeg_shape`` reads, within ``max_pixels``),
its size and component count, EXIF orientation, SOS count and DCT scale, and
``decode(..., checked=)`` must give the per-file decode's pixels and reason (or
fail as it does). Corpora: ../shared/cases, ../shared/cases2, the generated files of
the EXIF, property and fuzz tests; the 1,000 sample photos in the slow tier.
"""

import glob
import io
import os
import struct

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from conftest import SHARED
from pipeline.decode import image as decode
from pipeline.transform import geometry as transform

pytestmark = pytest.mark.stack  # libjpeg's header rules: can differ by TensorFlow stack

TARGET = (224, 224)
SAMPLE = os.path.join(SHARED, "data", "imagenet-sample")


def _jpeg(size=(12, 16), quality=90, **kw):
    buf = io.BytesIO()
    rng = np.random.default_rng(size[0] * 31 + size[1])
    Image.fromarray(rng.integers(0, 255, size + (3,), np.uint8)).save(buf, "JPEG",
                                                                      quality=quality, **kw)
    return buf.getvalue()


def _sof_claiming(data, h, w):
    """``data`` (a JPEG) with its SOF0 header claiming ``h`` x ``w``."""
    at = data.index(b"\xff\xc0")
    return data[:at + 5] + struct.pack(">HH", h, w) + data[at + 9:]


def _crafted():
    """Files that stress the walk: bombs, cuts, garbage, odd segments."""
    base = _jpeg((64, 80))
    prog = _jpeg((40, 48), progressive=True)
    body = base[2:]
    files = {
        "plain": base, "progressive": prog, "gray": _gray_jpeg(),
        "bomb_60000": _sof_claiming(base, 60000, 60000),
        "zero_height": _sof_claiming(base, 0, 16),
        "empty": b"", "soi_only": b"\xff\xd8", "soi_ff": b"\xff\xd8\xff",
        "garbage": b"not an image at all, just some bytes",
        "fill_bytes": b"\xff\xd8\xff\xff\xff" + body[1:],
        "rst_before_frame": b"\xff\xd8\xff\xd0" + body,
        "short_length": b"\xff\xd8\xff\xe0\x00\x01" + body,
        "garbage_between": base[:20] + b"\x00\x00" + base[20:],
        "eoi_first": b"\xff\xd8\xff\xd9" + body,
        "cut_in_tables": base[:60], "cut_in_huffman_tables": base[:base.index(b"\xff\xda")],
        "cut_in_scan": base[:len(base) // 2],
        "cut_with_eoi": base[:len(base) * 2 // 3] + b"\xff\xd9",
        "png": _png(), "twelve_bit": base.replace(b"\xff\xc0\x00\x11\x08", b"\xff\xc0\x00\x11\x0c"),
    }
    return files


def _gray_jpeg():
    buf = io.BytesIO()
    Image.fromarray(np.arange(96, dtype=np.uint8).reshape(8, 12)).save(buf, "JPEG")
    return buf.getvalue()


def _png():
    buf = io.BytesIO()
    Image.fromarray(np.zeros((3, 4, 3), np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def _generated():
    """The files the EXIF and fuzz tests generate (their own generators)."""
    import test_exif_layouts as layouts  # pylint: disable=import-outside-toplevel
    import test_exif_malformed as malformed  # pylint: disable=import-outside-toplevel
    import test_exif_segments as segments  # pylint: disable=import-outside-toplevel
    out = {}
    rest = layouts._plain_jpeg()  # pylint: disable=protected-access
    rng = np.random.default_rng(layouts.SEED)
    for i, segs in enumerate(layouts._layouts(rng, 120)):  # pylint: disable=protected-access
        out[f"layout{i}"] = b"\xff\xd8" + b"".join(segs) + rest
    for k, (name, payload) in enumerate(malformed.CASES[::3]):
        out["malformed " + name] = malformed.with_app1(payload, after_jfif=k % 2 == 1)
    for name in sorted(segments.LAYOUTS):
        out["segments " + name] = segments._file(name)  # pylint: disable=protected-access
    return out


def _folder_files(root, pattern="*"):
    paths = sorted(p for p in glob.glob(os.path.join(root, pattern)) if os.path.isfile(p))
    return {os.path.relpath(p, root): open(p, "rb").read() for p in paths
            if not p.endswith((".json", ".md", ".npz"))}


class _Checks:
    def __init__(self, decoder, target=TARGET):
        self.decoder, self.target = decoder, target
        self.refused = []  # settled, and the header read raises
        self.batch = tf.function(lambda b: decoder.check_batch(b, target=target), autograph=False)
        spec = [tf.TensorSpec([], tf.string)]

        @tf.function(input_signature=spec, autograph=False)
        def per_file(c):  # the per-file path's values (decode's own functions)
            words = decode.header_words(c)
            o = decode.exif_orientation(c, words) if decoder.exif else tf.constant(1)
            scans = decode.scan_markers(c[None])[0]
            sof = decode.bytes_at(c, decode.jpeg_sof_offset(c) + 1, 1)[0]
            return decode.is_jpeg(words), o, scans, sof

        self.per_file = per_file
        self.shape = tf.function(tf.image.extract_jpeg_shape, input_signature=spec, autograph=False)

    def agree(self, files):
        """Asserts agreement on every file; returns the names settled."""
        names = sorted(files)
        settled = []
        for start in range(0, len(names), 64):
            chunk = names[start:start + 64]
            out = {k: v.numpy() for k, v in self.batch(
                tf.constant([files[n] for n in chunk])).items()}
            for i, name in enumerate(chunk):
                if out["settled"][i]:
                    self._settled(name, files[name], {k: v[i] for k, v in out.items()})
                    settled.append(name)
        return settled

    def _settled(self, name, data, got):
        c = tf.constant(data)
        jpeg, o, scans, sof = (v.numpy() for v in self.per_file(c))
        assert jpeg, name
        try:
            h, w, comps = self.shape(c).numpy()
        except tf.errors.InvalidArgumentError:
            # a header cut after its frame (before SOS): libjpeg refuses it, and so does
            # the decode this file is settled for (``_assert_same_decodes``)
            self.refused.append(name)
            return
        assert (got["height"], got["width"], got["components"]) == (h, w, comps), name
        assert h * w <= self.decoder.max_pixels, name
        # the SOS count of a progressive frame; a sequential one's stands as 1 (its
        # count does not change the cut check: ``_assert_same_decodes`` checks that)
        assert (got["orientation"], got["scans"]) == (o, scans if sof == 0xC2 else 1), name
        dh, dw = (w, h) if 5 <= o <= 8 else (h, w)
        scale = decode.Decoder.dct_ratio_index(dh, dw, self.target, ceil=True).numpy()
        assert got["scale"] == scale, name


def _decode_fns(decoder, window):
    """(per-file decode, decode with ``checked``): (image, reason, shape) tf.functions."""
    window_fn = (lambda s: transform.WINDOW_MODES["center_crop"](s[0], s[1], *TARGET)
                 ) if window else None
    kw = dict(window_fn=window_fn, target=TARGET, with_shape=True)
    spec = tf.TensorSpec([], tf.string)

    @tf.function(input_signature=[spec], autograph=False)
    def alone(c):
        out = decoder.decode(c, **kw)
        return out[0], out[1], out[-1]

    @tf.function(input_signature=[spec], autograph=False)
    def batched(c):
        checked = {k: v[0] for k, v in decoder.check_batch(
            c[None], target=None if window else TARGET).items()}
        out = decoder.decode(c, checked=checked, **kw)
        return out[0], out[1], out[-1]

    return alone, batched


def _outcome(fn, data):
    try:
        img, reason, shape = fn(tf.constant(data))
        return img.numpy(), reason.numpy(), shape.numpy()
    except tf.errors.OpError:
        return "raised"


def _assert_same_decodes(decoder, files, window=False):
    alone, batched = _decode_fns(decoder, window)
    for name in sorted(files):
        a, b = _outcome(alone, files[name]), _outcome(batched, files[name])
        if isinstance(a, str) or isinstance(b, str):
            assert a == b, name
            continue
        assert a[1] == b[1], name
        np.testing.assert_array_equal(a[0], b[0], err_msg=name)
        np.testing.assert_array_equal(a[2], b[2], err_msg=name)


@pytest.fixture(scope="module")
def checks():
    return _Checks(decode.Decoder(3))


def test_crafted_headers_settle_only_what_the_per_file_path_accepts(checks):
    files = _crafted()
    settled = set(checks.agree(files))
    assert checks.refused == ["cut_in_huffman_tables"]
    assert {"plain", "progressive", "gray", "cut_in_scan", "cut_with_eoi", "fill_bytes",
            "rst_before_frame"} <= settled
    # left to the per-file checks: the bomb, bad headers, other formats
    assert not settled & {"bomb_60000", "zero_height", "empty", "soi_only", "soi_ff",
                          "garbage", "short_length", "garbage_between",
                          "eoi_first", "cut_in_tables", "png", "twelve_bit"}


# Slow tier (some 25 s): the default tier's cheap checks are the crafted headers' routes
# above and the shared cases decoding alike below, on both stacks.
@pytest.mark.slow
@pytest.mark.sweep
def test_crafted_files_decode_alike_with_and_without_the_batch():
    decoder = decode.Decoder(3)
    files = _crafted()
    _assert_same_decodes(decoder, files)
    _assert_same_decodes(decoder, {k: files[k] for k in ("plain", "progressive", "bomb_60000",
                                                          "cut_with_eoi")}, window=True)


def test_one_bad_file_does_not_fail_its_batch(checks):
    files = _crafted()
    out = checks.batch(tf.constant([files[k] for k in sorted(files)]))
    assert out["settled"].shape == [len(files)]


def test_generated_exif_layouts_agree(checks):
    files = _generated()
    checks.refused.clear()
    settled = checks.agree(files)
    assert len(settled) >= 0.9 * len(files) and not checks.refused


@pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED, "cases")), reason="needs cases")
def test_shared_cases_agree_and_decode_alike(checks):
    files = _folder_files(os.path.join(SHARED, "cases"))
    files.update({"cases2/" + k: v for k, v in _folder_files(os.path.join(SHARED, "cases2")
                                                              ).items()})
    settled = checks.agree(files)
    assert "exif_orientation_6.jpg" in settled and "cmyk.jpg" in settled
    _assert_same_decodes(checks.decoder, files)
    _assert_same_decodes(checks.decoder, files, window=True)


def test_no_exif_decoder_settles_orientation_1():
    c = _Checks(decode.Decoder(3, exif_orientation=False))
    files = _generated()
    out = c.batch(tf.constant([files[k] for k in sorted(files)[:64]]))
    assert set(out["orientation"].numpy().tolist()) == {1}


def test_property_corpus_agrees(checks, tmp_path):
    import prop_data  # pylint: disable=import-outside-toplevel
    corpus = prop_data.make_corpus(str(tmp_path), shards=())
    del corpus
    root = str(tmp_path)
    files = {os.path.relpath(p, root): open(p, "rb").read()
             for p in glob.glob(os.path.join(root, "**", "*"), recursive=True)
             if os.path.isfile(p) and not p.endswith((".csv", ".tfrecord", ".json"))}
    assert files
    checks.agree(files)
    _assert_same_decodes(checks.decoder, files)


@pytest.mark.skipif(not os.path.isdir(SAMPLE), reason="needs the sample photos")
def test_sample_photos_cheap_subset_agree(checks):
    files = _folder_files(SAMPLE, "n01*/*")
    assert len(checks.agree(files)) == len(files)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(SAMPLE), reason="needs the sample photos")
def test_all_sample_photos_settle_agree_and_decode_alike(checks):
    files = _folder_files(SAMPLE, "*/*")
    assert len(files) == 1000
    assert len(checks.agree(files)) == 1000
    _assert_same_decodes(checks.decoder, files)
