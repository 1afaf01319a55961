"""Bad-file policy: records of skipped files, the error budget, reporting."""

from __future__ import annotations

import collections
import threading
from typing import List, Optional

from absl import logging

ErrorRecord = collections.namedtuple("ErrorRecord", ["path", "reason"])
ErrorRecord.__doc__ = """A skipped file: ``path`` (str, as indexed) and ``reason`` (str), e.g.
"truncated JPEG (no end-of-image marker)" or "header claims 60000x60000 pixels > max_pixels=..."."""


class ErrorBudgetExceeded(RuntimeError):
    """More files were bad than ``max_errors`` allows.

    Raised by ``ErrorLog.add``, which runs inside the dataset's graph (a
    ``tf.py_function`` on the rare bad-file path): a caller iterating the
    dataset receives it wrapped as ``tf.errors.UnknownError``, whose message
    contains "ErrorBudgetExceeded: " and this exception's text.
    """


class ErrorLog:
    """Thread-safe record of the files skipped under ``on_error="skip"``.

    Each bad file is recorded once (the first time it is met), with its path
    and reason, and logged as it happens.

    Args:
        num_files: int, files in the dataset (for a fractional budget).
        max_errors: None (no budget), an int count, or a float fraction in
            [0, 1) of ``num_files``. When more distinct files than that are bad,
            the run fails with ``ErrorBudgetExceeded`` and a summary.
    """

    def __init__(self, num_files: int = 0, max_errors: Optional[float] = None):
        self._lock = threading.Lock()
        self._records: "collections.OrderedDict[str, str]" = collections.OrderedDict()
        self.num_files = num_files
        self.max_errors = max_errors
        self._exceeded = False
        self._exceeded_message = ""

    @property
    def allowed(self) -> Optional[int]:
        if self.max_errors is None:
            return None
        if isinstance(self.max_errors, float):
            return int(self.max_errors * self.num_files)
        return int(self.max_errors)

    def add(self, path: str, reason: str) -> None:
        with self._lock:
            # Once the budget is exceeded the run is over: elements cancelled
            # while the iterator is torn down must not be recorded as bad files.
            if self._exceeded:  # raise again, record nothing more
                raise ErrorBudgetExceeded(self._exceeded_message)
            if path in self._records:
                return
            self._records[path] = reason
            count = len(self._records)
            allowed = self.allowed
            exceeded = allowed is not None and count > allowed
        logging.warning("pipeline: skipped %s: %s", path, reason)
        if exceeded:
            message = (f"pipeline: {count} bad files, more than max_errors={self.max_errors!r} "
                       f"allows ({allowed} of {self.num_files}). {self.summary()}")
            with self._lock:
                self._exceeded, self._exceeded_message = True, message
            raise ErrorBudgetExceeded(message)

    def records(self) -> List[ErrorRecord]:
        with self._lock:
            return [ErrorRecord(p, r) for p, r in self._records.items()]

    def summary(self, limit: int = 10) -> str:
        recs = self.records()
        by_reason = collections.Counter(r.reason for r in recs)
        lines = [f"{n} x {reason}" for reason, n in by_reason.most_common(limit)]
        first = "; ".join(f"{r.path}: {r.reason}" for r in recs[:limit])
        return f"Reasons: {', '.join(lines)}. First files: {first}"

    def __len__(self):
        with self._lock:
            return len(self._records)

    def _record_tensor(self, path, reason):
        """py_function body: runs only for bad files (the rare path)."""
        self.add(path.numpy().decode("utf-8", "replace"),
                 reason.numpy().decode("utf-8", "replace"))
        return False


def errors(dataset) -> List[ErrorRecord]:
    """Files skipped so far by a dataset built with ``on_error="skip"``.

    Args:
        dataset: a dataset returned by a ``pipeline`` factory.

    Returns:
        list of ``ErrorRecord(path, reason)`` (str, str), in the order met;
        each bad file appears once however many epochs ran.

    Raises:
        ValueError: ``dataset`` was not made by a ``pipeline`` factory.
    """
    log = getattr(dataset, "_pipeline_errors", None)
    if log is None:
        raise ValueError(
            "pipeline.errors() needs a dataset returned by a pipeline factory "
            "(transformations such as .map() return a new dataset without it). "
            f"Received: dataset={type(dataset).__name__}")
    return log.records()
