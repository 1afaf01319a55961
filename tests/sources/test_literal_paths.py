"""Every path the user gives is a literal path: ``[ ] * ? { }`` in folder and file names are
characters, never patterns, even when a look-alike that the pattern would match exists
beside it (``shards[1]/`` and ``shards1/``). Where an API also takes a glob
(``from_tfrecords``, ``from_npy_shards``), an existing path wins and ``glob.escape``
makes a pattern's literal part literal.
"""

from __future__ import annotations

import fnmatch
import glob
import os

import numpy as np
import pytest
from PIL import Image

import pipeline

NAMES = ["shards[1]", "run[7]", "a*b", "q?", "{x,y}", "s[!0]"]
# The TFRecord test (a shard set written per name) runs two of them in the default tier.
CHEAP_NAMES = [n if n in ("shards[1]", "{x,y}") else pytest.param(n, marks=pytest.mark.slow)
               for n in NAMES]


def colour(i):
    return (i * 20 % 256, 255 - i * 20 % 256, (i * 50 + 7) % 256)


def image_tree(root, n=8, tag=0):
    """n PNGs in two class folders; file i is flat colour(i + tag)."""
    for i in range(n):
        d = os.path.join(root, "a" if i % 2 else "b")
        os.makedirs(d, exist_ok=True)
        Image.new("RGB", (5, 5), colour(i + tag)).save(os.path.join(d, f"{i}.png"))
    return root


def look_alike(name):
    """A folder name that the unescaped pattern ``name`` matches (a shell's brace
    expansion for ``{x,y}``), and that is not ``name``."""
    return {"shards[1]": "shards1", "run[7]": "run7", "a*b": "aXYb", "q?": "qZ",
            "{x,y}": "x", "s[!0]": "s1"}[name]


def records_of(ds):
    """[(path basename, pixel)] of an unbatched dataset with include_paths."""
    out = []
    for x, _, p in ds:
        out.append((p.numpy().decode(), tuple(int(v) for v in x.numpy()[0, 0])))
    return out


@pytest.mark.parametrize("name", CHEAP_NAMES)
def test_from_tfrecords_reads_a_bracketed_folder_not_its_look_alike(tmp_path, name):
    images = image_tree(str(tmp_path / "img"))
    other = image_tree(str(tmp_path / "img2"), n=1, tag=5)
    real = str(tmp_path / "data" / name)
    fake = str(tmp_path / "data" / look_alike(name))
    assert fnmatch.fnmatch(os.path.basename(fake), name) or name == "{x,y}"
    pipeline.write_tfrecords(images, real, num_shards=2, shuffle=False, progress=False)
    pipeline.write_tfrecords(other, fake, num_shards=1, shuffle=False, progress=False)
    ds = pipeline.from_tfrecords(real, image_size=(5, 5), batch_size=None, shuffle=False,
                                 include_paths=True)
    got = records_of(ds)
    assert sorted(p for p, _ in got) == sorted(
        os.path.join(images, "a" if i % 2 else "b", f"{i}.png") for i in range(8))
    for p, px in got:
        assert px == colour(int(os.path.basename(p)[:-4])), (p, px)
    # One shard file given by its literal name, and the escaped glob of the folder.
    shard = sorted(glob.glob(glob.escape(real) + "/*.tfrecord"))
    assert len(shard) == 2
    one = pipeline.from_tfrecords(shard[0], image_size=(5, 5), batch_size=None,
                                  shuffle=False, include_paths=True)
    assert 0 < len(records_of(one)) < 8
    esc = pipeline.from_tfrecords(glob.escape(real) + "/*.tfrecord", image_size=(5, 5),
                                  batch_size=None, shuffle=False, include_paths=True)
    assert sorted(records_of(esc)) == sorted(got)


def test_from_tfrecords_pattern_still_globs(tmp_path):
    images = image_tree(str(tmp_path / "img"))
    out = str(tmp_path / "out")
    pipeline.write_tfrecords(images, out, num_shards=3, shuffle=False, progress=False)
    ds = pipeline.from_tfrecords(out + "/data-*.tfrecord", image_size=(5, 5),
                                 batch_size=None, shuffle=False, include_paths=True)
    assert len(records_of(ds)) == 8
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pipeline.from_tfrecords(str(tmp_path / "nothing"), image_size=(5, 5))


@pytest.mark.parametrize("name", NAMES)
def test_from_directory_and_manifest_in_bracketed_folders(tmp_path, name):
    real = image_tree(str(tmp_path / name))
    image_tree(str(tmp_path / look_alike(name)), n=3, tag=9)
    ds = pipeline.from_directory(real, image_size=(5, 5), batch_size=None, shuffle=False,
                                 include_paths=True)
    got = records_of(ds)
    assert sorted(p for p, _ in got) == sorted(
        os.path.join(real, "a" if i % 2 else "b", f"{i}.png") for i in range(8))
    assert all(px == colour(int(os.path.basename(p)[:-4])) for p, px in got)
    man = os.path.join(real, f"list{name}.csv")
    with open(man, "w") as f:
        f.write("path,label\n" + "".join(f"{'a' if i % 2 else 'b'}/{i}.png,{i % 2}\n"
                                          for i in range(8)))
    m = pipeline.from_manifest(man, image_size=(5, 5), batch_size=None, shuffle=False,
                               include_paths=True)
    assert sorted(records_of(m)) == sorted(got)


@pytest.mark.parametrize("name", NAMES)
def test_from_npy_shards_literal_file_and_escaped_glob(tmp_path, name):
    d = tmp_path / name
    d.mkdir()
    fake = tmp_path / look_alike(name)
    fake.mkdir()
    x0 = np.arange(12, dtype=np.int32).reshape(6, 2)
    np.save(d / "inputs[0].npy", x0)
    np.save(d / "inputs0.npy", np.full((3, 2), -1, np.int32))  # matched by "inputs[0].npy"
    np.save(fake / "inputs_0.npy", np.full((4, 2), -2, np.int32))
    one = pipeline.from_npy_shards(str(d / "inputs[0].npy"), shuffle=False, batch_size=None)
    assert np.array_equal(np.stack(list(one.as_numpy_iterator())), x0)
    np.save(d / "inputs_1.npy", x0 + 100)
    esc = pipeline.from_npy_shards(glob.escape(str(d)) + "/inputs_*.npy", shuffle=False,
                                   batch_size=None, cycle_length=1)
    assert np.array_equal(np.stack(list(esc.as_numpy_iterator())), x0 + 100)
