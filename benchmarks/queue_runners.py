"""TF1 queue runners vs ``pipeline.from_paths``, side by side, same files.

The legacy path (``tf.compat.v1``, graph mode, in its own subprocess; the
code is ``benchmarks/candidates.py``'s ``QueueRunnerBatches``, shared with ``peers.py``):
``slice_input_producer`` -> ``read_file`` -> ``decode_jpeg`` -> ``resize`` ->
``tf.train.batch(num_threads=2)`` with a ``Coordinator`` and
``start_queue_runners``. The product: ``pipeline.compat.get_batch`` (=
``pipeline.from_paths``) with the same size, batch and threads, also in its own
subprocess. Each reports images/s after the first batch and images per
CPU-second (steadier on a shared machine: see docs/notes.md). Defaults are tiny so a
test runs it in seconds; use ``--num_images=1000 --epochs=3`` for real figures.

    python benchmarks/queue_runners.py --json_out=/tmp/qr.json
"""

import json
import os
import subprocess
import sys
import textwrap

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir
from pipeline.tools.bench import harness as bench

common_flags.define(data_dir="Folder of JPEG files (searched recursively).",
                    num_images=(64, "Files used (first N in sorted order)."),
                    epochs=(1, "Epochs read."), batch_size=16, image_size=224,
                    timeout=(300, "Seconds allowed per side."),
                    json_out=(None, "Write the JSON result here too."))
flags.DEFINE_integer("num_threads", 2, "Queue-runner threads / num_parallel_calls.")

REPO = common_flags.REPO

_COMMON = """
import json, os, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def report(name, n, first_n, t0, t_first, t1, c_first, c1):
    steady = t1 - t_first
    print(json.dumps({"name": name, "images": n, "first_batch_sec": round(t_first - t0, 3),
                      "images_per_sec": round((n - first_n) / max(steady, 1e-9), 1),
                      "cpu_cores_used": round((c1 - c_first) / max(steady, 1e-9), 2),
                      "images_per_cpu_sec": round((n - first_n) / max(c1 - c_first, 1e-9), 1)}))
    sys.stdout.flush(); os._exit(0)
"""

_QUEUE = _COMMON + textwrap.dedent("""
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    from peer_candidates import QueueRunnerBatches  # benchmarks/peer_candidates.py, as peers.py
    paths, size, batch, threads, epochs = json.loads(sys.argv[1])
    t0 = time.perf_counter()
    qr = QueueRunnerBatches(paths, list(range(len(paths))), size, batch, threads)
    steps = len(paths) * epochs // batch
    qr.sess.run(qr.batch); n = batch
    t_first, c_first = time.perf_counter(), cpu()
    for _ in range(steps - 1):
        qr.sess.run(qr.batch); n += batch
    t1, c1 = time.perf_counter(), cpu()
    qr.close()
    report("tf1_queue_runners", n, batch, t0, t_first, t1, c_first, c1)
""")

_PIPELINE = _COMMON + textwrap.dedent("""
    import pipeline
    paths, size, batch, threads, epochs = json.loads(sys.argv[1])
    t0 = time.perf_counter()
    ds = pipeline.compat.get_batch(paths, list(range(len(paths))), size, size, 3, batch,
                                   capacity=4 * batch, num_threads=2 * threads,
                                   num_epochs=epochs)
    n, first_n = 0, None
    for x, y in ds:
        n += int(x.shape[0])
        if first_n is None:
            first_n, t_first, c_first = n, time.perf_counter(), cpu()
    t1, c1 = time.perf_counter(), cpu()
    report("pipeline_from_paths", n, first_n, t0, t_first, t1, c_first, c1)
""")


def _paths():
    out = []
    for dirpath, _, files in os.walk(FLAGS.data_dir):
        out += [os.path.join(dirpath, f) for f in files if f.lower().endswith((".jpg", ".jpeg"))]
    return sorted(out)[:FLAGS.num_images]


def _run(code, args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, "benchmarks")]))
    r = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True,
                       text=True, timeout=FLAGS.timeout, env=env)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"benchmark side failed (rc={r.returncode}): {r.stderr[-2000:]}")
    return json.loads(lines[-1])


def main(argv):
    del argv
    FLAGS.data_dir = _data_dir(FLAGS.data_dir)
    paths = _paths()
    if len(paths) < FLAGS.batch_size:
        raise ValueError(f"need at least batch_size JPEGs under --data_dir. Received: "
                         f"data_dir={FLAGS.data_dir!r} ({len(paths)} found)")
    args = [paths, FLAGS.image_size, FLAGS.batch_size, FLAGS.num_threads, FLAGS.epochs]
    queue = _run(_QUEUE, args)
    pipe = _run(_PIPELINE, args)
    out = {"benchmark": "queue_runners", "num_images": len(paths), "epochs": FLAGS.epochs,
           "batch_size": FLAGS.batch_size, "image_size": FLAGS.image_size,
           "num_threads": FLAGS.num_threads, "cores": len(os.sched_getaffinity(0)),
           "results": [queue, pipe],
           "speedup": round(pipe["images_per_sec"] / max(queue["images_per_sec"], 1e-9), 2),
           "note": ("queue runners use num_threads threads; pipeline uses "
                    "num_parallel_calls=2*num_threads (its default of 2x the cores on "
                    "2 cores). Runs swing; compare images_per_cpu_sec too.")}
    print(bench.write_json(FLAGS.json_out, out))


if __name__ == "__main__":
    app.run(main)
