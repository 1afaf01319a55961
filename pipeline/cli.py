"""The command line: ``python -m pipeline <command> [ARGS] [--flags]``.

Commands: ``bench`` (throughput beside peers; ``--plan`` a capacity plan,
``--profile`` per-stage costs), ``scan`` (what a folder or manifest holds, bad
files), ``convert`` (TFRecord shards), ``service dispatcher|worker`` (a tf.data
service server), ``doctor`` (the installed stack). ``pipeline CMD --help`` shows
one command's arguments and flags.

Parsed by absl's argparse integration (``absl.flags.argparse_flags``), one
sub-parser per command; absl's own flags (``--helpfull`` lists them) go anywhere. A boolean flag is ``--name``, ``--noname`` or ``--name=true|false``;
one dash works as two. The command line checks only what the library cannot
(the arguments' count, the outputs it will write, which flags a mode reads,
service ports and roles); the rest is the library's: its ``ValueError`` is a
usage error in its own words, with the arguments named as the user typed them
(``user_names``). Exit status: 0 success, 1 a command's own failure (``scan``
found bad files, ``convert`` bad files with ``--on_error=raise``, a ``bench``
candidate failed), 2 a usage error or a source that cannot be read, 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
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
from typing import Dict, List, Optional, Sequence

from absl import app, logging
from absl.flags import argparse_flags

from pipeline import checks

USAGE_ERROR = 2
PROG = "python -m pipeline"
DISPATCHER_PORT = 5050


class Number(float):
    """A float flag's value that prints as typed (``-1``, not ``-1.0``)."""

    def __new__(cls, text: str):
        value = super().__new__(cls, text)
        value.text = text
        return value

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


def _list(text: str) -> List[str]:
    return [v for v in text.split(",") if v]


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help with each flag's default: ``[default: X]``."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and action.default is not argparse.SUPPRESS \
                and "[default:" not in text and action.help is not argparse.SUPPRESS:
            default = action.default
            default = ",".join(map(str, default)) if isinstance(default, list) else default
            text += f" [default: {'none' if default is None else default}]"
        return text.replace("%", "%%")


class _ParseError(Exception):
    """argparse's refusal, raised by ``_Parser.error`` (``run`` prints it: exit 2)."""

    def __init__(self, command: Optional[str], message: str):
        super().__init__(message)
        self.command = command


_KINDS = {"int": "an integer", "Number": "a number"}


class _Parser(argparse_flags.ArgumentParser):
    def error(self, message):
        command = self.prog[len(PROG) + 1:].split(" ")[0] or None
        m = re.match(r"argument (--\w+)(?:/--\w+)?: invalid (\w+) value: '(.*)'$", message)
        if m and m.group(2) in _KINDS:
            flag = m.group(1)
            message = f"{flag} must be {_KINDS[m.group(2)]}. Received: {flag}={m.group(3)}"
        m = re.match(r"argument <command>: invalid choice: '(.*?)'", message)
        if m:
            close = difflib.get_close_matches(m.group(1), list(COMMANDS), n=1, cutoff=0.6)
            message = (f"unknown command {m.group(1)!r}"
                       + (f": did you mean {close[0]!r}?" if close else "")
                       + f" (commands: {', '.join(COMMANDS)})")
        raise _ParseError(command, message)


# --- the commands and their flags ---------------------------------------------

COMMANDS = {
    "bench": "images/s, images per CPU-second, first batch, peak RSS beside peers",
    "scan": "what a folder / manifest holds: classes, formats, sizes, bad files",
    "convert": "write TFRecord shards",
    "service": "start a tf.data service dispatcher or worker",
    "doctor": "print the installed stack (versions, decoders, CPUs)",
}
USAGES = {"bench": "[--data_dir=DIR] [--compare=keras,...] [--flags]",
          "scan": "SOURCE [--json_out=FILE] [--flags]",
          "convert": "SRC OUT [--num_shards=N] [--flags]",
          "service": "dispatcher|worker [--flags]", "doctor": "[--json] [--json_out=FILE]"}
# The library's argument names that each command's errors may use -> what the user typed.
ARG_NAMES = {
    "bench": {"directory": "--data_dir", "data_dir": "--data_dir"},
    "scan": {"directory": "SOURCE", "source": "SOURCE", "manifest": "SOURCE"},
    "convert": {"directory": "SRC", "source": "SRC", "manifest": "SRC", "output_dir": "OUT"},
}
EPILOGS = {
    "bench": "Exit status: 0 every candidate ran, 1 a candidate failed (the others' figures "
             "are still printed), 2 a usage error. The optional peers (torch, DALI, ...) are "
             "in benchmarks/candidates.py (benchmarks/peers.py runs them).",
    "scan": "Exit status: 0 every file decodes, 1 bad files found, 2 SOURCE cannot be "
            "scanned or a usage error.",
    "convert": "Prints a summary line; --json prints the result as one JSON line instead. "
               "Exit status: 0 written, 1 bad files with --on_error=raise (each named; "
               "nothing written), 2 a usage error or SRC cannot be read.",
    "service": "Flags marked 'dispatcher:' or 'worker:' apply to that role only. See "
               "docs/scale-out.md for processing modes.",
}
_BOOLS: Dict[str, set] = {}  # command -> its boolean flags (--name, --noname)


class _Bool(argparse.Action):
    """absl's boolean: ``--name`` sets it, ``--noname`` clears it."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not option_string.startswith("--no"))


def _flag(p, command: str, name: str, default, help_text: str, kind=str, metavar=None):
    if isinstance(default, bool):
        _BOOLS.setdefault(command, set()).add(name)
        p.add_argument(f"--{name}", f"--no{name}", dest=name, action=_Bool, default=default,
                       help=help_text)
    else:
        p.add_argument(f"--{name}", type=kind, default=default, help=help_text,
                       metavar=metavar or {int: "N", Number: "X", _list: "A,B"}.get(kind, "VALUE"))


def build_parser() -> _Parser:
    """The parser of ``python -m pipeline``: one sub-parser per command (``COMMANDS``)."""
    lines = [f"  {n:<8} {t}" for n, t in COMMANDS.items()]
    top = _Parser(prog=PROG, formatter_class=_Formatter, allow_abbrev=False,
                  usage=f"{PROG} <command> [ARGS] [--flags]",
                  description="commands:\n" + "\n".join(lines),
                  epilog=f"{PROG} <command> --help shows a command's arguments and flags; "
                         "--helpfull also lists absl's flags. Exit status: 0 success, 1 the "
                         "command failed (scan: bad files found; convert: bad files with "
                         "--on_error=raise; bench: a candidate failed), 2 usage error.")
    top.add_argument("--version", action="store_true", help="print the version and exit")
    sub = top.add_subparsers(dest="command", metavar="<command>", help=argparse.SUPPRESS,
                             parser_class=_Parser)
    ps = {n: sub.add_parser(n, prog=f"{PROG} {n}", usage=f"{PROG} {n} {USAGES[n]}",
                            description=t, epilog=EPILOGS.get(n),
                            formatter_class=_Formatter, allow_abbrev=False)
          for n, t in COMMANDS.items()}
    b, s, c, v, d = (ps[n] for n in COMMANDS)
    _flag(b, "bench", "data_dir", None, "Class-folder directory; default: $PIPELINE_DATA_DIR, "
          "else a built-in sample of --sample_images generated JPEGs.", metavar="DIR")
    _flag(b, "bench", "image_size", ["224", "224"], "Output HEIGHT,WIDTH in pixels (one "
          "number: square).", _list, "H,W")
    _flag(b, "bench", "batch_size", 64, "Batch size (images).", int)
    _flag(b, "bench", "epochs", 2, "Epochs per candidate run.", int)
    _flag(b, "bench", "repeats", 5, "Runs per candidate, alternated round by round; medians "
          "and spread (min-max) reported.", int)
    _flag(b, "bench", "compare", ["keras"], "Candidates to run beside pipeline (empty for "
          "none), e.g. keras, keras_crop, keras_aug, plain, generator, in_memory, "
          "decode_limit, pipeline_train (pipeline/benchmarking/candidates.py).", _list)
    _flag(b, "bench", "sample_images", 512, "Images in the built-in sample (when no "
          "--data_dir).", int)
    _flag(b, "bench", "seed", 0, "The shuffle (and augmentation) seed every candidate gets.", int)
    _flag(b, "bench", "on_error", "raise", "What pipeline does with a bad file: 'raise' or "
          "'skip' (left out and recorded). The peers do what they do.")
    _flag(b, "bench", "max_spread", Number("0.25"), "Spread (max-min)/median above which a "
          "figure is flagged as too wide to trust.", Number)
    _flag(b, "bench", "profile", False, "Instead of peers, profile pipeline's stages (read, "
          "decode, resize, batch) and name the bottleneck.")
    _flag(b, "bench", "plan", False, "Instead of peers, a capacity plan: measure pipeline's "
          "images per CPU-second here, then print the cores and tf.data service workers of "
          "--worker_cores cores needed to feed --target_images_per_sec.")
    _flag(b, "bench", "target_images_per_sec", None, "With --plan (required): the rate to "
          "feed, all accelerators together (e.g. 8 GPUs x 7000 = 56000). With --profile: "
          "the consumption rate to compare with (images/s).", Number)
    _flag(b, "bench", "worker_cores", 8, "With --plan: cores per tf.data service worker.", int)
    _flag(b, "bench", "headroom", Number("1.25"), "With --plan: spare capacity factor (>= 1).",
          Number)
    _flag(b, "bench", "augment", False, "With --plan: measure train mode (random resized "
          "crop + flip) instead of eval.")
    _flag(b, "bench", "profile_dir", None, "With --profile: write a TensorBoard profiler "
          "trace here.", metavar="DIR")
    s.add_argument("source", metavar="SOURCE", help="a folder (class sub-folders or flat), a "
                   "manifest (.csv / .jsonl) or an s3:// / gs:// folder")
    c.add_argument("source", metavar="SRC", help="a class-folder directory or a manifest "
                   "(.csv / .jsonl)")
    c.add_argument("out", metavar="OUT", help="the output folder for the shards and their "
                   "metadata")
    bomb = ("; the default, the factories' too, is Pillow's decompression-bomb limit "
            "(2 x PIL.Image.MAX_IMAGE_PIXELS)")
    _flag(s, "scan", "max_pixels", checks.DEFAULT_MAX_PIXELS, "A file whose header claims "
          "more pixels (width x height) than this is a bad file, refused before decoding"
          + bomb + ".", int)
    _flag(s, "scan", "follow_links", False, "Follow linked folders (loop-safe).")
    _flag(c, "convert", "num_shards", None, "Shards to write (default: ~1 per 128 MiB).", int)
    _flag(c, "convert", "num_workers", None, "Writer threads.", int)
    _flag(c, "convert", "max_resolution", None, "Store each image re-encoded as a JPEG with "
          "its shorter side at this many pixels (never upscaled); default: the files' bytes "
          "unchanged.", int)
    _flag(c, "convert", "jpeg_quality", 90, "JPEG quality (1-100) of the images re-encoded "
          "by --max_resolution.", int)
    _flag(c, "convert", "shuffle", True, "Write the rows in a seeded random order (--seed), "
          "so that shards do not keep classes together; --noshuffle keeps the index order.")
    _flag(c, "convert", "seed", 0, "The seed of the random order the rows are written in "
          "(with --shuffle).", int)
    _flag(c, "convert", "on_error", "raise", "What to do with a bad file, found by decoding "
          "every file first (as scan does): 'raise' (exit 1 naming each bad file; nothing "
          "written) or 'skip' (left out, listed in the output and in dataset.json).")
    _flag(c, "convert", "max_pixels", checks.DEFAULT_MAX_PIXELS, "A file whose header claims "
          "more pixels (width x height) than this is a bad file for --on_error" + bomb + ".",
          int)
    for p, name, arg in ((c, "convert", "SRC"), (s, "scan", "SOURCE")):
        _flag(p, name, "path_column", None, f"Manifest column of the image paths ({arg} a "
              "manifest; default: path).")
        _flag(p, name, "label_columns", None, f"Manifest label column(s) ({arg} a manifest; "
              "default: label, if there is one).", _list)
        _flag(p, name, "root", None, f"Manifest root for relative paths ({arg} a manifest; "
              "default: its folder).", metavar="DIR")
        _flag(p, name, "allow_outside_root", False, f"A manifest {arg} may name files outside "
              "its folder (absolute paths, ..).")
    v.add_argument("role", metavar="ROLE", choices=("dispatcher", "worker"),
                   help="'dispatcher' or 'worker' (a worker needs --dispatcher_address)")
    _flag(v, "service", "port", None, "TCP port to listen on (0: any free port). "
          f"[default: dispatcher {DISPATCHER_PORT}, worker 0]", int)
    _flag(v, "service", "dispatcher_address", None, "worker: the dispatcher's HOST:PORT "
          "(required).", metavar="HOST:PORT")
    _flag(v, "service", "worker_address", None, "worker: address to advertise (default "
          "localhost:<port>).", metavar="HOST:PORT")
    _flag(v, "service", "heartbeat_interval_ms", None, "worker: heartbeat interval.", int)
    _flag(v, "service", "worker_addresses", None, "dispatcher: fixed worker HOST:PORTs "
          "(needed for processing_mode='file').", _list)
    _flag(v, "service", "work_dir", None, "dispatcher: journal folder (fault tolerance).",
          metavar="DIR")
    _flag(v, "service", "fault_tolerant_mode", False, "dispatcher: journal state to "
          "--work_dir.")
    _flag(v, "service", "worker_timeout_ms", None, "dispatcher: worker heartbeat timeout.", int)
    for p, name, what in ((b, "bench", "the figures (medians, spread, every run, the "
                           "options)"), (s, "scan", "the report (counts, histograms, bad "
                                                    "files with their reasons)"),
                          (d, "doctor", "the stack report")):
        _flag(p, name, "json_out", None, f"Also write {what} as JSON to this file.",
              metavar="FILE")
    _flag(c, "convert", "json", False, "End with the result as one JSON line (num_examples, "
          "class_names, shards, skipped) instead of the summary line.")
    _flag(d, "doctor", "json", False, "Print the report as JSON instead of aligned lines.")
    for p, name, what in ((b, "bench", "each candidate run's progress bar per epoch"),
                          (s, "scan", "a progress bar of the files decoded"),
                          (c, "convert", "progress bars of the files checked and written")):
        _flag(p, name, "progress", True, f"Show {what} (stderr).")
    top.commands = ps
    return top


def command_flags(name: str) -> List[str]:
    """The flags of command ``name``, as its ``--help`` lists them."""
    return [a.dest for a in build_parser().commands[name]._actions
            if a.option_strings and argparse.SUPPRESS not in (a.default, a.dest)
            and a.dest != "undefok"]


def command_help(name: str) -> str:
    """``pipeline NAME --help``."""
    return build_parser().commands[name].format_help()


def main_help() -> str:
    """``pipeline --help``: the commands."""
    return build_parser().format_help()


def _normalize(argv: Sequence[str]) -> List[str]:
    """absl's spellings in argparse's: ``-flag`` -> ``--flag``, ``--b=true|false`` ->
    ``--b`` / ``--nob`` for a boolean ``b``; a boolean with another value is an error."""
    command = next((a for a in argv if a in COMMANDS), None)
    bools = _BOOLS.get(command, set())
    out = []
    for a in argv:
        if a == "--":
            out += argv[len(out):]
            break
        if re.match(r"^-[a-z]\w+", a):
            a = "-" + a
        name, eq, value = a[2:].partition("=")
        if a.startswith("--") and eq and name in bools:
            if value.lower() not in ("true", "false", "1", "0"):
                raise _ParseError(command, f"--{name} must be true or false (or --{name} / "
                                           f"--no{name}). Received: {a}")
            a = f"--{'' if value.lower() in ('true', '1') else 'no'}{name}"
        out.append(a)
    return out


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` (``argv[0]`` the program) parsed; a usage error raises ``_ParseError``."""
    parser = build_parser()
    argv = _normalize(list(argv[1:]))
    command = next((a for a in argv if a in COMMANDS), None)
    if command and {"-h", "--help"} & set(argv[:argv.index(command)]):
        argv = [command, "--help"]  # `--help CMD` is `CMD --help`
    try:
        args, rest = parser.parse_known_args(argv)
    except _ParseError as e:
        if e.command is None and str(e).startswith("unknown command"):
            raise _ParseError(None, f"{e}. Received: {shlex.join(argv)}") from None
        raise
    if args.version:
        import pipeline  # pylint: disable=import-outside-toplevel
        print(f"{pipeline.DISTRIBUTION} {pipeline.__version__}")
        sys.exit(0)
    if rest:
        flags_ = [a[2:].split("=")[0] for a in rest if a.startswith("--")]
        owners = {f: [n for n in COMMANDS if f in command_flags(n)] for f in flags_}
        raise _ParseError(args.command, f"unrecognized arguments: {shlex.join(rest)}" + "".join(
            f" (--{f} is a flag of {', '.join(o)})" for f, o in owners.items() if o))
    if args.command is None:
        raise _ParseError(None, f"expected a command, one of {', '.join(COMMANDS)}. Received: "
                                + (shlex.join(argv) or "none"))
    args.given = {a.split("=")[0].lstrip("-") for a in argv if a.startswith("-")}
    return args


def user_names(command_name: str, message: str, flag_names: Sequence[str] = ()) -> str:
    """``message`` (a library error) with the command's own names for its arguments.

    The library names its Python arguments ("`directory` does not exist",
    "Received: output_dir='x'", "seed=-1"); the user typed SRC, OUT, --seed: each
    name the command knows (``ARG_NAMES`` and its flags) is replaced where it stands
    for the argument ("`name`", "name=").
    """
    names = {f: f"--{f}" for f in (flag_names or command_flags(command_name))}
    names.update(ARG_NAMES.get(command_name, {}))
    for py in sorted(names, key=len, reverse=True):
        user = names[py]
        message = message.replace(f"`{py}`", user).replace(f"`{py}=", f"`{user}=")
        message = re.sub(rf"(?<![\w`./-]){re.escape(py)}=", f"{user}=", message)
    return message


def usage_error(message: str) -> app.UsageError:
    """A usage error (exit status 2)."""
    return app.UsageError(message, exitcode=USAGE_ERROR)


def _error(command_name: Optional[str], message: str) -> int:
    """Prints a usage error and the usage line: exit status 2."""
    where = f"pipeline {command_name}" if command_name else "pipeline"
    hint = f"{PROG} {command_name} --help" if command_name else f"{PROG} --help"
    usage = (build_parser().commands[command_name].format_usage() if command_name
             else f"usage: {PROG} <{'|'.join(COMMANDS)}> [ARGS] [--flags]\n")
    print(f"{where}: error: {message}\n{usage}({hint} shows the arguments and flags)",
          file=sys.stderr)
    return USAGE_ERROR


# --- what only the command line can check: its outputs, its sources, its modes --------

def _probe(folder: str) -> Optional[str]:
    """None if a file can be created in ``folder`` (a real probe, removed at once:
    ``os.access`` says yes to root even in /proc), else why not."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as e:
        return e.strerror or str(e)


def _check_writable(label: str, path: str) -> None:
    """Usage error unless the file ``path`` (``label``: ``--json_out``) can be written; an
    existing file is opened for append (nothing truncated), a new one probed."""
    given = f"Received: {label}={path!r}"
    folder = existing = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if os.path.isdir(path):
        raise usage_error(f"{label} is a folder, not a file. {given}")
    if not os.path.isdir(existing):
        raise usage_error(f"{label}: {existing!r} is a file, not a folder: cannot write "
                          f"{path!r} in it. {given}")
    if existing != folder:
        raise usage_error(f"{label}: folder {folder!r} does not exist. {given}")
    try:
        why = open(path, "a").close() if os.path.exists(path) else _probe(folder)
    except OSError as e:
        why = e.strerror or str(e)
    if why:
        raise usage_error(f"{label}: cannot write {path!r} ({why}). {given}")


def _check_folder(label: str, path: str) -> None:
    """Usage error unless the local folder ``path`` (``label``: ``--profile_dir``, OUT)
    exists or can be created and written; leaves nothing. URIs are their file system's."""
    if "://" in path:
        return
    full, given = os.path.abspath(path), f"Received: {label}={path!r}"
    if os.path.exists(full) and not os.path.isdir(full):
        raise usage_error(f"{label} must be a folder (new or existing); {path!r} is a file. "
                          f"{given}")
    parent = full
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise usage_error(f"{label}: cannot create folder {path!r}: {parent!r} is a file. "
                          f"{given}")
    why = _probe(parent)
    if why:
        what = (f"cannot write in folder {path!r}" if parent == full else
                f"cannot create folder {path!r} in {parent!r}")
        raise usage_error(f"{label}: {what} ({why}). {given}")


def _check_source(label: str, path: str, manifest_ok: bool = True) -> None:
    """Usage error unless the local ``path`` (``label``: SOURCE, SRC, --data_dir) is a folder
    (or a .csv / .jsonl manifest): answered before TensorFlow loads."""
    if "://" in path:
        return
    if not os.path.exists(path):
        raise usage_error(f"{label} does not exist: {path!r}")  # as the library says it
    if not (os.path.isdir(path) or (manifest_ok and checks.is_manifest(path))):
        raise usage_error(
            f"{label} must be " + ("a folder or a manifest (.csv / .jsonl; .tsv / .json too)"
                                   f"; {path!r} is a file that is neither" if manifest_ok
                                   else f"a folder; {path!r} is a file")
            + f". Received: {label}={path!r}")


def _typed(args, name: str) -> str:
    """``--name=VALUE`` as typed (``--name`` / ``--noname`` for a boolean)."""
    value = getattr(args, name)
    if isinstance(value, bool):
        return f"--{'' if value else 'no'}{name}"
    return f"--{name}={','.join(value) if isinstance(value, list) else value}"


# bench's reports (modes) and the flags only some of them read; the others (--data_dir,
# --image_size, --batch_size, --sample_images, --on_error, --json_out, --progress) all read.
BENCH_MODE_FLAGS = {
    "compare": ("peers",), "max_spread": ("peers",),
    "epochs": ("peers", "plan"), "repeats": ("peers", "plan"), "seed": ("peers", "plan"),
    "target_images_per_sec": ("plan", "profile"),
    "worker_cores": ("plan",), "headroom": ("plan",), "augment": ("plan",),
    "profile_dir": ("profile",),
}
_MODE_NAMES = {"peers": "the peer comparison", "plan": "--plan", "profile": "--profile"}
_MODE_DOES = {"peers": "bench compares peers in eval mode",
              "plan": "--plan measures pipeline alone",
              "profile": "--profile profiles pipeline's stages alone"}


def _check_bench(args) -> None:
    """What the harness and the library do not check: a flag the chosen report would ignore,
    --plan with --profile, the outputs, a sample too small to time; then the harness's and
    the capacity plan's own checks, before TensorFlow loads."""
    from pipeline import capacity, sample
    from pipeline.benchmarking import candidates, harness  # noqa: F401  (no TensorFlow)

    mode = "plan" if args.plan else "profile" if args.profile else "peers"
    if args.plan and args.profile:
        raise usage_error("--plan and --profile are separate reports: give one. "
                          "Received: --plan, --profile")
    wrong: Dict[tuple, List[str]] = {}
    for name, modes in BENCH_MODE_FLAGS.items():
        if {name, f"no{name}"} & args.given and mode not in modes:
            wrong.setdefault(modes, []).append(name)
    if wrong:
        parts = [f"{', '.join('--' + n for n in ns)} {'applies' if len(ns) == 1 else 'apply'} "
                 + ("with " if set(ms) <= {"plan", "profile"} else "to ")
                 + " or ".join(_MODE_NAMES[m] for m in ms) + " only" for ms, ns in wrong.items()]
        modes = {m for ms in wrong for m in ms}
        why = (f"without {'it' if len(modes) == 1 else 'them'} {_MODE_DOES['peers']}"
               if mode == "peers" else f"{_MODE_DOES[mode]}; the peer comparison is bench "
                                       "without --plan or --profile")
        raise usage_error("; ".join(parts) + f" ({why}). Received: "
                          + ", ".join(_typed(args, n) for ns in wrong.values() for n in ns))
    if args.plan and args.target_images_per_sec is None:
        raise usage_error("--plan needs --target_images_per_sec (images/s to feed, e.g. 56000 "
                          "for 8 GPUs x 7000). Received: --plan, no --target_images_per_sec")
    if args.data_dir is not None:
        _check_source("--data_dir", args.data_dir, manifest_ok=False)
    harness.check_run(args.batch_size, args.sample_images, args.epochs, args.repeats,
                      args.max_spread, args.target_images_per_sec)
    unknown = harness.unknown_candidates(args.compare) if mode == "peers" else []
    if unknown:
        raise usage_error(f"--compare: unknown candidate(s) {','.join(unknown)}; known: "
                          f"{', '.join(sorted(harness.CANDIDATES))}. Received: "
                          f"{_typed(args, 'compare')}")
    if args.plan:
        capacity.capacity_plan(args.target_images_per_sec, 1.0, args.worker_cores,
                               args.headroom)  # its checks, before the measurement
    if args.json_out:
        _check_writable("--json_out", args.json_out)
    if args.profile_dir:
        _check_folder("--profile_dir", args.profile_dir)
    if not args.profile and args.data_dir is None and not os.environ.get(sample.DATA_DIR_ENV):
        _check_timed(args, args.sample_images, None)  # before the sample is generated


def _check_timed(args, num_images: int, data_dir: Optional[str], why: str = "") -> None:
    """Usage error when ``num_images`` per epoch give fewer than the harness's
    ``MIN_TIMED_BATCHES`` timed batches at --batch_size, naming the values that work."""
    from pipeline import sample
    from pipeline.benchmarking import harness as h
    bs = args.batch_size
    timed = h.timed_batches(num_images, bs)
    if timed >= h.MIN_TIMED_BATCHES:
        return
    if data_dir is None:
        more = (f"--sample_images={h.min_images(bs)} (the smallest that works with "
                f"--batch_size={bs})")
        given = f"--sample_images={args.sample_images}"
    else:
        source = "--data_dir" if args.data_dir is not None else f"${sample.DATA_DIR_ENV}"
        more = f"a {source} with at least {h.min_images(bs)} images (the fewest for --batch_size={bs})"
        given = f"{source}={data_dir!r}"
    fit = h.max_batch_size(num_images)
    rest = num_images - bs
    got = ("nothing would be timed" if timed == 0 else
           f"{timed} batch{'es' if timed > 1 else ''} ({rest} image{'s' if rest > 1 else ''}) "
           "per epoch would be timed")
    raise usage_error(
        f"{why}--batch_size={bs} with {num_images} images is "
        + ("one batch" if timed == 0 else f"{timed + 1} batches") + " per epoch, and bench "
        "times only what comes after each epoch's first batch (images/s, images per "
        f"CPU-second): {got}, and a figure needs at least {h.MIN_TIMED_BATCHES} timed batches "
        f"per epoch. What works: {', or '.join([more] + ([f'--batch_size={fit} or smaller'] if fit else []))}. "
        f"Received: --batch_size={bs}, {given}")


# The figures bench prints for pipeline: each must be a number (never NaN or inf).
BENCH_FIGURES = ("images_per_sec", "steady_images_per_cpu_sec", "steady_cpu_cores_used",
                 "first_batch_sec", "epoch_start_cpu_sec", "peak_rss_mb")


def cmd_bench(args) -> int:
    import pipeline
    from pipeline import capacity, index, sample
    from pipeline import report as report_lib
    from pipeline.benchmarking import harness as h

    names = ["pipeline"] + [c for c in args.compare if c != "pipeline"]
    size = tuple(int(v) if re.fullmatch(r"[-+]?\d+", v) else v for v in args.image_size)
    size = h.check_spec({"image_size": size[0] if len(size) == 1 else size,
                         "batch_size": args.batch_size, "seed": args.seed,
                         "options": {"on_error": args.on_error}},
                        names if not (args.plan or args.profile) else ["pipeline"])["image_size"]
    data_dir = sample.default_data_dir(args.data_dir, num_images=args.sample_images,
                                        shared=False)
    idx = index.index_directory(data_dir)  # a missing --data_dir: the error comes first, alone
    if not args.profile:
        _check_timed(args, len(idx), data_dir)
    logging.info("pipeline bench: data in %s", data_dir)
    if args.plan:
        cost = capacity.measure_cost(data_dir, size, args.batch_size, augment=args.augment,
                                     epochs=args.epochs, repeats=args.repeats,
                                     on_error=args.on_error, seed=args.seed,
                                     progress=args.progress)
        report = capacity.capacity_plan(args.target_images_per_sec, cost["images_per_cpu_sec"],
                                        worker_cores=args.worker_cores,
                                        headroom=args.headroom, measurement=cost)
    if args.profile:
        report = pipeline.profile(data_dir, target_images_per_sec=args.target_images_per_sec,
                                  profile_dir=args.profile_dir, image_size=tuple(size),
                                  batch_size=args.batch_size, on_error=args.on_error)
    if args.plan or args.profile:
        print(report.table())
        _write_json(args.json_out, report.to_dict())
        return 0
    print(report_lib.stack_line())
    spec = {"data_dir": data_dir, "image_size": size, "batch_size": args.batch_size,
            "epochs": args.epochs, "seed": args.seed, "num_images": len(idx),
            "options": {"on_error": args.on_error}}
    label = args.data_dir or os.environ.get(sample.DATA_DIR_ENV) or sample.data_dir_label(data_dir)
    print(bench_header(args, len(idx), label, size), flush=True)
    try:  # a peer that fails (e.g. Keras on a bad file) is reported, not fatal
        results = h.run_candidates(names, spec, repeats=args.repeats, progress=args.progress,
                                   keep_going=True, quality_images=h.QUALITY_IMAGES)
    except h.Interrupted as e:
        if e.rounds:
            print(h.format_table(e.results))
        raise Stopped(f"Ctrl-C; {e.rounds} of {args.repeats} round(s) finished"
                      + (", their medians above" if e.rounds else "")) from None
    main = results["pipeline"]
    if not h.ok(main):
        print(h.format_table(results))
        print(f"pipeline bench: pipeline failed: {main.get('error', '')}", file=sys.stderr)
        return 1
    unmeasured = [k for k in BENCH_FIGURES if not isinstance(main.get(k), (int, float))
                  or not math.isfinite(main[k])]
    if unmeasured:  # e.g. --on_error=skip left too few images per epoch: nothing timed
        _check_timed(args, main.get("num_images"), data_dir, why=(
            f"no figure for {', '.join(unmeasured)}: pipeline delivered {main.get('num_images')}"
            f" of the {len(idx)} images per epoch (the others were bad files, "
            f"--on_error={args.on_error}), so "))
    print(h.format_table(results))
    failed = [n for n in names[1:] if "error" in results[n]]
    for n in failed:
        print(f"{n} FAILED: {(results[n]['error'].strip().splitlines() or [''])[-1]}")
    print()
    for line in h.headline(results, "pipeline", names[1:], max_spread=args.max_spread):
        print(line)
    keys = ("images_per_sec", "first_batch_sec", "peak_rss_mb", "num_images", "epochs",
            "images_per_cpu_sec", "steady_images_per_cpu_sec", "cpu_cores_used",
            "rss_after_import_mb", "psnr_db_median", "psnr_db_p5", "psnr_images")
    out = {k: main[k] for k in keys if k in main}
    out["spread"] = h.spread(main)
    out["options"] = dict(spec, data_dir=sample.data_dir_label(data_dir), candidates=names,
                          repeats=args.repeats)
    out["compare"] = {n: results[n] for n in names[1:]}
    for n in names[1:]:
        for key, suffix in (("images_per_sec", ""), ("steady_images_per_cpu_sec", "_cpu")):
            r = h.ratio(results, "pipeline", n, key)
            if r is not None:
                out[f"speedup_vs_{n}{suffix}"] = r
    _write_json(args.json_out, out)
    if failed:
        print(f"pipeline bench: {len(failed)} candidate{'s' if len(failed) > 1 else ''} "
              f"failed ({', '.join(failed)}): exit status 1", file=sys.stderr)
        return 1
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def bench_header(args, num_files: int, folder: str, size: Sequence[int]) -> str:
    """bench's line before its runs: the files the index kept (by extension: a bad one
    counts), ``folder`` as given (``--data_dir``) and the options."""
    return (f"{_count(num_files, 'file')} in {folder}, image_size={size[0]}x{size[1]}, "
            f"batch_size={args.batch_size}, epochs={args.epochs}, repeats={args.repeats} "
            f"(alternated), {os.cpu_count()} CPUs")


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
    """Writes ``text`` to ``path`` (``--flag``, checked before the work): a failure is a
    usage error naming the flag."""
    if path:
        try:
            with open(path, "w") as f:
                f.write(text)
        except OSError as e:
            raise usage_error(f"--{flag}: cannot write {path!r} ({e.strerror or e}). "
                              f"Received: --{flag}={path!r}") from None
        print(f"wrote {path}")


def _write_json(path: Optional[str], obj) -> None:
    if path:
        _write_text(path, json.dumps(_json_safe(obj), indent=2, default=str, allow_nan=False))


def _manifest_flags(args) -> dict:
    """The manifest flags given, as the library's arguments."""
    return {k: getattr(args, k) for k in ("path_column", "label_columns", "root",
                                          "allow_outside_root") if getattr(args, k)}


def _check_manifest_flags(args, label: str) -> None:
    kw = _manifest_flags(args)
    if kw and not checks.is_manifest(args.source):
        raise usage_error(
            f"{', '.join('--' + k for k in kw)} appl{'ies' if len(kw) == 1 else 'y'} to a "
            f"manifest {label} (.csv / .jsonl) only; {label} is not one. "
            f"Received: {label}={args.source!r}")


def _check_scan(args) -> None:
    _check_manifest_flags(args, "SOURCE")
    _check_source("SOURCE", args.source)
    if args.json_out:  # fail before the scan, not after it
        _check_writable("--json_out", args.json_out)


def cmd_scan(args) -> int:
    from pipeline import report as report_lib
    report = report_lib.scan(args.source, max_pixels=args.max_pixels,
                             follow_links=args.follow_links, progress=args.progress,
                             **_manifest_flags(args))
    print(report.table())
    _write_text(args.json_out, report.to_json(indent=2))
    return 1 if report.bad_files else 0


def _about_path(error: Exception, path: str) -> bool:
    """True when ``error`` (an OSError or a TensorFlow error) names ``path`` or a file in it."""
    text = " ".join(str(x) for x in (getattr(error, "filename", None),
                                     getattr(error, "filename2", None), error) if x)
    return any(p and p in text for p in {path.rstrip("/"), os.path.abspath(path)})


def _check_convert(args) -> None:
    _check_manifest_flags(args, "SRC")
    src, out = args.source, args.out
    _check_source("SRC", src)
    if "://" not in src and "://" not in out:
        real_out = os.path.realpath(out)

        def inside(folder: str) -> bool:
            real = os.path.realpath(folder)
            return real_out == real or real_out.startswith(real.rstrip(os.sep) + os.sep)

        if os.path.isdir(src) and inside(src):
            raise usage_error(
                "OUT must not be SRC or a folder inside it: the shards and dataset.json would "
                f"be written among SRC's images. Received: OUT={out!r}, SRC={src!r}")
        root = args.root or os.path.dirname(os.path.abspath(src))
        if os.path.isfile(src) and "://" not in root and inside(root):
            named = f"--root={args.root!r}" if args.root else "the manifest's folder"
            raise usage_error(
                f"OUT must not be the manifest's root ({named}) or a folder inside it: the "
                "shards and dataset.json would be written among its images. "
                f"Received: OUT={out!r}, SRC={src!r}")
    _check_folder("OUT", out)


def cmd_convert(args) -> int:
    from pipeline import read, shards

    if read.exists(args.out) and not read.isdir(args.out):  # OUT may be a URI: tf.io.gfile
        raise usage_error(f"OUT must be a folder (new or existing); {args.out!r} is a file. "
                          f"Received: OUT={args.out!r}")
    quiet = _DropLogLines(shards.FEWER_SHARDS)  # the line below says it instead
    logging.get_absl_logger().addFilter(quiet)
    started = time.perf_counter()
    try:
        meta = shards.write_tfrecords(
            args.source, args.out, args.num_shards, shuffle=args.shuffle, seed=args.seed,
            progress=args.progress, num_workers=args.num_workers, on_error=args.on_error,
            max_pixels=args.max_pixels, max_resolution=args.max_resolution,
            jpeg_quality=args.jpeg_quality, **_manifest_flags(args))
    except shards.BadFilesError as e:
        n = len(e.records)
        head = (f"all {e.num_files} files are bad: nothing to write" if n == e.num_files
                and args.on_error == "skip" else
                f"{n} bad file{'s' if n > 1 else ''} of {e.num_files}; nothing written "
                "(--on_error=raise; --on_error=skip leaves them out)")
        print(f"pipeline convert: {head}:", file=sys.stderr)
        for r in e.records:
            print(f"  {r.path}: {r.reason}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001  a failure to write OUT is a usage error naming it
        import tensorflow as tf
        if isinstance(e, (OSError, tf.errors.OpError)) and _about_path(e, args.out):
            raise usage_error(f"OUT: cannot write {args.out!r} ({e}). "
                              f"Received: OUT={args.out!r}") from None
        raise
    finally:
        logging.get_absl_logger().removeFilter(quiet)
    skipped = meta["skipped"]
    if skipped:
        print(f"skipped {len(skipped)} bad file{'s' if len(skipped) > 1 else ''} of "
              f"{meta['num_examples'] + len(skipped)} (--on_error=skip):")
        for r in skipped:
            print(f"  {r['path']}: {r['reason']}")
    if args.num_shards is not None and len(meta["shards"]) < args.num_shards:
        print(f"wrote {len(meta['shards'])} shards, not --num_shards={args.num_shards}: "
              f"there are only {meta['num_examples']} files to write"
              + (f" ({len(skipped)} bad left out)" if skipped else "")
              + " and a shard holds at least one record (one file per shard)")
    if args.json:
        print(json.dumps({k: meta[k] for k in ("num_examples", "class_names", "shards",
                                                "skipped")}))
    else:
        print(convert_summary(meta, args.out, time.perf_counter() - started))
    return 0


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


class _DropLogLines:
    """A ``logging`` filter that drops the records whose message starts with ``prefix``."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def filter(self, record) -> bool:
        return not record.getMessage().startswith(self.prefix)


# --- service -------------------------------------------------------------------

SERVICE_ROLE_FLAGS = {  # the flags of one role only (--port is both roles')
    "dispatcher": ("worker_addresses", "work_dir", "fault_tolerant_mode", "worker_timeout_ms"),
    "worker": ("dispatcher_address", "worker_address", "heartbeat_interval_ms"),
}
_HOST_PORT = re.compile(r"^(?:grpc://)?(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(\d+)$")
# The service port checked free before TensorFlow loads, held bound (so that no other server
# takes it) until right before the server starts.
_HELD_PORT: List[socket.socket] = []


def _port_in_use_error(role: str, port: int, reason: str, default: bool) -> app.UsageError:
    return usage_error(f"cannot start the {role} on --port={port}"
                       + (" (the dispatcher's default)" if default else "")
                       + f": the port is in use ({reason}); choose another --port"
                       + (" (0: any free port)" if role == "worker" else "")
                       + f". Received: --port={port}")


def _release_port() -> None:
    while _HELD_PORT:
        _HELD_PORT.pop().close()


def _check_service(args) -> None:
    role, other = args.role, "worker" if args.role == "dispatcher" else "dispatcher"
    if args.port is not None and not 0 <= args.port <= 65535:
        raise usage_error(f"--port must be 0-65535. Received: --port={args.port}")
    wrong = [f for f in SERVICE_ROLE_FLAGS[other] if {f, f"no{f}"} & args.given]
    if wrong:
        raise usage_error("; ".join(f"--{f} is a flag of the {other}, not the {role}"
                                    for f in wrong) + f". Received: service {role}")
    for name in ("worker_timeout_ms", "heartbeat_interval_ms"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            raise usage_error(f"--{name} must be > 0. Received: --{name}={getattr(args, name)}")
    if role == "dispatcher" and args.fault_tolerant_mode and not args.work_dir:
        raise usage_error("--fault_tolerant_mode needs --work_dir (the folder where the "
                          "dispatcher journals its state). Received: --fault_tolerant_mode, "
                          "no --work_dir")
    if role == "worker" and not args.dispatcher_address:
        raise usage_error("service worker needs --dispatcher_address=HOST:PORT. "
                          "Received: service worker, no --dispatcher_address")
    addresses = ([("dispatcher_address", args.dispatcher_address)] if role == "worker" else
                 [("worker_addresses", a) for a in args.worker_addresses or ()])
    for flag, value in addresses:
        m = _HOST_PORT.match(value.strip())
        if not m or not 1 <= int(m.group(2)) <= 65535:
            raise usage_error(f"--{flag}{' (each of them)' if flag.endswith('es') else ''} "
                              f"must be HOST:PORT with a port 1-65535 (e.g. localhost:"
                              f"{DISPATCHER_PORT}); {value!r} is not. "
                              f"Received: {_typed(args, flag)}")
    if role == "dispatcher" and args.work_dir:
        _check_folder("--work_dir", args.work_dir)
    port = (DISPATCHER_PORT if role == "dispatcher" else 0) if args.port is None else args.port
    if port != 0:
        try:  # a plain bind: gRPC binds with SO_REUSEPORT, beside another dispatcher
            _HELD_PORT.append(checks.claim_port(port))
        except OSError as e:
            raise _port_in_use_error(role, port, e.strerror or str(e),
                                     args.port is None) from None


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread as Ctrl-C raises ``KeyboardInterrupt``."""


def _raise_terminated(signum, frame) -> None:
    raise _Terminated()


def cmd_service(args) -> int:
    from pipeline import distribute
    if args.role == "dispatcher":
        fn, kw = distribute.run_dispatcher, dict(
            port=DISPATCHER_PORT if args.port is None else args.port,
            worker_addresses=args.worker_addresses, work_dir=args.work_dir,
            fault_tolerant_mode=args.fault_tolerant_mode,
            worker_timeout_ms=args.worker_timeout_ms)
    else:  # it waits (in Python: Ctrl-C stops it) until the dispatcher answers: say so
        print(f"pipeline service worker: waiting for the dispatcher at "
              f"{args.dispatcher_address} (until it answers; Ctrl-C stops)", flush=True)
        fn, kw = distribute.run_worker, dict(
            dispatcher_address=args.dispatcher_address, port=args.port or 0,
            worker_address=args.worker_address, heartbeat_interval_ms=args.heartbeat_interval_ms)
    _release_port()  # the library checks it again, right before the server binds it
    signal.signal(signal.SIGTERM, _raise_terminated)  # the servers wait in Python
    try:
        fn(**kw)
    except distribute.PortInUseError as e:
        raise _port_in_use_error(args.role, e.port, e.reason, args.port is None) from None
    except (KeyboardInterrupt, _Terminated) as e:  # while waiting, starting or serving
        print(f"pipeline: stopped ({'Ctrl-C' if isinstance(e, KeyboardInterrupt) else 'SIGTERM'})",
              flush=True)
        sys.stderr.flush()
        os._exit(0)  # at once: a gRPC server's shutdown at exit can take tens of seconds
    except RuntimeError as e:
        if "Could not start" not in str(e):
            raise
        raise usage_error(f"cannot start the {args.role} on --port={kw['port']}: {e} "
                          "(is the port in use? choose another --port)") from None
    return 0


# --- doctor --------------------------------------------------------------------

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


def _check_doctor(args) -> None:
    if args.json_out:
        _check_writable("--json_out", args.json_out)


def cmd_doctor(args) -> int:
    try:
        import pipeline.stack as stack  # lazily: an optional module
        info = stack.doctor()
        text = stack.format_doctor(info)
    except ModuleNotFoundError as e:
        if e.name != "pipeline.stack":
            raise
        info = basic_stack()
        width = max(len(str(k)) for k in info)
        text = "\n".join(f"{str(k):<{width}}  {v}" for k, v in info.items())
    print(json.dumps(info, indent=2, default=str) if args.json else text)
    _write_json(args.json_out, info)
    return 0


# --- running a command ---------------------------------------------------------

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
def _plain_log_lines():
    """Within: absl's handler writes plain lines (``PlainLogFormatter``) to ``sys.stderr``."""
    handler = logging.get_absl_handler().python_handler
    old_formatter, old_stream = handler.formatter, handler.stream
    handler.setFormatter(PlainLogFormatter())
    handler.stream = sys.stderr
    try:
        yield
    finally:
        handler.setFormatter(old_formatter)
        handler.stream = old_stream


CHECKS = {"bench": _check_bench, "scan": _check_scan, "convert": _check_convert,
          "service": _check_service, "doctor": _check_doctor}
RUNS = {"bench": cmd_bench, "scan": cmd_scan, "convert": cmd_convert, "service": cmd_service,
        "doctor": cmd_doctor}


def main(args: argparse.Namespace) -> int:
    """Runs ``args.command``: its checks (before TensorFlow loads), then the command; the
    library's ``ValueError`` (and an ``OSError`` reading a source) is a usage error."""
    name = args.command
    try:
        CHECKS[name](args)
        with _plain_log_lines():
            _import_tensorflow()
            try:
                return RUNS[name](args)
            finally:
                _release_port()
    except (app.UsageError, ValueError, OSError) as e:
        _release_port()
        return _error(name, user_names(name, str(e)))


class Stopped(KeyboardInterrupt):
    """Ctrl-C, with what was finished (the message of the one line ``run`` prints)."""


def _parse_or_exit(argv: List[str]) -> argparse.Namespace:
    try:
        return parse(argv)
    except _ParseError as e:
        sys.exit(_error(e.command, str(e)))


def run(argv: Optional[Sequence[str]] = None) -> None:
    """Entry point of ``python -m pipeline`` and the ``pipeline`` console script.

    Ctrl-C in any command ends it with one line on stderr ("pipeline: stopped
    (Ctrl-C)", and what was finished) and exit status 130 (128 + SIGINT).
    """
    argv = list(sys.argv if argv is None else argv)
    try:
        app.run(main, argv=argv, flags_parser=_parse_or_exit)
    except KeyboardInterrupt as e:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        print(f"pipeline: stopped ({e if isinstance(e, Stopped) else 'Ctrl-C'})",
              file=sys.stderr, flush=True)
        sys.exit(130)


def _import_tensorflow() -> None:
    """``import tensorflow``, its start-up lines shown once
    (``pipeline.native_stderr.import_tensorflow``). Help and the usage errors that argv
    settles never call this."""
    from pipeline import native_stderr
    native_stderr.import_tensorflow()
