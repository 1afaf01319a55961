"""Scale-out with standard TensorFlow only: ``tf.distribute`` and the tf.data service.

There is no home-made engine here. Three pieces:

* ``distribute_dataset(strategy, factory, ...)``: builds one input pipeline per
  ``tf.distribute.InputContext`` through
  ``strategy.distribute_datasets_from_function``; the factory shards the *path
  list* by input pipeline before shuffling, and ``batch_size`` is the global
  batch (each replica gets ``input_context.get_per_replica_batch_size``).
* ``service_transformation(opts)``: the ``tf.data.experimental.service.distribute``
  transformation that ``pipeline.build`` applies when a factory is given
  ``service="grpc://host:port"``.
* ``run_dispatcher`` / ``run_worker``: start the tf.data service servers
  (``python -m pipeline service dispatcher|worker`` calls them through
  ``run_from_flags``, which Ctrl-C and SIGTERM end at once).

Processing modes (``processing_mode=``), from the tf.data service guide
(https://www.tensorflow.org/api_docs/python/tf/data/experimental/service):

=========  ==========================  ===============================================
mode       ShardingPolicy              guarantee (healthy workers)
=========  ==========================  ===============================================
"off"      ``OFF``                     every worker produces a full epoch: with N
                                       workers each file is seen N times per epoch.
"dynamic"  ``DYNAMIC``                 the dispatcher hands out splits of the path
                                       list: each file exactly once per epoch.
"file"     ``HINT`` (path-list shard)  worker k reads paths k, k+N, ...: each file
                                       exactly once; needs a fixed worker list
                                       (``run_dispatcher(worker_addresses=...)``).
=========  ==========================  ===============================================

``"file"`` uses ``ShardingPolicy.HINT`` because a ``pipeline`` source is a list
of paths (``from_tensor_slices``), not a file-reader dataset: tf.data's ``FILE``
auto-sharding finds no reader op to shard and fails, whereas the path list
carries a ``shard(SHARD_HINT, SHARD_HINT)`` that the dispatcher fills with
(number of workers, worker index): file-level sharding, as ``FILE`` intends.

With ``on_error="skip"`` the workers, which run no Python, skip bad files in the
graph: each is a line on that worker's stderr (``pipeline: skipped PATH: REASON``,
every epoch it is met), and ``pipeline.errors(ds)`` on the client stays empty.

A worker that dies mid-epoch is not replaced by the service: the dispatcher keeps
its task, so the reader would wait for it without end (TensorFlow's client skips an
unreachable worker and keeps asking it). ``service_timeout_s`` (``ImageOptions``)
bounds that wait on the client: ``bound_wait`` raises once no element has come for
that long while the reader waited (a worker restarted at the dead one's address lets
the epoch end, without the dead worker's files). ``tests/deliver/test_service.py`` measures
the bound, with the elements lost or repeated; docs/scale-out.md has the figures.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import signal
import socket
import sys
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import tensorflow as tf
from absl import logging

from pipeline import checks
from pipeline import config as config_lib
from pipeline.deliver import service_args
from pipeline import stack

graph_fn = tf.autograph.experimental.do_not_convert

PROCESSING_MODES = {
    "off": tf.data.experimental.service.ShardingPolicy.OFF,
    "dynamic": tf.data.experimental.service.ShardingPolicy.DYNAMIC,
    "file": tf.data.experimental.service.ShardingPolicy.HINT,
}


# --- tf.distribute -----------------------------------------------------------

def distribute_dataset(strategy: tf.distribute.Strategy, factory: Callable, *args,
                       input_options: Optional[tf.distribute.InputOptions] = None,
                       **factory_kwargs):
    """One ``pipeline`` input pipeline per input context, distributed by ``strategy``.

    Calls ``strategy.distribute_datasets_from_function(fn)`` where
    ``fn(input_context) = factory(*args, input_context=input_context,
    **factory_kwargs)``. The factory shards the path list by
    ``input_context.input_pipeline_id`` before shuffling (each file goes to
    exactly one input pipeline per epoch; with fewer files than pipelines the
    surplus pipelines get no elements, logged) and batches with
    ``input_context.get_per_replica_batch_size(batch_size)``.

    Note: ``MirroredStrategy`` on one machine has ONE input pipeline (its
    per-replica batches are split from it); multi-worker strategies have one
    per worker.

    Example::

        strategy = tf.distribute.MirroredStrategy()
        dist = pipeline.distribute_dataset(strategy, pipeline.from_directory,
                                           "data/train", batch_size=256, seed=None)
        for x, y in dist: strategy.run(step, args=(x, y))

    Args:
        strategy: a ``tf.distribute.Strategy``.
        factory: a ``pipeline`` factory (``from_directory``, ``from_paths``, ...)
            or any callable accepting ``input_context=``.
        *args: positional arguments of the factory (e.g. the directory).
        input_options: optional ``tf.distribute.InputOptions``.
        **factory_kwargs: keyword options of the factory; ``batch_size`` is the
            global batch size.

    Returns:
        A ``tf.distribute.DistributedDataset``; iterate it, or pass it to
        ``model.fit``. Elements are per-replica values. ``pipeline.errors`` on
        it lists the files skipped (``on_error="skip"``) by the input pipelines
        this process built (one per worker in multi-worker training: each
        worker lists its own share).

    Raises:
        ValueError: ``strategy`` is not a ``tf.distribute.Strategy``;
            ``factory_kwargs`` already holds ``input_context``, or ``factory``
            does not accept it; the factory's own ValueErrors.
    """
    _check_distribute_args(strategy, factory, factory_kwargs)
    logs = []  # the skip records of every input pipeline built in this process

    def dataset_fn(input_context: tf.distribute.InputContext):
        logging.info("pipeline: input pipeline %d of %d (%d replicas in sync)",
                     input_context.input_pipeline_id, input_context.num_input_pipelines,
                     input_context.num_replicas_in_sync)
        ds = factory(*args, input_context=input_context, **factory_kwargs)
        log = getattr(getattr(ds, "pipeline_built", None), "error_log", None)
        if log is not None:
            logs.append(log)
        return ds

    dist = strategy.distribute_datasets_from_function(dataset_fn, options=input_options)
    dist.pipeline_error_logs = logs  # pipeline.errors(dist)
    return dist


def _check_distribute_args(strategy, factory, factory_kwargs: dict) -> None:
    """``distribute_dataset``'s arguments: a strategy, a factory that takes
    ``input_context=``, and no ``input_context`` of the caller's (ValueError)."""
    if "input_context" in factory_kwargs:
        raise ValueError(
            "`input_context` is passed by distribute_dataset itself. "
            f"Received: input_context={factory_kwargs['input_context']!r}")
    if not callable(getattr(strategy, "distribute_datasets_from_function", None)):
        raise ValueError("`strategy` must be a tf.distribute.Strategy (e.g. "
                         f"tf.distribute.MirroredStrategy()). Received: strategy={strategy!r}")
    if not callable(factory):
        raise ValueError(f"`factory` must be callable. Received: factory={factory!r}")
    try:
        params = inspect.signature(factory).parameters
        ok = "input_context" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):  # builtins without a signature
        ok = True
    if not ok:
        raise ValueError(
            "`factory` must accept an `input_context=` keyword argument (e.g. "
            f"pipeline.from_directory). Received: factory={factory!r}")


# --- tf.data service ---------------------------------------------------------

def _register_tfio_ops(load_tfio: bool):
    """Imports tensorflow-io so its ops (WebP/TIFF/EXIF decode) are registered.

    Pipeline graphs that meet TIFF, AVIF, WebP (before TF 2.18) or remote URIs
    contain tensorflow-io ops; a dispatcher or worker without them refuses the job with
    "Op type not registered 'IO>DecodeTiffInfo'" (seen here on real photos).
    """
    if not load_tfio:
        return
    if not stack.tfio_status().available:
        logging.warning("pipeline: %s; jobs whose graphs need its ops (WebP before TF 2.18, "
                        "TIFF, AVIF, s3:// URIs) will be refused", stack.tfio_status().reason)
        return
    # tfio_status ran one of its ops (a WebP decode): its op library is loaded.


def _connect(address: str, timeout: float) -> None:
    """A TCP connection to "host:port", closed at once; OSError if none, ValueError if
    ``address`` has no port number."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host.strip("[]") or "localhost", int(port)),
                                  timeout=timeout):
        pass


def _check_reachable(address: str, service: str, timeout: float = 10.0) -> None:
    """Refuses a dispatcher address where nothing listens (TCP connect test)."""
    try:
        _connect(address, timeout)
    except (OSError, ValueError) as e:
        raise ValueError(
            f"no tf.data service dispatcher answers at {address!r} ({e}); start one with "
            f"`python -m pipeline service dispatcher --port=PORT`. Received: service={service!r}"
        ) from None


class PortInUseError(RuntimeError):
    """A tf.data service server's fixed port is taken (``run_dispatcher`` / ``run_worker``).

    Checked by a plain bind (``pipeline.deliver.service_args.claim_port``) right before the server
    binds: gRPC binds with ``SO_REUSEPORT``, so a second server on a taken port would
    otherwise start beside the first and share it.

    Attributes:
        port: int, the port asked for.
        reason: str, the operating system's words ("Address already in use").
    """

    def __init__(self, role: str, port: int, reason: str):
        super().__init__(f"cannot start the tf.data service {role} on port {port}: the port "
                         f"is in use ({reason})")
        self.port = port
        self.reason = reason


def _claim_now(role: str, port: int) -> int:
    """``port``, checked free right before the server binds it; for 0, a free port chosen
    by the OS now (so that it can be logged: TensorFlow's worker has no public way to
    tell the port it bound)."""
    try:
        with contextlib.closing(service_args.claim_port(port)) as sock:
            return sock.getsockname()[1]
    except OSError as e:
        raise PortInUseError(role, port, e.strerror or str(e)) from None


def _wait_for_dispatcher(address: str, timeout_ms: Optional[int]) -> Optional[int]:
    """Waits in Python, twice a second, until a TCP connection to ``address`` succeeds, so
    that Ctrl-C (``KeyboardInterrupt``) stops a worker waiting for its dispatcher:
    ``WorkerServer.start()`` retries inside TensorFlow's C++ holding Python's GIL, where
    no signal handler runs. Returns the milliseconds of ``timeout_ms`` left (at least 1;
    TensorFlow's start then fails when they run out), or None without a timeout."""
    deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
    while True:
        try:
            _connect(address, timeout=1.0)
            break
        except ValueError:
            raise ValueError("`dispatcher_address` must be 'host:port'. "
                             f"Received: dispatcher_address={address!r}") from None
        except OSError:
            if deadline is not None and time.monotonic() >= deadline:
                break
            time.sleep(0.5)
    if deadline is None:
        return None
    return max(1, int((deadline - time.monotonic()) * 1000))


def service_transformation(opts: config_lib.ImageOptions):
    """The ``tf.data.experimental.service.distribute`` transformation for ``opts``.

    Args:
        opts: validated options with ``service`` set ("grpc://host:port" or
            "host:port").

    Returns:
        A function ``Dataset -> Dataset`` for ``ds.apply``.

    Raises:
        ValueError: no dispatcher answers at the address within 10 s (without
            this check, registering the dataset blocks forever).
    """
    service = opts.service
    if "://" in service:
        protocol, address = service.split("://", 1)
    else:
        protocol, address = "grpc", service
    _check_reachable(address, service)
    distribute = tf.data.experimental.service.distribute(
        processing_mode=PROCESSING_MODES[opts.processing_mode],
        service=(protocol, address),
        job_name=opts.job_name)
    if opts.service_timeout_s is None:
        return distribute
    return lambda ds: bound_wait(ds.apply(distribute), opts.service_timeout_s, service)


_REAL, _TICK, _END = 0, 1, 2  # what an element of bound_wait's merged stream is


def _stand_in(spec):
    """A small element of structure ``spec`` (zeros; unknown dimensions 0) that a tick
    carries: tf.data merges only streams of one structure."""
    def one(s):
        if not isinstance(s, tf.TensorSpec):
            raise ValueError("`service_timeout_s` needs dense tensors in the elements; "
                             f"pass service_timeout_s=None. Received an element part {s!r}")
        if s.shape.rank is None:
            return tf.zeros([0], s.dtype)
        return tf.zeros([0 if d is None else d for d in s.shape.as_list()], s.dtype)
    return tf.nest.map_structure(one, spec)


def _ticks(period_s: float, spec) -> tf.data.Dataset:
    """An endless stream of stand-ins, one each ``period_s`` (``tf.raw_ops.SleepDataset``,
    public), each stamped with the time it was made."""
    idle = tf.data.Dataset.from_tensors(tf.constant(0, tf.int32)).repeat()
    slept = tf.data.experimental.from_variant(tf.raw_ops.SleepDataset(
        input_dataset=tf.data.experimental.to_variant(idle),
        sleep_microseconds=int(period_s * 1e6), output_types=[tf.int32], output_shapes=[[]]),
        idle.element_spec)
    return slept.map(graph_fn(lambda _: (tf.constant(_TICK, tf.int8), tf.timestamp(),
                                         _stand_in(spec))))


def bound_wait(ds: tf.data.Dataset, timeout_s: float, service: str) -> tf.data.Dataset:
    """``ds`` (a tf.data service dataset), failing once the reader has waited
    ``timeout_s`` seconds for an element, instead of waiting without end.

    In graph ops on the client, nothing in Python: ``ds`` and a stream of ticks, one
    each ``period = min(0.1 s, timeout_s / 10)``, are merged by a non-deterministic
    ``interleave`` (``ds``'s own order is kept); a ``scan`` counts the ticks that
    reached the reader fresh, within ``min(0.5 s, timeout_s / 2)`` of being made (the
    reader was waiting, not busy elsewhere: ticks that sat in the buffer while it
    trained are not counted), since the last element of ``ds``; ``ceil(timeout_s /
    period)`` of them raise. An end marker after ``ds``'s last element ends the
    stream; ticks are filtered out. The elements, their order and ``ds.options()``
    are unchanged. The short period keeps the end of an epoch prompt (the interleave
    waits for a sleeping tick when it closes).

    Args:
        ds: the dataset ``tf.data.experimental.service.distribute`` returned; its
            elements dense tensors (any nesting).
        timeout_s: float > 0.
        service: the dispatcher address, for the message.

    Returns:
        A ``tf.data.Dataset`` with ``ds``'s elements and ``element_spec``.

    Raises:
        ValueError: ``ds``'s elements hold a ragged or sparse part.
        tf.errors.InvalidArgumentError (while iterating): no element for
            ``timeout_s`` s while the reader waited; the message starts "pipeline: no
            element from the tf.data service at SERVICE".
    """
    spec = ds.element_spec
    period, window = min(0.1, timeout_s / 10), min(0.5, timeout_s / 2)
    limit = max(1, math.ceil(timeout_s / period))
    real = ds.map(graph_fn(lambda *e: (tf.constant(_REAL, tf.int8), tf.timestamp(),
                                       e if isinstance(spec, tuple) else e[0])))
    end = tf.data.Dataset.from_tensors(tf.constant(_END, tf.int8)).map(
        graph_fn(lambda kind: (kind, tf.timestamp(), _stand_in(spec))))
    merged = tf.data.Dataset.from_tensors(real.concatenate(end)).concatenate(
        tf.data.Dataset.from_tensors(_ticks(period, spec))).interleave(
            graph_fn(lambda branch: branch), cycle_length=2, block_length=1,
            num_parallel_calls=2, deterministic=False)
    message = (
        f"pipeline: no element from the tf.data service at {service} for {timeout_s:g} s "
        f"while the reader waited (service_timeout_s={timeout_s:g}). A worker of this job "
        "is most likely gone (killed, crashed or unreachable): the dispatcher keeps its "
        "task and hands its share to no other worker, so the epoch cannot end: restart "
        "that worker at its address (the epoch then ends without its files) or the "
        "service; if the workers are only slow, raise service_timeout_s")

    def watch(waited, element):
        kind, made, value = element
        fresh = (kind == _TICK) & (tf.timestamp() - made < window)
        waited = tf.where(kind == _REAL, tf.constant(0, tf.int64),
                          waited + tf.cast(fresh, tf.int64))
        with tf.control_dependencies([tf.debugging.Assert(waited < limit, [message])]):
            return waited, (tf.identity(kind), value)

    out = merged.scan(tf.constant(0, tf.int64), graph_fn(watch))
    out = out.take_while(graph_fn(lambda kind, _: kind != _END))
    out = out.filter(graph_fn(lambda kind, _: kind == _REAL))
    return out.map(graph_fn(lambda _, value: value)).with_options(ds.options())


@checks.known_keywords()
def run_dispatcher(port: int = service_args.DISPATCHER_PORT,
                   worker_addresses: Optional[Sequence[str]] = None,
                   work_dir: Optional[str] = None, fault_tolerant_mode: bool = False,
                   job_gc_timeout_ms: Optional[int] = None,
                   worker_timeout_ms: Optional[int] = None, load_tfio: bool = True,
                   block: bool = True):
    """Starts a tf.data service dispatcher (``tf.data.experimental.service.DispatchServer``).

    Args:
        port: int, TCP port to listen on (0 picks a free one: the printed
            ``target`` names it).
        worker_addresses: list of "host:port" of the workers, or None. Required
            for ``processing_mode="file"``, whose workers must then use those
            fixed ports.
        work_dir: str or None, where the dispatcher journals its state.
        fault_tolerant_mode: bool, journal state to ``work_dir`` for restarts.
        job_gc_timeout_ms: int or None, ms before an unused job is collected.
        worker_timeout_ms: int or None, ms without heartbeat before a worker is
            considered gone.
        load_tfio: bool, import tensorflow-io first so that graphs using its
            ops (WebP, TIFF, EXIF orientation) are accepted.
        block: bool, wait until the server stops (the CLI) or return at once.

    Returns:
        The started ``DispatchServer`` (its ``target`` is "grpc://host:port").

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        ValueError: a bad argument (``service_args.check_dispatcher``: ``port``
            0-65535, ``worker_timeout_ms`` > 0, ``fault_tolerant_mode`` without
            ``work_dir``, a worker address that is not "host:port"), before
            TensorFlow starts anything.
        pipeline.deliver.distribute.PortInUseError (a ``RuntimeError``): ``port`` is
            taken (checked right before the server binds it, where gRPC would
            share it with the other server).
        RuntimeError: the server cannot start otherwise (gRPC's "Could not start ...").
    """
    service_args.check_dispatcher(port, worker_addresses, work_dir, fault_tolerant_mode,
                                  worker_timeout_ms)
    _register_tfio_ops(load_tfio)
    if port:
        _claim_now("dispatcher", port)
    kw = {}
    if job_gc_timeout_ms is not None:
        kw["job_gc_timeout_ms"] = job_gc_timeout_ms
    if worker_timeout_ms is not None:
        kw["worker_timeout_ms"] = worker_timeout_ms
    cfg = tf.data.experimental.service.DispatcherConfig(
        port=port, worker_addresses=list(worker_addresses) if worker_addresses else None,
        work_dir=work_dir, fault_tolerant_mode=fault_tolerant_mode, **kw)
    server = tf.data.experimental.service.DispatchServer(cfg, start=True)
    print(f"pipeline: dispatcher listening at {server.target}", flush=True)
    if block:
        serve_until_interrupted(server)
    return server


def serve_until_interrupted(server) -> None:
    """Blocks while ``server`` (a ``DispatchServer`` or ``WorkerServer``) runs, until
    Ctrl-C, which raises ``KeyboardInterrupt`` here as in any Python program.

    ``server.join()`` waits inside TensorFlow's C++, where Python's SIGINT handler
    never runs, so Ctrl-C did not stop ``python -m pipeline service``: this waits in
    Python instead, waking twice a second.
    """
    del server  # kept alive by the caller, which holds it
    while True:
        time.sleep(0.5)


@checks.known_keywords()
def run_worker(dispatcher_address: str, port: int = 0,
               worker_address: Optional[str] = None,
               heartbeat_interval_ms: Optional[int] = None,
               dispatcher_timeout_ms: Optional[int] = None, load_tfio: bool = True,
               block: bool = True):
    """Starts a tf.data service worker (``tf.data.experimental.service.WorkerServer``).

    Args:
        dispatcher_address: "host:port" (a "grpc://" prefix is accepted).
        port: int, TCP port (0: a free one, chosen through the OS right before
            the server starts, and logged; ``processing_mode="file"`` needs the
            fixed port listed in the dispatcher's worker_addresses).
        worker_address: "host:port" the dispatcher and clients use to reach this
            worker; default "localhost:<port>". With "file" mode it must match
            the dispatcher's ``worker_addresses`` entry exactly.
        heartbeat_interval_ms: int or None.
        dispatcher_timeout_ms: int or None, how long to retry reaching the
            dispatcher (None: until it answers). The worker first waits for the
            dispatcher's port to answer, in Python (so Ctrl-C stops it), then
            starts.
        load_tfio: bool, import tensorflow-io first so that graphs using its
            ops (WebP, TIFF, EXIF orientation) can run.
        block: bool, wait until the server stops (the CLI) or return at once.

    Returns:
        The started ``WorkerServer``.

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        pipeline.deliver.distribute.PortInUseError (a ``RuntimeError``): ``port`` is
            taken (checked right before the server binds it, where gRPC would
            share it with the other server).
        RuntimeError: the server cannot start otherwise (gRPC's "Could not start ...").
        ValueError: a bad argument (``service_args.check_worker``:
            ``dispatcher_address`` or ``worker_address`` not "host:port" with a port
            1-65535, ``port`` 0-65535, ``heartbeat_interval_ms`` > 0), before
            TensorFlow starts anything.
        KeyboardInterrupt: Ctrl-C, also while waiting for the dispatcher.
    """
    service_args.check_worker(dispatcher_address, port, worker_address, heartbeat_interval_ms)
    if "://" in dispatcher_address:
        dispatcher_address = dispatcher_address.split("://", 1)[1]
    _register_tfio_ops(load_tfio)
    # In Python, where Ctrl-C works; TensorFlow's own retry then succeeds at once.
    left_ms = _wait_for_dispatcher(dispatcher_address, dispatcher_timeout_ms)
    kw = {}
    if heartbeat_interval_ms is not None:
        kw["heartbeat_interval_ms"] = heartbeat_interval_ms
    if left_ms is not None:
        kw["dispatcher_timeout_ms"] = left_ms
    port = _claim_now("worker", port)  # 0: a free port chosen now, so the log names it
    if worker_address is None:
        worker_address = f"localhost:{port}"
    cfg = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=dispatcher_address, worker_address=worker_address, port=port, **kw)
    server = tf.data.experimental.service.WorkerServer(cfg, start=True)
    logging.info("pipeline: tf.data service worker on port %d -> %s", port, dispatcher_address)
    print(f"pipeline: worker on port {port} serving dispatcher {dispatcher_address}", flush=True)
    if block:
        serve_until_interrupted(server)
    return server


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread as Ctrl-C raises ``KeyboardInterrupt``."""


def _raise_terminated(signum, frame) -> None:
    raise _Terminated()


def run_from_flags(role: str, flags: Mapping[str, Any]) -> None:
    """Runs ``role``'s server (``run_dispatcher`` / ``run_worker``) with the command
    line's flags (``python -m pipeline service ROLE``) until it is stopped.

    Frees the port ``service_args.check_flags`` held right before the server starts (the library
    checks it again). Ctrl-C or SIGTERM, while waiting for the dispatcher, starting or
    serving, prints "pipeline: stopped (Ctrl-C)" (or "(SIGTERM)") and ends the process
    at once with status 0 (``os._exit``: a gRPC server's shutdown at exit can take
    tens of seconds).

    Args:
        role: "dispatcher" or "worker".
        flags: each flag's value by name, None where not given (e.g. ``vars(args)``).

    Raises:
        ValueError: the port is in use, or the server could not start on it.
    """
    kw = service_args.role_arguments(role, flags)
    if role == "worker":  # it waits (Ctrl-C stops it) until the dispatcher answers
        print(f"pipeline service worker: waiting for the dispatcher at "
              f"{flags['dispatcher_address']} (until it answers; Ctrl-C stops)", flush=True)
    service_args.release_port()  # the library checks it again, right before the server binds it
    signal.signal(signal.SIGTERM, _raise_terminated)  # the servers wait in Python
    try:
        (run_dispatcher if role == "dispatcher" else run_worker)(**kw)
    except PortInUseError as e:
        raise ValueError(service_args.port_in_use_message(
            role, e.port, e.reason, flags["port"] is None)) from None
    except (KeyboardInterrupt, _Terminated) as e:
        print(f"pipeline: stopped ({'Ctrl-C' if isinstance(e, KeyboardInterrupt) else 'SIGTERM'})",
              flush=True)
        sys.stderr.flush()
        os._exit(0)  # at once: a gRPC server's shutdown at exit can take tens of seconds
    except RuntimeError as e:
        if "Could not start" not in str(e):
            raise
        raise ValueError(f"cannot start the {role} on --port={kw['port']}: {e} "
                         "(is the port in use? choose another --port)") from None
