"""Where each candidate's CPU goes at steady state, per unit of JPEG entropy decoding.

Images per CPU-second move by 10-20% between runs on a shared virtual machine, more than
the differences worth finding. This script measures a ratio that the machine's speed
cancels out of: each candidate (``pipeline.tools.bench.harness`` candidates, default
``plain`` and ``pipeline``) runs in its own process on the same photos, and once it is
past its first batches Linux ``perf record`` samples that process (``-F`` Hz, for
``--seconds``). libjpeg's Huffman decoding (``decode_mcu``) is the same work per image for
every candidate that decodes the whole file, so

    units = all samples / decode_mcu samples

is the candidate's CPU per image in units of that work. The photos are linked ``--copies``
times into one folder (``peer_candidates.symlink_tree``), so that the sampled seconds fall
inside one epoch: an epoch's start-up work (pipeline instantiates its epoch's functions,
some 0.16 CPU-s) is a per-epoch cost, not a per-image one, and the sample's 1,000 photos
alone would put one epoch start in every 1.5 s sampled. Plain tf.data's decode + resize
sits near 2.1 on the sample photos at 224; a candidate's extra CPU per image over plain is
``units / plain's units - 1``. The table also splits each candidate's samples by
shared object (TensorFlow's kernels, its executor and tf.data runtime, libc's malloc and
memcpy, the kernel). A candidate that decodes at a reduced DCT scale does less than a whole
decode's other work per ``decode_mcu`` sample: compare candidates that decode alike.

Needs ``perf`` (linux-tools) allowed to sample the process (``perf_event_paranoid`` <= 2,
or root); without it the script says so and stops.

    python benchmarks/cpu_attribution.py --rounds=2 --json_out=cpu_attribution.json

Method and the figures measured: docs/benchmarks.md ("Where the extra CPU goes").
"""

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS
import peer_candidates as _peers  # benchmarks/peer_candidates.py (symlink_tree)

common_flags.define(data_dir="Class-folder photo root.", image_size=224, batch_size=64,
                    json_out="cpu_attribution.json")
flags.DEFINE_list("candidates", ["plain", "pipeline"], "Harness candidates to measure.")
flags.DEFINE_integer("rounds", 2, "Rounds; the candidates alternate within each round.")
flags.DEFINE_integer("seconds", 10, "Seconds of sampling per candidate run.")
flags.DEFINE_integer("copies", 16, "Links to each photo in the measured folder.")
flags.DEFINE_integer("frequency", 1999, "perf's sampling frequency (Hz).")
flags.DEFINE_string("worker", None, "Internal: run this candidate until killed.")
flags.DEFINE_string("ready_file", None, "Internal: the worker writes its pid here when warm.")

# shared objects named in the table; the rest are summed as "other"
GROUPS = (("tensorflow kernels", "libtensorflow_cc"), ("tf runtime", "libtensorflow_framework"),
          ("libc", "libc.so"), ("kernel", "[kernel"), ("python", "libpython"))


def _worker(name: str, ready_file: str) -> None:
    """Builds candidate ``name``, repeats it, warms it up, writes the pid, then iterates."""
    from pipeline.tools.bench import candidates  # noqa: F401  (registers the candidates)
    from pipeline.tools.bench import harness
    spec = {"data_dir": FLAGS.data_dir,
            "image_size": [FLAGS.image_size, FLAGS.image_size],
            "batch_size": FLAGS.batch_size, "seed": 0, "epochs": 1}
    ds = harness.CANDIDATES[name](spec)
    it = iter(ds.repeat())
    for _ in range(32):  # past the first epoch's start-up
        next(it)
    with open(ready_file, "w") as f:
        f.write(str(os.getpid()))
    while True:
        next(it)


def _report(data: str) -> dict:
    """Shares (percent of samples) by symbol and by shared object from ``perf report``."""
    def table(sort):
        out = subprocess.run(["perf", "report", "-i", data, "--no-children", "--stdio",
                              "--sort", sort], capture_output=True, text=True, check=True).stdout
        rows = {}
        for line in out.splitlines():
            m = re.match(r"\s*([\d.]+)%\s+(.*\S)", line)
            if m and not line.lstrip().startswith("#"):
                rows[m.group(2)] = rows.get(m.group(2), 0.0) + float(m.group(1))
        return rows
    syms, dsos = table("sym"), table("dso")
    mcu = sum(v for k, v in syms.items() if k.endswith("] decode_mcu"))
    if mcu <= 0:
        raise RuntimeError(f"no decode_mcu samples in {data}: does the candidate decode JPEGs?")
    groups = {g: sum(v for k, v in dsos.items() if key in k) / mcu for g, key in GROUPS}
    groups["other"] = 100.0 / mcu - sum(groups.values())
    return {"units": 100.0 / mcu, "by_object": groups}


def _measure(name: str, workdir: str, folder: str) -> dict:
    ready = os.path.join(workdir, f"{name}.ready")
    data = os.path.join(workdir, f"{name}.data")
    for path in (ready, data):
        if os.path.exists(path):
            os.remove(path)
    cmd = [sys.executable, os.path.abspath(__file__), f"--worker={name}",
           f"--ready_file={ready}", f"--image_size={FLAGS.image_size}",
           f"--batch_size={FLAGS.batch_size}", f"--data_dir={folder}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while not (os.path.exists(ready) and os.path.getsize(ready)):
            if proc.poll() is not None:
                raise RuntimeError(f"candidate {name} exited before it was warm: "
                                   f"{proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
        subprocess.run(["perf", "record", "-F", str(FLAGS.frequency), "-p", str(proc.pid),
                        "-o", data, "--", "sleep", str(FLAGS.seconds)],
                       capture_output=True, check=True)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return _report(data)


def main(argv):
    del argv
    if FLAGS.worker:
        _worker(FLAGS.worker, FLAGS.ready_file)
        return
    if shutil.which("perf") is None:
        sys.exit("cpu_attribution needs Linux perf (linux-tools) on PATH")
    runs = {name: [] for name in FLAGS.candidates}
    with tempfile.TemporaryDirectory() as workdir:
        src = os.path.abspath(common_flags.data_dir(FLAGS.data_dir))
        count = sum(f.lower().endswith((".jpg", ".jpeg", ".png"))
                    for _, _, fs in os.walk(src) for f in fs)
        folder = _peers.symlink_tree(src, count * FLAGS.copies, os.path.join(workdir, "photos"))
        for r in range(FLAGS.rounds):
            for name in FLAGS.candidates:
                runs[name].append(_measure(name, workdir, folder))
                print(f"round {r + 1}: {name} {runs[name][-1]['units']:.3f} units", flush=True)
    base = FLAGS.candidates[0]
    summary = {}
    for name, rs in runs.items():
        summary[name] = {"units_median": statistics.median(x["units"] for x in rs),
                         "units": [x["units"] for x in rs],
                         "by_object": {g: sum(x["by_object"][g] for x in rs) / len(rs)
                                       for g in rs[0]["by_object"]}}
    head = f"{'candidate':14s} {'units':>6s} {'vs ' + base:>9s}  " + "  ".join(
        f"{g:>18s}" for g in summary[base]["by_object"])
    print(head)
    for name, s in summary.items():
        rel = s["units_median"] / summary[base]["units_median"]
        print(f"{name:14s} {s['units_median']:6.3f} {rel:8.3f}x  " + "  ".join(
            f"{v:18.3f}" for v in s["by_object"].values()))
    with open(FLAGS.json_out, "w") as f:
        json.dump({"image_size": FLAGS.image_size, "batch_size": FLAGS.batch_size,
                   "seconds": FLAGS.seconds, "frequency": FLAGS.frequency,
                   "candidates": summary}, f, indent=1)


if __name__ == "__main__":
    app.run(main)
