"""Peak RSS over one epoch: 1,000 vs 20,000 files, pipeline vs load-everything.

Builds, for each size in ``--sizes``, a temporary folder of class sub-folders
filled with symlinks to the real photos of ``--data_dir`` (repeated
round-robin), then runs one epoch of each candidate in its own subprocess
(``python -m pipeline.tools.bench.harness``: ``VmHWM`` is the candidate's own peak):

  pipeline  ``pipeline.from_directory`` (streams: memory should not follow
                 the file count);
  in_memory      decode everything into one uint8 array first, then
                 ``from_tensor_slices`` (grows with the files: 20,000 x
                 224x224x3 is 3 GB, held twice while the tensor is copied).

Reports each peak RSS (MiB), growth from the smallest to the largest size
(``change`` = largest / smallest - 1), and whether pipeline's change is under
10%, as JSON and a PNG (peak RSS vs files).

Full size (defaults)::

    python benchmarks/memory_scaling.py --json_out=memory_scaling.json

Tiny smoke run::

    python benchmarks/memory_scaling.py --sizes=32,64 --image_size=64 --json_out=/tmp/m.json
"""

import os
import tempfile

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir
import charts  # benchmarks/charts.py
import peer_candidates as _peers  # benchmarks/peer_candidates.py (the peers; symlink_tree)
from pipeline.tools import sample
from pipeline.tools.bench import harness as bench

common_flags.define(data_dir="Photos to repeat.", image_size=224, batch_size=64, timeout=3600,
                    progress=False, json_out="memory_scaling.json", png_out=None)
flags.DEFINE_list("sizes", ["1000", "20000"], "File counts, smallest first.")
flags.DEFINE_list("candidates", ["pipeline", "in_memory"], "Candidates.")
flags.DEFINE_integer("num_classes", 100, "Class sub-folders in each generated folder.")
flags.DEFINE_float("max_change", 0.10, "Allowed pipeline peak RSS change (fraction).")


def run(data_dir, sizes, candidates, num_classes=100, image_size=224, batch_size=64,
        timeout=3600, progress=False, max_change=0.10):
    """Measures every candidate at every size; returns the result dict."""
    per_size = []
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            d = _peers.symlink_tree(data_dir, n, os.path.join(tmp, "data"),
                                    min(num_classes, n))
            spec = {"data_dir": d, "image_size": [image_size, image_size],
                    "batch_size": batch_size, "epochs": 1, "seed": 0, "num_images": n,
                    "hard_exit": True}
            res = bench.run_candidates(candidates, spec, progress=progress, timeout=timeout)
        per_size.append({"files": n, "results": {
            c: {k: r.get(k) for k in ("peak_rss_mb", "rss_after_import_mb", "images_delivered",
                                      "images_per_sec", "wall_sec", "total_sec", "load_sec")
                if r.get(k) is not None} for c, r in res.items()}})
    out = {"benchmark": "memory_scaling", "source_dir": sample.data_dir_label(data_dir), "sizes": sizes,
           "image_size": image_size, "batch_size": batch_size, "per_size": per_size,
           "peak_rss_mb": {c: [s["results"][c]["peak_rss_mb"] for s in per_size]
                           for c in candidates}}
    out["change"] = {c: v[-1] / v[0] - 1 for c, v in out["peak_rss_mb"].items()}
    out["growth_mb"] = {c: v[-1] - v[0] for c, v in out["peak_rss_mb"].items()}
    if "pipeline" in out["change"]:
        out["max_change"] = max_change
        out["pipeline_flat"] = abs(out["change"]["pipeline"]) < max_change
    if "pipeline" in candidates and "in_memory" in candidates:
        out["in_memory_over_pipeline_at_largest"] = (
            out["peak_rss_mb"]["in_memory"][-1] / out["peak_rss_mb"]["pipeline"][-1])
    return out


def main(argv):
    del argv
    FLAGS.data_dir = _data_dir(FLAGS.data_dir)
    try:
        sizes = [int(s) for s in FLAGS.sizes]
        if len(sizes) < 2 or min(sizes) <= 0:
            raise ValueError
    except ValueError:
        raise app.UsageError(f"--sizes needs 2+ positive integers. Received: {FLAGS.sizes!r}")
    out = run(FLAGS.data_dir, sizes, FLAGS.candidates, FLAGS.num_classes, FLAGS.image_size,
              FLAGS.batch_size, FLAGS.timeout, FLAGS.progress, FLAGS.max_change)
    png = FLAGS.png_out or os.path.splitext(FLAGS.json_out)[0] + ".png"
    out["png"] = charts.line_chart(png, sizes, out["peak_rss_mb"],
                                  f"Peak RSS over one epoch ({FLAGS.image_size}px)", "files",
                                  "peak RSS (MiB)")
    bench.write_json(FLAGS.json_out, out)
    for c, v in out["peak_rss_mb"].items():
        print(f"{c:<14} peak RSS MiB " + "  ".join(f"{n}: {m:.0f}" for n, m in zip(sizes, v))
              + f"   change {out['change'][c]:+.1%}")
    if "pipeline_flat" in out:
        print(f"pipeline change {out['change']['pipeline']:+.1%} "
              f"(must be under {FLAGS.max_change:.0%}: "
              f"{'met' if out['pipeline_flat'] else 'NOT met'})")
    if "in_memory_over_pipeline_at_largest" in out:
        print(f"in_memory / pipeline peak RSS at {sizes[-1]} files: "
              f"{out['in_memory_over_pipeline_at_largest']:.2f}x")
    print(f"wrote {FLAGS.json_out} and {png}")


if __name__ == "__main__":
    app.run(main)
