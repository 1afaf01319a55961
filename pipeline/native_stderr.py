"""Drops known-harmless lines that C and C++ code (libjpeg, TensorFlow) writes to stderr.

Such code writes to the process's file descriptor 2 directly, below Python's
``sys.stderr``, so no Python logging setting reaches it. ``dropping(pattern)``
points descriptor 2 at a pipe for the length of a block (``wurlitzer.pipes``); every
line reaches the real stderr as it arrives, except the lines that ``pattern`` matches
whole. Everything else (Python's own stderr, tqdm's progress bars, any other
C++ line) passes through unchanged and in order. Imports only the standard
library and ``wurlitzer`` (``plain_log_lines``: absl's logging), so the command line
can use it before TensorFlow loads.

Used for:

* ``TRUNCATED_JPEG``: the lines a decode of a truncated JPEG makes libjpeg and
  TensorFlow write (``Improper call to JPEG library in state 201``; ``... 203``
  for a progressive one; ``Input file read error``; TensorFlow's ``Premature end
  of JPEG data. Stopped at line 14/40``). ``scan`` (and ``convert``'s check,
  which is a scan) decodes every file once (its diagnosis names a truncated
  JPEG from its bytes, ``pipeline.decode.guard.diagnose``); its report names the file
  "truncated JPEG (no end-of-image marker)", which says the same with the path.
  Not dropped: libjpeg's descriptions of corrupt data (``Bogus Huffman table
  definition``, ``Corrupt JPEG data: 40 extraneous bytes before marker 0xd9``),
  which say something the report does not.
* ``dropping_repeats``: TensorFlow 2.21's ``import tensorflow`` writes its
  start-up lines twice ("WARNING: All log messages before absl::InitializeLog()
  is called are written to STDERR", "oneDNN custom operations are on", "Could
  not find cuda drivers"): its wheel links a second copy of TSL's platform code
  into ``tensorflow/python/profiler/internal/_pywrap_profiler_plugin.so``, which
  ``import tensorflow`` loads (``tf.profiler.experimental.client``) and whose
  static initialisers log the same lines again. The command line imports
  TensorFlow through ``import_tensorflow`` (``dropping_repeats``), so they
  show once.
* ``CUDA_FACTORY``: TensorFlow 2.16's ``import tensorflow`` writes "Unable to
  register cuFFT factory" (cuDNN, cuBLAS) error lines, its CUDA plugins registered
  twice, whatever ``TF_CPP_MIN_LOG_LEVEL`` says; ``import_tensorflow`` drops them.
* ``import_tensorflow`` in a child process: ``bench`` runs each candidate in a
  process of its own, which imports TensorFlow, and TensorFlow 2.21 writes its
  start-up lines whatever ``TF_CPP_MIN_LOG_LEVEL`` says. The parent passes the
  lines it has shown in the child's environment (``startup_env``); the child's
  ``import_tensorflow`` drops them, so a ``bench`` run shows each once.

Python's own log lines on stderr: within ``plain_log_lines``, absl's handler writes
pipeline's log records without absl's prefix (``PlainLogFormatter``), as the command
line shows them.
"""

from __future__ import annotations

import contextlib
import json
import logging as std_logging
import os
import re
import sys
from typing import Callable, Dict, Iterator, Optional, Pattern, Set, Tuple, Union

# libjpeg's messages for a truncated JPEG, as TensorFlow's in-memory source makes
# them (its fill_input_buffer suspends, or fails after a fake end-of-image
# marker), and TensorFlow's own log line (tensorflow/core/lib/jpeg/jpeg_mem.cc),
# in TensorFlow 2.16's and 2.21's log formats.
TRUNCATED_JPEG = re.compile(
    r"Improper call to JPEG library in state 20\d"
    r"|Input file read error"
    r"|(?:\d{4}-\d\d-\d\d [\d:.]+: E \S*|E\d{4} [\d:.]+ +\d+ )jpeg_mem\.cc:\d+\] "
    r"Premature end of JPEG data\. Stopped at line \d+/\d+")

# pipeline hides TensorFlow's C++ warnings (TF_CPP_MIN_LOG_LEVEL=2, errors only)
# unless the user chose a level, by setting the variable only while it imports
# TensorFlow itself (``import_tensorflow``); ``pipeline.stack`` reports how.
CPP_LOG_ENV = "TF_CPP_MIN_LOG_LEVEL"
CPP_LOG_QUIET = 2
_cpp_log_state: Optional[Tuple[Optional[str], bool]] = None
_imported_here = False


JAX_DEFAULT_LEVEL = "1"  # what ``import jax`` sets when the variable is unset


def record_cpp_log_state() -> None:
    """Records, once, the user's ``TF_CPP_MIN_LOG_LEVEL`` and whether TensorFlow is
    imported already (``cpp_log_state``); called by ``import pipeline``. Changes nothing.

    A "1" found while ``jax`` is imported is taken as jax's import-time default,
    not the user's choice (jax sets it with ``os.environ.setdefault``).
    """
    global _cpp_log_state
    if _cpp_log_state is None:
        user = os.environ.get(CPP_LOG_ENV)
        if user == JAX_DEFAULT_LEVEL and "jax" in sys.modules:
            user = None
        _cpp_log_state = (user, "tensorflow" in sys.modules)


def cpp_log_state() -> Optional[Tuple[Optional[str], bool]]:
    """(the user's ``TF_CPP_MIN_LOG_LEVEL`` or None, TensorFlow imported before
    pipeline), as ``record_cpp_log_state`` found them; None before it ran."""
    return _cpp_log_state


def imported_tensorflow() -> bool:
    """True when ``import_tensorflow`` is what loaded TensorFlow in this process (so
    TensorFlow read pipeline's level, or the user's)."""
    return _imported_here


@contextlib.contextmanager
def _cpp_log_level_while(level: int) -> Iterator[None]:
    """``TF_CPP_MIN_LOG_LEVEL=level`` for the length of the block, unless the user
    chose a level; the variable is as it was afterwards (TensorFlow reads it as it
    loads)."""
    record_cpp_log_state()
    before = os.environ.get(CPP_LOG_ENV)
    ours = _cpp_log_state[0] is None
    if ours:
        os.environ[CPP_LOG_ENV] = str(level)
    try:
        yield
    finally:
        if ours and before is None:
            os.environ.pop(CPP_LOG_ENV, None)
        elif ours:
            os.environ[CPP_LOG_ENV] = before


# The prefix TensorFlow's C++ logging puts before a line: absl's (2.21:
# "I0000 00:00:1796083960.110955   31660 ") and TSL's (2.16: "2026-12-01
# 00:03:33.912549: I ").
LOG_PREFIX = re.compile(rb"^(?:[IWEF]\d{4} [\d:.]+ +\d+ |\d{4}-\d\d-\d\d [\d:.]+: [IWEF] )")


class _LineFilter:
    """The file-like object ``wurlitzer`` writes descriptor 2's bytes to: cuts them
    into segments (a line with its end, or up to a "\r", so that a progress
    bar's updates pass at once) and writes ``keep(segment)`` to ``out_fd``."""

    def __init__(self, out_fd: int, keep: Callable[[bytes], bytes]):
        self._out_fd = out_fd
        self._keep = keep
        self._pending = b""

    def _emit(self, segments) -> None:
        out = b"".join(self._keep(segment) for segment in segments if segment)
        if out:
            os.write(self._out_fd, out)

    def write(self, data: bytes) -> None:
        self._pending += data
        cut = max(self._pending.rfind(b"\n"), self._pending.rfind(b"\r"))
        if cut >= 0:
            done, self._pending = self._pending[:cut + 1], self._pending[cut + 1:]
            self._emit(re.split(rb"(?<=[\r\n])", done))

    def flush(self) -> None:  # wurlitzer may flush; a partial line waits for its end
        pass

    def close(self) -> None:
        """Writes what is left (an unfinished last line) through ``keep``."""
        pending, self._pending = self._pending, b""
        self._emit([pending])


@contextlib.contextmanager
def _filtered(keep: Callable[[bytes], bytes]) -> Iterator[None]:
    """Within the block, what is written to descriptor 2 passes through ``keep``,
    one segment (a line with its end, or up to a "\r") at a time, in order.

    The redirection is ``wurlitzer.pipes`` (descriptor 2 pointed at a pipe that
    a thread drains); where descriptor 2 cannot be duplicated (closed), the
    block runs unfiltered.
    """
    import wurlitzer  # pylint: disable=import-outside-toplevel
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    sink = _LineFilter(saved, keep)
    try:
        with wurlitzer.pipes(stdout=None, stderr=sink, encoding=None):
            yield
    finally:
        sink.close()
        os.close(saved)


@contextlib.contextmanager
def dropping(pattern: Union[str, Pattern], dropped: Optional[list] = None) -> Iterator[list]:
    """Within the block, lines written to stderr that ``pattern`` matches are dropped.

    Args:
        pattern: a regular expression (str or compiled str pattern): a line
            (without its line end) that ends with a match loses the match;
            what came before it on that line is kept (another writer's
            unfinished line, e.g. a progress bar), and a line that was only
            the match is dropped whole.
        dropped: optional list the dropped texts are appended to.

    Yields:
        The list of dropped texts (complete once the block has ended).
    """
    text = pattern if isinstance(pattern, str) else pattern.pattern
    tail = re.compile(b"(?:" + text.encode("utf-8") + b")\\Z")
    dropped = [] if dropped is None else dropped

    def keep(segment: bytes) -> bytes:
        line = segment.rstrip(b"\r\n")
        m = tail.search(line) if line else None
        if m is None:
            return segment
        dropped.append(m.group(0).decode("utf-8", "replace"))
        return line[:m.start()]

    with _filtered(keep):
        yield dropped


# TensorFlow 2.16's ``import tensorflow`` writes three error lines, whatever
# TF_CPP_MIN_LOG_LEVEL says ("E ... cuda_fft.cc:479] Unable to register cuFFT factory:
# Attempting to register factory for plugin cuFFT when one has already been registered",
# cuDNN's and cuBLAS's alike): its CUDA plugins register twice, a known-harmless bug of
# that release. Compared without ``LOG_PREFIX``.
CUDA_FACTORY = re.compile(
    rb"\S+\] Unable to register cu(?:FFT|DNN|BLAS) factory: Attempting to register factory "
    rb"for plugin cu(?:FFT|DNN|BLAS) when one has already been registered")


@contextlib.contextmanager
def dropping_repeats(dropped: Optional[list] = None,
                     seen: Optional[Set[bytes]] = None,
                     drop: Optional[Pattern[bytes]] = None) -> Iterator[list]:
    """Within the block, a line that repeats an earlier one of the block is dropped.

    Lines are compared without TensorFlow's log prefix (``LOG_PREFIX``: its
    time stamp and thread id differ between the copies). For TensorFlow
    2.21's ``import tensorflow``, which writes its start-up lines twice (see
    the module doc); blank lines always pass.

    Args:
        dropped: optional list the dropped lines are appended to.
        seen: optional set of lines (bytes, without their line end and log
            prefix) that count as shown before the block: they are dropped
            too. The lines the block lets through are added to it.
        drop: optional pattern (bytes); a line (without its log prefix) it matches
            whole is dropped too, the first time as well.

    Yields:
        The list of dropped lines (complete once the block has ended).
    """
    seen = set() if seen is None else seen
    dropped = [] if dropped is None else dropped

    def keep(segment: bytes) -> bytes:
        line = LOG_PREFIX.sub(b"", segment.rstrip(b"\r\n"))
        if not line.strip() or not segment.endswith(b"\n"):
            return segment
        if line in seen or (drop is not None and drop.fullmatch(line)):
            dropped.append(segment.rstrip(b"\r\n").decode("utf-8", "replace"))
            return b""
        seen.add(line)
        return segment

    with _filtered(keep):
        yield dropped


# The start-up lines (as ``dropping_repeats`` compares them) that this process's
# ``import_tensorflow`` showed, and those its parent passed in ``STARTUP_ENV``.
STARTUP_ENV = "PIPELINE_TF_STARTUP_LINES_SHOWN"
_startup_lines: Optional[Set[bytes]] = None


def _shown_startup_lines() -> Set[bytes]:
    global _startup_lines
    if _startup_lines is None:
        try:
            passed = json.loads(os.environ.get(STARTUP_ENV) or "[]")
        except ValueError:
            passed = []
        _startup_lines = {str(line).encode("utf-8", "surrogateescape") for line in passed}
    return _startup_lines


def import_tensorflow() -> None:
    """``import tensorflow``, each of its start-up lines shown at most once, with
    ``TF_CPP_MIN_LOG_LEVEL`` at 2 (errors only) while it loads unless the user set it
    (the environment is restored afterwards).

    Within ``dropping_repeats``: a line that repeats one this import wrote
    before (TensorFlow 2.21 writes its start-up lines twice), or one that an
    earlier ``import_tensorflow`` showed, here or in the parent process that
    started this one with ``startup_env()`` in its environment, is dropped, and so
    are TensorFlow 2.16's known-harmless CUDA plugin registration errors
    (``CUDA_FACTORY``).
    Nothing is filtered when TensorFlow is already imported.

    Raises:
        ImportError: TensorFlow is not installed (or fails to load).
    """
    global _imported_here
    if "tensorflow" in sys.modules:
        return
    with _cpp_log_level_while(CPP_LOG_QUIET), \
            dropping_repeats(seen=_shown_startup_lines(), drop=CUDA_FACTORY):
        import tensorflow  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    _imported_here = True


def startup_env() -> Dict[str, str]:
    """The environment entry (``{STARTUP_ENV: JSON list}``) that tells a child
    process's ``import_tensorflow`` which start-up lines were shown already."""
    lines = sorted(line.decode("utf-8", "surrogateescape") for line in _shown_startup_lines())
    return {STARTUP_ENV: json.dumps(lines)}


class PlainLogFormatter(std_logging.Formatter):
    """pipeline's log lines without absl's prefix: an info line as its message, a warning
    or an error after its level (``WARNING: ...``)."""

    def format(self, record) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return f"{record.levelname}: {message}" if record.levelno >= std_logging.WARNING \
            else message


@contextlib.contextmanager
def plain_log_lines() -> Iterator[None]:
    """Within: absl's handler writes plain lines (``PlainLogFormatter``) to ``sys.stderr``.

    The handler's formatter and stream are restored on the way out. Imports absl's
    logging (no TensorFlow).
    """
    from absl import logging  # pylint: disable=import-outside-toplevel
    handler = logging.get_absl_handler().python_handler
    old_formatter, old_stream = handler.formatter, handler.stream
    handler.setFormatter(PlainLogFormatter())
    handler.stream = sys.stderr
    try:
        yield
    finally:
        handler.setFormatter(old_formatter)
        handler.stream = old_stream
