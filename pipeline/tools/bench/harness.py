"""Benchmark harness: throughput, time to first batch and peak memory.

Each candidate runs in its own subprocess (``python -m pipeline.tools.bench.harness SPEC``),
so that its peak RSS is its own (``VmHWM`` from ``/proc/self/status``: a child
inherits ``ru_maxrss`` across fork and exec) and one candidate's threads and
caches do not slow the next. The CLI (``python -m pipeline bench``) and the
suites in ``benchmarks/`` both call ``run_candidates``.

Figures (all per candidate):
    images_per_sec: steady state, images after each epoch's first batch
        divided by the time after that first batch (images/s).
    first_batch_sec: seconds from building the dataset to its first batch.
    peak_rss_mb: the process's peak resident memory (MiB).
    rss_after_import_mb: resident memory after importing TensorFlow (MiB).
    images_per_cpu_sec: images / CPU seconds over the epochs (steadier than
        images/s on a noisy machine): this process's and its worker
        processes' (``cpu_seconds``).
    cpu_cores_used: CPU seconds / wall seconds over the epochs.
    steady_images_per_cpu_sec, steady_cpu_cores_used: the same over the
        steady state only (after each epoch's first batch, as images_per_sec).
    epoch_start_cpu_sec: mean CPU seconds from starting an epoch (creating
        its iterator) to its first batch; a fixed cost per epoch that weighs
        on the whole-epoch figures above when epochs are short.
    epoch_images_per_sec: images / wall seconds over the epochs, first
        batches included (building excluded).
    total_sec: seconds from building the dataset to the end of the last
        epoch (includes building, loading and every first batch).
    images_per_sec_incl_build: images delivered / ``total_sec``.
    psnr_db_median, psnr_db_p5, psnr_images: with ``run_candidates(...,
        quality_images=K)``, the quality of what the candidate delivers
        (``pipeline.transform.quality``): the first K files of the index, in index
        order, are linked into a folder of their own; after its timed
        epochs, the candidate's subprocess builds it once more on that folder
        (batch size K, one epoch, outside the timed part) and hands its
        images back; each is matched to its own reference (an antialiased
        resize of the file's full decode) by content, as loaders need not
        keep order, and the PSNR (dB) per image is summed up as the median
        and 5th percentile. Measured once per candidate (the first round),
        and only for candidates registered with ``quality=True`` (eval-mode
        stretch resizes: a random or centred crop is not comparable to the
        reference).

A factory may attach ``bench_extra`` (a dict of JSON values, e.g. ``load_sec``)
to what it returns; ``measure`` merges it into the figures.
"""

from __future__ import annotations

if __name__ == "__main__":  # a candidate's process: Ctrl-C ends it without a traceback
    import signal as _signal
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)

import importlib
import json
import re
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

# --- what a run can time ----------------------------------------------------
# Each epoch's first batch is not timed (it holds the epoch's start-up): a run
# times the batches after it, and needs at least this many per epoch to give
# a figure worth printing (one timed batch is one sample of a batch's time).
MIN_TIMED_BATCHES = 2


def timed_batches(num_images: int, batch_size: int) -> int:
    """Batches per epoch that a run times: all but the first (the last may be partial)."""
    return max(0, -(-num_images // batch_size) - 1)


def min_images(batch_size: int) -> int:
    """The fewest images per epoch that give ``MIN_TIMED_BATCHES`` timed batches."""
    return MIN_TIMED_BATCHES * batch_size + 1


def max_batch_size(num_images: int) -> int:
    """The largest batch size that gives ``num_images`` images ``MIN_TIMED_BATCHES``
    timed batches per epoch; 0 when none does."""
    return max(0, (num_images - 1) // MIN_TIMED_BATCHES)


# --- candidates -------------------------------------------------------------
# Filled by ``register``. The harness knows no candidate by itself:
# ``pipeline.tools.bench.candidates`` registers the ones built on public APIs (the CLI
# imports it), ``benchmarks/peer_candidates.py`` the optional peers (torch, TF1
# queue runners, ...). Each candidate records the module that registered it,
# which the subprocess worker imports again.
CANDIDATES: Dict[str, Callable] = {}
DESCRIPTIONS: Dict[str, str] = {}
MODULES: Dict[str, str] = {}
QUALITY: Dict[str, bool] = {}  # whether a candidate's output is compared with the reference
# The files ``python -m pipeline bench`` measures the PSNR on (``run_candidates``' quality_images).
QUALITY_IMAGES = 16


class CandidateSkipped(Exception):
    """Raised by a factory that cannot run here (e.g. its library is missing)."""


PRECHECKS: Dict[str, Callable[[], Optional[str]]] = {}


def register(name: str, factory: Callable, description: str = "",
             precheck: Optional[Callable[[], Optional[str]]] = None,
             module: Optional[str] = None, quality: bool = True) -> None:
    """Adds a candidate: ``factory(spec) -> iterable of batches``.

    Args:
        name: the candidate's name (``--compare`` of the CLI).
        factory: ``factory(spec)``, a module-level function.
        description: one line for tables and charts.
        precheck: when given, ``precheck()`` runs in the parent before a
            subprocess is started and returns a reason to skip the candidate
            (or None to run it).
        module: the importable module that registers the candidate (default
            ``factory.__module__``). The subprocess worker imports it, with
            the folder of its file first on ``PYTHONPATH``.
        quality: whether its images are comparable with the quality
            reference (``pipeline.transform.quality``: the whole image resized to the
            size): True for eval-mode stretch resizes, False for random or
            centred crops (their PSNR is not measured).

    Raises:
        ValueError: the module is ``__main__`` (a subprocess cannot import
            it again): register from an importable module.
    """
    module = module or getattr(factory, "__module__", None)
    if not module or module == "__main__":
        raise ValueError(
            "A candidate must be registered from an importable module (the benchmark "
            f"subprocess imports it again). Received: name={name!r}, module={module!r}")
    CANDIDATES[name] = factory
    DESCRIPTIONS[name] = description or name
    MODULES[name] = module
    QUALITY[name] = bool(quality)
    if precheck is not None:
        PRECHECKS[name] = precheck


def _module_dirs(names: List[str]) -> List[str]:
    """The folders to put on a worker's PYTHONPATH to import the candidates' modules."""
    dirs = []
    for n in names:
        mod = sys.modules.get(MODULES.get(n, ""))
        path = getattr(mod, "__file__", None)
        if not path:
            continue
        d = os.path.dirname(os.path.abspath(path))
        for _ in range(MODULES[n].count(".")):  # a package module: the folder above it
            d = os.path.dirname(d)
        if d not in dirs:
            dirs.append(d)
    return dirs


# --- measurement ------------------------------------------------------------

def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _descendants(pid: int) -> List[int]:
    """The live descendant processes of ``pid`` (``/proc/PID/task/*/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a live process (``/proc/PID/stat``), 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15)
    except (OSError, IndexError, ValueError):
        return 0.0


def cpu_seconds() -> float:
    """CPU seconds of this process and of its descendants: ``time.process_time()``,
    plus the children that ended and were waited for (``os.times()``), plus the live
    descendant processes (``/proc``). A loader's worker processes (torch's
    ``DataLoader``, Grain's ``mp_prefetch``) are so counted in images per
    CPU-second; a candidate without worker processes gets ``process_time()``."""
    t = os.times()
    return (time.process_time() + t.children_user + t.children_system
            + sum(_proc_cpu(p) for p in _descendants(os.getpid())))


def _batch_len(batch) -> int:
    x = batch[0] if isinstance(batch, (tuple, list)) else batch
    return int(x.shape[0])


# The progress bar of a candidate's epoch: tqdm's own rate (each epoch's images over its
# time, start-up included) is left out; the postfix shows the steady rate, as the table.
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"
STEADY_POSTFIX = "steady {} img/s"


def _rate_text(n: int, seconds: float) -> str:
    """``n / seconds`` as the bar shows it: "1,234", "56.7", or "-" before any is timed."""
    if not n or seconds <= 0:
        return "-"
    rate = n / seconds
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def measure(factory: Callable, spec: dict, progress: bool = True) -> dict:
    """Runs ``spec["epochs"]`` epochs of ``factory(spec)`` and returns the figures.

    With ``progress``, a tqdm bar per epoch (stderr) whose postfix is the steady
    rate the table reports ("steady N img/s": the images after each epoch's first
    batch over their time, the epochs so far), not tqdm's rate, which counts each
    epoch's start-up.
    """
    from tqdm.auto import tqdm

    rss0 = _status_mb("VmRSS")
    t_build = time.perf_counter()
    ds = factory(spec)
    epochs = spec.get("epochs", 3)
    n_total, steady_n, steady_t, steady_cpu, start_cpu = 0, 0, 0.0, 0.0, 0.0
    first_batch = None
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    total = spec.get("num_images")
    for epoch in range(epochs):
        c_start = cpu_seconds()
        t_first = c_first = None
        n = 0
        # The bar shows the table's measure, not tqdm's rate (which counts each epoch's
        # start-up): images after each epoch's first batch over their time, all epochs so far.
        bar = tqdm(total=total, unit="img", desc=f"{spec['name']} epoch {epoch + 1}/{epochs}",
                   disable=not progress, leave=False, file=sys.stderr, bar_format=BAR_FORMAT,
                   postfix=STEADY_POSTFIX.format(_rate_text(steady_n, steady_t)))
        for batch in ds:
            b = _batch_len(batch)
            if t_first is None:
                t_first, c_first = time.perf_counter(), cpu_seconds()
                start_cpu += c_first - c_start
                if first_batch is None:
                    first_batch = t_first - t_build
            else:
                steady_n += b
                if progress:
                    bar.set_postfix_str(STEADY_POSTFIX.format(_rate_text(
                        steady_n, steady_t + time.perf_counter() - t_first)), refresh=False)
            n += b
            bar.update(b)
        if t_first is not None:
            steady_t += time.perf_counter() - t_first
            steady_cpu += cpu_seconds() - c_first
            if progress:  # the epoch's end counts too: the last figure shown is the table's
                bar.set_postfix_str(STEADY_POSTFIX.format(_rate_text(steady_n, steady_t)))
        bar.close()
        n_total += n
    cpu = cpu_seconds() - cpu0
    t_end = time.perf_counter()
    wall = t_end - wall0
    out = {
        "name": spec["name"],
        "description": DESCRIPTIONS.get(spec["name"], spec["name"]),
        # No steady state when every epoch is a single batch: NaN, not 0.
        "images_per_sec": steady_n / steady_t if steady_n and steady_t > 0 else float("nan"),
        "first_batch_sec": first_batch,
        "peak_rss_mb": _status_mb("VmHWM"),
        "rss_after_import_mb": rss0,
        "images_per_cpu_sec": n_total / cpu if cpu > 0 else float("nan"),
        "cpu_cores_used": cpu / wall if wall > 0 else float("nan"),
        "steady_images_per_cpu_sec": (steady_n / steady_cpu if steady_n and steady_cpu > 0
                                      else float("nan")),
        "steady_cpu_cores_used": steady_cpu / steady_t if steady_t > 0 else float("nan"),
        "epoch_start_cpu_sec": start_cpu / max(epochs, 1),
        "num_images": n_total // max(epochs, 1),
        "images_delivered": n_total,
        "epochs": epochs,
        "wall_sec": wall,
        "epoch_images_per_sec": n_total / wall if wall > 0 else float("nan"),
        "total_sec": t_end - t_build,
        "images_per_sec_incl_build": n_total / (t_end - t_build),
    }
    out.update(getattr(ds, "bench_extra", None) or {})
    return out


def run_candidate(spec: dict, timeout: Optional[float] = None, progress: bool = True) -> dict:
    """Runs one candidate in a fresh subprocess and returns its figures.

    Raises:
        RuntimeError: the subprocess failed (its stderr tail is included).
    """
    from pipeline import native_stderr
    # The child drops the TensorFlow start-up lines this process has shown
    # (TensorFlow 2.21 writes them whatever the log level): once per bench run.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONUNBUFFERED="1",
               **native_stderr.startup_env())
    from pipeline.tools import sample  # pylint: disable=import-outside-toplevel
    repo = sample.repository_dir()
    first = [repo] + [d for d in _module_dirs([spec["name"]]) if d != repo]
    env["PYTHONPATH"] = os.pathsep.join(
        first + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in first])
    spec = dict(spec, progress=progress)
    if spec["name"] in MODULES:
        spec.setdefault("module", MODULES[spec["name"]])
    cmd = [sys.executable, "-m", "pipeline.tools.bench.harness", json.dumps(spec)]
    if progress:  # the child's stderr (its bars, its error) shows live and is kept
        proc = _run_showing_stderr(cmd, env, timeout)
    else:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=timeout, env=env)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        err = error_tail(proc.stderr or "") if not progress else (
            "its error is printed above")
        if proc.returncode == 0:
            err = "it printed no result line"
        hint = bad_files_hint(spec) if about_files(proc.stderr or "") else ""
        raise RuntimeError(f"benchmark candidate {spec['name']!r} failed "
                           f"(exit {proc.returncode}): {err.rstrip('.')}.{hint}")
    return json.loads(lines[-1])


def bad_files_hint(spec: dict) -> str:
    """The hint for a candidate that failed on a file (``about_files``): pipeline's own
    candidates (``pipeline*``) skip bad files with on_error="skip" (the spec's, or its
    ``options``'), where it is not given already; the peers do not skip bad files at all."""
    name = str(spec.get("name", ""))
    if not name.startswith("pipeline"):
        return (f" The peers do not skip bad files (--on_error is pipeline's): find them with "
                f"`python -m pipeline scan`, or leave {name} out of --compare.")
    if any(_skips(v) for v in (spec.get("on_error"), spec.get("options", {}).get("on_error"))):
        return ""
    return (" A folder with bad files: --on_error=skip, or find them with "
            "`python -m pipeline scan`.")


def _skips(on_error) -> bool:
    """Whether a spec's ``on_error`` (None: not given) skips bad files, as
    ``pipeline.config.OnError`` reads it (a value it refuses skips nothing).
    Imports TensorFlow (``check_spec`` has, before any candidate ran)."""
    if on_error is None:
        return False
    from pipeline import config  # pylint: disable=import-outside-toplevel
    try:
        return config.OnError.of(on_error).skips
    except ValueError:
        return False


def _run_showing_stderr(cmd: List[str], env: dict, timeout: Optional[float],
                        keep: int = 1 << 16) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd)`` whose stderr is shown as it comes (progress bars) and
    whose last ``keep`` bytes are returned too (to tell what a failure was about)."""
    import threading

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    tail = bytearray()

    def pump():
        out = getattr(sys.stderr, "buffer", None)
        while True:
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                return
            if out is not None:
                out.write(chunk)
                out.flush()
            else:
                sys.stderr.write(chunk.decode("utf-8", "replace"))
                sys.stderr.flush()
            tail.extend(chunk)
            del tail[:-keep]

    stdout = []
    threads = [threading.Thread(target=pump, daemon=True),
               threading.Thread(target=lambda: stdout.append(proc.stdout.read()), daemon=True)]
    for t in threads:
        t.start()
    try:
        proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        proc.wait()
        raise
    finally:
        for t in threads:
            t.join(10)
        proc.stdout.close()
        proc.stderr.close()
    return subprocess.CompletedProcess(cmd, proc.returncode,
                                       (stdout[0] if stdout else b"").decode("utf-8", "replace"),
                                       tail.decode("utf-8", "replace"))


# What a failure about a file says: pipeline's own reason, or TensorFlow's and Keras'
# decoders' (a peer meeting a bad file).
_FILE_FAILURE = re.compile(
    r"cannot load file|bad files?\b|Invalid JPEG data|Unknown image file format|"
    r"Input is empty|Premature end of JPEG|truncated|decode_(?:jpeg|png|image|gif|bmp)|"
    r"DecodeJpeg|DecodePng|DecodeImage|cannot identify image file|image file is truncated")


def about_files(stderr: str) -> bool:
    """True when a failed candidate's ``stderr`` (its last lines) is about a file that
    could not be read or decoded, the case the ``--on_error=skip`` hint is for."""
    return bool(_FILE_FAILURE.search(error_tail(stderr)))


def error_tail(stderr: str, max_chars: int = 800) -> str:
    """The last whole lines of a failed child's ``stderr``, at most ``max_chars``
    characters, without TensorFlow's C++ log lines (its start-up lines, which
    TensorFlow 2.21 writes whatever the log level) or blank lines."""
    from pipeline import native_stderr
    keep = [line for line in stderr.splitlines() if line.strip()
            and not native_stderr.LOG_PREFIX.match(line.encode("utf-8", "replace"))
            and "before absl::InitializeLog() is called" not in line
            and not line.startswith("To enable the following instructions")]
    out: List[str] = []
    for line in reversed(keep):
        if out and sum(len(x) + 1 for x in out) + len(line) > max_chars:
            break
        out.insert(0, line[-max_chars:])
    return "\n".join(out)


# The peers take the seed as Keras' and numpy's seeds, which are unsigned 32-bit;
# pipeline's own candidates take the factories' range (``pipeline.config.check_seed``).
PEER_SEED_LIMIT = 2 ** 32


def check_spec(spec: dict, names: Sequence[str]) -> dict:
    """``spec`` with its options checked by ``pipeline.config``'s validators.

    ``image_size`` (``config.check_image_size``, returned as a list), ``seed``
    (``config.check_seed``) and ``options["on_error"]`` (``config.check_on_error``);
    with a peer among ``names`` (a name not starting with "pipeline"), the seed
    must also be below 2**32 (``PEER_SEED_LIMIT``). Imports TensorFlow.

    Raises:
        ValueError: naming the option and the value received.
    """
    from pipeline import config  # pylint: disable=import-outside-toplevel
    spec = dict(spec)
    spec["image_size"] = list(config.check_image_size(spec["image_size"],
                                                      spec.get("batch_size")))
    spec["seed"] = config.check_seed(spec.get("seed"))
    if "on_error" in spec.get("options", {}):
        config.check_on_error(spec["options"]["on_error"])
    peers = [n for n in names if not n.startswith("pipeline")]
    if peers and spec["seed"] is not None and spec["seed"] >= PEER_SEED_LIMIT:
        raise ValueError(f"`seed` must be an int in [0, 2**32) with peers ({', '.join(peers)}): "
                         "they take it as Keras' and numpy's seeds, which are unsigned 32-bit. "
                         f"Received: seed={spec['seed']!r}")
    return spec


def unknown_candidates(names: Sequence[str]) -> List[str]:
    """The names in ``names`` that no candidate is registered under (``register``)."""
    return [n for n in names if n and n not in CANDIDATES]


def check_run(batch_size: int, num_images: int, epochs: int, repeats: int,
              max_spread: Optional[float] = None,
              target_images_per_sec: Optional[float] = None) -> None:
    """Checks a run's numbers before any work (imports no TensorFlow).

    ``batch_size``, ``num_images`` (of a generated sample), ``epochs``,
    ``repeats``: integers >= 1; ``max_spread`` and ``target_images_per_sec``
    (None: not given): finite numbers > 0.

    Raises:
        ValueError: naming the argument and the value received.
    """
    from pipeline import checks  # pylint: disable=import-outside-toplevel
    for name, value in (("batch_size", batch_size), ("sample_images", num_images),
                        ("epochs", epochs), ("repeats", repeats)):
        checks.check_int(name, value)
    for name, value in (("max_spread", max_spread),
                        ("target_images_per_sec", target_images_per_sec)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"`{name}` must be a finite number > 0. "
                             f"{checks.received(name, value)}")


def run_candidates(names: List[str], base_spec: dict, repeats: int = 1,
                   progress: bool = True, keep_going: bool = False,
                   timeout: Optional[float] = None,
                   quality_images: int = 0) -> Dict[str, dict]:
    """Runs candidates side by side, alternating them ``repeats`` times.

    Args:
        names: registered candidate names (see ``register``).
        base_spec: the spec every candidate gets (``name`` is added).
        repeats: rounds; each round runs every candidate once, in order.
        progress: show tqdm bars (on stderr).
        keep_going: record a failed candidate as ``{"name", "error"}`` and go
            on, instead of raising.
        timeout: seconds allowed per candidate run.
        quality_images: K > 0: measure the PSNR of each candidate registered
            with ``quality=True`` on the first K files of
            ``base_spec["data_dir"]`` (see the module docstring), once, in
            its first round; 0 (default): no PSNR.

    Returns:
        {name: figures}, where numeric figures are medians over the repeats
        and ``runs`` holds every run's figures. A candidate that skipped itself
        (``CandidateSkipped``, e.g. a library that is not installed) has
        ``skipped`` (the reason) instead of figures; with ``keep_going`` a
        failed one has ``error``.

    Raises:
        ValueError: an unknown candidate name.
        RuntimeError: a candidate failed (unless ``keep_going``).
    """
    for n in names:
        if n not in CANDIDATES:
            raise ValueError(f"Unknown candidate {n!r}; known: {sorted(CANDIDATES)}. "
                             f"Received: compare={names!r}")
    runs: Dict[str, List[dict]] = {n: [] for n in names}
    done: Dict[str, dict] = {}
    for n in names:
        why = PRECHECKS[n]() if n in PRECHECKS else None
        if why:
            done[n] = {"name": n, "skipped": why, "description": DESCRIPTIONS.get(n, n)}
    import tempfile
    interrupted = False
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-quality-") as tmp:
        quality = _quality_setup(names, base_spec, quality_images, tmp)
        try:
            _rounds(names, base_spec, repeats, progress, keep_going, timeout, done, runs,
                    quality)
        except KeyboardInterrupt:
            interrupted = True
    finished = min((len(runs[n]) for n in names if n not in done), default=0)
    out = _aggregate(names, {n: rs[:finished] if interrupted else rs for n, rs in runs.items()},
                     done, quality)
    if interrupted:
        raise Interrupted(out, finished)
    return out


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during ``run_candidates``: ``results`` holds the rounds every candidate
    finished (``rounds`` of them; candidates with none are left out)."""

    def __init__(self, results: Dict[str, dict], rounds: int):
        super().__init__(f"stopped after {rounds} finished round(s)")
        self.results, self.rounds = results, rounds


def _rounds(names, base_spec, repeats, progress, keep_going, timeout, done, runs, quality):
    """The alternated rounds of ``run_candidates``, filling ``runs`` and ``done``."""
    for _ in range(repeats):
        for n in names:
            if n in done:
                continue
            spec = dict(base_spec, name=n)
            if n in quality and "figures" not in quality[n]:
                spec["quality"] = quality[n]["spec"]
            try:
                r = run_candidate(spec, timeout=timeout, progress=progress)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                if not keep_going:
                    raise
                r = {"name": n, "error": str(e)[-1500:]}
            if "skipped" in r or "error" in r:
                done[n] = r
                continue
            npy = r.pop("quality_images_file", None)
            if npy:
                quality[n]["figures"] = _quality_figures(npy, quality["_references"])
            elif "quality_error" in r:
                quality[n]["figures"] = {"psnr_error": r.pop("quality_error")}
            runs[n].append(r)


def _aggregate(names, runs, done, quality) -> Dict[str, dict]:
    """{name: medians of its runs (and ``runs``), or its skip/error record}."""
    out = {}
    for n in names:
        rs = runs[n]
        if not rs:
            if n in done:
                out[n] = done[n]
            continue
        agg = dict(rs[0])
        for k, v in rs[0].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v is not None:
                agg[k] = statistics.median(r[k] for r in rs)
        agg["runs"] = rs
        agg.update(quality.get(n, {}).get("figures", {}))
        out[n] = agg
    return out


def _quality_setup(names: List[str], base_spec: dict, images: int, tmp: str) -> dict:
    """{name: {"spec": the worker's ``quality`` spec}} for the candidates whose PSNR is
    measured, and ``"_references"``: the references of the subset's files."""
    if images <= 0:
        return {}
    folder = os.path.join(tmp, "subset")
    size = base_spec["image_size"]
    size = (size, size) if isinstance(size, int) else tuple(size)
    paths, refs = quality_subset(base_spec["data_dir"], images, folder, size)
    if not paths:
        return {}
    out: dict = {"_references": refs}
    for n in names:
        if QUALITY.get(n, True):
            out[n] = {"spec": {"data_dir": folder, "images": len(paths),
                               "out": os.path.join(tmp, f"{n}.npy")}}
    return out


def ok(result: Optional[dict]) -> bool:
    """True for a candidate's figures (not skipped, not failed)."""
    return bool(result) and "skipped" not in result and "error" not in result


def ratio(results: Dict[str, dict], a: str, b: str,
          key: str = "images_per_sec") -> Optional[float]:
    """``results[a][key] / results[b][key]``, or None when either is missing."""
    ra, rb = results.get(a), results.get(b)
    if not (ok(ra) and ok(rb)) or not rb.get(key):
        return None
    return ra[key] / rb[key]


SPREAD_LIMIT = 0.25


def spread(result: Optional[dict], key: str = "images_per_sec") -> Optional[dict]:
    """Median, min, max and relative spread ``(max - min) / median`` of one
    candidate's runs (``result["runs"]``), or None without figures.

    ``relative`` is None with fewer than 2 runs (no spread measured).
    """
    if not ok(result):
        return None
    vals = [r[key] for r in result.get("runs", [result]) if isinstance(r.get(key), (int, float))]
    vals = [v for v in vals if v == v]  # NaN: no steady state
    if not vals:
        return None
    med = statistics.median(vals)
    rel = (max(vals) - min(vals)) / med if len(vals) > 1 and med > 0 else None
    return {"median": med, "min": min(vals), "max": max(vals), "runs": len(vals),
            "relative": rel}


def round_ratios(results: Dict[str, dict], a: str, b: str,
                 key: str = "images_per_sec") -> List[float]:
    """``a / b`` of ``key`` round by round (runs alternate, so each round's two
    runs met the same machine load)."""
    if not (ok(results.get(a)) and ok(results.get(b))):
        return []
    ra, rb = results[a].get("runs", [results[a]]), results[b].get("runs", [results[b]])
    return [x[key] / y[key] for x, y in zip(ra, rb) if y.get(key) and x[key] == x[key]]


def spread_line(name: str, s: Optional[dict], unit: str = "",
                max_spread: float = SPREAD_LIMIT, fmt: Callable[[float], str] = "{:.0f}".format
                ) -> str:
    """One line: the median and spread of a figure, and, on a second line,
    that it is too wide to trust when ``(max - min) / median > max_spread``."""
    if s is None:
        return f"{name}: no figures"
    u = f" {unit}" if unit else ""
    text = f"{name}: {fmt(s['median'])}{u}"
    if s["relative"] is None:
        return text + " (one run: no spread measured; use --repeats >= 3)"
    text += (f" (median of {s['runs']} runs, spread {fmt(s['min'])}-{fmt(s['max'])}{u}, "
             f"{100 * s['relative']:.0f}% of the median)")
    if s["relative"] > max_spread:
        text += (f"\n  TOO WIDE TO TRUST: the spread is more than {100 * max_spread:.0f}% of "
                 "the median (a busy machine?). Use more --repeats or images, or a quieter "
                 "machine; images per CPU-second is steadier.")
    return text


def headline(results: Dict[str, dict], reference: str = "pipeline",
             others: Optional[List[str]] = None,
             max_spread: float = SPREAD_LIMIT) -> List[str]:
    """The lines that sum a run up.

    For the reference and each other candidate: median images/s and images
    per CPU-second with their spread; then the reference's speed-up over each
    other candidate (the median of the per-round ratios, with their spread).
    A figure whose spread ``(max - min) / median`` is above ``max_spread``
    gets a line saying it is too wide to trust. A skipped or failed
    candidate gets "no figures" and the reason.
    """
    others = [n for n in (others if others is not None else results) if n != reference]
    lines = []
    for n in [reference] + others:
        r = results.get(n)
        if not ok(r):
            why = (r or {}).get("skipped") or ("failed" if r else "not run")
            lines.append(f"{n}: no figures ({why})")
            continue
        lines.append(spread_line(f"{n} images/s", spread(r), "", max_spread))
        lines.append(spread_line(f"{n} images per CPU-second",
                                 spread(r, "steady_images_per_cpu_sec"), "", max_spread))
    for n in others:
        for key, what in (("images_per_sec", "images/s"),
                          ("steady_images_per_cpu_sec", "images per CPU-second")):
            rs = round_ratios(results, reference, n, key)
            if rs:
                s = spread({"name": "ratio", key: 0, "runs": [{key: v} for v in rs]}, key)
                lines.append(spread_line(f"{reference} / {n}, {what}", s, "", max_spread,
                                         "{:.2f}x".format))
    return lines


def json_safe(obj):
    """``obj`` with NaN and infinite floats as None (JSON has no NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def write_json(path: Optional[str], result: dict, indent: int = 1) -> str:
    """Dumps ``result`` to ``path`` when given (its folder created; NaN and infinite
    floats as null, ``json_safe``; other values by ``str``); returns the text.

    Raises:
        OSError: ``path`` cannot be written.
    """
    text = json.dumps(json_safe(result), indent=indent, default=str, allow_nan=False,
                      ensure_ascii=False)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return text


def _cell(value, width: int, decimals: int) -> str:
    """A table cell: the number, or "-" when there is none (None, NaN, inf)."""
    if isinstance(value, (int, float)) and math.isfinite(value):
        return f"{value:>{width}.{decimals}f}"
    return f"{'-':>{width}}"


def format_table(results: Dict[str, dict], reference: str = "pipeline") -> str:
    """A text table of the figures; the last column is the reference's median
    images/s divided by the candidate's (the ratio of the medians, where
    ``headline`` gives the median of the per-round ratios).
    images/s, img/CPU-s and cores are steady-state figures (after each
    epoch's first batch); "start CPU s" is the CPU cost of starting an epoch."""
    ref = results.get(reference, {}).get("images_per_sec")
    psnr = any(ok(r) and "psnr_db_median" in r for r in results.values())
    head = (f"{'candidate':<20} {'images/s':>9} {'spread':>11} {'img/CPU-s':>9} {'cores':>5} "
            f"{'start CPU s':>11} {'1st batch s':>11} {'peak RSS MiB':>12} {'pipe/it':>7}"
            + (f" {'PSNR dB':>7} {'p5 dB':>6}" if psnr else ""))
    rows = [head, "-" * len(head)]
    for name, r in results.items():
        if not ok(r):
            rows.append(f"{name:<20} {'skipped: ' + r['skipped'] if 'skipped' in r else 'FAILED'}")
            continue
        ratio = (ref / r["images_per_sec"]) if ref and r["images_per_sec"] else None
        per_cpu = r.get("steady_images_per_cpu_sec", r["images_per_cpu_sec"])
        cores = r.get("steady_cpu_cores_used", r["cpu_cores_used"])
        start = r.get("epoch_start_cpu_sec")
        sp = spread(r)
        rng = f"{sp['min']:.0f}-{sp['max']:.0f}" if sp and sp["relative"] is not None else "-"
        rows.append(f"{name:<20} {_cell(r['images_per_sec'], 9, 0)} {rng:>11} "
                    f"{_cell(per_cpu, 9, 0)} {_cell(cores, 5, 2)} {_cell(start, 11, 2)} "
                    f"{_cell(r['first_batch_sec'], 11, 2)} {_cell(r['peak_rss_mb'], 12, 0)} "
                    f"{_cell(ratio, 7, 2)}"
                    + (f" {_cell(r.get('psnr_db_median'), 7, 1)} "
                       f"{_cell(r.get('psnr_db_p5'), 6, 1)}" if psnr else ""))
    rows.append("(medians over the runs; spread: min-max images/s; steady state after each "
                "epoch's first batch; start CPU s: CPU seconds")
    rows.append(" from starting an epoch to its first batch;")
    rows.append(f" pipe/it: the ratio of the medians, {reference}'s median images/s divided "
                "by that candidate's; the summary's")
    rows.append(f" '{reference} / candidate' lines are the median of the per-round ratios "
                "instead, so the two can differ)")
    if psnr:
        rows[-1] = rows[-1][:-1] + ";"
        rows.append(" PSNR dB, p5 dB: median and 5th percentile PSNR per image against an "
                    "antialiased resize of the full")
        rows.append(" decode (pipeline.transform.quality), on a fixed subset of the files; '-' for "
                    "crops and random crops)")
    return "\n".join(rows)


def quality_outputs(factory: Callable, spec: dict) -> str:
    """Builds the candidate once more on ``spec["quality"]["data_dir"]`` (batch
    size ``spec["quality"]["images"]``, one epoch), saves every image it
    delivers (numpy ``.npy``, [n, h, w, c] as delivered) to
    ``spec["quality"]["out"]`` and returns that path. Runs after the timed
    epochs."""
    import numpy as np
    q = spec["quality"]
    qspec = dict(spec, data_dir=q["data_dir"], batch_size=q["images"], epochs=1,
                 num_images=q["images"])
    images = []
    for batch in factory(qspec):
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        images.append(np.asarray(x))
    np.save(q["out"], np.concatenate(images) if images else np.zeros((0, 1, 1, 3), np.uint8))
    return q["out"]


def quality_subset(data_dir: str, images: int, folder: str, size: Sequence[int]):
    """The quality subset: the first ``images`` files of ``data_dir``'s index (index
    order) whose reference can be made (a bad file is passed over: the timed runs
    meet it), linked into ``folder`` under their class sub-folders as in
    ``data_dir``.

    Returns:
        (their paths in ``data_dir``, their references: float32 [h, w, 3] each).
    """
    from pipeline.sources import index as index_lib
    from pipeline.transform import quality as quality_lib
    paths, refs = [], []
    for p in index_lib.index_directory(data_dir).paths:
        if len(paths) == images:
            break
        try:
            ref = quality_lib.reference_for(p, size)
        except Exception:  # noqa: BLE001 - a bad file (any decoder error): not in the subset
            continue
        dst = os.path.join(folder, os.path.relpath(p, data_dir))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.symlink(os.path.abspath(p), dst)
        paths.append(p)
        refs.append(ref)
    return paths, refs


def _quality_figures(npy: str, references: List) -> dict:
    """The PSNR figures of a candidate's saved images against the references."""
    import numpy as np
    from pipeline.transform import quality
    got = quality.as_pixels(np.load(npy))
    return quality.summary(quality.match_psnr(got, references))


def _worker(spec_json: str) -> None:
    spec = json.loads(spec_json)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from pipeline import native_stderr
    # TensorFlow 2.21 logs its start-up lines twice, and the parent has shown them
    # already: each shows once per bench run (the import cost is not measured).
    native_stderr.import_tensorflow()
    for mod in [spec["module"]] if spec.get("module") else []:
        importlib.import_module(mod)  # registers the candidate in this process
    for mod in spec.get("imports", []):
        importlib.import_module(mod)
    try:
        result = measure(CANDIDATES[spec["name"]], spec, progress=spec.get("progress", True))
        if spec.get("quality"):
            try:
                result["quality_images_file"] = quality_outputs(CANDIDATES[spec["name"]], spec)
            except Exception as e:  # noqa: BLE001 - the timed figures stand without it
                result["quality_error"] = f"{type(e).__name__}: {e}"[:500]
    except CandidateSkipped as e:
        result = {"name": spec["name"], "skipped": str(e),
                  "description": DESCRIPTIONS.get(spec["name"], spec["name"])}
    except Exception as e:  # noqa: BLE001 - reported to the parent, then a hard exit
        # A normal interpreter exit can hang here after tf.data raised mid-epoch (its
        # threads still hold TensorFlow's locks): say why on stderr and leave at once.
        message = getattr(e, "message", None) or str(e)
        print(f"{type(e).__name__}: {message.strip().splitlines()[0] if message.strip() else ''}",
              file=sys.stderr, flush=True)
        os._exit(1)
    print(json.dumps(result), flush=True)
    sys.stderr.flush()
    os._exit(0)  # queue-runner threads and Sessions must not hold up the exit


if __name__ == "__main__":
    # Run in the imported module, where spec["imports"] modules register
    # their candidates (not in this __main__ copy of it).
    from pipeline.tools.bench import harness as _bench
    _bench._worker(sys.argv[1])
