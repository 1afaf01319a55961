"""What the installed stack can do: TensorFlow, Keras, tensorflow-io, decoders, filesystems.

Standalone: imports only TensorFlow, absl and the standard library (no other ``pipeline``
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

import dataclasses
import functools
import importlib.metadata
import os
import platform
import re
import sys
import threading
import warnings
from typing import Optional

import tensorflow as tf

from pipeline import checks

__all__ = ["TfioStatus", "tfio_status", "core_webp", "doctor", "format_doctor",
           "needs_tfio_message", "cpu_count", "TFIO_STACK_HINT"]

# A 1x1 lossless WebP (one red pixel), written by Pillow: the op probe's input.
_WEBP_1X1 = (b"RIFF\x1c\x00\x00\x00WEBPVP8L\x0f\x00\x00\x00/\x00\x00\x00\x00\x07\x10"
             b"\xfd\x8f\xfe\x07\"\xa2\xff\x01\x00")

# Schemes that tensorflow-io registers when its plugins load (TensorFlow has gs, file, ram).
TFIO_SCHEMES = ("s3", "hdfs", "viewfs", "har", "az", "http", "https", "oss")

TFIO_STACK_HINT = ("install TensorFlow 2.16 with tensorflow-io 0.37.1, the stack that provides "
                   "it, e.g. pip install -c constraints/tf216.txt -e . (tensorflow==2.16.2, "
                   "tensorflow-io==0.37.1)")


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
        return TfioStatus(False, None, "tensorflow-io is not installed")
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


def core_webp() -> bool:
    """True when TensorFlow decodes WebP itself (``tf.io.decode_webp``, TF >= 2.18)."""
    return hasattr(tf.io, "decode_webp")


cpu_count = checks.cpu_count  # the CPUs this process may run on (affinity-aware)


def _schemes() -> list:
    try:
        return sorted(s for s in tf.io.gfile.get_registered_schemes() if s)
    except Exception:  # pylint: disable=broad-except
        return []


def doctor() -> dict:
    """A report of the stack: versions, decoders, filesystems, CPUs, decode parallelism.

    Probes tensorflow-io (see :func:`tfio_status`). Every value is JSON-serialisable.
    """
    st = tfio_status()
    tfio_ok = st.available
    webp = ("tensorflow (tf.io.decode_webp)" if core_webp()
            else "tensorflow-io" if tfio_ok else None)
    decoders = {"JPEG": "tensorflow", "PNG": "tensorflow", "GIF": "tensorflow",
                "BMP": "tensorflow", "WebP": webp,
                "TIFF": "tensorflow-io" if tfio_ok else None,
                "AVIF": "tensorflow-io" if tfio_ok else None}
    schemes = _schemes()  # after the probe: tensorflow-io registers its schemes on import
    filesystems = {"local": "file" in schemes or not schemes,
                   "gs": "gs" in schemes}
    for s in ("s3", "hdfs", "az"):
        filesystems[s] = s in schemes and tfio_ok
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
        "decoders": decoders,
        "filesystems": filesystems,
        "registered_schemes": schemes,
        "cpu_count": cpus,
        "decode_parallelism": 2 * cpus,
        "decode_parallelism_note": (f"2 x {cpus} CPUs (the default, autotune off); "
                                    "num_parallel_calls= or autotune=True change it"),
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
        "decoders            " + ", ".join(
            f"{k}: {v or 'unavailable'}" for k, v in r["decoders"].items()),
        "filesystems         " + ", ".join(
            f"{k}: {'yes' if v else 'no'}" for k, v in r["filesystems"].items()),
        f"CPUs                {r['cpu_count']} (affinity-aware)",
        f"decode parallelism  {r['decode_parallelism']} ({r['decode_parallelism_note']})",
    ]
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


if __name__ == "__main__":
    main(sys.argv)
