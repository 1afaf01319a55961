"""The command line: ``python -m pipeline <command> [ARGS] [--flags]``.

Every absl flag and every command lives here (no other module of the
package reads absl flags). Commands:

  bench     throughput, time to first batch and peak RSS, side by side with
            peers (default: keras.utils.image_dataset_from_directory),
            alternated, medians and spread. With no --data_dir: the built-in
            sample of generated JPEGs. --profile: per-stage costs; --plan: a
            capacity plan (cores and tf.data service workers for a rate).
            Too few images for 2 timed batches per epoch (each epoch's first
            batch is not timed) is a usage error.
  scan      one parallel pass over a folder / manifest / path list: counts per
            class and format, sizes, extension mismatches, bad files.
  convert   write TFRecord shards (encoded bytes + label + path), after
            decoding every file once to apply --on_error (raise | skip).
  service   start a tf.data service dispatcher or worker.
  doctor    print the installed stack (versions, CPUs).

``pipeline CMD --help`` shows one command's usage and flags; ``--helpfull``
lists every absl flag (TensorFlow's included). Exit status: 0 success, 1 a
command's own failure (``scan`` found bad files; ``convert`` met bad files
with --on_error=raise; a ``bench`` candidate failed), 2 a usage error
(unknown command, bad or missing argument, bad flag value, an output that
cannot be written) or a source that cannot be read. A usage error names the argument as the user typed it (SRC, OUT,
--flag: ``user_names``), never the library's Python name for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib.util
import json
import logging as std_logging
import math
import os
import re
import shlex
import signal
import socket
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from absl import app, flags, logging

from pipeline import checks

FLAGS = flags.FLAGS
USAGE_ERROR = 2
PROG = "python -m pipeline"

# --- flags, each tagged with the commands it belongs to ---------------------
FLAG_COMMANDS: Dict[str, Tuple[str, ...]] = {}
# {flag: {command: the help text that command's --help shows}}
FLAG_HELP: Dict[str, Dict[str, str]] = {}


def _define(kind: Callable, name: str, default, help_text, commands: Sequence[str],
            **kw) -> None:
    """Defines absl flag ``--name`` for ``commands``.

    ``help_text`` is one str for a flag of one command, or {command: text} for
    a flag several commands share: each command's ``--help`` shows its own
    text (``--helpfull``, absl's one list, shows them all, each after its
    command's name).
    """
    commands = tuple(commands)
    if isinstance(help_text, str):
        if len(commands) != 1:
            raise ValueError(f"--{name} is shared by {list(commands)}: give its help per "
                             "command, as {command: text}")
        help_text = {commands[0]: help_text}
    if set(help_text) != set(commands):
        raise ValueError(f"--{name}: help for {sorted(help_text)}, but the flag belongs to "
                         f"{sorted(commands)}")
    absl_help = (help_text[commands[0]] if len(commands) == 1 else
                 " ".join(f"{c}: {help_text[c]}" for c in commands))
    kind(name, default, absl_help, **kw)
    FLAG_COMMANDS[name] = commands
    FLAG_HELP[name] = dict(help_text)


def flag_help(name: str, command_name: str) -> str:
    """The help text of ``--name`` as ``command_name --help`` shows it."""
    return FLAG_HELP[name][command_name]


ALL = ("bench", "scan", "convert", "service", "doctor")
# bench
_define(flags.DEFINE_string, "data_dir", None, "Class-folder directory; default: "
        "$PIPELINE_DATA_DIR, else a built-in sample of --sample_images generated JPEGs.",
        ["bench"])
_define(flags.DEFINE_list, "image_size", ["224", "224"], "Output HEIGHT,WIDTH in pixels "
        "(one number: square).", ["bench"])
_define(flags.DEFINE_integer, "batch_size", 64, "Batch size (images).", ["bench"])
_define(flags.DEFINE_integer, "epochs", 2, "Epochs per candidate run.", ["bench"])
_define(flags.DEFINE_integer, "repeats", 5, "Runs per candidate, alternated round by round; "
        "medians and spread (min-max) reported.", ["bench"])
_define(flags.DEFINE_list, "compare", ["keras"], "Candidates to run beside pipeline "
        "(empty for none): pipeline_train, pipeline_train_nofast, pipeline_center_crop, keras, "
        "keras_crop, keras_aug, plain, generator, in_memory, decode_limit "
        "(pipeline/benchmarking/candidates.py).", ["bench"])
_define(flags.DEFINE_integer, "sample_images", 512, "Images in the built-in sample (when "
        "no --data_dir).", ["bench"])
_define(flags.DEFINE_integer, "seed", 0, {
    "bench": "The shuffle (and augmentation) seed every candidate gets.",
    "convert": "The seed of the random order the rows are written in (with --shuffle).",
}, ["bench", "convert"])
_define(flags.DEFINE_string, "on_error", "raise", {
    "bench": "What pipeline does with a bad file: 'raise' (the run fails, naming it) or "
             "'skip' (left out and recorded). The peers do what they do.",
    "convert": "What to do with a bad file, found by decoding every file first (as scan "
               "does): 'raise' (exit 1 naming each bad file and why; nothing is written) or "
               "'skip' (left out, counted and listed in the output and in dataset.json).",
}, ["bench", "convert"])
_define(flags.DEFINE_float, "max_spread", 0.25, "Spread (max-min)/median above which a "
        "figure is flagged as too wide to trust.", ["bench"])
_define(flags.DEFINE_bool, "profile", False, "Instead of peers, profile pipeline's stages "
        "(read, decode, resize, batch) and name the bottleneck.", ["bench"])
_define(flags.DEFINE_float, "target_images_per_sec", None, "With --profile: consumption "
        "rate to compare with (images/s). With --plan (required): the rate to feed, all "
        "accelerators together (e.g. 8 GPUs x 7000 = 56000).", ["bench"])
_define(flags.DEFINE_bool, "plan", False, "Instead of peers, a capacity plan: measure "
        "pipeline's cost per image (images per CPU-second) on these files and options, then "
        "print the cores and tf.data service workers of --worker_cores cores needed to feed "
        "--target_images_per_sec.", ["bench"])
_define(flags.DEFINE_integer, "worker_cores", 8, "With --plan: cores per tf.data service "
        "worker.", ["bench"])
_define(flags.DEFINE_float, "headroom", 1.25, "With --plan: spare capacity factor (>= 1; "
        "1.25 plans 25% more than the target).", ["bench"])
_define(flags.DEFINE_bool, "augment", False, "With --plan: measure train mode "
        "(Augment(random_resized_crop=True, horizontal_flip=True)) instead of eval.",
        ["bench"])
_define(flags.DEFINE_string, "profile_dir", None, "With --profile: write a TensorBoard "
        "profiler trace here.", ["bench"])
# scan, convert
_PILLOW_LIMIT = ("the default, the factories' too, is Pillow's decompression-bomb limit "
                 "(2 x PIL.Image.MAX_IMAGE_PIXELS)")
_define(flags.DEFINE_integer, "max_pixels", checks.DEFAULT_MAX_PIXELS, {
    "scan": "A file whose header claims more pixels (width x height) than this is a bad file, "
            f"refused before decoding; {_PILLOW_LIMIT}.",
    "convert": "A file whose header claims more pixels (width x height) than this is a bad "
               f"file for --on_error; {_PILLOW_LIMIT}.",
}, ["scan", "convert"])
_define(flags.DEFINE_bool, "follow_links", False, "Follow linked folders (loop-safe).",
        ["scan"])
_define(flags.DEFINE_integer, "num_shards", None, "Shards to write (default: ~1 per "
        "128 MiB).", ["convert"])
_define(flags.DEFINE_integer, "num_workers", None, "Writer threads.", ["convert"])
_define(flags.DEFINE_integer, "max_resolution", None, "Store each image re-encoded as a JPEG "
        "with its shorter side at this many pixels (never upscaled; EXIF orientation "
        "applied; write_tfrecords' max_resolution); default: the files' bytes unchanged.",
        ["convert"])
_define(flags.DEFINE_integer, "jpeg_quality", 90, "JPEG quality (1-100) of the images "
        "re-encoded by --max_resolution.", ["convert"])
_define(flags.DEFINE_bool, "shuffle", True, "Write the rows in a seeded random order "
        "(--seed), so that shards do not keep classes together; --noshuffle keeps the "
        "index order.", ["convert"])


def _manifest_help(text: str) -> Dict[str, str]:
    """One help text for ``convert`` and ``scan``, naming each one's manifest argument."""
    return {"convert": text.format(arg="SRC"), "scan": text.format(arg="SOURCE")}


_define(flags.DEFINE_string, "path_column", None, _manifest_help(
    "Manifest column of the image paths ({arg} a manifest; default: path)."), ["convert", "scan"])
_define(flags.DEFINE_list, "label_columns", None, {
    "convert": "Manifest label column(s) (SRC a manifest; default: label, if there is one).",
    "scan": "Manifest label column(s), counted per class (SOURCE a manifest; default: "
            "label, if there is one).",
}, ["convert", "scan"])
_define(flags.DEFINE_string, "root", None, _manifest_help(
    "Manifest root for relative paths ({arg} a manifest; default: its folder)."),
    ["convert", "scan"])
_define(flags.DEFINE_bool, "allow_outside_root", False, _manifest_help(
    "A manifest {arg} may name files outside its folder (absolute paths, ..)."),
    ["convert", "scan"])
# service
_define(flags.DEFINE_integer, "port", None, "TCP port to listen on (0: any free port).",
        ["service"])
_define(flags.DEFINE_string, "dispatcher_address", None, "worker: the dispatcher's "
        "HOST:PORT (required).", ["service"])
_define(flags.DEFINE_string, "worker_address", None, "worker: address to advertise "
        "(default localhost:<port>).", ["service"])
_define(flags.DEFINE_list, "worker_addresses", None, "dispatcher: fixed worker HOST:PORTs "
        "(needed for processing_mode='file').", ["service"])
_define(flags.DEFINE_string, "work_dir", None, "dispatcher: journal folder (fault "
        "tolerance).", ["service"])
_define(flags.DEFINE_bool, "fault_tolerant_mode", False, "dispatcher: journal state to "
        "--work_dir.", ["service"])
_define(flags.DEFINE_integer, "worker_timeout_ms", None, "dispatcher: worker heartbeat "
        "timeout.", ["service"])
_define(flags.DEFINE_integer, "heartbeat_interval_ms", None, "worker: heartbeat interval.",
        ["service"])
# shared
_define(flags.DEFINE_string, "json_out", None, {
    "bench": "Also write the figures (medians, spread, every run, the options) as JSON to "
             "this file.",
    "scan": "Also write the report (counts, histograms, bad files with their reasons) as "
            "JSON to this file.",
    "doctor": "Also write the stack report as JSON to this file.",
}, ["bench", "scan", "doctor"])
_define(flags.DEFINE_bool, "json", False, {
    "convert": "End with the result as one JSON line (num_examples, class_names, shards, "
               "skipped) instead of the summary line.",
    "doctor": "Print the report as JSON instead of aligned lines.",
}, ["convert", "doctor"])
_define(flags.DEFINE_bool, "progress", True, {
    "bench": "Show each candidate run's progress bar per epoch (stderr).",
    "scan": "Show a progress bar of the files decoded (stderr).",
    "convert": "Show progress bars of the files checked and of the records written (stderr).",
}, ["bench", "scan", "convert"])


# --- commands ----------------------------------------------------------------

@dataclasses.dataclass
class Command:
    """One command: its function, usage line, summary and positional arguments."""
    name: str
    fn: Callable[[List[str]], int]
    synopsis: str
    summary: str
    positionals: Tuple[Tuple[str, str], ...] = ()
    notes: str = ""
    title: str = ""
    arg_names: Dict[str, str] = dataclasses.field(default_factory=dict)
    check: Optional[Callable[[List[str]], None]] = None


COMMANDS: Dict[str, Command] = {}


def command(name: str, synopsis: str, summary: str, positionals=(), notes: str = "",
            title: str = "", arg_names: Optional[Dict[str, str]] = None,
            check: Optional[Callable[[List[str]], None]] = None):
    """Registers ``fn(argv) -> exit status`` as ``pipeline NAME``; argv[0] is NAME.

    ``arg_names`` maps the library's argument names that the command's
    errors may name (``directory``, ``output_dir``, ...) to what the user
    types (``SRC``, ``OUT``, ``--data_dir``); each of the command's flags
    maps to ``--flag`` without being listed.

    ``check(argv)`` raises the usage errors that argv and the flags alone
    settle (a missing argument, a bad flag value); ``main`` runs it before
    TensorFlow is imported, so such an error is answered at once. It must
    import no TensorFlow.
    """
    def deco(fn):
        COMMANDS[name] = Command(name, fn, synopsis, summary, tuple(positionals), notes,
                                 title or summary, dict(arg_names or {}), check)
        return fn
    return deco


def user_names(command_name: str, message: str) -> str:
    """``message`` (a library error) with the command's own names for its arguments.

    The library names its Python arguments: "`directory` does not exist",
    "Received: output_dir='x'", "`seed` must be an integer >= 0. Received:
    seed=-1". The user typed SRC, OUT, --seed: each name the command knows
    (``Command.arg_names`` and its flags) is replaced where it stands for the
    argument ("`name`", "name=").
    """
    c = COMMANDS[command_name]
    names = {f: f"--{f}" for f in command_flags(command_name)}
    names.update(c.arg_names)
    for py in sorted(names, key=len, reverse=True):
        user = names[py]
        message = message.replace(f"`{py}`", user).replace(f"`{py}=", f"`{user}=")
        message = re.sub(rf"(?<![\w`./-]){re.escape(py)}=", f"{user}=", message)
    return message


def _as_typed(values: Sequence[str]) -> str:
    """A list flag's value as the user types it: comma-separated (``a,b``), never a
    Python list."""
    return ",".join(str(v) for v in values)


# The command line as absl parsed it (``_parse_flags``), so that an error can echo a flag's
# value as it was typed (``_typed``), not as absl parsed it (``-1``, not ``-1.0``).
_ARGV: List[str] = []


def _typed(name: str) -> str:
    """The value of ``--name`` as the user typed it: the last one given (``--name=V``,
    ``--name V``, one dash or two), as absl takes the last. A value not on the command
    line (a default, a --flagfile's) is the parsed one read back (``_as_typed`` for a
    list)."""
    args = _ARGV[1:]
    args = args[:args.index("--")] if "--" in args else args
    takes_next = FLAGS[name].flag_type() != "bool"
    typed = None
    for k, a in enumerate(args):
        if not a.startswith("-"):
            continue
        key = a.lstrip("-")
        if key.startswith(name + "="):
            typed = key[len(name) + 1:]
        elif key == name and takes_next and k + 1 < len(args):
            typed = args[k + 1]
    if typed is not None:
        return typed
    value = FLAGS[name].value
    return _as_typed(value) if isinstance(value, list) else str(value)


def _received_args(argv: Sequence[str]) -> str:
    """``Received: ...``, the positional arguments after the command (``argv[1:]``) as
    typed on a shell's command line (quoted where needed), or ``none``."""
    args = list(argv[1:])
    return "Received: " + (shlex.join(args) if args else "none")


def usage_error(message: str) -> app.UsageError:
    """A usage error (exit status 2)."""
    return app.UsageError(message, exitcode=USAGE_ERROR)


def _probe_write(folder: str) -> Optional[str]:
    """None if a file can be created in the existing folder ``folder``, else why not.

    A real probe, not ``os.access`` (which says yes to root everywhere, /proc and
    /sys included): an anonymous temporary file, created and removed at once, so
    that nothing is left behind.
    """
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        return e.strerror or str(e)
    return None


def _nearest_existing(path: str) -> str:
    """``path`` or its nearest ancestor that exists (absolute)."""
    parent = os.path.abspath(path)
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    return parent


def _check_writable(flag: str) -> None:
    """Usage error unless the file ``--flag`` names can be written; leaves nothing.

    Every command's output-file flag (``--json_out``) is checked so, before
    any work, so that a typo fails at once, naming the flag and its value: an
    existing file is opened for append (nothing truncated), a new one is probed
    by creating an anonymous temporary file in its folder.
    """
    path = getattr(FLAGS, flag)
    given = f"Received: --{flag}={path!r}"
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise usage_error(f"--{flag} is a folder, not a file. {given}")
    existing = _nearest_existing(folder)
    if not os.path.isdir(existing):
        raise usage_error(f"--{flag}: {existing!r} is a file, not a folder: cannot write "
                          f"{path!r} in it. {given}")
    if existing != folder:
        raise usage_error(f"--{flag}: folder {folder!r} does not exist. {given}")
    if os.path.exists(path):
        try:
            with open(path, "a"):
                pass
            why = None
        except OSError as e:
            why = e.strerror or str(e)
    else:
        why = _probe_write(folder)
    if why:
        raise usage_error(f"--{flag}: cannot write {path!r} ({why}). {given}")


def _check_folder(label: str, path: str) -> None:
    """Usage error unless the local folder ``path`` (named ``label``: ``--flag`` or
    ``OUT``) exists or can be created and written; leaves nothing (a probe file is
    created and removed in it, or in its nearest existing ancestor). URIs are left
    to their file system."""
    if "://" in path:
        return
    given = f"Received: {label}={path!r}"
    full = os.path.abspath(path)
    if os.path.exists(full) and not os.path.isdir(full):
        raise usage_error(f"{label} must be a folder (new or existing); {path!r} is a file. "
                          f"{given}")
    parent = _nearest_existing(full)
    if not os.path.isdir(parent):
        raise usage_error(f"{label}: cannot create folder {path!r}: {parent!r} is a file. "
                          f"{given}")
    why = _probe_write(parent)
    if why:
        what = (f"cannot write in folder {path!r}" if parent == full else
                f"cannot create folder {path!r} in {parent!r}")
        raise usage_error(f"{label}: {what} ({why}). {given}")


class _DropLogLines:
    """A ``logging`` filter that drops the records whose message starts with ``prefix``."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def filter(self, record) -> bool:
        return not record.getMessage().startswith(self.prefix)


def _check_port() -> None:
    """Usage error unless --port is None or a TCP port number (0 = any free port)."""
    if FLAGS.port is not None and not 0 <= FLAGS.port <= 65535:
        raise usage_error(f"--port must be 0-65535. Received: --port={_typed('port')}")


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread as Ctrl-C raises ``KeyboardInterrupt`` (a
    ``BaseException``: no ``except Exception`` on the way swallows it)."""


def _raise_terminated(signum, frame) -> None:
    raise _Terminated()


def _start_server(what: str, fn, **kw) -> None:
    """Runs ``fn(**kw)`` until Ctrl-C or SIGTERM (either: "pipeline: stopped (...)", exit
    status 0); a server that cannot start (gRPC's RuntimeError, or a port taken since the
    check before TensorFlow loaded) is a usage error naming --port."""
    from pipeline import distribute

    _release_port()  # the library checks it again, right before the server binds it
    signal.signal(signal.SIGTERM, _raise_terminated)  # the servers wait in Python
    try:
        fn(**kw)
    except distribute.PortInUseError as e:
        raise _port_in_use_error(what, e.port, e.reason) from None
    except (KeyboardInterrupt, _Terminated) as e:  # while waiting, starting or serving
        how = "Ctrl-C" if isinstance(e, KeyboardInterrupt) else "SIGTERM"
        print(f"pipeline: stopped ({how})", flush=True)
        sys.stderr.flush()
        # At once: a gRPC server's shutdown at interpreter exit can wait for tens of
        # seconds (seen on a loaded machine), which reads as Ctrl-C not working.
        os._exit(0)
    except RuntimeError as e:
        if "Could not start" not in str(e):
            raise
        raise usage_error(f"cannot start the {what} on --port={kw.get('port')}: {e} "
                          "(is the port in use? choose another --port)") from None


def _json_safe(obj):
    """``obj`` with NaN and infinite floats as None (JSON has no NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _write_text(path: Optional[str], text: str, flag: str = "json_out") -> None:
    """Writes ``text`` to ``path`` (``--flag``; checked before the work by
    ``_check_writable``): any failure is a usage error naming the flag."""
    if path:
        try:
            with open(path, "w") as f:
                f.write(text)
        except OSError as e:
            raise usage_error(f"--{flag}: cannot write {path!r} ({e.strerror or e}). "
                              f"Received: --{flag}={path!r}") from None
        print(f"wrote {path}")


def _write_json(path: Optional[str], obj) -> None:
    """Writes ``obj`` as JSON to ``path`` (``--json_out``): a failure is a usage error
    naming --json_out."""
    if path:
        _write_text(path, json.dumps(_json_safe(obj), indent=2, default=str,
                                     allow_nan=False))


def _size_arg(values: Sequence[str]):
    """--image_size as the library takes it (``pipeline.config.check_image_size`` checks
    it): HEIGHT,WIDTH as a tuple, one number N as N, each value an int where it reads as
    one."""
    def number(v):
        try:
            return int(v)
        except ValueError:
            return v
    size = tuple(number(v) for v in values)
    return size[0] if len(size) == 1 else size


def _check_source(label: str, path: str, manifest_ok: bool = True) -> None:
    """Usage error unless the local ``path`` (named ``label``: SOURCE, SRC, --data_dir)
    exists and is a folder (or, with ``manifest_ok``, a .csv / .jsonl manifest). URIs
    (anything with ``://``) are left to the library's checks after TensorFlow loads."""
    if "://" in path:
        return
    given = f"Received: {label}={path!r}"
    accepted = ("a folder or a manifest (.csv / .jsonl; .tsv / .json too)" if manifest_ok
                else "a folder")
    if not os.path.exists(path):
        raise usage_error(f"{label} does not exist: {path!r}")  # as the library says it
    if os.path.isdir(path) or (manifest_ok and checks.is_manifest(path)):
        return
    raise usage_error(f"{label} must be {accepted}; {path!r} is a file"
                      + (" that is neither" if manifest_ok else "") + f". {given}")


def _positive(name: str) -> None:
    value = getattr(FLAGS, name)
    if value is not None and value <= 0:
        raise usage_error(f"--{name} must be > 0. Received: --{name}={_typed(name)}")


# The figures bench prints for pipeline: each must be a number (never NaN or inf).
BENCH_FIGURES = ("images_per_sec", "steady_images_per_cpu_sec", "steady_cpu_cores_used",
                 "first_batch_sec", "epoch_start_cpu_sec", "peak_rss_mb")


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _too_few_images(num_images: int, data_dir: Optional[str]) -> str:
    """Why ``num_images`` images per epoch give no figure at --batch_size, and the values
    that do (``bench.MIN_TIMED_BATCHES`` timed batches per epoch)."""
    from pipeline import sample
    from pipeline.benchmarking import harness as bench
    bs = FLAGS.batch_size
    need = bench.min_images(bs)
    if FLAGS.data_dir is None and not os.environ.get(sample.DATA_DIR_ENV):
        more = f"--sample_images={need} (the smallest that works with --batch_size={bs})"
        given = f"--sample_images={FLAGS.sample_images}"
    else:
        source = "--data_dir" if FLAGS.data_dir is not None else f"${sample.DATA_DIR_ENV}"
        more = f"a {source} with at least {need} images (the fewest for --batch_size={bs})"
        given = f"{source}={data_dir!r}"
    fit = bench.max_batch_size(num_images)
    works = [more] + ([f"--batch_size={fit} or smaller"] if fit else [])
    timed = bench.timed_batches(num_images, bs)
    if timed == 0:
        what = "one batch per epoch"
        got = "nothing would be timed"
    else:
        what = f"{timed + 1} batches per epoch"
        rest = num_images - bs
        got = (f"{timed} batch{'es' if timed > 1 else ''} ({rest} image{'s' if rest > 1 else ''}) "
               "per epoch would be timed")
    return (f"--batch_size={bs} with {num_images} images is {what}, and bench times only what "
            "comes after each epoch's first batch (images/s, images per CPU-second): "
            f"{got}, and a figure needs at least {bench.MIN_TIMED_BATCHES} timed batches per "
            f"epoch. What works: {', or '.join(works)}. Received: --batch_size={bs}, {given}")


def _bench_names() -> List[str]:
    """pipeline, then the --compare candidates."""
    return ["pipeline"] + [c for c in FLAGS.compare if c and c != "pipeline"]


# bench's three reports (modes) and the flags each reads; a flag not listed here
# (--data_dir, --image_size, --batch_size, --sample_images, --on_error, --json_out) is
# read by all three; so is --[no]progress, which --profile has no bars for (a script may
# pass --noprogress to every run).
BENCH_MODES = ("peers", "plan", "profile")
BENCH_MODE_FLAGS = {
    "compare": ("peers",), "max_spread": ("peers",),
    "epochs": ("peers", "plan"), "repeats": ("peers", "plan"), "seed": ("peers", "plan"),
    "target_images_per_sec": ("plan", "profile"),
    "worker_cores": ("plan",), "headroom": ("plan",), "augment": ("plan",),
    "profile_dir": ("profile",),
}
_MODE_NAMES = {"peers": "the peer comparison", "plan": "--plan",
               "profile": "--profile"}
_MODE_DOES = {"peers": "bench compares peers in eval mode",
              "plan": "--plan measures pipeline alone",
              "profile": "--profile profiles pipeline's stages alone"}


def _bench_mode() -> str:
    return "plan" if FLAGS.plan else "profile" if FLAGS.profile else "peers"


def _flag_as_typed(name: str) -> str:
    """``--name=VALUE`` as typed (``--name`` / ``--noname`` for a boolean)."""
    return FLAGS[name].serialize() if FLAGS[name].flag_type() == "bool" else \
        f"--{name}={_typed(name)}"


def _check_bench_mode() -> None:
    """Usage error for a flag given that the chosen report does not read (it would be
    ignored without a word): each named as typed, with the reports that read it."""
    mode = _bench_mode()
    wrong: Dict[Tuple[str, ...], List[str]] = {}
    for name, modes in BENCH_MODE_FLAGS.items():
        if FLAGS[name].present and mode not in modes:
            wrong.setdefault(modes, []).append(name)
    if not wrong:
        return
    parts = []
    for modes, names in wrong.items():
        if set(modes) <= {"plan", "profile"}:
            where = "with " + " or ".join(_MODE_NAMES[m] for m in modes)
        else:
            where = "to " + " or ".join(_MODE_NAMES[m] for m in modes)
        parts.append(f"{', '.join('--' + n for n in names)} "
                     f"{'applies' if len(names) == 1 else 'apply'} {where} only")
    if mode == "peers":
        modes = {m for ms in wrong for m in ms}
        why = f"without {'it' if len(modes) == 1 else 'them'} {_MODE_DOES['peers']}"
    else:
        why = f"{_MODE_DOES[mode]}; the peer comparison is bench without --plan or --profile"
    given = [n for ns in wrong.values() for n in ns]
    raise usage_error("; ".join(parts) + f" ({why}). Received: "
                      + ", ".join(_flag_as_typed(n) for n in given))


def _check_bench(argv: List[str]) -> None:
    from pipeline.benchmarking import harness as bench
    from pipeline.benchmarking import candidates  # noqa: F401  the registry (imports no TensorFlow)
    from pipeline import sample

    if len(argv) != 1:
        raise usage_error(f"bench takes no positional arguments. {_received_args(argv)}")
    if FLAGS.plan and FLAGS.profile:
        raise usage_error("--plan and --profile are separate reports: give one. "
                          f"Received: {FLAGS['plan'].serialize()}, "
                          f"{FLAGS['profile'].serialize()}")
    _check_bench_mode()  # first: a flag the report ignores is the mistake to name
    for name in ("batch_size", "epochs", "repeats", "sample_images"):
        _positive(name)
    if FLAGS.data_dir is not None:
        _check_source("--data_dir", FLAGS.data_dir, manifest_ok=False)
    if FLAGS.max_spread is not None and not (math.isfinite(FLAGS.max_spread)
                                             and FLAGS.max_spread > 0):
        raise usage_error(f"--max_spread must be a finite number > 0. Received: "
                          f"--max_spread={_typed('max_spread')}")
    unknown = [c for c in _bench_names() if c not in bench.CANDIDATES]
    if unknown and _bench_mode() == "peers":
        raise usage_error(f"--compare: unknown candidate(s) {_as_typed(unknown)}; known: "
                          f"{', '.join(sorted(bench.CANDIDATES))}. Received: "
                          f"--compare={_as_typed(FLAGS.compare)}")
    _positive("target_images_per_sec")
    if FLAGS.plan:
        if FLAGS.target_images_per_sec is None:
            raise usage_error("--plan needs --target_images_per_sec (images/s to feed, e.g. "
                              "56000 for 8 GPUs x 7000). Received: --plan, no "
                              "--target_images_per_sec")
        _positive("worker_cores")
        if FLAGS.headroom < 1:
            raise usage_error(f"--headroom must be >= 1. Received: --headroom="
                              f"{_typed('headroom')}")
    if FLAGS.json_out:  # before the runs, not after them
        _check_writable("json_out")
    if FLAGS.profile_dir:
        _check_folder("--profile_dir", FLAGS.profile_dir)
    # The peer bench and --plan time each epoch after its first batch (--profile times
    # its own count of images): too few batches per epoch is refused before any work.
    if not FLAGS.profile and FLAGS.data_dir is None and not os.environ.get(sample.DATA_DIR_ENV) and \
            bench.timed_batches(FLAGS.sample_images, FLAGS.batch_size) < bench.MIN_TIMED_BATCHES:
        raise usage_error(_too_few_images(FLAGS.sample_images, None))  # before generating it


@command("bench", f"{PROG} bench [--data_dir=DIR] [--compare=keras,...] [--flags]",
         "Throughput (images/s after each epoch's first batch), images per CPU-second, time "
         "to first batch and peak RSS of pipeline beside peers, each run in its own "
         "subprocess, alternated --repeats times; medians and spread (min-max) printed, "
         "and a line when the spread is too wide to trust.",
         notes="Exit status: 0 every candidate ran, 1 a candidate failed (pipeline or a "
               "peer; the others' figures are still printed), 2 a usage error. "
               "The optional peers (torch, TF1 queue runners, Keras PyDataset, legacy "
               "ImageDataGenerator, NVIDIA DALI) are in benchmarks/candidates.py: run "
               "benchmarks/peers.py for them. --profile: per-stage costs and the bottleneck "
               "instead. --plan --target_images_per_sec=N [--worker_cores=8] [--augment]: "
               "a capacity plan instead (cores and tf.data service workers to feed N "
               "images/s, from the measured images per CPU-second; pipeline.capacity).",
         title="images/s, images per CPU-second, first batch, peak RSS beside peers",
         arg_names={"directory": "--data_dir"}, check=_check_bench)
def cmd_bench(argv: List[str]) -> int:
    from pipeline.benchmarking import harness as bench
    from pipeline.benchmarking import candidates  # noqa: F401  registers the public-API candidates
    from pipeline import sample

    names = _bench_names()
    # The library checks --image_size, --seed and --on_error (pipeline.config), before any
    # work; its ValueError is a usage error in main.
    size = bench.check_spec({"image_size": _size_arg(FLAGS.image_size),
                             "batch_size": FLAGS.batch_size, "seed": FLAGS.seed,
                             "options": {"on_error": FLAGS.on_error}},
                            names if _bench_mode() == "peers" else ["pipeline"])["image_size"]
    timed = not FLAGS.profile  # --profile times its own count of images
    data_dir = sample.default_data_dir(FLAGS.data_dir, num_images=FLAGS.sample_images,
                                        shared=False)
    from pipeline import index
    idx = index.index_directory(data_dir)  # a missing --data_dir: the error comes first, alone
    if timed and bench.timed_batches(len(idx), FLAGS.batch_size) < bench.MIN_TIMED_BATCHES:
        raise usage_error(_too_few_images(len(idx), data_dir))
    logging.info("pipeline bench: data in %s", data_dir)
    if FLAGS.plan:
        from pipeline import capacity
        try:
            cost = capacity.measure_cost(data_dir, size, FLAGS.batch_size, augment=FLAGS.augment,
                                         epochs=FLAGS.epochs, repeats=FLAGS.repeats,
                                         on_error=FLAGS.on_error, seed=FLAGS.seed,
                                         progress=FLAGS.progress)
        except ValueError as e:
            raise usage_error(str(e))
        plan = capacity.capacity_plan(FLAGS.target_images_per_sec, cost["images_per_cpu_sec"],
                                      worker_cores=FLAGS.worker_cores, headroom=FLAGS.headroom,
                                      measurement=cost)
        print(plan.table())
        _write_json(FLAGS.json_out, plan.to_dict())
        return 0
    if FLAGS.profile:
        import pipeline
        report = pipeline.profile(
            data_dir, target_images_per_sec=FLAGS.target_images_per_sec,
            profile_dir=FLAGS.profile_dir, image_size=tuple(size),
            batch_size=FLAGS.batch_size, on_error=FLAGS.on_error)
        print(report.table())
        _write_json(FLAGS.json_out, report.to_dict())
        return 0
    from pipeline import report as report_lib
    print(report_lib.stack_line())
    spec = {"data_dir": data_dir, "image_size": size, "batch_size": FLAGS.batch_size,
            "epochs": FLAGS.epochs, "seed": FLAGS.seed, "num_images": len(idx),
            "options": {"on_error": FLAGS.on_error}}
    print(bench_header(len(idx), FLAGS.data_dir or os.environ.get(sample.DATA_DIR_ENV) or
                       sample.data_dir_label(data_dir), size), flush=True)
    # A peer that fails (e.g. Keras on a bad file) is reported, not fatal.
    try:
        results = bench.run_candidates(names, spec, repeats=FLAGS.repeats,
                                       progress=FLAGS.progress, keep_going=True,
                                       quality_images=bench.QUALITY_IMAGES)
    except bench.Interrupted as e:
        if e.rounds:
            print(bench.format_table(e.results))
        raise Stopped(f"Ctrl-C; {e.rounds} of {FLAGS.repeats} round(s) finished"
                      + (", their medians above" if e.rounds else "")) from None
    if not bench.ok(results["pipeline"]):
        print(bench.format_table(results))
        print(f"pipeline bench: pipeline failed: {results['pipeline'].get('error', '')}",
              file=sys.stderr)
        return 1
    unmeasured = [k for k in BENCH_FIGURES if not _finite(results["pipeline"].get(k))]
    if unmeasured:  # e.g. --on_error=skip left too few images per epoch: nothing timed
        per_epoch = results["pipeline"].get("num_images")
        raise usage_error(f"no figure for {', '.join(unmeasured)}: pipeline delivered "
                          f"{per_epoch} of the {len(idx)} images per epoch (the others were "
                          f"bad files, --on_error={FLAGS.on_error}), so "
                          + _too_few_images(per_epoch, data_dir))
    print(bench.format_table(results))
    failed = [n for n in names[1:] if "error" in results[n]]
    for n in failed:
        lines = results[n]["error"].strip().splitlines() or [""]
        print(f"{n} FAILED: {lines[-1]}")
    print()
    for line in bench.headline(results, "pipeline", names[1:], max_spread=FLAGS.max_spread):
        print(line)
    main = results["pipeline"]
    out = {k: main[k] for k in ("images_per_sec", "first_batch_sec", "peak_rss_mb",
                                "num_images", "epochs", "images_per_cpu_sec",
                                "steady_images_per_cpu_sec", "cpu_cores_used",
                                "rss_after_import_mb") + tuple(
                                    k for k in ("psnr_db_median", "psnr_db_p5", "psnr_images")
                                    if k in main)}
    out["spread"] = bench.spread(main)
    out["options"] = dict(spec, data_dir=sample.data_dir_label(data_dir), candidates=names,
                          repeats=FLAGS.repeats)
    out["compare"] = {n: results[n] for n in names[1:]}
    for n in names[1:]:
        for key, suffix in (("images_per_sec", ""), ("steady_images_per_cpu_sec", "_cpu")):
            r = bench.ratio(results, "pipeline", n, key)
            if r is not None:
                out[f"speedup_vs_{n}{suffix}"] = r
    _write_json(FLAGS.json_out, out)
    if failed:
        print(f"pipeline bench: {len(failed)} candidate{'s' if len(failed) > 1 else ''} "
              f"failed ({', '.join(failed)}): exit status 1", file=sys.stderr)
        return 1
    return 0


def bench_header(num_files: int, folder: str, size: Sequence[int]) -> str:
    """bench's line before its runs: the files the index kept (by extension: a bad one
    counts), ``folder`` as given (``--data_dir``) and the options, e.g. "31 files in
    data/good, image_size=224x224, batch_size=64, epochs=2, repeats=5 (alternated), 8 CPUs"."""
    return (f"{_count(num_files, 'file')} in {folder}, image_size={size[0]}x{size[1]}, "
            f"batch_size={FLAGS.batch_size}, epochs={FLAGS.epochs}, repeats={FLAGS.repeats} "
            f"(alternated), {os.cpu_count()} CPUs")


def _check_manifest_flags(label: str, source: str) -> None:
    """Usage error when a manifest flag is given and ``source`` (named ``label``: SRC,
    SOURCE) is not a manifest."""
    kw = _manifest_flags()
    if kw and not checks.is_manifest(source):
        raise usage_error(
            f"{', '.join('--' + k for k in kw)} appl{'ies' if len(kw) == 1 else 'y'} to a "
            f"manifest {label} (.csv / .jsonl) only; {label} is not one. "
            f"Received: {label}={source!r}")


def _check_scan(argv: List[str]) -> None:
    if len(argv) != 2:
        raise usage_error(f"scan takes one SOURCE. {_received_args(argv)}")
    _positive("max_pixels")
    _check_manifest_flags("SOURCE", argv[1])
    _check_source("SOURCE", argv[1])
    if FLAGS.json_out:  # fail before the scan, not after it (and create nothing yet)
        _check_writable("json_out")


@command("scan", f"{PROG} scan SOURCE [--json_out=FILE] [--flags]",
         "One parallel pass over SOURCE with the factories' decoder: counts per class and "
         "format, file sizes, image sides, extension mismatches and bad files.",
         positionals=(("SOURCE", "a folder (class sub-folders or flat), a manifest "
                                 "(.csv / .jsonl) or an s3:// / gs:// folder"),),
         notes="Exit status: 0 every file decodes, 1 bad files found, 2 SOURCE cannot be "
               "scanned (missing, no images) or a usage error.",
         title="what a folder / manifest holds: classes, formats, sizes, bad files",
         arg_names={"directory": "SOURCE", "source": "SOURCE", "manifest": "SOURCE"},
         check=_check_scan)
def cmd_scan(argv: List[str]) -> int:
    from pipeline import report as report_lib

    report = report_lib.scan(argv[1], max_pixels=FLAGS.max_pixels,
                             follow_links=FLAGS.follow_links, progress=FLAGS.progress,
                             allow_outside_root=FLAGS.allow_outside_root,
                             path_column=FLAGS.path_column,
                             label_columns=FLAGS.label_columns, root=FLAGS.root)
    print(report.table())
    _write_text(FLAGS.json_out, report.to_json(indent=2))
    return 1 if report.bad_files else 0


def _manifest_flags() -> dict:
    """The manifest flags given (for a manifest SRC), as write_tfrecords' arguments."""
    return {k: getattr(FLAGS, k) for k in ("path_column", "label_columns", "root",
                                           "allow_outside_root") if getattr(FLAGS, k)}


def _about_path(error: Exception, path: str) -> bool:
    """True when ``error`` (an OSError or a TensorFlow error) names ``path`` or a file
    in it."""
    text = " ".join(str(x) for x in (getattr(error, "filename", None),
                                     getattr(error, "filename2", None), error) if x)
    return any(p and p in text for p in {path.rstrip("/"), os.path.abspath(path)})


def _check_convert(argv: List[str]) -> None:
    if len(argv) != 3:
        raise usage_error(f"convert takes SRC and OUT. {_received_args(argv)}")
    _positive("num_shards")
    _positive("num_workers")
    _positive("max_pixels")
    _check_manifest_flags("SRC", argv[1])
    src, out = argv[1], argv[2]
    _check_source("SRC", src)
    if "://" not in src and "://" not in out:
        real_out = os.path.realpath(out)

        def inside(folder: str) -> bool:
            real = os.path.realpath(folder)
            return real_out == real or real_out.startswith(real.rstrip(os.sep) + os.sep)

        if os.path.isdir(src) and inside(src):
            raise usage_error(
                f"OUT must not be SRC or a folder inside it: the shards and dataset.json "
                f"would be written among SRC's images. Received: OUT={out!r}, SRC={src!r}")
        if os.path.isfile(src) and checks.is_manifest(src):
            root = FLAGS.root or os.path.dirname(os.path.abspath(src))
            named = f"--root={FLAGS.root!r}" if FLAGS.root else "the manifest's folder"
            if "://" not in root and inside(root):
                raise usage_error(
                    f"OUT must not be the manifest's root ({named}) or a folder inside it: "
                    f"the shards and dataset.json would be written among its images. "
                    f"Received: OUT={out!r}, SRC={src!r}")
    _check_folder("OUT", out)


@command("convert", f"{PROG} convert SRC OUT [--num_shards=N] [--flags]",
         "Writes TFRecord shards (encoded bytes + label + path) that from_tfrecords reads, "
         "after decoding every file once with the factories' decoder (as scan) to apply "
         "--on_error.",
         positionals=(("SRC", "a class-folder directory or a manifest (.csv / .jsonl)"),
                      ("OUT", "the output folder for the shards and their metadata")),
         notes="Prints a summary line (records, shards, OUT, time, bad files skipped); "
               "--json prints the result as one JSON line instead. "
               "Exit status: 0 written (with --on_error=skip, the bad files left out are "
               "listed before that line), 1 bad files with --on_error=raise (each named "
               "with its reason; nothing written), 2 a usage error or SRC cannot be read.",
         title="write TFRecord shards",
         arg_names={"directory": "SRC", "source": "SRC", "manifest": "SRC",
                    "output_dir": "OUT"}, check=_check_convert)
def cmd_convert(argv: List[str]) -> int:
    from pipeline import read, shards

    if read.exists(argv[2]) and not read.isdir(argv[2]):  # OUT may be a URI: tf.io.gfile
        raise usage_error(f"OUT must be a folder (new or existing); {argv[2]!r} is a file. "
                          f"Received: OUT={argv[2]!r}")
    kw = _manifest_flags()
    # The library's warning on fewer shards than asked is said by the line below instead.
    quiet = _DropLogLines(shards.FEWER_SHARDS)
    logging.get_absl_logger().addFilter(quiet)
    started = time.perf_counter()
    try:
        meta = shards.write_tfrecords(
            argv[1], argv[2], FLAGS.num_shards, shuffle=FLAGS.shuffle, seed=FLAGS.seed,
            progress=FLAGS.progress, num_workers=FLAGS.num_workers, on_error=FLAGS.on_error,
            max_pixels=FLAGS.max_pixels, max_resolution=FLAGS.max_resolution,
            jpeg_quality=FLAGS.jpeg_quality, **kw)
    except shards.BadFilesError as e:
        n = len(e.records)
        head = (f"all {e.num_files} files are bad: nothing to write" if n == e.num_files
                and FLAGS.on_error == "skip" else
                f"{n} bad file{'s' if n > 1 else ''} of {e.num_files}; nothing written "
                "(--on_error=raise; --on_error=skip leaves them out)")
        print(f"pipeline convert: {head}:", file=sys.stderr)
        for r in e.records:
            print(f"  {r.path}: {r.reason}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001  a failure to write OUT is a usage error naming it
        import tensorflow as tf
        if isinstance(e, (OSError, tf.errors.OpError)) and _about_path(e, argv[2]):
            raise usage_error(f"OUT: cannot write {argv[2]!r} ({e}). "
                              f"Received: OUT={argv[2]!r}") from None
        raise
    finally:
        logging.get_absl_logger().removeFilter(quiet)
    skipped = meta["skipped"]
    if skipped:
        print(f"skipped {len(skipped)} bad file{'s' if len(skipped) > 1 else ''} of "
              f"{meta['num_examples'] + len(skipped)} (--on_error=skip):")
        for r in skipped:
            print(f"  {r['path']}: {r['reason']}")
    if FLAGS.num_shards is not None and len(meta["shards"]) < FLAGS.num_shards:
        print(f"wrote {len(meta['shards'])} shards, not --num_shards={FLAGS.num_shards}: "
              f"there are only {meta['num_examples']} files to write"
              + (f" ({len(skipped)} bad left out)" if skipped else "")
              + " and a shard holds at least one record (one file per shard)")
    if FLAGS.json:
        print(json.dumps({k: meta[k] for k in ("num_examples", "class_names", "shards",
                                                "skipped")}))
    else:
        print(convert_summary(meta, argv[2], time.perf_counter() - started))
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def convert_summary(meta: dict, out: str, seconds: float) -> str:
    """``convert``'s last line: what it wrote (``write_tfrecords``' ``meta``) to ``out``,
    and in how long, e.g. "wrote 9 records in 2 shards to out/ in 4.1 s (3 classes); 3 bad
    files skipped (listed above and in out/dataset.json)"."""
    n_classes = len(meta["class_names"] or [])
    classes = f" ({n_classes:,} class{'' if n_classes == 1 else 'es'})" if n_classes else ""
    skipped = len(meta["skipped"])
    sidecar = os.path.join(out, "dataset.json") if "://" not in out else \
        out.rstrip("/") + "/dataset.json"
    bad = (f"; {_count(skipped, 'bad file')} skipped (listed above and in {sidecar})"
           if skipped else "; no bad files")
    return (f"wrote {_count(meta['num_examples'], 'record')} in "
            f"{_count(len(meta['shards']), 'shard')} to {out} in {seconds:.1f} s{classes}{bad}")


# The service flags of one role only (--port is both roles').
SERVICE_ROLE_FLAGS = {
    "dispatcher": ("worker_addresses", "work_dir", "fault_tolerant_mode", "worker_timeout_ms"),
    "worker": ("dispatcher_address", "worker_address", "heartbeat_interval_ms"),
}
DISPATCHER_PORT = 5050
_HOST_PORT = re.compile(r"^(?:grpc://)?(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(\d+)$")


def _check_host_port(flag: str, value: str, typed: str) -> None:
    """Usage error unless ``value`` is HOST:PORT with a port 1-65535 (a grpc:// prefix and
    an [IPv6] host are accepted); ``typed`` is the flag's value as given."""
    m = _HOST_PORT.match(value.strip())
    if not m or not 1 <= int(m.group(2)) <= 65535:
        each = " (each of them)" if flag.endswith("es") else ""
        raise usage_error(f"--{flag}{each} must be HOST:PORT with a port 1-65535 (e.g. "
                          f"localhost:{DISPATCHER_PORT}); {value!r} is not. "
                          f"Received: --{flag}={typed}")


# The socket of the service port checked free before TensorFlow loads, held (bound, so no
# other server can take the port) until right before the server starts.
_HELD_PORT: List[socket.socket] = []


def _port_in_use_error(role: str, port: int, reason: str) -> app.UsageError:
    default = " (the dispatcher's default)" if FLAGS.port is None else ""
    return usage_error(f"cannot start the {role} on --port={port}{default}: the port is in "
                       f"use ({reason}); choose another --port"
                       + (" (0: any free port)" if role == "worker" else "")
                       + f". Received: --port={port}")


def _check_port_free(role: str, port: int) -> None:
    """Usage error if TCP ``port`` is in use: a plain bind (``checks.claim_port``). gRPC
    binds with SO_REUSEPORT, so a second dispatcher on the same port would otherwise start
    beside the first. The port stays bound (``_HELD_PORT``) while TensorFlow loads, so a
    second server started meanwhile fails here at once; the library checks it again right
    before the server binds (``distribute.PortInUseError``)."""
    try:
        _HELD_PORT.append(checks.claim_port(port))
    except OSError as e:
        raise _port_in_use_error(role, port, e.strerror or str(e)) from None


def _release_port() -> None:
    while _HELD_PORT:
        _HELD_PORT.pop().close()


def _check_service(argv: List[str]) -> None:
    role = argv[1] if len(argv) == 2 else None
    _check_port()
    if role not in ("dispatcher", "worker"):
        raise usage_error(
            f"service takes one ROLE, 'dispatcher' or 'worker'. {_received_args(argv)}")
    other = "worker" if role == "dispatcher" else "dispatcher"
    wrong = [f for f in SERVICE_ROLE_FLAGS[other] if FLAGS[f].present]
    if wrong:
        raise usage_error("; ".join(f"--{f} is a flag of the {other}, not the {role}"
                                    for f in wrong) + f". Received: service {role}")
    for name in ("worker_timeout_ms", "heartbeat_interval_ms"):
        if FLAGS[name].value is not None:
            _positive(name)
    if role == "dispatcher" and FLAGS.fault_tolerant_mode and not FLAGS.work_dir:
        raise usage_error("--fault_tolerant_mode needs --work_dir (the folder where the "
                          "dispatcher journals its state). Received: --fault_tolerant_mode, "
                          "no --work_dir")
    if role == "worker":
        if not FLAGS.dispatcher_address:
            raise usage_error("service worker needs --dispatcher_address=HOST:PORT. "
                              "Received: service worker, no --dispatcher_address")
        _check_host_port("dispatcher_address", FLAGS.dispatcher_address,
                         FLAGS.dispatcher_address)
    else:
        for address in FLAGS.worker_addresses or ():
            _check_host_port("worker_addresses", address, _as_typed(FLAGS.worker_addresses))
        if FLAGS.work_dir:
            _check_folder("--work_dir", FLAGS.work_dir)
    port = (DISPATCHER_PORT if role == "dispatcher" else 0) if FLAGS.port is None \
        else FLAGS.port
    if port != 0:
        _check_port_free(role, port)


@command("service", f"{PROG} service dispatcher|worker [--flags]",
         "Starts a tf.data service dispatcher or worker in this process (runs until "
         "stopped).",
         positionals=(("ROLE", "'dispatcher' or 'worker' (a worker needs "
                               "--dispatcher_address)"),),
         notes="Flags marked 'dispatcher:' or 'worker:' apply to that role only. See "
               "docs/scale-out.md for processing modes.",
         title="start a tf.data service dispatcher or worker", check=_check_service)
def cmd_service(argv: List[str]) -> int:
    try:
        _serve(argv[1])
    finally:
        _release_port()  # when the start failed before the server was tried
    return 0


def _serve(role: str) -> None:
    from pipeline import distribute

    if role == "dispatcher":
        _start_server(
            "dispatcher", distribute.run_dispatcher,
            port=DISPATCHER_PORT if FLAGS.port is None else FLAGS.port,
            worker_addresses=FLAGS.worker_addresses, work_dir=FLAGS.work_dir,
            fault_tolerant_mode=FLAGS.fault_tolerant_mode,
            worker_timeout_ms=FLAGS.worker_timeout_ms)
        return
    # The worker waits (in Python, so that Ctrl-C stops it) until the dispatcher answers:
    # say so first.
    print(f"pipeline service worker: waiting for the dispatcher at "
          f"{FLAGS.dispatcher_address} (until it answers; Ctrl-C stops)", flush=True)
    _start_server("worker", distribute.run_worker,
                  dispatcher_address=FLAGS.dispatcher_address, port=FLAGS.port or 0,
                  worker_address=FLAGS.worker_address,
                  heartbeat_interval_ms=FLAGS.heartbeat_interval_ms)


DOCTOR_PACKAGES = (("tensorflow", "tensorflow"), ("keras", "keras"), ("numpy", "numpy"),
                   ("tensorflow-io", "tensorflow-io"), ("Pillow", "pillow"))


def basic_stack() -> dict:
    """Versions of python and the main packages, and the CPU count (no imports)."""
    from importlib import metadata
    import platform

    out = {"python": platform.python_version()}
    for label, dist in DOCTOR_PACKAGES:
        try:
            out[label] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[label] = "not installed"
    out["cpus"] = os.cpu_count()
    if hasattr(os, "sched_getaffinity"):
        out["cpus_usable"] = len(os.sched_getaffinity(0))
    return out


def _check_doctor(argv: List[str]) -> None:
    if len(argv) != 1:
        raise usage_error(f"doctor takes no positional arguments. {_received_args(argv)}")
    if FLAGS.json_out:
        _check_writable("json_out")


@command("doctor", f"{PROG} doctor [--json] [--json_out=FILE]",
         "Prints the installed stack, one fact per aligned line: Python, TensorFlow, Keras, "
         "numpy, tensorflow-io (and whether its ops load), Pillow, the decoders, the "
         "filesystems, TensorFlow's C++ log level, the CPUs and the decode parallelism.",
         title="print the installed stack (versions, decoders, CPUs)", check=_check_doctor)
def cmd_doctor(argv: List[str]) -> int:
    try:
        import pipeline.stack as stack  # lazily: an optional module
    except ModuleNotFoundError as e:
        if e.name != "pipeline.stack":
            raise
        stack = None
    if stack is not None:
        info = stack.doctor()
        text = stack.format_doctor(info)
    else:
        info = basic_stack()
        width = max((len(str(k)) for k in info), default=0)
        text = "\n".join(f"{str(k):<{width}}  {v}" for k, v in info.items())
    print(json.dumps(info, indent=2, default=str) if FLAGS.json else text)
    _write_json(FLAGS.json_out, info)
    return 0


# --- help ----------------------------------------------------------------------

# The default a flag's help shows where its absl default (None) stands for one that
# depends on other arguments.
HELP_DEFAULTS = {"port": f"dispatcher {DISPATCHER_PORT}, worker 0"}


def _flag_line(name: str, command_name: str) -> List[str]:
    f = FLAGS[name]
    if f.flag_type() == "bool":
        left = f"--[no]{name}"
    else:
        kind = f.flag_type()
        left = f"--{name}=" + ("A,B" if "list" in kind else
                               {"int": "N", "float": "X"}.get(kind, "VALUE"))
    default = HELP_DEFAULTS.get(name) or (f.default_as_str.strip("'") if f.default is not None
                                          else "none")
    text = f"{flag_help(name, command_name)} [default: {default}]"
    return [f"  {left}", f"      {text}"]


def command_flags(name: str) -> List[str]:
    """The flags of command ``name``, in definition order."""
    return [f for f, cmds in FLAG_COMMANDS.items() if name in cmds]


def command_help(name: str) -> str:
    """``pipeline NAME --help``: synopsis, positional arguments, its flags with defaults."""
    c = COMMANDS[name]
    out = [f"usage: {c.synopsis}", "", c.summary]
    if c.positionals:
        out += ["", "positional arguments:"]
        width = max(len(p) for p, _ in c.positionals)
        out += [f"  {p:<{width}}  {d}" for p, d in c.positionals]
    names = command_flags(name)
    out += ["", "flags:" if names else "flags: none"]
    for n in names:
        out += _flag_line(n, name)
    if c.notes:
        out += ["", c.notes]
    out += ["", f"{PROG} --help lists the commands; --helpfull every absl flag."]
    return "\n".join(out)


def main_help() -> str:
    """``pipeline --help``: the commands."""
    out = [f"usage: {PROG} <command> [ARGS] [--flags]", "", "commands:"]
    width = max(len(n) for n in COMMANDS)
    for n, c in COMMANDS.items():
        out.append(f"  {n:<{width}}  {c.title}")
    out += ["", f"{PROG} <command> --help shows a command's arguments and flags; "
                "--helpfull lists every absl flag (TensorFlow's included); "
                "--version prints the version.",
            "Exit status: 0 success, 1 the command failed (scan: bad files found; "
            "convert: bad files with --on_error=raise; bench: a candidate failed), "
            "2 usage error."]
    return "\n".join(out)


_HELP = ("--help", "-h", "-?", "--helpshort", "--help=true")
_HELPFULL = ("--helpfull",)


def _first_positional(args: Sequence[str]) -> Optional[str]:
    for a in args:
        if a == "--":
            return None
        if not a.startswith("-"):
            return a
    return None


def _did_you_mean(name: Optional[str]) -> str:
    """``: did you mean 'scan'?`` for a mistyped command (``difflib``), else ""."""
    close = difflib.get_close_matches(name or "", list(COMMANDS), n=1, cutoff=0.6)
    return f": did you mean {close[0]!r}?" if close else ""


def _error(command_name: Optional[str], message: str) -> int:
    """Prints a usage error (the message and the usage line, not the flag list): exit 2."""
    known = command_name in COMMANDS
    where = f"pipeline {command_name}" if known else "pipeline"
    usage = (COMMANDS[command_name].synopsis if known else
             f"{PROG} <{'|'.join(COMMANDS)}> [ARGS] [--flags]")
    hint = f"{PROG} {command_name} --help" if known else f"{PROG} --help"
    print(f"{where}: error: {message}\nusage: {usage}\n({hint} shows the arguments and flags)",
          file=sys.stderr)
    return USAGE_ERROR


def _parse_flags(argv: List[str]) -> List[str]:
    """absl's parse of ``argv``; a bad flag is a usage error (exit 2).

    TensorFlow is not imported yet. It defines absl flags of its own when it
    loads (``--helpfull`` lists them), so a flag that is neither pipeline's nor
    absl's is looked up again after ``import tensorflow``: the one usage error
    that waits for TensorFlow.
    """
    _ARGV[:] = argv
    try:
        return FLAGS(argv)
    except flags.UnrecognizedFlagError as e:
        if "tensorflow" in sys.modules or importlib.util.find_spec("tensorflow") is None:
            sys.exit(_error(_first_positional(argv[1:]), str(e)))
        FLAGS.unparse_flags()
        _import_tensorflow()
        return _parse_flags(argv)
    except flags.IllegalFlagValueError as e:
        sys.exit(_error(_first_positional(argv[1:]), flag_value_error(str(e))))
    except flags.Error as e:
        sys.exit(_error(_first_positional(argv[1:]), str(e)))


_FLAG_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false"}


def flag_value_error(absl_message: str) -> str:
    """absl's error for a value its parser refused ("flag --max_pixels=abc: invalid
    literal for int() with base 10: 'abc'") in the CLI's words: "--max_pixels must be
    an integer. Received: --max_pixels=abc" (the value as typed); a message of another
    form is returned as it is."""
    m = re.match(r"flag --([\w-]+)=", absl_message)
    if not m or m.group(1) not in FLAGS:
        return absl_message
    name = m.group(1)
    kind = _FLAG_KINDS.get(FLAGS[name].flag_type())
    if kind is None:
        return absl_message
    extra = f" (or --{name} / --no{name})" if kind == _FLAG_KINDS["bool"] else ""
    return f"--{name} must be {kind}{extra}. Received: --{name}={_typed(name)}"


class PlainLogFormatter(std_logging.Formatter):
    """pipeline's log lines on the command line, without absl's prefix (level letter,
    date, time, thread id, file:line): an info line as its message (``pipeline: ...``),
    a warning or an error after its level (``WARNING: ...``)."""

    def format(self, record) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if record.levelno >= std_logging.WARNING:
            return f"{record.levelname}: {message}"
        return message


@contextlib.contextmanager
def _plain_log_lines():
    """Within: absl's handler writes pipeline's log lines plainly (``PlainLogFormatter``)
    to the stderr of now (``sys.stderr``); both restored after."""
    handler = logging.get_absl_handler().python_handler
    old_formatter, old_stream = handler.formatter, handler.stream
    handler.setFormatter(PlainLogFormatter())
    handler.stream = sys.stderr
    try:
        yield
    finally:
        handler.setFormatter(old_formatter)
        handler.stream = old_stream


def main(argv: List[str]) -> int:
    """Runs the command named by ``argv[1]`` (flags already parsed); returns the exit status.

    The usage errors that argv alone settles (no such command, a flag of another
    command, the command's ``check``) come before ``import tensorflow``; then
    TensorFlow loads (``_import_tensorflow``) and the command runs.
    """
    name = argv[1] if len(argv) > 1 else None
    if name not in COMMANDS:
        guess = _did_you_mean(name)
        if guess:
            return _error(None, f"unknown command {name!r}{guess} (commands: "
                                f"{', '.join(COMMANDS)}). {_received_args(argv)}")
        return _error(None, f"expected a command, one of {', '.join(COMMANDS)}. "
                            f"{_received_args(argv)}")
    foreign = [f for f, cmds in FLAG_COMMANDS.items() if FLAGS[f].present and name not in cmds]
    if foreign:
        return _error(name, "; ".join(
            f"--{f} is not a flag of {name} (it belongs to {', '.join(FLAG_COMMANDS[f])})"
            for f in foreign))
    c = COMMANDS[name]
    try:
        if c.check is not None:
            c.check(argv[1:])  # what argv and the flags settle: before TensorFlow loads
        with _plain_log_lines():
            _import_tensorflow()
            return c.fn(argv[1:])
    except app.UsageError as e:
        return _error(name, user_names(name, str(e)))
    except (ValueError, OSError) as e:
        # Ordinary mistakes (a missing source, a bad option value, an output
        # folder that already holds shards): one line, exit status 2, naming
        # the arguments as the user typed them (SRC, OUT, --flag).
        return _error(name, user_names(name, str(e)))


class Stopped(KeyboardInterrupt):
    """Ctrl-C, with what was finished (the message of the one line ``run`` prints)."""


def run(argv: Optional[Sequence[str]] = None) -> None:
    """Entry point of ``python -m pipeline`` and the ``pipeline`` console script.

    Ctrl-C in any command ends it with one line on stderr ("pipeline: stopped
    (Ctrl-C)", and what was finished) and exit status 130 (128 + SIGINT).
    """
    try:
        _run(argv)
    except KeyboardInterrupt as e:
        how = str(e) if isinstance(e, Stopped) else "Ctrl-C"
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        print(f"pipeline: stopped ({how})", file=sys.stderr, flush=True)
        sys.exit(130)


def _run(argv: Optional[Sequence[str]] = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    args = argv[1:]
    head = args[:args.index("--")] if "--" in args else args
    if "--version" in head:  # answered before TensorFlow loads
        import pipeline  # pylint: disable=import-outside-toplevel
        print(f"{pipeline.DISTRIBUTION} {pipeline.__version__}")
        sys.exit(0)
    if any(a in _HELPFULL for a in head):
        _import_tensorflow()  # its absl flags are part of the full list
        print(main_help())
        print("\nAll flags (absl; TensorFlow's and absl's own included):\n")
        print(FLAGS.get_help())
        sys.exit(0)
    if any(a in _HELP for a in head):
        name = _first_positional(head)
        if name is None:
            print(main_help())
            sys.exit(0)
        if name not in COMMANDS:
            print(main_help(), file=sys.stderr)
            sys.exit(_error(None, f"unknown command {name!r}; one of {', '.join(COMMANDS)}"
                                  f"{_did_you_mean(name)}"))
        print(command_help(name))
        sys.exit(0)
    # TensorFlow loads in main, after the usage checks that argv alone settles.
    app.run(main, argv=argv, flags_parser=_parse_flags)


def _import_tensorflow() -> None:
    """``import tensorflow``, its start-up lines shown once.

    Help (``--help``, ``CMD --help``) and the usage errors that argv alone
    settles never call this: they import no TensorFlow. TensorFlow 2.21 writes
    its start-up lines twice while it loads; the repeats are dropped, and
    ``bench``'s candidate processes drop the lines shown here
    (``pipeline.native_stderr.import_tensorflow``).
    """
    from pipeline import native_stderr
    native_stderr.import_tensorflow()
