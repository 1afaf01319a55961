"""Cache budget, fast JPEG paths against the slow path, seeded augmentation through factories."""

import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from conftest import flatten, index_values, solid
from pipeline import sample


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Realistic JPEGs (smooth fields + noise), 300-600 px, 2 classes."""
    return sample.ensure_sample(12, 2, seed=5, root=str(tmp_path_factory.mktemp("s")))


def test_cache_refuses_over_budget(class_tree):
    root, _ = class_tree
    with pytest.raises(ValueError) as e:
        pipeline.from_directory(root, image_size=(64, 64), cache="memory",
                                cache_budget_bytes=100_000)
    msg = str(e.value)
    assert "cache='memory'" in msg and "cache_budget_bytes" in msg and "12 images" in msg
    ds = pipeline.from_directory(root, image_size=(64, 64), cache="memory",
                                 cache_budget_bytes=10_000_000)
    assert ds.cache_estimate_bytes == 12 * 64 * 64 * 3


def test_cache_epochs_exactly_once_and_reshuffled(class_tree, tmp_path):
    root, expected = class_tree
    for cache in ("memory", str(tmp_path / "c")):
        ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=4, cache=cache, seed=2)
        orders = [index_values(flatten(ds)[0]) for _ in range(3)]
        assert all(sorted(o) == sorted(expected) for o in orders)
        assert orders[0] != orders[1] or orders[1] != orders[2]


def _mad(a, b):
    return np.abs(a.astype(float) - b.astype(float)).mean()


@pytest.mark.parametrize("resize", ["crop", "stretch"])
def test_fast_jpeg_paths_match_slow_path(photos, resize):
    kw = dict(image_size=(96, 96), resize=resize, shuffle=False, batch_size=None)
    fast = np.stack([x for x, _ in pipeline.from_directory(photos, **kw).as_numpy_iterator()])
    slow = np.stack([x for x, _ in pipeline.from_directory(
        photos, fast_jpeg=False, **kw).as_numpy_iterator()])
    # crop: decode_and_crop_jpeg vs decode+slice; stretch at 96 px: sources are >= 3x
    # larger, so DCT-scaled decoding (ratio 2) is used: an area-like filter vs bilinear.
    assert _mad(fast, slow) <= (1.0 if resize == "crop" else 6.0)


def test_random_resized_crop_fast_matches_slow(photos):
    aug = pipeline.Augment(random_resized_crop=True, horizontal_flip=True)
    kw = dict(image_size=(64, 64), batch_size=None, seed=11, augment=aug, shuffle=False)
    fast = np.stack([x for x, _ in pipeline.from_directory(photos, **kw).as_numpy_iterator()])
    slow = np.stack([x for x, _ in pipeline.from_directory(
        photos, fast_jpeg=False, **kw).as_numpy_iterator()])
    assert fast.shape == (12, 64, 64, 3)
    assert _mad(fast, slow) <= 2.0


def test_augmentation_seeded_deterministic_and_epoch_dependent(photos):
    aug = pipeline.Augment(random_resized_crop=True, horizontal_flip=True, brightness=0.2)
    make = lambda seed, par: pipeline.from_directory(
        photos, image_size=(32, 32), batch_size=4, seed=seed, augment=aug,
        num_parallel_calls=par)
    a, b = make(3, 1), make(3, 8)
    ea = [flatten(a)[0] for _ in range(2)]
    eb = [flatten(b)[0] for _ in range(2)]
    assert np.array_equal(ea[0], eb[0]) and np.array_equal(ea[1], eb[1])  # any parallelism
    assert not np.array_equal(ea[0], ea[1])                              # epochs differ
    assert not np.array_equal(flatten(make(4, 1))[0], ea[0])             # seeds differ


@pytest.mark.parametrize("read_at", ["index", pytest.param("graph", marks=pytest.mark.needs_tfio)])
def test_exif_orientations_match_pillow(tmp_path, monkeypatch, read_at):
    """Tags read at index time (Pillow, no tensorflow-io in the graph) and in
    graph (tensorflow-io, when the index could not read them) agree with Pillow."""
    from PIL import ImageOps
    from pipeline import build as build_lib, config, index as index_lib
    if read_at == "graph":
        monkeypatch.setattr(index_lib, "read_orientation", lambda path: None)
    base = np.zeros((24, 40, 3), np.uint8)   # four distinct quadrants, 40 wide x 24 high
    base[:12, :20] = (250, 0, 0)
    base[:12, 20:] = (0, 250, 0)
    base[12:, :20] = (0, 0, 250)
    base[12:, 20:] = (250, 250, 250)
    paths, refs = [], []
    for o in range(1, 9):
        p = str(tmp_path / f"o{o}.jpg")
        img = Image.fromarray(base)
        exif = Image.Exif()
        exif[0x0112] = o
        img.save(p, quality=95, subsampling=0, exif=exif.tobytes())
        paths.append(p)
        refs.append(np.asarray(ImageOps.exif_transpose(Image.open(p)).convert("RGB")))
    ds = pipeline.from_paths(paths, image_size=None, batch_size=None, shuffle=False)
    idx = ds._pipeline_index
    assert [i.orientation for i in idx.infos] == (
        list(range(1, 9)) if read_at == "index" else [None] * 8)
    assert build_lib._needs_tfio(idx, config.make_options()) == (read_at == "graph", True)
    out = list(ds.as_numpy_iterator())
    for o, (got, ref) in enumerate(zip(out, refs), 1):
        assert got.shape == ref.shape, o
        assert got.shape == ((24, 40, 3) if o <= 4 else (40, 24, 3)), o
        assert _mad(got, ref) <= 3.0, o
        if o in (2, 3, 4):  # really moved, not just the same pixels
            assert _mad(got, np.asarray(Image.open(paths[0]).convert("RGB"))) > 20, o


def test_pad_fast_path_matches_slow_path(photos):
    """Found by a fresh-eyes user: DCT-scaled decoding shifted "pad" content by a
    pixel. "pad" now decodes at full scale; fast and slow paths agree exactly."""
    get = lambda fast: np.stack(list(pipeline.from_directory(
        photos, image_size=(64, 80), resize="pad", batch_size=None, shuffle=False,
        fast_jpeg=fast).map(lambda x, y: x).as_numpy_iterator()))
    assert np.array_equal(get(True), get(False))


def test_file_cache_never_reads_a_stale_or_failed_cache(tmp_path):
    """Found by a fresh-eyes user: a cache file written for other options, or left by
    an epoch that failed on a bad file, was read back as this dataset's."""
    root = tmp_path / "d"
    for k in range(4):
        solid(str(root / "a" / f"{k}.png"), 10 + k)
    cache = str(tmp_path / "c" / "cache")
    os.makedirs(os.path.dirname(cache))
    values = lambda ds: sorted(int(x[0, 0, 0]) for x, _ in ds.unbatch().as_numpy_iterator())
    stretch = pipeline.from_directory(str(root), image_size=(8, 8), batch_size=2, cache=cache)
    assert values(stretch) == [10, 11, 12, 13]
    big = pipeline.from_directory(str(root), image_size=(16, 16), batch_size=2, cache=cache)
    assert [x.shape[1:3] for x, _ in big.as_numpy_iterator()] == [(16, 16)] * 2
    # a bad file fails the epoch; once it is removed, the next dataset works
    bad = root / "a" / "zz.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    with pytest.raises(tf.errors.InvalidArgumentError, match="zz.png"):
        values(pipeline.from_directory(str(root), image_size=(8, 8), batch_size=2, cache=cache,
                                       shuffle=False))
    bad.unlink()
    assert values(pipeline.from_directory(str(root), image_size=(8, 8), batch_size=2,
                                          cache=cache, shuffle=False)) == [10, 11, 12, 13]
    # same files and options: the same cache prefix is reused
    from pipeline import build
    a = pipeline.from_directory(str(root), image_size=(8, 8), cache=cache)
    b = pipeline.from_directory(str(root), image_size=(8, 8), cache=cache)
    c = pipeline.from_directory(str(root), image_size=(8, 8), cache=cache, resize="crop")
    f = lambda ds: build.cache_file(ds._pipeline_options, ds._pipeline_index)
    assert f(a) == f(b) != f(c) and f(a).startswith(cache + "-")
