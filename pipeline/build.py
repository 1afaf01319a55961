"""Assemble: the one place that builds the tf.data graph from an Index + options.

plan (shard, shuffle *paths*) -> read + decode + resize (parallel map) ->
bad-file policy -> cache -> augment -> batch -> dtype -> prefetch -> options.

Why autotune is off by default: on the 2-core reference machine, any pipeline
with ``tf.data`` autotuning enabled settled, in most epochs, at about 1.25
busy cores (~775 images/s) instead of 2 (~1,300 images/s), even with fixed
``num_parallel_calls`` and a fixed prefetch buffer; with autotuning disabled
and a fixed parallelism of 2x the cores, every epoch used 1.97 cores. See
README "Speed". ``autotune=True`` turns it back on.
"""

from __future__ import annotations

import sys
from typing import Optional

import tensorflow as tf
from absl import logging

from pipeline import config as config_lib
from pipeline import decode as decode_lib
from pipeline import badfiles as errors_lib
from pipeline import index as index_lib
from pipeline import transform

# Name of the skip-mode recorder op; pipeline.resume recognises it as
# checkpoint-safe (it only records, it produces no elements).
SKIP_RECORDER_NAME = "pipeline_skip_recorder"

LABEL_DTYPE = {"int": tf.int32, "categorical": tf.float32, "binary": tf.float32,
               "multi_hot": tf.float32}


def _needs_tfio(idx: index_lib.Index, opts: config_lib.ImageOptions):
    """(use_tfio, exif_in_graph) from what index-time sniffing found."""
    remote = any(index_lib.is_remote(p) for p in idx.paths[:1])
    unknown = any(i.format is None and not i.error for i in idx.infos)
    tfio_fmt = any(i.format in index_lib.TFIO_FORMATS for i in idx.infos)
    exif = opts.exif_orientation and (remote or unknown or any(i.has_exif for i in idx.infos))
    return bool(remote or unknown or tfio_fmt or exif), bool(exif)


def _encode_label(label, mode, num_classes):
    if mode == "int":
        return tf.cast(label, tf.int32)
    if mode == "categorical":
        return tf.one_hot(label, num_classes, dtype=tf.float32)
    if mode == "binary":
        return tf.reshape(tf.cast(label, tf.float32), [1])
    if mode == "multi_hot":
        return label  # already a float multi-hot vector
    raise AssertionError(mode)


def _print_skip(path, reason):
    """Graph-only skip report (tf.data service workers): stderr, returns False."""
    with tf.control_dependencies([tf.print("pipeline: skipped", path, ":", reason,
                                           output_stream=sys.stderr)]):
        return tf.constant(False)


def scale(images, dtype, normalize=None):
    """uint8 images -> ``dtype``: uint8 kept; floats scaled to [0, 1].

    ``normalize``: None ([0, 1]), "symmetric" ([-1, 1]), or (mean, std) per
    channel in [0, 1] units, giving (x / 255 - mean) / std.
    """
    if dtype == tf.uint8:
        return images
    x = tf.cast(images, tf.float32) / 255.0
    if normalize == "symmetric":
        x = x * 2.0 - 1.0
    elif normalize is not None:
        mean, std = normalize
        x = (x - tf.constant(mean, tf.float32)) / tf.constant(std, tf.float32)
    return tf.cast(x, dtype)


def build(idx: index_lib.Index, opts: config_lib.ImageOptions, *,
          num_classes: Optional[int] = None, subset_name: str = "") -> tf.data.Dataset:
    """Builds the dataset for one Index (one subset). See ``from_directory``."""
    n = len(idx)
    if n == 0:
        raise ValueError(
            f"The {subset_name or 'dataset'} subset is empty: no files to read. "
            "Lower `validation_split` or add files. "
            f"Received: subset={subset_name!r}")
    has_labels = idx.labels is not None and opts.label_mode is not None
    if num_classes is None:
        num_classes = len(idx.class_names) if idx.class_names else (
            (max(idx.labels) + 1) if has_labels and idx.labels else 0)
    if has_labels and opts.label_mode == "binary" and num_classes != 2:
        raise ValueError(
            "`label_mode='binary'` needs exactly 2 classes; found "
            f"{num_classes}. Received: label_mode='binary', class_names={idx.class_names!r}")
    bad = idx.bad
    if bad:
        logging.warning("pipeline: %d of %d file(s) are bad at index time (%s ...); "
                        "they are %s when met", len(bad), n,
                        "; ".join(f"{b.path}: {b.error}" for b in bad[:3]),
                        "skipped and recorded" if opts.on_error == "skip" else "raised")
    mism = [i for i in idx.infos if i.ext_mismatch]
    if mism:
        logging.warning("pipeline: %d file(s) whose extension disagrees with their content "
                        "are decoded by content, e.g. %s is %s", len(mism), mism[0].path,
                        mism[0].format)
    use_tfio, exif_in_graph = _needs_tfio(idx, opts)
    decoder = decode_lib.Decoder(opts.channels, opts.max_pixels, opts.exif_orientation,
                                 use_tfio=use_tfio, exif_in_graph=exif_in_graph)
    error_log = errors_lib.ErrorLog(n, opts.max_errors)

    labels = idx.labels if has_labels else [0] * n
    ds = tf.data.Dataset.from_tensor_slices((
        tf.constant(idx.paths, tf.string),
        tf.constant(labels, tf.int64 if opts.label_mode != "multi_hot" else tf.float32),
        tf.constant([i.error for i in idx.infos], tf.string),
        tf.constant([i.has_exif or index_lib.is_remote(i.path) for i in idx.infos], tf.bool),
    ))
    # plan: shard (InputContext) before shuffling, shuffle paths, never pixels.
    ctx = opts.input_context
    if ctx is not None and ctx.num_input_pipelines > 1:
        # One element per file, so sharding the path list *is* element
        # sharding: exactly-once across pipelines in every case.
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        if n < ctx.num_input_pipelines:
            logging.warning("pipeline: %d files < %d input pipelines: elements are "
                            "sharded one per pipeline; input pipeline %d %s", n,
                            ctx.num_input_pipelines, ctx.input_pipeline_id,
                            "gets no elements" if ctx.input_pipeline_id >= n
                            else "gets 1 element")
    if opts.service and opts.processing_mode == "file":
        # tf.data service "file" mode = ShardingPolicy.HINT: the dispatcher
        # fills in (num_workers, worker_index); see pipeline.distribute.
        ds = ds.shard(tf.data.experimental.SHARD_HINT, tf.data.experimental.SHARD_HINT)
    if opts.shuffle and opts.cache is None:
        ds = ds.shuffle(n, seed=opts.seed, reshuffle_each_iteration=True)

    raise_mode = opts.on_error == "raise"
    image_size = opts.image_size

    def element(path, label, pre_error, has_exif):
        image, reason = decoder.load(path, has_exif, pre_error)
        if raise_mode:
            check = tf.debugging.Assert(
                tf.equal(tf.strings.length(reason), 0),
                [tf.strings.join(["pipeline: cannot load file ", path, " (", reason, ")"])])
            with tf.control_dependencies([check]):
                image = tf.identity(image)
        if image_size is not None:
            image = transform.resize(image, image_size, opts.resize, opts.interpolation)
        y = _encode_label(label, opts.label_mode, num_classes) if has_labels else label
        return image, y, path, reason

    ds = ds.map(element, num_parallel_calls=opts.parallelism,
                deterministic=opts.is_deterministic)
    if not raise_mode and opts.service:
        # py_function cannot run on tf.data service workers: graph-only skip,
        # reported on the worker's stderr; pipeline.errors(ds) stays empty.
        if opts.max_errors is not None:
            raise ValueError(
                "`max_errors` cannot be enforced with `service=` (skips happen on the "
                "service workers). Received: max_errors="
                f"{opts.max_errors!r}, service={opts.service!r}")

        def keep_on_worker(image, y, path, reason):
            good = tf.equal(tf.strings.length(reason), 0)
            return tf.cond(good, lambda: tf.constant(True), lambda: _print_skip(path, reason))
        ds = ds.filter(keep_on_worker)
    elif not raise_mode:
        def keep(image, y, path, reason):
            return tf.cond(tf.equal(tf.strings.length(reason), 0),
                           lambda: tf.constant(True),
                           lambda: tf.py_function(error_log._record_tensor,  # rare path
                                                  [path, reason], tf.bool,
                                                  name=SKIP_RECORDER_NAME))
        ds = ds.filter(keep)
    if has_labels:
        ds = ds.map(lambda image, y, path, reason: (image, y))
    else:
        ds = ds.map(lambda image, y, path, reason: image)

    if opts.cache is not None:
        ds = ds.cache("" if opts.cache == "memory" else str(opts.cache))
        if opts.shuffle:
            ds = ds.shuffle(min(n, 1024), seed=opts.seed, reshuffle_each_iteration=True)

    batch_size = opts.batch_size
    if batch_size is not None and ctx is not None:
        batch_size = ctx.get_per_replica_batch_size(batch_size)
    if batch_size is not None:
        ds = ds.batch(batch_size, drop_remainder=opts.drop_remainder)
    if opts.dtype != tf.uint8:
        if has_labels:
            ds = ds.map(lambda x, y: (scale(x, opts.dtype, opts.normalize), y))
        else:
            ds = ds.map(lambda x: scale(x, opts.dtype, opts.normalize))
    if opts.prefetch:
        ds = ds.prefetch(opts.prefetch)

    options = tf.data.Options()
    options.autotune.enabled = bool(opts.autotune)
    options.deterministic = opts.is_deterministic
    # Iterator checkpoints (tf.train.Checkpoint(iterator=it)): the stateful ops
    # in this graph hold no state across elements (the decode fallback's
    # one-element DatasetToSingleElement, the raise-mode Assert, the skip
    # recorder's py_function), so ignoring them is exact; without this, saving
    # fails with "DatasetToSingleElement is stateful".
    options.experimental_external_state_policy = (
        tf.data.experimental.ExternalStatePolicy.IGNORE)
    ds = ds.with_options(options)

    if opts.service:
        from pipeline import distribute as distribute_lib  # pylint: disable=import-outside-toplevel
        ds = ds.apply(distribute_lib.service_transformation(opts))

    ds.class_names = list(idx.class_names) if idx.class_names else None
    ds.file_paths = list(idx.paths)
    ds._pipeline_errors = error_log
    ds._pipeline_index = idx
    return ds
