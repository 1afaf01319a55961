"""Guard: which file failed, and why; the on_error policy; the record of skipped files.

How a failure is attributed to its file without per-element exception
handling (a nested dataset per element cost ~30% here): plan elements travel
in chunks of ``CHUNK``; each element gets its position in the epoch and the
keys of its own and the previous chunk (one ``scan`` call per chunk), and an
end-of-epoch sentinel follows the last element. The parallel map (decode,
transform, augment) keeps order; ``ignore_errors`` drops an element whose map
raised; a vectorised check on chunks (or on the user's batches) sees the gap
in positions and looks the missing keys up. Those files are raised
(``on_error="raise"``) or recorded and skipped (``"skip"``), with the reason
found by ``diagnose``: it reads the file again and runs the decode and the
transform stages eagerly, so a failure after decoding (e.g. a resize) is
named as such and not blamed on the file's data. A JPEG without its
end-of-image marker is named from its bytes, without that second decode (see
``diagnose``); each bad file is diagnosed once per dataset. An expected element count
catches elements lost upstream of the map (a corrupt TFRecord shard). The
check also counts the elements it delivers: with ``on_error="skip"``, an
epoch that delivered none (every file bad) fails at its sentinel.
Besides the map, one function call per chunk runs on the consumer thread.
"""

from __future__ import annotations

import collections
import re
import sys
import threading
from typing import Callable, List, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from pipeline.decode import bmp as bmp_lib
from pipeline.decode import image as decode_lib
from pipeline.decode import formats
from pipeline.decode import jpegscan
from pipeline.sources import read

# Names of the rare-path Python ops of the guard; pipeline.deliver.resume treats
# them as checkpoint-safe (they only record or explain, they hold no state).
RECORDER_OP_NAME = "pipeline_skip_recorder"
DIAGNOSE_OP_NAME = "pipeline_diagnose"
CHUNK = 64
SENTINEL = "\x00end-of-epoch"
# Ends a bad file's error with on_error="raise": how to skip, how to list them all first
# (no quotes: TensorFlow escapes them in an assertion's message).
RAISE_HINT = (". To skip bad files instead (each is recorded in pipeline.errors(ds)), pass "
              "on_error=skip; to list every bad file before training, run "
              "pipeline.scan(SOURCE) or python -m pipeline scan SOURCE")

ErrorRecord = collections.namedtuple("ErrorRecord", ["path", "reason"])
ErrorRecord.__doc__ = """A skipped file: ``path`` (str, as indexed) and ``reason`` (str), e.g.
"truncated JPEG (no end-of-image marker)" or "header claims 60000x60000 pixels > max_pixels=..."."""


class ErrorBudgetExceeded(RuntimeError):
    """More files were bad than ``max_errors`` allows.

    Raised by ``ErrorLog.add``. Inside a dataset (the rare bad-file path), the
    guard turns it into an in-graph assertion: a caller iterating the dataset
    receives ``tf.errors.InvalidArgumentError`` whose message is one line,
    "pipeline: ErrorBudgetExceeded: N bad files of M, over the budget
    max_errors=... (K allowed). Reasons: ... First files: ... The full list:
    pipeline.errors(dataset)."
    """


# Skipped files logged one by one per dataset; the rest are counted (``ErrorLog.flush``).
LOG_LIMIT = 10


class ErrorLog:
    """Thread-safe record of the files skipped under ``on_error="skip"``.

    Each bad file is recorded once (the first time it is met), with its path
    and reason. The first ``LOG_LIMIT`` (10) are logged as they happen, one
    warning each ("pipeline: skipped PATH: REASON"); the others are counted,
    and ``flush`` (called at the end of each epoch) logs one warning with
    their number. ``records()`` (``pipeline.errors``) lists every one.

    Args:
        num_files: int, files in the dataset (for a fractional budget).
        max_errors: None (no budget), an int count, or a float fraction in
            [0, 1) of ``num_files``. When more distinct files than that are bad,
            the run fails with ``ErrorBudgetExceeded`` and a summary.
    """

    def __init__(self, num_files: int = 0, max_errors: Optional[float] = None):
        self._lock = threading.Lock()
        self._records: "collections.OrderedDict[str, str]" = collections.OrderedDict()
        self.num_files = num_files
        self.max_errors = max_errors
        self._exceeded_message = ""
        self._unlogged = 0  # recorded since the last flush, past LOG_LIMIT

    @property
    def allowed(self) -> Optional[int]:
        """Bad files allowed (int), or None without a budget."""
        if self.max_errors is None:
            return None
        if isinstance(self.max_errors, float):
            return int(self.max_errors * self.num_files)
        return int(self.max_errors)

    def add(self, path: str, reason: str) -> None:
        """Records a bad file; raises ``ErrorBudgetExceeded`` past the budget."""
        with self._lock:
            # Once the budget is exceeded the run is over: elements cancelled
            # while the iterator is torn down must not be recorded as bad files.
            if self._exceeded_message:
                raise ErrorBudgetExceeded(self._exceeded_message)
            if path in self._records:
                return
            self._records[path] = reason
            count = len(self._records)
            allowed = self.allowed
            exceeded = allowed is not None and count > allowed
            self._unlogged += count > LOG_LIMIT
        if count <= LOG_LIMIT:
            logging.warning("pipeline: skipped %s: %s", read.shown(path), read.shown(reason))
        if exceeded:
            message = (f"pipeline: {count} bad files of {self.num_files}, over the budget "
                       f"max_errors={self.max_errors!r} ({allowed} allowed). "
                       f"{self.summary(3)} The full list: pipeline.errors(dataset).")
            with self._lock:
                self._exceeded_message = message
            raise ErrorBudgetExceeded(message)

    def flush(self) -> None:
        """Logs one warning for the files recorded since the last flush and not logged
        one by one (past the first ``LOG_LIMIT``), if any: how many, the total, and
        that ``pipeline.errors(dataset)`` lists them all."""
        with self._lock:
            unlogged, self._unlogged = self._unlogged, 0
            count = len(self._records)
        if unlogged:
            logging.warning("pipeline: skipped %d more bad file(s), not logged one by one "
                            "(only the first %d are); %d skipped in all: "
                            "pipeline.errors(dataset) lists every one with its reason",
                            unlogged, LOG_LIMIT, count)

    def __contains__(self, path: str) -> bool:
        with self._lock:
            return path in self._records

    def records(self) -> List[ErrorRecord]:
        with self._lock:
            return [ErrorRecord(p, r) for p, r in self._records.items()]

    def summary(self, limit: int = 10) -> str:
        """The reasons by count and the first ``limit`` files, one line (``summarize``)."""
        return summarize(self.records(), limit)

    def __len__(self):
        with self._lock:
            return len(self._records)


def summarize(records: List[ErrorRecord], limit: int = 10) -> str:
    """One line for bad-file records: the reasons by count (the ``limit`` most
    common) and the first ``limit`` files with their reasons, in order."""
    by_reason = collections.Counter(r.reason for r in records)
    lines = [f"{n} x {reason}" for reason, n in by_reason.most_common(limit)]
    first = "; ".join(f"{r.path}: {r.reason}" for r in records[:limit])
    more = f"; ... and {len(records) - limit} more" if len(records) > limit else ""
    return f"Reasons: {', '.join(lines)}. First files: {first}{more}."


def errors(dataset) -> List[ErrorRecord]:
    """Files skipped so far by a dataset built with ``on_error="skip"``.

    With the tf.data service (``service="grpc://..."``) the files are decoded, and
    skipped, on the workers, which run no Python: each skipped file is a line on that
    worker's stderr, ``pipeline: skipped PATH: REASON`` (each time it is met, every
    epoch), and this list, on the client, stays empty.

    Args:
        dataset: a dataset returned by a ``pipeline`` factory, or the
            distributed dataset ``pipeline.distribute_dataset`` returns (the
            records of its input pipelines built in this process, together).

    Returns:
        list of ``ErrorRecord(path, reason)`` (str, str), in the order met;
        each bad file appears once however many epochs ran.

    Raises:
        ValueError: ``dataset`` was not made by a ``pipeline`` factory.
    """
    logs = getattr(dataset, "pipeline_error_logs", None)  # distribute_dataset's
    if logs is not None:
        out, seen = [], set()
        for log in list(logs):
            for r in log.records():
                if r.path not in seen:
                    seen.add(r.path)
                    out.append(r)
        return out
    log = getattr(getattr(dataset, "pipeline_built", None), "error_log", None)
    if log is None:
        raise ValueError(
            "pipeline.errors() needs a dataset returned by a pipeline factory "
            "(transformations such as .map() return a new dataset without it). "
            f"Received: dataset={type(dataset).__name__}")
    return log.records()


_TF_NOISE = re.compile(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:[^\]]+\]( name:\s*\S*)?|"
                       r"\s*\[\[\{\{node [^]]*\]\]")


# tf.debugging.Assert's message: "Expected 'tf.Tensor(False, ...)' to be true. Summarized
# data: b'<the message>'"; the message alone is the reason.
_ASSERT_DATA = re.compile(r"Summarized data: b?(['\"])(.*?)\1")


def clean_message(text: str, limit: int = 200) -> str:
    """An op's error message without TensorFlow's function/op annotations, first line;
    of a failed ``tf.debugging.Assert``, its data (the message) alone."""
    found = _ASSERT_DATA.search(text or "")
    if found:
        text = found.group(2)
    text = _TF_NOISE.sub(" ", text or "").strip()
    first = text.splitlines()[0].strip() if text else ""
    return first[:limit].rstrip(" :")


TRUNCATED_JPEG = "truncated JPEG (no end-of-image marker)"


def unsupported_jpeg(contents: bytes, kind: str) -> str:
    """The reason for a valid JPEG of a variant TensorFlow's decoder does not read
    (``formats.jpeg_unsupported``'s ``kind``), with what reads it: Pillow when
    its decoder does (tried here, rare path), else a decoder that does."""
    try:
        decode_lib.pillow_image(contents)
        reader = ("Pillow reads it: convert it to PNG or an 8-bit baseline JPEG, e.g. "
                  "PIL.Image.open(path).save(new_path)")
    except Exception:  # noqa: BLE001 - any failure means Pillow cannot read it here
        reader = ("Pillow cannot read it either: convert it to 8-bit with a decoder that "
                  "reads it (libjpeg-turbo 3 djpeg, ImageMagick, GDAL)")
    return (f"unsupported JPEG variant: {kind}, a valid JPEG that TensorFlow's decoder "
            f"does not read; {reader}")


def diagnose(contents: bytes, read_error: str, decode_fn: Callable, finish_fn: Callable) -> str:
    """Why an element failed, found by running its stages again eagerly (rare path).

    A JPEG that does not end with its end-of-image marker (FF D9) is named
    ``TRUNCATED_JPEG`` from its bytes, without decoding it again: the map's
    decode of it has failed already, and each decode of a truncated JPEG makes
    TensorFlow log "Premature end of JPEG data" (libjpeg adds lines of its own),
    so a second decode would show them twice. (Such a file that still decodes,
    all its rows being there, fails only in a later stage; it is named
    truncated all the same.) Any other file that fails in its decoder is
    decoded once more, here: that decode tells a decode failure from a later
    stage's and gives the decoder's message, so libjpeg's lines about a
    corrupt JPEG show twice.

    Args:
        contents: the file's bytes.
        read_error: "" or why the file could not be read.
        decode_fn: ``f(contents tensor) -> (image, reason)``, the decode stage.
        finish_fn: ``f(image) -> image``, the stages after decoding (resize,
            augment).

    Returns:
        The reason (str): the read error; the decoder's own reason; a
        diagnosis of corrupt data (``pipeline.decode.image.diagnose``) when the
        decoder raised; or, when the file decodes, which later stage failed
        on the decoded image and its size.
    """
    if read_error:
        return read_error
    if not contents:
        return "empty file (0 bytes)"
    if contents[:3] == b"\xff\xd8\xff" and not contents.endswith(b"\xff\xd9"):
        return TRUNCATED_JPEG  # as decode.diagnose names it, from the bytes alone
    c = tf.constant(contents)
    if contents[:3] == b"\xff\xd8\xff":
        cut = jpegscan.cut_reason(contents)  # cut in its scan data, an EOI after the cut
        if cut:
            return cut
        kind = formats.jpeg_unsupported(contents)  # 12-bit, lossless, hierarchical
        if kind:
            return unsupported_jpeg(contents, kind)
    try:
        image, reason = decode_fn(c)
        reason = reason.numpy().decode("utf-8", "replace")
    except Exception as e:  # noqa: BLE001 - the decoder's failure is the answer
        if formats.sniff_bytes(contents[:formats.SIGNATURE_BYTES]) == "bmp":
            why = bmp_lib.describe_problem(contents)  # the header's values, in words
            if why:
                return why
        fmt = decode_lib.sniff(c)
        why = decode_lib.diagnose(c, fmt).numpy().decode("utf-8", "replace")
        if why.startswith("corrupt"):
            detail = clean_message(getattr(e, "message", None) or str(e)) or type(e).__name__
            detail = detail.removeprefix("BMP: ")  # pipeline.decode.bmp's assertions (RLE data)
            why = why[:-1] + f": {detail})" if why.endswith(")") else why
            if re.search(r"unsupported|not supported|not implemented", detail, re.I):
                # a valid file of a variant the decoder does not handle, not bad data
                name = why.split(" ")[1]
                why = f"unsupported {name} variant (the decoder says: {detail})"
        return why
    if reason:
        return reason
    fmt = formats.sniff_bytes(contents[:formats.SIGNATURE_BYTES]) or "image"
    h, w = int(image.shape[0]), int(image.shape[1])
    try:
        finish_fn(image)
    except Exception as e:  # noqa: BLE001
        detail = clean_message(getattr(e, "message", None) or str(e)) or type(e).__name__
        return (f"the file decodes ({fmt.upper()} {w}x{h}), but the resize/augment stage failed "
                f"on it: {detail}")
    return "the element failed after decoding, and not again when retried (transient?)"


class Source:
    """What the guarded map reads, and how to name and re-read a failed element.

    Plan elements are ``(key, label, pre_error, contents, weight)``. For files,
    ``key`` is the row (int64) of the path table and ``contents`` is empty
    (the map reads the file); for records (TFRecord shards), ``key`` is the
    stored path (str) and ``contents`` the encoded bytes.

    Args:
        paths: the path table (list of str), or None for records.
        why_failed_py: ``f(path) -> str``: the reason a file failed, found
            from Python (``diagnose``).
    """

    def __init__(self, paths: Optional[List[str]], why_failed_py: Callable):
        self.records = paths is None
        self.paths = paths
        self.table = None if paths is None else tf.constant(read.path_bytes(paths), tf.string)
        self.empty_key = tf.constant("" if self.records else -1,
                                     tf.string if self.records else tf.int64)
        self.why_failed_py = why_failed_py

    def name(self, key):
        """In graph: the path of a key (str tensor, any shape)."""
        if self.records:
            return key
        return tf.gather(self.table, tf.maximum(key, 0))

    def name_py(self, key) -> str:
        if self.records:
            return key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else str(key)
        return self.paths[max(int(key), 0)]


def chunked(plan, sentinel, seeds, empty_key):
    """Plan -> elements ``(pos, window_keys, *plan_element, seed)`` (see the module doc)."""
    K = CHUNK
    ds = plan.concatenate(tf.data.Dataset.from_tensors(sentinel)).batch(K)
    ds = tf.data.Dataset.zip(ds, seeds.batch(K))

    def remember(state, item):
        index, prev = state
        chunk, seeds_ = item
        keys = chunk[0]
        b = tf.shape(keys, out_type=tf.int64)[0]
        padded = tf.concat([keys, tf.fill([K - b], empty_key)], 0)
        padded.set_shape([K])  # the initial state's shape: Dataset.scan traces this once
        window = tf.concat([prev, padded], 0)  # positions (index-1)*K ... (index+1)*K-1
        pos = index * K + tf.range(b)
        return (index + 1, padded), (pos, tf.tile(window[None], [b, 1])) + tuple(chunk) + (
            seeds_[:b],)

    return ds.scan((tf.constant(0, tf.int64), tf.fill([K], empty_key)),
                   tf.autograph.experimental.do_not_convert(remember)).unbatch()


def initial_state():
    """The start state of ``check_fn``'s ``scan``: no position seen, none delivered."""
    return (tf.constant(-1, tf.int64), tf.constant(0, tf.int64))


def check_fn(opts, error_log: ErrorLog, source: Source, expected: Optional[int],
             lost_detail: Optional[Callable], damaged_py: Optional[Callable] = None):
    """The ``scan`` function that applies the on_error policy to a chunk of mapped elements.

    Elements are ``(image, label, weight, key, pos, window, reason)``; the state
    is ``(last position, elements delivered this epoch)``, initially ``(-1, 0)``
    (``initial_state``). With ``on_error="skip"``, an epoch whose every element
    was bad fails at its end (the sentinel) instead of ending empty; with
    several input pipelines (``input_context``), one whose share was all bad
    prints a warning instead (the others may deliver).

    The graph holds the common path only: a few vectorised ops find whether
    this chunk lost or refused a file, lost elements upstream, or ends an
    empty epoch. Where Python can run, everything past that (naming the
    files, the messages, the record of skipped files) is one Python function
    (``rare_path_py``), so the guard is quick to build; on tf.data service
    workers it is built in graph (``rare_path_graph``).
    """
    raise_mode = opts.on_error.raises
    python_ok = not opts.service  # py_function cannot run on service workers
    rare_path = rare_path_py if python_ok else rare_path_graph
    rare = rare_path(opts, error_log, source, expected, lost_detail, damaged_py)

    def check(state, batch):
        last, delivered = state
        image, y, weight, key, pos, window, reason = batch
        prev = tf.concat([tf.reshape(last, [1]), pos[:-1]], 0)
        sentinel_ = tf.equal(reason, SENTINEL)
        bad = tf.logical_and(tf.strings.length(reason) > 0, tf.logical_not(sentinel_))
        keep = tf.logical_not(tf.logical_or(bad, sentinel_))
        delivered = delivered + tf.reduce_sum(tf.cast(keep, tf.int64))
        odd = tf.reduce_any(pos - prev > 1) | tf.reduce_any(bad)  # a file lost or refused
        if expected is not None:
            # The sentinel's position is the number of elements the plan gave:
            # fewer than expected means a read error upstream was swallowed.
            odd = odd | tf.reduce_any(sentinel_ & (pos != expected))
        if not raise_mode:
            # At the end of the epoch (the sentinel, whose position is the number of
            # elements the plan gave): none delivered out of some is a failure.
            odd = odd | (tf.reduce_any(sentinel_ & (pos > 0)) & tf.equal(delivered, 0))
            if python_ok:
                # Once an epoch: one line for the skipped files not logged one by one.
                odd = odd | tf.reduce_any(sentinel_)
        keep = tf.cond(odd, lambda: rare(keep, last, delivered, key, pos, window, reason),
                       lambda: keep)
        out = (image, y, weight, key)

        def kept():
            rows = tf.reshape(tf.where(keep), [-1])
            return tuple(tf.gather(t, rows) for t in out)

        return (pos[-1], delivered), tf.cond(tf.reduce_all(keep), lambda: out, kept)

    return check


def _nothing_delivered_head(count) -> str:
    return (f"pipeline: every file of this epoch was bad ({count} of {count}), so it delivered "
            "nothing: on_error=skip skipped them all.")


def _full_list_hint(error_log: ErrorLog) -> str:
    return f"{error_log.summary(3)} The full list: pipeline.errors(dataset)."


def _pipeline_note(opts) -> str:
    return (f" (input pipeline {opts.pipeline_id} of {opts.num_pipelines}: a warning, the "
            "others may deliver)")


def _lost_upstream_head(lost, expected) -> str:
    return (f"pipeline: {lost} element(s) of {expected} were lost while reading the source "
            "before decoding")


def _exceeded(e: ErrorBudgetExceeded) -> str:
    return f"pipeline: ErrorBudgetExceeded: {str(e)[len('pipeline: '):]}"


def rare_path_py(opts, error_log: ErrorLog, source: Source, expected: Optional[int],
                 lost_detail: Optional[Callable], damaged_py: Optional[Callable] = None):
    """The rare path of ``check_fn`` where Python runs: one ``tf.py_function``
    (``RECORDER_OP_NAME``) that, in this order, reports elements lost upstream
    (raised, or recorded: one entry per damaged TFRecord shard that ``damaged_py``
    names, ``[(shard, reason, records lost)]``, when their losses add up to the
    count, else one "<source>" entry), names the files of the chunk that were
    lost (the decoder raised: diagnosed by ``Source.why_failed_py``, once) or
    refused (their reason) and raises the first one or records them all, and
    fails an epoch that delivered nothing (``on_error="skip"``). It returns ""
    or the failure, which an in-graph assertion raises."""
    raise_mode = opts.on_error.raises
    K = CHUNK
    big = 2 ** 62

    def name_b(k) -> bytes:
        return read.shown(source.name_py(k)).encode()

    def lost_files(prev, pos, window):
        """Keys and positions of every missing position of the chunk that the
        window names (those further back are only counted)."""
        keys, where = [], []
        for i in range(len(pos)):
            for q in range(int(prev[i]) + 1, int(pos[i])):
                j = q - (int(pos[i]) // K - 1) * K
                if j >= 0:
                    keys.append(window[i][j])
                    where.append(q)
        return keys, where

    def run(last, delivered, key, pos, window, reason):
        last, delivered = int(last.numpy()), int(delivered.numpy())
        key, pos = key.numpy(), pos.numpy()
        window, reason = window.numpy(), reason.numpy().tolist()
        prev = np.concatenate([[last], pos[:-1]])
        missing = pos - prev - 1
        sentinel_ = np.array([r == SENTINEL.encode() for r in reason])
        bad = np.array([len(r) > 0 for r in reason]) & ~sentinel_
        if expected is not None and np.any(sentinel_ & (pos != expected)):
            lost = int(np.max(np.where(sentinel_, expected - pos, 0)))
            damaged = damaged_py() if damaged_py is not None else []
            if damaged and sum(d[2] for d in damaged) == lost:
                # Each damaged shard lost exactly its records past the damage
                # (``shards.read_shard``): one entry per shard, named.
                if raise_mode:
                    path, why, _ = damaged[0]
                    more = (f"; {len(damaged) - 1} more damaged shard(s): "
                            + "; ".join(f"{p} ({w})" for p, w, _ in damaged[1:])
                            if len(damaged) > 1 else "")
                    return read.shown(f"pipeline: cannot read TFRecord shard {path} "
                                      f"({why}){more}").encode()
                try:
                    for path, why, _ in damaged:
                        error_log.add(path, why)
                except ErrorBudgetExceeded as e:
                    return _exceeded(e)
            else:
                m = _lost_upstream_head(lost, expected)
                if damaged:
                    m += "; damaged: " + "; ".join(f"{p} ({w})" for p, w, _ in damaged)
                elif lost_detail is None:
                    m += " (e.g. a corrupt TFRecord shard)"
                else:
                    m += "; damaged: " + lost_detail().numpy().decode("utf-8", "replace")
                if raise_mode:
                    return read.shown(m).encode()
                try:
                    error_log.add("<source>", m)
                except ErrorBudgetExceeded as e:
                    return _exceeded(e)
        if np.any(missing > 0) or np.any(bad):
            lost_keys, lost_pos = lost_files(prev, pos, window)
            if raise_mode:
                first_lost = min(lost_pos + [big])
                bad_pos = np.where(bad, pos, big)
                if first_lost < int(np.min(bad_pos)):
                    k = lost_keys[int(np.argmin(lost_pos))]
                    why = source.why_failed_py(source.name_py(k)).encode()
                else:
                    i = int(np.argmin(bad_pos))
                    k, why = key[i], reason[i]
                return (b"pipeline: cannot load file " + name_b(k) + b" (" + why + b")"
                        + RAISE_HINT.encode())
            count = int(np.sum(missing)) if np.any(missing > 0) else 0
            exceeded = _record(error_log, source, lost_keys, count,
                               [k for k, b in zip(key.tolist(), bad) if b],
                               [r for r, b in zip(reason, bad) if b])
            if exceeded:
                return exceeded
        if not raise_mode and np.any(sentinel_):
            error_log.flush()
        if not raise_mode:
            count = int(np.max(np.where(sentinel_, pos, -1)))
            if count > 0 and delivered == 0:
                m = f"{_nothing_delivered_head(count)} {_full_list_hint(error_log)}"
                if opts.num_pipelines <= 1:
                    return m
                print(m + _pipeline_note(opts), file=sys.stderr, flush=True)
        return ""

    def rare(keep, last, delivered, key, pos, window, reason):
        failed = tf.py_function(run, [last, delivered, key, pos, window, reason], tf.string,
                                name=RECORDER_OP_NAME)
        failed.set_shape([])
        with tf.control_dependencies([tf.debugging.Assert(
                tf.equal(tf.strings.length(failed), 0), [failed])]):
            return tf.identity(keep)

    return rare


def _record(error_log: ErrorLog, source: Source, keys, count: int, bad_keys, bad_reasons) -> str:
    """Records the bad files of a chunk (``on_error="skip"``); "" or the exceeded
    budget's message. A file whose decoder raised is diagnosed once (a decode), not
    every epoch."""
    try:
        for k in keys:
            p = source.name_py(k)
            if p not in error_log:
                error_log.add(p, source.why_failed_py(p))
        if count > len(keys):
            error_log.add(f"<{count - len(keys)} unnamed file(s)>",
                          "decoder failed; more files in a row failed than "
                          f"the {CHUNK}-file window can name")
        for k, r in zip(bad_keys, bad_reasons):
            error_log.add(source.name_py(k), r.decode("utf-8", "replace"))
    except ErrorBudgetExceeded as e:
        return _exceeded(e)
    return ""


def rare_path_graph(opts, error_log: ErrorLog, source: Source, expected: Optional[int],
                    lost_detail: Optional[Callable], damaged_py: Optional[Callable] = None):
    """The rare path of ``check_fn`` in graph, for tf.data service workers (no
    Python): the same checks as ``rare_path_py``; a failure is raised by an
    in-graph assertion, and skipped files are reported on the worker's stderr
    (``pipeline.errors(ds)`` stays empty)."""
    del error_log, damaged_py  # no Python here
    raise_mode = opts.on_error.raises
    K = CHUNK

    def why(key):
        if source.records:
            return tf.constant("the decoder failed on it")
        contents = tf.io.read_file(source.name(key))
        return decode_lib.diagnose(contents, decode_lib.sniff(contents))

    def rare(keep, last, delivered, key, pos, window, reason):
        prev = tf.concat([tf.reshape(last, [1]), pos[:-1]], 0)
        missing = pos - prev - 1                       # files lost before each element
        sentinel_ = tf.equal(reason, SENTINEL)
        bad = tf.logical_and(tf.strings.length(reason) > 0, tf.logical_not(sentinel_))
        any_lost = tf.reduce_any(missing > 0)
        if expected is not None:
            short = tf.reduce_any(sentinel_ & (pos != expected))
            lost_upstream = tf.reduce_max(tf.where(sentinel_, expected - pos, 0))

            def message():  # only built when elements were lost
                m = tf.strings.format(
                    "pipeline: {} element(s) of {} were lost while reading the source before "
                    "decoding", (lost_upstream, expected))
                if lost_detail is None:
                    return tf.strings.join([m, " (e.g. a corrupt TFRecord shard)"])
                # Records read in parallel with a damaged shard can be lost with it:
                # the count can exceed what the damaged shards alone held.
                return tf.strings.join([m, "; damaged: ", lost_detail()])

            if raise_mode:
                def report():
                    with tf.control_dependencies([tf.debugging.Assert(False, [message()])]):
                        return tf.constant(True)
            else:
                def report():
                    with tf.control_dependencies([tf.print(message(), output_stream=sys.stderr)]):
                        return tf.constant(True)
            ok = tf.cond(short, report, lambda: tf.constant(True))
            with tf.control_dependencies([ok]):
                keep = tf.identity(keep)

        def lost():
            """Keys and positions of every missing position in this chunk, and the count."""
            q = tf.ragged.range(prev + 1, pos)          # missing positions per element
            i = q.value_rowids()
            j = q.flat_values - (tf.gather(pos, i) // K - 1) * K
            named = j >= 0
            keys = tf.gather_nd(window, tf.stack([i, tf.maximum(j, 0)], 1))
            return tf.boolean_mask(keys, named), tf.boolean_mask(q.flat_values, named), \
                tf.reduce_sum(missing)

        if raise_mode:
            def fail():
                lost_keys, lost_pos, _ = lost()
                big = tf.constant(2 ** 62, tf.int64)
                first_lost = tf.reduce_min(tf.concat([lost_pos, [big]], 0))
                first_bad = tf.reduce_min(tf.where(bad, pos, big))

                def lost_msg():
                    k = lost_keys[tf.argmin(lost_pos)]
                    return tf.strings.join(["pipeline: cannot load file ", source.name(k), " (",
                                            why(k), ")", RAISE_HINT])

                def bad_msg():
                    i = tf.argmin(tf.where(bad, pos, big))
                    return tf.strings.join(["pipeline: cannot load file ", source.name(key[i]),
                                            " (", reason[i], ")", RAISE_HINT])

                msg = tf.cond(first_lost < first_bad, lost_msg, bad_msg)
                with tf.control_dependencies([tf.debugging.Assert(False, [msg])]):
                    return tf.identity(keep)
        else:
            def worker_lines(lost_keys, lost_pos, count, bad_keys, bad_reasons):
                """In graph (tf.data service workers run no Python): one line per
                skipped file, in epoch order, as ``ErrorLog.add`` logs it."""
                lost_reasons = tf.map_fn(why, lost_keys, fn_output_signature=tf.string)
                order = tf.argsort(tf.concat([tf.boolean_mask(pos, bad), lost_pos], 0))
                names = tf.gather(tf.concat([source.name(bad_keys), source.name(lost_keys)],
                                            0), order)
                reasons = tf.gather(tf.concat([bad_reasons, lost_reasons], 0), order)
                lines = tf.strings.join(["pipeline: skipped ", names, ": ", reasons])
                unnamed = count - tf.size(lost_keys, out_type=tf.int64)
                lines = tf.concat([lines, tf.cond(unnamed > 0, lambda: tf.reshape(
                    tf.strings.format(
                        "pipeline: skipped <{} unnamed file(s)>: decoder failed; more files in "
                        "a row failed than the {}-file window can name", (unnamed, K)), [1]),
                    lambda: tf.zeros([0], tf.string))], 0)
                return tf.strings.reduce_join(lines, separator="\n")

            def fail():
                lost_keys, lost_pos, count = tf.cond(any_lost, lost, lambda: (
                    tf.zeros([0], source.empty_key.dtype), tf.zeros([0], tf.int64),
                    tf.constant(0, tf.int64)))
                bad_keys, bad_reasons = tf.boolean_mask(key, bad), tf.boolean_mask(reason, bad)
                # Service workers: each skip is a line on the worker's stderr;
                # pipeline.errors(ds) on the client stays empty.
                done = tf.print(worker_lines(lost_keys, lost_pos, count, bad_keys,
                                             bad_reasons), output_stream=sys.stderr)
                with tf.control_dependencies([done]):
                    return tf.identity(keep)

        keep = tf.cond(any_lost | tf.reduce_any(bad), fail, lambda: keep)
        if not raise_mode:
            count = tf.reduce_max(tf.where(sentinel_, pos, -1))
            empty = (count > 0) & tf.equal(delivered, 0)

            def fail_empty():
                head = tf.strings.format(
                    "pipeline: every file of this epoch was bad ({} of {}), so it delivered "
                    "nothing: on_error=skip skipped them all.", (count, count))
                m = tf.strings.join(
                    [head, " The reasons are on the tf.data service workers' stderr."])
                if opts.num_pipelines > 1:
                    # One share of several (input_context): the others may deliver, so
                    # this pipeline's empty epoch is a warning, not a failure.
                    done = tf.print(tf.strings.join([m, _pipeline_note(opts)]),
                                    output_stream=sys.stderr)
                else:
                    done = tf.debugging.Assert(False, [m])
                with tf.control_dependencies([done]):
                    return tf.identity(keep)

            keep = tf.cond(empty, fail_empty, lambda: keep)
        return keep

    return rare
