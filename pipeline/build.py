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

import dataclasses
import os
import sys
from typing import Callable, Dict, List, Optional

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

# Every function handed to tf.data here uses explicit tf.cond / switch_case,
# never Python control flow on tensors, so AutoGraph's source conversion is
# skipped: it took ~2.5 s of the first dataset's build (measured with
# cProfile), for no change in the graph.
graph_fn = tf.autograph.experimental.do_not_convert

LABEL_DTYPE = {"int": tf.int32, "categorical": tf.float32, "binary": tf.float32,
               "multi_hot": tf.float32, "float": tf.float32}


@dataclasses.dataclass
class Records:
    """Encoded images already read (TFRecord shards): ``build`` decodes from bytes.

    The one switch of ``build``: with ``records``, its input is this dataset of
    encoded bytes instead of the Index's paths; everything after reading
    (guarded decode, resize, bad-file policy, cache, batch, dtype, prefetch,
    options) is the same graph.

    Attributes:
        dataset: elements ``(contents, label, pre_error, has_exif, path)``,
            plus ``weight`` (float32) when the Index has weights; already
            sharded and shuffled by the caller (files, then a bounded buffer).
        num_examples: int, examples in one epoch.
        formats: dict, sniffed format name (None = unknown) -> count.
        has_exif: bool, some JPEG carries EXIF.
        file_paths: list of str, the image paths when known.
    """
    dataset: tf.data.Dataset
    num_examples: int
    formats: Dict[Optional[str], int]
    has_exif: bool
    file_paths: Optional[List[str]] = None
    expected: Optional[int] = None  # records per epoch when exactly known
    # Rare path, in graph: names where elements were lost (e.g. which shards
    # hold fewer readable records than written); a str scalar.
    lost_detail: Optional[Callable[[], tf.Tensor]] = None


def _needs_tfio(idx: index_lib.Index, opts: config_lib.ImageOptions):
    """(use_tfio, exif_in_graph) from what index-time sniffing found.

    Orientation tags read at index time need no tensorflow-io; it is only put
    in the graph for tags that must be read there (remote files, headers
    Pillow could not parse) and for the formats only it decodes.
    """
    remote = any(index_lib.is_remote(p) for p in idx.paths[:1])
    unknown = any(i.format is None and not i.error for i in idx.infos)
    tfio_fmt = any(i.format in index_lib.TFIO_FORMATS for i in idx.infos)
    codes = {i.exif_code for i in idx.infos if not i.error}
    exif_tfio = opts.exif_orientation and (remote or unknown or -1 in codes)
    exif = opts.exif_orientation and (exif_tfio or any(c > 1 for c in codes))
    return bool(remote or unknown or tfio_fmt or exif_tfio), bool(exif)


def _encode_label(label, mode, num_classes):
    if mode == "int":
        return tf.cast(label, tf.int32)
    if mode == "categorical":
        return tf.one_hot(label, num_classes, dtype=tf.float32)
    if mode == "binary":
        return tf.reshape(tf.cast(label, tf.float32), [1])
    if mode == "multi_hot":
        return label  # already a float multi-hot vector
    if mode == "float":
        return tf.cast(label, tf.float32)  # regression target(s)
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


# Plan elements travel in chunks of this many; a file whose decoder raised is
# named from its chunk's and the previous chunk's keys, so at least this many
# files in a row can fail and still be named individually.
CHUNK = 64
_SENTINEL = "\x00end-of-epoch"


class _Source:
    """What the decode stage reads: rows of a path table, or stored records.

    Plan elements are ``(key, label, pre_error, exif, contents, weight)``
    (``exif``: int32 orientation code, or bool for records; see
    ``decode.exif_code``):
    for files ``key`` is the row (int64) in ``paths`` and ``contents`` is
    empty; for records ``key`` is the stored path (str) and ``contents`` the
    encoded bytes.
    """

    def __init__(self, decoder, paths_table=None):
        self.decoder = decoder
        self.paths_table = paths_table
        self.records = paths_table is None
        self.empty_key = tf.constant("" if self.records else -1,
                                     tf.string if self.records else tf.int64)

    def name(self, key):
        if self.records:  # key: path + NUL + the reason if its decoder fails
            return tf.strings.split(key, "\x00")[0]
        return tf.gather(self.paths_table, tf.maximum(key, 0))

    def load(self, key, pre_error, has_exif, contents, **kw):
        if self.records:
            return self.decoder.load_bytes(contents, has_exif, pre_error, **kw)
        return self.decoder.load(self.name(key), has_exif, pre_error, **kw)

    def why_failed(self, key):
        """In-graph reason for a file whose decoder raised (reads it again)."""
        if self.records:
            return tf.strings.split(key, "\x00")[-1]
        contents = tf.io.read_file(self.name(key))
        return decode_lib.diagnose(contents, decode_lib.sniff(contents))

    def why_failed_py(self, key) -> str:
        if self.records:
            return key.decode("utf-8", "replace").split("\x00")[-1]
        return diagnose_file(self.key_to_name_py(key))

    def key_to_name_py(self, key) -> str:
        if self.records:
            return key.decode("utf-8", "replace").split("\x00")[0]
        return self.paths_table[max(int(key), 0)].numpy().decode("utf-8", "replace")


def _seeds(opts):
    """Per-element stateless seeds [2] int64: a fresh, seeded stream each epoch.

    ``Dataset.random(seed, rerandomize_each_iteration=True)`` is zipped to the
    plan in epoch order, so an element's seed depends on (seed, epoch,
    position), never on thread timing.
    """
    return tf.data.Dataset.random(seed=opts.seed, rerandomize_each_iteration=True).batch(2)


def _transform(source, opts, key, pre_error, has_exif, contents, seed):
    """Decode + resize (+ augment) one element; picks the fast JPEG paths.

    * ``augment`` with ``random_resized_crop``: the crop window comes from the
      header and seed, and only it is decoded (``decode_and_crop_jpeg``).
    * ``resize="crop"``: the centre window, likewise.
    * ``resize="stretch"``: a JPEG >= 2x the target in both sides is decoded
      at 1/2, 1/4 or 1/8 scale first (libjpeg DCT scaling).
    ``fast_jpeg=False`` turns all three off (decode whole, then transform).
    """
    aug = opts.augment
    size = opts.image_size
    fast = opts.fast_jpeg
    rrc = aug is not None and aug.random_resized_crop is not None and opts.cache is None
    if rrc:
        window = (lambda shape: aug.crop_window(shape, seed)) if fast else None
        image, reason = source.load(key, pre_error, has_exif, contents, window_fn=window)
        image = aug(image, seed, output_size=size, crop_done=window is not None)
        return image, reason
    if size is not None and opts.resize == "crop" and fast:
        th, tw = size

        def window(shape):
            return transform.center_crop_window(shape[0], shape[1], th, tw)

        image, reason = source.load(key, pre_error, has_exif, contents, window_fn=window)
        image = transform.resize(image, size, "stretch", opts.interpolation)
    else:
        # DCT scaling only for "stretch": "pad" places the content by the
        # source's exact aspect ratio, which the rounded sizes of a reduced-
        # scale decode shift by a pixel.
        target = size if (size is not None and fast and opts.resize == "stretch") else None
        image, reason = source.load(key, pre_error, has_exif, contents, target=target)
        if size is not None:
            image = transform.resize(image, size, opts.resize, opts.interpolation)
    if aug is not None and opts.cache is None:
        image = aug(image, seed)
    return image, reason


def _decode_stage(plan, source: _Source, opts, error_log, encode_label, sentinel,
                  out_batch=None, expected=None, lost_detail=None):
    """Plan elements -> ``(image, label, weight)`` with the bad-file policy.

    How a decoder exception is attributed to its file without per-element
    exception handling (a nested dataset per element cost ~30% here): the plan
    is cut into chunks of ``CHUNK``; each element gets its position in the
    epoch and the keys of its own and the previous chunk (one ``scan`` call
    per chunk); an end-of-epoch sentinel follows the last element. The
    parallel decode map keeps order; ``ignore_errors`` drops an element whose
    decoder raised; a vectorised check on chunks of decoded elements sees the
    gap in positions and looks the missing keys up. Those files are then
    raised (``on_error="raise"``) or recorded and skipped (``"skip"``), with
    the reason diagnosed from their bytes. Besides the parallel map, only one
    function call per chunk runs on the consumer thread.
    """
    raise_mode = opts.on_error == "raise"
    image_size = opts.image_size
    K = CHUNK
    ds = plan.concatenate(tf.data.Dataset.from_tensors(sentinel)).batch(K)
    empty = source.empty_key
    augment_here = opts.augment is not None and opts.cache is None
    if augment_here:
        ds = tf.data.Dataset.zip(ds, _seeds(opts).batch(K))
    else:
        ds = ds.map(graph_fn(lambda *chunk: (chunk, tf.zeros([tf.shape(chunk[0])[0], 2], tf.int64))))

    def remember(state, item):
        index, prev = state
        chunk, seeds = item
        keys = chunk[0]
        b = tf.shape(keys, out_type=tf.int64)[0]
        padded = tf.concat([keys, tf.fill([K - b], empty)], 0)
        window = tf.concat([prev, padded], 0)  # positions (index-1)*K ... (index+1)*K-1
        pos = index * K + tf.range(b)
        return (index + 1, padded), (pos, tf.tile(window[None], [b, 1])) + tuple(chunk) + (
            seeds[:b],)

    ds = ds.scan((tf.constant(0, tf.int64), tf.fill([K], empty)), graph_fn(remember)).unbatch()

    def element(pos, window, key, label, pre_error, has_exif, contents, weight, seed):
        # The sentinel carries pre_error=_SENTINEL: the decoder's pre-error
        # check passes it through without reading anything.
        image, reason = _transform(source, opts, key, pre_error, has_exif, contents, seed)
        return image, encode_label(label), weight, pos, window, key, reason

    # Order is kept here (the gap check needs it); `deterministic` applies to
    # the other stages through tf.data.Options.
    ds = ds.map(graph_fn(element), num_parallel_calls=opts.parallelism, deterministic=True)
    ds = ds.ignore_errors()
    # The check runs on the user's batches when nothing sits between here and
    # batching (a batch that held a skipped file is then smaller by that
    # many); otherwise on internal chunks that are unbatched again.
    # Variable-size (native) images cannot be batched: checked one by one.
    ds = ds.batch(out_batch or (K if image_size is not None else 1))

    def check(last, batch):
        image, y, weight, pos, window, key, reason = batch
        prev = tf.concat([tf.reshape(last, [1]), pos[:-1]], 0)
        missing = pos - prev - 1                       # files lost before each element
        sentinel_ = tf.equal(reason, _SENTINEL)
        bad = tf.logical_and(tf.strings.length(reason) > 0, tf.logical_not(sentinel_))
        keep = tf.logical_not(tf.logical_or(bad, sentinel_))
        any_lost = tf.reduce_any(missing > 0)
        if expected is not None:
            # The sentinel's position is the number of elements the plan gave:
            # fewer than expected means a read error upstream was swallowed.
            short = tf.reduce_any(sentinel_ & (pos != expected))
            lost_upstream = tf.reduce_max(tf.where(sentinel_, expected - pos, 0))
            def message():  # only built when elements were lost
                m = tf.strings.format(
                    "pipeline: {} element(s) of {} were lost while reading the source before "
                    "decoding", (lost_upstream, expected))
                if lost_detail is None:
                    return tf.strings.join([m, " (e.g. a corrupt TFRecord shard)"])
                # Records read in parallel with a damaged shard can be lost with it:
                # the count can exceed what the damaged shards alone held.
                return tf.strings.join([m, "; damaged: ", lost_detail()])

            if raise_mode:
                def fail_lost():
                    with tf.control_dependencies([tf.debugging.Assert(False, [message()])]):
                        return tf.constant(True)

                ok = tf.cond(short, fail_lost, lambda: tf.constant(True))
            else:
                ok = tf.cond(short, lambda: tf.py_function(
                    lambda m: error_log.add("<source>", m.numpy().decode()) or True,
                    [message()], tf.bool, name=SKIP_RECORDER_NAME), lambda: tf.constant(True))
            with tf.control_dependencies([ok]):
                keep = tf.identity(keep)

        def lost_keys():
            """Keys of every missing position in this chunk, and how many are missing."""
            q = tf.ragged.range(prev + 1, pos)          # missing positions per element
            i = q.value_rowids()
            j = q.flat_values - (tf.gather(pos, i) // K - 1) * K
            keys = tf.gather_nd(window, tf.stack([i, tf.maximum(j, 0)], 1))
            return tf.boolean_mask(keys, j >= 0), tf.reduce_sum(missing)

        if raise_mode:
            def fail():
                def gap_msg():
                    keys, _ = lost_keys()
                    return tf.strings.join(["pipeline: cannot load file ", source.name(keys[0]),
                                            " (", source.why_failed(keys[0]), ")"])

                def bad_msg():
                    i = tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32)
                    return tf.strings.join(["pipeline: cannot load file ",
                                            source.name(key[i]), " (", reason[i], ")"])

                ok = tf.debugging.Assert(False, [tf.cond(any_lost, gap_msg, bad_msg)])
                with tf.control_dependencies([ok]):
                    return tf.identity(keep)
        else:
            def record(keys, count, bad_keys, bad_reasons):  # rare path: bad files only
                keys = keys.numpy().tolist()
                for k in keys:
                    error_log.add(source.key_to_name_py(k), source.why_failed_py(k))
                if int(count) > len(keys):
                    error_log.add(f"<{int(count) - len(keys)} unnamed file(s)>",
                                  "decoder failed; more files in a row failed than "
                                  f"the {K}-file window can name")
                for k, why in zip(bad_keys.numpy().tolist(), bad_reasons.numpy().tolist()):
                    error_log.add(source.key_to_name_py(k), why.decode("utf-8", "replace"))
                return True

            def fail():
                keys, count = tf.cond(any_lost, lost_keys, lambda: (
                    tf.zeros([0], empty.dtype), tf.constant(0, tf.int64)))
                bad_keys, bad_reasons = tf.boolean_mask(key, bad), tf.boolean_mask(reason, bad)
                if opts.service:
                    # py_function cannot run on tf.data service workers: the
                    # skip is reported on the worker's stderr instead, and
                    # pipeline.errors(ds) stays empty.
                    done = tf.print("pipeline: skipped", tf.strings.reduce_join(
                        tf.strings.join([tf.map_fn(source.name, bad_keys,
                                                   fn_output_signature=tf.string),
                                         bad_reasons], " "), separator="; "),
                        "; decoder failed:", tf.map_fn(source.name, keys,
                                                       fn_output_signature=tf.string),
                        output_stream=sys.stderr)
                else:
                    done = tf.py_function(record, [keys, count, bad_keys, bad_reasons],
                                          tf.bool, name=SKIP_RECORDER_NAME)
                with tf.control_dependencies([done]):
                    return tf.identity(keep)

        keep = tf.cond(any_lost | tf.reduce_any(bad), fail, lambda: keep)
        out = (image, y, weight)
        return pos[-1], tf.cond(tf.reduce_all(keep), lambda: out,
                                lambda: tuple(tf.boolean_mask(t, keep) for t in out))

    ds = ds.scan(tf.constant(-1, tf.int64), graph_fn(check))
    if not out_batch:
        return ds.unbatch()
    # A batch can end up empty (it held only the sentinel, or only bad files).
    return ds.filter(graph_fn(lambda image, *rest: tf.shape(image)[0] > 0))


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (bytes); 0 when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _size(num_bytes: int) -> str:
    return f"{num_bytes / 2**20:,.0f} MiB" if num_bytes >= 2**20 else f"{num_bytes:,} bytes"


def check_cache_budget(opts, n: int) -> Optional[int]:
    """Estimates the cache size (bytes) up front; refuses one over budget.

    The estimate is ``n * height * width * channels`` bytes (uint8 elements
    after resize). The budget is ``cache_budget_bytes`` or, by default, half
    of the available memory (``cache="memory"``) or the free disk space
    (a cache file). Without ``image_size`` the size cannot be estimated and
    a warning says so.

    Raises:
        ValueError: the estimate exceeds the budget (both figures named).
    """
    if opts.cache is None:
        return None
    if opts.cache != "memory":
        folder = os.path.dirname(os.path.abspath(str(opts.cache))) or "."
        if not index_lib.is_remote(str(opts.cache)) and not os.path.isdir(folder):
            raise ValueError(f"The folder of the cache file does not exist: {folder!r}. "
                             f"Create it first. Received: cache={opts.cache!r}")
    if opts.image_size is None:
        logging.warning("pipeline: cache=%r with image_size=None: the cache size cannot be "
                        "estimated up front (native sizes)", opts.cache)
        return None
    h, w = opts.image_size
    estimate = n * h * w * opts.channels
    if opts.cache_budget_bytes is not None:
        budget, what = opts.cache_budget_bytes, "cache_budget_bytes"
    elif opts.cache == "memory":
        budget, what = available_memory_bytes() // 2, "half the available memory"
    else:
        import shutil
        folder = os.path.dirname(os.path.abspath(str(opts.cache))) or "."
        budget, what = shutil.disk_usage(folder).free, f"the free space in {folder}"
    if budget and estimate > budget:
        raise ValueError(
            f"cache={opts.cache!r} would hold about {_size(estimate)} "
            f"({n} images x {h}x{w}x{opts.channels} bytes), more than {what} "
            f"({_size(budget)}). Use a smaller image_size, a cache file on a larger "
            f"disk, cache=None, or set cache_budget_bytes. Received: cache={opts.cache!r}")
    logging.info("pipeline: cache=%r will hold about %.0f MiB; it is complete only after one "
                 "full epoch (TensorFlow warns if an epoch is cut short)", opts.cache,
                 estimate / 2**20)
    return estimate


def cache_file(opts, idx, records=None) -> str:
    """The cache file prefix for ``cache=path``: ``path`` + "-" + a fingerprint.

    The fingerprint (SHA-1, 16 hex digits) covers what the cached elements
    depend on: the files (paths, sizes, labels) and the options applied
    before the cache (image size, resize, interpolation, channels, label
    mode, EXIF, max_pixels, fast_jpeg, on_error, sharding). A cache written
    for other files or options, or left incomplete by an epoch that failed on
    a bad file which was then fixed or removed, is therefore never read back
    as if it were this dataset's.
    """
    import hashlib  # pylint: disable=import-outside-toplevel
    h = hashlib.sha1()
    ctx = opts.input_context
    parts = [opts.image_size, opts.resize, opts.interpolation, opts.channels, opts.label_mode,
             opts.exif_orientation, opts.max_pixels, opts.fast_jpeg, opts.on_error,
             (ctx.num_input_pipelines, ctx.input_pipeline_id) if ctx is not None else None]
    h.update(repr(parts).encode())
    if records is not None:
        h.update(repr((records.num_examples, records.file_paths)).encode())
    else:
        for i, info in enumerate(idx.infos):
            h.update(repr((info.path, info.size, idx.labels[i] if idx.labels else None,
                           idx.weights[i] if idx.weights else None)).encode())
    prefix = f"{opts.cache}-{h.hexdigest()[:16]}"
    # An epoch that failed on a bad file (raise mode) leaves an index with no
    # data: TensorFlow would read it back as an empty, complete cache.
    if (not index_lib.is_remote(prefix) and os.path.exists(prefix + ".index")
            and not tf.io.gfile.glob(prefix + ".data-*")):
        logging.warning("pipeline: removing the incomplete cache %s.index (an earlier epoch "
                        "did not finish)", prefix)
        os.remove(prefix + ".index")
    return prefix


def diagnose_file(path: str) -> str:
    """Why a file's decoder failed (reads it again; for the rare bad path)."""
    try:
        contents = tf.io.gfile.GFile(path, "rb").read()
    except Exception as e:  # noqa: BLE001 - any read failure is the reason
        return f"unreadable file ({type(e).__name__}: {e})"
    c = tf.constant(contents)
    return decode_lib.diagnose(c, decode_lib.sniff(c)).numpy().decode()


def build(idx: index_lib.Index, opts: config_lib.ImageOptions, *,
          num_classes: Optional[int] = None, subset_name: str = "",
          records: Optional[Records] = None) -> tf.data.Dataset:
    """Builds the dataset for one Index (one subset). See ``from_directory``.

    With ``records`` (see ``Records``), elements start from encoded bytes
    instead of ``idx.paths``; ``idx`` then carries only class names, and
    ``labels`` / ``weights`` set to ``[]`` when present.
    With ``idx.weights``, labelled elements are ``(x, y, sample_weight)``.
    """
    n = len(idx) if records is None else records.num_examples
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
    if records is None:
        use_tfio, exif_in_graph = _needs_tfio(idx, opts)
        fmts = {i.format for i in idx.infos if not i.error}
    else:
        exif_in_graph = bool(opts.exif_orientation and records.has_exif)
        use_tfio = exif_in_graph or any(f not in index_lib.TF_FORMATS for f in records.formats)
        fmts = set(records.formats)
    decoder = decode_lib.Decoder(
        opts.channels, opts.max_pixels, opts.exif_orientation, use_tfio=use_tfio,
        exif_in_graph=exif_in_graph, only_format=fmts.pop() if len(fmts) == 1 else None,
        pre_errors=True)  # the end-of-epoch sentinel travels as a pre-error
    if opts.service and opts.on_error == "skip" and opts.max_errors is not None:
        raise ValueError(
            "`max_errors` cannot be enforced with `service=` (skips happen on the "
            f"service workers). Received: max_errors={opts.max_errors!r}, "
            f"service={opts.service!r}")
    cache_estimate = check_cache_budget(opts, n)
    error_log = errors_lib.ErrorLog(n, opts.max_errors)
    has_weights = idx.weights is not None
    label_dtype = tf.float32 if opts.label_mode in ("multi_hot", "float") else tf.int64
    ctx = opts.input_context

    expected = None  # elements per epoch from the plan, when exactly known
    if records is None:
        expected = n
        labels = idx.labels if has_labels else [0] * n
        paths_table = tf.constant(idx.paths, tf.string)
        source = _Source(decoder, paths_table)
        plan = tf.data.Dataset.from_tensor_slices((
            tf.range(n, dtype=tf.int64),
            tf.constant(labels, label_dtype),
            tf.constant([i.error for i in idx.infos], tf.string),
            tf.constant([i.exif_code for i in idx.infos], tf.int32),
            tf.fill([n], tf.constant(b"")),
            tf.constant(idx.weights if has_weights else [1.0] * n, tf.float32),
        ))
        label0 = tf.zeros_like(tf.constant(labels[0], label_dtype))
        # plan: shard (InputContext) before shuffling, shuffle rows, never pixels.
        if ctx is not None and ctx.num_input_pipelines > 1:
            # One element per file, so sharding the path list *is* element
            # sharding: exactly-once across pipelines in every case.
            plan = plan.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            expected = len(range(ctx.input_pipeline_id, n, ctx.num_input_pipelines))
            if n < ctx.num_input_pipelines:
                logging.warning("pipeline: %d files < %d input pipelines: elements are "
                                "sharded one per pipeline; input pipeline %d %s", n,
                                ctx.num_input_pipelines, ctx.input_pipeline_id,
                                "gets no elements" if ctx.input_pipeline_id >= n
                                else "gets 1 element")
        if opts.service and opts.processing_mode == "file":
            # tf.data service "file" mode = ShardingPolicy.HINT: the dispatcher
            # fills in (num_workers, worker_index); see pipeline.distribute.
            plan = plan.shard(tf.data.experimental.SHARD_HINT, tf.data.experimental.SHARD_HINT)
            expected = None  # the share is decided by the service
        if opts.shuffle and opts.cache is None:
            plan = plan.shuffle(n, seed=opts.seed, reshuffle_each_iteration=True)
    else:  # the switch: encoded bytes, planned (sharded, shuffled) by the caller
        source = _Source(decoder)
        expected = records.expected
        # The key carries the reason a record would fail, since its bytes are
        # gone once its decoder raised.
        plan = records.dataset.map(
            graph_fn(lambda c, y, e, x, p, *w: (
                tf.strings.join([p, "\x00", decode_lib.diagnose(c, decode_lib.sniff(c))]),
                y, e, x, c, w[0] if w else tf.constant(1.0))),
            num_parallel_calls=opts.parallelism, deterministic=True)
        spec = plan.element_spec[1]
        label0 = tf.zeros(spec.shape, spec.dtype)

    exif0 = tf.constant(False) if source.records else tf.constant(0, tf.int32)
    sentinel = (source.empty_key, label0, tf.constant(_SENTINEL), exif0,
                tf.constant(b""), tf.constant(0.0))
    encode = (lambda label: _encode_label(label, opts.label_mode, num_classes)) \
        if has_labels else (lambda label: label)
    batch_size = opts.batch_size
    if batch_size is not None and ctx is not None:
        batch_size = ctx.get_per_replica_batch_size(batch_size)
    batch_here = (batch_size is not None and opts.image_size is not None
                  and opts.cache is None and not opts.drop_remainder)
    if opts.service and opts.processing_mode != "off":
        expected = None  # the service splits the plan between its workers
    ds = _decode_stage(plan, source, opts, error_log, encode, sentinel,
                       out_batch=batch_size if batch_here else None, expected=expected,
                       lost_detail=records.lost_detail if records is not None else None)
    if has_labels and has_weights:
        pass
    elif has_labels:
        ds = ds.map(graph_fn(lambda image, y, w: (image, y)))
    else:
        ds = ds.map(graph_fn(lambda image, y, w: image))

    if opts.cache is not None:
        ds = ds.cache("" if opts.cache == "memory" else cache_file(opts, idx, records))
        if opts.shuffle:
            ds = ds.shuffle(min(n, 1024), seed=opts.seed, reshuffle_each_iteration=True)
        if opts.augment is not None:  # random ops run after the cache, fresh each epoch
            aug = opts.augment
            ds = tf.data.Dataset.zip(ds, _seeds(opts)).map(
                graph_fn(lambda el, seed: (aug(el, seed),) if not isinstance(el, tuple) else
                         (aug(el[0], seed),) + tuple(el[1:])),
                num_parallel_calls=opts.parallelism, deterministic=opts.is_deterministic)

    if batch_size is not None and not batch_here:
        ds = ds.batch(batch_size, drop_remainder=opts.drop_remainder)
    if opts.dtype != tf.uint8:
        if has_labels:
            ds = ds.map(graph_fn(lambda x, *yw: (scale(x, opts.dtype, opts.normalize),) + yw))
        else:
            ds = ds.map(graph_fn(lambda x: scale(x, opts.dtype, opts.normalize)))
    if opts.on_error == "raise" and expected is not None and not opts.service:
        # Every element arrives or the epoch raises: the length is known, so
        # len(ds) works and Keras knows the steps per epoch.
        count = expected
        if batch_size is not None:
            count = expected // batch_size if opts.drop_remainder else -(-expected // batch_size)
        ds = ds.apply(tf.data.experimental.assert_cardinality(count))
    if opts.prefetch:
        ds = ds.prefetch(opts.prefetch)

    options = tf.data.Options()
    options.autotune.enabled = bool(opts.autotune)
    if opts.autotune and opts.ram_budget_bytes:
        options.autotune.ram_budget = opts.ram_budget_bytes
    if opts.threadpool_size:
        options.threading.private_threadpool_size = opts.threadpool_size
    # map_and_batch_fusion and map_parallelization are tf.data defaults (on).
    options.deterministic = opts.is_deterministic
    # Iterator checkpoints (tf.train.Checkpoint(iterator=it)): the stateful ops
    # in this graph hold no state across elements (the raise-mode Assert, the
    # skip recorder's py_function), so ignoring them is exact.
    options.experimental_external_state_policy = (
        tf.data.experimental.ExternalStatePolicy.IGNORE)
    ds = ds.with_options(options)

    if opts.service:
        from pipeline import distribute as distribute_lib  # pylint: disable=import-outside-toplevel
        ds = ds.apply(distribute_lib.service_transformation(opts))
    if opts.prefetch_to_device:  # must be the last stage; one device, no strategy
        ds = ds.apply(tf.data.experimental.prefetch_to_device(
            opts.prefetch_to_device, buffer_size=max(opts.prefetch, 1)))

    ds.class_names = list(idx.class_names) if idx.class_names else None
    ds.file_paths = list(idx.paths) if records is None else records.file_paths
    ds._pipeline_errors = error_log
    ds._pipeline_index = idx
    ds._pipeline_options = opts
    ds.cache_estimate_bytes = cache_estimate
    return ds
