"""TFRecord shards: write encoded images once, read them back through the same decode.

``write_tfrecords`` stores each image's ENCODED bytes (never pixels) in
``tf.train.Example`` records (the file's own bytes, or, with ``max_resolution``, a
JPEG re-encoded in graph with its shorter side at that many pixels), one thread per shard, with a small JSON sidecar
(``dataset.json``: class names, label kind, examples per shard, formats); with
``beam_runner``, as an Apache Beam pipeline (``pipeline.convert.beam_write``) writing the same
shards. The writing parts both share (encoder, shard writer, layout, sidecar) are in
``pipeline.convert.shard_writer``.
``open_records`` describes the shards as ``Records``: the plan
(``pipeline.deliver.plan.records``) reads them with a parallel interleave and the
bytes go through the very graph ``from_directory`` builds (decode, resize,
the bad-file policy, batching).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import inspect
import json
import os
import re
from typing import Callable, List, Optional, Sequence, Set, Tuple

import numpy as np
import tensorflow as tf

from pipeline import assemble
from pipeline import checks
from pipeline import config
from pipeline.decode import formats
from pipeline.sources import index as index_lib
from pipeline.sources import manifest as manifest_lib
from pipeline.sources import read
from pipeline.convert.shard_writer import (  # noqa: F401  the writing side, re-exported
    DEFAULT_JPEG_QUALITY, FEWER_SHARDS, SHARD_PATTERN, SIDECAR, SIDECAR_FORMAT,
    TARGET_SHARD_BYTES, BadFilesError, bad_files_message, encode_row, fewer_shards_message,
    plan_sha256, records_sha256, resolution_reencoder, row_order, shard_count, sidecar,
    stored_path, write_shard_file)


def source_index(source, skip_missing: bool = False, **index_kw) -> index_lib.Index:
    """The ``Index`` of a directory, a manifest, a list of paths or a pipeline dataset.

    ``skip_missing``: a manifest's missing files become bad files of the index
    (as ``from_manifest(on_error="skip")``) instead of raising FileNotFoundError.

    Raises:
        ValueError: ``source`` is none of these (the value is named).
    """
    if isinstance(source, tf.data.Dataset):
        b = assemble.built(source)
        if b.index is None:
            raise ValueError("`source` is a dataset read from TFRecord shards; write from "
                             f"its files instead. Received: source={source!r}")
        return b.index
    if isinstance(source, (str, os.PathLike)):
        source = os.fspath(source)
        if manifest_lib.is_manifest(source) and (
                read.is_remote(source) or os.path.isfile(source)):
            if skip_missing:
                index_kw.setdefault("missing_ok", True)
            idx, _ = manifest_lib.index_manifest(source, **index_kw)
            return idx
        return index_lib.index_directory(source, **index_kw)
    return index_lib.index_paths(source, **index_kw)


def check_resolution(max_resolution, jpeg_quality):
    """Validates ``write_tfrecords``' re-encode options; returns them as ints.

    Raises:
        ValueError: ``max_resolution`` not None or an int >= 1, or ``jpeg_quality``
            not an int in [1, 100] (named, with the value received).
    """
    max_resolution = checks.check_int("max_resolution", max_resolution, allow_none=True)
    jpeg_quality = checks.check_int("jpeg_quality", jpeg_quality)
    if jpeg_quality > 100:
        raise ValueError("`jpeg_quality` must be an integer in [1, 100] (libjpeg's quality "
                         f"scale). {checks.received('jpeg_quality', jpeg_quality)}")
    return max_resolution, jpeg_quality


def check_files(idx: index_lib.Index, on_error: str, max_pixels: Optional[int] = None,
                progress: bool = True):
    """The files of ``idx`` that the factories would load, by ``on_error``.

    Every file is decoded once by ``pipeline.tools.report.scan_index`` (the
    factories' decoder, as ``pipeline.scan``).

    Returns:
        (the ``Index`` of the good files, list of ``ErrorRecord`` of the bad
        ones, in index order).

    Raises:
        BadFilesError: a bad file with ``on_error="raise"``, or no good file.
    """
    from pipeline.decode import guard  # pylint: disable=import-outside-toplevel
    from pipeline.tools import report  # pylint: disable=import-outside-toplevel

    found = report.scan_index(idx, max_pixels=max_pixels, progress=progress,
                              desc="write_tfrecords: check")
    records = [guard.ErrorRecord(b["path"], b["reason"]) for b in found.bad_files]
    bad = {r.path for r in records}
    good = [k for k, p in enumerate(idx.paths) if p not in bad]
    if records and (config.OnError.of(on_error).raises or not good):
        raise BadFilesError(records, len(idx),
                            bad_files_message(records, len(idx), on_error))
    return (idx.subset(good) if records else idx), records


# The indexers' keywords that write_tfrecords(**index_kw) passes on.
INDEX_KEYWORDS = tuple(sorted({
    name for fn in (index_lib.index_directory, index_lib.index_paths, manifest_lib.index_manifest)
    for name in list(inspect.signature(fn).parameters)[1:]}))


@checks.known_keywords(INDEX_KEYWORDS)
def write_tfrecords(source, output_dir, num_shards: Optional[int] = None, *,
                    shuffle: bool = True, seed: int = 0, progress: bool = True,
                    num_workers: Optional[int] = None, on_error: Optional[str] = None,
                    max_pixels: Optional[int] = None, max_resolution: Optional[int] = None,
                    jpeg_quality: int = DEFAULT_JPEG_QUALITY,
                    beam_runner: Optional[str] = None, beam_options=None, **index_kw) -> dict:
    """Writes encoded images and their labels to TFRecord shards + a JSON sidecar.

    Each record is a ``tf.train.Example``: ``image`` (the file's encoded bytes), ``label``
    (int64 class index, or float list), ``path`` (bytes: absolute local path, or the URI),
    ``format``, ``has_exif`` (int64 0/1), ``error`` (why a file is bad, or empty), ``weight``
    (float, with sample weights); pairs also ``mask``, ``mask_path``. Row ``j`` of the written
    order goes to shard ``j % num_shards`` (docs/sources.md#tfrecord-shards).

    Args:
        source: a folder of class sub-folders, a manifest (.csv/.jsonl), a list of paths, or
            a dataset made by a ``pipeline`` factory (its index is written); local or URI.
        output_dir: str folder (created) or URI for the shards and ``dataset.json``.
        num_shards: int >= 1, or None for about one shard per 128 MiB (at most one per file).
        shuffle: bool, write rows in a seeded random order (default True; ``row_order``).
        seed: int in [0, 2**63), or None for an unseeded order.
        progress: bool, show a progress bar.
        num_workers: threads writing shards (default ``min(num_shards, 2 * cores)``).
        on_error: None (default: every file written, a bad one with its ``error``), "raise"
            (every file decoded first, as ``scan``; a bad file raises ``BadFilesError``
            before anything is written) or "skip" (bad and missing files left out, listed).
        max_pixels: int, the header limit of that check (default 178,956,970).
        max_resolution: None (bytes stored unchanged) or int >= 1, pixels: images whose
            shorter side is above it are decoded (EXIF applied), resized to it (antialiased,
            aspect kept) and re-encoded as RGB JPEG in graph, as FFCV's; never upscaled.
        jpeg_quality: int in [1, 100], the re-encode's quality (default 90).
        beam_runner: None (this process writes), or a Beam runner name
            (``pipeline.checks.BEAM_RUNNERS``) or class path: the same shards and sidecar
            written by an Apache Beam pipeline (docs/scale-out.md), resumable.
        beam_options: None, ``"key=value,key=value"`` or a list of ``"--flag=value"``:
            Beam's ``PipelineOptions``; only with ``beam_runner``.
        **index_kw: passed to the indexer (``class_names``, ``labels``, manifest options).

    Returns:
        dict, the sidecar written to ``output_dir/dataset.json``: ``class_names``,
        ``label_kind``, ``num_examples``, ``shards`` (list of {"file", "num_examples",
        "records_sha256", "formats", "has_exif"}), ``formats``, ``has_exif``, ``plan_sha256``;
        ``reencoded`` with ``max_resolution``; ``skipped`` ({"path", "reason"}) with ``on_error``.

    Raises:
        TypeError: an unknown keyword argument (named, with the closest valid name).
        ValueError: a bad argument (named, with the value received); ``output_dir`` a
            file, holding other shards, or inside ``source``.
        FileNotFoundError: a file a manifest lists is missing, unless ``on_error="skip"``.
        BadFilesError: with "raise", every bad file listed; with "skip", no good file.
        ImportError: ``beam_runner`` without apache-beam (``pip install '.[beam]'``).
    """
    plan_options, beam_flags = _write_options(
        num_shards, shuffle, seed, on_error, max_pixels, max_resolution, jpeg_quality,
        beam_runner, beam_options, num_workers)
    beam_runner, on_error = plan_options.pop("beam_runner"), plan_options["on_error"]
    output_dir = _check_output_dir(output_dir, source)
    if beam_runner is not None:
        from pipeline.convert import beam_write  # pylint: disable=import-outside-toplevel
        beam_write.pipeline_options(beam_runner, beam_flags)  # Beam installed, its options known
    idx = source_index(source, skip_missing=on_error is config.OnError.SKIP, **index_kw)
    read.ensure_filesystem(output_dir, in_graph=True)
    plan = plan_sha256(idx, **plan_options)
    if beam_runner is not None:
        return beam_write.write(idx, output_dir, plan, beam_runner, beam_flags,
                                progress=progress, **plan_options)
    _refuse_old_shards(output_dir)
    skipped = []
    if on_error is not None:
        idx, skipped = check_files(idx, on_error, max_pixels=plan_options["max_pixels"],
                                   progress=progress)
    results = _write_shards(idx, output_dir, plan_options, len(skipped), num_workers, progress)
    meta = sidecar(idx, results, plan, plan_options["max_resolution"],
                   plan_options["jpeg_quality"], None if on_error is None else
                   [{"path": r.path, "reason": r.reason} for r in skipped])
    with tf.io.gfile.GFile(read.join(output_dir, SIDECAR), "w") as f:
        f.write(json.dumps(meta, indent=1))
    return meta


def _write_options(num_shards, shuffle, seed, on_error, max_pixels, max_resolution,
                   jpeg_quality, beam_runner, beam_options, num_workers):
    """``write_tfrecords``' options validated: (the plan's options + "beam_runner",
    Beam's flags)."""
    if num_shards is not None:
        num_shards = checks.check_int("num_shards", num_shards)
    shuffle = checks.check_bool("shuffle", shuffle)
    seed = config.check_seed(seed)
    if on_error is not None:
        on_error = config.check_on_error(on_error)
    # None is the default limit (as scan's): the same plan_sha256 as the command line's
    # explicit default, so that a job started by either resumes from the other
    max_pixels = checks.DEFAULT_MAX_PIXELS if max_pixels is None else checks.check_int(
        "max_pixels", max_pixels)
    max_resolution, jpeg_quality = check_resolution(max_resolution, jpeg_quality)
    beam_runner, beam_flags = checks.check_beam(beam_runner, beam_options)
    if beam_runner is not None and num_workers is not None:
        raise ValueError("`num_workers` is the single-process writer's thread count; with "
                         "`beam_runner` the runner decides the workers (e.g. beam_options="
                         "'direct_num_workers=4' or Dataflow's 'max_num_workers=100'). "
                         f"{checks.received('num_workers', num_workers)}")
    return dict(shuffle=shuffle, seed=seed, num_shards=num_shards, on_error=on_error,
                max_pixels=max_pixels, max_resolution=max_resolution,
                jpeg_quality=jpeg_quality, beam_runner=beam_runner), beam_flags


def _check_output_dir(output_dir, source) -> str:
    """``output_dir`` as a str: outside ``source``, and not a file."""
    output_dir = os.fspath(output_dir)
    checks.check_output_outside(output_dir, source)
    if read.exists(output_dir) and not read.isdir(output_dir):
        raise ValueError(f"`output_dir` must be a folder (new or existing); {output_dir!r} is "
                         f"a file. {checks.received('output_dir', output_dir)}")
    return output_dir


def _refuse_old_shards(output_dir: str) -> None:
    """Raises ValueError when ``output_dir`` already holds shards or a sidecar."""
    try:
        listing = tf.io.gfile.listdir(output_dir)
    except tf.errors.NotFoundError:  # a new folder (object stores have no empty "folders")
        listing = []
    old = [f for f in listing if f.rstrip("/").endswith(".tfrecord") or f == "dataset.json"]
    if old:
        raise ValueError(
            f"`output_dir` already holds shards ({sorted(old)[:3]}...): writing new ones "
            "beside them would mix two datasets. Use an empty folder. "
            f"Received: output_dir={output_dir!r}")


def _write_shards(idx, output_dir: str, plan_options: dict, num_skipped: int,
                  num_workers: Optional[int], progress: bool) -> list:
    """Writes the rows of ``idx`` in the plan's order, row ``j`` to shard ``j % num_shards``,
    a thread per shard; returns ``write_shard_file``'s result for each shard."""
    n = len(idx)
    order = row_order(n, plan_options["seed"]) if plan_options["shuffle"] else np.arange(n)
    num_shards = shard_count(plan_options["num_shards"], n, idx.sizes, num_skipped)
    tf.io.gfile.makedirs(output_dir)
    workers = num_workers or min(num_shards, 2 * checks.cpu_count())
    names = [SHARD_PATTERN.format(k, num_shards) for k in range(num_shards)]
    max_resolution = plan_options["max_resolution"]
    reencode = None
    if max_resolution is not None:
        reencode = resolution_reencoder(max_resolution, plan_options["jpeg_quality"],
                                        plan_options["max_pixels"])
        reencode.get_concrete_function()  # traced once, before the writer threads

    from tqdm.auto import tqdm
    bar = tqdm(total=n, unit="img", desc="write_tfrecords", disable=not progress)

    def write_shard(k):
        rows = order[k::num_shards].tolist()
        encoded = (encode_row(idx, i, reencode) for i in rows)
        return write_shard_file(output_dir, names[k], encoded, max_resolution is not None,
                                idx.mask_paths is not None, on_record=lambda: bar.update(1))

    try:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            return list(pool.map(write_shard, range(num_shards)))
    finally:
        bar.close()


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def bad_files_lines(error: BadFilesError, on_error: str) -> List[str]:
    """``error`` as lines: what was refused (in the arguments' names, e.g.
    ``on_error=raise``), then "  PATH: REASON" for each bad file."""
    n = len(error.records)
    head = (f"all {error.num_files} files are bad: nothing to write"
            if n == error.num_files and config.OnError.of(on_error).skips else
            f"{n} bad file{'s' if n > 1 else ''} of {error.num_files}; nothing written "
            "(on_error=raise; on_error=skip leaves them out)")
    return [f"{head}:"] + [f"  {r.path}: {r.reason}" for r in error.records]


def summary_lines(meta: dict, output_dir: str, seconds: float,
                  num_shards: Optional[int] = None) -> List[str]:
    """What ``write_tfrecords`` wrote (its ``meta``) to ``output_dir`` in ``seconds``: the
    bad files skipped (each "  PATH: REASON"), fewer shards than ``num_shards`` asked,
    and a last line, e.g. "wrote 9 records in 2 shards to out/ in 4.1 s (3 classes);
    3 bad files skipped (listed above and in out/dataset.json)"."""
    lines, skipped = [], meta.get("skipped") or []
    if skipped:
        lines.append(f"skipped {_count(len(skipped), 'bad file')} of "
                     f"{meta['num_examples'] + len(skipped)} (on_error=skip):")
        lines += [f"  {r['path']}: {r['reason']}" for r in skipped]
    if num_shards is not None and len(meta["shards"]) < num_shards:
        lines.append(f"wrote {len(meta['shards'])} shards, not num_shards={num_shards}: there "
                     f"are only {meta['num_examples']} files to write"
                     + (f" ({len(skipped)} bad left out)" if skipped else "")
                     + " and a shard holds at least one record (one file per shard)")
    n_classes = len(meta["class_names"] or [])
    classes = f" ({n_classes:,} class{'' if n_classes == 1 else 'es'})" if n_classes else ""
    sidecar = read.join(output_dir, SIDECAR)
    bad = (f"; {_count(len(skipped), 'bad file')} skipped (listed above and in {sidecar})"
           if skipped else "; no bad files")
    lines.append(f"wrote {_count(meta['num_examples'], 'record')} in "
                 f"{_count(len(meta['shards']), 'shard')} to {output_dir} in {seconds:.1f} s"
                 f"{classes}{bad}")
    return lines


def about_path(error: Exception, path: str) -> bool:
    """True when ``error`` (an OSError or a TensorFlow error) names ``path`` or a file in
    it: a failure to write ``write_tfrecords``' ``output_dir``, not to read a source."""
    text = " ".join(str(x) for x in (getattr(error, "filename", None),
                                     getattr(error, "filename2", None), error) if x)
    return any(p and p in text for p in {path.rstrip("/"), os.path.abspath(path)})


def list_files(files) -> List[str]:
    """Shard files from a folder, a glob or a list (sorted).

    A path that exists is read as itself, never as a pattern: a folder gives
    its ``*.tfrecord`` files (listed, not globbed, so ``shards[1]/`` never
    matches ``shards1/``), a file gives itself. Only a string that names no
    existing path and holds ``*``, ``?`` or ``[`` is a glob
    (``tf.io.gfile.glob``); to match literal ``[``, ``*`` or ``?`` in the
    folder part of a pattern, escape it as ``glob.escape`` does
    (``glob.escape("run[7]") + "/*.tfrecord"``).

    Raises:
        ValueError: no files found.
        FileNotFoundError: ``files`` is a path that does not exist.
    """
    if isinstance(files, (str, os.PathLike)):
        files = os.fspath(files)
        read.ensure_filesystem(files, in_graph=True)
        if tf.io.gfile.isdir(files):
            found = sorted(read.join(files, n.rstrip("/")) for n in tf.io.gfile.listdir(files)
                           if n.rstrip("/").endswith(".tfrecord"))
        elif tf.io.gfile.exists(files):
            found = [files]
        elif any(ch in files for ch in "*?["):
            found = sorted(tf.io.gfile.glob(files))
        else:
            raise FileNotFoundError(f"`files` does not exist (a folder of shards, a glob or a "
                                    f"list of files): {files!r}")
    else:
        found = [os.fspath(f) for f in files]
        if found:
            read.ensure_filesystem(found[0], in_graph=True)
    if not found:
        raise ValueError(f"No TFRecord files found. Received: files={files!r}")
    return found


def read_sidecar(files: Sequence[str]) -> dict:
    """The ``dataset.json`` beside the shards, restricted to ``files``.

    Raises:
        FileNotFoundError: no sidecar beside the first file.
        ValueError: a file the sidecar does not list (named).
    """
    path = read.join(read.dirname(files[0]), SIDECAR)
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


def read_shard(path) -> tf.data.Dataset:
    """One shard's serialized records (str scalars), in file order, up to its first
    unreadable record: a damaged shard (cut short, a flipped byte) ends there, on its
    own, and the other shards read in parallel with it are read whole. The records
    lost are counted by the guard (records per epoch against the sidecar) and named
    by ``shard_damage``. All in graph (``ignore_errors`` on the shard's reader)."""
    return tf.data.TFRecordDataset(path).ignore_errors()


_FAULT = re.compile(r"(truncated|corrupted) record at (\d+)")


def shard_damage(path: str, want: int) -> Optional[Tuple[str, int]]:
    """None, or why shard ``path`` holds fewer readable records than the ``want`` its
    sidecar lists, and how many are lost: ``(reason, lost)``.

    The rare diagnosis path (eager, run once per damaged dataset): the shard is
    counted up to its first unreadable record ``n`` (counting from 0), then read
    at that record to catch TensorFlow's reader error, whose text names the cause
    ("truncated record at OFFSET": the file ends inside the record's data or its
    checksum; "corrupted record at OFFSET": the CRC-32C of its length or its data
    does not match, so the bytes changed). The reader ends quietly inside a
    record's 12-byte header: bytes past the last readable record are then a
    truncated record too. A shard that ends cleanly at a record boundary is
    "shard ends early". TFRecord framing:
    https://www.tensorflow.org/tutorials/load_data/tfrecord#tfrecords_format_details
    """
    n, end = read_shard(path).reduce(
        (tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
        lambda acc, r: (acc[0] + 1, acc[1] + 16 + tf.cast(tf.strings.length(r), tf.int64)))
    n, end = int(n), int(end)
    if n >= want:
        return None
    lost = want - n
    tail = (f"{lost} of its {want} records lost (records {n}-{want - 1}; the reader cannot "
            "go past a damaged record)")
    try:
        for _ in tf.data.TFRecordDataset(path).skip(n).take(1):
            pass
    except tf.errors.OpError as e:
        m = _FAULT.search(str(e))
        if m and m.group(1) == "truncated":
            return (f"truncated record: the shard ends inside record {n} (counting from 0; "
                    f"it starts at byte {m.group(2)}), a partial copy: {tail}"), lost
        if m:
            return (f"CRC mismatch: record {n} (counting from 0; at byte {m.group(2)}) "
                    f"fails its CRC-32C checksum, its bytes changed: {tail}"), lost
        return (f"unreadable at record {n} (counting from 0): "
                f"{type(e).__name__}: {str(e).splitlines()[0][:200]}: {tail}"), lost
    size = read.file_size(path)
    if size > end:  # TensorFlow's reader ends quietly inside a record's header
        return (f"truncated record: the shard ends inside record {n} (counting from 0; "
                f"it starts at byte {end}, {size - end} of its header's 12 bytes are "
                f"there), a partial copy: {tail}"), lost
    return (f"shard ends early: it ends cleanly after {n} records where {SIDECAR} lists "
            f"{want} (record {n} on are missing), a partial copy: {lost} of its {want} "
            f"records lost (records {n}-{want - 1})"), lost


@dataclasses.dataclass
class Records:
    """Encoded images stored in TFRecord shards (``pipeline.convert.shards``), as a build input.

    Attributes:
        files: shard files (sorted).
        counts: records per shard.
        parse: ``f(serialized) -> (path, label, pre_error, contents, weight)``.
        label_dtype: tf.int64 or tf.float32; label_shape: its shape.
        num_classes: int or None.
        class_names: list of str or None.
        has_labels, has_weights: bool.
        formats: set of format names stored (for the optional decoders).
        read_py: ``f(path) -> (bytes, error)``: a record's bytes found again
            from Python, for diagnosing a failed record.
        lost_detail: in graph, names the shards that hold fewer readable
            records than written (a str scalar).
        damaged_py: ``f(files) -> [(shard, reason, lost)]``: from Python, the
            shards of ``files`` that are damaged, why, and the records lost
            (``shard_damage``; computed once per shard).
        read_shard: ``f(file) -> Dataset`` of one shard's serialized records,
            ending at its first unreadable record (``read_shard``).
        buffer_size: encoded records held for shuffling.
        has_masks: segmentation pairs: ``parse``'s label is the mask's bytes.
        mask_formats: the mask formats stored.
    """
    files: List[str]
    counts: List[int]
    parse: Callable
    label_dtype: tf.DType
    label_shape: list
    num_classes: Optional[int]
    class_names: Optional[List[str]]
    has_labels: bool
    has_weights: bool
    formats: Set[str]
    read_py: Callable
    lost_detail: Callable
    damaged_py: Callable
    read_shard: Callable = read_shard
    buffer_size: int = 1024
    has_masks: bool = False
    mask_formats: Set[str] = dataclasses.field(default_factory=set)

    @property
    def num_examples(self) -> int:
        return sum(self.counts)


def open_records(files, opts, shuffle_buffer_size: int = 1024) -> Records:
    """Describes TFRecord shards written by ``write_tfrecords`` as a build input.

    Args:
        files: a folder of shards, a glob, or a list of shard files (local or
            ``s3://``); ``dataset.json`` must sit beside them. An existing
            path is read literally (``list_files``).
        opts: validated options (``label_mode`` already resolved).
        shuffle_buffer_size: int >= 1, encoded records held for shuffling.

    Raises:
        ValueError: no files, a file not in the sidecar, (given a folder) a
            shard the sidecar lists missing from it, or labels the
            ``label_mode`` cannot encode.
        FileNotFoundError: no ``dataset.json`` beside the shards.
    """
    whole_folder = isinstance(files, (str, os.PathLike)) and read.isdir(os.fspath(files))
    given = files
    files = list_files(files)
    meta = read_sidecar(files)
    if whole_folder:
        _check_folder_complete(meta, files, given)
    kind = meta["label_kind"]
    _check_label_kind(kind, opts.label_mode)
    has_weights = bool(meta.get("has_weights")) and kind is not None
    has_masks = bool(meta.get("has_masks"))
    spec, label_dtype, label_shape = _feature_spec(meta, has_weights, has_masks)

    def parse(record):
        f = tf.io.parse_single_example(record, spec)
        label = f["label"] if "label" in f else tf.constant(0, tf.int64)
        if has_masks:
            label = f["mask"]
        weight = f["weight"] if has_weights else tf.constant(1.0)
        return f["path"], label, f["error"], f["image"], weight

    def read_py(path: str):
        """A record's bytes, found by reading the shards again (the rare diagnosis path)."""
        want = read.path_bytes([path])[0]
        for rec in tf.data.TFRecordDataset(files).ignore_errors():
            f = tf.io.parse_single_example(rec, spec)
            if f["path"].numpy() == want:
                return f["image"].numpy(), f["error"].numpy().decode()
        return b"", "record not found again in the shards"

    stored = {k for k in meta.get("formats", {}) if k and k != "unknown"}
    return Records(
        files=files, counts=meta["file_counts"], parse=parse, label_dtype=label_dtype,
        label_shape=label_shape, num_classes=meta["num_classes"],
        class_names=meta["class_names"], has_labels=kind is not None,
        has_weights=has_weights, formats=stored, read_py=read_py,
        lost_detail=lambda: short_shards(files, meta["file_counts"]),
        damaged_py=_damage_memo(files, meta["file_counts"]),
        buffer_size=shuffle_buffer_size, has_masks=has_masks,
        mask_formats={k for k in meta.get("mask_formats", {}) if k and k != "unknown"})


def _check_folder_complete(meta: dict, files: List[str], given) -> None:
    """Raises ValueError when a shard the sidecar lists is missing from the folder read."""
    listed = [sh["file"] for sh in meta["shards"]]
    missing = sorted(set(listed) - {os.path.basename(f) for f in files})
    if missing:
        raise ValueError(
            f"{len(missing)} of the {len(listed)} shards that dataset.json lists are "
            f"missing from the folder: {missing[:5]}; their records would be lost. "
            "Pass the shards to read as a list to read a subset on purpose. "
            f"Received: files={os.fspath(given)!r}")


def _check_label_kind(kind: Optional[str], label_mode: Optional[str]) -> None:
    """Raises ValueError when ``label_mode`` cannot encode the shards' ``kind`` of labels."""
    if kind is not None and label_mode is not None and (
            (kind == "int") != (label_mode in ("int", "categorical", "binary"))):
        raise ValueError(f"The shards hold {kind} labels, which label_mode "
                         f"{label_mode!r} cannot encode. Received: label_mode="
                         f"{label_mode!r}")


def _feature_spec(meta: dict, has_weights: bool, has_masks: bool):
    """(the records' ``tf.io.parse_single_example`` features, label dtype, label shape)."""
    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "path": tf.io.FixedLenFeature([], tf.string),
        "error": tf.io.FixedLenFeature([], tf.string),
    }
    kind = meta["label_kind"]
    label_dtype, label_shape = tf.int64, []
    if kind == "int":
        spec["label"] = tf.io.FixedLenFeature([], tf.int64)
    elif kind == "float":
        spec["label"] = tf.io.FixedLenFeature([], tf.float32)
        label_dtype = tf.float32
    elif kind == "vector":
        spec["label"] = tf.io.FixedLenFeature([meta["label_size"]], tf.float32)
        label_dtype, label_shape = tf.float32, [meta["label_size"]]
    if has_weights:
        spec["weight"] = tf.io.FixedLenFeature([], tf.float32)
    if has_masks:  # segmentation pairs: the plan's label is the mask's encoded bytes
        spec["mask"] = tf.io.FixedLenFeature([], tf.string)
    return spec, label_dtype, label_shape


def _damage_memo(files, counts) -> Callable:
    """``f(subset) -> [(shard, reason, lost)]``: ``shard_damage`` for the shards of
    ``subset`` (of ``files``) that are damaged, each shard diagnosed once."""
    want = dict(zip(files, counts))
    seen: dict = {}

    def damaged(subset):
        out = []
        for fl in subset:
            if fl not in seen:
                seen[fl] = shard_damage(fl, int(want[fl]))
            if seen[fl] is not None:
                out.append((fl,) + seen[fl])
        return out

    return damaged


def stored_label_mode(files) -> Optional[str]:
    """The label mode the shards' labels default to ("int", "float", "multi_hot" or None)."""
    meta = read_sidecar(list_files(files))
    return {"int": "int", "float": "float", "vector": "multi_hot", None: None}[
        meta["label_kind"]]
