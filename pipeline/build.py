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

from typing import Optional

import tensorflow as tf
from absl import logging

from pipeline import config as config_lib
from pipeline import decode as decode_lib
from pipeline import badfiles as errors_lib
from pipeline import index as index_lib
from pipeline import transform

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


# Plan rows travel in chunks of this many; a file whose decoder raised is
# named from its chunk's and the previous chunk's rows, so up to this many
# files in a row can fail and still be named individually.
CHUNK = 64
_SENTINEL = "\x00end-of-epoch"


def _decode_stage(plan, paths_table, decoder, opts, error_log, encode_label, label0):
    """(row, label, pre_error, has_exif) -> (image, label) with the bad-file policy.

    How a decoder exception is attributed to its file without per-element
    exception handling (which costs ~30% here): the plan is cut into chunks
    of ``CHUNK`` rows, each element gets its position in the epoch and the
    rows of its own and the previous chunk (one ``scan`` call per chunk), and
    an end-of-epoch sentinel follows the last element. The parallel decode
    map keeps order; ``ignore_errors`` drops an element whose decoder raised;
    a vectorised check on internal chunks of decoded elements sees the gap in
    positions and looks the missing rows up. Those files are then raised
    (``on_error="raise"``) or recorded and skipped (``"skip"``), with the
    reason diagnosed from their bytes. Besides the parallel map, only one
    function call per ``CHUNK`` elements runs on the consumer thread.
    """
    raise_mode = opts.on_error == "raise"
    image_size = opts.image_size
    K = CHUNK
    ds = plan.concatenate(tf.data.Dataset.from_tensors(
        (tf.constant(-1, tf.int64), label0, tf.constant(_SENTINEL), tf.constant(False))))
    ds = ds.batch(K)

    def remember(state, chunk):
        index, prev = state
        rows, label, pre_error, has_exif = chunk
        b = tf.shape(rows, out_type=tf.int64)[0]
        padded = tf.concat([rows, tf.fill([K - b], tf.constant(-1, tf.int64))], 0)
        window = tf.concat([prev, padded], 0)  # positions (index-1)*K ... (index+1)*K-1
        pos = index * K + tf.range(b)
        windows = tf.tile(window[None], [b, 1])
        return (index + 1, padded), (pos, windows, rows, label, pre_error, has_exif)

    ds = ds.scan((tf.constant(0, tf.int64), tf.fill([K], tf.constant(-1, tf.int64))), remember)
    ds = ds.unbatch()

    def element(pos, window, row, label, pre_error, has_exif):
        path = tf.gather(paths_table, tf.maximum(row, 0))
        image, reason = decoder.load(path, has_exif, pre_error)
        if image_size is not None:
            image = transform.resize(image, image_size, opts.resize, opts.interpolation)
        return image, encode_label(label), pos, window, row, reason

    # Order is kept here (the gap check needs it); `deterministic` applies to
    # the other stages through tf.data.Options.
    ds = ds.map(element, num_parallel_calls=opts.parallelism, deterministic=True)
    ds = ds.ignore_errors()
    # Variable-size (native) images cannot be batched: check them one by one.
    k_check = K if image_size is not None else 1
    ds = ds.batch(k_check)

    def check(last, batch):
        image, y, pos, window, row, reason = batch
        prev = tf.concat([tf.reshape(last, [1]), pos[:-1]], 0)
        missing = pos - prev - 1                       # files lost before each element
        sentinel = tf.equal(reason, _SENTINEL)
        bad = tf.logical_and(tf.strings.length(reason) > 0, tf.logical_not(sentinel))
        keep = tf.logical_not(tf.logical_or(bad, sentinel))
        trouble = tf.reduce_any(missing > 0) | tf.reduce_any(bad)

        def lost_rows():
            """Rows of every missing position in this chunk (-2: out of the window)."""
            q = tf.ragged.range(prev + 1, pos)          # missing positions per element
            i = q.value_rowids()
            qv = q.flat_values
            j = qv - (tf.gather(pos, i) // K - 1) * K
            inside = j >= 0
            rows = tf.gather_nd(window, tf.stack([i, tf.maximum(j, 0)], 1))
            return tf.where(inside, rows, -2), tf.reduce_sum(missing)

        if raise_mode:
            def fail():
                def gap_msg():
                    rows, _ = lost_rows()
                    first = tf.gather(paths_table, tf.maximum(rows[0], 0))
                    contents = tf.io.read_file(first)
                    return tf.strings.join(["pipeline: cannot load file ", first, " (",
                                            decode_lib.diagnose(contents, decode_lib.sniff(contents)),
                                            ")"])

                def bad_msg():
                    i = tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32)
                    return tf.strings.join(["pipeline: cannot load file ",
                                            tf.gather(paths_table, row[i]), " (", reason[i], ")"])

                msg = tf.cond(tf.reduce_any(missing > 0), gap_msg, bad_msg)
                ok = tf.debugging.Assert(False, [msg])
                with tf.control_dependencies([ok]):
                    return tf.identity(keep)
        else:
            def record(rows, count, bad_rows, bad_reasons):  # rare path: bad files only
                rows = rows.numpy().tolist()
                for r in rows:
                    if r >= 0:
                        p = paths_table[r].numpy().decode("utf-8", "replace")
                        error_log.add(p, diagnose_file(p))
                unnamed = int(count) - len([r for r in rows if r >= 0])
                if unnamed:
                    error_log.add(f"<{unnamed} unnamed file(s)>",
                                  "decoder failed; more files in a row failed than "
                                  f"the {K}-file window can name")
                for r, why in zip(bad_rows.numpy().tolist(), bad_reasons.numpy().tolist()):
                    error_log.add(paths_table[r].numpy().decode("utf-8", "replace"),
                                  why.decode("utf-8", "replace"))
                return True

            def fail():
                def lost():
                    return lost_rows()

                rows, count = tf.cond(tf.reduce_any(missing > 0), lost,
                                      lambda: (tf.zeros([0], tf.int64), tf.constant(0, tf.int64)))
                done = tf.py_function(record, [rows, count, tf.boolean_mask(row, bad),
                                               tf.boolean_mask(reason, bad)], tf.bool)
                with tf.control_dependencies([done]):
                    return tf.identity(keep)

        keep = tf.cond(trouble, fail, lambda: keep)
        return pos[-1], tf.cond(tf.reduce_all(keep), lambda: (image, y), lambda: (
            tf.boolean_mask(image, keep), tf.boolean_mask(y, keep)))

    ds = ds.scan(tf.constant(-1, tf.int64), check)
    return ds.unbatch()


def diagnose_file(path: str) -> str:
    """Why a file's decoder failed (reads it again; for the rare bad path)."""
    try:
        contents = tf.io.gfile.GFile(path, "rb").read()
    except Exception as e:  # noqa: BLE001 - any read failure is the reason
        return f"unreadable file ({type(e).__name__}: {e})"
    c = tf.constant(contents)
    return decode_lib.diagnose(c, decode_lib.sniff(c)).numpy().decode()


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
    fmts = {i.format for i in idx.infos if not i.error}
    decoder = decode_lib.Decoder(
        opts.channels, opts.max_pixels, opts.exif_orientation, use_tfio=use_tfio,
        exif_in_graph=exif_in_graph, only_format=fmts.pop() if len(fmts) == 1 else None,
        pre_errors=bool(bad))
    error_log = errors_lib.ErrorLog(n, opts.max_errors)

    labels = idx.labels if has_labels else [0] * n
    label_dtype = tf.int64 if opts.label_mode != "multi_hot" else tf.float32
    paths_table = tf.constant(idx.paths, tf.string)
    ds = tf.data.Dataset.from_tensor_slices((
        tf.range(n, dtype=tf.int64),
        tf.constant(labels, label_dtype),
        tf.constant([i.error for i in idx.infos], tf.string),
        tf.constant([i.has_exif or index_lib.is_remote(i.path) for i in idx.infos], tf.bool),
    ))
    # plan: shard (InputContext) before shuffling, shuffle rows, never pixels.
    ctx = opts.input_context
    if ctx is not None and ctx.num_input_pipelines > 1:
        if n >= ctx.num_input_pipelines:
            ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        else:
            logging.warning("pipeline: %d files < %d input pipelines: every pipeline "
                            "reads all files", n, ctx.num_input_pipelines)
    if opts.shuffle and opts.cache is None:
        ds = ds.shuffle(n, seed=opts.seed, reshuffle_each_iteration=True)
    ds = _decode_stage(ds, paths_table, decoder, opts, error_log,
                       lambda label: (_encode_label(label, opts.label_mode, num_classes)
                                      if has_labels else label),
                       tf.zeros_like(tf.constant(labels[0], label_dtype)))
    if not has_labels:
        ds = ds.map(lambda image, y: image)

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
    if opts.on_error != "raise":
        # The skip recorder is external state; it need not be checkpointed.
        options.experimental_external_state_policy = (
            tf.data.experimental.ExternalStatePolicy.IGNORE)
    ds = ds.with_options(options)

    ds.class_names = list(idx.class_names) if idx.class_names else None
    ds.file_paths = list(idx.paths)
    ds._pipeline_errors = error_log
    ds._pipeline_index = idx
    ds._pipeline_options = opts
    return ds
