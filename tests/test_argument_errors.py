"""Bad arguments found by the fourth fresh-eyes user test (a helper given only the README):
each now gets a ValueError that names the argument and the value received."""

import os

import numpy as np
import pytest
import tensorflow as tf

import pipeline
from conftest import solid


@pytest.fixture()
def folder(tmp_path):
    for c in ("a", "b", "c"):
        solid(str(tmp_path / "photos" / c / "x.png"), 50)
    return str(tmp_path / "photos")


@pytest.mark.parametrize("std", [(0, 0, 0), (0.2, -1, 0.2), 0.0])
def test_normalize_std_must_be_positive(folder, std):
    # before: accepted, and every pixel came out -inf (or sign-flipped)
    with pytest.raises(ValueError, match=r"`normalize`'s std must be > 0.*Received: normalize="):
        pipeline.from_directory(folder, image_size=(8, 8), dtype=tf.float32,
                                normalize=((0.5, 0.5, 0.5), std))


@pytest.mark.parametrize("norm", [((0.5, 0.5), (0.2, 0.2)), ((0.5,) * 4, (0.2,) * 4)])
def test_normalize_needs_one_value_or_one_per_channel(folder, norm):
    # before: TensorFlow's "Dimensions must be equal ... Sub" while tracing
    with pytest.raises(ValueError, match=r"one per channel \(3\).*Received: normalize=.*"
                                         r"channels=3"):
        pipeline.from_directory(folder, image_size=(8, 8), dtype=tf.float32, normalize=norm)


def test_normalize_scalar_or_per_channel_still_works(folder):
    ds = pipeline.from_directory(folder, image_size=(4, 4), dtype=tf.float32, batch_size=None,
                                 shuffle=False, normalize=(0.5, 0.25))
    x, _ = next(iter(ds))
    np.testing.assert_allclose(x.numpy(), (50 / 255 - 0.5) / 0.25, rtol=1e-6)
    ds = pipeline.from_directory(folder, image_size=(4, 4), dtype=tf.float32, batch_size=None,
                                 shuffle=False, normalize=((0.1, 0.2, 0.3), (0.5, 0.5, 0.5)))
    x, _ = next(iter(ds))
    np.testing.assert_allclose(x.numpy()[0, 0], (50 / 255 - np.array([0.1, 0.2, 0.3])) / 0.5,
                               rtol=1e-6)


@pytest.mark.parametrize("kwargs, name", [
    (dict(shuffle="no"), "shuffle"),
    (dict(drop_remainder="no"), "drop_remainder"),
    (dict(deterministic="x"), "deterministic"),
    (dict(num_parallel_calls=0), "num_parallel_calls"),
])
def test_npy_shards_check_their_arguments(tmp_path, kwargs, name):
    # before: shuffle="no" shuffled; the others gave TypeErrors from tf.data, or were accepted
    np.save(tmp_path / "x.npy", np.arange(12, dtype=np.int32).reshape(4, 3))
    with pytest.raises(ValueError, match=rf"`{name}`.*Received: {name}="):
        pipeline.from_npy_shards([str(tmp_path / "x.npy")], **kwargs)


def test_npy_shards_take_autotune_parallelism(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(12, dtype=np.int32).reshape(4, 3))
    ds = pipeline.from_npy_shards([str(tmp_path / "x.npy")], shuffle=False, batch_size=None,
                                  num_parallel_calls=tf.data.AUTOTUNE)
    assert [r.tolist() for r in ds.as_numpy_iterator()] == [[0, 1, 2], [3, 4, 5], [6, 7, 8],
                                                            [9, 10, 11]]


@pytest.mark.parametrize("strategy", ["mirrored", None])
def test_distribute_dataset_checks_its_strategy(folder, strategy):
    # before: AttributeError: 'str' object has no attribute 'distribute_datasets_from_function'
    with pytest.raises(ValueError, match=r"`strategy` must be a tf.distribute.Strategy.*"
                                         r"Received: strategy="):
        pipeline.distribute_dataset(strategy, pipeline.from_directory, folder)


def test_binary_labels_message_names_the_class_count_without_names(folder):
    paths = [os.path.join(folder, c, "x.png") for c in ("a", "b", "c")]
    # before: "... Received: label_mode='binary', class_names=[]"
    with pytest.raises(ValueError, match=r"exactly 2 classes; found 3\. Received: "
                                         r"label_mode='binary', num_classes=3$"):
        pipeline.from_paths(paths, labels=[0, 1, 2], label_mode="binary")


# Found by the fifth fresh-eyes user test.

def test_an_empty_path_is_refused_when_the_dataset_is_built(folder):
    good = os.path.join(folder, "a", "x.png")
    # before: built, then at iteration "cannot load file  (unreadable file ...)"
    with pytest.raises(ValueError, match=r"an empty string names no file\. "
                                         r"Received: paths\[1\]=''$"):
        pipeline.from_paths([good, ""], image_size=(8, 8))


def test_an_empty_validation_subset_quotes_the_subset_asked_for(folder):
    # before: "Received: subset='validation'" for subset="both"
    with pytest.raises(ValueError, match=r"The validation subset is empty: .* Received: "
                                         r"subset='both', validation_split=0\.01$"):
        pipeline.from_directory(folder, validation_split=0.01, subset="both", seed=1)


def test_class_weights_of_a_resampled_dataset_warn_of_the_double_correction(folder):
    ds = pipeline.from_directory(folder, sampling="balanced", seed=1, image_size=(8, 8))
    with pytest.warns(UserWarning, match=r"sampling='balanced'.*correct the imbalance twice"):
        weights = pipeline.class_weights(ds)
    assert weights == {0: 1.0, 1: 1.0, 2: 1.0}  # the files as listed: one per class
    plain = pipeline.from_directory(folder, seed=1, image_size=(8, 8))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pipeline.class_weights(plain) == weights
