"""GIF: the displayed first frame, as Pillow gives it.

The logical screen size (not the frame's), the frame's offset, a local colour
table, a transparent index (channels=4: alpha 0 and the stored palette
colour; channels=3: the stored colour), interlacing, animation with
disposal. Files are made with Pillow (some bytes moved by hand for layouts
Pillow does not write); pixels must equal Pillow's ``convert`` of frame 0
exactly, for channels 1, 3 and 4, and ``scan`` must report each file as
good with its screen size.
"""

import io
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from pipeline.decode import image as decode
from pipeline.tools import report as report_lib

# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack


def _pal_image(w, h, seed, n=16):
    rng = np.random.default_rng(seed)
    im = Image.fromarray(rng.integers(0, n, (h, w), dtype=np.uint8), "P")
    im.putpalette([int(v) for v in rng.integers(0, 256, 3 * 256)])
    return im


def _save(im, **kw):
    buf = io.BytesIO()
    im.save(buf, "GIF", **kw)
    return buf.getvalue()


def _table_size(flags):
    return 3 * 2 ** ((flags & 7) + 1) if flags & 0x80 else 0


def _descriptor(data):
    """Byte offset of the first image descriptor (0x2C)."""
    pos = 13 + _table_size(data[10])
    while data[pos] != 0x2C:
        assert data[pos] == 0x21
        pos += 2
        while data[pos]:
            pos += 1 + data[pos]
        pos += 1
    return pos


def _offset_frame(screen=(40, 30)):
    """A 16x10 first frame placed at (12, 8) on a 40x30 logical screen."""
    data = bytearray(_save(_pal_image(16, 10, 1)))
    data[6:10] = screen[0].to_bytes(2, "little") + screen[1].to_bytes(2, "little")
    d = _descriptor(data)
    data[d + 1:d + 5] = (12).to_bytes(2, "little") + (8).to_bytes(2, "little")
    return bytes(data)


def _offset_transparent_background():
    """As ``_offset_frame``, with a transparent index and a background index."""
    data = bytearray(_save(_pal_image(16, 10, 2), transparency=5, background=7))
    data[6:10] = (30).to_bytes(2, "little") + (20).to_bytes(2, "little")
    d = _descriptor(data)
    data[d + 1:d + 5] = (3).to_bytes(2, "little") + (4).to_bytes(2, "little")
    return bytes(data)


def _local_palette():
    """The first frame's colours in a local colour table (no global table)."""
    data = _save(_pal_image(12, 9, 3))
    flags = data[10]
    assert flags & 0x80
    n = _table_size(flags)
    table = data[13:13 + n]
    rest = bytes([flags & 0x7F]) + data[11:13] + data[13 + n:]
    data = data[:10] + rest
    d = _descriptor(data)
    return (data[:d + 9] + bytes([data[d + 9] | 0x80 | (flags & 7)]) + table
            + data[d + 10:])


def _animated():
    f1 = _pal_image(20, 14, 4)
    a = np.asarray(f1).copy()
    a[3:6, 4:9] = 5
    f2 = Image.fromarray(a, "P")
    f2.putpalette(f1.getpalette())
    buf = io.BytesIO()
    f1.save(buf, "GIF", save_all=True, append_images=[f2], disposal=2, duration=50)
    return buf.getvalue()


FILES = {
    "transparent_index": lambda: _save(_pal_image(12, 8, 5), transparency=3),
    "transparent_index_0": lambda: _save(_pal_image(7, 11, 6), transparency=0),
    "offset_frame_on_bigger_screen": _offset_frame,
    "offset_transparent_background": _offset_transparent_background,
    "local_palette": _local_palette,
    "interlaced": lambda: _save(_pal_image(13, 21, 7), interlace=True),
    "animated_with_disposal": _animated,
    "plain": lambda: _save(_pal_image(9, 6, 8)),
}


def _pillow(data, channels):
    with Image.open(io.BytesIO(data)) as im:
        im.seek(0)
        out = im.convert({1: "L", 3: "RGB", 4: "RGBA"}[channels])
        arr = np.asarray(out)
    return arr.reshape(arr.shape[0], arr.shape[1], channels)


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("name", sorted(FILES))
def test_first_frame_equals_pillow(name, channels):
    data = FILES[name]()
    want = _pillow(data, channels)
    img, reason = decode.Decoder(channels).decode(tf.constant(data))
    assert reason.numpy() == b""
    if channels == 1:
        # gray: the package's ITU-R 601 luma (tf.image.rgb_to_grayscale) rounds
        # differently from Pillow's "L" on some colours: within one level
        assert img.shape == want.shape
        assert np.abs(img.numpy().astype(int) - want).max() <= 1
    else:
        np.testing.assert_array_equal(img.numpy(), want)


def test_transparent_pixels_keep_their_stored_colour():
    """channels=4: alpha 0 where the transparent index is; channels=3: the palette
    colour stored at that index (not black)."""
    im = _pal_image(12, 8, 5)
    data = _save(im, transparency=3)
    idx = np.asarray(im)
    assert (idx == 3).any()
    rgba, _ = decode.Decoder(4).decode(tf.constant(data))
    rgba = rgba.numpy()
    assert (rgba[..., 3][idx == 3] == 0).all() and (rgba[..., 3][idx != 3] == 255).all()
    stored = np.array(Image.open(io.BytesIO(data)).getpalette()[9:12])
    rgb, _ = decode.Decoder(3).decode(tf.constant(data))
    assert (rgb.numpy()[idx == 3] == stored).all()


def test_logical_screen_size_through_the_pipeline_and_scan(tmp_path):
    data = _offset_frame(screen=(150, 100))  # the frame's larger side, 16, is another bin
    root = tmp_path / "gifs" / "a"
    os.makedirs(root)
    path = str(root / "offset.gif")
    with open(path, "wb") as f:
        f.write(data)
    ds = pipeline.from_paths([path], image_size=None, batch_size=None, shuffle=False,
                             channels=3)
    np.testing.assert_array_equal(next(iter(ds)).numpy(), _pillow(data, 3))
    report = pipeline.scan(str(tmp_path / "gifs"))
    assert report.num_ok == 1 and not report.bad_files, report.bad_files
    # the larger side is the screen's 150, not the frame's 16
    assert report.max_side_histogram == {report_lib._bucket_label_side(150): 1}, \
        report.max_side_histogram
    assert any("fallback" in k.lower() or "*" in k for k in report.per_variant), \
        report.per_variant


def test_graph_and_python_routing_agree():
    """``gif_plain`` (graph) and ``Decoder.takes_fallback`` (scan's report) agree."""
    fn = tf.function(decode.gif_plain, autograph=False)
    dec = decode.Decoder(3)
    for name, make in sorted(FILES.items()):
        data = make()
        plain = bool(fn(tf.constant(data)))
        assert plain == (name in ("plain", "interlaced", "local_palette",
                                  "animated_with_disposal")), name
        assert dec.takes_fallback(data[:4096]) == (not plain), name
