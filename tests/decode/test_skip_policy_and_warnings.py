"""Issue 15 (fresh-eyes user test of the Python API and scan): each finding, with real values."""

import logging
import os

import numpy as np
import pytest
import tensorflow as tf
from absl import logging as absl_logging
from PIL import Image

import pipeline
from pipeline.decode.guard import RAISE_HINT
from pipeline.decode import image as decode_lib
from pipeline.decode import formats
from conftest import index_values, solid


@pytest.fixture(autouse=True)
def _absl_warnings():
    absl_logging.set_verbosity(absl_logging.WARNING)


def _truncated_jpeg(path):
    solid(path, 90, size=(40, 30), fmt="JPEG")
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) // 2])
    return path


def _all_bad(root):
    """Three bad files in two class folders: text, empty, truncated JPEG."""
    os.makedirs(os.path.join(root, "cat"))
    os.makedirs(os.path.join(root, "dog"))
    text = os.path.join(root, "cat", "notes.jpg")
    open(text, "w").write("hello there\n")
    empty = os.path.join(root, "cat", "zero.png")
    open(empty, "wb").close()
    trunc = _truncated_jpeg(os.path.join(root, "dog", "photo.jpg"))
    return [text, empty, trunc]


# --- 1: an epoch in which every file was bad fails at its end -------------------------

def _assert_nothing_delivered(ds, n):
    for _ in range(2):  # every epoch, not only the first
        with pytest.raises(tf.errors.InvalidArgumentError) as e:
            for _ in ds:
                pass
        msg = e.value.message
        assert f"assertion failed: [pipeline: every file of this epoch was bad ({n} of {n}), " \
               "so it delivered nothing: on_error=skip skipped them all. Reasons: " in msg
        assert "x truncated JPEG (no end-of-image marker)" in msg and "First files: " in msg
        assert "The full list: pipeline.errors(dataset)." in msg
    assert len(pipeline.errors(ds)) == n


def test_all_bad_folder_with_skip_fails_at_epoch_end(tmp_path):
    root = str(tmp_path / "bad")
    _all_bad(root)
    ds = pipeline.from_directory(root, on_error="skip", image_size=(8, 8), batch_size=2)
    _assert_nothing_delivered(ds, 3)


def test_all_bad_paths_with_skip_fail_at_epoch_end(tmp_path):
    paths = _all_bad(str(tmp_path / "bad"))
    ds = pipeline.from_paths(paths, on_error="skip", image_size=(8, 8), batch_size=None)
    _assert_nothing_delivered(ds, 3)
    # and in a Keras fit: the epoch fails instead of "finishing" with zero steps
    ds = pipeline.from_paths(paths, labels=[0, 1, 0], on_error="skip", image_size=(8, 8),
                             batch_size=2)
    model = tf.keras.Sequential([tf.keras.Input((8, 8, 3)), tf.keras.layers.Flatten(),
                                 tf.keras.layers.Dense(2)])
    model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(tf.errors.InvalidArgumentError, match="every file of this epoch"):
        model.fit(ds, epochs=1, verbose=0)


def test_one_good_file_among_bad_ones_is_delivered_without_error(tmp_path):
    root = str(tmp_path / "mixed")
    _all_bad(root)
    solid(os.path.join(root, "dog", "good.png"), 77)
    ds = pipeline.from_directory(root, on_error="skip", image_size=(8, 8), batch_size=2,
                                 shuffle=False)
    for _ in range(2):
        assert index_values(np.concatenate([x for x, _ in ds.as_numpy_iterator()])) == [77]
    assert len(pipeline.errors(ds)) == 3


def test_all_bad_share_of_several_input_pipelines_warns(tmp_path, capfd):
    bad = _all_bad(str(tmp_path / "bad"))
    good = [solid(str(tmp_path / "g" / f"{k}.png"), 40 + k) for k in range(2)]
    paths = [bad[0], good[0], bad[1], good[1]]  # pipeline 0 of 2 gets rows 0, 2: both bad
    got = []
    for i in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i)
        ds = pipeline.from_paths(paths, image_size=(4, 4), batch_size=None, shuffle=False,
                                 on_error="skip", input_context=ctx)
        got.append(index_values(np.stack(list(ds.as_numpy_iterator()))) if i else
                   list(ds.as_numpy_iterator()))
    assert got == [[], [40, 41]]
    err = capfd.readouterr().err
    assert ("pipeline: every file of this epoch was bad (2 of 2), so it delivered nothing: "
            "on_error=skip skipped them all. Reasons: ") in err
    assert "(input pipeline 0 of 2: a warning, the others may deliver)" in err


# --- 2: a manifest listing a file twice ------------------------------------------------

def test_manifest_duplicates_warned_delivered_and_scanned(tmp_path, caplog):
    solid(str(tmp_path / "a.png"), 11)
    solid(str(tmp_path / "b.png"), 22)
    m = tmp_path / "train.csv"
    m.write_text("path,label\na.png,0\nb.png,1\na.png,0\nb.png,1\nb.png,1\n")
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_manifest(str(m), image_size=(4, 4), batch_size=None, shuffle=False)
    a, b = str(tmp_path / "a.png"), str(tmp_path / "b.png")
    assert (f"{m} lists 2 file(s) more than once: {a} (lines 2, 4), {b} (lines 3, 5, 6); "
            "every row is delivered as listed") in caplog.text
    assert caplog.text.count("more than once") == 1
    assert index_values(np.stack([x for x, _ in ds.as_numpy_iterator()])) == [11, 22, 11, 22, 22]
    report = pipeline.scan(str(m), progress=False)
    assert report.duplicates == [{"path": a, "lines": [2, 4]}, {"path": b, "lines": [3, 5, 6]}]
    assert f"listed more than once (2; each row is delivered)\n  {a}: lines 2, 4\n  {b}: " \
           "lines 3, 5, 6" in report.table()
    assert report.to_dict()["duplicates"][0]["lines"] == [2, 4]


def test_manifest_without_duplicates_warns_nothing(tmp_path, caplog):
    solid(str(tmp_path / "a.png"), 11)
    (tmp_path / "m.csv").write_text("path\na.png\n")
    with caplog.at_level(logging.WARNING):
        pipeline.from_manifest(str(tmp_path / "m.csv"), image_size=(4, 4))
    assert "more than once" not in caplog.text
    assert pipeline.scan(str(tmp_path / "m.csv"), progress=False).duplicates == []


# --- 3: prefetch_to_device validated where every option is -----------------------------

@pytest.mark.parametrize("bad", ["gpu0", "/gpu:zero", "", "/job:a/foo:0:1"])
def test_prefetch_to_device_that_does_not_parse_names_the_argument(class_tree, bad):
    root, _ = class_tree
    with pytest.raises(ValueError) as e:
        pipeline.from_directory(root, prefetch_to_device=bad)
    assert "`prefetch_to_device` must be a device name such as '/gpu:0'" in str(e.value)
    assert f"Received: prefetch_to_device={bad!r}" in str(e.value)


def test_prefetch_to_device_good_names_accepted(class_tree):
    root, _ = class_tree
    for name in ("/cpu:0", "cpu:0", "/device:CPU:0"):
        ds = pipeline.from_directory(root, image_size=(4, 4), batch_size=4,
                                     prefetch_to_device=name)
        assert next(iter(ds))[0].shape == (4, 4, 4, 3)


# --- 4: scan's progress bar counts every file ------------------------------------------

def test_scan_progress_bar_reaches_the_file_count(tmp_path, monkeypatch):
    import tqdm.auto
    seen = []

    class Recording(tqdm.auto.tqdm):
        def close(self):
            seen.append((self.n, self.total))
            super().close()

    monkeypatch.setattr(tqdm.auto, "tqdm", Recording)
    root = tmp_path / "f"
    solid(str(root / "a.png"), 1)
    _truncated_jpeg(str(root / "b.jpg"))
    solid(str(root / "c.png"), 3)
    _truncated_jpeg(str(root / "d.jpg"))  # the last file too
    report = pipeline.scan(str(root), progress=True)
    assert report.num_files == 4 and report.num_ok == 2
    assert seen and set(seen) == {(4, 4)}  # (n, total) when closed (once by `with`, once by del)


# --- 5: the Pillow fallback is marked ----------------------------------------------------

def _one_bit_bmp(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray((np.indices((6, 8)).sum(0) % 2 * 255).astype(np.uint8)).convert("1").save(
        path, format="BMP")
    return path


def test_fallback_marked_in_scan_and_logged(tmp_path, caplog):
    # A 1-bit BMP named .png: no file is named .bmp, so pipeline.decode.bmp's graph decoder is
    # not built and the Pillow fallback decodes it.
    path = _one_bit_bmp(str(tmp_path / "f" / "x.png"))
    solid(str(tmp_path / "f" / "y.png"), 5)
    report = pipeline.scan(str(tmp_path / "f"), progress=False)
    assert report.per_variant == {"BMP 1-bit v3 (Pillow fallback)": 1, "PNG 8-bit RGB": 1}
    assert "BMP 1-bit v3 (Pillow fallback)" in report.table()
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_paths([path], image_size=None, batch_size=None)
        image = next(iter(ds)).numpy()
    assert image.shape == (6, 8, 3) and image[0, 1, 0] == 255 and image[0, 0, 0] == 0
    assert ("pipeline: BMP 1-bit v3 file(s) are decoded by the Pillow fallback (slow path: "
            "Python in a py_function, holds the GIL)") in caplog.text
    # named .bmp: graph ops decode it; no mark
    _one_bit_bmp(str(tmp_path / "g" / "x.bmp"))
    assert pipeline.scan(str(tmp_path / "g"), progress=False).per_variant == {"BMP 1-bit v3": 1}


def test_fallback_note_counts_files_by_extension():
    d = decode_lib.Decoder()
    d.plugins = {"heif"}
    assert d.fallback_note(["a.heic", "b.jpg", "c.HEIF", "d.png"]) == (
        "pipeline: 2 file(s) decoded by the Pillow fallback (slow path: Python in a "
        "py_function, holds the GIL): 2 HEIC/HEIF")
    d.plugins = set()
    assert d.fallback_note(["a.heic", "b.jpg"]) == ""  # refused (no pillow-heif), not slow
    assert decode_lib.Decoder(fallback=False).fallback_note(["a.heic"]) == ""


# --- 6: a non-image file's first bytes, readable ----------------------------------------

HELLO = "not an image (first bytes 68 65 6c 6c 6f 20 74 68 |hello th|)"
ODD = "not an image (first bytes 00 01 27 61 5c 0a ff 5a |...a...Z|)"


def test_not_an_image_reason_shows_its_first_bytes(tmp_path):
    """Shown as a Python bytes literal (b'hello th'), the first bytes came out of a raised
    error as `b\\'hello th\\'` (second fresh-eyes test): TensorFlow escapes quotes and
    backslashes in an error's message. Now hex and text as `hexdump -C` shows them, with no
    quote or backslash (those bytes show as "." in the text)."""
    text = str(tmp_path / "notes.jpg")
    open(text, "w").write("hello there\n")
    odd = str(tmp_path / "odd.png")
    open(odd, "wb").write(b"\x00\x01'a\\\n\xffZZZ")
    ds = pipeline.from_paths([text, odd], on_error="skip", image_size=(4, 4), batch_size=None)
    with pytest.raises(tf.errors.InvalidArgumentError):  # both bad: nothing delivered
        list(ds)
    assert dict(pipeline.errors(ds)) == {text: HELLO, odd: ODD}
    # the same words from the scan, the in-graph diagnosis (service workers) and Python
    assert [b["reason"] for b in pipeline.scan([text, odd], progress=False).bad_files] == [
        HELLO, ODD]
    c = tf.constant(b"hello there\n")
    assert decode_lib.diagnose(c, decode_lib.sniff(c)).numpy().decode() == HELLO
    assert formats.describe_start(b"\x00\x01'a\\\n\xffZZZ") == ODD
    assert formats.describe_start(b"hello there") == HELLO
    assert formats.describe_start(b"ab") == "not an image (first bytes 61 62 |ab|)"
    # a raised error: the package's own part unescaped, path first, then the reason
    for path, reason in ((text, HELLO), (odd, ODD)):
        ds = pipeline.from_paths([path], image_size=(4, 4), batch_size=None)
        with pytest.raises(tf.errors.InvalidArgumentError) as e:
            list(ds)
        assert f"assertion failed: [pipeline: cannot load file {path} ({reason}){RAISE_HINT}]" \
            in \
            e.value.message
        assert "\\'" not in e.value.message and '\\"' not in e.value.message


# --- 7: ImageDataGenerator migration: hints ---------------------------------------------

def test_from_image_data_generator_hints():
    with pytest.raises(ValueError) as e:
        pipeline.Augment.from_image_data_generator(zca_whitening=True)
    msg = str(e.value)
    assert msg.count("not supported") == 1
    assert "whiten in the model instead" in msg and "Received: zca_whitening=True" in msg
    with pytest.raises(TypeError) as e:
        pipeline.Augment.from_image_data_generator(rotation_rang=10)
    assert str(e.value) == ("Augment.from_image_data_generator() got an unexpected keyword "
                            "argument 'rotation_rang' (did you mean 'rotation_range'?)")
    with pytest.raises(TypeError, match="its keyword arguments: brightness_range, "):
        pipeline.Augment.from_image_data_generator(zzz=1)


def test_drop_remainder_with_a_batch_larger_than_the_epoch_warns(tmp_path, caplog):
    """Second fresh-eyes test: batch_size=50, drop_remainder=True on 36 files gave 0 batches
    (model.fit returned {}) without a word."""
    for i in range(6):
        solid(str(tmp_path / "d" / ("a" if i % 2 else "b") / f"{i}.png"), i)
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_directory(str(tmp_path / "d"), batch_size=8, drop_remainder=True,
                                     image_size=(8, 8))
    assert list(ds) == []
    assert ("drop_remainder=True with batch_size=8 and 6 element(s) per epoch here: every "
            "epoch is empty") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_directory(str(tmp_path / "d"), batch_size=4, drop_remainder=True,
                                     image_size=(8, 8))
    assert [int(x.shape[0]) for x, _ in ds] == [4]
    assert "drop_remainder" not in caplog.text


# --- second fresh-eyes test: scan a manifest's columns; one warning per skipped file ------

def _manifest(tmp_path, header="file,kind", n=4):
    for i in range(n):
        solid(str(tmp_path / "img" / f"{i}.png"), 10 * i)
    rows = [f"img/{i}.png,{'cat' if i % 2 else 'dog'}" for i in range(n)]
    (tmp_path / "m.csv").write_text("\n".join([header] + rows) + "\n")
    return str(tmp_path / "m.csv")


def test_scan_takes_a_manifests_path_and_label_columns(tmp_path):
    """`scan` of a manifest whose path column is not `path` could not be told its column."""
    m = _manifest(tmp_path)
    with pytest.raises(ValueError) as e:  # the default column is not there: the header's found
        pipeline.scan(m, progress=False)
    assert str(e.value) == (f"{m}, line 1 (the header): missing column(s) 'path'; the header "
                            "has 'file', 'kind'. Received: path_column='path'")
    report = pipeline.scan(m, path_column="file", label_columns="kind", progress=False)
    assert report.num_files == report.num_ok == 4 and report.bad_files == []
    assert report.per_class == {"cat": 2, "dog": 2}
    assert pipeline.scan(m, path_column="file", progress=False).per_class == {}  # no "label"
    # root: where the relative paths resolve
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "m.csv").write_text((tmp_path / "m.csv").read_text())
    report = pipeline.scan(str(tmp_path / "lists" / "m.csv"), path_column="file",
                           root=str(tmp_path), progress=False)
    assert report.num_ok == 4
    # validated like every argument: the argument and the value
    cases = [
        (dict(path_column="nope"), f"{m}, line 1 (the header): missing column(s) 'nope'; the "
                                   "header has 'file', 'kind'. Received: path_column='nope'"),
        (dict(path_column="file", label_columns=["kind", "size"]),
         f"{m}, line 1 (the header): missing column(s) 'size'; the header has 'file', 'kind'. "
         "Received: label_columns=['kind', 'size']"),
        (dict(path_column=3), "`path_column` must be a column name (a non-empty str). "
                              "Received: path_column=3"),
        (dict(path_column=""), "`path_column` must be a column name (a non-empty str). "
                               "Received: path_column=''"),
        (dict(path_column="file", label_columns=["kind", 2]),
         "`label_columns` must be column names (non-empty str). "
         "Received: label_columns=['kind', 2]"),
    ]
    for kw, says in cases:
        with pytest.raises(ValueError) as e:
            pipeline.scan(m, progress=False, **kw)
        assert str(e.value) == says, kw
    folder = str(tmp_path / "img")
    with pytest.raises(ValueError) as e:
        pipeline.scan(folder, path_column="file", root="r", progress=False)
    assert str(e.value) == ("`path_column`, `root` apply to a manifest `source` (.csv / "
                            f".jsonl) only; `source` is not one. Received: source={folder!r}")


def _skip_lines(text):
    return [l for l in text.splitlines() if "pipeline: skipped" in l]


def test_skip_logs_the_first_ten_bad_files_then_a_count(tmp_path, caplog):
    """With skip, each bad file had its own warning line: a flood on a folder with many."""
    good = [solid(str(tmp_path / "d" / f"g{i}.png"), i) for i in range(3)]
    bad = []
    for i in range(25):
        bad.append(str(tmp_path / "d" / f"bad{i:02d}.jpg"))
        open(bad[-1], "w").write(f"text {i}\n")
    ds = pipeline.from_paths(good + bad, on_error="skip", image_size=(4, 4), batch_size=8,
                             shuffle=False)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):  # a second epoch logs nothing more: each file is met once
            assert sum(int(x.shape[0]) for x in ds) == 3
    lines = _skip_lines(caplog.text)
    assert [l.split("pipeline: skipped ", 1)[1].split(":")[0] for l in lines[:10]] == bad[:10]
    assert len(lines) == 11 and lines[10].endswith(
        "pipeline: skipped 15 more bad file(s), not logged one by one (only the first 10 "
        "are); 25 skipped in all: pipeline.errors(dataset) lists every one with its reason")
    errors = pipeline.errors(ds)
    assert [r.path for r in errors] == bad  # every one, once
    assert errors[24].reason == ("not an image (first bytes 74 65 78 74 20 32 34 0a "
                                 "|text 24.|)")


def test_a_missing_manifest_file_is_warned_once(tmp_path, caplog):
    """A missing manifest file was warned twice with skip: at indexing and when skipped."""
    m = _manifest(tmp_path, header="path,label")
    os.remove(str(tmp_path / "img" / "1.png"))
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_manifest(m, on_error="skip", image_size=(4, 4), batch_size=None,
                                    shuffle=False)
        assert len(list(ds)) == 3
    missing = str(tmp_path / "img" / "1.png")
    assert caplog.text.count("1.png") == 1, caplog.text
    assert _skip_lines(caplog.text) == [
        l for l in caplog.text.splitlines()
        if l.endswith(f"pipeline: skipped {missing}: file not found (listed on line 3 of m.csv)")]
    assert pipeline.errors(ds) == [(missing, "file not found (listed on line 3 of m.csv)")]
