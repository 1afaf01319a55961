"""Building the package's datasets leaves TensorFlow as it found it.

No TensorFlow class or function is wrapped or replaced for the process: every ``tf.data``
function of a pipeline dataset, and of a user's own, is traced and instantiated as
TensorFlow does by default (no function carries ``experimental_ints_on_device``), and
``pipeline.stack.single_device_functions`` changes nothing. The datasets iterate with
autotuning on in every label mode (the case the old marking broke).
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


def test_no_pipeline_function_carries_a_runtime_mark(tmp_path):
    root = write_class_folders(tmp_path / "photos", classes=("a", "b"), per_class=3)
    ds = pipeline.from_directory(str(root), image_size=(16, 16), batch_size=2, shuffle=False)
    marks = _marked(ds)
    kinds = {name.split("_Dataset_")[1].rsplit("_", 1)[0] for name in _dataset_functions(marks)}
    assert {"map_element", "scan_check", "map_structure"} <= kinds, kinds
    assert not any(marks.values()), marks
    x, y = next(iter(ds))
    assert x.dtype == tf.uint8 and y.dtype == tf.int32 and x.shape == (2, 16, 16, 3)


def test_dataset_map_is_the_same_object_after_a_pipeline_is_built(tmp_path):
    root = write_class_folders(tmp_path / "photos", classes=("a",), per_class=2)
    before = (tf.data.Dataset.map, tf.data.Dataset.scan, tf.data.Dataset.filter)
    with stack.single_device_functions():
        pipeline.from_directory(str(root), image_size=(16, 16), batch_size=2)
    assert (tf.data.Dataset.map, tf.data.Dataset.scan, tf.data.Dataset.filter) == before
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
