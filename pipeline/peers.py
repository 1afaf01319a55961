"""Every peer input pipeline the benchmarks measure, registered as
``pipeline.bench`` candidates (one set, shared by ``python -m pipeline bench``,
``benchmarks/*.py`` and the notebooks).

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
    keras: ``keras.utils.image_dataset_from_directory`` (float32).
    keras_aug: the same loaded at 256/224 of the size, then Keras
        ``RandomCrop`` + ``RandomFlip("horizontal")`` mapped over batches (the
        usual Keras train recipe; Keras 3's RandomCrop uses one window per
        batch, see NOTES.md).
    plain: hand-tuned tf.data (``decode_jpeg`` + resize to uint8, 2x cores
        parallel calls, autotune off) without pipeline's safety machinery.
    tf1_queue: TF1 queue runners (``tf.compat.v1``, graph mode):
        ``slice_input_producer`` -> ``read_file`` -> ``decode_jpeg`` ->
        ``resize_images`` -> ``tf.train.batch(num_threads=cores)``.
        Delivers ``len // batch`` full batches per epoch.
    generator: ``fit_generator`` style, a Python generator decoding batches
        with Pillow, through ``pipeline.compat.from_keras_generator``.
    keras_idg: ``ImageDataGenerator(rescale=1/255).flow_from_directory``.
    pydataset: a ``keras.utils.PyDataset`` decoding with Pillow, ``workers=2``,
        ``use_multiprocessing=False`` (threads: Pillow releases the GIL while
        decoding and resizing, and processes would pickle every batch back),
        read through ``PyDatasetAdapter.get_tf_dataset()``, which is what
        ``Model.fit`` feeds from on the TensorFlow backend.
    in_memory: decode every file first (Pillow, resize, one thread per core)
        into one uint8 array, then ``tf.data.Dataset.from_tensor_slices``
        -> shuffle -> batch -> prefetch. ``load_sec`` / ``load_cpu_sec`` are
        the loading's wall and CPU seconds; ``first_batch_sec``, ``total_sec``
        and ``images_per_sec_incl_build`` include it, the steady-state
        figures (images/s, images per CPU-second) do not.
    torch: ``torch.utils.data.DataLoader`` over a Pillow ``Dataset``
        (``num_workers`` = cores); skipped when torch is not importable.
    decode_limit: in-graph ``decode_jpeg`` + ``pipeline.transform.resize``
        on ONE core (``num_parallel_calls=1``, private thread pool of 1,
        ``max_intra_op_parallelism=1``): its images/s times the cores is the
        machine's decode limit.
"""

from __future__ import annotations

import os
import random
import time

from pipeline import bench
from pipeline import config as config_lib
from pipeline import index as index_lib


def _index(spec):
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
    return "fast_jpeg" in {f.name for f in dataclasses.fields(config_lib.ImageOptions)}


def _no_fast_jpeg_switch():
    if not _fast_jpeg_switch():
        return ("pipeline.config.ImageOptions has no `fast_jpeg` switch "
                "(crop-before-decode cannot be turned off)")
    return None


def _no_torch():
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed here (importlib.util.find_spec('torch') is None)"
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


def _keras(spec):
    import keras
    return keras.utils.image_dataset_from_directory(
        spec["data_dir"], image_size=tuple(spec["image_size"]), batch_size=spec["batch_size"],
        shuffle=True, seed=spec.get("seed"), verbose=False)


def _plain(spec):
    """Hand-tuned tf.data without the safety machinery (guards off)."""
    import tensorflow as tf
    from pipeline import transform
    _, _, idx = _index(spec)
    size = tuple(spec["image_size"])

    def load(path, label):
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return transform.resize(img, size), tf.cast(label, tf.int32)

    ds = tf.data.Dataset.from_tensor_slices((idx.paths, idx.labels))
    ds = ds.shuffle(len(idx), seed=spec.get("seed"), reshuffle_each_iteration=True)
    ds = ds.map(load, num_parallel_calls=2 * config_lib.cpu_count(), deterministic=False)
    ds = ds.batch(spec["batch_size"]).prefetch(2)
    o = tf.data.Options()
    o.autotune.enabled = False
    return ds.with_options(o)


# --- TF1 queue runners ------------------------------------------------------

class QueueRunnerBatches:
    """TF1 queue-runner input (``tf.compat.v1``, graph mode), iterable per epoch.

    ``slice_input_producer(shuffle=True)`` -> ``read_file`` -> ``decode_jpeg``
    -> ``resize_images`` (bilinear, cast to uint8) -> ``tf.train.batch`` with
    ``num_threads`` threads and a ``Coordinator``. One epoch is
    ``len(paths) // batch_size`` full batches (numpy ``(images uint8 [b, size,
    size, 3], labels int32 [b])``).

    Needs graph mode: call ``tf.compat.v1.disable_eager_execution()`` first,
    before any eager op.
    """

    def __init__(self, paths, labels, size, batch_size, num_threads, seed=None):
        import tensorflow as tf
        tf1 = tf.compat.v1
        h, w = (size, size) if isinstance(size, int) else size
        path, label = tf1.train.slice_input_producer(
            [tf.constant(paths), tf.constant(labels, tf.int32)], shuffle=True, seed=seed)
        image = tf.image.decode_jpeg(tf1.read_file(path), channels=3)
        image = tf.cast(tf1.image.resize_images(image, [h, w]), tf.uint8)
        image.set_shape([h, w, 3])
        self.batch = tf1.train.batch([image, label], batch_size=batch_size,
                                     num_threads=num_threads, capacity=4 * batch_size)
        self.steps = len(paths) // batch_size
        self.sess = tf1.Session()
        self.coord = tf1.train.Coordinator()
        self.threads = tf1.train.start_queue_runners(sess=self.sess, coord=self.coord)

    def __iter__(self):
        for _ in range(self.steps):
            yield self.sess.run(self.batch)

    def close(self):
        self.coord.request_stop()
        self.sess.close()


def _tf1_queue(spec):
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    paths, labels, _ = _index(spec)
    if len(paths) < spec["batch_size"]:
        raise ValueError(f"tf1_queue needs at least batch_size files. Received: "
                         f"{len(paths)} files, batch_size={spec['batch_size']}")
    return QueueRunnerBatches(paths, labels, tuple(spec["image_size"]), spec["batch_size"],
                              spec.get("num_threads") or config_lib.cpu_count(),
                              seed=spec.get("seed"))


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


class _Epochs:
    """Re-iterable wrapper: each ``iter()`` runs ``steps`` calls of ``fn``."""

    def __init__(self, fn, steps, on_epoch_end=None):
        self.fn, self.steps, self.on_epoch_end = fn, steps, on_epoch_end

    def __iter__(self):
        for i in range(self.steps):
            yield self.fn(i)
        if self.on_epoch_end:
            self.on_epoch_end()


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


def _keras_idg(spec):
    """``ImageDataGenerator(rescale=1/255).flow_from_directory`` (Keras legacy; Pillow)."""
    import tensorflow as tf
    gen = tf.keras.preprocessing.image.ImageDataGenerator(rescale=1.0 / 255)
    it = gen.flow_from_directory(spec["data_dir"], target_size=tuple(spec["image_size"]),
                                 batch_size=spec["batch_size"], class_mode="sparse",
                                 shuffle=True, seed=spec.get("seed"), interpolation="bilinear")
    return _Epochs(lambda i: it[i], len(it), it.on_epoch_end)


def _pydataset(spec):
    import keras
    import numpy as np
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    paths, labels, _ = _index(spec)
    size, bs = tuple(spec["image_size"]), spec["batch_size"]
    workers = spec.get("pydataset_workers", 2)

    class Photos(keras.utils.PyDataset):
        def __init__(self):
            super().__init__(workers=workers, use_multiprocessing=False, max_queue_size=10)
            self.order = list(range(len(paths)))

        def __len__(self):
            return (len(paths) + bs - 1) // bs

        def __getitem__(self, i):
            ids = self.order[i * bs:(i + 1) * bs]
            x = np.stack([pil_load(paths[j], size) for j in ids])
            return x, np.asarray([labels[j] for j in ids], np.int32)

        def on_epoch_end(self):
            random.shuffle(self.order)

    adapter = PyDatasetAdapter(Photos(), shuffle=False)
    random.seed(spec.get("seed"))

    class Epochs:
        bench_extra = {"workers": workers, "use_multiprocessing": False}

        def __iter__(self):
            adapter.on_epoch_begin()
            yield from adapter.get_tf_dataset()
            adapter.on_epoch_end()

    return Epochs()


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

    with cf.ThreadPoolExecutor(config_lib.cpu_count()) as pool:
        list(pool.map(put, range(len(paths))))
    ds = tf.data.Dataset.from_tensor_slices((x, np.asarray(labels, np.int32)))
    del x
    ds = ds.shuffle(len(paths), seed=spec.get("seed")).batch(spec["batch_size"]).prefetch(2)
    ds.bench_extra = {"load_sec": time.perf_counter() - t0,
                      "load_cpu_sec": time.process_time() - c0}
    return ds


def _torch(spec):
    try:
        import torch  # noqa: F401
        from torch.utils.data import DataLoader, Dataset
    except ImportError as e:
        raise bench.CandidateSkipped(f"torch is not importable here ({e})") from None
    paths, labels, _ = _index(spec)
    size = tuple(spec["image_size"])

    class Photos(Dataset):
        def __len__(self):
            return len(paths)

        def __getitem__(self, i):
            return torch.from_numpy(pil_load(paths[i], size)), int(labels[i])

    g = torch.Generator()
    if spec.get("seed") is not None:
        g.manual_seed(spec["seed"])
    return DataLoader(Photos(), batch_size=spec["batch_size"], shuffle=True, generator=g,
                      num_workers=config_lib.cpu_count(), persistent_workers=True)


def _decode_limit(spec):
    import tensorflow as tf
    from pipeline import transform
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
    ds.bench_extra = {"cores": config_lib.cpu_count()}
    return ds


bench.register("pipeline", _pipeline, "pipeline.from_directory, resize (eval mode; uint8, guards on)")
bench.register("pipeline_train", _pipeline_train,
               "pipeline.from_directory + Augment(random_resized_crop, horizontal_flip)")
bench.register("pipeline_train_nofast", _pipeline_train_nofast,
               "pipeline train mode, crop-before-decode off (fast_jpeg=False)",
               precheck=_no_fast_jpeg_switch)
bench.register("keras", _keras, "keras.utils.image_dataset_from_directory (float32)")
bench.register("keras_aug", _keras_aug,
               "image_dataset_from_directory at 256/224 size + RandomCrop + RandomFlip")
bench.register("plain", _plain, "hand-tuned tf.data decode_jpeg+resize, guards off")
bench.register("tf1_queue", _tf1_queue, "TF1 queue runners (tf.compat.v1), cores threads")
bench.register("generator", _generator,
               "fit_generator style: Python generator (Pillow) via compat.from_keras_generator")
bench.register("keras_idg", _keras_idg,
               "ImageDataGenerator(rescale=1/255).flow_from_directory (Pillow, float32)")
bench.register("pydataset", _pydataset, "keras.utils.PyDataset, Pillow, workers=2 (threads)")
bench.register("in_memory", _in_memory,
               "load everything first: Pillow into one uint8 array, from_tensor_slices")
bench.register("torch", _torch, "torch DataLoader, Pillow, num_workers=cores",
               precheck=_no_torch)
bench.register("decode_limit", _decode_limit,
               "decode_jpeg+resize on 1 core (x cores = decode limit)")


def symlink_tree(src_dir: str, num_files: int, dst: str, num_classes: int = 10) -> str:
    """Fills ``dst`` with ``num_files`` symlinks to the photos of ``src_dir``.

    The photos (found recursively, sorted) are repeated round-robin; links go
    to ``num_classes`` class sub-folders ``class_000`` ... named
    ``img_000000.jpg`` ... (extension of the source). Returns ``dst``.

    Raises:
        ValueError: ``src_dir`` holds no image file.
    """
    exts = (".jpg", ".jpeg", ".png")
    photos = sorted(os.path.join(d, f) for d, _, fs in os.walk(src_dir) for f in fs
                    if f.lower().endswith(exts))
    if not photos:
        raise ValueError(f"no images under src_dir. Received: src_dir={src_dir!r}")
    for c in range(num_classes):
        os.makedirs(os.path.join(dst, f"class_{c:03d}"), exist_ok=True)
    for i in range(num_files):
        src = photos[i % len(photos)]
        name = f"img_{i:06d}{os.path.splitext(src)[1].lower()}"
        os.symlink(src, os.path.join(dst, f"class_{i % num_classes:03d}", name))
    return dst
