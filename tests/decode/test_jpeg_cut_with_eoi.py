"""A JPEG cut inside its scan data with an end-of-image marker (FF D9) appended decodes
without an error (libjpeg fills the rest with zero coefficients and only warns on stderr):
it must be reported as a truncated JPEG, like a cut without the marker, and complete files
(mid-gray ones included) must not be."""

import io
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from pipeline.decode import image as decode_lib
from pipeline.decode import guard
from pipeline.decode import jpegscan
from conftest import drain

pytestmark = pytest.mark.stack

EOI = b"\xff\xd9"


def _texture(h=96, w=120, seed=3):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:h, :w]
    base = np.stack([x * 2, y * 2, (x + y)], -1) % 256
    return np.clip(base + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8)


ENCODINGS = {
    "baseline_420": dict(quality=90),
    "baseline_444": dict(quality=90, subsampling=0),
    "baseline_gray": dict(quality=90, mode="L"),
    "restart_blocks": dict(quality=90, restart_marker_blocks=3),
    "restart_rows": dict(quality=90, restart_marker_rows=1),
    "progressive_420": dict(quality=90, progressive=True),
    "progressive_444": dict(quality=90, progressive=True, subsampling=0),
    "progressive_gray": dict(quality=90, progressive=True, mode="L"),
    "cmyk": dict(quality=90, mode="CMYK"),  # Adobe, 4 components
    "progressive_cmyk": dict(quality=90, progressive=True, mode="CMYK"),
}
FRACTIONS = (0.02, 0.15, 0.3, 0.5, 0.7, 0.85, 0.97)
LAST_SCAN_FRACTIONS = (0.05, 0.5, 0.95)  # progressive: cuts inside the last scan


def _encode(kw, arr=None):
    kw = dict(kw)
    mode = kw.pop("mode", "RGB")
    if arr is None and mode == "CMYK":  # every plane textured (Pillow's RGB -> CMYK has K = 0)
        arr = np.concatenate([_texture(), _texture(seed=5)[..., :1]], -1)
    im = Image.fromarray(_texture() if arr is None else arr)
    im = im.convert(mode) if im.mode != "CMYK" else im
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    return buf.getvalue()


def _scan_starts(data: bytes):
    """Offsets of the SOS markers after the frame header."""
    sof = min(data.find(m) for m in (b"\xff\xc0", b"\xff\xc2") if data.find(m) > 0)
    out, i = [], data.find(b"\xff\xda", sof)
    while i > 0:
        out.append(i)
        i = data.find(b"\xff\xda", i + 2)
    return out


def _cuts():
    """(name, bytes): cuts at fractions of the scan data, an EOI appended; for progressive
    files, cuts before the last scan (some scan header missing) and inside it (every
    scan header there)."""
    out = []
    for enc, kw in ENCODINGS.items():
        data = _encode(kw)
        starts = _scan_starts(data)
        first, end = starts[0], len(data) - 2
        last = starts[-1]
        for fr in FRACTIONS:
            cut = first + 20 + int((end - first - 20) * fr)
            if enc.startswith("progressive"):
                cut = first + 20 + int((last - first - 20) * fr)
            out.append((f"{enc}_{int(fr * 100)}", data[:cut] + EOI))
        # a cut right after an RSTn marker, and one right before it
        if enc.startswith("restart"):
            rst = data.find(b"\xff\xd3", first)
            out.append((f"{enc}_at_rst", data[:rst + 2] + EOI))
            out.append((f"{enc}_before_rst", data[:rst] + EOI))
        if enc.startswith("progressive"):  # between two scans: fewer scans than the script
            out.append((f"{enc}_between_scans", data[:starts[len(starts) // 2]] + EOI))
            begin = last + 2 + data[last + 2] * 256 + data[last + 3]  # after its header
            for fr in LAST_SCAN_FRACTIONS if end - begin >= 16 else ():  # data to cut
                cut = begin + 1 + int((end - begin - 2) * fr)
                out.append((f"{enc}_last_scan_{int(fr * 100)}", data[:cut] + EOI))
    return out


CUTS = _cuts()


def _complete():
    """Complete files that must stay good: every encoding, plus mid-gray images (the mark a
    cut leaves) and a file with an EXIF thumbnail (a second SOS)."""
    out = [(f"{enc}_complete", _encode(kw)) for enc, kw in ENCODINGS.items()]
    gray = np.full((40, 56, 3), 128, np.uint8)
    for enc in ("baseline_420", "restart_blocks", "progressive_420", "baseline_gray"):
        out.append((f"{enc}_midgray", _encode(ENCODINGS[enc], gray)))
    # a CMYK file whose every pixel is the level a 4-component file's zero fill decodes to
    out.append(("cmyk_fill_level", _encode(dict(quality=90), np.full((40, 56, 4), 128, np.uint8))))
    corner = _texture()
    corner[-16:, -16:] = 128
    out.append(("baseline_gray_corner", _encode(ENCODINGS["baseline_420"], corner)))
    im = Image.fromarray(corner)
    thumb = io.BytesIO()
    im.resize((16, 12)).save(thumb, "JPEG")
    exif = Image.Exif()
    exif[0x0112] = 1
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90, exif=exif.tobytes())
    out.append(("baseline_with_exif", buf.getvalue()))
    return out


COMPLETE = _complete()


def _reasons(dec, files, fn=None):
    """Each file's reason as the pipeline gives it: the decoder's, or the guard's diagnosis
    where the decoder raises."""
    fn = fn or tf.function(lambda b: dec.decode(b)[1])
    out = {}
    for name, data in files:
        try:
            out[name] = fn(tf.constant(data)).numpy().decode()
        except tf.errors.InvalidArgumentError:
            out[name] = guard.diagnose(data, "", dec.decode, lambda x: x)
    return out


@pytest.fixture(scope="module")
def decoded():
    return _reasons(decode_lib.Decoder(channels=3), CUTS + COMPLETE)


# A tf.data service worker's decoder (no Python: ``fallback=False``): one cut of each
# encoding and kind, and every complete file (the whole sweep: the slow test below).
SERVICE_CUTS = [(n, d) for n, d in CUTS if n.endswith(("_50", "_at_rst"))]


@pytest.fixture(scope="module")
def service_decoder():
    """(decoder, its traced reason function), built once for the module."""
    dec = decode_lib.Decoder(channels=3, fallback=False)
    return dec, tf.function(lambda b: dec.decode(b)[1])


@pytest.fixture(scope="module")
def service_decoded(service_decoder):
    dec, fn = service_decoder
    return _reasons(dec, SERVICE_CUTS + COMPLETE, fn)


@pytest.mark.parametrize("name", [n for n, _ in SERVICE_CUTS])
def test_cut_is_named_truncated_on_service_workers(service_decoded, name):
    assert service_decoded[name].startswith("truncated JPEG"), service_decoded[name]


@pytest.mark.parametrize("name", [n for n, _ in COMPLETE])
def test_complete_jpeg_is_good_on_service_workers(service_decoded, name):
    assert service_decoded[name] == ""


@pytest.mark.slow
def test_every_cut_is_named_truncated_on_service_workers(service_decoder):
    dec, fn = service_decoder
    reasons = _reasons(dec, CUTS, fn)
    missed = {n: r for n, r in reasons.items() if not r.startswith("truncated JPEG")}
    assert missed == {}


def test_service_decoder_graph_runs_no_python(service_decoder):
    """The check service workers run is all graph ops: no py_function anywhere in the
    decode's graph or the functions it calls."""
    graph = service_decoder[1].get_concrete_function(
        tf.TensorSpec([], tf.string)).graph.as_graph_def()
    ops = {n.op for n in graph.node} | {n.op for f in graph.library.function
                                        for n in f.node_def}
    assert "DecodeJpeg" in ops
    assert not ops & {"EagerPyFunc", "PyFunc", "PyFuncStateless"}


@pytest.mark.parametrize("target", [None, (24, 24)])
def test_progressive_cut_in_last_scan_is_named_through_a_window(target):
    """The progressive checks read the file, not the pixels: a window in the image's top
    left (decoded only there; reduced-DCT with a target) still names the cut."""
    dec = decode_lib.Decoder(channels=3)
    window = lambda shape: tf.constant([0, 0, 48, 48])
    cut = dict(CUTS)["progressive_420_last_scan_95"]
    out = dec.decode(tf.constant(cut), window_fn=window, target=target,
                     with_box=target is not None)
    assert out[1].numpy().decode() == jpegscan.PROBE_REASON
    good = dec.decode(tf.constant(dict(COMPLETE)["progressive_420_complete"]),
                      window_fn=window, target=target, with_box=target is not None)
    assert good[1].numpy().decode() == ""


def test_probe_reads_past_end_of_cut_files_only():
    """``reads_past_end``: True for cuts (sequential, progressive inside its last scan,
    CMYK), False for complete files and for a cut with no end-of-image marker."""
    probe = tf.function(jpegscan.reads_past_end)
    cuts = dict(CUTS)
    for name in ("baseline_420_85", "progressive_444_last_scan_95", "cmyk_30",
                 "restart_rows_at_rst", "progressive_gray_last_scan_5"):
        assert bool(probe(tf.constant(cuts[name]))), name
    for name, data in COMPLETE:
        assert not bool(probe(tf.constant(data))), name
    assert not bool(probe(tf.constant(cuts["baseline_420_50"][:-2])))


@pytest.mark.parametrize("name", [n for n, _ in CUTS])
def test_cut_with_eoi_is_named_truncated(decoded, name):
    assert decoded[name].startswith("truncated JPEG"), decoded[name]


@pytest.mark.parametrize("name", [n for n, _ in COMPLETE])
def test_complete_jpeg_is_good(decoded, name):
    assert decoded[name] == ""


def test_cut_decodes_without_error_in_tensorflow():
    """The premise: TensorFlow's decoder gives such a file pixels, no error."""
    name, data = CUTS[3]
    assert tf.io.decode_jpeg(data).shape[0] == 96


def test_sequential_walk_counts_mcus():
    data = _encode(ENCODINGS["baseline_420"])  # 120x96, 4:2:0: 8 x 6 MCUs of 16x16
    assert jpegscan.sequential_cut(data) == ""
    first = _scan_starts(data)[0]
    why = jpegscan.sequential_cut(data[:first + 40] + EOI)
    assert why.startswith("truncated JPEG") and "of 48;" in why


@pytest.mark.parametrize("channels", [1, 4])
def test_cut_is_named_with_every_channel_count(channels):
    dec = decode_lib.Decoder(channels=channels)
    for name, data in CUTS[::5]:
        try:
            why = dec.decode(tf.constant(data))[1].numpy().decode()
        except tf.errors.InvalidArgumentError:
            why = guard.diagnose(data, "", dec.decode, lambda x: x)
        assert why.startswith("truncated JPEG"), name


def test_from_paths_skips_and_names_cut_files(tmp_path):
    """End to end, with resizing and cropping (the crop-before-decode path): every cut file
    recorded with its reason, every complete file delivered."""
    paths = {}
    for name, data in CUTS[::2] + COMPLETE:
        p = os.path.join(str(tmp_path), name + ".jpg")
        with open(p, "wb") as f:
            f.write(data)
        paths[p] = name
    ds = pipeline.from_paths(sorted(paths), image_size=(32, 32), batch_size=None,
                             shuffle=False, on_error="skip")
    out = drain(ds)
    bad = {r.path: r.reason for r in pipeline.errors(ds)}
    assert len(out) == len(COMPLETE)
    assert {paths[p] for p in bad} == {n for n, _ in CUTS[::2]}
    assert all(r.startswith("truncated JPEG") for r in bad.values())


def test_from_paths_raise_names_the_cut_file(tmp_path):
    p = os.path.join(str(tmp_path), "cut.jpg")
    with open(p, "wb") as f:
        f.write(CUTS[2][1])
    ds = pipeline.from_paths([p], image_size=None, batch_size=None, shuffle=False)
    with pytest.raises(Exception, match="truncated JPEG") as e:
        list(ds)
    assert "cut.jpg" in str(e.value)


def test_scan_reports_cut_files(tmp_path):
    for name, data in (CUTS[1], CUTS[-3], COMPLETE[0]):
        with open(os.path.join(str(tmp_path), name + ".jpg"), "wb") as f:
            f.write(data)
    report = pipeline.scan(str(tmp_path), progress=False)
    reasons = {os.path.basename(b["path"]): b["reason"] for b in report.bad_files}
    assert set(reasons) == {CUTS[1][0] + ".jpg", CUTS[-3][0] + ".jpg"}
    assert all(r.startswith("truncated JPEG") for r in reasons.values()), reasons
    assert report.num_ok == 1
