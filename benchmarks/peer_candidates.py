"""Optional benchmark peers, kept out of the ``pipeline`` package.

They use what a library must not depend on: torch, TF1 queue runners
(``tf.compat.v1.train``), a Keras-private adapter
(``keras.src...PyDatasetAdapter``) and the legacy ``ImageDataGenerator``.
Importing this module registers them with the package's harness
(``pipeline.tools.bench.harness.register``) beside the public-API candidates of
``pipeline.tools.bench.candidates``; the harness records this module's name, and its
subprocess worker puts this folder on ``PYTHONPATH`` to import it again.

    import sys; sys.path.insert(0, "benchmarks")
    import peer_candidates                 # registers tf1_queue, pydataset, ...
    from pipeline.tools.bench import harness as bench
    bench.run_candidates(["pipeline", "tf1_queue"], spec)

Candidates added here:
    tf1_queue: TF1 queue runners (``tf.compat.v1``, graph mode):
        ``slice_input_producer`` -> ``read_file`` -> ``decode_jpeg`` ->
        ``resize_images`` -> ``tf.train.batch(num_threads=cores)``.
        Delivers ``len // batch`` full batches per epoch.
    keras_idg: ``ImageDataGenerator(rescale=1/255).flow_from_directory``
        (Keras legacy, through ``tf.keras``; Pillow, float32).
    pydataset: a ``keras.utils.PyDataset`` decoding with Pillow, ``workers=2``,
        ``use_multiprocessing=False`` (threads: Pillow releases the GIL while
        decoding and resizing, and processes would pickle every batch back),
        read through ``PyDatasetAdapter.get_tf_dataset()``, which is what
        ``Model.fit`` feeds from on the TensorFlow backend.
    torch: ``torch.utils.data.DataLoader`` over a Pillow ``Dataset``
        (``num_workers`` = cores); skipped when torch is not importable.
    dali, dali_train, dali_aa: NVIDIA DALI's CPU pipeline (``device_id=None``,
        ``num_threads`` = cores): ``fn.readers.file`` -> ``fn.decoders.image``
        (eval) or ``fn.decoders.image_random_crop`` (train: area 0.08-1,
        aspect 3/4-4/3, as ``pipeline.Augment``) -> ``fn.resize`` to the
        size (bilinear; ``antialias=False`` as ``tf.image.resize``, except
        ``dali_aa``: DALI's default antialiased resize) -> ``fn.flip`` with a
        coin flip (train). Delivers ``len // batch_size`` full batches per
        epoch (numpy uint8 [b, h, w, 3], int32 [b]); the reader runs on
        across epochs, so no decode is wasted on padding. Skipped when DALI
        is not installed: ``pip install nvidia-dali-cuda120`` (CPU-only use
        needs no GPU; about 0.5 GB of wheels; not a dependency of the package).
    grain: Grain (``pip install grain``; the ``bench`` extra): a ``MapDataset``
        of (path, label) -> ``shuffle`` -> ``map`` (Pillow decode + bilinear
        resize, as ``torch``) -> ``batch`` -> ``repeat``, read through
        ``to_iter_dataset(ReadOptions(num_threads=2))`` and
        ``mp_prefetch(MultiprocessingOptions(num_workers=cores))``: worker
        processes, whose CPU time the harness counts (``bench.cpu_seconds``).
        Skipped when Grain is not installed.

    records, records_train: ``pipeline.from_tfrecords`` on a folder of shards
        (the spec's ``data_dir``), eval mode and train mode (``Augment(
        random_resized_crop=True, horizontal_flip=True)``); for
        ``stored_resolution.py``.

Also here: ``symlink_tree`` (folders of N links to the photos of a folder), for
the scripts of this folder (their shared flags and data folder: ``common_flags.py``).
"""

from __future__ import annotations

import os
import random
import sys

import common_flags  # noqa: F401  (puts the repository on sys.path)
from pipeline.tools.bench import harness as bench  # noqa: E402
from pipeline.tools.bench import candidates as public  # noqa: E402,F401  (registers pipeline, keras, ...)
from pipeline import config as config_lib  # noqa: E402
from pipeline.tools.bench.candidates import pil_load  # noqa: E402


def _index(spec):
    from pipeline.sources import index as index_lib
    idx = index_lib.index_directory(spec["data_dir"])
    return list(idx.paths), list(idx.labels), idx


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


# --- Pillow and Keras legacy peers -----------------------------------------

class _Epochs:
    """Re-iterable wrapper: each ``iter()`` runs ``steps`` calls of ``fn``."""

    def __init__(self, fn, steps, on_epoch_end=None):
        self.fn, self.steps, self.on_epoch_end = fn, steps, on_epoch_end

    def __iter__(self):
        for i in range(self.steps):
            yield self.fn(i)
        if self.on_epoch_end:
            self.on_epoch_end()


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


def _no_torch():
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed here (importlib.util.find_spec('torch') is None)"
    return None


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


# --- pipeline reading TFRecord shards ---------------------------------------

def _records(spec, train=False):
    """``pipeline.from_tfrecords`` on the shards folder ``spec["data_dir"]`` (eval, or
    train mode with ``Augment(random_resized_crop=True, horizontal_flip=True)``)."""
    import pipeline
    kw = dict(spec.get("options", {}))
    if train:
        kw["augment"] = pipeline.Augment(random_resized_crop=True, horizontal_flip=True)
    return pipeline.from_tfrecords(spec["data_dir"], image_size=tuple(spec["image_size"]),
                                   batch_size=spec["batch_size"], seed=spec.get("seed"), **kw)


def _records_train(spec):
    return _records(spec, train=True)


bench.register("records", _records, "pipeline.from_tfrecords (eval mode), data_dir = shards")
bench.register("records_train", _records_train, "pipeline.from_tfrecords + Augment("
               "random_resized_crop, horizontal_flip), data_dir = shards", quality=False)


# --- Grain (google/grain), Pillow decode in worker processes -----------------

GRAIN_MISSING = ("Grain is not installed here (import grain failed); pip install grain "
                 "(or the package's `bench` extra) to run it")


def _no_grain():
    import importlib.util
    return None if importlib.util.find_spec("grain") is not None else GRAIN_MISSING


class GrainBatches:
    """Grain's recommended input: ``MapDataset.source(files).shuffle(seed).map(decode)
    .batch(batch_size).repeat()`` -> ``to_iter_dataset(ReadOptions(num_threads,
    prefetch_buffer_size))`` -> ``mp_prefetch(MultiprocessingOptions(num_workers))``.

    One iterator runs across epochs (its worker processes start once); each
    ``iter()`` yields one epoch: ``ceil(len / batch_size)`` batches (Grain batches
    each epoch apart, the last one partial; ``repeat`` reshuffles each epoch) of
    numpy (uint8 [b, h, w, 3], int32 [b]).
    """

    def __init__(self, paths, labels, size, batch_size, num_workers, num_threads=2,
                 prefetch_batches=4, seed=None):
        import grain
        from pillow_map import grain_load, grain_stack  # no TensorFlow in the workers
        h, w = size
        items = [(p, int(l), h, w) for p, l in zip(paths, labels)]
        ds = (grain.MapDataset.source(items).shuffle(seed=seed or 0).map(grain_load)
              .batch(batch_size, batch_fn=grain_stack).repeat())
        self.steps = -(-len(items) // batch_size)
        it_ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=num_threads,
                                                     prefetch_buffer_size=prefetch_batches))
        if num_workers > 0:
            it_ds = it_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
        self._ds = it_ds
        self._it = None
        self.bench_extra = {"grain_version": _version("grain"), "num_workers": num_workers,
                            "num_threads": num_threads, "prefetch_batches": prefetch_batches}

    def __iter__(self):
        if self._it is None:
            self._it = iter(self._ds)
        for _ in range(self.steps):
            yield next(self._it)


def _version(dist):
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _grain(spec):
    why = _no_grain()
    if why:
        raise bench.CandidateSkipped(why)
    from absl import flags
    if not flags.FLAGS.is_parsed():  # Grain reads its absl flags; this process parsed none
        flags.FLAGS(sys.argv[:1], known_only=True)
    paths, labels, _ = _index(spec)
    return GrainBatches(paths, labels, tuple(spec["image_size"]), spec["batch_size"],
                        spec.get("grain_workers", config_lib.cpu_count()),
                        num_threads=spec.get("grain_threads", 2), seed=spec.get("seed"))


# --- NVIDIA DALI, CPU only ----------------------------------------------------

DALI_MISSING = ("NVIDIA DALI is not installed here (import nvidia.dali failed); "
                "pip install nvidia-dali-cuda120 to run it")


def _no_dali():
    import importlib.util
    try:
        found = importlib.util.find_spec("nvidia.dali") is not None
    except ImportError:  # no `nvidia` namespace package at all
        found = False
    return None if found else DALI_MISSING


class DaliBatches:
    """A DALI CPU pipeline, iterable per epoch: ``len // batch_size`` full
    batches of (uint8 [b, h, w, 3], int32 [b]) numpy arrays.

    ``mode`` "eval": ``fn.decoders.image``; "train":
    ``fn.decoders.image_random_crop`` (area 0.08-1, aspect 3/4-4/3) and a
    random horizontal flip. Both resize to ``size`` (bilinear; antialiased
    only with ``antialias=True``). ``device_id=None``: no GPU is used.

    Raises:
        ValueError: the folder holds fewer than ``batch_size`` files.
    """

    def __init__(self, data_dir, size, batch_size, num_threads, mode="eval", seed=None,
                 antialias=False):
        from nvidia.dali import fn, pipeline_def, types
        h, w = size

        @pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=None,
                      seed=seed)
        def photos():
            jpegs, labels = fn.readers.file(file_root=data_dir, random_shuffle=True,
                                            name="Reader")
            if mode == "train":
                images = fn.decoders.image_random_crop(
                    jpegs, device="cpu", output_type=types.RGB, random_area=[0.08, 1.0],
                    random_aspect_ratio=[3.0 / 4.0, 4.0 / 3.0], num_attempts=10)
            else:
                images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_x=w, resize_y=h, antialias=antialias,
                               interp_type=types.INTERP_LINEAR)
            if mode == "train":
                images = fn.flip(images, horizontal=fn.random.coin_flip())
            return images, labels

        self.pipe = photos()
        self.pipe.build()
        n = self.pipe.epoch_size("Reader")
        if n < batch_size:
            raise ValueError(f"DALI needs at least batch_size files. Received: {n} files, "
                             f"batch_size={batch_size}")
        self.steps = n // batch_size
        self.bench_extra = {"dali_version": _dali_version(), "num_threads": num_threads,
                            "antialias": antialias, "mode": mode}

    def __iter__(self):
        import numpy as np
        for _ in range(self.steps):
            images, labels = self.pipe.run()
            yield images.as_array(), np.asarray(labels.as_array(), np.int32).reshape(-1)


def _dali_version():
    import nvidia.dali
    return nvidia.dali.__version__


def _dali(spec, mode="eval", antialias=False):
    why = _no_dali()
    if why:
        raise bench.CandidateSkipped(why)
    return DaliBatches(spec["data_dir"], tuple(spec["image_size"]), spec["batch_size"],
                       spec.get("num_threads") or config_lib.cpu_count(), mode=mode,
                       seed=spec.get("seed"), antialias=antialias)


def _dali_train(spec):
    return _dali(spec, mode="train")


def _dali_aa(spec):
    return _dali(spec, antialias=True)


bench.register("tf1_queue", _tf1_queue, "TF1 queue runners (tf.compat.v1), cores threads")
bench.register("keras_idg", _keras_idg,
               "ImageDataGenerator(rescale=1/255).flow_from_directory (Pillow, float32)")
bench.register("pydataset", _pydataset, "keras.utils.PyDataset, Pillow, workers=2 (threads)")
bench.register("torch", _torch, "torch DataLoader, Pillow, num_workers=cores",
               precheck=_no_torch)
bench.register("grain", _grain, "Grain MapDataset, Pillow decode + bilinear resize, "
               "mp_prefetch(num_workers=cores), ReadOptions(num_threads=2)",
               precheck=_no_grain)
bench.register("dali", _dali, "NVIDIA DALI CPU pipeline: decoders.image + resize "
               "(bilinear, no antialias), cores threads", precheck=_no_dali)
bench.register("dali_train", _dali_train, "NVIDIA DALI CPU pipeline: decoders.image_random_crop"
               " + resize + flip, cores threads", precheck=_no_dali,
               quality=False)
bench.register("dali_aa", _dali_aa, "NVIDIA DALI CPU pipeline, eval with DALI's default "
               "antialiased resize", precheck=_no_dali)


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
