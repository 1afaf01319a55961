"""pipeline: fast, flat-memory, honest TensorFlow input pipelines from file paths.

Public API (see ``API.md`` in the project's shared folder and README.md):
``from_directory``, ``from_paths``, ``errors``, ``scan``, ``Augment``, ``profile``.
"""

import os as _os

_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pipeline.badfiles import ErrorBudgetExceeded, ErrorRecord, errors  # noqa: E402
from pipeline.report import ScanReport, scan  # noqa: E402
from pipeline.sources import from_directory, from_paths  # noqa: E402
from pipeline.augment import Augment  # noqa: E402
from pipeline.profiling import ProfileReport, profile  # noqa: E402

__version__ = "0.1.0"

__all__ = ["from_directory", "from_paths", "errors", "scan", "ScanReport", "ErrorRecord",
           "Augment", "profile", "ProfileReport",
           "ErrorBudgetExceeded", "__version__"]
