"""pipeline.stack on the stack it runs on: TF 2.16 + tensorflow-io 0.37.1 (its ops load), or a
newer TensorFlow where tensorflow-io's ops cannot load and its features are refused."""

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from pipeline import stack

# File systems and tensorflow-io: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tfio_installed():
    try:
        importlib.metadata.version("tensorflow-io")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


TF216 = tf.__version__.startswith("2.16.")


def test_tfio_status_is_cached_and_frozen():
    a = stack.tfio_status()
    assert stack.tfio_status() is a
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.available = not a.available  # type: ignore[misc]
    assert isinstance(a.available, bool) and isinstance(a.reason, str)


@pytest.mark.skipif(not (TF216 and _tfio_installed()), reason="TF 2.16 with tensorflow-io only")
def test_tfio_available_on_tf216():
    st = stack.tfio_status()
    assert st.available, st.reason
    assert st.version == importlib.metadata.version("tensorflow-io")
    assert st.reason == ""


@pytest.mark.skipif(TF216, reason="TF newer than 2.16 only (tensorflow-io 0.37.1 cannot load)")
def test_tfio_unavailable_after_tf216_names_the_failure():
    st = stack.tfio_status()
    assert not st.available
    if st.version is None:
        assert "not installed" in st.reason
    else:
        assert tf.__version__ in st.reason
        assert st.version in st.reason
        assert "undefined symbol" in st.reason or "cannot" in st.reason, st.reason
        assert "\n" not in st.reason


def test_probe_prints_no_loader_warnings():
    """The undefined-symbol warnings tensorflow-io prints at import are captured."""
    code = ("import warnings; warnings.simplefilter('default')\n"
            "from pipeline import stack\n"
            "s = stack.tfio_status(); print('AVAILABLE', s.available)\n"
            "print(stack.format_doctor())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"AVAILABLE {stack.tfio_status().available}" in p.stdout
    assert "undefined symbol" not in p.stderr
    assert "file system plugins are not loaded" not in p.stderr
    assert "TensorFlow          " + tf.__version__ in p.stdout


def test_core_webp_matches_tensorflow():
    assert stack.core_webp() == hasattr(tf.io, "decode_webp")
    if stack.core_webp():  # TF >= 2.18: WebP without tensorflow-io, with a leading frame axis
        img = tf.io.decode_webp(tf.constant(stack._WEBP_1X1))  # pylint: disable=protected-access
        assert img.shape[:3] == (1, 1, 1)


def test_doctor_report():
    r = stack.doctor()
    json.dumps(r)  # serialisable
    assert r["tensorflow"] == tf.__version__
    assert r["python"] == ".".join(map(str, sys.version_info[:3]))
    assert r["keras"] == importlib.metadata.version("keras")
    assert r["numpy"] == importlib.metadata.version("numpy")
    st = stack.tfio_status()
    assert r["tensorflow_io"] == {"version": st.version, "ops_load": st.available,
                                  "reason": st.reason}
    d = r["decoders"]
    assert all(d[k] == "tensorflow" for k in ("JPEG", "PNG", "GIF"))
    # the doctor line for BMP says which variants take the Pillow fallback
    assert d["BMP"] == stack.BMP_DECODERS
    assert d["BMP"].startswith("tensorflow (24-bit uncompressed); other variants")
    assert "Pillow fallback" in d["BMP"] and "pipeline.decode.bmp" in d["BMP"]
    assert (d["WebP"] is not None) == (stack.core_webp() or st.available)
    # TIFF decodes on every stack (the Pillow fallback where tensorflow-io's ops do not load)
    assert d["TIFF"].startswith("tensorflow-io" if st.available else "Pillow fallback")
    assert d["AVIF"] is not None
    fs = r["filesystems"]
    assert fs["local"]
    # s3:// is read by tensorflow-io where its ops load, else by fsspec where s3fs is installed
    assert fs["s3"] == (st.available or importlib.util.find_spec("s3fs") is not None)
    assert r["cpu_count"] == len(os.sched_getaffinity(0))
    assert r["decode_parallelism"] == 2 * r["cpu_count"]
    text = stack.format_doctor(r)
    for word in ("Python", "TensorFlow", "Keras", "numpy", "tensorflow-io", "Pillow",
                 "decoders", "filesystems", "CPUs", "decode parallelism"):
        assert word in text


def test_needs_tfio_message_is_one_clear_sentence():
    msg = stack.needs_tfio_message("TIFF decoding", "photos/scan.tif")
    assert "TIFF decoding" in msg and "photos/scan.tif" in msg
    assert "tensorflow-io" in msg
    assert "constraints/tf216.txt" in msg and "2.16" in msg
    assert "\n" not in msg and msg.endswith(".")
    st = stack.tfio_status()
    if not st.available and st.version is None:   # not installed: the hint says which extra
        assert "tensorflow-io is not installed" in msg and "[tfio]" in msg
    elif not st.available:                         # installed but its ops do not load
        assert st.reason in msg


@pytest.mark.needs_tfio
def test_needs_tfio_marker_runs_only_where_tfio_loads():
    """conftest skips this where tensorflow-io's ops do not load; where it runs, they do."""
    assert stack.tfio_status().available


# --- issue 15: TensorFlow's C++ log lines, in both import orders ---------------------

_EPOCH_SCRIPT = r"""
import os, sys
FOLDER, CACHE_DIR, ORDER = sys.argv[1:4]
if ORDER == "tensorflow_first":
    import tensorflow
import pipeline
from pipeline import stack
st = stack.cpp_log_status()
print("STATUS", int(st.quiet), st.how, file=sys.stderr, flush=True)
aug = pipeline.Augment(random_resized_crop=True, horizontal_flip=True, rotation=15,
                       brightness=0.1, contrast=0.2)   # the README's example
for cache, augment in ((None, None), ("memory", None), (os.path.join(CACHE_DIR, "c"), aug)):
    ds = pipeline.from_directory(FOLDER, image_size=(32, 32), batch_size=4, cache=cache,
                                 augment=augment, seed=42)
    n = sum(int(x.shape[0]) for x, _ in ds)          # one full epoch
    print("EPOCH", cache, n, file=sys.stderr, flush=True)
"""


def _one_epoch_each(tmp_path, order, level=None):
    from conftest import solid
    folder = tmp_path / "photos"
    for c in ("a", "b"):
        for i in range(5):
            solid(str(folder / c / f"{i}.jpg"), 20 * i, size=(40, 30), fmt="JPEG")
    (tmp_path / "cache").mkdir()
    script = tmp_path / "epoch.py"
    script.write_text(_EPOCH_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level
    env["PYTHONPATH"] = REPO
    proc = subprocess.run([sys.executable, str(script), str(folder), str(tmp_path / "cache"),
                           order], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("EPOCH") == 3 and "EPOCH None 10" in proc.stderr
    status = next(l for l in proc.stderr.splitlines() if l.startswith("STATUS "))
    return proc.stderr, status.startswith("STATUS 1"), tmp_path / "cache"


def test_cache_false_alarm_and_epoch_end_lines_hidden_when_pipeline_comes_first(tmp_path):
    err, quiet, cache_dir = _one_epoch_each(tmp_path, "pipeline_first")
    assert quiet
    for line in stack.CPP_LOG_HARMLESS:
        assert line not in err, err[-2000:]
    # the file cache is complete: its index and data, no lock file left
    files = sorted(os.listdir(cache_dir))
    assert any(f.endswith(".index") for f in files), files
    assert any(".data-" in f for f in files) and not any("lockfile" in f for f in files), files


def test_cpp_lines_when_tensorflow_comes_first(tmp_path):
    """Hidden where TensorFlow logs through absl (2.21); on 2.16 one warning says why not."""
    err, quiet, _ = _one_epoch_each(tmp_path, "tensorflow_first")
    hint = "tensorflow was imported before pipeline"
    if TF216:
        assert not quiet
        assert err.count(hint) == 1 and "TF_CPP_MIN_LOG_LEVEL=2" in err
        assert "use a pipeline name (pipeline.from_directory, say) before import tensorflow" in err
        # the note comes before TensorFlow's first harmless line
        first = min(err.find(l) for l in stack.CPP_LOG_HARMLESS if l in err)
        assert err.find(hint) < first
    else:
        assert quiet and hint not in err
        for line in stack.CPP_LOG_HARMLESS:
            assert line not in err, err[-2000:]


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_jax_import_default_level_is_not_taken_for_the_users():
    """``import jax`` runs os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = REPO
    code = ("import os, jax; assert os.environ['TF_CPP_MIN_LOG_LEVEL'] == '1'\n"
            "import pipeline; from pipeline import stack\n"
            "print('LEVEL', os.environ['TF_CPP_MIN_LOG_LEVEL'], stack.cpp_log_status().quiet)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # quiet (TensorFlow loaded at level 2), and jax's value left in the environment
    assert "LEVEL 1 True" in proc.stdout, proc.stdout + proc.stderr[-2000:]


@pytest.mark.parametrize("level", [None, "0"])
def test_import_pipeline_and_its_tensorflow_import_leave_the_environment_alone(level):
    """``import pipeline``, a public name's first use (which imports TensorFlow) and
    ``pipeline.stack`` change no environment variable; TensorFlow still reads level 2
    while pipeline imports it, unless the user set one."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = REPO
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level
    code = ("import os, sys; before = dict(os.environ)\n"
            "import pipeline; assert dict(os.environ) == before, 'import pipeline'\n"
            "pipeline.from_directory; assert 'tensorflow' in sys.modules\n"
            "from pipeline import stack; assert dict(os.environ) == before, 'tensorflow'\n"
            "print('QUIET', stack.cpp_log_status().quiet, stack.cpp_log_status().how)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if level is None:
        assert "QUIET True TF_CPP_MIN_LOG_LEVEL=2 (errors only), set by pipeline while it " \
               "imported TensorFlow" in proc.stdout, proc.stdout
    else:
        assert "QUIET False TF_CPP_MIN_LOG_LEVEL=0 as set by the user" in proc.stdout, proc.stdout


def test_a_level_set_by_the_user_is_left_alone(tmp_path):
    err, quiet, _ = _one_epoch_each(tmp_path, "tensorflow_first", level="0")
    assert not quiet and "TF_CPP_MIN_LOG_LEVEL=0 as set by the user" in err
    assert "tensorflow was imported before pipeline" not in err
    # level 0 shows TensorFlow's false alarm on the (complete) file cache
    assert "did not fully read the dataset being cached" in err


def test_stack_line_says_what_decodes_tiff_and_reads_s3():
    """The line bench and scan print first: TIFF/AVIF decode on every stack."""
    from pipeline.tools import report
    line = report.stack_line()
    assert "refused" not in line, line
    if stack.tfio_status().available:
        assert "tensorflow-io" in line and "TIFF" in line
    else:
        assert "TIFF and AVIF through the Pillow fallback" in line, line
        assert "s3:// through fsspec" in line or "tf-image-pipeline[s3]" in line, line


@stack.traced_once(tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int64))
def _prefix_length(contents, n):
    head = tf.strings.substr(contents, tf.constant(0, tf.int64), n)
    return tf.strings.length(head), head


def test_traced_once_is_one_case_op_in_a_graph_and_traced_once_per_process():
    data = tf.data.Dataset.from_tensor_slices([b"abcdef", b"xy"])
    got = []
    for n in (1, 3):  # two datasets, two graphs: one trace
        ds = data.map(lambda c, n=n: _prefix_length(c, tf.constant(n, tf.int64)))
        got.append([(int(a), b) for a, b in ds.as_numpy_iterator()])
    assert got == [[(1, b"a"), (1, b"x")], [(3, b"abc"), (2, b"xy")]]
    assert _prefix_length.traced.experimental_get_tracing_count() == 1
    g = tf.Graph()
    with g.as_default():
        _prefix_length(tf.constant(b"abc"), tf.constant(2, tf.int64))
    assert [op.type for op in g.get_operations() if op.type in ("Case", "PartitionedCall",
                                                                "StatefulPartitionedCall")] == ["Case"]
    eager = _prefix_length(tf.constant(b"hello"), tf.constant(4, tf.int64))
    assert (int(eager[0]), eager[1].numpy()) == (4, b"hell")


def test_the_jpeg_checks_are_traced_once_across_factory_calls(tmp_path):
    import numpy as np  # pylint: disable=import-outside-toplevel
    from PIL import Image  # pylint: disable=import-outside-toplevel

    import pipeline  # pylint: disable=import-outside-toplevel
    from pipeline.decode import image as decode  # pylint: disable=import-outside-toplevel
    for c in "ab":
        os.makedirs(tmp_path / c)
        Image.fromarray(np.full((8, 9, 3), 7, np.uint8)).save(tmp_path / c / "0.jpg")
    counts = []
    for size in ((4, 4), (6, 5)):
        ds = pipeline.from_directory(str(tmp_path), image_size=size, batch_size=2)
        assert sum(int(x.shape[0]) for x, _ in ds) == 2
        counts.append([f.traced.experimental_get_tracing_count() for f in (
            decode._exif_block_orientation, decode._progressive_cut_reason(True))])
    assert counts[0] == counts[1] == [1, 1]


def test_decode_and_batch_checks_are_traced_once_for_every_image_size(tmp_path):
    import numpy as np  # pylint: disable=import-outside-toplevel
    from PIL import Image  # pylint: disable=import-outside-toplevel

    import pipeline  # pylint: disable=import-outside-toplevel
    from pipeline.decode import image as decode  # pylint: disable=import-outside-toplevel
    rng = np.random.default_rng(0)
    for c in "ab":
        os.makedirs(tmp_path / c)
        Image.fromarray(rng.integers(0, 255, (40, 36, 3), np.uint8)).save(tmp_path / c / "0.jpg")

    def pixels(size):
        ds = pipeline.from_directory(str(tmp_path), image_size=size, batch_size=None,
                                     shuffle=False)
        return [x.numpy() for x, _ in ds]

    first = pixels((8, 8))
    calls = lambda: sorted(  # noqa: E731 (the traced bodies of decode and check_batch)
        fn.traced.experimental_get_tracing_count() for fn in
        [v for v in decode._SHARED_DECODES.values()] + [v[0] for v in decode._SHARED_CHECKS.values()])
    before = calls()
    for size in ((6, 5), (12, 10), (20, 18)):  # 12x10: 40x36 decoded at 1/2 scale (>= 2.4x)
        got = pixels(size)
        assert [x.shape for x in got] == [size + (3,)] * 2
    assert calls() == before and set(before) == {1}
    np.testing.assert_array_equal(pixels((8, 8)), first)


def test_decoders_share_a_graph_where_they_build_the_same_one():
    """The traced bodies are keyed by what decides them: the batched checks by ``max_pixels``
    and ``exif_orientation`` alone (not the channels or the formats in the graph), and the
    decode graph without ``tfio_unusable`` where no reason quotes it (the Pillow fallback on,
    AVIF read by Pillow), so a folder with a TIFF does not trace a second decode graph."""
    from pipeline import stack  # pylint: disable=import-outside-toplevel
    from pipeline.decode import image as decode  # pylint: disable=import-outside-toplevel
    why = "tensorflow-io is not installed"
    rgb, gray = decode.Decoder(3), decode.Decoder(1, others_in_graph=False, bmp_in_graph=True)
    assert rgb.check_key() == gray.check_key() != decode.Decoder(3, max_pixels=10).check_key()
    assert rgb.check_key() != decode.Decoder(3, exif_orientation=False).check_key()
    assert rgb.graph_key() != gray.graph_key()
    with_avif = "avif" in stack.pillow_plugins()
    assert (rgb.graph_key() == decode.Decoder(3, tfio_unusable=why).graph_key()) == with_avif
    # Refusing on tf.data service workers quotes it: there it stays in the key.
    assert (decode.Decoder(3, fallback=False).graph_key()
            != decode.Decoder(3, fallback=False, tfio_unusable=why).graph_key())
    # and the reasons the two decoders put in their graphs are the same where keys match
    if with_avif:
        assert (rgb._optional_reasons().numpy().tolist()  # pylint: disable=protected-access
                == decode.Decoder(3, tfio_unusable=why)._optional_reasons().numpy().tolist())
