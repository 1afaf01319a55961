"""The third fresh-eyes user test: convert / write_tfrecords with missing manifest files,
clean BMP refusal reasons, scan's size rows, image files in no class folder, absolute
stored paths, OUT inside a manifest's folder, and Keras' interpolation spellings."""

import io
import json
import logging
import os
import struct

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from io_helpers import stored_paths
from conftest import run_cli, solid
from pipeline.decode import bmp
from pipeline.decode import guard
from pipeline.tools import report


def _manifest(tmp_path):
    """man/b.csv: two images and, on line 3, a missing file; returns (csv, good, missing)."""
    good = [solid(str(tmp_path / "man" / f"{k}.png"), 40 * k) for k in (1, 2)]
    missing = str(tmp_path / "man" / "gone.JPEG")
    csv = tmp_path / "man" / "b.csv"
    csv.write_text("file,label\n1.png,0\ngone.JPEG,1\n2.png,1\n")
    return str(csv), good, missing


def test_skip_leaves_out_a_missing_manifest_file_and_lists_it(tmp_path):
    csv, good, missing = _manifest(tmp_path)
    why = "file not found (listed on line 3 of b.csv)"
    meta = pipeline.write_tfrecords(csv, str(tmp_path / "lib"), path_column="file",
                                    on_error="skip", progress=False)
    assert meta["num_examples"] == 2
    assert meta["skipped"] == [{"path": missing, "reason": why}]
    assert sorted(stored_paths(str(tmp_path / "lib"))) == good

    out = str(tmp_path / "cli")
    code, stdout, err = run_cli("convert", csv, out, "--path_column=file", "--on_error=skip",
                                "--noprogress")
    assert code == 0, err
    lines = stdout.splitlines()
    assert lines[:2] == ["skipped 1 bad file of 3 (--on_error=skip):", f"  {missing}: {why}"]
    assert lines[-1].endswith(f"; 1 bad file skipped (listed above and in "
                              f"{os.path.join(out, 'dataset.json')})")
    assert json.load(open(os.path.join(out, "dataset.json")))["skipped"] == [
        {"path": missing, "reason": why}]


def test_raise_keeps_a_missing_manifest_file_an_error_naming_file_and_line(tmp_path):
    csv, _, missing = _manifest(tmp_path)
    says = f"{csv}, line 3: file not found: {missing!r}"
    for on_error in ("raise", None):
        with pytest.raises(FileNotFoundError) as e:
            pipeline.write_tfrecords(csv, str(tmp_path / "o"), path_column="file",
                                     on_error=on_error, progress=False)
        assert str(e.value) == says
    code, _, err = run_cli("convert", csv, str(tmp_path / "o"), "--path_column=file",
                           "--noprogress")
    assert code == 2
    assert err.splitlines()[0] == f"pipeline convert: error: {says}"
    assert not os.path.exists(tmp_path / "o")


def test_records_store_absolute_paths_whatever_the_working_folder(tmp_path, monkeypatch):
    good = [solid(str(tmp_path / "src" / c / "x.png"), v) for c, v in (("cat", 10), ("dog", 90))]
    monkeypatch.chdir(tmp_path / "src" / "cat")
    pipeline.write_tfrecords("..", "../../out", shuffle=False, progress=False)
    monkeypatch.chdir(tmp_path)
    assert sorted(stored_paths(str(tmp_path / "out"))) == good
    ds = pipeline.from_tfrecords(str(tmp_path / "out"), shuffle=False, include_paths=True,
                                 batch_size=None, image_size=(4, 4))
    assert sorted(p.decode() for *_, p in ds.as_numpy_iterator()) == good
    assert shards_stored("s3://bucket/a.png") == "s3://bucket/a.png"


def shards_stored(path):
    from pipeline.convert import shards
    return shards.stored_path(path)


def test_convert_refuses_out_in_the_manifests_folder_or_root(tmp_path):
    csv, _, _ = _manifest(tmp_path)
    man = str(tmp_path / "man")
    head = ("pipeline convert: error: OUT must not be the manifest's root ({}) or a folder "
            "inside it: the shards and dataset.json would be written among its images. "
            "Received: OUT={!r}, SRC={!r}")
    for out, flags_, named in (
            (man, [], "the manifest's folder"),
            (os.path.join(man, "shards"), [], "the manifest's folder"),
            (str(tmp_path / "r" / "o"), [f"--root={tmp_path / 'r'}"],
             f"--root={str(tmp_path / 'r')!r}")):
        code, _, err = run_cli("convert", csv, out, "--path_column=file", *flags_)
        assert code == 2
        assert err.splitlines()[0] == head.format(named, out, csv), err
    assert sorted(os.listdir(man)) == ["1.png", "2.png", "b.csv"]


# --- BMP refusal reasons ---------------------------------------------------------------

def _bmp(width=20, height=37):
    buf = io.BytesIO()
    Image.fromarray(np.full((abs(height), width, 3), 99, np.uint8)).save(buf, "BMP")
    return buf.getvalue()


def _patched(data, offset, fmt, value):
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


def test_bmp_refusals_are_clean_reasons_with_the_values(tmp_path):
    good = _bmp()
    n = len(good)
    cases = {
        "bits7": (_patched(good, 28, "<H", 7), "unsupported BMP variant (7 bits per pixel)"),
        "short": (good[:12], "truncated BMP header (12 bytes; the smallest BMP header is 26)"),
        "header": (good[:40], "truncated BMP header (40 bytes; the header needs 54)"),
        "negw": (_patched(good, 18, "<i", -50), "negative width (-50) in the BMP header"),
        "zeroh": (_patched(good, 22, "<i", 0), "zero height in the BMP header (20x0)"),
        "offset": (_patched(good, 10, "<I", 10 ** 9),
                   f"pixel data offset 1000000000 is beyond the end of the file ({n} bytes)"),
        "pixels": (good[:100], "truncated BMP pixel data (100 bytes; 20x37 pixels at 24 bits "
                               f"from offset 54 need {n})"),
        "jpeg": (_patched(good, 30, "<I", 4),
                 "unsupported BMP variant (compression JPEG-in-BMP with 24 bits per pixel)"),
        "hs": (_patched(good, 14, "<I", 41),
               "unsupported or corrupt BMP info header size (41 bytes; known: 12, 40, 52, 56, "
               "64, 108, 124)"),
    }
    paths = {}
    for name, (data, why) in cases.items():
        assert bmp.describe_problem(data) == why, name
        paths[name] = str(tmp_path / f"{name}.bmp")
        open(paths[name], "wb").write(data)
    topdown = str(tmp_path / "topdown.bmp")
    open(topdown, "wb").write(_patched(good, 22, "<i", -37))  # a negative height is legal
    assert bmp.describe_problem(open(topdown, "rb").read()) is None
    r = pipeline.scan(sorted(paths.values()) + [topdown], progress=False)
    assert r.num_ok == 1
    assert {b["path"]: b["reason"] for b in r.bad_files} == {
        paths[k]: why for k, (_, why) in cases.items()}
    for b in r.bad_files:
        assert "tf.Tensor" not in b["reason"] and "Summarized" not in b["reason"]


def test_an_assert_message_is_cleaned_to_its_data():
    text = ("Expected 'tf.Tensor(False, shape=(), dtype=bool)' to be true. Summarized data: "
            "b'BMP: RLE data truncated'\n\t [[{{node Assert}}]]")
    assert guard.clean_message(text) == "BMP: RLE data truncated"
    assert guard.clean_message("plain failure [Op:DecodeBmp] name: x") == "plain failure"


# --- scan: sizes and files in no class folder ---------------------------------------------

def test_scan_counts_a_missing_file_under_no_size_not_empty(tmp_path):
    csv, _, _ = _manifest(tmp_path)
    (tmp_path / "man" / "zero.png").write_bytes(b"")
    with open(csv, "a") as f:
        f.write("zero.png,0\n")
    r = pipeline.scan(csv, path_column="file", progress=False)
    assert r.file_bytes_histogram == {"0 B (empty)": 1, "1 B-1 KB": 2,
                                      "no size (missing or unreadable)": 1}
    assert "\n  no size (missing or unreadable) " in r.table()


def test_image_files_in_no_class_folder_are_counted_and_listed(tmp_path, caplog):
    root = tmp_path / "photos"
    kept = solid(str(root / "a" / "ok.png"), 5)
    loose = solid(str(root / "loose.jpg"), 7)
    (root / "README.txt").write_text("not an image: not counted")
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_directory(str(root), image_size=(4, 4))
    assert ds.file_paths == [kept]
    said = [rec.getMessage() for rec in caplog.records if "no class folder" in rec.getMessage()]
    assert said == [f"pipeline: left out 1 image file(s) directly under {root}, in no class "
                    f"folder (a file's class is the name of its sub-folder), e.g. {loose}; "
                    "pipeline.scan lists them"]
    r = pipeline.scan(str(root), progress=False)
    assert r.num_files == 1 and r.in_no_class == [loose]
    assert f"left out: in no class folder (1; directly under the root)\n  {loose}" in r.table()
    assert r.to_dict()["in_no_class"] == [loose]


# --- interpolation spellings ---------------------------------------------------------------

@pytest.mark.parametrize("given, hint", [
    ("lanczos", "; did you mean 'lanczos3'? (Keras' load_img and PIL's 'lanczos' is "
                "tf.image.resize's 'lanczos3')."),
    ("Bicubic", "; did you mean 'bicubic'?"),
    ("box", "."),
])
def test_interpolation_spellings_of_other_libraries_get_a_hint(given, hint):
    with pytest.raises(ValueError) as e:
        pipeline.from_paths(["a.png"], interpolation=given)
    assert str(e.value) == (
        "`interpolation` must be one of ['bilinear', 'nearest', 'bicubic', 'area', 'lanczos3', "
        f"'lanczos5', 'gaussian', 'mitchellcubic']{hint} Received: interpolation={given!r}")


def test_augment_interpolation_in_capitals_gets_a_hint():
    with pytest.raises(ValueError) as e:
        pipeline.Augment(interpolation="Nearest")
    assert str(e.value) == ("`interpolation` must be one of ['bilinear', 'nearest']; did you "
                            "mean 'nearest'? Received: interpolation='Nearest'")


def test_a_bad_rle_stream_is_named_without_tensorflow_text(tmp_path):
    """The header passes (``describe_problem`` is None); the graph decoder's own assertion
    is the reason, its message alone."""
    pal = b"".join(bytes([v, v, v, 0]) for v in range(16))
    info = struct.pack("<IiiHHIIiiII", 40, 6, 4, 1, 8, 1, 4, 2835, 2835, 16, 0)
    stream = bytes([6, 1, 0, 0])  # one row, then the data ends: no end-of-bitmap
    body = info + pal
    data = b"BM" + struct.pack("<IHHI", 14 + len(body) + 4, 0, 0, 14 + len(body)) + body + stream
    assert bmp.describe_problem(data) is None
    path = str(tmp_path / "rle.bmp")
    open(path, "wb").write(data)
    r = pipeline.scan([path], progress=False)
    assert r.bad_files == [{"path": path, "reason": "corrupt BMP data (the decoder failed on it: "
                            "RLE data truncated (ends before the image is full, with no "
                            "end-of-bitmap))"}]
