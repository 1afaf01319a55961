"""Profile: per-stage cost of an image pipeline and where its bottleneck is.

``profile`` rebuilds the pipeline's prefixes over the same files, in the
same graph ops the dataset uses (``tf.io.read_file``, ``pipeline.decode.image.Decoder``,
``pipeline.transform.geometry.resize``, the dataset's ``Augment``, batch + dtype):

    read -> read+decode -> read+decode+resize -> (+augment) -> (+extra_map) -> +batch

Each prefix is timed over the same ``num_elements`` elements after a
warm-up: single-threaded (sequential map, one intra-op thread; the least CPU
time of 3 rounds: the cost of a stage is the difference of consecutive
prefixes, in ms per image) and once
with the dataset's parallelism (images/s). The dataset itself is then timed as
delivered (batches, prefetch; images/s and images per CPU-second), and compared
with a consumption rate: ``target_images_per_sec`` or one measured from a
compiled Keras model's ``train_on_batch`` on synthetic batches of the dataset's
element spec.

Timed prefixes end in a scalar that depends on the pixels (so no stage is
pruned), pulled in batches of 8 (little Python per element).
Numbers swing between runs on shared machines; compare stages within one report.
"""

from __future__ import annotations

import dataclasses
import html
import os
import time
from typing import Any, Callable, Dict, List, Optional

import tensorflow as tf

from pipeline import assemble
from pipeline import checks
from pipeline import config
from pipeline.sources import read as read_lib
from pipeline.sources import factories as sources
from pipeline.transform import geometry as transform

ADVICE = {
    "read": ("read dominates: convert the files to TFRecord shards "
             "(pipeline.write_tfrecords) or cache them (cache='memory' or a path); for "
             "remote storage raise num_parallel_calls"),
    "decode": ("decode dominates: store the images at about the size you train at, or "
               "cache decoded, resized images (cache='memory' or a path)"),
    "resize": ("resize dominates: use interpolation='bilinear' or 'nearest' (cheaper than "
               "bicubic, area or lanczos), store pre-resized images, or cache after resize"),
    "augment": ("augment dominates: drop costly ops (rotation, shear and zoom resample "
                "every pixel; hue and saturation go through HSV) or run them on the "
                "accelerator as Keras preprocessing layers on batches"),
    "batch": ("batch dominates: keep dtype=tf.uint8 (4x fewer bytes than float32) and "
              "convert / normalise on the accelerator"),
}
# Added to the decode advice: where the dataset decodes whole JPEGs, what decodes less
# (``pipeline.assemble.Stages``; every decode is full-scale: no reduced-DCT decoding);
# where it already decodes only a window, that the decode stage here is a whole decode.
CROP_ADVICE = ("; or decode less: with resize='crop' or 'center_crop' (or "
               "Augment(random_resized_crop=True)), a JPEG decodes only its crop window "
               "(crop-before-decode, fast_jpeg=True, the same pixels)")
CROPPING_NOTE = ("; the decode stage here times whole decodes, while this dataset decodes "
                 "only the crop window of JPEGs (crop-before-decode), so its own decode costs "
                 "less")


def decode_advice(opts) -> str:
    """The decode advice for a dataset's options (``ImageOptions``)."""
    aug = opts.augment
    cropping = opts.fast_jpeg and (
        (opts.image_size is not None and opts.resize in transform.WINDOW_MODES)
        or (aug is not None and getattr(aug, "random_resized_crop", None) is not None))
    return ADVICE["decode"] + (CROPPING_NOTE if cropping else CROP_ADVICE)


EXTRA_ADVICE = ("{name} dominates: it is your extra map; simplify it, move it after batch "
                "(vectorised over the batch), or run it on the accelerator in the model")


@dataclasses.dataclass
class StageCost:
    """One stage of the pipeline.

    Attributes:
        name: "read", "decode", "resize", "augment", the extra map's name, or
            "batch" (batch + dtype conversion).
        ms_per_image: single-threaded cost of this stage alone, CPU
            milliseconds per image (the difference of consecutive prefixes,
            >= 0).
        cumulative_ms: single-threaded CPU cost of the stages up to and
            including this one, ms/image: the running sum of ``ms_per_image``,
            so it never goes down from one stage to the next (each prefix is
            timed on its own, and a longer prefix can measure cheaper than a
            shorter one on a noisy machine: that stage then costs 0).
        images_per_sec: throughput of that prefix with the dataset's
            parallelism, images/s.
        share: ms_per_image / the sum over stages, in [0, 1].
    """
    name: str
    ms_per_image: float
    cumulative_ms: float
    images_per_sec: float
    share: float = 0.0


@dataclasses.dataclass
class ProfileReport:
    """What ``profile`` measured. Render with ``table()``, ``to_dict()``, or in a notebook.

    Attributes:
        stages: list of ``StageCost`` in pipeline order.
        bottleneck: name of the stage with the largest single-threaded cost.
        pipeline_images_per_sec: the dataset as delivered (parallel, batched,
            prefetched), images/s after the first batch.
        pipeline_images_per_cpu_sec: the same, per CPU-second of this process.
        first_batch_sec: seconds to the first batch of the dataset.
        single_thread_images_per_sec: 1000 / (sum of stage costs).
        cores: CPU cores this process may use.
        parallelism: the decode map's num_parallel_calls.
        consumer_images_per_sec: the consumption rate compared against
            (images/s), or None.
        consumer: "target" (given), "model" (measured train_on_batch) or None.
        input_bound: True when the pipeline is slower than the consumer, False
            when not, None without a consumer.
        advice: list of str, concrete suggestions, most important first.
        num_elements: images timed per prefix.
        batch_size: the dataset's batch size (None: unbatched).
        image_size: (height, width) or None.
        profile_dir: where a TensorBoard trace was written, or None.
        trace_files: files of that trace.
    """
    stages: List[StageCost]
    bottleneck: str
    pipeline_images_per_sec: float
    pipeline_images_per_cpu_sec: float
    first_batch_sec: float
    single_thread_images_per_sec: float
    cores: int
    parallelism: int
    consumer_images_per_sec: Optional[float]
    consumer: Optional[str]
    input_bound: Optional[bool]
    advice: List[str]
    num_elements: int
    batch_size: Optional[int]
    image_size: Optional[tuple]
    profile_dir: Optional[str] = None
    trace_files: List[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-friendly dict of every field (stages as dicts)."""
        d = dataclasses.asdict(self)
        d["image_size"] = list(self.image_size) if self.image_size else None
        return d

    def _rows(self):
        return [(s.name, f"{s.ms_per_image:.3f}", f"{100 * s.share:.0f}%",
                 f"{s.cumulative_ms:.3f}", f"{s.images_per_sec:,.0f}") for s in self.stages]

    def _summary(self):
        lines = [
            f"bottleneck: {self.bottleneck}",
            f"pipeline delivers {self.pipeline_images_per_sec:,.0f} images/s "
            f"({self.pipeline_images_per_cpu_sec:,.0f} images per CPU-second; "
            f"first batch {self.first_batch_sec:.3f} s; {self.parallelism} parallel calls "
            f"on {self.cores} cores)",
            f"single-threaded: {self.single_thread_images_per_sec:,.0f} images/s",
        ]
        if self.consumer_images_per_sec is not None:
            lines.append(f"consumer ({self.consumer}): {self.consumer_images_per_sec:,.0f} "
                         f"images/s -> " + ("input-bound" if self.input_bound else
                                            "input is not the bottleneck"))
        return lines

    def table(self) -> str:
        """A plain-text table of the stages, the verdict and the advice."""
        head = ("stage", "ms/image", "share", "cum ms", "prefix images/s (parallel)")
        rows = [head] + self._rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        fmt = lambda r: "  ".join(  # noqa: E731
            (c.ljust(w) if i == 0 else c.rjust(w)) for i, (c, w) in enumerate(zip(r, widths)))
        out = [fmt(head), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows[1:]]
        out += [""] + self._summary()
        out += ["advice:"] + [f"  - {a}" for a in self.advice]
        if self.profile_dir:
            out.append(f"TensorBoard trace: {self.profile_dir} ({len(self.trace_files)} files)")
        return "\n".join(out)

    def __str__(self):
        return self.table()

    def _repr_html_(self) -> str:
        e = html.escape
        head = ("stage", "ms/image", "share", "cum ms", "prefix images/s (parallel)")
        rows = "".join(
            "<tr>" + "".join(
                f"<td style='text-align:{'left' if i == 0 else 'right'}'>"
                + (f"<b>{e(c)}</b>" if r[0] == self.bottleneck and i == 0 else e(c)) + "</td>"
                for i, c in enumerate(r)) + "</tr>"
            for r in self._rows())
        return (
            "<div><table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in head)
            + f"</tr></thead><tbody>{rows}</tbody></table>"
            + "<p>" + "<br>".join(e(x) for x in self._summary()) + "</p>"
            + "<ul>" + "".join(f"<li>{e(a)}</li>" for a in self.advice) + "</ul></div>")


def stage_costs(measured) -> List[StageCost]:
    """``StageCost``s from the measured prefixes: (name, ms/image of the prefix ending
    at that stage, images/s), in pipeline order.

    A stage costs the difference from the dearest prefix before it (>= 0); its
    ``cumulative_ms`` is the running sum of those costs, so that it never goes
    down (a prefix measured cheaper than a shorter one, timing noise, adds 0).
    """
    out, total = [], 0.0
    for name, prefix_ms, ips in measured:
        cost = max(prefix_ms - total, 0.0)
        total += cost
        out.append(StageCost(name, cost, total, ips))
    return out


# --------------------------------------------------------------- measuring
def _time_reduce(ds: tf.data.Dataset, n: int, warmup: int, rounds: int = 1):
    """(wall seconds, process CPU seconds, count) for ~``n`` elements after ``warmup``.

    One iterator: the warm-up absorbs its set-up (function instantiation, graph
    rewrites, thread start), which would otherwise dominate a short run. With
    ``rounds`` > 1, ``n`` elements are timed that many times on the same iterator
    and the least wall and the least CPU time are returned (as ``timeit`` does:
    noise from other processes and threads only ever adds time).
    Elements are scalars pulled in chunks of 8 (little Python per element);
    ``n`` and ``warmup`` are rounded up to whole chunks. Not ``Dataset.reduce``:
    it runs the pipeline inside one op, and a parallel map whose function runs
    nested datasets (the guarded decoder does) then starves for inter-op
    threads (measured: slower than sequential).
    """
    chunk = 8
    it = iter(ds.batch(chunk))
    for _ in range(max(1, -(-warmup // chunk))):
        next(it)
    wall = cpu = float("inf")
    for _ in range(rounds):
        c, t = time.process_time(), time.perf_counter()
        got = 0
        for _ in range(-(-n // chunk)):
            got += int(tf.size(next(it)))
        wall = min(wall, time.perf_counter() - t)
        cpu = min(cpu, time.process_time() - c)
    return wall, cpu, got


def _single_thread(ds: tf.data.Dataset) -> tf.data.Dataset:
    o = tf.data.Options()
    o.threading.private_threadpool_size = 1
    o.threading.max_intra_op_parallelism = 1
    o.autotune.enabled = False
    return ds.with_options(o)


def _parallel(ds: tf.data.Dataset, autotune: bool) -> tf.data.Dataset:
    o = tf.data.Options()
    o.autotune.enabled = bool(autotune)
    o.deterministic = False
    return ds.with_options(o)


def _touch(x):
    """A scalar that depends on the pixels (so nothing upstream is pruned)."""
    if x.dtype == tf.string:
        return tf.strings.length(x)
    flat = tf.reshape(x, [-1])
    return tf.cast(flat[tf.size(flat) // 2], tf.int32)


def measure_consumer(model, element_spec, batch_size: int, steps: int = 5) -> float:
    """Images/s of ``model.train_on_batch`` on synthetic batches.

    Args:
        model: a compiled ``keras.Model``.
        element_spec: the dataset's (images, labels) or images spec.
        batch_size: images per step.
        steps: timed steps (after 2 warm-up steps).

    Returns:
        images/s (float).

    Raises:
        ValueError: the model is not compiled.
    """
    if not getattr(model, "compiled", getattr(model, "optimizer", None) is not None):
        raise ValueError("`model` must be compiled (model.compile(...)) to time "
                         f"train_on_batch. Received: model={model!r}")

    def zeros(spec):
        shape = [batch_size if d is None else d for d in spec.shape.as_list()]
        if spec.shape.rank and spec.shape[0] is not None:
            shape[0] = batch_size
        elif spec.shape.rank:
            shape[0] = batch_size
        return tf.zeros(shape, spec.dtype)

    if isinstance(element_spec, tuple):
        x, y = zeros(element_spec[0]), zeros(element_spec[1])
    else:
        x, y = zeros(element_spec), None
    for _ in range(2):
        model.train_on_batch(x, y)
    t = time.perf_counter()
    for _ in range(steps):
        model.train_on_batch(x, y)
    return batch_size * steps / (time.perf_counter() - t)


def write_trace(ds: tf.data.Dataset, profile_dir: str, num_batches: int = 3) -> List[str]:
    """Writes a TensorBoard profiler trace of ``num_batches`` elements of ``ds``.

    Uses ``tf.profiler.experimental.start`` / ``stop`` around iterating the
    dataset (open it in TensorBoard's Profile tab: the trace viewer shows each
    tf.data iterator and map function).

    Args:
        ds: any dataset.
        profile_dir: log directory (created).
        num_batches: elements of ``ds`` to pull while tracing (after one
            untraced warm-up element).

    Returns:
        Sorted list of the files written under ``profile_dir`` (paths).

    Raises:
        ValueError: ``num_batches`` < 1.
    """
    if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 1:
        raise ValueError(f"`num_batches` must be an int >= 1. "
                         f"{checks.received('num_batches', num_batches)}")
    profile_dir = os.fspath(profile_dir)
    os.makedirs(profile_dir, exist_ok=True)
    it = iter(ds.repeat())
    next(it)
    tf.profiler.experimental.start(profile_dir)
    try:
        for _ in range(num_batches):
            next(it)
    finally:
        tf.profiler.experimental.stop()
    return sorted(os.path.join(r, f) for r, _, fs in os.walk(profile_dir) for f in fs)


def _check_pos_int(name, v, minimum=1):
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}. "
                         f"{checks.received(name, v)}")
    return v


def _check_profile_args(num_elements, warmup, target_images_per_sec, model_steps,
                        extra_map, profile_batches):
    _check_pos_int("num_elements", num_elements)
    _check_pos_int("warmup", warmup, 0)
    _check_pos_int("model_steps", model_steps)
    _check_pos_int("profile_batches", profile_batches)
    if target_images_per_sec is not None and (
            isinstance(target_images_per_sec, bool)
            or not isinstance(target_images_per_sec, (int, float))
            or not target_images_per_sec > 0):
        raise ValueError("`target_images_per_sec` must be a number > 0 or None. "
                         f"{checks.received('target_images_per_sec', target_images_per_sec)}")
    if extra_map is not None and not callable(extra_map):
        raise ValueError(f"`extra_map` must be a callable image -> image. "
                         f"{checks.received('extra_map', extra_map)}")


def _profiled_dataset(source, options):
    """(the dataset, its ``assemble.built`` record) for ``profile``'s ``source``."""
    if isinstance(source, tf.data.Dataset):
        if options:
            raise ValueError("Factory options are taken from the dataset; pass them only with "
                             f"a directory or paths. Received: {sorted(options)}")
        ds = source
    elif isinstance(source, (str, os.PathLike)):
        ds = sources.from_directory(os.fspath(source), **options)
    elif isinstance(source, (list, tuple)):
        ds = sources.from_paths(list(source), **options)
    else:
        raise ValueError("`source` must be a pipeline dataset, a directory or a list of "
                         f"paths. {checks.received('source', source)}")
    if isinstance(ds, tuple):
        raise ValueError("`subset='both'` gives two datasets; profile one of them. "
                         f"{checks.received('subset', 'both')}")
    try:
        b = assemble.built(ds)
    except ValueError:
        raise ValueError("`source` must be a dataset returned by a pipeline factory (it "
                         "carries its file index and options); after .map/.take these are "
                         f"lost. Received: source={source!r}") from None
    if b.index is None:
        raise ValueError("`source` read from TFRecord shards: profile the folder they were "
                         f"written from instead. Received: source={source!r}")
    return ds, b


def _timing_base(idx, opts, decoder, total: int) -> tf.data.Dataset:
    """Endless (path, 0, seed pair) elements over the first ``total`` good files that decode.

    Untimed pass: every sampled file is read (timings are then of warm,
    page-cached reads) and decoded once; files whose decoder fails are left
    out of the stage timings, which would otherwise never end on them.
    """
    good = [p for k, p in enumerate(idx.paths) if k not in idx.errors]
    if not good:
        raise ValueError(f"No good files to profile: all {len(idx)} are bad at index time.")
    sample = tf.data.Dataset.from_tensor_slices(read_lib.path_bytes(good[:total])).map(
        assemble.graph_fn(lambda p: (p, tf.shape(decoder.decode(tf.io.read_file(p))[0])[0])),
        num_parallel_calls=opts.parallelism).ignore_errors()
    paths = [p for p, _ in sample.as_numpy_iterator()]  # bytes, as the file system holds them
    if not paths:
        raise ValueError(f"No file of the {min(total, len(good))} sampled decodes; see "
                         "pipeline.scan for the reasons.")
    base = tf.data.Dataset.from_tensor_slices((tf.constant(read_lib.path_bytes(paths)),
                                               tf.zeros([len(paths)], tf.int32)))
    return tf.data.Dataset.zip(base.repeat(), tf.data.Dataset.random(seed=0).batch(2)).map(
        lambda pe, s: (pe[0], pe[1], s))


def _stage_fns(decoder, opts, extra_map) -> list:
    """(name, fn) of each stage, in pipeline order: read and decode take (path, e, seed),
    the later ones (image, path, e, seed).

    Each stage is traced once (the guarded decoder is costly to trace) and
    called by every prefix that contains it.
    """
    def stage(fn):
        return tf.function(fn, autograph=False, reduce_retracing=True)

    read_op = stage(lambda p: tf.io.read_file(p))
    decode_op = stage(lambda p, e: decoder.decode(tf.io.read_file(p))[0])
    stage_fns = [("read", lambda p, e, s: read_op(p)),
                 ("decode", lambda p, e, s: decode_op(p, e))]
    if opts.image_size is not None:
        resize_op = stage(lambda img: transform.resize(
            img, opts.image_size, opts.resize, opts.interpolation))
        stage_fns.append(("resize", lambda img, p, e, s: resize_op(img)))
    if opts.augment is not None:
        augment_op = stage(opts.augment.__call__)
        stage_fns.append(("augment", lambda img, p, e, s: augment_op(img, s)))
    if extra_map is not None:
        name = getattr(extra_map, "__name__", "extra_map")
        name = "extra_map" if name == "<lambda>" else name
        extra_op = stage(extra_map)
        stage_fns.append((name, lambda img, p, e, s: extra_op(img)))
    return stage_fns


_PREFIX_SIGNATURE = (tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int32),
                     tf.TensorSpec([2], tf.int64))


def _prefix_fn(stage_fns, k):
    """The stages 0..k as one function of (path, e, seed).

    Traced once, shared by the single-threaded and the parallel datasets.
    """
    @tf.function(input_signature=_PREFIX_SIGNATURE, autograph=False)
    def fn(p, e, s):
        x = stage_fns[min(k, 1)][1](p, e, s)  # read, or read+decode
        for _, f in stage_fns[2:k + 1]:
            x = f(x, p, e, s)
        return x
    return fn


def _time_prefix(make, n, warmup, per_element, opts, parallel_stages):
    """(single-threaded CPU ms per image, parallel images/s or NaN) of ``make(calls)``:
    the timed dataset with a map of ``num_parallel_calls=calls`` (None: sequential),
    ``per_element`` images in each element."""
    _, cpu, got = _time_reduce(_single_thread(make(None)), n, warmup, rounds=3)
    cum = 1000.0 * cpu / (got * per_element)
    ips = float("nan")
    if parallel_stages:
        wall, _, got = _time_reduce(_parallel(make(opts.parallelism), opts.autotune),
                                    n, warmup)
        ips = got * per_element / wall
    return cum, ips


def _measure_stages(base, stage_fns, opts, num_elements, warmup, parallel_stages):
    """(name, prefix ms/image, prefix images/s) of every prefix, then of batch + dtype."""
    def mapped(fn, calls):
        return base.map(fn, num_parallel_calls=calls,
                        deterministic=False if calls else None).ignore_errors()

    measured = []
    for k, (name, _) in enumerate(stage_fns):
        fn = _prefix_fn(stage_fns, k)
        # A file whose decoder fails drops out of the stage timings (they
        # count decoded images); the end-to-end figure uses the dataset
        # itself, with its on_error policy.
        make = lambda calls, fn=fn: mapped(  # noqa: E731
            lambda p, e, s: _touch(fn(p, e, s)), calls)
        measured.append((name,) + _time_prefix(make, num_elements, warmup, 1, opts,
                                               parallel_stages))
    bs = opts.batch_size
    if bs is not None:
        fn = _prefix_fn(stage_fns, len(stage_fns) - 1)

        def make(calls):
            return mapped(lambda p, e, s: fn(p, e, s), calls).batch(
                bs, drop_remainder=True).map(
                    lambda x: _touch(assemble.scale(x, opts.dtype, opts.normalize)))
        nb, wb = max(1, -(-num_elements // bs)), max(1, -(-warmup // bs))
        measured.append(("batch",) + _time_prefix(make, nb, wb, bs, opts, parallel_stages))
    return measured


def _measure_delivered(ds, n_files, opts, num_elements):
    """(first batch seconds, images/s, images per CPU-second) of the dataset as delivered."""
    bs = opts.batch_size

    def count(el):
        x = el[0] if isinstance(el, tuple) else el
        return int(x.shape[0]) if bs is not None else 1

    it = iter(ds.repeat())
    t0 = time.perf_counter()
    count(next(it))
    first_batch = time.perf_counter() - t0
    got = 0
    # Batches prefetched while the first one was made would inflate a short
    # measurement: time at least 4x what the prefetch buffer holds.
    # Timed within the first epoch when it is long enough: a new epoch restarts
    # the pipeline (shuffle, iterator set-up), which short epochs would
    # overweight.
    want = max(num_elements, 4 * (opts.prefetch + 1) * (bs or 1))
    rest_of_epoch = n_files - (bs or 1)
    if rest_of_epoch >= num_elements:
        want = min(want, rest_of_epoch)
    cpu1, t1 = time.process_time(), time.perf_counter()
    while got < want:
        got += count(next(it))
    dt = time.perf_counter() - t1
    cpu = time.process_time() - cpu1
    return first_batch, got / dt, got / cpu if cpu > 0 else float("nan")


def _consumer_rate(target_images_per_sec, model, ds, bs, model_steps):
    """(consumer, images/s): ("target", given), ("model", measured) or (None, None)."""
    if target_images_per_sec is not None:
        return "target", float(target_images_per_sec)
    if model is not None:
        if bs is None:
            raise ValueError("`model` needs a batched dataset to time train_on_batch. "
                             "Received: batch_size=None")
        return "model", measure_consumer(model, ds.element_spec, bs, model_steps)
    return None, None


def _advice(stages, bottleneck, opts, pipeline_ips, rate, input_bound, cores) -> List[str]:
    """The report's advice, most important first."""
    total_ms = sum(s.ms_per_image for s in stages) or 1e-9
    par = opts.parallelism
    advice = []
    stage_advice = (decode_advice(opts) if bottleneck == "decode" else
                    ADVICE.get(bottleneck, EXTRA_ADVICE.format(name=bottleneck)))
    share = next(s.share for s in stages if s.name == bottleneck)
    stage_advice = f"{stage_advice} ({100 * share:.0f}% of the single-threaded cost)"
    if input_bound is False:
        advice.append(
            f"consumer slower than pipeline: input is not the bottleneck (pipeline "
            f"{pipeline_ips:,.0f} images/s >= consumer {rate:,.0f} images/s); speed up the "
            "train step instead (mixed precision, XLA, a larger batch)")
    else:
        if input_bound:
            need = rate * total_ms / 1000.0
            advice.append(
                f"input-bound: the pipeline delivers {pipeline_ips:,.0f} images/s but the "
                f"consumer takes {rate:,.0f} images/s; at {total_ms:.2f} ms per image that "
                f"needs about {need:.1f} busy cores (this process may use {cores})")
        advice.append(stage_advice)
    single_ips = 1000.0 / total_ms
    if input_bound is not False and pipeline_ips < 0.5 * min(par, cores) * single_ips:
        advice.append(
            f"parallel speed-up is low: {pipeline_ips / single_ips:.1f}x the single-threaded "
            f"rate with {par} parallel calls on {cores} core{'' if cores == 1 else 's'}; check "
            "other load on the machine, num_parallel_calls, and the factories' autotune "
            "option (off by default; pipeline.ImageOptions in docs/api.md)")
    if input_bound is False:
        advice.append(stage_advice.replace("dominates", "is the costliest stage", 1))
    return advice


@checks.known_keywords(config.FIELDS + ("labels", "class_names", "follow_links"),
                       config.KERAS_EQUIVALENTS)
def profile(source, *, num_elements: int = 200, warmup: int = 10,
            target_images_per_sec: Optional[float] = None, model=None, model_steps: int = 5,
            extra_map: Optional[Callable] = None, profile_dir: Optional[str] = None,
            profile_batches: int = 3, parallel_stages: bool = True,
            **options) -> ProfileReport:
    """Measures per-stage cost and names the bottleneck of an image pipeline.

    Args:
        source: a dataset made by ``pipeline.from_directory`` / ``from_paths``
            (its files and options are used), or a directory (str / PathLike;
            built with ``from_directory(source, **options)``), or a list of
            paths (``from_paths(source, **options)``).
        num_elements: images timed per prefix (>= 1; files are repeated when
            there are fewer).
        warmup: images pulled before timing each prefix (>= 0).
        target_images_per_sec: consumption rate to compare with (images/s,
            > 0), e.g. what the accelerator's train step eats.
        model: optional compiled ``keras.Model``; its ``train_on_batch`` on
            synthetic data of the dataset's batch shape gives the consumption
            rate (ignored when ``target_images_per_sec`` is given).
        model_steps: timed train steps (>= 1).
        extra_map: optional ``fn(image) -> image`` (uint8 [h, w, c] after
            resize) appended as its own stage, named by ``fn.__name__``: to
            price a map you intend to add, before adding it.
        profile_dir: optional directory: a TensorBoard profiler trace of
            ``profile_batches`` batches of the dataset is written there.
        profile_batches: batches traced (>= 1).
        parallel_stages: also time every prefix with the dataset's
            parallelism (``StageCost.images_per_sec``); False roughly halves
            the profiling time (each pipeline iterator costs set-up) and sets
            those numbers to NaN.
        **options: factory options when ``source`` is not a dataset.

    Returns:
        A ``ProfileReport``.

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        ValueError: a bad argument (named, with the value received), options
            given with a dataset, or a dataset not made by ``pipeline``.
    """
    _check_profile_args(num_elements, warmup, target_images_per_sec, model_steps,
                        extra_map, profile_batches)
    ds, b = _profiled_dataset(source, options)
    idx, opts = b.index, b.options
    # The stages of the very map the dataset runs (pipeline.assemble.make_stages).
    decoder, _ = assemble.make_stages(idx, opts)
    base = _timing_base(idx, opts, decoder, warmup + num_elements)
    stages = stage_costs(_measure_stages(base, _stage_fns(decoder, opts, extra_map), opts,
                                         num_elements, warmup, parallel_stages))
    total_ms = sum(s.ms_per_image for s in stages) or 1e-9
    for s in stages:
        s.share = s.ms_per_image / total_ms
    bottleneck = max(stages, key=lambda s: s.ms_per_image).name
    first_batch, pipeline_ips, per_cpu = _measure_delivered(ds, len(idx), opts, num_elements)
    bs, cores = opts.batch_size, checks.cpu_count()
    consumer, rate = _consumer_rate(target_images_per_sec, model, ds, bs, model_steps)
    input_bound = None if rate is None else pipeline_ips < rate
    advice = _advice(stages, bottleneck, opts, pipeline_ips, rate, input_bound, cores)
    image_size = opts.image_size
    files = write_trace(ds, profile_dir, profile_batches) if profile_dir else []
    return ProfileReport(
        stages=stages, bottleneck=bottleneck, pipeline_images_per_sec=pipeline_ips,
        pipeline_images_per_cpu_sec=per_cpu, first_batch_sec=first_batch,
        single_thread_images_per_sec=1000.0 / total_ms, cores=cores,
        parallelism=opts.parallelism,
        consumer_images_per_sec=rate, consumer=consumer, input_bound=input_bound,
        advice=advice, num_elements=num_elements, batch_size=bs,
        image_size=tuple(image_size) if image_size else None,
        profile_dir=os.fspath(profile_dir) if profile_dir else None, trace_files=files)
