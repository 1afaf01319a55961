"""A file cache (``cache=path``) never gives back the pixels of a file that changed since.

Files edited in place with the same path and byte size: with a new modification time, with
the old modification time put back (``touch -r``, ``exiftool -P``), a re-rendered BMP, a
mask of a segmentation pair, a TFRecord shard rewritten with the same record count.
"""

import os

import numpy as np
import pytest
from PIL import Image

import pipeline
from pipeline import assemble


def _bmp(path, value, size=(6, 5)):
    """A solid 24-bit BMP: its byte size depends on its shape only."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(np.full((size[1], size[0], 3), value, np.uint8)).save(path, format="BMP")
    return path


def _edit(path, value, keep_mtime=False):
    """Rewrites ``path`` in place (same size, new pixels); optionally puts its times back."""
    st = os.stat(path)
    with open(path, "r+b") as f:     # in place: same inode, same size
        data = bytearray(f.read())
        fresh = _bmp(path + ".tmp.bmp", value)
        data[:] = open(fresh, "rb").read()
        os.remove(fresh)
        f.seek(0)
        f.write(bytes(data))
    assert os.path.getsize(path) == st.st_size
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(path).st_mtime_ns == st.st_mtime_ns
    else:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _values(ds):
    return sorted(int(x[0, 0, 0]) for x, _ in ds.unbatch().as_numpy_iterator())


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_file_edited_in_place_is_read_again(tmp_path, keep_mtime):
    root = tmp_path / "d"
    paths = [_bmp(str(root / "a" / f"{k}.bmp"), 10 + k) for k in range(3)]
    cache = str(tmp_path / "cache")
    make = lambda: pipeline.from_directory(str(root), image_size=(4, 4), batch_size=2,
                                           shuffle=False, cache=cache)
    first = make()
    assert _values(first) == [10, 11, 12] and _values(first) == [10, 11, 12]
    key = lambda ds: assemble.cache_file(ds.pipeline_built.options, ds.pipeline_built.source)
    before = key(first)
    assert _values(make()) == [10, 11, 12]  # same files: the cache is read back
    _edit(paths[1], 99, keep_mtime=keep_mtime)
    again = make()
    assert key(again) != before
    assert _values(again) == [10, 12, 99]


def test_only_the_changed_files_fingerprint_moves(tmp_path):
    """Same files, untouched: one cache prefix."""
    root = tmp_path / "d"
    [_bmp(str(root / "a" / f"{k}.bmp"), 10 + k) for k in range(2)]
    cache = str(tmp_path / "cache")
    a = pipeline.from_directory(str(root), image_size=(4, 4), cache=cache)
    b = pipeline.from_directory(str(root), image_size=(4, 4), cache=cache)
    key = lambda ds: assemble.cache_file(ds.pipeline_built.options, ds.pipeline_built.source)
    assert key(a) == key(b)


def test_mask_edited_in_place_is_read_again(tmp_path):
    images, masks = tmp_path / "images", tmp_path / "masks"
    for k in range(2):
        _bmp(str(images / f"{k}.bmp"), 50 + k)
        _bmp(str(masks / f"{k}.bmp"), k)
    cache = str(tmp_path / "cache")
    make = lambda: pipeline.from_directory(str(images), masks_dir=str(masks), image_size=(4, 4),
                                           batch_size=2, shuffle=False, cache=cache,
                                           mask_mode="index")
    got = lambda ds: sorted(int(m[0, 0, 0]) for _, m in ds.unbatch().as_numpy_iterator())
    assert got(make()) == [0, 1]
    _edit(str(masks / "1.bmp"), 7, keep_mtime=True)
    assert got(make()) == [0, 7]


@pytest.mark.stack  # TFRecord reading, by stack
def test_shard_rewritten_with_the_same_count_is_read_again(tmp_path):
    src = tmp_path / "src"
    paths = [_bmp(str(src / "a" / f"{k}.bmp"), 10 + k) for k in range(2)]
    out = str(tmp_path / "rec")
    pipeline.write_tfrecords(str(src), out, num_shards=1, shuffle=False, progress=False)
    cache = str(tmp_path / "cache")
    make = lambda: pipeline.from_tfrecords(out, image_size=(4, 4), batch_size=2,
                                           shuffle=False, cache=cache)
    assert _values(make()) == [10, 11]
    _edit(paths[0], 77)
    import shutil
    shutil.rmtree(out)
    pipeline.write_tfrecords(str(src), out, num_shards=1, shuffle=False, progress=False)
    assert _values(make()) == [11, 77]
