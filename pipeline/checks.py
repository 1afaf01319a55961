"""Argument checks shared by every stage (the base of the package: imports no other module).

Every bad argument raises ``ValueError`` naming the argument and the value
received, in Keras' form: ``"... Received: image_size=(0, 224)"``. The checks of
local paths (``check_source``, ``check_folder``, ``check_writable``,
``check_output_outside``) are here too, TensorFlow-free, so that the command line
answers a bad path before TensorFlow loads.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import numbers
import os
import re
import tempfile
import unicodedata
from typing import Any, Callable, Dict, Iterable, Optional, Sequence, Tuple

import numpy as np

# The default ``max_pixels``: Pillow's decompression-bomb limit, the size above
# which ``PIL.Image.open`` raises ``DecompressionBombError`` (2 x
# ``PIL.Image.MAX_IMAGE_PIXELS``, its warning threshold). Defined here, the
# module that imports nothing heavy, so the command line's help reads it without
# importing TensorFlow; ``config``, ``decode`` and ``cli`` all use this one value.
DEFAULT_MAX_PIXELS = 178_956_970

# Manifest files by extension (``pipeline.sources.manifest`` reads them). Here, in the
# module that imports nothing heavy, so that the command line tells a manifest
# SRC from a folder before TensorFlow loads.
JSONL_EXTENSIONS = (".jsonl", ".json", ".ndjson")
MANIFEST_EXTENSIONS = (".csv", ".tsv") + JSONL_EXTENSIONS

# How to read a folder without class sub-folders, in the library's error (the command
# line, which has no `labels`, says its own: ``cli.NO_CLASS_HINTS``).
NO_CLASS_HINT = "To read its images without labels, pass `labels=None`."


def is_manifest(path) -> bool:
    """True when ``path`` names a file with a manifest extension (.csv, .tsv, .jsonl, .json)."""
    return isinstance(path, (str, os.PathLike)) and os.fspath(path).lower().endswith(
        MANIFEST_EXTENSIONS)


def received(name: str, value: Any) -> str:
    """``"Received: name=value"``, with numpy scalars printed as plain Python values."""
    if isinstance(value, np.generic):
        value = value.item()
    return f"Received: {name}={value!r}"


def cpu_count() -> int:
    """Cores this process may run on (affinity-aware; ``os.cpu_count()`` elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def check_int(name: str, value, minimum: int = 1, allow_none: bool = False) -> Optional[int]:
    """``value`` as a Python int >= ``minimum`` (numpy integers accepted; bools refused).

    Raises:
        ValueError: naming ``name`` and the value received.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or value < minimum:
        raise ValueError(
            f"`{name}` must be an integer >= {minimum}"
            + (" or None" if allow_none else "") + f". {received(name, value)}")
    return int(value)


def check_bool(name: str, value) -> bool:
    """``value`` as a bool (numpy bools accepted).

    Raises:
        ValueError: naming ``name`` and the value received.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"`{name}` must be True or False. {received(name, value)}")
    return bool(value)


def check_choice(name: str, value, choices: Sequence, hints: Optional[dict] = None):
    """``value`` when it is one of ``choices``.

    ``hints``: {a value another library spells so: (the choice it means, where
    that spelling comes from)}; a value found there, or a choice in other
    letter case, gets "did you mean ...?" in the message.

    Raises:
        ValueError: naming ``name``, the choices and the value received.
    """
    if value not in choices:
        hint = "."
        if isinstance(value, str):
            meant, where = (hints or {}).get(value.lower(), (None, ""))
            if meant is None and value.lower() in choices:
                meant = value.lower()
            if meant is not None:
                hint = f"; did you mean {meant!r}?" + (f" ({where})." if where else "")
        raise ValueError(f"`{name}` must be one of {list(choices)}{hint} "
                         f"{received(name, value)}")
    return value


def nfc(name: str) -> str:
    """``name`` in Unicode normal form C, the one form names are compared in
    (macOS writes file names in NFD: ``e`` + U+0301 for ``é``)."""
    return unicodedata.normalize("NFC", name)


def code_points(name: str) -> str:
    """``'café' (U+0063 U+0061 U+0066 U+00E9)``: a name and its code points, for
    messages about names that look the same on screen."""
    return f"{name!r} ({' '.join(f'U+{ord(ch):04X}' for ch in name)})"


def look_alike(name: str, others: Iterable[str]) -> str:
    """"" or a note naming the names of ``others`` that differ from ``name`` only
    by Unicode compatibility form or case (NFKC + casefold equal), with the code
    points of both: they look alike but are different names."""
    key = unicodedata.normalize("NFKC", name).casefold()
    same = [o for o in others if o != name and unicodedata.normalize("NFKC", o).casefold() == key]
    return "".join(f" ({code_points(name)} and {code_points(o)} differ only by Unicode "
                   "compatibility form or case)" for o in same)


def check_class_names(class_names: Optional[Sequence[str]]) -> Optional[list]:
    """Class names as a list of distinct str in Unicode NFC (``nfc``), or None.

    Raises:
        ValueError: a single str, duplicates (also two names that are one in
            NFC: named with their code points), or an empty sequence.
    """
    if class_names is None:
        return None
    if isinstance(class_names, str):
        raise ValueError(
            "`class_names` must be a sequence of str, not a single str. "
            f"{received('class_names', class_names)}")
    given = [str(c) for c in class_names]
    names = [nfc(c) for c in given]
    if len(set(names)) != len(names) and len(set(given)) == len(given):
        twins = [code_points(g) for g, n in zip(given, names) if names.count(n) > 1]
        raise ValueError(f"`class_names` has names that are one name in Unicode NFC: "
                         f"{', '.join(twins)}. {received('class_names', given)}")
    if len(set(names)) != len(names):
        raise ValueError(f"`class_names` has duplicates. {received('class_names', names)}")
    if not names:
        raise ValueError(f"`class_names` is empty. {received('class_names', names)}")
    return names


def unknown_keywords(function: str, unknown: Iterable[str], valid: Iterable[str],
                     hints: Optional[Dict[str, str]] = None) -> TypeError:
    """The ``TypeError`` for keyword arguments ``function`` does not take (Python's
    convention), naming the function, each unknown keyword and the closest valid name
    (``difflib.get_close_matches``), or the Keras name's equivalent (``hints``).

    E.g. "from_directory() got an unexpected keyword argument 'batchsize' (did you
    mean 'batch_size'?)". With no close name for any, the valid names are listed.
    """
    valid = sorted(set(valid))
    hints = hints or {}
    parts, helped = [], False
    for k in unknown:
        close = difflib.get_close_matches(k, valid, n=1, cutoff=0.6)
        if k in hints:
            parts.append(f"{k!r} (`{k}` is Keras' name: {hints[k]})")
            helped = True
        elif close:
            parts.append(f"{k!r} (did you mean {close[0]!r}?)")
            helped = True
        else:
            parts.append(repr(k))
    noun = "an unexpected keyword argument" if len(parts) == 1 else \
        "unexpected keyword arguments"
    message = f"{function}() got {noun} {', '.join(parts)}"
    if not helped:
        message += f"; its keyword arguments: {', '.join(valid)}"
    return TypeError(message)


def known_keywords(extra: Iterable[str] = (), hints: Optional[Dict[str, str]] = None,
                   name: Optional[str] = None) -> Callable:
    """Decorator: a call with a keyword the function does not take raises
    ``unknown_keywords``' TypeError, naming the function (``name``, default its
    ``__name__``), the keyword and the closest valid name, before the call.

    Valid keywords: the function's named parameters, plus ``extra`` (the names a
    ``**kwargs`` passes on, e.g. the image options of a factory's ``**options``).
    ``inspect.signature`` of the result is the function's own.
    """
    extra = tuple(extra)

    def deco(fn):
        params = inspect.signature(fn).parameters.values()
        own = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
               and p.name != "self"]
        valid = frozenset(own) | frozenset(extra)
        label = name or fn.__name__

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            unknown = [k for k in kwargs if k not in valid]
            if unknown:
                raise unknown_keywords(label, unknown, valid, hints)
            return fn(*args, **kwargs)
        return checked
    return deco


def check_image_size(image_size, batch_size=None, name: str = "image_size"
                     ) -> Optional[Tuple[int, int]]:
    """``image_size``: (height, width) in pixels as two positive ints, or None (native size).

    An int ``n`` means (n, n). None needs ``batch_size=None``: images of
    different sizes cannot be batched. ``name``: the argument's name in the
    message (``Augment``'s ``output_size`` takes the same values).

    Returns:
        ``(height, width)`` as Python ints, or None.

    Raises:
        ValueError: "`image_size` must be (height, width) of positive integers or
            None. Received: image_size=..."
    """
    r = received
    if image_size is None:
        if batch_size is not None:
            raise ValueError(
                f"`{name}=None` (native size) needs `batch_size=None`, since "
                f"images of different sizes cannot be batched. {r('batch_size', batch_size)}")
        return None
    bad = ValueError(f"`{name}` must be (height, width) of positive integers or None. "
                     f"{r(name, image_size)}")
    if isinstance(image_size, numbers.Integral) and not isinstance(image_size, (bool, np.bool_)):
        image_size = (image_size, image_size)
    try:
        h, w = image_size
    except (TypeError, ValueError):
        raise bad from None
    for v in (h, w):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral) or v <= 0:
            raise bad
    return (int(h), int(w))


def check_manifest_options(source, options: Dict[str, Any]) -> None:
    """Checks that manifest options (``path_column``, ``label_columns``, ``root``, ...:
    ``options``, those given) come with a manifest ``source`` (``is_manifest``).

    Raises:
        ValueError: naming the options and ``source``.
    """
    if options and (isinstance(source, (list, tuple)) or not is_manifest(source)):
        shown = (f"a list of {len(source)} paths" if isinstance(source, (list, tuple))
                 else repr(os.fspath(source)))
        raise ValueError(f"{', '.join(f'`{k}`' for k in options)} "
                         f"appl{'ies' if len(options) == 1 else 'y'} to a manifest `source` "
                         f"(.csv / .jsonl) only; `source` is not one. Received: source={shown}")


# --- local paths: sources, output folders, output files ---------------------------------

def _probe(folder: str) -> Optional[str]:
    """None if a file can be created in ``folder`` (a real probe, removed at once:
    ``os.access`` says yes to root even in /proc), else why not."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as e:
        return e.strerror or str(e)


def check_writable(name: str, path: str) -> None:
    """Checks that the file ``path`` (the argument ``name``) can be written, writing
    nothing: an existing file is opened for append (nothing truncated), a new one probed.

    Raises:
        ValueError: ``path`` is a folder, its folder is missing or a file, or it cannot
            be written (the operating system's reason), naming ``name`` and ``path``.
    """
    given = received(name, path)
    folder = existing = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if os.path.isdir(path):
        raise ValueError(f"`{name}` is a folder, not a file. {given}")
    if not os.path.isdir(existing):
        raise ValueError(f"`{name}`: {existing!r} is a file, not a folder: cannot write "
                         f"{path!r} in it. {given}")
    if existing != folder:
        raise ValueError(f"`{name}`: folder {folder!r} does not exist. {given}")
    try:
        why = open(path, "a").close() if os.path.exists(path) else _probe(folder)
    except OSError as e:
        why = e.strerror or str(e)
    if why:
        raise ValueError(f"`{name}`: cannot write {path!r} ({why}). {given}")


def check_folder(name: str, path: str) -> None:
    """Checks that the local folder ``path`` (the argument ``name``) exists or can be
    created, and can be written; creates nothing. A URI ("://") is its file system's.

    Raises:
        ValueError: ``path`` is a file, lies under a file, or cannot be created or
            written (the operating system's reason), naming ``name`` and ``path``.
    """
    if "://" in path:
        return
    full, given = os.path.abspath(path), received(name, path)
    if os.path.exists(full) and not os.path.isdir(full):
        raise ValueError(f"`{name}` must be a folder (new or existing); {path!r} is a file. "
                         f"{given}")
    parent = full
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(f"`{name}`: cannot create folder {path!r}: {parent!r} is a file. "
                         f"{given}")
    why = _probe(parent)
    if why:
        what = (f"cannot write in folder {path!r}" if parent == full else
                f"cannot create folder {path!r} in {parent!r}")
        raise ValueError(f"`{name}`: {what} ({why}). {given}")


def not_found_hint(path: str) -> str:
    """What helps with a local ``path`` that does not exist: the working directory a
    relative path was looked up in, and the closest existing name for its first
    missing part (``difflib.get_close_matches``), e.g. " (looked up in the working
    directory '...'; did you mean 'photos/train'?)". "" for a URI."""
    if "://" in path:
        return ""
    notes = []
    if not os.path.isabs(path):
        notes.append(f"looked up in the working directory {os.getcwd()!r}")
    parts = os.path.normpath(path).split(os.sep)
    base = os.sep if os.path.isabs(path) else ""
    for i, part in enumerate(parts):
        here = os.path.join(base, *parts[:i]) if i or base else "."
        candidate = os.path.join(here, part) if i or base else part
        if os.path.lexists(candidate):
            continue
        try:
            names = [n for n in os.listdir(here) if not n.startswith(".")]
        except OSError:
            break
        close = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
        if not close and part.lower() in {n.lower() for n in names}:
            close = [next(n for n in names if n.lower() == part.lower())]
        if close:
            guess = os.path.join(*(parts[:i] + [close[0]] + parts[i + 1:])) if not base else \
                os.path.join(base, *parts[:i], close[0], *parts[i + 1:])
            notes.append(f"did you mean {guess!r}?")
        break
    return f" ({'; '.join(notes)})" if notes else ""


def check_source(name: str, path: str, manifest_ok: bool = True) -> None:
    """Checks that the local ``path`` (the argument ``name``) is a folder, or with
    ``manifest_ok`` a manifest (``is_manifest``). A URI ("://") is its file system's.

    Raises:
        ValueError: ``path`` does not exist, or is a file of another kind.
    """
    if "://" in path:
        return
    if not os.path.exists(path):
        raise ValueError(f"`{name}` does not exist: {path!r}{not_found_hint(path)}")
    if not (os.path.isdir(path) or (manifest_ok and is_manifest(path))):
        raise ValueError(
            f"`{name}` must be " + ("a folder or a manifest (.csv / .jsonl; .tsv / .json too)"
                                    f"; {path!r} is a file that is neither" if manifest_ok
                                    else f"a folder; {path!r} is a file")
            + f". {received(name, path)}")


def check_output_outside(output_dir, source, root=None, manifest_root: bool = False) -> None:
    """Checks that ``output_dir`` is neither the folder ``source`` nor inside it (files
    written there would become part of the folder: a sub-folder is a class). With
    ``manifest_root`` (``python -m pipeline convert``), also not inside a manifest
    ``source``'s ``root`` (default: its folder), where they would land among the images.
    URIs ("://") are not compared.

    Raises:
        ValueError: naming ``output_dir`` and ``source`` (and ``root`` when given).
    """
    if not isinstance(source, (str, os.PathLike)) or not isinstance(output_dir,
                                                                    (str, os.PathLike)):
        return
    src, out = os.fspath(source), os.fspath(output_dir)
    if "://" in src or "://" in out:
        return
    real_out = os.path.realpath(out)

    def inside(folder: str) -> bool:
        real = os.path.realpath(folder)
        return real_out == real or real_out.startswith(real.rstrip(os.sep) + os.sep)

    given = f"{received('output_dir', out)}, source={src!r}"
    if os.path.isdir(src) and inside(src):
        raise ValueError(
            "`output_dir` must not be `source` or a folder inside it: the shards and "
            f"dataset.json would be written among `source`'s images. {given}")
    folder = os.fspath(root) if root else os.path.dirname(os.path.abspath(src))
    if manifest_root and os.path.isfile(src) and "://" not in folder and inside(folder):
        named = f"root={root!r}" if root else "the manifest's folder"
        raise ValueError(
            f"`output_dir` must not be the manifest's root ({named}) or a folder inside it: "
            f"the shards and dataset.json would be written among its images. {given}")


# Beam's runner names (apache_beam.runners.runner), as write_tfrecords(beam_runner=) takes them;
# a runner class's dotted path ("package.module.MyRunner") is taken too.
BEAM_RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner", "PrismRunner",
                "PortableRunner", "FnApiRunner", "BundleBasedDirectRunner",
                "SwitchingDirectRunner")
_BEAM_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
BEAM_OPTIONS_FORMS = ("a comma-separated 'key=value,key=value' string (e.g. "
                      "'direct_running_mode=multi_processing,direct_num_workers=2') or a list "
                      "of '--flag=value' / '--flag' strings (e.g. ['--project=my-project', "
                      "'--experiments=a,b'])")


def check_beam(beam_runner, beam_options):
    """Validates ``write_tfrecords``' ``beam_runner`` and ``beam_options``; needs no Beam.

    Returns:
        (the runner name or None, the options as a list of ``--flag[=value]`` strings).

    Raises:
        ValueError: ``beam_runner`` not None, one of ``BEAM_RUNNERS`` or a dotted class
            path; ``beam_options`` malformed (an empty item, an item without ``=``, a
            key that is not an identifier, a ``runner`` key: give it as ``beam_runner``)
            or given without ``beam_runner`` (each names the value and the accepted
            forms).
    """
    if beam_runner is None:
        if beam_options not in (None, "", []):
            raise ValueError("`beam_options` is only used with `beam_runner` (e.g. "
                             "beam_runner='DirectRunner'). "
                             f"{received('beam_options', beam_options)}")
        return None, []
    if not isinstance(beam_runner, str) or not (
            beam_runner in BEAM_RUNNERS or _DOTTED.fullmatch(beam_runner)):
        raise ValueError(f"`beam_runner` must be one of {', '.join(BEAM_RUNNERS)} or a runner "
                         "class's dotted path (e.g. 'my_package.runners.MyRunner'). "
                         f"{received('beam_runner', beam_runner)}")
    if beam_options is None:
        return beam_runner, []
    if isinstance(beam_options, str):
        items = [x.strip() for x in beam_options.split(",")] if beam_options.strip() else []
        flags = []
        for item in items:
            key, eq, _ = item.partition("=")
            if not eq or not _BEAM_KEY.fullmatch(key.strip()):
                raise ValueError(
                    f"`beam_options` item {item!r} is not key=value with an identifier key; "
                    f"`beam_options` is {BEAM_OPTIONS_FORMS}. "
                    f"{received('beam_options', beam_options)}")
            flags.append("--" + key.strip() + "=" + item.partition("=")[2])
    elif isinstance(beam_options, (list, tuple)):
        flags = list(beam_options)
        for item in flags:
            key = item[2:].partition("=")[0] if isinstance(item, str) else ""
            if not (isinstance(item, str) and item.startswith("--")
                    and _BEAM_KEY.fullmatch(key)):
                raise ValueError(
                    f"`beam_options` item {item!r} is not '--flag=value' or '--flag'; "
                    f"`beam_options` is {BEAM_OPTIONS_FORMS}. "
                    f"{received('beam_options', beam_options)}")
    else:
        raise ValueError(f"`beam_options` must be {BEAM_OPTIONS_FORMS}. "
                         f"{received('beam_options', beam_options)}")
    for item in flags:
        if item[2:].partition("=")[0] == "runner":
            raise ValueError("`beam_options` must not hold the runner: give it as "
                             f"`beam_runner`. {received('beam_options', beam_options)}")
    return beam_runner, flags
