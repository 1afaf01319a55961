"""Recovery of a file cache whose writer was stopped (SIGTERM, SIGKILL, a lost machine).

``tf.data.Dataset.cache(prefix)`` marks a cache being written with
``<prefix>_<shard>.lockfile`` (its only content is "Created at: <unix
seconds>") and writes ``<prefix>_<shard>.data-*.tempstate*`` /
``.data-*`` / ``.index`` files that become ``<prefix>.index`` and
``<prefix>.data-*`` when the epoch completes. A writer that is killed
leaves them behind, and every later iterator fails with "There appears to
be a concurrent caching iterator running - cache lockfile already exists".
The lockfile does not say which process wrote it, so liveness is tracked
beside it: each process that builds a dataset over the cache holds a shared
``fcntl.flock`` on ``<prefix>.inuse`` for the rest of its life. The kernel
drops a process's locks when it exits, however it is stopped, so when a
lockfile exists and an exclusive lock on ``<prefix>.inuse`` can be taken, no
live process can be writing: the partial files are removed (one warning says
so) and the cache is rebuilt. While any live process holds the cache, its
lock is kept and building the dataset raises ``FileExistsError`` naming the
lockfile (TensorFlow's own error comes later, from an iterator that then
deletes the live writer's lockfile and partial files).

Local caches only: a remote prefix (``s3://``) is left to TensorFlow. Locks
are advisory and need a file system with working ``flock`` (local disks;
NFS v4 emulates it with byte-range locks across hosts).
"""

from __future__ import annotations

import collections
import errno
import fcntl
import glob
import os
import threading
from typing import List

from absl import logging

SUFFIX = ".inuse"

# Claims held at once by one process; past this many caches the oldest claim is dropped
# (its fd closed), so that a process building thousands of cached datasets (a property
# sweep) does not run out of file descriptors. A dropped claim only matters if its
# cache is still being written and another process then finds its lockfile.
MAX_HELD = 128

_lock = threading.Lock()
_held: "collections.OrderedDict[str, int]" = collections.OrderedDict()  # prefix -> fd (LOCK_SH)


def partial_files(prefix: str) -> List[str]:
    """The files an unfinished writer of ``prefix`` leaves: ``<prefix>_<shard>.*``
    (lockfiles, ``.tempstate`` files, shard data and index files), sorted."""
    return sorted(glob.glob(glob.escape(prefix) + "_*"))


def _lockfiles(prefix: str) -> List[str]:
    return [p for p in partial_files(prefix) if p.endswith(".lockfile")]


def _created(lockfile: str) -> str:
    try:
        with open(lockfile, encoding="utf-8", errors="replace") as f:
            return f.read().strip()[:80]
    except OSError:
        return ""


def claim(prefix: str) -> None:
    """Marks this process as a user of the file cache ``prefix``, first discarding
    what a writer that is gone left behind.

    Call before the dataset that caches to ``prefix`` is iterated. Idempotent per
    process. When ``<prefix>_*.lockfile`` exists and no live process holds the
    cache, every ``<prefix>_*`` file is removed and one warning names the
    lockfile.

    Raises:
        FileExistsError: a lockfile exists and a live process holds the cache
            (nothing is removed).
    """
    with _lock:
        if prefix in _held:
            return
        fd = os.open(prefix + SUFFIX, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            locks = _lockfiles(prefix)
            if locks:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    alone = True
                except OSError as e:
                    if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        raise
                    alone = False
                if alone:
                    stale = partial_files(prefix)
                    for p in stale:
                        try:
                            os.remove(p)
                        except FileNotFoundError:
                            pass
                    logging.warning(
                        "pipeline: the cache writer that left %s (%s) is gone (no running "
                        "process holds the cache); removed its %d partial file(s), the cache "
                        "is rebuilt", locks[0], _created(locks[0]) or "no date", len(stale))
                else:
                    # Not left to TensorFlow: its failing iterator deletes the files
                    # matching "<prefix>_0*", the live writer's lockfile included.
                    raise FileExistsError(
                        f"pipeline: the cache {prefix!r} is being written by another running "
                        f"process (its lockfile {locks[0]!r} exists: a concurrent caching "
                        "iterator, or a process that built a dataset over this cache). Its "
                        "lock is kept: wait for it to finish, or use another `cache` path")
            fcntl.flock(fd, fcntl.LOCK_SH)  # converts the exclusive lock, if taken
        except BaseException:
            os.close(fd)
            raise
        _held[prefix] = fd
        while len(_held) > MAX_HELD:
            os.close(_held.popitem(last=False)[1])
