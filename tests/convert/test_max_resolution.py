"""write_tfrecords(max_resolution=N, jpeg_quality=Q): images stored once at training
resolution, re-encoded in graph, upright, never upscaled; on real sample photos."""

import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from pipeline.transform import quality
from pipeline.convert import shards

# JPEG re-encoding in graph: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..",
                      "shared", "data", "imagenet-sample")
N = 256
# The storage cost at the training size, measured on the first 40 sample photos
# (N=256, q=90, 224x224): median 37.2 dB, 5th percentile 31.3, lowest 28.7. Bounds a
# few dB below, for these 12 photos.
MEDIAN_BOUND_DB = 34.0
LOWEST_BOUND_DB = 26.0

SPEC = {k: tf.io.FixedLenFeature([], tf.int64 if k in ("label", "has_exif") else tf.string)
        for k in ("image", "path", "label", "format", "has_exif", "error")}


def _records(folder):
    """Every record of the shards, in the written order (round-robin over the shards)."""
    files = shards.list_files(folder)
    per = [[tf.io.parse_single_example(r, SPEC) for r in tf.data.TFRecordDataset(f)]
           for f in files]
    out = []
    for j in range(max(len(p) for p in per)):
        out += [p[j] for p in per if j < len(p)]
    return [{k: v.numpy() for k, v in r.items()} for r in out]


def _exif_jpeg(path, upright, orientation):
    """Saves ``upright`` as a camera would with ``orientation`` (6: stored rotated 90 CCW)."""
    stored = {1: upright, 6: np.rot90(upright, 1), 8: np.rot90(upright, -1)}[orientation]
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(np.ascontiguousarray(stored)).save(path, quality=95, exif=exif)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """12 real sample photos in 3 class folders (links), plus in class z_extra: a small
    photo (shorter side 100), a large rotated JPEG (EXIF 6) and a small rotated one."""
    if not os.path.isdir(SAMPLE):
        pytest.skip(f"no sample photos at {SAMPLE}")
    root = tmp_path_factory.mktemp("tree")
    photos = []
    for c in sorted(os.listdir(SAMPLE)):
        photos += [os.path.join(SAMPLE, c, f)
                   for f in sorted(os.listdir(os.path.join(SAMPLE, c)))]
        if len(photos) >= 12:
            break
    for i, p in enumerate(photos[:12]):
        d = root / f"class_{i % 3}"
        d.mkdir(exist_ok=True)
        os.symlink(p, d / f"photo_{i:02d}.jpg")
    extra = root / "z_extra"
    extra.mkdir()
    with Image.open(photos[0]) as im:
        big = np.asarray(im.convert("RGB"))
    Image.fromarray(big).resize((150, 100), Image.LANCZOS).save(extra / "small.jpg", quality=90)
    upright = np.zeros((600, 400, 3), np.uint8)  # portrait: bright top third, dark rest
    upright[:200] = 240
    _exif_jpeg(str(extra / "rotated_big.jpg"), upright, 6)
    _exif_jpeg(str(extra / "rotated_small.jpg"), upright[::4, ::4], 6)  # 150x100 upright
    return str(root), photos[:12]


@pytest.fixture(scope="module")
def written(tree, tmp_path_factory):
    root, _ = tree
    out = str(tmp_path_factory.mktemp("rec") / "shards")
    meta = pipeline.write_tfrecords(root, out, num_shards=2, shuffle=False, progress=False,
                                    max_resolution=N, jpeg_quality=90)
    return meta, _records(out)


def test_shorter_side_is_n_and_order_and_labels_kept(tree, written):
    root, photos = tree
    meta, recs = written
    from pipeline.sources import index as index_lib
    idx = index_lib.index_directory(root)
    assert [r["path"].decode() for r in recs] == [os.path.abspath(p) for p in idx.paths]
    assert [int(r["label"]) for r in recs] == [int(v) for v in idx.labels]
    assert meta["max_resolution"] == N and meta["jpeg_quality"] == 90
    for r in recs[:12]:  # the sample photos: all larger than 256 on their shorter side
        img = tf.io.decode_jpeg(r["image"]).numpy()
        with Image.open(r["path"].decode()) as im:
            w, h = im.size
        assert min(img.shape[:2]) == N, (r["path"], img.shape)
        # the longer side keeps the aspect ratio (rounded)
        assert max(img.shape[:2]) == round(max(h, w) * N / min(h, w))
        assert (img.shape[0] >= img.shape[1]) == (h >= w)
        assert r["format"] == b"jpeg" and r["has_exif"] == 0 and r["error"] == b""
        assert b"Exif\x00\x00" not in r["image"][:4096]
    # re-encoded: the 12 photos and the two rotated files; the small upright one is kept
    assert meta["reencoded"] == 14 and meta["num_examples"] == 15


def test_never_upscaled_and_stored_upright(tree, written):
    root, _ = tree
    _, recs = written
    by_name = {os.path.basename(r["path"].decode()): r for r in recs}
    small = by_name["small.jpg"]
    assert small["image"] == open(os.path.join(root, "z_extra", "small.jpg"), "rb").read()
    big = tf.io.decode_jpeg(by_name["rotated_big.jpg"]["image"]).numpy()
    assert big.shape == (384, 256, 3)  # upright 600x400 portrait -> shorter side 256
    assert big[:120].mean() > 225 and big[136:].mean() < 15  # bright top third, upright
    rot_small = by_name["rotated_small.jpg"]
    img = tf.io.decode_jpeg(rot_small["image"]).numpy()
    assert img.shape == (150, 100, 3)  # re-encoded upright at its own size, not upscaled
    assert img[:45].mean() > 225 and img[55:].mean() < 15
    assert b"Exif\x00\x00" not in rot_small["image"][:4096] and rot_small["has_exif"] == 0


def test_psnr_at_training_size_against_the_original(written):
    """The storage cost: the stored image's reference resize to 224x224 against the
    original file's (both antialiased resizes of the full decode, upright)."""
    _, recs = written
    values = []
    for r in recs[:12]:
        stored = tf.io.decode_jpeg(r["image"]).numpy()
        values.append(quality.psnr(quality.reference(stored, (224, 224)),
                                   quality.reference_for(r["path"].decode(), (224, 224))))
    s = quality.summary(values)
    assert s["psnr_db_median"] >= MEDIAN_BOUND_DB, values
    assert min(values) >= LOWEST_BOUND_DB, values


def test_read_back_through_from_tfrecords(written, tmp_path, tree):
    """The reader decodes the stored images as any others: 224x224 batches, every record."""
    root, _ = tree
    out = str(tmp_path / "s")
    pipeline.write_tfrecords(root, out, num_shards=1, shuffle=False, progress=False,
                             max_resolution=N)
    ds = pipeline.from_tfrecords(out, image_size=(224, 224), batch_size=5, shuffle=False)
    shapes = [tuple(x.shape) for x, _ in ds]
    assert shapes == [(5, 224, 224, 3)] * 3


@pytest.mark.sweep  # the JPEG re-encoding on TF 2.16: the tests above
def test_bad_files_are_still_named_or_skipped(tmp_path, tree):
    _, photos = tree
    d = tmp_path / "src" / "a"
    d.mkdir(parents=True)
    good = open(photos[0], "rb").read()
    (d / "good.jpg").write_bytes(good)
    (d / "trunc.jpg").write_bytes(good[:len(good) // 3])
    (d / "text.jpg").write_bytes(b"hello, not an image")
    meta = pipeline.write_tfrecords(str(tmp_path / "src"), str(tmp_path / "skip"),
                                    shuffle=False, progress=False, on_error="skip",
                                    max_resolution=N)
    assert meta["num_examples"] == 1 and meta["reencoded"] == 1
    assert sorted(os.path.basename(s["path"]) for s in meta["skipped"]) == ["text.jpg",
                                                                         "trunc.jpg"]
    # without on_error: every file is stored; the bad ones as they are, for the reader
    meta = pipeline.write_tfrecords(str(tmp_path / "src"), str(tmp_path / "all"),
                                    shuffle=False, progress=False, max_resolution=N)
    recs = {os.path.basename(r["path"].decode()): r for r in _records(str(tmp_path / "all"))}
    assert meta["reencoded"] == 1
    assert recs["trunc.jpg"]["image"] == good[:len(good) // 3]
    assert recs["text.jpg"]["error"].startswith(b"not an image")
    ds = pipeline.from_tfrecords(str(tmp_path / "all"), image_size=(64, 64), batch_size=1,
                                 shuffle=False, on_error="skip")
    assert sum(int(x.shape[0]) for x, _ in ds) == 1
    named = sorted(os.path.basename(e.path) for e in pipeline.errors(ds))
    assert named == ["text.jpg", "trunc.jpg"]


@pytest.mark.parametrize("kw, message", [
    ({"max_resolution": 0}, "`max_resolution` must be an integer >= 1 or None. "
                            "Received: max_resolution=0"),
    ({"max_resolution": 224.0}, "Received: max_resolution=224.0"),
    ({"max_resolution": 224, "jpeg_quality": 101},
     "`jpeg_quality` must be an integer in [1, 100] (libjpeg's quality scale). "
     "Received: jpeg_quality=101"),
    ({"max_resolution": 224, "jpeg_quality": 0}, "Received: jpeg_quality=0"),
])
def test_options_are_checked(tmp_path, kw, message):
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    with pytest.raises(ValueError) as e:
        pipeline.write_tfrecords([str(tmp_path / "a.png")], str(tmp_path / "o"), **kw)
    assert message in str(e.value)
