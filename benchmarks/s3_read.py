"""Reading from S3: the fsspec + s3fs path against tensorflow-io's, and local disk.

Starts moto's S3 server on loopback, uploads the sample photos
(``../shared/data/imagenet-sample``, class folders) and ``--num_objects`` tiny
PNGs in ``--num_classes`` folders, then runs, each in a fresh process:

* ``local``: ``from_directory(SAMPLE)``, one epoch (the local-disk figure);
* ``fsspec``: ``from_directory("s3://bench/photos")`` with
  ``PIPELINE_REMOTE_READER=fsspec`` under ``--python_fsspec`` (default: this
  Python; the current TensorFlow stack is the point);
* ``tfio``: the same with ``PIPELINE_REMOTE_READER=tensorflow-io`` under
  ``--python_tfio`` (a TensorFlow 2.16 environment with tensorflow-io);

reporting images/s over one epoch (224x224, batch 64, from the factory call
to the last batch), images per CPU-second (the process's CPU time), the
files read (each exactly once), and, for both remote readers, the time from
the factory call to the first batch on the ``--num_objects`` prefix.

    python benchmarks/s3_read.py --python_tfio=.venv/bin/python \\
        --python_fsspec=.venv-latest/bin/python

A tensorflow-io child can abort at exit (code 134): each child prints its
result, flushes and calls ``os._exit(0)``.
"""

import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import textwrap

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, REPO
import s3_startup  # moto, bucket filling (defines its flags too)

common_flags.define(repeats=(1, "Rounds per reader (each run in a fresh process)."))
flags.DEFINE_string("sample", os.path.join(REPO, "..", "shared", "data", "imagenet-sample"),
                    "Folder of class folders of photos (uploaded to the bucket).")
flags.DEFINE_string("python_fsspec", sys.executable, "Python of the fsspec runs.")
flags.DEFINE_string("python_tfio", None, "Python of the tensorflow-io runs (TF 2.16 + "
                    "tensorflow-io); none: left out.")
flags.DEFINE_bool("epoch", True, "Measure one epoch per reader and the local disk; "
                  "--noepoch: the first batch of the prefix only.")
flags.DEFINE_string("result_json", os.path.join("benchmarks", "results", "s3_read.json"),
                    "JSON result file.")
# --num_objects, --num_classes (the first-batch prefix), --timeout (per child): s3_startup's.

CHILD = textwrap.dedent("""
    import json, os, sys, time
    t0 = time.perf_counter()
    c0 = time.process_time()
    import pipeline
    import tensorflow as tf
    source, mode = sys.argv[1], sys.argv[2]
    size = 224 if mode == "epoch" else 16
    t1 = time.perf_counter()
    c1 = time.process_time()
    ds = pipeline.from_directory(source, image_size=(size, size), batch_size=64, shuffle=False)
    it = iter(ds)
    x, _ = next(it)
    t2 = time.perf_counter()
    out = {"import_sec": t1 - t0, "first_batch_sec": t2 - t1, "files": len(ds.file_paths)}
    if mode == "epoch":
        n, total = int(x.shape[0]), int(tf.reduce_sum(tf.cast(x, tf.int64)))
        for x, _ in it:
            n += int(x.shape[0])
            total += int(tf.reduce_sum(tf.cast(x, tf.int64)))
        t3 = time.perf_counter()
        cpu = time.process_time() - c1
        out.update(images=n, pixel_sum=total, epoch_sec=t3 - t1, images_per_sec=n / (t3 - t1),
                   cpu_sec=cpu, images_per_cpu_sec=n / cpu,
                   errors=len(pipeline.errors(ds)))
    print("S3READ " + json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)
""")


def upload_sample(endpoint, sample, threads=8):
    import boto3
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    jobs = []
    for c in sorted(os.listdir(sample)):
        for name in sorted(os.listdir(os.path.join(sample, c))):
            jobs.append((os.path.join(sample, c, name), f"photos/{c}/{name}"))
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda j: client.upload_file(j[0], s3_startup.BUCKET, j[1]), jobs))
    return len(jobs)


def child(python, source, mode, env, timeout):
    proc = subprocess.run([python, "-c", CHILD, source, mode], capture_output=True, text=True,
                          timeout=timeout, env=env)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("S3READ ")]
    if not lines:
        raise RuntimeError(f"{python} {source} {mode} failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    print(f"{source} {mode} {env.get('PIPELINE_REMOTE_READER', '')}: {lines[-1]}", flush=True)
    return json.loads(lines[-1][len("S3READ "):])


def main(argv):
    del argv
    log = tempfile.mkstemp(prefix="moto-", suffix=".log")[1]
    proc, endpoint = s3_startup.start_moto(log)
    out = {"benchmark": "s3_read", "num_objects": FLAGS.num_objects,
           "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()}
    try:
        s3_startup.fill_bucket(endpoint, FLAGS.num_objects, FLAGS.num_classes)
        if FLAGS.epoch:
            out["photos"] = upload_sample(endpoint, FLAGS.sample)
        base = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3",
                    **s3_startup.s3_env(endpoint))
        readers = {"fsspec": (FLAGS.python_fsspec, dict(base, PIPELINE_REMOTE_READER="fsspec"))}
        if FLAGS.python_tfio:
            readers["tfio"] = (FLAGS.python_tfio,
                               dict(base, PIPELINE_REMOTE_READER="tensorflow-io"))
        photos = f"s3://{s3_startup.BUCKET}/photos"
        tree = f"s3://{s3_startup.BUCKET}/{s3_startup.PREFIX}"
        runs = {}
        for r in range(FLAGS.repeats):  # alternated, each a fresh process
            if FLAGS.epoch:
                runs.setdefault("local", []).append(
                    child(FLAGS.python_fsspec, os.path.abspath(FLAGS.sample), "epoch", base,
                          FLAGS.timeout))
            for name, (python, env) in readers.items():
                if FLAGS.epoch:
                    runs.setdefault(name, []).append(child(python, photos, "epoch", env,
                                                           FLAGS.timeout))
                runs.setdefault(f"{name}_first_batch", []).append(
                    child(python, tree, "first", env, FLAGS.timeout))
        out["runs"] = runs
        out["load_avg_end"] = os.getloadavg()
    finally:
        proc.terminate()
        proc.wait(10)
        os.remove(log)
    from pipeline.tools.bench import harness as bench
    bench.write_json(FLAGS.result_json, out)
    for name, rs in out["runs"].items():
        for r in rs:
            if "images_per_sec" in r:
                print(f"{name:<18} {r['images']} images ({r['files']} files, "
                      f"{r['errors']} errors, pixel sum {r['pixel_sum']}): "
                      f"{r['images_per_sec']:.0f} images/s, "
                      f"{r['images_per_cpu_sec']:.0f} images/CPU-s, first batch "
                      f"{r['first_batch_sec']:.2f} s")
            else:
                print(f"{name:<18} {r['files']} files: first batch {r['first_batch_sec']:.2f} s")
    print(f"load average {out['load_avg_start']} -> {out['load_avg_end']} on "
          f"{out['cpus']} CPUs; wrote {FLAGS.result_json}")


if __name__ == "__main__":
    app.run(main)
