"""TIFF variants and AVIF on every stack: what the in-graph decoder (tensorflow-io, where
its ops load) does not decode exactly as Pillow does goes to the marked Pillow fallback, so
every variant gives Pillow's pixels, through every source, on both stacks.

Files are written by Pillow where it can write the variant; the variants Pillow cannot
write (2- and 4-bit samples, 1- and 4-bit palettes, 16-bit RGB, tiles, multi-page palette
files, big-endian) by ``write_tiff`` below, a plain TIFF 6.0 writer (uncompressed strips or
tiles), whose source values give the right answer independently of any decoder.
"""

import io
import os
import struct

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageCms, features

import pipeline
from pipeline.decode import image as decode_lib
from pipeline import stack
from conftest import drain

# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

H, W = 13, 17
RNG = np.random.default_rng(1234)
U8 = RNG.integers(0, 256, (H, W, 4), dtype=np.uint8)
U16 = RNG.integers(0, 65536, (H, W, 3), dtype=np.uint16)
F32 = np.concatenate([RNG.random((H, W - 2), dtype=np.float32),
                      np.array([[-0.5, 1.5]] * H, np.float32)], 1)  # out of range: clipped
NIB = RNG.integers(0, 16, (H, W, 1))
PALETTE16 = RNG.integers(0, 65536, 3 * 16)

AVIF_OK = "avif" in stack.pillow_plugins()


def write_tiff(pages, big_endian=False):
    """Bytes of a TIFF 6.0 file, one IFD per page. A page: dict of ``samples`` (int array
    [h, w, samples per pixel]), ``bits`` (1, 2, 4, 8 or 16), ``photometric``, optional
    ``colormap`` (3 * 2**bits SHORTs, TIFF order: all red, then green, then blue) and
    ``tile`` (side, pixels: tiled instead of one strip)."""
    e = ">" if big_endian else "<"
    out = bytearray(b"MM\x00*" if big_endian else b"II*\x00") + bytes(4)
    link = 4
    for p in pages:
        s = np.asarray(p["samples"])
        h, w, spp = s.shape
        bits = p["bits"]

        def pack(block):
            if bits == 16:
                return block.astype(e + "u2").tobytes()
            rows = []
            for row in block:
                bitstr = "".join(format(int(v), f"0{bits}b") for v in row.reshape(-1))
                bitstr += "0" * (-len(bitstr) % 8)
                rows.append(int(bitstr, 2).to_bytes(len(bitstr) // 8, "big"))
            return b"".join(rows)

        tile = p.get("tile")
        if tile:
            chunks = []
            for ty in range(0, h, tile):
                for tx in range(0, w, tile):
                    blk = np.zeros((tile, tile, spp), s.dtype)
                    part = s[ty:ty + tile, tx:tx + tile]
                    blk[:part.shape[0], :part.shape[1]] = part
                    chunks.append(pack(blk))
        else:
            chunks = [pack(s)]
        offsets = []
        for c in chunks:
            offsets.append(len(out))
            out += c + bytes(len(c) % 2)
        short, long_ = 3, 4
        entries = [(256, long_, [w]), (257, long_, [h]), (258, short, [bits] * spp),
                   (259, short, [1]), (262, short, [p["photometric"]]),
                   (277, short, [spp]), (284, short, [1])]
        if tile:
            entries += [(322, long_, [tile]), (323, long_, [tile]), (324, long_, offsets),
                        (325, long_, [len(c) for c in chunks])]
        else:
            entries += [(273, long_, offsets), (278, long_, [h]),
                        (279, long_, [len(c) for c in chunks])]
        if p.get("colormap") is not None:
            entries.append((320, short, [int(v) for v in p["colormap"]]))
        entries.sort()
        ifd = len(out)
        struct.pack_into(e + "I", out, link, ifd)
        far = ifd + 2 + 12 * len(entries) + 4
        body, blobs = bytearray(struct.pack(e + "H", len(entries))), bytearray()
        for tag, typ, vals in entries:
            raw = b"".join(struct.pack(e + ("H" if typ == short else "I"), v) for v in vals)
            if len(raw) <= 4:
                body += struct.pack(e + "HHI", tag, typ, len(vals)) + raw.ljust(4, b"\0")
            else:
                body += struct.pack(e + "HHII", tag, typ, len(vals), far + len(blobs))
                blobs += raw + bytes(len(raw) % 2)
        link = len(out) + len(body)
        out += body + bytes(4) + blobs
    return bytes(out)


def _pillow_tiff(img, **kw):
    b = io.BytesIO()
    img.save(b, "TIFF", **kw)
    return b.getvalue()


def _palette_rgb(index, colormap, bits):
    """RGB of palette indices as Pillow expands a TIFF colormap (16-bit -> high byte)."""
    n = 2 ** bits
    cm = (np.asarray(colormap).reshape(3, n) >> 8).T.astype(np.uint8)
    return cm[index[..., 0]]


def _rgb_of(pil):
    return np.asarray(pil.convert("RGB"))


def _variants():
    """name -> (file bytes, the right RGB [H, W, 3] uint8, the right alpha or None)."""
    rgb, rgba = Image.fromarray(U8[..., :3]), Image.fromarray(U8)
    gray = Image.fromarray(U8[..., 0])
    pal = rgb.quantize(64)
    lab = Image.fromarray(U8[..., :3], "LAB")
    lab_to_srgb = ImageCms.buildTransform(ImageCms.createProfile("LAB"),
                                          ImageCms.createProfile("sRGB"), "LAB", "RGB")
    two = RNG.integers(0, 4, (H, W, 1))
    bilevel = Image.fromarray((U8[..., 0] > 127).astype(np.uint8) * 255).convert("1")
    cm2 = RNG.integers(0, 65536, 6)
    v = {
        "rgb8": (_pillow_tiff(rgb), U8[..., :3], None),
        "rgb8_lzw": (_pillow_tiff(rgb, compression="tiff_lzw"), U8[..., :3], None),
        "rgb8_deflate": (_pillow_tiff(rgb, compression="tiff_adobe_deflate"), U8[..., :3], None),
        "rgb8_packbits": (_pillow_tiff(rgb, compression="packbits"), U8[..., :3], None),
        "rgb8_big_endian": (write_tiff([dict(samples=U8[..., :3], bits=8, photometric=2)],
                                       big_endian=True), U8[..., :3], None),
        "rgb8_tiled": (write_tiff([dict(samples=U8[..., :3], bits=8, photometric=2, tile=16)]),
                       U8[..., :3], None),
        "rgba8": (_pillow_tiff(rgba), U8[..., :3], U8[..., 3]),
        "gray8": (_pillow_tiff(gray), np.repeat(U8[..., :1], 3, -1), None),
        "gray8_alpha": (_pillow_tiff(Image.fromarray(U8[..., :2], "LA")),
                        np.repeat(U8[..., :1], 3, -1), U8[..., 1]),
        "gray8_min_is_white": (write_tiff([dict(samples=U8[..., :1], bits=8, photometric=0)]),
                               np.repeat(255 - U8[..., :1], 3, -1), None),
        "bilevel": (_pillow_tiff(bilevel), _rgb_of(bilevel), None),
        "bilevel_group4": (_pillow_tiff(bilevel, compression="group4"), _rgb_of(bilevel), None),
        "gray2": (write_tiff([dict(samples=two, bits=2, photometric=1)]),
                  np.repeat((two * 85).astype(np.uint8), 3, -1), None),
        "gray4": (write_tiff([dict(samples=NIB, bits=4, photometric=1)]),
                  np.repeat((NIB * 17).astype(np.uint8), 3, -1), None),
        "gray16": (_pillow_tiff(Image.fromarray(U16[..., 0])),
                   np.repeat((U16[..., :1] >> 8).astype(np.uint8), 3, -1), None),
        "rgb16": (write_tiff([dict(samples=U16, bits=16, photometric=2)]),
                  (U16 >> 8).astype(np.uint8), None),
        "rgb16_big_endian": (write_tiff([dict(samples=U16, bits=16, photometric=2)],
                                        big_endian=True), (U16 >> 8).astype(np.uint8), None),
        "float32": (_pillow_tiff(Image.fromarray(F32, "F")),
                    np.repeat(np.round(np.clip(F32, 0, 1) * 255).astype(np.uint8)[..., None],
                              3, -1), None),
        "palette8": (_pillow_tiff(pal), _rgb_of(pal), None),
        "palette4": (write_tiff([dict(samples=NIB, bits=4, photometric=3, colormap=PALETTE16)]),
                     _palette_rgb(NIB, PALETTE16, 4), None),
        # the file: several pages of a 1-bit palette image (first page wanted)
        "palette1_multipage": (write_tiff([dict(samples=NIB % 2, bits=1, photometric=3,
                                                colormap=cm2),
                                           dict(samples=1 - NIB % 2, bits=1, photometric=3,
                                                colormap=cm2)]),
                               _palette_rgb(NIB % 2, cm2, 1), None),
        "rgb8_multipage": (None, U8[..., :3], None),
        "cmyk": (_pillow_tiff(Image.fromarray(U8, "CMYK")),
                 _rgb_of(Image.fromarray(U8, "CMYK")), None),
        "lab": (_pillow_tiff(lab), np.asarray(ImageCms.applyTransform(lab, lab_to_srgb)), None),
        "ycbcr_jpeg": (_pillow_tiff(rgb, compression="jpeg", quality=90), None, None),
    }
    multi = io.BytesIO()
    rgb.save(multi, "TIFF", save_all=True, append_images=[Image.fromarray(255 - U8[..., :3])])
    v["rgb8_multipage"] = (multi.getvalue(), U8[..., :3], None)
    jpeg_tif = v["ycbcr_jpeg"][0]
    v["ycbcr_jpeg"] = (jpeg_tif, _rgb_of(Image.open(io.BytesIO(jpeg_tif))), None)
    return v


VARIANTS = _variants()
# tensorflow-io's decoder gives exactly Pillow's pixels for these (where its ops load)
IN_GRAPH = {"rgb8", "rgb8_lzw", "rgb8_deflate", "rgb8_packbits", "rgb8_big_endian",
            "rgb8_tiled", "gray8", "gray8_min_is_white", "bilevel", "bilevel_group4", "gray2",
            "gray4", "palette8", "palette4", "palette1_multipage", "rgb8_multipage"}


def _expected(name, channels):
    _, rgb, alpha = VARIANTS[name]
    if channels == 3:
        return rgb
    if channels == 4:
        return np.concatenate([rgb, (np.full(rgb.shape[:2], 255, np.uint8) if alpha is None
                                     else alpha)[..., None]], -1)
    if np.array_equal(rgb[..., 0], rgb[..., 1]) and np.array_equal(rgb[..., 0], rgb[..., 2]):
        return rgb[..., :1]  # gray stays gray
    return tf.image.rgb_to_grayscale(rgb).numpy()  # ITU-R 601 luma, as every format


def _folder(tmp_path, names, ext=".tif"):
    root = tmp_path / "data"
    (root / "a").mkdir(parents=True)
    paths = []
    for n in names:
        p = root / "a" / (n + ext)
        p.write_bytes(VARIANTS[n][0])
        paths.append(str(p))
    return str(root), paths


def test_pillow_reads_every_variant_as_written():
    """The right answers above are the values written (where Pillow did not write the file),
    and Pillow's decode of each file gives them: the fixtures are sound."""
    for name, (data, rgb, alpha) in VARIANTS.items():
        with Image.open(io.BytesIO(data)) as im:
            assert im.size == (W, H), name
        got = decode_lib.pillow_image(data)
        colour = got[..., :3] if got.shape[-1] >= 3 else np.repeat(got[..., :1], 3, -1)
        assert np.array_equal(colour, rgb), name
        if alpha is not None:
            assert np.array_equal(got[..., -1], alpha), name


@pytest.mark.parametrize("channels", [3, 1, 4])
def test_every_tiff_variant_gives_pillows_pixels(tmp_path, channels):
    """On both stacks: each variant decodes (in graph or by the fallback) to the right
    pixels, exactly, with the module's channel rules."""
    _, paths = _folder(tmp_path, VARIANTS)
    ds = pipeline.from_paths(paths, image_size=None, batch_size=None, shuffle=False,
                             channels=channels, on_error="skip", include_paths=True)
    got = {os.path.basename(p.decode())[:-4]: img for img, p in drain(ds)}
    assert not pipeline.errors(ds), [(e.path, e.reason) for e in pipeline.errors(ds)]
    assert sorted(got) == sorted(VARIANTS)
    for name, img in got.items():
        want = _expected(name, channels)
        assert img.shape == (H, W, channels), name
        assert np.array_equal(img, want), (name, np.abs(img.astype(int) - want).max())


def test_same_pixels_from_paths_directory_and_tfrecords(tmp_path):
    root, paths = _folder(tmp_path, VARIANTS)
    kw = dict(image_size=None, batch_size=None, shuffle=False, include_paths=True)

    def by_name(ds):
        out = {}
        for img, *rest in drain(ds):
            out[os.path.basename(rest[-1].decode())] = img
        return out

    a = by_name(pipeline.from_paths(paths, **kw))
    b = by_name(pipeline.from_directory(root, **kw))
    shards = str(tmp_path / "shards")
    pipeline.write_tfrecords(root, shards, num_shards=2, shuffle=False, progress=False)
    c = by_name(pipeline.from_tfrecords(shards, **kw))
    assert sorted(a) == sorted(b) == sorted(c) and len(a) == len(VARIANTS)
    for k in a:
        assert np.array_equal(a[k], b[k]) and np.array_equal(a[k], c[k]), k


def test_header_routing_in_graph_and_in_python_agree():
    """``tiff_header``'s in-graph choice (tensorflow-io or the fallback) is the Python
    mirror's (``scan`` reports with the latter), and the plain variants are the ones
    tensorflow-io decodes as Pillow does; its size is the file's."""
    for name, (data, _, _) in VARIANTS.items():
        h, w, in_graph = decode_lib.tiff_header(tf.constant(data))
        assert (int(h), int(w)) == (H, W), name
        assert bool(in_graph) == decode_lib.tiff_in_graph_bytes(data) == (name in IN_GRAPH), name
    # the IFD read through read_at when it lies past the first bytes given
    data = VARIANTS["gray4"][0]
    assert decode_lib.tiff_in_graph_bytes(data[:8], lambda o, n: data[o:o + n])


def test_routing_with_and_without_tensorflow_io():
    """Where tensorflow-io is built in, only the non-plain variants take the fallback;
    where it is not (TensorFlow 2.17+), every TIFF does; on service workers, none (refused)."""
    with_tfio = decode_lib.Decoder(tfio_formats={"tiff"})
    without = decode_lib.Decoder(tfio_unusable="tensorflow-io cannot load here")
    service = decode_lib.Decoder(tfio_unusable="x", fallback=False)
    for name, (data, _, _) in VARIANTS.items():
        assert with_tfio.takes_fallback(data[:4096]) == (name not in IN_GRAPH), name
        assert without.takes_fallback(data[:4096]), name
        assert not service.takes_fallback(data[:4096])
    assert "tiff" in without.fallback_extensions() and "tiff" not in with_tfio.fallback_extensions()
    assert without.fallback_note(["a.tif", "b.jpg", "c.tiff"]).startswith(
        "pipeline: 2 file(s) decoded by the Pillow fallback")


@pytest.mark.parametrize("tfio", [False, True])
def test_service_workers_refuse_what_needs_the_fallback(tfio):
    """No Python on tf.data service workers: a TIFF that needs Pillow is a bad file whose
    reason says so (the decoder is built here without tensorflow-io's ops being run)."""
    name = "rgb16"
    dec = decode_lib.Decoder(fallback=False, **({"tfio_formats": {"tiff"}} if tfio else
                                                {"tfio_unusable": "cannot load here"}))
    if tfio and not pipeline.stack.tfio_status().available:
        pytest.skip("the tensorflow-io graph needs its ops: " + pipeline.stack.tfio_status().reason)
    img, reason = tf.function(dec.decode)(tf.constant(VARIANTS[name][0]))
    assert "cannot run on tf.data service workers" in reason.numpy().decode(), reason
    assert img.shape == (1, 1, 3)


def test_max_pixels_guards_tiff_on_every_stack(tmp_path):
    """The TIFF header's size (IFD0) is checked before any decode, with or without
    tensorflow-io."""
    _, paths = _folder(tmp_path, ["rgb16", "rgb8"])
    ds = pipeline.from_paths(paths, image_size=None, batch_size=None, shuffle=False,
                             max_pixels=H * W - 1, on_error="skip")
    assert drain(ds) == []
    reasons = sorted(e.reason for e in pipeline.errors(ds))
    assert reasons == [f"header claims {W}x{H} pixels > max_pixels={H * W - 1}"] * 2


def test_scan_counts_the_fallback_and_its_cost(tmp_path):
    root, _ = _folder(tmp_path, ["rgb16", "float32", "cmyk", "rgb8"])
    report = pipeline.scan(root, progress=False)
    assert report.num_ok == 4
    tfio_ok = pipeline.stack.tfio_status().available
    want = 3 if tfio_ok else 4  # rgb8 is decoded in graph where tensorflow-io loads
    assert report.fallback_files == want
    assert sum(n for k, n in report.per_variant.items() if k.endswith("(Pillow fallback)")) == want
    assert report.fallback_ms_per_file is not None and report.fallback_ms_per_file > 0
    assert f"slow path: {want} file(s) decoded by the Pillow fallback" in report.table()
    assert report.to_dict()["fallback_files"] == want


def test_fallback_logged_once_per_kind(tmp_path, caplog):
    from absl import logging as absl_logging
    _, paths = _folder(tmp_path, ["rgb16", "float32", "cmyk"])
    ds = pipeline.from_paths(paths, image_size=None, batch_size=None, shuffle=False)
    import logging
    with caplog.at_level(logging.WARNING):
        absl_logging.use_python_logging()
        drain(ds)
        drain(ds)
    lines = [r.getMessage() for r in caplog.records if "decoded by the Pillow fallback" in
             r.getMessage() and "slow path" in r.getMessage() and "file(s) are" in r.getMessage()]
    assert len(lines) == 1 and "TIFF little-endian" in lines[0], lines


@pytest.mark.skipif(not AVIF_OK, reason="Pillow here has no AVIF support (Pillow >= 11.3 "
                    "wheels carry libavif; else pip install pillow-avif-plugin)")
@pytest.mark.parametrize("channels", [3, 1, 4])
def test_avif_gives_pillows_pixels_on_every_stack(tmp_path, channels):
    root = tmp_path / "data" / "a"
    root.mkdir(parents=True)
    Image.fromarray(U8[..., :3]).save(root / "rgb.avif", quality=90)
    Image.fromarray(U8).save(root / "rgba.avif", quality=90)
    want = {}
    for n in ("rgb", "rgba"):
        with Image.open(root / f"{n}.avif") as im:
            im.load()
            arr = np.asarray(im.convert("RGBA" if n == "rgba" else "RGB"))
        rgb = arr[..., :3]
        want[n + ".avif"] = {3: rgb, 1: tf.image.rgb_to_grayscale(rgb).numpy(),
                             4: arr if n == "rgba" else np.concatenate(
                                 [rgb, np.full((H, W, 1), 255, np.uint8)], -1)}[channels]
    kw = dict(image_size=None, batch_size=None, shuffle=False, include_paths=True,
              channels=channels)
    for ds in (pipeline.from_directory(str(tmp_path / "data"), **kw),
               pipeline.from_paths(sorted(str(p) for p in root.iterdir()), **kw)):
        got = {os.path.basename(x[-1].decode()): x[0] for x in drain(ds)}
        assert sorted(got) == sorted(want)
        for k in got:
            assert np.array_equal(got[k], want[k]), k
