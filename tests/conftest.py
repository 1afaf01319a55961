"""Shared fixtures: real image files (Pillow) in temp dirs, and the shared data; the
hypothesis profiles every property test runs under."""

import gc
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, settings
from PIL import Image

# --- hypothesis profiles ----------------------------------------------------------------------
# PIPELINE_HYPOTHESIS_PROFILE chooses; else "ci" where the CI variable is set (CI sets CI=true,
# and so does .ci/run), else "dev".
#   ci        derandomized (the same examples every run), CI_EXAMPLES examples per test, no
#             example database, no shrinking: a failure is reported as drawn.
#   dev       the same count of random examples (a new draw each run), no shrinking.
#   thorough  PIPELINE_HYPOTHESIS_EXAMPLES examples (default 2000), shrinking a failure
#             unless PIPELINE_HYPOTHESIS_SHRINK=0 (.ci/run --all runs it with 60).
# One example of the option-space tests costs seconds, a shrink minutes.
CI_EXAMPLES = 4
_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                      HealthCheck.data_too_large])
_NO_SHRINK = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
settings.register_profile("ci", max_examples=CI_EXAMPLES, derandomize=True, database=None,
                          phases=_NO_SHRINK, **_COMMON)
settings.register_profile("dev", max_examples=CI_EXAMPLES, phases=_NO_SHRINK, **_COMMON)
settings.register_profile(
    "thorough", max_examples=int(os.environ.get("PIPELINE_HYPOTHESIS_EXAMPLES", "2000")),
    phases=(list(Phase) if os.environ.get("PIPELINE_HYPOTHESIS_SHRINK", "1") != "0"
            else _NO_SHRINK), **_COMMON)
HYPOTHESIS_PROFILE = os.environ.get("PIPELINE_HYPOTHESIS_PROFILE") or (
    "ci" if os.environ.get("CI") else "dev")
settings.load_profile(HYPOTHESIS_PROFILE)



def pytest_collection_finish(session):
    """Once the test modules (and TensorFlow, Keras, JAX, which they import) are loaded,
    their objects leave the garbage collector's generations (``gc.freeze``): the full
    collections that building graphs sets off no longer walk them each time (measured on
    two test files in one process: 8.5 -> 3.1 CPU-s of collection in 170-180 CPU-s)."""
    gc.collect()
    gc.freeze()


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.abspath(os.path.join(REPO, "..", "shared"))
CASES = os.path.join(SHARED, "cases")
# Real photos in class folders: $PIPELINE_DATA_DIR (as the benchmarks and `pipeline bench`
# read it), else ../shared/data/imagenet-sample beside the repository. Tests that need them
# skip, saying so, when neither is there. The variable is read here and then removed from the
# environment, so that every other test (bench, the notebooks) runs as on a fresh clone.
PHOTOS_ENV = "PIPELINE_DATA_DIR"
IMAGENET = os.environ.pop(PHOTOS_ENV, None) or os.path.join(SHARED, "data", "imagenet-sample")


def solid(path, value, size=(12, 10), mode="RGB", fmt=None, **save):
    """Writes an image whose every pixel encodes ``value`` (0-255); returns the path."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    w, h = size
    if mode == "RGB":
        arr = np.full((h, w, 3), value, np.uint8)
    elif mode == "RGBA":
        arr = np.dstack([np.full((h, w, 3), value, np.uint8), np.full((h, w), 255, np.uint8)])
    elif mode in ("L", "P"):
        arr = np.full((h, w), value, np.uint8)
    elif mode == "LA":
        arr = np.dstack([np.full((h, w), value, np.uint8), np.full((h, w), 255, np.uint8)])
    else:
        raise ValueError(mode)
    img = Image.fromarray(arr, "L" if mode == "P" else ("RGB" if mode == "RGB" else mode))
    if mode == "P":
        img = img.convert("P")
    img.save(path, format=fmt, **save)
    return path


def index_values(images):
    """The value each (solid) image encodes: its top-left first channel."""
    a = np.asarray(images)
    return [int(v) for v in a[..., 0, 0, 0].reshape(-1)]


def assert_bench_beside_keras(res: dict, stdout: str, num_images: int, epochs: int):
    """A ``bench --compare=keras --repeats=1`` result (its ``--json_out`` and its stdout):
    the sizes asked for, positive figures, Keras' run over every image of every epoch, and
    the speed-up as the quotient of the two rates."""
    import pytest as _pytest
    assert res["num_images"] == num_images and res["epochs"] == epochs
    for k in ("images_per_sec", "first_batch_sec", "peak_rss_mb"):
        assert res[k] > 0
    assert res["compare"]["keras"]["images_delivered"] == num_images * epochs
    assert res["speedup_vs_keras"] == _pytest.approx(
        res["images_per_sec"] / res["compare"]["keras"]["images_per_sec"])
    assert "pipeline / keras" in stdout


def drain(ds):
    """The elements of an ``on_error="skip"`` dataset (numpy), or [] when every file was
    bad: such an epoch fails at its end, naming the bad files (issue 15), which is the
    only error this lets through."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    try:
        return list(ds.as_numpy_iterator())
    except tf.errors.InvalidArgumentError as e:
        if "every file of this epoch was bad" not in e.message:
            raise
        return []


def flatten(ds):
    """(images, labels) of a batched (x, y) or x dataset, as numpy arrays."""
    xs, ys = [], []
    for el in ds:
        if isinstance(el, tuple):
            xs.append(el[0].numpy())
            ys.append(el[1].numpy())
        else:
            xs.append(el.numpy())
    x = np.concatenate(xs) if xs else np.zeros((0,))
    y = np.concatenate(ys) if ys else None
    return x, y


@pytest.fixture
def class_tree(tmp_path):
    """3 classes (a: 4, b: 3, c: 5 files) of solid PNGs; value = 10 + global index."""
    root = tmp_path / "tree"
    expected = {}
    k = 0
    for cls, count in (("a", 4), ("b", 3), ("c", 5)):
        for j in range(count):
            v = 10 + k
            solid(str(root / cls / f"img_{j}.png"), v)
            expected[v] = cls
            k += 1
    return str(root), expected


def pytest_collection_modifyitems(config, items):
    """Skips tests marked ``needs_tfio`` where tensorflow-io's ops do not load, with the reason.

    The probe (``pipeline.stack.tfio_status``) runs once, only when such a test is collected.
    """
    del config
    marked = [item for item in items if item.get_closest_marker("needs_tfio")]
    if not marked:
        return
    from pipeline import stack  # pylint: disable=import-outside-toplevel
    st = stack.tfio_status()
    if st.available:
        return
    skip = pytest.mark.skip(reason=f"needs tensorflow-io: {st.reason}")
    for item in marked:
        item.add_marker(skip)


def run_cli(*args):
    """``pipeline.cli.run`` in this process: (exit status, stdout, stderr); flags reset after."""
    import io
    from contextlib import redirect_stderr, redirect_stdout
    from absl import flags
    from pipeline import cli
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        with redirect_stdout(out), redirect_stderr(err):
            cli.run(["pipeline", *args])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        flags.FLAGS.unparse_flags()
    return code, out.getvalue(), err.getvalue()


# --- CPU time per test ------------------------------------------------------------------------
# PIPELINE_TEST_CPU_LOG=<file> appends one line per test: its CPU seconds (this process's user +
# system time, all threads, plus that of the subprocesses it waited for), its wall seconds and
# its id. CPU time is what a busy machine does not inflate: the figure to rank tests by when
# deciding what the default tier can afford (docs/install.md).
_CPU_LOG = os.environ.get("PIPELINE_TEST_CPU_LOG")
if _CPU_LOG:
    import resource
    import time as _time

    def _cpu():
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        c0, w0 = _cpu(), _time.monotonic()
        yield
        with open(_CPU_LOG, "a") as f:
            f.write(f"{_cpu() - c0:.2f}\t{_time.monotonic() - w0:.2f}\t{item.nodeid}\n")
