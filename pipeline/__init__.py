"""pipeline: fast, flat-memory, honest TensorFlow input pipelines from file paths.

Public API (see ``API.md`` in the project's shared folder and README.md):
``from_directory``, ``from_paths``, ``errors``.
"""

import os as _os

_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pipeline.badfiles import ErrorBudgetExceeded, ErrorRecord, errors  # noqa: E402
from pipeline.sources import from_directory, from_paths  # noqa: E402
from pipeline import compat  # noqa: E402
from pipeline.distribute import distribute_dataset, run_dispatcher, run_worker  # noqa: E402
from pipeline.resume import IteratorCheckpoint, NotCheckpointableError, check_checkpointable  # noqa: E402,E501

__version__ = "0.1.0"

__all__ = ["from_directory", "from_paths", "errors", "ErrorRecord",
           "ErrorBudgetExceeded", "__version__",
           "compat", "IteratorCheckpoint", "distribute_dataset", "run_dispatcher", "run_worker", "NotCheckpointableError", "check_checkpointable"]
