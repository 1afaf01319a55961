"""pipeline: fast, flat-memory, honest TensorFlow input pipelines from file paths.

Public API (reference: ``docs/api.md``, generated from the docstrings; guide: README.md):
factories ``from_directory``, ``from_paths``, ``from_manifest``,
``from_npy_shards``, ``from_generator``, ``from_tfrecords``;
``write_tfrecords``; ``errors``, ``scan``, ``Augment``, ``profile``,
``show_batch``, ``class_weights``; ``ImageOptions`` (the image options, documented once).

``import pipeline`` does not import TensorFlow: each public name loads its
module (and TensorFlow) the first time it is used, so that
``python -m pipeline --help`` answers without TensorFlow's start-up cost and
lines. Imported that way, TensorFlow's start-up lines show once
(``pipeline.native_stderr.import_tensorflow``).

The modules, in data-flow order (docs/architecture.md): ``config`` and ``checks``
(the option groups, checked once); ``sources/`` (what to read: factories, index,
manifest, pairs, npy, generator, read); ``deliver/plan`` (shard, shuffle: the one
order of the stages); ``decode/`` (the batched checks, the decoders, formats, masks,
and ``guard``: raise, or skip and record); ``transform/`` (geometry, augment,
quality); ``assemble`` (``build``: one line per stage); ``deliver/`` (distribute,
service_args, resume, balance, cachelock); ``convert/`` (TFRecord shards: shards,
shard_writer, beam_write); ``tools/`` (scan's report, profiling, visualize, capacity,
sample, apidoc, bench); ``compat`` (migration); ``cli`` and ``__main__`` (the command
line); ``stack`` and ``native_stderr`` (the installed stack and TensorFlow's logs).
"""

import importlib as _importlib

from pipeline import native_stderr as _native_stderr

# TensorFlow's C++ warnings (e.g. "Local rendezvous is aborting ... OUT_OF_RANGE"
# at each epoch's end) are hidden unless the user chose a level: while pipeline
# imports TensorFlow (native_stderr.import_tensorflow), or afterwards where
# TensorFlow allows (pipeline.stack). Importing pipeline changes no environment
# variable; it records the user's level and whether TensorFlow came first.
_native_stderr.record_cpp_log_state()
if _native_stderr.cpp_log_state()[1]:
    # TensorFlow is loaded already: set its level now (or say at once why it cannot be).
    from pipeline import stack as _stack  # noqa: E402,F401

DISTRIBUTION = "tf-image-pipeline"  # the name on the package index; the import name is pipeline


def _version() -> str:
    """The installed distribution's version; in a source tree that is not installed
    (or installed under another name), the one in its ``setup.cfg``."""
    from importlib import metadata  # pylint: disable=import-outside-toplevel
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pass
    import configparser  # pylint: disable=import-outside-toplevel
    import os  # pylint: disable=import-outside-toplevel
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "setup.cfg"), encoding="utf-8")
    if cfg.get("metadata", "name", fallback="") == DISTRIBUTION:
        return cfg.get("metadata", "version", fallback="0+unknown")
    return "0+unknown"


__version__ = _version()

# public name -> the module that defines it (imported on first use)
_EXPORTS = {
    "ErrorBudgetExceeded": "pipeline.decode.guard", "ErrorRecord": "pipeline.decode.guard",
    "errors": "pipeline.decode.guard",
    "ImageOptions": "pipeline.config",
    "class_weights": "pipeline.deliver.balance",
    "ScanReport": "pipeline.tools.report", "scan": "pipeline.tools.report",
    "from_directory": "pipeline.sources.factories", "from_manifest": "pipeline.sources.factories",
    "from_paths": "pipeline.sources.factories", "from_tfrecords": "pipeline.sources.factories",
    "from_npy_shards": "pipeline.sources.npy",
    "from_generator": "pipeline.sources.generator",
    "write_tfrecords": "pipeline.convert.shards",
    "Augment": "pipeline.transform.augment",
    "ProfileReport": "pipeline.tools.profiling", "profile": "pipeline.tools.profiling",
    "distribute_dataset": "pipeline.deliver.distribute", "run_dispatcher": "pipeline.deliver.distribute",
    "run_worker": "pipeline.deliver.distribute",
    "show_batch": "pipeline.tools.visualize",
    "IteratorCheckpoint": "pipeline.deliver.resume", "NotCheckpointableError": "pipeline.deliver.resume",
    "check_checkpointable": "pipeline.deliver.resume",
}
_SUBMODULES = ("compat",)
# modules that sat at the top level before the stage folders: ``from pipeline import sample``
# still works (with a DeprecationWarning naming the new place); ``import pipeline.sample`` does not
_MOVED = {
    **{m: f"pipeline.sources.{m}" for m in ("generator", "index", "manifest", "npy", "pairs",
                                            "read")},
    **{m: f"pipeline.decode.{m}" for m in ("bmp", "formats", "guard", "jpegscan", "masks")},
    **{m: f"pipeline.transform.{m}" for m in ("augment", "quality")},
    **{m: f"pipeline.deliver.{m}" for m in ("balance", "cachelock", "distribute", "plan",
                                            "resume", "service_args")},
    **{m: f"pipeline.convert.{m}" for m in ("beam_write", "shard_writer", "shards")},
    **{m: f"pipeline.tools.{m}" for m in ("apidoc", "capacity", "profiling", "report", "sample",
                                          "visualize")},
    "benchmarking": "pipeline.tools.bench",
}

__all__ = ["from_directory", "from_paths", "from_manifest", "from_npy_shards",
           "from_generator", "from_tfrecords", "write_tfrecords", "errors", "ErrorRecord",
           "ErrorBudgetExceeded", "ImageOptions", "scan", "ScanReport", "Augment", "profile", "ProfileReport",
           "compat", "distribute_dataset", "run_dispatcher", "run_worker",
           "IteratorCheckpoint", "NotCheckpointableError", "check_checkpointable",
           "show_batch", "class_weights",
           "__version__"]


def __getattr__(name):
    """Loads a public name's module on first use (PEP 562).

    TensorFlow, which every such module imports, is imported first through
    ``native_stderr.import_tensorflow``: its start-up lines show once (TensorFlow
    2.21 writes them twice), TensorFlow 2.16's known-harmless "Unable to register
    cuFFT/cuDNN/cuBLAS factory" errors are dropped, and ``bench``'s candidate
    processes leave out the lines shown here.
    """
    if name in _EXPORTS or name in _SUBMODULES:
        _native_stderr.import_tensorflow()  # a no-op once TensorFlow is imported
    if name in _EXPORTS:
        value = getattr(_importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = _importlib.import_module(f"pipeline.{name}")
    elif name in _MOVED:
        import warnings  # pylint: disable=import-outside-toplevel
        warnings.warn(f"pipeline.{name} is now {_MOVED[name]}: import it from there",
                      DeprecationWarning, stacklevel=2)
        return _importlib.import_module(_MOVED[name])
    else:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
