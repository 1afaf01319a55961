"""The absl flags that the scripts of ``benchmarks/`` share, and their data folder.

Importing this module puts the repository first on ``sys.path`` (a script runs
from a checkout without installing the package) and defines no flag. Each
script then defines the shared flags it takes, with its own defaults, by one
``define`` call, and its other flags with ``absl.flags`` as usual:

    import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
    from common_flags import FLAGS

    common_flags.define(data_dir="Class-folder photo root.", image_size=224,
                        repeats=(5, "Alternating rounds (pipeline, plain)."),
                        json_out="guard_cost.json")

``data_dir(FLAGS.data_dir)`` is the folder a script reads: ``--data_dir`` when
given, else ``pipeline.tools.sample.default_data_dir()`` (``$PIPELINE_DATA_DIR``, the
shared photo sample next to the repository, else the built-in generated sample).
"""

from __future__ import annotations

import os
import sys

from absl import flags

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

FLAGS = flags.FLAGS

# What ``--data_dir`` does without a value; each script's help is its own lead-in + this.
DATA_DIR_HELP = ("Default: $PIPELINE_DATA_DIR, else "
                 "../shared/data/imagenet-sample next to the repository, else a generated "
                 "sample (pipeline.tools.sample.default_data_dir).")

# The shared flags: name -> (absl definer, help when the script gives none).
SHARED = {
    "num_images": (flags.DEFINE_integer, "Use only the first N photos (symlinked); 0 = all."),
    "image_size": (flags.DEFINE_integer, "Output height and width (pixels)."),
    "batch_size": (flags.DEFINE_integer, "Batch size (images)."),
    "epochs": (flags.DEFINE_integer, "Epochs per run."),
    "repeats": (flags.DEFINE_integer, "Rounds; the candidates alternate within each round."),
    "seed": (flags.DEFINE_integer, "Shuffle (and augmentation) seed."),
    "timeout": (flags.DEFINE_integer, "Seconds allowed per candidate run."),
    "progress": (flags.DEFINE_bool, "tqdm bars on stderr."),
    "json_out": (flags.DEFINE_string, "JSON result file."),
    "png_out": (flags.DEFINE_string, "PNG plot (default: json_out with .png)."),
}


def define(data_dir=None, **shared) -> None:
    """Defines ``--data_dir`` (when ``data_dir``, its help's lead-in, is given) and the
    ``SHARED`` flags named in ``shared``.

    Args:
        data_dir: str, the first words of ``--data_dir``'s help (default None, no
            default folder given: ``data_dir()`` picks it); the rest is ``DATA_DIR_HELP``.
        **shared: ``name=default`` or ``name=(default, help)`` for each ``SHARED``
            flag the script takes (``help`` replaces the shared help).

    The flags are the calling script's (its ``--helpshort`` lists them), not this module's.

    Raises:
        TypeError: a name that is not in ``SHARED``.
    """
    unknown = sorted(set(shared) - set(SHARED))
    if unknown:
        raise TypeError(f"define(): not shared flags: {', '.join(unknown)}; the shared ones: "
                        f"{', '.join(SHARED)}. Received: {', '.join(unknown)}")
    caller = sys._getframe(1).f_globals.get("__name__")  # pylint: disable=protected-access
    module = sys.argv[0] if caller == "__main__" else caller  # as absl names a module
    if data_dir is not None:
        flags.DEFINE_string("data_dir", None, f"{data_dir} {DATA_DIR_HELP}", module_name=module)
    for name, value in shared.items():
        definer, text = SHARED[name]
        default, text = value if isinstance(value, tuple) else (value, text)
        definer(name, default, text, module_name=module)


def data_dir(flag_value=None, num_images: int = 256) -> str:
    """``--data_dir`` when given, else ``pipeline.tools.sample.default_data_dir()`` (a generated
    sample of ``num_images`` when neither ``$PIPELINE_DATA_DIR`` nor the shared sample is
    there)."""
    from pipeline.tools import sample  # pylint: disable=import-outside-toplevel
    return sample.default_data_dir(flag_value, num_images=num_images)
