"""Helpers for the I/O source tests: real image files whose pixels encode their index."""

import os

import numpy as np
from PIL import Image


def write_image(path, value, size=(6, 5), fmt=None):
    """A solid RGB image whose every pixel is ``value`` (0-255); PNG keeps it exact."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(np.full((size[1], size[0], 3), value, np.uint8)).save(path, format=fmt)
    return path


def make_class_folders(root, per_class=(3, 2, 4), names=("cat", "dog", "eel")):
    """Class folders of solid PNGs; value k for the k-th file overall. Returns paths, labels."""
    paths, labels, k = [], [], 0
    for c, (name, count) in enumerate(zip(names, per_class)):
        for j in range(count):
            paths.append(write_image(os.path.join(root, name, f"img{j:02d}.png"), k + 1))
            labels.append(c)
            k += 1
    return paths, labels


def values(images):
    """The index value of each image in a batch (its top-left red pixel)."""
    return [int(v) for v in np.asarray(images)[..., 0, 0, 0].reshape(-1)]


def collect(ds):
    """All elements of a batched (x, y[, w]) dataset as numpy lists."""
    out = None
    for el in ds:
        el = el if isinstance(el, tuple) else (el,)
        parts = [np.asarray(t) for t in el]
        if out is None:
            out = [[] for _ in parts]
        for o, p in zip(out, parts):
            o.extend(list(p))
    return out


def png_claiming(w, h):
    """A valid-looking PNG whose IHDR claims w x h pixels (tiny IDAT): a bomb header."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) +
            chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + chunk(b"IEND", b""))


def stored_paths(out):
    """The ``path`` feature of every record in the ``.tfrecord`` shards of folder ``out``,
    shard by shard in name order, records in file order."""
    import tensorflow as tf
    paths = []
    for f in sorted(os.listdir(out)):
        if f.endswith(".tfrecord"):
            for rec in tf.data.TFRecordDataset(os.path.join(out, f)):
                ex = tf.train.Example.FromString(rec.numpy())
                paths.append(ex.features.feature["path"].bytes_list.value[0].decode())
    return paths
