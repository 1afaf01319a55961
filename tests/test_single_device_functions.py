"""The pipeline's tf.data functions are instantiated on their one device (issue #13).

``stack.single_device_functions`` marks the functions that tf.data transformations trace
inside it with ``experimental_ints_on_device``, so that every ``iter(ds)`` instantiates
them directly instead of through the multi-device runtime and its Grappler pass. These
tests check which functions carry the mark (the pipeline's own, not a user's), that the
tf.data service's own functions keep TensorFlow's default, and that a marked dataset gives
the same elements as an unmarked one.
"""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

import pipeline
from pipeline import stack

# Keras and TensorFlow APIs that change between versions: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack



def write_class_folders(root, classes, per_class):
    """Class folders of noisy JPEGs (the JPEG-only graph); the first file of each class
    carries an EXIF orientation of 6 (rotated 90 degrees), so the EXIF path runs too."""
    from PIL import Image  # pylint: disable=import-outside-toplevel
    rng = np.random.default_rng(0)
    for c in classes:
        (root / c).mkdir(parents=True)
        for j in range(per_class):
            img = Image.fromarray(rng.integers(0, 256, (30 + j, 40, 3), dtype=np.uint8))
            exif = Image.Exif()
            if j == 0:
                exif[0x0112] = 6
            img.save(root / c / f"img{j}.jpg", quality=90, exif=exif.tobytes())
    return root


def _marked(ds):
    """{function name: carries the mark} for the dataset functions of ``ds``'s graph."""
    g = graph_pb2.GraphDef()
    g.ParseFromString(ds._as_serialized_graph().numpy())  # pylint: disable=protected-access
    out = {}
    for f in g.library.function:
        attr = f.attr.get(stack.SINGLE_DEVICE_ATTR)
        out[f.signature.name] = bool(attr is not None and attr.b)
    return out


def _dataset_functions(marks):
    # the functions tf.data itself wraps (a map's, a scan's, a filter's), not their branches
    return {k: v for k, v in marks.items() if k.startswith("__inference_Dataset_")}


def test_the_pipeline_functions_carry_the_mark(tmp_path):
    root = write_class_folders(tmp_path / "photos", classes=("a", "b"), per_class=3)
    ds = pipeline.from_directory(str(root), image_size=(16, 16), batch_size=2, shuffle=False)
    tops = _dataset_functions(_marked(ds))
    kinds = {}
    for name, marked in tops.items():
        kinds.setdefault(name.split("_Dataset_")[1].rsplit("_", 1)[0], set()).add(marked)
    # the element map (read + decode + resize) and the guard's scans carry the mark; the
    # last map, which casts the int labels to int32, is left to TensorFlow's runtime
    assert kinds["map_element"] == {True} and kinds["scan_check"] == {True}, kinds
    assert kinds["scan_remember"] == {True}, kinds
    assert kinds["map_structure"] == {False}, kinds
    x, y = next(iter(ds))
    assert x.dtype == tf.uint8 and y.dtype == tf.int32 and x.shape == (2, 16, 16, 3)


def test_categorical_labels_leave_every_function_marked(tmp_path):
    root = write_class_folders(tmp_path / "photos", classes=("a", "b"), per_class=2)
    ds = pipeline.from_directory(str(root), image_size=(16, 16), batch_size=2,
                                 label_mode="categorical")
    tops = _dataset_functions(_marked(ds))
    assert tops and all(tops.values()), tops
    _, y = next(iter(ds))
    assert y.dtype == tf.float32 and y.shape == (2, 2)


def test_a_users_own_map_is_left_alone(tmp_path):
    root = write_class_folders(tmp_path / "photos", classes=("a",), per_class=2)
    pipeline.from_directory(str(root), image_size=(16, 16), batch_size=2)
    mine = tf.data.Dataset.range(3).map(lambda x: x + 1)
    tops = _dataset_functions(_marked(mine))
    assert tops and not any(tops.values()), tops
    assert list(mine.as_numpy_iterator()) == [1, 2, 3]


def test_the_mark_is_scoped_and_can_be_suspended():
    with stack.single_device_functions():
        inside = tf.data.Dataset.range(2).map(lambda x: x * 2)
        with stack.single_device_functions(False):
            suspended = tf.data.Dataset.range(2).map(lambda x: x * 3)
        again = tf.data.Dataset.range(2).map(lambda x: x * 4)
    after = tf.data.Dataset.range(2).map(lambda x: x * 5)
    got = {name: _dataset_functions(_marked(d))
           for name, d in (("inside", inside), ("suspended", suspended), ("again", again),
                           ("after", after))}
    assert all(got["inside"].values()) and all(got["again"].values()), got
    assert not any(got["suspended"].values()) and not any(got["after"].values()), got
    assert [list(d.as_numpy_iterator()) for d in (inside, suspended, again, after)] == [
        [0, 2], [0, 3], [0, 4], [0, 5]]


@pytest.mark.parametrize("kwargs", [
    dict(),
    dict(on_error="skip", augment=pipeline.Augment(horizontal_flip=True, random_resized_crop=True), seed=3),
])
def test_marked_and_unmarked_give_the_same_elements(tmp_path, monkeypatch, kwargs):
    """The same dataset built with the mark and with TensorFlow's default runtime."""
    root = write_class_folders(tmp_path / "photos", classes=("a", "b"), per_class=4)
    (root / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")  # skipped
    opts = dict(image_size=(24, 24), batch_size=3, shuffle=True, seed=7, on_error="skip")
    opts.update(kwargs)
    marked = pipeline.from_directory(str(root), **opts)
    assert sum(_dataset_functions(_marked(marked)).values()) >= 3  # element map, 2 scans
    # the same factory with the marking switched off
    monkeypatch.setattr(stack, "SINGLE_DEVICE_FUNCTIONS", False)
    plain = pipeline.from_directory(str(root), **opts)
    assert not any(_dataset_functions(_marked(plain)).values())
    a = [(x.numpy(), y.numpy()) for x, y in marked]
    b = [(x.numpy(), y.numpy()) for x, y in plain]
    assert sum(len(x) for x, _ in a) == 8  # the 8 good files, the broken one skipped
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)


def test_a_function_returning_a_computed_int32_is_left_unmarked():
    """TensorFlow cannot run a marked function that returns a computed int32 beside
    another output ("Expected only one fetch node"): such functions are traced again
    without the mark, and the dataset works."""
    with stack.single_device_functions():
        pair = tf.data.Dataset.range(3).map(lambda x: (tf.cast(x, tf.int32) + 1, x > 1))
        state = tf.data.Dataset.range(3).scan(tf.constant(0), lambda s, x: (s + 1, (x, s)))
        wide = tf.data.Dataset.range(3).map(lambda x: (tf.cast(x, tf.uint8), x * 2))
    assert not any(_dataset_functions(_marked(pair)).values())
    assert not any(_dataset_functions(_marked(state)).values())
    assert all(_dataset_functions(_marked(wide)).values())
    assert [(int(a), bool(b)) for a, b in pair.as_numpy_iterator()] == [
        (1, False), (2, False), (3, True)]
    assert [(int(a), int(b)) for a, b in state.as_numpy_iterator()] == [(0, 0), (1, 1), (2, 2)]
    assert [(int(a), int(b)) for a, b in wide.as_numpy_iterator()] == [(0, 0), (1, 2), (2, 4)]


@pytest.mark.parametrize("label_mode", ["int", "categorical", "binary", None])
@pytest.mark.parametrize("source", ["directory", "tfrecords"])
def test_autotune_with_every_label_mode_iterates(tmp_path, label_mode, source):
    """With autotuning on, tf.data's inject_prefetch rewrite breaks a marked function that
    returns a computed int32 beside another output: every label mode, from files and from
    TFRecord shards, with autotune and AUTOTUNE parallelism, still iterates, exactly once."""
    root = write_class_folders(tmp_path / "photos", classes=("a", "b"), per_class=3)
    kwargs = dict(image_size=(16, 16), batch_size=4, label_mode=label_mode, autotune=True,
                  num_parallel_calls=tf.data.AUTOTUNE, include_paths=True, seed=1)
    if source == "directory":
        ds = pipeline.from_directory(str(root), **kwargs)
    else:
        pipeline.write_tfrecords(str(root), str(tmp_path / "shards"), num_shards=2,
                                 progress=False)
        ds = pipeline.from_tfrecords(str(tmp_path / "shards"), **kwargs)
    paths = []
    for el in ds:
        x = el[0]
        assert x.dtype == tf.uint8 and x.shape[1:] == (16, 16, 3)
        if label_mode is not None:
            y = el[1]
            want = {"int": tf.int32, "categorical": tf.float32, "binary": tf.float32}
            assert y.dtype == want[label_mode]
        paths += [p.decode() for p in el[-1].numpy()]
    assert sorted(p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] for p in paths) == sorted(
        f"{c}/img{j}.jpg" for c in ("a", "b") for j in range(3))
