"""Segmentation pairs: pairing by name, masks as class indices, geometry together."""

import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from pipeline.decode import image as decode_lib
from pipeline.decode import masks as masks_lib
from seg_data import PALETTE, class_map, classes_of, mismatches, palette_bytes, write_pair


def _palette_file(arr, fmt, **save):
    im = Image.fromarray(arr.astype(np.uint8), "P")
    rng = np.random.default_rng(1)
    im.putpalette(rng.integers(0, 256, 768).tolist())  # colours unrelated to the indices
    b = io.BytesIO()
    im.save(b, fmt, **save)
    return b.getvalue()


@pytest.mark.parametrize("fmt,save,levels", [
    ("PNG", {}, 21), ("PNG", {}, 256), ("PNG", {"bits": 4}, 16), ("PNG", {"bits": 1}, 2),
    ("PNG", {"transparency": 3}, 21), ("GIF", {}, 21), ("GIF", {"transparency": 2}, 21),
    ("BMP", {}, 21), ("BMP", {}, 256)])
def test_palette_mask_decodes_to_its_indices_not_its_colours(fmt, save, levels):
    arr = np.random.default_rng(levels).integers(0, levels, (13, 17)).astype(np.uint8)
    data = _palette_file(arr, fmt, **save)
    ref = np.array(Image.open(io.BytesIO(data)))
    assert Image.open(io.BytesIO(data)).mode in ("P", "1") and (ref == arr).all()
    dec = masks_lib.MaskDecoder("index", None, decode_lib.Decoder(3, bmp_in_graph=True))
    mask, reason = dec.decode(tf.constant(data))
    assert reason.numpy() == b""
    assert mask.dtype == tf.uint8 and mask.shape == (13, 17, 1)
    np.testing.assert_array_equal(mask.numpy()[..., 0], arr)


def test_palette_bmp_rle_and_4_bit_decode_to_indices(tmp_path):
    arr = np.random.default_rng(4).integers(0, 16, (9, 11)).astype(np.uint8)
    arr[:, :5] = 3  # runs, for RLE
    im = Image.fromarray(arr, "P")
    im.putpalette(palette_bytes())
    dec = masks_lib.MaskDecoder("index", None, decode_lib.Decoder(3, bmp_in_graph=True))
    for save in ({"compression": "bmp_rle"}, {"bits": 4}):
        b = io.BytesIO()
        try:
            im.save(b, "BMP", **save)
        except (OSError, ValueError, TypeError):
            continue  # this Pillow cannot write the variant
        ref = np.array(Image.open(io.BytesIO(b.getvalue())))
        mask, reason = dec.decode(tf.constant(b.getvalue()))
        assert reason.numpy() == b""
        np.testing.assert_array_equal(mask.numpy()[..., 0], ref)


def test_gray_mask_gives_its_values_and_colour_mask_is_refused_under_index(tmp_path):
    gray = np.random.default_rng(0).integers(0, 256, (6, 7)).astype(np.uint8)
    rgb = np.stack([gray, gray, gray], -1)
    rgb[2, 3] = (10, 20, 30)
    paths = [str(tmp_path / "i.png"), str(tmp_path / "j.png")]
    Image.fromarray(gray).save(tmp_path / "g.png")
    Image.fromarray(rgb).save(tmp_path / "c.png")
    Image.fromarray(rgb).save(paths[0])
    Image.fromarray(rgb).save(paths[1])
    ds = pipeline.from_paths(paths, masks=[str(tmp_path / "g.png"), str(tmp_path / "c.png")],
                             image_size=None, batch_size=None, shuffle=False,
                             on_error="skip")
    got = list(ds.as_numpy_iterator())
    assert len(got) == 1
    np.testing.assert_array_equal(got[0][1][..., 0], gray)
    (err,) = pipeline.errors(ds)
    assert err.path == paths[1]
    assert str(tmp_path / "c.png") in err.reason and "(10, 20, 30) at row 2, column 3" in \
        err.reason and "mask_mode='rgb'" in err.reason


def test_rgb_mask_mode_maps_colours_and_names_an_unknown_colour(tmp_path):
    classes = class_map(20, 24, seed=3, classes=4)
    img = str(tmp_path / "img.png")
    Image.fromarray(PALETTE[classes]).save(img)
    Image.fromarray(PALETTE[classes]).save(tmp_path / "m.png")
    colours = {tuple(int(v) for v in PALETTE[k]): k for k in range(4)}
    ds = pipeline.from_paths([img], masks=[str(tmp_path / "m.png")], image_size=None,
                             batch_size=None, mask_mode="rgb", mask_colors=colours)
    (x, y), = list(ds.as_numpy_iterator())
    np.testing.assert_array_equal(y[..., 0], classes)
    bad = PALETTE[classes].copy()
    bad[5, 7] = (1, 2, 3)
    Image.fromarray(bad).save(tmp_path / "bad.png")
    ds = pipeline.from_paths([img], masks=[str(tmp_path / "bad.png")], image_size=(8, 8),
                             mask_mode="rgb", mask_colors=colours)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        list(ds)
    msg = e.value.message
    assert img in msg and str(tmp_path / "bad.png") in msg
    assert "mask colour (1, 2, 3) at row 5, column 7 is not in mask_colors" in msg


def _tree(tmp_path, n=6, image_fmt="PNG", mask_fmt="PNG", ext=(".png", ".png"),
          mask_suffix="", size=(30, 40)):
    root = tmp_path / "data"
    expected = {}
    for i in range(n):
        sub = "ab"[i % 2]
        classes = class_map(*size, seed=i)
        img = str(root / "images" / sub / f"im{i}{ext[0]}")
        mask = str(root / "masks" / sub / f"im{i}{mask_suffix}{ext[1]}")
        write_pair(img, mask, classes, image_fmt, mask_fmt)
        expected[img] = classes
    return str(root / "images"), str(root / "masks"), expected


def test_directory_pairs_matched_by_relative_path_and_stem_extensions_free(tmp_path):
    images, masks, expected = _tree(tmp_path, ext=(".jpg", ".png"), image_fmt="PNG",
                                    mask_suffix="_mask")
    ds = pipeline.from_directory(images, masks_dir=masks, mask_suffix="_mask",
                                 image_size=None, batch_size=None, include_paths=True,
                                 shuffle=False)
    got = {p.decode(): (x, y) for x, y, p in ds.as_numpy_iterator()}
    assert sorted(got) == sorted(expected) == ds.file_paths
    for p, (x, y) in got.items():
        np.testing.assert_array_equal(y[..., 0], expected[p])
        np.testing.assert_array_equal(classes_of(x), expected[p])
        assert y.dtype == np.uint8 and y.shape == expected[p].shape + (1,)


def test_orphans_are_named_with_where_their_partner_was_looked_for(tmp_path):
    images, masks, expected = _tree(tmp_path, n=4)
    os.remove(os.path.join(masks, "a", "im2.png"))      # an image without a mask
    os.remove(os.path.join(images, "b", "im3.png"))     # a mask without an image
    with pytest.raises(ValueError) as e:
        pipeline.from_directory(images, masks_dir=masks, image_size=(8, 8))
    msg = str(e.value)
    assert "1 image(s) without a mask and 1 mask(s) without an image" in msg
    assert os.path.join(images, "a", "im2.png") in msg and os.path.join(masks, "a", "im2.*") \
        in msg
    assert os.path.join(masks, "b", "im3.png") in msg and os.path.join(images, "b", "im3.*") \
        in msg
    ds = pipeline.from_directory(images, masks_dir=masks, image_size=(8, 8), batch_size=None,
                                 on_error="skip", include_paths=True, seed=1)
    for _ in range(2):
        paths = sorted(p.decode() for _, _, p in ds.as_numpy_iterator())
        assert paths == sorted([os.path.join(images, "a", "im0.png"),
                                os.path.join(images, "b", "im1.png")])
    errs = {e.path: e.reason for e in pipeline.errors(ds)}
    assert set(errs) == {os.path.join(images, "a", "im2.png"),
                         os.path.join(masks, "b", "im3.png")}
    assert "image without a mask" in errs[os.path.join(images, "a", "im2.png")]
    assert "mask without an image" in errs[os.path.join(masks, "b", "im3.png")]


def test_pair_of_different_sizes_is_bad_and_named(tmp_path):
    img, mask = write_pair(str(tmp_path / "i.png"), str(tmp_path / "m.png"), class_map(20, 30))
    Image.open(mask).crop((0, 0, 29, 20)).save(mask)
    ds = pipeline.from_paths([img], masks=[mask], image_size=(8, 8))
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        list(ds)
    assert img in e.value.message and mask in e.value.message
    assert "the image is 30x20 pixels but its mask" in e.value.message and "is 29x20" in \
        e.value.message


def test_missing_mask_file_is_named(tmp_path):
    img, mask = write_pair(str(tmp_path / "i.png"), str(tmp_path / "m.png"), class_map(20, 30))
    good = write_pair(str(tmp_path / "i2.png"), str(tmp_path / "m2.png"), class_map(20, 30))
    os.remove(mask)
    ds = pipeline.from_paths([img, good[0]], masks=[mask, good[1]], image_size=(8, 8),
                             on_error="skip", batch_size=None)
    assert len(list(ds)) == 1
    (err,) = pipeline.errors(ds)
    assert err.path == img and mask in err.reason


_GEOMETRY = pipeline.Augment(horizontal_flip=True, vertical_flip=True, rotation=30, zoom=0.2,
                             width_shift=0.1, height_shift=0.1, fill_mode="constant")


@pytest.mark.parametrize("resize,augment", [
    ("stretch", None),
    ("center_crop", None),
    ("pad", pipeline.Augment(rotation=15, shear=10, fill_mode="reflect")),
    ("stretch", pipeline.Augment(random_resized_crop=True, horizontal_flip=True)),
    ("crop", _GEOMETRY),
    ("pad", _GEOMETRY),
])
def test_geometry_together_class_from_image_colour_equals_mask(tmp_path, resize, augment):
    paths, masks = [], []
    for i, (h, w) in enumerate([(30, 40), (41, 23), (64, 64)]):
        img, mask = write_pair(str(tmp_path / f"i{i}.png"), str(tmp_path / f"m{i}.png"),
                               class_map(h, w, seed=i))
        paths.append(img)
        masks.append(mask)
    ds = pipeline.from_paths(paths, masks=masks, image_size=(24, 32), resize=resize,
                             augment=augment, batch_size=None, seed=5)
    allowed = set(range(len(PALETTE))) | {255}
    for _ in range(2):
        for x, y in ds.as_numpy_iterator():
            assert y.dtype == np.uint8 and y.shape == (24, 32, 1)
            assert set(np.unique(y)) <= allowed
            assert mismatches(x, y) == 0


def test_photometric_ops_leave_the_mask_alone(tmp_path):
    img, mask = write_pair(str(tmp_path / "i.png"), str(tmp_path / "m.png"), class_map(30, 40))
    geo = dict(horizontal_flip=True, rotation=20)
    kw = dict(image_size=(24, 24), batch_size=None, seed=3)
    plain = pipeline.from_paths([img], masks=[mask], augment=pipeline.Augment(**geo), **kw)
    jitter = pipeline.from_paths([img], masks=[mask], augment=pipeline.Augment(
        brightness=0.5, contrast=0.5, saturation=0.5, hue=0.2, channel_shift=50, **geo), **kw)
    for (x0, y0), (x1, y1) in zip(plain.as_numpy_iterator(), jitter.as_numpy_iterator()):
        np.testing.assert_array_equal(y0, y1)
        assert not np.array_equal(x0, x1)


def test_mask_pad_value_fills_letterbox_and_constant_fill(tmp_path):
    img, mask = write_pair(str(tmp_path / "i.png"), str(tmp_path / "m.png"),
                           np.zeros((10, 40), np.uint8))
    ds = pipeline.from_paths([img], masks=[mask], image_size=(40, 40), resize="pad",
                             batch_size=None, mask_pad_value=250)
    (x, y), = list(ds.as_numpy_iterator())
    assert (y[:15] == 250).all() and (y[25:] == 250).all() and (y[15:25] == 0).all()
    assert (x[:15] == 0).all()


def test_exactly_once_pairs_with_shuffle_cache_sharding_and_skip(tmp_path):
    n = 12
    paths, masks = [], []
    for i in range(n):
        classes = np.full((16, 16), i % len(PALETTE), np.uint8)
        classes[:, 8:] = (i + 1) % len(PALETTE)
        img, mask = write_pair(str(tmp_path / f"i{i:02d}.png"), str(tmp_path / f"m{i:02d}.png"),
                               classes)
        paths.append(img)
        masks.append(mask)
    (tmp_path / "broken.png").write_bytes(b"not a png")
    paths.append(str(tmp_path / "i99.png"))
    Image.fromarray(PALETTE[np.zeros((16, 16), np.uint8)]).save(paths[-1])
    masks.append(str(tmp_path / "broken.png"))
    seen_all = []
    for pid in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pid)
        ds = pipeline.from_paths(paths, masks=masks, image_size=(8, 8), batch_size=2, seed=4,
                                 cache="memory", on_error="skip", input_context=ctx,
                                 include_paths=True,
                                 augment=pipeline.Augment(horizontal_flip=True))
        epochs = []
        for _ in range(2):
            got = []
            for x, y, p in ds.as_numpy_iterator():
                for xi, yi, pi in zip(x, y, p):
                    assert mismatches(xi, yi) == 0
                    got.append(pi.decode())
            epochs.append(sorted(got))
        assert epochs[0] == epochs[1] and len(set(epochs[0])) == len(epochs[0])
        seen_all += epochs[0]
    assert sorted(seen_all) == sorted(paths[:-1])


def test_manifest_pairs_with_mask_column(tmp_path):
    rows = []
    for i in range(3):
        classes = class_map(20, 20, seed=i)
        write_pair(str(tmp_path / "img" / f"{i}.png"), str(tmp_path / "lbl" / f"{i}.gif"),
                   classes, mask_fmt="GIF", optimize=False)
        rows.append({"path": f"img/{i}.png", "mask": f"lbl/{i}.gif", "expected": i})
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = pipeline.from_manifest(str(manifest), mask_column="mask", image_size=None,
                                batch_size=None, shuffle=False)
    for i, (x, y) in enumerate(ds.as_numpy_iterator()):
        np.testing.assert_array_equal(y[..., 0], class_map(20, 20, seed=i))
        np.testing.assert_array_equal(classes_of(x), y[..., 0])
    csv = tmp_path / "m.csv"
    csv.write_text("path,mask\nimg/0.png,lbl/missing.png\n")
    with pytest.raises(FileNotFoundError, match="line 2: mask file not found"):
        pipeline.from_manifest(str(csv), mask_column="mask")
    with pytest.raises(ValueError, match="missing column 'masks'"):
        pipeline.from_manifest(str(manifest).replace(".jsonl", ".csv"), mask_column="masks")


def test_mask_options_validated_once_with_received(tmp_path):
    img, mask = write_pair(str(tmp_path / "i.png"), str(tmp_path / "m.png"), class_map(20, 20))
    cases = [
        (dict(mask_mode="palette"), "mask_mode='palette'"),
        (dict(mask_pad_value=256), "mask_pad_value=256"),
        (dict(mask_mode="rgb"), "mask_colors=None"),
        (dict(mask_mode="rgb", mask_colors={(1, 2): 3}), "the key (1, 2)"),
        (dict(mask_mode="rgb", mask_colors={(1, 2, 3): 300}), "the value 300"),
        (dict(mask_colors={(1, 2, 3): 1}), "mask_colors="),
    ]
    for kw, text in cases:
        with pytest.raises(ValueError, match="Received") as e:
            pipeline.from_paths([img], masks=[mask], **kw)
        assert text in str(e.value), (kw, str(e.value))
    with pytest.raises(ValueError, match="applies to segmentation pairs"):
        pipeline.from_paths([img], mask_pad_value=0)
    with pytest.raises(ValueError, match="one entry per path"):
        pipeline.from_paths([img], masks=[mask, mask])
    with pytest.raises(ValueError, match="`labels` and `class_names` must be None"):
        pipeline.from_paths([img], labels=[0], masks=[mask])
    with pytest.raises(ValueError, match="pass `masks_dir` too"):
        pipeline.from_directory(str(tmp_path), mask_suffix="_m")


def test_jpeg_masks_are_allowed_with_a_warning(tmp_path, caplog):
    img, _ = write_pair(str(tmp_path / "i.png"), str(tmp_path / "m.png"), class_map(16, 16))
    Image.fromarray(np.full((16, 16), 3, np.uint8)).save(tmp_path / "m.jpg", quality=100)
    from absl import logging as absl_logging  # noqa: F401 - absl routes to std logging
    with caplog.at_level("WARNING"):
        ds = pipeline.from_paths([img], masks=[str(tmp_path / "m.jpg")], image_size=None,
                                 batch_size=None)
    assert "JPEG is lossy" in caplog.text
    (x, y), = list(ds.as_numpy_iterator())
    assert (y == 3).all()


def test_tfrecords_carry_pairs_with_the_pixels_of_the_files(tmp_path):
    images, masks, expected = _tree(tmp_path, n=4)
    gif = os.path.join(masks, "a", "im0.png")  # one GIF and one BMP palette mask too
    Image.open(gif).save(gif[:-4] + ".gif", optimize=False)  # keeps the indices
    os.remove(gif)
    bmp = os.path.join(masks, "b", "im1.png")
    Image.open(bmp).save(bmp[:-4] + ".bmp")
    os.remove(bmp)
    kw = dict(image_size=(16, 16), batch_size=None, include_paths=True,
              augment=pipeline.Augment(horizontal_flip=True, rotation=10), seed=2)
    files = pipeline.from_directory(images, masks_dir=masks, shuffle=False, **kw)
    meta = pipeline.write_tfrecords(files, str(tmp_path / "shards"), num_shards=2,
                                    progress=False, shuffle=False)  # the same element seeds
    assert meta["has_masks"] and meta["num_examples"] == 4
    shards = pipeline.from_tfrecords(str(tmp_path / "shards"), shuffle=False, **kw)
    a = {p: (x, y) for x, y, p in files.as_numpy_iterator()}
    b = {p: (x, y) for x, y, p in shards.as_numpy_iterator()}
    assert sorted(a) == sorted(b) and len(a) == 4
    for p in a:
        np.testing.assert_array_equal(a[p][1], b[p][1])
        assert mismatches(*b[p]) == 0
    native = pipeline.from_tfrecords(str(tmp_path / "shards"), image_size=None,
                                     batch_size=None, include_paths=True)
    for x, y, p in native.as_numpy_iterator():
        np.testing.assert_array_equal(y[..., 0], expected[p.decode()])


def test_gray_png_masks_fast_path_matches_pillow_and_keeps_the_checks(tmp_path):
    """8-bit gray PNG masks (label-ID masks) decode by decode_png alone: the values
    Pillow reads, interlaced or with a tRNS chunk; max_pixels and a cut file are
    still named."""
    gray = np.random.default_rng(3).integers(0, 40, (30, 20)).astype(np.uint8)
    im = Image.fromarray(gray)
    saves = {"plain": {}, "interlaced": {"interlace": 1}, "trns": {"transparency": 7}}
    images, masks = [], []
    for name, save in saves.items():
        im.save(tmp_path / f"{name}_m.png", **save)
        Image.new("RGB", (20, 30), (9, 9, 9)).save(tmp_path / f"{name}.png")
        images.append(str(tmp_path / f"{name}.png"))
        masks.append(str(tmp_path / f"{name}_m.png"))
    for name in saves:
        assert np.array_equal(np.asarray(Image.open(tmp_path / f"{name}_m.png")), gray), name
    # a cut mask
    whole = (tmp_path / "plain_m.png").read_bytes()
    (tmp_path / "cut_m.png").write_bytes(whole[:len(whole) // 2])
    Image.new("RGB", (20, 30)).save(tmp_path / "cut.png")
    images.append(str(tmp_path / "cut.png"))
    masks.append(str(tmp_path / "cut_m.png"))
    ds = pipeline.from_paths(images, masks=masks, image_size=None, batch_size=None,
                             shuffle=False, on_error="skip")
    got = list(ds.as_numpy_iterator())
    assert len(got) == 3
    for _, m in got:
        assert m.dtype == np.uint8 and m.shape == (30, 20, 1)
        np.testing.assert_array_equal(m[..., 0], gray)
    (err,) = pipeline.errors(ds)
    assert err.path == images[-1]
    # over max_pixels: refused from the header, naming the limit (in a graph too)
    dec = masks_lib.MaskDecoder("index", None, decode_lib.Decoder(3, max_pixels=500))
    for fn in (dec.decode, tf.function(dec.decode)):
        mask, reason = fn(tf.constant(whole))
        assert "max_pixels=500" in reason.numpy().decode(), reason
    mask, reason = tf.function(masks_lib.MaskDecoder(
        "index", None, decode_lib.Decoder(3)).decode)(tf.constant(whole))
    assert reason.numpy() == b""
    np.testing.assert_array_equal(mask.numpy()[..., 0], gray)
