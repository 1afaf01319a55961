"""Index: folders / path lists -> plain data (paths, labels, class names).

Works on strings and file headers only, never pixels. The result is an
``Index`` that can be inspected, saved and tested without TensorFlow graphs.

Every local file's first bytes are read once here (in a thread pool), so that
zero-byte, unreadable and non-image files are caught at index time and the
format of each file is known before the graph is built (tensorflow-io is then
imported only when some file needs it).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import errno
import os
from typing import List, Optional, Sequence

from absl import logging

from pipeline import config

# File extensions counted as images when listing folders (matched lowercase).
IMAGE_EXTENSIONS = (
    ".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif", ".bmp", ".dib", ".webp",
    ".tif", ".tiff", ".avif", ".jp2", ".j2k", ".pnm", ".ppm", ".pgm", ".pbm",
    ".exr", ".hdr",
)
SNIFF_BYTES = 4096
# Formats decoded by TensorFlow core; everything else needs tensorflow-io.
TF_FORMATS = ("jpeg", "png", "gif", "bmp")
TFIO_FORMATS = ("webp", "tiff")
EXT_FORMAT = {
    ".jpg": "jpeg", ".jpeg": "jpeg", ".jpe": "jpeg", ".jfif": "jpeg",
    ".png": "png", ".gif": "gif", ".bmp": "bmp", ".dib": "bmp", ".webp": "webp",
    ".tif": "tiff", ".tiff": "tiff",
}


def sniff_format(head: bytes) -> Optional[str]:
    """Returns the image format named by a file's first bytes, or None.

    Recognises JPEG (FF D8 FF), PNG, GIF87a/89a, BMP ("BM"), WebP (RIFF....WEBP)
    and TIFF (II*\\0 / MM\\0*), the formats ``pipeline`` decodes.
    """
    if head[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:2] == b"BM":
        return "bmp"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    return None


def describe_start(head: bytes) -> str:
    return f"not an image (starts with {bytes(head[:8])!r})"


@dataclasses.dataclass
class FileInfo:
    """What index time learned of one file from its first bytes."""
    path: str
    size: int = -1                 # bytes; -1 when unknown (remote, unread)
    format: Optional[str] = None   # sniffed from content; None when unknown
    error: str = ""                # reason the file is bad, "" when fine so far
    has_exif: bool = False         # a JPEG with an EXIF APP1 segment up front
    orientation: Optional[int] = None  # its EXIF orientation tag (1-8); None = not read

    @property
    def exif_code(self) -> int:
        """What the decoder does about orientation: 0 nothing, 2-8 apply that
        EXIF tag (read here), -1 read the tag in graph (tensorflow-io)."""
        if is_remote(self.path) or (self.has_exif and self.orientation is None):
            return -1
        return self.orientation if self.has_exif and self.orientation > 1 else 0

    @property
    def ext_mismatch(self) -> bool:
        ext = os.path.splitext(self.path)[1].lower()
        want = EXT_FORMAT.get(ext)
        return bool(self.format and want and want != self.format)


def is_remote(path: str) -> bool:
    return "://" in path


def sniff_file(path: str) -> FileInfo:
    """Reads a file's first bytes and classifies it; never raises."""
    info = FileInfo(path)
    if is_remote(path):
        return info
    try:
        info.size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as e:
        if e.errno == errno.ELOOP:
            info.error = "symbolic-link loop"
        elif os.path.islink(path) and not os.path.exists(path):
            info.error = "dangling symbolic link"
        else:
            info.error = f"unreadable file ({e.strerror or e})"
        return info
    if info.size == 0:
        info.error = "empty file (0 bytes)"
        return info
    info.format = sniff_format(head)
    if info.format is None:
        info.error = describe_start(head)
    elif info.format == "jpeg":
        info.has_exif = b"Exif\x00\x00" in head
        if info.has_exif:
            info.orientation = read_orientation(path)
    elif info.format == "tiff":
        info.error = tiff_truncation(path, info.size)
    return info


def tiff_truncation(path: str, size: int) -> str:
    """"" or why a TIFF is cut short: its image data (strip or tile offsets +
    byte counts, read with Pillow from the first IFD) runs past the file's end.

    libtiff (through tensorflow-io) decodes such a file without an error,
    filling the missing part, so it is refused here, at index time.
    """
    import warnings  # pylint: disable=import-outside-toplevel
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
    if end > size:
        return (f"truncated TIFF (image data runs to byte {end}, the file has {size})")
    return ""


def read_orientation(path: str) -> Optional[int]:
    """A JPEG's EXIF orientation tag (0x0112), 1-8; 1 when absent or invalid.

    Read with Pillow, which parses the headers only (no pixels). None when
    Pillow cannot read them; the tag is then read in graph by tensorflow-io.
    """
    try:
        from PIL import Image  # pylint: disable=import-outside-toplevel
        with Image.open(path) as im:
            tag = im.getexif().get(0x0112)
    except Exception:  # noqa: BLE001 - a broken header is left to the decoder
        return None
    return tag if isinstance(tag, int) and 1 <= tag <= 8 else 1


def sniff_files(paths: Sequence[str], workers: Optional[int] = None) -> List[FileInfo]:
    """``sniff_file`` for many paths in a thread pool (order kept)."""
    if not paths:
        return []
    workers = workers or min(32, 4 * config.cpu_count())
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(sniff_file, paths, chunksize=64))


@dataclasses.dataclass
class Index:
    """Paths, labels and class names of a dataset, plus what sniffing found.

    Attributes:
        paths: list of str, file paths or URIs, in index order.
        labels: list of int class indices (or None for unlabelled data).
        class_names: list of str or None.
        infos: one ``FileInfo`` per path.
        weights: list of float sample weights, or None (manifests only).
    """
    paths: List[str]
    labels: Optional[list]
    class_names: Optional[List[str]]
    infos: List[FileInfo]
    weights: Optional[List[float]] = None

    def __len__(self):
        return len(self.paths)

    def subset(self, rows: Sequence[int]) -> "Index":
        return Index(
            [self.paths[i] for i in rows],
            None if self.labels is None else [self.labels[i] for i in rows],
            self.class_names,
            [self.infos[i] for i in rows],
            None if self.weights is None else [self.weights[i] for i in rows])

    @property
    def formats(self) -> collections.Counter:
        return collections.Counter(i.format for i in self.infos)

    @property
    def bad(self) -> List[FileInfo]:
        return [i for i in self.infos if i.error]


def _is_hidden(name: str) -> bool:
    return name.startswith(".") or name.startswith("__MACOSX")


def _walk_files(folder: str, follow_links: bool, top: Optional[str] = None):
    """Yields (path, ignored_reason or None) under folder, sorted.

    With ``follow_links``, a linked folder that leads back to one of its own
    ancestors (or to ``top``, the dataset root) is a loop: it is skipped and
    logged, so the walk always ends and no file is listed twice through it.
    """
    def walk(d, ancestors):
        try:
            real = os.path.realpath(d)
        except OSError:
            return
        if real in ancestors:
            logging.warning("pipeline: skipping %s: symbolic-link loop back to %s", d, real)
            return
        ancestors = ancestors | {real}
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as e:
            logging.warning("pipeline: cannot list folder %s: %s", d, e)
            return
        for e in entries:
            if _is_hidden(e.name):
                yield e.path, "hidden"
                continue
            try:
                is_dir = e.is_dir(follow_symlinks=follow_links)
            except OSError:
                is_dir = False
            if is_dir:
                yield from walk(e.path, ancestors)
            else:
                yield e.path, None

    yield from walk(folder, frozenset([os.path.realpath(top)]) if top else frozenset())


def list_images(folder: str, follow_links: bool = False, top: Optional[str] = None):
    """Image files under ``folder`` (recursively), sorted; logs what it ignores.

    Hidden files and folders (names starting with '.') and files whose extension
    is not an image extension (case-insensitive) are ignored, counted and logged
    once. Dangling symbolic links with an image extension are kept, so that they
    are reported as bad files rather than silently dropped.

    Returns:
        list of str paths.
    """
    out, ignored = [], collections.Counter()
    for path, why in _walk_files(folder, follow_links, top):
        if why:
            ignored[why] += 1
        elif os.path.splitext(path)[1].lower() in IMAGE_EXTENSIONS:
            out.append(path)
        else:
            ignored["not an image extension"] += 1
    if ignored:
        logging.info("pipeline: ignored %d file(s) under %s: %s", sum(ignored.values()),
                     folder, dict(ignored))
    return out


def index_directory(directory: str, labels="inferred", class_names=None,
                    follow_links: bool = False, sniff: bool = True) -> Index:
    """Lists ``directory`` into an ``Index``, as Keras' image_dataset_from_directory.

    With ``labels="inferred"``, each sub-folder is a class; class names are the
    sorted sub-folder names (or ``class_names``, which fixes order and subset).
    Files are ordered by class, then by path. With a sequence of labels, they are
    given in the sorted order of all image files under ``directory``.

    Raises:
        FileNotFoundError: ``directory`` does not exist (the path is named).
        ValueError: no class folders, an unknown class name, or no images.
    """
    directory = os.fspath(directory)
    if is_remote(directory):
        from pipeline import remote  # lazily: imports tensorflow_io
        return remote.index_directory(directory, labels, class_names)
    if not os.path.isdir(directory):
        if os.path.exists(directory):
            raise ValueError(f"`directory` is not a folder. Received: directory={directory!r}")
        raise FileNotFoundError(f"`directory` does not exist: {directory!r}")
    class_names = config.check_class_names(class_names)
    paths: List[str] = []
    label_list: Optional[list] = None
    if isinstance(labels, str) and labels == "inferred":
        subdirs = sorted(
            e.name for e in os.scandir(directory)
            if not _is_hidden(e.name) and e.is_dir(follow_symlinks=True))
        if not subdirs:
            raise ValueError(
                "`labels='inferred'` needs class sub-folders, but the directory has "
                f"none. Received: directory={directory!r}")
        if class_names is not None:
            missing = [c for c in class_names if c not in subdirs]
            if missing:
                raise ValueError(
                    f"`class_names` names folder(s) that do not exist in {directory!r}: "
                    f"{missing}. Existing class folders: {subdirs[:20]}"
                    f"{'...' if len(subdirs) > 20 else ''}. Received: class_names={class_names!r}")
        else:
            class_names = subdirs
        label_list = []
        empty = []
        for k, name in enumerate(class_names):
            files = list_images(os.path.join(directory, name), follow_links, directory)
            if not files:
                empty.append(name)
            paths.extend(files)
            label_list.extend([k] * len(files))
        if empty:
            logging.warning("pipeline: class folder(s) with no images: %s", empty)
    else:
        paths = list_images(directory, follow_links)
        if labels is not None:
            label_list = list(labels)
            if len(label_list) != len(paths):
                raise ValueError(
                    f"`labels` has {len(label_list)} entries but {directory!r} has "
                    f"{len(paths)} image files (sorted order). Received: labels=<{len(label_list)} items>")
            label_list = _check_int_labels(label_list, class_names)
    if not paths:
        raise ValueError(f"No image files found in `directory`. Received: directory={directory!r}")
    infos = sniff_files(paths) if sniff else [FileInfo(p) for p in paths]
    return Index(paths, label_list, class_names, infos)


def _check_int_labels(labels, class_names):
    """Class indices as Python ints, each in [0, len(class_names)) (or >= 0).

    Raises:
        ValueError: a label that is not an integer (or a str class name where
            the first label is one), or out of range; its position is named.
    """
    import numbers  # pylint: disable=import-outside-toplevel
    out = []
    for i, l in enumerate(labels):
        if isinstance(l, bool) or not isinstance(l, numbers.Integral):
            raise ValueError(
                "`labels` must be all int class indices or all str class names (one class "
                "per path; multi-label and float targets come from from_manifest). "
                f"Received: labels[{i}]={l!r}")
        if l < 0 or (class_names is not None and l >= len(class_names)):
            bound = f"< len(class_names)={len(class_names)}" if class_names is not None else ""
            raise ValueError(f"`labels` must be class indices >= 0 {bound}. "
                             f"Received: labels[{i}]={l!r}")
        out.append(int(l))
    return out


def index_paths(paths, labels=None, class_names=None, sniff: bool = True) -> Index:
    """Turns a list of paths (and optional labels) into an ``Index``.

    ``labels`` may be ints (class indices), strings (class names: the sorted
    unique strings, or ``class_names``, give the index), or None.

    Raises:
        ValueError: empty ``paths``, ``labels`` of another length, or a string
            label not in ``class_names``.
    """
    if hasattr(paths, "numpy"):
        paths = [p.decode() if isinstance(p, bytes) else str(p) for p in paths.numpy().tolist()]
    if isinstance(paths, (str, bytes, os.PathLike)):
        raise ValueError(
            "`paths` must be a list of file paths, not a single path; use "
            f"from_directory for a folder. Received: paths={paths!r}")
    paths = [os.fspath(p) if not isinstance(p, bytes) else p.decode() for p in paths]
    if not paths:
        raise ValueError("`paths` is empty. Received: paths=[]")
    class_names = config.check_class_names(class_names)
    label_list = None
    if labels is not None:
        if hasattr(labels, "numpy"):
            labels = labels.numpy().tolist()
        label_list = list(labels)
        if len(label_list) != len(paths):
            raise ValueError(
                f"`labels` must have one entry per path: {len(paths)} paths, "
                f"{len(label_list)} labels. Received: labels=<{len(label_list)} items>")
        if label_list and isinstance(label_list[0], (str, bytes)):
            strs = [l.decode() if isinstance(l, bytes) else l for l in label_list]
            if class_names is None:
                class_names = sorted(set(strs))
            lookup = {c: k for k, c in enumerate(class_names)}
            unknown = sorted(set(strs) - set(lookup))
            if unknown:
                raise ValueError(
                    f"`labels` has class(es) not in `class_names`: {unknown[:10]}. "
                    f"Received: class_names={class_names!r}")
            label_list = [lookup[s] for s in strs]
        else:
            label_list = _check_int_labels(label_list, class_names)
    infos = sniff_files(paths) if sniff else [FileInfo(p) for p in paths]
    return Index(paths, label_list, class_names, infos)


def split(index: Index, validation_split: float, seed: Optional[int]):
    """Splits an Index into (training, validation), disjoint and complete.

    Rows are permuted with ``numpy.random.RandomState(seed or 0)`` and the last
    ``round(n * validation_split)`` rows form the validation subset, so the same
    seed gives the same split in separate calls.
    """
    import numpy as np

    n = len(index)
    n_val = int(round(n * validation_split))
    rows = np.random.RandomState(0 if seed is None else seed).permutation(n)
    train_rows = sorted(rows[: n - n_val].tolist())
    val_rows = sorted(rows[n - n_val:].tolist())
    return index.subset(train_rows), index.subset(val_rows)
