"""Stored at training resolution: the epoch speed-up and the PSNR cost of
``write_tfrecords(max_resolution=N)``, in eval and train mode.

Writes the files of ``--data_dir`` twice to TFRecord shards (``pipeline.write_tfrecords``,
same order): as they are (``original``) and re-encoded with the shorter side at
``--max_resolution`` (``stored``, JPEG ``--jpeg_quality``). Then runs, alternated
``--repeats`` times, each in its own subprocess (``pipeline.tools.bench.harness``):

  records        pipeline.from_tfrecords, eval mode (resize to --image_size)
  records_train  the same with Augment(random_resized_crop=True, horizontal_flip=True)

on both, and reports images/s, images per CPU-second (this process and its workers) and
the speed-up ``stored / original`` of each. The PSNR cost: for every image, the
reference resize (``pipeline.transform.quality``: antialiased resize of the full decode) of the
stored image against that of the original file, at ``--image_size``; median and 5th
percentile. Also the write time and the shards' bytes.

    python benchmarks/stored_resolution.py --epochs=2 --repeats=2 --json_out=stored.json
"""

import os
import tempfile
import time

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir
import peer_candidates as _peers  # benchmarks/peer_candidates.py (registers records, records_train; symlink_tree)
from pipeline.tools.bench import harness as bench
from pipeline import checks
from pipeline.tools import sample

common_flags.define(data_dir="Class-folder photo root.",
                    num_images=(0, "Use only the first N photos (linked into a temp folder); "
                                "0 = all of --data_dir."),
                    image_size=224, batch_size=64, epochs=2,
                    repeats=(2, "Rounds; the runs alternate within each round."),
                    seed=(0, "Shuffle and augmentation seed."), progress=False, json_out=None)
flags.DEFINE_integer("max_resolution", 256, "Shorter side of the stored images (pixels).")
flags.DEFINE_integer("jpeg_quality", 90, "JPEG quality of the stored images.")


def storage_psnr(stored_dir: str, size) -> dict:
    """PSNR summary of each stored image's reference resize against its original file's."""
    import tensorflow as tf
    from pipeline.transform import quality
    from pipeline.convert import shards
    spec = {"image": tf.io.FixedLenFeature([], tf.string),
            "path": tf.io.FixedLenFeature([], tf.string)}
    values = []
    for f in shards.list_files(stored_dir):
        for rec in tf.data.TFRecordDataset(f):
            r = tf.io.parse_single_example(rec, spec)
            stored = tf.io.decode_image(r["image"], channels=3, expand_animations=False)
            values.append(quality.psnr(quality.reference(stored.numpy(), size),
                                       quality.reference_for(r["path"].numpy().decode(), size)))
    return quality.summary(values)


def run(data_dir, work, max_resolution=256, jpeg_quality=90, image_size=224, batch_size=64,
        epochs=2, repeats=2, seed=0, progress=False):
    """Writes both shard folders under ``work`` and measures; returns the result dict."""
    import pipeline
    out = {"benchmark": "stored_resolution", "data_dir": sample.data_dir_label(data_dir),
           "max_resolution": max_resolution, "jpeg_quality": jpeg_quality,
           "image_size": image_size, "batch_size": batch_size, "epochs": epochs,
           "repeats": repeats, "cores": checks.cpu_count()}
    dirs = {}
    for name, res in (("original", None), ("stored", max_resolution)):
        d = os.path.join(work, name)
        t0 = time.perf_counter()
        meta = pipeline.write_tfrecords(data_dir, d, shuffle=True, seed=seed, progress=progress,
                                        max_resolution=res, jpeg_quality=jpeg_quality)
        out[f"{name}_write_sec"] = time.perf_counter() - t0
        out[f"{name}_mib"] = sum(os.path.getsize(os.path.join(d, s["file"]))
                                 for s in meta["shards"]) / 2 ** 20
        out["num_images"] = meta["num_examples"]
        dirs[name] = d
    out["storage_psnr"] = storage_psnr(dirs["stored"], (image_size, image_size))
    results = {}
    for mode in ("records", "records_train"):
        for _ in range(repeats):  # original and stored alternate round by round
            for name, d in dirs.items():
                spec = {"data_dir": d, "image_size": [image_size, image_size],
                        "batch_size": batch_size, "epochs": epochs, "seed": seed,
                        "num_images": out["num_images"]}
                r = bench.run_candidates([mode], spec, repeats=1, progress=progress)[mode]
                results.setdefault(f"{mode}_{name}", []).append(r)
    import statistics
    out["candidates"] = {}
    for key, rs in results.items():
        agg = {k: statistics.median(r[k] for r in rs)
               for k in ("images_per_sec", "steady_images_per_cpu_sec", "images_per_cpu_sec")}
        agg["runs"] = [{k: r[k] for k in agg} for r in rs]
        out["candidates"][key] = agg
    c = out["candidates"]
    out["speedup"] = {
        f"{mode}_{k}": c[f"{mode}_stored"][k] / c[f"{mode}_original"][k]
        for mode in ("records", "records_train")
        for k in ("images_per_sec", "steady_images_per_cpu_sec")}
    return out


def main(argv):
    del argv
    src = _data_dir(FLAGS.data_dir)
    with tempfile.TemporaryDirectory(prefix="stored-resolution-") as tmp:
        data_dir = src
        if FLAGS.num_images:
            data_dir = _peers.symlink_tree(src, FLAGS.num_images, os.path.join(tmp, "data"))
        out = run(data_dir, tmp, FLAGS.max_resolution, FLAGS.jpeg_quality, FLAGS.image_size,
                  FLAGS.batch_size, FLAGS.epochs, FLAGS.repeats, FLAGS.seed, FLAGS.progress)
    out["source_dir"] = sample.data_dir_label(src)
    bench.write_json(FLAGS.json_out, out)
    p = out["storage_psnr"]
    print(f"{out['num_images']} images; shards {out['original_mib']:.0f} MiB as they are, "
          f"{out['stored_mib']:.0f} MiB at max_resolution={out['max_resolution']} "
          f"(written in {out['stored_write_sec']:.0f} s)")
    print(f"PSNR cost at {out['image_size']}: median {p['psnr_db_median']:.1f} dB, "
          f"5th percentile {p['psnr_db_p5']:.1f} dB")
    for key, r in out["candidates"].items():
        print(f"{key:<24} {r['images_per_sec']:>8.0f} img/s "
              f"{r['steady_images_per_cpu_sec']:>8.0f} img/CPU-s")
    for key, v in out["speedup"].items():
        print(f"speed-up {key:<40} {v:.2f}x")
    if FLAGS.json_out:
        print(f"wrote {FLAGS.json_out}")


if __name__ == "__main__":
    app.run(main)
