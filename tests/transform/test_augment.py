"""Tests of pipeline.transform.augment: seeded, stateless, uint8 in and out."""

import io
import math

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from pipeline.transform import augment as aug_lib


def _image(h=48, w=64, c=3, seed=0):
    rng = np.random.default_rng(seed)
    return tf.constant(rng.integers(0, 256, size=(h, w, c), dtype=np.uint8))


ALL_ON = dict(random_resized_crop=True, horizontal_flip=True, vertical_flip=True, rotation=25,
              brightness=0.2, contrast=0.3, saturation=0.3, hue=0.05, width_shift=0.1,
              height_shift=4, shear=10, zoom=0.2, channel_shift=20, brightness_range=(0.8, 1.2))


def test_exported():
    assert pipeline.Augment is aug_lib.Augment


def test_same_seed_same_pixels_different_seed_different():
    aug = aug_lib.Augment(**ALL_ON)
    img = _image()
    a = aug(img, tf.constant([3, 7]), output_size=(32, 40)).numpy()
    b = aug(img, tf.constant([3, 7], tf.int64), output_size=(32, 40)).numpy()
    fn = tf.function(lambda i, s: aug(i, s, output_size=(32, 40)))
    c = fn(img, tf.constant([3, 7], tf.int64)).numpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    d = aug(img, tf.constant([3, 8]), output_size=(32, 40)).numpy()
    assert not np.array_equal(a, d)


def test_same_pixels_under_parallel_map():
    aug = aug_lib.Augment(rotation=30, zoom=0.2, brightness=0.1, horizontal_flip=True)
    img = _image(24, 24)
    seeds = tf.data.Dataset.random(seed=5).batch(2).take(16)
    ds1 = seeds.map(lambda s: aug(img, s), num_parallel_calls=1)
    ds4 = seeds.map(lambda s: aug(img, s), num_parallel_calls=4, deterministic=True)
    for x, y in zip(ds1, ds4):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


@pytest.mark.parametrize("kw", [dict(), dict(horizontal_flip=True), dict(rotation=10),
                                dict(brightness=0.3, contrast=0.2), dict(channel_shift=30),
                                dict(zoom=(0.5, 0.9), fill_mode="constant", fill_value=7)])
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_shapes_and_dtypes(kw, channels):
    aug = aug_lib.Augment(**kw)
    out = aug(_image(20, 30, channels), [1, 2])
    assert out.dtype == tf.uint8
    assert out.shape == (20, 30, channels)


def test_identity_when_nothing_on():
    img = _image()
    np.testing.assert_array_equal(aug_lib.Augment()(img, [1, 2]).numpy(), img.numpy())


def test_random_resized_crop_output_size_and_default_size():
    aug = aug_lib.Augment(random_resized_crop=dict(scale=(0.2, 0.5)))
    img = _image(50, 70)
    assert aug(img, [1, 1], output_size=(16, 24)).shape == (16, 24, 3)
    assert aug(img, [1, 1], output_size=16).shape == (16, 16, 3)
    assert aug(img, [1, 1]).shape == (50, 70, 3)


def test_flips_really_flip():
    img = _image(10, 12)
    h = aug_lib.Augment(horizontal_flip=True)
    v = aug_lib.Augment(vertical_flip=True)
    seen_h, seen_v = set(), set()
    for s in range(20):
        oh = h(img, [s, 0]).numpy()
        ov = v(img, [s, 0]).numpy()
        if np.array_equal(oh, img.numpy()):
            seen_h.add("same")
        else:
            np.testing.assert_array_equal(oh, img.numpy()[:, ::-1])
            seen_h.add("flipped")
        if np.array_equal(ov, img.numpy()):
            seen_v.add("same")
        else:
            np.testing.assert_array_equal(ov, img.numpy()[::-1])
            seen_v.add("flipped")
    assert seen_h == {"same", "flipped"} and seen_v == {"same", "flipped"}


def test_rotation_180_is_a_point_reflection():
    # A rotation drawn from [-180, 180]; for the seed whose angle is ~±180 the
    # transform reproduces img[::-1, ::-1]. Instead, check the matrix directly.
    aug = aug_lib.Augment(rotation=90, fill_mode="constant")
    m = aug._transform_matrix(tf.constant([1, 2]), 9, 9).numpy()
    full = np.append(m, 1.0).reshape(3, 3)
    # Maps the center to itself, and is a rotation (orthonormal 2x2 block).
    np.testing.assert_allclose(full @ [4.0, 4.0, 1.0], [4.0, 4.0, 1.0], atol=1e-5)
    np.testing.assert_allclose(full[:2, :2] @ full[:2, :2].T, np.eye(2), atol=1e-5)


def test_shift_moves_pixels_by_whole_pixels():
    img = np.zeros((20, 20, 1), np.uint8)
    img[10, 10] = 200
    aug = aug_lib.Augment(width_shift=5, interpolation="nearest", fill_mode="constant")
    moved = 0
    for s in range(5):
        out = aug(tf.constant(img), [s, 1]).numpy()
        ys, xs = np.nonzero(out[..., 0])
        assert len(ys) == 1 and ys[0] == 10 and abs(xs[0] - 10) <= 5
        moved += xs[0] != 10
    assert moved > 0


def test_crop_window_inside_image_and_in_ranges():
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    fn = tf.function(lambda shape, seed: aug_lib.crop_window(shape, seed, scale, ratio))
    for h, w in [(100, 100), (375, 500), (500, 333), (31, 200)]:
        in_range = 0
        for s in range(100):
            oy, ox, ch, cw = [int(v) for v in fn(tf.constant([h, w, 3]), tf.constant([s, 9]))]
            assert 0 <= oy and oy + ch <= h and 0 <= ox and ox + cw <= w and ch >= 1 and cw >= 1
            area = ch * cw / (h * w)
            r = cw / ch
            # Rounding to whole pixels moves area / ratio slightly.
            ok = (scale[0] * 0.9 <= area <= 1.0 and ratio[0] * 0.9 <= r <= ratio[1] * 1.1)
            in_range += ok
            if not ok:  # the torchvision fallback: a center crop, ratio clamped
                assert oy == (h - ch) // 2 and ox == (w - cw) // 2
        assert in_range >= 90, (h, w, in_range)


def test_crop_window_fallback_for_extreme_aspect():
    # 10x1000: no candidate fits; center crop clamped to ratio 4/3 max.
    oy, ox, ch, cw = [int(v) for v in aug_lib.crop_window([10, 1000, 3], [1, 2])]
    assert (oy, ch) == (0, 10) and cw == round(10 * 4 / 3) and ox == (1000 - cw) // 2


def test_crop_window_matches_call():
    aug = aug_lib.Augment(random_resized_crop=dict(scale=(0.1, 0.6)), horizontal_flip=True,
                          brightness=0.2)
    img = _image(60, 90)
    for s in range(5):
        seed = tf.constant([s, 4])
        full = aug(img, seed, output_size=(20, 20)).numpy()
        oy, ox, ch, cw = aug.crop_window(tf.shape(img), seed)
        window = img[oy:oy + ch, ox:ox + cw]
        again = aug(window, seed, output_size=(20, 20), crop_done=True).numpy()
        np.testing.assert_array_equal(full, again)
        assert (int(ch), int(cw)) != (60, 90)


def test_crop_before_decode_jpeg_agrees():
    rng = np.random.default_rng(1)
    arr = (np.add.outer(np.arange(64), np.arange(96))[..., None] * [1, 2, 3] % 256).astype(np.uint8)
    arr = np.clip(arr.astype(int) + rng.integers(-3, 4, arr.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=95)
    contents = tf.constant(buf.getvalue())
    aug = aug_lib.Augment(random_resized_crop=True)
    seed = tf.constant([11, 12])
    oy, ox, ch, cw = aug.crop_window(tf.image.extract_jpeg_shape(contents), seed)
    window = tf.io.decode_and_crop_jpeg(contents, tf.stack([oy, ox, ch, cw]), channels=3)
    fast = aug(window, seed, output_size=(32, 32), crop_done=True).numpy().astype(int)
    slow = aug(tf.io.decode_jpeg(contents, channels=3), seed, output_size=(32, 32)).numpy()
    assert np.abs(fast - slow.astype(int)).mean() < 2.0


def test_brightness_changes_colour_and_keeps_range():
    img = tf.fill([8, 8, 3], tf.constant(100, tf.uint8))
    aug = aug_lib.Augment(brightness_range=(1.5, 2.0))
    out = aug(img, [1, 2]).numpy()
    assert 150 <= out.min() and out.max() <= 200 and len(np.unique(out)) == 1
    sat = aug_lib.Augment(brightness_range=(3.0, 3.0))(img, [1, 2]).numpy()
    assert sat.max() == 255  # clipped, not wrapped


def test_from_image_data_generator_mapping():
    aug = aug_lib.Augment.from_image_data_generator(
        rotation_range=20, width_shift_range=0.2, height_shift_range=3, shear_range=15,
        zoom_range=[0.9, 1.3], horizontal_flip=True, vertical_flip=False,
        brightness_range=[0.5, 1.5], channel_shift_range=10.0, rescale=1.0 / 255,
        fill_mode="constant", cval=4, featurewise_center=False, zca_epsilon=1e-6,
        validation_split=0.2, data_format="channels_last")
    assert (aug.rotation, aug.width_shift, aug.height_shift, aug.shear) == (20, 0.2, 3, 15)
    assert aug.zoom == (0.9, 1.3) and aug.horizontal_flip and not aug.vertical_flip
    assert aug.brightness_range == (0.5, 1.5) and aug.channel_shift == 10
    assert aug.fill_mode == "constant" and aug.fill_value == 4
    assert aug.factory_options == {"dtype": tf.float32, "validation_split": 0.2}
    z = aug_lib.Augment.from_image_data_generator(zoom_range=0.25, rescale=1 / 127.5)
    assert z.zoom == (0.75, 1.25) and z.fill_mode == "nearest"
    assert z.factory_options["dtype"] == tf.float32
    assert z.factory_options["normalize"] == pytest.approx((0.0, 0.5))
    assert aug_lib.Augment.from_image_data_generator().factory_options == {}
    out = aug(_image(), [1, 2])
    assert out.dtype == tf.uint8 and out.shape == (48, 64, 3)


@pytest.mark.parametrize("kw,name", [
    (dict(featurewise_center=True), "featurewise_center"),
    (dict(zca_whitening=True), "zca_whitening"),
    (dict(samplewise_std_normalization=True), "samplewise_std_normalization"),
    (dict(preprocessing_function=lambda x: x), "preprocessing_function"),
    (dict(width_shift_range=[-2, 0, 2]), "width_shift_range"),
    (dict(zoom_range=1.5), "zoom_range"),
    (dict(fill_mode="mirror"), "fill_mode"),
    (dict(data_format="channels_first"), "data_format"),
    (dict(rescale="1/255"), "rescale"),
    (dict(interpolation_order=3), "interpolation_order"),
])
def test_from_image_data_generator_unsupported(kw, name):
    with pytest.raises(ValueError, match=f"Received: {name}="):
        aug_lib.Augment.from_image_data_generator(**kw)


def test_from_image_data_generator_unknown_name():
    with pytest.raises(TypeError, match="rotation"):
        aug_lib.Augment.from_image_data_generator(rotation=10)


@pytest.mark.parametrize("kw,name", [
    (dict(rotation=-1), "rotation"), (dict(rotation=200), "rotation"),
    (dict(rotation=float("nan")), "rotation"), (dict(brightness=1.5), "brightness"),
    (dict(contrast=1.0), "contrast"), (dict(saturation=-0.1), "saturation"),
    (dict(hue=0.6), "hue"), (dict(width_shift=-0.1), "width_shift"),
    (dict(height_shift="a"), "height_shift"), (dict(shear=90), "shear"),
    (dict(zoom=1.0), "zoom"), (dict(zoom=(1.2, 0.8)), "zoom"),
    (dict(channel_shift=300), "channel_shift"), (dict(fill_mode="mirror"), "fill_mode"),
    (dict(fill_value=-1), "fill_value"), (dict(horizontal_flip=1), "horizontal_flip"),
    (dict(vertical_flip="yes"), "vertical_flip"), (dict(interpolation="bicubic"), "interpolation"),
    (dict(brightness_range=(2, 1)), "brightness_range"),
    (dict(random_resized_crop=0.5), "random_resized_crop"),
    (dict(random_resized_crop=dict(scale=(0.0, 1.0))), r"random_resized_crop\['scale'\]"),
    (dict(random_resized_crop=dict(scale=(0.5, 1.5))), r"random_resized_crop\['scale'\]"),
    (dict(random_resized_crop=dict(ratio=(2, 1))), r"random_resized_crop\['ratio'\]"),
    (dict(random_resized_crop=dict(size=3)), "random_resized_crop"),
])
def test_bad_arguments(kw, name):
    with pytest.raises(ValueError, match=f"Received: {name}="):
        aug_lib.Augment(**kw)


def test_bad_call_arguments():
    with pytest.raises(ValueError, match="output_size"):
        aug_lib.Augment(rotation=3)(_image(), [1, 2], output_size=(5, 5))
    with pytest.raises(ValueError, match="output_size"):
        aug_lib.Augment(random_resized_crop=True)(_image(), [1, 2], output_size=(0, 5))
    with pytest.raises(ValueError, match="3 channels"):
        aug_lib.Augment(hue=0.1)(_image(c=1), [1, 2])
    with pytest.raises(ValueError, match="uint8"):
        aug_lib.Augment()(tf.zeros([4, 4, 3]), [1, 2])
    with pytest.raises(ValueError, match="crop_window"):
        aug_lib.Augment().crop_window([4, 4, 3], [1, 2])


def test_ops_are_stateless_in_graph():
    aug = aug_lib.Augment(**ALL_ON)
    fn = tf.function(lambda i, s: aug(i, s, output_size=(16, 16)))
    graph = fn.get_concrete_function(tf.TensorSpec([None, None, 3], tf.uint8),
                                     tf.TensorSpec([2], tf.int64)).graph
    ops = {op.type for op in graph.get_operations()}
    stateful = {"RandomUniform", "RandomUniformInt", "RandomStandardNormal",
                "StatefulUniform", "StatefulUniformInt", "RngReadAndSkip", "PyFunc",
                "EagerPyFunc"}
    assert not ops & stateful, ops & stateful
    assert "ImageProjectiveTransformV3" in ops
    assert math.isfinite(1.0)


def test_image_data_generator_factory_options_apply_with_augment_alone(tmp_path):
    """Found by a fresh-eyes user: rescale / validation_split mapped from
    ImageDataGenerator arguments were silently ignored unless **factory_options was
    also passed."""
    import os
    from PIL import Image
    os.makedirs(tmp_path / "a")
    for k in range(10):
        Image.new("RGB", (4, 4), (200, 0, 0)).save(tmp_path / "a" / f"{k}.png")
    aug = pipeline.Augment.from_image_data_generator(rescale=1 / 255., horizontal_flip=True)
    x, _ = next(iter(pipeline.from_directory(str(tmp_path), image_size=(4, 4), augment=aug)))
    assert x.dtype == tf.float32 and abs(float(x[0, 0, 0, 0]) - 200 / 255) < 1e-6
    aug = pipeline.Augment.from_image_data_generator(validation_split=0.2)
    with pytest.raises(ValueError, match="needs `subset`"):
        pipeline.from_directory(str(tmp_path), image_size=(4, 4), augment=aug)
    tr = pipeline.from_directory(str(tmp_path), image_size=(4, 4), augment=aug, subset="training")
    assert len(tr.file_paths) == 8
    with pytest.raises(ValueError, match=r"augment.*sets \['validation_split'\]"):
        pipeline.from_directory(str(tmp_path), image_size=(4, 4), augment=aug,
                                validation_split=0.5, subset="training")
