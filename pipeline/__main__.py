"""Command line: ``python -m pipeline <command> [--flags]`` (absl flags).

Commands:
  bench     throughput, time to first batch and peak RSS, side by side with
            peers (default: keras.utils.image_dataset_from_directory). With no
            --data_dir it runs on a built-in sample of generated JPEGs.
  scan      one parallel pass over a folder / manifest / path list: counts per
            class and format, sizes, extension mismatches, bad files.
  convert   write TFRecord shards (encoded bytes + label + path).
  service   start a tf.data service dispatcher or worker.

Run ``python -m pipeline <command> --helpfull`` for every flag.
"""

from __future__ import annotations

import json
import sys

from absl import app, flags, logging

from pipeline import cli

FLAGS = flags.FLAGS

# bench
flags.DEFINE_string("data_dir", None, "bench: class-folder directory; default: a built-in sample.")
flags.DEFINE_list("image_size", ["224", "224"], "bench: output height,width in pixels.")
flags.DEFINE_integer("batch_size", 64, "bench: batch size (images).")
flags.DEFINE_integer("epochs", 3, "bench: epochs per candidate.")
flags.DEFINE_integer("repeats", 1, "bench: runs per candidate, alternated; medians reported.")
flags.DEFINE_list("compare", ["keras"], "bench: peers to run beside pipeline, any of "
                  "pipeline.bench.CANDIDATES (keras, plain, tf1_queue, pydataset, in_memory, "
                  "generator, keras_idg, keras_aug, pipeline_train, decode_limit, torch, ...; "
                  "see pipeline/peers.py); empty for none.")
flags.DEFINE_string("json_out", None, "bench/scan: write the result as JSON to this file.")
flags.DEFINE_integer("sample_images", 256, "bench: images in the built-in sample.")
flags.DEFINE_integer("seed", 0, "bench: shuffle seed.")
flags.DEFINE_bool("progress", True, "Show tqdm progress bars.")
flags.DEFINE_string("on_error", "raise", "bench: pipeline's on_error ('raise' or 'skip').")
flags.DEFINE_bool("profile", False, "bench: instead of peers, profile pipeline's stages "
                  "(read, decode, resize, batch) and name the bottleneck.")
flags.DEFINE_float("target_images_per_sec", None, "bench --profile: consumption rate to "
                   "compare with (images/s).")
flags.DEFINE_string("profile_dir", None, "bench --profile: write a TensorBoard profiler "
                    "trace here.")
# scan
flags.DEFINE_integer("max_pixels", None, "scan: header pixel limit (default Pillow's 178,956,970).")
flags.DEFINE_bool("follow_links", False, "scan: follow linked folders (loop-safe).")
# convert
flags.DEFINE_integer("num_shards", None, "convert: shards to write (default: ~1 per 128 MiB).")
flags.DEFINE_integer("num_workers", None, "convert: writer threads.")
flags.DEFINE_string("path_column", None, "convert: manifest path column.")
flags.DEFINE_list("label_columns", None, "convert: manifest label column(s).")
flags.DEFINE_string("root", None, "convert: manifest root for relative paths.")
flags.DEFINE_bool("allow_outside_root", False, "convert/scan: allow manifest paths outside root.")
# service
flags.DEFINE_integer("port", None, "service: port (dispatcher default 5050, worker 0 = any).")
flags.DEFINE_string("dispatcher_address", None, "service worker: dispatcher host:port.")
flags.DEFINE_string("worker_address", None, "service worker: address to advertise "
                    "(default localhost:<port>).")
flags.DEFINE_list("worker_addresses", None, "service dispatcher: fixed worker host:ports "
                  "(needed for processing_mode='file').")
flags.DEFINE_string("work_dir", None, "service dispatcher: journal folder (fault tolerance).")
flags.DEFINE_bool("fault_tolerant_mode", False, "service dispatcher: journal state to work_dir.")
flags.DEFINE_integer("worker_timeout_ms", None, "service dispatcher: worker heartbeat timeout.")
flags.DEFINE_integer("heartbeat_interval_ms", None, "service worker: heartbeat interval.")


def _parse_size(values):
    try:
        size = [int(v) for v in values]
        if len(size) == 1:
            size = size * 2
        if len(size) != 2 or min(size) <= 0:
            raise ValueError
    except ValueError:
        raise app.UsageError(
            f"--image_size must be HEIGHT,WIDTH positive integers. Received: {values!r}")
    return size


def cmd_bench(argv):
    from pipeline import bench, sample

    size = _parse_size(FLAGS.image_size)
    if FLAGS.batch_size <= 0:
        raise app.UsageError(f"--batch_size must be > 0. Received: {FLAGS.batch_size}")
    if FLAGS.epochs <= 0:
        raise app.UsageError(f"--epochs must be > 0. Received: {FLAGS.epochs}")
    if FLAGS.repeats <= 0:
        raise app.UsageError(f"--repeats must be > 0. Received: {FLAGS.repeats}")
    if FLAGS.on_error not in ("raise", "skip"):
        raise app.UsageError(f"--on_error must be 'raise' or 'skip'. Received: {FLAGS.on_error!r}")
    data_dir = FLAGS.data_dir
    if data_dir is None:
        data_dir = sample.ensure_sample(FLAGS.sample_images)
        logging.info("pipeline bench: built-in sample at %s", data_dir)
    if FLAGS.profile:
        import pipeline
        report = pipeline.profile(
            data_dir, target_images_per_sec=FLAGS.target_images_per_sec,
            profile_dir=FLAGS.profile_dir, image_size=tuple(size),
            batch_size=FLAGS.batch_size, on_error=FLAGS.on_error)
        print(report.table())
        if FLAGS.json_out:
            with open(FLAGS.json_out, "w") as f:
                json.dump(report.to_dict(), f, indent=2, default=str)
            print(f"wrote {FLAGS.json_out}")
        return 0
    from pipeline import index
    idx = index.index_directory(data_dir)
    names = ["pipeline"] + [c for c in FLAGS.compare if c and c != "pipeline"]
    unknown = [c for c in names if c not in bench.CANDIDATES]
    if unknown:
        raise app.UsageError(f"--compare: unknown candidate(s) {unknown}; known: "
                             f"{sorted(bench.CANDIDATES)}. Received: {FLAGS.compare!r}")
    spec = {"data_dir": data_dir, "image_size": size, "batch_size": FLAGS.batch_size,
            "epochs": FLAGS.epochs, "seed": FLAGS.seed, "num_images": len(idx),
            "options": {"on_error": FLAGS.on_error}}
    if len(idx) <= FLAGS.batch_size:
        logging.warning("pipeline bench: %d images with --batch_size=%d is one batch per epoch: "
                        "there is no steady state to measure (images/s is NaN). Use more "
                        "images or a smaller --batch_size.", len(idx), FLAGS.batch_size)
    # A peer that fails (e.g. Keras on a bad file) is reported, not fatal.
    results = bench.run_candidates(names, spec, repeats=FLAGS.repeats, progress=FLAGS.progress,
                                   keep_going=True)
    if not bench.ok(results["pipeline"]):
        print(bench.format_table(results))
        raise app.UsageError(f"pipeline failed: {results['pipeline'].get('error', '')[-800:]}")
    print(f"\n{len(idx)} images in {data_dir}, image_size={size[0]}x{size[1]}, "
          f"batch_size={FLAGS.batch_size}, epochs={FLAGS.epochs}, repeats={FLAGS.repeats}")
    print(bench.format_table(results))
    main = results["pipeline"]
    out = {k: main[k] for k in ("images_per_sec", "first_batch_sec", "peak_rss_mb",
                                "num_images", "epochs", "images_per_cpu_sec",
                                "cpu_cores_used", "rss_after_import_mb")}
    out["options"] = dict(spec, candidates=names)
    out["compare"] = {n: results[n] for n in names if n != "pipeline"}
    for n in names[1:]:
        if not bench.ok(results[n]):
            if "error" in results[n]:
                lines = results[n]["error"].strip().splitlines() or [""]
                print(f"{n} FAILED: {lines[-1]}")
            continue  # skipped (e.g. torch not installed) or failed: shown in the table
        ratio = main["images_per_sec"] / results[n]["images_per_sec"]
        out[f"speedup_vs_{n}"] = ratio
        print(f"pipeline / {n}: {ratio:.2f}x images/s")
    if FLAGS.json_out:
        with open(FLAGS.json_out, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {FLAGS.json_out}")
    return 0


def cmd_convert(argv):
    """python -m pipeline convert SRC OUT [--num_shards=N] [--flags]."""
    from pipeline import shards

    if len(argv) != 3:
        raise app.UsageError("usage: python -m pipeline convert SRC OUT [--num_shards=N]. "
                             f"Received: {argv[1:]!r}")
    if FLAGS.num_shards is not None and FLAGS.num_shards <= 0:
        raise app.UsageError(f"--num_shards must be > 0. Received: {FLAGS.num_shards}")
    kw = {k: getattr(FLAGS, k) for k in ("path_column", "label_columns", "root")
          if getattr(FLAGS, k)}
    if FLAGS.allow_outside_root:
        kw["allow_outside_root"] = True
    meta = shards.convert(argv[1], argv[2], FLAGS.num_shards, progress=FLAGS.progress,
                          num_workers=FLAGS.num_workers, **kw)
    print(json.dumps({k: meta[k] for k in ("num_examples", "class_names", "shards")}))
    return 0


def cmd_service(argv):
    """python -m pipeline service dispatcher|worker [--flags]."""
    from pipeline import distribute

    role = argv[1] if len(argv) > 1 else None
    if role == "dispatcher" and len(argv) == 2:
        distribute.run_dispatcher(
            port=5050 if FLAGS.port is None else FLAGS.port,
            worker_addresses=FLAGS.worker_addresses, work_dir=FLAGS.work_dir,
            fault_tolerant_mode=FLAGS.fault_tolerant_mode,
            worker_timeout_ms=FLAGS.worker_timeout_ms)
        return 0
    if role == "worker" and len(argv) == 2:
        if not FLAGS.dispatcher_address:
            raise app.UsageError("service worker needs --dispatcher_address=HOST:PORT")
        distribute.run_worker(FLAGS.dispatcher_address, port=FLAGS.port or 0,
                              worker_address=FLAGS.worker_address,
                              heartbeat_interval_ms=FLAGS.heartbeat_interval_ms)
        return 0
    raise app.UsageError("usage: python -m pipeline service dispatcher|worker [--flags]. "
                         f"Received: {argv[1:]!r}")


cli.COMMANDS["bench"] = cmd_bench
cli.COMMANDS["convert"] = cmd_convert
cli.COMMANDS["service"] = cmd_service
COMMANDS = cli.COMMANDS
# Commands implemented in other modules define their flags and register here.
for _mod in ("pipeline.report",):
    try:
        __import__(_mod)
    except ModuleNotFoundError as e:
        if e.name != _mod:
            raise


def main(argv):
    if len(argv) < 2 or argv[1] not in COMMANDS:
        raise app.UsageError(
            f"usage: python -m pipeline <{'|'.join(sorted(COMMANDS))}> [--flags]. "
            f"Received: {argv[1:]!r}")
    try:
        return COMMANDS[argv[1]](argv[1:])
    except app.UsageError as e:
        # The message alone (absl would print the whole flag list first).
        print(f"pipeline {argv[1]}: {e}\n(python -m pipeline {argv[1]} --helpfull lists the "
              "flags)", file=sys.stderr)
        return e.exitcode
    except (ValueError, FileNotFoundError, NotADirectoryError, FileExistsError) as e:
        # Ordinary mistakes (a missing source, a bad option value, an output
        # folder that already holds shards): one line, exit status 2.
        print(f"pipeline {argv[1]}: error: {e}", file=sys.stderr)
        return 2


def run():
    """Console-script entry point (``pipeline``)."""
    app.run(main)


if __name__ == "__main__":
    run()
