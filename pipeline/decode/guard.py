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

The rare path (a chunk in which something failed) exists twice because tf.data service
workers run no Python: one ``tf.py_function`` where Python runs (``PythonRarePath``, the
default: quick to build), the same in graph on service workers (``GraphRarePath``). The
rule they follow is written once: ``Chunk`` decides (which files were lost or refused,
which one fails first, the counts), with numpy's or TensorFlow's ops, ``RarePath.steps``
orders the checks, and the messages' words are shared.
"""

from __future__ import annotations

import collections
import functools
import re
import sys
import threading
import types
from typing import Callable, List, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from pipeline import stack
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
    common, then how many files have another reason) and the first ``limit`` files
    with their reasons, in order."""
    by_reason = collections.Counter(r.reason for r in records)
    shown = by_reason.most_common(limit)
    lines = [f"{n} x {reason}" for reason, n in shown]
    if len(by_reason) > len(shown):
        left = len(records) - sum(n for _, n in shown)
        lines.append(f"{left} x {len(by_reason) - len(shown)} other reason(s)")
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
# A Python object's repr with its address (Pillow: "cannot identify image file
# <_io.BytesIO object at 0x7f...>"): it would make each file's reason differ from run to run
_OBJECT_REPR = re.compile(r"\s*<[\w.]+ object at 0x[0-9a-fA-F]+>")


def clean_message(text: str, limit: int = 200) -> str:
    """An op's error message without TensorFlow's function/op annotations or Python
    object reprs with their addresses, first line; of a failed ``tf.debugging.Assert``,
    its data (the message) alone."""
    found = _ASSERT_DATA.search(text or "")
    if found:
        text = found.group(2)
    text = _OBJECT_REPR.sub("", _TF_NOISE.sub(" ", text or "")).strip()
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
        return _decoder_failure(contents, c, e)
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


def _decoder_failure(contents: bytes, c, e: Exception) -> str:
    """Why the decoder raised ``e`` on ``contents`` (``c``: the same bytes, a tensor), for
    ``diagnose``: a BMP header's problem in words, else the in-graph diagnosis, a
    corrupt file's with the decoder's message, and a valid file of a variant the
    decoder does not handle named as such."""
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

    return stack.scan_on_its_device(ds, (tf.constant(0, tf.int64), tf.fill([K], empty_key)),
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

    The graph holds the common path only: a few vectorised ops (``Chunk``) find
    whether any check of the rare path (``RarePath.steps``) applies to this
    chunk: a file lost or refused, elements lost upstream, the end of an epoch.
    Where Python can run, everything past that (naming the files, the messages,
    the record of skipped files) is one Python function (``PythonRarePath``), so
    the guard is quick to build; on tf.data service workers it is built in
    graph (``GraphRarePath``).
    """
    # py_function cannot run on service workers
    rare_path = GraphRarePath if opts.service else PythonRarePath
    rare = rare_path(opts, error_log, source, expected, lost_detail, damaged_py)

    def check(state, batch):
        image, y, weight, key, pos, window, reason = batch
        c = Chunk(TF_OPS, state[0], state[1], key, pos, window, reason)
        odd = functools.reduce(tf.logical_or, [applies for applies, _ in rare.steps(c)])
        keep = tf.cond(odd, lambda: rare(c), lambda: c.keep)
        out = (image, y, weight, key)

        def kept():
            rows = tf.reshape(tf.where(keep), [-1])
            return tuple(tf.gather(t, rows) for t in out)

        return (pos[-1], c.delivered), tf.cond(tf.reduce_all(keep), lambda: out, kept)

    return check


# The array ops the guard's rule (``Chunk``) is written with, so that it is written once:
# numpy's in the Python path (inside its one py_function), TensorFlow's in the graph path.
def _np_ragged_range(starts, limits):
    """numpy's ``tf.ragged.range``: the row of each value, and the values, row by row."""
    counts = np.maximum(limits - starts, 0)
    rows = np.repeat(np.arange(len(counts)), counts)
    row_start = np.repeat(np.cumsum(counts) - counts, counts)  # where each row's values begin
    return rows, np.repeat(starts, counts) + np.arange(len(rows)) - row_start


def _tf_ragged_range(starts, limits):
    q = tf.ragged.range(starts, limits)
    return q.value_rowids(), q.flat_values


NP_OPS = types.SimpleNamespace(
    any=np.any, max=np.max, sum=np.sum, argmin=np.argmin, where=np.where, maximum=np.maximum,
    equal=np.equal, not_equal=np.not_equal, reshape=np.reshape, concat=np.concatenate,
    count=np.count_nonzero, size=len, gather=lambda a, i: a[i],
    gather_2d=lambda a, i, j: a[i, j], mask=lambda a, m: a[m], ragged_range=_np_ragged_range,
    format=lambda template, *values: template.format(*values), join="".join)
TF_OPS = types.SimpleNamespace(
    any=tf.reduce_any, max=tf.reduce_max, sum=tf.reduce_sum, argmin=tf.argmin, where=tf.where,
    maximum=tf.maximum, equal=tf.equal, not_equal=tf.not_equal, reshape=tf.reshape,
    concat=lambda parts: tf.concat(parts, 0), count=lambda m: tf.reduce_sum(tf.cast(m, tf.int64)),
    size=lambda a: tf.size(a, out_type=tf.int64), gather=tf.gather,
    gather_2d=lambda a, i, j: tf.gather_nd(a, tf.stack([i, j], 1)), mask=tf.boolean_mask,
    ragged_range=_tf_ragged_range,
    format=lambda template, *values: tf.strings.format(template, values), join=tf.strings.join)
_FAR = 2 ** 62  # a position past any epoch's


class Chunk:
    """A chunk of mapped elements as the guard's rule sees it, and the rule's decisions
    on it: the one place they are written, with the array ops ``xp`` (``NP_OPS`` in the
    Python path's py_function, ``TF_OPS`` in graph).

    Args:
        xp: ``NP_OPS`` or ``TF_OPS``.
        last: the position of the previous chunk's last element (-1 at the start).
        delivered: the elements delivered this epoch before this chunk.
        key, pos, window, reason: the chunk's columns (``check_fn``): the keys, the
            positions in the epoch, the keys of the previous and this chunk of the plan
            (per element), the reasons ("" for a good element, ``SENTINEL`` at the end).
    """

    def __init__(self, xp, last, delivered, key, pos, window, reason):
        self.xp, self.columns = xp, (last, delivered, key, pos, window, reason)
        self.key, self.pos, self.window, self.reason = key, pos, window, reason
        self.prev = xp.concat([xp.reshape(last, [1]), pos[:-1]])  # the position before each
        self.sentinel = xp.equal(reason, SENTINEL.encode())
        self.bad = xp.not_equal(reason, b"") & ~self.sentinel  # refused, with its reason
        self.keep = ~(self.bad | self.sentinel)
        self.delivered = delivered + xp.count(self.keep)
        self.lost_here = xp.any(pos - self.prev > 1)  # a file lost (its decoder raised)
        self.failed = self.lost_here | xp.any(self.bad)

    def short(self, expected):
        """Whether the epoch ends in this chunk with fewer elements than ``expected``:
        elements lost upstream of the map (a read error swallowed)."""
        return self.xp.any(self.sentinel & (self.pos != expected))

    def lost_upstream(self, expected):
        """How many elements were lost upstream (``short``)."""
        return self.xp.max(self.xp.where(self.sentinel, expected - self.pos, 0))

    def lost_files(self):
        """The keys and the positions of the files lost before this chunk's elements that
        the window names (in epoch order; those further back are only counted), and the
        count of all of them."""
        xp, pos = self.xp, self.pos
        rows, q = xp.ragged_range(self.prev + 1, pos)  # the missing positions, per element
        j = q - (xp.gather(pos, rows) // CHUNK - 1) * CHUNK  # their place in the window
        named = j >= 0
        keys = xp.gather_2d(self.window, rows, xp.maximum(j, 0))
        count = xp.where(self.lost_here, xp.sum(pos - self.prev - 1), 0)
        return xp.mask(keys, named), xp.mask(q, named), count

    def first_failure(self, lost_pos):
        """The chunk's first failed file in epoch order: its index in the lost files
        (``lost_files``) followed by the chunk's elements (a refused one)."""
        bad_pos = self.xp.where(self.bad, self.pos, _FAR)
        return self.xp.argmin(self.xp.concat([lost_pos, bad_pos]))

    def ends_epoch(self):
        return self.xp.any(self.sentinel)

    def epoch_count(self):
        """The elements the plan gave this epoch (the sentinel's position), -1 before its end."""
        return self.xp.max(self.xp.where(self.sentinel, self.pos, -1))

    def empty(self):
        """Whether the epoch ends here having delivered nothing out of some elements."""
        return (self.epoch_count() > 0) & (self.delivered == 0)


# The messages, each written once: ``xp.format`` and ``xp.join`` make them in Python or in graph.
_LOST_UPSTREAM = ("pipeline: {} element(s) of {} were lost while reading the source before "
                  "decoding")
_NOTHING_DELIVERED = ("pipeline: every file of this epoch was bad ({} of {}), so it delivered "
                      "nothing: on_error=skip skipped them all.")
_UNNAMED = ("<{} unnamed file(s)>",
            "decoder failed; more files in a row failed than the {}-file window can name")


def _lost_upstream_message(xp, lost, expected, damaged):
    """``damaged``: what names the damaged shards, or None when nothing does."""
    head = xp.format(_LOST_UPSTREAM, lost, expected)
    if damaged is None:
        return xp.join([head, " (e.g. a corrupt TFRecord shard)"])
    return xp.join([head, "; damaged: ", damaged])


def _cannot_load(xp, name, why):
    return xp.join(["pipeline: cannot load file ", name, " (", why, ")", RAISE_HINT])


def _unnamed(xp, count):
    """The (path, reason) that stands for ``count`` lost files the window cannot name."""
    return xp.format(_UNNAMED[0], count), xp.format(_UNNAMED[1], CHUNK)


def _full_list_hint(error_log: ErrorLog) -> str:
    return f"{error_log.summary(3)} The full list: pipeline.errors(dataset)."


def _pipeline_note(opts) -> str:
    return (f" (input pipeline {opts.pipeline_id} of {opts.num_pipelines}: a warning, the "
            "others may deliver)")


def _exceeded(e: ErrorBudgetExceeded) -> str:
    return f"pipeline: ErrorBudgetExceeded: {str(e)[len('pipeline: '):]}"


class RarePath:
    """The rare path of ``check_fn``: its checks of a chunk, in their order (``steps``),
    and the ones written once; ``PythonRarePath`` and ``GraphRarePath`` do the others
    where each runs. ``xp``: the array ops the subclass runs the rule (``Chunk``) with."""

    xp = NP_OPS

    def __init__(self, opts, error_log: ErrorLog, source: Source, expected: Optional[int],
                 lost_detail: Optional[Callable], damaged_py: Optional[Callable] = None):
        self.opts, self.error_log, self.source = opts, error_log, source
        self.expected, self.lost_detail, self.damaged_py = expected, lost_detail, damaged_py
        self.raises = opts.on_error.raises

    def steps(self, c: Chunk):
        """``(whether it applies, step)`` for each check of chunk ``c``, in their order:
        elements lost upstream; the files of the chunk lost or refused (the first raised,
        or all skipped); with on_error="skip", the end of the epoch. A step returns a
        failure, which ends the chunk's checks (``fail``), or nothing to fail on."""
        out = [(c.short(self.expected), self.lost_upstream)] if self.expected is not None else []
        if self.raises:
            return out + [(c.failed, self.raise_first)]
        return out + [(c.failed, self.skip_files), (self.at_epoch_end(c), self.epoch_end)]

    def raise_first(self, c: Chunk):
        """on_error="raise": the chunk's first failed file in epoch order, lost (its reason
        found again: ``why_lost``) or refused (its reason)."""
        xp = self.xp
        lost_keys, lost_pos, _ = c.lost_files()
        i, n = c.first_failure(lost_pos), xp.size(lost_keys)

        def lost():
            k = xp.gather(lost_keys, i)
            return _cannot_load(xp, self.name(k), self.why_lost(k))

        def refused():
            return _cannot_load(xp, self.name(xp.gather(c.key, i - n)),
                                self.text(xp.gather(c.reason, i - n)))

        return self.fail(self.choose(i < n, lost, refused))

    def nothing_delivered(self, c: Chunk, reasons: str):
        """An epoch that delivered nothing (on_error="skip"): a failure; with several
        input pipelines (one share of several, ``input_context``: the others may
        deliver), a warning."""
        xp = self.xp
        count = c.epoch_count()
        m = xp.join([xp.format(_NOTHING_DELIVERED, count, count), " ", reasons])
        if self.opts.num_pipelines > 1:
            return self.warn(xp.join([m, _pipeline_note(self.opts)]))
        return self.fail(m)


class PythonRarePath(RarePath):
    """The rare path where Python runs: one ``tf.py_function`` (``RECORDER_OP_NAME``)
    runs the steps on the chunk's values until one fails, and returns "" or the failure,
    which an in-graph assertion raises. Lost upstream: raised, or recorded: one entry per
    damaged TFRecord shard that ``damaged_py`` names, ``[(shard, reason, records lost)]``,
    when their losses add up to the count, else one "<source>" entry. Skipped files go to
    ``error_log`` (``pipeline.errors``), a lost one diagnosed once (``Source.why_failed_py``)."""

    def __call__(self, c: Chunk):
        failed = tf.py_function(self.run, list(c.columns), tf.string, name=RECORDER_OP_NAME)
        failed.set_shape([])
        with tf.control_dependencies([tf.debugging.Assert(
                tf.equal(tf.strings.length(failed), 0), [failed])]):
            return tf.identity(c.keep)

    def run(self, *columns) -> bytes:
        c = Chunk(NP_OPS, *(t.numpy() for t in columns))
        for applies, step in self.steps(c):
            failed = step(c) if applies else ""
            if failed:
                return failed.encode("utf-8", "surrogateescape")
        return b""

    # What the shared steps use, in Python.
    def name(self, key) -> str:
        return read.shown(self.source.name_py(key))

    def why_lost(self, key) -> str:
        return self.source.why_failed_py(self.source.name_py(key))

    @staticmethod
    def text(reason: bytes) -> str:
        return reason.decode("utf-8", "surrogateescape")  # encoded back as it was (``run``)

    @staticmethod
    def choose(pred, true_fn, false_fn):
        return true_fn() if pred else false_fn()

    @staticmethod
    def fail(message: str) -> str:
        return message

    @staticmethod
    def warn(message: str) -> str:
        print(message, file=sys.stderr, flush=True)
        return ""

    def record(self, entries) -> str:
        """Records ``(path, reason)`` entries in order; "" or the exceeded budget's message."""
        try:
            for path, reason in entries:
                self.error_log.add(path, reason)
        except ErrorBudgetExceeded as e:
            return _exceeded(e)
        return ""

    def lost_upstream(self, c: Chunk) -> str:
        lost = int(c.lost_upstream(self.expected))
        damaged = self.damaged_py() if self.damaged_py is not None else []
        if damaged and sum(d[2] for d in damaged) == lost:
            # Each damaged shard lost exactly its records past the damage
            # (``shards.read_shard``): one entry per shard, named.
            if not self.raises:
                return self.record((path, why) for path, why, _ in damaged)
            path, why, _ = damaged[0]
            more = (f"; {len(damaged) - 1} more damaged shard(s): "
                    + "; ".join(f"{p} ({w})" for p, w, _ in damaged[1:])
                    if len(damaged) > 1 else "")
            return read.shown(f"pipeline: cannot read TFRecord shard {path} ({why}){more}")
        named = "; ".join(f"{p} ({w})" for p, w, _ in damaged) if damaged else (
            None if self.lost_detail is None
            else self.lost_detail().numpy().decode("utf-8", "replace"))
        m = _lost_upstream_message(NP_OPS, lost, self.expected, named)
        return read.shown(m) if self.raises else self.record([("<source>", m)])

    def skip_files(self, c: Chunk) -> str:
        """Records the chunk's lost files (each diagnosed once, not every epoch), those
        the window cannot name as one entry, then its refused files."""
        lost_keys, _, count = c.lost_files()
        source, log, count = self.source, self.error_log, int(count)

        def entries():
            for k in lost_keys:
                path = source.name_py(k)
                if path not in log:
                    yield path, source.why_failed_py(path)
            if count > len(lost_keys):
                yield _unnamed(NP_OPS, count - len(lost_keys))
            for k, r in zip(c.key[c.bad], c.reason[c.bad]):
                yield source.name_py(k), r.decode("utf-8", "replace")

        return self.record(entries())

    def at_epoch_end(self, c: Chunk):
        return c.ends_epoch()  # once an epoch: the skipped files not logged one by one

    def epoch_end(self, c: Chunk) -> str:
        self.error_log.flush()
        return self.nothing_delivered(c, _full_list_hint(self.error_log)) if c.empty() else ""


class GraphRarePath(RarePath):
    """The rare path in graph, for tf.data service workers (no Python): the same steps
    as ``PythonRarePath``; a failure is raised by an in-graph assertion, and skipped
    files are reported on the worker's stderr (``pipeline.errors(ds)`` stays empty)."""

    xp = TF_OPS

    def __call__(self, c: Chunk):
        keep = c.keep
        for applies, step in self.steps(c):
            keep = tf.cond(applies, functools.partial(_after, step, c, keep), lambda k=keep: k)
        return keep

    # What the shared steps use, in graph.
    def name(self, key):
        return self.source.name(key)

    def why_lost(self, key):
        if self.source.records:
            return tf.constant("the decoder failed on it")
        contents = tf.io.read_file(self.source.name(key))
        return decode_lib.diagnose(contents, decode_lib.sniff(contents))

    @staticmethod
    def text(reason):
        return reason

    @staticmethod
    def choose(pred, true_fn, false_fn):
        return tf.cond(pred, true_fn, false_fn)

    @staticmethod
    def fail(message):
        return tf.debugging.Assert(False, [message])

    @staticmethod
    def warn(message):
        return tf.print(message, output_stream=sys.stderr)

    def lost_upstream(self, c: Chunk):
        # Records read in parallel with a damaged shard can be lost with it:
        # the count can exceed what the damaged shards alone held.
        m = _lost_upstream_message(TF_OPS, c.lost_upstream(self.expected), self.expected,
                                   None if self.lost_detail is None else self.lost_detail())
        return self.fail(m) if self.raises else self.warn(m)

    def skip_files(self, c: Chunk):
        """One line per skipped file on the worker's stderr, in epoch order, as
        ``ErrorLog.add`` logs it; those the window cannot name, one line last."""
        lost_keys, lost_pos, count = c.lost_files()
        lost_reasons = tf.map_fn(self.why_lost, lost_keys, fn_output_signature=tf.string)
        order = tf.argsort(tf.concat([tf.boolean_mask(c.pos, c.bad), lost_pos], 0))
        names = tf.gather(tf.concat([self.name(tf.boolean_mask(c.key, c.bad)),
                                     self.name(lost_keys)], 0), order)
        reasons = tf.gather(tf.concat([tf.boolean_mask(c.reason, c.bad), lost_reasons], 0),
                            order)
        lines = tf.strings.join(["pipeline: skipped ", names, ": ", reasons])
        unnamed = count - tf.size(lost_keys, out_type=tf.int64)

        def unnamed_line():
            path, why = _unnamed(TF_OPS, unnamed)
            return tf.reshape(tf.strings.join(["pipeline: skipped ", path, ": ", why]), [1])

        lines = tf.concat([lines, tf.cond(unnamed > 0, unnamed_line,
                                          lambda: tf.zeros([0], tf.string))], 0)
        return self.warn(tf.strings.reduce_join(lines, separator="\n"))

    @staticmethod
    def at_epoch_end(c: Chunk):
        return c.empty()

    def epoch_end(self, c: Chunk):
        return self.nothing_delivered(c, "The reasons are on the tf.data service workers' stderr.")


def _after(step, c: Chunk, keep):
    """``keep``, once the graph step ``step`` (an assertion, a print) has run on ``c``."""
    with tf.control_dependencies([step(c)]):
        return tf.identity(keep)
