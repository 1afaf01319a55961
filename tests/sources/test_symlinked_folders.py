"""Symbolic links in a class-folder tree are named for what they are.

With ``follow_links=False`` a link to a folder (at any depth) is left out and one warning
says that it is a link to a folder that was not followed and that ``follow_links=True``
reads it, never "not an image extension"; a dangling link is called dangling; a link to
a file is read, as Keras reads it (``os.walk`` lists links to files as files). ``scan``
lists the links left out.
"""

from __future__ import annotations

import logging
import os

import pytest
from PIL import Image

import pipeline


def png(path, v):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new("RGB", (4, 4), (v, v, v)).save(path)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    png(str(root / "cats" / "1.png"), 10)
    png(str(root / "dogs" / "2.png"), 20)
    png(str(tmp_path / "elsewhere" / "3.png"), 30)
    png(str(tmp_path / "elsewhere" / "sub" / "4.png"), 40)
    png(str(tmp_path / "more" / "5.png"), 50)
    os.symlink(tmp_path / "elsewhere", root / "cats" / "linked")          # depth 1
    os.makedirs(root / "dogs" / "inner")
    os.symlink(tmp_path / "more", root / "dogs" / "inner" / "deep")        # depth 2
    os.symlink(tmp_path / "nothing", root / "dogs" / "gone")               # dangling
    os.symlink(tmp_path / "more" / "5.png", root / "dogs" / "file.png")   # link to a file
    return str(root), str(tmp_path)


def paths(ds):
    return sorted(ds.file_paths)


def test_links_to_folders_not_followed_are_named(tree, caplog):
    root, base = tree
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_directory(root, image_size=(4, 4), follow_links=False)
    assert paths(ds) == sorted([os.path.join(root, "cats", "1.png"),
                                os.path.join(root, "dogs", "2.png"),
                                os.path.join(root, "dogs", "file.png")])
    text = caplog.text
    assert "not an image extension" not in text, text
    assert "did not follow 2 symbolic link(s) to folders" in text, text
    assert "follow_links=True" in text and os.path.join(root, "cats", "linked") in text
    assert "1 dangling symbolic link(s)" in text, text
    report = pipeline.scan(root, progress=False)
    assert report.left_out == []
    assert {d["path"]: d["reason"] for d in report.links_not_read} == {
        os.path.join(root, "cats", "linked"):
            "symbolic link to a folder, not followed (follow_links=False)",
        os.path.join(root, "dogs", "inner", "deep"):
            "symbolic link to a folder, not followed (follow_links=False)",
        os.path.join(root, "dogs", "gone"): "dangling symbolic link"}
    assert "symbolic links left out (3)" in report.table()


def test_follow_links_reads_them(tree, caplog):
    root, _ = tree
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_directory(root, image_size=(4, 4), follow_links=True,
                                     batch_size=None, shuffle=False, include_paths=True)
    got = {p.numpy().decode(): int(x.numpy()[0, 0, 0]) for x, _, p in ds}
    assert got == {os.path.join(root, "cats", "1.png"): 10,
                   os.path.join(root, "cats", "linked", "3.png"): 30,
                   os.path.join(root, "cats", "linked", "sub", "4.png"): 40,
                   os.path.join(root, "dogs", "2.png"): 20,
                   os.path.join(root, "dogs", "file.png"): 50,
                   os.path.join(root, "dogs", "inner", "deep", "5.png"): 50}
    assert "did not follow" not in caplog.text
    assert "1 dangling symbolic link(s)" in caplog.text


def test_flat_folder_link_and_dangling_class_link(tmp_path, caplog):
    flat = tmp_path / "flat"
    png(str(flat / "1.png"), 1)
    png(str(tmp_path / "other" / "2.png"), 2)
    os.symlink(tmp_path / "other", flat / "o")
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_directory(str(flat), labels=None, image_size=(4, 4))
    assert ds.file_paths == [str(flat / "1.png")]
    assert "did not follow 1 symbolic link(s) to folders" in caplog.text
    # A dangling link where a class folder was meant is named, not silently no class.
    root = tmp_path / "classes"
    png(str(root / "cats" / "1.png"), 1)
    os.symlink(tmp_path / "missing-dogs", root / "dogs")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        ds = pipeline.from_directory(str(root), image_size=(4, 4))
    assert ds.class_names == ["cats"]
    assert "1 dangling symbolic link(s)" in caplog.text and str(root / "dogs") in caplog.text


def test_same_files_as_keras(tree):
    keras = pytest.importorskip("keras")
    root, _ = tree
    for follow in (False, True):
        ours = pipeline.from_directory(root, image_size=(4, 4), follow_links=follow)
        theirs = keras.utils.image_dataset_from_directory(root, image_size=(4, 4),
                                                          follow_links=follow)
        assert paths(ours) == sorted(theirs.file_paths), follow
