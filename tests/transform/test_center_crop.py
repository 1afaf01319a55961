"""resize="center_crop": the ImageNet evaluation protocol of the reference ResNet.

The reference is the TensorFlow Model Garden's ``_decode_and_center_crop``
(official ResNet ``imagenet_preprocessing.py``, ``CROP_PADDING = 32``): a
centred square of side ``int(s / (s + 32) * min(h, w))`` decoded with
``decode_and_crop_jpeg``, then resized to ``s x s``.
"""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

import pipeline
from pipeline.transform import geometry as transform
from conftest import IMAGENET as SAMPLE

# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack


def _photos(n=12):
    files = sorted(f for f in glob.glob(os.path.join(SAMPLE, "*", "*"))
                   if f.lower().endswith((".jpg", ".jpeg")))
    if not files:
        pytest.skip("needs JPEG photos: $PIPELINE_DATA_DIR or ../shared/data/imagenet-sample")
    return files[::max(1, len(files) // n)][:n]


def _reference_window(contents, size):
    """Model Garden's window, written out as there (square targets)."""
    shape = tf.image.extract_jpeg_shape(contents)
    h, w = shape[0], shape[1]
    side = tf.cast((size / (size + 32)) * tf.cast(tf.minimum(h, w), tf.float32), tf.int32)
    return ((h - side) + 1) // 2, ((w - side) + 1) // 2, side, side


def test_window_arithmetic():
    # a 500x375 photo at 224x224: 224/256 * 375 = 328.1 -> 328, offsets (375-328+1)//2, (500-328+1)//2
    assert [int(v) for v in transform.center_crop_window(375, 500, 224, 224)] == [24, 86, 328, 328]
    # a wide target keeps its aspect: the 'crop' window (375x500 -> 250x500), shrunk by 64/96
    oy, ox, ch, cw = (int(v) for v in transform.center_crop_window(375, 500, 64, 128))
    assert (ch, cw) == (int(64 / 96 * 250), int(64 / 96 * 500)) == (166, 333)
    assert (oy, ox) == ((375 - 166 + 1) // 2, (500 - 333 + 1) // 2)
    # never empty
    assert [int(v) for v in transform.center_crop_window(1, 3, 224, 224)][2:] == [1, 1]


def test_same_window_and_pixels_as_the_reference():
    paths = _photos()
    ds = pipeline.from_paths(paths, image_size=(224, 224), resize="center_crop", batch_size=None,
                             shuffle=False)
    for path, got in zip(paths, ds.as_numpy_iterator()):
        contents = tf.io.read_file(path)
        oy, ox, ch, cw = _reference_window(contents, 224)
        ours = transform.center_crop_window(*tf.unstack(tf.image.extract_jpeg_shape(contents)[:2]),
                                            224, 224)
        assert [int(v) for v in ours] == [int(oy), int(ox), int(ch), int(cw)], path
        crop = tf.image.decode_and_crop_jpeg(contents, tf.stack([oy, ox, ch, cw]), channels=3)
        want = tf.cast(tf.image.resize(crop, (224, 224)) + 0.5, tf.uint8).numpy()
        assert got.shape == (224, 224, 3) and got.dtype == np.uint8
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1, path


def test_crop_before_decode_equals_decode_then_crop(tmp_path):
    """The fast path (only the window is decoded) gives the slow path's pixels, for
    JPEGs of every sample shape and for a PNG (no fast path); at full scale
    (``jpeg_dct_scaling=False``: windows decoded reduced, at 96x160, are judged
    against an antialiased reference in tests/decode/test_dct_scaling.py)."""
    from PIL import Image
    paths = _photos()
    png = str(tmp_path / "x.png")
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (61, 97, 3), np.uint8)).save(png)
    paths = paths + [png]
    get = lambda fast, size: np.stack(list(pipeline.from_paths(
        paths, image_size=size, resize="center_crop", batch_size=None, shuffle=False,
        fast_jpeg=fast, jpeg_dct_scaling=False).as_numpy_iterator()))
    for size in ((224, 224), (96, 160)):
        assert np.array_equal(get(True, size), get(False, size)), size


def test_differs_from_keras_crop_to_aspect_ratio():
    """'center_crop' is not 'crop': it keeps the central 87.5% at 224x224."""
    paths = _photos(3)
    kw = dict(image_size=(224, 224), batch_size=None, shuffle=False)
    a = np.stack(list(pipeline.from_paths(paths, resize="center_crop", **kw).as_numpy_iterator()))
    b = np.stack(list(pipeline.from_paths(paths, resize="crop", **kw).as_numpy_iterator()))
    assert np.abs(a.astype(int) - b.astype(int)).mean() > 5


def test_bad_resize_names_the_choices():
    with pytest.raises(ValueError, match="center_crop"):
        pipeline.from_paths(["a.jpg"], resize="centre")
