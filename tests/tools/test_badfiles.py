"""Each kind of fault, made here (not only the shared cases): raised with path + reason, or
skipped and recorded, with every good file delivered exactly once and labels aligned."""

import io
import os
import re
import struct
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from pipeline.decode.guard import RAISE_HINT
from io_helpers import png_claiming
from conftest import flatten, index_values, run_cli, solid


def _jpeg_bytes(value, size=(40, 30)):
    buf = io.BytesIO()
    Image.fromarray(np.full((size[1], size[0], 3), value, np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def _png_bytes(value, size=(20, 16)):
    buf = io.BytesIO()
    Image.fromarray(np.full((size[1], size[0], 3), value, np.uint8)).save(buf, "PNG")
    return buf.getvalue()




def _jpeg_claiming(w, h):
    """A real JPEG whose SOF0 dimensions are patched to w x h."""
    b = bytearray(_jpeg_bytes(10, (16, 16)))
    i = b.index(b"\xff\xc0")
    b[i + 5:i + 7] = struct.pack(">H", h)
    b[i + 7:i + 9] = struct.pack(">H", w)
    return bytes(b)


def _pil_claiming(fmt, offset, layout, w, h):
    """A real 4x4 ``fmt`` file whose header width/height (``layout`` at ``offset``)
    are patched to w x h."""
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), (1, 2, 3)).save(buf, fmt)
    b = bytearray(buf.getvalue())
    b[offset:offset + struct.calcsize(layout)] = struct.pack(layout, w, h)
    return bytes(b)


def _gif_claiming(w, h):
    return _pil_claiming("GIF", 6, "<HH", w, h)


def _bmp_claiming(w, h):
    return _pil_claiming("BMP", 18, "<ii", w, h)


def _corrupt_middle(data):
    b = bytearray(data)
    mid = len(b) // 2
    b[mid:mid + 64] = bytes((x * 37 + 11) % 256 for x in range(64))  # deterministic junk
    return bytes(b)


FAULTS = {
    # name: (bytes, words the reason must contain)
    "zero.jpg": (b"", "empty"),
    "zero.png": (b"", "empty"),
    "html.jpg": (b"<html><body>404</body></html>", "not an image"),
    "text.JPEG": (b"hello world, not a picture\n" * 4, "not an image"),
    "random.png": (bytes((x * 91 + 7) % 256 for x in range(300)), "not an image"),
    "trunc10.jpg": (_jpeg_bytes(50)[:10], "JPEG"),
    "trunc50.jpg": (_jpeg_bytes(60)[: len(_jpeg_bytes(60)) // 2], "truncated JPEG"),
    "trunc90.jpg": (_jpeg_bytes(70)[: len(_jpeg_bytes(70)) * 9 // 10], "truncated JPEG"),
    "trunc50.png": (_png_bytes(80)[: len(_png_bytes(80)) // 2], "PNG"),
    "noiend.png": (_png_bytes(90)[:-12], "IEND"),
    # IEND intact: the reason must not claim truncation (fresh-eyes finding)
    "corrupt_mid.png": (_corrupt_middle(_png_bytes(100, (64, 64))), "corrupt PNG"),
    "bomb.png": (png_claiming(100000, 100000), "max_pixels"),
    "bomb.jpg": (_jpeg_claiming(65000, 65000), "max_pixels"),
    "bomb.gif": (_gif_claiming(65000, 65000), "max_pixels"),
    "bomb.bmp": (_bmp_claiming(70000, 70000), "max_pixels"),
}


@pytest.fixture
def mixed(tmp_path):
    """Class folder 'good' (values 1..N) and 'bad' holding every fault kind."""
    root = tmp_path / "mixed"
    good = [solid(str(root / "good" / f"g{k:02d}.png"), k) for k in range(1, 21)]
    bad = {}
    os.makedirs(root / "bad")
    for name, (data, words) in FAULTS.items():
        p = str(root / "bad" / name)
        with open(p, "wb") as f:
            f.write(data)
        bad[p] = words
    return str(root), good, bad


@pytest.mark.parametrize("parallel, shuffle", [(1, False), (8, True), (3, True)])
def test_skip_mode_every_good_file_once_every_bad_file_recorded(mixed, parallel, shuffle):
    root, good, bad = mixed
    ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=3, on_error="skip",
                                 num_parallel_calls=parallel, shuffle=shuffle, seed=4)
    assert ds.class_names == ["bad", "good"]
    for _ in range(2):
        x, y = flatten(ds)
        assert sorted(index_values(x)) == list(range(1, 21))
        assert (y == 1).all()
    recs = {r.path: r.reason for r in pipeline.errors(ds)}
    assert set(recs) == set(bad)
    for path, words in bad.items():
        assert words in recs[path], (path, recs[path])


@pytest.mark.stack  # the decoders' or Keras' behaviour, by stack
@pytest.mark.parametrize("name", sorted(FAULTS))
def test_raise_mode_names_path_and_reason(mixed, name):
    root, good, bad = mixed
    path = os.path.join(root, "bad", name)
    ds = pipeline.from_paths(good[:5] + [path] + good[5:9], image_size=(8, 8),
                             batch_size=4, shuffle=False)
    with pytest.raises(tf.errors.OpError) as e:
        list(ds)
    assert path in str(e.value) and FAULTS[name][1] in str(e.value)


def test_error_budget(mixed):
    root, good, bad = mixed
    ds = pipeline.from_directory(root, image_size=(8, 8), on_error="skip", max_errors=3)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        list(ds)
    # One clear line: the count, the budget, the first reasons, where the full list is;
    # no Python traceback and no TensorFlow op annotations in the reasons.
    # (TensorFlow appends its own "[[{{node ...}}]] [Op:IteratorGetNext]" line)
    msg = e.value.message[e.value.message.index("pipeline: ErrorBudgetExceeded"):].splitlines()[0]
    assert re.search(r"pipeline: ErrorBudgetExceeded: 4 bad files of 35, over the budget "
                     r"max_errors=3 \(3 allowed\)\. Reasons: .*First files: .*The full list: "
                     r"pipeline\.errors\(dataset\)\.", msg), msg
    assert "Traceback" not in msg and "function_node" not in msg and "[Op:" not in msg, msg
    # Found by a fresh-eyes user: elements cancelled while the failed iterator was torn
    # down were recorded as bad files. Only bad files are recorded, and a new epoch
    # raises again.
    # The record is written by the tf.data threads that ran the failed elements: wait for
    # them (at most 30 s), then check that only the bad files are there.
    import time
    deadline = time.monotonic() + 30
    while len(pipeline.errors(ds)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    recorded = [r.path for r in pipeline.errors(ds)]
    assert len(recorded) == 4 and set(recorded) <= set(bad)
    with pytest.raises(tf.errors.InvalidArgumentError, match="ErrorBudgetExceeded"):
        list(ds)
    assert len(pipeline.errors(ds)) == 4
    ds = pipeline.from_directory(root, image_size=(8, 8), on_error="skip", max_errors=0.5)
    assert sum(int(x.shape[0]) for x, _ in ds) == 20   # 15 of 35 bad < 50%


def test_long_run_of_decoder_failures_is_counted(tmp_path):
    # 70 corrupt files in a row, unshuffled, then good ones: each is named.
    bad_bytes = _corrupt_middle(_png_bytes(1, (64, 64)))
    paths = []
    for k in range(70):
        p = str(tmp_path / f"bad{k:03d}.png")
        open(p, "wb").write(bad_bytes)
        paths.append(p)
    paths += [solid(str(tmp_path / f"good{k}.png"), k) for k in range(1, 6)]
    ds = pipeline.from_paths(paths, image_size=(8, 8), batch_size=4, on_error="skip",
                             shuffle=False)
    assert sorted(index_values(flatten(ds)[0])) == [1, 2, 3, 4, 5]
    assert {r.path for r in pipeline.errors(ds)} == set(paths[:70])


def test_symlinks_dangling_and_loops(tmp_path):
    root = tmp_path / "links"
    a = solid(str(root / "a" / "real.png"), 5)
    os.makedirs(root / "b")
    os.symlink(a, root / "b" / "link.png")                 # labelled by where it sits: b
    os.symlink(str(tmp_path / "missing.png"), root / "b" / "dangling.png")
    os.symlink(str(root), root / "a" / "loop")             # a folder loop
    outside = solid(str(tmp_path / "ext" / "x.png"), 9)
    os.symlink(os.path.dirname(outside), root / "a" / "linked_dir")
    ds = pipeline.from_directory(str(root), image_size=(4, 4), on_error="skip", shuffle=False)
    x, y = flatten(ds)
    assert sorted(zip(index_values(x), y.tolist())) == [(5, 0), (5, 1)]
    recs = pipeline.errors(ds)
    assert [os.path.basename(r.path) for r in recs] == ["dangling.png"]
    assert "dangling" in recs[0].reason
    ds = pipeline.from_directory(str(root), image_size=(4, 4), on_error="skip",
                                 follow_links=True, shuffle=False)
    x, y = flatten(ds)
    assert sorted(index_values(x)) == [5, 5, 9]             # loop visited once, no hang


def test_empty_class_folder_warns(tmp_path, caplog):
    solid(str(tmp_path / "t" / "full" / "0.png"), 1)
    os.makedirs(tmp_path / "t" / "hollow")
    from absl import logging as absl_logging
    absl_logging.set_verbosity(absl_logging.WARNING)
    with caplog.at_level("WARNING"):
        ds = pipeline.from_directory(str(tmp_path / "t"), image_size=(4, 4))
    assert ds.class_names == ["full", "hollow"]
    assert "hollow" in caplog.text


@pytest.mark.parametrize("name", ["with space.png", "写真 テスト.png", "emoji 🐱.jpg",
                                  "quote's.png"])
def test_unusual_names_end_to_end(tmp_path, name):
    p = solid(str(tmp_path / "u" / "cls ü" / name), 77, fmt="PNG" if name.endswith("png")
              else "JPEG")
    ds = pipeline.from_directory(str(tmp_path / "u"), image_size=(4, 4))
    x, y = flatten(ds)
    assert abs(index_values(x)[0] - 77) <= 2 and ds.file_paths == [p]
    # and a bad file with such a name is named exactly
    bad = str(tmp_path / "u" / "cls ü" / ("bad " + name))
    open(bad, "wb").write(b"")
    ds = pipeline.from_directory(str(tmp_path / "u"), image_size=(4, 4), on_error="skip")
    list(ds)
    assert [r.path for r in pipeline.errors(ds)] == [bad]


def test_scan_reports_everything(mixed, tmp_path):
    root, good, bad = mixed
    report = pipeline.scan(root, progress=False)
    assert report.num_files == 35 and report.num_ok == 20
    assert report.per_class == {"bad": 15, "good": 20}
    assert {b["path"] for b in report.bad_files} == set(bad)
    assert sum(report.file_bytes_histogram.values()) == 35
    text = report.table()
    assert "bad files (15)" in text and "per format" in text
    import json
    out = tmp_path / "scan.json"
    # the command, in this process (``run_cli``: its exit status and output are its own)
    code, stdout, err = run_cli("scan", root, f"--json_out={out}", "--noprogress")
    assert code == 1, err[-2000:]                        # bad files found: exit 1
    assert json.loads(out.read_text())["num_ok"] == 20
    assert "bad files (15)" in stdout
    code, _, err = run_cli("scan", str(tmp_path / "nope"), "--noprogress")
    assert code == 2 and "nope" in err and "Traceback" not in err


def test_scan_manifests_max_pixels_and_cli_usage(mixed, tmp_path):
    """Found by a fresh-eyes user: manifests with paths outside their folder could not
    be scanned, small max_pixels was refused with a message about image_size, 0 was
    ignored, and CLI mistakes printed tracebacks or exited 1 ("bad files found")."""
    root, good, bad = mixed
    man = tmp_path / "m" / "list.csv"
    os.makedirs(man.parent)
    rows = good[:3] + [p for p in bad if p.endswith("zero.png")]
    man.write_text("path,label\n" + "".join(f"{p},x\n" for p in rows))
    with pytest.raises(ValueError, match="allow_outside_root"):
        pipeline.scan(str(man), progress=False)
    report = pipeline.scan(str(man), progress=False, allow_outside_root=True)
    assert len(rows) == 4 and report.num_files == 4 and report.num_ok == 3
    small = pipeline.scan(os.path.join(root, "good"), max_pixels=10, progress=False)
    assert small.num_ok == 0 and "max_pixels=10" in small.bad_files[0]["reason"]
    with pytest.raises(ValueError, match="max_pixels=0"):
        pipeline.scan(root, max_pixels=0, progress=False)
    # in this process (``run_cli``): the exit status and messages are the command's own
    code, out, _ = run_cli("scan", str(man), "--allow_outside_root", "--noprogress")
    assert code == 1 and "bad files (1)" in out
    code, _, err = run_cli("scan")                  # no source: a usage error, exit 2
    assert code == 2 and "usage: python -m pipeline scan SOURCE" in err
    assert "--batch_size" not in err                # the message, not the whole flag list
    code, _, err = run_cli("convert", str(tmp_path / "nope"), str(tmp_path / "out"))
    assert code == 2 and "Traceback" not in err
    assert "pipeline convert: error:" in err and "nope" in err


@pytest.mark.stack  # the decoders' or Keras' behaviour, by stack
@pytest.mark.needs_tfio
def test_truncated_tiff_is_bad(tmp_path):
    """Found by a fresh-eyes user: libtiff decoded a TIFF cut in half without an
    error (filling the rest). Its strips are checked against the file size."""
    rng = np.random.RandomState(0)
    ok, cut, lzw_cut = (str(tmp_path / n) for n in ("ok.tiff", "cut.tiff", "lzw_cut.tiff"))
    Image.fromarray(rng.randint(0, 255, (100, 120, 3), np.uint8)).save(ok)
    data = open(ok, "rb").read()
    open(cut, "wb").write(data[:len(data) // 2])
    Image.fromarray(rng.randint(0, 255, (100, 120, 3), np.uint8)).save(
        str(tmp_path / "lzw.tiff"), compression="tiff_lzw")
    data = open(tmp_path / "lzw.tiff", "rb").read()
    open(lzw_cut, "wb").write(data[:len(data) // 2])
    with pytest.raises(tf.errors.OpError, match=r"cut.tiff \(truncated TIFF \(image data runs "
                                                r"to byte \d+, the file has \d+\)"):
        list(pipeline.from_paths([ok, cut], image_size=(8, 8), shuffle=False))
    ds = pipeline.from_paths([ok, cut, lzw_cut], image_size=(8, 8), shuffle=False,
                             on_error="skip", batch_size=None)
    assert len(list(ds)) == 1
    assert sorted(os.path.basename(r.path) for r in pipeline.errors(ds)) == [
        "cut.tiff", "lzw_cut.tiff"]


@pytest.mark.stack  # the decoders' or Keras' behaviour, by stack
def test_low_bit_depth_png_alpha_is_opaque(tmp_path):
    """Found by a fresh-eyes user: 1-, 2- and 4-bit PNGs got alpha 1, 3 or 15 with
    channels=4 (TensorFlow's decode_png), not 255."""
    rng = np.random.RandomState(0)
    g = (rng.rand(8, 8) * 255).astype(np.uint8)
    paths = [str(tmp_path / n) for n in ("b1.png", "p2.png", "g8.png")]
    Image.fromarray(g).convert("1").save(paths[0])
    Image.fromarray(np.stack([g, g // 2, 255 - g], -1)).convert(
        "P", palette=Image.ADAPTIVE, colors=4).save(paths[1], bits=2)
    Image.fromarray(g).save(paths[2])
    ds = pipeline.from_paths(paths, image_size=None, batch_size=None, channels=4, shuffle=False)
    for p, got in zip(paths, ds.as_numpy_iterator()):
        ref = np.asarray(Image.open(p).convert("RGBA"))
        assert got.shape == (8, 8, 4) and (got[..., 3] == 255).all(), p
        assert np.array_equal(got, ref), p



@pytest.mark.parametrize("order", ["decoder_failure_first", "header_bomb_first"])
def test_raise_names_the_first_bad_file_in_order(tmp_path, order):
    """Found by a fresh-eyes user: in raise mode with shuffle=False, a file whose
    decoder raised was named before an earlier file refused from its header."""
    good = [str(tmp_path / f"g{k}.png") for k in range(3)]
    for k, p in enumerate(good):
        Image.new("RGB", (4, 4), (k, 0, 0)).save(p)
    trunc = str(tmp_path / "trunc.png")
    open(trunc, "wb").write(open(good[0], "rb").read()[:40])          # the decoder raises
    bomb = str(tmp_path / "bomb.png")
    data = bytearray(open(good[0], "rb").read())
    data[16:24] = struct.pack(">II", 60000, 60000)                    # refused from IHDR
    open(bomb, "wb").write(bytes(data))
    first, second = (trunc, bomb) if order == "decoder_failure_first" else (bomb, trunc)
    ds = pipeline.from_paths([good[0], first, good[1], second, good[2]], image_size=(4, 4),
                             batch_size=8, shuffle=False)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        list(ds)
    msg = e.value.message
    assert f"cannot load file {first} " in msg and second not in msg, msg


# --- issue 15: a bad file is decoded once ----------------------------------------------

_ITERATE = """
import sys
import pipeline
ds = pipeline.from_directory(sys.argv[1], batch_size=None, shuffle=False, on_error=sys.argv[2])
try:
    print(sum(1 for _ in ds), "delivered")
except Exception as e:  # raise mode: the truncated file stops the epoch
    print(type(e).__name__, str(e).split("assertion failed: [")[-1].splitlines()[0])
if sys.argv[2] == "skip":
    print([r.reason for r in pipeline.errors(ds)])
"""


@pytest.mark.stack  # the decoders' or Keras' behaviour, by stack
# libjpeg's line on every stack with "skip"; "raise" (a process of some 15 s) once
@pytest.mark.parametrize("on_error", ["skip", pytest.param("raise", marks=pytest.mark.sweep)])
def test_a_truncated_jpeg_is_decoded_once_in_an_epoch(tmp_path, on_error):
    """Found by a fresh-eyes user: TensorFlow logged "Premature end of JPEG data" twice for
    one truncated JPEG in one epoch: the map decoded it, then the diagnosis decoded it again."""
    import subprocess
    import sys
    noise = np.random.RandomState(0).randint(0, 256, (64, 64, 3)).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(noise).save(buf, "JPEG")
    data = buf.getvalue()
    os.makedirs(tmp_path / "d" / "a")
    (tmp_path / "d" / "a" / "good.jpg").write_bytes(data)
    (tmp_path / "d" / "a" / "trunc.jpg").write_bytes(data[:len(data) * 7 // 10])
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", _ITERATE, str(tmp_path / "d"), on_error],
                          capture_output=True, text=True, timeout=300, cwd=repo,
                          env=dict(os.environ, PYTHONPATH=repo, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("Premature end of JPEG data") == 1, proc.stderr
    trunc = str(tmp_path / "d" / "a" / "trunc.jpg")
    if on_error == "skip":
        assert proc.stdout.splitlines() == ["1 delivered",
                                            "['truncated JPEG (no end-of-image marker)']"]
    else:
        assert proc.stdout.splitlines() == [
            f"InvalidArgumentError pipeline: cannot load file {trunc} (truncated JPEG "
            f"(no end-of-image marker)){RAISE_HINT}]"], proc.stdout


def test_a_bad_file_is_diagnosed_once_however_many_epochs(mixed, monkeypatch):
    """The diagnosis (a second decode) ran for a known bad file in every epoch."""
    from pipeline.decode import guard
    root, good, bad = mixed
    corrupt = os.path.join(root, "bad", "corrupt_mid.png")
    calls = []
    real = guard.diagnose
    monkeypatch.setattr(guard, "diagnose", lambda *a: calls.append(a[0][:8]) or real(*a))
    ds = pipeline.from_paths(good[:5] + [corrupt], image_size=(8, 8), batch_size=2,
                             shuffle=False, on_error="skip")
    for _ in range(3):
        x, _ = flatten(ds)
        assert sorted(index_values(x)) == [1, 2, 3, 4, 5]
    assert calls == [b"\x89PNG\r\n\x1a\n"]
    assert [(r.path, r.reason[:12]) for r in pipeline.errors(ds)] == [(corrupt, "corrupt PNG ")]


def test_scan_leaves_out_an_element_cancelled_beside_its_failing_decoder():
    """An element whose decode failed can reach scan as the cancellation of a loop that ran
    beside the decoder ("Loop execution was cancelled", seen on TensorFlow 2.16 under load):
    it is left out like the elements ``ignore_errors`` drops, and the pass goes on."""
    from pipeline.tools import report

    class Cancels:
        def __init__(self, cancel_at, times=1):
            self.cancel_at, self.times = cancel_at, times

        def __iter__(self):
            for k in range(4):
                if k in self.cancel_at:
                    for _ in range(self.times):
                        yield None
                else:
                    yield (tf.constant(k, tf.int64), tf.constant(b"x"))

    class Iterating:  # raises where Cancels yields None, as an iterator's next() does
        def __init__(self, source):
            self.it = iter(source)

        def __iter__(self):
            return self

        def __next__(self):
            el = next(self.it)
            if el is None:
                raise tf.errors.CancelledError(None, None, "Loop execution was cancelled.")
            return el

    class Dataset:
        def __init__(self, source):
            self.source = source

        def __iter__(self):
            return Iterating(self.source)

    got = list(report._elements(Dataset(Cancels({1, 2})), limit=4))
    assert [int(k) for k, _ in got] == [0, 3] and got[0][1] == b"x"
    with pytest.raises(tf.errors.CancelledError, match="Loop execution was cancelled"):
        list(report._elements(Dataset(Cancels({1}, times=3)), limit=2))
