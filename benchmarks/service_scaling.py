"""tf.data service scaling: 1 worker, then 2 workers, same files, same consumer.

Starts a dispatcher and workers as separate processes on 127.0.0.1 (through
``pipeline.distribute.run_dispatcher`` / ``run_worker``), reads one or more
epochs with ``processing_mode="dynamic"`` and reports images/s (after the first
batch) and the workers' CPU-seconds. On a 2-core machine the consumer, the
dispatcher and the workers share the same two cores: 2 workers cannot beat 1
by much, and the JSON says so rather than hiding it.

    python benchmarks/service_scaling.py --num_images=200 --json_out=/tmp/svc.json
"""

import os
import signal
import socket
import subprocess
import sys
import time

from absl import app, flags

from candidates import DATA_DIR_HELP  # noqa: E402  benchmarks/candidates.py (puts the repository on sys.path)
from candidates import data_dir as _data_dir  # noqa: E402
from pipeline import sample  # noqa: E402

from pipeline import bench

FLAGS = flags.FLAGS
flags.DEFINE_string("data_dir", None, "Class-folder image root. " + DATA_DIR_HELP)
flags.DEFINE_integer("num_images", 200, "Files used (first N in sorted order).")
flags.DEFINE_integer("epochs", 2, "Epochs per configuration.")
flags.DEFINE_integer("batch_size", 32, "Batch size.")
flags.DEFINE_integer("image_size", 224, "Output height and width.")
flags.DEFINE_string("workers", "1,2", "Worker counts to run, in order.")
flags.DEFINE_string("json_out", None, "Write the JSON result here too.")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(code):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_port(port, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"port {port} did not open")


def _cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _paths():
    out = []
    for dirpath, _, files in sorted(os.walk(FLAGS.data_dir)):
        out += [os.path.join(dirpath, f) for f in sorted(files)
                if f.lower().endswith((".jpg", ".jpeg", ".png"))]
    return sorted(out)[:FLAGS.num_images]


def run_config(num_workers, paths):
    import pipeline  # pylint: disable=import-outside-toplevel
    dport = _free_port()
    procs = [_spawn("from pipeline.distribute import run_dispatcher\n"
                    f"run_dispatcher({dport})")]
    ports = [_free_port() for _ in range(num_workers)]
    for p in ports:
        procs.append(_spawn("from pipeline.distribute import run_worker\n"
                            f"run_worker('localhost:{dport}', {p})"))
    try:
        for p in [dport] + ports:
            _wait_port(p)
        time.sleep(1.5)  # registration
        ds = pipeline.from_paths(paths, labels=list(range(len(paths))),
                                 image_size=(FLAGS.image_size, FLAGS.image_size),
                                 batch_size=FLAGS.batch_size, service=f"grpc://localhost:{dport}",
                                 processing_mode="dynamic")
        cpu0 = sum(_cpu_seconds(p.pid) for p in procs[1:])
        epochs = []
        for _ in range(FLAGS.epochs):
            t0 = time.perf_counter()
            n, first, t_first = 0, None, None
            for x, _ in ds:
                n += int(x.shape[0])
                if first is None:
                    first, t_first = n, time.perf_counter()
            t1 = time.perf_counter()
            epochs.append({"images": n, "first_batch_sec": round(t_first - t0, 3),
                           "images_per_sec": round((n - first) / max(t1 - t_first, 1e-9), 1),
                           "epoch_images_per_sec": round(n / (t1 - t0), 1)})
        cpu = sum(_cpu_seconds(p.pid) for p in procs[1:]) - cpu0
        total = sum(e["images"] for e in epochs)
        return {"workers": num_workers, "epochs": epochs,
                "images_per_sec_median": sorted(e["images_per_sec"] for e in epochs)[
                    len(epochs) // 2],
                "epoch_images_per_sec_overall": round(
                    sum(e["images"] for e in epochs) / sum(
                        e["images"] / e["epoch_images_per_sec"] for e in epochs), 1),
                "worker_cpu_sec": round(cpu, 2),
                "images_per_worker_cpu_sec": round(total / max(cpu, 1e-9), 1)}
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def main(argv):
    del argv
    FLAGS.data_dir = _data_dir(FLAGS.data_dir)
    paths = _paths()
    if not paths:
        raise ValueError(f"no images under --data_dir. Received: data_dir={FLAGS.data_dir!r}")
    results = [run_config(int(w), paths) for w in FLAGS.workers.split(",")]
    out = {"benchmark": "service_scaling", "num_images": len(paths),
           "cores": len(os.sched_getaffinity(0)), "processing_mode": "dynamic",
           "image_size": FLAGS.image_size, "batch_size": FLAGS.batch_size, "results": results,
           "note": "consumer, dispatcher and workers share the machine's cores"}
    print(bench.write_json(FLAGS.json_out, out))


if __name__ == "__main__":
    app.run(main)
