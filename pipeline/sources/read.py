"""Read: bytes, listings and sizes of local files and remote URIs, for every stage.

One layer over the file systems: local paths go through ``os`` (a directory
walk with ``os.scandir``), URIs through ``tf.io.gfile`` or fsspec.

Which reader a URI gets (:func:`reader`): ``gs://`` is built into
TensorFlow. ``s3://``, ``hdfs://``, ``az://`` and ``http(s)://`` go through
tensorflow-io where its ops load (TensorFlow 2.16; imported lazily, only when
such a URI is met), and otherwise through fsspec (``s3fs`` for ``s3://``,
installed by the ``s3`` extra; ``gcsfs``, ``adlfs``, ``aiohttp`` bring their
schemes the same way). ``PIPELINE_REMOTE_READER`` (``auto``, the default,
``tensorflow-io`` or ``fsspec``) overrides the choice. With fsspec, files are
read outside the graph, many at once (:func:`fetch_many`: ``fs.cat`` on a
list of paths, which s3fs fetches concurrently), and a folder is listed with
one paginated ``fs.find``.

tensorflow-io reads its S3 configuration from the environment:
``S3_ENDPOINT`` with its scheme (e.g. ``http://127.0.0.1:9000``; without the
scheme, S3 calls fail with ``NotFoundError``), ``AWS_REGION``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``S3_USE_HTTPS`` and
``S3_VERIFY_SSL``. s3fs reads botocore's places (``AWS_*`` variables,
``~/.aws/config`` and ``credentials``, ``AWS_ENDPOINT_URL``), fsspec's
``FSSPEC_S3_*`` variables, and here also ``S3_ENDPOINT`` when no
``AWS_ENDPOINT_URL`` is set. Listings are sorted (``tf.io.gfile`` lists
``s3://`` folders unsorted), so that order and labels are stable.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import functools
import hashlib
import threading
import unicodedata
import os
import posixpath
import sys
from typing import Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

from pipeline.decode import formats
from pipeline import stack

TFIO_SCHEMES = ("s3", "hdfs", "viewfs", "az", "http", "https")
READER_ENV = "PIPELINE_REMOTE_READER"
READERS = ("auto", "tensorflow-io", "fsspec")
# The remote-read stage (pipeline.assemble): files per fs.cat call, calls in flight.
FETCH_BATCH = 32
FETCH_PARALLEL = 4
FETCH_OP_NAME = "pipeline_remote_read"


class FeatureUnavailableError(ImportError):
    """A file or URI needs a decoder or file system this installation lacks.

    The message names the feature, the file, why it is unavailable, and the
    stack that provides it.
    """


def path_bytes(paths: Sequence[str]) -> List[bytes]:
    """Paths as the bytes the file system holds: a name that is not valid UTF-8
    (listed by Python as str with surrogate escapes, ``os.fsdecode``) gets its own
    bytes back, so TensorFlow opens the real file. For ``tf.constant``, which
    refuses such str."""
    return [p if isinstance(p, bytes) else p.encode("utf-8", "surrogateescape")
            for p in paths]


def shown(text: str) -> str:
    """``text`` (a path, or a message holding paths) printable and valid UTF-8: the
    bytes of a name that is not UTF-8 escaped as ``\\xe9`` (``caf\\xe9.jpg``); any
    other text unchanged."""
    if isinstance(text, bytes):
        return text.decode("utf-8", "backslashreplace")
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


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


def _choice() -> str:
    value = os.environ.get(READER_ENV, "auto").strip().lower() or "auto"
    if value not in READERS:
        raise ValueError(f"{READER_ENV} must be one of {', '.join(READERS)}. "
                         f"Received: {READER_ENV}={value!r}")
    return value


def reader(uri: str) -> str:
    """Which reader serves ``uri``: "local", "tensorflow" (TensorFlow's file systems,
    tensorflow-io's among them) or "fsspec".

    Rule: local paths are "local"; schemes TensorFlow serves itself (``gs://``)
    are "tensorflow"; tensorflow-io's schemes (``s3``, ``hdfs``, ``az``,
    ``http(s)``) are "tensorflow" where its ops load, else "fsspec" where
    fsspec has that scheme, unless ``PIPELINE_REMOTE_READER`` says otherwise.

    Raises:
        FeatureUnavailableError: no reader here serves the scheme (the message
            names the URI and both fixes).
        ValueError: ``PIPELINE_REMOTE_READER`` is not one of ``READERS``.
    """
    s = scheme(uri)
    if not s:
        return "local"
    if s not in TFIO_SCHEMES:
        return "tensorflow"
    choice = _choice()
    if choice != "fsspec" and stack.tfio_status().available:
        return "tensorflow"
    problem = stack.fsspec_problem(s)
    if choice != "tensorflow-io" and not problem:
        return "fsspec"
    tfio = stack.needs_tfio_message(f"{s}:// paths", uri)
    if choice == "tensorflow-io":
        raise FeatureUnavailableError(f"{tfio} ({READER_ENV}=tensorflow-io)")
    raise FeatureUnavailableError(f"{tfio[:-1]}; or read them through fsspec: {problem}.")


def ensure_filesystem(uri: str, in_graph: bool = False) -> None:
    """Makes ``uri``'s file system available (imports tensorflow-io for s3, hdfs, az, http
    where its ops load; otherwise checks that fsspec serves the scheme).

    Args:
        uri: a path or URI.
        in_graph: the caller reads it with TensorFlow ops (``TFRecordDataset``,
            ``TFRecordWriter``), which fsspec cannot serve.

    Raises:
        FeatureUnavailableError: no reader serves the scheme here, or only fsspec
            does and ``in_graph`` (the message names the URI and the fix).
    """
    if reader(uri) == "fsspec" and in_graph:
        raise FeatureUnavailableError(
            f"pipeline: {uri} is read here through fsspec, from Python, and this stage "
            f"reads with TensorFlow ops (TFRecord shards), which need TensorFlow's own "
            f"{scheme(uri)}:// file system: tensorflow-io's ops, which load only with "
            f"TensorFlow 2.16 ({stack.TFIO_STACK_HINT}); or copy the shards to a local "
            f"disk or gs://.")


@functools.lru_cache(maxsize=None)
def filesystem(protocol: str):
    """The fsspec file system for ``protocol`` (one instance per process).

    Its options come from fsspec's config (``FSSPEC_S3_*`` variables) and the
    library's own places, with no listings cache (each listing is fresh); for ``s3``, ``S3_ENDPOINT`` (tensorflow-io's variable)
    is the endpoint when botocore's ``AWS_ENDPOINT_URL(_S3)`` is unset.
    """
    import fsspec  # pylint: disable=import-outside-toplevel
    # No listings cache: a factory called again lists the bucket again (new objects seen).
    options = {"use_listings_cache": False}
    if protocol in ("s3", "s3a") and os.environ.get("S3_ENDPOINT") and not (
            os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3")):
        options["endpoint_url"] = os.environ["S3_ENDPOINT"]
    return fsspec.filesystem(protocol, **options)


def _fs(uri: str):
    return filesystem(scheme(uri))


def _unreadable(error: BaseException) -> str:
    """The reason text of a file fsspec could not read."""
    if isinstance(error, FileNotFoundError):
        return "unreadable file (file not found)"
    if isinstance(error, PermissionError):
        return f"unreadable file (permission denied: {error})"
    return f"unreadable file ({type(error).__name__}: {error})"


def fetch_many(paths: Sequence[str]) -> Tuple[List[bytes], List[str]]:
    """The bytes of many files, fetched concurrently: ``(contents, reasons)``.

    fsspec paths go to one ``fs.cat_ranges(paths, ..., on_error="return")`` per
    scheme (``fs.cat``'s concurrent fetch without its glob expansion of names:
    s3fs issues the GETs at once on its event loop; the calling thread waits
    without the GIL); other paths are read one by one. ``reasons[i]`` is ""
    or why file ``i`` cannot be read (its ``contents[i]`` is then ``b""``).
    Never raises for a file.
    """
    contents: List[bytes] = [b""] * len(paths)
    reasons: List[str] = [""] * len(paths)
    groups = {}
    for i, p in enumerate(paths):
        try:
            kind = reader(p)
        except FeatureUnavailableError as e:
            reasons[i] = str(e)
            continue
        if kind == "fsspec":
            groups.setdefault(scheme(p), []).append(i)
        else:
            contents[i], reasons[i] = try_read(p)
    for protocol, rows in groups.items():
        wanted = [paths[i] for i in rows]
        try:  # cat_ranges: fs.cat's concurrent fetch without its glob expansion of names
            got = filesystem(protocol).cat_ranges(wanted, [None] * len(wanted),
                                                  [None] * len(wanted), on_error="return")
        except Exception as e:  # pylint: disable=broad-except  (the whole call failed)
            got = [e] * len(wanted)
        for i, value in zip(rows, got):
            if isinstance(value, (bytes, bytearray)):
                contents[i] = bytes(value)
            else:
                reasons[i] = _unreadable(value if isinstance(value, BaseException)
                                         else FileNotFoundError(paths[i]))
    return contents, reasons


def fetch_tensors(names, todo):
    """In graph: ``(contents, reasons)`` of the files ``names`` (str, 1-D) where ``todo``
    (bool, same shape): one ``tf.py_function`` (named ``FETCH_OP_NAME``) calling
    :func:`fetch_many`. Elements not ``todo`` get ``b""`` and ``""``."""
    def run(names_t, todo_t):
        flags_ = todo_t.numpy()
        wanted = [n.decode("utf-8") for n, t in zip(names_t.numpy(), flags_) if t]
        got, why = fetch_many(wanted)
        data, reasons, j = [], [], 0
        for t in flags_:
            data.append(got[j] if t else b"")
            reasons.append(why[j] if t else "")
            j += int(bool(t))
        return (tf.constant(data, tf.string, shape=[len(data)]),
                tf.constant(reasons, tf.string, shape=[len(reasons)]))

    data, why = tf.py_function(run, [names, todo], [tf.string, tf.string], name=FETCH_OP_NAME)
    data.set_shape(names.shape)
    why.set_shape(names.shape)
    return data, why


def fetch_stage(ds, name_of):
    """Fills the ``contents`` of plan elements from remote files, many at a time.

    ``ds``: elements ``(pos, window, key, label, pre_error, contents, weight, seed)``
    (``pipeline.decode.guard.chunked``). Batches of ``FETCH_BATCH`` keys go to one
    :func:`fetch_tensors` call, ``FETCH_PARALLEL`` batches in flight, order kept.
    A file that cannot be read gets its reason as ``pre_error``, so the guard
    raises or skips it by name. The decode stays in graph. ``name_of``: key
    tensor -> path tensor.
    """
    def fetch(pos, window, key, label, pre, contents, weight, seed):
        del contents
        todo = tf.strings.length(pre) == 0
        data, why = fetch_tensors(name_of(key), todo)
        return pos, window, key, label, tf.where(todo, why, pre), data, weight, seed

    return ds.batch(FETCH_BATCH).map(
        tf.autograph.experimental.do_not_convert(fetch), num_parallel_calls=FETCH_PARALLEL,
        deterministic=True).unbatch()


def needs_fetch(paths: Sequence[str]) -> List[str]:
    """One path per scheme among ``paths`` that fsspec serves here ([] when none):
    such files are fetched from Python (``fetch_stage``), not by ``tf.io.read_file``."""
    by_scheme = {scheme(p): p for p in paths if "://" in p}
    return [p for p in by_scheme.values() if reader(p) == "fsspec"]


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
        if reader(path) == "fsspec":
            return _fs(path).isdir(path)
        ensure_filesystem(path)
        return tf.io.gfile.isdir(path)
    return os.path.isdir(path)


def exists(path: str) -> bool:
    if is_remote(path):
        if reader(path) == "fsspec":
            return _fs(path).exists(path)
        ensure_filesystem(path)
        return tf.io.gfile.exists(path)
    return os.path.exists(path)


def same_folder(a: str, b: str) -> bool:
    """Whether two folder paths name one folder: the same file system entry where both
    are local (``os.path.samefile``), else the same URI once trailing slashes go."""
    if not (is_remote(a) or is_remote(b)):
        try:
            return os.path.samefile(a, b)
        except OSError:
            return False
    return a.rstrip("/") == b.rstrip("/")


def listdir(folder: str) -> List[Tuple[str, bool]]:
    """Sorted ``(name, is_folder)`` entries of ``folder`` (links to folders count as folders).

    Raises:
        FileNotFoundError: the folder does not exist or cannot be listed
            (with the s3 hints for URIs).
        OSError: a local folder cannot be listed (the subclass of its errno,
            e.g. ``PermissionError``; the folder is named).
    """
    if is_remote(folder) and reader(folder) == "fsspec":
        tree = getattr(_SCOPE, "tree", None)
        if tree and folder.rstrip("/") == tree["top"]:
            found = {}
            head = folder.rstrip("/").split("://", 1)[1]
            for p in _find(folder.rstrip("/")):
                first, _, rest = p[len(head) + 1:].partition("/")
                found[first] = found.get(first, False) or bool(rest)
            if found:
                return sorted(found.items())
        try:
            entries = _fs(folder).ls(folder, detail=True)
        except (OSError, ValueError) as e:
            raise FileNotFoundError(f"`directory` does not exist or cannot be listed: "
                                    f"{folder!r}: {e}") from None
        return sorted((posixpath.basename(e["name"].rstrip("/")), e["type"] == "directory")
                      for e in entries)
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
    one ``tf.io.gfile.listdir`` per folder, or with fsspec one paginated
    ``fs.find`` of the whole prefix. Hidden entries are yielded with the
    reason "hidden" (a hidden folder once, not its files).
    """
    if is_remote(folder) and reader(folder) == "fsspec":
        yield from _walk_fsspec(folder)
        return
    if is_remote(folder):
        ensure_filesystem(folder)
        # Iterative (a stack of listings), not recursive: trees deeper than
        # Python's recursion limit are walked too.
        stack = [iter(listdir(folder))]
        parents = [folder.rstrip("/")]
        while stack:
            entry = next(stack[-1], None)
            if entry is None:
                stack.pop()
                parents.pop()
                continue
            name, is_dir = entry
            child = posixpath.join(parents[-1], name)
            if is_hidden(name):
                yield child, "hidden", ""
            elif is_dir:
                stack.append(iter(listdir(child)))
                parents.append(child)
            else:
                yield child, None, ""
        return
    yield from _walk_local(folder, follow_links, top)


def _walk_local(folder: str, follow_links: bool, top: Optional[str]
                ) -> Iterator[Tuple[str, Optional[str], str]]:
    """``walk`` of a local folder: depth first, entries sorted by name, with an
    explicit stack of listings (no recursion: any depth). With ``follow_links``
    each folder's real path is kept (a link's resolved once, with
    ``os.path.realpath``; a plain sub-folder's is its parent's joined with its
    name), and a linked folder whose real path is an open ancestor's (or
    ``top``'s) is a loop."""
    stack: list = []        # per open folder: iterator over its sorted entries
    reals: list = []        # per open folder: its real path (follow_links only)
    open_reals: set = {os.path.realpath(top)} if (top and follow_links) else set()

    def enter(d, real):
        """Pushes folder ``d``'s listing; returns the entry to yield instead, or None."""
        if follow_links:
            if real in open_reals:
                logging.warning("pipeline: skipping %s: symbolic-link loop back to %s", d, real)
                return ()
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            return ((d, UNLISTABLE, f"cannot list folder ({e.strerror or e})"),)
        stack.append(iter(entries))
        reals.append(real)
        if follow_links:
            open_reals.add(real)
        return ()

    yield from enter(folder, os.path.realpath(folder) if follow_links else None)
    while stack:
        e = next(stack[-1], None)
        if e is None:
            stack.pop()
            done = reals.pop()
            if follow_links:
                open_reals.discard(done)
            continue
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
            real = None
            if follow_links:
                real = (os.path.realpath(e.path) if e.is_symlink()
                        else os.path.join(reals[-1], e.name))
            yield from enter(e.path, real)
        else:
            yield e.path, None, link_problem(e.path) if e.is_symlink() else ""


_SCOPE = threading.local()


@contextlib.contextmanager
def one_listing(folder: str):
    """Within it (in this thread), fsspec listings of ``folder`` and of anything under it
    come from one paginated ``fs.find`` of ``folder``, made on first use: a class-folder
    tree costs one listing, not one per class folder. Elsewhere it does nothing."""
    if not (is_remote(folder) and reader(folder) == "fsspec"):
        yield
        return
    prev = getattr(_SCOPE, "tree", None)
    _SCOPE.tree = {"top": folder.rstrip("/"), "files": None}
    try:
        yield
    finally:
        _SCOPE.tree = prev


def _find(top: str) -> List[str]:
    """fsspec: the files under ``top`` (paths without the scheme), sorted."""
    head = top.split("://", 1)[1].rstrip("/")
    tree = getattr(_SCOPE, "tree", None)
    if tree and (top == tree["top"] or top.startswith(tree["top"] + "/")):
        if tree["files"] is None:
            tree["files"] = sorted(_fs(tree["top"]).find(tree["top"], withdirs=False,
                                                         detail=False))
        files = tree["files"]
        # the names under head/: from head + "/" up to head + "0" ("0" follows "/")
        return files[bisect.bisect_left(files, head + "/"):bisect.bisect_left(files, head + "0")]
    return sorted(p for p in _fs(top).find(top, withdirs=False, detail=False)
                  if p.startswith(head + "/"))


def _walk_fsspec(folder: str) -> Iterator[Tuple[str, Optional[str], str]]:
    top = folder.rstrip("/")
    head = top.split("://", 1)[1]
    parts = sorted(tuple(p[len(head):].strip("/").split("/")) for p in _find(top))
    hidden_seen = set()
    for rel in parts:
        cut = next((k for k, name in enumerate(rel) if is_hidden(name)), None)
        if cut is None:
            yield posixpath.join(top, *rel), None, ""
        elif rel[:cut + 1] not in hidden_seen:
            hidden_seen.add(rel[:cut + 1])
            yield posixpath.join(top, *rel[:cut + 1]), "hidden", ""


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
        if reader(path) == "fsspec":
            return _fs(path).cat_file(path)
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
                if is_remote(self.path) and reader(self.path) == "fsspec":
                    self._file = _fs(self.path).open(self.path, "rb")
                elif is_remote(self.path):
                    ensure_filesystem(self.path)
                    self._file = tf.io.gfile.GFile(self.path, "rb")
                else:
                    self._file = open(self.path, "rb")  # pylint: disable=consider-using-with
            self._file.seek(offset)
            return self._file.read(size)
        except Exception:  # pylint: disable=broad-except  (OSError, OpError, fsspec's)
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
        if is_remote(path) and reader(path) == "fsspec":
            return int(_fs(path).size(path))
        if is_remote(path):
            ensure_filesystem(path)
            return int(tf.io.gfile.stat(path).length)
        return os.path.getsize(path)
    except Exception:  # pylint: disable=broad-except  (OSError, OpError, fsspec's)
        return -1


def on_disk_name(path: str, listings: Optional[dict] = None) -> str:
    """``path`` as the local file system spells it, when ``path`` names it in
    another Unicode normal form (a manifest typed in NFC, files made on macOS in
    NFD): each component from the first one missing is matched, in NFC, against
    its folder's listing (kept in ``listings``, {folder: names}, across calls).
    ``path`` itself when it exists, is ASCII or a URI, or when no single entry
    matches (the missing file is then reported as usual)."""
    if path.isascii() or is_remote(path) or os.path.lexists(path):
        return path
    listings = {} if listings is None else listings
    head, tail = path, []
    while head and not os.path.lexists(head):
        head, part = os.path.split(head)
        if not part:
            return path
        tail.append(part)
    for part in reversed(tail):
        if head not in listings:
            try:
                listings[head] = os.listdir(head or ".")
            except OSError:
                listings[head] = []
        want = unicodedata.normalize("NFC", part)
        found = [n for n in listings[head] if unicodedata.normalize("NFC", n) == want]
        if len(found) != 1:
            return path
        head = os.path.join(head, found[0])
    return head


def file_stamp(path: str) -> Tuple[int, int, int]:
    """What identifies a file's contents without reading them: ``(size in bytes,
    modification time in ns, change time in ns)``; -1 where unknown, all -1 when
    the file cannot be stat'ed.

    Local files: ``os.stat``'s ``st_size``, ``st_mtime_ns`` and ``st_ctime_ns`` (the
    change time moves with every write, even when a tool puts the modification
    time back, as ``touch -r`` or ``exiftool -P`` do). ``tf.io.gfile`` URIs: the
    length and ``mtime_nsec``. fsspec URIs: ``size`` and the store's modification
    time (``mtime``, ``LastModified``, or ``updated``), with a hash of its ``ETag``
    as the third value.
    """
    try:
        if is_remote(path) and reader(path) == "fsspec":
            info = _fs(path).info(path)
            when = next((info[k] for k in ("mtime", "LastModified", "updated", "last_modified")
                         if info.get(k) is not None), None)
            if hasattr(when, "timestamp"):
                when = when.timestamp()
            tag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
            return (int(info.get("size", -1)),
                    int(float(when) * 1e9) if isinstance(when, (int, float)) else -1,
                    int(hashlib.sha1(str(tag).encode()).hexdigest()[:15], 16) if tag else -1)
        if is_remote(path):
            ensure_filesystem(path)
            st = tf.io.gfile.stat(path)
            return int(st.length), int(st.mtime_nsec), -1
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns, st.st_ctime_ns
    except Exception:  # pylint: disable=broad-except  (OSError, OpError, fsspec's)
        return -1, -1, -1


def try_read(path: str) -> Tuple[bytes, str]:
    """(bytes, "") or (b"", reason) when the file cannot be read; never raises."""
    try:
        return read_bytes(path), ""
    except FeatureUnavailableError as e:
        return b"", str(e)
    except Exception as e:  # pylint: disable=broad-except
        if is_remote(path) and reader(path) == "fsspec":
            return b"", _unreadable(e)
        if not isinstance(e, (OSError, tf.errors.OpError)):
            raise
        if isinstance(e, OSError) and e.errno == errno.ELOOP:
            return b"", "symbolic-link loop"
        if not is_remote(path) and os.path.islink(path) and not os.path.exists(path):
            return b"", "dangling symbolic link"
        msg = getattr(e, "strerror", None) or getattr(e, "message", None) or str(e)
        return b"", f"unreadable file ({msg})"
