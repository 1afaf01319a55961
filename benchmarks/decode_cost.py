"""Where the CPU goes per image: pipeline's decoder against a bare ``decode_jpeg``.

Each candidate is a map function over the photos' bytes, already in memory
(``Dataset.from_tensor_slices(bytes).map(fn)``, private thread pool of 1, no
autotune), so reading files and thread hand-offs are left out and what is
measured is the map function's own CPU time per image (``time.process_time``
around whole epochs). Candidates alternate for ``--repeats`` rounds; min,
median and max are reported (the minimum is the steadiest on a shared machine).

  decode_jpeg            tf.io.decode_jpeg(channels=3): the floor
  decoder                pipeline.decode.image.Decoder().decode (sniff, bomb guard,
                         EXIF orientation, JPEG fast path) as from_directory builds it
                         for a folder of *.jpg files (other formats' decoders left out)
  decoder_no_exif        the same with exif_orientation=False
  decoder_all_formats    the decoder with every format's decoder in the graph (a
                         folder that mixes formats)
  decode_jpeg+resize     plain tf.data's map: decode_jpeg + transform.resize
  decoder+resize         the pipeline's eval map (resize="stretch")
  decode_jpeg_ratio2+resize  decode_jpeg(ratio=2) (libjpeg's 1/2 DCT scale) + resize,
                         no checks: the floor of any reduced-scale decode where a
                         1/2 scale still covers the target (the sample at 128)
  identity               the map machinery alone
  checks                 the per-file header checks of ``decoder`` alone: first
                         bytes, JPEG test, ``extract_jpeg_shape``, bomb guard, EXIF
                         orientation, SOS count (no decode)
  checks_batched         the same checks on batches of 64 (``Decoder.check_batch``:
                         vector ops) between a batch and an unbatch
  batch_unbatch          batch(64) + unbatch alone (what checks_batched adds)
  decoder_batch_checked  ``decoder`` with its checks from ``check_batch`` (the stage
                         ``decode.check_stage`` puts before the decode map)

Candidates named ``*batch*`` transform the dataset (``STAGES``) instead of mapping.

Full size (the 1,000-photo sample)::

    python benchmarks/decode_cost.py --json_out=decode_cost.json

Tiny smoke run::

    python benchmarks/decode_cost.py --num_images=16 --repeats=1 --epochs=1 --json_out=/tmp/d.json
"""

import glob
import json
import os
import statistics
import sys
import time

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, data_dir as _data_dir

import tensorflow as tf  # noqa: E402

from pipeline.decode import image as decode  # noqa: E402
from pipeline.tools import sample
from pipeline.transform import geometry as transform

common_flags.define(data_dir="Class-folder photo root.",
                    num_images=(0, "Use only the first N JPEG photos; 0 = all."),
                    image_size=(224, "Resize target, height and width (pixels)."),
                    epochs=(2, "Epochs per timed pass."),
                    repeats=(3, "Alternating rounds over all candidates."),
                    json_out=(None, "Write the figures as JSON here."))


def candidates(size):
    # the graph from_directory builds for a folder of *.jpg files: other formats' decoders
    # left out (others_in_graph=False); "decoder_all_formats" is a mixed folder's graph
    full = decode.Decoder(3, others_in_graph=False)
    no_exif = decode.Decoder(3, exif_orientation=False, others_in_graph=False)
    mixed = decode.Decoder(3)
    px = lambda img: img[0, 0]  # a cheap output that depends on the whole decode
    jpeg = lambda c: tf.io.decode_jpeg(c, channels=3)
    return {
        "identity": lambda c: tf.strings.length(c),
        "checks": _per_file_checks(full),
        "decode_jpeg": lambda c: px(jpeg(c)),
        "decoder": lambda c: px(full.decode(c)[0]),
        "decoder_no_exif": lambda c: px(no_exif.decode(c)[0]),
        "decoder_all_formats": lambda c: px(mixed.decode(c)[0]),
        "decode_jpeg+resize": lambda c: transform.resize(jpeg(c), size),
        "decoder+resize": lambda c: transform.resize(full.decode(c)[0], size),
        "decode_jpeg_ratio2+resize": lambda c: transform.resize(
            tf.io.decode_jpeg(c, channels=3, ratio=2), size),
    }


def _per_file_checks(decoder):
    def checks(c):
        words = decode.header_words(c)

        def jpeg():
            h, w, _ = tf.unstack(tf.cast(tf.image.extract_jpeg_shape(c), tf.int64), num=3)
            o = decode.exif_orientation(c, words)
            return (h * w > decoder.max_pixels) | (o > 1), decode.scan_markers(c[None])[0]
        return tf.cond(decode.is_jpeg(words), jpeg, lambda: (tf.constant(True), 0))
    return checks


def stages(size):
    """Candidates that transform the dataset of bytes: name -> f(ds) -> ds."""
    full = decode.Decoder(3, others_in_graph=False)
    px = lambda img: img[0, 0]
    return {
        "batch_unbatch": lambda ds: ds.batch(decode.CHECK_BATCH).unbatch().map(tf.strings.length),
        "checks_batched": lambda ds: decode.check_stage(ds.map(lambda c: (c,)), full, 0).map(
            lambda c, k: k["settled"]),
        "decoder_batch_checked": lambda ds: decode.check_stage(ds.map(lambda c: (c,)), full, 0
                                                               ).map(
            lambda c, k: px(full.decode(c, checked=k)[0])),
    }


def cpu_us_per_image(blobs, fn, epochs, stage=None):
    """CPU microseconds per image of one pass of ``epochs`` over ``blobs``."""
    ds = tf.data.Dataset.from_tensor_slices(blobs).repeat(epochs)
    ds = (stage(ds) if stage is not None else ds.map(fn)).batch(32)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.autotune.enabled = False
    ds = ds.with_options(options)
    for _ in ds.take(2):  # instantiate the functions before timing
        pass
    t = time.process_time()
    for _ in ds:
        pass
    return (time.process_time() - t) / (len(blobs) * epochs) * 1e6


def main(argv):
    del argv
    root = _data_dir(FLAGS.data_dir)
    files = sorted(p for p in glob.glob(os.path.join(root, "*", "*"))
                   if open(p, "rb").read(3) == b"\xff\xd8\xff")
    if FLAGS.num_images:
        files = files[:FLAGS.num_images]
    if not files:
        sys.exit(f"no JPEG files under {root}/<class>/")
    blobs = [open(p, "rb").read() for p in files]
    size = (FLAGS.image_size, FLAGS.image_size)
    cands = candidates(size)
    staged = stages(size)
    runs = {name: [] for name in list(cands) + list(staged)}
    for _ in range(FLAGS.repeats):
        for name, fn in cands.items():
            runs[name].append(cpu_us_per_image(blobs, fn, FLAGS.epochs))
        for name, stage in staged.items():
            runs[name].append(cpu_us_per_image(blobs, None, FLAGS.epochs, stage))
    out = {"data_dir": sample.data_dir_label(root), "images": len(blobs), "epochs": FLAGS.epochs,
           "repeats": FLAGS.repeats, "unit": "CPU microseconds per image, one thread",
           "candidates": {n: {"min": min(v), "median": statistics.median(v), "max": max(v),
                              "runs": v} for n, v in runs.items()}}
    floor = out["candidates"]["decode_jpeg"]["min"]
    print(f"{len(blobs)} JPEGs from {root}; CPU us per image, one thread (min / median / max "
          f"of {FLAGS.repeats} rounds)")
    for name, r in out["candidates"].items():
        print(f"  {name:26s} {r['min']:8.0f} {r['median']:8.0f} {r['max']:8.0f}   "
              f"{r['min'] / floor:5.2f}x decode_jpeg")
    if FLAGS.json_out:
        with open(FLAGS.json_out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    app.run(main)
