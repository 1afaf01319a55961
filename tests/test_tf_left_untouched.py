"""Building the package's datasets leaves TensorFlow as it found it.

No TensorFlow class or function is wrapped or replaced: a user's own ``Dataset.map`` is
traced and instantiated as TensorFlow does by default. The package's own maps (the read,
the batched checks, the per-element map), the guard's scans and filter and its keyed epoch's
``flat_map`` are built with public API (``stack.map_on_its_device``, ``scan_on_its_device``,
``filter_on_its_device``, ``flat_map_on_its_device``: a ``tf.function`` carrying
``experimental_ints_on_device`` under ``tf.raw_ops`` dataset ops) so tf.data instantiates them
on their one device; they give the same elements as ``Dataset.map`` / ``scan`` / ``filter`` /
``flat_map``, and fall back to them where TensorFlow cannot run such a function (an int32
result) or an element is not plain tensors.
"""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

import pipeline
from pipeline import stack

# Keras and TensorFlow APIs that change between versions: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

INTS_ON_DEVICE = "experimental_ints_on_device"


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
        attr = f.attr.get(INTS_ON_DEVICE)
        out[f.signature.name] = bool(attr is not None and attr.b)
    return out


def _dataset_functions(marks):
    # the functions tf.data itself wraps (a map's, a scan's, a filter's), not their branches
    return {k: v for k, v in marks.items() if k.startswith("__inference_Dataset_")}


def test_the_element_map_and_the_keyed_epoch_carry_the_mark(tmp_path):
    root = write_class_folders(tmp_path / "photos", classes=("a", "b"), per_class=3)
    ds = pipeline.from_directory(str(root), image_size=(16, 16), batch_size=2, seed=1)
    marks = _marked(ds)
    kinds = {}
    for name, marked in marks.items():
        if name.startswith(("__inference_Dataset_", "__inference_pipeline_")):
            kind = name[len("__inference_"):].rsplit("_", 1)[0]
            kinds.setdefault(kind, set()).add(marked)
    for kind in ("pipeline_map_element", "pipeline_flat_map_fn", "pipeline_map__read",
                 "pipeline_map_add", "pipeline_scan_check", "pipeline_scan_remember",
                 "pipeline_filter_lambda"):  # the read, the batched checks, the guard
        assert kinds[kind] == {True}, (kind, kinds)
    # built by Dataset.map elsewhere (small structural maps): TensorFlow's default runtime
    assert all(v == {False} for k, v in kinds.items() if k.startswith("Dataset_")), kinds
    x, y = next(iter(ds))
    assert x.dtype == tf.uint8 and y.dtype == tf.int32 and x.shape == (2, 16, 16, 3)


def test_map_on_its_device_gives_what_dataset_map_gives():
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant([0, 1], tf.int64), tf.constant([b"a", b"b"])), b"?")
    ds = tf.data.Dataset.range(6).map(lambda x: (x, tf.strings.as_string(x)))

    def fn(x, s):
        return {"twice": x * 2, "name": table.lookup(x % 3), "s": s}

    for calls, det in ((None, None), (2, True), (tf.data.AUTOTUNE, False)):
        mine = stack.map_on_its_device(ds, fn, calls, det)
        assert any(_marked(mine).values())
        assert mine.element_spec == ds.map(fn).element_spec
        got = sorted(list(mine.as_numpy_iterator()), key=lambda d: d["twice"])
        want = list(ds.map(fn).as_numpy_iterator())
        assert [(d["twice"], d["name"], d["s"]) for d in got] == [
            (d["twice"], d["name"], d["s"]) for d in want] == [
            (0, b"a", b"0"), (2, b"b", b"1"), (4, b"?", b"2"), (6, b"a", b"3"),
            (8, b"b", b"4"), (10, b"?", b"5")]
        assert int(mine.cardinality()) == 6


def test_map_on_its_device_falls_back_to_dataset_map():
    """An int32 result (TensorFlow cannot run it marked) or a ragged element: Dataset.map."""
    ints = stack.map_on_its_device(tf.data.Dataset.range(3), lambda x: (tf.cast(x, tf.int32), x))
    ragged = tf.data.Dataset.from_tensor_slices(tf.ragged.constant([[1], [2, 3]]))
    rag = stack.map_on_its_device(ragged, lambda r: r * 2)
    for d in (ints, rag):
        assert not any(_marked(d).values())
    assert [(int(a), int(b)) for a, b in ints.as_numpy_iterator()] == [(0, 0), (1, 1), (2, 2)]
    assert [r.tolist() for r in rag.as_numpy_iterator()] == [[2], [4, 6]]


def test_flat_map_on_its_device_gives_what_flat_map_gives():
    ds = tf.data.Dataset.range(3)
    fn = lambda x: tf.data.Dataset.range(x).map(lambda y: (y, x))
    mine = stack.flat_map_on_its_device(ds, fn)
    assert any(_marked(mine).values())
    assert mine.element_spec == ds.flat_map(fn).element_spec
    assert list(mine.as_numpy_iterator()) == list(ds.flat_map(fn).as_numpy_iterator()) == [
        (0, 1), (0, 2), (1, 2)]


def test_scan_on_its_device_gives_what_dataset_scan_gives():
    ds = tf.data.Dataset.range(1, 6).map(lambda x: (x, tf.strings.as_string(x)))

    def fn(state, el):
        total, names = state
        x, s = el
        return (total + x, tf.strings.join([names, s])), {"sum": total + x, "s": s}

    init = (tf.constant(0, tf.int64), tf.constant(""))
    mine = stack.scan_on_its_device(ds, init, fn)
    assert any(_marked(mine).values())
    assert mine.element_spec == ds.scan(init, fn).element_spec
    got = [(d["sum"], d["s"]) for d in mine.as_numpy_iterator()]
    assert got == [(d["sum"], d["s"]) for d in ds.scan(init, fn).as_numpy_iterator()] == [
        (1, b"1"), (3, b"2"), (6, b"3"), (10, b"4"), (15, b"5")]
    assert int(mine.cardinality()) == 5


def test_scan_on_its_device_falls_back_to_dataset_scan():
    """An int32 output, or a state whose shape changes (Dataset.scan relaxes it): Dataset.scan."""
    ds = tf.data.Dataset.range(3)
    ints = stack.scan_on_its_device(ds, tf.constant(0, tf.int64),
                                    lambda s, x: (s + x, tf.cast(s + x, tf.int32)))
    grow = stack.scan_on_its_device(ds, tf.zeros([0], tf.int64),
                                    lambda s, x: (tf.concat([s, [x]], 0), tf.size(s, tf.int64)))
    for d in (ints, grow):
        assert not any(_marked(d).values())
    assert list(ints.as_numpy_iterator()) == [0, 1, 3]
    assert list(grow.as_numpy_iterator()) == [0, 1, 2]


def test_filter_on_its_device_gives_what_dataset_filter_gives():
    ds = tf.data.Dataset.range(7).map(lambda x: (x, tf.strings.as_string(x)))
    keep = lambda x, s: tf.equal(x % 3, 0)  # noqa: E731
    mine = stack.filter_on_its_device(ds, keep)
    assert any(_marked(mine).values())
    assert mine.element_spec == ds.element_spec
    assert list(mine.as_numpy_iterator()) == list(ds.filter(keep).as_numpy_iterator()) == [
        (0, b"0"), (3, b"3"), (6, b"6")]


def test_dataset_map_is_the_same_object_after_a_pipeline_is_built(tmp_path):
    root = write_class_folders(tmp_path / "photos", classes=("a",), per_class=2)
    before = (tf.data.Dataset.map, tf.data.Dataset.scan, tf.data.Dataset.filter)
    pipeline.from_directory(str(root), image_size=(16, 16), batch_size=2)
    assert (tf.data.Dataset.map, tf.data.Dataset.scan, tf.data.Dataset.filter) == before
    mine = tf.data.Dataset.range(2).map(lambda x: x + 1)
    assert not any(_marked(mine).values())
    assert not hasattr(stack, "SINGLE_DEVICE_FUNCTIONS")


def test_a_users_own_map_is_left_alone(tmp_path):
    root = write_class_folders(tmp_path / "photos", classes=("a",), per_class=2)
    pipeline.from_directory(str(root), image_size=(16, 16), batch_size=2)
    mine = tf.data.Dataset.range(3).map(lambda x: x + 1)
    tops = _dataset_functions(_marked(mine))
    assert tops and not any(tops.values()), tops
    assert list(mine.as_numpy_iterator()) == [1, 2, 3]


@pytest.mark.parametrize("label_mode", ["int", "categorical", "binary", None])
@pytest.mark.parametrize("source", ["directory", "tfrecords"])
def test_autotune_with_every_label_mode_iterates(tmp_path, label_mode, source):
    """With autotuning on (tf.data's inject_prefetch rewrite), every label mode, from
    files and from TFRecord shards, with AUTOTUNE parallelism, iterates, each file exactly once."""
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
