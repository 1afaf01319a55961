"""Dataset factories for image files: class folders and path lists."""

from __future__ import annotations

from pipeline import build as build_lib
from pipeline import config as config_lib
from pipeline import index as index_lib

_COMMON_DOC = """
    Options (keyword; validated before any work, see ``API.md``):
        label_mode: "int" (int32 scalar), "categorical" (float32 one-hot
            [num_classes]), "binary" (float32 [1], exactly 2 classes) or None.
        channels: 1, 3 or 4; every image comes out with exactly this many.
        image_size: (height, width) in pixels, default (256, 256); None keeps
            the native size (then ``batch_size`` must be None).
        resize: "stretch", "crop" (center crop to the aspect) or "pad"
            (letterbox with zeros).
        interpolation: a ``tf.image.resize`` method ("bilinear", "nearest",
            "bicubic", "area", "lanczos3", ...).
        batch_size: int (default 32) or None for unbatched elements.
        shuffle: bool (default True): the *path list* is reshuffled every epoch
            before decoding, so memory does not grow with the dataset.
        seed: int or None; the same seed gives the same order and split.
        validation_split: float in (0, 1); subset: "training", "validation" or
            "both" ("both" returns (train, val), disjoint and complete).
        dtype: tf.uint8 (default, 0-255), tf.float32, tf.bfloat16 or
            tf.float16 (scaled to [0, 1], or per ``normalize``).
        on_error: "raise" (default): iterating reaches a bad file and raises
            ``tf.errors.InvalidArgumentError`` whose message names the path
            and the reason; "skip": the file is dropped, logged and listed by
            ``pipeline.errors(ds)``.
        max_errors: with "skip", an int count or a float fraction of files;
            past it iteration raises ``tf.errors.UnknownError`` whose message
            holds "ErrorBudgetExceeded: pipeline: N bad files, more than
            max_errors=... allows" and a summary of the reasons (the
            ``ErrorBudgetExceeded`` raised inside the graph, as TensorFlow
            wraps it).
        exif_orientation: bool (default True), apply JPEG EXIF orientation.
        max_pixels: int, default 178,956,970 (Pillow's limit): files whose
            header claims more pixels are bad, before any decode.
        deterministic: None (ordered when ``seed`` is given or
            ``shuffle=False``), True or False.
        num_parallel_calls: int, decode parallelism; default 2x the cores
            (``tf.data.AUTOTUNE`` lets tf.data tune it and turns autotune on).
        prefetch: int, batches prefetched (default 2; each holds
            batch_size*height*width*channels bytes), or ``tf.data.AUTOTUNE``.
        autotune: bool (default False: measured here, autotuning left a
            core idle in most epochs; see ``pipeline.build``).
        ram_budget_bytes: int, tf.data's autotune RAM budget (with autotune).
        threadpool_size: int, a private tf.data thread pool of this size.
        prefetch_to_device: e.g. "/gpu:0": batches are copied to that device
            ahead of time (last stage; not with a distribution strategy).
        fast_jpeg: bool (default True): crop-before-decode and reduced-scale
            JPEG decoding where they apply (see README "Augmentation").
        augment: a ``pipeline.Augment`` (random ops, seeded, in graph).
        cache_budget_bytes: int, the cache size allowed (default: half the
            available memory, or the free disk space for a cache file).
        cache: None, "memory" or a file path prefix: decoded, resized elements
            are cached (shuffling then happens on elements, in a 1,024
            buffer). The files written are ``path-<fingerprint>.*``, the
            fingerprint covering the files and options (see
            ``build.cache_file``): a cache is only read back by the same
            dataset.
        input_context: a ``tf.distribute.InputContext``: the path list is
            sharded per input pipeline before shuffling and ``batch_size`` is
            the global batch.

    Returns:
        A ``tf.data.Dataset`` of ``(images, labels)``, or ``images`` alone when
        there are no labels. images: ``[batch, height, width, channels]``
        (``[height, width, channels]`` when ``batch_size=None``) of ``dtype``.
        Attributes: ``class_names`` (list of str or None), ``file_paths`` (list
        of str, index order). With ``subset="both"``, a tuple (train, val).

    Raises:
        ValueError: a bad argument (the message names it and the value
            received), no images, no class folders, an unknown class name, or
            an empty subset.
        FileNotFoundError: the directory does not exist.
"""


def _finish(idx, opts):
    num_classes = len(idx.class_names) if idx.class_names else None
    if opts.validation_split is None:
        return build_lib.build(idx, opts, num_classes=num_classes)
    train, val = index_lib.split(idx, opts.validation_split, opts.seed)
    if opts.subset == "training":
        return build_lib.build(train, opts, num_classes=num_classes, subset_name="training")
    if opts.subset == "validation":
        return build_lib.build(val, opts, num_classes=num_classes, subset_name="validation")
    return (build_lib.build(train, opts, num_classes=num_classes, subset_name="training"),
            build_lib.build(val, opts, num_classes=num_classes, subset_name="validation"))


def _one_class_per_file(opts, factory: str) -> None:
    """Refuses the label modes only manifests can fill (multi-label, float)."""
    if opts.label_mode in ("multi_hot", "float"):
        raise ValueError(
            f"{factory} gives one class per file: use label_mode 'int', 'categorical', "
            "'binary' or None (multi-label and float targets come from from_manifest). "
            f"Received: label_mode={opts.label_mode!r}")


def from_directory(directory, labels="inferred", class_names=None, follow_links=False,
                   **options):
    """Images in class folders -> a streaming, batched ``tf.data.Dataset``.

    Drop-in for ``keras.utils.image_dataset_from_directory``: labels are the
    sorted class sub-folder names (``"inferred"``), None, or a sequence of ints
    for the files in sorted path order. Hidden files and folders and files
    without an image extension (case-insensitive: ``.JPEG`` counts) are
    ignored and logged once with a count. Symbolic links to files are labelled
    by the folder the link sits in; linked folders are followed only with
    ``follow_links=True`` (loops are detected and skipped).

    Args:
        directory: str or PathLike, a folder of class sub-folders (or of images
            with ``labels=None``), or an ``s3://`` / ``gs://`` URI.
        labels: "inferred" (class = sub-folder), None (images only), or a
            sequence of int labels, one per image file in sorted path order.
        class_names: sequence of str or None: fixes the class order and may
            name a subset of the sub-folders.
        follow_links: bool, follow symbolically linked folders.
    """
    opts = config_lib.make_options(**options)
    if isinstance(labels, str) and labels != "inferred" or not (
            labels is None or isinstance(labels, str) or hasattr(labels, "__len__")):
        raise ValueError(
            "`labels` must be 'inferred', None or a sequence of labels. "
            f"Received: labels={labels!r}")
    _one_class_per_file(opts, "from_directory")
    if not isinstance(follow_links, bool):
        raise ValueError(f"`follow_links` must be True or False. Received: follow_links={follow_links!r}")
    idx = index_lib.index_directory(directory, labels, class_names, follow_links)
    if labels is None:
        opts = config_lib.make_options(**{**options, "label_mode": None})
    return _finish(idx, opts)


def from_paths(paths, labels=None, class_names=None, **options):
    """A list (or 1-D string tensor) of file paths or URIs -> ``tf.data.Dataset``.

    Args:
        paths: sequence of str (local paths, or ``s3://`` / ``gs://`` URIs).
        labels: None, a sequence of int class indices, or of str class names
            (indexed by ``class_names``, default: sorted unique names).
        class_names: sequence of str or None.
    """
    opts = config_lib.make_options(**options)
    _one_class_per_file(opts, "from_paths")
    idx = index_lib.index_paths(paths, labels, class_names)
    if labels is None:
        opts = config_lib.make_options(**{**options, "label_mode": None})
    return _finish(idx, opts)


from_directory.__doc__ += _COMMON_DOC
from_paths.__doc__ += _COMMON_DOC
