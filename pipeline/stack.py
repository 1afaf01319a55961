"""Stack: which optional decoders and filesystems this TensorFlow can use (probed once, lazily).

tensorflow-io's ops load only with the TensorFlow it was built for (0.37.1:
TF 2.16.x); with a newer TensorFlow ``import tensorflow_io`` succeeds but every
op fails. So an op is probed, not the import.
"""

from __future__ import annotations

import dataclasses
import functools

import tensorflow as tf

TF216_HINT = ("install the TensorFlow 2.16 stack: pip install -c constraints/tf216.txt -e . "
              "(tensorflow 2.16.2 with tensorflow-io 0.37.1)")


@dataclasses.dataclass(frozen=True)
class TfioStatus:
    """Whether tensorflow-io's ops load here: ``available``, its ``version``,
    and the ``reason`` (str) when they do not."""
    available: bool
    version: str = ""
    reason: str = ""


@functools.lru_cache(maxsize=None)
def tfio_status() -> TfioStatus:
    """Imports tensorflow-io (once, on first call) and runs one of its ops."""
    try:
        import tensorflow_io as tfio  # pylint: disable=import-outside-toplevel
    except Exception as e:  # noqa: BLE001 - any failure means: not usable
        return TfioStatus(False, "", f"tensorflow-io is not importable ({type(e).__name__}: {e})")
    version = getattr(tfio, "__version__", "")
    try:
        tfio.experimental.image.decode_jpeg_exif(tf.constant(b"\xff\xd8\xff\xd9"))
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return TfioStatus(False, version, f"tensorflow-io {version} cannot load its ops with "
                          f"TensorFlow {tf.__version__} ({first})")
    return TfioStatus(True, version)


def core_webp() -> bool:
    """TensorFlow decodes WebP itself (``tf.io.decode_webp``, TF >= 2.18)."""
    return hasattr(tf.io, "decode_webp")


def needs_tfio_message(feature: str, path: str) -> str:
    """One sentence: ``feature`` for ``path`` needs tensorflow-io, why it is unusable, and the fix."""
    return (f"{feature} needs tensorflow-io, which is unusable here: "
            f"{tfio_status().reason}. File: {path}. To use it, {TF216_HINT}")
