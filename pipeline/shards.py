"""TFRecord shards: write encoded images once, read them back through the same decode.

``write_tfrecords`` stores each image's ENCODED bytes (never pixels) in
``tf.train.Example`` records, one thread per shard, with a small JSON sidecar
(``dataset.json``: class names, label kind, examples per shard, formats).
``from_tfrecords`` reads the shards with a parallel interleave and hands the
bytes to ``build`` (``Records``), so decoding, resizing, the bad-file policy and
batching are the very graph ``from_directory`` builds.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import math
import os
import posixpath
from typing import List, Optional, Sequence

import tensorflow as tf

from pipeline import build as build_lib
from pipeline import config as config_lib
from pipeline import index as index_lib

SIDECAR = "dataset.json"
SIDECAR_FORMAT = "pipeline.tfrecord/1"
SHARD_PATTERN = "data-{:05d}-of-{:05d}.tfrecord"
TARGET_SHARD_BYTES = 128 * 2 ** 20


def _join(folder: str, name: str) -> str:
    return posixpath.join(folder, name) if index_lib.is_remote(folder) else os.path.join(
        folder, name)


def _ensure_fs(path: str):
    if index_lib.is_remote(path):
        from pipeline import remote  # lazily: imports tensorflow_io
        remote.ensure_filesystem(path)


def _label_kind(labels) -> Optional[str]:
    if labels is None:
        return None
    first = next((l for l in labels if l is not None), 0)
    if isinstance(first, (list, tuple)):
        return "vector"
    if any(isinstance(l, float) for l in labels):
        return "float"
    return "int"


def source_index(source, **index_kw) -> index_lib.Index:
    """The ``Index`` of a directory, a manifest, a list of paths or a pipeline dataset.

    Raises:
        ValueError: ``source`` is none of these (the value is named).
    """
    idx = getattr(source, "_pipeline_index", None)
    if idx is not None:
        return idx
    if isinstance(source, (str, os.PathLike)):
        source = os.fspath(source)
        _ensure_fs(source)
        from pipeline import manifest as manifest_lib
        if manifest_lib.is_manifest(source) and (
                index_lib.is_remote(source) or os.path.isfile(source)):
            idx, _ = manifest_lib.index_manifest(source, **index_kw)
            return idx
        return index_lib.index_directory(source, **index_kw)
    if isinstance(source, tf.data.Dataset):
        raise ValueError("`source` is a tf.data.Dataset not made by a pipeline factory "
                         f"(it has no `_pipeline_index`). Received: source={source!r}")
    return index_lib.index_paths(source, **index_kw)


def _read(path: str):
    """(bytes, error) of one file; error "" when read."""
    try:
        if index_lib.is_remote(path):
            return tf.io.gfile.GFile(path, "rb").read(), ""
        with open(path, "rb") as f:
            return f.read(), ""
    except (OSError, tf.errors.OpError) as e:
        msg = getattr(e, "strerror", None) or getattr(e, "message", None) or str(e)
        return b"", f"unreadable file ({msg})"


def _feature_bytes(v: bytes):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))


def _feature_ints(v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))


def _feature_floats(v):
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(v)))


def write_tfrecords(source, output_dir, num_shards: Optional[int] = None, *,
                    progress: bool = True, num_workers: Optional[int] = None,
                    **index_kw) -> dict:
    """Writes encoded images and their labels to TFRecord shards + a JSON sidecar.

    Each record is a ``tf.train.Example`` with features ``image`` (the file's
    encoded bytes, unchanged), ``label`` (int64 class index, or float list for
    multi-hot / regression labels), ``path`` (bytes), ``format`` (sniffed from
    the bytes), ``has_exif`` (int64 0/1), ``error`` (reason the file is bad,
    empty when fine) and ``weight`` (float, only with sample weights). Row ``i``
    of the index goes to shard ``i % num_shards``, so reading the shards
    round-robin restores the index order. Shards are written in parallel (a
    thread pool over shards) with a ``tqdm.auto`` progress bar.

    Args:
        source: a folder of class sub-folders, a manifest (.csv/.jsonl; see
            ``from_manifest``), a list of paths, or a dataset made by a
            ``pipeline`` factory (its index is written). Local or ``s3://``.
        output_dir: str folder (created) or URI for the shards and ``dataset.json``.
        num_shards: int >= 1, or None for about one shard per 128 MiB
            (at least 1, at most one per file).
        progress: bool, show the progress bar.
        num_workers: threads writing shards (default ``min(num_shards, 2 * cores)``).
        **index_kw: passed to the indexer (e.g. ``class_names``, ``labels``,
            or the manifest options ``path_column``, ``label_columns``, ``root``).

    Returns:
        dict, the sidecar written to ``output_dir/dataset.json``: ``class_names``,
        ``label_kind`` ("int", "float", "vector" or None), ``num_examples``,
        ``shards`` (list of {"file", "num_examples"}), ``formats``, ``has_exif``.

    Raises:
        ValueError: a bad argument (named, with the value received), or
            ``output_dir`` already holds shards or a ``dataset.json``.
    """
    if num_shards is not None:
        num_shards = config_lib._check_int("num_shards", num_shards)
    idx = source_index(source, **index_kw)
    n = len(idx)
    if num_shards is None:
        total = sum(max(i.size, 0) for i in idx.infos)
        num_shards = max(1, math.ceil(total / TARGET_SHARD_BYTES))
    num_shards = min(num_shards, n)
    output_dir = os.fspath(output_dir)
    _ensure_fs(output_dir)
    tf.io.gfile.makedirs(output_dir)
    try:
        listing = tf.io.gfile.listdir(output_dir)
    except tf.errors.NotFoundError:  # object stores have no empty "folders"
        listing = []
    old = [f for f in listing if f.rstrip("/").endswith(".tfrecord") or f == "dataset.json"]
    if old:
        raise ValueError(
            f"`output_dir` already holds shards ({sorted(old)[:3]}...): writing new ones "
            "beside them would mix two datasets. Use an empty folder. "
            f"Received: output_dir={output_dir!r}")
    kind = _label_kind(idx.labels)
    workers = num_workers or min(num_shards, 2 * config_lib.cpu_count())
    names = [SHARD_PATTERN.format(k, num_shards) for k in range(num_shards)]

    from tqdm.auto import tqdm
    bar = tqdm(total=n, unit="img", desc="write_tfrecords", disable=not progress)

    def write_shard(k):
        formats, exif = collections.Counter(), False
        rows = range(k, n, num_shards)
        with tf.io.TFRecordWriter(_join(output_dir, names[k])) as writer:
            for i in rows:
                path = idx.paths[i]
                contents, error = _read(path)
                head = contents[:index_lib.SNIFF_BYTES]
                fmt = index_lib.sniff_format(head)
                has_exif = fmt == "jpeg" and b"Exif\x00\x00" in head
                if not error:
                    if not contents:
                        error = "empty file (0 bytes)"
                    elif idx.infos[i].error:
                        error = idx.infos[i].error
                    elif fmt is None:
                        error = index_lib.describe_start(head)
                formats[fmt or "unknown"] += 1
                exif = exif or has_exif
                feats = {
                    "image": _feature_bytes(contents),
                    "path": _feature_bytes(path.encode()),
                    "format": _feature_bytes((fmt or "").encode()),
                    "has_exif": _feature_ints([int(has_exif)]),
                    "error": _feature_bytes(error.encode()),
                }
                if kind == "int":
                    feats["label"] = _feature_ints([int(idx.labels[i])])
                elif kind == "float":
                    feats["label"] = _feature_floats([float(idx.labels[i])])
                elif kind == "vector":
                    feats["label"] = _feature_floats(idx.labels[i])
                if idx.weights is not None:
                    feats["weight"] = _feature_floats([float(idx.weights[i])])
                writer.write(tf.train.Example(
                    features=tf.train.Features(feature=feats)).SerializeToString())
                bar.update(1)
        return {"file": names[k], "num_examples": len(rows)}, formats, exif

    try:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(write_shard, range(num_shards)))
    finally:
        bar.close()
    formats = collections.Counter()
    for _, f, _ in results:
        formats.update(f)
    label_size = len(idx.labels[0]) if kind == "vector" and n else None
    num_classes = (len(idx.class_names) if idx.class_names else
                   (max(idx.labels) + 1 if kind == "int" else label_size))
    meta = {
        "format": SIDECAR_FORMAT,
        "class_names": list(idx.class_names) if idx.class_names else None,
        "num_classes": num_classes,
        "label_kind": kind,
        "label_size": label_size,
        "has_weights": idx.weights is not None,
        "num_examples": n,
        "shards": [r for r, _, _ in results],
        "formats": dict(formats),
        "has_exif": any(e for _, _, e in results),
    }
    with tf.io.gfile.GFile(_join(output_dir, SIDECAR), "w") as f:
        f.write(json.dumps(meta, indent=1))
    return meta


def _list_files(files) -> List[str]:
    if isinstance(files, (str, os.PathLike)):
        files = os.fspath(files)
        _ensure_fs(files)
        if tf.io.gfile.isdir(files):
            found = sorted(tf.io.gfile.glob(_join(files, "*.tfrecord")))
        elif any(ch in files for ch in "*?["):
            found = sorted(tf.io.gfile.glob(files))
        else:
            found = [files]
    else:
        found = [os.fspath(f) for f in files]
        if found:
            _ensure_fs(found[0])
    if not found:
        raise ValueError(f"No TFRecord files found. Received: files={files!r}")
    return found


def read_sidecar(files: Sequence[str]) -> dict:
    """The ``dataset.json`` beside the shards, restricted to ``files``.

    Raises:
        FileNotFoundError: no sidecar beside the first file.
        ValueError: a file the sidecar does not list (named).
    """
    folder = posixpath.dirname(files[0]) if index_lib.is_remote(files[0]) else os.path.dirname(
        files[0])
    path = _join(folder, SIDECAR)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(
            f"No {SIDECAR} beside the TFRecord shards ({path!r}); shards must be written "
            "by pipeline.write_tfrecords")
    with tf.io.gfile.GFile(path, "r") as f:
        meta = json.loads(f.read())
    counts = {s["file"]: s["num_examples"] for s in meta["shards"]}
    for fl in files:
        if os.path.basename(fl) not in counts:
            raise ValueError(f"{fl!r} is not listed in {path!r}")
    meta["num_examples"] = sum(counts[os.path.basename(fl)] for fl in files)
    meta["file_counts"] = [counts[os.path.basename(fl)] for fl in files]
    return meta


def short_shards(files: Sequence[str], counts: Sequence[int]):
    """In graph, for the rare path where records were lost: which shards hold
    fewer readable records than the sidecar says.

    Each shard is read again up to its first unreadable record (the reader
    cannot go past corrupt data). Returns a str scalar like
    "shard-00001-of-00002.tfrecord (7 of 15 records readable)", "; "-joined.
    """
    parts = []
    for fl, want in zip(files, counts):
        got = tf.data.TFRecordDataset(fl).ignore_errors().reduce(
            tf.constant(0, tf.int64), lambda c, _: c + 1)
        parts.append(tf.where(got < want, tf.strings.join(
            [fl, " (", tf.strings.as_string(got), f" of {int(want)} records readable)"]), ""))
    joined = tf.strings.reduce_join(tf.stack(parts), separator="\x00")
    names = tf.strings.split(joined, "\x00")
    return tf.strings.reduce_join(tf.boolean_mask(names, tf.strings.length(names) > 0),
                                  separator="; ")


def from_tfrecords(files, shuffle_buffer_size: int = 1024, **options):
    """TFRecord shards written by ``write_tfrecords`` -> the same elements as the source.

    Shards are read with a parallel interleave (one reader per shard in the
    cycle, round-robin, so ``shuffle=False`` gives the index order when there
    are at most 64 shards); with ``shuffle=True`` the shard order is reshuffled
    every epoch and a bounded buffer of ``shuffle_buffer_size`` encoded records
    shuffles elements (memory ~ buffer x mean file size). Decoding, resizing,
    the bad-file policy and batching are those of ``from_directory``.

    Args:
        files: a folder of shards, a glob, or a list of shard files (local or
            ``s3://``); ``dataset.json`` must sit beside them.
        shuffle_buffer_size: int >= 1, encoded records held for shuffling.
        **options: the shared image options. ``label_mode`` defaults to "int"
            for class labels, "multi_hot" / "float" for stored vectors and
            floats. ``validation_split`` is not supported (split before writing).

    Returns:
        ``tf.data.Dataset`` of ``(images, labels)`` (``(images, labels,
        sample_weights)`` when weights were stored), images uint8
        ``[batch, height, width, channels]``. Attributes ``class_names``;
        ``file_paths`` is None (paths are stored in the records).

    Raises:
        ValueError: a bad argument, no files, a file not in the sidecar, or
            (given a folder) a shard the sidecar lists missing from it.
        FileNotFoundError: no ``dataset.json`` beside the shards.
    """
    shuffle_buffer_size = config_lib._check_int("shuffle_buffer_size", shuffle_buffer_size)
    whole_folder = isinstance(files, (str, os.PathLike)) and tf.io.gfile.isdir(os.fspath(files))
    files = _list_files(files)
    meta = read_sidecar(files)
    if whole_folder:
        listed = [sh["file"] for sh in meta["shards"]]
        missing = sorted(set(listed) - {os.path.basename(f) for f in files})
        if missing:
            raise ValueError(
                f"{len(missing)} of the {len(listed)} shards that dataset.json lists are "
                f"missing from the folder: {missing[:5]}; their records would be lost. "
                "Pass the shards to read as a list to read a subset on purpose. "
                f"Received: files={os.fspath(files[0] and os.path.dirname(files[0]))!r}")
    kind = meta["label_kind"]
    if "label_mode" not in options:
        options["label_mode"] = {"int": "int", "float": "float", "vector": "multi_hot",
                                 None: None}[kind]
    opts = config_lib.make_options(**options)
    if opts.validation_split is not None:
        raise ValueError("from_tfrecords does not split; write separate shards per subset. "
                         f"Received: validation_split={opts.validation_split!r}")
    if kind is not None and opts.label_mode is not None and (
            (kind == "int") != (opts.label_mode in ("int", "categorical", "binary"))):
        raise ValueError(f"The shards hold {kind} labels, which label_mode "
                         f"{opts.label_mode!r} cannot encode. Received: label_mode="
                         f"{opts.label_mode!r}")
    has_labels = kind is not None and opts.label_mode is not None
    has_weights = bool(meta.get("has_weights")) and has_labels

    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "path": tf.io.FixedLenFeature([], tf.string),
        "error": tf.io.FixedLenFeature([], tf.string),
        "has_exif": tf.io.FixedLenFeature([], tf.int64),
    }
    if kind == "int":
        spec["label"] = tf.io.FixedLenFeature([], tf.int64)
    elif kind == "float":
        spec["label"] = tf.io.FixedLenFeature([], tf.float32)
    elif kind == "vector":
        spec["label"] = tf.io.FixedLenFeature([meta["label_size"]], tf.float32)
    if has_weights:
        spec["weight"] = tf.io.FixedLenFeature([], tf.float32)

    def parse(record):
        f = tf.io.parse_single_example(record, spec)
        label = f["label"] if "label" in f else tf.constant(0, tf.int64)
        out = (f["image"], label, f["error"], f["has_exif"] > 0, f["path"])
        return out + ((f["weight"],) if has_weights else ())

    n = meta["num_examples"]
    det = opts.is_deterministic
    shuffle = opts.shuffle and opts.cache is None
    ds = tf.data.Dataset.from_tensor_slices(files)
    ctx = opts.input_context
    by_element = False
    if ctx is not None and ctx.num_input_pipelines > 1:
        if len(files) >= ctx.num_input_pipelines:
            ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            n = -(-n // ctx.num_input_pipelines)  # about; used for buffer sizes only
        else:
            by_element = True
    if shuffle:
        ds = ds.shuffle(len(files), seed=opts.seed, reshuffle_each_iteration=True)
    cycle = len(files) if len(files) <= 64 else 16
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=cycle, block_length=1,
                       num_parallel_calls=min(cycle, opts.parallelism), deterministic=det)
    if by_element:
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    if shuffle:
        ds = ds.shuffle(min(n, shuffle_buffer_size), seed=opts.seed,
                        reshuffle_each_iteration=True)
    ds = ds.map(build_lib.graph_fn(parse), num_parallel_calls=opts.parallelism,
                deterministic=det)
    records = build_lib.Records(ds, meta["num_examples"], meta["formats"] and {
        (None if k == "unknown" else k): v for k, v in meta["formats"].items()},
        bool(meta["has_exif"]), expected=None if (
            ctx is not None and ctx.num_input_pipelines > 1) else meta["num_examples"],
        lost_detail=lambda: short_shards(files, meta["file_counts"]))
    idx = index_lib.Index([], [] if kind else None, meta["class_names"], [],
                          [] if has_weights else None)
    return build_lib.build(idx, opts, num_classes=meta["num_classes"], records=records)


def convert(src, out, num_shards: Optional[int] = None, progress: bool = True,
            num_workers: Optional[int] = None, **index_kw) -> dict:
    """``write_tfrecords`` under its command-line name; returns the sidecar dict."""
    return write_tfrecords(src, out, num_shards, progress=progress, num_workers=num_workers,
                           **index_kw)
