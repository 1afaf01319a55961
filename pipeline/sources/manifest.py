"""Manifests: CSV (header row) and JSON Lines files listing image paths and labels.

Index time only: the manifest is parsed with the ``csv`` and ``json`` standard
library modules, line by line (strings only, never pixels), into an ``Index``
that ``build`` assembles exactly like a folder of class sub-folders.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import posixpath
from typing import Dict, List, Optional, Sequence

from absl import logging

from pipeline import checks
from pipeline.sources import index as index_lib
from pipeline.sources import read
# defined in checks, which imports no TensorFlow (the command line reads them first)
from pipeline.checks import JSONL_EXTENSIONS, MANIFEST_EXTENSIONS, is_manifest  # noqa: F401

MANIFEST_LABEL_MODES = ("int", "categorical", "binary", "multi_hot", "float", None)
AUTO = "auto"


class ManifestError(ValueError):
    """A manifest row is malformed; the message names the file and the line number.

    Lines are the file's physical lines counted from 1: a CSV's header is
    line 1 (a missing column is reported there), its first data row line 2.
    """


def _open_text(path: str):
    if read.is_remote(path):
        return io.StringIO(read.read_text(path), newline="")
    return open(path, newline="", encoding="utf-8-sig")


def _names(columns) -> str:
    """Column names as a message lists them: ``'a', 'b'`` (never a Python list)."""
    return ", ".join(repr(c) for c in columns) or "none"


def _check_column(name: str, value) -> str:
    """``value`` when it is a column name (a non-empty str).

    Raises:
        ValueError: naming ``name`` and the value received.
    """
    if not isinstance(value, str) or not value:
        raise ValueError(f"`{name}` must be a column name (a non-empty str). "
                         f"{checks.received(name, value)}")
    return value


def _which(absent, path_column, label_columns, weight_column) -> str:
    """``Received: ...``: the arguments that named the ``absent`` columns."""
    given = [("path_column", [path_column]), ("label_columns", label_columns or []),
             ("weight_column", [weight_column] if weight_column else [])]
    named = [(k, v if len(v) > 1 else v[0]) for k, v in given if set(v) & set(absent)]
    return "Received: " + ", ".join(f"{k}={v!r}" for k, v in named)


def read_rows(path: str):
    """Yields (line_number, dict row, header) from a CSV/TSV (header row) or JSON Lines file.

    Line numbers count the file's physical lines from 1: a CSV's header is
    line 1 and its first data row line 2 (a quoted field that spans lines
    is numbered by the line it starts on); blank lines are skipped but
    counted. ``header`` is the CSV's list of column names (None for JSON
    Lines). A CSV row has the header's keys (None for a missing field) and,
    when it has more fields than the header, the extra ones under None (as
    ``csv.DictReader``).
    """
    lower = path.lower()
    with _open_text(path) as f:
        if lower.endswith(JSONL_EXTENSIONS):
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ManifestError(f"{path}, line {line_no}: not valid JSON ({e.msg})") from None
                if not isinstance(row, dict):
                    raise ManifestError(
                        f"{path}, line {line_no}: each line must be a JSON object, "
                        f"got {type(row).__name__}")
                yield line_no, row, None
        else:
            reader = csv.reader(f, delimiter="\t" if lower.endswith(".tsv") else ",")
            header = next(reader, None)
            if not header:
                raise ManifestError(f"{path}, line 1: no header row (the first line is "
                                    "empty)" if header is not None else
                                    f"{path}, line 1: no header row (the file is empty)")
            while True:
                start = reader.line_num + 1  # the line this record starts on
                fields = next(reader, None)
                if fields is None:
                    return
                if not any(v.strip() for v in fields):
                    continue  # blank line
                row = dict(zip(header, fields))
                if len(fields) > len(header):
                    row[None] = fields[len(header):]
                for c in header[len(fields):]:
                    row[c] = None
                yield start, row, header


def resolve_path(raw: str, root: str, allow_outside_root: bool, where: str) -> str:
    """A manifest cell's path resolved against ``root`` (a folder or URI prefix).

    Args:
        raw: the cell as written (relative path, absolute path or URI).
        root: the folder relative paths are read from.
        allow_outside_root: accept paths that resolve outside ``root``.
        where: "FILE, line N" for messages.

    Returns:
        The path as read (str).

    Raises:
        ManifestError: a path outside ``root`` without ``allow_outside_root``,
            naming ``where``, the path and the root.
    """
    if read.is_remote(raw):
        if not allow_outside_root and not (root and raw.startswith(root.rstrip("/") + "/")):
            raise ManifestError(
                f"{where}: path {raw!r} is an absolute URI outside root {root!r}; pass "
                "allow_outside_root=True to allow it")
        return raw
    if read.is_remote(root):
        if raw.startswith("/"):
            if not allow_outside_root:
                raise ManifestError(f"{where}: path {raw!r} is absolute; pass "
                                    "allow_outside_root=True to allow it")
            return raw
        scheme, rest = root.split("://", 1)
        joined = posixpath.normpath(posixpath.join("/" + rest, raw))
        if not allow_outside_root and not (joined + "/").startswith(
                "/" + rest.rstrip("/") + "/"):
            raise ManifestError(f"{where}: path {raw!r} escapes root {root!r} ('..'); pass "
                                "allow_outside_root=True to allow it")
        return f"{scheme}://{joined.lstrip('/')}"
    if os.path.isabs(raw) or raw.startswith("~"):
        if not allow_outside_root:
            raise ManifestError(
                f"{where}: path {raw!r} is absolute; paths must be relative to root "
                f"{root!r} unless allow_outside_root=True")
        return os.path.normpath(os.path.expanduser(raw))
    joined = os.path.normpath(os.path.join(root, raw))
    if not allow_outside_root and os.path.commonpath([root, joined]) != root:
        raise ManifestError(f"{where}: path {raw!r} escapes root {root!r} ('..'); pass "
                            "allow_outside_root=True to allow it")
    return joined


def _parse_number(value, where, column, want_int=False):
    if isinstance(value, bool):
        raise ManifestError(f"{where}: cannot parse value {value!r} in column {column!r}")
    if isinstance(value, (int, float)):
        v = value
    else:
        try:
            v = float(str(value).strip())
        except ValueError:
            raise ManifestError(
                f"{where}: cannot parse value {value!r} in column {column!r} as a "
                "number") from None
    if not math.isfinite(v):
        raise ManifestError(f"{where}: value {value!r} in column {column!r} is not finite")
    if want_int:
        if v != int(v):
            raise ManifestError(
                f"{where}: value {value!r} in column {column!r} is not an integer")
        return int(v)
    return float(v)


def _cell_kind(value):
    """'list', 'int', 'float' or 'str' for one raw label cell."""
    if isinstance(value, list):
        return "list"
    if isinstance(value, bool):
        return "str"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    s = str(value).strip()
    if "|" in s:
        return "list"
    try:
        f = float(s)
    except ValueError:
        return "str"
    return "int" if f == int(f) and "." not in s and "e" not in s.lower() else "float"


def index_manifest(manifest, path_column: str = "path", label_columns=None,
                   root: Optional[str] = None, weight_column: Optional[str] = None,
                   allow_outside_root: bool = False, label_mode=AUTO, class_names=None,
                   missing_ok: bool = False):
    """Parses a manifest into an ``Index`` (paths, labels, class names, weights).

    Args: see ``from_manifest``. ``missing_ok``: keep rows whose file is
        missing (they become bad files, reported when met) instead of raising.

    Returns:
        (Index, label_mode): the label mode resolved from ``AUTO``.

    Raises:
        FileNotFoundError: the manifest, or a listed local file, is missing
            (the message names the manifest line).
        IsADirectoryError: ``manifest`` is a folder.
        PermissionError: a listed local file cannot be accessed (e.g. a
            folder on its path cannot be searched; the line is named).
        ManifestError (a ValueError): a missing column, an empty path, an
            unparseable label, or a path escaping ``root``; the message names
            the manifest file and the line number.
    """
    manifest = os.fspath(manifest)
    remote = read.is_remote(manifest)
    if not remote and os.path.isdir(manifest):
        raise IsADirectoryError(
            f"`manifest` must be a file (.csv, .tsv, .jsonl or .json), not a folder; "
            f"for class folders use pipeline.from_directory. Received: manifest={manifest!r}")
    if not remote and not os.path.isfile(manifest):
        raise FileNotFoundError(f"`manifest` does not exist: {manifest!r}")
    if not manifest.lower().endswith(MANIFEST_EXTENSIONS):
        raise ValueError(f"`manifest` must be a .csv, .tsv, .jsonl or .json (JSON Lines) file. "
                         f"Received: manifest={manifest!r}")
    if label_mode != AUTO:
        checks.check_choice("label_mode", label_mode, MANIFEST_LABEL_MODES)
    if root is None:
        root = posixpath.dirname(manifest) if remote else os.path.dirname(
            os.path.abspath(manifest))
    else:
        root = os.fspath(root)
        if not read.is_remote(root):
            root = os.path.abspath(root)
    _check_column("path_column", path_column)
    if weight_column is not None:
        _check_column("weight_column", weight_column)
    label_columns = _check_label_columns(label_columns)
    class_names = checks.check_class_names(class_names)

    rows = _Rows(manifest, path_column, label_columns, weight_column, root,
                 allow_outside_root)
    rows.read()
    labels, class_names, label_mode = _labels(rows.raw_labels, rows.label_columns,
                                              label_mode, class_names)
    errors = _missing_files(manifest, rows.paths, rows.lines, missing_ok)
    errors = index_lib.check_tiffs(rows.paths, errors)
    duplicates = find_duplicates(rows.paths, rows.lines)
    if duplicates:
        logging.warning("pipeline: %s; every row is delivered as listed (a file listed "
                        "twice is read twice per epoch)", describe_duplicates(manifest, duplicates))
    return index_lib.Index(rows.paths, labels, class_names, rows.weights, errors,
                           duplicates=duplicates), label_mode


def _check_label_columns(label_columns) -> Optional[List[str]]:
    """``label_columns`` as a non-empty list of column names, or None (auto: "label")."""
    if isinstance(label_columns, str):
        label_columns = [label_columns]
    if label_columns is not None:
        given = label_columns
        try:
            label_columns = list(label_columns)
        except TypeError:
            raise ValueError("`label_columns` must be a column name or a list of them. "
                             f"{checks.received('label_columns', given)}") from None
        if not label_columns:
            raise ValueError("`label_columns` is empty. Received: label_columns=[]")
        for c in label_columns:
            if not isinstance(c, str) or not c:
                raise ValueError("`label_columns` must be column names (non-empty str). "
                                 f"{checks.received('label_columns', given)}")
    return label_columns


class _Rows:
    """A manifest's rows, checked and parsed: ``paths`` (resolved, on-disk names),
    ``lines`` (their line numbers), ``raw_labels`` ((where, cells) per row),
    ``weights`` (floats, or None without a weight column) and ``label_columns``
    (resolved: None means "label" when the first row or header has it, else [])."""

    def __init__(self, manifest, path_column, label_columns, weight_column, root,
                 allow_outside_root):
        self.manifest, self.path_column = manifest, path_column
        self.label_columns, self.weight_column = label_columns, weight_column
        self.root, self.allow_outside_root = root, allow_outside_root
        self.paths: List[str] = []
        self.lines: List[int] = []
        self.raw_labels: list = []
        self.weights: Optional[List[float]] = [] if weight_column else None
        self.listings: dict = {}  # folder listings for names in another Unicode normal form

    def read(self) -> None:
        """Reads every row; raises ManifestError (naming the line) on a malformed one."""
        checked_header = False
        for line_no, row, header in read_rows(self.manifest):
            if self.label_columns is None:
                self.label_columns = ["label"] if "label" in (
                    row if header is None else header) else []
            needed = ([self.path_column] + self.label_columns
                      + ([self.weight_column] if self.weight_column else []))
            if header is not None and not checked_header:
                self._check_header(header, needed)
                checked_header = True
            self._add(line_no, row, needed)
        if not self.paths:
            raise ValueError(f"The manifest lists no files. Received: "
                             f"manifest={self.manifest!r}")
        if self.weights is not None and not self.label_columns:
            raise ValueError("`weight_column` needs labels (`label_columns`): elements are "
                             "(x, y, sample_weight). Received: "
                             f"weight_column={self.weight_column!r}")

    def _which(self, absent) -> str:
        return _which(absent, self.path_column, self.label_columns, self.weight_column)

    def _check_header(self, header, needed) -> None:
        """A CSV's columns are its header's: a missing one is the header's fault (line 1)."""
        absent = [c for c in needed if c not in header]
        if absent:
            raise ManifestError(f"{self.manifest}, line 1 (the header): missing column(s) "
                                f"{_names(absent)}; the header has {_names(header)}. "
                                + self._which(absent))
        twice = [c for c in dict.fromkeys(needed) if header.count(c) > 1]
        if twice:
            raise ManifestError(f"{self.manifest}, line 1 (the header): column(s) "
                                f"{_names(twice)} named more than once")

    def _add(self, line_no, row, needed) -> None:
        where = f"{self.manifest}, line {line_no}"
        if None in row:  # fields beyond the header
            raise ManifestError(f"{where}: {len(row[None])} more field(s) than the header has "
                                f"({_names(row[None])})")
        absent = [c for c in needed if c not in row]
        if absent:
            raise ManifestError(f"{where}: missing column(s) {_names(absent)}; the row has "
                                f"{_names(sorted(k for k in row if k is not None))}. "
                                + self._which(absent))
        empty = [c for c in needed if row[c] is None]
        if empty:
            raise ManifestError(f"{where}: no value in column(s) {_names(empty)} (a short row, "
                                "or null)")
        raw = row[self.path_column]
        if not isinstance(raw, str):
            raise ManifestError(f"{where}: the path in column {self.path_column!r} must be a "
                                f"string, got {raw!r}")
        raw = raw.strip()
        if not raw:
            raise ManifestError(f"{where}: empty path in column {self.path_column!r}")
        # opened by its on-disk name (a name typed in NFC, the file's in NFD)
        self.paths.append(read.on_disk_name(
            resolve_path(raw, self.root, self.allow_outside_root, where), self.listings))
        self.lines.append(line_no)
        if self.label_columns:
            cells = [row[c] for c in self.label_columns]
            for c, v in zip(self.label_columns, cells):
                if isinstance(v, str) and not v.strip():
                    raise ManifestError(f"{where}: empty label in column {c!r}")
            self.raw_labels.append((where, cells))
        if self.weight_column:
            self.weights.append(_parse_number(row[self.weight_column], where,
                                              self.weight_column))


def _missing_files(manifest: str, paths, lines, missing_ok: bool) -> Dict[int, str]:
    """{row: reason} of the local files that cannot be stat'ed, when ``missing_ok``;
    otherwise the first raises FileNotFoundError / PermissionError / OSError naming
    its manifest line."""
    errors = {}
    for row, (path, line_no) in enumerate(zip(paths, lines)):
        if read.is_remote(path):
            continue
        try:
            os.stat(path)
            continue
        except OSError as e:
            code = e.errno
            if code in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                why = read.link_problem(path) if os.path.lexists(path) else "file not found"
                code = errno.ENOENT
            else:  # e.g. a folder on its path that cannot be searched (EACCES)
                why = f"cannot access file ({e.strerror or e})"
        if not missing_ok:
            kind = (FileNotFoundError if code == errno.ENOENT else
                    PermissionError if code in (errno.EACCES, errno.EPERM) else OSError)
            raise kind(f"{manifest}, line {line_no}: {why}: {path!r}")
        errors[row] = f"{why} (listed on line {line_no} of {os.path.basename(manifest)})"
    return errors


def find_duplicates(paths: Sequence[str], lines: Sequence[int]) -> Dict[str, List[int]]:
    """{path: the manifest lines it is on} for each resolved path listed more than
    once, in the order first met."""
    where: Dict[str, List[int]] = {}
    for path, line_no in zip(paths, lines):
        where.setdefault(path, []).append(line_no)
    return {p: ls for p, ls in where.items() if len(ls) > 1}


def describe_duplicates(manifest: str, duplicates: Dict[str, List[int]], limit: int = 3) -> str:
    """One line: how many files are listed more than once, the first ``limit`` with
    their lines, e.g. "train.csv lists 2 file(s) more than once: a.jpg (lines 2, 5),
    ..." """
    shown = [f"{p} (lines {', '.join(map(str, ls))})" for p, ls in
             list(duplicates.items())[:limit]]
    more = f", ... and {len(duplicates) - limit} more" if len(duplicates) > limit else ""
    return (f"{manifest} lists {len(duplicates)} file(s) more than once: "
            f"{', '.join(shown)}{more}")


def _labels(raw_labels, label_columns, label_mode, class_names):
    """(labels, class_names, label_mode) from raw cells, per ``label_mode``."""
    if not label_columns:
        return None, class_names, None
    if label_mode is None:
        return None, class_names, None
    multi_col = len(label_columns) > 1
    if label_mode == AUTO:
        label_mode = _auto_label_mode(raw_labels, multi_col)
    if multi_col:
        if label_mode not in ("multi_hot", "float"):
            raise ValueError(
                "Several `label_columns` give a float32 vector: use label_mode='multi_hot' "
                f"(0/1 columns) or 'float'. Received: label_mode={label_mode!r}")
        labels = [[_parse_number(v, where, c) for c, v in zip(label_columns, cells)]
                  for where, cells in raw_labels]
        return labels, (class_names or list(label_columns)), label_mode
    column = label_columns[0]
    if label_mode == "float":
        return [_parse_number(cells[0], where, column) for where, cells in raw_labels], \
            class_names, label_mode
    if label_mode == "multi_hot":
        return _multi_hot_labels(raw_labels, column, class_names) + (label_mode,)
    return _class_labels(raw_labels, column, label_mode, class_names) + (label_mode,)


def _auto_label_mode(raw_labels, multi_col: bool) -> str:
    """The label mode the cells read as: several columns give a vector ("float" when
    a cell is fractional, else "multi_hot"); one column "multi_hot" for lists, "float"
    when its numbers include a fraction, else "int"."""
    kinds = {_cell_kind(v) for _, cells in raw_labels for v in cells}
    if multi_col:
        return "float" if "float" in kinds else "multi_hot"
    if "list" in kinds:
        return "multi_hot"
    if kinds <= {"int", "float"} and "float" in kinds:
        return "float"
    return "int"


def _multi_hot_labels(raw_labels, column, class_names):
    """(multi-hot float vectors, class_names) from cells holding a list, one class, or
    "|"-separated classes (names or integer indices)."""
    lists = []
    for where, cells in raw_labels:
        v = cells[0]
        if isinstance(v, list):
            items = v
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            items = [v]
        elif isinstance(v, str):
            items = [t.strip() for t in v.split("|")] if v.strip() else []
        else:
            raise ManifestError(f"{where}: cannot parse label {v!r} in column {column!r}")
        for t in items:
            if not isinstance(t, (str, int)) or isinstance(t, bool) or t == "":
                raise ManifestError(
                    f"{where}: cannot parse label {v!r} in column {column!r}: items "
                    "must be class names or integer class indices")
        lists.append((where, v, [checks.nfc(str(t)) for t in items]))
    if class_names is None:
        names = sorted({t for _, _, items in lists for t in items})
        if names and all(_cell_kind(t) == "int" for t in names):
            names = [str(i) for i in range(max(int(t) for t in names) + 1)]
        class_names = names
    lookup = {c: k for k, c in enumerate(class_names)}
    labels = []
    for where, v, items in lists:
        vec = [0.0] * len(class_names)
        for t in items:
            if t not in lookup:
                raise ManifestError(f"{where}: label {t!r} in column {column!r} is not "
                                    f"in class_names {class_names[:20]}")
            vec[lookup[t]] = 1.0
        labels.append(vec)
    return labels, class_names


def _class_labels(raw_labels, column, label_mode, class_names):
    """(int class indices, class_names) for int / categorical / binary: cells holding
    integer class indices or class-name strings."""
    cells = [(where, cells[0]) for where, cells in raw_labels]
    kinds = {_cell_kind(v) for _, v in cells}
    if "list" in kinds:
        where = next(w for w, v in cells if _cell_kind(v) == "list")
        raise ManifestError(f"{where}: a multi-label cell needs label_mode='multi_hot'. "
                            f"Received: label_mode={label_mode!r}")
    if "float" in kinds and class_names is None:
        where, v = next((w, v) for w, v in cells if _cell_kind(v) == "float")
        raise ManifestError(
            f"{where}: label {v!r} in column {column!r} is a fractional number, not an integer "
            f"class index; use label_mode='float' for regression targets. "
            f"Received: label_mode={label_mode!r}")
    if kinds == {"int"} and class_names is None:
        labels = [_parse_number(v, where, column, want_int=True) for where, v in cells]
        bad = next(((w, v) for (w, _), v in zip(cells, labels) if v < 0), None)
        if bad:
            raise ManifestError(f"{bad[0]}: label {bad[1]} in column {column!r} is negative")
        return labels, None
    strs = [checks.nfc(str(v).strip()) for _, v in cells]
    if class_names is None:
        class_names = sorted(set(strs))
    lookup = {c: k for k, c in enumerate(class_names)}
    labels = []
    for (where, v), s in zip(cells, strs):
        if s not in lookup:
            raise ManifestError(f"{where}: label {v!r} in column {column!r} is not in "
                                f"class_names {class_names[:20]}"
                                + checks.look_alike(s, class_names))
        labels.append(lookup[s])
    return labels, class_names
