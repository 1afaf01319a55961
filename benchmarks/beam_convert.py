"""The conversion on Apache Beam's DirectRunner against the single-process writer.

Writes the photos of ``--data_dir`` to TFRecord shards twice with the same arguments
(``--num_shards``, ``--max_resolution``, ``--on_error``, seed 0), each run in its own
subprocess: ``single`` (``pipeline.write_tfrecords``, a thread per shard) and ``beam``
(``write_tfrecords(beam_runner="DirectRunner")`` with ``direct_running_mode=multi_processing``
and ``--beam_workers`` worker processes), alternated ``--repeats`` times. Reports each run's
wall time, images/s, CPU seconds (the run's process and every process it waited for: Beam's
workers) and CPU-ms per image, the ratio beam / single of images/s, whether both wrote the
same shards (the SHA-256 of every shard's records), and a paper estimate for ``--paper_images`` images on
each of ``--paper_workers`` workers of ``--worker_cores`` cores: the measured Beam start
(a run on ``--start_images`` photos) + images x the CPU-ms per image past the start (the full
run's CPU less the start run's) / (workers x cores).
Needs apache-beam (``pip install '.[beam]'``).

    python benchmarks/beam_convert.py --max_resolution=256 --num_shards=8 --json_out=beam.json
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir

common_flags.define(data_dir="Class-folder photo root.",
                    repeats=(1, "Runs of each writer, alternated."),
                    json_out=(None, "Also write the results as JSON to this file."))
flags.DEFINE_integer("num_shards", 8, "Shards written by each run.")
flags.DEFINE_integer("max_resolution", 256, "Store each image with its shorter side at most "
                     "this (re-encoded); 0 = the files' bytes unchanged.")
flags.DEFINE_string("on_error", "none", "The writers' on_error: none, raise or skip.")
flags.DEFINE_integer("beam_workers", 0, "DirectRunner worker processes "
                     "(multi_processing); 0 = the in-process run (--beam_options).")
flags.DEFINE_string("beam_options", "", "The Beam run's beam_options when --beam_workers=0 "
                    "('' = the default in-process run).")
flags.DEFINE_integer("copies", 1, "Write each photo this many times (linked under as many "
                     "names): a K-times larger set of the same photos.")
flags.DEFINE_integer("single_workers", 0, "The single-process writer's threads "
                     "(num_workers); 0 = its default, one per shard up to 2 x the cores.")
flags.DEFINE_enum("only", "both", ["both", "single", "beam"], "Run only this writer.")
flags.DEFINE_integer("start_images", 8, "Photos of the run that measures Beam's start cost; "
                     "0 = no such run.")
flags.DEFINE_integer("paper_images", 10_000_000, "Images of the paper estimate.")
flags.DEFINE_list("paper_workers", ["10", "100", "1000"], "Worker counts of the estimate.")
flags.DEFINE_integer("worker_cores", 4, "Cores per worker in the estimate.")

_CHILD = r"""
import json, sys, time
from pipeline.convert import shards
a = json.loads(sys.argv[1])
t = time.perf_counter()
meta = shards.write_tfrecords(a["src"], a["out"], a["num_shards"], progress=False, seed=0,
                              on_error=a["on_error"], max_resolution=a["max_resolution"],
                              **a["beam"])
print(json.dumps({"seconds": time.perf_counter() - t, "num_examples": meta["num_examples"],
                  "sha256": [s["records_sha256"] for s in meta["shards"]]}))
"""


def beam_args(beam_workers: int) -> dict:
    """The Beam run's write_tfrecords arguments."""
    if beam_workers:
        return {"beam_runner": "DirectRunner", "beam_options":
                f"direct_running_mode=multi_processing,direct_num_workers={beam_workers}"}
    return {"beam_runner": "DirectRunner", "beam_options": FLAGS.beam_options or None}


def run_once(src: str, out: str, beam: bool, single_workers: int = 0) -> dict:
    """One conversion in a fresh process: wall seconds (inside the call), CPU seconds of
    the process and what it waited for, the shards' SHA-256, the load average before."""
    kw = beam_args(FLAGS.beam_workers) if beam else (
        {"num_workers": single_workers} if single_workers else {})
    args = {"src": src, "out": out, "num_shards": FLAGS.num_shards, "beam": kw,
            "on_error": None if FLAGS.on_error == "none" else FLAGS.on_error,
            "max_resolution": FLAGS.max_resolution or None}
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)],
                          capture_output=True, text=True, check=False)
    process_s = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"the conversion failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["cpu_seconds"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    res["process_seconds"] = process_s
    res["load_average"] = load
    res["images_per_sec"] = res["num_examples"] / res["seconds"]
    res["cpu_ms_per_image"] = 1000 * res["cpu_seconds"] / res["num_examples"]
    res["images_per_cpu_second"] = res["num_examples"] / res["cpu_seconds"]
    return res


def _subset(src: str, n: int, into: str, copies: int = 1) -> str:
    """The first ``n`` photos of ``src`` (name order), each linked ``copies`` times
    (``c0-NAME``, ``c1-NAME``, ...) into class folders."""
    k = 0
    for c in sorted(os.listdir(src)):
        if k >= n or not os.path.isdir(os.path.join(src, c)):
            continue
        os.makedirs(os.path.join(into, c))
        for f in sorted(os.listdir(os.path.join(src, c))):
            if k >= n:
                break
            for r in range(copies):
                os.symlink(os.path.join(src, c, f), os.path.join(into, c, f"c{r}-{f}"))
            k += 1
    return into


def _median(runs, key):
    return statistics.median(r[key] for r in runs)


def main(argv):
    del argv
    src = _data_dir(FLAGS.data_dir)
    runs = {"single": [], "beam": []}
    with tempfile.TemporaryDirectory() as tmp:
        if FLAGS.copies > 1:
            src = _subset(src, 10 ** 12, os.path.join(tmp, "copies"), FLAGS.copies)
        for r in range(FLAGS.repeats):
            for name in ("single", "beam"):
                if FLAGS.only not in ("both", name):
                    continue
                res = run_once(src, os.path.join(tmp, f"{name}{r}"), name == "beam",
                               FLAGS.single_workers)
                runs[name].append(res)
                print(f"{name:6s} run {r + 1}: {res['num_examples']} images in "
                      f"{res['seconds']:.1f} s = {res['images_per_sec']:.1f} images/s; "
                      f"{res['cpu_seconds']:.1f} CPU-s = {res['cpu_ms_per_image']:.1f} "
                      f"CPU-ms per image ({res['images_per_cpu_second']:.0f} images per "
                      f"CPU-s); load average {res['load_average']:.1f}", flush=True)
        start = None
        if FLAGS.start_images and FLAGS.only != "single":
            few = _subset(src, FLAGS.start_images, os.path.join(tmp, "few"))
            start = run_once(few, os.path.join(tmp, "start"), True)
            print(f"beam start: {FLAGS.start_images} images in {start['seconds']:.1f} s "
                  f"({start['cpu_seconds']:.1f} CPU-s)", flush=True)
    medians = {k: {m: _median(v, m) for m in ("seconds", "images_per_sec", "cpu_seconds",
                                              "images_per_cpu_second", "load_average")}
               for k, v in runs.items() if v}
    for k, m in medians.items():
        print(f"{k:6s} median of {len(runs[k])}: {m['images_per_sec']:.1f} images/s, "
              f"{m['images_per_cpu_second']:.0f} images per CPU-s "
              f"(load average {m['load_average']:.1f} on {os.cpu_count()} cores)")
    ratio = same = None
    if len(medians) == 2:
        same = all(a["sha256"] == b["sha256"] for a, b in zip(runs["single"], runs["beam"]))
        ratio = medians["beam"]["images_per_sec"] / medians["single"]["images_per_sec"]
        per_cpu = (medians["beam"]["images_per_cpu_second"]
                   / medians["single"]["images_per_cpu_second"])
        print(f"beam / single images/s (medians of {FLAGS.repeats}): {ratio:.2f}; per "
              f"CPU-s: {per_cpu:.2f}; same shards: {same}; cores here: {os.cpu_count()}")
    paper = []
    if "beam" in medians:
        b = {"cpu_seconds": medians["beam"]["cpu_seconds"],
             "num_examples": runs["beam"][0]["num_examples"]}
        # Per image past the start (medians): the CPU of the full run less that of the start run.
        per_image = ((b["cpu_seconds"] - start["cpu_seconds"])
                     / (b["num_examples"] - start["num_examples"]) if start
                     else b["cpu_seconds"] / b["num_examples"])
        for w in map(int, FLAGS.paper_workers):
            secs = (start["seconds"] if start else 0) + FLAGS.paper_images * per_image / (
                w * FLAGS.worker_cores)
            paper.append({"workers": w, "hours": secs / 3600, "cpu_ms_per_image": 1000 * per_image})
            print(f"paper: {FLAGS.paper_images:,} images on {w} workers x {FLAGS.worker_cores} "
                  f"cores at {1000 * per_image:.1f} CPU-ms per image past the start: "
                  f"{secs / 3600:.2f} h")
    if FLAGS.json_out:
        with open(FLAGS.json_out, "w") as f:
            json.dump({"runs": runs, "medians": medians, "start": start, "ratio": ratio,
                       "same_shards": same,
                       "paper": paper, "flags": {k: FLAGS[k].value for k in (
                           "num_shards", "max_resolution", "on_error", "beam_workers",
                           "beam_options", "copies", "single_workers", "repeats",
                           "worker_cores")}}, f, indent=1)


if __name__ == "__main__":
    app.run(main)
