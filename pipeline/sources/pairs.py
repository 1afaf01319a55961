"""Pairs: segmentation images matched to their masks, by name, never by position.

Index time only (strings, no pixels). ``index_directory_pairs`` lists an
images folder and a masks folder (recursively) and matches each image to the
mask with the same relative folder and file stem (extensions free, an
optional ``mask_suffix`` on the mask's stem, an optional ``image_suffix`` on
the image's). Two sorted lists are never zipped: an image without a mask or
a mask without an image is named, with where its partner was looked for; it
raises, or under ``on_error="skip"`` becomes a bad row of the ``Index``
(skipped and recorded in ``pipeline.errors(ds)`` when met).
"""

from __future__ import annotations

import os
from typing import Dict, List, Tuple

from absl import logging

from pipeline import checks
from pipeline import config
from pipeline.decode import formats
from pipeline.sources import index as index_lib
from pipeline.sources import manifest as manifest_lib
from pipeline.sources import read

_SHOWN = 5  # orphans named in an error message


def _check_folder(name: str, folder) -> str:
    if not isinstance(folder, (str, os.PathLike)):
        raise ValueError(f"`{name}` must be a folder path (str or PathLike) or a URI. "
                         f"{checks.received(name, folder)}")
    folder = os.fspath(folder)
    if read.is_remote(folder):
        folder = folder.rstrip("/")
        read.ensure_filesystem(folder)
    if not read.isdir(folder):
        if read.exists(folder):
            raise ValueError(f"`{name}` is not a folder. {checks.received(name, folder)}")
        raise FileNotFoundError(f"`{name}` does not exist: {folder!r}")
    return folder


def _check_not_own_masks(directory, masks_dir, mask_suffix, image_suffix) -> None:
    """Refuses a mask folder that is the images' own with the same suffix (every image
    would be its own mask)."""
    if mask_suffix == image_suffix and read.same_folder(directory, masks_dir):
        raise ValueError(
            "`masks_dir` is the images' own folder with the same suffix: every image would "
            "be its own mask. Give the masks' folder, or tell masks from images by "
            "`mask_suffix` (e.g. '_mask') and `image_suffix`. "
            f"Received: directory={directory!r}, masks_dir={masks_dir!r}, "
            f"mask_suffix={mask_suffix!r}, image_suffix={image_suffix!r}")


def _check_suffix(name: str, value) -> str:
    if not isinstance(value, str) or "/" in value or os.sep in value:
        raise ValueError(f"`{name}` must be a str (the end of a file stem, no folder part). "
                         f"{checks.received(name, value)}")
    return value


def _keys(folder: str, files: List[str], suffix: str) -> Tuple[Dict[str, List[str]], List[str]]:
    """{relative folder + stem without ``suffix``, in Unicode NFC: [files]} and the
    files whose stem does not end with ``suffix`` (left out)."""
    out: Dict[str, List[str]] = {}
    other = []
    for p in files:
        rel = p[len(folder):].lstrip("/\\") if p.startswith(folder) else os.path.basename(p)
        stem = os.path.splitext(rel)[0].replace(os.sep, "/")
        if suffix:
            if not stem.endswith(suffix):
                other.append(p)
                continue
            stem = stem[:-len(suffix)]
        out.setdefault(checks.nfc(stem), []).append(p)  # stems compared in Unicode NFC
    return out, other


def _ambiguous(what: str, folder: str, keys: Dict[str, List[str]]) -> None:
    twice = {k: v for k, v in keys.items() if len(v) > 1}
    if twice:
        k, v = next(iter(sorted(twice.items())))
        raise ValueError(
            f"{len(twice)} {what} stem(s) under {folder!r} name more than one file (extensions "
            f"differ), so the pairing is ambiguous: e.g. {v}. Keep one file per stem. "
            f"Received: {what}s_dir={folder!r}")


def index_directory_pairs(directory, masks_dir, mask_suffix: str = "",
                          image_suffix: str = "", follow_links: bool = False,
                          on_error: str = "raise") -> index_lib.Index:
    """Images and masks matched by relative path and stem -> an ``Index`` with ``mask_paths``.

    The image ``directory/a/b/x.jpg`` pairs with the mask
    ``masks_dir/a/b/x<mask_suffix>.<any image extension>``; with
    ``image_suffix``, an image's stem must end with it and it is removed first
    (Cityscapes: ``x_leftImg8bit.png`` with ``x_gtFine_labelIds.png``:
    ``image_suffix="_leftImg8bit"``, ``mask_suffix="_gtFine_labelIds"``).
    Files whose stem lacks the suffix (e.g. Cityscapes' ``_gtFine_color``
    masks beside the ``_labelIds`` ones) are not part of the dataset: they
    are counted in one log line. Rows are in the images' sorted path order;
    a mask without an image is a row of its own (path: the mask), after them.

    Raises:
        FileNotFoundError: a folder does not exist.
        ValueError: not a folder, ``masks_dir`` the images' folder with the same
            suffix, a bad suffix, no images, a stem naming two
            files of one side (ambiguous), or (``on_error="raise"``) an image
            without a mask or a mask without an image: the message counts
            them and names the first few, each with where its partner was
            looked for.
    """
    directory = _check_folder("directory", directory)
    masks_dir = _check_folder("masks_dir", masks_dir)
    mask_suffix = _check_suffix("mask_suffix", mask_suffix)
    image_suffix = _check_suffix("image_suffix", image_suffix)
    _check_not_own_masks(directory, masks_dir, mask_suffix, image_suffix)
    images, img_errors, left_img = index_lib.list_images(directory, follow_links)
    masks, mask_errors, left_mask = index_lib.list_images(masks_dir, follow_links)
    index_lib.warn_left_out(left_img, directory)
    index_lib.warn_left_out(left_mask, masks_dir)
    if not images:
        raise ValueError(f"No image files found in `directory`. "
                         f"Received: directory={directory!r}")
    img_keys, img_other = _keys(directory, images, image_suffix)
    mask_keys, mask_other = _keys(masks_dir, masks, mask_suffix)
    for folder, other, suffix, name in ((directory, img_other, image_suffix, "image_suffix"),
                                        (masks_dir, mask_other, mask_suffix, "mask_suffix")):
        if other:
            logging.warning("pipeline: left out %d file(s) under %s whose stem does not end "
                            "with %s=%r, e.g. %s", len(other), folder, name, suffix, other[0])
    _ambiguous("image", directory, img_keys)
    _ambiguous("mask", masks_dir, mask_keys)
    img_bad = {p: e for k, e in img_errors.items() for p in [images[k]]}
    mask_bad = {p: e for k, e in mask_errors.items() for p in [masks[k]]}
    paths, mask_paths, errors = [], [], {}
    no_mask, no_image = [], []
    for key in sorted(img_keys, key=lambda k: img_keys[k][0]):
        image = img_keys[key][0]
        mask = mask_keys.get(key, [""])[0]
        if not mask:
            looked = read.join(masks_dir, key + mask_suffix) + ".*"
            why = f"image without a mask: no {looked}"
            no_mask.append((image, why))
            errors[len(paths)] = why
        elif image in img_bad or mask in mask_bad:
            errors[len(paths)] = img_bad.get(image) or f"mask {mask}: {mask_bad[mask]}"
        paths.append(image)
        mask_paths.append(mask)
    for key in sorted(set(mask_keys) - set(img_keys), key=lambda k: mask_keys[k][0]):
        mask = mask_keys[key][0]
        looked = read.join(directory, key + image_suffix) + ".*"
        why = f"mask without an image: no {looked}"
        no_image.append((mask, why))
        errors[len(paths)] = why
        paths.append(mask)
        mask_paths.append(mask)
    orphans = no_mask + no_image
    if orphans and config.OnError.of(on_error).raises:
        shown = "; ".join(f"{p}: {why}" for p, why in orphans[:_SHOWN])
        more = f" (and {len(orphans) - _SHOWN} more)" if len(orphans) > _SHOWN else ""
        raise ValueError(
            f"{len(no_mask)} image(s) without a mask and {len(no_image)} mask(s) without an "
            f"image: {shown}{more}. Pairs are matched by relative folder and stem (see "
            "mask_suffix / image_suffix); pass on_error='skip' to skip and record them. "
            f"Received: directory={directory!r}, masks_dir={masks_dir!r}")
    return index_lib.Index(paths, None, None, None, index_lib.check_tiffs(paths, errors),
                           left_img + left_mask, mask_paths=mask_paths)


def index_path_pairs(paths, masks) -> index_lib.Index:
    """Given pairs: ``paths[i]`` with ``masks[i]`` (files are not opened).

    Raises:
        ValueError: as ``index.index_paths`` for ``paths``; ``masks`` not a
            list of paths of the same length (the position is named).
    """
    idx = index_lib.index_paths(paths)
    if hasattr(masks, "numpy"):
        masks = [m.decode() if isinstance(m, bytes) else str(m) for m in masks.numpy().tolist()]
    if isinstance(masks, (str, bytes, os.PathLike)) or not hasattr(masks, "__len__"):
        raise ValueError("`masks` must be a list of mask file paths, one per image path. "
                         f"{checks.received('masks', masks)}")
    masks = list(masks)
    if len(masks) != len(idx.paths):
        raise ValueError(f"`masks` must have one entry per path: {len(idx.paths)} paths, "
                         f"{len(masks)} masks. Received: masks=<{len(masks)} items>")
    for i, m in enumerate(masks):
        if not isinstance(m, (str, bytes, os.PathLike)):
            raise ValueError("`masks` must hold file paths (str or PathLike). "
                             f"{checks.received(f'masks[{i}]', m)}")
    idx.mask_paths = [os.fspath(m) if not isinstance(m, bytes) else m.decode() for m in masks]
    for k, e in index_lib.check_tiffs(idx.mask_paths, {}).items():
        idx.errors.setdefault(k, f"mask {idx.mask_paths[k]}: {e}")
    return idx


def add_manifest_masks(idx: index_lib.Index, manifest, mask_column: str, root,
                       allow_outside_root: bool, missing_ok: bool) -> index_lib.Index:
    """Reads ``mask_column`` of the manifest ``idx`` was indexed from into ``idx.mask_paths``.

    Mask paths resolve against ``root`` as image paths do. A missing mask file
    raises ``FileNotFoundError`` naming the line, or with ``missing_ok`` makes
    the row bad ("mask ... not found").
    """
    if not isinstance(mask_column, str) or not mask_column:
        raise ValueError("`mask_column` must be a column name (a non-empty str). "
                         f"{checks.received('mask_column', mask_column)}")
    manifest = os.fspath(manifest)
    remote = read.is_remote(manifest)
    if root is None:
        root = os.path.dirname(manifest) if remote else os.path.dirname(
            os.path.abspath(manifest))
    else:
        root = os.fspath(root)
        if not read.is_remote(root):
            root = os.path.abspath(root)
    masks: List[str] = []
    errors = dict(idx.errors)
    for line_no, row, header in manifest_lib.read_rows(manifest):
        where = f"{manifest}, line {line_no}"
        if header is not None and mask_column not in header:
            raise manifest_lib.ManifestError(
                f"{manifest}, line 1 (the header): missing column {mask_column!r}; the header "
                f"has {', '.join(repr(c) for c in header)}. Received: mask_column={mask_column!r}")
        raw = row.get(mask_column)
        if not isinstance(raw, str) or not raw.strip():
            raise manifest_lib.ManifestError(f"{where}: no mask path in column {mask_column!r}. "
                                             f"Received: mask_column={mask_column!r}")
        path = manifest_lib.resolve_path(
            raw.strip(), root, allow_outside_root, where)
        if not read.is_remote(path) and not os.path.exists(path):
            if not missing_ok:
                raise FileNotFoundError(f"{where}: mask file not found: {path!r}")
            errors.setdefault(len(masks), f"mask {path}: file not found (listed on line "
                                          f"{line_no} of {os.path.basename(manifest)})")
        masks.append(path)
    if len(masks) != len(idx.paths):  # the manifest changed between the two reads
        raise ValueError(f"{manifest} changed while it was read ({len(idx.paths)} paths, "
                         f"{len(masks)} masks)")
    idx.mask_paths = masks
    idx.errors = errors
    return idx


def jpeg_masks_warning(mask_paths) -> None:
    """One warning when some masks are named as JPEGs (lossy: class edges blur)."""
    jpeg = [p for p in mask_paths if formats.from_extension(p) == "jpeg"]
    if jpeg:
        logging.warning(
            "pipeline: %d mask(s) are JPEGs, e.g. %s: JPEG is lossy, so pixels near class "
            "edges may hold values that are no class (or colours not in mask_colors); "
            "save masks as PNG", len(jpeg), jpeg[0])


def mask_formats(mask_paths) -> set:
    return formats.hinted_formats([p for p in mask_paths if p])

