"""s3:// read through fsspec + s3fs (pipeline.sources.read's remote-read path), against moto's S3
server on loopback: the real S3 API over HTTP, no mock of the client.

Runs on both stacks: ``PIPELINE_REMOTE_READER=fsspec`` makes TensorFlow 2.16 (where
tensorflow-io would serve s3://) take the fsspec path too. The endpoint comes from
botocore's own variable, ``AWS_ENDPOINT_URL``.
"""

import csv
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("s3fs")
boto3 = pytest.importorskip("boto3")

import tensorflow as tf  # noqa: E402

import pipeline  # noqa: E402
from pipeline.sources import read  # noqa: E402
from pipeline import stack  # noqa: E402

# File systems and tensorflow-io: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "..",
                      "shared", "data", "imagenet-sample")
BUCKET = "photos"
CLASSES = 3
PER_CLASS = 5


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    """(local folder, "s3://photos/tree"): the same class folders of real photos in both."""
    if not os.path.isdir(SAMPLE):
        pytest.skip(f"no sample photos at {SAMPLE}")
    port = _free_port()
    moto = os.path.join(os.path.dirname(sys.executable), "moto_server")
    cmd = [moto, "-H", "127.0.0.1", "-p", str(port)] if os.path.exists(moto) else [
        sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           read.READER_ENV: "fsspec"}
    saved = {k: os.environ.get(k) for k in list(env) + ["S3_ENDPOINT"]}
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=BUCKET)
        local = tmp_path_factory.mktemp("photos")
        folders = sorted(os.listdir(SAMPLE))[:CLASSES * PER_CLASS]  # one photo in each
        for k, folder in enumerate(folders):
            c = "abc"[k // PER_CLASS]
            os.makedirs(local / c, exist_ok=True)
            name = sorted(os.listdir(os.path.join(SAMPLE, folder)))[0]
            src = os.path.join(SAMPLE, folder, name)
            os.symlink(src, local / c / name)
            client.upload_file(src, BUCKET, f"tree/{c}/{name}")
        client.put_object(Bucket=BUCKET, Key="tree/.hidden/x.jpg", Body=b"x")
        os.environ.pop("S3_ENDPOINT", None)
        os.environ.update(env)
        read.filesystem.cache_clear()
        yield str(local), f"s3://{BUCKET}/tree", client
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        read.filesystem.cache_clear()
        proc.terminate()
        proc.wait(10)


OPTS = dict(image_size=(64, 64), batch_size=4, shuffle=False)


def _arrays(ds):
    xs, ys = [], []
    for x, y in ds:
        xs.append(x.numpy())
        ys.append(y.numpy())
    return np.concatenate(xs), np.concatenate(ys)


def _s3_path(local_path, local, prefix):
    return prefix + "/" + os.path.relpath(local_path, local).replace(os.sep, "/")


def test_reader_rule_auto_follows_tensorflow_io(monkeypatch):
    monkeypatch.setenv(read.READER_ENV, "auto")
    want = "tensorflow" if stack.tfio_status().available else "fsspec"
    assert read.reader("s3://b/k.jpg") == want
    assert read.reader("gs://b/k.jpg") == "tensorflow"
    assert read.reader("/tmp/k.jpg") == "local"
    monkeypatch.setenv(read.READER_ENV, "boto")
    with pytest.raises(ValueError, match="Received: PIPELINE_REMOTE_READER='boto'"):
        read.reader("s3://b/k.jpg")


def test_from_directory_s3_prefix_same_files_and_pixels_as_local(bucket):
    local, prefix, _ = bucket
    ds_local = pipeline.from_directory(local, **OPTS)
    ds_s3 = pipeline.from_directory(prefix, **OPTS)
    assert ds_s3.class_names == ds_local.class_names
    assert ds_s3.file_paths == [_s3_path(p, local, prefix) for p in ds_local.file_paths]
    assert len(ds_s3.file_paths) == CLASSES * PER_CLASS  # the hidden folder is left out
    x_local, y_local = _arrays(ds_local)
    x_s3, y_s3 = _arrays(ds_s3)
    assert x_s3.dtype == np.uint8 and x_s3.shape == (CLASSES * PER_CLASS, 64, 64, 3)
    np.testing.assert_array_equal(x_s3, x_local)
    np.testing.assert_array_equal(y_s3, y_local)


def test_walk_is_one_sorted_listing_with_hidden_folder_once(bucket):
    _, prefix, _ = bucket
    entries = list(read.walk(prefix))
    paths = [p for p, why, _ in entries if why is None]
    assert paths == sorted(paths) and len(paths) == CLASSES * PER_CLASS
    assert [(p, why) for p, why, _ in entries if why] == [(prefix + "/.hidden", "hidden")]


def test_from_paths_s3_uris_reversed_order_same_pixels(bucket):
    local, prefix, _ = bucket
    ds_local = pipeline.from_directory(local, **OPTS)
    locals_ = ds_local.file_paths[::-1]
    labels = list(range(len(locals_)))
    x_s3, y_s3 = _arrays(pipeline.from_paths(
        [_s3_path(p, local, prefix) for p in locals_], labels, **OPTS))
    x_local, _ = _arrays(pipeline.from_paths(locals_, labels, **OPTS))
    np.testing.assert_array_equal(x_s3, x_local)
    assert y_s3.tolist() == labels


def test_from_manifest_on_s3(bucket):
    local, prefix, client = bucket
    files = pipeline.from_directory(local, **OPTS).file_paths
    rows = [(os.path.relpath(files[k], local).replace(os.sep, "/"), c)
            for k, c in ((7, "b"), (0, "a"), (12, "b"))]
    body = "path,label\n" + "".join(f"{p},{c}\n" for p, c in rows)
    client.put_object(Bucket=BUCKET, Key="tree/m.csv", Body=body.encode())
    x_s3, y_s3 = _arrays(pipeline.from_manifest(prefix + "/m.csv", **OPTS))
    x_local, _ = _arrays(pipeline.from_paths([files[k] for k in (7, 0, 12)], [1, 0, 1],
                                             **OPTS))
    np.testing.assert_array_equal(x_s3, x_local)
    assert y_s3.tolist() == [1, 0, 1]


def test_missing_object_skipped_and_recorded_with_its_path(bucket):
    local, prefix, _ = bucket
    good = [_s3_path(p, local, prefix)
            for p in pipeline.from_directory(local, **OPTS).file_paths[:5]]
    missing = prefix + "/gone/nothing.jpg"
    paths = good[:2] + [missing] + good[2:]
    ds = pipeline.from_paths(paths, [0] * 6, on_error="skip", **OPTS)
    x, _ = _arrays(ds)
    assert x.shape[0] == 5
    recs = pipeline.errors(ds)
    assert [r.path for r in recs] == [missing]
    assert "file not found" in recs[0].reason
    ds = pipeline.from_paths(paths, [0] * 6, on_error="raise", **OPTS)
    with pytest.raises(Exception, match="nothing.jpg"):
        _arrays(ds)


def test_service_refused_at_build_time(bucket):
    _, prefix, _ = bucket
    with pytest.raises(ValueError, match=r"`service` cannot serve files read through fsspec"
                                         r".*Received: service='grpc://localhost:1'"):
        pipeline.from_directory(prefix, service="grpc://localhost:1", **OPTS)


def test_tfrecords_on_s3_refused_at_build_time_through_fsspec(bucket):
    _, prefix, _ = bucket
    with pytest.raises(read.FeatureUnavailableError, match="TFRecord shards"):
        pipeline.from_tfrecords(prefix + "/rec", **OPTS)


def test_iterator_checkpoint_restores_exactly(bucket, tmp_path):
    _, prefix, _ = bucket
    ds = pipeline.from_directory(prefix, **OPTS)
    pipeline.check_checkpointable(ds)  # the fetch holds no state across elements
    it = iter(ds)
    next(it)
    ckpt = tf.train.Checkpoint(iterator=it)
    path = ckpt.save(str(tmp_path / "it"))
    rest = [x.numpy() for x, _ in it]
    it2 = iter(ds)
    tf.train.Checkpoint(iterator=it2).restore(path)
    again = [x.numpy() for x, _ in it2]
    assert len(again) == len(rest) == 3
    for a, b in zip(again, rest):
        np.testing.assert_array_equal(a, b)


def test_scan_of_s3_prefix_names_the_truncated_photo(bucket):
    local, prefix, client = bucket
    files = pipeline.from_directory(local, **OPTS).file_paths[:3]
    for k, p in enumerate(files):
        with open(p, "rb") as f:
            data = f.read()
        client.put_object(Bucket=BUCKET, Key=f"scanme/c/img{k}.jpg",
                          Body=data[:len(data) // 2] if k == 1 else data)
    report = pipeline.scan(f"s3://{BUCKET}/scanme", progress=False)
    assert report.num_files == 3 and report.num_ok == 2
    assert [b["path"] for b in report.bad_files] == [f"s3://{BUCKET}/scanme/c/img1.jpg"]


def test_class_folder_tree_is_one_listing(bucket, monkeypatch):
    """from_directory on an s3:// prefix: one fs.find for the whole tree, no ls per folder."""
    local, prefix, _ = bucket
    fs = read.filesystem("s3")
    calls = []
    for name in ("find", "ls"):
        real = getattr(fs, name)
        monkeypatch.setattr(fs, name, lambda *a, _n=name, _r=real, **k: (
            calls.append(_n), _r(*a, **k))[1])
    ds = pipeline.from_directory(prefix, **OPTS)
    assert calls.count("find") == 1 and "ls" not in calls, calls
    assert ds.file_paths == [_s3_path(p, local, prefix)
                             for p in pipeline.from_directory(local, **OPTS).file_paths]
