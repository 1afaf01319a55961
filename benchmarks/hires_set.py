"""High-resolution benchmark sets made of real photos: mosaics at 4000x3000 and 1600x1200.

Phone and camera photos are 12 MP; the 1,000-photo sample is about 500x375. This script
makes class-folder sets of JPEGs from the sample's photos so that the benchmarks can
measure the large sizes too (``python -m pipeline bench --data_dir=OUT/4000x3000``):

  OUT/sample/       the sample at its own size (symbolic links to the photos, not copies)
  OUT/1600x1200/    mosaics of 4x4 photos, each photo fitted to its 400x300 tile
  OUT/4000x3000/    mosaics of 8x8 photos, each fitted to its 500x375 tile
  OUT/hires_set.json  what was made (sizes, counts, JPEG quality, source folder)

Each tile is a whole photo resized to cover its tile (Pillow LANCZOS, the centred window
kept), so the mosaics hold real photo content at every scale; mosaic ``i`` of a size takes
its tiles from the photos ``i * tiles, i * tiles + 1, ...`` of the sorted source list
(cyclically), and goes to class folder ``class_{i % num_classes}``. Saved with Pillow at
``--quality`` (default 90), 4:2:0 chroma subsampling, no EXIF. The same flags always
give the same files. The images are never committed: the default OUT is ``out/hires``
in the repository, which git ignores.

The quality measure of the benchmarks (``pipeline.transform.quality``): PSNR per image against an
antialiased resize of the full decode, as median and 5th percentile.

    python benchmarks/hires_set.py                       # out/hires, 128 mosaics a size
    python benchmarks/hires_set.py --out_dir=/data/hires --num_mosaics=200
    python -m pipeline bench --data_dir=out/hires/1600x1200 --compare=keras,plain
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
from typing import List, Sequence, Tuple

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir
from pipeline import checks
from pipeline.tools import sample

REPO = common_flags.REPO
DEFAULT_OUT = os.path.join(REPO, "out", "hires")
# (width, height) of a mosaic -> (columns, rows) of photos in it
GRIDS = {(4000, 3000): (8, 8), (1600, 1200): (4, 4)}
FORMAT = "pipeline.hires_set/1"
EXTENSIONS = (".jpg", ".jpeg", ".png")

common_flags.define(data_dir="Class-folder photo root (the mosaics' photos).")
flags.DEFINE_string("out_dir", DEFAULT_OUT, "Folder the sets are written to (created).")
flags.DEFINE_list("sizes", ["4000x3000", "1600x1200"], "Mosaic sizes, WIDTHxHEIGHT; a size "
                  "not in the built-in grids gets 4x4 photos.")
flags.DEFINE_integer("num_mosaics", 128, "Mosaics per size.")
flags.DEFINE_integer("num_classes", 10, "Class folders per size.")
flags.DEFINE_integer("quality", 90, "JPEG quality of the mosaics (1-100).")
flags.DEFINE_bool("link_sample", True, "Also link the source photos into OUT/sample.")


def photo_paths(data_dir: str) -> List[str]:
    """The image files under ``data_dir`` (recursively), sorted.

    Raises:
        ValueError: none found.
    """
    found = sorted(os.path.join(d, f) for d, _, fs in os.walk(data_dir) for f in fs
                   if f.lower().endswith(EXTENSIONS))
    if not found:
        raise ValueError(f"no images under data_dir. Received: data_dir={data_dir!r}")
    return found


def parse_size(text: str) -> Tuple[int, int]:
    """``"4000x3000"`` -> (4000, 3000) (width, height).

    Raises:
        ValueError: not two positive integers joined by "x".
    """
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        w = h = 0
    if w < 1 or h < 1:
        raise ValueError(f"a size is WIDTHxHEIGHT, e.g. 4000x3000. Received: size={text!r}")
    return w, h


def fit_tile(path: str, width: int, height: int):
    """The photo at ``path``, upright, resized (LANCZOS) to cover ``width`` x ``height``
    and cropped to its centred window: a PIL RGB image of exactly that size."""
    from PIL import Image, ImageOps
    with Image.open(path) as im:
        im = ImageOps.exif_transpose(im).convert("RGB")
        return ImageOps.fit(im, (width, height), Image.LANCZOS)


def make_mosaic(photos: Sequence[str], index: int, size: Tuple[int, int],
                grid: Tuple[int, int]):
    """Mosaic ``index`` of ``size`` (width, height): ``grid`` (columns, rows) tiles, tile
    ``t`` being ``photos[(index * tiles + t) % len(photos)]``; a PIL RGB image. Tiles of
    the last column and row take up the remainder when the size does not divide."""
    from PIL import Image
    (w, h), (cols, rows) = size, grid
    canvas = Image.new("RGB", (w, h))
    tiles = cols * rows
    xs = [w * c // cols for c in range(cols + 1)]
    ys = [h * r // rows for r in range(rows + 1)]
    for t in range(tiles):
        r, c = divmod(t, cols)
        tile = fit_tile(photos[(index * tiles + t) % len(photos)], xs[c + 1] - xs[c],
                        ys[r + 1] - ys[r])
        canvas.paste(tile, (xs[c], ys[r]))
    return canvas


def write_set(photos: Sequence[str], out_dir: str, size: Tuple[int, int], num_mosaics: int,
              num_classes: int = 10, quality: int = 90, workers: int = 0) -> List[str]:
    """Writes ``num_mosaics`` mosaics of ``size`` to ``out_dir/class_*/mosaic_*.jpg``
    (a file already there is kept: the same flags make the same file). Returns the paths."""
    grid = GRIDS.get(tuple(size), (4, 4))
    paths = [os.path.join(out_dir, f"class_{i % num_classes:03d}", f"mosaic_{i:05d}.jpg")
             for i in range(num_mosaics)]

    def one(i):
        path = paths[i]
        if os.path.exists(path):
            return path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".part"
        make_mosaic(photos, i, size, grid).save(tmp, format="JPEG", quality=quality,
                                                subsampling=2)
        os.replace(tmp, path)
        return path

    with concurrent.futures.ThreadPoolExecutor(workers or checks.cpu_count()) as pool:
        return list(pool.map(one, range(num_mosaics)))


def link_sample(data_dir: str, out_dir: str) -> int:
    """Links every photo of ``data_dir`` into ``out_dir`` at the same relative path
    (the sample at its own size); returns the number of links."""
    n = 0
    for p in photo_paths(data_dir):
        dst = os.path.join(out_dir, os.path.relpath(p, data_dir))
        if not os.path.lexists(dst):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.symlink(os.path.abspath(p), dst)
        n += 1
    return n


def make(data_dir: str, out_dir: str, sizes: Sequence[Tuple[int, int]], num_mosaics: int,
         num_classes: int = 10, quality: int = 90, with_sample: bool = True) -> dict:
    """Writes the sets and ``out_dir/hires_set.json``; returns what that file holds.

    Raises:
        ValueError: a bad argument (named, with the value), or ``out_dir`` holds a
            ``hires_set.json`` made with other settings (mixing two sets).
    """
    num_mosaics = checks.check_int("num_mosaics", num_mosaics)
    num_classes = checks.check_int("num_classes", num_classes)
    quality = checks.check_int("quality", quality)
    if quality > 100:
        raise ValueError(f"`quality` must be in [1, 100]. {checks.received('quality', quality)}")
    photos = photo_paths(data_dir)
    meta = {"format": FORMAT, "source_dir": sample.data_dir_label(data_dir),
            "source_photos": len(photos), "quality": quality, "num_classes": num_classes,
            "sets": {}}
    side = os.path.join(out_dir, "hires_set.json")
    old = {}
    if os.path.exists(side):
        with open(side) as f:
            old = json.load(f)
        for k in ("quality", "num_classes", "source_photos"):
            if old.get(k) != meta[k]:
                raise ValueError(f"out_dir holds a set made with {k}={old.get(k)!r}; use "
                                 f"another folder. Received: {k}={meta[k]!r}, "
                                 f"out_dir={out_dir!r}")
    os.makedirs(out_dir, exist_ok=True)
    meta["sets"] = dict(old.get("sets", {}))
    for w, h in sizes:
        name = f"{w}x{h}"
        files = write_set(photos, os.path.join(out_dir, name), (w, h), num_mosaics,
                          num_classes, quality)
        cols, rows = GRIDS.get((w, h), (4, 4))
        meta["sets"][name] = {"folder": name, "width": w, "height": h, "images": len(files),
                              "grid": [cols, rows], "photos_per_image": cols * rows,
                              "bytes": sum(os.path.getsize(p) for p in files)}
    if with_sample:
        n = link_sample(data_dir, os.path.join(out_dir, "sample"))
        meta["sets"]["sample"] = {"folder": "sample", "images": n, "links": True}
    with open(side, "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def main(argv):
    del argv
    try:
        sizes = [parse_size(s) for s in FLAGS.sizes]
        meta = make(_data_dir(FLAGS.data_dir), FLAGS.out_dir, sizes, FLAGS.num_mosaics,
                    FLAGS.num_classes, FLAGS.quality, FLAGS.link_sample)
    except ValueError as e:
        raise app.UsageError(str(e))
    for name, s in meta["sets"].items():
        extra = (f", {s['bytes'] / 2 ** 20:.0f} MiB, {s['photos_per_image']} photos each"
                 if "bytes" in s else " (links to the source photos)")
        print(f"{os.path.join(FLAGS.out_dir, s['folder'])}: {s['images']} images{extra}")
    print(f"wrote {os.path.join(FLAGS.out_dir, 'hires_set.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(app.run(main))
