"""Class trees deeper than Python's recursion limit: every walker is iterative.

A class folder whose images sit 1,200 folders down (past the default recursion limit of
1,000), beside a shallow class; a linked folder at the bottom (followed or named); a
folder that cannot be listed at the bottom; a deep flat folder; a deep segmentation tree.
"""

import logging
import os
import sys
import tempfile

import numpy as np
import pytest

import pipeline
from pipeline.sources import read
from io_helpers import write_image

DEPTH = 1200


def _deep(root, depth=DEPTH):
    """``root/d/d/.../d`` (``depth`` folders); the bottom folder's path."""
    path = root
    os.makedirs(path, exist_ok=True)
    # One makedirs call for a long path; os.makedirs recurses per missing level.
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(depth):
            try:
                os.mkdir("d", dir_fd=fd)
            except FileExistsError:
                pass
            nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)
    return os.path.join(root, *(["d"] * depth))


def _remove(top):
    """Removes a tree of any depth (``shutil.rmtree`` recurses per level: it cannot)."""
    stack = [top]
    while stack:
        with os.scandir(stack[-1]) as it:
            entries = list(it)
        subs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
        for e in entries:
            if not e.is_dir(follow_symlinks=False):
                os.unlink(e.path)
        if subs:
            stack.extend(subs)
        else:
            os.rmdir(stack.pop())


@pytest.fixture(scope="module")
def tree():
    """classes ``deep`` (2 images at the bottom, 1 halfway, value 1-3) and ``flat``
    (2 images, values 4-5), a link to a folder at the bottom. Made outside pytest's
    temporary folders (whose clean-up, ``shutil.rmtree``, cannot remove it) and
    removed here."""
    assert DEPTH > sys.getrecursionlimit()
    base = tempfile.mkdtemp(prefix="pipeline-deep-")
    try:
        yield _make(base)
    finally:
        _remove(base)


def _make(base):
    root = os.path.join(base, "classes")
    bottom = _deep(os.path.join(root, "deep"))
    half = os.path.join(root, "deep", *(["d"] * (DEPTH // 2)))
    write_image(os.path.join(half, "m.png"), 1)
    write_image(os.path.join(bottom, "x.png"), 2)
    write_image(os.path.join(bottom, "y.png"), 3)
    write_image(os.path.join(root, "flat", "a.png"), 4)
    write_image(os.path.join(root, "flat", "b.png"), 5)
    other = os.path.join(base, "linked")
    write_image(os.path.join(other, "z.png"), 6)
    os.symlink(other, os.path.join(bottom, "link"))
    return root, bottom, half


def _values(ds):
    out = []
    for x, y in ds:
        out += list(zip(np.asarray(x)[:, 0, 0, 0].tolist(), np.asarray(y).tolist()))
    return sorted(out)


def test_walk_is_iterative_and_sorted(tree):
    root, bottom, half = tree
    got = list(read.walk(root))
    # depth first, each folder's entries by name ("d" before "m.png")
    assert [p for p, why, _ in got if why is None] == [
        os.path.join(bottom, "x.png"), os.path.join(bottom, "y.png"),
        os.path.join(half, "m.png"), os.path.join(root, "flat", "a.png"),
        os.path.join(root, "flat", "b.png")]
    assert (os.path.join(bottom, "link"), read.LINK_TO_FOLDER, "") in got
    followed = [p for p, why, _ in read.walk(root, follow_links=True) if why is None]
    assert os.path.join(bottom, "link", "z.png") in followed


def test_from_directory_reads_a_tree_deeper_than_the_recursion_limit(tree):
    root, _, _ = tree
    for on_error in ("raise", "skip"):
        ds = pipeline.from_directory(root, image_size=(4, 4), batch_size=4, shuffle=False,
                                     on_error=on_error)
        assert ds.class_names == ["deep", "flat"]
        assert _values(ds) == [(1, 0), (2, 0), (3, 0), (4, 1), (5, 1)]
    ds = pipeline.from_directory(root, image_size=(4, 4), batch_size=4, shuffle=False,
                                 follow_links=True)
    assert _values(ds) == [(1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 0)]


def test_from_directory_link_loop_at_the_bottom_is_skipped(tree, caplog):
    root, bottom, _ = tree
    loop = os.path.join(bottom, "loop")
    os.symlink(os.path.join(root, "deep"), loop)
    try:
        with caplog.at_level(logging.WARNING):
            ds = pipeline.from_directory(root, image_size=(4, 4), batch_size=4,
                                         shuffle=False, follow_links=True)
        assert _values(ds) == [(1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 0)]
        assert "symbolic-link loop" in caplog.text
    finally:
        os.unlink(loop)


def test_scan_reads_a_tree_deeper_than_the_recursion_limit(tree):
    root, _, _ = tree
    report = pipeline.scan(root, progress=False)
    assert report.num_files == 5 and report.num_ok == 5
    assert report.per_class == {"deep": 3, "flat": 2}


@pytest.mark.skipif(os.geteuid() == 0, reason="root lists any folder")
def test_unlistable_folder_at_the_bottom_is_named(tree):
    root, bottom, _ = tree
    locked = os.path.join(bottom, "locked")
    os.makedirs(locked)
    os.chmod(locked, 0)
    try:
        with pytest.raises(OSError, match="locked"):
            pipeline.from_directory(root, image_size=(4, 4))
    finally:
        os.chmod(locked, 0o755)
        os.rmdir(locked)


def test_flat_folder_and_from_paths_deep(tree):
    root, bottom, half = tree
    ds = pipeline.from_directory(os.path.join(root, "deep"), labels=None, image_size=(4, 4),
                                 batch_size=4, shuffle=False)
    assert [np.asarray(x)[:, 0, 0, 0].tolist() for x in ds] == [[2, 3, 1]]  # walk order
    ds = pipeline.from_paths([os.path.join(bottom, "x.png"), os.path.join(half, "m.png")],
                             image_size=(4, 4), batch_size=4, shuffle=False)
    assert [np.asarray(x)[:, 0, 0, 0].tolist() for x in ds] == [[2, 1]]
