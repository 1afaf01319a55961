"""Sources: the image dataset factories. Each is thin: options -> index -> build.

Every factory validates all of its arguments first (``pipeline.config``),
then indexes its source (``pipeline.sources.index``, ``pipeline.sources.manifest`` or
``pipeline.convert.shards``), then hands both to the one builder
(``pipeline.assemble``). The shared image options are documented once, on
``pipeline.config.ImageOptions``.

Returned elements (the same for every factory):

=================  ===========================================================
label_mode         element
=================  ===========================================================
"int"              ``(images, labels)``; labels int32 ``[batch]``
"categorical"      ``(images, labels)``; labels float32 ``[batch, num_classes]``
"binary"           ``(images, labels)``; labels float32 ``[batch, 1]``
"multi_hot"        ``(images, labels)``; labels float32 ``[batch, num_classes]``
"float"            ``(images, labels)``; labels float32 ``[batch]`` (or
                   ``[batch, columns]``)
None               ``images``
=================  ===========================================================

images are ``[batch, height, width, channels]`` of ``dtype`` (uint8 0-255 by
default), ``[height, width, channels]`` with ``batch_size=None``. With sample
weights (manifests, shards), a float32 ``[batch]`` follows the labels. With
``include_paths=True``, the file paths (tf.string ``[batch]``) come last;
``model.fit`` would read them as sample weights: pass it
``ds.map(lambda *el: el[:-1])``. With ``on_error="skip"`` the number of
batches is unknown (``tf.data.UNKNOWN_CARDINALITY``); with "raise" it is known.
"""

from __future__ import annotations

import dataclasses

from pipeline import assemble
from pipeline import checks
from pipeline import config as config_lib
from pipeline.sources import index as index_lib
from pipeline.sources import manifest as manifest_lib
from pipeline.sources import pairs as pairs_lib
from pipeline.convert import shards


@checks.known_keywords(config_lib.FIELDS, config_lib.KERAS_EQUIVALENTS)
def from_directory(directory, labels="inferred", class_names=None, follow_links=False,
                   masks_dir=None, mask_suffix: str = "", image_suffix: str = "", **options):
    """Images in class folders -> a streaming, batched ``tf.data.Dataset``.

    Drop-in for ``keras.utils.image_dataset_from_directory``: labels are the
    sorted class sub-folder names (``"inferred"``), None, or a sequence of ints
    for the files in sorted path order. Hidden files and folders and files
    without an image extension (case-insensitive: ``.JPEG`` counts) are
    ignored and logged once with a count. Listing is all the indexing there
    is: formats, header sizes and EXIF tags are read while the images decode.
    Symbolic links to files are labelled by the folder the link sits in;
    linked folders are followed only with ``follow_links=True`` (loops are
    detected and skipped).

    Args:
        directory: str or PathLike, a folder of class sub-folders (or of images
            with ``labels=None``), or an ``s3://`` / ``gs://`` URI.
        labels: "inferred" (class = sub-folder), None (images only), or a
            sequence of int labels, one per image file in sorted path order.
        class_names: sequence of str or None: fixes the class order and may
            name a subset of the sub-folders. Names are compared in Unicode
            NFC (a folder named in NFD on macOS matches its NFC name); the
            dataset's ``class_names`` are NFC.
        follow_links: bool, follow symbolically linked folders. Without it,
            each link to a folder is left out and named in one warning (and
            in ``scan``'s report); links to files are read (as Keras).
        masks_dir: None, or a folder of segmentation masks: ``directory`` is
            then a folder of images (sub-folders are part of a file's name,
            not classes) and elements are ``(image, mask)``, each image
            paired with the mask of the same relative folder and stem
            (``pipeline.sources.pairs.index_directory_pairs``); ``labels`` must be
            left "inferred" or None (no labels). See docs/segmentation.md.
        mask_suffix: str, with ``masks_dir``: a mask's stem is its image's
            stem plus this (e.g. "_mask").
        image_suffix: str, with ``masks_dir``: removed from an image's stem
            before matching (e.g. Cityscapes' "_leftImg8bit").
        **options: the image options, see ``pipeline.config.ImageOptions``
            (``image_size``, ``batch_size``, ``shuffle``, ``seed``,
            ``validation_split``, ``subset``, ``label_mode``, ``augment``,
            ``cache``, ``on_error``, ``include_paths``, and for pairs
            ``mask_mode``, ``mask_colors``, ``mask_pad_value``, ...).

    Returns:
        A ``tf.data.Dataset`` of the elements in the table of
        ``pipeline.sources.factories`` (``(train, val)`` with ``subset="both"``).
        Attributes ``class_names`` (list of str or None) and ``file_paths``
        (list of str, index order).

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        ValueError: a bad argument (the message names it and the value
            received), no images, no class folders, an unknown class name, or
            an empty subset.
        FileNotFoundError: the directory does not exist.
        OSError: ``directory`` cannot be listed, or, with ``on_error="raise"``,
            a folder under it cannot be listed (named; with "skip" it is
            recorded in ``pipeline.errors(ds)``).
    """
    if masks_dir is not None:
        return _directory_pairs(directory, labels, class_names, follow_links, masks_dir,
                                mask_suffix, image_suffix, options)
    if mask_suffix or image_suffix:
        raise ValueError("`mask_suffix` and `image_suffix` match images to masks: pass "
                         f"`masks_dir` too. {checks.received('mask_suffix', mask_suffix)}, "
                         f"image_suffix={image_suffix!r}, masks_dir=None")
    opts = config_lib.make_options("from_directory", **options)
    config_lib.check_pair_options("from_directory", opts, False)
    if isinstance(labels, str) and labels != "inferred" or not (
            labels is None or isinstance(labels, str) or hasattr(labels, "__len__")):
        raise ValueError("`labels` must be 'inferred', None or a sequence of labels. "
                         f"{checks.received('labels', labels)}")
    follow_links = checks.check_bool("follow_links", follow_links)
    idx = index_lib.index_directory(directory, labels, class_names, follow_links,
                                    on_error=opts.on_error)
    if labels is None:
        opts = dataclasses.replace(opts, label_mode=None)
    return assemble.build_subsets(idx, opts)


@checks.known_keywords(config_lib.FIELDS, config_lib.KERAS_EQUIVALENTS)
def from_paths(paths, labels=None, class_names=None, masks=None, **options):
    """A list (or 1-D string tensor) of file paths or URIs -> ``tf.data.Dataset``.

    Args:
        paths: sequence of str (local paths, or ``s3://`` / ``gs://`` URIs).
        labels: None, a sequence of int class indices, or of str class names
            (indexed by ``class_names``, default: the sorted unique names).
        class_names: sequence of str or None.
        masks: None, or a sequence of mask paths, one per path (segmentation
            pairs): elements are then ``(image, mask)`` and ``labels`` must be
            None. See ``from_directory``'s ``masks_dir``.
        **options: the image options, see ``pipeline.config.ImageOptions``.

    Returns:
        As ``from_directory``. A missing file is a bad file, met when read.

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        ValueError: a bad argument, empty ``paths``, or labels that do not
            match the paths (the position is named).
    """
    if masks is not None:
        if labels is not None or class_names is not None:
            raise ValueError("With `masks` (segmentation pairs), elements are (image, mask): "
                             "`labels` and `class_names` must be None. " + checks.received(
                                 "labels" if labels is not None else "class_names",
                                 labels if labels is not None else class_names))
        opts = config_lib.make_options("from_paths", **{**options, "label_mode": None})
        return _build_pairs(pairs_lib.index_path_pairs(paths, masks), opts)
    opts = config_lib.make_options("from_paths", **options)
    config_lib.check_pair_options("from_paths", opts, False)
    idx = index_lib.index_paths(paths, labels, class_names)
    if labels is None:
        opts = dataclasses.replace(opts, label_mode=None)
    return assemble.build_subsets(idx, opts)


@checks.known_keywords(config_lib.FIELDS, config_lib.KERAS_EQUIVALENTS)
def from_manifest(manifest, path_column: str = "path", label_columns=None, root=None,
                  weight_column=None, allow_outside_root: bool = False,
                  label_mode=manifest_lib.AUTO, class_names=None, mask_column=None,
                  **options):
    """A CSV or JSON Lines manifest of image paths -> a streaming ``tf.data.Dataset``.

    The manifest is a CSV/TSV file with a header row, or JSON Lines (``.jsonl``,
    ``.json`` or ``.ndjson``: one JSON object per line). It is parsed once, at
    index time, with the ``csv`` / ``json`` standard modules; images are then
    read, decoded and resized in graph exactly as ``from_directory`` does.

    Args:
        manifest: str path (local, or ``s3://`` / ``gs://`` URI) of the manifest.
        path_column: str, the column holding image paths. Relative paths are
            resolved against ``root``.
        label_columns: None (use the column ``"label"`` when the manifest has
            one, else no labels), a column name, or a list of column names
            (each a number; ``y`` is then a float32 vector, one entry per column,
            and ``class_names`` defaults to the column names).
        root: str folder or URI that relative paths resolve against; default the
            manifest's folder.
        weight_column: None or a column of float sample weights; elements are
            then ``(x, y, sample_weight)`` with ``sample_weight`` float32 scalar
            (``[batch]`` batched), as Keras ``fit`` accepts.
        allow_outside_root: bool; by default an absolute path, or one whose
            ``..`` escapes ``root``, is refused.
        label_mode: "auto" (default), "int", "categorical", "binary",
            "multi_hot", "float" or None. "auto" picks "multi_hot" when a cell is
            a JSON list or a ``|``-separated CSV string, "float" when a number
            has a fraction, else "int".

            * "int": int32 class index. Cells are integers (the index itself) or
              class-name strings (``class_names``, default the sorted unique
              names, gives the index).
            * "categorical" / "binary": as ``from_directory``.
            * "multi_hot": float32 ``[num_classes]`` with 1.0 at every listed
              class (``"cat|dog"`` in CSV, ``["cat", "dog"]`` in JSON).
            * "float": float32 regression target, scalar (or ``[len(label_columns)]``).
        class_names: sequence of str or None; fixes the class order.
        mask_column: None, or the column of mask paths (segmentation pairs,
            resolved as image paths are): elements are then
            ``(image, mask)``; labels and weights are not read.
        **options: the image options, see ``pipeline.config.ImageOptions``.

    Every row is delivered as listed: a file listed on several lines is read
    once per row each epoch (oversampling on purpose works). Such files are
    named, with their lines (the first few), in one logged warning; ``scan``
    of the manifest lists them all (``ScanReport.duplicates``).

    Returns:
        As ``from_directory``; ``(images, labels, sample_weights)`` with a
        ``weight_column``.

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        FileNotFoundError: the manifest, or a listed local file, is missing (the
            message names the manifest line). With ``on_error="skip"`` a
            missing file is a recorded bad file instead.
        IsADirectoryError: ``manifest`` is a folder (class folders:
            ``from_directory``).
        ValueError: a bad argument; or (``ManifestError``) a missing column, an
            empty path, an unparseable label or a path escaping ``root``, with
            the manifest's file name and line number.
    """
    if mask_column is not None:
        return _manifest_pairs(manifest, path_column, label_columns, root, weight_column,
                               allow_outside_root, class_names, mask_column, options)
    mode = None if label_mode is None else "int"
    if label_mode not in (manifest_lib.AUTO, None):
        mode = label_mode
    opts = config_lib.make_options("from_manifest", **{**options, "label_mode": mode})
    config_lib.check_pair_options("from_manifest", opts, False)
    idx, resolved = manifest_lib.index_manifest(
        manifest, path_column, label_columns, root, weight_column, allow_outside_root,
        label_mode, class_names, missing_ok=opts.on_error.skips)
    if resolved != opts.label_mode:  # "auto" resolved from the cells
        opts = dataclasses.replace(opts, label_mode=resolved)
    return assemble.build_subsets(idx, opts)


@checks.known_keywords(config_lib.FIELDS, config_lib.KERAS_EQUIVALENTS)
def from_tfrecords(files, shuffle_buffer_size: int = 1024, **options):
    """TFRecord shards written by ``write_tfrecords`` -> the same elements as the source.

    Shards are read with a parallel interleave. With ``shuffle=True`` the
    shard order is reshuffled every epoch and a bounded buffer of
    ``shuffle_buffer_size`` encoded records shuffles elements (memory ~ buffer
    x mean file size). With ``input_context`` and fewer shards than input
    pipelines, each pipeline reads every shard and keeps its share of the
    records, so every record is still read exactly once in all. Decoding
    (EXIF orientation included), resizing, the bad-file policy and batching
    are the very graph of ``from_directory``, so a file gives the same pixels
    from its shards as from its folder.

    Args:
        files: a folder of shards, a glob, or a list of shard files (local or
            ``s3://``); ``dataset.json`` must sit beside them. A path that
            exists (folder or file) is read literally, never as a pattern, even
            with ``[ ] * ?`` in its name; a string that names no existing path
            is a glob, in which ``glob.escape`` makes such characters literal.
        shuffle_buffer_size: int >= 1, encoded records held for shuffling.
        **options: the image options, see ``pipeline.config.ImageOptions``.
            ``label_mode`` defaults to "int" for class labels, "multi_hot" /
            "float" for stored vectors and floats. ``validation_split`` is
            refused (split before writing).

    Returns:
        As ``from_directory`` (``(images, labels, sample_weights)`` when
        weights were stored; ``(images, masks)`` for segmentation pairs). ``class_names`` from the sidecar; ``file_paths``
        is None (paths are stored in the records; ``include_paths=True``
        puts them in the elements).

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        ValueError: a bad argument, no files, a file not in the sidecar, or
            (given a folder) a shard the sidecar lists missing from it.
        FileNotFoundError: no ``dataset.json`` beside the shards.
    """
    shuffle_buffer_size = checks.check_int("shuffle_buffer_size", shuffle_buffer_size)
    if "label_mode" not in options:
        options["label_mode"] = shards.stored_label_mode(files)
    opts = config_lib.make_options("from_tfrecords", **options)
    records = shards.open_records(files, opts, shuffle_buffer_size)
    config_lib.check_pair_options("from_tfrecords", opts, records.has_masks)
    return assemble.build(records, opts, num_classes=records.num_classes)


def _directory_pairs(directory, labels, class_names, follow_links, masks_dir, mask_suffix,
                     image_suffix, options):
    """``from_directory`` with ``masks_dir``: segmentation pairs."""
    if not (labels is None or isinstance(labels, str) and labels == "inferred") \
            or class_names is not None:
        raise ValueError("With `masks_dir` (segmentation pairs), elements are (image, mask): "
                         "`labels` must be 'inferred' (the default) or None, and "
                         "`class_names` None. " + checks.received(
                             "labels" if class_names is None else "class_names",
                             labels if class_names is None else class_names))
    opts = config_lib.make_options("from_directory", **{**options, "label_mode": None})
    idx = pairs_lib.index_directory_pairs(
        directory, masks_dir, mask_suffix, image_suffix,
        checks.check_bool("follow_links", follow_links), opts.on_error)
    return _build_pairs(idx, opts)


def _manifest_pairs(manifest, path_column, label_columns, root, weight_column,
                    allow_outside_root, class_names, mask_column, options):
    """``from_manifest`` with ``mask_column``: segmentation pairs."""
    if label_columns is not None or weight_column is not None or class_names is not None:
        raise ValueError(
            "With `mask_column` (segmentation pairs), elements are (image, mask): "
            "`label_columns`, `weight_column` and `class_names` must be None. Received: "
            f"label_columns={label_columns!r}, weight_column={weight_column!r}, "
            f"class_names={class_names!r}")
    opts = config_lib.make_options("from_manifest", **{**options, "label_mode": None})
    idx, _ = manifest_lib.index_manifest(
        manifest, path_column, None, root, None, allow_outside_root, None, None,
        missing_ok=opts.on_error.skips)
    idx.labels, idx.class_names = None, None
    idx = pairs_lib.add_manifest_masks(idx, manifest, mask_column, root, allow_outside_root,
                                       missing_ok=opts.on_error.skips)
    return _build_pairs(idx, opts)


def _build_pairs(idx, opts):
    """Segmentation pairs (an Index with ``mask_paths``) -> the dataset(s)."""
    pairs_lib.jpeg_masks_warning(idx.mask_paths)
    return assemble.build_subsets(idx, opts)
