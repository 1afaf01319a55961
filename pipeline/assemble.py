"""Assemble: builds the tf.data graph of an Index (or TFRecord shards) + options.

It makes the per-element work (read + decode + transform + augment: one
parallel map, ``Stages``), the on_error check (``pipeline.decode.guard``), the
output structure, the cache file and the ``tf.data.Options``, and hands them
to ``pipeline.deliver.plan.order``, which alone decides the order of the stages
(shard, shuffle, map, cache, guard, batch, dtype, prefetch, service, device).
``build`` is one line per stage, in data-flow order; ``Graph`` holds what the
stages of one build share, and its methods are the stages.

Every factory, ``pipeline.profile`` and ``pipeline.show_batch`` build through
``build``; ``built(ds)`` gives back what a dataset was built from, so that
they can rebuild it with some options changed.

Why autotune is off by default: on the 2-core reference machine, any pipeline
with ``tf.data`` autotuning enabled settled, in most epochs, at about 1.25
busy cores instead of 2, even with fixed ``num_parallel_calls`` and a fixed
prefetch buffer; with autotuning disabled and a fixed parallelism of 2x the
cores, every epoch used 1.97 cores. ``autotune=True`` turns it back on.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import os
import shutil
from typing import Callable, Optional, Union

import tensorflow as tf
from absl import logging

from pipeline.deliver import balance
from pipeline.deliver import cachelock
from pipeline import checks
from pipeline import config as config_lib
from pipeline.decode import image as decode_lib
from pipeline.decode import formats
from pipeline.decode import guard
from pipeline.sources import index as index_lib
from pipeline.decode import masks as masks_lib
from pipeline.deliver import plan as plan_lib
from pipeline.sources import read
from pipeline import stack
from pipeline.transform import geometry as transform

# Every function handed to tf.data here uses explicit tf.cond / switch_case,
# never Python control flow on tensors, so AutoGraph's source conversion is
# skipped: it took ~2.5 s of the first dataset's build (measured with
# cProfile), for no change in the graph.
graph_fn = tf.autograph.experimental.do_not_convert


@dataclasses.dataclass
class Built:
    """What a dataset was built from (``ds.pipeline_built``; see ``built``).

    Attributes:
        source: the ``index.Index`` or ``shards.Records``.
        options: the ``config.ImageOptions``.
        error_log: the ``guard.ErrorLog`` behind ``pipeline.errors(ds)``.
        num_classes: int.
        subset: "", "training" or "validation".
    """
    source: Union[index_lib.Index, "shards.Records"]
    options: config_lib.ImageOptions
    error_log: guard.ErrorLog
    num_classes: int
    subset: str = ""

    @property
    def index(self) -> Optional[index_lib.Index]:
        return self.source if isinstance(self.source, index_lib.Index) else None

    def rebuild(self, source=None, **changes) -> tf.data.Dataset:
        """The same dataset built again with some options changed (and an optional
        other source, e.g. a subset of the index)."""
        return build(self.source if source is None else source,
                     dataclasses.replace(self.options, **changes),
                     num_classes=self.num_classes, subset_name=self.subset or "rebuilt")


def built(ds) -> Built:
    """What a ``pipeline`` dataset was built from.

    Raises:
        ValueError: ``ds`` is not a dataset returned by a pipeline image factory.
    """
    b = getattr(ds, "pipeline_built", None)
    if not isinstance(b, Built):
        raise ValueError("Expected a dataset returned by a pipeline image factory (it carries "
                         "its files and options); after .map/.take/.batch they are lost. "
                         f"Received: {type(ds).__name__}")
    return b


def encode_label(label, mode, num_classes):
    """A label as the dtype/shape of ``label_mode`` (see ``ImageOptions``)."""
    if mode == "int":
        return tf.cast(label, tf.int32)
    if mode == "categorical":
        return tf.one_hot(label, num_classes, dtype=tf.float32)
    if mode == "binary":
        return tf.reshape(tf.cast(label, tf.float32), [1])
    return tf.cast(label, tf.float32)  # multi_hot vector / float target(s)


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


@dataclasses.dataclass(frozen=True)
class Geometry:
    """One element's geometry (``Stages.geometry``), the same for an image alone and for
    the image and the mask of a pair.

    Attributes:
        window: None (the whole image is resized as ``resize`` says), or
            ``f(shape) -> (offset_y, offset_x, height, width)``: the window,
            in full-size pixels of the displayed image of that shape
            (int32 [>= 2]), that is resized to ``image_size``.
        decode_window: JPEGs decode only ``window`` (``fast_jpeg``).
        target: None, or the (height, width) a JPEG (or its window) is
            decoded at a reduced DCT scale for (``decode.Decoder.decode``).
        interpolation: the resize method of the image.
        crop_augment: ``window`` is ``Augment``'s random resized crop (the
            augmentation then runs with its crop done).
    """
    window: Optional[Callable]
    decode_window: bool
    target: Optional[tuple]
    interpolation: str
    crop_augment: bool


class Stages:
    """The per-element work of the parallel map: decode -> transform -> augment.

    Picks the fast JPEG paths: with ``augment.random_resized_crop`` the crop
    window comes from the header and seed, and only it is decoded; with
    ``resize="crop"`` or ``"center_crop"`` the centre window likewise. At full
    scale both give exactly the pixels of ``fast_jpeg=False`` (decode whole,
    then crop), which turns them off. With ``jpeg_dct_scaling`` (default) a
    JPEG, or its window, is decoded at the largest reduced scale that keeps it
    at least ``image_size`` (``decode.Decoder.dct_ratio_index``); a window is
    then resampled exactly from the reduced pixels that cover it
    (``transform.resize_box``). Augmentation runs here unless a cache sits in
    between (then after it, fresh each epoch).

    The image of a segmentation pair takes exactly this path (``pair``), and
    its mask the same geometry (``Geometry``, chosen once by ``geometry``),
    nearest-neighbour from the full-size mask.
    """

    def __init__(self, opts, decoder: decode_lib.Decoder, mask_decoder=None):
        self.opts = opts
        self.decoder = decoder
        self.mask_decoder = mask_decoder
        self.augment_here = plan_lib.augments_in_map(opts)
        self._oriented_logged = []  # the first oriented pair was logged

    def geometry(self, seed) -> Geometry:
        """The element's ``Geometry`` (``seed``: its stateless seed, int64 [2])."""
        geo, aug = self.opts.geometry, self.opts.augment
        fast, size = geo.fast_jpeg, geo.image_size
        # reduced-scale (DCT) decoding to at least the output size (None: full scale)
        target = geo.dct_target
        if self.augment_here and aug.random_resized_crop is not None:
            return Geometry(lambda shape: aug.crop_window(shape, seed), fast, target,
                            aug.interpolation, True)
        if size is not None and geo.resize in transform.WINDOW_MODES:
            th, tw = size
            window = transform.WINDOW_MODES[geo.resize]
            return Geometry(lambda s: window(s[0], s[1], th, tw), fast, target,
                            geo.interpolation, False)
        return Geometry(None, False, target, geo.interpolation, False)

    def image(self, contents, geometry: Geometry, seed, with_shape: bool = False,
              checked=None):
        """Decode + resize + augment of one image: (uint8 image [image_size, channels] or
        [h, w, channels], reason, and with ``with_shape`` its displayed full-size
        (height, width), int32 [2]). ``checked``: the file's ``Decoder.check_batch``
        entries (the batched check stage), or None."""
        opts, aug, size, g = self.opts, self.opts.augment, self.opts.image_size, geometry
        decode_window = g.window if g.decode_window else None
        boxed = decode_window is not None and g.target is not None
        image, reason, *rest = self.decoder.decode(
            contents, window_fn=decode_window, target=g.target, with_box=boxed,
            with_shape=with_shape, checked=checked)
        if g.window is None:
            if size is not None:
                image = transform.resize(image, size, opts.resize, g.interpolation,
                                         opts.antialias)
        elif boxed:  # the window resampled exactly (sub-pixel) from the reduced pixels
            image = transform.resize_box(image, rest.pop(0), size, g.interpolation,
                                         opts.antialias)
        else:
            if decode_window is None:
                oy, ox, ch, cw = g.window(tf.shape(image))
                image = image[oy:oy + ch, ox:ox + cw]
            image = transform.resize(image, size, "stretch", g.interpolation, opts.antialias)
        if g.crop_augment:
            image = aug(image, seed, output_size=size, crop_done=True, antialias=opts.antialias)
        elif self.augment_here:
            image = aug(image, seed)
        return (image, reason) + tuple(rest)

    def mask(self, mask, geometry: Geometry, seed):
        """The geometry of ``image`` on the full-size mask of a pair (uint8 [h, w, 1], the
        displayed image's size): the same window, nearest-neighbour, no antialias,
        the letterbox and fill ``mask_pad_value``; the augmentation's geometric ops."""
        opts, aug, size, g = self.opts, self.opts.augment, self.opts.image_size, geometry
        pad = opts.mask_pad_value
        if g.window is not None:
            oy, ox, ch, cw = g.window(tf.shape(mask))
            mask = transform.resize_mask(mask[oy:oy + ch, ox:ox + cw], size, "stretch", pad)
        elif size is not None:
            mask = transform.resize_mask(mask, size, opts.resize, pad)
        if g.crop_augment or self.augment_here:
            mask = aug.mask(mask, seed, output_size=size if g.crop_augment else None,
                            pad_value=pad, crop_done=g.crop_augment)
        return mask

    def pair(self, contents, mask_contents, seed, mask_name):
        """Segmentation pairs: (image, mask uint8 [h, w, 1], reason).

        The image is the image alone (``image``: the same decode, window,
        reduced scale, resize and augmentation); the mask is decoded whole,
        a pair whose sizes differ (the image's displayed full size) is bad
        (named), and ``mask`` gives the mask the image's geometry. A bad pair
        gives zeros (an element the guard drops) and its reason.
        """
        opts = self.opts
        geometry = self.geometry(seed)
        image, reason, si = self.image(contents, geometry, seed, with_shape=True)
        mask, mask_reason = self.mask_decoder.decode(mask_contents)
        sm = tf.shape(mask)
        same = tf.equal(si[0], sm[0]) & tf.equal(si[1], sm[1])
        s = tf.strings.as_string
        # The image is paired as displayed (its EXIF orientation applied, as annotation
        # tools show it); a mask of its stored grid is named so when the sizes show it.
        o = (decode_lib.exif_orientation(contents) if opts.exif_orientation
             else tf.constant(1, tf.int32))
        stored = (o >= 5) & tf.equal(si[0], sm[1]) & tf.equal(si[1], sm[0])
        why_size = tf.strings.join([
            "a bad pair: the image is ", s(si[1]), "x", s(si[0]), " pixels but its mask ",
            mask_name, " is ", s(sm[1]), "x", s(sm[0])])
        why_size = tf.where(stored, tf.strings.join([
            why_size, ": the image is shown rotated by its EXIF orientation ", s(o),
            " (stored ", s(si[0]), "x", s(si[1]), "), and the mask follows the stored pixel "
            "grid; pass exif_orientation=False to pair on the stored grid"]), why_size)
        reason = tf.where(
            tf.strings.length(reason) > 0, reason, tf.where(
                tf.strings.length(mask_reason) > 0,
                tf.strings.join(["mask ", mask_name, ": ", mask_reason]),
                tf.where(same, "", why_size)))
        if self.decoder.fallback:  # never silent: the first oriented pair is logged
            note = lambda: self._oriented_note(o, mask_name)
            reason = tf.cond((o > 1) & tf.equal(reason, ""), note, lambda: reason)

        def good():
            return image, self.mask(mask, geometry, seed)

        def bad():
            if opts.image_size is None:
                return self.decoder.placeholder(), tf.zeros([1, 1, 1], tf.uint8)
            h, w = opts.image_size
            return (tf.zeros([h, w, opts.channels], tf.uint8), tf.zeros([h, w, 1], tf.uint8))

        image, mask = tf.cond(tf.strings.length(reason) > 0, bad, good)
        return image, mask, reason

    def _oriented_note(self, orientation, mask_name):
        """Rare path (a py_function named ``ORIENTED_PAIR_OP_NAME``): logs the first
        pair whose image has an EXIF orientation, once per dataset; returns ""."""
        def run(o, name):
            if not self._oriented_logged:
                self._oriented_logged.append(True)
                logging.warning(
                    "pipeline: the image of the pair with mask %s has EXIF orientation %d: "
                    "images are paired as displayed (oriented, as annotation tools show them), "
                    "so masks must be drawn on the displayed image; for masks drawn on the "
                    "stored pixel grid, pass exif_orientation=False (logged once)",
                    name.numpy().decode("utf-8", "replace"), int(o))
            return ""
        out = tf.py_function(run, [orientation, mask_name], tf.string,
                             name=ORIENTED_PAIR_OP_NAME)
        out.set_shape([])
        return out

    def __call__(self, contents, seed, checked=None):
        """One image alone: (image, reason) (``image`` with this element's ``geometry``)."""
        return self.image(contents, self.geometry(seed), seed, checked=checked)

    def finish(self, image, seed=None, augment=True):
        """The stages after a whole decode: resize, then augment (for diagnosis)."""
        opts = self.opts
        if opts.image_size is not None:
            image = transform.resize(image, opts.image_size, opts.resize, opts.interpolation,
                                     opts.antialias)
        if augment and opts.augment is not None:
            seed = tf.constant([0, 0], tf.int64) if seed is None else seed
            if opts.augment.random_resized_crop is not None:
                return opts.augment(image, seed, output_size=opts.image_size,
                                    antialias=opts.antialias)
            image = opts.augment(image, seed)
        return image


def _optional_decoders(hinted, remote: bool, service: bool = False):
    """(tensorflow-io decoders to build in, why tensorflow-io is unusable or "").

    Only formats that some file's extension (or the shards' sidecar) names
    (``hinted``), and only where tensorflow-io's ops load: probing it imports
    it, which costs seconds, so a folder of JPEGs never does. Remote files may
    be anything. AVIF is Pillow's where Pillow reads it (except on tf.data
    service workers); without tensorflow-io, these formats take the Pillow
    fallback (``decode.Decoder``).
    """
    wanted = set(hinted)
    if remote:
        wanted |= {"tiff"}
    if stack.core_webp():
        wanted.discard("webp")
    if not service and "avif" in stack.pillow_plugins():
        wanted.discard("avif")
    wanted &= {"webp", "tiff", "avif"}
    if not wanted:
        return set(), ""
    status = stack.tfio_status()
    if not status.available:
        logging.warning("pipeline: tensorflow-io is unusable here (%s): %s files are decoded by "
                        "the slow Pillow fallback%s", status.reason, "/".join(sorted(wanted)),
                        ", which tf.data service workers cannot run: refused" if service else "")
        return set(), status.reason
    return wanted, ""


def make_stages(source, opts, full_graph: bool = False):
    """(decoder, stages) of the parallel map for ``source`` (an Index or ``shards.Records``).

    Also used by ``pipeline.profile`` to time each stage of the very map
    ``build`` runs. When every file is named as a JPEG (or the shards hold
    only JPEGs), the decoders of the other formats are left out of the graph
    (``decode.Decoder``'s ``others_in_graph``: such content is decoded from
    Python, the same pixels slowly), unless ``full_graph`` (``pipeline.scan``).
    """
    paths = source.paths if isinstance(source, index_lib.Index) else []
    if any(read.is_remote(p) for p in paths[:1]):
        read.ensure_filesystem(paths[0])
    stored = () if isinstance(source, index_lib.Index) else source.formats
    hinted = set(stored) | formats.hinted_formats(paths)
    tfio_formats, unusable = _optional_decoders(hinted, remote=any(
        read.is_remote(p) for p in paths[:1]), service=bool(opts.service))
    dec = opts.decoding
    decoder = decode_lib.Decoder(
        dec.channels, dec.max_pixels, dec.exif_orientation, tfio_formats=tfio_formats,
        tfio_unusable=unusable, bmp_in_graph="bmp" in hinted, fallback=not opts.service,
        others_in_graph=full_graph or not (
            formats.all_jpeg_named(paths) if isinstance(source, index_lib.Index)
            else stored and set(stored) <= {"jpeg"}))
    mask_decoder = None
    mask_paths = getattr(source, "mask_paths", None)
    if mask_paths is not None or getattr(source, "has_masks", False):
        stored_masks = set() if isinstance(source, index_lib.Index) else source.mask_formats
        mhinted = set(stored_masks) | formats.hinted_formats([p for p in mask_paths or [] if p])
        mtfio, munusable = _optional_decoders(mhinted, remote=any(
            read.is_remote(p) for p in (mask_paths or [])[:1]))
        mask_decoder = masks_lib.MaskDecoder(opts.masks.mask_mode, opts.masks.mask_colors,
                                             decode_lib.Decoder(
            3, dec.max_pixels, dec.exif_orientation, tfio_formats=mtfio,
            tfio_unusable=munusable, bmp_in_graph="bmp" in mhinted, fallback=not opts.service))
    return decoder, Stages(opts, decoder, mask_decoder)


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
        ValueError: the estimate exceeds the budget (both figures named); the
            cache's own value is checked by ``config.check_cache``.
    """
    if opts.cache is None:
        return None
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
        folder = os.path.dirname(os.path.abspath(str(opts.cache))) or "."
        budget, what = shutil.disk_usage(folder).free, f"the free space in {folder}"
    if budget and estimate > budget:
        raise ValueError(
            f"cache={opts.cache!r} would hold about {_size(estimate)} "
            f"({n} images x {h}x{w}x{opts.channels} bytes), more than {what} "
            f"({_size(budget)}). Use a smaller image_size, a cache file on a larger "
            f"disk, cache=None, or set cache_budget_bytes. Received: cache={opts.cache!r}")
    return estimate


def cache_file(opts, source) -> str:
    """The cache file prefix for ``cache=path``: ``path`` + "-" + a fingerprint.

    The fingerprint (SHA-1, 16 hex digits) covers what the cached elements
    depend on: the files (paths, labels, and what identifies each file's
    contents, images and masks: size, modification time and change time in
    ns, ``read.file_stamp``; for TFRecord shards, each shard's) and the options applied
    before the cache (image size, resize, interpolation, channels, label
    mode, EXIF, max_pixels, fast_jpeg, sharding). A cache written for other
    files or options is never read back as this dataset's. The cache holds
    decoded elements before the guard, so an epoch that meets a bad file
    still completes it, and the file is named again every epoch. The prefix
    is a literal path (``[ ] * ?`` in it are not patterns). What a writer
    stopped mid-epoch (SIGTERM, SIGKILL) left behind is removed when no
    running process holds the cache (``pipeline.deliver.cachelock``).
    """
    h = hashlib.sha1()
    parts = ["elements v3: decoded, before the guard", opts.image_size, opts.resize,
             opts.interpolation, opts.channels, opts.label_mode, opts.exif_orientation,
             opts.max_pixels, opts.fast_jpeg, (opts.num_pipelines, opts.pipeline_id)]
    if opts.jpeg_dct_scaling or opts.antialias:  # (old caches keep their fingerprint)
        parts.append(("jpeg_dct_scaling", opts.jpeg_dct_scaling, "antialias", opts.antialias))
    if getattr(source, "mask_paths", None) is not None or getattr(source, "has_masks", False):
        # ("image as alone": pair images cached before that differ, so are not read back)
        parts += ["pairs", "image as alone", opts.mask_mode,
                  sorted((opts.mask_colors or {}).items()),
                  opts.mask_pad_value, getattr(source, "mask_paths", None)]
    h.update(repr(parts).encode())
    if not isinstance(source, index_lib.Index):  # shards.Records
        h.update(repr((source.files, source.counts)).encode())
        h.update(repr([read.file_stamp(f) for f in source.files]).encode())
    else:
        h.update(repr(source.paths).encode())
        h.update(source.stamps().tobytes())
        for arr in (source.labels, source.weights):
            h.update(b"-" if arr is None else arr.tobytes())
    prefix = f"{opts.cache}-{h.hexdigest()[:16]}"
    if not read.is_remote(prefix):
        cachelock.claim(prefix)  # a killed writer's lockfile and partial files go
    # An epoch that failed on a bad file (raise mode) leaves an index with no
    # data: TensorFlow would read it back as an empty, complete cache.
    if (not read.is_remote(prefix) and os.path.exists(prefix + ".index")
            and not glob.glob(glob.escape(prefix) + ".data-*")):
        logging.warning("pipeline: removing the incomplete cache %s.index (an earlier epoch "
                        "did not finish)", prefix)
        os.remove(prefix + ".index")
    return prefix


def sampling_shares(idx: index_lib.Index, opts, num_classes: int):
    """The class probabilities of ``opts.sampling`` for this index, or None.

    Raises:
        ValueError: files without one int class each, or shares that do not
            fit the classes (``balance.sampling_shares``).
    """
    if opts.sampling is None:
        return None
    if idx.labels is None or idx.label_kind != "int":
        kind = "no labels" if idx.labels is None else f"{idx.label_kind} labels"
        raise ValueError(f"`sampling` needs one int class per file; these files have {kind}. "
                         f"{checks.received('sampling', opts.sampling)}")
    return balance.sampling_shares(opts.sampling, idx.labels, num_classes, idx.class_names)


def _file_plan(idx: index_lib.Index, opts, label_spec, epoch_key=None, shares=None):
    """Plan elements ``(row, label, pre_error, b"", weight)`` of a path table
    (``epoch_key``, ``shares``: as for ``plan.rows``)."""
    rows, expected = plan_lib.rows(len(idx), opts, epoch_key, labels=idx.labels, shares=shares)
    label_dtype, _ = label_spec
    labels = (tf.constant(idx.labels, label_dtype) if idx.labels is not None
              and opts.label_mode is not None else None)
    weights = tf.constant(idx.weights, tf.float32) if idx.weights is not None else None
    errors = None
    if idx.errors:
        keys = tf.constant(sorted(idx.errors), tf.int64)
        values = tf.constant([idx.errors[k] for k in sorted(idx.errors)], tf.string)
        errors = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), "")

    def element(row):
        label = tf.gather(labels, row) if labels is not None else tf.constant(0, tf.int64)
        pre = errors.lookup(row) if errors is not None else tf.constant("")
        weight = tf.gather(weights, row) if weights is not None else tf.constant(1.0)
        return row, label, pre, tf.constant(b""), weight

    return rows.map(graph_fn(element)), expected


def build(source, opts: config_lib.ImageOptions, *, num_classes: Optional[int] = None,
          subset_name: str = "") -> tf.data.Dataset:
    """Builds the dataset for one Index (one subset) or one set of TFRecord shards.

    One line per stage, in data-flow order; ``plan.order`` alone places them
    (``Graph`` holds what the stages share).

    Args:
        source: an ``index.Index``, or ``shards.Records`` (TFRecord shards).
        opts: validated options.
        num_classes: for one-hot labels (default: from the source).
        subset_name: "training" / "validation" for messages.

    Returns:
        The ``tf.data.Dataset`` described in ``pipeline.from_directory``, with
        attributes ``class_names``, ``file_paths``, ``cache_estimate_bytes``
        and ``pipeline_built`` (see ``built``).

    Raises:
        ValueError: an empty subset, ``label_mode="binary"`` without exactly
            2 classes, or a cache over budget.
    """
    g = Graph(source, opts, num_classes, subset_name)  # list: rows or records, labels, stages
    ds = plan_lib.order(
        g.elements,                                 # shard, shuffle, read, check (in batches)
        seed=opts.seed, keyed=g.keyed,              # every order and seed from one epoch key
        map=g.map_step(),                           # decode, geometry, augment: one parallel map
        cache=g.cache_prefix(),                     # cache: decoded, before the guard
        guard=g.guarded,                            # on_error: raise, or skip and record
        finish=g.finish,                            # the output structure
        shuffle_cached=g.n if opts.shuffle else 0,  # above a cache: reshuffle ...
        augment=g.augment_step(),                   # ... and augment, fresh each epoch
        batch_size=opts.replica_batch_size, drop_remainder=opts.drop_remainder,
        fixed_shape=opts.image_size is not None,    # batch
        on_batches=g.dtype_step(),                  # deliver: dtype, prefetch, service, device
        prefetch=opts.prefetch, known_length=opts.on_error.length_known,
        options=data_options(opts), service=g.service_step(), device=delivery_device(opts))
    return g.attach(ds)


class Graph:
    """What the stages of one ``build`` share: the source's facts (rows or records,
    labels, classes), the decode ``Stages``, the guard's ``Source`` and error log;
    its methods are the stages ``plan.order`` places."""

    def __init__(self, source, opts, num_classes: Optional[int], subset_name: str):
        self.source, self.opts, self.subset_name = source, opts, subset_name
        self.records = None if isinstance(source, index_lib.Index) else source
        self.idx = source if self.records is None else None
        self._source_facts(num_classes)
        self._check_source()
        self._make_stages()
        self._plan_reads()

    def _source_facts(self, num_classes):
        """n, pairs, labels and classes of the index or the shards."""
        idx, records, opts = self.idx, self.records, self.opts
        self.pairs = idx.mask_paths is not None if idx is not None else records.has_masks
        self.n = len(idx) if records is None else records.num_examples
        if records is None:
            self.has_labels = idx.labels is not None and opts.label_mode is not None
            self.class_names = idx.class_names
            self.num_classes = num_classes or idx.num_classes
            self.label_spec = ((tf.int64 if idx.label_kind == "int" else tf.float32)
                               if self.has_labels else tf.int64, None)
        else:
            self.has_labels = records.has_labels and opts.label_mode is not None
            self.class_names = records.class_names
            self.num_classes = num_classes or records.num_classes or 0
            self.label_spec = (records.label_dtype, records.label_shape)
        self.has_weights = (idx.weights is not None if idx is not None
                            else records.has_weights) and self.has_labels
        self.paths = idx.paths if idx is not None else []

    def _check_source(self):
        """An empty subset, binary labels without 2 classes: refused; bad files at index
        time: named in a warning (raise mode)."""
        n, idx, num_classes = self.n, self.idx, self.num_classes
        if n == 0:
            raise ValueError(
                f"The {self.subset_name or 'dataset'} subset is empty: no files to read. "
                "Lower `validation_split` or add files. "
                f"Received: subset={getattr(self.opts, 'subset', self.subset_name)!r}, "
                f"validation_split={getattr(self.opts, 'validation_split', None)!r}")
        if self.has_labels and self.opts.label_mode == "binary" and num_classes != 2:
            shown = list(self.class_names or [])
            shown = shown if len(shown) <= 10 else shown[:10] + [f"... {len(shown) - 10} more"]
            what = f"class_names={shown!r}" if shown else f"num_classes={num_classes}"
            raise ValueError(
                "`label_mode='binary'` needs exactly 2 classes; found "
                f"{num_classes}. Received: label_mode='binary', {what}")
        if idx is not None and idx.errors and self.opts.on_error.raises:
            # (With "skip", each is logged once, when it is skipped: guard.ErrorLog.)
            bad = idx.bad
            logging.warning("pipeline: %d of %d file(s) are bad at index time (%s ...); "
                            "they are raised when met", len(bad), n,
                            "; ".join(f"{p}: {e}" for p, e in bad[:3]))

    def _make_stages(self):
        """The sampling shares, the decoders and ``Stages``, the cache estimate, the
        error log and the guard's ``Source``."""
        idx, opts = self.idx, self.opts
        self.shares = sampling_shares(idx, opts, self.num_classes) if idx is not None else None
        self.decoder, self.stages = make_stages(self.source, opts)
        note = self.decoder.fallback_note(idx.paths) if idx is not None else ""
        if note:  # the slow path is never silent (decode.Decoder._fallback logs the rest)
            logging.warning("%s", note)
        self.cache_estimate = check_cache_budget(opts, self.n)
        self.error_log = guard.ErrorLog(self.n, opts.max_errors)
        self.src = guard.Source(None if self.records is not None else self.paths,
                                self.why_failed_py)
        # The per-epoch randomness (the plan's order, the augment seeds) comes from one
        # key per epoch (``plan.order``'s ``keyed``): an iterator checkpoint taken at any
        # step, restored in a new process, continues in the unbroken run's order with its
        # pixels in every later epoch. (Shuffles that draw their seeds when each
        # iteration starts lose that state once their input is exhausted, which the
        # chunking (``guard.chunked``) does long before the epoch ends.)
        self.keyed = opts.shuffle or self.stages.augment_here or opts.sampling is not None

    def _plan_reads(self):
        """The mask table of pairs, the remote files fetched from Python, the damaged
        shards named from Python."""
        idx, records, opts = self.idx, self.records, self.opts
        self.mask_table = (tf.constant(read.path_bytes(idx.mask_paths), tf.string)
                           if self.pairs and idx is not None else None)
        # Remote files no TensorFlow file system serves here (s3:// on TensorFlow 2.17+)
        # are fetched from Python, many at once, before the in-graph map (read.fetch_stage).
        fetched = read.needs_fetch(self.paths) if records is None else []
        self.fetch = bool(fetched)
        if self.fetch and opts.service:
            raise ValueError(
                "`service` cannot serve files read through fsspec (here: "
                f"{fetched[0]!r}): the fetch is a "
                "tf.py_function, which tf.data service workers cannot run. Use TensorFlow "
                "2.16 with tensorflow-io (its S3 file system reads in graph), or write the "
                "images to TFRecord shards on a local disk or gs://. "
                f"Received: service={opts.service!r}")
        self.damaged_py = None
        if records is not None:
            mine, _ = plan_lib.record_files(records.files, opts)
            # the damaged shards this pipeline reads, named from Python (rare path)
            self.damaged_py = functools.partial(records.damaged_py, mine)

    def read_py(self, path):
        return self.records.read_py(path) if self.records is not None else read.try_read(path)

    def why_failed_py(self, path):
        """Why ``path`` failed, found from Python (the guard's rare path)."""
        contents, err = self.read_py(path)
        if not self.pairs:
            return guard.diagnose(contents, err, lambda c: self.decoder.decode(c),
                                  lambda img: self.stages.finish(img))
        return _why_pair_failed(path, contents, err, self.idx, self.stages)

    def elements(self, epoch_key):
        """The plan (sharded, shuffled), numbered for the guard, with its seeds and
        an end-of-epoch sentinel (``guard.chunked``); remote contents fetched."""
        idx, records, opts, src = self.idx, self.records, self.opts, self.src
        if records is None:
            plan, expected = _file_plan(idx, opts, self.label_spec, epoch_key, self.shares)
            label0 = (tf.zeros([], self.label_spec[0])
                      if not self.has_labels or idx.label_kind != "vector"
                      else tf.zeros([idx.labels.shape[1]], tf.float32))
        else:
            serialized, expected = plan_lib.records(
                records.files, records.counts, opts, records.read_shard, records.buffer_size,
                epoch_key)
            plan = serialized.map(graph_fn(records.parse), num_parallel_calls=opts.parallelism,
                                  deterministic=True)
            label0 = tf.zeros(records.label_shape, records.label_dtype)
        if self.pairs and records is not None:
            label0 = tf.constant(b"")  # the plan's label of a record pair is its mask's bytes
        sentinel = (src.empty_key, label0, tf.constant(guard.SENTINEL), tf.constant(b""),
                    tf.constant(0.0))
        seeds = plan_lib.element_seeds(opts.seed, epoch_key) if self.stages.augment_here else \
            tf.data.Dataset.from_tensors(tf.zeros([2], tf.int64)).repeat()
        ds = guard.chunked(plan, sentinel, seeds, src.empty_key)
        ds = read.fetch_stage(ds, src.name) if self.fetch else ds
        return (ds if self.pairs else self._checked(ds)), expected

    def _read(self, pos, window, key, label, pre_error, contents, weight, seed):
        """A file's bytes read into the element (before the batched checks)."""
        data = tf.cond(tf.strings.length(pre_error) > 0, lambda: contents,
                       lambda: tf.io.read_file(self.src.name(key)))
        return pos, window, key, label, pre_error, data, weight, seed

    def _checked(self, ds):
        """The header, sniff, bomb-guard and EXIF checks of whole batches of files
        (``decode.check_stage``); files read first where the plan holds paths. A failed
        read drops its element: the guard names the gap (its rare path)."""
        if not (self.src.records or self.fetch):
            ds = stack.map_on_its_device(ds, graph_fn(self._read), self.opts.parallelism,
                                         True).ignore_errors()
        g = self.stages.geometry(tf.zeros([2], tf.int64))
        return decode_lib.check_stage(ds, self.decoder, 5,
                                      g.target if g.window is None else None)

    def map_step(self) -> plan_lib.Map:
        """The per-element work, one parallel map. Order is kept in the map (the gap
        check needs it); the other parallel stages pass ``opts.is_deterministic``
        themselves (``data_options`` leaves tf.data's own setting alone)."""
        return plan_lib.Map(self.element, self.opts.parallelism, deterministic=True)

    def _placeholder(self, pre_error):
        """Bad at index time, or the end-of-epoch sentinel: (image, reason)."""
        opts = self.opts
        if opts.image_size is None:
            return self.decoder.placeholder(), pre_error
        # what resizing the 1x1 placeholder gives, in one op (an element the guard drops)
        return tf.zeros(list(opts.image_size) + [opts.channels], tf.uint8), pre_error

    def _load(self, contents, seed, checked):
        return self.stages(contents, seed, checked)

    def _load_pair(self, key, label, contents, seed):
        src = self.src
        if src.records:
            return self.stages.pair(contents, label, seed, tf.strings.join(["of ", key]))
        mask_name = tf.gather(self.mask_table, tf.maximum(key, 0))
        return self.stages.pair(tf.io.read_file(src.name(key)), tf.io.read_file(mask_name),
                                seed, mask_name)

    def _placeholder_pair(self, pre_error):
        image, reason = self._placeholder(pre_error)
        return image, tf.zeros(tf.concat([tf.shape(image)[:2], [1]], 0), tf.uint8), reason

    def element(self, pos, window, key, label, pre_error, contents, weight, seed, checked=None):
        """One planned element (its file read and checked, ``_checked``; pairs: not yet
        read) -> (image, label or mask, weight, key, pos, window, reason)."""
        opts, bad = self.opts, tf.strings.length(pre_error) > 0
        if self.pairs:
            image, mask, reason = tf.cond(
                bad, lambda: self._placeholder_pair(pre_error),
                lambda: self._load_pair(key, label, contents, seed))
            mask.set_shape(list(opts.image_size or (None, None)) + [1])
        else:
            image, reason = tf.cond(bad, lambda: self._placeholder(pre_error),
                                    lambda: self._load(contents, seed, checked))
        if opts.image_size is not None:
            image.set_shape(list(opts.image_size) + [opts.channels])
        else:
            image.set_shape([None, None, opts.channels])
        if self.pairs:
            return image, mask, weight, key, pos, window, reason
        # int labels stay int64 until ``structure``: a map returning an int32 it computed
        # cannot run on its one device (``stack.map_on_its_device``)
        y = encode_label(label, opts.label_mode, self.num_classes) if (
            self.has_labels and opts.label_mode != "int") else label
        return image, y, weight, key, pos, window, reason

    def cache_prefix(self) -> Optional[str]:
        """None, "" (memory) or the cache file prefix (``cache_file``)."""
        cache = self.opts.cache
        return None if cache is None else ("" if cache == "memory"
                                           else cache_file(self.opts, self.source))

    def guarded(self, ds, batch_size, expected):
        """The on_error policy on the user's batches (``batch_size``: nothing sits
        between here and batching; a batch that held a skipped file is then smaller
        by that many), else on internal chunks that are unbatched again.
        Variable-size (native) images cannot be batched: checked one by one."""
        opts, records = self.opts, self.records
        ds = ds.batch(batch_size or (guard.CHUNK if opts.image_size else 1))
        ds = stack.scan_on_its_device(ds, guard.initial_state(), graph_fn(guard.check_fn(
            opts, self.error_log, self.src, expected,
            records.lost_detail if records else None, self.damaged_py)))
        if batch_size:
            # A batch can end up empty (it held only the sentinel, or only bad files).
            return stack.filter_on_its_device(
                ds, graph_fn(lambda image, *rest: tf.shape(image)[0] > 0))
        return ds.unbatch()

    def finish(self, ds, with_dtype):
        """The output structure (and, ``with_dtype``, the dtype)."""
        return ds.map(graph_fn(functools.partial(self._structure, with_dtype)))

    def _structure(self, with_dtype, image, y, weight, key):
        opts = self.opts
        if self.has_labels and opts.label_mode == "int":
            y = encode_label(y, "int", self.num_classes)
        if with_dtype:
            image = scale(image, opts.dtype, opts.normalize)
        out = (image,) + ((y,) if self.has_labels or self.pairs else ()) + (
            (weight,) if self.has_weights else ())
        if opts.include_paths:
            out += (self.src.name(key),)
        return out[0] if len(out) == 1 else out

    def augment_step(self) -> Optional[plan_lib.Map]:
        """The augmentation above a cache (random ops fresh each epoch), or None."""
        opts = self.opts
        if opts.augment is None:
            return None
        return plan_lib.Map(self.augment, opts.parallelism, opts.is_deterministic)

    def augment(self, el, seed):
        aug, opts = self.opts.augment, self.opts
        if self.pairs:
            size = opts.image_size if aug.random_resized_crop is not None else None
            return aug.pair(el[0], el[1], seed, output_size=size,
                            pad_value=opts.mask_pad_value) + tuple(el[2:])
        if not isinstance(el, tuple):
            return _aug(aug, el, seed, opts)
        return (_aug(aug, el[0], seed, opts),) + tuple(el[1:])

    def dtype_step(self) -> Optional[plan_lib.Map]:
        """uint8 -> ``dtype`` on batches, or None (uint8 kept)."""
        return plan_lib.Map(self.to_dtype) if self.opts.dtype != tf.uint8 else None

    def to_dtype(self, *el):
        opts = self.opts
        return (scale(el[0], opts.dtype, opts.normalize),) + el[1:] if len(el) > 1 else \
            scale(el[0], opts.dtype, opts.normalize)

    def service_step(self) -> Optional[Callable]:
        return self.service if self.opts.service else None

    def service(self, ds):
        from pipeline.deliver import distribute  # pylint: disable=import-outside-toplevel
        return ds.apply(distribute.service_transformation(self.opts))

    def attach(self, ds) -> tf.data.Dataset:
        """``ds`` with ``class_names``, ``file_paths``, ``cache_estimate_bytes`` and
        ``pipeline_built``."""
        idx, opts = self.idx, self.opts
        ds.class_names = list(self.class_names) if self.class_names else None
        # As Keras: the files this dataset yields (with input_context: this pipeline's share).
        ds.file_paths = (list(idx.paths[opts.pipeline_id::opts.num_pipelines])
                         if idx is not None else None)
        ds.cache_estimate_bytes = self.cache_estimate
        ds.pipeline_built = Built(self.source, opts, self.error_log, self.num_classes,
                                  self.subset_name)
        return ds


def delivery_device(opts) -> Optional[str]:
    """``prefetch_to_device`` where that device is present (``device_present``), else None."""
    ptd = opts.prefetch_to_device
    return ptd if ptd and device_present(ptd) else None


def data_options(opts) -> tf.data.Options:
    """The ``tf.data.Options`` of a built dataset: autotune, threads, no
    default static optimizations."""
    options = tf.data.Options()
    options.autotune.enabled = bool(opts.autotune)
    if opts.autotune and opts.ram_budget_bytes:
        options.autotune.ram_budget = opts.ram_budget_bytes
    if opts.threadpool_size:
        options.threading.private_threadpool_size = opts.threadpool_size
    # No ``options.deterministic``: each parallel stage passes its own ``deterministic``
    # (``opts.is_deterministic`` or True), and a set ``deterministic=False`` here would enable
    # tf.data's ``make_sloppy`` rewrite, which serializes and optimizes the whole dataset graph
    # at each new dataset's first iterator (measured: 0.5-0.7 CPU-s, a tiny folder's whole
    # first epoch) to change nothing.
    # No static rewrite of the dataset graph at the first iterator: tf.data's default
    # optimizations (map_parallelization, noop_elimination, parallel_batch, ...) would
    # serialize the whole graph, its ~3,000-node functions included, and optimize it (about
    # 0.5 CPU-s per dataset, before its first element). The stages set their own
    # parallelism and read-ahead (``num_parallel_calls``, ``prefetch``).
    options.experimental_optimization.apply_default_optimizations = False
    # Iterator checkpoints (tf.train.Checkpoint(iterator=it)): the stateful ops
    # in this graph hold no state across elements (the raise-mode Assert, the
    # guard's rare-path recorder and diagnosis, the Pillow fallback), so
    # ignoring them is exact.
    options.experimental_external_state_policy = (
        tf.data.experimental.ExternalStatePolicy.IGNORE)
    return options


def device_present(name: str) -> bool:
    """Whether device ``name`` (e.g. "/gpu:0") exists here; logs once per name when not.

    ``prefetch_to_device`` to a missing device would be placed on the CPU by
    TensorFlow's soft placement without a word; it is left out instead, and
    one warning says so.
    """
    spec = tf.DeviceSpec.from_string(name)
    if not spec.device_type:
        return True  # no device type named (e.g. a job/task only): TensorFlow decides
    found = [d.name for d in tf.config.list_logical_devices(spec.device_type.upper())]
    if spec.device_index is not None:
        found = [d for d in found if d.endswith(f":{spec.device_type.upper()}:"
                                               f"{spec.device_index}")]
    if found:
        return True
    _warn_missing_device(name)
    return False


@functools.lru_cache(maxsize=None)
def _warn_missing_device(name: str) -> None:
    devices = ", ".join(d.name.split("device:")[-1] for d in tf.config.list_logical_devices())
    logging.warning("pipeline: prefetch_to_device=%r is ignored: there is no such device here "
                    "(devices: %s); batches stay in host memory, prefetched as usual "
                    "(prefetch).", name, devices or "none")


def _aug(aug, image, seed, opts):
    if aug.random_resized_crop is not None:
        return aug(image, seed, output_size=opts.image_size)
    return aug(image, seed)


ORIENTED_PAIR_OP_NAME = "pipeline_oriented_pair_note"
_GENERIC = "the element failed after decoding, and not again when retried (transient?)"


def _why_pair_failed(path, contents, err, idx, stages) -> str:
    """Why a pair failed, found from Python (rare path): the image's own fault, else
    its mask's (named), else the generic answer."""
    why = guard.diagnose(contents, err, lambda c: stages.decoder.decode(c), lambda img: img)
    if why != _GENERIC or idx is None:
        return why
    try:
        mask_path = idx.mask_paths[idx.paths.index(path)]
    except ValueError:
        return why
    m_contents, m_err = read.try_read(mask_path)
    m_why = guard.diagnose(m_contents, m_err, lambda c: stages.mask_decoder.decode(c),
                           lambda m: m)
    return why if m_why == _GENERIC else f"mask {mask_path}: {m_why}"


def build_subsets(idx: index_lib.Index, opts: config_lib.ImageOptions):
    """The dataset, or the subset(s) that ``validation_split`` / ``subset`` ask for.

    Each subset is built with its own options (``ImageOptions.for_subset``:
    the validation subset is not augmented unless ``augment_validation``).
    """
    num_classes = idx.num_classes

    def unlisted(ds):  # folders that could not be listed (on_error="skip") are bad inputs
        for folder, why in idx.unlisted.items():
            ds.pipeline_built.error_log.add(folder, why)
        return ds

    if opts.validation_split is None:
        return unlisted(build(idx, opts, num_classes=num_classes))
    train, val = index_lib.split(idx, opts.validation_split, opts.seed)
    make = {"training": lambda: unlisted(build(train, opts.for_subset("training"),
                                               num_classes=num_classes, subset_name="training")),
            "validation": lambda: unlisted(build(val, opts.for_subset("validation"),
                                                 num_classes=num_classes,
                                                 subset_name="validation"))}
    if opts.subset == "both":
        return make["training"](), make["validation"]()
    return make[opts.subset]()
