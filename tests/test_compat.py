"""pipeline.compat: queue-runner get_batch, fit_generator adapters, flow_from_directory."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import pipeline
from pipeline import compat
from tests._scale_helpers import REPO, make_images

N = 20


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_images(tmp_path_factory.mktemp("imgs"), N, fmt="jpg")


def _paths(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def test_get_batch_one_epoch_exactly_once_with_labels(root):
    paths = _paths(root)
    values = [int(os.path.basename(p)[:3]) for p in paths]
    ds = compat.get_batch(paths, values, img_w=12, img_h=10, channels=3, batch_size=6,
                          capacity=24, num_threads=2, num_epochs=1)
    got = []
    for x, y in ds:
        assert x.dtype == tf.uint8 and x.shape[1:] == (10, 12, 3)
        pix = np.round(x[:, 0, 0, 0].numpy().astype(float))
        got += list(zip(pix.astype(int), y.numpy()))
    # JPEG is lossy: a solid value v decodes within +-2 of v.
    assert sorted(v for _, v in got) == sorted(values)
    assert all(abs(int(p) - int(v)) <= 2 for p, v in got)
    assert ds.file_paths == paths


def test_get_batch_repeats_and_standardizes(root):
    paths = _paths(root)
    ds = compat.get_batch(paths, [0] * N, 8, 8, 1, batch_size=5, capacity=10,
                          standardize=True)
    batches = list(ds.take(6))               # 4 batches per epoch: it repeats
    assert len(batches) == 6
    assert batches[0][0].dtype == tf.float32 and batches[0][0].shape == (5, 8, 8, 1)
    with pytest.raises(ValueError, match="capacity=0"):
        compat.get_batch(paths, [0] * N, 8, 8, 3, 5, capacity=0)


def test_from_keras_generator_callable_iterator_and_sequence():
    def gen():
        for i in range(3):
            yield np.full((4, 2), i, np.float32), np.arange(4) + 4 * i

    ds = compat.from_keras_generator(gen)
    assert ds.element_spec[0] == tf.TensorSpec((None, 2), tf.float32)
    for _ in range(2):   # a callable restarts every epoch
        ys = [v for _, y in ds for v in y.numpy()]
        assert ys == list(range(12))
    once = compat.from_keras_generator(gen(), steps=2)
    assert [int(x[0, 0]) for x, _ in once] == [0, 1]     # peeked batch not lost

    class Seq:
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return np.ones((3, 1), np.uint8) * i, np.zeros((3,), np.int64)

    ds = compat.from_keras_generator(Seq())
    assert [int(x[0, 0]) for x, _ in ds] == [0, 1]
    with pytest.raises(pipeline.NotCheckpointableError):
        pipeline.check_checkpointable(ds)
    with pytest.raises(ValueError, match="generator"):
        compat.from_keras_generator(42)


def test_flow_from_directory_mapping(root):
    ds = compat.flow_from_directory(root, target_size=(6, 7), color_mode="grayscale",
                                    class_mode="sparse", batch_size=4, shuffle=False,
                                    interpolation="bilinear", rescale=1 / 255)
    x, y = next(iter(ds))
    assert x.shape == (4, 6, 7, 1) and x.dtype == tf.float32 and y.dtype == tf.int32
    assert ds.class_names == ["c0", "c1", "c2"]
    cat = compat.flow_from_directory(root, target_size=(6, 6), batch_size=4,
                                     classes=["c1", "c2"])
    assert next(iter(cat))[1].shape == (4, 2)
    auto = compat.flow_from_directory(root, target_size=(6, 6), class_mode="input")
    x, x2 = next(iter(auto))
    assert np.array_equal(x.numpy(), x2.numpy())
    tr = compat.flow_from_directory(root, target_size=(6, 6), validation_split=0.25,
                                    subset="training", seed=1, batch_size=None)
    va = compat.flow_from_directory(root, target_size=(6, 6), validation_split=0.25,
                                    subset="validation", seed=1, batch_size=None)
    assert len(set(tr.file_paths) | set(va.file_paths)) == N
    assert not set(tr.file_paths) & set(va.file_paths)


@pytest.mark.parametrize("kw, match", [
    ({"rotation_range": 20}, "rotation_range"),
    ({"save_to_dir": "/tmp"}, "save_to_dir"),
    ({"interpolation": "hamming"}, "hamming"),
    ({"class_mode": "multi"}, "class_mode"),
    ({"rescale": 2.0}, "rescale"),
    ({"colour": 1}, "colour"),
])
def test_flow_from_directory_refuses_options_without_equivalent(root, kw, match):
    with pytest.raises(ValueError, match=match):
        compat.flow_from_directory(root, **kw)


def test_queue_runner_benchmark_runs_side_by_side(root, tmp_path):
    out = tmp_path / "qr.json"
    r = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "queue_runners.py"),
         f"--data_dir={root}", "--num_images=16", "--batch_size=4", "--image_size=32",
         f"--json_out={out}"], capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(out.read_text())
    names = [x["name"] for x in got["results"]]
    assert names == ["tf1_queue_runners", "pipeline_from_paths"]
    assert all(x["images"] >= 12 and x["images_per_sec"] > 0 for x in got["results"])
