"""Config: the options of the image factories, every default in one place, validated once.

``make_options(factory, **kw)`` is called once per factory call, before any
file is listed or any graph is built. It checks every value, the rules
between options, and the rules of the factory, and returns a frozen
``ImageOptions``. The other stages only read it, each its own group of
options (``GROUPS``: ``DecodeOptions``, ``GeometryOptions``, ...), a frozen
dataclass that checks its own fields; ``OnError`` is the bad-file policy.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import numbers
import os
from typing import Any, Optional, Tuple

import numpy as np
import tensorflow as tf

from pipeline import checks
# image_size's check lives with the low-level checks (Augment's output_size uses it
# too); config.check_image_size is the same function.
from pipeline.checks import check_image_size  # noqa: F401

LABEL_MODES = ("int", "categorical", "binary", "multi_hot", "float", None)
ONE_CLASS_LABEL_MODES = ("int", "categorical", "binary", None)
RESIZE_MODES = ("stretch", "crop", "pad", "center_crop")
INTERPOLATIONS = (
    "bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5",
    "gaussian", "mitchellcubic",
)
# Other libraries' names of these methods (Keras' load_img and PIL's "lanczos").
INTERPOLATION_HINTS = {
    "lanczos": ("lanczos3", "Keras' load_img and PIL's 'lanczos' is tf.image.resize's "
                            "'lanczos3'"),
}
SUBSETS = ("training", "validation", "both", None)
ON_ERROR = ("raise", "skip")
PROCESSING_MODES = ("off", "dynamic", "file")
DTYPES = {
    "uint8": tf.uint8, "float32": tf.float32, "bfloat16": tf.bfloat16, "float16": tf.float16,
}
# Pillow's decompression-bomb limit (see ``checks.DEFAULT_MAX_PIXELS``).
DEFAULT_MAX_PIXELS = checks.DEFAULT_MAX_PIXELS
# How long a tf.data service reader waits for an element before raising (service_timeout_s).
DEFAULT_SERVICE_TIMEOUT_S = 300.0
# Factories whose files hold one class each (multi-label and float targets
# come from manifests or stored shards).
ONE_CLASS_FACTORIES = ("from_directory", "from_paths")
NO_SPLIT_FACTORIES = ("from_tfrecords",)


class OnError(str, enum.Enum):
    """What a bad file does (``ImageOptions.on_error``).

    ``RAISE`` ("raise"): iterating raises at the file, naming it; every
    element arrives or the epoch raises, so the length is known. ``SKIP``
    ("skip"): the file is dropped and recorded (``pipeline.errors``). A str
    enum: each member equals its string and shows as it (``repr`` too), so
    messages quote the value as users write it. ``OnError.of`` takes a member
    or one of the strings.
    """

    RAISE = "raise"
    SKIP = "skip"

    def __repr__(self) -> str:
        return repr(self.value)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec) -> str:
        return format(self.value, spec)

    @classmethod
    def of(cls, value) -> "OnError":
        """The member for ``value`` ("raise", "skip" or a member).

        Raises:
            ValueError: "`on_error` must be one of ['raise', 'skip']. Received: on_error=..."
        """
        if isinstance(value, cls):
            return value
        return cls(checks.check_choice("on_error", value, ON_ERROR))

    @property
    def skips(self) -> bool:
        """A bad file is dropped and recorded."""
        return self is OnError.SKIP

    @property
    def raises(self) -> bool:
        """A bad file raises when met."""
        return self is OnError.RAISE

    @property
    def length_known(self) -> bool:
        """Every element arrives or the epoch raises: the number of elements is known."""
        return self is OnError.RAISE


def _set(group, **values) -> None:
    """Stores the checked (normalized) values on a frozen options group."""
    for name, value in values.items():
        object.__setattr__(group, name, value)


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


# One frozen group per stage that reads the options; each checks its own fields in
# __post_init__ (rules between groups: ``_check_between``; rules of a factory:
# ``_check_factory``). The fields are documented on ``ImageOptions``.
@dataclasses.dataclass(frozen=True)
class DeliveryOptions:
    """Labels, batching and output (``assemble``'s output structure, ``plan``'s batch
    and delivery): label_mode, batch_size, drop_remainder, include_paths, dtype,
    normalize, prefetch_to_device."""

    label_mode: Optional[str] = "int"
    batch_size: Optional[int] = 32
    drop_remainder: bool = False
    include_paths: bool = False
    dtype: Any = tf.uint8
    normalize: Any = None
    prefetch_to_device: Optional[str] = None

    def __post_init__(self):
        r = checks.received
        checks.check_choice("label_mode", self.label_mode, LABEL_MODES)
        _set(self, drop_remainder=checks.check_bool("drop_remainder", self.drop_remainder),
             include_paths=checks.check_bool("include_paths", self.include_paths),
             normalize=_check_normalize(self.normalize),
             batch_size=checks.check_int("batch_size", self.batch_size, allow_none=True),
             dtype=_check_dtype(self.dtype))
        if self.normalize is not None and self.dtype == tf.uint8:
            raise ValueError("`normalize` needs a float `dtype` (uint8 images are 0-255). "
                             f"{r('normalize', self.normalize)}, dtype=tf.uint8")
        _check_device_name(self.prefetch_to_device)


def _check_device_name(ptd) -> None:
    r = checks.received
    if ptd is not None and not isinstance(ptd, str):
        raise ValueError("`prefetch_to_device` must be None or a device name such as "
                         f"'/gpu:0'. {r('prefetch_to_device', ptd)}")
    if ptd is not None:
        try:  # TensorFlow's own parse, here, so that its error names the argument
            tf.DeviceSpec.from_string(ptd)
            parsed = bool(ptd.strip())
        except (ValueError, TypeError):
            parsed = False
        if not parsed:
            raise ValueError("`prefetch_to_device` must be a device name such as '/gpu:0', "
                             "'gpu:0' or '/job:localhost/replica:0/task:0/device:GPU:0'. "
                             f"{r('prefetch_to_device', ptd)}")


@dataclasses.dataclass(frozen=True)
class OrderOptions:
    """Which elements, in which order (``plan``: sharding, shuffles, split, sampling,
    determinism): shuffle, seed, validation_split, subset, sampling, input_context,
    deterministic."""

    shuffle: bool = True
    seed: Optional[int] = None
    validation_split: Optional[float] = None
    subset: Optional[str] = None
    sampling: Any = None
    input_context: Any = None
    deterministic: Optional[bool] = None

    def __post_init__(self):
        r = checks.received
        _set(self, shuffle=checks.check_bool("shuffle", self.shuffle))
        ctx = self.input_context
        if ctx is not None and not (hasattr(ctx, "num_input_pipelines")
                                    and hasattr(ctx, "input_pipeline_id")):
            raise ValueError("`input_context` must be a tf.distribute.InputContext or None. "
                             f"{r('input_context', ctx)}")
        split, subset = self.validation_split, self.subset
        checks.check_choice("subset", subset, SUBSETS)
        if split is not None:
            if isinstance(split, (bool, np.bool_)) or not isinstance(split, numbers.Real) or not (
                    0 < split < 1):
                raise ValueError("`validation_split` must be a float strictly between 0 and 1. "
                                 f"{r('validation_split', split)}")
            _set(self, validation_split=float(split))
            if subset is None:
                raise ValueError("`validation_split` needs `subset` ('training', 'validation' "
                                 f"or 'both'). {r('subset', subset)}")
        elif subset is not None:
            raise ValueError("`subset` is only valid with `validation_split`. "
                             f"{r('subset', subset)}, validation_split=None")
        _set(self, seed=check_seed(self.seed), sampling=check_sampling(self.sampling))
        det = self.deterministic
        if det is not None and not isinstance(det, (bool, np.bool_)):
            raise ValueError(f"`deterministic` must be None or a bool. {r('deterministic', det)}")

    @property
    def is_deterministic(self) -> bool:
        """Order is guaranteed when asked, or when a seed or no shuffle implies it."""
        if self.deterministic is not None:
            return bool(self.deterministic)
        return self.seed is not None or not self.shuffle

    @property
    def num_pipelines(self) -> int:
        """Input pipelines sharing the data (1 without ``input_context``)."""
        ctx = self.input_context
        return ctx.num_input_pipelines if ctx is not None else 1

    @property
    def pipeline_id(self) -> int:
        """This input pipeline's index (0 without ``input_context``)."""
        ctx = self.input_context
        return ctx.input_pipeline_id if ctx is not None else 0


@dataclasses.dataclass(frozen=True)
class ServiceOptions:
    """The tf.data service (``distribute``): service, processing_mode, job_name,
    service_timeout_s."""

    service: Optional[str] = None
    processing_mode: str = "off"
    job_name: Optional[str] = None
    service_timeout_s: Optional[float] = DEFAULT_SERVICE_TIMEOUT_S

    def __post_init__(self):
        r = checks.received
        svc = self.service
        if svc is not None and not (isinstance(svc, str) and svc):
            raise ValueError("`service` must be None or a dispatcher address such as "
                             f"'grpc://host:5050'. {r('service', svc)}")
        checks.check_choice("processing_mode", self.processing_mode, PROCESSING_MODES)
        if self.processing_mode != "off" and not svc:
            raise ValueError(
                "`processing_mode` applies to a tf.data service: pass `service=` (the "
                f"dispatcher address) too. Received: processing_mode={self.processing_mode!r}, "
                "service=None")
        if self.job_name is not None and not isinstance(self.job_name, str):
            raise ValueError(f"`job_name` must be None or a str. {r('job_name', self.job_name)}")
        if self.job_name is not None and not svc:
            raise ValueError("`job_name` names a tf.data service job: pass `service=` (the "
                             f"dispatcher address) too. {r('job_name', self.job_name)}, "
                             "service=None")
        t = self.service_timeout_s
        if t is not None and (isinstance(t, (bool, np.bool_)) or not isinstance(t, numbers.Real)
                              or not 0 < t < float("inf")):
            raise ValueError("`service_timeout_s` must be a number of seconds > 0, or None (wait "
                             f"without end). {r('service_timeout_s', t)}")
        if t != DEFAULT_SERVICE_TIMEOUT_S and not svc:
            raise ValueError("`service_timeout_s` bounds a wait for the tf.data service: pass "
                             "`service=` (the dispatcher address) too. "
                             f"{r('service_timeout_s', t)}, service=None")
        _set(self, service_timeout_s=None if t is None else float(t))


@dataclasses.dataclass(frozen=True)
class DecodeOptions:
    """What the decoders read (``decode.Decoder``): channels, max_pixels,
    exif_orientation."""

    channels: int = 3
    max_pixels: int = DEFAULT_MAX_PIXELS
    exif_orientation: bool = True

    def __post_init__(self):
        _set(self, exif_orientation=checks.check_bool("exif_orientation", self.exif_orientation))
        if not _is_int(self.channels) or self.channels not in (1, 3, 4):
            raise ValueError(f"`channels` must be 1, 3 or 4. "
                             f"{checks.received('channels', self.channels)}")
        _set(self, channels=int(self.channels),
             max_pixels=checks.check_int("max_pixels", self.max_pixels))


@dataclasses.dataclass(frozen=True)
class GeometryOptions:
    """Each element's geometry (``assemble.Stages.geometry``, ``transform``):
    image_size, resize, interpolation, antialias, fast_jpeg, jpeg_dct_scaling."""

    image_size: Optional[Tuple[int, int]] = (256, 256)
    resize: str = "stretch"
    interpolation: str = "bilinear"
    antialias: bool = False
    fast_jpeg: bool = True
    jpeg_dct_scaling: bool = True

    def __post_init__(self):
        for name in ("fast_jpeg", "jpeg_dct_scaling", "antialias"):
            _set(self, **{name: checks.check_bool(name, getattr(self, name))})
        _set(self, image_size=check_image_size(self.image_size))
        checks.check_choice("resize", self.resize, RESIZE_MODES)
        checks.check_choice("interpolation", self.interpolation, INTERPOLATIONS,
                            INTERPOLATION_HINTS)

    @property
    def dct_target(self) -> Optional[Tuple[int, int]]:
        """The size a JPEG (or its window) is decoded at least at, at a reduced DCT
        scale, or None (full scale): not for "pad", whose content size is rounded
        from the decoded size (a reduced one would move the content by a pixel)."""
        if self.fast_jpeg and self.jpeg_dct_scaling and self.image_size is not None \
                and self.resize != "pad":
            return self.image_size
        return None


@dataclasses.dataclass(frozen=True)
class ErrorOptions:
    """The bad-file policy (``guard``, ``index``, ``pairs``, ``manifest``): on_error
    (an ``OnError``), max_errors."""

    on_error: OnError = OnError.RAISE
    max_errors: Optional[float] = None

    def __post_init__(self):
        r = checks.received
        _set(self, on_error=OnError.of(self.on_error))
        me = self.max_errors
        if me is None:
            return
        if isinstance(me, (bool, np.bool_)) or not isinstance(me, numbers.Real) or not (
                me >= 0) or (not isinstance(me, numbers.Integral) and not me < 1):
            raise ValueError(
                "`max_errors` must be an int >= 0 (a count) or a float in [0, 1) "
                f"(a fraction of the files). {r('max_errors', me)}")
        _set(self, max_errors=int(me) if isinstance(me, numbers.Integral) else float(me))
        if not self.on_error.skips:
            raise ValueError("`max_errors` is an error budget for on_error='skip'. "
                             f"{r('on_error', self.on_error.value)}")


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
    """How tf.data runs the graph (the map's parallelism, prefetch, ``tf.data.Options``):
    num_parallel_calls, prefetch, autotune, ram_budget_bytes, threadpool_size."""

    num_parallel_calls: Optional[int] = None
    prefetch: int = 2
    autotune: bool = False
    ram_budget_bytes: Optional[int] = None
    threadpool_size: Optional[int] = None

    def __post_init__(self):
        _set(self, autotune=checks.check_bool("autotune", self.autotune))
        if self.num_parallel_calls == tf.data.AUTOTUNE:  # tf.data tunes it: autotune on
            _set(self, autotune=True)
        else:
            _set(self, num_parallel_calls=checks.check_int(
                "num_parallel_calls", self.num_parallel_calls, allow_none=True))
        if self.prefetch == tf.data.AUTOTUNE:
            _set(self, autotune=True)
        else:
            _set(self, prefetch=checks.check_int("prefetch", self.prefetch, minimum=0))
        for name in ("threadpool_size", "ram_budget_bytes"):
            _set(self, **{name: checks.check_int(name, getattr(self, name), allow_none=True)})

    @property
    def parallelism(self) -> int:
        """Parallel calls of the decode map: 2x the cores unless set."""
        return self.num_parallel_calls or 2 * checks.cpu_count()


@dataclasses.dataclass(frozen=True)
class CacheOptions:
    """The cache of decoded elements (``assemble.cache_file``, ``plan``'s cache):
    cache, cache_budget_bytes."""

    cache: Optional[str] = None
    cache_budget_bytes: Optional[int] = None

    def __post_init__(self):
        _set(self, cache_budget_bytes=checks.check_int(
            "cache_budget_bytes", self.cache_budget_bytes, allow_none=True),
             cache=check_cache(self.cache))


@dataclasses.dataclass(frozen=True)
class AugmentOptions:
    """The random ops (``pipeline.Augment``, run by ``assemble.Stages`` or above the
    cache): augment, augment_validation."""

    augment: Any = None
    augment_validation: bool = False

    def __post_init__(self):
        _set(self, augment_validation=checks.check_bool("augment_validation",
                                                        self.augment_validation))
        aug = self.augment
        # a pipeline.Augment checks itself against the options (pipeline.transform.augment)
        if aug is not None and not callable(getattr(aug, "check_options", None)):
            raise ValueError(f"`augment` must be None or a pipeline.Augment. "
                             f"{checks.received('augment', aug)}")


MASK_MODES = ("index", "rgb")


@dataclasses.dataclass(frozen=True)
class MaskOptions:
    """The masks of segmentation pairs (``masks.MaskDecoder``, ``Stages.mask``):
    mask_mode, mask_colors, mask_pad_value."""

    mask_mode: str = "index"
    mask_colors: Any = None
    mask_pad_value: int = 255

    def __post_init__(self):
        r = checks.received
        checks.check_choice("mask_mode", self.mask_mode, MASK_MODES)
        pad = self.mask_pad_value
        if not _is_byte(pad):
            raise ValueError("`mask_pad_value` must be an int in [0, 255] (a uint8 class; 255 "
                             f"is the usual ignore index). {r('mask_pad_value', pad)}")
        _set(self, mask_pad_value=int(pad))
        colors = self.mask_colors
        if self.mask_mode == "index":
            if colors is not None:
                raise ValueError("`mask_colors` maps colours with mask_mode='rgb'; mask_mode is "
                                 f"'index'. {r('mask_colors', colors)}")
            return
        _set(self, mask_colors=_check_mask_colors(colors))


def _check_mask_colors(colors) -> dict:
    r = checks.received
    if not isinstance(colors, dict) or not colors:
        raise ValueError("mask_mode='rgb' needs `mask_colors`, a non-empty dict "
                         f"{{(r, g, b): class}}. {r('mask_colors', colors)}")
    fixed = {}
    for key, cls in colors.items():
        if not (isinstance(key, (tuple, list)) and len(key) == 3 and all(map(_is_byte, key))):
            raise ValueError("`mask_colors` keys must be (r, g, b) tuples of ints in [0, 255]. "
                             f"{r('mask_colors', colors)} (the key {key!r})")
        if not _is_byte(cls):
            raise ValueError("`mask_colors` values must be int classes in [0, 255]. "
                             f"{r('mask_colors', colors)} (the value {cls!r} of {key!r})")
        if tuple(int(v) for v in key) in fixed:
            raise ValueError(f"`mask_colors` names the colour {tuple(key)} twice. "
                             f"{r('mask_colors', colors)}")
        fixed[tuple(int(v) for v in key)] = int(cls)
    return fixed


# The one map of ImageOptions' fields onto the groups: attribute -> group (each field
# of ImageOptions is a field of exactly one group; checked below ImageOptions).
GROUPS = {
    "delivery": DeliveryOptions, "order": OrderOptions, "data_service": ServiceOptions,
    "decoding": DecodeOptions, "geometry": GeometryOptions, "errors": ErrorOptions,
    "runtime": RuntimeOptions, "caching": CacheOptions, "augmentation": AugmentOptions,
    "masks": MaskOptions,
}


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """Validated options of an image dataset factory (every default is here).

    Attributes:
        label_mode: "int" (int32 scalar), "categorical" (float32 one-hot
            ``[num_classes]``), "binary" (float32 ``[1]``, exactly 2 classes),
            "multi_hot" (float32 ``[num_classes]``, manifests and shards),
            "float" (float32 regression target, manifests and shards) or None
            (no labels).
        channels: 1, 3 or 4; every image comes out with exactly this many
            (gray is replicated, RGB to gray is ITU-R 601 luma, alpha is
            dropped or set to 255).
        image_size: (height, width) in pixels, default (256, 256); None keeps
            the native size (then ``batch_size`` must be None).
        resize: "stretch", "crop" (centre crop to the target aspect, as Keras'
            ``crop_to_aspect_ratio``), "pad" (letterbox with zeros; content
            at least 1 px high and wide) or "center_crop" (the ImageNet
            evaluation protocol of the reference ResNet: the centred window
            of the target aspect, shrunk by ``s / (s + 32)`` where ``s`` is the
            target's shorter side -- 224/256 at 224x224, as resizing the
            shorter side to 256 and cropping 224 -- then resized; see
            ``pipeline.transform.geometry.center_crop_window``). "crop" and
            "center_crop" decode only their window of a JPEG.
        interpolation: a ``tf.image.resize`` method ("bilinear", "nearest",
            "bicubic", "area", "lanczos3", "lanczos5", "gaussian",
            "mitchellcubic"); another spelling raises ``ValueError``, with
            "did you mean 'lanczos3'?" for Keras' / PIL's "lanczos" (and the
            lower-case name for one in capitals).
        batch_size: int (default 32), or None for unbatched elements. With
            ``input_context``, the global batch size.
        sampling: None (default: every file once per epoch), "balanced", or
            a dict ``{class: share}`` (class index or class name -> a number
            >= 0; the shares are normalized to sum 1; every class with files
            needs one, 0 leaves a class out). Each epoch then draws as many
            elements as there are files (this input pipeline's share), each
            from class ``c`` with probability ``share[c]`` ("balanced": every
            class with files equally likely), out of per-class streams that
            are each shuffled and repeated
            (``tf.data.Dataset.sample_from_datasets``): **a balanced epoch
            repeats files of small classes and leaves out some files of large
            ones** (each class stream runs through all its files before
            repeating one). The draws follow ``seed`` (the same seed, the same
            epochs) and resume with iterator checkpoints; ``shuffle`` does not
            apply (the draws are random). One class per file (int labels),
            path sources only (``from_directory``, ``from_paths``,
            ``from_manifest``), not with ``cache`` or ``service``. The
            validation subset is never resampled. For a loss weighting
            instead, see ``pipeline.class_weights`` (use one or the other).
        shuffle: bool (default True): the path list is reshuffled every epoch
            before decoding (memory does not grow with the dataset); with a
            cache, the first epoch's paths are shuffled and cached elements
            are reshuffled in a buffer each epoch.
        seed: int in [0, 2**63) or None; the same seed gives the same order,
            split and augmentation.
        validation_split: float in (0, 1) or None; needs ``subset``.
        subset: "training", "validation" or "both" ("both" returns (train,
            val), disjoint and complete, split as Keras does).
        augment_validation: bool (default False): augment the validation
            subset too. By default only training data is augmented, as
            Keras' augmentation layers are inactive at evaluation.
        dtype: tf.uint8 (default, 0-255), tf.float32, tf.bfloat16 or
            tf.float16 (scaled to [0, 1], or as ``normalize`` says).
        normalize: None ([0, 1]), "symmetric" ([-1, 1]) or (mean, std) per
            channel in [0, 1] units: (x / 255 - mean) / std. Float dtypes only.
        cache: None, "memory", or a file path prefix with a folder part
            (e.g. "./cache/train"): decoded, resized elements are cached. The
            files written are ``path-<fingerprint>.*``; the fingerprint covers
            the files (paths, labels, and each file's size, modification time
            and change time in ns: a file edited in place, even with its
            modification time put back, is read again into a new cache) and the
            options, so a cache is only read back by the same dataset over the
            same contents. A memory cache holds the files as its first epoch
            read them, for the dataset's lifetime.
        cache_budget_bytes: int, the cache size allowed (default: half the
            available memory, or the free disk space for a cache file).
        on_error: a ``pipeline.config.OnError`` (given as "raise" or "skip");
            "raise" (default): iterating reaches a bad file and raises
            ``tf.errors.InvalidArgumentError`` whose message names the path and
            the reason; "skip": the file is dropped, logged and listed by
            ``pipeline.errors(ds)``. With "raise" the number of batches is
            known (``len(ds)``; every element arrives or the epoch raises).
            With "skip" it cannot be known before decoding:
            ``ds.cardinality()`` is ``tf.data.UNKNOWN_CARDINALITY`` and
            ``len(ds)`` raises ``TypeError``; ``model.fit`` runs every epoch
            to the end, counting the steps in the first (Keras shows no total
            there and may warn "Your input ran out of data", which is
            harmless here) and showing them from the second.
        max_errors: with "skip": an int count or a float fraction in [0, 1) of
            the files; past it iteration raises (see ``pipeline.errors``).
        include_paths: bool (default False): each element also carries its
            file path (tf.string, ``[batch]``) as its last item, so that
            outputs (e.g. ``model.predict``) can be matched to files, also
            when bad files were skipped. ``model.fit`` / ``evaluate`` read a
            third item as ``sample_weight`` (Keras unpacks ``(x, y, w)``) and
            fail on the strings: drop the paths for them with
            ``ds.map(lambda *el: el[:-1])`` (``(x, y, path)`` -> ``(x, y)``).
        exif_orientation: bool (default True): apply the JPEG EXIF orientation
            tag (read in graph from the file's bytes, whatever the source).
            Segmentation pairs: True pairs each image as displayed (masks drawn
            on the rotated image, as annotation tools show it); False pairs on
            the stored pixel grid.
        max_pixels: int, default 178,956,970 (Pillow's decompression-bomb limit,
            2 x ``PIL.Image.MAX_IMAGE_PIXELS``): files whose
            header claims more pixels are bad, before any decode.
        deterministic: None (ordered when ``seed`` is given or
            ``shuffle=False``), True or False.
        num_parallel_calls: int, decode parallelism; default 2x the cores
            (``tf.data.AUTOTUNE`` lets tf.data tune it and turns autotune on).
        prefetch: int >= 0, batches prefetched (default 2; each holds
            batch_size*height*width*channels bytes), or ``tf.data.AUTOTUNE``.
        autotune: bool (default False: measured here, tf.data autotuning left
            a core idle in most epochs; see ``pipeline.assemble``).
        ram_budget_bytes: int, tf.data's autotune RAM budget (with autotune).
        threadpool_size: int, a private tf.data thread pool of this size.
        prefetch_to_device: e.g. "/gpu:0": batches are copied to that device
            ahead of time (last stage; not with a distribution strategy).
            A name TensorFlow cannot parse (e.g. "gpu0") is a ValueError.
            Where that device does not exist (e.g. no GPU), it is left out
            and one warning per device name says so.
        fast_jpeg: bool (default True): crop-before-decode of JPEGs for
            ``resize="crop"``, ``"center_crop"`` and random resized crops (only
            the window is decoded); it gives exactly the pixels of decoding
            whole, then cropping (tests/transform/test_fastpaths.py). False: every JPEG
            is decoded whole at full scale, then cropped and resized (the
            reference path; ``jpeg_dct_scaling`` has no effect).
        jpeg_dct_scaling: bool (default True): a JPEG is decoded at the
            largest of libjpeg's DCT scales 1/2, 1/4, 1/8 that keeps the decoded
            image (or its crop window) at least ``image_size`` in both sides,
            then resized the rest of the way (``tf.io.decode_jpeg``'s
            ``ratio``). Decoding fewer pixels is faster, and the DCT scaling is
            an anti-aliasing pre-filter: against an antialiased resize of the
            full decode it is closer than a full decode + bilinear resize
            (docs/resize.md). False: full-scale decode, the pixels of Keras'
            ``image_dataset_from_directory`` (full decode + resize). Applies
            with an ``image_size`` and ``fast_jpeg=True``, to every resize mode
            but "pad" (decoded at full scale: its content size is rounded from
            the decoded size); EXIF-rotated files take their displayed size.
        antialias: bool (default False): ``tf.image.resize``'s ``antialias``
            (as ``keras.layers.Resizing``): a reducing resize widens its filter
            by the reduction, the reference quality, at about 4x the CPU of
            a plain bilinear resize (less after DCT scaling).
        augment: None or a ``pipeline.Augment`` (random ops, seeded, in graph).
        input_context: a ``tf.distribute.InputContext``: this input pipeline's
            share of the elements (exactly once across pipelines); each
            pipeline's batches hold the per-replica batch,
            ``input_context.get_per_replica_batch_size(batch_size)``
            (``batch_size`` stays the global batch).
        service: None or the address of a tf.data service dispatcher
            ("grpc://host:port"): the pipeline runs on its workers.
        processing_mode: "off", "dynamic" or "file" (service sharding policy);
            only with ``service``.
        job_name: str or None: consumers with the same job name share one
            service job.
        service_timeout_s: float > 0 or None (default 300): with ``service``,
            the reader raises ``tf.errors.InvalidArgumentError`` ("pipeline: no
            element from the tf.data service at ADDRESS for N s ...") once it
            has waited that long for an element, e.g. after a worker died
            (the service keeps waiting for it: docs/scale-out.md); None waits
            without end, as TensorFlow does.
        drop_remainder: bool (default False): drop the last, short batch.
        mask_mode: segmentation pairs only (``masks=``, ``masks_dir=``,
            ``mask_column=``): "index" (default: a palette image's index, a
            gray image's value, is the class) or "rgb" (colours mapped by
            ``mask_colors``); see ``pipeline.decode.masks``.
        mask_colors: {(r, g, b): class} with ints in [0, 255], for
            ``mask_mode="rgb"`` (required there, refused otherwise).
        mask_pad_value: int in [0, 255] (default 255, the usual ignore
            index): the class of mask pixels that padding or a geometric
            augmentation with ``fill_mode="constant"`` makes up.

    Groups (read-only attributes, one per stage that reads them, each a frozen
    dataclass that checks its own fields): ``delivery`` (``DeliveryOptions``),
    ``order`` (``OrderOptions``), ``data_service`` (``ServiceOptions``),
    ``decoding`` (``DecodeOptions``), ``geometry`` (``GeometryOptions``),
    ``errors`` (``ErrorOptions``), ``runtime`` (``RuntimeOptions``),
    ``caching`` (``CacheOptions``), ``augmentation`` (``AugmentOptions``),
    ``masks`` (``MaskOptions``); ``GROUPS`` maps each field onto its group.
    """

    label_mode: Optional[str] = DeliveryOptions.label_mode
    channels: int = DecodeOptions.channels
    image_size: Optional[Tuple[int, int]] = GeometryOptions.image_size
    resize: str = GeometryOptions.resize
    interpolation: str = GeometryOptions.interpolation
    batch_size: Optional[int] = DeliveryOptions.batch_size
    sampling: Any = OrderOptions.sampling
    shuffle: bool = OrderOptions.shuffle
    seed: Optional[int] = OrderOptions.seed
    validation_split: Optional[float] = OrderOptions.validation_split
    subset: Optional[str] = OrderOptions.subset
    augment_validation: bool = AugmentOptions.augment_validation
    dtype: Any = DeliveryOptions.dtype
    normalize: Any = DeliveryOptions.normalize
    cache: Optional[str] = CacheOptions.cache
    cache_budget_bytes: Optional[int] = CacheOptions.cache_budget_bytes
    on_error: OnError = ErrorOptions.on_error
    max_errors: Optional[float] = ErrorOptions.max_errors
    include_paths: bool = DeliveryOptions.include_paths
    exif_orientation: bool = DecodeOptions.exif_orientation
    max_pixels: int = DecodeOptions.max_pixels
    deterministic: Optional[bool] = OrderOptions.deterministic
    num_parallel_calls: Optional[int] = RuntimeOptions.num_parallel_calls
    prefetch: int = RuntimeOptions.prefetch
    autotune: bool = RuntimeOptions.autotune
    ram_budget_bytes: Optional[int] = RuntimeOptions.ram_budget_bytes
    threadpool_size: Optional[int] = RuntimeOptions.threadpool_size
    prefetch_to_device: Optional[str] = DeliveryOptions.prefetch_to_device
    fast_jpeg: bool = GeometryOptions.fast_jpeg
    jpeg_dct_scaling: bool = GeometryOptions.jpeg_dct_scaling
    antialias: bool = GeometryOptions.antialias
    augment: Any = AugmentOptions.augment
    input_context: Any = OrderOptions.input_context
    service: Optional[str] = ServiceOptions.service
    processing_mode: str = ServiceOptions.processing_mode
    job_name: Optional[str] = ServiceOptions.job_name
    service_timeout_s: Optional[float] = ServiceOptions.service_timeout_s
    drop_remainder: bool = DeliveryOptions.drop_remainder
    mask_mode: str = MaskOptions.mask_mode
    mask_colors: Any = MaskOptions.mask_colors
    mask_pad_value: int = MaskOptions.mask_pad_value

    def __post_init__(self):
        """Builds the groups (each checks its fields) and keeps their checked values."""
        for attr, group in GROUPS.items():
            names = [f.name for f in dataclasses.fields(group)]
            value = group(**{name: getattr(self, name) for name in names})
            object.__setattr__(self, attr, value)
            for name in names:
                object.__setattr__(self, name, getattr(value, name))

    @property
    def parallelism(self) -> int:
        """Parallel calls of the decode map: 2x the cores unless set."""
        return self.runtime.parallelism

    @property
    def is_deterministic(self) -> bool:
        """Order is guaranteed when asked, or when a seed or no shuffle implies it."""
        return self.order.is_deterministic

    @property
    def num_pipelines(self) -> int:
        """Input pipelines sharing the data (1 without ``input_context``)."""
        return self.order.num_pipelines

    @property
    def pipeline_id(self) -> int:
        return self.order.pipeline_id

    @property
    def replica_batch_size(self) -> Optional[int]:
        """The batch each replica gets: ``batch_size`` split by ``input_context``."""
        if self.batch_size is None or self.input_context is None:
            return self.batch_size
        return self.input_context.get_per_replica_batch_size(self.batch_size)

    def for_subset(self, subset: Optional[str]) -> "ImageOptions":
        """The options one subset is built with: the validation subset is not
        augmented unless ``augment_validation`` asks for it, and never
        resampled (``sampling``)."""
        if subset == "validation":  # never augmented (unless asked) nor resampled
            return dataclasses.replace(
                self, augment=self.augment if self.augment_validation else None,
                sampling=None)
        return self


# each field of ImageOptions belongs to exactly one group
assert sorted(f.name for g in GROUPS.values() for f in dataclasses.fields(g)) == sorted(
    f.name for f in dataclasses.fields(ImageOptions))

cpu_count = checks.cpu_count  # the cores this process may use (see pipeline.checks)
# Arguments of keras.utils.image_dataset_from_directory named differently here.
KERAS_EQUIVALENTS = {
    "color_mode": "use channels=1 (grayscale), 3 (rgb) or 4 (rgba)",
    "crop_to_aspect_ratio": "use resize='crop'",
    "pad_to_aspect_ratio": "use resize='pad'",
    "data_format": "images are always channels-last [batch, height, width, channels]",
    "verbose": "the counts are logged (absl logging) and pipeline.scan reports them",
}
FIELDS = tuple(f.name for f in dataclasses.fields(ImageOptions))
DEFAULTS = {f.name: f.default for f in dataclasses.fields(ImageOptions)}


# One validator per option that other entry points take too (write_tfrecords, the
# capacity plan, bench, from_npy_shards, from_generator, the command line): each holds
# the option's type, range and message, and every entry point calls it.
SEED_LIMIT = 2 ** 63


def check_seed(seed) -> Optional[int]:
    """``seed``: an int in [0, 2**63) or None (numpy integers accepted; bools refused).

    Returns:
        The seed as a Python int, or None.

    Raises:
        ValueError: "`seed` must be an int in [0, 2**63) or None. Received: seed=..."
    """
    if seed is not None and (isinstance(seed, (bool, np.bool_))
                             or not isinstance(seed, numbers.Integral)
                             or not 0 <= seed < SEED_LIMIT):
        raise ValueError(f"`seed` must be an int in [0, 2**63) or None. "
                         f"{checks.received('seed', seed)}")
    return None if seed is None else int(seed)


def numpy_random_state(seed: Optional[int]) -> np.random.RandomState:
    """``numpy.random.RandomState`` for a seed in [0, 2**63) or None (unseeded).

    ``RandomState`` takes an int seed in [0, 2**32) (Keras' file-list
    shuffle, and so its validation split, uses it with such seeds); a larger
    seed is given as its two 32-bit words ``[low, high]``, a seed array
    ``RandomState`` also takes.
    """
    if seed is not None and seed >= 2 ** 32:
        return np.random.RandomState([seed & 0xFFFFFFFF, seed >> 32])
    return np.random.RandomState(seed)


def check_on_error(on_error) -> OnError:
    """``on_error``: "raise" or "skip" (see ``ImageOptions.on_error``).

    Returns:
        The ``OnError`` member (equal to the string).

    Raises:
        ValueError: "`on_error` must be one of ['raise', 'skip']. Received: on_error=..."
    """
    return OnError.of(on_error)


def check_cache(cache):
    """``cache``: None, "memory", or a file path prefix with a folder part that exists
    (a URI's folder is not checked here).

    Returns:
        None, "memory" or the path as a str.

    Raises:
        ValueError: another value (a bare name such as "memroy" gets a hint), or a
            local folder that does not exist, with "Received: cache=...".
    """
    if cache is None or cache == "memory":
        return cache
    if not isinstance(cache, (str, os.PathLike)) or not os.fspath(cache):
        raise ValueError(f"`cache` must be None, 'memory' or a path. "
                         f"{checks.received('cache', cache)}")
    cache = os.fspath(cache)
    if "://" not in cache and not os.path.dirname(cache):
        close = difflib.get_close_matches(cache.lower(), ["memory"], n=1, cutoff=0.5)
        hint = (" It looks like a misspelt 'memory'." if close else "")
        raise ValueError(
            "`cache` must be None, 'memory', or a file path with a folder part (such as "
            f"'./cache/{cache}'), so that a typo does not silently write cache files into "
            f"the working folder.{hint} {checks.received('cache', cache)}")
    folder = os.path.dirname(os.path.abspath(cache))
    if "://" not in cache and not os.path.isdir(folder):
        raise ValueError(f"The folder of the cache file does not exist: {folder!r}. "
                         f"Create it first. {checks.received('cache', cache)}")
    return cache


def check_sampling(sampling):
    """``sampling``: None, "balanced", or a dict ``{class index or name: share}``
    with finite shares >= 0 (see ``ImageOptions.sampling``).

    Raises:
        ValueError: another value, naming it.
    """
    if sampling is None:
        return None
    if isinstance(sampling, str):
        return checks.check_choice("sampling", sampling, ("balanced",))
    if not isinstance(sampling, dict) or not sampling:
        raise ValueError("`sampling` must be None, 'balanced' or a non-empty dict "
                         f"{{class: share}}. {checks.received('sampling', sampling)}")
    fixed = {}
    for key, value in sampling.items():
        if isinstance(key, (bool, np.bool_)) or not isinstance(key, (numbers.Integral, str)):
            raise ValueError("`sampling` keys must be class indices (int) or class names "
                             f"(str). {checks.received('sampling', sampling)} (the key {key!r})")
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not (
                np.isfinite(float(value)) and value >= 0):
            raise ValueError("`sampling` shares must be finite numbers >= 0. "
                             f"{checks.received('sampling', sampling)} (the value {value!r} "
                             f"of {key!r})")
        fixed[key if isinstance(key, str) else int(key)] = float(value)
    return fixed


def _check_sampling_use(o: ImageOptions) -> None:
    """Where ``sampling`` can apply (the per-class streams are rows of a path table)."""
    r = checks.received
    if o.sampling is None:
        return
    if o.label_mode not in ONE_CLASS_LABEL_MODES or o.label_mode is None:
        raise ValueError("`sampling` needs one class per file (label_mode 'int', "
                         "'categorical' or 'binary'). "
                         f"{r('sampling', o.sampling)}, label_mode={o.label_mode!r}")
    if o.cache is not None:
        raise ValueError("`sampling` cannot be used with `cache`: a cache holds one epoch's "
                         "elements and would replay the first epoch's draw. "
                         f"{r('sampling', o.sampling)}, cache={o.cache!r}")
    if o.service:
        raise ValueError("`sampling` cannot be used with `service` (the tf.data service "
                         "splits the rows between its workers). "
                         f"{r('sampling', o.sampling)}, service={o.service!r}")



def _check_normalize(norm):
    if norm is None or norm == "symmetric":
        return norm
    try:
        mean, std = norm
        ok = all(np.isfinite(float(v)) for v in tf.nest.flatten([mean, std]))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError("`normalize` must be None ([0, 1]), 'symmetric' ([-1, 1]) or "
                         f"(mean, std) in [0, 1] units. {checks.received('normalize', norm)}")
    if not all(float(v) > 0 for v in tf.nest.flatten([std])):
        raise ValueError("`normalize`'s std must be > 0 (images are divided by it). "
                         f"{checks.received('normalize', norm)}")
    return norm


def _check_dtype(dtype):
    bad = ValueError(f"`dtype` must be one of {list(DTYPES)}. {checks.received('dtype', dtype)}")
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise bad
        return DTYPES[dtype]
    try:
        dtype = tf.as_dtype(dtype)
    except TypeError:
        raise bad from None
    if dtype not in DTYPES.values():
        raise bad
    return dtype


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - e.g. arrays: not the same
        return False



MASK_FIELDS = ("mask_mode", "mask_colors", "mask_pad_value")


def _is_byte(v) -> bool:
    return (isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
            and 0 <= v <= 255)



def check_pair_options(factory: str, opts: "ImageOptions", has_masks: bool) -> None:
    """Mask options are for segmentation pairs only.

    Raises:
        ValueError: a mask option set to a value other than its default
            without masks (``masks=``, ``masks_dir=``, ``mask_column=``).
    """
    if has_masks:
        return
    for name in MASK_FIELDS:
        value = getattr(opts, name)
        if value != DEFAULTS[name]:
            raise ValueError(
                f"`{name}` applies to segmentation pairs: pass masks to {factory or 'the factory'} "
                f"(masks=, masks_dir= or mask_column=). {checks.received(name, value)}")

def _check_factory(factory: str, o: dict) -> None:
    """The rules of a factory (``ONE_CLASS_FACTORIES``, ``NO_SPLIT_FACTORIES``), on the
    keyword values before the groups check them."""
    r = checks.received
    if factory in ONE_CLASS_FACTORIES and o["label_mode"] in LABEL_MODES \
            and o["label_mode"] not in ONE_CLASS_LABEL_MODES:
        raise ValueError(
            f"{factory} gives one class per file: use label_mode 'int', 'categorical', "
            "'binary' or None (multi-label and float targets come from from_manifest). "
            f"{r('label_mode', o['label_mode'])}")
    if factory in NO_SPLIT_FACTORIES and o["validation_split"] is not None:
        raise ValueError(f"{factory} does not split; write separate shards per subset. "
                         f"{r('validation_split', o['validation_split'])}")
    if factory in NO_SPLIT_FACTORIES and check_sampling(o["sampling"]) is not None:
        raise ValueError(f"`sampling` draws from the rows of a path table; {factory} reads "
                         "records in sequence. Resample with from_paths / from_manifest. "
                         f"{r('sampling', o['sampling'])}")


def _check_between(o: ImageOptions) -> None:
    """The rules between groups, once per factory call (not on ``dataclasses.replace``)."""
    r = checks.received
    check_image_size(o.image_size, o.batch_size)
    if o.normalize not in (None, "symmetric"):
        sizes = {int(np.size(v)) for v in o.normalize}
        if not sizes <= {1, o.channels}:
            raise ValueError(
                f"`normalize` needs one value, or one per channel ({o.channels}), for its "
                f"mean and its std. {r('normalize', o.normalize)}, channels={o.channels}")
    if o.image_size is not None and o.image_size[0] * o.image_size[1] > o.max_pixels:
        raise ValueError(
            f"`image_size` asks for more pixels per image than max_pixels={o.max_pixels}. "
            f"{r('image_size', o.image_size)}")
    if o.max_errors is not None and o.service:
        raise ValueError(
            "`max_errors` cannot be enforced with `service=` (skips happen on the "
            f"service workers). {r('max_errors', o.max_errors)}, service={o.service!r}")
    ctx = o.input_context
    if ctx is not None and o.batch_size is not None and \
            o.batch_size % getattr(ctx, "num_replicas_in_sync", 1):
        raise ValueError(
            "`batch_size` is the global batch with `input_context`: it must be divisible by "
            f"the {ctx.num_replicas_in_sync} replicas in sync. {r('batch_size', o.batch_size)}")
    if o.augment is not None:
        o.augment.check_options(o.channels, o.image_size)
    _check_sampling_use(o)


def _with_augment_options(kw: dict) -> dict:
    """``kw`` with the factory options an ``Augment`` carries (``factory_options``).

    Augment.from_image_data_generator maps rescale / dtype / validation_split to
    factory options: applied here, so that augment=aug alone does what it said.
    """
    extra = getattr(kw.get("augment"), "factory_options", None)
    if not (isinstance(extra, dict) and extra):
        return kw
    clash = sorted(k for k, v in extra.items() if k in kw and kw[k] is not v
                   and not _same(kw[k], v))
    if clash:
        raise ValueError(
            f"`augment` (from ImageDataGenerator arguments) sets {clash}, and the call "
            f"sets them otherwise. {checks.received(clash[0], kw[clash[0]])}, augment sets "
            f"{extra[clash[0]]!r}")
    return {**extra, **kw}


def make_options(factory: str = "", **kw) -> ImageOptions:
    """Validates keyword options once and returns an ``ImageOptions``.

    The one place where the factories' keyword arguments meet the option
    groups: the rules of the factory, then each group's own checks
    (``ImageOptions``' groups, ``GROUPS``), then the rules between groups.

    Args:
        factory: the calling factory's name ("from_directory", ...): some
            rules depend on it (one class per file; no split of shards).
        **kw: options named as the fields of ``ImageOptions``.

    Raises:
        TypeError: an unknown option name.
        ValueError: naming the argument and the value received, for any value
            out of its domain or a combination that cannot work.
    """
    unknown = [k for k in kw if k not in FIELDS]
    if unknown:
        raise checks.unknown_keywords(factory or "make_options", unknown, FIELDS,
                                      KERAS_EQUIVALENTS)
    o = {**DEFAULTS, **_with_augment_options(kw)}
    _check_factory(factory, o)
    opts = ImageOptions(**o)
    _check_between(opts)
    return opts
