"""Options shared by the image factories, validated once, up front.

Every bad argument raises ``ValueError`` naming the argument and the value
received, in Keras' form: ``"... Received: image_size=(0, 224)"``.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from typing import Any, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

LABEL_MODES = ("int", "categorical", "binary", "multi_hot", "float", None)
RESIZE_MODES = ("stretch", "crop", "pad")
INTERPOLATIONS = (
    "bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5",
    "gaussian", "mitchellcubic",
)
SUBSETS = ("training", "validation", "both", None)
ON_ERROR = ("raise", "skip")
DTYPES = {
    "uint8": tf.uint8, "float32": tf.float32, "bfloat16": tf.bfloat16, "float16": tf.float16,
}
# Pillow's decompression-bomb limit (PIL.Image.MAX_IMAGE_PIXELS).
DEFAULT_MAX_PIXELS = 178_956_970


def received(name: str, value: Any) -> str:
    return f"Received: {name}={value!r}"


def cpu_count() -> int:
    """Cores this process may run on (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """Validated options of an image dataset factory (see ``API.md``)."""

    label_mode: Optional[str] = "int"
    channels: int = 3
    image_size: Optional[Tuple[int, int]] = (256, 256)
    resize: str = "stretch"
    interpolation: str = "bilinear"
    batch_size: Optional[int] = 32
    shuffle: bool = True
    seed: Optional[int] = None
    validation_split: Optional[float] = None
    subset: Optional[str] = None
    dtype: Any = tf.uint8
    normalize: Any = None
    cache: Optional[str] = None
    on_error: str = "raise"
    max_errors: Optional[float] = None
    exif_orientation: bool = True
    max_pixels: int = DEFAULT_MAX_PIXELS
    deterministic: Optional[bool] = None
    num_parallel_calls: Optional[int] = None
    prefetch: int = 2
    autotune: bool = False
    augment: Any = None
    input_context: Any = None
    service: Optional[str] = None
    processing_mode: str = "off"
    job_name: Optional[str] = None
    drop_remainder: bool = False
    fast_jpeg: bool = True
    threadpool_size: Optional[int] = None
    ram_budget_bytes: Optional[int] = None
    prefetch_to_device: Optional[str] = None
    cache_budget_bytes: Optional[int] = None

    @property
    def parallelism(self) -> int:
        """Parallel calls of the decode map: 2x the cores unless set."""
        return self.num_parallel_calls or 2 * cpu_count()

    @property
    def is_deterministic(self) -> bool:
        """Order is guaranteed when asked, or when a seed or no shuffle implies it."""
        if self.deterministic is not None:
            return bool(self.deterministic)
        return self.seed is not None or not self.shuffle


def _check_int(name, value, minimum=1, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(
            f"`{name}` must be an integer >= {minimum}"
            + (" or None" if allow_none else "") + f". {received(name, value)}")
    return int(value)


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {list(choices)}. {received(name, value)}")
    return value


def validate_image_size(image_size, batch_size):
    if image_size is None:
        if batch_size is not None:
            raise ValueError(
                "`image_size=None` (native size) needs `batch_size=None`, since "
                "images of different sizes cannot be batched. "
                f"{received('batch_size', batch_size)}")
        return None
    if isinstance(image_size, numbers.Integral) and not isinstance(image_size, bool):
        image_size = (image_size, image_size)
    try:
        h, w = image_size
    except (TypeError, ValueError):
        raise ValueError(
            "`image_size` must be (height, width) of positive integers or None. "
            f"{received('image_size', image_size)}") from None
    for v in (h, w):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0:
            raise ValueError(
                "`image_size` must be (height, width) of positive integers or "
                f"None. {received('image_size', image_size)}")
    return (int(h), int(w))


def make_options(**kw) -> ImageOptions:
    """Validates keyword options and returns an ``ImageOptions``.

    Raises:
        ValueError: naming the argument and the value received, for any value
            out of its domain (see ``API.md``).
        TypeError: for an unknown option name.
    """
    known = {f.name for f in dataclasses.fields(ImageOptions)}
    unknown = sorted(set(kw) - known)
    if unknown:
        raise TypeError(f"Unknown option(s): {unknown}. Known options: {sorted(known)}")
    o = dict(kw)
    _check_choice("label_mode", o.get("label_mode", "int"), LABEL_MODES)
    for name, default in (("shuffle", True), ("exif_orientation", True), ("fast_jpeg", True),
                          ("autotune", False), ("drop_remainder", False)):
        v = o.get(name, default)
        if not isinstance(v, (bool, np.bool_)):
            raise ValueError(f"`{name}` must be True or False. {received(name, v)}")
        o[name] = bool(v)
    ctx = o.get("input_context")
    if ctx is not None and not (hasattr(ctx, "num_input_pipelines")
                                and hasattr(ctx, "input_pipeline_id")):
        raise ValueError("`input_context` must be a tf.distribute.InputContext or None. "
                         f"{received('input_context', ctx)}")
    svc = o.get("service")
    if svc is not None and not (isinstance(svc, str) and svc):
        raise ValueError("`service` must be None or a dispatcher address such as "
                         f"'grpc://host:5050'. {received('service', svc)}")
    norm = o.get("normalize")
    if norm is not None and norm != "symmetric":
        try:
            mean, std = norm
            ok = all(isinstance(float(v), float) for v in tf.nest.flatten([mean, std]))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError("`normalize` must be None ([0, 1]), 'symmetric' ([-1, 1]) or "
                             f"(mean, std) in [0, 1] units. {received('normalize', norm)}")
    channels = o.get("channels", 3)
    if channels not in (1, 3, 4) or not isinstance(channels, numbers.Integral) or isinstance(channels, bool):
        raise ValueError(f"`channels` must be 1, 3 or 4. {received('channels', channels)}")
    o["channels"] = int(channels)
    batch_size = _check_int("batch_size", o.get("batch_size", 32), allow_none=True)
    o["batch_size"] = batch_size
    o["image_size"] = validate_image_size(o.get("image_size", (256, 256)), batch_size)
    _check_choice("resize", o.get("resize", "stretch"), RESIZE_MODES)
    _check_choice("interpolation", o.get("interpolation", "bilinear"), INTERPOLATIONS)
    _check_choice("on_error", o.get("on_error", "raise"), ON_ERROR)
    split = o.get("validation_split")
    subset = o.get("subset")
    _check_choice("subset", subset, SUBSETS)
    if split is not None:
        if isinstance(split, (bool, np.bool_)) or not isinstance(split, numbers.Real) or not (
                0 < split < 1):
            raise ValueError(
                "`validation_split` must be a float strictly between 0 and 1. "
                f"{received('validation_split', split)}")
        o["validation_split"] = float(split)
        if subset is None:
            raise ValueError(
                "`validation_split` needs `subset` ('training', 'validation' or "
                f"'both'). {received('subset', subset)}")
    elif subset is not None:
        raise ValueError(
            "`subset` is only valid with `validation_split`. "
            f"{received('subset', subset)}, validation_split=None")
    dtype = o.get("dtype", tf.uint8)
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"`dtype` must be one of {list(DTYPES)}. {received('dtype', dtype)}")
        dtype = DTYPES[dtype]
    try:
        dtype = tf.as_dtype(dtype)
    except TypeError:
        raise ValueError(f"`dtype` must be one of {list(DTYPES)}. {received('dtype', dtype)}") from None
    if dtype not in DTYPES.values():
        raise ValueError(f"`dtype` must be one of {list(DTYPES)}. {received('dtype', dtype)}")
    o["dtype"] = dtype
    seed = o.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
                             or not 0 <= seed < 2 ** 63):
        raise ValueError(f"`seed` must be an int in [0, 2**63) or None. {received('seed', seed)}")
    o["seed"] = None if seed is None else int(seed)
    mp = o.get("max_pixels", DEFAULT_MAX_PIXELS)
    o["max_pixels"] = _check_int("max_pixels", mp)
    if o["image_size"] is not None and o["image_size"][0] * o["image_size"][1] > o["max_pixels"]:
        raise ValueError(
            f"`image_size` asks for more pixels per image than max_pixels={o['max_pixels']}. "
            f"{received('image_size', o['image_size'])}")
    npc = o.get("num_parallel_calls")
    if npc == tf.data.AUTOTUNE:  # let tf.data tune it (autotune is then switched on)
        o["autotune"] = True
    else:
        o["num_parallel_calls"] = _check_int("num_parallel_calls", npc, allow_none=True)
    pf = o.get("prefetch", 2)
    if pf == tf.data.AUTOTUNE:
        o["autotune"] = True
    else:
        o["prefetch"] = _check_int("prefetch", pf, minimum=0)
    o["threadpool_size"] = _check_int("threadpool_size", o.get("threadpool_size"),
                                      allow_none=True)
    o["ram_budget_bytes"] = _check_int("ram_budget_bytes", o.get("ram_budget_bytes"),
                                       allow_none=True)
    ptd = o.get("prefetch_to_device")
    if ptd is not None and not isinstance(ptd, str):
        raise ValueError("`prefetch_to_device` must be None or a device name such as "
                         f"'/gpu:0'. {received('prefetch_to_device', ptd)}")
    me = o.get("max_errors")
    if me is not None:
        if isinstance(me, (bool, np.bool_)) or not isinstance(me, numbers.Real) or not (
                me >= 0) or (not isinstance(me, numbers.Integral) and not me < 1):
            raise ValueError(
                "`max_errors` must be an int >= 0 (a count) or a float in [0, 1) "
                f"(a fraction of the files). {received('max_errors', me)}")
        o["max_errors"] = int(me) if isinstance(me, numbers.Integral) else float(me)
        if o.get("on_error", "raise") != "skip":
            raise ValueError(
                "`max_errors` is an error budget for on_error='skip'. "
                f"{received('on_error', o.get('on_error', 'raise'))}")
    cache = o.get("cache")
    if cache is not None and (not isinstance(cache, (str, os.PathLike)) or not os.fspath(cache)):
        raise ValueError(f"`cache` must be None, 'memory' or a path. {received('cache', cache)}")
    _check_choice("processing_mode", o.get("processing_mode", "off"), ("off", "dynamic", "file"))
    if o.get("processing_mode", "off") != "off" and not o.get("service"):
        raise ValueError(
            "`processing_mode` applies to a tf.data service: pass `service=` (the dispatcher "
            f"address) too. Received: processing_mode={o['processing_mode']!r}, service=None")
    o["cache_budget_bytes"] = _check_int("cache_budget_bytes", o.get("cache_budget_bytes"),
                                         allow_none=True)
    aug = o.get("augment")
    if aug is not None:
        from pipeline.augment import Augment
        if not isinstance(aug, Augment):
            raise ValueError(f"`augment` must be None or a pipeline.Augment. {received('augment', aug)}")
    det = o.get("deterministic")
    if det is not None and not isinstance(det, bool):
        raise ValueError(f"`deterministic` must be None or a bool. {received('deterministic', det)}")
    return ImageOptions(**o)


def check_class_names(class_names: Optional[Sequence[str]]):
    if class_names is None:
        return None
    if isinstance(class_names, str):
        raise ValueError(
            "`class_names` must be a sequence of str, not a single str. "
            f"{received('class_names', class_names)}")
    names = [str(c) for c in class_names]
    if len(set(names)) != len(names):
        raise ValueError(f"`class_names` has duplicates. {received('class_names', list(class_names))}")
    if not names:
        raise ValueError(f"`class_names` is empty. {received('class_names', list(class_names))}")
    return names
