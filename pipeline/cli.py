"""The command line: ``python -m pipeline bench|scan|convert|service|doctor [ARGS] [--flags]``.

Parsed by absl's argparse integration (``absl.flags.argparse_flags``), one sub-parser per
command (docs/cli.md is the reference); ``bench``'s and ``service``'s flags are declared
beside their arguments (``bench.FLAGS``, ``service_args.FLAGS``). It parses, calls the
library and prints. The library's checks run first, before TensorFlow loads where they need
none (``pipeline.checks``, ``pipeline.deliver.service_args``, ``pipeline.tools.bench.bench.check``);
a ``ValueError`` is a usage error (exit status 2) in the library's words, with the
arguments named as the user typed them (``user_names``). While a command runs, its log
lines are plain (``native_stderr.plain_log_lines``); ``service`` runs its server with
``distribute.run_from_flags``, which Ctrl-C and SIGTERM end at once.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import re
import shlex
import sys
import time
from typing import Dict, List, Optional, Sequence

from absl import app, logging
from absl.flags import argparse_flags

from pipeline import checks
from pipeline import native_stderr
from pipeline.deliver import service_args

USAGE_ERROR = 2
PROG = "python -m pipeline"


class Number(float):
    """A float flag's value that prints as typed (``-1``, not ``-1.0``)."""

    def __new__(cls, text: str):
        value = super().__new__(cls, text)
        value.text = text
        return value

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


class Names(list):
    """A list flag's value: ``A,B`` as ``["A", "B"]``; ``str`` gives it as typed."""

    def __init__(self, text=""):
        super().__init__(text.split(",") if isinstance(text, str) else text)
        self[:] = [v for v in self if v]

    def __str__(self) -> str:
        return ",".join(self)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help with each flag's default: ``[default: X]``."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and action.default is not argparse.SUPPRESS \
                and "[default:" not in text and action.help is not argparse.SUPPRESS \
                and not isinstance(action, argparse._StoreTrueAction):  # --version: an act
            default = action.default
            default = ",".join(map(str, default)) if isinstance(default, (list, tuple)) \
                else default
            text += f" [default: {'none' if default is None else default}]"
        return text.replace("%", "%%")


class _ParseError(Exception):
    """argparse's refusal, raised by ``_Parser.error`` (``run`` prints it: exit 2)."""

    def __init__(self, command: Optional[str], message: str):
        super().__init__(message)
        self.command = command


class _Parser(argparse_flags.ArgumentParser):
    KINDS = {"int": "an integer", "Number": "a number"}

    def error(self, message):
        command = self.prog[len(PROG) + 1:].split(" ")[0] or None
        m = re.match(r"argument (--\w+)(?:/--\w+)?: invalid (\w+) value: '(.*)'$", message)
        if m and m.group(2) in self.KINDS:
            flag = m.group(1)
            message = f"{flag} must be {self.KINDS[m.group(2)]}. Received: {flag}={m.group(3)}"
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
# The command line's words for the library's hint on a folder without class sub-folders.
NO_CLASS_HINTS = {
    "convert": "Put its images in class sub-folders, or list them in a manifest (.csv / "
               ".jsonl) with their labels.",
    "bench": "Put its images in class sub-folders (--data_dir reads one class per folder).",
}
EPILOGS = {
    "bench": "Exit status: 0 every candidate ran, 1 a candidate failed, 2 a usage error.",
    "scan": "Exit status: 0 every file decodes, 1 bad files found, 2 a usage error.",
    "convert": (
        "On Apache Beam (pip install '.[beam]'): the same shards and dataset.json from any "
        "runner; a rerun into the same OUT keeps the shards already complete.\n"
        "  local, in this process (a thread per core; the fastest on one machine):\n"
        "    python -m pipeline convert photos/ shards/ --beam_runner=DirectRunner\n"
        "  local, 2 worker processes (each imports TensorFlow: seconds more to start):\n"
        "    python -m pipeline convert photos/ shards/ --beam_runner=DirectRunner \\\n"
        "      --beam_options=direct_running_mode=multi_processing,direct_num_workers=2\n"
        "  Dataflow (the workers install the package's wheel: pip wheel --no-deps -w dist .):\n"
        "    python -m pipeline convert gs://bucket/photos/ gs://bucket/shards/ --num_shards=1024 "
        "--beam_runner=DataflowRunner \\\n"
        "      --beam_options=project=my-project,region=us-central1,temp_location=gs://bucket/tmp,"
        "max_num_workers=100,extra_package=dist/tf_image_pipeline-0.1.0-py3-none-any.whl\n"
        "  Spark (a Spark master at spark-host:7077; an SDK image holding this package):\n"
        "    python -m pipeline convert /mnt/nfs/photos/ /mnt/nfs/shards/ --num_shards=1024 "
        "--beam_runner=SparkRunner \\\n"
        "      --beam_options=spark_master_url=spark://spark-host:7077,environment_type=DOCKER,"
        "environment_config=registry.example/pipeline-beam:0.1.0\n"
        "docs/scale-out.md says more.\n"
        "Exit status: 0 written, 1 bad files with --on_error=raise, 2 a usage error."),
    "service": "Flags marked 'dispatcher:' or 'worker:' apply to that role only.",
}
_BOOLS: Dict[str, set] = {}  # command -> its boolean flags (--name, --noname)


class _Bool(argparse.Action):
    """absl's boolean: ``--name`` sets it, ``--noname`` clears it."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not option_string.startswith("--no"))


def _flag(p, command: str, name: str, default, help_text: str, kind=None) -> None:
    """``--name`` of ``command``; ``kind``: its type (default: the default's; float: a
    ``Number``, tuple: ``Names``) or, for a string, its metavar (DIR, FILE, HOST:PORT)."""
    kind = {bool: bool, int: int, float: Number, tuple: Names}.get(kind or type(default),
                                                                   kind or str)
    if kind is bool:
        _BOOLS.setdefault(command, set()).add(name)
        p.add_argument(f"--{name}", f"--no{name}", dest=name, action=_Bool, default=default,
                       help=help_text)
    else:
        metavar = kind if isinstance(kind, str) else {int: "N", Number: "X", Names: "A,B"}.get(
            kind, "VALUE")
        p.add_argument(f"--{name}", type=str if isinstance(kind, str) else kind,
                       default=default, help=help_text, metavar=metavar)


def _flags(bench_flags: list) -> Dict[str, list]:
    """Each command's flags, (name, default, help[, kind]) (``bench_flags``: ``bench.FLAGS``;
    the service's: ``service_args.FLAGS``)."""
    bomb = ("A file whose header claims more pixels than this is a bad file; the default, the "
            "factories' too, is Pillow's decompression-bomb limit (2 x PIL.Image.MAX_IMAGE_PIXELS)")
    manifest = [("path_column", None, "Manifest column of the image paths ({} a manifest)."),
                ("label_columns", None, "Manifest label column(s) ({} a manifest; by default "
                 "the column 'label' if there is one, else no labels).", Names),
                ("root", None, "Manifest root for relative paths ({} a manifest).", "DIR"),
                ("allow_outside_root", False, "A manifest {} may name files outside its folder.")]
    return {
        "bench": bench_flags,
        "scan": [("max_pixels", checks.DEFAULT_MAX_PIXELS, bomb + "."),
                 ("follow_links", False, "Follow linked folders (loop-safe).")]
        + [(f[0], f[1], f[2].format("SOURCE"), *f[3:]) for f in manifest] + [
            ("json_out", None, "Also write the report as JSON to this file.", "FILE"),
            ("progress", True, "Show a progress bar of the files decoded (stderr).")],
        "convert": [
            ("num_shards", None, "Shards to write (default: ~1 per 128 MiB).", int),
            ("num_workers", None, "Writer threads (not with --beam_runner).", int),
            ("max_resolution", None, "Store each image as a JPEG, shorter side at most this.", int),
            ("jpeg_quality", 90, "JPEG quality (1-100) of the images --max_resolution re-encodes."),
            ("shuffle", True, "Write the rows in a seeded random order (--seed)."),
            ("seed", 0, "The seed of the random order the rows are written in (with --shuffle)."),
            ("on_error", "raise", "A bad file: 'raise' (exit 1, nothing written) or 'skip'."),
            ("max_pixels", checks.DEFAULT_MAX_PIXELS, bomb + ".")]
        + [(f[0], f[1], f[2].format("SRC"), *f[3:]) for f in manifest] + [
            ("beam_runner", None, "Convert on Apache Beam with this runner: DirectRunner, "
             "DataflowRunner, FlinkRunner, SparkRunner, ... (see below).", "RUNNER"),
            ("beam_options", None, "Beam's pipeline options as key=value,key=value (with "
             "--beam_runner).", "K=V,..."),
            ("json", False, "End with the result as one JSON line, not the summary line."),
            ("progress", True, "Show progress bars of the files checked and written (stderr); "
             "on Beam, the job's counters when it ends.")],
        "service": service_args.FLAGS,
        "doctor": [("json", False, "Print the report as JSON instead of aligned lines."),
                   ("json_out", None, "Also write the stack report as JSON to this file.", "FILE")]}


def build_parser() -> _Parser:
    """The parser of ``python -m pipeline``: one sub-parser per command (``COMMANDS``)."""
    from pipeline.tools.bench import bench  # no TensorFlow
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
    ps["scan"].add_argument("source", metavar="SOURCE", help="a folder (class sub-folders or "
                            "flat), a manifest (.csv / .jsonl) or an s3:// / gs:// folder")
    ps["convert"].add_argument("source", metavar="SRC", help="a folder or a manifest")
    ps["convert"].add_argument("out", metavar="OUT", help="the output folder (not in SRC)")
    ps["service"].add_argument("role", metavar="ROLE", choices=("dispatcher", "worker"),
                               help="'dispatcher' or 'worker'")
    for command, flags in _flags(bench.FLAGS).items():
        for flag in flags:
            _flag(ps[command], command, *flag)
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
    raw = list(argv[1:])
    argv = _normalize(raw)
    command = next((a for a in argv if a in COMMANDS), None)
    if command and {"-h", "--help"} & set(argv[:argv.index(command)]):
        argv = [command, "--help"]  # `--help CMD` is `CMD --help`
    try:
        args, rest = parser.parse_known_args(argv)
    except _ParseError as e:
        if e.command is None and str(e).startswith("unknown command"):
            raise _ParseError(None, f"{e}. Received: {shlex.join(raw)}") from None
        raise
    if args.version:
        import pipeline  # pylint: disable=import-outside-toplevel
        print(f"{pipeline.DISTRIBUTION} {pipeline.__version__}")
        sys.exit(0)
    if rest:
        raise _ParseError(args.command, _unrecognized(args.command, rest))
    if args.command is None:
        raise _ParseError(None, f"expected a command, one of {', '.join(COMMANDS)}. Received: "
                                + (shlex.join(argv) or "none"))
    args.given = {a.split("=")[0].lstrip("-") for a in argv if a.startswith("-")}
    args.typed = typed_flags(raw, _BOOLS.get(args.command, set()))
    return args


def _unrecognized(command: Optional[str], rest: Sequence[str]) -> str:
    """"unrecognized arguments: ..." with, for each unknown flag, the command that has it
    or the closest flag of this command (``difflib``, as the Python API's keywords:
    ``checks.unknown_keywords``)."""
    own = command_flags(command) if command else ["version", "help", "helpfull"]
    spellings = own + [f"no{b}" for b in _BOOLS.get(command, ())]
    notes = []
    for a in rest:
        if not a.startswith("--"):
            continue
        f = a[2:].split("=")[0]
        owners = [n for n in COMMANDS if f in command_flags(n)]
        if owners:
            notes.append(f" (--{f} is a flag of {', '.join(owners)})")
            continue
        close = difflib.get_close_matches(f, spellings, n=1, cutoff=0.6)
        if close:
            notes.append(f" (--{f}: did you mean --{close[0]}?)")
            continue
        others = {g: n for n in COMMANDS if n != command for g in command_flags(n)}
        close = difflib.get_close_matches(f, list(others), n=1, cutoff=0.6)
        if close:
            notes.append(f" (--{f}: did you mean --{close[0]}, a flag of {others[close[0]]}?)")
    return f"unrecognized arguments: {shlex.join(rest)}" + "".join(notes)


def typed_flags(argv: Sequence[str], bools=()) -> Dict[str, str]:
    """The value of each valued flag of ``argv`` (without the program) as the user
    typed it: ``-epochs=+3`` and ``--epochs +3`` give ``{"epochs": "+3"}``; the last
    one given wins, as in absl. Booleans print as typed already (``--name`` /
    ``--noname``)."""
    typed = {}
    for i, a in enumerate(argv):
        if a == "--":
            break
        if not a.startswith("-") or a in ("-", "-h", "--help"):
            continue
        name, eq, value = a.lstrip("-").partition("=")
        if not name or name in bools or (name.startswith("no") and name[2:] in bools):
            continue
        if eq:
            typed[name] = value
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            typed[name] = argv[i + 1]
    return typed


def as_typed(message: str, typed: Dict[str, str], values: Dict[str, object]) -> str:
    """``message`` with each ``--name=VALUE`` after "Received: " showing the value as the
    user typed it (``typed``, from ``typed_flags``) where the library printed the parsed
    value (``values``): ``--epochs=+0``, not ``--epochs=0``; ``--on_error=ignore``, not
    ``--on_error='ignore'`` (a value the shell would split is quoted as the shell needs:
    ``--data_dir='my photos'``). The flag's name is always ``--name=``; booleans print
    as ``--name`` / ``--noname`` already (``user_names``)."""
    head, said, tail = message.rpartition("Received: ")
    if not said:
        return message
    for name, text in typed.items():
        value = values.get(name, _MISSING)
        if value is _MISSING or isinstance(value, bool) or value is None:
            continue
        shown = [repr(value), str(value)] if not isinstance(value, str) else [repr(value)]
        for printed in dict.fromkeys(shown):
            pattern = rf"(?<![\w-])--{re.escape(name)}={re.escape(printed)}(?![\w.])"
            tail, n = re.subn(pattern, lambda _: f"--{name}={shlex.quote(text)}", tail, count=1)
            if n:
                break
    return head + said + tail


_MISSING = object()


def user_names(command_name: str, message: str, flag_names: Sequence[str] = ()) -> str:
    """``message`` (a library error) with the command's own names for its arguments.

    The library names its Python arguments ("`directory` does not exist",
    "Received: output_dir='x'", "seed=-1", "plan=True", "work_dir=None"); the user
    typed SRC, OUT, --seed, --plan, nothing: each name the command knows (``ARG_NAMES``
    and its flags) is replaced where it stands for the argument ("`name`", "name="); after
    "Received: ", a boolean flag's ``=True`` / ``=False`` is ``--name`` / ``--noname`` and
    a flag's ``=None`` is "no --name".
    """
    message = message.replace(checks.NO_CLASS_HINT, NO_CLASS_HINTS.get(
        command_name, checks.NO_CLASS_HINT))
    names = {f: f"--{f}" for f in (flag_names or command_flags(command_name))}
    names.update(ARG_NAMES.get(command_name, {}))
    for py in sorted(names, key=len, reverse=True):
        user = names[py]
        message = message.replace(f"`{py}`", user).replace(f"`{py}=", f"`{user}=")
        message = re.sub(rf"(?<![\w`./-]){re.escape(py)}=", f"{user}=", message)
    head, said, tail = message.rpartition("Received: ")
    for b in _BOOLS.get(command_name, ()):
        tail = re.sub(rf"--{b}=(True|False)\b",
                      lambda m: f"--{'' if m.group(1) == 'True' else 'no'}{b}", tail)
    return head + said + re.sub(r"(?<![\w-])(--\w+)=None\b", r"no \1", tail)


def _error(command_name: Optional[str], message: str) -> int:
    """Prints a usage error and the usage line: exit status 2."""
    where = f"pipeline {command_name}" if command_name else "pipeline"
    hint = f"{PROG} {command_name} --help" if command_name else f"{PROG} --help"
    usage = (build_parser().commands[command_name].format_usage() if command_name
             else f"usage: {PROG} <{'|'.join(COMMANDS)}> [ARGS] [--flags]\n")
    print(f"{where}: error: {message}\n{usage}({hint} shows the arguments and flags)",
          file=sys.stderr)
    return USAGE_ERROR


def _write_json(args, obj) -> None:
    """Writes ``obj`` to ``--json_out`` (checked before the work, in ``main``), if given."""
    from pipeline.tools.bench import harness
    if not args.json_out:
        return
    try:
        harness.write_json(args.json_out, obj, indent=2)
    except OSError as e:
        raise ValueError(f"--json_out: cannot write {args.json_out!r} ({e.strerror or e}). "
                         f"Received: --json_out={args.json_out!r}") from None
    print(f"wrote {args.json_out}")


# --- bench ---------------------------------------------------------------------

def _check_bench(args) -> None:
    from pipeline.tools.bench import bench
    bench.check(**bench.command_arguments(vars(args), args.given))


def cmd_bench(args) -> int:
    from pipeline.tools.bench import bench
    try:
        out = bench.run(**bench.command_arguments(vars(args), args.given))
    except bench.PipelineFailed as e:
        print(f"pipeline bench: {e}", file=sys.stderr)
        return 1
    _write_json(args, out)
    failed = [] if args.plan or args.profile else [
        n for n, r in out["compare"].items() if "error" in r]
    if failed:
        print(f"pipeline bench: {len(failed)} candidate{'s' if len(failed) > 1 else ''} "
              f"failed ({', '.join(failed)}): exit status 1", file=sys.stderr)
        return 1
    return 0


# --- scan and convert ----------------------------------------------------------

def _manifest_flags(args) -> dict:
    """The manifest flags given, as the library's arguments."""
    return {k: getattr(args, k) for k in ("path_column", "label_columns", "root",
                                          "allow_outside_root") if getattr(args, k)}


def _check_scan(args) -> None:
    checks.check_manifest_options(args.source, _manifest_flags(args))
    checks.check_source("source", args.source)


def cmd_scan(args) -> int:
    from pipeline.tools import report as report_lib
    report = report_lib.scan(args.source, max_pixels=args.max_pixels,
                             follow_links=args.follow_links, progress=args.progress,
                             **_manifest_flags(args))
    print(report.table())
    _write_json(args, report.to_dict())
    return 1 if report.bad_files else 0


def _check_convert(args) -> None:
    _check_scan(args)
    checks.check_beam(args.beam_runner, args.beam_options)
    checks.check_output_outside(args.out, args.source, args.root, manifest_root=True)
    checks.check_folder("output_dir", args.out)


def cmd_convert(args) -> int:
    from pipeline.convert import shards

    def quiet(record) -> bool:  # summary_lines says it instead
        return not record.getMessage().startswith(shards.FEWER_SHARDS)

    logging.get_absl_logger().addFilter(quiet)
    started = time.perf_counter()
    try:
        meta = shards.write_tfrecords(
            args.source, args.out, args.num_shards, shuffle=args.shuffle, seed=args.seed,
            progress=args.progress, num_workers=args.num_workers, on_error=args.on_error,
            max_pixels=args.max_pixels, max_resolution=args.max_resolution,
            jpeg_quality=args.jpeg_quality, beam_runner=args.beam_runner,
            beam_options=args.beam_options, **_manifest_flags(args))
    except shards.BadFilesError as e:
        head, *lines = shards.bad_files_lines(e, args.on_error)
        print(f"pipeline convert: {user_names('convert', head)}", *lines, sep="\n",
              file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001  a failure to write OUT is a usage error naming it
        import tensorflow as tf
        if isinstance(e, (OSError, tf.errors.OpError)) and shards.about_path(e, args.out):
            raise ValueError(f"OUT: cannot write {args.out!r} ({e}). "
                             f"Received: OUT={args.out!r}") from None
        raise
    finally:
        logging.get_absl_logger().removeFilter(quiet)
    *lines, last = shards.summary_lines(meta, args.out, time.perf_counter() - started,
                                        args.num_shards)
    for line in lines:  # the bad files' own lines ("  PATH: REASON") as they are
        print(line if line.startswith("  ") else user_names("convert", line))
    print(json.dumps({k: meta[k] for k in ("num_examples", "class_names", "shards", "skipped")})
          if args.json else last)
    return 0


# --- service -------------------------------------------------------------------

def _check_service(args) -> None:
    service_args.check_flags(args.role, vars(args), args.given)


def cmd_service(args) -> int:
    from pipeline.deliver import distribute
    distribute.run_from_flags(args.role, vars(args))
    return 0


# --- doctor --------------------------------------------------------------------

def cmd_doctor(args) -> int:
    from pipeline import stack
    info = stack.doctor()
    print(json.dumps(info, indent=2, default=str) if args.json else stack.format_doctor(info))
    _write_json(args, info)
    return 0


# --- running a command ---------------------------------------------------------

CHECKS = {"bench": _check_bench, "scan": _check_scan, "convert": _check_convert,
          "service": _check_service, "doctor": lambda args: None}
RUNS = {"bench": cmd_bench, "scan": cmd_scan, "convert": cmd_convert, "service": cmd_service,
        "doctor": cmd_doctor}


def main(args: argparse.Namespace) -> int:
    """Runs ``args.command``: its checks (before TensorFlow loads), then the command; a
    ``ValueError`` (the library's, or the command's own) and an ``OSError`` reading a
    source are a usage error (exit status 2)."""
    name = args.command
    try:
        CHECKS[name](args)
        if getattr(args, "json_out", None):  # fail before the work, not after it
            checks.check_writable("json_out", args.json_out)
        with native_stderr.plain_log_lines():
            native_stderr.import_tensorflow()  # help and argv's usage errors never do
            try:
                return RUNS[name](args)
            finally:
                service_args.release_port()
    except (ValueError, OSError) as e:
        service_args.release_port()
        values = {k: getattr(args, k) for k in getattr(args, "typed", {}) if hasattr(args, k)}
        return _error(name, as_typed(user_names(name, str(e)), getattr(args, "typed", {}),
                                     values))


def _parse_or_exit(argv: List[str]) -> argparse.Namespace:
    try:
        return parse(argv)
    except _ParseError as e:
        sys.exit(_error(e.command, str(e)))


def run(argv: Optional[Sequence[str]] = None) -> None:
    """Entry point of ``python -m pipeline`` and the ``pipeline`` console script.

    Ctrl-C in any command ends it with one line on stderr ("pipeline: stopped
    (Ctrl-C)", or what was finished: ``bench.Stopped``'s message) and exit status 130
    (128 + SIGINT).
    """
    argv = list(sys.argv if argv is None else argv)
    try:
        app.run(main, argv=argv, flags_parser=_parse_or_exit)
    except KeyboardInterrupt as e:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        print(f"pipeline: stopped ({str(e) or 'Ctrl-C'})", file=sys.stderr, flush=True)
        sys.exit(130)

