"""File and folder names that are not valid UTF-8 (a Windows zip unpacked on Linux).

Python lists them as str with surrogate escapes (``os.fsdecode``); they are read like any
other file (their bytes are the path TensorFlow opens), and a bad one is named by its
escaped name (``caf\\xe9.png``), in the error and in the skip record.
"""

import json
import logging
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import pipeline
from io_helpers import write_image

pytestmark = pytest.mark.skipif(sys.platform != "linux",
                                reason="names that are not UTF-8 need a bytes file system")


def _write(root: bytes, rel: bytes, value):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_image(os.fsdecode(path), value)
    return os.fsdecode(path)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """Two classes: ``caf\\xe9`` (Latin-1 folder name) and ``plain``; files with
    Latin-1 (\\xe9), CP-1252 (\\x93) and stray (\\xff) bytes in their names."""
    root = os.fsencode(str(tmp_path_factory.mktemp("names") / "good"))
    files = {
        _write(root, b"caf\xe9/cr\xe8me.png", 1),
        _write(root, b"caf\xe9/ok.png", 2),
        _write(root, b"plain/\x93quoted\x94.png", 3),
        _write(root, b"plain/a.png", 4),
        _write(root, b"plain/\xff.png", 5),
    }
    return os.fsdecode(root), files


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    """One class; a text file named ``bad\\xfe.png`` beside a good ``g\\xe9.png``."""
    root = os.fsencode(str(tmp_path_factory.mktemp("names") / "bad"))
    _write(root, b"c/g\xe9.png", 7)
    bad_path = os.path.join(root, b"c/bad\xfe.png")
    open(bad_path, "wb").write(b"not an image")
    return os.fsdecode(root), os.fsdecode(bad_path)


def _values(ds):
    out = []
    for x, y, p in ds:
        out += list(zip(np.asarray(x)[:, 0, 0, 0].tolist(), np.asarray(y).tolist(),
                        p.numpy().tolist()))
    return sorted(out)


@pytest.mark.stack  # TensorFlow's file system opens the bytes names
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_from_directory_reads_names_that_are_not_utf8(good, on_error):
    root, files = good
    ds = pipeline.from_directory(root, image_size=(4, 4), batch_size=2, shuffle=False,
                                 include_paths=True, on_error=on_error)
    assert ds.class_names == [os.fsdecode(b"caf\xe9"), "plain"]
    got = _values(ds)
    # include_paths gives each file's own bytes, the name the file system holds
    assert [(v, y) for v, y, _ in got] == [(1, 0), (2, 0), (3, 1), (4, 1), (5, 1)]
    assert {os.fsdecode(p) for _, _, p in got} == files
    assert pipeline.errors(ds) == [] if on_error == "skip" else True


@pytest.mark.stack  # TensorFlow's file system opens the bytes names
def test_from_paths_takes_str_and_bytes_names(good):
    _, files = good
    paths = sorted(files)
    as_bytes = [os.fsencode(p) for p in paths]
    for given in (paths, as_bytes):
        ds = pipeline.from_paths(given, labels=list(range(5)), image_size=(4, 4), batch_size=5,
                                 shuffle=False, include_paths=True)
        (x, y, p), = list(ds)
        assert p.numpy().tolist() == as_bytes
        assert np.asarray(x)[:, 0, 0, 0].tolist() == [
            {b"cr\xe8me.png": 1, b"ok.png": 2, b"\x93quoted\x94.png": 3, b"a.png": 4,
             b"\xff.png": 5}[os.path.basename(b)] for b in as_bytes]


def test_scan_reads_names_that_are_not_utf8(good, bad):
    report = pipeline.scan(good[0], progress=False)
    assert report.num_files == 5 and report.num_ok == 5
    assert report.per_class == {os.fsdecode(b"caf\xe9"): 2, "plain": 3}
    report = pipeline.scan(bad[0], progress=False)
    assert report.num_ok == 1 and len(report.bad_files) == 1
    assert report.bad_files[0]["path"] == bad[1]              # the real name, to open
    assert "bad\\xfe.png" in report.table() and "\udcfe" not in report.table()
    # JSON: the surrogate escape, which json.loads turns back into the real name
    assert json.loads(report.to_json())["bad_files"][0]["path"] == bad[1]


def test_bad_file_is_named_by_its_escaped_name(bad, caplog):
    root, bad_path = bad
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bad\\\\xfe\.png"):
        list(pipeline.from_directory(root, image_size=(4, 4), shuffle=False))
    ds = pipeline.from_directory(root, image_size=(4, 4), batch_size=4, shuffle=False,
                                 on_error="skip")
    with caplog.at_level(logging.WARNING):
        assert [np.asarray(x)[:, 0, 0, 0].tolist() for x, _ in ds] == [[7]]
    (rec,) = pipeline.errors(ds)
    assert rec.path == bad_path and os.path.exists(rec.path)   # the real name, to open
    assert rec.reason == "not an image (unrecognised format)" or "image" in rec.reason
    assert "skipped " + os.fsdecode(os.path.dirname(os.fsencode(bad_path))) + "/bad\\xfe.png" \
        in caplog.text                                         # logged by its escaped name


def test_write_tfrecords_keeps_names_that_are_not_utf8(good, tmp_path):
    root, files = good
    out = str(tmp_path / "rec")
    pipeline.write_tfrecords(root, out, num_shards=1, shuffle=False, progress=False)
    ds = pipeline.from_tfrecords(out, image_size=(4, 4), batch_size=5, shuffle=False,
                                 include_paths=True)
    (x, y, p), = list(ds)
    assert sorted(np.asarray(x)[:, 0, 0, 0].tolist()) == [1, 2, 3, 4, 5]
    assert {os.path.basename(b) for b in p.numpy().tolist()} == {
        os.path.basename(os.fsencode(f)) for f in files}


def test_segmentation_pairs_with_names_that_are_not_utf8(tmp_path):
    base = os.fsencode(str(tmp_path))
    _write(base, b"images/caf\xe9/x\xff.png", 1)
    _write(base, b"masks/caf\xe9/x\xff.png", 0)
    _write(base, b"images/plain.png", 2)
    _write(base, b"masks/plain.png", 0)
    ds = pipeline.from_directory(os.fsdecode(os.path.join(base, b"images")),
                                 masks_dir=os.fsdecode(os.path.join(base, b"masks")),
                                 image_size=(4, 4), batch_size=2, shuffle=False)
    assert sorted(int(x[0, 0, 0]) for x, _ in ds.unbatch().as_numpy_iterator()) == [1, 2]


def test_directory_given_as_bytes(good):
    root, files = good
    ds = pipeline.from_directory(os.fsencode(root), image_size=(4, 4), batch_size=8,
                                 shuffle=False, include_paths=True)
    (x, y, p), = list(ds)
    assert {os.fsdecode(b) for b in p.numpy().tolist()} == files
