"""Datasets build and iterate whatever global seed the program set first.

``keras.utils.set_random_seed(0)`` / ``tf.random.set_seed(0)`` are the usual
first lines of a training script. With a global seed of 0, tf.data's seeded
ops compared a per-epoch key tensor to 0 in Python and every shuffled or
augmented dataset raised ``OperatorNotAllowedInGraphError`` (found by the
Keras JAX/PyTorch backend tests, which seed Keras before fitting).
"""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline

# Keras and TensorFlow APIs that change between versions: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

N = 10


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("seeded")
    rng = np.random.default_rng(3)
    for i in range(N):
        d = os.path.join(root, f"c{i % 2}")
        os.makedirs(d, exist_ok=True)
        # each image's first pixel is its number: delivered images can be counted
        a = rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)
        a[:, :, 0] = i * 20
        Image.fromarray(a).save(os.path.join(d, f"{i:02d}.png"))
    return str(root)


@pytest.fixture
def global_seed(request):
    tf.random.set_seed(request.param)
    try:
        yield request.param
    finally:
        tf.random.set_seed(None)


def _epochs(ds, n):
    out = []
    for _ in range(n):
        out.append([int(x[0, 0, 0]) // 20 for x, _ in ds.unbatch()])
    return out


KW = dict(image_size=(12, 10), batch_size=3, shuffle=True, seed=5, interpolation="nearest")


@pytest.mark.parametrize("global_seed, augment", [
    (0, None), (7, pipeline.Augment(horizontal_flip=True)),
    pytest.param(7, None, marks=pytest.mark.sweep),
    pytest.param(0, pipeline.Augment(horizontal_flip=True), marks=pytest.mark.sweep)],
    indirect=["global_seed"])
def test_folder_shuffled_and_augmented_under_a_global_seed(root, global_seed, augment):
    kw = dict(KW, augment=augment) if augment is not None else KW
    first = _epochs(pipeline.from_directory(root, **kw), 2)
    for epoch in first:
        assert sorted(epoch) == list(range(N)), epoch  # each file once per epoch
    # The same seeds give the same orders in a second dataset.
    assert _epochs(pipeline.from_directory(root, **kw), 2) == first


@pytest.mark.parametrize("global_seed", [0], indirect=True)
def test_keras_set_random_seed_zero_then_fit(root, global_seed):
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    ds = pipeline.from_directory(root, augment=pipeline.Augment(horizontal_flip=True), **KW)
    m = keras.Sequential([keras.Input((12, 10, 3)), keras.layers.GlobalAveragePooling2D(),
                          keras.layers.Dense(2, activation="softmax")])
    m.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    hist = m.fit(ds, epochs=2, verbose=0)
    assert len(hist.history["loss"]) == 2 and np.isfinite(hist.history["loss"]).all()


@pytest.mark.parametrize("global_seed", [0], indirect=True)
def test_tfrecords_shuffled_under_a_global_seed_of_zero(root, tmp_path, global_seed):
    out = str(tmp_path / "shards")
    pipeline.write_tfrecords(root, out, num_shards=3, progress=False)
    ds = pipeline.from_tfrecords(out, **KW)
    for epoch in _epochs(ds, 2):
        assert collections.Counter(epoch) == collections.Counter(range(N)), epoch


def test_keyed_epoch_clears_the_graph_seed_only_while_the_epoch_is_built():
    """plan.keyed_epoch: the function graph's seed is None inside ``build`` and restored
    afterwards, also when ``build`` raises; an enclosing graph keeps its own seed."""
    from pipeline.deliver import plan
    seen = []

    def build(key):
        seen.append(tf.compat.v1.get_default_graph().seed)
        return tf.data.Dataset.range(4).shuffle(4, seed=key[0], reshuffle_each_iteration=False)

    def boom(key):
        raise ValueError("bad build")

    outer = tf.Graph()
    with outer.as_default():
        tf.compat.v1.set_random_seed(0)
        plan.epoch_keys(1).flat_map(plan.keyed_epoch(build))
        assert outer.seed == 0

    @tf.function
    def restored_after_a_raise():
        g = tf.compat.v1.get_default_graph()
        g.seed = 5
        with pytest.raises(ValueError, match="bad build"):
            plan.keyed_epoch(boom)(tf.constant([1, 2], tf.int64))
        seen.append(g.seed)
        return tf.constant(0)

    restored_after_a_raise()
    assert seen == [None, 5]
