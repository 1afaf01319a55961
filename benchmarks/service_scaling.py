"""tf.data service scaling: 1 worker, then 2 workers, same files, same consumer.

Starts a dispatcher and workers as separate processes on 127.0.0.1 (through
``pipeline.deliver.distribute.run_dispatcher`` / ``run_worker``), reads one or more
epochs with ``processing_mode="dynamic"`` and reports images/s (after the first
batch) and the workers' CPU-seconds. On a 2-core machine the consumer, the
dispatcher and the workers share the same two cores: 2 workers cannot beat 1
by much, and the JSON says so rather than hiding it.

``--pin_workers`` gives each worker one core of its own (worker k runs on core
k mod cores, ``os.sched_setaffinity`` before TensorFlow is imported): on this
2-core machine, 1 worker with 1 core, then 2 workers with 1 core each. With
``--plan`` the script also measures the pipeline's local cost (images per
CPU-second, ``pipeline.tools.capacity.measure_cost``, the figure the capacity plan
uses) and compares each configuration's measured images/s with the model's
prediction, ``workers x cores each x images_per_cpu_sec``, and each worker's
images per CPU-second with the local cost. ``--repeats`` alternates the
configurations round by round; medians and ranges are reported.

    python benchmarks/service_scaling.py --num_images=200 --json_out=/tmp/svc.json
    python benchmarks/service_scaling.py --num_images=1000 --pin_workers --plan \
        --repeats=3 --epochs=2 --batch_size=64 --json_out=/tmp/svc_plan.json
"""

import os
import signal
import statistics
import socket
import subprocess
import sys
import tempfile
import time

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir
import peer_candidates as _peers  # benchmarks/peer_candidates.py (symlink_tree)
from pipeline.tools.bench import harness as bench

common_flags.define(data_dir="Class-folder image root.",
                    num_images=(200, "Files used (first N in sorted order)."),
                    epochs=(2, "Epochs per configuration."), batch_size=32, image_size=224,
                    repeats=(1, "Rounds; the configurations alternate within each round."),
                    json_out=(None, "Write the JSON result here too."))
flags.DEFINE_string("workers", "1,2", "Worker counts to run, in order.")
flags.DEFINE_bool("pin_workers", False, "Give each worker one core (worker k on core k mod "
                  "cores).")
flags.DEFINE_bool("plan", False, "Also measure the local cost (images per CPU-second) and "
                  "compare each configuration with the capacity model's prediction.")
flags.DEFINE_bool("augment", False, "Train mode: Augment(random_resized_crop, "
                  "horizontal_flip), here and in the local cost.")

REPO = common_flags.REPO


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(code, core=None):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    if core is not None:  # before TensorFlow sizes its thread pools
        code = f"import os\nos.sched_setaffinity(0, {{{core}}})\n" + code
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


def _augment():
    import pipeline  # pylint: disable=import-outside-toplevel
    return pipeline.Augment(random_resized_crop=True, horizontal_flip=True) \
        if FLAGS.augment else None


def run_config(num_workers, paths):
    import pipeline  # pylint: disable=import-outside-toplevel
    cores = sorted(os.sched_getaffinity(0))
    dport = _free_port()
    procs = [_spawn("from pipeline.deliver.distribute import run_dispatcher\n"
                    f"run_dispatcher({dport})")]
    ports = [_free_port() for _ in range(num_workers)]
    for k, p in enumerate(ports):
        procs.append(_spawn("from pipeline.deliver.distribute import run_worker\n"
                            f"run_worker('localhost:{dport}', {p})",
                            core=cores[k % len(cores)] if FLAGS.pin_workers else None))
    try:
        for p in [dport] + ports:
            _wait_port(p)
        time.sleep(1.5)  # registration
        ds = pipeline.from_paths(paths, labels=list(range(len(paths))),
                                 image_size=(FLAGS.image_size, FLAGS.image_size),
                                 batch_size=FLAGS.batch_size, service=f"grpc://localhost:{dport}",
                                 processing_mode="dynamic", augment=_augment(), seed=0)
        cpu0 = sum(_cpu_seconds(p.pid) for p in procs[1:])
        me0 = time.process_time()
        epochs = []
        steady_cpu = steady_sec = 0.0
        for _ in range(FLAGS.epochs):
            t0 = time.perf_counter()
            n, first, t_first = 0, None, None
            for x, _ in ds:
                n += int(x.shape[0])
                if first is None:
                    first, t_first = n, time.perf_counter()
                    c_first = sum(_cpu_seconds(p.pid) for p in procs[1:])
            t1 = time.perf_counter()
            steady_cpu += sum(_cpu_seconds(p.pid) for p in procs[1:]) - c_first
            steady_sec += t1 - t_first
            epochs.append({"images": n, "first_batch_sec": round(t_first - t0, 3),
                           "steady_images": n - first,
                           "images_per_sec": round((n - first) / max(t1 - t_first, 1e-9), 1),
                           "epoch_images_per_sec": round(n / (t1 - t0), 1)})
        cpu = sum(_cpu_seconds(p.pid) for p in procs[1:]) - cpu0
        consumer_cpu = time.process_time() - me0
        total = sum(e["images"] for e in epochs)
        return {"workers": num_workers, "epochs": epochs,
                "cores_per_worker": 1 if FLAGS.pin_workers else len(cores),
                "consumer_cpu_sec": round(consumer_cpu, 2),
                "images_per_sec_median": sorted(e["images_per_sec"] for e in epochs)[
                    len(epochs) // 2],
                "epoch_images_per_sec_overall": round(
                    sum(e["images"] for e in epochs) / sum(
                        e["images"] / e["epoch_images_per_sec"] for e in epochs), 1),
                "worker_cpu_sec": round(cpu, 2),
                "steady_worker_cores_used": round(steady_cpu / max(steady_sec, 1e-9), 2),
                "steady_images_per_worker_cpu_sec": round(
                    sum(e["steady_images"] for e in epochs) / max(steady_cpu, 1e-9), 1),
                "images_per_worker_cpu_sec": round(total / max(cpu, 1e-9), 1)}
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _median_config(runs):
    """One configuration's rounds: the first run's fields, medians and ranges of
    the figures, every run under ``runs``."""
    out = dict(runs[0], runs=runs)
    for k in ("images_per_sec_median", "epoch_images_per_sec_overall", "worker_cpu_sec",
              "images_per_worker_cpu_sec", "steady_images_per_worker_cpu_sec",
              "steady_worker_cores_used", "consumer_cpu_sec"):
        vals = [r[k] for r in runs]
        out[k] = statistics.median(vals)
        out[k + "_range"] = [min(vals), max(vals)]
    return out


def compare_with_plan(results, cost):
    """Each configuration beside the capacity model (``cost``: the local images
    per CPU-second).

    ``predicted_images_per_sec`` is ``workers x cores_per_worker x cost`` (the
    cores given); ``predicted_at_cores_used`` is ``cost x`` the CPU-seconds per
    second the workers actually got (on a shared machine a pinned worker does
    not get its whole core); ``error`` and ``error_at_cores_used`` are measured
    / predicted - 1. ``worker_cost_vs_local`` is the workers' steady images per
    CPU-second over the local cost: the model's one input, checked directly.
    """
    out = []
    for r in results:
        predicted = r["workers"] * r["cores_per_worker"] * cost
        at_used = r["steady_worker_cores_used"] * cost
        measured = r["images_per_sec_median"]
        out.append({"workers": r["workers"], "cores_per_worker": r["cores_per_worker"],
                    "predicted_images_per_sec": round(predicted, 1),
                    "measured_images_per_sec": measured,
                    "measured_range": r["images_per_sec_median_range"],
                    "error": round(measured / predicted - 1, 3),
                    "worker_cores_used": r["steady_worker_cores_used"],
                    "predicted_at_cores_used": round(at_used, 1),
                    "error_at_cores_used": round(measured / at_used - 1, 3),
                    "worker_images_per_cpu_sec": r["steady_images_per_worker_cpu_sec"],
                    "worker_images_per_cpu_sec_range":
                        r["steady_images_per_worker_cpu_sec_range"],
                    "worker_cost_vs_local": round(
                        r["steady_images_per_worker_cpu_sec"] / cost, 3)})
    return out


def main(argv):
    del argv
    FLAGS.data_dir = _data_dir(FLAGS.data_dir)
    paths = _paths()
    if not paths:
        raise ValueError(f"no images under --data_dir. Received: data_dir={FLAGS.data_dir!r}")
    counts = [int(w) for w in FLAGS.workers.split(",")]
    runs = {w: [] for w in counts}
    cost = None
    with tempfile.TemporaryDirectory() as tmp:
        if FLAGS.plan:  # the local cost, on the same files, as the capacity plan measures it
            from pipeline.tools import capacity
            linked = _peers.symlink_tree(FLAGS.data_dir, len(paths), os.path.join(tmp, "data"))
            cost = capacity.measure_cost(linked, (FLAGS.image_size, FLAGS.image_size),
                                         FLAGS.batch_size, augment=FLAGS.augment,
                                         epochs=FLAGS.epochs, repeats=FLAGS.repeats)
        for _ in range(FLAGS.repeats):
            for w in counts:
                runs[w].append(run_config(w, paths))
    results = [_median_config(runs[w]) for w in counts]
    out = {"benchmark": "service_scaling", "num_images": len(paths),
           "cores": len(os.sched_getaffinity(0)), "processing_mode": "dynamic",
           "image_size": FLAGS.image_size, "batch_size": FLAGS.batch_size,
           "augment": FLAGS.augment, "pin_workers": FLAGS.pin_workers,
           "repeats": FLAGS.repeats, "results": results,
           "note": "consumer, dispatcher and workers share the machine's cores"}
    if cost is not None:
        out["local_cost"] = cost
        out["plan_check"] = compare_with_plan(results, cost["images_per_cpu_sec"])
    print(bench.write_json(FLAGS.json_out, out))
    for c in out.get("plan_check", []):
        print(f"{c['workers']} worker(s) x {c['cores_per_worker']} core(s): predicted "
              f"{c['predicted_images_per_sec']:.0f} images/s, measured "
              f"{c['measured_images_per_sec']:.0f} ({c['measured_range'][0]:.0f}-"
              f"{c['measured_range'][1]:.0f}), error {100 * c['error']:+.0f}%; worker "
              f"{c['worker_images_per_cpu_sec']:.0f} images per CPU-second "
              f"({c['worker_cost_vs_local']:.2f}x local); workers got "
              f"{c['worker_cores_used']:.2f} cores: predicted at that "
              f"{c['predicted_at_cores_used']:.0f}, error {100 * c['error_at_cores_used']:+.0f}%")
    if cost is not None and len(counts) == 2:
        a, b = out["plan_check"]
        out["scaling"] = {"predicted": b["predicted_images_per_sec"]
                          / a["predicted_images_per_sec"],
                          "measured": b["measured_images_per_sec"]
                          / a["measured_images_per_sec"],
                          "worker_cores_used": b["worker_cores_used"] / a["worker_cores_used"]}
        print(f"{counts[0]} -> {counts[1]} workers: predicted x{out['scaling']['predicted']:.2f}, "
              f"measured x{out['scaling']['measured']:.2f} (the workers' CPU grew "
              f"x{out['scaling']['worker_cores_used']:.2f})")
        bench.write_json(FLAGS.json_out, out)


if __name__ == "__main__":
    app.run(main)
