"""``validation_split`` splits by file: a manifest that lists a file several times
(oversampling) keeps every row of that file on one side, and delivers each row there.
Without repeated rows the split is Keras' (the tests of ``test_directory`` /
``test_compat`` check that row for row)."""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest
from PIL import Image

import pipeline
from pipeline.sources import index as index_lib

FILES, REPEATS = 4, 5


def colour(i):
    return (40 * i + 10, 200 - 30 * i, 7 * i)


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    d = tmp_path_factory.mktemp("split")
    for i in range(FILES):
        Image.new("RGB", (4, 4), colour(i)).save(d / f"{i}.png")
    rows = [f"{i}.png,{i % 2}" for _ in range(REPEATS) for i in range(FILES)]  # interleaved
    (d / "m.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    return str(d / "m.csv"), str(d)


def delivered(ds):
    out = collections.Counter()
    for x, y, p in ds:
        name = os.path.basename(p.numpy().decode())
        i = int(name[:-4])
        assert tuple(int(v) for v in x.numpy()[0, 0]) == colour(i), name
        assert int(y) == i % 2, name
        out[name] += 1
    return out


@pytest.mark.parametrize("seed", range(10))
def test_repeated_rows_stay_on_their_files_side(manifest, seed):
    path, _ = manifest
    train, val = pipeline.from_manifest(
        path, image_size=(4, 4), batch_size=None, validation_split=0.25, subset="both",
        seed=seed, include_paths=True, label_mode="int")
    for _ in range(2):  # two epochs, the same
        tr, va = delivered(train), delivered(val)
        assert not set(tr) & set(va), (seed, tr, va)
        assert set(tr) | set(va) == {f"{i}.png" for i in range(FILES)}
        assert len(va) == int(FILES * 0.25) == 1
        assert all(n == REPEATS for n in list(tr.values()) + list(va.values())), (tr, va)
    assert len(train.file_paths) == 15 and len(val.file_paths) == 5


def test_split_without_repeats_is_keras_rule():
    """Files are rows: the last int(n * split) of RandomState(seed).permutation(n)."""
    n = 23
    idx = index_lib.Index([f"/d/{i}.png" for i in range(n)], np.arange(n) % 3, ["a", "b", "c"])
    for seed in (None, 0, 1, 1337):
        tr, va = index_lib.split(idx, 0.3, seed)
        perm = np.random.RandomState(seed or 0).permutation(n)
        assert tr.paths == [f"/d/{i}.png" for i in sorted(perm[:n - int(n * 0.3)])]
        assert va.paths == [f"/d/{i}.png" for i in sorted(perm[n - int(n * 0.3):])]


def test_repeated_rows_split_by_file_permutation():
    """With repeats the distinct files (first-appearance order) are permuted by the same
    rule, and rows follow their file, in index order."""
    files = [f"/d/{i}.png" for i in range(7)]
    rows = [files[i] for i in [0, 1, 2, 0, 3, 4, 5, 6, 6, 2, 1]]
    idx = index_lib.Index(rows, np.arange(len(rows)), None)
    tr, va = index_lib.split(idx, 0.3, 5)
    perm = np.random.RandomState(5).permutation(7)
    val_files = {files[i] for i in perm[7 - int(7 * 0.3):]}
    assert va.paths == [p for p in rows if p in val_files]
    assert tr.paths == [p for p in rows if p not in val_files]
    assert list(va.labels) == [k for k, p in enumerate(rows) if p in val_files]


@pytest.mark.parametrize("seed", [2**32 - 1, 2**32, 2**40 + 3, 2**63 - 1])
def test_split_takes_every_documented_seed(manifest, seed):
    """seed is documented as [0, 2**63); numpy's RandomState takes 32 bits: a larger
    seed once raised numpy's "Seed must be between 0 and 2**32 - 1"."""
    path, _ = manifest
    kw = dict(image_size=(4, 4), batch_size=None, validation_split=0.25, subset="both",
              seed=seed, include_paths=True, label_mode="int")
    train, val = pipeline.from_manifest(path, **kw)
    tr, va = delivered(train), delivered(val)
    assert not set(tr) & set(va) and len(va) == 1
    assert set(tr) | set(va) == {f"{i}.png" for i in range(FILES)}
    again = pipeline.from_manifest(path, **kw)[1]
    assert list(again.file_paths) == list(val.file_paths)  # the same split in a second call
