"""Index: folders and path lists -> plain data (paths, labels, class names).

Works on strings only: a folder is listed (one ``scandir`` per folder, or one
``listdir`` per remote folder) and nothing is opened. Every per-file check
happens later, in graph, while the first batches decode (see
``pipeline.decode.image``): the format from the content, the header's dimensions
against ``max_pixels``, EXIF orientation, empty and unreadable files. The
only exceptions are symbolic links (one ``stat`` each, to name dangling
links and loops) and TIFF files (their strip extents are checked with
Pillow's header reader, since libtiff silently fills a truncated file).

The ``Index`` is columnar: a list of path strings (as Keras keeps) plus numpy
arrays, so it holds a few bytes per file beyond the path itself.
"""

from __future__ import annotations

import collections
import dataclasses
import numbers
import os
from typing import Dict, List, Optional, Sequence

import numpy as np
from absl import logging

from pipeline import checks
from pipeline import config
from pipeline.decode import formats
from pipeline.sources import read


@dataclasses.dataclass
class Index:
    """Paths, labels and class names of a dataset.

    Attributes:
        paths: list of str, file paths or URIs, in index order.
        labels: None, or a numpy array: int64 ``[n]`` class indices
            (``label_kind="int"``), float32 ``[n]`` targets ("float") or
            float32 ``[n, k]`` vectors ("vector": multi-hot or several columns).
        class_names: list of str or None.
        weights: float32 ``[n]`` sample weights, or None (manifests only).
        errors: {row: reason} for files known to be bad before reading
            (dangling links, link loops, truncated TIFFs, missing files).
        left_out: paths of files the listing left out because their
            extension is not an image extension (hidden files not counted).
        duplicates: {path: manifest line numbers} for each file a manifest
            lists more than once (each row is still delivered).
        in_no_class: image files directly under a class-folder root, in no
            class folder, left out (they have no class).
        unlisted: {folder: reason} for folders that could not be listed
            (``on_error="skip"`` only; under "raise" the listing raises).
        links: {path: reason} for symbolic links left out: a link to a
            folder not followed (``follow_links=False``), a dangling link or a
            link loop without an image extension.
        mask_paths: None, or (segmentation pairs, ``pipeline.sources.pairs``) the
            mask file of each row, "" where a row has none (a bad row, its
            reason in ``errors``).
    """
    paths: List[str]
    labels: Optional[np.ndarray]
    class_names: Optional[List[str]]
    weights: Optional[np.ndarray] = None
    errors: Dict[int, str] = dataclasses.field(default_factory=dict)
    left_out: List[str] = dataclasses.field(default_factory=list)
    duplicates: Dict[str, List[int]] = dataclasses.field(default_factory=dict)
    in_no_class: List[str] = dataclasses.field(default_factory=list)
    unlisted: Dict[str, str] = dataclasses.field(default_factory=dict)
    links: Dict[str, str] = dataclasses.field(default_factory=dict)
    mask_paths: Optional[List[str]] = None

    def __post_init__(self):
        if self.labels is not None and not isinstance(self.labels, np.ndarray):
            self.labels = as_label_array(self.labels)
        if self.weights is not None and not isinstance(self.weights, np.ndarray):
            self.weights = np.asarray(self.weights, np.float32)

    def __len__(self):
        return len(self.paths)

    @property
    def label_kind(self) -> Optional[str]:
        """"int", "float", "vector" or None (no labels)."""
        if self.labels is None:
            return None
        if self.labels.ndim == 2:
            return "vector"
        return "int" if np.issubdtype(self.labels.dtype, np.integer) else "float"

    @property
    def num_classes(self) -> int:
        if self.class_names:
            return len(self.class_names)
        if self.label_kind == "int" and len(self.labels):
            return int(self.labels.max()) + 1
        if self.label_kind == "vector":
            return int(self.labels.shape[1])
        return 0

    def subset(self, rows: Sequence[int]) -> "Index":
        rows = np.asarray(rows, np.int64)
        where = {int(r): k for k, r in enumerate(rows)}
        return Index(
            [self.paths[int(i)] for i in rows],
            None if self.labels is None else self.labels[rows],
            self.class_names,
            None if self.weights is None else self.weights[rows],
            {where[r]: e for r, e in self.errors.items() if r in where},
            mask_paths=None if self.mask_paths is None else [
                self.mask_paths[int(i)] for i in rows])

    @property
    def bad(self) -> List[tuple]:
        """(path, reason) of the files known to be bad at index time."""
        return [(self.paths[r], e) for r, e in sorted(self.errors.items())]

    def stamps(self) -> np.ndarray:
        """What identifies each file's contents (``read.file_stamp``: size, mtime_ns,
        ctime_ns), int64 ``[n, 3]``, and each mask's after them when there are masks
        (``[2n, 3]``); stats every file."""
        paths = self.paths + (self.mask_paths or [])
        return np.array([read.file_stamp(p) for p in paths], np.int64).reshape(-1, 3)

    def sizes(self) -> np.ndarray:
        """File sizes in bytes (int64 ``[n]``, -1 when unreadable); stats every file."""
        return np.fromiter((read.file_size(p) for p in self.paths), np.int64, len(self.paths))


def as_label_array(labels) -> np.ndarray:
    """A label list as int64 ``[n]``, float32 ``[n]`` or float32 ``[n, k]``."""
    if len(labels) and isinstance(labels[0], (list, tuple, np.ndarray)):
        return np.asarray(labels, np.float32)
    if any(isinstance(v, (float, np.floating)) for v in labels):
        return np.asarray(labels, np.float32)
    return np.asarray(labels, np.int64)


def _check_int_labels(labels, class_names) -> np.ndarray:
    """Class indices as int64, each in [0, len(class_names)) (or >= 0).

    Raises:
        ValueError: a label that is not an integer, or out of range; its
            position is named.
    """
    for i, v in enumerate(labels):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
            raise ValueError(
                "`labels` must be all int class indices or all str class names (one class "
                "per path; multi-label and float targets come from from_manifest). "
                f"{checks.received(f'labels[{i}]', v)}")
        if v < 0 or (class_names is not None and v >= len(class_names)):
            bound = (f" and < len(class_names)={len(class_names)}" if class_names is not None
                     else "")
            raise ValueError(f"`labels` must be class indices >= 0{bound}. "
                             f"{checks.received(f'labels[{i}]', v)}")
    return np.asarray(labels, np.int64)


LINK_NOT_FOLLOWED = "symbolic link to a folder, not followed (follow_links=False)"


def class_folders(subdirs: Sequence[str], directory: str) -> Dict[str, List[str]]:
    """Class name (Unicode NFC, ``checks.nfc``) -> its folders' real names, in
    sorted order. Folders whose names are one name in NFC (``café`` written by
    Linux in NFC and by macOS in NFD) are one class: logged as a warning naming
    both with their code points."""
    out: Dict[str, List[str]] = {}
    for n in subdirs:
        out.setdefault(checks.nfc(n), []).append(n)
    for name, group in out.items():
        if len(group) > 1:
            logging.warning(
                "pipeline: class folders %s in %s are one name in Unicode NFC, %r: read as "
                "one class (their files together). Rename one to keep them apart.",
                " and ".join(checks.code_points(g) for g in group), directory, name)
    return out


def list_images(folder: str, follow_links: bool = False, top: Optional[str] = None,
                unlisted: Optional[Dict[str, str]] = None,
                links: Optional[Dict[str, str]] = None):
    """Image files under ``folder`` (recursively), sorted, and the rows already known bad.

    Hidden files and folders and files without an image extension
    (case-insensitive: ``.JPEG`` counts) are ignored, counted and logged once.
    Symbolic links to files are kept (as Keras, which lists them), so that
    dangling ones with an image extension are reported as bad files rather
    than silently dropped. Folders that cannot be listed go to ``unlisted``
    ({folder: reason}); links to folders not followed, and dangling links or
    link loops without an image extension, go to ``links`` ({path: reason}).

    Returns:
        (list of str paths, {position: reason}, list of paths left out for
        their extension).
    """
    out, errors, hidden, left_out = [], {}, 0, []
    unlisted = {} if unlisted is None else unlisted
    links = {} if links is None else links
    for path, why, problem in read.walk(folder, follow_links, top):
        if why == read.UNLISTABLE:
            unlisted[path] = problem
        elif why == read.LINK_TO_FOLDER:
            links[path] = LINK_NOT_FOLLOWED
        elif why:
            hidden += 1
        elif path.lower().endswith(formats.IMAGE_EXTENSIONS):
            if problem:
                errors[len(out)] = problem
            out.append(path)
        elif problem:
            links[path] = problem
        else:
            left_out.append(path)
    if hidden:
        logging.info("pipeline: ignored %d hidden file(s) under %s", hidden, folder)
    return out, errors, left_out


def warn_left_out(left_out: Sequence[str], directory: str) -> None:
    """One warning (seen at the default log level) counting the files left out."""
    if left_out:
        exts = collections.Counter(os.path.splitext(p)[1].lower() or "(none)" for p in left_out)
        logging.warning(
            "pipeline: left out %d file(s) under %s whose extension is not an image "
            "extension (%s), e.g. %s; pipeline.scan lists them. Image extensions: %s",
            len(left_out), directory, ", ".join(f"{e}: {n}" for e, n in exts.most_common(5)),
            left_out[0], " ".join(formats.IMAGE_EXTENSIONS))


def warn_links(links: Dict[str, str], directory: str) -> None:
    """One warning per kind of symbolic link left out (not followed, dangling, loop)."""
    by_reason = collections.defaultdict(list)
    for p, why in links.items():
        by_reason[why].append(p)
    for why, paths in by_reason.items():
        if why == LINK_NOT_FOLLOWED:
            logging.warning(
                "pipeline: did not follow %d symbolic link(s) to folders under %s "
                "(follow_links=False), e.g. %s; their images are not read. Pass "
                "follow_links=True to read them", len(paths), directory, paths[0])
        else:
            logging.warning("pipeline: left out %d %s(s) under %s, e.g. %s; pipeline.scan "
                            "lists them", len(paths), why, directory, paths[0])


def unlistable_error(unlisted: Dict[str, str]) -> OSError:
    """The error for folders that cannot be listed (under ``on_error="raise"``)."""
    folder, why = next(iter(unlisted.items()))
    more = f" (and {len(unlisted) - 1} more folder(s))" if len(unlisted) > 1 else ""
    return OSError(f"pipeline: {why}: {folder!r}{more}; the images in it cannot be read. "
                   "Make it listable, or pass on_error='skip' to leave it out (it is then "
                   "recorded in pipeline.errors(dataset) and scan's report). "
                   "Received: on_error='raise'")


def warn_in_no_class(in_no_class: Sequence[str], directory: str) -> None:
    """One warning (seen at the default log level) counting the image files left out
    for lying directly under a class-folder root."""
    if in_no_class:
        logging.warning(
            "pipeline: left out %d image file(s) directly under %s, in no class folder "
            "(a file's class is the name of its sub-folder), e.g. %s; pipeline.scan lists "
            "them", len(in_no_class), directory, in_no_class[0])


def check_tiffs(paths: Sequence[str], errors: Dict[int, str]) -> Dict[int, str]:
    """Adds truncated local TIFFs (by extension) to ``errors``; no other file is opened."""
    for i, p in enumerate(paths):
        if i not in errors and p.lower().endswith((".tif", ".tiff")) and not read.is_remote(p):
            why = tiff_truncation(p)
            if why:
                errors[i] = why
    return errors


def tiff_truncation(path: str) -> str:
    """"" or why a TIFF is cut short: its image data (strip or tile offsets +
    byte counts, read with Pillow from the first IFD) runs past the file's end.

    libtiff (through tensorflow-io) decodes such a file without an error,
    filling the missing part, so it is refused here.
    """
    import warnings  # pylint: disable=import-outside-toplevel
    size = read.file_size(path)
    try:
        from PIL import Image  # pylint: disable=import-outside-toplevel
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow warns on tags cut short
            with Image.open(path) as im:
                tags = im.tag_v2
                offsets = tags.get(273) or tags.get(324) or ()
                counts = tags.get(279) or tags.get(325) or ()
    except Exception:  # noqa: BLE001 - left to the decoder, which reports it
        return ""
    end = max((int(o) + int(c) for o, c in zip(offsets, counts)), default=0)
    if end > size >= 0:
        return f"truncated TIFF (image data runs to byte {end}, the file has {size})"
    return ""


def index_directory(directory, *args, **kwargs) -> "Index":
    """``_index_directory`` (below); a folder read through fsspec is listed once
    (``read.one_listing``): one paginated listing for the whole class-folder tree.
    A bytes ``directory`` (a name that need not be UTF-8) is taken as ``os.fsdecode``
    gives it."""
    if isinstance(directory, bytes):
        directory = os.fsdecode(directory)
    if isinstance(directory, (str, os.PathLike)) and read.is_remote(os.fspath(directory)):
        with read.one_listing(os.fspath(directory)):
            return _index_directory(directory, *args, **kwargs)
    return _index_directory(directory, *args, **kwargs)


def _index_directory(directory, labels="inferred", class_names=None,
                     follow_links: bool = False, on_error: str = "raise") -> Index:
    """Lists a folder (local or URI) into an ``Index``, as Keras' image_dataset_from_directory.

    With ``labels="inferred"``, each sub-folder is a class; class names are the
    sorted sub-folder names (or ``class_names``, which fixes order and subset).
    Files are ordered by class, then by path. With a sequence of labels, they
    are given in the sorted order of all image files under ``directory``.

    A folder that cannot be listed (a class folder or any folder under it) is
    a bad input: with ``on_error="raise"`` it raises, naming it; with
    "skip" it is left out and kept in ``Index.unlisted``. ``directory``
    itself must be listable.

    Raises:
        FileNotFoundError: ``directory`` does not exist (the path is named).
        OSError: ``directory`` cannot be listed, or (``on_error="raise"``) a
            folder under it cannot be listed (named).
        ValueError: not a folder, no class folders, an unknown class name,
            bad labels, or no images.
    """
    directory, remote = _check_directory(directory)
    class_names = checks.check_class_names(class_names)
    in_no_class: List[str] = []
    unlisted: Dict[str, str] = {}
    links: Dict[str, str] = {}
    label_list = None
    if isinstance(labels, str) and labels == "inferred":
        subdirs, in_no_class = _class_entries(directory, remote, links)
        folders = class_folders(subdirs, directory)
        class_names = _chosen_classes(folders, subdirs, class_names, directory)
        paths, errors, left_out, counts = _list_classes(
            directory, folders, class_names, follow_links, unlisted, links)
        label_list = np.repeat(np.arange(len(class_names), dtype=np.int64), counts)
    else:
        paths, errors, left_out = list_images(directory, follow_links, None, unlisted, links)
        if directory in unlisted:
            raise OSError(f"pipeline: {unlisted[directory]}: `directory` {directory!r}")
        if labels is not None:
            given = list(labels)
            if len(given) != len(paths):
                raise ValueError(
                    f"`labels` has {len(given)} entries but {directory!r} has "
                    f"{len(paths)} image files (sorted order). Received: labels=<{len(given)} items>")
            label_list = _check_int_labels(given, class_names)
    if unlisted and config.OnError.of(on_error).raises:
        raise unlistable_error(unlisted)
    warn_left_out(left_out, directory)
    warn_in_no_class(in_no_class, directory)
    warn_links(links, directory)
    if not paths:
        raise ValueError(f"No image files found in `directory`. Received: directory={directory!r}"
                         + (f" ({len(unlisted)} folder(s) could not be listed, e.g. "
                            f"{next(iter(unlisted))!r})" if unlisted else ""))
    return Index(paths, label_list, class_names, None, check_tiffs(paths, errors), left_out,
                 in_no_class=in_no_class, unlisted=unlisted, links=links)


def _check_directory(directory):
    """(``directory`` as a str, whether it is remote) when it is an existing folder."""
    if not isinstance(directory, (str, os.PathLike)):
        raise ValueError("`directory` must be a folder path (str or PathLike) or a URI. "
                         f"{checks.received('directory', directory)}")
    directory = os.fspath(directory)
    remote = read.is_remote(directory)
    if remote:
        directory = directory.rstrip("/")
        read.ensure_filesystem(directory)
    if not read.isdir(directory):
        if read.exists(directory):
            raise ValueError(f"`directory` is not a folder. Received: directory={directory!r}")
        raise FileNotFoundError(f"`directory` does not exist: {directory!r}"
                                + (" (check the URI and its credentials)" if remote else
                                   checks.not_found_hint(directory)))
    return directory, remote


def _class_entries(directory: str, remote: bool, links: Dict[str, str]):
    """(the class sub-folders' names, the image files directly in ``directory``);
    dangling links where a class folder was meant are added to ``links``.

    Raises:
        ValueError: ``directory`` has no class sub-folder.
    """
    entries = read.listdir(directory)
    if not remote:  # a dangling link where a class folder was meant
        for n, is_dir in entries:
            p = read.join(directory, n)
            if not is_dir and not read.is_hidden(n) and os.path.islink(p):
                if read.link_problem(p) and not n.lower().endswith(
                        formats.IMAGE_EXTENSIONS):
                    links[p] = read.link_problem(p)
    subdirs = [n for n, is_dir in entries if is_dir and not read.is_hidden(n)]
    in_no_class = [read.join(directory, n) for n, is_dir in entries
                   if not is_dir and not read.is_hidden(n)
                   and n.lower().endswith(formats.IMAGE_EXTENSIONS)]
    if not subdirs:
        held = (f" ({len(in_no_class)} image file(s) lie directly in it)" if in_no_class
                else "")
        raise ValueError(
            "`directory` needs class sub-folders (a file's class is the name of its "
            f"sub-folder), but it has none{held}. {checks.NO_CLASS_HINT} Received: "
            f"directory={directory!r}")
    return subdirs, in_no_class


def _chosen_classes(folders, subdirs, class_names, directory: str) -> List[str]:
    """``class_names`` when every one is a folder (ValueError naming those that are
    not), or the sorted class folder names."""
    if class_names is None:
        return sorted(folders)
    missing = [c for c in class_names if c not in folders]
    if missing:
        hint = "".join(checks.look_alike(c, subdirs) for c in missing)
        raise ValueError(
            f"`class_names` names folder(s) that do not exist in {directory!r}: "
            f"{missing}. Existing class folders: {subdirs[:20]}"
            f"{'...' if len(subdirs) > 20 else ''}{hint}. "
            f"Received: class_names={class_names!r}")
    return class_names


def _list_classes(directory: str, folders, class_names, follow_links: bool,
                  unlisted: Dict[str, str], links: Dict[str, str]):
    """(paths, errors by row, files left out, files per class) of the class folders,
    class by class; warns of the classes with no images."""
    paths: List[str] = []
    errors: Dict[int, str] = {}
    left_out: List[str] = []
    counts, empty = [], []
    for name in class_names:
        files, errs = [], {}
        for folder in folders[name]:  # one folder, or the NFC and NFD folders of a name
            f, e, skipped = list_images(read.join(directory, folder), follow_links,
                                        directory, unlisted, links)
            errs.update({len(files) + k: v for k, v in e.items()})
            files.extend(f)
            left_out.extend(skipped)
        errors.update({len(paths) + k: e for k, e in errs.items()})
        paths.extend(files)
        counts.append(len(files))
        if not files:
            empty.append(name)
    if empty:
        logging.warning("pipeline: class folder(s) with no images: %s", empty)
    return paths, errors, left_out, counts


def index_paths(paths, labels=None, class_names=None) -> Index:
    """Turns a list of paths (and optional labels) into an ``Index``.

    ``labels`` may be ints (class indices), strings (class names: the sorted
    unique strings, or ``class_names``, give the index), or None. Files are
    not opened: a missing file is reported when the dataset meets it.

    Raises:
        ValueError: empty ``paths``, an empty path (""), a single path, ``labels`` of another
            length, a bad label, or a string label not in ``class_names``.
    """
    if hasattr(paths, "numpy"):
        paths = [os.fsdecode(p) if isinstance(p, bytes) else str(p)
                 for p in paths.numpy().tolist()]
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise ValueError(
            "`paths` must be a list of file paths, not a single path; use "
            f"from_directory for a folder. Received: paths={paths!r}")
    try:
        bad = next((i, p) for i, p in enumerate(paths)
                   if not isinstance(p, (str, bytes, os.PathLike)))
    except TypeError:
        raise ValueError(f"`paths` must be a list of file paths. "
                         f"{checks.received('paths', paths)}") from None
    except StopIteration:
        bad = None
    if bad is not None:
        raise ValueError("`paths` must hold file paths (str or PathLike). "
                         f"{checks.received(f'paths[{bad[0]}]', bad[1])}")
    # bytes paths (names that need not be UTF-8) as Python's os functions hold them
    paths = [os.fsdecode(p) for p in paths]
    if not paths:
        raise ValueError("`paths` is empty. Received: paths=[]")
    empty = next((i for i, p in enumerate(paths) if not p), None)
    if empty is not None:  # "" names no file (as an empty manifest cell)
        raise ValueError("`paths` must hold file paths; an empty string names no file. "
                         f"{checks.received(f'paths[{empty}]', '')}")
    class_names = checks.check_class_names(class_names)
    label_list = None
    if labels is not None:
        if hasattr(labels, "numpy"):
            labels = labels.numpy().tolist()
        given = list(labels.tolist() if isinstance(labels, np.ndarray) else labels)
        if len(given) != len(paths):
            raise ValueError(
                f"`labels` must have one entry per path: {len(paths)} paths, "
                f"{len(given)} labels. Received: labels=<{len(given)} items>")
        if given and isinstance(given[0], (str, bytes)):
            strs = [checks.nfc(v.decode() if isinstance(v, bytes) else v) for v in given]
            if class_names is None:
                class_names = sorted(set(strs))
            lookup = {c: k for k, c in enumerate(class_names)}
            unknown = sorted(set(strs) - set(lookup))
            if unknown:
                hint = "".join(checks.look_alike(u, class_names) for u in unknown[:10])
                raise ValueError(
                    f"`labels` has class(es) not in `class_names`: {unknown[:10]}{hint}. "
                    f"Received: class_names={class_names!r}")
            label_list = np.asarray([lookup[s] for s in strs], np.int64)
        else:
            label_list = _check_int_labels(given, class_names)
    return Index(paths, label_list, class_names, None, check_tiffs(paths, {}))


def split(index: Index, validation_split: float, seed: Optional[int]):
    """Splits an Index into (training, validation) by file, disjoint and complete, as Keras does.

    The distinct files (paths, in order of first appearance) are permuted with
    ``numpy.random.RandomState(seed or 0)`` (Keras shuffles its file list with
    the same generator; a seed from 2**32 up, which Keras refuses, seeds it
    with its two 32-bit words: ``config.numpy_random_state``) and the last ``int(n_files * validation_split)``
    files form the validation subset, so the same seed gives Keras' split
    and the same split in separate calls. Every row of a file goes to that
    file's side: a manifest that lists a file several times (oversampling)
    delivers all its rows within one subset, never on both sides. Without
    repeated paths, files are rows and the split is Keras' row for row. Each
    subset keeps index order (shuffling happens per epoch).
    """
    n = len(index)
    first = {}
    for p in index.paths:
        first.setdefault(p, len(first))
    n_files = len(first)  # == n without repeated paths: then files are rows (Keras')
    files = config.numpy_random_state(0 if seed is None else seed).permutation(n_files)
    in_val = np.zeros(n_files, bool)
    in_val[files[n_files - int(n_files * validation_split):]] = True
    row_val = in_val[np.fromiter((first[p] for p in index.paths), np.int64, n)]
    return index.subset(np.flatnonzero(~row_val)), index.subset(np.flatnonzero(row_val))
