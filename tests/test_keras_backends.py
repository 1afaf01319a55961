"""Keras 3 on the JAX and PyTorch backends fed from pipeline datasets: fit, evaluate and
predict with every label mode, skipped bad files, augmentation and validation_split; a
plain JAX loop over ``as_numpy_iterator``. Each backend runs in a subprocess
(``keras_backend_child.py``): KERAS_BACKEND must be set before keras is imported.

The whole matrix (every label mode and extra, one process per backend) is in the slow tier;
the default tier fits, evaluates and predicts with int labels and skipped bad files on each
backend (``test_fit_and_skip_on_each_backend``)."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

# Keras and TensorFlow APIs that change between versions: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

HERE = os.path.dirname(os.path.abspath(__file__))
CLASSES = ("bird", "cat", "dog")
PER_CLASS = 6
BATCH = 4


def _data(root):
    rng = np.random.default_rng(0)
    rows = ["path,labels"]
    for d in ("good", "with_bad"):
        for c in CLASSES:
            os.makedirs(os.path.join(root, d, c))
            for i in range(PER_CLASS):
                Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(
                    os.path.join(root, d, c, f"{i}.png"))
                if d == "good":
                    rows.append(f"good/{c}/{i}.png,{c}|{'dog' if i % 2 else 'bird'}")
    with open(os.path.join(root, "good", "cat", "0.png"), "rb") as f:
        cut = f.read()[:60]
    with open(os.path.join(root, "with_bad", "cat", "cut.png"), "wb") as f:
        f.write(cut)
    with open(os.path.join(root, "with_bad", "dog", "notes.jpg"), "wb") as f:
        f.write(b"not an image at all")
    with open(os.path.join(root, "multi.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")


def _child(backend, root, scenarios=None):
    """Runs keras_backend_child.py on ``backend`` over the data in ``root``: its JSON result."""
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed here: pip install -e '.[backends]' "
                    "(the TensorFlow 2.21 stack; torch's CPU build)")
    _data(root)
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join([os.path.dirname(HERE),
                                           os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, os.path.join(HERE, "keras_backend_child.py"), root]
    proc = subprocess.run(args + ([",".join(scenarios)] if scenarios else []), env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and line, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(line[-1][len("RESULT "):])
    assert out["backend"] == backend
    return out


@pytest.fixture(scope="module", params=["jax", "torch"])
def result(request, tmp_path_factory):
    return _child(request.param, str(tmp_path_factory.mktemp(request.param)))


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_fit_and_skip_on_each_backend(backend, tmp_path):
    r = _child(backend, str(tmp_path), ["int", "skip"])
    _ok(r["int"], "int", math.ceil(18 / BATCH))
    assert r["int"]["predict_shape"] == [18, 3]
    _ok(r["skip"], "skip", math.ceil(18 / BATCH))
    assert r["skip"]["skipped"] == ["cut.png", "notes.jpg"]


def _ok(r, name, steps):
    assert "error" not in r, (name, r.get("error"), r.get("trace"))
    assert len(r["loss"]) == 1 and math.isfinite(r["loss"][0]), name
    assert r["train_steps"] == steps, (name, r["train_steps"])
    assert r["evaluate"] and all(math.isfinite(v) for v in r["evaluate"].values()), name
    assert r["predict_finite"], name


@pytest.mark.parametrize("mode,n_files,width", [
    ("int", 18, 3), ("categorical", 18, 3), ("binary", 12, 1), ("multi_hot", 18, 3)])
@pytest.mark.slow
def test_fit_evaluate_predict_every_label_mode(result, mode, n_files, width):
    r = result[mode]
    _ok(r, mode, math.ceil(n_files / BATCH))
    assert r["predict_shape"] == [n_files, width]


@pytest.mark.slow
def test_skipped_bad_files_are_left_out_of_every_pass(result):
    r = result["skip"]
    _ok(r, "skip", math.ceil(18 / BATCH))
    assert r["predict_shape"] == [18, 3]  # 20 files, 2 bad: one row per good image
    assert r["skipped"] == ["cut.png", "notes.jpg"]


@pytest.mark.slow
def test_augmentation(result):
    _ok(result["augment"], "augment", math.ceil(18 / BATCH))


@pytest.mark.slow
def test_validation_split_both(result):
    r = result["split"]
    # 18 files, validation_split=0.25: int(0.25 * 18) = 4 validation, 14 training
    _ok(r, "split", math.ceil(14 / BATCH))
    assert len(r["val_loss"]) == 1 and math.isfinite(r["val_loss"][0])
    assert r["predict_shape"] == [14, 3]


@pytest.mark.slow
def test_plain_jax_loop(result):
    if result["backend"] != "jax":
        pytest.skip("the JAX loop runs on the jax backend's process")
    r = result["jax_loop"]
    assert "error" not in r, r
    assert r["rows"] == 18 and len(r["losses"]) == math.ceil(18 / BATCH)
    assert all(math.isfinite(v) for v in r["losses"]) and r["x_dtype"] == "float32"
    assert abs(r["losses"][0] - math.log(3)) < 1e-5  # zero weights: uniform prediction


@pytest.mark.slow
def test_documented_extras(result):
    """What docs/keras-backends.md says of each, as measured: bfloat16 images,
    prefetch_to_device (ignored without that device) and tf.data service work; include_paths=True does not
    with fit (Keras takes the path strings for sample weights)."""
    _ok(result["prefetch_to_device"], "prefetch_to_device", math.ceil(18 / BATCH))
    _ok(result["bfloat16"], "bfloat16", math.ceil(18 / BATCH))
    _ok(result["service"], "service", math.ceil(18 / BATCH))  # in-process dispatcher + worker
    assert "Invalid dtype: object" in result["include_paths"].get("error", ""), \
        result["include_paths"]
