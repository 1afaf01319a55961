"""``pipeline`` beside its peers, on the same files, in one run.

Candidates (see ``pipeline/tools/bench/candidates.py`` and ``benchmarks/peer_candidates.py`` for
exactly what each does), each in
its own subprocess (``python -m pipeline.tools.bench.harness``) so that its peak RSS
(``VmHWM``) is its own; with ``--repeats`` > 1 they are alternated round by
round and the medians reported:

  pipeline, pipeline_train (Augment: random resized crop + flip),
  pipeline_train_nofast (crop-before-decode off; skipped without a
  ``fast_jpeg`` option), keras, keras_aug (RandomCrop + RandomFlip layers),
  tf1_queue (TF1 queue runners), pydataset (Keras PyDataset, Pillow, 2 thread
  workers), in_memory (decode all first; ``load_sec`` apart), torch (skipped
  when not installed), grain (Grain's MapDataset + Pillow in worker processes;
  skipped when ``grain`` is not installed), dali and dali_train (NVIDIA DALI's CPU pipeline,
  ``device_id=None``; skipped when ``nvidia-dali-cuda120`` is not installed),
  decode_limit (one core; x cores = the decode limit).

Reports images/s (after each epoch's first batch), images per CPU-second,
PSNR (median and 5th percentile against an antialiased resize of the full decode,
``--quality_images`` files; eval-mode candidates only), cores used, first batch seconds, peak RSS, and the ratios

  train_vs_keras_aug   pipeline_train / keras_aug images/s       (target >= 2.0)
  eval_vs_keras        pipeline / keras images/s            (target >= 1.6)
  eval_vs_decode_limit pipeline / (decode_limit x cores)    (target >= 0.9)
  eval_vs_dali         pipeline / dali                      (target >= 1.0 per CPU-second)
  train_vs_dali        pipeline_train / dali_train          (target >= 1.0 per CPU-second)

(the same over images per CPU-second as ``*_cpu``), as JSON and a bar chart.

Full size (defaults: the 1,000-photo sample, 224x224, batch 64, 3 epochs)::

    python benchmarks/peers.py --repeats=3 --json_out=peers.json

Tiny smoke run::

    python benchmarks/peers.py --num_images=64 --epochs=1 --json_out=/tmp/p.json
"""

import os
import tempfile

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir
import peer_candidates as _peers  # benchmarks/peer_candidates.py (registers the peers)
from pipeline import config as config_lib
from pipeline.sources import index as index_lib
from pipeline.tools import sample
from pipeline.tools.bench import harness as bench

ALL = list(bench.CANDIDATES)
DEFAULT = ["pipeline", "pipeline_train", "pipeline_train_nofast", "keras", "keras_aug", "plain",
           "tf1_queue", "pydataset", "in_memory", "torch", "grain", "dali", "dali_train",
           "decode_limit"]
TARGETS = {"train_vs_keras_aug": 2.0, "eval_vs_keras": 1.6, "eval_vs_decode_limit": 0.9,
           "eval_vs_dali_cpu": 1.0, "train_vs_dali_cpu": 1.0}

common_flags.define(
    data_dir="Class-folder photo root.",
    num_images=(0, "Use only the first N photos (symlinked into a temp folder); 0 = all of "
                "--data_dir."),
    image_size=224, batch_size=64, epochs=(3, "Epochs per candidate run."), repeats=1,
    seed=(0, "Shuffle seed."), timeout=1800, progress=False, json_out="peers.json",
    png_out=(None, "Bar chart PNG (default: json_out with .png)."))
flags.DEFINE_list("candidates", DEFAULT, f"Candidates to run, in order; any of {ALL}.")
flags.DEFINE_integer("quality_images", 16, "PSNR per candidate on the first N files "
                     "(pipeline.transform.quality; outside the timed part); 0: none.")


def ratios(results):
    """The target ratios (images/s and images per CPU-second), None when missing."""
    out = {}
    limit = results.get("decode_limit")
    for key, suffix in (("images_per_sec", ""), ("steady_images_per_cpu_sec", "_cpu")):
        out["train_vs_keras_aug" + suffix] = bench.ratio(results, "pipeline_train", "keras_aug",
                                                         key)
        out["eval_vs_keras" + suffix] = bench.ratio(results, "pipeline", "keras", key)
        out["eval_vs_dali" + suffix] = bench.ratio(results, "pipeline", "dali", key)
        out["train_vs_dali" + suffix] = bench.ratio(results, "pipeline_train", "dali_train", key)
        r = bench.ratio(results, "pipeline", "decode_limit", key)
        if r is not None and key == "images_per_sec":
            r /= limit["cores"]  # the limit is one core's rate times the cores
        out["eval_vs_decode_limit" + suffix] = r
    return out


def run(data_dir, candidates, image_size=224, batch_size=64, epochs=3, repeats=1, seed=0,
        timeout=1800, progress=False, quality_images=0):
    """Runs the candidates on ``data_dir``; returns the result dict (see module doc)."""
    idx = index_lib.index_directory(data_dir)
    spec = {"data_dir": data_dir, "image_size": [image_size, image_size],
            "batch_size": batch_size, "epochs": epochs, "seed": seed, "num_images": len(idx),
            "hard_exit": True}
    results = bench.run_candidates(candidates, spec, repeats=repeats, progress=progress,
                                   keep_going=True, timeout=timeout,
                                   quality_images=quality_images)
    cores = config_lib.cpu_count()
    out = {"benchmark": "peers", "data_dir": sample.data_dir_label(data_dir), "num_images": len(idx),
           "image_size": image_size, "batch_size": batch_size, "epochs": epochs,
           "repeats": repeats, "cores": cores, "candidates": results,
           "ratios": ratios(results), "targets": TARGETS}
    lim = results.get("decode_limit")
    if bench.ok(lim):
        out["decode_limit_images_per_sec"] = lim["images_per_sec"] * lim["cores"]
        out["decode_limit_images_per_cpu_sec"] = lim["steady_images_per_cpu_sec"]
    out["meets_targets"] = {k: (out["ratios"][k] >= t if out["ratios"][k] is not None else None)
                            for k, t in TARGETS.items()}
    out["skipped"] = {n: r["skipped"] for n, r in results.items() if "skipped" in r}
    out["failed"] = {n: r["error"] for n, r in results.items() if "error" in r}
    return out


# Candidates that measure a ceiling, not a way to read files (the data decoded into memory
# first): drawn in a panel of their own, so that their bar does not flatten the others.
CEILINGS = ("in_memory",)


def plot(out, path):
    """Writes the peers chart: the candidates that read files on a linear axis (images/s and
    images per CPU-second side by side, the decode limit dashed), and the in-memory ceiling
    beside ``pipeline`` in a panel of its own with a log axis."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = out["candidates"]
    names = [n for n in res if bench.ok(res[n]) and n not in CEILINGS]
    ceilings = [n for n in CEILINGS if n in res and bench.ok(res[n])]
    fig, axes = plt.subplots(1, 2, figsize=(max(7.0, 1.1 * len(names) + 4), 4.8),
                             gridspec_kw={"width_ratios": [max(len(names), 1), 2]})
    ax = axes[0]
    series = {"images/s": "images_per_sec", "images per CPU-s": "steady_images_per_cpu_sec"}
    width = 0.8 / len(series)
    for k, (label, key) in enumerate(series.items()):
        xs = [i + (k - 0.5) * width for i in range(len(names))]
        vals = [res[n].get(key) or float("nan") for n in names]
        bars = ax.bar(xs, vals, width, label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=1)
    if "decode_limit_images_per_sec" in out:
        y = out["decode_limit_images_per_sec"]
        ax.axhline(y, linestyle="--", linewidth=1, color="gray")
        ax.annotate(f"decode limit (1 core x {out['cores']})", (len(names) - 0.55, y),
                    ha="right", va="bottom", fontsize=8, color="gray")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("images")
    ax.set_ylim(0, 1.25 * ax.get_ylim()[1])
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    ax.set_title(f"reading files: {out['num_images']} photos, {out['image_size']}px, batch "
                 f"{out['batch_size']}, {out['epochs']} epochs x {out['repeats']} (medians), "
                 f"{out['cores']} cores", fontsize=9)
    ax = axes[1]
    shown = [n for n in ["pipeline"] + ceilings if n in res and bench.ok(res[n])]
    if ceilings:
        bars = ax.bar(shown, [res[n]["images_per_sec"] for n in shown],
                      color=["C0"] + ["C2"] * (len(shown) - 1))
        ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=1)
        ax.set_yscale("log")
        ax.set_ylim(100, 5 * max(res[n]["images_per_sec"] for n in shown))
        ax.set_ylabel("images/s (log scale)")
        ax.set_title("ceiling: data already\ndecoded in memory", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    else:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv):
    del argv
    FLAGS.data_dir = _data_dir(FLAGS.data_dir)
    for c in FLAGS.candidates:
        if c not in ALL:
            raise app.UsageError(f"--candidates: unknown {c!r}; known: {ALL}. "
                                 f"Received: {FLAGS.candidates!r}")
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = FLAGS.data_dir
        if FLAGS.num_images:
            data_dir = _peers.symlink_tree(FLAGS.data_dir, FLAGS.num_images,
                                           os.path.join(tmp, "data"))
        out = run(data_dir, FLAGS.candidates, FLAGS.image_size, FLAGS.batch_size, FLAGS.epochs,
                  FLAGS.repeats, FLAGS.seed, FLAGS.timeout, FLAGS.progress,
                  FLAGS.quality_images)
    out["source_dir"] = sample.data_dir_label(FLAGS.data_dir)
    png = FLAGS.png_out or os.path.splitext(FLAGS.json_out)[0] + ".png"
    out["png"] = plot(out, png)
    bench.write_json(FLAGS.json_out, out)
    print(bench.format_table(out["candidates"], reference="pipeline"))
    for n, why in out["skipped"].items():
        print(f"skipped {n}: {why}")
    for n, err in out["failed"].items():
        print(f"FAILED {n}: {err.strip().splitlines()[-1] if err.strip() else err}")
    for k, v in out["ratios"].items():
        t = TARGETS.get(k)
        print(f"{k:<26} " + ("n/a" if v is None else f"{v:.2f}x")
              + (f"  (target >= {t}: {'met' if v is not None and v >= t else 'NOT met'})"
                 if t else ""))
    print(f"wrote {FLAGS.json_out} and {png}")


if __name__ == "__main__":
    app.run(main)
