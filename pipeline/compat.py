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
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from pipeline import sources


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
            default) repeats forever; an int gives that many epochs.

    Args:
        paths: sequence of str, image files (local or URIs).
        labels: sequence of int (or str class names), one per path.
        img_w, img_h: int, output width and height in pixels.
        channels: int, 1, 3 or 4.
        batch_size: int, examples per batch (the last batch may be smaller).
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
    for name, value in (("capacity", capacity), ("num_threads", num_threads),
                        ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be an int >= 1. Received: {name}={value!r}")
    if num_epochs is not None and (isinstance(num_epochs, bool) or not isinstance(
            num_epochs, int) or num_epochs < 1):
        raise ValueError(f"`num_epochs` must be None or an int >= 1. Received: "
                         f"num_epochs={num_epochs!r}")
    base = sources.from_paths(
        paths, labels=labels, image_size=(img_h, img_w), channels=channels,
        batch_size=batch_size, shuffle=shuffle, seed=seed, num_parallel_calls=num_threads,
        prefetch=max(1, capacity // batch_size), label_mode="int")
    ds = base
    if standardize:
        ds = ds.map(lambda x, y: (tf.image.per_image_standardization(x), y))
    ds = ds.repeat(num_epochs) if num_epochs != 1 else ds
    return _copy_attrs(base, ds)


# --- Keras fit_generator-style generators -----------------------------------------

def _spec_of(value) -> tf.TensorSpec:
    arr = np.asarray(value)
    if arr.dtype == object:
        raise ValueError(
            "Generator batches must be numeric arrays, not Python objects. "
            f"Received: dtype={arr.dtype}")
    return tf.TensorSpec(shape=(None,) + arr.shape[1:], dtype=tf.as_dtype(arr.dtype))


def from_keras_generator(generator, output_signature=None,
                         steps: Optional[int] = None) -> tf.data.Dataset:
    """A ``fit_generator``-style source -> ``tf.data.Dataset`` (SLOW compat path).

    A thin wrapper over ``tf.data.Dataset.from_generator`` with an explicit
    ``output_signature``. Every batch is produced by Python under the GIL and
    copied into the graph: use it to migrate, then move the loading into
    ``pipeline.from_directory`` / ``from_paths`` (graph ops, all cores). It
    cannot be checkpointed mid-epoch (``pipeline.IteratorCheckpoint`` refuses
    it) nor run on tf.data service workers.

    ``workers``, ``use_multiprocessing`` and ``max_queue_size`` of
    ``fit_generator`` have no meaning here: ``from_generator`` runs the
    generator in one thread; the result is prefetched by 1 batch.

    Args:
        generator: a callable returning an iterable of ``(x_batch, y_batch)``
            (or ``(x, y, sample_weight)``, or ``x`` alone) -- preferred, as each
            epoch calls it again; an iterator/generator object (consumed once:
            only one epoch); or a ``keras.utils.Sequence`` / ``PyDataset``
            (indexable, with ``len``), iterated in order each epoch.
        output_signature: nested ``tf.TensorSpec`` matching one yield, or None
            to infer it from the first batch (batch dimension left as None).
        steps: int or None, stop after this many batches per epoch (the
            ``steps_per_epoch`` of ``fit_generator``, for endless generators).

    Returns:
        ``tf.data.Dataset`` of the yielded structure, dtypes and shapes as in
        ``output_signature``.

    Raises:
        ValueError: ``generator`` is none of the accepted kinds, ``steps`` < 1,
            or the first batch is not numeric (when inferring).
    """
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"`steps` must be None or an int >= 1. Received: steps={steps!r}")
    peeked = []          # a one-shot iterator keeps the batch read for inference
    one_shot = False
    if hasattr(generator, "__getitem__") and hasattr(generator, "__len__"):
        seq = generator

        def make():
            for i in range(len(seq)):
                yield seq[i]
            if hasattr(seq, "on_epoch_end"):
                seq.on_epoch_end()
    elif callable(generator) and not inspect.isgenerator(generator):
        make = generator
    elif hasattr(generator, "__next__"):
        it = generator
        one_shot = True

        def make():
            return itertools.chain(peeked, it)
    else:
        raise ValueError(
            "`generator` must be a callable returning an iterable, a generator, or a "
            f"keras Sequence/PyDataset. Received: generator={type(generator).__name__}")

    if output_signature is None:
        first = next(iter(make()))
        output_signature = tf.nest.map_structure(_spec_of, tuple(first) if isinstance(
            first, list) else first)
        if one_shot:
            peeked.append(first)
    if isinstance(output_signature, list):
        output_signature = tuple(output_signature)

    def gen():
        batches = make()
        if steps is not None:
            batches = itertools.islice(batches, steps)
        for batch in batches:
            yield tuple(batch) if isinstance(batch, list) else batch

    ds = tf.data.Dataset.from_generator(gen, output_signature=output_signature)
    return ds.prefetch(1)


# --- ImageDataGenerator.flow_from_directory ----------------------------------------

_COLOR_MODES = {"grayscale": 1, "rgb": 3, "rgba": 4}
_CLASS_MODES = {"categorical": "categorical", "binary": "binary", "sparse": "int",
                "input": None, None: None}
_INTERPOLATIONS = {"nearest": "nearest", "bilinear": "bilinear", "bicubic": "bicubic",
                   "lanczos": "lanczos3", "area": "area"}
# ImageDataGenerator constructor options (augmentation and statistics) that
# have no equivalent in pipeline.from_directory.
_NO_EQUIVALENT = (
    "featurewise_center", "samplewise_center", "featurewise_std_normalization",
    "samplewise_std_normalization", "zca_whitening", "zca_epsilon", "rotation_range",
    "width_shift_range", "height_shift_range", "brightness_range", "shear_range",
    "zoom_range", "channel_shift_range", "fill_mode", "cval", "horizontal_flip",
    "vertical_flip", "preprocessing_function", "data_format", "save_to_dir",
    "save_prefix", "save_format")


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
        validation_split (an ``ImageDataGenerator`` option) + subset ->
            validation_split + subset ("training" / "validation").
        rescale None -> uint8 images with values 0-255 (Keras gives float32 with
            the same values; cast if your model needs it); rescale=1/255 ->
            dtype float32 in [0, 1]. Other values: ValueError.

    Options with no equivalent raise ``ValueError``: the augmentation and
    statistics options of ``ImageDataGenerator`` (rotation_range, zoom_range,
    horizontal_flip, featurewise_center, zca_whitening, preprocessing_function,
    ...) and save_to_dir / save_prefix / save_format. Random augmentation
    belongs in ``pipeline.Augment`` (where available) or Keras preprocessing
    layers in the model.

    Returns:
        ``tf.data.Dataset`` of ``(images, labels)`` (see ``from_directory``);
        one pass is one epoch (unlike the endless Keras iterator, so
        ``steps_per_epoch`` is not needed).

    Raises:
        ValueError: an option without equivalent, or a bad value, naming it.
    """
    for name in sorted(generator_options):
        if name in _NO_EQUIVALENT:
            raise ValueError(
                f"`{name}` has no equivalent in pipeline.from_directory (augmentation, "
                "dataset statistics and saving are not done by the loader). Use "
                "pipeline.Augment where available or Keras preprocessing layers. "
                f"Received: {name}={generator_options[name]!r}")
        raise ValueError(
            f"Unknown flow_from_directory / ImageDataGenerator option `{name}`. "
            f"Received: {name}={generator_options[name]!r}")
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
    labels = None if class_mode in ("input", None) else "inferred"
    ds = sources.from_directory(
        directory, labels=labels, class_names=classes, follow_links=follow_links,
        label_mode=_CLASS_MODES[class_mode], channels=_COLOR_MODES[color_mode],
        image_size=tuple(target_size), resize="crop" if keep_aspect_ratio else "stretch",
        interpolation=_INTERPOLATIONS[interpolation], batch_size=batch_size,
        shuffle=shuffle, seed=seed, validation_split=validation_split, subset=subset,
        dtype=dtype)
    if class_mode == "input":
        return _copy_attrs(ds, ds.map(lambda x: (x, x)))
    return ds
