"""pipeline: fast, flat-memory, honest TensorFlow input pipelines from file paths.

Public API (reference: ``docs/api.md``, generated from the docstrings; guide: README.md):
factories ``from_directory``, ``from_paths``, ``from_manifest``,
``from_npy_shards``, ``from_generator``, ``from_tfrecords``;
``write_tfrecords``; ``errors``, ``scan``, ``Augment``, ``profile``,
``show_batch``; ``ImageOptions`` (the image options, documented once).
"""

import os as _os
import sys as _sys

# TensorFlow's C++ warnings (e.g. "Local rendezvous is aborting ... OUT_OF_RANGE"
# at each epoch's end) are hidden unless the user chose a level; set before
# TensorFlow loads, or afterwards where TensorFlow allows (pipeline.stack).
_CPP_LOG_LEVEL = _os.environ.get("TF_CPP_MIN_LOG_LEVEL")
_TENSORFLOW_FIRST = "tensorflow" in _sys.modules
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pipeline import stack as _stack  # noqa: E402
_stack.quiet_cpp_logs(_CPP_LOG_LEVEL, _TENSORFLOW_FIRST)

from pipeline.guard import ErrorBudgetExceeded, ErrorRecord, errors  # noqa: E402
from pipeline.config import ImageOptions  # noqa: E402
from pipeline.report import ScanReport, scan  # noqa: E402
from pipeline.sources import (from_directory, from_manifest, from_paths,  # noqa: E402
                              from_tfrecords)
from pipeline.npy import from_npy_shards  # noqa: E402
from pipeline.generator import from_generator  # noqa: E402
from pipeline.shards import write_tfrecords  # noqa: E402
from pipeline.augment import Augment  # noqa: E402
from pipeline.profiling import ProfileReport, profile  # noqa: E402
from pipeline import compat  # noqa: E402
from pipeline.distribute import distribute_dataset, run_dispatcher, run_worker  # noqa: E402
from pipeline.visualize import show_batch  # noqa: E402
from pipeline.resume import (IteratorCheckpoint, NotCheckpointableError,  # noqa: E402
                             check_checkpointable)

__version__ = "0.1.0"

__all__ = ["from_directory", "from_paths", "from_manifest", "from_npy_shards",
           "from_generator", "from_tfrecords", "write_tfrecords", "errors", "ErrorRecord",
           "ErrorBudgetExceeded", "ImageOptions", "scan", "ScanReport", "Augment", "profile", "ProfileReport",
           "compat", "distribute_dataset", "run_dispatcher", "run_worker",
           "IteratorCheckpoint", "NotCheckpointableError", "check_checkpointable",
           "show_batch",
           "__version__"]
