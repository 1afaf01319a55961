"""The JPEG-only decode graph (issue #13): a dataset whose files are all named as JPEGs
holds the JPEG decoder alone; other content met there is decoded by the same decoder run
from Python, giving the full graph's pixels and reasons, and is logged."""

import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from pipeline.decode import image as decode_lib
from pipeline.decode import formats

# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack


def _graph_ops(ds):
    """(op type, node name) of every node of a dataset's graph, functions included."""
    g = tf.compat.v1.GraphDef()
    g.ParseFromString(ds._as_serialized_graph(  # pylint: disable=protected-access
        external_state_policy=tf.data.experimental.ExternalStatePolicy.IGNORE).numpy())
    nodes = list(g.node) + [n for f in g.library.function for n in f.node_def]
    return {(n.op, n.name) for n in nodes}


def _photo(path, seed, size=(40, 30)):
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, (size[1], size[0], 3), np.uint8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(arr).save(path, quality=90)
    return path


def _disguised(folder):
    """Files of other formats named .jpg (each decoded by a different branch), plus JPEGs."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(5)
    paths = [_photo(os.path.join(folder, "a_photo.jpg"), 1)]
    gray16 = (rng.integers(0, 65536, (9, 7))).astype(np.uint16)
    Image.fromarray(gray16).save(os.path.join(folder, "b_gray16.jpg"), format="PNG")
    pal = Image.fromarray(rng.integers(0, 256, (8, 6, 3), np.uint8)).convert("P")
    pal.save(os.path.join(folder, "c_palette.jpg"), format="PNG", transparency=3)
    rgba = Image.fromarray(rng.integers(0, 256, (5, 11, 4), np.uint8), "RGBA")
    rgba.save(os.path.join(folder, "d_rgba.jpg"), format="PNG")
    frames = [Image.fromarray(rng.integers(0, 256, (6, 6, 3), np.uint8)).convert("P")
              for _ in range(2)]
    frames[0].save(os.path.join(folder, "e_anim.jpg"), format="GIF", save_all=True,
                   append_images=frames[1:])
    Image.fromarray(rng.integers(0, 256, (7, 5, 3), np.uint8)).save(
        os.path.join(folder, "f_plain.jpg"), format="BMP")
    pal.convert("RGB").convert("P").save(os.path.join(folder, "g_pal8.jpg"), format="BMP")
    with open(os.path.join(folder, "h_text.jpg"), "wb") as f:
        f.write(b"hello, this is not an image at all")
    with open(os.path.join(folder, "i_png_cut.jpg"), "wb") as f:
        with open(os.path.join(folder, "d_rgba.jpg"), "rb") as src:
            f.write(src.read()[:-30])  # no IEND: the decoder raises
    paths.append(_photo(os.path.join(folder, "z_photo.jpg"), 2))
    return sorted(os.path.join(folder, p) for p in os.listdir(folder))


def _elements(paths, **kw):
    ds = pipeline.from_paths(paths, shuffle=False, on_error="skip", include_paths=True,
                             batch_size=None, **kw)
    out = {p.decode(): img for img, p in ds.as_numpy_iterator()}
    return out, sorted(tuple(e) for e in pipeline.errors(ds)), ds


def test_all_jpeg_named():
    assert formats.all_jpeg_named(["a.jpg", "b.JPEG", "c.jpe", "d.JFIF"])
    assert not formats.all_jpeg_named(["a.jpg", "b.png"])
    assert not formats.all_jpeg_named([])


def test_a_jpeg_only_graph_holds_no_other_decoder(tmp_path):
    jpegs = [_photo(str(tmp_path / "j" / f"{k}.jpg"), k) for k in range(3)]
    ds = pipeline.from_paths(jpegs, image_size=(16, 16), batch_size=2)
    ops = {op for op, _ in _graph_ops(ds)}
    assert "DecodeJpeg" in ops
    assert not ops & {"DecodePng", "DecodeGif", "DecodeBmp"}
    assert any(decode_lib.OTHERS_OP_NAME in name for op, name in _graph_ops(ds)
               if op == "EagerPyFunc")
    png = _photo(str(tmp_path / "j" / "x.png"), 9)
    full = {op for op, _ in _graph_ops(pipeline.from_paths(jpegs + [png], image_size=(16, 16)))}
    assert {"DecodePng", "DecodeGif", "DecodeBmp"} <= full
    # The tf.data service's workers cannot run Python: they get the full graph.
    assert decode_lib.Decoder(fallback=False, others_in_graph=False).others_in_graph
    assert decode_lib.Decoder().takes_fallback(b"\x89PNG\r\n\x1a\n" + bytes(56)) is False
    assert decode_lib.Decoder(others_in_graph=False).takes_fallback(
        b"\x89PNG\r\n\x1a\n" + bytes(56))
    assert not decode_lib.Decoder(others_in_graph=False).takes_fallback(
        open(jpegs[0], "rb").read(64))


@pytest.mark.parametrize("kw", [
    dict(image_size=None),
    pytest.param(dict(image_size=None, channels=4), marks=pytest.mark.sweep),
    pytest.param(dict(image_size=(12, 10), channels=1), marks=pytest.mark.sweep),
    pytest.param(dict(image_size=(8, 8), resize="center_crop"), marks=pytest.mark.sweep),
    dict(image_size=(8, 8), augment=pipeline.Augment(random_resized_crop=True,
                                                      horizontal_flip=True), seed=4),
])
def test_other_content_named_jpeg_gives_the_full_graph_pixels(tmp_path, kw, caplog):
    paths = _disguised(str(tmp_path / "d"))
    other = str(tmp_path / "o" / "other.png")  # a .png name: the full graph
    os.makedirs(os.path.dirname(other))
    shutil.copy(paths[1], other)
    with caplog.at_level(logging.WARNING):
        lean, lean_errors, ds = _elements(paths, **kw)
    assert not {op for op, _ in _graph_ops(ds)} & {"DecodePng", "DecodeGif", "DecodeBmp"}
    full, full_errors, ds = _elements(paths + [other], **kw)
    assert "DecodePng" in {op for op, _ in _graph_ops(ds)}
    full.pop(other)
    assert sorted(lean) == sorted(full) and len(lean) == len(paths) - 2
    for p in lean:
        np.testing.assert_array_equal(lean[p], full[p], err_msg=p)
    assert lean_errors == full_errors
    assert [os.path.basename(p) for p, _ in lean_errors] == ["h_text.jpg", "i_png_cut.jpg"]
    assert lean_errors[0][1] == "not an image (first bytes 68 65 6c 6c 6f 2c 20 74 |hello, t|)"
    assert lean_errors[1][1].startswith("truncated PNG")
    # the slow path is never silent: one line per kind met
    assert "PNG 16-bit gray file(s) met in a dataset whose files are all named as JPEGs" \
        in caplog.text
    assert "GIF 89a file(s) met" in caplog.text or "GIF 87a file(s) met" in caplog.text
