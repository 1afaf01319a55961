"""What the installed stack can do: TensorFlow, Keras, tensorflow-io, decoders, filesystems;
and the TensorFlow mechanics the package builds on: the C++ log level, maps instantiated on
their device (``map_on_its_device``), bodies traced once (``traced_once``). Public
TensorFlow API only; tensorflow-io (the optional ``[tfio]`` extra) is imported only by
:func:`tfio_status` and :func:`tfio_module`.

Standalone: imports only TensorFlow, absl, the standard library and the two base modules
``pipeline.checks`` and ``pipeline.native_stderr`` (which import no other ``pipeline``
module), so any module may use it and ``python -m pipeline.stack`` prints the report.

tensorflow-io 0.37.1, its last release, loads its ops only with TensorFlow 2.16.x. With newer
TensorFlow, ``import tensorflow_io`` prints "undefined symbol" warnings and *succeeds*; every
op then raises ``NotImplementedError: unable to open file: libtensorflow_io.so`` and the
``s3://`` / ``hdfs://`` / ``az://`` filesystems are simply not registered. So
:func:`tfio_status` probes an op (decodes a 1x1 WebP), not the import, once, lazily.

    >>> from pipeline import stack
    >>> stack.tfio_status().available
    >>> print(stack.format_doctor())
"""

import ctypes
import dataclasses
import functools
import importlib.metadata
import mmap
import os
import platform
import re
import sys
import threading
import warnings
from typing import Optional, Set

from pipeline import native_stderr

native_stderr.import_tensorflow()  # with pipeline's C++ log level while it loads
import tensorflow as tf  # noqa: E402  pylint: disable=wrong-import-position
from absl import logging  # noqa: E402  pylint: disable=wrong-import-position

from pipeline import checks  # noqa: E402  pylint: disable=wrong-import-position

__all__ = ["TfioStatus", "tfio_status", "core_webp", "doctor", "format_doctor",
           "needs_tfio_message", "tfio_module", "cpu_count", "TFIO_STACK_HINT", "TFIO_EXTRA", "CppLogStatus",
           "quiet_cpp_logs", "cpp_log_status",
           "INTS_ON_DEVICE", "map_on_its_device", "flat_map_on_its_device", "scan_on_its_device",
           "filter_on_its_device", "traced_once"]

# The function attribute that makes tf.data instantiate a function on its one device (the one
# tf.data.experimental.prefetch_to_device and MultiDeviceIterator give their own functions).
INTS_ON_DEVICE = "experimental_ints_on_device"


def map_on_its_device(ds: tf.data.Dataset, fn, num_parallel_calls: Optional[int] = None,
                      deterministic: Optional[bool] = None) -> tf.data.Dataset:
    """``ds.map(fn, num_parallel_calls, deterministic)``, ``fn`` instantiated on the one device
    it runs on instead of by the multi-device function runtime.

    ``tf.data`` instantiates a dataset's functions each time an iterator is made (every epoch
    under Keras ``fit``); ``Dataset.map``'s go through the multi-device runtime, which runs
    Grappler over the function (about 0.1 ms per graph node). A function carrying
    ``experimental_ints_on_device`` is instantiated on its device directly; the pipeline's
    maps run on the CPU, where integers live on the host anyway. Built from public API only:
    ``fn`` traced as a ``tf.function`` with that attribute (``experimental_attributes``), the
    map made with ``tf.raw_ops.MapDataset`` / ``ParallelMapDatasetV2`` over
    ``tf.data.experimental.to_variant(ds)``, wrapped by ``from_variant``. Datasets built
    elsewhere are untouched.

    Falls back to ``ds.map`` (TensorFlow's default runtime) when an element or a result is
    not a plain tensor (a ragged or sparse one, say), or when ``fn`` returns an int32:
    TensorFlow 2.16-2.21 cannot run such a marked function beside another output ("Expected
    only one fetch node" at ``iter()`` with autotuning's ``inject_prefetch``).

    Args:
        ds: the input ``tf.data.Dataset``.
        fn: the map function, called as ``Dataset.map`` calls it (a tuple element unpacked).
        num_parallel_calls: int, ``tf.data.AUTOTUNE`` or None (one call at a time).
        deterministic: bool or None (the dataset's ``Options`` decide), as ``Dataset.map``.

    Returns:
        The mapped ``tf.data.Dataset``, with ``fn``'s output structure.
    """
    plain = lambda: ds.map(fn, num_parallel_calls=num_parallel_calls, deterministic=deterministic)
    out = {}

    def result(res):
        out["structure"] = tuple(res) if isinstance(res, list) else res
        flat = tf.nest.flatten(out["structure"])
        out["plain"] = not all(isinstance(t, (tf.Tensor, int, float, bool, bytes, str))
                               for t in flat)
        return [] if out["plain"] else [tf.convert_to_tensor(t) for t in flat]

    traced = _traced_on_device(ds, fn, result, "map")
    if traced is None or out["plain"] or any(t.dtype == tf.int32 for t in traced.outputs):
        return plain()
    specs = [tf.TensorSpec(t.shape, t.dtype) for t in traced.outputs]
    common = dict(input_dataset=tf.data.experimental.to_variant(ds),
                  other_arguments=traced.captured_inputs, f=traced,
                  output_types=[s.dtype for s in specs], output_shapes=[s.shape for s in specs],
                  preserve_cardinality=True)
    if num_parallel_calls is None:
        variant = tf.raw_ops.MapDataset(**common)
    else:
        variant = tf.raw_ops.ParallelMapDatasetV2(
            num_parallel_calls=tf.constant(num_parallel_calls, tf.int64),
            deterministic={None: "default", True: "true", False: "false"}[deterministic],
            **common)
    return tf.data.experimental.from_variant(
        variant, tf.nest.pack_sequence_as(out["structure"], specs))


def flat_map_on_its_device(ds: tf.data.Dataset, fn) -> tf.data.Dataset:
    """``ds.flat_map(fn)``, ``fn`` instantiated on its one device (see
    :func:`map_on_its_device`; ``tf.raw_ops.FlatMapDataset``). A keyed epoch's function
    holds the whole epoch's dataset graph, instantiated at every ``iter()``.

    Args:
        ds: the input ``tf.data.Dataset``.
        fn: element -> ``tf.data.Dataset``, called as ``Dataset.flat_map`` calls it.

    Returns:
        The flattened ``tf.data.Dataset`` (``ds.flat_map(fn)`` where an element or the
        returned dataset's elements are not plain tensors).
    """
    out = {}

    def result(inner):
        out["spec"] = inner.element_spec
        return tf.data.experimental.to_variant(inner)

    traced = _traced_on_device(ds, fn, result, "flat_map")
    flat = tf.nest.flatten(out.get("spec"))
    if traced is None or not flat or any(type(s) is not tf.TensorSpec for s in flat):
        return ds.flat_map(fn)
    variant = tf.raw_ops.FlatMapDataset(
        input_dataset=tf.data.experimental.to_variant(ds),
        other_arguments=traced.captured_inputs, f=traced,
        output_types=[s.dtype for s in flat], output_shapes=[s.shape for s in flat])
    return tf.data.experimental.from_variant(variant, out["spec"])


def scan_on_its_device(ds: tf.data.Dataset, initial_state, fn) -> tf.data.Dataset:
    """``ds.scan(initial_state, fn)``, ``fn`` instantiated on its one device (see
    :func:`map_on_its_device`; ``tf.raw_ops.ScanDataset``). The state keeps the
    initial state's shapes (``fn`` must return them; ``Dataset.scan`` would relax them).

    Args:
        ds: the input ``tf.data.Dataset``.
        initial_state: a nest of tensors.
        fn: ``(state, element) -> (new state, output)``, as ``Dataset.scan`` calls it.

    Returns:
        The scanned ``tf.data.Dataset`` (``ds.scan(initial_state, fn)`` where an element,
        the state or the output is not made of plain tensors, an output or the state is
        an int32, or the new state's shapes differ from the initial state's).
    """
    state = tf.nest.map_structure(tf.convert_to_tensor, initial_state)
    flat_state = tf.nest.flatten(state)
    state_specs = [tf.TensorSpec(t.shape, t.dtype) for t in flat_state]
    spec, out = ds.element_spec, {}
    flat_in = tf.nest.flatten(spec)
    plain = lambda: ds.scan(initial_state, fn)  # noqa: E731
    if not flat_in or any(type(s) is not tf.TensorSpec for s in flat_in):
        return plain()

    def body(*args):
        st = tf.nest.pack_sequence_as(state, list(args[:len(flat_state)]))
        el = tf.nest.pack_sequence_as(spec, list(args[len(flat_state):]))
        new_state, output = fn(st, el)
        out["structure"] = output
        flat_new = [tf.convert_to_tensor(t) for t in tf.nest.flatten(new_state)]
        out["state_ok"] = (len(flat_new) == len(flat_state) and all(
            t.dtype == s.dtype and t.shape == s.shape for t, s in zip(flat_new, state_specs)))
        flat_out = tf.nest.flatten(output)
        out["plain"] = not all(isinstance(t, tf.Tensor) for t in flat_out)
        return flat_new + ([] if out["plain"] else list(flat_out))
    body.__name__ = "pipeline_scan_" + re.sub(r"\W", "", getattr(fn, "__name__", "fn"))
    traced = tf.function(body, input_signature=state_specs + flat_in, autograph=False,
                         experimental_attributes={INTS_ON_DEVICE: True}).get_concrete_function()
    if out["plain"] or not out["state_ok"] or any(t.dtype == tf.int32 for t in traced.outputs):
        return plain()
    outs = traced.outputs[len(flat_state):]
    specs = [tf.TensorSpec(t.shape, t.dtype) for t in outs]
    variant = tf.raw_ops.ScanDataset(
        input_dataset=tf.data.experimental.to_variant(ds), initial_state=flat_state,
        other_arguments=traced.captured_inputs, f=traced,
        output_types=[t.dtype for t in specs], output_shapes=[t.shape for t in specs],
        preserve_cardinality=True)
    return tf.data.experimental.from_variant(
        variant, tf.nest.pack_sequence_as(out["structure"], specs))


def filter_on_its_device(ds: tf.data.Dataset, predicate) -> tf.data.Dataset:
    """``ds.filter(predicate)``, ``predicate`` instantiated on its one device (see
    :func:`map_on_its_device`; ``tf.raw_ops.FilterDataset``).

    Args:
        ds: the input ``tf.data.Dataset``.
        predicate: element -> bool scalar tensor, called as ``Dataset.filter`` calls it.

    Returns:
        The filtered ``tf.data.Dataset`` (``ds.filter(predicate)`` where an element is not
        made of plain tensors).
    """
    traced = _traced_on_device(ds, predicate, lambda keep: [tf.convert_to_tensor(keep)],
                               "filter")
    if traced is None:
        return ds.filter(predicate)
    spec = ds.element_spec
    flat = tf.nest.flatten(spec)
    variant = tf.raw_ops.FilterDataset(
        input_dataset=tf.data.experimental.to_variant(ds),
        other_arguments=traced.captured_inputs, predicate=traced,
        output_types=[s.dtype for s in flat], output_shapes=[s.shape for s in flat])
    return tf.data.experimental.from_variant(variant, spec)


def _traced_on_device(ds, fn, result, kind):
    """``fn`` over ``ds``'s elements as a ConcreteFunction marked ``INTS_ON_DEVICE``, its
    return value passed through ``result`` (-> flat list of tensors); None when an
    element is not made of plain tensors."""
    spec = ds.element_spec
    flat_in = tf.nest.flatten(spec)
    if not flat_in or any(type(s) is not tf.TensorSpec for s in flat_in):
        return None

    def body(*args):
        el = tf.nest.pack_sequence_as(spec, list(args))
        return result(fn(*el) if isinstance(el, tuple) else fn(el))
    name = re.sub(r"\W", "", getattr(fn, "__name__", "fn"))
    body.__name__ = f"pipeline_{kind}_{name}"
    return tf.function(body, input_signature=flat_in, autograph=False,
                       experimental_attributes={INTS_ON_DEVICE: True}).get_concrete_function()


def traced_once(*input_signature: tf.TensorSpec):
    """Decorator: ``fn``, a function of tensors only (its result depends on its arguments
    and on nothing else: no Python state, no captured tensor, no stateful random op), is
    traced once per process with that ``input_signature`` (a ``tf.function``).

    Called inside a graph (a ``tf.data`` map's function, say), it adds one ``Case`` op
    (``tf.raw_ops.Case``, one branch, not lowered to switch/merge) whose branch is that
    traced body: a dataset built later in the process does not pay the Python that builds
    its ops again (some 0.2-0.5 ms per op; the EXIF read and the JPEG cut check hold several
    hundred). The call runs in the caller's function runtime, as a branch of ``tf.switch_case``
    does (some µs per element; a ``tf.function`` called in a graph would be a
    ``PartitionedCall``, instantiated on the multi-device runtime at some 100 µs more per
    call), so it is for paths that already sit behind a call (``bmp.unlowered_case``).
    Called eagerly, it runs the traced graph. Returns the output as ``fn`` does (a tensor or
    a flat tuple of tensors).
    """
    def wrap(fn):
        traced = tf.function(fn, input_signature=list(input_signature), autograph=False,
                             reduce_retracing=False)

        @functools.wraps(fn)
        def call(*args):
            if tf.executing_eagerly():
                return traced(*args)
            body = traced.get_concrete_function()
            outs = tf.raw_ops.Case(
                branch_index=tf.constant(0), input=list(args) + list(body.captured_inputs),
                Tout=[t.dtype for t in body.outputs], branches=[body],
                output_shapes=[t.shape for t in body.outputs])
            return outs[0] if len(outs) == 1 else tuple(outs)
        call.traced = traced  # the tf.function (its tracing count, say)
        return call
    return wrap


# A 1x1 lossless WebP (one red pixel), written by Pillow: the op probe's input.
_WEBP_1X1 = (b"RIFF\x1c\x00\x00\x00WEBPVP8L\x0f\x00\x00\x00/\x00\x00\x00\x00\x07\x10"
             b"\xfd\x8f\xfe\x07\"\xa2\xff\x01\x00")

# Schemes that tensorflow-io registers when its plugins load (TensorFlow has gs, file, ram).
TFIO_SCHEMES = ("s3", "hdfs", "viewfs", "har", "az", "http", "https", "oss")

TFIO_EXTRA = "tfio"  # setup.cfg's extra that installs tensorflow-io
TFIO_STACK_HINT = ("install the [tfio] extra on TensorFlow 2.16, the stack where tensorflow-io's "
                   "ops load: in pipeline's checkout, pip install -c constraints/tf216.txt "
                   "-e '.[tfio]'")


@dataclasses.dataclass(frozen=True)
class TfioStatus:
    """Whether tensorflow-io's ops load here.

    Attributes:
        available: bool, its ops run (probed by decoding a 1x1 WebP).
        version: str or None, the installed tensorflow-io version (None: not installed).
        reason: str, why it is unavailable ("" when available), naming the TensorFlow
            version and the loader's error (for example the undefined symbol).
    """
    available: bool
    version: Optional[str]
    reason: str


_lock = threading.Lock()


def _dist_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _short_error(err: BaseException, warned=()) -> str:
    """The useful part of a loader error: the undefined symbol if one is named."""
    text = " ".join([str(err)] + [str(w) for w in warned])
    sym = re.search(r"undefined symbol: ?([^\s'\"\]]+)", text)
    if sym:
        return f"undefined symbol {sym.group(1)}"
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {first}"[:300]


@functools.lru_cache(maxsize=None)
def _probe() -> TfioStatus:
    version = _dist_version("tensorflow-io")
    if version is None:
        return TfioStatus(False, None, "tensorflow-io is not installed (the optional [tfio] "
                                       "extra: pip install -e '.[tfio]' in pipeline's "
                                       "checkout, TensorFlow 2.16 only)")
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        try:
            import tensorflow_io as tfio  # pylint: disable=import-outside-toplevel
        except Exception as e:  # pylint: disable=broad-except
            return TfioStatus(False, version,
                              f"tensorflow-io {version} cannot be imported with TensorFlow "
                              f"{tf.__version__}: {_short_error(e, warned)}")
        try:
            with tf.init_scope():  # eager even if called while tracing a tf.function
                img = tfio.image.decode_webp(tf.constant(_WEBP_1X1))
                ok = tuple(img.shape) == (1, 1, 4)
        except Exception as e:  # pylint: disable=broad-except  (NotImplementedError, OpError)
            return TfioStatus(False, version,
                              f"tensorflow-io {version} cannot load its ops with TensorFlow "
                              f"{tf.__version__}: {_short_error(e, warned)}")
    if not ok:
        return TfioStatus(False, version, f"tensorflow-io {version}'s WebP probe decoded a "
                                          f"1x1 image as shape {tuple(img.shape)}")
    return TfioStatus(True, version, "")


def tfio_status() -> TfioStatus:
    """Probes tensorflow-io once (imports it and runs one op) and returns the cached result."""
    with _lock:
        return _probe()


def tfio_module(feature: str, path):
    """The ``tensorflow_io`` module, once :func:`tfio_status` found its ops loading: the one
    way the package imports it (lazily, here).

    Args:
        feature: str, what needs it, for the message (e.g. "TIFF decoding").
        path: the file or URI it is needed for, for the message.

    Raises:
        ImportError: tensorflow-io is not installed or its ops do not load; the
            message (``needs_tfio_message``) names the file, the reason and the [tfio] extra.
    """
    if not tfio_status().available:
        raise ImportError(needs_tfio_message(feature, path))
    import tensorflow_io  # pylint: disable=import-outside-toplevel
    return tensorflow_io


def core_webp() -> bool:
    """True when TensorFlow decodes WebP itself (``tf.io.decode_webp``, TF >= 2.18)."""
    return hasattr(tf.io, "decode_webp")


cpu_count = checks.cpu_count  # the CPUs this process may run on (affinity-aware)


def _schemes() -> list:
    try:
        return sorted(s for s in tf.io.gfile.get_registered_schemes() if s)
    except Exception:  # pylint: disable=broad-except
        return []


# --- TensorFlow's C++ log level ------------------------------------------------
#
# TensorFlow's C++ code logs to stderr below Python's logging, filtered by
# TF_CPP_MIN_LOG_LEVEL (0 all, 1 no INFO, 2 no WARNING, 3 no ERROR). pipeline
# sets it to 2 when unset, only while it imports TensorFlow itself
# (native_stderr.import_tensorflow; the environment is restored afterwards).
# When something else imported TensorFlow first, the variable comes too late, and what can be done depends on
# how TensorFlow logs:
# * TensorFlow 2.16 (TSL's own logging, libtensorflow_framework exports
#   tsl::internal::LogMessage): the level is read once into a function-local
#   static, at the first C++ log line, which import tensorflow itself writes
#   (oneDNN, CUDA probes). Nothing in the process can change it afterwards
#   (TSL's log sinks are C++ objects; TF_CPP_VLOG_FILENAME is read once too).
# * TensorFlow with absl logging (2.21 here): the level is absl's global
#   MinLogLevel, which absl::SetMinLogLevel changes at any time. TensorFlow
#   offers no Python binding for it; libtensorflow_framework exports it under
#   absl's versioned namespace (absl::lts_YYYYMMDD), so its name is read from
#   the library's symbol strings and it is called through ctypes.
CPP_LOG_ENV = native_stderr.CPP_LOG_ENV
CPP_LOG_QUIET = native_stderr.CPP_LOG_QUIET  # errors only
# Warnings TensorFlow writes that say nothing is wrong: the end of every epoch
# iterated eagerly (TF 2.16), and TensorFlow's false alarm after every
# complete file cache (its writer looks for a temporary index that its own
# merge has just deleted; TF 2.16 and 2.21). Not among them: TensorFlow logs
# "Premature end of JPEG data" at ERROR (level 3 hides it, with every other
# error), and libjpeg prints "Corrupt JPEG data: ..." to stderr itself.
CPP_LOG_HARMLESS = ("Local rendezvous is aborting with status: OUT_OF_RANGE",
                    "The calling iterator did not fully read the dataset being cached")
_TSL_LOG_SYMBOL = "_ZN3tsl8internal10LogMessage18GenerateLogMessageEv"
_ABSL_SETTER_TAIL = b"14SetMinLogLevelENS0_18LogSeverityAtLeastE\x00"
_ABSL_SETTER = re.compile(r"_ZN4absl12lts_\d+14SetMinLogLevelENS0_18LogSeverityAtLeastE")


@dataclasses.dataclass(frozen=True)
class CppLogStatus:
    """Whether TensorFlow's known-harmless C++ log lines are hidden in this process.

    Attributes:
        quiet: bool, TensorFlow's C++ warnings (``CPP_LOG_HARMLESS`` among them)
            are hidden.
        how: str, one sentence: who set the level and how, or why it could not
            be set.
    """
    quiet: bool
    how: str


_cpp_log = CppLogStatus(False, "not set up (pipeline.stack.quiet_cpp_logs was not called)")


def _absl_set_min_log_level(level: int) -> str:
    """Sets TensorFlow's C++ log level after import; "" on success, else why not."""
    name = "libtensorflow_framework.so.2"
    path = os.path.join(os.path.dirname(tf.__file__), name)
    if not sys.platform.startswith("linux") or not os.path.exists(path):
        return f"no {name} here ({sys.platform})"
    try:
        lib = ctypes.CDLL(path)  # already loaded by TensorFlow: the same library
    except OSError as e:
        return f"cannot open {name}: {e}"
    if hasattr(lib, _TSL_LOG_SYMBOL):
        return ("its C++ logging (TSL's) reads TF_CPP_MIN_LOG_LEVEL once, at the first C++ "
                "log line, which import tensorflow writes, and offers no way to change it")
    symbol = ""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            end = m.find(_ABSL_SETTER_TAIL)
            while end >= 0 and not symbol:
                start = m.rfind(b"\x00", max(0, end - 64), end) + 1
                text = m[start:end + len(_ABSL_SETTER_TAIL) - 1].decode("ascii", "replace")
                symbol = text if _ABSL_SETTER.fullmatch(text) else ""
                end = m.find(_ABSL_SETTER_TAIL, end + 1)
    except (OSError, ValueError) as e:
        return f"cannot read {name}: {e}"
    if not symbol or not hasattr(lib, symbol):
        return f"{name} exports neither TSL's logging nor absl::SetMinLogLevel"
    setter = getattr(lib, symbol)
    setter.argtypes = [ctypes.c_int]  # absl::LogSeverityAtLeast: kInfo 0 ... kError 2
    setter.restype = None
    setter(level)
    return ""


def quiet_cpp_logs(user_level: Optional[str], tensorflow_first: bool) -> CppLogStatus:
    """Hides TensorFlow's C++ warnings unless the user chose a level; called once, when this module loads.

    Args:
        user_level: the value of ``TF_CPP_MIN_LOG_LEVEL`` at ``import pipeline``
            (None: unset). A value set by the user is left as it is.
        tensorflow_first: bool, TensorFlow was imported by something other than
            pipeline (``native_stderr.import_tensorflow``), so without its level.

    Returns:
        The ``CppLogStatus`` (also kept for ``cpp_log_status`` and the doctor).
        When the level cannot be set (TensorFlow 2.16 imported first), one
        warning says so and how to get it: let pipeline import TensorFlow (use a
        pipeline name before ``import tensorflow``), or set
        ``TF_CPP_MIN_LOG_LEVEL`` before Python starts (setting it to any value
        also silences the warning).
    """
    global _cpp_log
    if user_level is not None:
        try:
            quiet = int(user_level) >= CPP_LOG_QUIET
        except ValueError:
            quiet = False
        status = CppLogStatus(quiet, f"{CPP_LOG_ENV}={user_level} as set by the user")
    elif not tensorflow_first:
        status = CppLogStatus(True, f"{CPP_LOG_ENV}={CPP_LOG_QUIET} (errors only), set by "
                                    "pipeline while it imported TensorFlow (the environment restored)")
    else:
        why = _absl_set_min_log_level(CPP_LOG_QUIET)
        if not why:
            status = CppLogStatus(True, "errors only: TensorFlow was imported before pipeline imported it; set by "
                                        "pipeline through absl::SetMinLogLevel")
        else:
            status = CppLogStatus(False, f"TensorFlow {tf.__version__} was imported before "
                                         f"pipeline imported it and {why}")
            logging.warning(
                "pipeline: tensorflow was imported before pipeline imported it, and TensorFlow "
                "%s's C++ log level cannot be changed now (%s): its known-harmless lines (%s) "
                "will show. To hide them, use a pipeline name (pipeline.from_directory, say) "
                "before import tensorflow, or set %s=%d before Python starts (setting it to "
                "any value also silences this note).",
                tf.__version__, why, "; ".join(f"'{h}'" for h in CPP_LOG_HARMLESS),
                CPP_LOG_ENV, CPP_LOG_QUIET)
    _cpp_log = status
    return status


# What no log level hides, said with the doctor's line on the C++ log level.
IMPORT_TIME_LINES = ("not hidden by any level: the lines import tensorflow writes before "
                     "it reads one (2.16: 'Unable to register cuFFT/cuDNN/cuBLAS factory' "
                     "errors; 2.21: its start-up lines); pipeline's own import of it "
                     "(python -m pipeline, or a public name used first) drops 2.16's and "
                     "shows 2.21's once")


def cpp_log_status() -> CppLogStatus:
    """Whether TensorFlow's C++ warnings are hidden in this process (see ``quiet_cpp_logs``)."""
    return _cpp_log


# Which BMP variants go where (pipeline.decode.image.Decoder._bmp).
BMP_DECODERS = ("tensorflow (24-bit uncompressed); other variants (1/4/8-bit palettes, RLE, "
                "16/32-bit, bit fields, OS/2, v4/v5, top-down): pipeline.decode.bmp graph ops when "
                "some file is named .bmp/.dib, else (BMP content under another extension) "
                "the Pillow fallback (slow path)")


def pillow_plugins() -> Set[str]:
    """Formats Pillow can decode here beyond its own: "heif" (pillow-heif), "avif"
    (pillow-avif-plugin or Pillow's own AVIF support)."""
    found = set()
    try:
        import pillow_heif  # pylint: disable=import-outside-toplevel
        pillow_heif.register_heif_opener()
        found.add("heif")
    except ImportError:
        pass
    from PIL import features  # pylint: disable=import-outside-toplevel
    if "avif" in features.get_supported_modules() and features.check_module("avif"):
        found.add("avif")  # Pillow >= 11.3 wheels carry libavif
    else:
        try:
            import pillow_avif  # noqa: F401  pylint: disable=import-outside-toplevel
            found.add("avif")
        except ImportError:
            pass
    return found


@functools.lru_cache(maxsize=None)
def fsspec_problem(protocol: str) -> str:
    """"" when fsspec can open ``protocol`` here, else why not (naming the install)."""
    try:
        import fsspec  # pylint: disable=import-outside-toplevel
        fsspec.get_filesystem_class(protocol)
    except ImportError as e:
        extra = "-e '.[s3]' (in pipeline's checkout)" if protocol in ("s3", "s3a") else "fsspec"
        return f"fsspec cannot open {protocol}:// here ({e}); pip install {extra}"
    except ValueError as e:  # unknown protocol
        return f"fsspec knows no {protocol}:// file system ({e})"
    return ""


def fsspec_available(protocol: str) -> bool:
    """fsspec can open ``protocol`` (e.g. "s3") here: its package for it is installed."""
    return not fsspec_problem(protocol)


def _avif_decoder(tfio_ok: bool) -> Optional[str]:
    """Who decodes AVIF here: Pillow where it reads AVIF, else tensorflow-io, else None."""
    if "avif" in pillow_plugins():
        return "Pillow fallback (slow path)"
    return "tensorflow-io" if tfio_ok else None


def doctor() -> dict:
    """A report of the stack: versions, decoders, filesystems, CPUs, decode parallelism.

    Probes tensorflow-io (see :func:`tfio_status`). Every value is JSON-serialisable.
    """
    st = tfio_status()
    tfio_ok = st.available
    webp = ("tensorflow (tf.io.decode_webp)" if core_webp()
            else "tensorflow-io" if tfio_ok else None)
    decoders = {"JPEG": "tensorflow", "PNG": "tensorflow", "GIF": "tensorflow",
                "BMP": BMP_DECODERS, "WebP": webp,
                "TIFF": ("tensorflow-io (plain TIFFs); other variants: Pillow fallback "
                         "(slow path)" if tfio_ok else "Pillow fallback (slow path)"),
                "AVIF": _avif_decoder(tfio_ok)}
    schemes = _schemes()  # after the probe: tensorflow-io registers its schemes on import
    filesystems = {"local": "file" in schemes or not schemes,
                   "gs": "gs" in schemes}
    for s in ("s3", "hdfs", "az"):
        filesystems[s] = (s in schemes and tfio_ok) or fsspec_available(s)
    cpus = cpu_count()
    return {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": _dist_version("keras"),
        "numpy": _dist_version("numpy"),
        "tensorflow_io": {"version": st.version, "ops_load": tfio_ok, "reason": st.reason},
        "pillow": _dist_version("pillow"),
        "pillow_heif": _dist_version("pillow-heif"),
        "pillow_avif_plugin": _dist_version("pillow-avif-plugin"),
        "s3fs": _dist_version("s3fs"),
        "remote_reader": ("tensorflow-io" if tfio_ok else
                          "fsspec" if _dist_version("fsspec") else None),
        "decoders": decoders,
        "filesystems": filesystems,
        "registered_schemes": schemes,
        "cpu_count": cpus,
        "decode_parallelism": 2 * cpus,
        "decode_parallelism_note": (f"2 x {cpus} CPUs (the default, autotune off); "
                                    "num_parallel_calls= or autotune=True change it"),
        "tf_cpp_log": {"quiet": cpp_log_status().quiet, "how": cpp_log_status().how},
    }


def format_doctor(report: Optional[dict] = None) -> str:
    """:func:`doctor`'s report as text, one fact per line."""
    r = report if report is not None else doctor()
    t = r["tensorflow_io"]
    if t["version"] is None:
        tfio = "not installed"
    elif t["ops_load"]:
        tfio = f"{t['version']} (ops load)"
    else:
        tfio = f"{t['version']} (ops do NOT load: {t['reason']})"
    def opt(v):
        return v if v else "not installed"
    lines = [
        f"Python              {r['python']}",
        f"TensorFlow          {r['tensorflow']}",
        f"Keras               {opt(r['keras'])}",
        f"numpy               {opt(r['numpy'])}",
        f"tensorflow-io       {tfio}",
        f"Pillow              {opt(r['pillow'])}",
        f"pillow-heif         {opt(r['pillow_heif'])}",
        f"pillow-avif-plugin  {opt(r['pillow_avif_plugin'])}",
        f"s3fs                {opt(r.get('s3fs'))}",
        f"remote reader       {r.get('remote_reader') or 'none'} (s3://, hdfs://, az://, "
        f"http(s)://; gs:// is served by TensorFlow)",
        "decoders            " + ", ".join(
            f"{k}: {v or 'unavailable'}" for k, v in r["decoders"].items()),
        "filesystems         " + ", ".join(
            f"{k}: {'yes' if v else 'no'}" for k, v in r["filesystems"].items()),
        f"CPUs                {r['cpu_count']} (affinity-aware)",
        f"decode parallelism  {r['decode_parallelism']} ({r['decode_parallelism_note']})",
    ]
    if "tf_cpp_log" in r:
        c = r["tf_cpp_log"]
        lines.append(f"TF C++ warnings     {'hidden' if c['quiet'] else 'shown'} ({c['how']}); "
                     f"{IMPORT_TIME_LINES}")
    return "\n".join(lines)


def needs_tfio_message(feature: str, path) -> str:
    """One sentence refusing ``feature`` (e.g. "TIFF decoding", "s3:// paths") for ``path``."""
    st = tfio_status()
    if st.available:
        why = f"tensorflow-io {st.version} is available but failed"
    elif st.version is None:
        why = "tensorflow-io is not installed"
    else:
        why = st.reason
    return (f"pipeline: {feature} ({path}) needs tensorflow-io's ops, which are unusable here "
            f"({why}); {TFIO_STACK_HINT}.")


def main(argv=None):
    del argv
    print(format_doctor())


# ``import pipeline`` records the user's TF_CPP_MIN_LOG_LEVEL (changing nothing);
# this module imports TensorFlow through ``native_stderr.import_tensorflow`` unless
# something else did first, so the status is settled here, when it first loads.
native_stderr.record_cpp_log_state()
quiet_cpp_logs(native_stderr.cpp_log_state()[0], not native_stderr.imported_tensorflow())


if __name__ == "__main__":
    main(sys.argv)
