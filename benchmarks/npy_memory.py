"""Peak memory of streaming .npy shards vs loading them whole.

Writes ``num_shards`` shards of ``shard_mb`` MiB (float32 rows of ``row_floats``
values, plus int64 label shards) to a temporary folder, then measures, each in
its own subprocess (a child inherits its parent's peak RSS, see docs/notes.md):

* ``stream`` over 1 shard and over all shards: ``pipeline.from_npy_shards``
  read through once (shuffled, batched);
* ``load_all``: the usual baseline, ``np.load`` of every shard, concatenated,
  fed with ``tf.data.Dataset.from_tensor_slices``.

Each child imports TensorFlow, runs a tiny warm-up pipeline, resets its peak
RSS (``echo 5 > /proc/self/clear_refs``; falling back to the level after the
warm-up when the kernel refuses), runs, and reports ``VmHWM`` growth from
``/proc/self/status``. Streaming growth stays flat while the data grows;
loading grows with the data.

The defaults (3 x 4 MiB) finish in seconds for the test suite. A real run:
``python benchmarks/npy_memory.py --shard_mb=256 --num_shards=8 --json_out=npy.json``.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS
from pipeline.tools.bench import harness as bench

common_flags.define(batch_size=(32, "Batch size while streaming."),
                    json_out=(None, "Write the results here as JSON."))
flags.DEFINE_integer("shard_mb", 4, "MiB of inputs per shard.")
flags.DEFINE_integer("num_shards", 3, "Shards written.")
flags.DEFINE_integer("row_floats", 256, "float32 values per row.")
flags.DEFINE_string("child", None, "Internal: run one measurement (stream|load_all).")
flags.DEFINE_string("dir", None, "Internal: shard folder for --child.")
flags.DEFINE_integer("use_shards", 0, "Internal: shards read by the child.")
MIB = 2 ** 20


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _child():
    import numpy as np
    import tensorflow as tf
    import pipeline

    x_files = sorted(os.path.join(FLAGS.dir, f) for f in os.listdir(FLAGS.dir)
                     if f.startswith("inputs_"))[:FLAGS.use_shards]
    y_files = [f.replace("inputs_", "labels_") for f in x_files]
    for _ in tf.data.Dataset.range(1000).shuffle(100).batch(32).map(lambda v: v * 2):
        pass  # warm-up: tf.data runtime, thread pools
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    base = _status("VmRSS") if reset else _status("VmHWM")
    t0 = time.perf_counter()
    rows = 0
    if FLAGS.child == "stream":
        ds = pipeline.from_npy_shards(x_files, y_files, batch_size=FLAGS.batch_size, seed=0)
    else:
        x = np.concatenate([np.load(f) for f in x_files])
        y = np.concatenate([np.load(f) for f in y_files])
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024, seed=0).batch(
            FLAGS.batch_size)
    for xb, _ in ds:
        rows += int(xb.shape[0])
    secs = time.perf_counter() - t0
    data = sum(os.path.getsize(f) for f in x_files + y_files)
    print(json.dumps({"mode": FLAGS.child, "shards": len(x_files), "rows": rows,
                      "data_mib": round(data / MIB, 2),
                      "peak_growth_mib": round((_status("VmHWM") - base) / MIB, 2),
                      "hwm_reset": reset, "seconds": round(secs, 3),
                      "rows_per_sec": round(rows / secs, 1)}), flush=True)


def run(shard_mb=4, num_shards=3, row_floats=256, batch_size=32):
    """Writes shards, measures each case in a subprocess; returns the result dict."""
    import numpy as np
    rows = max(1, shard_mb * MIB // (4 * row_floats))
    results = []
    with tempfile.TemporaryDirectory() as d:
        for k in range(num_shards):
            x = np.random.RandomState(k).rand(rows, row_floats).astype(np.float32)
            np.save(os.path.join(d, f"inputs_{k:03d}.npy"), x)
            np.save(os.path.join(d, f"labels_{k:03d}.npy"), np.arange(rows, dtype=np.int64))
            del x
        cases = [("stream", 1), ("stream", num_shards), ("load_all", num_shards)]
        for mode, use in cases:
            cmd = [sys.executable, os.path.abspath(__file__), f"--child={mode}", f"--dir={d}",
                   f"--use_shards={use}", f"--row_floats={row_floats}",
                   f"--batch_size={batch_size}"]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                                 env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    stream_all = results[1]
    return {"benchmark": "npy_memory", "shard_mb": shard_mb, "num_shards": num_shards,
            "rows_per_shard": rows, "results": results,
            "stream_growth_per_data": round(stream_all["peak_growth_mib"]
                                            / stream_all["data_mib"], 3)}


def main(argv):
    del argv
    if FLAGS.child:
        _child()
        return
    result = run(FLAGS.shard_mb, FLAGS.num_shards, FLAGS.row_floats, FLAGS.batch_size)
    print(bench.write_json(FLAGS.json_out, result))


if __name__ == "__main__":
    app.run(main)
