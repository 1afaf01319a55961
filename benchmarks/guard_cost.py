"""The safety machinery's cost on clean data: ``pipeline`` vs ``plain``.

``pipeline`` is ``pipeline.from_directory`` with its guards on (header guard,
format sniffing, failure attribution, on_error policy). ``plain`` is
``pipeline.tools.bench.harness``'s hand-tuned tf.data with the same tuning (shuffle paths,
``decode_jpeg`` + the same ``transform.resize``, map with 2x cores parallel
calls, batch, prefetch 2, autotune off) and no guards. Each run is its own
subprocess; the two alternate for ``--repeats`` rounds; medians of images/s
and steady-state images per CPU-second are compared:

  cost = 1 - pipeline / plain      (target: <= 5%)

plus the fixed CPU cost per epoch start (building the iterator's functions and
the first batch), which steady-state figures leave out and whole-epoch figures
(``cost_cpu_whole_epochs``) include.

Both run with ``seed=None`` by default (``plain`` maps with
``deterministic=False``; pipeline's decode map keeps order by design).

Full size (defaults: the 1,000-photo sample, 3 epochs, 5 rounds)::

    python benchmarks/guard_cost.py --json_out=guard_cost.json

Tiny smoke run::

    python benchmarks/guard_cost.py --num_images=64 --epochs=1 --repeats=1 --json_out=/tmp/g.json
"""

import os
import tempfile

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir
import charts  # benchmarks/charts.py
import peer_candidates as _peers  # benchmarks/peer_candidates.py (symlink_tree)
from pipeline.sources import index as index_lib
from pipeline.tools import sample
from pipeline.tools.bench import harness as bench

common_flags.define(data_dir="Class-folder photo root.", num_images=0, image_size=224,
                    batch_size=64, epochs=3, repeats=(5, "Alternating rounds (pipeline, plain)."),
                    seed=(None, "Shuffle seed (None: nondeterministic order)."),
                    timeout=(1800, "Seconds allowed per run."), progress=False,
                    json_out="guard_cost.json", png_out=None)
flags.DEFINE_float("max_cost", 0.05, "Allowed cost (fraction of plain's rate).")


def run(data_dir, image_size=224, batch_size=64, epochs=3, repeats=5, seed=None,
        timeout=1800, progress=False, max_cost=0.05):
    idx = index_lib.index_directory(data_dir)
    spec = {"data_dir": data_dir, "image_size": [image_size, image_size],
            "batch_size": batch_size, "epochs": epochs, "seed": seed, "num_images": len(idx)}
    res = bench.run_candidates(["pipeline", "plain"], spec, repeats=repeats, progress=progress,
                               timeout=timeout)
    out = {"benchmark": "guard_cost", "data_dir": sample.data_dir_label(data_dir), "num_images": len(idx),
           "image_size": image_size, "batch_size": batch_size, "epochs": epochs,
           "repeats": repeats, "seed": seed, "candidates": res, "max_cost": max_cost}
    for key, suffix in (("images_per_sec", ""), ("steady_images_per_cpu_sec", "_cpu"),
                        ("images_per_cpu_sec", "_cpu_whole_epochs")):
        r = bench.ratio(res, "pipeline", "plain", key)
        out["ratio" + suffix] = r
        out["cost" + suffix] = 1 - r
    # The guards' fixed cost: CPU seconds to start each epoch (iterator + first batch).
    out["epoch_start_cpu_sec_extra"] = (res["pipeline"]["epoch_start_cpu_sec"]
                                        - res["plain"]["epoch_start_cpu_sec"])
    out["meets_target"] = out["cost"] <= max_cost
    out["meets_target_cpu"] = out["cost_cpu"] <= max_cost
    return out


def main(argv):
    del argv
    FLAGS.data_dir = _data_dir(FLAGS.data_dir)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = FLAGS.data_dir
        if FLAGS.num_images:
            data_dir = _peers.symlink_tree(FLAGS.data_dir, FLAGS.num_images,
                                           os.path.join(tmp, "data"))
        out = run(data_dir, FLAGS.image_size, FLAGS.batch_size, FLAGS.epochs, FLAGS.repeats,
                  FLAGS.seed, FLAGS.timeout, FLAGS.progress, FLAGS.max_cost)
    out["source_dir"] = sample.data_dir_label(FLAGS.data_dir)
    png = FLAGS.png_out or os.path.splitext(FLAGS.json_out)[0] + ".png"
    res = out["candidates"]
    rounds = [f"round {i + 1}" for i in range(FLAGS.repeats)] + ["median"]
    out["png"] = charts.bar_chart(
        png, rounds, {n: [r["images_per_sec"] for r in res[n]["runs"]]
                      + [res[n]["images_per_sec"]] for n in ("pipeline", "plain")},
        f"Guards on (pipeline) vs off (plain): cost {out['cost']:.1%} images/s, "
        f"{out['cost_cpu']:.1%} per CPU-s", "images/s")
    bench.write_json(FLAGS.json_out, out)
    print(bench.format_table(res))
    print(f"pipeline / plain: {out['ratio']:.3f}x images/s (cost {out['cost']:+.1%}), "
          f"{out['ratio_cpu']:.3f}x images per CPU-s (cost {out['cost_cpu']:+.1%}); "
          f"target cost <= {FLAGS.max_cost:.0%}: "
          f"{'met' if out['meets_target'] else 'NOT met'} (images/s), "
          f"{'met' if out['meets_target_cpu'] else 'NOT met'} (per CPU-s); "
          f"whole epochs incl. starts: {out['cost_cpu_whole_epochs']:+.1%} per CPU-s; "
          f"+{out['epoch_start_cpu_sec_extra']:.2f} CPU s per epoch start")
    print(f"wrote {FLAGS.json_out} and {png}")


if __name__ == "__main__":
    app.run(main)
