"""``write_tfrecords(beam_runner=...)``: the conversion to TFRecord shards on Apache Beam.

The driver (this process) indexes the source and validates the options as the
single-process writer does (``pipeline.convert.shards.write_tfrecords``), stores the index
beside the output (``dataset.json.parts/index.pickle``, read once by each worker
process), then runs:

1. with ``on_error``, ``Check``: the files in chunks, each decoded by
   ``pipeline.tools.report.scan_index`` (the single-process writer's check); bad files
   leave through the tagged side output ``"bad"``;
2. ``Layout`` (one element): the good rows, their seeded order
   (``shard_writer.row_order``) and the shard count (``shard_writer.shard_count``), as the
   single-process writer decides them: row ``j`` of the written order goes to shard
   ``j % num_shards`` at place ``j // num_shards``. ``on_error="raise"`` with a bad
   file fails the job here, before any shard is written (``BadFilesError`` in the
   driver, every bad file named);
3. ``Verify``: the shards a previous run completed (``dataset.json``'s or the
   per-shard entries' counts and SHA-256) are kept;
4. ``Shards``, spread over the workers: the numbers of the other shards; ``WriteShard``:
   a shard's rows, in their places, each by ``shard_writer.encode_row`` (the one
   encoder), written as they are encoded under a temporary name, renamed once complete,
   the shard's entry stored in ``dataset.json.parts/``. A shard is one work item, as in
   the single-process writer (a thread per shard): its encoded records never cross a
   shuffle;
5. the driver writes ``dataset.json`` (``shard_writer.sidecar``) and removes the parts.

On this machine (``LOCAL_RUNNERS``) the job runs on Beam's FnApiRunner, built directly
(``make_runner``: the DirectRunner's Prism attempt is never made). By default its one worker
runs in this process and encodes each shard's rows on a thread per core
(``encode_threads``), sharing one traced re-encoder (``shared_reencoder``), as the
single-process writer's threads do; ``direct_running_mode=multi_processing`` starts worker
processes instead, each importing TensorFlow and tracing its own re-encoder; worker threads
(``multi_threading``) are refused (``check_local``).

The DoFn classes (``Check``, ``WriteShard``) are built on first use
(``dofn_class``) from module-level classes that hold their work, so that importing this
module never imports apache_beam; ``require_beam`` says which extra to install where it is
missing. ``write`` is the steps above in a row, each a function of its own.

Files are read and written through ``tf.io.gfile`` / ``pipeline.sources.read``, the readers'
file systems (local, ``gs://``, ``s3://``). Counters (namespace ``pipeline``:
``files_checked``, ``bad_files``, ``records_encoded``, ``shards_written``,
``shards_kept``) show as the job's progress where the runner reports metrics
(Dataflow's job page, Flink's and Spark's UIs) and are logged when the job ends.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import difflib
import functools
import json
import math
import pickle
import secrets
import threading
import types
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf
from absl import logging

from pipeline import checks
from pipeline import config
from pipeline.sources import index as index_lib
from pipeline.sources import read
from pipeline.convert import shard_writer

PARTS = "dataset.json.parts"
INSTALL_HINT = "pip install -e '.[beam]' in pipeline's checkout (constraints/*-beam.txt)"
NAMESPACE = "pipeline"
CHECK_CHUNK_MAX = 1000     # files per Check element (one scan_index graph each)
# Runners that run here, on Beam's FnApiRunner (check_local, encode_threads).
LOCAL_RUNNERS = ("DirectRunner", "SwitchingDirectRunner", "FnApiRunner")


def require_beam():
    """Imports ``apache_beam``; ImportError saying which extra to install when it is absent."""
    try:
        import apache_beam  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise ImportError("write_tfrecords(beam_runner=...) needs apache-beam, which is not "
                          f"installed: {INSTALL_HINT}. ({e})") from e
    return apache_beam


def check_local(runner: str, options) -> None:
    """Refuses a local run (``LOCAL_RUNNERS``) whose FnApiRunner would run a stage's bundles
    in threads of this process: ``direct_num_workers`` other than 1 with
    ``direct_running_mode`` ``in_memory`` or ``multi_threading``.

    Measured with apache-beam 2.77.0 (docs/limitations.md), when the records were grouped
    by shard after an ``Encode`` step: ``multi_threading`` with 2 workers lost one encoded
    record between ``Encode`` and ``GroupByKey`` in 10 of 24 runs of the 1,000 sample
    photos, and none in 13 runs with ``multi_processing``. Where the loss sits in Beam is
    not found (the job no longer groups records, but the bad-file check's lists still pass
    through combiners), so worker threads stay refused. The default run (one in-process
    worker) encodes on one thread per core (``encode_threads``) instead.

    Raises:
        ValueError: naming both options, the values received and what to use instead.
    """
    if runner not in LOCAL_RUNNERS:
        return
    from apache_beam.options import pipeline_options as po  # pylint: disable=import-outside-toplevel
    direct = options.view_as(po.DirectOptions)
    if direct.direct_running_mode != "multi_processing" and direct.direct_num_workers != 1:
        raise ValueError(
            f"`beam_options`: direct_running_mode={direct.direct_running_mode} with "
            f"direct_num_workers={direct.direct_num_workers} runs Beam's workers as threads "
            "of one process, which lost records here (apache-beam 2.77; docs/limitations.md). "
            "Leave both unset (one in-process worker that encodes on a thread per core: the "
            "fastest run on one machine) or give direct_running_mode=multi_processing. "
            f"Received: beam_options with direct_running_mode={direct.direct_running_mode}, "
            f"direct_num_workers={direct.direct_num_workers}")


def encode_threads(runner: str, options) -> int:
    """Threads each shard's rows are encoded on (``WriteShard``): the cores this process may
    use (``checks.cpu_count()``) for a local run in this process (``LOCAL_RUNNERS``,
    ``direct_running_mode=in_memory``), as the single-process writer's threads; 1
    otherwise (``multi_processing`` and remote runners run a worker per core).

    The threads share the process's TensorFlow and its traced re-encoder
    (``shared_reencoder``); the encode (decode, resize, JPEG encode) runs in TensorFlow
    ops, which release the GIL.
    """
    from apache_beam.options import pipeline_options as po  # pylint: disable=import-outside-toplevel
    if runner in LOCAL_RUNNERS and options.view_as(
            po.DirectOptions).direct_running_mode == "in_memory":
        return checks.cpu_count()
    return 1


def make_runner(runner: str, options):
    """The runner to give ``beam.Pipeline``: for ``DirectRunner`` (and
    ``SwitchingDirectRunner``) Beam's ``FnApiRunner``, built as the DirectRunner builds it
    for a batch job (the pipeline options in its provision info), so that the
    DirectRunner's first attempt, the Prism runner (downloaded from GitHub, then started),
    is never made; any other runner: its name, for Beam to create."""
    if runner not in ("DirectRunner", "SwitchingDirectRunner"):
        return runner
    # pylint: disable=import-outside-toplevel
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def pipeline_options(runner: str, flags: List[str]):
    """Beam's ``PipelineOptions`` of ``flags`` (``checks.check_beam``'s) with ``runner``.

    Raises:
        ValueError: a flag that no Beam options class defines (named, with the closest
            known flag); a local run on worker threads (``check_local``).
        ImportError: apache-beam is not installed (``require_beam``).
    """
    require_beam()
    from apache_beam.options import pipeline_options as po  # pylint: disable=import-outside-toplevel
    options = po.PipelineOptions(flags, runner=runner)
    known = options.get_all_options()
    unknown = set(options.get_all_options(retain_unknown_options=True)) - set(known)
    for flag in flags:
        key = flag[2:].partition("=")[0]
        if key in unknown:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            raise ValueError(
                f"`beam_options`: Beam has no option {key!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f". Received: beam_options item {flag!r}")
    check_local(runner, options)
    return options


def _parts(output_dir: str, name: str = "") -> str:
    return read.join(read.join(output_dir, PARTS), name) if name else read.join(output_dir, PARTS)


def _read_json(path: str):
    with tf.io.gfile.GFile(path, "r") as f:
        return json.loads(f.read())


def _write_json(path: str, value) -> None:
    tmp = f"{path}.tmp-{secrets.token_hex(4)}"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(json.dumps(value, indent=1))
    tf.io.gfile.rename(tmp, path, overwrite=True)


def _listing(path: str) -> List[str]:
    try:
        return [n.rstrip("/") for n in tf.io.gfile.listdir(path)]
    except tf.errors.NotFoundError:
        return []


def previous_run(output_dir: str, plan: str):
    """What a previous run of the same conversion left in ``output_dir``.

    Returns:
        (the seed an unfinished run drew, or None; {shard file: its entry} of the shards
        it completed, to verify).

    Raises:
        ValueError: ``output_dir`` holds shards or a ``dataset.json`` of another
            conversion (another source, order or options: ``plan_sha256`` differs), or
            shards that no sidecar describes.
    """
    listing = _listing(output_dir)
    sidecar_path = read.join(output_dir, shard_writer.SIDECAR)
    plan_path = _parts(output_dir, "plan.json")
    found, seed, entries = None, None, {}
    if shard_writer.SIDECAR in listing:
        found = _read_json(sidecar_path)
        entries = {e["file"]: e for e in found.get("shards", []) if "records_sha256" in e}
    elif PARTS in listing and tf.io.gfile.exists(plan_path):
        found = _read_json(plan_path)
        seed = found.get("seed")
        for name in _listing(_parts(output_dir)):
            if name.endswith(".tfrecord.json"):
                e = _read_json(_parts(output_dir, name))
                entries[e["file"]] = e
    elif any(n.endswith(".tfrecord") for n in listing):
        found = {}
    if found is not None and found.get("plan_sha256") != plan:
        what = "another conversion (another source, order or options)" if found.get(
            "plan_sha256") else "shards that no resumable run describes"
        raise ValueError(
            f"`output_dir` already holds {what}: writing this one beside them would mix two "
            "datasets. Use an empty folder, or rerun with the arguments of the run that wrote "
            f"them to resume it. Received: output_dir={output_dir!r}")
    return seed, entries


# --- the workers' side -----------------------------------------------------------

@functools.lru_cache(maxsize=4)
def _load_index(path: str) -> index_lib.Index:
    with tf.io.gfile.GFile(path, "rb") as f:
        return pickle.loads(f.read())


@functools.lru_cache(maxsize=4)
def _order(n: int, seed: int, shuffle: bool) -> np.ndarray:
    return shard_writer.row_order(n, seed) if shuffle else np.arange(n)


_REENCODER_LOCK = threading.Lock()


@functools.lru_cache(maxsize=4)
def _reencoder_cached(max_resolution: int, jpeg_quality: int, max_pixels: Optional[int]):
    f = shard_writer.resolution_reencoder(max_resolution, jpeg_quality, max_pixels)
    f.get_concrete_function()  # traced once, before the worker threads call it
    return f


def shared_reencoder(max_resolution: int, jpeg_quality: int, max_pixels: Optional[int]):
    """``shard_writer.resolution_reencoder(...)``, built and traced once per process: the
    encode threads of the in-process run (``encode_threads``) and every ``WriteShard``
    instance of the process share it, as the single-process writer's threads share its one
    (a build and trace costs about 2.6 CPU-s here, its first calls about 0.9 more: most
    of a worker process's start with its import of TensorFlow, docs/scale-out.md)."""
    with _REENCODER_LOCK:
        return _reencoder_cached(max_resolution, jpeg_quality, max_pixels)


def _counter(name: str):
    from apache_beam.metrics import Metrics  # pylint: disable=import-outside-toplevel
    return Metrics.counter(NAMESPACE, name)


# The DoFns' work lives in plain module-level classes (``_Check``, ``_WriteShard``); the
# DoFn classes ``Check`` and ``WriteShard`` (each the
# plain class + ``beam.DoFn``) are built on first use (``dofn_class``, or the attribute
# ``beam_write.Check``), so that importing this module never imports apache_beam. Beam
# pickles their instances by reference (module and name): a worker process that unpickles
# one builds the class the same way.

class _Check:
    """``Check``: a chunk ``(start, stop)`` of the index -> good rows ``(row, size)``; bad
    ones ``(row, path, reason)`` to the ``"bad"`` output (``report.scan_index``)."""

    def __init__(self, index_path, max_pixels, need_sizes):
        self.index_path, self.max_pixels, self.need_sizes = index_path, max_pixels, need_sizes

    def setup(self):  # the output's file system on this worker (s3://: tensorflow-io)
        read.ensure_filesystem(self.index_path, in_graph=True)

    def process(self, chunk):
        from apache_beam import pvalue  # pylint: disable=import-outside-toplevel
        from pipeline.tools import report  # pylint: disable=import-outside-toplevel
        idx = _load_index(self.index_path)
        rows = list(range(*chunk))
        found = report.scan_index(idx.subset(rows), max_pixels=self.max_pixels, progress=False)
        bad = {b["path"]: b["reason"] for b in found.bad_files}
        _counter("files_checked").inc(len(rows))
        _counter("bad_files").inc(sum(idx.paths[r] in bad for r in rows))
        for r in rows:
            path = idx.paths[r]
            if path in bad:
                yield pvalue.TaggedOutput("bad", (r, path, bad[path]))
            else:
                yield r, (read.file_size(path) if self.need_sizes else 0)


class _WriteShard:
    """``WriteShard``: a shard number ``k`` -> the shard written: its rows (those of the
    written order ``j`` with ``j % num_shards == k``, in order) encoded on ``threads``
    threads (``encode_threads``) and written as they come, under a temporary name, renamed
    once complete; its entry stored in ``dataset.json.parts/``. A shard's records never
    leave the worker that encodes them (no shuffle of the encoded bytes)."""

    def __init__(self, index_path, output_dir, shuffle, max_resolution, jpeg_quality,
                 max_pixels, masks, threads=1):
        self.index_path, self.output_dir, self.shuffle = index_path, output_dir, shuffle
        self.max_resolution, self.jpeg_quality, self.max_pixels = (
            max_resolution, jpeg_quality, max_pixels)
        self.masks, self.threads = masks, threads
        self.reencode = self.pool = None

    def setup(self):  # the output's file system on this worker (s3://: tensorflow-io)
        read.ensure_filesystem(self.output_dir, in_graph=True)
        read.ensure_filesystem(self.index_path, in_graph=True)
        if self.max_resolution is not None:
            self.reencode = shared_reencoder(self.max_resolution, self.jpeg_quality,
                                             self.max_pixels)
        if self.threads > 1:
            self.pool = concurrent.futures.ThreadPoolExecutor(self.threads)

    def teardown(self):
        if self.pool is not None:
            self.pool.shutdown()

    def encode_row(self, idx, row):
        return shard_writer.encode_row(idx, row, self.reencode)

    def process(self, k, layout):
        idx = _load_index(self.index_path)
        n, s, good = layout["num_examples"], layout["num_shards"], layout["good"]
        order = _order(n, layout["seed"], self.shuffle)[k::s]
        rows = order.tolist() if good is None else good[order].tolist()
        encode = functools.partial(self.encode_row, idx)
        encoded = self.pool.map(encode, rows) if self.pool else map(encode, rows)
        name = shard_writer.SHARD_PATTERN.format(k, s)
        entry = shard_writer.write_shard_file(self.output_dir, name, encoded,
                                              self.max_resolution is not None, self.masks,
                                              temporary=True)
        _write_json(_parts(self.output_dir, name + ".json"), entry)
        _counter("records_encoded").inc(entry["num_examples"])
        _counter("shards_written").inc()
        yield name


_DOFN_WORK = {"Check": _Check, "WriteShard": _WriteShard}
_DOFN_LOCK = threading.Lock()


def dofn_class(name: str):
    """The DoFn class ``name`` (``Check``, ``WriteShard``): its work class
    (``_Check``, ...) + ``beam.DoFn``, built once per process and kept as this module's
    attribute of that name (what Beam's pickler finds it by).

    Raises:
        ImportError: apache-beam is not installed (``require_beam``).
    """
    with _DOFN_LOCK:
        if name not in globals():
            beam = require_beam()
            work = _DOFN_WORK[name]
            cls = types.new_class(name, (work, beam.DoFn))
            cls.__module__, cls.__qualname__, cls.__doc__ = __name__, name, work.__doc__
            globals()[name] = cls
        return globals()[name]


def __getattr__(name: str):
    """``beam_write.Check`` / ``WriteShard`` (PEP 562): ``dofn_class(name)``."""
    if name in _DOFN_WORK:
        return dofn_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _layout(good, bad, *, parts_dir, on_error, num_shards, n_all, seed):
    """``Layout``: the good rows (sorted) -> the layout; writes ``layout.json``; fails the
    job on ``on_error="raise"`` with a bad file, or when every file is bad."""
    good_rows = sorted(good)
    bad = sorted(bad)
    sizes = dict(good_rows)
    rows = np.array([r for r, _ in good_rows], np.int64)
    fail = bool(bad) and (config.OnError.of(on_error).raises or not len(rows))
    s = 0 if fail else shard_writer.shard_count(
        num_shards, len(rows), lambda: np.array([sizes[r] for r in rows.tolist()]), len(bad))
    out = {"num_examples": int(len(rows)), "num_shards": int(s), "seed": seed,
           "bad": [[r, p, why] for r, p, why in bad], "failed": fail}
    _write_json(read.join(parts_dir, "layout.json"), out)
    if fail:
        raise _bad_files_error(bad, n_all, on_error)
    out["good"] = rows if len(bad) else None
    return out


def _verify(entry, *, output_dir):
    """``Verify``: a previous run's shard entry -> its name when the file is there, whole."""
    read.ensure_filesystem(output_dir, in_graph=True)
    path = read.join(output_dir, entry["file"])
    if tf.io.gfile.exists(path) and shard_writer.records_sha256(path) == entry[
            "records_sha256"]:
        _write_json(_parts(output_dir, entry["file"] + ".json"), entry)
        _counter("shards_kept").inc()
        yield entry["file"]


def _shards_to_write(layout, kept):
    """``Shards``: the layout -> the numbers of the shards to write (those not kept)."""
    s = layout["num_shards"]
    kept = set(kept)
    return [k for k in range(s) if shard_writer.SHARD_PATTERN.format(k, s) not in kept]


def shards_guard_record(path: str, reason: str):
    from pipeline.decode import guard  # pylint: disable=import-outside-toplevel
    return guard.ErrorRecord(path, reason)


def _bad_files_error(bad, n_all: int, on_error) -> Exception:
    """``BadFilesError`` of the layout's ``bad`` rows ``(row, path, reason)``, as the
    single-process writer raises it."""
    records = [shards_guard_record(path, why) for _, path, why in bad]
    return shard_writer.BadFilesError(records, n_all, shard_writer.bad_files_message(
        records, n_all, on_error))


def _chunks(n: int, most: int, pieces: int = 32):
    size = max(1, min(most, math.ceil(n / pieces))) if n else 1
    return [(a, min(a + size, n)) for a in range(0, n, size)]


# --- the driver's side -----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Job:
    """One conversion, as ``write`` runs it: its arguments, the seed it writes with, and
    whether ``output_dir`` existed before (removed again when nothing was written)."""
    idx: index_lib.Index
    output_dir: str
    plan: str
    seed: int
    shuffle: bool
    num_shards: Optional[int]
    on_error: Optional[str]
    max_pixels: Optional[int]
    max_resolution: Optional[int]
    jpeg_quality: int
    existed: bool

    @property
    def parts_dir(self) -> str:
        return _parts(self.output_dir)

    @property
    def index_path(self) -> str:
        return _parts(self.output_dir, "index.pickle")

    @property
    def layout_path(self) -> str:
        return _parts(self.output_dir, "layout.json")


def write(idx: index_lib.Index, output_dir: str, plan: str, runner: str, flags: List[str], *,
          progress: bool, shuffle: bool, seed: Optional[int], num_shards: Optional[int],
          on_error: Optional[str], max_pixels: Optional[int], max_resolution: Optional[int],
          jpeg_quality: int) -> dict:
    """Runs the conversion of ``idx`` (validated by ``pipeline.convert.shards.write_tfrecords``) on Beam.

    Returns:
        the ``dataset.json`` written (as the single-process writer's).

    Raises:
        ValueError: an option Beam does not know; ``output_dir`` holding another
            conversion (``previous_run``).
        BadFilesError: as the single-process writer (``on_error``).
        Exception: the runner's, when the job fails otherwise.
    """
    beam = require_beam()
    options = pipeline_options(runner, flags)
    seed, candidates = _resume(output_dir, plan, seed)
    job = Job(idx, output_dir, plan, seed, shuffle, num_shards, on_error, max_pixels,
              max_resolution, jpeg_quality, existed=read.exists(output_dir))
    _prepare(job)
    logging.info("write_tfrecords: %d files on Beam's %s (%s)", len(idx), runner,
                 " ".join(flags) or "default options")
    p = beam.Pipeline(runner=make_runner(runner, options), options=options)
    layout = _layout_stage(p, job)
    kept = _verify_stage(p, job, candidates)
    _write_stage(layout, kept, job, encode_threads(runner, options))
    _log_counters(_run(p, job), progress)
    return _finish(job)


def _resume(output_dir: str, plan: str, seed: Optional[int]):
    """(the seed to write with, {shard file: entry} of the shards to verify and keep):
    ``previous_run``'s; an unseeded order is drawn once and kept in ``plan.json`` for a
    rerun (a finished unseeded run keeps no seed: its shards are all written anew)."""
    drawn, candidates = previous_run(output_dir, plan)
    if seed is None:
        if drawn is None:
            candidates = {}
        seed = drawn if drawn is not None else secrets.randbits(63)
    return seed, candidates


def _prepare(job: Job) -> None:
    """The parts folder with the index and ``plan.json``; an earlier run's ``layout.json``
    removed."""
    tf.io.gfile.makedirs(job.parts_dir)
    with tf.io.gfile.GFile(job.index_path, "wb") as f:
        f.write(pickle.dumps(job.idx, protocol=pickle.HIGHEST_PROTOCOL))
    _write_json(_parts(job.output_dir, "plan.json"), {"plan_sha256": job.plan, "seed": job.seed})
    if tf.io.gfile.exists(job.layout_path):
        tf.io.gfile.remove(job.layout_path)


def _layout_stage(p, job: Job):
    """The layout's PCollection (one element): without ``on_error`` every row, laid out
    here; with it the rows that ``Check`` finds good (``_layout``)."""
    import apache_beam as beam  # pylint: disable=import-outside-toplevel
    n_all = len(job.idx)
    if job.on_error is None:
        n_shards = shard_writer.shard_count(job.num_shards, n_all, job.idx.sizes)
        fixed = {"num_examples": n_all, "num_shards": n_shards, "seed": job.seed, "bad": [],
                 "failed": False}
        _write_json(job.layout_path, fixed)
        return p | "Layout" >> beam.Create([dict(fixed, good=None)])
    check = dofn_class("Check")(job.index_path, job.max_pixels, job.num_shards is None)
    checked = (p | "Files" >> beam.Create(_chunks(n_all, CHECK_CHUNK_MAX, 4))
               | "Spread files" >> beam.Reshuffle()
               | "Check" >> beam.ParDo(check).with_outputs("bad", main="good"))
    bad = checked.bad | "Bad files" >> beam.combiners.ToList()
    return (checked.good | "Good files" >> beam.combiners.ToList()
            | "Layout" >> beam.Map(_layout, beam.pvalue.AsSingleton(bad),
                                   parts_dir=job.parts_dir, on_error=job.on_error,
                                   num_shards=job.num_shards, n_all=n_all, seed=job.seed))


def _verify_stage(p, job: Job, candidates: Dict[str, dict]):
    """The names of the previous run's shards found whole (``_verify``)."""
    import apache_beam as beam  # pylint: disable=import-outside-toplevel
    return (p | "Previous shards" >> beam.Create(sorted(candidates.values(),
                                                        key=lambda e: e["file"]))
            | "Verify" >> beam.FlatMap(_verify, output_dir=job.output_dir))


def _write_stage(layout, kept, job: Job, threads: int) -> None:
    """Each shard not kept, spread over the workers, encoded and written (``WriteShard``)."""
    import apache_beam as beam  # pylint: disable=import-outside-toplevel
    write_shard = dofn_class("WriteShard")(
        job.index_path, job.output_dir, job.shuffle, job.max_resolution, job.jpeg_quality,
        job.max_pixels, job.idx.mask_paths is not None, threads)
    (layout  # pylint: disable=expression-not-assigned
     | "Shards" >> beam.FlatMap(_shards_to_write, beam.pvalue.AsList(kept))
     | "Spread shards" >> beam.Reshuffle()
     | "Write shards" >> beam.ParDo(write_shard, beam.pvalue.AsSingleton(layout)))


def _run(p, job: Job):
    """Runs the job to its end: its result. A job that the layout failed (bad files with
    ``on_error="raise"``, or no good file) raises ``BadFilesError`` as the single-process
    writer, leaving nothing behind."""
    try:
        result = p.run()
        result.wait_until_finish()
        return result
    except Exception:
        if tf.io.gfile.exists(job.layout_path):
            lay = _read_json(job.layout_path)
            if lay.get("failed"):  # nothing written, nothing to resume: as the single writer
                _clean(job.output_dir)
                if not job.existed and not _listing(job.output_dir):
                    tf.io.gfile.rmtree(job.output_dir)
                raise _bad_files_error(lay["bad"], len(job.idx), job.on_error) from None
        raise


def _finish(job: Job) -> dict:
    """Writes ``dataset.json`` (``shard_writer.sidecar``, the single-process writer's text)
    from the layout and the shards' entries, removes the parts: the sidecar."""
    lay = _read_json(job.layout_path)
    bad_rows = {r for r, _, _ in lay["bad"]}
    idx = job.idx
    good_idx = idx.subset([r for r in range(len(idx)) if r not in bad_rows]) if bad_rows else idx
    entries = [_read_json(_parts(job.output_dir, shard_writer.SHARD_PATTERN.format(
        k, lay["num_shards"]) + ".json")) for k in range(lay["num_shards"])]
    skipped = None if job.on_error is None else [{"path": path, "reason": why}
                                                 for _, path, why in lay["bad"]]
    meta = shard_writer.sidecar(good_idx, entries, job.plan, job.max_resolution,
                                job.jpeg_quality, skipped)
    # under a temporary name, then renamed: a rerun's sidecar replaces the previous one whole
    _write_json(read.join(job.output_dir, shard_writer.SIDECAR), meta)
    _clean(job.output_dir)
    return meta


def _clean(output_dir: str) -> None:
    """Removes the parts folder and the temporary files of failed attempts."""
    tf.io.gfile.rmtree(_parts(output_dir))
    for name in _listing(output_dir):
        if ".tfrecord.tmp-" in name:
            tf.io.gfile.remove(read.join(output_dir, name))


def _log_counters(result, progress: bool) -> Dict[str, int]:
    counts = {}
    try:
        for c in result.metrics().query()["counters"]:
            if c.key.metric.namespace == NAMESPACE:
                counts[c.key.metric.name] = counts.get(c.key.metric.name, 0) + int(
                    c.committed if c.committed is not None else c.attempted)
    except Exception:  # noqa: BLE001  a runner without metrics: nothing to report
        return counts
    if counts and progress:
        logging.info("write_tfrecords on Beam: %s", ", ".join(
            f"{k} {v:,}" for k, v in sorted(counts.items())))
    return counts
