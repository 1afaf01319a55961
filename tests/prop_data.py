"""Image files for the property tests: tiny pictures whose pixels say which file they are.

Every file ``id`` (0..59, in index order: class folders sorted, files sorted within) is a
flat colour whose luma is ``14 + 4 * id`` and whose tint says its class:

    colour(id) = (Y, Y, Y) + TINT[label],  Y = 14 + 4 * id,
    TINT = {0: (6, -2, -5), 1: (0, 0, 0), 2: (-6, 2, 5)}   (luma-neutral tints)

so the id (and the label) can be read back from any output, whatever the resize mode,
size, channel count (gray = ITU-R 601 luma, 4 levels apart between ids) or flip. Flat
colours survive bilinear resizing, cropping and padding exactly (the pad is black, and
no colour here is darker than 9), and libjpeg decodes flat JPEG colours exactly too.

About a fifth of the files (PNGs) are *marked*: their left quarter of columns is black,
so that a horizontal flip is visible. The id is read from the per-channel maximum of the
non-black pixels: resampling only blends the colour towards black, never past it. Formats: RGB PNG, gray PNG (class b only, where the tint is zero), RGBA PNG
(alpha 255), JPEG, JPEG with an EXIF block (orientation 1) and a JPEG with EXIF
orientation 6 (rotated 90 degrees). Two files have extreme aspect ratios (2x60, 60x2).

Only the public API of ``pipeline`` is used (``write_tfrecords``).
"""

from __future__ import annotations

import csv
import io
import math
import os
import shutil
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
from PIL import Image

CLASSES = ("a", "b", "c")
COUNTS = (17, 23, 20)  # uneven; 60 files
N = sum(COUNTS)
TINT = {0: (6, -2, -5), 1: (0, 0, 0), 2: (-6, 2, 5)}
LUMA = np.array([0.299, 0.587, 0.114])
# (width, height) cycle; extremes are placed explicitly below.
SIZES = [(8, 8), (12, 10), (16, 9), (9, 16), (40, 24), (24, 40), (10, 30), (13, 7),
         (30, 10), (11, 11), (20, 8), (8, 20)]
TALL_ID = 30   # class b: 2 wide, 60 high
WIDE_ID = 50   # class c: 60 wide, 2 high
EXIF1_ID = 7   # JPEG, EXIF orientation 1 (class a)
EXIF6_ID = 44  # JPEG, EXIF orientation 6 (class c): stored 24x12, shown 12x24
BAD_NAME = "zz_truncated.png"  # in class b of the "bad" tree


def label_of(i: int) -> int:
    edges = np.cumsum(COUNTS)
    return int(np.searchsorted(edges, i, side="right"))


def colour(i: int) -> np.ndarray:
    y = 14 + 4 * i
    return np.array([y + d for d in TINT[label_of(i)]], np.int64)


def expected_table(channels: int) -> np.ndarray:
    """[N, channels] the value every content pixel of file ``id`` has."""
    rgb = np.stack([colour(i) for i in range(N)]).astype(np.float64)
    if channels == 1:
        return (rgb @ LUMA)[:, None]
    if channels == 3:
        return rgb
    return np.concatenate([rgb, np.full((N, 1), 255.0)], axis=1)


@dataclass
class FileInfo:
    id: int
    label: int
    path: str
    fmt: str
    size: Tuple[int, int]  # (width, height) as shown (after EXIF orientation)
    marked: bool


@dataclass
class Corpus:
    base: str
    clean: str                       # class-folder tree with the 60 good files
    bad: str                         # the same plus one truncated PNG in class b
    bad_path: str
    files: List[FileInfo]
    manifest_clean: str
    manifest_bad: str
    manifest_ids: List[int]
    shards: Dict[Tuple[str, int], str] = field(default_factory=dict)  # (tree, k) -> dir

    def paths(self, tree: str) -> List[str]:
        root = self.clean if tree == "clean" else self.bad
        out = [os.path.join(root, CLASSES[f.label], os.path.basename(f.path)) for f in self.files]
        if tree == "bad":
            out.append(self.bad_path)
            out.sort()
        return out

    def id_of_path(self, path: str) -> Optional[int]:
        name = os.path.basename(path)
        if name == BAD_NAME:
            return None
        return int(name.split(".")[0])


def _exif(orientation: int) -> bytes:
    ex = Image.Exif()
    ex[0x0112] = orientation
    return ex.tobytes()


def _image(i: int, w: int, h: int, marked: bool) -> np.ndarray:
    arr = np.empty((h, w, 3), np.uint8)
    arr[...] = colour(i).astype(np.uint8)
    if marked:
        arr[:, : w // 4] = 0
    return arr


def write_file(folder: str, i: int) -> FileInfo:
    label = label_of(i)
    if i == TALL_ID:
        w, h = 2, 60
    elif i == WIDE_ID:
        w, h = 60, 2
    elif i == EXIF6_ID:
        w, h = 12, 24  # shown size; stored rotated
    else:
        w, h = SIZES[i % len(SIZES)]
    jpeg = i in (EXIF1_ID, EXIF6_ID) or (i % 5 == 2)
    special = i in (TALL_ID, WIDE_ID, EXIF1_ID, EXIF6_ID)
    # JPEG rings at the mark's edge: only PNGs are marked
    marked = (i % 4 == 1) and w >= 8 and not special and not jpeg
    arr = _image(i, w, h, marked)
    os.makedirs(os.path.join(folder, CLASSES[label]), exist_ok=True)
    if jpeg:
        fmt = "jpeg"
        path = os.path.join(folder, CLASSES[label], f"{i:03d}.jpg")
        img = Image.fromarray(arr)
        kw = {}
        if i == EXIF1_ID:
            kw["exif"] = _exif(1)
        elif i == EXIF6_ID:
            # orientation 6: the viewer turns the stored picture 90 degrees clockwise,
            # so store it turned 90 degrees counter-clockwise.
            img = img.transpose(Image.Transpose.ROTATE_90)
            kw["exif"] = _exif(6)
        img.save(path, "JPEG", quality=95, **kw)
    elif label == 1 and i % 7 == 3:
        fmt = "png-gray"
        path = os.path.join(folder, CLASSES[label], f"{i:03d}.png")
        Image.fromarray(arr[..., 0], "L").save(path)
    elif i % 11 == 4:
        fmt = "png-rgba"
        path = os.path.join(folder, CLASSES[label], f"{i:03d}.png")
        rgba = np.dstack([arr, np.full(arr.shape[:2], 255, np.uint8)])
        Image.fromarray(rgba, "RGBA").save(path)
    else:
        fmt = "png"
        path = os.path.join(folder, CLASSES[label], f"{i:03d}.png")
        Image.fromarray(arr).save(path)
    return FileInfo(i, label, path, fmt, (w, h), marked)


def truncated_png(path: str) -> str:
    rng = np.random.RandomState(0)
    arr = rng.randint(0, 255, (16, 16, 3)).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    data = buf.getvalue()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    return path


def _write_manifest(path: str, base: str, rows: List[Tuple[str, str]]) -> None:
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["path", "label"])
        for p, cls in rows:
            wr.writerow([os.path.relpath(p, base), cls])


def make_corpus(base: str, shards=(1, 2, 3)) -> Corpus:
    import pipeline  # the public API only

    clean = os.path.join(base, "clean")
    files = [write_file(clean, i) for i in range(N)]
    bad = os.path.join(base, "bad")
    shutil.copytree(clean, bad)
    bad_path = truncated_png(os.path.join(bad, "b", BAD_NAME))
    # The manifest: every other file plus the extremes and the EXIF JPEGs, all classes.
    ids = sorted({i for i in range(N) if i % 2 == 0} | {TALL_ID, WIDE_ID, EXIF1_ID, EXIF6_ID,
                                                         1, 5, 9})
    rows = [(os.path.join(clean, CLASSES[files[i].label], os.path.basename(files[i].path)),
             CLASSES[files[i].label]) for i in ids]
    man_clean = os.path.join(base, "manifest_clean.csv")
    _write_manifest(man_clean, base, rows)
    rows_bad = [(p.replace(clean, bad, 1), c) for p, c in rows] + [(bad_path, "b")]
    man_bad = os.path.join(base, "manifest_bad.csv")
    _write_manifest(man_bad, base, rows_bad)
    corpus = Corpus(base, clean, bad, bad_path, files, man_clean, man_bad, ids)
    for tree, root in (("clean", clean), ("bad", bad)):
        for k in shards:
            out = os.path.join(base, f"shards_{tree}_{k}")
            pipeline.write_tfrecords(root, out, num_shards=k, shuffle=False, progress=False)
            corpus.shards[(tree, k)] = out
    return corpus


# --- reading elements back ---------------------------------------------------------------

def content_mask(img: np.ndarray) -> np.ndarray:
    """Pixels that are picture, not letterbox or mark (every colour channel <= 4 is black)."""
    c = img.shape[-1]
    col = img[..., : 3 if c >= 3 else 1].astype(np.int64)
    return col.max(axis=-1) > 4


def decode_id(img: np.ndarray, channels: int, table: np.ndarray, tol: float = 2.0):
    """(id, problem) of one image [h, w, c] uint8: problem is None or a string."""
    img = np.asarray(img)
    if img.shape[-1] != channels:
        return None, f"{img.shape[-1]} channels, expected {channels}"
    mask = content_mask(img)
    if not mask.any():
        return None, "no content pixel (all black)"
    px = img[mask].astype(np.float64)
    top = px.max(axis=0)
    d = np.abs(table - top[None, :]).max(axis=1)
    i = int(np.argmin(d))
    if d[i] > tol:
        return None, (f"brightest colour {top.tolist()} is no file's colour (nearest id {i}, "
                      f"off by {d[i]:.1f})")
    return i, None


def flat_problem(img: np.ndarray, i: int, table: np.ndarray, tol: float = 2.0) -> Optional[str]:
    """For an unmarked file: every content pixel must be the file's colour."""
    mask = content_mask(img)
    px = img[mask].astype(np.float64)
    dev = np.abs(px - table[i][None, :]).max()
    if dev > tol:
        return f"id {i}: a content pixel is {dev:.0f} levels off the flat colour"
    return None


# --- statistics --------------------------------------------------------------------------

def hypergeom_bounds(population: int, successes: int, draws: int, alpha: float):
    """(lo, hi): the count of successes in ``draws`` draws without replacement from a
    population holding ``successes`` falls below lo or above hi with probability
    at most alpha / 2 each (exact hypergeometric tails)."""
    denom = math.comb(population, draws)
    pmf = [math.comb(successes, x) * math.comb(population - successes, draws - x) / denom
           for x in range(0, min(successes, draws) + 1)]
    lo, acc = 0, 0.0
    while lo < len(pmf) and acc + pmf[lo] <= alpha / 2:
        acc += pmf[lo]
        lo += 1
    hi, acc = len(pmf) - 1, 0.0
    while hi >= 0 and acc + pmf[hi] <= alpha / 2:
        acc += pmf[hi]
        hi -= 1
    return lo, hi


def write_repeated_manifest(corpus: Corpus, repeats: Dict[int, int], path: str,
                            order_seed: int = 0) -> List[int]:
    """A manifest of the clean files that lists file ``i`` ``repeats[i]`` times (oversampling),
    the rows in a shuffled order (``order_seed``); returns the ids of its rows, in order."""
    ids = [i for i, k in sorted(repeats.items()) for _ in range(k)]
    ids = [ids[k] for k in np.random.RandomState(order_seed).permutation(len(ids))]
    rows = [(os.path.join(corpus.clean, CLASSES[corpus.files[i].label],
                          os.path.basename(corpus.files[i].path)),
             CLASSES[corpus.files[i].label]) for i in ids]
    _write_manifest(path, os.path.dirname(path), rows)  # relative to the manifest's folder
    return ids


# --- segmentation pairs ---------------------------------------------------------------------
# Images whose colour encodes the class of each pixel (``seg_data``), with palette masks in
# PNG, GIF and BMP, under images/ and masks/ (same relative names, masks with "_m").

PAIR_COUNT = 8
PAIR_MASK_FORMATS = ("PNG", "GIF", "BMP")


@dataclass
class PairCorpus:
    root: str
    images: List[str]               # index order (sorted paths)
    masks: List[str]
    classes: Dict[str, np.ndarray]  # image path -> uint8 [h, w] classes
    manifest: str = ""
    shards: Dict[int, str] = field(default_factory=dict)


def make_pair_corpus(root: str) -> PairCorpus:
    from tests import seg_data  # pylint: disable=import-outside-toplevel
    sizes = [(20, 28), (33, 17), (24, 24), (18, 40), (40, 18), (26, 22), (30, 30), (16, 21)]
    images, masks, classes = [], [], {}
    for i in range(PAIR_COUNT):
        h, w = sizes[i % len(sizes)]
        # one cut per axis, 40% in at least: every block stays >= 3 output pixels
        cls = seg_data.class_map(h, w, seed=100 + i, splits=1, margin=0.4)
        fmt = PAIR_MASK_FORMATS[i % len(PAIR_MASK_FORMATS)]
        sub = "ab"[i % 2]
        img = os.path.join(root, "images", sub, f"p{i:02d}.png")
        mask = os.path.join(root, "masks", sub, f"p{i:02d}_m.{fmt.lower()}")
        seg_data.write_pair(img, mask, cls, "PNG", fmt,
                            **({"optimize": False} if fmt == "GIF" else {}))
        images.append(img)
        masks.append(mask)
        classes[img] = cls
    order = sorted(range(PAIR_COUNT), key=lambda k: images[k])
    corpus = PairCorpus(root, [images[k] for k in order], [masks[k] for k in order], classes)
    corpus.manifest = os.path.join(root, "pairs.csv")
    with open(corpus.manifest, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "mask"])
        for img, mask in zip(corpus.images, corpus.masks):
            w.writerow([os.path.relpath(img, root), os.path.relpath(mask, root)])
    return corpus


def pair_shards(corpus: PairCorpus, num_shards: int) -> str:
    """TFRecord shards of the pairs (written once per shard count)."""
    import pipeline  # pylint: disable=import-outside-toplevel
    if num_shards not in corpus.shards:
        out = os.path.join(corpus.root, f"shards{num_shards}")
        shutil.rmtree(out, ignore_errors=True)
        ds = pipeline.from_paths(corpus.images, masks=corpus.masks, image_size=None,
                                 batch_size=None)
        pipeline.write_tfrecords(ds, out, num_shards=num_shards, progress=False)
        corpus.shards[num_shards] = out
    return corpus.shards[num_shards]
