"""TFRecord shards vs loose files: images/s side by side, in one run.

Takes the first ``num_images`` JPEGs of ``data_dir`` (default: the 1,000-photo
ImageNet sample), writes them to TFRecord shards (encoded bytes), then runs
``epochs`` alternating epochs of ``pipeline.from_paths`` (loose files) and
``pipeline.from_tfrecords`` (shards), same options, and reports steady-state
images/s (after the first batch) and images per CPU-second for each.

Tiny defaults for tests; a real run:
``python benchmarks/tfrecord_vs_files.py --num_images=1000 --epochs=3 --json_out=rec.json``.
"""

import os
import tempfile
import time

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir
from pipeline.tools.bench import harness as bench

common_flags.define(data_dir="Folder of images.", num_images=(64, "Images used."),
                    epochs=(2, "Epochs per source (alternating)."), batch_size=32,
                    image_size=224, json_out=(None, "Write the results here as JSON."))
flags.DEFINE_integer("num_shards", 4, "TFRecord shards.")


def _epoch(ds):
    t0 = time.perf_counter()
    c0 = time.process_time()
    it = iter(ds)
    n = int(next(it)[0].shape[0])
    t1, c1 = time.perf_counter(), time.process_time()
    steady = 0
    for x, _ in it:
        steady += int(x.shape[0])
    t2, c2 = time.perf_counter(), time.process_time()
    return {"images": n + steady, "first_batch_sec": t1 - t0,
            "images_per_sec": steady / max(t2 - t1, 1e-9),
            "images_per_cpu_sec": steady / max(c2 - c1, 1e-9)}


def main(argv):
    del argv
    FLAGS.data_dir = _data_dir(FLAGS.data_dir)
    import pipeline
    from pipeline.sources import index as index_lib

    idx = index_lib.index_directory(FLAGS.data_dir)
    paths = idx.paths[:FLAGS.num_images]
    labels = [idx.labels[i] for i in range(len(paths))]
    opts = dict(image_size=(FLAGS.image_size, FLAGS.image_size), batch_size=FLAGS.batch_size,
                seed=0)
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        pipeline.write_tfrecords(paths, out, FLAGS.num_shards, progress=False, labels=labels)
        write_sec = time.perf_counter() - t0
        shard_mb = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out)) / 2 ** 20
        sources = {"files": lambda: pipeline.from_paths(paths, labels, **opts),
                   "tfrecords": lambda: pipeline.from_tfrecords(out, **opts)}
        runs = {k: [] for k in sources}
        for _ in range(FLAGS.epochs):
            for name, make in sources.items():
                runs[name].append(_epoch(make()))
    med = lambda v: sorted(v)[len(v) // 2]
    result = {"benchmark": "tfrecord_vs_files", "num_images": len(paths),
              "num_shards": FLAGS.num_shards, "epochs": FLAGS.epochs, "options": opts,
              "write_sec": round(write_sec, 3), "shards_mib": round(shard_mb, 2)}
    for name, rs in runs.items():
        result[name] = {k: round(med([r[k] for r in rs]), 2) for k in rs[0]}
        result[name]["runs_images_per_sec"] = [round(r["images_per_sec"], 1) for r in rs]
    print(bench.write_json(FLAGS.json_out, result))


if __name__ == "__main__":
    app.run(main)
