"""Resize quality by reduction factor: the pipeline's decode + resize against Keras'.

For each reduction factor ``f`` (the source's shorter side over the target's),
mosaics of real photos (the sample's JPEGs tiled at their own resolution, no
upscaling) are cut to ``round(224 f)`` x ``round(299 f)`` pixels and written as
JPEGs (Pillow, quality 90, 4:2:0; in memory, never to disk). Each is brought
to 224x299 by:

  keras          full decode + bilinear resize (Keras ``image_dataset_from_directory``
                 and plain tf.data: ``decode_jpeg`` + ``tf.image.resize``)
  pipeline       the pipeline's default: DCT-scaled decode (``jpeg_dct_scaling``)
                 + bilinear resize
  pipeline_aa    the same with ``antialias=True``

and compared with the reference, an antialiased resize of the full decode
(``tf.image.resize(full, size, antialias=True)``, which matches Pillow's
reducing filters), rounded to uint8: PSNR in dB (peak 255) per image, median
over the mosaics. Also the CPU time per image of each (one thread, ms).

    python benchmarks/resize_quality.py --mosaics=8 --json_out=benchmarks/results/resize_quality.json
"""

import glob
import io
import json
import os
import statistics
import sys
import time

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from PIL import Image  # noqa: E402

from pipeline.decode import image as decode  # noqa: E402
from pipeline.transform import geometry as transform

common_flags.define(data_dir="Class-folder photo root (JPEGs).",
                    json_out=(None, "Write the table as JSON here."))
flags.DEFINE_list("factors", ["1", "1.3", "1.7", "2", "2.5", "3", "4", "6", "8", "12", "16",
                              "18"], "Reduction factors (source shorter side / 224).")
flags.DEFINE_integer("mosaics", 8, "Mosaics per factor.")
flags.DEFINE_integer("timing_repeats", 3, "Timed decodes per image and candidate (min kept).")

TARGET = (224, 299)


def mosaic(photos, height, width, start):
    """A ``height`` x ``width`` uint8 RGB mosaic of photos at their own size."""
    out = np.zeros((height, width, 3), np.uint8)
    k, y = start, 0
    while y < height:
        x, row_h = 0, None
        while x < width:
            p = photos[k % len(photos)]
            k += 1
            row_h = p.shape[0] if row_h is None else row_h
            tile = p[:row_h, : width - x]
            out[y:y + tile.shape[0], x:x + tile.shape[1]] = tile[: height - y]
            x += tile.shape[1]
        y += row_h
    return out, k


def jpeg_bytes(pixels):
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90, subsampling=2)
    return buf.getvalue()


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def candidates():
    dec = decode.Decoder(3)
    spec = [tf.TensorSpec([], tf.string)]
    fn = lambda f: tf.function(f, input_signature=spec, autograph=False)
    full = lambda c: tf.io.decode_jpeg(c, channels=3)
    return {
        "reference": fn(lambda c: transform.resize(full(c), TARGET, antialias=True)),
        "keras": fn(lambda c: transform.resize(full(c), TARGET)),
        "pipeline": fn(lambda c: transform.resize(dec.decode(c, target=TARGET)[0], TARGET)),
        "pipeline_aa": fn(lambda c: transform.resize(dec.decode(c, target=TARGET)[0], TARGET,
                                                     antialias=True)),
    }


def main(argv):
    del argv
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    files = sorted(glob.glob(os.path.join(_data_dir(FLAGS.data_dir), "*", "*")))
    photos = []
    for f in files[:: max(1, len(files) // 200)]:
        with Image.open(f) as im:
            photos.append(np.asarray(im.convert("RGB")))
    fns = candidates()
    rows, k = [], 0
    for factor in [float(f) for f in FLAGS.factors]:
        h, w = round(TARGET[0] * factor), round(TARGET[1] * factor)
        scores = {name: [] for name in fns if name != "reference"}
        cost = {name: [] for name in fns}
        for _ in range(FLAGS.mosaics):
            pixels, k = mosaic(photos, h, w, k)
            c = tf.constant(jpeg_bytes(pixels))
            out = {}
            for name, f in fns.items():
                out[name] = f(c).numpy()
                best = float("inf")
                for _ in range(FLAGS.timing_repeats):
                    t = time.process_time()
                    f(c).numpy()
                    best = min(best, time.process_time() - t)
                cost[name].append(best * 1e3)
            for name in scores:
                scores[name].append(psnr(out[name], out["reference"]))
        row = {"factor": factor, "source": [h, w], "target": list(TARGET)}
        for name, s in scores.items():
            row[name + "_psnr_median"] = round(statistics.median(s), 2)
            row[name + "_psnr_min"] = round(min(s), 2)
        for name, s in cost.items():
            row[name + "_ms"] = round(statistics.median(s), 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print("| reduction | source | Keras / plain tf.data (full decode + bilinear) | pipeline "
          "(DCT + bilinear, default) | pipeline, antialias=True | ms: Keras / pipeline / "
          "pipeline antialias / reference |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['factor']:g}x | {r['source'][1]}x{r['source'][0]} | "
              f"{r['keras_psnr_median']:.1f} dB | {r['pipeline_psnr_median']:.1f} dB | "
              f"{r['pipeline_aa_psnr_median']:.1f} dB | {r['keras_ms']:.1f} / "
              f"{r['pipeline_ms']:.1f} / {r['pipeline_aa_ms']:.1f} / {r['reference_ms']:.1f} |")
    if FLAGS.json_out:
        with open(FLAGS.json_out, "w") as f:
            json.dump({"command": " ".join(sys.argv), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    app.run(main)
