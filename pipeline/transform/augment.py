"""Augment: random image ops that run in graph, stateless and seeded.

Every random draw is a ``tf.random.stateless_*`` / ``tf.image.stateless_*`` op
keyed by an explicit seed, so the same seed gives the same pixels whatever the
parallelism, the machine or the number of epochs run before. Nothing holds
random state (no ``tf.random.uniform``, no ``tf.random.Generator``, no Keras
layers), so an ``Augment`` is safe in a parallel ``Dataset.map``, in iterator
checkpoints and on tf.data service workers.

Per-element seeds. ``Augment`` only consumes a stateless seed (int32/int64,
shape [2]) per element. The dataset builder derives that seed from (seed,
epoch, element index) by zipping the element stream with
``tf.data.Dataset.random(seed, rerandomize_each_iteration=True).batch(2)``
*before* the parallel map: element i of epoch e then always gets the same seed
for a given ``seed``. Inside, each op gets its own sub-seed
``tf.random.experimental.stateless_fold_in(seed, op_id)`` with a fixed
``op_id`` per op, so turning one op on or off does not change the draws of the
others.

Order of ops: random resized crop (+ resize) -> flips -> one projective
transform (rotation, shift, shear, zoom) -> colour (brightness, contrast,
saturation, hue) -> channel shift. Pixels stay uint8 in and out; the work in
between is float32 in 0-255 units, rounded and clipped back to uint8 at the
end.

Crop before decode. The random-resized-crop window depends on the image
*shape* and the seed only (``Augment.crop_window``), so a JPEG can be decoded
window-only::

    shape = tf.image.extract_jpeg_shape(contents)
    oy, ox, h, w = aug.crop_window(shape, seed)
    window = tf.io.decode_and_crop_jpeg(contents, tf.stack([oy, ox, h, w]), channels=3)
    image = aug(window, seed, output_size=(224, 224), crop_done=True)

which gives the same window as ``aug(tf.io.decode_jpeg(contents), seed,
output_size=(224, 224))``.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence, Tuple

import tensorflow as tf

from pipeline import checks
from pipeline.transform import geometry as transform

FILL_MODES = ("reflect", "wrap", "constant", "nearest")
INTERPOLATIONS = ("bilinear", "nearest")

# Fixed sub-seed ids: one per op, independent of which ops are enabled.
_CROP, _HFLIP, _VFLIP, _ROT, _SHIFT, _SHEAR, _ZOOM = 1, 2, 3, 4, 5, 6, 7
_BRIGHT, _BRIGHT_RANGE, _CONTRAST, _SAT, _HUE, _CHSHIFT = 8, 9, 10, 11, 12, 13

# torchvision.transforms.RandomResizedCrop tries this many windows before it
# falls back to a center crop.
CROP_ATTEMPTS = 10


def _sub_seed(seed, op_id: int):
    seed = tf.convert_to_tensor(seed)
    if seed.dtype not in (tf.int32, tf.int64):
        seed = tf.cast(seed, tf.int64)
    return tf.random.experimental.stateless_fold_in(seed, op_id)


def crop_window(image_shape, seed, scale: Tuple[float, float] = (0.08, 1.0),
                ratio: Tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)):
    """Chooses an Inception-style random-resized-crop window from a shape only.

    The algorithm of torchvision's ``RandomResizedCrop.get_params``, after the
    "Inception" crop of Szegedy et al. 2015, "Going deeper with convolutions"
    (CVPR; sec. 6): up to 10 candidates, each with an area drawn uniformly from
    ``scale`` times the image area and an aspect ratio (width / height) drawn
    log-uniformly from ``ratio``; the first that fits in the image is taken at
    a uniform random position. When none fits, the fallback is the largest
    center crop whose aspect ratio is clamped into ``ratio``. All draws are
    ``tf.random.stateless_uniform`` keyed by ``seed``, vectorised (no loop).

    Args:
        image_shape: int32/int64 tensor [>= 2], (height, width, ...) in pixels,
            e.g. ``tf.shape(image)`` or ``tf.image.extract_jpeg_shape(contents)``.
        seed: int32/int64 tensor [2], a stateless seed.
        scale: (min, max) fraction of the image area, 0 < min <= max <= 1.
        ratio: (min, max) aspect ratio width / height, 0 < min <= max.

    Returns:
        (offset_y, offset_x, height, width): int32 scalars in pixels, with
        0 <= offset_y, offset_y + height <= image height (same for x), and
        height, width >= 1. Stack them for ``tf.io.decode_and_crop_jpeg``.
    """
    shape = tf.cast(image_shape, tf.int32)
    img_h, img_w = shape[0], shape[1]
    h_f = tf.cast(img_h, tf.float32)
    w_f = tf.cast(img_w, tf.float32)
    area = h_f * w_f
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 3)
    target_area = area * tf.random.stateless_uniform(
        [CROP_ATTEMPTS], seeds[0], minval=scale[0], maxval=scale[1])
    log_r = tf.random.stateless_uniform(
        [CROP_ATTEMPTS], seeds[1], minval=math.log(ratio[0]), maxval=math.log(ratio[1]))
    aspect = tf.exp(log_r)
    cand_w = tf.cast(tf.round(tf.sqrt(target_area * aspect)), tf.int32)
    cand_h = tf.cast(tf.round(tf.sqrt(target_area / aspect)), tf.int32)
    fits = (cand_w > 0) & (cand_w <= img_w) & (cand_h > 0) & (cand_h <= img_h)
    any_fit = tf.reduce_any(fits)
    first = tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32)

    # Fallback: center crop with the aspect ratio clamped into `ratio`.
    in_ratio = w_f / h_f
    fb_w = tf.where(in_ratio < ratio[0], img_w,
                    tf.where(in_ratio > ratio[1],
                             tf.cast(tf.round(h_f * ratio[1]), tf.int32), img_w))
    fb_h = tf.where(in_ratio < ratio[0], tf.cast(tf.round(w_f / ratio[0]), tf.int32),
                    img_h)
    crop_h = tf.where(any_fit, tf.gather(cand_h, first), fb_h)
    crop_w = tf.where(any_fit, tf.gather(cand_w, first), fb_w)
    crop_h = tf.clip_by_value(crop_h, 1, tf.maximum(img_h, 1))
    crop_w = tf.clip_by_value(crop_w, 1, tf.maximum(img_w, 1))
    u = tf.random.stateless_uniform([2], seeds[2])
    off_y = tf.cast(tf.floor(u[0] * tf.cast(img_h - crop_h + 1, tf.float32)), tf.int32)
    off_x = tf.cast(tf.floor(u[1] * tf.cast(img_w - crop_w + 1, tf.float32)), tf.int32)
    off_y = tf.where(any_fit, tf.minimum(off_y, img_h - crop_h), (img_h - crop_h) // 2)
    off_x = tf.where(any_fit, tf.minimum(off_x, img_w - crop_w), (img_w - crop_w) // 2)
    return off_y, off_x, crop_h, crop_w


def _err(msg, name, value):
    return ValueError(f"{msg} {checks.received(name, value)}")


def _is_num(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _check_range(name, value, lo=0.0, hi=None, unit=""):
    """A float in [lo, hi] (hi None: unbounded)."""
    if not _is_num(value) or value < lo or (hi is not None and value > hi):
        bound = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise _err(f"`{name}` must be a finite number in {bound}{unit}.", name, value)
    return float(value)


def _check_pair(name, value, lo=0.0, hi=None, positive=False):
    try:
        a, b = value
    except (TypeError, ValueError):
        raise _err(f"`{name}` must be a pair (min, max) of numbers.", name, value) from None
    if not (_is_num(a) and _is_num(b)) or a > b or a < lo or (hi is not None and b > hi) or (
            positive and a <= 0):
        cond = f"{'0 <' if positive else str(lo) + ' <='} min <= max" + (
            f" <= {hi}" if hi is not None else "")
        raise _err(f"`{name}` must be a pair (min, max) with {cond}.", name, value)
    return (float(a), float(b))


def _check_shift(name, value):
    if not _is_num(value) or value < 0:
        raise _err(f"`{name}` must be a number >= 0 (a fraction of the size if < 1, "
                   "else pixels).", name, value)
    return float(value)


class Augment:
    """Random, seeded, stateless image augmentation for one uint8 element.

    Args:
        random_resized_crop: None (off), True (defaults) or a dict with
            ``scale`` ((min, max) fraction of the area, default (0.08, 1.0))
            and ``ratio`` ((min, max) width / height, default (3/4, 4/3)): the
            Inception-style crop (see ``crop_window``), then a resize to
            ``output_size``.
        horizontal_flip: bool, mirror left-right with probability 0.5.
        vertical_flip: bool, flip upside down with probability 0.5.
        rotation: max rotation in degrees, [0, 180]; the angle is uniform in
            [-rotation, rotation].
        width_shift, height_shift: max translation; a fraction of the width /
            height when < 1, else pixels (as Keras' ``ImageDataGenerator``);
            uniform in [-shift, shift].
        shear: max shear angle in degrees, [0, 90); uniform in [-shear, shear].
        zoom: float z in [0, 1) for factors in [1 - z, 1 + z], or a pair
            (min, max) of factors > 0; drawn independently for x and y, as
            ``ImageDataGenerator``. A factor < 1 enlarges (zooms in).
        brightness: max additive delta in [0, 1] as a fraction of 255
            (``tf.image.stateless_random_brightness``).
        brightness_range: None or (min, max) multiplicative factors >= 0, as
            ``ImageDataGenerator(brightness_range=...)`` (pixels * factor).
        contrast: c in [0, 1): contrast factor uniform in [1 - c, 1 + c]
            (``tf.image.stateless_random_contrast``).
        saturation: s in [0, 1): saturation factor in [1 - s, 1 + s]; needs 3
            channels (``tf.image.stateless_random_saturation``).
        hue: max hue delta in [0, 0.5] (fraction of the hue circle; needs 3
            channels; ``tf.image.stateless_random_hue``).
        channel_shift: max intensity in [0, 255] pixel units; one value
            uniform in [-channel_shift, channel_shift] is added to all channels
            (``ImageDataGenerator(channel_shift_range=...)``).
        fill_mode: how points outside the image are filled by the geometric
            ops: "reflect" (default), "wrap", "constant" or "nearest"
            (``tf.raw_ops.ImageProjectiveTransformV3``).
        fill_value: value in [0, 255] for ``fill_mode="constant"``.
        interpolation: "bilinear" (default) or "nearest", for the geometric
            ops and the crop resize.

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        ValueError: any argument out of its domain; the message names the
            argument and the value received.

    Example::

        aug = pipeline.Augment(random_resized_crop=True, horizontal_flip=True)
        out = aug(image, tf.constant([1, 2]), output_size=(224, 224))
    """

    @checks.known_keywords(name="Augment")
    def __init__(self, random_resized_crop=None, horizontal_flip: bool = False,
                 vertical_flip: bool = False, rotation: float = 0.0, brightness: float = 0.0,
                 contrast: float = 0.0, saturation: float = 0.0, hue: float = 0.0,
                 width_shift: float = 0.0, height_shift: float = 0.0, shear: float = 0.0,
                 zoom=0.0, channel_shift: float = 0.0, fill_mode: str = "reflect",
                 fill_value: float = 0, brightness_range=None,
                 interpolation: str = "bilinear"):
        if random_resized_crop is None or random_resized_crop is False:
            self.random_resized_crop = None
        elif random_resized_crop is True or isinstance(random_resized_crop, dict):
            params = {} if random_resized_crop is True else dict(random_resized_crop)
            unknown = sorted(set(params) - {"scale", "ratio"})
            if unknown:
                raise _err("`random_resized_crop` takes the keys 'scale' and 'ratio' only.",
                           "random_resized_crop", random_resized_crop)
            self.random_resized_crop = {
                "scale": _check_pair("random_resized_crop['scale']",
                                     params.get("scale", (0.08, 1.0)), 0.0, 1.0, positive=True),
                "ratio": _check_pair("random_resized_crop['ratio']",
                                     params.get("ratio", (3.0 / 4.0, 4.0 / 3.0)), positive=True),
            }
        else:
            raise _err("`random_resized_crop` must be None, True or a dict(scale=(min, max), "
                       "ratio=(min, max)).", "random_resized_crop", random_resized_crop)
        for name, v in (("horizontal_flip", horizontal_flip), ("vertical_flip", vertical_flip)):
            if not isinstance(v, bool):
                raise _err(f"`{name}` must be a bool.", name, v)
        self.horizontal_flip = horizontal_flip
        self.vertical_flip = vertical_flip
        self.rotation = _check_range("rotation", rotation, 0.0, 180.0, " (degrees)")
        self.width_shift = _check_shift("width_shift", width_shift)
        self.height_shift = _check_shift("height_shift", height_shift)
        if not _is_num(shear) or not 0 <= shear < 90:
            raise _err("`shear` must be a number in [0, 90) (degrees).", "shear", shear)
        self.shear = float(shear)
        if _is_num(zoom):
            if not 0 <= zoom < 1:
                raise _err("`zoom` must be a float in [0, 1) or a pair (min, max) of "
                           "factors > 0.", "zoom", zoom)
            self.zoom = (1.0 - zoom, 1.0 + zoom) if zoom else None
        else:
            z = _check_pair("zoom", zoom, positive=True)
            self.zoom = None if z == (1.0, 1.0) else z
        self.brightness = _check_range("brightness", brightness, 0.0, 1.0)
        self.brightness_range = (None if brightness_range is None else
                                 _check_pair("brightness_range", brightness_range, 0.0))
        if not _is_num(contrast) or not 0 <= contrast < 1:
            raise _err("`contrast` must be a number in [0, 1).", "contrast", contrast)
        self.contrast = float(contrast)
        if not _is_num(saturation) or not 0 <= saturation < 1:
            raise _err("`saturation` must be a number in [0, 1).", "saturation", saturation)
        self.saturation = float(saturation)
        self.hue = _check_range("hue", hue, 0.0, 0.5)
        self.channel_shift = _check_range("channel_shift", channel_shift, 0.0, 255.0,
                                          " (pixel units)")
        if fill_mode not in FILL_MODES:
            raise _err(f"`fill_mode` must be one of {list(FILL_MODES)}.", "fill_mode", fill_mode)
        self.fill_mode = fill_mode
        self.fill_value = _check_range("fill_value", fill_value, 0.0, 255.0)
        checks.check_choice("interpolation", interpolation, INTERPOLATIONS)  # "Bilinear": a hint
        self.interpolation = interpolation
        # Options for the dataset factory that ImageDataGenerator users migrate
        # (e.g. rescale -> dtype/normalize); see from_image_data_generator.
        self.factory_options = {}

    # ------------------------------------------------------------------ info
    @property
    def has_geometry(self) -> bool:
        return bool(self.rotation or self.width_shift or self.height_shift or self.shear
                    or self.zoom)

    @property
    def has_colour(self) -> bool:
        return bool(self.brightness or self.brightness_range or self.contrast
                    or self.saturation or self.hue or self.channel_shift)

    def check_options(self, channels: int, image_size) -> None:
        """Checks that this augmentation can run on a dataset's images.

        Args:
            channels: the images' channels (1, 3 or 4).
            image_size: (height, width) of the output, or None (native sizes).

        Raises:
            ValueError: ``saturation`` or ``hue`` with ``channels`` other than
                3; ``random_resized_crop`` with ``image_size=None`` (the crop
                needs an output size).
        """
        if (self.saturation or self.hue) and channels != 3:
            raise ValueError("`augment` with saturation or hue needs channels=3. "
                             f"{checks.received('channels', channels)}")
        if self.random_resized_crop is not None and image_size is None:
            raise ValueError("`augment` with random_resized_crop needs an `image_size` (the "
                             f"crop's output size). {checks.received('image_size', None)}")

    def get_config(self) -> dict:
        """The constructor arguments (JSON-friendly)."""
        return {
            "random_resized_crop": self.random_resized_crop,
            "horizontal_flip": self.horizontal_flip, "vertical_flip": self.vertical_flip,
            "rotation": self.rotation, "brightness": self.brightness,
            "contrast": self.contrast, "saturation": self.saturation, "hue": self.hue,
            "width_shift": self.width_shift, "height_shift": self.height_shift,
            "shear": self.shear, "zoom": self.zoom, "channel_shift": self.channel_shift,
            "fill_mode": self.fill_mode, "fill_value": self.fill_value,
            "brightness_range": self.brightness_range, "interpolation": self.interpolation,
        }

    def __repr__(self):
        default = Augment().get_config()
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items()
                         if v != default[k])
        return f"Augment({args})"

    # ------------------------------------------------------------------ ops
    def crop_window(self, image_shape, seed):
        """The random-resized-crop window ``__call__`` uses for this ``seed``.

        Args:
            image_shape: int32/int64 [>= 2] (height, width, ...) in pixels,
                e.g. ``tf.image.extract_jpeg_shape(contents)``.
            seed: int32/int64 [2], the element's seed (the same one passed to
                ``__call__``).

        Returns:
            (offset_y, offset_x, height, width) int32 scalars, pixels; see the
            module function ``crop_window``.

        Raises:
            ValueError: this Augment has no ``random_resized_crop``.
        """
        if self.random_resized_crop is None:
            raise ValueError("`crop_window` needs an Augment with random_resized_crop. "
                             "Received: random_resized_crop=None")
        return crop_window(image_shape, _sub_seed(seed, _CROP), **self.random_resized_crop)

    def _transform_matrix(self, seed, height, width):
        """Output->input projective matrix [8] (float32), about the center."""
        h = tf.cast(height, tf.float32)
        w = tf.cast(width, tf.float32)
        one = tf.constant(1.0)
        zero = tf.constant(0.0)
        m = tf.eye(3)
        if self.rotation:
            a = tf.random.stateless_uniform([], _sub_seed(seed, _ROT), -self.rotation,
                                            self.rotation) * (math.pi / 180.0)
            c, s = tf.cos(a), tf.sin(a)
            m = m @ tf.stack([[c, -s, zero], [s, c, zero], [zero, zero, one]])
        if self.width_shift or self.height_shift:
            d = tf.random.stateless_uniform([2], _sub_seed(seed, _SHIFT), -1.0, 1.0)
            tx = d[0] * (self.width_shift * w if self.width_shift < 1 else self.width_shift)
            ty = d[1] * (self.height_shift * h if self.height_shift < 1 else self.height_shift)
            m = m @ tf.stack([[one, zero, tx], [zero, one, ty], [zero, zero, one]])
        if self.shear:
            sh = tf.random.stateless_uniform([], _sub_seed(seed, _SHEAR), -self.shear,
                                             self.shear) * (math.pi / 180.0)
            # ImageDataGenerator's shear matrix, in (x, y) order.
            m = m @ tf.stack([[tf.cos(sh), zero, zero], [-tf.sin(sh), one, zero],
                              [zero, zero, one]])
        if self.zoom:
            z = tf.random.stateless_uniform([2], _sub_seed(seed, _ZOOM), self.zoom[0],
                                            self.zoom[1])
            m = m @ tf.stack([[z[0], zero, zero], [zero, z[1], zero], [zero, zero, one]])
        cx, cy = (w - 1.0) / 2.0, (h - 1.0) / 2.0
        to_c = tf.stack([[one, zero, cx], [zero, one, cy], [zero, zero, one]])
        from_c = tf.stack([[one, zero, -cx], [zero, one, -cy], [zero, zero, one]])
        m = to_c @ m @ from_c
        m = m / m[2, 2]
        return tf.reshape(m, [9])[:8]

    def __call__(self, image, seed, output_size: Optional[Sequence[int]] = None,
                 crop_done: bool = False, antialias: bool = False):
        """Augments one image.

        Args:
            image: uint8 [height, width, channels] (one element, unbatched),
                values 0-255. Saturation and hue need channels == 3.
            seed: int32/int64 tensor [2], a stateless seed for this element
                (see the module docstring for how datasets derive it).
            output_size: (height, width) in pixels of the result when
                ``random_resized_crop`` is on (the crop is resized to it);
                default: the input size. Must be None without the crop.
            crop_done: True when ``image`` already is the window
                ``crop_window(full_shape, seed)`` (crop-before-decode); the
                crop is then skipped and only the resize and the other ops
                run, with the same sub-seeds (the resize too when the window
                already has the static size ``output_size``).
            antialias: the crop's resize filters when it reduces
                (``tf.image.resize``'s ``antialias``; the factories pass their
                ``antialias`` option).

        Returns:
            uint8 [height, width, channels] (``output_size`` when given),
            values 0-255; the same ``image`` and ``seed`` always give the same
            pixels.

        Raises:
            ValueError: ``image`` is not 3-D, saturation / hue on a non-RGB
                image, or ``output_size`` without ``random_resized_crop``.
        """
        image = self._check_image(tf.convert_to_tensor(image))
        seed = tf.convert_to_tensor(seed)
        if self.random_resized_crop is not None:
            image = self._crop_resized(image, seed, output_size, crop_done, antialias)
        elif output_size is not None:
            raise ValueError("`output_size` is the size of the random resized crop; this "
                             "Augment has random_resized_crop=None. "
                             f"Received: output_size={output_size!r}")
        image = self._flips(image, seed)
        if not (self.has_geometry or self.has_colour):
            return image
        static_shape = image.shape
        x = tf.cast(image, tf.float32)  # 0-255
        if self.has_geometry:
            x = self._project(x, seed, self.fill_value, self.interpolation)
        if self.has_colour:
            x = self._colour(x / 255.0, seed) * 255.0  # tf.image colour ops take [0, 1]
        out = transform.to_uint8(x)
        out.set_shape(static_shape)
        return out

    def _check_image(self, image):
        """``image`` when it is a uint8 [h, w, c] image (RGB with saturation or hue)."""
        if image.shape.rank != 3:
            raise ValueError("`image` must be one uint8 image [height, width, channels]. "
                             f"Received: image with shape {image.shape}")
        if image.dtype != tf.uint8:
            raise ValueError("`image` must be uint8. "
                             f"Received: image with dtype {image.dtype.name}")
        if (self.saturation or self.hue) and image.shape[-1] != 3:
            raise ValueError("`saturation` and `hue` need RGB images (3 channels). "
                             f"Received: image with shape {image.shape}")
        return image

    def _crop_resized(self, image, seed, output_size, crop_done, antialias):
        """The random resized crop of ``__call__``: the window (unless ``crop_done``),
        resized to ``output_size`` (default: the input size), uint8."""
        channels = image.shape[-1]
        if output_size is None:
            shape = tf.shape(image)
            size = (shape[0], shape[1])
        else:
            size = checks.check_image_size(output_size, None, name="output_size")
        if not crop_done:
            oy, ox, ch, cw = self.crop_window(tf.shape(image), seed)
            image = image[oy:oy + ch, ox:ox + cw]
        if not (crop_done and output_size is not None
                and tuple(image.shape[:2]) == tuple(size)):  # (already resized: skip)
            image = transform.to_uint8(tf.image.resize(
                image, size, method=self.interpolation, antialias=antialias),
                convex=self.interpolation in transform.CONVEX and not antialias)
        if output_size is not None:
            image.set_shape([size[0], size[1], channels])
        return image

    def _flips(self, image, seed):
        """The random flips (an image's or its mask's: the same sub-seeds)."""
        if self.horizontal_flip:
            image = tf.image.stateless_random_flip_left_right(image, _sub_seed(seed, _HFLIP))
        if self.vertical_flip:
            image = tf.image.stateless_random_flip_up_down(image, _sub_seed(seed, _VFLIP))
        return image

    def _project(self, x, seed, fill_value, interpolation: str):
        """The projective transform (rotation, shift, shear, zoom) of float32 [h, w, c]
        ``x``, points outside filled by ``fill_mode`` (``fill_value`` when constant)."""
        shape = tf.shape(x)
        return tf.raw_ops.ImageProjectiveTransformV3(
            images=x[tf.newaxis],
            transforms=self._transform_matrix(seed, shape[0], shape[1])[tf.newaxis],
            output_shape=shape[:2], fill_value=tf.constant(fill_value, tf.float32),
            interpolation=interpolation.upper(), fill_mode=self.fill_mode.upper())[0]

    def _colour(self, x, seed):
        """The photometric ops on float32 ``x`` in [0, 1] (the result may leave it)."""
        if self.brightness:
            x = tf.image.stateless_random_brightness(
                x, self.brightness, _sub_seed(seed, _BRIGHT))
        if self.brightness_range:
            f = tf.random.stateless_uniform([], _sub_seed(seed, _BRIGHT_RANGE),
                                            *self.brightness_range)
            x = x * f
        if self.contrast:
            x = tf.clip_by_value(x, 0.0, 1.0)
            x = tf.image.stateless_random_contrast(
                x, 1.0 - self.contrast, 1.0 + self.contrast, _sub_seed(seed, _CONTRAST))
        if self.saturation:
            x = tf.clip_by_value(x, 0.0, 1.0)
            x = tf.image.stateless_random_saturation(
                x, 1.0 - self.saturation, 1.0 + self.saturation, _sub_seed(seed, _SAT))
        if self.hue:
            x = tf.clip_by_value(x, 0.0, 1.0)
            x = tf.image.stateless_random_hue(x, self.hue, _sub_seed(seed, _HUE))
        if self.channel_shift:
            x = x + tf.random.stateless_uniform(
                [], _sub_seed(seed, _CHSHIFT), -self.channel_shift,
                self.channel_shift) / 255.0
        return x

    def pair(self, image, mask, seed, output_size: Optional[Sequence[int]] = None,
             pad_value: int = 255):
        """Augments an image and its segmentation mask together.

        The image gets every op, as ``__call__``; the mask gets the geometric
        ones, as ``mask`` (same sub-seeds: the same window, flip and matrix).

        Args:
            image: uint8 [height, width, channels].
            mask: uint8 [height, width, 1], the same height and width.
            seed: int32/int64 [2], the element's stateless seed.
            output_size: as ``__call__``.
            pad_value: int in [0, 255], the mask class of filled points.

        Returns:
            (image uint8 [h, w, channels], mask uint8 [h, w, 1]).
        """
        return (self(image, seed, output_size=output_size),
                self.mask(mask, seed, output_size=output_size, pad_value=pad_value))

    def mask(self, mask, seed, output_size: Optional[Sequence[int]] = None,
             pad_value: int = 255, crop_done: bool = False):
        """The geometric ops of ``__call__`` on a segmentation mask, for its image.

        Random resized crop (the window ``crop_window(tf.shape(mask), seed)``:
        the image's when the mask has its image's full size, even where the
        image was decoded window-only or at a reduced scale), flips and the
        projective transform (rotation, shift, shear, zoom), with the sub-seeds
        ``__call__`` gives the image, always nearest-neighbour (no class is
        made up at a boundary); the photometric ops (brightness, contrast,
        saturation, hue, channel shift) never touch it. Points outside the
        mask are filled as the image's (``fill_mode``), except that
        ``fill_mode="constant"`` fills the mask with ``pad_value``.

        Args:
            mask: uint8 [height, width, 1] classes.
            seed: int32/int64 [2], the element's stateless seed.
            output_size: as ``__call__``.
            pad_value: int in [0, 255], the mask class of filled points.
            crop_done: True when ``mask`` already is the crop window resized
                to ``output_size`` (as ``__call__``'s ``crop_done`` with the
                resize done): only the ops after the crop run.

        Returns:
            uint8 [h, w, 1] (``output_size`` when given).
        """
        mask = tf.convert_to_tensor(mask)
        seed = tf.convert_to_tensor(seed)
        if self.random_resized_crop is not None and not crop_done:
            shape = tf.shape(mask)
            size = (shape[0], shape[1]) if output_size is None else tuple(output_size)
            oy, ox, ch, cw = self.crop_window(shape, seed)
            mask = tf.image.resize(mask[oy:oy + ch, ox:ox + cw], size, method="nearest")
            if output_size is not None:
                mask.set_shape([size[0], size[1], 1])
        mask = self._flips(mask, seed)
        if self.has_geometry:
            static_shape = mask.shape
            mask = tf.cast(self._project(tf.cast(mask, tf.float32), seed, pad_value,
                                         "nearest"), tf.uint8)
            mask.set_shape(static_shape)
        return mask

    # ------------------------------------------------------------ migration
    @classmethod
    def from_image_data_generator(cls, **kwargs) -> "Augment":
        """Maps ``keras.preprocessing.image.ImageDataGenerator`` arguments.

        Mapped (ImageDataGenerator -> Augment):

        ==========================  =============================================
        rotation_range (degrees)    rotation
        width_shift_range           width_shift (fraction if < 1, else pixels)
        height_shift_range          height_shift
        shear_range (degrees)       shear
        zoom_range (z or [lo, hi])  zoom (per-axis factors, as Keras)
        horizontal_flip             horizontal_flip
        vertical_flip               vertical_flip
        brightness_range [lo, hi]   brightness_range (multiplicative)
        channel_shift_range         channel_shift (pixel units)
        fill_mode (default nearest) fill_mode
        cval                        fill_value
        interpolation_order 0 / 1   interpolation "nearest" / "bilinear"
        rescale r                   ``factory_options``: dtype=tf.float32 and,
                                    unless r == 1/255, normalize=(0.0, 1/(255 r))
                                    so that outputs are pixels * r
        dtype                       ``factory_options["dtype"]``
        validation_split            ``factory_options["validation_split"]``
        data_format                 only "channels_last" (or None)
        ==========================  =============================================

        The image factories apply ``aug.factory_options`` themselves when given
        ``augment=aug`` (an explicit option that contradicts one is refused);
        or pass ``**aug.factory_options`` to the dataset factory beside
        ``augment=aug``.

        Left out (a ValueError when set to anything but their off value):
        ``featurewise_center``, ``featurewise_std_normalization`` and
        ``zca_whitening`` need statistics of the whole dataset (use a
        ``keras.layers.Normalization`` adapted on a sample, in the model);
        ``samplewise_center`` and ``samplewise_std_normalization`` make float,
        per-image standardised outputs, not uint8 augmentation (use
        ``tf.image.per_image_standardization`` in the model or a later map);
        ``preprocessing_function`` is arbitrary Python per image, which would
        hold the GIL in the hot path; list-valued shift ranges (discrete
        choices) are not supported. ``zca_epsilon`` is accepted and ignored.

        Args:
            **kwargs: ImageDataGenerator keyword arguments.

        Returns:
            An ``Augment`` with ``factory_options`` (a dict) set.

        Raises:
            ValueError: an unsupported argument set to an active value, or a
                value out of its domain (the message names both).
            TypeError: a name that is not an ImageDataGenerator argument (the
                message names it and the closest valid name).
        """
        _refuse_idg_arguments(kwargs)
        aug = cls(**_idg_augment_args(kwargs))
        aug.factory_options = _idg_factory_options(kwargs)
        return aug


# ImageDataGenerator's arguments (keras.preprocessing.image.ImageDataGenerator).
_IDG_ARGUMENTS = frozenset({
    "featurewise_center", "samplewise_center", "featurewise_std_normalization",
    "samplewise_std_normalization", "zca_whitening", "zca_epsilon",
    "rotation_range", "width_shift_range", "height_shift_range",
    "brightness_range", "shear_range", "zoom_range", "channel_shift_range",
    "fill_mode", "cval", "horizontal_flip", "vertical_flip", "rescale",
    "preprocessing_function", "data_format", "validation_split", "dtype",
    "interpolation_order"})
# Those left out, and why (refused unless None or False).
_IDG_UNSUPPORTED = {
    "featurewise_center": "needs the dataset mean; use keras.layers.Normalization "
                          "adapted on a sample, in the model",
    "featurewise_std_normalization": "needs dataset statistics; use "
                                     "keras.layers.Normalization in the model",
    "zca_whitening": "needs the whitening matrix of the whole dataset; whiten in the "
                     "model instead (a ZCA matrix computed once on a sample, applied "
                     "as a fixed Dense/1x1 layer), or use keras.layers.Normalization "
                     "adapted on a sample",
    "samplewise_center": "gives float per-image standardised outputs; use "
                         "tf.image.per_image_standardization in the model",
    "samplewise_std_normalization": "gives float per-image standardised outputs; use "
                                    "tf.image.per_image_standardization in the model",
    "preprocessing_function": "is Python per image (holds the GIL in the hot "
                              "path); apply tf ops in a Dataset.map or in the model",
}
# ImageDataGenerator argument -> the Augment argument that takes its value as it is.
_IDG_SAME = {"rotation_range": "rotation", "shear_range": "shear",
            "channel_shift_range": "channel_shift", "horizontal_flip": "horizontal_flip",
            "vertical_flip": "vertical_flip"}


def _refuse_idg_arguments(kwargs) -> None:
    """Raises for an ImageDataGenerator argument ``from_image_data_generator`` does not
    know (TypeError), one it leaves out set active, or data_format not channels_last."""
    unknown = sorted(set(kwargs) - _IDG_ARGUMENTS)
    if unknown:
        # "... got an unexpected keyword argument 'rotation_rang' (did you mean
        # 'rotation_range'?)", or the valid names when none is close
        raise checks.unknown_keywords("Augment.from_image_data_generator", unknown,
                                      set(_IDG_ARGUMENTS))
    for name, reason in _IDG_UNSUPPORTED.items():
        v = kwargs.get(name)
        if v not in (None, False):
            raise ValueError(f"`{name}` is not supported: it {reason}. "
                             f"{checks.received(name, v)}")
    df = kwargs.get("data_format")
    if df not in (None, "channels_last"):
        raise _err("`data_format` must be 'channels_last' (tf.data images are "
                   "[height, width, channels]).", "data_format", df)


def _idg_augment_args(kwargs) -> dict:
    """The ``Augment`` arguments of ImageDataGenerator ``kwargs``."""
    args = {"fill_mode": kwargs.get("fill_mode", "nearest"),
            "fill_value": kwargs.get("cval", 0.0)}
    if "cval" in kwargs:
        _check_range("cval", kwargs["cval"], 0.0, 255.0)
    if args["fill_mode"] not in FILL_MODES:
        raise _err(f"`fill_mode` must be one of {list(FILL_MODES)}.", "fill_mode",
                   args["fill_mode"])
    for k, a in _IDG_SAME.items():
        if k in kwargs:
            args[a] = kwargs[k]
    for k, a in (("width_shift_range", "width_shift"), ("height_shift_range", "height_shift")):
        if k in kwargs:
            v = kwargs[k]
            if not _is_num(v) or v < 0:
                raise _err(f"`{k}` must be a number >= 0 (lists of discrete shifts are "
                           "not supported).", k, v)
            args[a] = v
    if "zoom_range" in kwargs:
        z = kwargs["zoom_range"]
        if _is_num(z):
            if not 0 <= z < 1:
                raise _err("`zoom_range` must be a float in [0, 1) or [lower, upper].",
                           "zoom_range", z)
            args["zoom"] = z
        else:
            args["zoom"] = _check_pair("zoom_range", z, positive=True)
    if kwargs.get("brightness_range") is not None:
        args["brightness_range"] = _check_pair("brightness_range",
                                               kwargs["brightness_range"], 0.0)
    order = kwargs.get("interpolation_order", 1)
    if order not in (0, 1) or isinstance(order, bool):
        raise _err("`interpolation_order` must be 0 (nearest) or 1 (bilinear).",
                   "interpolation_order", order)
    args["interpolation"] = "nearest" if order == 0 else "bilinear"
    return args


def _idg_factory_options(kwargs) -> dict:
    """The factory options of ImageDataGenerator ``kwargs``: rescale (as dtype and
    normalize), dtype, validation_split."""
    factory = {}
    rescale = kwargs.get("rescale")
    if rescale not in (None, 0, 1, 1.0):
        if not _is_num(rescale) or rescale < 0:
            raise _err("`rescale` must be None, 0 or a positive number.", "rescale", rescale)
        factory["dtype"] = tf.float32
        if not math.isclose(rescale * 255.0, 1.0, rel_tol=1e-6):
            factory["normalize"] = (0.0, 1.0 / (255.0 * rescale))
    if kwargs.get("dtype") is not None:
        factory["dtype"] = kwargs["dtype"]
    if kwargs.get("validation_split"):
        factory["validation_split"] = kwargs["validation_split"]
    return factory
