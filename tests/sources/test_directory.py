"""from_directory / from_paths: labels, order, splits, shapes, exactly-once, model.fit."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import pipeline
from pipeline.decode import formats
from conftest import IMAGENET, REPO, flatten, index_values, solid


def test_label_inference_and_numeric_class_names(tmp_path):
    # Class folders sort as strings, as Keras does: "1" < "10" < "2".
    for name, v in (("2", 2), ("10", 10), ("1", 1)):
        solid(str(tmp_path / "n" / name / "x.png"), v)
    ds = pipeline.from_directory(str(tmp_path / "n"), image_size=(4, 4), shuffle=False)
    assert ds.class_names == ["1", "10", "2"]
    x, y = flatten(ds)
    assert [ds.class_names[int(k)] for k in y] == [str(v) for v in index_values(x)]
    # class_names fixes order and subset
    ds = pipeline.from_directory(str(tmp_path / "n"), class_names=["2", "1"], image_size=(4, 4),
                                 shuffle=False)
    x, y = flatten(ds)
    assert index_values(x) == [2, 1] and y.tolist() == [0, 1]


def test_hidden_and_non_image_files_ignored_extensions_case_insensitive(tmp_path):
    root = tmp_path / "h"
    solid(str(root / "a" / "one.JPEG"), 1, fmt="JPEG")
    solid(str(root / "a" / "two.PnG"), 2, fmt="PNG")
    solid(str(root / "a" / ".hidden.png"), 3)
    solid(str(root / "a" / ".ipynb_checkpoints" / "x.png"), 4)
    (root / "a" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (root / "a" / "notes.txt").write_text("not an image")
    solid(str(root / ".git" / "y.png"), 5)
    ds = pipeline.from_directory(str(root), image_size=(4, 4), shuffle=False)
    assert ds.class_names == ["a"]
    assert [os.path.basename(p) for p in ds.file_paths] == ["one.JPEG", "two.PnG"]


def test_exactly_once_per_epoch_with_label_pairing(class_tree):
    root, expected = class_tree
    ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=5, seed=3,
                                 num_parallel_calls=8)
    for _ in range(2):
        x, y = flatten(ds)
        vals = index_values(x)
        assert sorted(vals) == sorted(expected)
        assert [ds.class_names[int(k)] for k in y] == [expected[v] for v in vals]


def test_reshuffled_every_epoch_and_seed_deterministic(class_tree):
    root, _ = class_tree
    make = lambda seed: pipeline.from_directory(root, image_size=(4, 4), batch_size=4, seed=seed)
    a, b = make(7), make(7)
    ea = [index_values(flatten(a)[0]) for _ in range(3)]
    eb = [index_values(flatten(b)[0]) for _ in range(3)]
    assert ea == eb                      # same seed -> same order, epoch by epoch
    assert ea[0] != ea[1] or ea[1] != ea[2]  # reshuffled between epochs
    assert index_values(flatten(make(8))[0]) != ea[0]
    unshuffled = pipeline.from_directory(root, image_size=(4, 4), shuffle=False)
    assert index_values(flatten(unshuffled)[0]) == sorted(ea[0])


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow),
                                  pytest.param(2, marks=pytest.mark.slow), None])
def test_splits_disjoint_and_complete(class_tree, seed):
    root, expected = class_tree
    kw = dict(image_size=(4, 4), validation_split=0.25, seed=seed, shuffle=False)
    train, val = pipeline.from_directory(root, subset="both", **kw)
    t = set(index_values(flatten(train)[0]))
    v = set(index_values(flatten(val)[0]))
    assert not t & v and t | v == set(expected)
    assert len(v) == round(len(expected) * 0.25)
    assert set(train.file_paths).isdisjoint(val.file_paths)
    # separate calls give the same split
    t2 = pipeline.from_directory(root, subset="training", **kw)
    assert set(index_values(flatten(t2)[0])) == t


def test_empty_subset_is_named(tmp_path):
    solid(str(tmp_path / "s" / "a" / "0.png"), 1)
    solid(str(tmp_path / "s" / "a" / "1.png"), 2)
    with pytest.raises(ValueError, match="validation"):
        pipeline.from_directory(str(tmp_path / "s"), validation_split=0.1, subset="validation")


@pytest.mark.parametrize("mode, fmt", [("L", "PNG"), ("RGB", "PNG"), ("RGBA", "PNG"),
                                       ("P", "PNG"), ("LA", "PNG"), ("RGB", "JPEG"),
                                       ("L", "JPEG"), ("RGB", "GIF"), ("RGB", "BMP")])
@pytest.mark.stack  # the decoders' or Keras' behaviour, by stack
# every format at 3 channels on every stack; 1 and 4 (pipeline's own conversions) once
@pytest.mark.parametrize("channels", [pytest.param(1, marks=pytest.mark.sweep), 3,
                                      pytest.param(4, marks=pytest.mark.sweep)])
def test_shape_dtype_channels(tmp_path, mode, fmt, channels):
    p = solid(str(tmp_path / f"img.{fmt.lower()}"), 200, size=(9, 7), mode=mode, fmt=fmt)
    x = next(iter(pipeline.from_paths([p], image_size=None, batch_size=None, channels=channels)))
    assert x.dtype == tf.uint8 and tuple(x.shape) == (7, 9, channels)
    a = x.numpy().astype(int)
    assert abs(a[..., 0].mean() - 200) <= 3
    if channels == 4:
        assert (a[..., 3] == 255).all()


def test_label_modes_and_float_dtype(class_tree):
    root, expected = class_tree
    kw = dict(image_size=(4, 4), shuffle=False)
    x, y = flatten(pipeline.from_directory(root, label_mode="categorical", **kw))
    assert y.shape == (12, 3) and y.dtype == np.float32 and (y.sum(1) == 1).all()
    x, y = flatten(pipeline.from_directory(root, label_mode="int", **kw))
    assert y.dtype == np.int32 and y.tolist() == [0] * 4 + [1] * 3 + [2] * 5
    ds = pipeline.from_directory(root, label_mode=None, **kw)
    assert isinstance(ds.element_spec, tf.TensorSpec)
    x, _ = flatten(pipeline.from_directory(root, dtype=tf.float32, **kw))
    assert x.dtype == np.float32 and np.allclose(x[:, 0, 0, 0] * 255, sorted(expected))


def test_resize_modes(tmp_path):
    # 20 wide x 10 high: left half 50, right half 250.
    arr = np.zeros((10, 20, 3), np.uint8)
    arr[:, :10] = 50
    arr[:, 10:] = 250
    from PIL import Image
    p = str(tmp_path / "wide.png")
    Image.fromarray(arr).save(p)
    get = lambda **kw: next(iter(pipeline.from_paths([p], batch_size=None, **kw))).numpy()
    pad = get(image_size=(20, 20), resize="pad")
    assert (pad[:5] == 0).all() and (pad[15:] == 0).all()        # letterbox bars
    assert pad[5:15, :9, 0].min() >= 45 and pad[5:15, 11:, 0].min() >= 245
    crop = get(image_size=(10, 10), resize="crop")               # centre 10x10: cols 5..14
    assert (crop[:, :4, 0] == 50).all() and (crop[:, 6:, 0] == 250).all()
    crop_slow = get(image_size=(10, 10), resize="crop", fast_jpeg=False)
    assert np.array_equal(crop, crop_slow)
    stretch = get(image_size=(10, 10))
    assert stretch.shape == (10, 10, 3) and (stretch[:, 0, 0] == 50).all()


@pytest.mark.stack  # the decoders' or Keras' behaviour, by stack
def test_model_fit_one_epoch(class_tree):
    import keras
    root, _ = class_tree
    ds = pipeline.from_directory(root, image_size=(16, 16), batch_size=4, seed=0)
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Rescaling(1 / 255),
                              keras.layers.Conv2D(4, 3), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(len(ds.class_names))])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hist = model.fit(ds, epochs=1, verbose=0)
    assert np.isfinite(hist.history["loss"][0])


@pytest.mark.skipif(not os.path.isdir(IMAGENET),
                    reason="needs real photos: $PIPELINE_DATA_DIR or ../shared/data/imagenet-sample")
@pytest.mark.stack  # the decoders' or Keras' behaviour, by stack
def test_end_to_end_on_real_photos():
    ds = pipeline.from_directory(IMAGENET, image_size=(224, 224), batch_size=64, seed=0)
    classes = sorted(d.name for d in os.scandir(IMAGENET) if d.is_dir())
    num_files = sum(n.lower().endswith(formats.IMAGE_EXTENSIONS)
                    for c in classes for n in os.listdir(os.path.join(IMAGENET, c)))
    if IMAGENET.endswith("imagenet-sample"):
        assert len(classes) == 1000 and num_files == 1000
    assert ds.class_names == classes and len(ds.file_paths) == num_files
    n, seen = 0, set()
    for x, y in ds:
        assert x.dtype == tf.uint8 and tuple(x.shape[1:]) == (224, 224, 3)
        n += int(x.shape[0])
        seen.update(y.numpy().tolist())
    assert n == num_files and seen == set(range(len(classes)))
    assert pipeline.errors(ds) == []


# Slow tier (three processes): its cheap check is
# tests/test_cli.py::test_bench_on_the_builtin_sample_caches_it_and_shows_start_up_lines_once,
# which runs the same bench beside Keras on the built-in sample's class folders.
@pytest.mark.slow
def test_bench_cli_on_tiny_data(class_tree, tmp_path):
    root, _ = class_tree
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "bench", f"--data_dir={root}", "--image_size=16,16",
         "--batch_size=4", "--epochs=2", "--repeats=1", "--compare=keras", f"--json_out={out}",
         "--noprogress"], capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 0, proc.stderr[-3000:]
    from conftest import assert_bench_beside_keras
    assert_bench_beside_keras(json.loads(out.read_text()), proc.stdout, num_images=12, epochs=2)


def test_builtin_sample_is_deterministic(tmp_path):
    from pipeline.tools import sample
    a = sample.ensure_sample(6, 2, root=str(tmp_path / "a"))
    b = sample.ensure_sample(6, 2, root=str(tmp_path / "b"))
    fa = sorted(os.path.relpath(os.path.join(d, f), a) for d, _, fs in os.walk(a) for f in fs)
    assert len(fa) == 6
    for rel in fa:
        assert open(os.path.join(a, rel), "rb").read() == open(os.path.join(b, rel), "rb").read()
    from PIL import Image
    sizes = [Image.open(os.path.join(a, rel)).size for rel in fa]
    assert all(300 <= s <= 600 for wh in sizes for s in wh)


@pytest.mark.parametrize("batch_size, sizes", [(4, [4, 4, 4]), (5, [5, 5, 2]), (12, [12])])
def test_batch_sizes_full_except_last(class_tree, batch_size, sizes):
    # Regression: the end-of-epoch marker once produced an empty last batch.
    root, _ = class_tree
    ds = pipeline.from_directory(root, image_size=(4, 4), batch_size=batch_size, seed=0)
    assert [int(x.shape[0]) for x, _ in ds] == sizes


def test_length_known_in_raise_mode(class_tree):
    root, _ = class_tree
    assert len(pipeline.from_directory(root, image_size=(4, 4), batch_size=5)) == 3
    assert len(pipeline.from_directory(root, image_size=(4, 4), batch_size=5,
                                       drop_remainder=True)) == 2
    assert len(pipeline.from_directory(root, image_size=(4, 4), batch_size=None)) == 12


def test_service_without_dispatcher_is_refused(class_tree):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # nothing listens here once closed
    with pytest.raises(ValueError, match="no tf.data service dispatcher"):
        pipeline.from_directory(class_tree[0], service=f"grpc://localhost:{port}")


def test_from_paths_labels_checked(class_tree):
    """Found by a fresh-eyes user: out-of-range, negative, float and mixed labels were
    accepted or failed deep inside TensorFlow."""
    root, _ = class_tree
    paths = sorted(str(p) for p in __import__("pathlib").Path(root).rglob("*.png"))[:3]
    cases = [([0, -1, 2], "labels[1]=-1"), ([0, 1, 5], "labels[2]=5"),
             ([0.5, 1, 2], "labels[0]=0.5"), ([None, 1, 2], "labels[0]=None"),
             ([[1, 0], [0, 1], [1, 1]], "labels[0]=[1, 0]")]
    for labels, msg in cases:
        with pytest.raises(ValueError, match=re.escape(msg)):
            pipeline.from_paths(paths, labels=labels, class_names=["a", "b", "c"])
    with pytest.raises(ValueError, match="label_mode='multi_hot'"):
        pipeline.from_paths(paths, labels=["a", "b", "c"], label_mode="multi_hot")
    ds = pipeline.from_paths(paths, labels=np.array([2, 0, 1]), image_size=(4, 4),
                             batch_size=np.int64(3), seed=np.int64(1), shuffle=False,
                             class_names=["a", "b", "c"])
    assert list(next(iter(ds))[1].numpy()) == [2, 0, 1]
    assert ds.pipeline_built.options.seed == 1 and type(ds.pipeline_built.options.seed) is int


def test_numpy_values_and_from_directory_labels(class_tree, tmp_path):
    """Found by a fresh-eyes user: numpy floats and bools were refused, explicit labels
    were not checked, and a cache in a missing folder gave a raw FileNotFoundError."""
    root, _ = class_tree
    ds = pipeline.from_directory(root, image_size=(4, 4), validation_split=np.float32(0.25),
                                 subset="training", seed=1, shuffle=np.bool_(True),
                                 on_error="skip", max_errors=np.int64(2))
    opts = ds.pipeline_built.options
    assert (opts.validation_split, opts.shuffle, opts.max_errors) == (0.25, True, 2)
    flat = str(tmp_path / "flat")
    for k in range(3):
        solid(os.path.join(flat, f"{k}.png"), k)
    with pytest.raises(ValueError, match=re.escape("labels[1]=-1")):
        pipeline.from_directory(flat, labels=[0, -1, 1])
    with pytest.raises(ValueError, match=re.escape("labels[0]='a'")):
        pipeline.from_directory(flat, labels=["a", "b", "c"])
    got = pipeline.from_directory(flat, labels=np.arange(3), image_size=(4, 4), shuffle=False)
    assert list(next(iter(got))[1].numpy()) == [0, 1, 2]
    with pytest.raises(ValueError, match="folder of the cache file does not exist"):
        pipeline.from_directory(root, image_size=(4, 4), cache=str(tmp_path / "no" / "c"))
