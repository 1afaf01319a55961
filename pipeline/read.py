"""Read: bytes, listings and sizes of local files and remote URIs, for every stage.

One layer over the file systems: local paths go through ``os`` (a directory
walk with ``os.scandir``), URIs through ``tf.io.gfile``. ``gs://`` is built
into TensorFlow; ``s3://``, ``hdfs://``, ``az://`` and ``http(s)://`` are
registered by tensorflow-io, which is imported lazily, only when such a URI
is met, and only where its ops load (see ``pipeline.stack``).

S3 configuration is read from the environment by tensorflow-io:
``S3_ENDPOINT`` with its scheme (e.g. ``http://127.0.0.1:9000``; without the
scheme, S3 calls fail with ``NotFoundError``), ``AWS_REGION``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``S3_USE_HTTPS`` and
``S3_VERIFY_SSL``. ``tf.io.gfile`` lists ``s3://`` folders unsorted: listings
here are sorted, so that order and labels are stable.
"""

from __future__ import annotations

import errno
import os
import posixpath
import sys
from typing import Iterator, List, Optional, Tuple

import tensorflow as tf
from absl import logging

from pipeline import formats
from pipeline import stack

TFIO_SCHEMES = ("s3", "hdfs", "viewfs", "az", "http", "https")


class FeatureUnavailableError(ImportError):
    """A file or URI needs a decoder or file system this installation lacks.

    The message names the feature, the file, why it is unavailable, and the
    stack that provides it.
    """


def is_remote(path: str) -> bool:
    """True for a URI (``scheme://...``), False for a local path."""
    return "://" in path


def scheme(uri: str) -> str:
    """The URI's scheme, lowercase ("" for a local path)."""
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


def join(folder: str, name: str) -> str:
    """``folder/name`` with ``/`` for URIs and ``os.sep`` for local paths."""
    return posixpath.join(folder, name) if is_remote(folder) else os.path.join(folder, name)


def dirname(path: str) -> str:
    return posixpath.dirname(path) if is_remote(path) else os.path.dirname(path)


def ensure_filesystem(uri: str) -> None:
    """Makes ``uri``'s file system available (imports tensorflow-io for s3, hdfs, az, http).

    Raises:
        FeatureUnavailableError: the scheme needs tensorflow-io and its ops do
            not load with this TensorFlow (the message names the URI and the fix).
    """
    if scheme(uri) in TFIO_SCHEMES:
        status = stack.tfio_status()
        if not status.available:
            raise FeatureUnavailableError(
                stack.needs_tfio_message(f"{scheme(uri)}:// paths", uri))


def hint(error: Exception, uri: str) -> str:
    """``error``'s message plus a hint for the usual ``s3://`` misconfigurations.

    Without tensorflow-io imported, TensorFlow answers ``s3://`` paths with
    ``NotFoundError``; so it does when ``S3_ENDPOINT`` lacks its scheme.
    """
    msg = str(error)
    if scheme(uri) != "s3":
        return msg
    if "tensorflow_io" not in sys.modules:
        msg += (" (hint: s3:// needs tensorflow-io imported (`import tensorflow_io`); "
                "without it TensorFlow answers s3:// paths with NotFoundError)")
    endpoint = os.environ.get("S3_ENDPOINT", "")
    if endpoint and "://" not in endpoint:
        msg += (f" (hint: S3_ENDPOINT={endpoint!r} has no scheme; use e.g. "
                f"'http://{endpoint}' with S3_USE_HTTPS=0)")
    return msg


def is_hidden(name: str) -> bool:
    """Hidden files and folders, and macOS archive debris (``__MACOSX``)."""
    return name.startswith(".") or name.startswith("__MACOSX")


def isdir(path: str) -> bool:
    if is_remote(path):
        ensure_filesystem(path)
        return tf.io.gfile.isdir(path)
    return os.path.isdir(path)


def exists(path: str) -> bool:
    if is_remote(path):
        ensure_filesystem(path)
        return tf.io.gfile.exists(path)
    return os.path.exists(path)


def listdir(folder: str) -> List[Tuple[str, bool]]:
    """Sorted ``(name, is_folder)`` entries of ``folder`` (links to folders count as folders).

    Raises:
        FileNotFoundError: the folder does not exist or cannot be listed
            (with the s3 hints for URIs).
        OSError: a local folder cannot be listed (the subclass of its errno,
            e.g. ``PermissionError``; the folder is named).
    """
    if is_remote(folder):
        ensure_filesystem(folder)
        try:
            names = tf.io.gfile.listdir(folder)
        except tf.errors.NotFoundError as e:
            raise FileNotFoundError(f"`directory` does not exist or cannot be listed: "
                                    f"{folder!r}: {hint(e, folder)}") from None
        out = {}
        for n in names:
            # One listing call per folder: a name with an image extension is a
            # file, so only other names (rare) cost a round trip to ask.
            is_dir = n.endswith("/") or (not n.lower().endswith(formats.IMAGE_EXTENSIONS)
                                         and tf.io.gfile.isdir(posixpath.join(folder, n)))
            out[n.rstrip("/")] = out.get(n.rstrip("/"), False) or is_dir
        return sorted(out.items())
    try:
        with os.scandir(folder) as it:
            return sorted((e.name, e.is_dir(follow_symlinks=True)) for e in it)
    except OSError as e:
        raise OSError(e.errno, f"pipeline: cannot list folder {folder!r} "
                               f"({e.strerror or e})") from None


UNLISTABLE = "unlistable"
LINK_TO_FOLDER = "link to folder"


def walk(folder: str, follow_links: bool = False, top: Optional[str] = None
         ) -> Iterator[Tuple[str, Optional[str], str]]:
    """Yields ``(path, ignored_reason or None, problem)`` for the files under ``folder``, sorted.

    ``problem`` is "" or why a symbolic link cannot be followed (dangling,
    loop): only links are checked, one ``stat`` each.

    Two more kinds of entries are yielded for local folders, never silently
    dropped: a folder that cannot be listed (``folder`` itself or any
    sub-folder: ``os.scandir`` raised) as ``(folder, "unlistable", "cannot
    list folder (<reason>)")``, and, with ``follow_links=False``, a symbolic
    link to a folder as ``(link, "link to folder", "")``.

    Local folders: one ``os.scandir`` per folder, no per-file ``stat`` (the
    entry types come with the listing). Linked folders are followed only with
    ``follow_links``; a linked folder that leads back to one of its own
    ancestors (or to ``top``) is a loop, skipped and logged. Remote folders:
    one ``tf.io.gfile.listdir`` per folder. Hidden entries are yielded with
    the reason "hidden".
    """
    if is_remote(folder):
        ensure_filesystem(folder)
        for name, is_dir in listdir(folder):
            child = posixpath.join(folder.rstrip("/"), name)
            if is_hidden(name):
                yield child, "hidden", ""
            elif is_dir:
                yield from walk(child)
            else:
                yield child, None, ""
        return

    def local(d, ancestors):
        real = os.path.realpath(d)
        if real in ancestors:
            logging.warning("pipeline: skipping %s: symbolic-link loop back to %s", d, real)
            return
        ancestors = ancestors | {real}
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            yield d, UNLISTABLE, f"cannot list folder ({e.strerror or e})"
            return
        for e in entries:
            if is_hidden(e.name):
                yield e.path, "hidden", ""
                continue
            try:
                is_dir = e.is_dir(follow_symlinks=follow_links)
            except OSError:
                is_dir = False
            if not is_dir and not follow_links and e.is_symlink() and os.path.isdir(e.path):
                yield e.path, LINK_TO_FOLDER, ""
            elif is_dir:
                yield from local(e.path, ancestors)
            else:
                yield e.path, None, link_problem(e.path) if e.is_symlink() else ""

    yield from local(folder, frozenset([os.path.realpath(top)]) if top else frozenset())


def link_problem(path: str) -> str:
    """"" or why a local path that is a symbolic link cannot be read (dangling, loop).

    Callers use it for the entries a listing marked as links.
    """
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "symbolic-link loop"
        if os.path.islink(path):
            return "dangling symbolic link"
        return f"unreadable file ({e.strerror or e})"
    return ""


def read_bytes(path: str) -> bytes:
    """The whole file.

    Raises:
        OSError: the file cannot be read (``tf.errors.OpError`` for URIs).
    """
    if is_remote(path):
        ensure_filesystem(path)
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


class RangeReader:
    """``reader(offset, size) -> bytes``: reads of one file at any offset, the file
    opened on the first read and kept open until ``close()`` (or the ``with``
    block's end). A file that cannot be read gives ``b""`` (never raises); so
    does a read past its end (fewer bytes near it)."""

    def __init__(self, path: str):
        self.path = path
        self._file = None
        self.failed = False  # True once a read failed (the file cannot be read)

    def __call__(self, offset: int, size: int) -> bytes:
        if self.failed:
            return b""
        try:
            if self._file is None:
                if is_remote(self.path):
                    ensure_filesystem(self.path)
                    self._file = tf.io.gfile.GFile(self.path, "rb")
                else:
                    self._file = open(self.path, "rb")  # pylint: disable=consider-using-with
            self._file.seek(offset)
            return self._file.read(size)
        except (OSError, tf.errors.OpError, FeatureUnavailableError):
            self.failed = True
            return b""

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except (OSError, tf.errors.OpError):
                pass
            self._file = None

    def __enter__(self) -> "RangeReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_text(path: str) -> str:
    """A text file (UTF-8, a leading BOM dropped)."""
    data = read_bytes(path)
    return data.decode("utf-8-sig")


def file_size(path: str) -> int:
    """Size in bytes; -1 when it cannot be read."""
    try:
        if is_remote(path):
            ensure_filesystem(path)
            return int(tf.io.gfile.stat(path).length)
        return os.path.getsize(path)
    except (OSError, tf.errors.OpError):
        return -1


def try_read(path: str) -> Tuple[bytes, str]:
    """(bytes, "") or (b"", reason) when the file cannot be read; never raises."""
    try:
        return read_bytes(path), ""
    except FeatureUnavailableError as e:
        return b"", str(e)
    except (OSError, tf.errors.OpError) as e:
        if isinstance(e, OSError) and e.errno == errno.ELOOP:
            return b"", "symbolic-link loop"
        if not is_remote(path) and os.path.islink(path) and not os.path.exists(path):
            return b"", "dangling symbolic link"
        msg = getattr(e, "strerror", None) or getattr(e, "message", None) or str(e)
        return b"", f"unreadable file ({msg})"
