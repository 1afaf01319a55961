"""Transform: deterministic resize, crop and pad of uint8 images, in graph.

All functions take and return ``uint8`` images ``[height, width, channels]``
(values 0-255); resampling runs in float32 and is rounded and saturated back
to uint8, so images stay uint8 until the last moment.
"""

from __future__ import annotations

import tensorflow as tf


# Resampling methods whose output is a convex combination of input pixels:
# it stays within [0, 255], so no clipping is needed.
CONVEX = ("bilinear", "area", "nearest")


def to_uint8(x, convex: bool = False):
    """float [.., 0-255] -> uint8, rounded half up; clipped unless ``convex``.

    ``convex=True`` (bilinear / area / nearest output, never outside [0, 255])
    skips the clip: two elementwise ops instead of four on the hot path.
    """
    if x.dtype == tf.uint8:
        return x
    if convex:
        return tf.cast(x + 0.5, tf.uint8)
    return tf.cast(tf.clip_by_value(x + 0.5, 0.0, 255.0), tf.uint8)


def aspect_crop_window(height, width, target_height, target_width):
    """The largest centered window of the target aspect ratio (``resize="crop"``).

    Returns (offset_y, offset_x, crop_h, crop_w) as int32 scalars (pixels), as
    Keras' ``crop_to_aspect_ratio``.
    """
    h = tf.cast(height, tf.float32)
    w = tf.cast(width, tf.float32)
    aspect = float(target_width) / float(target_height)
    crop_h = tf.cast(tf.minimum(h, tf.round(w / aspect)), tf.int32)
    crop_w = tf.cast(tf.minimum(w, tf.round(h * aspect)), tf.int32)
    crop_h = tf.maximum(crop_h, 1)
    crop_w = tf.maximum(crop_w, 1)
    oy = (tf.cast(height, tf.int32) - crop_h) // 2
    ox = (tf.cast(width, tf.int32) - crop_w) // 2
    return oy, ox, crop_h, crop_w


CROP_PADDING = 32  # pixels: the reference ResNet evaluation's resize-then-crop margin


def center_crop_window(height, width, target_height, target_width,
                       crop_padding: int = CROP_PADDING):
    """The ImageNet evaluation window (``resize="center_crop"``).

    The centred window of the target aspect (``aspect_crop_window``), shrunk
    by ``s / (s + crop_padding)`` with ``s = min(target_height,
    target_width)``: for a square target this is the TensorFlow Model
    Garden's ResNet ``_decode_and_center_crop`` (``imagenet_preprocessing.py``,
    ``CROP_PADDING = 32``): side ``int(s / (s + 32) * min(height, width))``,
    offsets ``(height - side + 1) // 2`` and ``(width - side + 1) // 2`` -- at
    224x224 the same as resizing the shorter side to 256 and cropping the
    central 224 (He et al. 2016; torchvision's ``Resize(256)`` +
    ``CenterCrop(224)``, up to rounding).

    Returns (offset_y, offset_x, crop_h, crop_w) as int32 scalars (pixels),
    each side at least 1 pixel.
    """
    _, _, ch, cw = aspect_crop_window(height, width, target_height, target_width)
    s = min(target_height, target_width)
    f = s / (s + crop_padding)
    crop_h = tf.maximum(tf.cast(f * tf.cast(ch, tf.float32), tf.int32), 1)
    crop_w = tf.maximum(tf.cast(f * tf.cast(cw, tf.float32), tf.int32), 1)
    oy = (tf.cast(height, tf.int32) - crop_h + 1) // 2
    ox = (tf.cast(width, tf.int32) - crop_w + 1) // 2
    return oy, ox, crop_h, crop_w


def resize_with_pad(image, target_height: int, target_width: int, interpolation="bilinear",
                    antialias: bool = False):
    """Fits ``image`` [h, w, c] into the target, centred, padded with zeros (float32 out).

    As ``tf.image.resize_with_pad``, in exact integer arithmetic: the side
    that limits the scale fills the target exactly, the other is scaled down
    (floor) to at least 1 pixel (a 10000x3 image fitted to 224x224 gives one
    row of content, where ``tf.image.resize_with_pad`` asks for 0 rows and
    fails), and the padding is split evenly, the odd pixel at the bottom/right.
    """
    s = tf.shape(image, out_type=tf.int64)
    h, w = s[0], s[1]
    th, tw = tf.constant(target_height, tf.int64), tf.constant(target_width, tf.int64)
    by_width = w * th >= h * tw  # w / tw >= h / th: the width limits the scale
    rh = tf.where(by_width, tf.maximum(h * tw // w, 1), th)
    rw = tf.where(by_width, tw, tf.maximum(w * th // h, 1))
    resized = tf.image.resize(image, tf.cast(tf.stack([rh, rw]), tf.int32), method=interpolation,
                              antialias=antialias)
    return tf.image.pad_to_bounding_box(resized, tf.cast((th - rh) // 2, tf.int32),
                                        tf.cast((tw - rw) // 2, tf.int32),
                                        target_height, target_width)


# resize modes that cut a window before resizing: a JPEG decodes only the window
WINDOW_MODES = {"crop": aspect_crop_window, "center_crop": center_crop_window}


def resize(image, size, mode="stretch", interpolation="bilinear", antialias: bool = False):
    """Resizes a uint8 image to ``size`` = (height, width) pixels.

    Args:
        image: uint8 [h, w, c].
        size: (height, width) ints.
        mode: "stretch" (ignore aspect), "crop" (center-crop to the target
            aspect, then resize), "pad" (letterbox: resize to fit, pad with
            zeros; see ``resize_with_pad``) or "center_crop" (the ImageNet
            evaluation window, ``center_crop_window``, then resize).
        interpolation: a ``tf.image.resize`` method name.
        antialias: ``tf.image.resize``'s ``antialias``: when reducing, the
            filter is widened by the reduction (as Pillow's reducing
            filters), which removes aliasing at about 4x the cost of a
            plain bilinear resize.

    Returns:
        uint8 [height, width, c].
    """
    th, tw = size
    if mode in WINDOW_MODES:
        s = tf.shape(image)
        oy, ox, ch, cw = WINDOW_MODES[mode](s[0], s[1], th, tw)
        image = image[oy:oy + ch, ox:ox + cw]
    if mode == "pad":
        out = resize_with_pad(image, th, tw, interpolation, antialias)
    else:
        out = tf.image.resize(image, (th, tw), method=interpolation, antialias=antialias)
    # (an antialiased bilinear is a triangle filter: convex too, but kept clipped)
    out = to_uint8(out, convex=interpolation in CONVEX and not antialias)
    out.set_shape([th, tw, image.shape[-1]])
    return out


# tf.image.resize's methods as ScaleAndTranslate kernels (what tf.image.resize
# runs with antialias=True); "nearest" and "area" have none.
_KERNELS = {"bilinear": "triangle", "bicubic": "keyscubic", "lanczos3": "lanczos3",
            "lanczos5": "lanczos5", "gaussian": "gaussian", "mitchellcubic": "mitchellcubic"}


def resize_box(image, box, size, interpolation="bilinear", antialias: bool = False):
    """Resamples the window ``box`` of ``image`` to ``size``, at sub-pixel precision.

    The window of a crop decoded at a reduced DCT scale rarely falls on the
    reduced pixel grid (``decode.window_box``): slicing it to whole pixels would
    shift the output by up to a reduced pixel (measured: 5 dB lost against the
    reference). This samples exactly the window, as ``tf.image.resize`` of the
    window would at full scale: ``tf.raw_ops.ScaleAndTranslate`` (the op of
    ``tf.image.resize(antialias=True)``) with the method's kernel. A box that
    is the whole image takes ``tf.image.resize`` itself (the same pixels as
    ``resize``, and cheaper). "nearest" and "area" (no such kernel) take the
    window rounded to whole pixels.

    Args:
        image: uint8 [h, w, c].
        box: float32 [4], (offset_y, offset_x, height, width) in pixels.
        size: (height, width) ints.
        interpolation: a ``tf.image.resize`` method name.
        antialias: ``tf.image.resize``'s ``antialias``.

    Returns:
        uint8 [height, width, c].
    """
    th, tw = size
    s = tf.cast(tf.shape(image)[:2], tf.float32)
    whole = tf.reduce_all(tf.equal(box, tf.concat([[0.0, 0.0], s], 0)))
    kernel = _KERNELS.get(interpolation)

    def plain():
        return resize(image, size, "stretch", interpolation, antialias)

    def part():
        if kernel is None:
            oy, ox, ch, cw = tf.unstack(tf.cast(tf.round(box), tf.int32))
            return resize(image[oy:oy + tf.maximum(ch, 1), ox:ox + tf.maximum(cw, 1)], size,
                          "stretch", interpolation, antialias)
        scale = tf.constant([th, tw], tf.float32) / box[2:]
        out = tf.raw_ops.ScaleAndTranslate(
            images=tf.cast(image, tf.float32)[None], size=tf.constant([th, tw], tf.int32),
            scale=scale, translation=-box[:2] * scale, kernel_type=kernel, antialias=antialias)
        return to_uint8(out[0])

    out = tf.cond(whole, plain, part)
    out.set_shape([th, tw, image.shape[-1]])
    return out


def resize_mask(mask, size, mode="stretch", pad_value: int = 255):
    """Resizes a uint8 class mask as ``resize`` resizes its image: same geometry, no new classes.

    The crop window of "crop" / "center_crop" is computed from the mask's
    shape, which is its image's (pairs of other sizes are refused before), so
    image and mask are cut alike; resampling is nearest-neighbour
    (``tf.image.resize``'s half-pixel centres, as the image's), so every
    output pixel is an input class; the letterbox of "pad" is ``pad_value``.

    Args:
        mask: uint8 [h, w, 1] classes.
        size: (height, width) ints.
        mode: "stretch", "crop", "pad" or "center_crop" (see ``resize``).
        pad_value: int in [0, 255], the class of padded pixels.

    Returns:
        uint8 [height, width, 1].
    """
    th, tw = size
    if mode in WINDOW_MODES:
        s = tf.shape(mask)
        oy, ox, ch, cw = WINDOW_MODES[mode](s[0], s[1], th, tw)
        mask = mask[oy:oy + ch, ox:ox + cw]
    if mode == "pad":
        # classes + 1 so that the zeros of the padding are told apart from class 0
        shifted = resize_with_pad(tf.cast(mask, tf.int32) + 1, th, tw, "nearest")
        shifted = tf.cast(shifted, tf.int32)
        out = tf.cast(tf.where(shifted == 0, pad_value, shifted - 1), tf.uint8)
    else:
        out = tf.image.resize(mask, (th, tw), method="nearest")
    out = tf.cast(out, tf.uint8)
    out.set_shape([th, tw, 1])
    return out
