"""The benchmark candidates built on public APIs only, registered as
``pipeline.tools.bench.harness`` candidates (``python -m pipeline bench --compare=...``, the
notebooks and ``benchmarks/*.py`` share them).

The optional peers (torch, TF1 queue runners, a Keras ``PyDataset`` through a
Keras-private adapter, the legacy ``ImageDataGenerator``) live outside the
package, in ``benchmarks/peer_candidates.py``, which registers more candidates with
the same harness.

Every factory takes the harness spec (``data_dir``, ``image_size`` [h, w],
``batch_size``, ``epochs``, ``seed``, ``options``) and returns something
iterable once per epoch whose items are batches ``(images [b, h, w, 3],
labels [b])``.

Candidates:
    pipeline: ``pipeline.from_directory`` (resize, uint8; eval mode).
    pipeline_train: the same with ``augment=pipeline.Augment(
        random_resized_crop=True, horizontal_flip=True)``.
    pipeline_train_nofast: train mode with crop-before-decode off
        (``fast_jpeg=False``).
    pipeline_center_crop: eval mode with ``resize="center_crop"`` (the
        ImageNet evaluation protocol; only the window of a JPEG is decoded).
    keras: ``keras.utils.image_dataset_from_directory`` (float32).
    keras_crop: the same with ``crop_to_aspect_ratio=True`` (decodes whole,
        then crops the centred window of the target aspect).
    keras_aug: the same loaded at 256/224 of the size, then Keras
        ``RandomCrop`` + ``RandomFlip("horizontal")`` mapped over batches (the
        usual Keras train recipe; Keras 3's RandomCrop uses one window per
        batch).
    plain: hand-tuned tf.data (``decode_jpeg`` + resize to uint8, 2x cores
        parallel calls, autotune off) without pipeline's safety machinery.
    plain_ratio2: the same decoded at libjpeg's 1/2 DCT scale
        (``decode_jpeg(ratio=2)``): what a check-free reader saves by
        decoding fewer pixels (for targets at most half the photos' sides).
    generator: ``fit_generator`` style, a Python generator decoding batches
        with Pillow, through ``pipeline.compat.from_keras_generator``.
    in_memory: decode every file first (Pillow, resize, one thread per core)
        into one uint8 array, then ``tf.data.Dataset.from_tensor_slices``
        -> shuffle -> batch -> prefetch. ``load_sec`` / ``load_cpu_sec`` are
        the loading's wall and CPU seconds; ``first_batch_sec``, ``total_sec``
        and ``images_per_sec_incl_build`` include it, the steady-state
        figures (images/s, images per CPU-second) do not.
    decode_limit: in-graph ``decode_jpeg`` + ``pipeline.transform.geometry.resize``
        on ONE core (``num_parallel_calls=1``, private thread pool of 1,
        ``max_intra_op_parallelism=1``): its images/s times the cores is the
        machine's decode limit.
"""

from __future__ import annotations

import time

from pipeline.tools.bench import harness as bench
from pipeline import checks

# Importing this module imports no TensorFlow (each factory imports what it
# uses), so that the command line checks ``--compare`` against the registry
# before TensorFlow loads.


def _index(spec):
    from pipeline.sources import index as index_lib
    idx = index_lib.index_directory(spec["data_dir"])
    return list(idx.paths), list(idx.labels), idx


def _pipeline(spec):
    import pipeline
    return pipeline.from_directory(
        spec["data_dir"], image_size=tuple(spec["image_size"]), batch_size=spec["batch_size"],
        seed=spec.get("seed"), **spec.get("options", {}))


def _check_augment_applied(ds):
    """Refuses a dataset whose graph has no stateless random op.

    ``ImageOptions`` accepts ``augment=`` before ``build`` applies it; without
    this check a train-mode run would silently measure eval mode.
    """
    graph = ds._as_serialized_graph().numpy()  # pylint: disable=protected-access
    if b"StatelessRandom" not in graph:
        raise RuntimeError("augment= was accepted but not applied: the dataset graph has no "
                           "stateless random op, StatelessRandom* (build.py does not wire "
                           "`augment` yet)")


def _pipeline_train(spec, **extra):
    import pipeline
    aug = pipeline.Augment(random_resized_crop=True, horizontal_flip=True)
    ds = pipeline.from_directory(
        spec["data_dir"], image_size=tuple(spec["image_size"]), batch_size=spec["batch_size"],
        seed=spec.get("seed"), augment=aug, **dict(spec.get("options", {}), **extra))
    _check_augment_applied(ds)
    return ds


def _fast_jpeg_switch():
    import dataclasses
    from pipeline import config as config_lib
    return "fast_jpeg" in {f.name for f in dataclasses.fields(config_lib.ImageOptions)}


def _no_fast_jpeg_switch():
    if not _fast_jpeg_switch():
        return ("pipeline.config.ImageOptions has no `fast_jpeg` switch "
                "(crop-before-decode cannot be turned off)")
    return None


def _pipeline_train_nofast(spec):
    why = _no_fast_jpeg_switch()
    if why:
        raise bench.CandidateSkipped(why)
    return _pipeline_train(spec, fast_jpeg=False)


def _keras_aug(spec):
    import keras
    import tensorflow as tf
    h, w = spec["image_size"]
    load = (int(round(h * 256 / 224)), int(round(w * 256 / 224)))
    ds = keras.utils.image_dataset_from_directory(
        spec["data_dir"], image_size=load, batch_size=spec["batch_size"], shuffle=True,
        seed=spec.get("seed"), verbose=False)
    aug = keras.Sequential([keras.layers.RandomCrop(h, w, seed=spec.get("seed")),
                            keras.layers.RandomFlip("horizontal", seed=spec.get("seed"))])
    return ds.map(lambda x, y: (aug(x, training=True), y),
                  num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def _keras(spec, **extra):
    import keras
    return keras.utils.image_dataset_from_directory(
        spec["data_dir"], image_size=tuple(spec["image_size"]), batch_size=spec["batch_size"],
        shuffle=True, seed=spec.get("seed"), verbose=False, **extra)


def _keras_crop(spec):
    return _keras(spec, crop_to_aspect_ratio=True)


def _pipeline_center_crop(spec):
    import pipeline
    return pipeline.from_directory(
        spec["data_dir"], image_size=tuple(spec["image_size"]), batch_size=spec["batch_size"],
        seed=spec.get("seed"), resize="center_crop", **spec.get("options", {}))


def _plain(spec, ratio: int = 1):
    """Hand-tuned tf.data without the safety machinery (guards off); ``ratio``: libjpeg's
    DCT scale (``decode_jpeg(ratio=)``: 2 decodes at 1/2 size)."""
    import tensorflow as tf
    from pipeline.transform import geometry as transform
    _, _, idx = _index(spec)
    size = tuple(spec["image_size"])

    def load(path, label):
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3, ratio=ratio)
        return transform.resize(img, size), tf.cast(label, tf.int32)

    ds = tf.data.Dataset.from_tensor_slices((idx.paths, idx.labels))
    ds = ds.shuffle(len(idx), seed=spec.get("seed"), reshuffle_each_iteration=True)
    ds = ds.map(load, num_parallel_calls=2 * checks.cpu_count(), deterministic=False)
    ds = ds.batch(spec["batch_size"]).prefetch(2)
    o = tf.data.Options()
    o.autotune.enabled = False
    return ds.with_options(o)


def _plain_ratio2(spec):
    """``_plain`` decoded at libjpeg's 1/2 DCT scale."""
    return _plain(spec, ratio=2)


# --- Pillow-based peers -----------------------------------------------------

def pil_load(path, size):
    """Pillow decode -> RGB -> bilinear resize; uint8 numpy [h, w, 3]."""
    import numpy as np
    from PIL import Image
    with Image.open(path) as im:
        im = im.convert("RGB")
        if im.size != (size[1], size[0]):
            im = im.resize((size[1], size[0]), Image.BILINEAR)
        return np.asarray(im, dtype=np.uint8)


def _generator(spec):
    """fit_generator style: a Python generator loading batches with Pillow, fed
    through ``pipeline.compat.from_keras_generator`` (one thread, under the GIL);
    uint8 like the others."""
    import numpy as np
    from pipeline import compat
    paths, labels, _ = _index(spec)
    size, bs = tuple(spec["image_size"]), spec["batch_size"]
    rng = np.random.RandomState(spec.get("seed") or 0)

    def batches():
        order = rng.permutation(len(paths))
        for s in range(0, len(order), bs):
            rows = order[s:s + bs]
            yield (np.stack([pil_load(paths[r], size) for r in rows]),
                   np.asarray([labels[r] for r in rows], np.int32))
    return compat.from_keras_generator(batches)


def _in_memory(spec):
    import concurrent.futures as cf
    import numpy as np
    import tensorflow as tf

    paths, labels, _ = _index(spec)
    size = tuple(spec["image_size"])
    t0, c0 = time.perf_counter(), time.process_time()
    x = np.empty((len(paths),) + size + (3,), np.uint8)

    def put(i):
        x[i] = pil_load(paths[i], size)

    with cf.ThreadPoolExecutor(checks.cpu_count()) as pool:
        list(pool.map(put, range(len(paths))))
    ds = tf.data.Dataset.from_tensor_slices((x, np.asarray(labels, np.int32)))
    del x
    ds = ds.shuffle(len(paths), seed=spec.get("seed")).batch(spec["batch_size"]).prefetch(2)
    ds.bench_extra = {"load_sec": time.perf_counter() - t0,
                      "load_cpu_sec": time.process_time() - c0}
    return ds


def _decode_limit(spec):
    import tensorflow as tf
    from pipeline.transform import geometry as transform
    paths, labels, _ = _index(spec)
    size = tuple(spec["image_size"])

    def load(path, label):
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return transform.resize(img, size), label

    ds = tf.data.Dataset.from_tensor_slices((paths, labels))
    ds = ds.shuffle(len(paths), seed=spec.get("seed"))
    ds = ds.map(load, num_parallel_calls=1).batch(spec["batch_size"]).prefetch(1)
    o = tf.data.Options()
    o.autotune.enabled = False
    o.threading.private_threadpool_size = 1
    o.threading.max_intra_op_parallelism = 1
    ds = ds.with_options(o)
    ds.bench_extra = {"cores": checks.cpu_count()}
    return ds


bench.register("pipeline", _pipeline, "pipeline.from_directory, resize (eval mode; uint8, guards on)")
bench.register("pipeline_train", _pipeline_train,
               "pipeline.from_directory + Augment(random_resized_crop, horizontal_flip)",
               quality=False)
bench.register("pipeline_train_nofast", _pipeline_train_nofast,
               "pipeline train mode, crop-before-decode off (fast_jpeg=False)",
               precheck=_no_fast_jpeg_switch, quality=False)
bench.register("pipeline_center_crop", _pipeline_center_crop,
               "pipeline, ImageNet eval protocol (resize='center_crop': window decoded only)",
               quality=False)
bench.register("keras", _keras, "keras.utils.image_dataset_from_directory (float32)")
bench.register("keras_crop", _keras_crop,
               "image_dataset_from_directory(crop_to_aspect_ratio=True) (float32)",
               quality=False)
bench.register("keras_aug", _keras_aug,
               "image_dataset_from_directory at 256/224 size + RandomCrop + RandomFlip",
               quality=False)
bench.register("plain", _plain, "hand-tuned tf.data decode_jpeg+resize, guards off")
bench.register("plain_ratio2", _plain_ratio2,
               "plain decoded at libjpeg's 1/2 DCT scale: a check-free reduced decode")
bench.register("generator", _generator,
               "fit_generator style: Python generator (Pillow) via compat.from_keras_generator")
bench.register("in_memory", _in_memory,
               "load everything first: Pillow into one uint8 array, from_tensor_slices")
bench.register("decode_limit", _decode_limit,
               "decode_jpeg+resize on 1 core (x cores = decode limit)")

