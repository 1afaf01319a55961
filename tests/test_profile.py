"""Tests of pipeline.profile on tiny real JPEGs (Pillow) in tmp dirs."""

import importlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline

from pipeline import profiling as profile_lib


def _write_jpegs(folder, n=20, size=(48, 64)):
    rng = np.random.default_rng(0)
    for i in range(n):
        d = folder / f"class_{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        base = np.add.outer(np.arange(size[0]), np.arange(size[1]))[..., None] * [1, 2, 3]
        arr = ((base + i * 10 + rng.integers(0, 8, base.shape)) % 256).astype(np.uint8)
        Image.fromarray(arr).save(d / f"{i:03d}.jpg", "JPEG", quality=90)
    return folder


@pytest.fixture(scope="module")
def jpeg_dir(tmp_path_factory):
    return _write_jpegs(tmp_path_factory.mktemp("jpegs"))


def heavy_matmul(image):
    """TEST INJECTION: a deliberately heavy in-graph op (~100 MFLOP per image)."""
    x = tf.reduce_mean(tf.cast(image, tf.float32)) / 255.0
    m = tf.fill([256, 256], x) + tf.eye(256)
    for _ in range(6):
        m = tf.linalg.matmul(m, m) / 256.0
    return image + tf.cast(tf.reduce_mean(m) * 0.0, tf.uint8)


def test_names_injected_bottleneck_sane_numbers_and_trace(jpeg_dir, tmp_path):
    ds = pipeline.from_directory(str(jpeg_dir), image_size=(32, 32), batch_size=4)
    report = pipeline.profile(ds, num_elements=16, warmup=1, extra_map=heavy_matmul,
                              target_images_per_sec=1e9, profile_dir=tmp_path / "tb",
                              profile_batches=2)
    names = [s.name for s in report.stages]
    assert names == ["read", "decode", "resize", "heavy_matmul", "batch"]
    assert report.bottleneck == "heavy_matmul"
    assert any(a.startswith("heavy_matmul dominates") for a in report.advice)
    for s in report.stages:
        assert s.ms_per_image >= 0 and s.cumulative_ms >= 0 and s.images_per_sec > 0
        assert 0 <= s.share <= 1
    assert sum(s.share for s in report.stages) == pytest.approx(1.0)
    assert report.pipeline_images_per_sec > 0 and report.first_batch_sec > 0
    assert report.single_thread_images_per_sec > 0
    assert report.cores >= 1 and report.parallelism >= 1
    assert report.consumer == "target" and report.input_bound is True
    assert report.advice[0].startswith("input-bound")
    assert (report.batch_size, report.image_size, report.num_elements) == (4, (32, 32), 16)
    d = report.to_dict()
    json.dumps(d)
    assert d["bottleneck"] == "heavy_matmul" and len(d["stages"]) == 5
    text = report.table()
    assert "heavy_matmul" in text and "bottleneck: heavy_matmul" in text
    html = report._repr_html_()
    assert "<table>" in html and "<b>heavy_matmul</b>" in html
    # TensorBoard trace
    assert report.profile_dir == str(tmp_path / "tb")
    assert report.trace_files and all(os.path.exists(f) for f in report.trace_files)
    assert any(f.endswith(".xplane.pb") for f in report.trace_files)


def test_decode_dominates_large_jpegs_and_consumer_slower(tmp_path):
    folder = _write_jpegs(tmp_path, n=8, size=(600, 800))
    report = pipeline.profile(str(folder), num_elements=8, warmup=1, image_size=(16, 16),
                              batch_size=None, parallel_stages=False,
                              target_images_per_sec=0.01)
    assert [s.name for s in report.stages] == ["read", "decode", "resize"]
    assert report.bottleneck == "decode"
    assert any("crop-before-decode" in a for a in report.advice)
    assert report.consumer == "target" and report.input_bound is False
    assert report.advice[0].startswith("consumer slower than pipeline: input is not the bottleneck")


def test_model_consumer_and_augment_stage(jpeg_dir):
    import keras
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    paths = sorted(str(p) for p in jpeg_dir.rglob("*.jpg"))
    report = pipeline.profile(paths, labels=[i % 2 for i in range(len(paths))], num_elements=8,
                              warmup=1, model=model, model_steps=2, parallel_stages=False,
                              image_size=(16, 16), batch_size=4, dtype="float32",
                              augment=pipeline.Augment(rotation=10, horizontal_flip=True))
    assert [s.name for s in report.stages] == ["read", "decode", "resize", "augment", "batch"]
    assert report.consumer == "model" and report.consumer_images_per_sec > 0
    assert report.input_bound in (True, False)


@pytest.mark.parametrize("kw,name", [
    (dict(num_elements=0), "num_elements"), (dict(warmup=-1), "warmup"),
    (dict(target_images_per_sec=0), "target_images_per_sec"),
    (dict(extra_map=3), "extra_map"), (dict(profile_batches=0), "profile_batches"),
])
def test_bad_arguments(jpeg_dir, kw, name):
    with pytest.raises(ValueError, match=f"Received: {name}="):
        pipeline.profile(str(jpeg_dir), **kw)


def test_bad_sources(jpeg_dir):
    with pytest.raises(ValueError, match="source"):
        pipeline.profile(42)
    with pytest.raises(ValueError, match="factory"):
        pipeline.profile(tf.data.Dataset.range(3))
    ds = pipeline.from_directory(str(jpeg_dir), image_size=(16, 16))
    with pytest.raises(ValueError, match="taken from the dataset"):
        pipeline.profile(ds, image_size=(8, 8))
    assert profile_lib.ProfileReport is pipeline.profile.__globals__["ProfileReport"]
