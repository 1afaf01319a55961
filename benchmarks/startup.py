"""Start-up: time to the first batch at 1,000 to 1,000,000 files, pipeline vs Keras.

For each size N in ``--sizes`` it builds (once; reused by later runs) a tree
of N hard links to the photos of the data folder, in ``--num_classes`` class
folders (``class_000`` ...; fewer when N is smaller), under ``--tmp_dir``.
Then, per size and per repeat, each candidate runs in a FRESH subprocess,
the candidates alternated (pipeline first on even repeats, Keras first on odd
ones):

  pipeline  ``pipeline.from_directory(tree, image_size=(S, S), batch_size=B)``,
            then ``next(iter(ds))``;
  keras     ``keras.utils.image_dataset_from_directory(tree, image_size=(S, S),
            batch_size=B)``, then ``next(iter(ds))``.

The ``pipeline`` package is byte-compiled first (``compile_package``), as pip
leaves an installed copy and as Keras is measured.

Each child reports:

  factory_sec      the factory call (listing, index, building the dataset);
  total_sec        factory + first batch (time to the first batch);
  first_batch_sec  total - factory;
  index_sec        the listing inside the factory (``pipeline.sources.index.
                   index_directory`` / ``keras.src.utils.dataset_utils.
                   index_directory``, timed by wrapping them);
  rss_after_import_mb, peak_rss_mb, rss_growth_mb
                   ``VmRSS`` after the imports, ``VmHWM`` at the end, and the
                   peak's growth above the RSS after imports (a child inherits
                   ``ru_maxrss`` across fork/exec, so ``VmHWM`` of its own
                   ``/proc/self/status`` is used, judged from its own level);
  index_bytes_per_file
                   pipeline: ``sys.getsizeof`` of the Index's path list, of
                   each path string, plus its numpy arrays (labels, weights)
                   and its errors dict, per file; keras: the same over its list
                   of paths (and its label array). ``path_list_bytes_per_file``
                   is the list of path strings alone, for both.

``pipeline.scan(tree)`` (a full pass that decodes every file) is timed at the
sizes in ``--scan_sizes`` (default: up to 10,000 files; a full decode of
1,000,000 files takes hours on 2 cores): files/s and cores used (CPU time /
wall time of the child).

The JSON also holds the slope of the index time per file between sizes
(log-log: 0 means the time per file does not grow with the count), the load
average before and after every child (other jobs share the machine), the
start-up targets and whether they are met. The plot is time to first
batch vs files (log-log), both candidates.

Full run (about 8 minutes on 2 cores with ``--repeats=3``, the trees built once
in about 2 minutes and then reused; delete ``<tmp_dir>/pipeline-startup-v1``
afterwards, or pass ``--delete_trees``)::

    python benchmarks/startup.py --sizes=1000,10000,100000,1000000 --repeats=3

Tiny smoke run (the CI test)::

    python benchmarks/startup.py --sizes=200,1000 --num_classes=10 \\
        --tmp_dir=/tmp/x --json_out=/tmp/x/s.json --plot=/tmp/x/s.png

The data folder: ``--data_dir``, else ``$PIPELINE_DATA_DIR``, else
``../shared/data/imagenet-sample`` beside the repository, else the built-in
generated sample (``pipeline.tools.sample.default_data_dir``).
"""

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, REPO

common_flags.define(data_dir="Photos to link to.",
                    repeats=(1, "Runs per candidate and size (medians when more)."),
                    image_size=224, batch_size=64,
                    json_out=os.path.join("benchmarks", "results", "startup.json"),
                    timeout=(3600, "Seconds allowed per child."))
flags.DEFINE_list("sizes", ["1000", "10000", "100000", "1000000"], "File counts.")
flags.DEFINE_list("candidates", ["pipeline", "keras"], "Candidates (pipeline, keras).")
flags.DEFINE_integer("num_classes", 1000, "Class folders per tree (at most the file count).")
flags.DEFINE_list("scan_sizes", ["1000", "10000"],
                  "Sizes at which pipeline.scan (a full decode) is timed; 'all' or 'none'.")
flags.DEFINE_string("plot", os.path.join("benchmarks", "results", "startup.png"),
                    "PNG: time to first batch vs files, log-log.")
flags.DEFINE_string("tmp_dir", None, "Where the trees are built and kept (default: the "
                    "system temporary folder). Trees are reused when present.")
flags.DEFINE_bool("delete_trees", False, "Delete the trees at the end.")
flags.DEFINE_string("child", None, "Internal: run one measurement (a JSON spec) and print it.")

TARGET_RATIO = 1.5
TARGET_1M_SEC = 60.0
TREE_VERSION = 1


# --- the child ----------------------------------------------------------------

def _status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _list_bytes(paths):
    """sys.getsizeof of a list and of each of its strings."""
    return sys.getsizeof(paths) + sum(sys.getsizeof(p) for p in paths)


def _index_bytes(idx):
    """Bytes held by a pipeline Index: paths (list + strings) + arrays + errors."""
    total = _list_bytes(idx.paths)
    for arr in (idx.labels, idx.weights):
        if arr is not None:
            total += arr.nbytes
    total += sys.getsizeof(idx.errors) + sum(sys.getsizeof(v) for v in idx.errors.values())
    total += _list_bytes(idx.left_out)
    return total


def _child(spec):
    """Runs one measurement in this (fresh) process; returns a dict."""
    out = {"candidate": spec["candidate"], "files": spec["files"]}
    t_import = time.perf_counter()
    kind = spec["candidate"]
    if kind in ("pipeline", "scan"):
        import pipeline  # noqa: F401
        from pipeline.sources import index as index_lib
        # which checkout was measured, relative (no machine path in the results)
        out["pipeline_module"] = os.path.relpath(os.path.dirname(pipeline.__file__), REPO)
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import keras
        from keras.src.utils import dataset_utils as index_lib
    import tensorflow as tf  # noqa: F401  (imported above either way)
    out["import_sec"] = time.perf_counter() - t_import
    out["rss_after_import_mb"] = _status_mb("VmRSS")
    out["hwm_after_import_mb"] = _status_mb("VmHWM")
    tree = spec["tree"]

    if kind == "scan":
        cpu0, t0 = time.process_time(), time.perf_counter()
        report = pipeline.scan(tree, progress=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        out.update(scan_sec=wall, cpu_sec=cpu, cores_used=cpu / wall,
                   files_per_sec=spec["files"] / wall,
                   files_scanned=int(report.num_files), files_ok=int(report.num_ok),
                   bad_files=len(report.bad_files))
        out["peak_rss_mb"] = _status_mb("VmHWM")
        out["rss_growth_mb"] = out["peak_rss_mb"] - out["rss_after_import_mb"]
        return out

    timed = {}
    original = index_lib.index_directory

    def timed_index(*a, **k):
        t = time.perf_counter()
        result = original(*a, **k)
        timed["sec"] = time.perf_counter() - t
        timed["result"] = result
        return result

    index_lib.index_directory = timed_index
    size = (spec["image_size"], spec["image_size"])
    cpu0, t0 = time.process_time(), time.perf_counter()
    if kind == "pipeline":
        ds = pipeline.from_directory(tree, image_size=size, batch_size=spec["batch_size"])
    else:
        ds = keras.utils.image_dataset_from_directory(
            tree, image_size=size, batch_size=spec["batch_size"], verbose=False)
    t1 = time.perf_counter()
    images, _ = next(iter(ds))
    t2 = time.perf_counter()
    cpu = time.process_time() - cpu0
    index_lib.index_directory = original
    out.update(factory_sec=t1 - t0, total_sec=t2 - t0, first_batch_sec=t2 - t1,
               index_sec=timed.get("sec"), cpu_sec=cpu, batch_images=int(images.shape[0]))
    out["peak_rss_mb"] = _status_mb("VmHWM")
    out["rss_growth_mb"] = out["peak_rss_mb"] - out["rss_after_import_mb"]
    result = timed.get("result")
    if kind == "pipeline" and result is not None:
        n = len(result)
        out["indexed_files"] = n
        out["index_bytes_per_file"] = _index_bytes(result) / n
        out["path_list_bytes_per_file"] = _list_bytes(result.paths) / n
    elif result is not None:
        paths, labels, _ = result
        n = len(paths)
        out["indexed_files"] = n
        out["path_list_bytes_per_file"] = _list_bytes(paths) / n
        out["index_bytes_per_file"] = (_list_bytes(paths) + (
            labels.nbytes if hasattr(labels, "nbytes") else 0)) / n
    return out


# --- the parent -----------------------------------------------------------------

def _photos(src_dir):
    exts = (".jpg", ".jpeg", ".png")
    photos = sorted(os.path.join(d, f) for d, _, fs in os.walk(src_dir) for f in fs
                    if f.lower().endswith(exts))
    if not photos:
        raise ValueError(f"no images under the data folder. Received: data_dir={src_dir!r}")
    return photos


def build_tree(src_dir, num_files, num_classes, tmp_dir):
    """A tree of ``num_files`` hard links to the photos of ``src_dir`` (reused when present).

    Links are dealt round-robin to ``min(num_classes, num_files)`` folders
    ``class_000`` ..., named ``img_0000000.<ext>``. When ``src_dir`` is on
    another file system, the photos are copied once into ``tmp_dir`` and the
    links point to those copies. The tree is built under a temporary name and
    renamed into place, so a half-built tree is never reused.

    Returns:
        (tree path, seconds spent building, 0 when reused).
    """
    photos = _photos(src_dir)
    classes = max(1, min(num_classes, num_files))
    root = os.path.join(tmp_dir, f"pipeline-startup-v{TREE_VERSION}")
    final = os.path.join(root, f"n{num_files}-c{classes}-p{len(photos)}")
    if os.path.isdir(final):
        return final, 0.0
    os.makedirs(root, exist_ok=True)
    t0 = time.perf_counter()
    copies = os.path.join(root, f"photos-p{len(photos)}")
    tmp = tempfile.mkdtemp(prefix=os.path.basename(final) + ".tmp", dir=root)
    try:
        width = max(3, len(str(classes - 1)))
        names = [f"class_{c:0{width}d}" for c in range(classes)]
        for name in names:
            os.mkdir(os.path.join(tmp, name))
        sources = photos
        for i in range(num_files):
            src = sources[i % len(sources)]
            dst = os.path.join(tmp, names[i % classes],
                               f"img_{i:07d}{os.path.splitext(src)[1].lower()}")
            try:
                os.link(src, dst)
            except OSError:
                if sources is not photos:
                    raise
                sources = _copy_photos(photos, copies)  # another file system
                os.link(sources[i % len(sources)], dst)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, time.perf_counter() - t0


def _copy_photos(photos, dst):
    if not os.path.isdir(dst):
        tmp = dst + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        for k, p in enumerate(photos):
            shutil.copyfile(p, os.path.join(tmp, f"{k:07d}{os.path.splitext(p)[1].lower()}"))
        os.rename(tmp, dst)
    return sorted(os.path.join(dst, f) for f in os.listdir(dst))


def run_child(spec, timeout):
    """One measurement in a fresh process (this script with --child); returns its dict."""
    load0 = os.getloadavg()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        TF_CPP_MIN_LOG_LEVEL="3")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, os.path.abspath(__file__),
                           f"--child={json.dumps(spec)}"],
                          capture_output=True, text=True, timeout=timeout, env=env)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("STARTUP ")]
    if not lines:
        raise RuntimeError(f"child {spec['candidate']} at {spec['files']} files failed "
                           f"(exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(lines[-1][len("STARTUP "):])
    out["process_sec"] = time.perf_counter() - t0
    out["load_avg_before"] = list(load0)
    out["load_avg_after"] = list(os.getloadavg())
    return out


def _median_of(runs):
    """Medians of the numeric figures of several runs (first run's other values)."""
    out = dict(runs[0])
    for k, v in runs[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            vals = [r[k] for r in runs if isinstance(r.get(k), (int, float))]
            out[k] = statistics.median(vals)
    out["runs"] = runs
    return out


def slopes(sizes, per_file):
    """log-log slope of the per-file time between consecutive sizes (0: flat)."""
    out = []
    for (a, ta), (b, tb) in zip(zip(sizes, per_file), zip(sizes[1:], per_file[1:])):
        ok = ta and tb and ta > 0 and tb > 0
        out.append({"from": a, "to": b,
                    "slope": math.log(tb / ta) / math.log(b / a) if ok else None})
    return out


def fit_slope(sizes, per_file):
    """Least-squares log-log slope of per-file time over all sizes."""
    pts = [(math.log(n), math.log(t)) for n, t in zip(sizes, per_file) if t and t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def plot(path, sizes, per_size, candidates):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for c in candidates:
        ys = [s[c]["total_sec"] for s in per_size]
        ax.plot(sizes, ys, marker="o", label=f"{c} (time to first batch)")
    if "pipeline" in candidates:
        ax.plot(sizes, [s["pipeline"]["factory_sec"] for s in per_size], marker=".",
                linestyle="--", label="pipeline factory")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("files")
    ax.set_ylabel("seconds")
    ax.set_title("Start-up: factory + first batch of "
                 f"{FLAGS.batch_size} at {FLAGS.image_size}px")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(data_dir, sizes, candidates, repeats, scan_sizes, tmp_dir, timeout):
    from pipeline.tools import sample
    per_size, loads = [], []
    for n in sizes:
        tree, build_sec = build_tree(data_dir, n, FLAGS.num_classes, tmp_dir)
        entry = {"files": n, "tree": os.path.basename(tree), "tree_build_sec": build_sec,
                 "classes": len(os.listdir(tree))}
        runs = {c: [] for c in candidates}
        for r in range(repeats):
            order = candidates if r % 2 == 0 else list(reversed(candidates))
            for c in order:
                spec = {"candidate": c, "files": n, "tree": tree,
                        "image_size": FLAGS.image_size, "batch_size": FLAGS.batch_size}
                res = run_child(spec, timeout)
                loads.append(res["load_avg_before"][0])
                runs[c].append(res)
                print(f"{n:>9} files  {c:<9} factory {res['factory_sec']:7.2f} s  "
                      f"total {res['total_sec']:7.2f} s  peak RSS {res['peak_rss_mb']:6.0f} MiB"
                      f"  load {res['load_avg_before'][0]:.2f}", flush=True)
        for c in candidates:
            entry[c] = _median_of(runs[c])
        if "pipeline" in candidates and "keras" in candidates:
            entry["ratio_total"] = entry["pipeline"]["total_sec"] / entry["keras"]["total_sec"]
            entry["ratio_factory"] = (entry["pipeline"]["factory_sec"]
                                      / entry["keras"]["factory_sec"])
        if n in scan_sizes:
            res = run_child({"candidate": "scan", "files": n, "tree": tree}, timeout)
            loads.append(res["load_avg_before"][0])
            entry["scan"] = res
            print(f"{n:>9} files  scan      {res['scan_sec']:7.2f} s  "
                  f"{res['files_per_sec']:.0f} files/s  {res['cores_used']:.2f} cores",
                  flush=True)
        per_size.append(entry)
    out = {"benchmark": "startup", "source_dir": sample.data_dir_label(data_dir),
           "sizes": sizes, "candidates": candidates, "repeats": repeats,
           "num_classes": FLAGS.num_classes, "image_size": FLAGS.image_size,
           "batch_size": FLAGS.batch_size, "cores": os.cpu_count(),
           "per_size": per_size}
    out["load_average"] = {"min": min(loads), "max": max(loads),
                           "median": statistics.median(loads)}
    out["table"] = [{
        "files": s["files"],
        **{f"{c}_{k}": s[c][k] for c in candidates
           for k in ("factory_sec", "total_sec", "peak_rss_mb", "rss_growth_mb")},
        **({"ratio": s["ratio_total"]} if "ratio_total" in s else {})} for s in per_size]
    for c in candidates:
        per_file = [s[c]["index_sec"] / s["files"] if s[c].get("index_sec") else None
                    for s in per_size]
        out.setdefault("index_sec_per_file", {})[c] = per_file
        out.setdefault("index_time_slope", {})[c] = slopes(sizes, per_file)
        out.setdefault("index_time_slope_fit", {})[c] = fit_slope(sizes, per_file)
    largest = per_size[-1]
    if "pipeline" in candidates:
        out["index_bytes_per_file"] = {"files": largest["files"], "pipeline": largest[
            "pipeline"].get("index_bytes_per_file"), "pipeline_paths_only": largest[
            "pipeline"].get("path_list_bytes_per_file")}
        if "keras" in candidates:
            out["index_bytes_per_file"]["keras"] = largest["keras"].get("index_bytes_per_file")
            out["index_bytes_per_file"]["keras_paths_only"] = largest["keras"].get(
                "path_list_bytes_per_file")
            out["index_bytes_per_file"]["ratio"] = (
                out["index_bytes_per_file"]["pipeline"]
                / out["index_bytes_per_file"]["keras_paths_only"])
    scans = [s["scan"] for s in per_size if "scan" in s]
    if scans:
        out["scan"] = [{k: s[k] for k in ("files", "scan_sec", "files_per_sec", "cores_used",
                                          "cpu_sec", "peak_rss_mb")} for s in scans]
    if "ratio_total" in per_size[0]:
        targets = {}
        for s in per_size:
            if s["files"] in (10000, 100000):
                targets[f"ratio_at_{s['files']}"] = {
                    "value": s["ratio_total"], "target": TARGET_RATIO,
                    "met": s["ratio_total"] <= TARGET_RATIO}
            if s["files"] == 1000000:
                targets["total_sec_at_1000000"] = {
                    "value": s["pipeline"]["total_sec"], "target": TARGET_1M_SEC,
                    "met": s["pipeline"]["total_sec"] < TARGET_1M_SEC}
        out["targets"] = targets
    return out


def compile_package():
    """Byte-compiles the ``pipeline`` package, as ``pip install`` leaves it.

    Keras is measured as pip installed it (compiled). A source checkout whose
    modules have no ``.pyc`` yet recompiles them in every child where
    ``PYTHONDONTWRITEBYTECODE`` is set (as on this project's machines), some
    40 ms of the first ``from_directory`` call (it imports its modules lazily)
    that no installed copy pays.
    """
    import compileall  # pylint: disable=import-outside-toplevel
    import pipeline  # pylint: disable=import-outside-toplevel

    compileall.compile_dir(os.path.dirname(pipeline.__file__), quiet=1)


def main(argv):
    del argv
    if FLAGS.child:
        result = _child(json.loads(FLAGS.child))
        print("STARTUP " + json.dumps(result), flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # skip TensorFlow's teardown (it can abort at exit)
    from pipeline.tools import sample
    data_dir = sample.default_data_dir(FLAGS.data_dir)
    try:
        sizes = [int(s) for s in FLAGS.sizes]
        if not sizes or min(sizes) <= 0 or sizes != sorted(set(sizes)):
            raise ValueError
    except ValueError:
        raise app.UsageError("--sizes needs distinct positive integers, smallest first. "
                             f"Received: {FLAGS.sizes!r}")
    if FLAGS.repeats < 1:
        raise app.UsageError(f"--repeats must be >= 1. Received: {FLAGS.repeats}")
    bad = [c for c in FLAGS.candidates if c not in ("pipeline", "keras")]
    if bad or not FLAGS.candidates:
        raise app.UsageError(f"--candidates takes pipeline, keras. Received: {FLAGS.candidates}")
    if FLAGS.scan_sizes == ["all"]:
        scan_sizes = set(sizes)
    elif FLAGS.scan_sizes in ([], ["none"]):
        scan_sizes = set()
    else:
        scan_sizes = {int(s) for s in FLAGS.scan_sizes}
    tmp_dir = FLAGS.tmp_dir or tempfile.gettempdir()
    os.makedirs(tmp_dir, exist_ok=True)
    compile_package()
    try:
        out = run(data_dir, sizes, list(FLAGS.candidates), FLAGS.repeats, scan_sizes,
                  tmp_dir, FLAGS.timeout)
    finally:
        if FLAGS.delete_trees:
            shutil.rmtree(os.path.join(tmp_dir, f"pipeline-startup-v{TREE_VERSION}"),
                          ignore_errors=True)
    out["plot"] = plot(FLAGS.plot, sizes, out["per_size"], list(FLAGS.candidates))
    out["command"] = "python benchmarks/startup.py " + " ".join(
        f"--{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in (
            ("sizes", sizes), ("repeats", FLAGS.repeats), ("num_classes", FLAGS.num_classes)))
    from pipeline.tools.bench import harness as bench
    bench.write_json(FLAGS.json_out, out)
    print()
    print(format_table(out))
    print(f"wrote {FLAGS.json_out} and {FLAGS.plot}")


def format_table(out):
    cands = out["candidates"]
    lines = []
    if cands == ["pipeline", "keras"]:
        lines.append("| files | pipeline factory | pipeline total | keras total | ratio | "
                     "pipeline peak RSS | keras peak RSS |")
        lines.append("|---|---|---|---|---|---|---|")
        for s in out["per_size"]:
            p, k = s["pipeline"], s["keras"]
            lines.append(
                f"| {s['files']:,} | {p['factory_sec']:.2f} s | {p['total_sec']:.2f} s | "
                f"{k['total_sec']:.2f} s | {s['ratio_total']:.2f}x | "
                f"{p['peak_rss_mb']:.0f} MiB (+{p['rss_growth_mb']:.0f}) | "
                f"{k['peak_rss_mb']:.0f} MiB (+{k['rss_growth_mb']:.0f}) |")
    for c in cands:
        sl = out["index_time_slope"][c]
        lines.append(f"{c} index time per file (us): " + ", ".join(
            f"{n}: {t * 1e6:.2f}" if t else f"{n}: -"
            for n, t in zip(out["sizes"], out["index_sec_per_file"][c]))
            + "; slopes " + ", ".join(
                f"{s['from']}->{s['to']}: {s['slope']:+.2f}" if s["slope"] is not None else "-"
                for s in sl))
    if "index_bytes_per_file" in out:
        b = out["index_bytes_per_file"]
        lines.append(f"index bytes per file at {b['files']:,} files: pipeline "
                     f"{b['pipeline']:.0f}" + (f", keras paths {b['keras_paths_only']:.0f} "
                                               f"(ratio {b['ratio']:.2f}x)" if "ratio" in b
                                               else ""))
    for s in out.get("scan", []):
        lines.append(f"scan at {s['files']:,} files: {s['files_per_sec']:.0f} files/s, "
                     f"{s['cores_used']:.2f} cores")
    la = out["load_average"]
    lines.append(f"load average (1 min) before the children: median {la['median']:.2f}, "
                 f"{la['min']:.2f}-{la['max']:.2f}")
    for k, v in out.get("targets", {}).items():
        lines.append(f"target {k}: {v['value']:.2f} (target {v['target']}): "
                     f"{'met' if v['met'] else 'NOT met'}")
    return "\n".join(lines)


if __name__ == "__main__":
    app.run(main)
