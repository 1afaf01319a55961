"""Each per-file header check still fires in a folder of 10,000 files (issue #13).

Indexing only lists folders now; the checks moved: the ``max_pixels`` header
guard and the EXIF orientation run in graph while the images decode
(``pipeline.decode.image``), and a truncated TIFF is refused at index time by its
strip extents (``pipeline.sources.index.check_tiffs``, the one file type still opened
there). This test puts one file of each kind among 10,000 hard links of four
tiny PNGs and checks that each is caught (or applied) and that every other
file arrives exactly once.
"""

import os
import struct
import zlib

import numpy as np
from PIL import Image

import pipeline
from io_helpers import png_claiming
import pytest

# Image decoders: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

N_LINKS = 10_000
CLASSES = 10




def _tree(root):
    """10,000 hard links + bomb.png + rotated.jpg + cut.tiff. Returns (good paths, specials)."""
    src = root / "src"
    src.mkdir()
    sources = []
    for v in range(4):
        p = src / f"s{v}.png"
        Image.fromarray(np.full((6, 5, 3), 40 * v + 20, np.uint8)).save(p)
        sources.append(str(p))
    tree = root / "tree"
    names = [f"c{c:02d}" for c in range(CLASSES)]
    for n in names:
        (tree / n).mkdir(parents=True)
    good = []
    for i in range(N_LINKS):
        dst = str(tree / names[i % CLASSES] / f"img_{i:05d}.png")
        os.link(sources[i % 4], dst)
        good.append(dst)
    bomb = tree / "c03" / "bomb.png"
    bomb.write_bytes(png_claiming(60000, 60000))
    # EXIF orientation 6 (rotate 90 degrees clockwise to display): stored 32 wide x 16
    # tall, left half black, right half white -> displayed 16 x 32, top black, bottom white.
    stored = np.zeros((16, 32, 3), np.uint8)
    stored[:, 16:] = 255
    exif = Image.Exif()
    exif[0x0112] = 6
    rotated = tree / "c05" / "rotated.jpg"
    Image.fromarray(stored).save(rotated, quality=95, exif=exif.tobytes())
    rng = np.random.RandomState(0)
    whole = root / "whole.tiff"
    Image.fromarray(rng.randint(0, 255, (40, 48, 3), np.uint8)).save(whole)
    data = whole.read_bytes()
    cut = tree / "c07" / "cut.tiff"
    cut.write_bytes(data[:len(data) // 2])
    return str(tree), good, {"bomb": str(bomb), "rotated": str(rotated), "cut": str(cut)}


def test_header_checks_fire_among_10000_files(tmp_path):
    tree, good, special = _tree(tmp_path)
    ds = pipeline.from_directory(tree, image_size=(8, 8), batch_size=2048, seed=0,
                                 on_error="skip", include_paths=True)
    assert len(ds.file_paths) == N_LINKS + 3
    seen, rotated = [], None
    for images, labels, paths in ds:
        paths = [p.decode() for p in paths.numpy()]
        images = images.numpy()
        labels = labels.numpy()
        for k, p in enumerate(paths):
            assert ds.class_names[labels[k]] == os.path.basename(os.path.dirname(p))
            if p == special["rotated"]:
                rotated = images[k].astype(int)
        seen.extend(paths)
    # every good file exactly once, plus the rotated JPEG; the bomb and the cut TIFF not
    assert len(seen) == len(set(seen)) == N_LINKS + 1
    assert set(seen) == set(good) | {special["rotated"]}
    # EXIF orientation 6 applied: the stored left (black) half is now on top
    assert rotated is not None
    top, bottom = rotated[:4].mean(), rotated[4:].mean()
    left, right = rotated[:, :4].mean(), rotated[:, 4:].mean()
    assert top < 30 and bottom > 225 and abs(left - right) < 30, rotated[..., 0]
    reasons = {r.path: r.reason for r in pipeline.errors(ds)}
    assert set(reasons) == {special["bomb"], special["cut"]}, reasons
    assert "max_pixels" in reasons[special["bomb"]]
    assert "60000" in reasons[special["bomb"]]
    assert "truncated TIFF" in reasons[special["cut"]]


def test_header_checks_raise_at_scale(tmp_path):
    """on_error="raise" (default) names the bomb while iterating, not at index time."""
    tree, _, special = _tree(tmp_path)
    os.remove(special["cut"])
    ds = pipeline.from_directory(tree, image_size=(8, 8), batch_size=2048, shuffle=False)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    try:
        for _ in ds:
            pass
    except tf.errors.InvalidArgumentError as e:
        assert "bomb.png" in str(e) and "max_pixels" in str(e)
    else:
        raise AssertionError("the bomb was not refused")
