"""pipeline.stack on the stack it runs on: TF 2.16 + tensorflow-io 0.37.1 (its ops load), or a
newer TensorFlow where tensorflow-io's ops cannot load and its features are refused."""

import dataclasses
import importlib.metadata
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from pipeline import stack

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
    assert all(d[k] == "tensorflow" for k in ("JPEG", "PNG", "GIF", "BMP"))
    assert (d["WebP"] is not None) == (stack.core_webp() or st.available)
    assert (d["TIFF"] is not None) == st.available
    fs = r["filesystems"]
    assert fs["local"]
    assert fs["s3"] == fs["hdfs"] == st.available
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
    if not st.available:
        assert st.reason in msg


@pytest.mark.needs_tfio
def test_needs_tfio_marker_runs_only_where_tfio_loads():
    """conftest skips this where tensorflow-io's ops do not load; where it runs, they do."""
    assert stack.tfio_status().available
