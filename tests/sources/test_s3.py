"""s3:// sources against moto's S3 server on loopback (TF part in a subprocess, see docs/notes.md)."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from io_helpers import write_image

# File systems and tensorflow-io: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUCKET = "bkt"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    boto3 = pytest.importorskip("boto3")
    port = _free_port()
    moto = os.path.join(os.path.dirname(sys.executable), "moto_server")
    cmd = [moto, "-H", "127.0.0.1", "-p", str(port)] if os.path.exists(moto) else [
        sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {"S3_ENDPOINT": f"http://127.0.0.1:{port}", "AWS_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "S3_USE_HTTPS": "0", "S3_VERIFY_SSL": "0"}
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        client = boto3.client("s3", endpoint_url=env["S3_ENDPOINT"], region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=BUCKET)
        local = tmp_path_factory.mktemp("s3src")
        k = 0
        for c, count in (("cat", 2), ("dog", 3)):
            for j in range(count):
                k += 1
                p = write_image(str(local / f"{c}_{j}.png"), k)
                client.upload_file(p, BUCKET, f"src/{c}/img{j}.png")
        client.put_object(Bucket=BUCKET, Key="src/.hidden.png", Body=b"x")
        client.put_object(Bucket=BUCKET, Key="m.csv", Body=(
            "path,label\nsrc/dog/img2.png,dog\nsrc/cat/img0.png,cat\n").encode())
        yield env
    finally:
        proc.terminate()
        proc.wait(10)


SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    import pipeline
    out = {}
    def vals(ds):
        xs, ys = [], []
        for x, y in ds:
            xs += [int(v) for v in x.numpy()[:, 0, 0, 0]]
            ys += [int(v) for v in y.numpy()]
        return [xs, ys]
    o = dict(image_size=(4, 4), batch_size=2, shuffle=False)
    ds = pipeline.from_directory("s3://bkt/src", **o)
    out["dir"] = vals(ds) + [ds.class_names, ds.file_paths]
    out["paths"] = vals(pipeline.from_paths(ds.file_paths[::-1], [1, 1, 1, 0, 0], **o))
    out["manifest"] = vals(pipeline.from_manifest("s3://bkt/m.csv", **o))
    meta = pipeline.write_tfrecords("s3://bkt/src", "s3://bkt/rec", num_shards=2, shuffle=False,
                                    progress=False)
    out["rec_meta"] = meta["num_examples"]
    out["rec"] = vals(pipeline.from_tfrecords("s3://bkt/rec", **o))
    try:
        pipeline.from_directory("s3://bkt/nope", **o)
    except FileNotFoundError as e:
        out["missing"] = str(e)
    print("RESULT " + json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)
""")


@pytest.mark.needs_tfio
def test_s3_sources(s3):
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=240, env={**os.environ, **s3, "PYTHONPATH": ROOT,
                                            "TF_CPP_MIN_LOG_LEVEL": "3"})
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert line, f"exit {proc.returncode}; stderr tail:\n{proc.stderr[-3000:]}"
    out = json.loads(line[0][len("RESULT "):])
    xs, ys, names, paths = out["dir"]
    assert xs == [1, 2, 3, 4, 5] and ys == [0, 0, 1, 1, 1] and names == ["cat", "dog"]
    assert paths[0] == "s3://bkt/src/cat/img0.png" and paths == sorted(paths)
    assert out["paths"] == [[5, 4, 3, 2, 1], [1, 1, 1, 0, 0]]
    assert out["manifest"] == [[5, 1], [1, 0]]
    assert out["rec_meta"] == 5 and out["rec"] == [[1, 2, 3, 4, 5], [0, 0, 1, 1, 1]]
    assert "s3://bkt/nope" in out["missing"]


def test_not_found_hints(monkeypatch):
    from pipeline.sources import read
    monkeypatch.setenv("S3_ENDPOINT", "127.0.0.1:9000")
    msg = read.hint(RuntimeError("Could not find directory"), "s3://b/x")
    assert "has no scheme; use e.g. 'http://127.0.0.1:9000'" in msg
    if "tensorflow_io" not in sys.modules:
        assert "needs tensorflow-io imported" in msg
    assert read.hint(RuntimeError("gone"), "/local/x") == "gone"


@pytest.mark.needs_tfio
def test_s3_startup_benchmark_lists_per_folder_no_object_requests(tmp_path):
    """benchmarks/s3_startup.py, tiny: 200 objects in 10 folders. Before the first
    batch, one folder listing per folder and no per-object request (HEAD or GET),
    counted from moto's own request log."""
    pytest.importorskip("boto3")
    out_json = tmp_path / "s3.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "s3_startup.py"),
         "--num_objects=200", "--num_classes=10", "--image_size=16", "--batch_size=32",
         f"--json_out={out_json}"], capture_output=True, text=True, timeout=400,
        env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    out = json.loads(out_json.read_text())
    assert out["files"] == 200 and out["classes"] == 10 and out["batch_images"] == 32
    assert out["folders"] == 11
    assert out["lists_before_first_batch"] == 11 and out["one_list_per_folder"]
    assert out["object_requests_before_first_batch"] == 0
    assert out["no_object_requests_before_first_batch"]
    # the first batch reads objects (at least the 32 it decodes)
    assert out["object_requests_in_first_batch"] >= 32
    assert 0 < out["factory_sec"] <= out["total_sec"]
    assert out["requests_before_first_batch"] == (out["lists_before_first_batch"]
                                                  + out["probes_before_first_batch"])
    assert "folder listings" in proc.stdout
