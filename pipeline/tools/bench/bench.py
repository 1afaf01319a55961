"""``python -m pipeline bench`` as a function: its checks and its three reports.

``run`` measures one of: the peer comparison (pipeline beside the candidates of
``compare``, alternated round by round: ``harness.run_candidates``), the capacity
plan (``plan=True``: ``pipeline.tools.capacity``) or the stage profile (``profile=True``:
``pipeline.profile``); it prints what the command prints (first the images' sizes
and the JPEG DCT reduction pipeline decodes them at: ``image_sizes``) and returns
the figures that ``--json_out`` writes. ``check`` is every check of its arguments, without
TensorFlow (the command line calls it before TensorFlow loads; ``run`` calls it first).
``command_arguments`` turns the command's flags into their arguments.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import statistics
import sys
from typing import Any, Collection, Mapping, Optional, Sequence

from pipeline.tools import capacity
from pipeline import checks
from pipeline.tools import sample as sample_lib
from pipeline.tools.bench import candidates  # noqa: F401  (registers them; no TensorFlow)
from pipeline.tools.bench import harness

# The options that only some reports read ("peers": the peer comparison), with their
# defaults; the others (data_dir, image_size, batch_size, sample, sample_images,
# on_error, progress) every report reads.
MODE_OPTIONS = {
    "compare": ("peers",), "max_spread": ("peers",),
    "epochs": ("peers", "plan"), "repeats": ("peers", "plan"), "seed": ("peers", "plan"),
    "target_images_per_sec": ("plan", "profile"),
    "worker_cores": ("plan",), "headroom": ("plan",), "augment": ("plan",),
    "profile_dir": ("profile",),
}
DEFAULTS = {"compare": ("keras",), "max_spread": harness.SPREAD_LIMIT, "epochs": 2,
            "repeats": 5, "seed": 0, "target_images_per_sec": None,
            "worker_cores": capacity.DEFAULT_WORKER_CORES,
            "headroom": capacity.DEFAULT_HEADROOM, "augment": False, "profile_dir": None}
# The command's flags (``python -m pipeline bench --help``): (name, default, help[, kind]);
# kind: float, or a string flag's metavar; otherwise the default's type (tuple: A,B).
FLAGS = [
    ("data_dir", None, "Class folders (default: $PIPELINE_DATA_DIR, else a sample).", "DIR"),
    ("image_size", ("224", "224"), "Output HEIGHT,WIDTH, pixels (one number: square)."),
    ("batch_size", 64, "Batch size (images)."),
    ("epochs", DEFAULTS["epochs"], "Epochs per candidate run."),
    ("repeats", DEFAULTS["repeats"], "Runs per candidate, alternated round by round."),
    ("compare", DEFAULTS["compare"],
     "Candidates beside pipeline (empty: none), e.g. keras, plain."),
    ("sample", "small", "The built-in sample (when no --data_dir): small (300-600 px photos) "
     "or large (4000x3000, 12 MP: pipeline decodes them at a reduced DCT scale).", "KIND"),
    ("sample_images", None, "Images in the built-in sample. [default: 512; with "
     "--sample=large, 160]", int),
    ("seed", DEFAULTS["seed"], "The shuffle (and augmentation) seed every candidate gets."),
    ("on_error", "raise", "What pipeline does with a bad file: 'raise' or 'skip'."),
    ("max_spread", DEFAULTS["max_spread"],
     "Spread (max-min)/median above which a figure is flagged."),
    ("profile", False, "Instead of peers, profile pipeline's stages and name the bottleneck."),
    ("plan", False, "Instead of peers, a capacity plan (cores and service workers needed)."),
    ("target_images_per_sec", None, "With --plan (required) or --profile: images/s.", float),
    ("worker_cores", DEFAULTS["worker_cores"], "With --plan: cores per tf.data service worker."),
    ("headroom", DEFAULTS["headroom"], "With --plan: spare capacity factor (>= 1)."),
    ("augment", DEFAULTS["augment"], "With --plan: measure train mode (crop + flip), not eval."),
    ("profile_dir", None, "With --profile: write a TensorBoard profiler trace here.", "DIR"),
    ("json_out", None, "Also write the figures as JSON to this file.", "FILE"),
    ("progress", True, "Show each candidate run's progress bar per epoch (stderr)."),
]
_MODE_NAMES = {"peers": "the peer comparison", "plan": "`plan`", "profile": "`profile`"}
_MODE_DOES = {"peers": "bench compares peers in eval mode",
              "plan": "`plan` measures pipeline alone",
              "profile": "`profile` profiles pipeline's stages alone"}
# The figures printed for pipeline: each must be a number (never NaN or inf).
FIGURES = ("images_per_sec", "steady_images_per_cpu_sec", "steady_cpu_cores_used",
           "first_batch_sec", "epoch_start_cpu_sec", "peak_rss_mb")
# pipeline's figures in the result, beside "spread", "options", "compare", "speedup_vs_*".
RESULT_KEYS = ("images_per_sec", "first_batch_sec", "peak_rss_mb", "num_images", "epochs",
               "images_per_cpu_sec", "steady_images_per_cpu_sec", "cpu_cores_used",
               "rss_after_import_mb", "psnr_db_median", "psnr_db_p5", "psnr_images")
# Images in the built-in sample by its kind (``sample_images`` not given).
SAMPLE_IMAGES = {"small": 512, "large": 160}
# The most files whose headers ``image_sizes`` reads (evenly spaced in index order).
SIZE_FILES = 1000


class PipelineFailed(RuntimeError):
    """pipeline's own candidate failed in the peer comparison (its error is the message)."""


class Stopped(KeyboardInterrupt):
    """Ctrl-C during the peer comparison; the message says how many rounds finished
    (their medians were printed)."""


def command_arguments(flags: Mapping[str, Any], given: Collection[str]) -> dict:
    """``python -m pipeline bench``'s flags as ``run``'s (and ``check``'s) arguments.

    Args:
        flags: each flag's value by name (e.g. ``vars(args)``); ``image_size``: its
            values as typed (strings; one value: a square).
        given: the flags the user typed, by name (``name`` or ``noname``): a report's
            own options (``MODE_OPTIONS``) are passed only when given, so that ``check``
            refuses one given to a report that does not read it.

    Returns:
        The keyword arguments of ``run`` and ``check``.
    """
    size = tuple(int(v) if re.fullmatch(r"[-+]?\d+", v) else v for v in flags["image_size"])
    kw = {k: flags[k] for k in ("data_dir", "batch_size", "sample", "sample_images", "on_error",
                                "plan", "profile", "progress")}
    kw["image_size"] = size[0] if len(size) == 1 else size
    kw.update({n: flags[n] for n in MODE_OPTIONS if {n, f"no{n}"} & given})
    return kw


def _mode(plan: bool, profile: bool) -> str:
    return "plan" if plan else "profile" if profile else "peers"


def check(data_dir: Optional[str] = None, *, image_size=None, batch_size: int = 64,
          sample: str = "small", sample_images: Optional[int] = None,
          on_error: Optional[str] = None, plan: bool = False, profile: bool = False,
          progress: bool = True, **options) -> dict:
    """Checks ``run``'s arguments without TensorFlow; returns ``options`` (the
    ``MODE_OPTIONS`` given, None for not given) completed with ``DEFAULTS``, and
    ``sample_images`` (None: ``SAMPLE_IMAGES[sample]``).
    ``image_size``, ``on_error`` and ``seed``'s range are ``pipeline.config``'s to check
    (``run`` does, through ``harness.check_spec``, with TensorFlow).

    A mode option given (not None) to a report that does not read it is refused, so
    that nothing given is silently ignored.

    Raises:
        TypeError: an unknown keyword argument.
        ValueError: naming the argument and the value received: ``plan`` with
            ``profile``; ``sample`` not a name of ``pipeline.tools.sample.SAMPLES``; an
            option the report does not read; ``plan`` without
            ``target_images_per_sec``; ``data_dir`` not a folder; a count < 1
            (``harness.check_run``); an unknown candidate in ``compare``; the capacity
            plan's own checks; ``profile_dir`` not a folder that can be written; a
            generated sample too small to time (``check_timed``).
    """
    del image_size, on_error, progress
    unknown = set(options) - set(MODE_OPTIONS)
    if unknown:
        raise checks.unknown_keywords("run", sorted(unknown), list(MODE_OPTIONS) + [
            "data_dir", "image_size", "batch_size", "sample", "sample_images", "on_error",
            "plan", "profile", "progress"])
    sample_images = _sample_images(sample, sample_images)
    mode = _mode(plan, profile)
    if plan and profile:
        raise ValueError("`plan` and `profile` are separate reports: give one. "
                         "Received: plan=True, profile=True")
    wrong = {}
    for name, modes in MODE_OPTIONS.items():
        if options.get(name) is not None and mode not in modes:
            wrong.setdefault(modes, []).append(name)
    if wrong:
        parts = [f"{', '.join(f'`{n}`' for n in ns)} {'applies' if len(ns) == 1 else 'apply'} "
                 + ("with " if set(ms) <= {"plan", "profile"} else "to ")
                 + " or ".join(_MODE_NAMES[m] for m in ms) + " only" for ms, ns in wrong.items()]
        modes = {m for ms in wrong for m in ms}
        why = (f"without {'it' if len(modes) == 1 else 'them'} {_MODE_DOES['peers']}"
               if mode == "peers" else f"{_MODE_DOES[mode]}; the peer comparison is bench "
                                       "without `plan` or `profile`")
        raise ValueError("; ".join(parts) + f" ({why}). Received: "
                         + ", ".join(f"{n}={options[n]}" for ns in wrong.values() for n in ns))
    o = {k: DEFAULTS[k] if options.get(k) is None else options[k] for k in MODE_OPTIONS}
    if plan and o["target_images_per_sec"] is None:
        raise ValueError("`plan` needs `target_images_per_sec` (images/s to feed, e.g. 56000 "
                         "for 8 GPUs x 7000). Received: plan=True, target_images_per_sec=None")
    if data_dir is not None:
        checks.check_source("data_dir", data_dir, manifest_ok=False)
    harness.check_run(batch_size, sample_images, o["epochs"], o["repeats"], o["max_spread"],
                      o["target_images_per_sec"])
    unknown = harness.unknown_candidates(o["compare"]) if mode == "peers" else []
    if unknown:
        close = [m for u in unknown
                 for m in difflib.get_close_matches(u, list(harness.CANDIDATES), n=1, cutoff=0.6)]
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"`compare`: unknown candidate(s) {','.join(unknown)}{hint}; known: "
                         f"{', '.join(sorted(harness.CANDIDATES))}. "
                         f"Received: compare={o['compare']}")
    if plan:  # its checks, before the measurement
        capacity.capacity_plan(o["target_images_per_sec"], 1.0, o["worker_cores"],
                               o["headroom"])
    if o["profile_dir"]:
        checks.check_folder("profile_dir", o["profile_dir"])
    if not profile and data_dir is None and not os.environ.get(sample_lib.DATA_DIR_ENV):
        check_timed(batch_size, sample_images, sample_images=sample_images)
    return o


def _sample_images(sample: str, sample_images: Optional[int]) -> int:
    """``sample_images``, or when None the built-in sample's default (``SAMPLE_IMAGES``);
    ``sample`` checked first (``pipeline.tools.sample.sample_size``)."""
    sample_lib.sample_size(sample)
    return SAMPLE_IMAGES[sample] if sample_images is None else sample_images


def check_timed(batch_size: int, num_images: int, data_dir: Optional[str] = None,
                sample_images: Optional[int] = None, why: str = "") -> None:
    """Checks that ``num_images`` per epoch give ``harness.MIN_TIMED_BATCHES`` timed
    batches at ``batch_size`` (each epoch's first batch is not timed).

    ``data_dir``: the folder given (None: ``$PIPELINE_DATA_DIR``, or without it a
    generated sample of ``sample_images``); ``why``: the start of the message.

    Raises:
        ValueError: too few images, naming the values that work.
    """
    timed = harness.timed_batches(num_images, batch_size)
    if timed >= harness.MIN_TIMED_BATCHES:
        return
    bs, fewest = batch_size, harness.min_images(batch_size)
    env = os.environ.get(sample_lib.DATA_DIR_ENV)
    if data_dir is None and not env:
        more = f"sample_images={fewest} (the smallest that works with batch_size={bs})"
        given = f"sample_images={sample_images}"
    else:
        source, value = ("`data_dir`", data_dir) if data_dir is not None else (
            f"${sample_lib.DATA_DIR_ENV}", env)
        more = f"a {source} with at least {fewest} images (the fewest for batch_size={bs})"
        given = f"{source.strip('`')}={value!r}"
    fit = harness.max_batch_size(num_images)
    rest = num_images - bs
    got = ("nothing would be timed" if timed == 0 else
           f"{timed} batch{'es' if timed > 1 else ''} ({rest} image{'s' if rest > 1 else ''}) "
           "per epoch would be timed")
    works = [more] + ([f"batch_size={fit} or smaller"] if fit else [])
    raise ValueError(
        f"{why}batch_size={bs} with {num_images} images is "
        + ("one batch" if timed == 0 else f"{timed + 1} batches") + " per epoch, and bench "
        "times only what comes after each epoch's first batch (images/s, images per "
        f"CPU-second): {got}, and a figure needs at least {harness.MIN_TIMED_BATCHES} timed "
        f"batches per epoch. What works: {', or '.join(works)}. "
        f"Received: batch_size={bs}, {given}")


def header(num_files: int, folder: str, size: Sequence[int], batch_size: int, epochs: int,
           repeats: int) -> str:
    """The line before the peer comparison's runs: the files the index kept (by
    extension: a bad one counts), ``folder`` as given and the options."""
    return (f"{num_files:,} file{'' if num_files == 1 else 's'} in {folder}, "
            f"image_size={size[0]}x{size[1]}, batch_size={batch_size}, epochs={epochs}, "
            f"repeats={repeats} (alternated), {os.cpu_count()} CPUs")


def _print_failed_peers(results, names):
    """One line per peer (``names[1:]``) that failed: its name and its reason's last line."""
    for n in names[1:]:
        if "error" in results.get(n, {}):
            print(f"{n} FAILED: {(results[n]['error'].strip().splitlines() or [''])[-1]}")



def image_sizes(paths: Sequence[str], size: Sequence[int]) -> dict:
    """The images' sizes and the JPEG DCT scale pipeline decodes each at for ``size``.

    Reads the headers (Pillow; a JPEG's EXIF orientation 5-8 swaps its sides, as
    pipeline turns it upright) of at most ``SIZE_FILES`` of ``paths``, evenly spaced;
    each JPEG's scale is ``pipeline.decode.image.Decoder.dct_ratio_index``'s, the one the
    pipeline candidate (default options: ``jpeg_dct_scaling``, a stretch resize) uses.

    Args:
        paths: the indexed files.
        size: the output (height, width), pixels.

    Returns:
        {"files": len(paths), "read": headers read, "jpeg", "other" (other formats),
        "unreadable": counts; "median", "min", "max": [width, height] (per side, None
        when none was read); "median_megapixels"; "dct_ratios": {"R": JPEGs decoded at
        scale 1/R}} (R in ``pipeline.decode.image.DCT_RATIOS``; 1: full scale).
    """
    step = max(1, -(-len(paths) // SIZE_FILES))
    picked = list(paths)[::step]
    dims, jpeg, unreadable = [], [], 0
    for p in picked:
        try:
            w, h, fmt = _header_size(p)
        except Exception:  # noqa: BLE001 - any reader error: counted, the run reports the file
            unreadable += 1
            continue
        dims.append((w, h))
        if fmt == "JPEG":
            jpeg.append((h, w))
    out = {"files": len(paths), "read": len(picked), "jpeg": len(jpeg),
           "other": len(dims) - len(jpeg), "unreadable": unreadable}
    for key, pick in (("median", statistics.median_low), ("min", min), ("max", max)):
        out[key] = [pick(d[0] for d in dims), pick(d[1] for d in dims)] if dims else None
    out["median_megapixels"] = (statistics.median(w * h for w, h in dims) / 1e6 if dims
                                else None)
    ratios = _dct_ratios(jpeg, size)
    out["dct_ratios"] = {str(r): ratios.count(r) for r in sorted(set(ratios), reverse=True)}
    return out


def _header_size(path: str):
    """(width, height as displayed, Pillow's format name) from ``path``'s header."""
    from PIL import Image  # pylint: disable=import-outside-toplevel
    if "://" in path:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        f = tf.io.gfile.GFile(path, "rb")
    else:
        f = open(path, "rb")  # pylint: disable=consider-using-with
    with f, Image.open(f) as im:
        w, h = im.size
        if im.format == "JPEG" and im.getexif().get(0x0112, 1) in (5, 6, 7, 8):
            w, h = h, w
        return w, h, im.format


def _dct_ratios(dims: Sequence[Sequence[int]], size: Sequence[int]) -> list:
    """``DCT_RATIOS[Decoder.dct_ratio_index(h, w, size)]`` of each (height, width)."""
    if not dims:
        return []
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from pipeline.decode import image as decode  # pylint: disable=import-outside-toplevel
    unique = sorted(set(map(tuple, dims)))
    target = (int(size[0]), int(size[1]))
    index = tf.function(lambda hw: tf.map_fn(
        lambda s: decode.Decoder.dct_ratio_index(s[0], s[1], target, ceil=True), hw,
        fn_output_signature=tf.int32))(tf.constant(np.asarray(unique, np.int32)))
    ratio = {d: decode.DCT_RATIOS[i] for d, i in zip(unique, index.numpy())}
    return [ratio[tuple(d)] for d in dims]


def image_sizes_line(sizes: dict, size: Sequence[int]) -> str:
    """``image_sizes`` as the line bench prints, e.g. "images (WxH): median 452x447,
    300-600 x 301-600, 0.2 MP; 512 JPEGs; pipeline decodes them for 224x224 at: full
    scale for all 512" (the scale: pipeline's reduced-DCT JPEG decoding)."""
    lo, hi, med = sizes["min"], sizes["max"], sizes["median"]
    if med is None:
        text = "images: no header read"
    elif lo == hi:
        text = f"images (WxH): {lo[0]}x{lo[1]} each, {sizes['median_megapixels']:.1f} MP"
    else:
        text = (f"images (WxH): median {med[0]}x{med[1]}, {lo[0]}-{hi[0]} x {lo[1]}-{hi[1]}, "
                f"{sizes['median_megapixels']:.1f} MP")
    counts = [f"{sizes['jpeg']:,} JPEG{'' if sizes['jpeg'] == 1 else 's'}"] + [
        f"{sizes[k]:,} {what}" for k, what in (("other", "in other formats"),
                                               ("unreadable", "unreadable")) if sizes[k]]
    if sizes["read"] < sizes["files"]:
        counts[-1] += f" ({sizes['read']:,} of the {sizes['files']:,} files read, evenly spaced)"
    scales = [("full scale" if r == "1" else f"1/{r} scale") + f" for {n:,}"
              for r, n in sizes["dct_ratios"].items()]
    if len(scales) == 1:
        scales = [scales[0].replace(" for ", " for all ") if sizes["jpeg"] > 1 else scales[0]]
    return (f"{text}; {', '.join(counts)}; pipeline decodes the JPEGs for {size[0]}x{size[1]} "
            f"at: {', '.join(scales) or 'none'}")


def run(data_dir: Optional[str] = None, *, image_size=(224, 224), batch_size: int = 64,
        sample: str = "small", sample_images: Optional[int] = None, on_error: str = "raise",
        plan: bool = False, profile: bool = False, progress: bool = True, **options) -> dict:
    """Runs one of bench's reports, prints it, and returns its figures.

    Args:
        data_dir: a class-folder directory; None: ``$PIPELINE_DATA_DIR``, else the
            built-in sample ``sample`` of ``sample_images`` JPEGs (``pipeline.tools.sample``).
        image_size: (height, width) or an int, pixels.
        batch_size: int >= 1, images.
        sample: the built-in sample: "small" (sides of 300-600 pixels) or "large"
            (4000x3000, decoded at a reduced DCT scale): ``pipeline.tools.sample.SAMPLES``.
        sample_images: int >= 1, images in the built-in sample (None:
            ``SAMPLE_IMAGES[sample]``: 512, or 160 large ones).
        on_error: pipeline's bad-file policy, "raise" or "skip".
        plan: the capacity plan (needs ``target_images_per_sec``).
        profile: the stage profile.
        progress: show progress bars (stderr).
        **options: the ``MODE_OPTIONS`` (None or left out: ``DEFAULTS``): ``compare``
            (candidate names), ``max_spread``, ``epochs``, ``repeats``, ``seed``,
            ``target_images_per_sec``, ``worker_cores``, ``headroom``, ``augment``,
            ``profile_dir``.

    Returns:
        The plan's or the profile's ``to_dict()``; for the peer comparison, pipeline's
        figures (``RESULT_KEYS``, medians), ``spread``, ``options``, ``images``
        (``image_sizes``), ``compare`` (each peer's figures or ``error``) and
        ``speedup_vs_NAME`` / ``speedup_vs_NAME_cpu``.

    Raises:
        ValueError: ``check``'s, the library's for the options, or too few images
            delivered per epoch to time (``check_timed``).
        PipelineFailed: pipeline's candidate failed (the table is printed first).
        Stopped: Ctrl-C during the runs (the finished rounds' table is printed first).
    """
    o = check(data_dir, batch_size=batch_size, sample=sample, sample_images=sample_images,
              plan=plan, profile=profile, **options)  # before TensorFlow loads
    o.update(sample_images=_sample_images(sample, sample_images), on_error=on_error,
             batch_size=batch_size, progress=progress, data_dir=data_dir)
    from absl import logging  # pylint: disable=import-outside-toplevel
    from pipeline.sources import index  # pylint: disable=import-outside-toplevel

    names = ["pipeline"] + [c for c in o["compare"] if c != "pipeline"]
    size = harness.check_spec({"image_size": image_size, "batch_size": batch_size,
                               "seed": o["seed"], "options": {"on_error": on_error}},
                              names if not (plan or profile) else ["pipeline"])["image_size"]
    folder = _data_folder(data_dir, sample, o["sample_images"])
    idx = index.index_directory(folder)  # a missing data_dir: the error comes first, alone
    if not data_dir and not os.environ.get(sample_lib.DATA_DIR_ENV):
        print(sample_lib.sample_note(folder), flush=True)
    if not profile:
        check_timed(batch_size, len(idx), data_dir, o["sample_images"])
    logging.info("pipeline bench: data in %s", folder)
    if plan or profile:
        print(image_sizes_line(image_sizes(idx.paths, size), size), flush=True)
        return _plan_or_profile(folder, size, plan, o)
    return _compare(folder, idx.paths, size, names, o)


def _data_folder(data_dir: Optional[str], sample: str, sample_images: int) -> str:
    """The folder bench reads: ``data_dir``, ``$PIPELINE_DATA_DIR``, else the built-in
    sample (written once; a line on stderr says so first, as it takes a while)."""
    size = sample_lib.sample_size(sample)
    if (not data_dir and not os.environ.get(sample_lib.DATA_DIR_ENV)
            and not os.path.isdir(sample_lib.sample_dir(sample_images, size=size))):
        what = f"{size[1]}x{size[0]} " if size else ""
        print(f"pipeline bench: writing the built-in sample once ({sample_images} {what}"
              "JPEGs)...", file=sys.stderr, flush=True)
    return sample_lib.default_data_dir(data_dir, num_images=sample_images, shared=False,
                                       size=size)


def _plan_or_profile(folder: str, size: Sequence[int], plan: bool, o: dict) -> dict:
    """The capacity plan (``plan``) or the stage profile: printed, and its ``to_dict()``."""
    import pipeline  # pylint: disable=import-outside-toplevel
    if plan:
        cost = capacity.measure_cost(folder, size, o["batch_size"], augment=o["augment"],
                                     epochs=o["epochs"], repeats=o["repeats"],
                                     on_error=o["on_error"], seed=o["seed"],
                                     progress=o["progress"])
        report = capacity.capacity_plan(o["target_images_per_sec"], cost["images_per_cpu_sec"],
                                        worker_cores=o["worker_cores"], headroom=o["headroom"],
                                        measurement=cost)
    else:
        report = pipeline.profile(folder, target_images_per_sec=o["target_images_per_sec"],
                                  profile_dir=o["profile_dir"], image_size=tuple(size),
                                  batch_size=o["batch_size"], on_error=o["on_error"])
    print(report.table())
    return report.to_dict()


def _compare(folder: str, paths: Sequence[str], size: Sequence[int], names: Sequence[str],
             o: dict) -> dict:
    """The peer comparison: its lines printed, its figures returned (``run``)."""
    from pipeline.tools import report as report_lib  # pylint: disable=import-outside-toplevel
    print(report_lib.stack_line())
    spec = {"data_dir": folder, "image_size": size, "batch_size": o["batch_size"],
            "epochs": o["epochs"], "seed": o["seed"], "num_images": len(paths),
            "options": {"on_error": o["on_error"]}}
    label = (o["data_dir"] or os.environ.get(sample_lib.DATA_DIR_ENV)
             or sample_lib.data_dir_label(folder))
    print(header(len(paths), label, size, o["batch_size"], o["epochs"], o["repeats"]),
          flush=True)
    sizes = image_sizes(paths, size)
    print(image_sizes_line(sizes, size), flush=True)
    try:  # a peer that fails (e.g. Keras on a bad file) is reported, not fatal
        results = harness.run_candidates(names, spec, repeats=o["repeats"],
                                         progress=o["progress"], keep_going=True,
                                         quality_images=harness.QUALITY_IMAGES)
    except harness.Interrupted as e:
        if e.rounds:
            print(harness.format_table(e.results))
        raise Stopped(f"Ctrl-C; {e.rounds} of {o['repeats']} round(s) finished"
                      + (", their medians above" if e.rounds else "")) from None
    main = results["pipeline"]
    if not harness.ok(main):
        print(harness.format_table(results))
        _print_failed_peers(results, names)
        raise PipelineFailed(f"pipeline failed: {main.get('error', '')}")
    unmeasured = [k for k in FIGURES if not isinstance(main.get(k), (int, float))
                  or not math.isfinite(main[k])]
    if unmeasured:  # e.g. on_error="skip" left too few images per epoch: nothing timed
        check_timed(o["batch_size"], main.get("num_images"), o["data_dir"], o["sample_images"],
                    why=f"no figure for {', '.join(unmeasured)}: pipeline delivered "
                        f"{main.get('num_images')} of the {len(paths)} images per epoch (the "
                        f"others were bad files, on_error={o['on_error']}), so ")
    print(harness.format_table(results))
    _print_failed_peers(results, names)
    print()
    for line in harness.headline(results, "pipeline", names[1:], max_spread=o["max_spread"]):
        print(line)
    return _result(results, names, spec, dict(o, images=sizes))


def _result(results: dict, names: Sequence[str], spec: dict, o: dict) -> dict:
    """The peer comparison's figures (``run``'s return)."""
    main = results["pipeline"]
    out = {k: main[k] for k in RESULT_KEYS if k in main}
    out["spread"] = harness.spread(main)
    out["options"] = dict(spec, data_dir=sample_lib.data_dir_label(spec["data_dir"]),
                          candidates=list(names), repeats=o["repeats"])
    out["images"] = o["images"]
    out["compare"] = {n: results[n] for n in names[1:]}
    for n in names[1:]:
        for key, suffix in (("images_per_sec", ""), ("steady_images_per_cpu_sec", "_cpu")):
            r = harness.ratio(results, "pipeline", n, key)
            if r is not None:
                out[f"speedup_vs_{n}{suffix}"] = r
    return out
