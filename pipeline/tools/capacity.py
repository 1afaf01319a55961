"""Capacity plan: the cores and tf.data service workers needed to feed N images/s.

The model is one number measured on the user's own files and options: the
pipeline's cost per image, as **images per CPU-second** (steady state, after
each epoch's first batch, measured in this process by ``measure_cost``,
``repeats`` times; the median is used). Decoding and
resizing are embarrassingly parallel, so the CPU time per image does not
depend on how many cores share the work, and

    cores   = ceil(target_images_per_sec * headroom / images_per_cpu_sec)
    workers = ceil(target_images_per_sec * headroom
                   / (worker_cores * images_per_cpu_sec))

``headroom`` (default 1.25, i.e. 25% spare) covers what the local measurement
does not contain: the tf.data service's own work on the workers (serializing
and compressing batches, gRPC), uneven load between workers, epoch starts and
files that decode slower than the measured sample. ``docs/benchmarks.md``
("Capacity plan against a measured service run") checks the model against a
measured 1 -> 2 worker run (``benchmarks/service_scaling.py --pin_workers --plan``).

Cost is machine-specific: measure on the kind of machine the workers will run
on (``python -m pipeline bench --plan --target_images_per_sec=N`` there).

    from pipeline.tools import capacity
    cost = capacity.measure_cost("photos/", image_size=(224, 224), augment=True)
    print(capacity.capacity_plan(8 * 7000, cost["images_per_cpu_sec"], worker_cores=8,
                                 measurement=cost).table())
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

from pipeline import checks

__all__ = ["CapacityPlan", "capacity_plan", "measure_cost"]

DEFAULT_HEADROOM = 1.25
DEFAULT_WORKER_CORES = 8
# ``measure_cost`` times the batches after each epoch's first and needs at least this many.
MIN_TIMED_BATCHES = 2


def _n(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless ``count`` is 1: "1 worker", "2 workers"."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


@dataclasses.dataclass(frozen=True)
class CapacityPlan:
    """What it takes to feed ``target_images_per_sec`` (see ``capacity_plan``).

    Attributes:
        target_images_per_sec: float, the rate to feed (images/s, all
            accelerators together).
        images_per_cpu_sec: float, the measured cost: images one CPU core
            delivers per second of CPU time.
        headroom: float >= 1, the factor of spare capacity planned.
        worker_cores: int, cores per tf.data service worker.
        cores_exact: float, ``target * headroom / images_per_cpu_sec`` (cores).
        cores: int, ``ceil(cores_exact)``.
        workers: int, ``ceil(cores_exact / worker_cores)`` workers of
            ``worker_cores`` cores.
        worker_images_per_sec: float, one worker's full-speed rate,
            ``worker_cores * images_per_cpu_sec`` (images/s, no headroom).
        fleet_images_per_sec: float, ``workers * worker_images_per_sec``: what
            the planned workers deliver flat out (images/s, >= target *
            headroom).
        measurement: dict or None, how ``images_per_cpu_sec`` was measured
            (``measure_cost``'s result).
    """
    target_images_per_sec: float
    images_per_cpu_sec: float
    headroom: float
    worker_cores: int
    cores_exact: float
    cores: int
    workers: int
    worker_images_per_sec: float
    fleet_images_per_sec: float
    measurement: Optional[dict] = None

    def table(self) -> str:
        """The plan as text lines (the CLI prints this)."""
        lines = []
        m = self.measurement
        if m:
            spread = (f" (median of {m['runs']} runs, {m['min']:.0f}-{m['max']:.0f})"
                      if m.get("runs", 1) > 1 else " (one run: no spread measured)")
            lines += [f"measured: {m['num_images']} images in {m['data_dir']}, "
                      f"image_size={m['image_size'][0]}x{m['image_size'][1]}, "
                      f"{'train (random resized crop + flip)' if m['augment'] else 'eval'} "
                      f"mode, {m['cores_used']:.2f} of {_n(m['machine_cores'], 'core')} busy",
                      f"cost: {self.images_per_cpu_sec:.0f} images per CPU-second{spread}"]
        else:
            lines.append(f"cost: {self.images_per_cpu_sec:.0f} images per CPU-second (given)")
        lines += [
            f"target: {self.target_images_per_sec:,.0f} images/s; headroom x{self.headroom:g} "
            f"-> plan for {self.target_images_per_sec * self.headroom:,.0f} images/s",
            f"cores: {self.target_images_per_sec:,.0f} x {self.headroom:g} / "
            f"{self.images_per_cpu_sec:.0f} = {self.cores_exact:,.1f} -> "
            f"{_n(self.cores, 'core')}",
            f"tf.data service workers of {_n(self.worker_cores, 'core')} "
            f"({self.worker_images_per_sec:,.0f} images/s each at full speed): "
            f"{_n(self.workers, 'worker')} ({_n(self.workers * self.worker_cores, 'core')}, "
            f"{self.fleet_images_per_sec:,.0f} images/s flat out)",
            f"the headroom ({100 * (self.headroom - 1):.0f}% spare) covers the service's own "
            "work on the workers (serializing, compressing, gRPC), uneven load and slower "
            "files; the trainer's side (receiving batches) is not counted",
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """The plan as JSON-ready values."""
        return dataclasses.asdict(self)


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or not math.isfinite(value):
        raise ValueError(f"`{name}` must be a finite number > 0. {checks.received(name, value)}")
    return float(value)


def capacity_plan(target_images_per_sec: float, images_per_cpu_sec: float,
                  worker_cores: int = DEFAULT_WORKER_CORES,
                  headroom: float = DEFAULT_HEADROOM,
                  measurement: Optional[dict] = None) -> CapacityPlan:
    """The cores and tf.data service workers needed to feed a rate (arithmetic only).

    Args:
        target_images_per_sec: float > 0, images/s to feed, all accelerators
            together (e.g. 8 GPUs x 7,000 = 56,000).
        images_per_cpu_sec: float > 0, the pipeline's measured cost on the
            workers' kind of core (``measure_cost(...)["images_per_cpu_sec"]``).
        worker_cores: int >= 1, cores per tf.data service worker.
        headroom: float >= 1, spare capacity factor (1.25 plans 25% more than
            the target).
        measurement: optional dict kept in the plan (``measure_cost``'s result).

    Returns:
        A ``CapacityPlan``: ``cores = ceil(target * headroom /
        images_per_cpu_sec)``, ``workers = ceil(that exact core count /
        worker_cores)``.

    Raises:
        ValueError: an argument out of range, named with the value received.
    """
    target = _positive("target_images_per_sec", target_images_per_sec)
    cost = _positive("images_per_cpu_sec", images_per_cpu_sec)
    worker_cores = checks.check_int("worker_cores", worker_cores)
    headroom = _positive("headroom", headroom)
    if headroom < 1:
        raise ValueError("`headroom` must be >= 1 (1.25 plans 25% spare capacity). "
                         f"{checks.received('headroom', headroom)}")
    # Round before ceil: 56000 * 1.25 / 400 is 175.00000000000003 in floats.
    cores_exact = round(target * headroom / cost, 9)
    workers = math.ceil(round(cores_exact / worker_cores, 9))
    return CapacityPlan(
        target_images_per_sec=target, images_per_cpu_sec=cost, headroom=headroom,
        worker_cores=worker_cores, cores_exact=cores_exact, cores=math.ceil(cores_exact),
        workers=workers, worker_images_per_sec=worker_cores * cost,
        fleet_images_per_sec=workers * worker_cores * cost, measurement=measurement)


def measure_cost(data_dir: str, image_size: Sequence[int] = (224, 224), batch_size: int = 64,
                 augment: bool = False, epochs: int = 2, repeats: int = 3,
                 on_error: str = "raise", seed: int = 0, progress: bool = False) -> dict:
    """Measures the pipeline's cost per image on these files with these options.

    Builds ``pipeline.from_directory(data_dir, image_size=..., batch_size=...)``
    (with ``augment=True``: ``Augment(random_resized_crop=True,
    horizontal_flip=True)``) in this process, ``repeats`` times, and iterates
    ``epochs`` epochs of each. Each epoch's first batch is not timed; the
    batches after it are timed by this process's CPU time
    (``time.process_time``: every thread of tf.data's) and by the wall clock.

    Args:
        data_dir: str, a class-folder directory.
        image_size: (height, width) pixels (``config.check_image_size``).
        batch_size: int >= 1.
        augment: bool, train mode (random resized crop + flip) instead of eval.
        epochs: int >= 1, epochs per run.
        repeats: int >= 1, runs; the median is used.
        on_error: "raise" or "skip" (``from_directory``'s).
        seed: int in [0, 2**63) or None, shuffle seed.
        progress: bool, a tqdm bar per epoch on stderr.

    Returns:
        dict: ``images_per_cpu_sec`` (median steady-state images per
        CPU-second; ``min``, ``max`` over ``runs`` runs), ``images_per_sec``
        (median), ``cores_used`` (median CPU-seconds per second), and what
        was measured (``data_dir`` label, ``num_images``, ``image_size``,
        ``batch_size``, ``augment``, ``epochs``, ``machine_cores``,
        ``candidate``: "pipeline" or "pipeline_train").

    Raises:
        ValueError: a bad argument, or too few files for 2 timed batches per
            epoch (2 x ``batch_size`` + 1: each epoch's first batch is not
            timed).
    """
    import statistics

    import pipeline
    from pipeline import config
    from pipeline.sources import index as index_lib
    from pipeline.tools import sample

    for name, value in (("batch_size", batch_size), ("epochs", epochs), ("repeats", repeats)):
        checks.check_int(name, value)
    size = list(config.check_image_size(image_size, batch_size))
    config.check_on_error(on_error)
    seed = config.check_seed(seed)
    idx = index_lib.index_directory(data_dir)
    if max(0, -(-len(idx) // batch_size) - 1) < MIN_TIMED_BATCHES:
        raise ValueError(
            f"measuring the cost needs at least {MIN_TIMED_BATCHES} timed batches per "
            "epoch (each epoch's first batch is not timed): at least "
            f"{MIN_TIMED_BATCHES * batch_size + 1} files with batch_size={batch_size}. "
            f"Received: {len(idx)} files in data_dir={sample.data_dir_label(data_dir)!r}, "
            f"batch_size={batch_size}")
    aug = pipeline.Augment(random_resized_crop=True, horizontal_flip=True) if augment else None
    runs = []
    for run in range(repeats):
        ds = pipeline.from_directory(data_dir, image_size=tuple(size), batch_size=batch_size,
                                     seed=seed, augment=aug, on_error=on_error)
        runs.append(_timed_run(ds, len(idx), epochs, progress,
                               f"cost run {run + 1}/{repeats}"))
    costs = [r["images_per_cpu_sec"] for r in runs]
    return {"images_per_cpu_sec": statistics.median(costs), "min": min(costs),
            "max": max(costs), "runs": len(runs),
            "images_per_sec": statistics.median(r["images_per_sec"] for r in runs),
            "cores_used": statistics.median(r["cores_used"] for r in runs),
            "candidate": "pipeline_train" if augment else "pipeline",
            "data_dir": sample.data_dir_label(data_dir), "num_images": len(idx),
            "image_size": size, "batch_size": batch_size, "augment": bool(augment),
            "epochs": epochs, "machine_cores": checks.cpu_count()}


def _timed_run(ds, num_files: int, epochs: int, progress: bool, desc: str) -> dict:
    """``images_per_cpu_sec``, ``images_per_sec`` and ``cores_used`` of ``epochs`` epochs
    of ``ds`` (batches of (images, labels)), each epoch's first batch not timed."""
    import sys
    import time

    from tqdm.auto import tqdm

    n = cpu = wall = 0.0
    for epoch in range(epochs):
        t0 = c0 = None
        with tqdm(total=num_files, unit="img", leave=False, file=sys.stderr,
                  disable=not progress, desc=f"{desc} epoch {epoch + 1}/{epochs}") as bar:
            for images, _ in ds:
                b = int(images.shape[0])
                if t0 is None:  # the epoch's first batch: its start-up, not timed
                    t0, c0 = time.perf_counter(), time.process_time()
                else:
                    n += b
                bar.update(b)
        if t0 is not None:
            wall += time.perf_counter() - t0
            cpu += time.process_time() - c0
    return {"images_per_cpu_sec": n / cpu if cpu > 0 else float("nan"),
            "images_per_sec": n / wall if wall > 0 else float("nan"),
            "cores_used": cpu / wall if wall > 0 else float("nan")}
