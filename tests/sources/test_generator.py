"""from_generator: sharded parallel instances, batches from fit_generator-style code, checks."""

import numpy as np
import pytest
import tensorflow as tf

import pipeline

SPEC = (tf.TensorSpec([2], tf.float32), tf.TensorSpec([], tf.int64))


def sharded(shard_index, num_shards):
    for i in range(shard_index, 20, num_shards):
        yield np.array([i, -i], np.float64), i   # float64 is cast to float32


def test_parallel_instances_exactly_once_and_paired():
    ds = pipeline.from_generator(sharded, SPEC, num_parallel=3, batch_size=4)
    assert ds.element_spec == (tf.TensorSpec([None, 2], tf.float32),
                               tf.TensorSpec([None], tf.int64))
    for _ in range(2):  # every epoch
        xs, ys = [], []
        for x, y in ds:
            xs.extend(x.numpy()[:, 0].tolist())
            ys.extend(y.numpy().tolist())
        assert sorted(ys) == list(range(20)) and xs == [float(v) for v in ys]


def test_shuffle_with_seed_and_no_arg_fn():
    def fn():
        return ((np.array([i, i], np.float32), i) for i in range(10))
    a = [int(y) for _, y in pipeline.from_generator(fn, SPEC, shuffle_buffer_size=10, seed=1)]
    b = [int(y) for _, y in pipeline.from_generator(fn, SPEC, shuffle_buffer_size=10, seed=1)]
    assert sorted(a) == list(range(10)) and a == b and a != list(range(10))
    with pytest.raises(ValueError, match=r"`num_parallel` > 1 needs `fn\(shard_index"):
        pipeline.from_generator(fn, SPEC, num_parallel=2)


def fit_generator_style():
    """A never-ending Keras fit_generator-style generator of (x_batch, y_batch)."""
    rng = np.random.RandomState(0)
    while True:
        x = rng.rand(8, 4).astype(np.float32)
        yield x, (x.sum(1) > 2).astype(np.float32)


def test_never_ending_generator_trains_with_steps_per_epoch():
    import keras
    spec = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.float32))
    ds = pipeline.from_generator(fit_generator_style, spec)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile("sgd", "binary_crossentropy")
    hist = model.fit(ds, steps_per_epoch=3, epochs=2, verbose=0)
    assert len(hist.history["loss"]) == 2


def test_wrong_shape_or_dtype_names_element_and_spec():
    def bad_shape(shard_index, num_shards):
        for i in range(5):
            yield (np.zeros([3 if i == 3 else 2], np.float32), i)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"element 3: shape \(3,\) does not match \(2,\); expected "
                             r"TensorSpec\(shape=\(2,\), dtype=tf.float32"):
        list(pipeline.from_generator(bad_shape, SPEC))

    def bad_dtype():
        yield np.zeros([2], np.float32), 0
        yield np.zeros([2], np.float32), "seven"
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"element 1: dtype <U5 cannot be int64; expected "
                             r"TensorSpec\(shape=\(\), dtype=tf.int64"):
        list(pipeline.from_generator(bad_dtype, SPEC))

    def bad_structure(shard_index, num_shards):
        yield np.zeros([2], np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"element 0 of shard [01] has structure array\(2,\) float32, expected"):
        list(pipeline.from_generator(bad_structure, SPEC, num_parallel=2))


def test_bad_arguments():
    with pytest.raises(ValueError, match="Received: num_parallel=0"):
        pipeline.from_generator(sharded, SPEC, num_parallel=0)
    with pytest.raises(ValueError, match="Received: output_signature="):
        pipeline.from_generator(sharded, (tf.float32, tf.int64))
    with pytest.raises(ValueError, match="Received: fn=3"):
        pipeline.from_generator(3, SPEC)
