"""Migration helpers: TF1 queue runners and Keras ``fit_generator`` users -> ``pipeline``.

Three drop-ins, each a thin mapping onto the ``pipeline`` factories (see
``docs/migrating.md`` for the full table):

* ``get_batch(...)``: the classic queue-runner ``get_batch(paths, labels,
  img_w, img_h, channels, batch_size, capacity, num_threads)``
  (``slice_input_producer`` -> ``read_file`` -> ``decode_jpeg`` -> resize ->
  ``tf.train.batch``) as a ``tf.data`` dataset built by ``pipeline.from_paths``.
* ``from_keras_generator(gen)``: a ``fit_generator``-style generator of
  ``(x_batch, y_batch)`` -> ``tf.data``. The SLOW compat path: every batch
  crosses the Python boundary (``tf.data.Dataset.from_generator``), under the
  GIL, and it cannot be checkpointed or run on tf.data service workers.
* ``flow_from_directory(...)``: ``ImageDataGenerator().flow_from_directory``
  arguments mapped onto ``pipeline.from_directory``; options without an
  equivalent raise ``ValueError`` naming them.
"""

from __future__ import annotations

import inspect
import itertools
import warnings
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from pipeline import config
from pipeline.sources import index as index_lib
from pipeline.deliver import plan
from pipeline.sources import factories as sources


def _copy_attrs(src, dst):
    for name in ("class_names", "file_paths", "pipeline_built"):
        if hasattr(src, name):
            setattr(dst, name, getattr(src, name))
    return dst


# --- TF1 queue runners -----------------------------------------------------------

def get_batch(paths: Sequence[str], labels: Sequence[Any], img_w: int, img_h: int,
              channels: int, batch_size: int, capacity: int, num_threads: int = 1,
              shuffle: bool = True, num_epochs: Optional[int] = None,
              standardize: bool = False, seed: Optional[int] = None) -> tf.data.Dataset:
    """Drop-in for the queue-runner ``get_batch``, as a ``tf.data`` dataset.

    The TF1 original (graph mode)::

        image, label = tf.train.slice_input_producer([paths, labels])
        image = tf.image.decode_jpeg(tf.read_file(image), channels=channels)
        image = tf.image.resize_images(image, [img_h, img_w])
        image_batch, label_batch = tf.train.batch([image, label], batch_size,
                                                  num_threads=num_threads,
                                                  capacity=capacity)
        # + tf.train.Coordinator() and tf.train.start_queue_runners(sess, coord)

    Mapping:
        paths, labels -> ``pipeline.from_paths(paths, labels=labels)`` (int
            labels, or str names indexed by sorted unique names).
        img_w, img_h -> ``image_size=(img_h, img_w)`` (note the order), resized
            by stretching ("bilinear"), as ``tf.image.resize_images``.
        channels -> ``channels`` (1, 3 or 4; any format, not only JPEG).
        capacity -> the queue's role was to keep decoded examples ready and (in
            ``shuffle_batch``) to shuffle within ``capacity`` examples. Here the
            *whole path list* is reshuffled each epoch (a better shuffle, no
            memory cost), and ``capacity`` sets the prefetch depth:
            ``prefetch = max(1, capacity // batch_size)`` batches.
        num_threads -> ``num_parallel_calls`` of the decode map.
        Coordinator / start_queue_runners -> nothing: iterate the dataset.
        num_epochs -> ``slice_input_producer(num_epochs=)``: None (the queue
            default) repeats forever; an int gives that many epochs. As with
            the queue, elements are repeated *before* batching: batches run
            across epoch boundaries, so with None every batch is full (static
            batch dimension ``batch_size``, as ``tf.train.batch`` gave); with
            an int only the last batch of the last epoch may be short (TF1
            dropped it unless ``allow_smaller_final_batch=True``).

    Args:
        paths: sequence of str, image files (local or URIs).
        labels: sequence of int (or str class names), one per path.
        img_w, img_h: int, output width and height in pixels.
        channels: int, 1, 3 or 4.
        batch_size: int, examples per batch (always full with
            ``num_epochs=None``).
        capacity: int >= 1, the queue capacity in examples.
        num_threads: int >= 1, parallel decode calls.
        shuffle: bool, reshuffle the paths every epoch (default True, as
            ``slice_input_producer``).
        num_epochs: None (repeat forever) or int >= 1.
        standardize: bool, apply ``tf.image.per_image_standardization`` (the
            classic tutorial's last step): float32, zero mean, unit variance
            per image. Default False: uint8 images in [0, 255].
        seed: int or None.

    Returns:
        ``tf.data.Dataset`` of ``(images, labels)``: images ``[batch, img_h,
        img_w, channels]`` uint8 (float32 with ``standardize``), labels
        ``[batch]`` int32. Attributes ``class_names`` and ``file_paths`` as
        ``from_paths``.

    Raises:
        ValueError: a bad argument, naming it and the value received.
    """
    _check_queue_args(capacity, num_threads, batch_size, num_epochs)
    base = sources.from_paths(
        paths, labels=labels, image_size=(img_h, img_w), channels=channels,
        batch_size=None, shuffle=shuffle, seed=seed, num_parallel_calls=num_threads,
        label_mode="int")
    # Repeat *before* batching, as the queue did: batches run across epoch
    # boundaries, so with num_epochs=None every batch is full (and its static
    # shape says so); with an int only the very last batch may be short.
    standardized = plan.Map(lambda x, y: (tf.image.per_image_standardization(x), y),
                            num_threads) if standardize else None
    ds = plan.order(lambda _: (base, None), map=standardized, repeat=num_epochs,
                    batch_size=batch_size, drop_remainder=num_epochs is None,
                    prefetch=max(1, capacity // batch_size))
    return _copy_attrs(base, ds)


def _check_queue_args(capacity, num_threads, batch_size, num_epochs) -> None:
    """Raises ValueError for ``get_batch``'s counts: not ints >= 1 (``num_epochs``: or None)."""
    for name, value in (("capacity", capacity), ("num_threads", num_threads),
                        ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be an int >= 1. Received: {name}={value!r}")
    if num_epochs is not None and (isinstance(num_epochs, bool) or not isinstance(
            num_epochs, int) or num_epochs < 1):
        raise ValueError(f"`num_epochs` must be None or an int >= 1. Received: "
                         f"num_epochs={num_epochs!r}")


# --- Keras fit_generator-style generators -----------------------------------------

def _spec_of(value) -> tf.TensorSpec:
    arr = np.asarray(value)
    if arr.dtype == object:
        raise ValueError(
            "Generator batches must be numeric arrays, not Python objects. "
            f"Received: dtype={arr.dtype}")
    return tf.TensorSpec(shape=(None,) + arr.shape[1:], dtype=tf.as_dtype(arr.dtype))


def from_keras_generator(generator, output_signature=None,
                         steps: Optional[int] = None, shuffle: bool = False,
                         seed: Optional[int] = None) -> tf.data.Dataset:
    """A ``fit_generator``-style source -> ``tf.data.Dataset`` (SLOW compat path).

    A thin wrapper over ``tf.data.Dataset.from_generator`` with an explicit
    ``output_signature``. Every batch is produced by Python under the GIL and
    copied into the graph: use it to migrate, then move the loading into
    ``pipeline.from_directory`` / ``from_paths`` (graph ops, all cores). It
    cannot be checkpointed mid-epoch (``pipeline.IteratorCheckpoint`` refuses
    it) nor run on tf.data service workers.

    One pass over the returned dataset is one epoch, and successive passes
    feed exactly the batches ``model.fit(generator, steps_per_epoch=steps)``
    feeds in successive epochs (Keras 3's ``EpochIterator``, checked against
    Keras in the tests):

    * a generator or iterator object: one shared stream; with ``steps`` each
      epoch takes the next ``steps`` batches (epochs of 3 over 0-8 give
      ``[0,1,2], [3,4,5], [6,7,8]``); the batch read to infer the signature
      is fed first, once. Without ``steps`` the first epoch takes everything
      and later ones are empty. When the stream runs out mid-epoch the epoch
      is short and a ``UserWarning`` says so, as Keras warns.
    * a ``keras.utils.PyDataset`` / ``keras.utils.Sequence`` (or any object
      with ``__getitem__`` and ``__len__``): batch indices continue from
      epoch to epoch (``steps`` < ``len``: ``[0,1,2], [3,4,5], ...``); an
      epoch stops at the end of the sequence (shorter, as Keras) and the next
      starts again at index 0. Without ``steps`` every epoch is indices
      ``0 .. len-1``. ``on_epoch_begin()`` is called before an epoch's first
      ``__getitem__`` and ``on_epoch_end()`` after its last, once per epoch.
      (Keras also calls ``on_epoch_end()`` once when ``fit`` starts, and its
      prefetching may read the next epoch's first batch before calling it;
      here the order is strict.) A ``PyDataset`` whose ``num_batches`` is None
      is endless: indices count on forever and ``steps`` is needed.
    * a callable (preferred for plain generator functions): each epoch calls
      it again, taking its first ``steps`` batches.

    ``workers``, ``use_multiprocessing`` and ``max_queue_size`` (of
    ``fit_generator`` or a ``PyDataset``) have no meaning here:
    ``from_generator`` runs the source in one thread; the result is prefetched
    by 1 batch.

    Args:
        generator: a callable returning an iterable of ``(x_batch, y_batch)``
            (or ``(x, y, sample_weight)``, or ``x`` alone); an iterator or
            generator object; or a ``keras.utils.Sequence`` / ``PyDataset``
            (indexable, with ``len``).
        output_signature: nested ``tf.TensorSpec`` matching one yield, or None
            to infer it from the first batch (batch dimension left as None;
            for a sequence this reads ``generator[0]`` once more, as Keras
            does).
        steps: int or None, batches per epoch (the ``steps_per_epoch`` of
            ``fit`` / ``fit_generator``).
        shuffle: bool, for a sequence only: visit the batch indices of each
            pass over it in a random order, as ``model.fit(pydataset,
            shuffle=True)`` (Keras' default) does. Default False: in order, as
            ``model.fit(..., shuffle=False)``.
        seed: int in [0, 2**63) or None: that order's seed (``config.numpy_random_state``).

    Returns:
        ``tf.data.Dataset`` of the yielded structure, dtypes and shapes as in
        ``output_signature``.

    Raises:
        ValueError: ``generator`` is none of the accepted kinds, ``steps`` < 1,
            ``shuffle`` with a source that is not a finite sequence, an endless
            ``PyDataset`` without ``steps``, a sequence's ``seed`` outside
            [0, 2**63), or the first batch is not numeric (when inferring).
    """
    make, first = _epochs(generator, steps, shuffle, seed)
    if output_signature is None:
        output_signature = tf.nest.map_structure(_spec_of, _as_tuple(first()))
    output_signature = _as_tuple(output_signature)

    def gen():
        for batch in make():
            yield _as_tuple(batch)

    return plan.order(lambda _: (tf.data.Dataset.from_generator(
        gen, output_signature=output_signature), None), prefetch=1)


def _as_tuple(batch):
    """A list (a batch's parts, or a signature) as a tuple; anything else as it is."""
    return tuple(batch) if isinstance(batch, list) else batch


def _epochs(generator, steps, shuffle, seed):
    """(``make()``: an iterable of one epoch's batches, ``first()``: the first batch)
    for the kind of ``generator`` (see ``from_keras_generator``)."""
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"`steps` must be None or an int >= 1. Received: steps={steps!r}")
    if not isinstance(shuffle, bool):
        raise ValueError(f"`shuffle` must be a bool. Received: shuffle={shuffle!r}")
    if hasattr(generator, "__getitem__") and (hasattr(generator, "__len__")
                                              or hasattr(generator, "num_batches")):
        return _sequence_epochs(generator, steps, shuffle, seed)
    if shuffle:
        raise ValueError(
            "`shuffle=True` applies to a keras Sequence/PyDataset only (a generator "
            "is expected to yield shuffled data, as in Keras). Received: "
            f"shuffle=True with generator={type(generator).__name__}")
    if callable(generator) and not inspect.isgenerator(generator):
        def make():
            batches = generator()
            return batches if steps is None else itertools.islice(batches, steps)

        def first():
            return next(iter(generator()))
        return make, first
    if hasattr(generator, "__next__"):
        return _stream_epochs(generator, steps)
    raise ValueError(
        "`generator` must be a callable returning an iterable, a generator, or a "
        f"keras Sequence/PyDataset. Received: generator={type(generator).__name__}")


def _ran_out_warning(kind: str, steps: int, got: int) -> None:
    warnings.warn(
        f"from_keras_generator: the {kind} ran out of data after {got} of steps={steps} "
        "batches in this epoch (Keras warns 'Your input ran out of data' and cuts the "
        "epoch short the same way). Make sure it can give steps * epochs batches.",
        stacklevel=3)


def _stream_epochs(it, steps):
    """Epochs over one shared iterator; the batch peeked for the signature is
    fed first, once."""
    peeked = []

    def first():
        if not peeked:
            peeked.append(next(it))
        return peeked[0]

    def make():
        got = 0
        while steps is None or got < steps:
            if peeked:
                batch = peeked.pop()
            else:
                try:
                    batch = next(it)
                except StopIteration:
                    if steps is not None and got:
                        _ran_out_warning("generator", steps, got)
                    return
            got += 1
            yield batch

    return make, first


def _sequence_epochs(seq, steps, shuffle, seed):
    """Epochs over a Sequence/PyDataset as Keras 3's EpochIterator walks one:
    with ``steps``, one pass over the indices is spread over several epochs
    (a new pass starts when the last index was read); without, each epoch is
    one pass."""
    # A PyDataset says its length in ``num_batches`` (None: endless); a plain
    # Sequence-like object in ``len``.
    n = seq.num_batches if hasattr(type(seq), "num_batches") else len(seq)
    if n is None and steps is None:
        raise ValueError("An endless PyDataset (num_batches=None) needs `steps`. "
                         f"Received: steps=None with generator={type(seq).__name__}")
    if n is None and shuffle:
        raise ValueError("`shuffle=True` needs a PyDataset of known length. Received: "
                         f"num_batches=None with generator={type(seq).__name__}")
    rng = config.numpy_random_state(config.check_seed(seed))
    state = {"pos": 0, "order": None}

    def index(pos):
        if n is None or not shuffle:
            return pos
        if state["order"] is None:
            state["order"] = rng.permutation(n)
        return int(state["order"][pos])

    def make():
        if steps is None:
            state["pos"], state["order"] = 0, None
        if hasattr(seq, "on_epoch_begin"):
            seq.on_epoch_begin()
        for got in range(steps if steps is not None else n):
            if n is not None and state["pos"] >= n:
                _ran_out_warning("sequence", steps, got)
                break
            batch = seq[index(state["pos"])]
            state["pos"] += 1
            yield batch
        if n is not None and state["pos"] >= n:   # the pass is over: next epoch restarts
            state["pos"], state["order"] = 0, None
        if hasattr(seq, "on_epoch_end"):
            seq.on_epoch_end()

    return make, lambda: seq[0]


# --- ImageDataGenerator.flow_from_directory ----------------------------------------

_COLOR_MODES = {"grayscale": 1, "rgb": 3, "rgba": 4}
_CLASS_MODES = {"categorical": "categorical", "binary": "binary", "sparse": "int",
                "input": None, None: None}
_INTERPOLATIONS = {"nearest": "nearest", "bilinear": "bilinear", "bicubic": "bicubic",
                   "lanczos": "lanczos3", "area": "area"}
# ImageDataGenerator constructor options that the loader does not do.
# Augmentation: ``pipeline.Augment.from_image_data_generator`` maps these.
_AUGMENTATION = (
    "rotation_range", "width_shift_range", "height_shift_range", "brightness_range",
    "shear_range", "zoom_range", "channel_shift_range", "fill_mode", "cval",
    "horizontal_flip", "vertical_flip", "interpolation_order")
# No equivalent anywhere in pipeline (dataset statistics, Python per image, saving).
_NO_EQUIVALENT = (
    "featurewise_center", "samplewise_center", "featurewise_std_normalization",
    "samplewise_std_normalization", "zca_whitening", "zca_epsilon",
    "preprocessing_function", "data_format", "save_to_dir", "save_prefix", "save_format")


def _refuse_options(options: dict) -> None:
    """One ValueError naming every option given that the loader does not take."""
    if not options:
        return
    aug = [k for k in sorted(options) if k in _AUGMENTATION]
    none = [k for k in sorted(options) if k in _NO_EQUIVALENT]
    unknown = [k for k in sorted(options) if k not in _AUGMENTATION + _NO_EQUIVALENT]
    parts = []
    if aug:
        call = ", ".join(f"{k}={options[k]!r}" for k in aug)
        parts.append(
            f"augmentation option(s) {aug} are not done by the loader: map them with "
            f"aug = pipeline.Augment.from_image_data_generator({call}) and pass "
            "augment=aug, **aug.factory_options to pipeline.from_directory (or use Keras "
            "preprocessing layers in the model)")
    if none:
        parts.append(f"option(s) {none} have no equivalent in pipeline (dataset "
                     "statistics, Python per image and saving are not done by the loader; "
                     "see docs/migrating.md)")
    if unknown:
        parts.append(f"{unknown} are not flow_from_directory / ImageDataGenerator options")
    received = ", ".join(f"{k}={options[k]!r}" for k in sorted(options))
    raise ValueError("compat.flow_from_directory: " + "; ".join(parts) +
                     f". Received: {received}")


def keras_split(labels: Sequence[int], paths: Sequence[str], validation_split: float):
    """The rows of (training, validation), split per class as Keras'
    ``ImageDataGenerator(validation_split=v).flow_from_directory`` does.

    Keras' legacy ``DirectoryIterator`` lists each class folder in sorted order
    (folder by folder, files sorted within each) and takes, per class of n
    files, the first ``int(v * n)`` as ``subset="validation"`` and the rest as
    ``subset="training"``; no seed, no shuffling. So a class of one file is
    always training (one image per class gives all/none).

    Args:
        labels: the class index of each path.
        paths: the file paths (to order each class as Keras does).
        validation_split: float in [0, 1).

    Returns:
        (training rows, validation rows): lists of indices into ``paths``, in
        Keras' order (class by class).
    """
    import os
    by_class = {}
    for row, label in enumerate(labels):
        by_class.setdefault(label, []).append(row)
    train, val = [], []
    for label in sorted(by_class):
        rows = sorted(by_class[label], key=lambda r: (os.path.dirname(paths[r]),
                                                      os.path.basename(paths[r])))
        n_val = int(validation_split * len(rows))
        val += rows[:n_val]
        train += rows[n_val:]
    return train, val


def flow_from_directory(directory, target_size=(256, 256), color_mode="rgb", classes=None,
                        class_mode="categorical", batch_size=32, shuffle=True, seed=None,
                        interpolation="nearest", follow_links=False, subset=None,
                        validation_split=None, keep_aspect_ratio=False, rescale=None,
                        **generator_options) -> tf.data.Dataset:
    """``ImageDataGenerator(...).flow_from_directory(...)`` -> ``pipeline.from_directory``.

    Mapping (``flow_from_directory`` / ``ImageDataGenerator`` -> ``from_directory``):
        target_size -> image_size (height, width).
        color_mode "grayscale" / "rgb" / "rgba" -> channels 1 / 3 / 4.
        classes -> class_names.
        class_mode "categorical" / "binary" / "sparse" / None -> label_mode
            "categorical" / "binary" / "int" / None; "input" -> no labels and
            elements ``(images, images)`` (autoencoders).
        batch_size, shuffle, seed, follow_links -> same names.
        interpolation "nearest" / "bilinear" / "bicubic" / "lanczos" / "area"
            -> "nearest" / "bilinear" / "bicubic" / "lanczos3" / "area".
            ("box" and "hamming" are PIL filters without a tf.image
            equivalent: ValueError.)
        keep_aspect_ratio=True -> resize="crop" (center crop to the target
            aspect, then resize; Keras does the same).
        validation_split (an ``ImageDataGenerator`` option) + subset
            ("training" / "validation"; "both" gives the pair): split per
            class exactly as Keras does (``keras_split``): in each class
            folder, sorted, the first ``int(validation_split * n)`` files are
            validation and the rest training, with no seed. Without
            ``subset``, ``validation_split`` is ignored (every file), as in
            Keras. An empty subset (e.g. validation with one file per class)
            is an empty dataset, as Keras' iterator of 0 images.
            (``pipeline.from_directory(validation_split=...)`` splits the
            whole list at random by ``seed`` instead.)
        rescale None -> uint8 images with values 0-255 (Keras gives float32 with
            the same values; cast if your model needs it); rescale=1/255 ->
            dtype float32 in [0, 1]. Other values: ValueError.

    Options the loader does not take raise one ``ValueError`` that names every
    one given: the augmentation options of ``ImageDataGenerator``
    (rotation_range, zoom_range, horizontal_flip, ...; the message shows the
    ``pipeline.Augment.from_image_data_generator(...)`` call that maps them),
    the statistics options (featurewise_center, zca_whitening, ...),
    preprocessing_function and save_to_dir / save_prefix / save_format.

    Returns:
        ``tf.data.Dataset`` of ``(images, labels)`` (see ``from_directory``);
        one pass is one epoch (unlike the endless Keras iterator, so
        ``steps_per_epoch`` is not needed).

    Raises:
        ValueError: an option without equivalent, or a bad value, naming it.
    """
    _refuse_options(generator_options)
    common = _flow_options(target_size, color_mode, class_mode, batch_size, shuffle, seed,
                           interpolation, keep_aspect_ratio, rescale)
    if subset is None:
        # Keras ignores validation_split without a subset: every file.
        labels = None if class_mode in ("input", None) else "inferred"
        ds = sources.from_directory(directory, labels=labels, class_names=classes,
                                    follow_links=follow_links, **common)
        return _autoencoder(ds) if class_mode == "input" else ds
    return _keras_subset(directory, subset, validation_split, classes, follow_links,
                         class_mode, common)


def _flow_options(target_size, color_mode, class_mode, batch_size, shuffle, seed,
                  interpolation, keep_aspect_ratio, rescale) -> dict:
    """The ``from_directory`` options of ``flow_from_directory``'s arguments (checked)."""
    if color_mode not in _COLOR_MODES:
        raise ValueError(f"`color_mode` must be one of {list(_COLOR_MODES)}. "
                         f"Received: color_mode={color_mode!r}")
    if class_mode not in _CLASS_MODES:
        raise ValueError(f"`class_mode` must be one of {list(_CLASS_MODES)}. "
                         f"Received: class_mode={class_mode!r}")
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(
            f"`interpolation` must be one of {list(_INTERPOLATIONS)} (PIL's 'box' and "
            "'hamming' have no tf.image equivalent). "
            f"Received: interpolation={interpolation!r}")
    if rescale is None:
        dtype = tf.uint8
    elif abs(float(rescale) - 1.0 / 255.0) < 1e-9:
        dtype = tf.float32
    else:
        raise ValueError("`rescale` must be None (0-255) or 1/255 ([0, 1]); other scales "
                         "belong in the model (keras.layers.Rescaling). "
                         f"Received: rescale={rescale!r}")
    return dict(label_mode=_CLASS_MODES[class_mode], channels=_COLOR_MODES[color_mode],
                image_size=tuple(target_size),
                resize="crop" if keep_aspect_ratio else "stretch",
                interpolation=_INTERPOLATIONS[interpolation], batch_size=batch_size,
                shuffle=shuffle, seed=seed, dtype=dtype)


def _keras_subset(directory, subset, validation_split, classes, follow_links, class_mode,
                  common):
    """``flow_from_directory``'s ``subset`` of the folder, split per class as Keras
    (``keras_split``); "both" gives (training, validation)."""
    if subset not in ("training", "validation", "both"):
        raise ValueError("`subset` must be 'training', 'validation', 'both' or None. "
                         f"Received: subset={subset!r}")
    split = 0.0 if validation_split is None else validation_split
    if isinstance(split, bool) or not isinstance(split, (int, float)) or not 0 <= split < 1:
        raise ValueError("`validation_split` must be a float in [0, 1). "
                         f"Received: validation_split={validation_split!r}")
    idx = index_lib.index_directory(directory, "inferred", classes, follow_links)
    train_rows, val_rows = keras_split(idx.labels, idx.paths, split)

    def make(rows):
        if not rows:  # Keras gives an iterator of 0 images: an empty dataset
            full = make(train_rows or val_rows)
            ds = _copy_attrs(full, full.take(0))
            ds.file_paths = []
            return ds
        labels = None if class_mode in ("input", None) else [idx.labels[r] for r in rows]
        ds = sources.from_paths([idx.paths[r] for r in rows], labels=labels,
                                class_names=idx.class_names if labels is not None else None,
                                **common)
        if labels is None:
            ds.class_names = idx.class_names
        return _autoencoder(ds) if class_mode == "input" else ds

    if subset == "training":
        return make(train_rows)
    if subset == "validation":
        return make(val_rows)
    return make(train_rows), make(val_rows)


def _autoencoder(ds):
    return _copy_attrs(ds, ds.map(lambda x: (x, x)))
