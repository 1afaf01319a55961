"""Cache budget, fast JPEG paths against the slow path, seeded augmentation through factories."""

import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from conftest import flatten, index_values, solid
from pipeline.tools import sample


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Realistic JPEGs (smooth fields + noise), 300-600 px, 2 classes."""
    return sample.ensure_sample(12, 2, seed=5, root=str(tmp_path_factory.mktemp("s")))


def test_cache_refuses_over_budget(class_tree):
    root, _ = class_tree
    with pytest.raises(ValueError) as e:
        pipeline.from_directory(root, image_size=(64, 64), cache="memory",
                                cache_budget_bytes=100_000)
    msg = str(e.value)
    assert "cache='memory'" in msg and "cache_budget_bytes" in msg and "12 images" in msg
    ds = pipeline.from_directory(root, image_size=(64, 64), cache="memory",
                                 cache_budget_bytes=10_000_000)
    assert ds.cache_estimate_bytes == 12 * 64 * 64 * 3


def test_cache_epochs_exactly_once_and_reshuffled(class_tree, tmp_path):
    root, expected = class_tree
    for cache in ("memory", str(tmp_path / "c")):
        ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=4, cache=cache, seed=2)
        orders = [index_values(flatten(ds)[0]) for _ in range(3)]
        assert all(sorted(o) == sorted(expected) for o in orders)
        assert orders[0] != orders[1] or orders[1] != orders[2]


def _mad(a, b):
    return np.abs(a.astype(float) - b.astype(float)).mean()


@pytest.mark.parametrize("resize", ["crop", "stretch"])
def test_fast_jpeg_paths_match_slow_path(photos, resize):
    # full-scale decoding on both sides (jpeg_dct_scaling: tests/decode/test_dct_scaling.py)
    kw = dict(image_size=(96, 96), resize=resize, shuffle=False, batch_size=None,
              jpeg_dct_scaling=False)
    fast = np.stack([x for x, _ in pipeline.from_directory(photos, **kw).as_numpy_iterator()])
    slow = np.stack([x for x, _ in pipeline.from_directory(
        photos, fast_jpeg=False, **kw).as_numpy_iterator()])
    # crop: decode_and_crop_jpeg (one column wider at chroma edges) vs decode+slice;
    # stretch: no reduced-scale decode. Both exactly equal (they were up to ~6 apart).
    assert np.array_equal(fast, slow)


def test_random_resized_crop_fast_matches_slow(photos):
    aug = pipeline.Augment(random_resized_crop=True, horizontal_flip=True)
    kw = dict(image_size=(64, 64), batch_size=None, seed=11, augment=aug, shuffle=False,
              jpeg_dct_scaling=False)  # (reduced-scale windows: tests/decode/test_dct_scaling.py)
    fast = np.stack([x for x, _ in pipeline.from_directory(photos, **kw).as_numpy_iterator()])
    slow = np.stack([x for x, _ in pipeline.from_directory(
        photos, fast_jpeg=False, **kw).as_numpy_iterator()])
    assert fast.shape == (12, 64, 64, 3)
    assert _mad(fast, slow) <= 2.0


def test_augmentation_seeded_deterministic_and_epoch_dependent(photos):
    aug = pipeline.Augment(random_resized_crop=True, horizontal_flip=True, brightness=0.2)
    make = lambda seed, par: pipeline.from_directory(
        photos, image_size=(32, 32), batch_size=4, seed=seed, augment=aug,
        num_parallel_calls=par)
    a, b = make(3, 1), make(3, 8)
    ea = [flatten(a)[0] for _ in range(2)]
    eb = [flatten(b)[0] for _ in range(2)]
    assert np.array_equal(ea[0], eb[0]) and np.array_equal(ea[1], eb[1])  # any parallelism
    assert not np.array_equal(ea[0], ea[1])                              # epochs differ
    assert not np.array_equal(flatten(make(4, 1))[0], ea[0])             # seeds differ


def _exif_jpeg(path, orientation, layout, base):
    """A JPEG whose EXIF block carries ``orientation``, laid out as ``layout``:
    "pillow" (what Pillow writes), "jfif+icc" (APP0, APP2, then APP1),
    "motorola" (big-endian TIFF header, the tag not first in IFD0)."""
    import io
    import struct
    buf = io.BytesIO()
    Image.fromarray(base).save(buf, "JPEG", quality=95, subsampling=0)
    jpeg = buf.getvalue()
    if layout == "pillow":
        exif = Image.Exif()
        exif[0x0112] = orientation
        Image.fromarray(base).save(path, quality=95, subsampling=0, exif=exif.tobytes())
        return
    big = layout == "motorola"
    e = ">" if big else "<"
    entries = [(0x010F, 2, 4, b"cam\x00"), (0x0112, 3, 1, struct.pack(e + "HH", orientation, 0))]
    ifd = struct.pack(e + "H", len(entries)) + b"".join(
        struct.pack(e + "HHI", tag, typ, count) + value for tag, typ, count, value in entries)
    tiff = (b"MM\x00*" if big else b"II*\x00") + struct.pack(e + "I", 8) + ifd + b"\x00" * 4
    app1 = b"\xff\xe1" + struct.pack(">H", 2 + 6 + len(tiff)) + b"Exif\x00\x00" + tiff
    app2 = b"\xff\xe2" + struct.pack(">H", 2 + 14) + b"ICC_PROFILE\x00\x01\x01"
    rest = jpeg[2:]
    if rest[:2] == b"\xff\xe0":  # keep Pillow's APP0 (JFIF) first
        n = struct.unpack(">H", rest[2:4])[0]
        head, rest = rest[:2 + n], rest[2 + n:]
    else:
        head = b""
    with open(path, "wb") as f:
        f.write(b"\xff\xd8" + head + (app2 if layout == "jfif+icc" else b"") + app1 + rest)


@pytest.mark.parametrize("layout", ["pillow", "jfif+icc", "motorola"])
def test_exif_orientations_match_pillow_from_every_source(tmp_path, layout):
    """The EXIF orientation is read in graph from the file's bytes (no Pillow, no
    tensorflow-io), the same way for files and TFRecord shards, whatever the
    segment layout and byte order; all 8 tags match Pillow's exif_transpose."""
    from PIL import ImageOps
    base = np.zeros((24, 40, 3), np.uint8)   # four distinct quadrants, 40 wide x 24 high
    base[:12, :20] = (250, 0, 0)
    base[:12, 20:] = (0, 250, 0)
    base[12:, :20] = (0, 0, 250)
    base[12:, 20:] = (250, 250, 250)
    paths, refs = [], []
    os.makedirs(tmp_path / "src" / "a")
    for o in range(1, 9):
        p = str(tmp_path / "src" / "a" / f"o{o}.jpg")
        _exif_jpeg(p, o, layout, base)
        with Image.open(p) as im:
            assert im.getexif().get(0x0112) == o  # Pillow reads the tag we wrote
            refs.append(np.asarray(ImageOps.exif_transpose(im).convert("RGB")))
        paths.append(p)
    pipeline.write_tfrecords(str(tmp_path / "src"), str(tmp_path / "shards"), num_shards=1,
                             shuffle=False, progress=False)
    kw = dict(image_size=None, batch_size=None, shuffle=False)
    from_files = list(pipeline.from_paths(paths, **kw).as_numpy_iterator())
    from_shards = [x for x, _ in pipeline.from_tfrecords(str(tmp_path / "shards"),
                                                         **kw).as_numpy_iterator()]
    for o, (got, shard, ref) in enumerate(zip(from_files, from_shards, refs), 1):
        assert got.shape == ref.shape == ((24, 40, 3) if o <= 4 else (40, 24, 3)), o
        assert _mad(got, ref) <= 3.0, o
        assert np.array_equal(got, shard), o
        if o in (2, 3, 4):  # really moved, not just the same pixels
            assert _mad(got, np.asarray(Image.open(paths[0]).convert("RGB"))) > 20, o


def test_exif_orientation_parser_edge_cases():
    """No EXIF, EXIF without the tag, a tag value out of range, a bad IFD offset,
    and a truncated file all read as 1 (as stored), never an error."""
    from pipeline.decode import image as decode
    import struct
    fn = tf.function(decode.exif_orientation, autograph=False,
                     input_signature=[tf.TensorSpec([], tf.string)])
    buf = __import__("io").BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buf, "JPEG")
    plain = buf.getvalue()

    def with_exif(tiff):
        app1 = b"\xff\xe1" + struct.pack(">H", 8 + len(tiff)) + b"Exif\x00\x00" + tiff
        return b"\xff\xd8" + app1 + plain[2:]

    no_tag = b"II*\x00" + struct.pack("<IH", 8, 1) + struct.pack("<HHII", 0x010F, 2, 4, 0)
    bad_value = b"II*\x00" + struct.pack("<IH", 8, 1) + struct.pack("<HHIHH", 0x0112, 3, 1, 9, 0)
    bad_offset = b"II*\x00" + struct.pack("<I", 10 ** 9)
    for data in (plain, with_exif(no_tag), with_exif(bad_value), with_exif(bad_offset),
                 with_exif(bad_offset)[:12], b"\xff\xd8", b""):
        assert int(fn(tf.constant(data))) == 1


def test_exif_ifd0_offset_is_unsigned_and_followed():
    """IFD0 where its (unsigned 32-bit) offset says, in either byte order: right after
    the header, further on, or past the end of the file (1: as stored). The reader
    decodes the offset as an int32 and masks it: 0x80000000 and up must not become
    negative offsets that read bytes before the TIFF header."""
    from pipeline.decode import image as decode
    import struct
    fn = tf.function(decode.exif_orientation, autograph=False,
                     input_signature=[tf.TensorSpec([], tf.string)])
    buf = __import__("io").BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buf, "JPEG")
    plain = buf.getvalue()

    def jpeg(e, offset, gap=b"", orientation=6):
        ifd = struct.pack(e + "H", 2) + struct.pack(e + "HHI", 0x010F, 2, 4) + b"cam\x00" + \
            struct.pack(e + "HHIHH", 0x0112, 3, 1, orientation, 0) + b"\x00" * 4
        tiff = (b"II*\x00" if e == "<" else b"MM\x00*") + struct.pack(e + "I", offset) + gap + ifd
        app1 = b"\xff\xe1" + struct.pack(">H", 8 + len(tiff)) + b"Exif\x00\x00" + tiff
        return b"\xff\xd8" + app1 + plain[2:]

    for e in ("<", ">"):
        assert int(fn(tf.constant(jpeg(e, 8)))) == 6, e
        assert int(fn(tf.constant(jpeg(e, 20, gap=b"\x07" * 12, orientation=8)))) == 8, e
        # 2 ** 32 - 4 read as -4 would land on the orientation entry (count: "if" of "Exif")
        for offset in (2 ** 31, 2 ** 32 - 8, 2 ** 32 - 4, 2 ** 32 - 1):
            assert int(fn(tf.constant(jpeg(e, offset)))) == 1, (e, offset)


def test_pad_fast_path_matches_slow_path(photos):
    """Found by a fresh-eyes user: DCT-scaled decoding shifted "pad" content by a
    pixel. "pad" decodes at full scale (also with jpeg_dct_scaling, the default);
    fast and slow paths agree exactly."""
    get = lambda fast: np.stack(list(pipeline.from_directory(
        photos, image_size=(64, 80), resize="pad", batch_size=None, shuffle=False,
        fast_jpeg=fast).map(lambda x, y: x).as_numpy_iterator()))
    assert np.array_equal(get(True), get(False))


def test_file_cache_never_reads_a_stale_or_failed_cache(tmp_path):
    """Found by a fresh-eyes user: a cache file written for other options, or left by
    an epoch that failed on a bad file, was read back as this dataset's."""
    root = tmp_path / "d"
    for k in range(4):
        solid(str(root / "a" / f"{k}.png"), 10 + k)
    cache = str(tmp_path / "c" / "cache")
    os.makedirs(os.path.dirname(cache))
    values = lambda ds: sorted(int(x[0, 0, 0]) for x, _ in ds.unbatch().as_numpy_iterator())
    stretch = pipeline.from_directory(str(root), image_size=(8, 8), batch_size=2, cache=cache)
    assert values(stretch) == [10, 11, 12, 13]
    big = pipeline.from_directory(str(root), image_size=(16, 16), batch_size=2, cache=cache)
    assert [x.shape[1:3] for x, _ in big.as_numpy_iterator()] == [(16, 16)] * 2
    # a bad file fails the epoch; once it is removed, the next dataset works
    bad = root / "a" / "zz.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    with pytest.raises(tf.errors.InvalidArgumentError, match="zz.png"):
        values(pipeline.from_directory(str(root), image_size=(8, 8), batch_size=2, cache=cache,
                                       shuffle=False))
    bad.unlink()
    assert values(pipeline.from_directory(str(root), image_size=(8, 8), batch_size=2,
                                          cache=cache, shuffle=False)) == [10, 11, 12, 13]
    # same files and options: the same cache prefix is reused
    from pipeline import assemble
    a = pipeline.from_directory(str(root), image_size=(8, 8), cache=cache)
    b = pipeline.from_directory(str(root), image_size=(8, 8), cache=cache)
    c = pipeline.from_directory(str(root), image_size=(8, 8), cache=cache, resize="crop")
    f = lambda ds: assemble.cache_file(ds.pipeline_built.options, ds.pipeline_built.source)
    assert f(a) == f(b) != f(c) and f(a).startswith(cache + "-")
