"""The writing side of TFRecord shards, shared by every writer (one process or Beam workers).

The record encoder (``encode_row``: a row's file as a ``tf.train.Example``, the in-graph
re-encode of ``max_resolution`` by ``resolution_reencoder``), the shard writer
(``write_shard_file``: the records in order and their SHA-256), the layout (``row_order``,
``shard_count``: row ``j`` of the written order goes to shard ``j % num_shards``), a
conversion's identity (``plan_sha256``) and the sidecar (``sidecar``: ``dataset.json``).
``pipeline.convert.shards.write_tfrecords`` drives them in one process, ``pipeline.convert.beam_write`` on
Apache Beam.
"""

from __future__ import annotations

import collections
import json
import math
import os
from typing import Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from pipeline import checks
from pipeline import config
from pipeline.decode import formats
from pipeline.sources import index as index_lib
from pipeline.sources import read

SIDECAR = "dataset.json"
SIDECAR_FORMAT = "pipeline.tfrecord/1"
SHARD_PATTERN = "data-{:05d}-of-{:05d}.tfrecord"
TARGET_SHARD_BYTES = 128 * 2 ** 20


def _feature_bytes(v: bytes):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))


def _feature_ints(v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))


def _feature_floats(v):
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(v)))


class BadFilesError(RuntimeError):
    """``write_tfrecords(on_error="raise")`` met bad files (or ``"skip"`` left none).

    Attributes:
        records: list of ``pipeline.ErrorRecord(path, reason)``, every bad
            file in index order.
        num_files: int, the files indexed.
    """

    def __init__(self, records: List, num_files: int, message: str):
        super().__init__(message)
        self.records = records
        self.num_files = num_files


def bad_files_message(records, num_files: int, on_error: str) -> str:
    from pipeline.decode import guard  # pylint: disable=import-outside-toplevel
    if config.OnError.of(on_error).skips:
        head = f"all {num_files} files are bad: no record to write"
    else:
        head = (f"cannot write file {records[0].path} ({records[0].reason}); {len(records)} "
                f"bad files of {num_files}, nothing written (on_error='skip' leaves them out)")
    return f"pipeline: {head}. {guard.summarize(records)}"


FEWER_SHARDS = "write_tfrecords: wrote fewer shards than asked"
DEFAULT_JPEG_QUALITY = 90


def resolution_reencoder(max_resolution: int, jpeg_quality: int,
                         max_pixels: Optional[int] = None):
    """The in-graph re-encode of ``write_tfrecords(max_resolution=...)``.

    Returns a ``tf.function`` ``f(contents: str scalar) -> (bytes: str scalar,
    changed: bool scalar)``. The file is decoded by the factories' decoder
    (``pipeline.decode.image.Decoder``: every format, the bomb guard, the EXIF orientation
    applied, RGB); when its shorter side is above ``max_resolution``, it is resized so
    that the shorter side is ``max_resolution`` pixels and the longer one keeps the
    aspect ratio (rounded), by ``tf.image.resize(..., antialias=True)`` (bilinear with
    a kernel widened by the reduction factor, as Pillow's reducing filters), rounded
    to uint8; it is then encoded by ``tf.io.encode_jpeg(quality=jpeg_quality)``
    (4:2:0, no EXIF: the pixels are upright). A file whose shorter side is at most
    ``max_resolution`` (never upscaled) is re-encoded only when it is a JPEG with an
    EXIF orientation other than 1 (to store it upright); otherwise, and for a file
    the decoder refuses (a reason), ``changed`` is False and the bytes are the
    file's own. A decoder error (corrupt data) raises ``tf.errors.OpError``.
    """
    from pipeline.decode import image as decode_lib  # pylint: disable=import-outside-toplevel
    dec = decode_lib.Decoder(channels=3, max_pixels=max_pixels or checks.DEFAULT_MAX_PIXELS)
    n = int(max_resolution)

    @tf.function(input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
    def reencode(contents):
        words = decode_lib.header_words(contents)
        rotated = tf.cond(decode_lib.is_jpeg(words),
                          lambda: decode_lib.exif_orientation(contents, words) > 1,
                          lambda: tf.constant(False))
        image, reason = dec.decode(contents)
        shape = tf.shape(image)
        h, w = shape[0], shape[1]
        short = tf.minimum(h, w)
        scale = tf.cast(n, tf.float64) / tf.cast(short, tf.float64)
        nh = tf.where(h <= w, n, tf.cast(tf.round(tf.cast(h, tf.float64) * scale), tf.int32))
        nw = tf.where(h <= w, tf.cast(tf.round(tf.cast(w, tf.float64) * scale), tf.int32), n)
        smaller = short > n
        changed = tf.equal(reason, "") & (smaller | rotated)

        def resized():
            x = tf.image.resize(image, tf.stack([tf.maximum(nh, 1), tf.maximum(nw, 1)]),
                                method="bilinear", antialias=True)
            return tf.cast(tf.clip_by_value(tf.round(x), 0.0, 255.0), tf.uint8)

        pixels = tf.cond(smaller, resized, lambda: image)
        out = tf.cond(changed, lambda: tf.io.encode_jpeg(pixels, quality=jpeg_quality),
                      lambda: contents)
        return out, changed

    return reencode


def fewer_shards_message(asked: int, num_files: int, num_skipped: int = 0) -> str:
    """Why ``write_tfrecords`` writes ``num_files`` shards when ``asked`` for more."""
    files = f"{num_files} file{'s' if num_files != 1 else ''}"
    left = (f" ({num_skipped} bad file{'s' if num_skipped != 1 else ''} left out)"
            if num_skipped else "")
    return (f"{FEWER_SHARDS}: {num_files} instead of num_shards={asked}, since there are "
            f"only {files} to write{left} and a shard holds at least one record (one file "
            "per shard).")


def row_order(n: int, seed: Optional[int]) -> np.ndarray:
    """The written order of ``n`` rows: ``numpy.random.RandomState(seed).permutation(n)``.

    A seed from 2**32 up seeds it with its two 32-bit words
    (``config.numpy_random_state``). None: an unseeded order.
    """
    return config.numpy_random_state(seed).permutation(n)


def shard_count(num_shards: Optional[int], n: int, sizes: Callable[[], np.ndarray],
                num_skipped: int = 0) -> int:
    """The shards ``n`` good files are written to: ``num_shards``, or (None) about one per
    ``TARGET_SHARD_BYTES`` of ``sizes()`` (at least 1); at most ``n`` (a warning says so)."""
    if num_shards is None:
        total = int(sizes().clip(0).sum())
        num_shards = max(1, math.ceil(total / TARGET_SHARD_BYTES))
    if num_shards > n:
        logging.warning("%s", fewer_shards_message(num_shards, n, num_skipped))
        num_shards = n
    return num_shards


def plan_sha256(idx: index_lib.Index, **options) -> str:
    """A conversion's identity: SHA-256 (hex) of the rows (stored paths, labels, weights,
    masks, errors known at index time) and ``options`` (the order, shard and re-encode
    options). Two runs with the same identity write the same shards (``seed=None`` aside:
    ``write_tfrecords`` with ``beam_runner`` keeps the seed it drew for a rerun)."""
    import hashlib  # pylint: disable=import-outside-toplevel
    h = hashlib.sha256(SIDECAR_FORMAT.encode())
    h.update(json.dumps(sorted(options.items()), default=str).encode())
    for p in idx.paths:
        h.update(read.path_bytes([stored_path(p)])[0] + b"\0")
    for arr in (idx.labels, idx.weights):
        h.update(b"-" if arr is None else np.ascontiguousarray(arr).tobytes())
    h.update(json.dumps([idx.mask_paths, sorted(idx.errors.items()),
                         idx.class_names]).encode())
    return h.hexdigest()


def sidecar(idx: index_lib.Index, shards: Sequence[dict], plan: str,
            max_resolution: Optional[int], jpeg_quality: int,
            skipped: Optional[List[dict]]) -> dict:
    """The ``dataset.json`` of ``idx``'s good files (``idx`` without the skipped ones)
    written as ``shards`` (``write_shard_file``'s entries, in shard order)."""
    n, kind = len(idx), idx.label_kind
    all_formats, mask_formats = collections.Counter(), collections.Counter()
    for r in shards:
        all_formats.update(r["formats"])
        mask_formats.update(r.get("mask_formats", {}))
    label_size = int(idx.labels.shape[1]) if kind == "vector" and n else None
    num_classes = (len(idx.class_names) if idx.class_names else
                   (int(idx.labels.max()) + 1 if kind == "int" else label_size))
    meta = {
        "format": SIDECAR_FORMAT,
        "class_names": list(idx.class_names) if idx.class_names else None,
        "num_classes": num_classes,
        "label_kind": kind,
        "label_size": label_size,
        "has_weights": idx.weights is not None,
        "num_examples": n,
        "shards": list(shards),
        "formats": dict(all_formats),
        "has_exif": any(r["has_exif"] for r in shards),
        "plan_sha256": plan,
    }
    if max_resolution is not None:
        meta.update(max_resolution=max_resolution, jpeg_quality=jpeg_quality,
                    reencoded=sum(r["reencoded"] for r in shards))
    if idx.mask_paths is not None:
        meta["has_masks"] = True
        meta["mask_formats"] = dict(mask_formats)
    if skipped is not None:
        meta["skipped"] = list(skipped)
    return meta


def encode_row(idx: index_lib.Index, i: int, reencode=None):
    """Row ``i`` of ``idx`` as the record ``write_tfrecords`` stores (the one encoder of
    every writer, in one process or on Beam workers).

    Returns:
        (serialized ``tf.train.Example`` bytes, stored format name or None, has_exif
        bool, re-encoded bool, the mask's format name or None (no mask)).
    """
    path = idx.paths[i]
    contents, error = read.try_read(path)
    head = contents[:4096]
    fmt = formats.sniff_bytes(head)
    has_exif = fmt == "jpeg" and b"Exif\x00\x00" in head
    changed = False
    if not error:
        if not contents:
            error = "empty file (0 bytes)"
        elif i in idx.errors:
            error = idx.errors[i]
        elif fmt is None:
            error = formats.describe_start(head)
    if reencode is not None and not error:
        try:
            out, new = reencode(tf.constant(contents))
        except tf.errors.OpError:  # corrupt: stored as it is; the reader names it
            new = False
        if bool(new):
            contents, fmt, has_exif, changed = out.numpy(), "jpeg", False, True
    feats = {
        "image": _feature_bytes(contents),
        "path": _feature_bytes(read.path_bytes([stored_path(path)])[0]),
        "format": _feature_bytes((fmt or "").encode()),
        "has_exif": _feature_ints([int(has_exif)]),
        "error": _feature_bytes(error.encode()),
    }
    kind = idx.label_kind
    if kind == "int":
        feats["label"] = _feature_ints([int(idx.labels[i])])
    elif kind == "float":
        feats["label"] = _feature_floats([float(idx.labels[i])])
    elif kind == "vector":
        feats["label"] = _feature_floats(idx.labels[i].tolist())
    if idx.weights is not None:
        feats["weight"] = _feature_floats([float(idx.weights[i])])
    mask_fmt = None
    if idx.mask_paths is not None:
        counts = collections.Counter()
        feats.update(_mask_features(idx.mask_paths[i], error, counts))
        error = feats.pop("_error")
        feats["error"] = _feature_bytes(error.encode())
        mask_fmt = next(iter(counts))
    # deterministic: the features map in key order, whatever process or protobuf build
    record = tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString(
        deterministic=True)
    return record, fmt, has_exif, changed, mask_fmt


def _records_hash():
    import hashlib  # pylint: disable=import-outside-toplevel
    return hashlib.sha256()


def _add_record(h, record: bytes) -> None:
    h.update(len(record).to_bytes(8, "little"))
    h.update(record)


def records_sha256(path: str) -> Optional[str]:
    """SHA-256 (hex) of a shard's records as ``write_shard_file`` hashes them (each as its
    8-byte little-endian length, then its bytes), read back with ``tf.data``; None when the
    file cannot be read to its end (missing, truncated, a corrupt record)."""
    h = _records_hash()
    try:
        for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
            _add_record(h, record)
    except (tf.errors.OpError, OSError):
        return None
    return h.hexdigest()


def write_shard_file(output_dir: str, name: str, encoded, reencoding: bool, masks: bool,
                     on_record: Optional[Callable[[], None]] = None,
                     temporary: bool = False) -> dict:
    """Writes ``encoded`` (``encode_row``'s tuples, in the shard's order) as
    ``output_dir/name``; with ``temporary``, under a temporary name first, renamed to
    ``name`` once complete (a partial shard never bears a shard's name).

    Returns:
        the shard's entry in ``dataset.json``: ``file``, ``num_examples``,
        ``records_sha256`` (``records_sha256``: hashed while writing, the file is not read
        back), ``formats`` (stored format -> records), ``has_exif``; with re-encoding,
        ``reencoded``; with masks, ``mask_formats``.
    """
    final = read.join(output_dir, name)
    target = f"{final}.tmp-{os.getpid()}-{id(encoded):x}" if temporary else final
    fmt_counts, mask_counts = collections.Counter(), collections.Counter()
    exif, changed, count = False, 0, 0
    h = _records_hash()
    with tf.io.TFRecordWriter(target) as writer:
        for record, fmt, has_exif, new, mask_fmt in encoded:
            writer.write(record)
            _add_record(h, record)
            fmt_counts[fmt or "unknown"] += 1
            exif = exif or has_exif
            changed += int(new)
            if masks:
                mask_counts[mask_fmt or "unknown"] += 1
            count += 1
            if on_record is not None:
                on_record()
    entry = {"file": name, "num_examples": count, "records_sha256": h.hexdigest(),
             "formats": dict(fmt_counts), "has_exif": exif}
    if reencoding:
        entry["reencoded"] = changed
    if masks:
        entry["mask_formats"] = dict(mask_counts)
    if temporary:
        tf.io.gfile.rename(target, final, overwrite=True)
    return entry


def _mask_features(mask_path: str, error: str, counts) -> dict:
    """A pair's mask as record features (and the record's error, "_error")."""
    contents, mask_error = read.try_read(mask_path) if mask_path else (b"", "")
    fmt = formats.sniff_bytes(contents[:4096])
    counts[fmt or "unknown"] += 1
    if not error and mask_path and (mask_error or not contents or fmt is None):
        why = mask_error or ("empty file (0 bytes)" if not contents
                             else formats.describe_start(contents[:4096]))
        error = f"mask {mask_path}: {why}"
    return {"mask": _feature_bytes(contents),
            "mask_path": _feature_bytes(read.path_bytes([stored_path(mask_path)])[0]
                                        if mask_path else b""),
            "_error": error}


def stored_path(path: str) -> str:
    """The ``path`` a record stores: a local file's absolute path (the records are
    read from other folders), a URI unchanged."""
    return path if read.is_remote(path) else os.path.abspath(path)
