"""Start-up against S3: from_directory("s3://...") on many small objects, requests counted.

Starts moto's S3 server on loopback (``moto_server`` from ``moto[server]``,
its request log to a file), puts ``--num_objects`` tiny PNGs into
``--num_classes`` class folders of a bucket with boto3, then runs, in a
fresh subprocess (TensorFlow + tensorflow-io):

    ds = pipeline.from_directory("s3://BUCKET/tree", image_size=(S, S), batch_size=B)
    next(iter(ds))

and reports the factory time, the time to the first batch, and the S3
requests made by each phase, counted from moto's log (the child sends a
marker request between the phases): LISTs (``GET /bucket?...prefix=``),
HEADs and GETs of objects. The listing should be one LIST per folder (plus
the requests that resolve the top folder) and no per-object request before
the first batch; the first batch itself reads the objects it decodes.

    python benchmarks/s3_startup.py --num_objects=10000 --num_classes=100

The child can abort at exit ("pure virtual method called", exit 134; a
tensorflow-io issue): it prints its result, flushes and calls ``os._exit(0)``.
"""

import collections
import concurrent.futures
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse

from absl import app, flags

import common_flags  # benchmarks/common_flags.py (puts the repository on sys.path)
from common_flags import FLAGS, REPO

common_flags.define(image_size=224, batch_size=64,
                    timeout=(900, "Seconds allowed for the child."),
                    json_out=os.path.join("benchmarks", "results", "s3_startup.json"))
flags.DEFINE_integer("num_objects", 10000, "Objects (tiny PNGs) in the bucket.")
flags.DEFINE_integer("num_classes", 100, "Class folders.")
flags.DEFINE_integer("upload_threads", 8, "boto3 upload threads.")
flags.DEFINE_string("log_out", None, "Keep moto's request log here (default: deleted).")

BUCKET = "bench"
PREFIX = "tree"
MARK = "/__pipeline_marker__"

CHILD = textwrap.dedent("""
    import json, os, sys, time, urllib.request
    def mark(name):
        try:
            urllib.request.urlopen(os.environ["S3_ENDPOINT"] + "{mark}/" + name, timeout=10)
        except Exception:
            pass  # 404 from moto is fine: the request line is what counts
    t_import = time.perf_counter()
    import pipeline
    import tensorflow_io  # noqa: F401  (imported by pipeline for s3:// anyway)
    out = {{"import_sec": time.perf_counter() - t_import}}
    mark("start")
    t0 = time.perf_counter()
    size = int(sys.argv[2])
    ds = pipeline.from_directory(sys.argv[1], image_size=(size, size),
                                 batch_size=int(sys.argv[3]))
    t1 = time.perf_counter()
    mark("factory_done")
    it = iter(ds)
    t2 = time.perf_counter()
    mark("iterator_done")
    images, labels = next(it)
    t3 = time.perf_counter()
    mark("first_batch_done")
    out.update(factory_sec=t1 - t0, iterator_sec=t2 - t1, total_sec=t3 - t0,
               first_batch_sec=t3 - t1, batch_images=int(images.shape[0]),
               files=len(ds.file_paths), classes=len(ds.class_names))
    print("S3STARTUP " + json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)
""").format(mark=MARK)

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # moto colours non-200 lines
LINE = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/[0-9.]+" (\d+)')


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(log_path):
    """Starts moto's S3 server on loopback; returns (process, endpoint)."""
    port = _free_port()
    moto = os.path.join(os.path.dirname(sys.executable), "moto_server")
    cmd = [moto, "-H", "127.0.0.1", "-p", str(port)] if os.path.exists(moto) else [
        sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    log = open(log_path, "w")  # pylint: disable=consider-using-with
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}"


def s3_env(endpoint):
    return {"S3_ENDPOINT": endpoint, "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "S3_USE_HTTPS": "0", "S3_VERIFY_SSL": "0"}


def tiny_pngs(count=8):
    """A few distinct 8x8 PNGs (bytes)."""
    import numpy as np
    from PIL import Image
    out = []
    for v in range(count):
        buf = io.BytesIO()
        Image.fromarray(np.full((8, 8, 3), 30 * v, np.uint8)).save(buf, "PNG")
        out.append(buf.getvalue())
    return out


def fill_bucket(endpoint, num_objects, num_classes, threads=8):
    """Creates the bucket and puts ``num_objects`` PNGs in ``num_classes`` folders."""
    import boto3
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket=BUCKET)
    pngs = tiny_pngs()

    def put(i):
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/class_{i % num_classes:03d}/"
                          f"img_{i:06d}.png", Body=pngs[i % len(pngs)])

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, range(num_objects)))


def classify(method, target):
    """The kind of one S3 request line.

    "list" (a listing with a delimiter: the folder listing itself), "probe_list"
    (``max-keys=1``, no delimiter: an is-it-a-folder probe), "head_folder" (HEAD
    of a key without an image extension: the other half of that probe),
    "head_object" / "get_object" (an image object), "marker:NAME", or
    "bucket_METHOD" / "other".
    """
    url = urllib.parse.urlsplit(target)
    if url.path.startswith(MARK):
        return "marker:" + url.path[len(MARK) + 1:]
    query = urllib.parse.parse_qs(url.query)
    parts = [p for p in url.path.split("/") if p]
    if method == "GET" and len(parts) == 1 and url.query:
        if "delimiter" not in query and query.get("max-keys") == ["1"]:
            return "probe_list"
        return "list"
    if len(parts) == 1:
        return f"bucket_{method.lower()}"
    is_image = parts[-1].lower().endswith((".png", ".jpg", ".jpeg"))
    if method == "HEAD":
        return "head_object" if is_image else "head_folder"
    if method == "GET" and is_image:
        return "get_object"
    return "other"


def count_requests(log_text):
    """{phase: Counter of request kinds} from moto's log, split at the marker requests.

    Phases: "before" (up to the start marker: the upload), "factory",
    "iterator", "first_batch", "after".
    """
    phases = collections.OrderedDict((p, collections.Counter()) for p in (
        "before", "factory", "iterator", "first_batch", "after"))
    order = {"start": "factory", "factory_done": "iterator", "iterator_done": "first_batch",
             "first_batch_done": "after"}
    phase = "before"
    examples = collections.defaultdict(list)
    for line in ANSI.sub("", log_text).splitlines():
        m = LINE.search(line)
        if not m:
            continue
        kind = classify(m.group(1), m.group(2))
        if kind.startswith("marker:"):
            phase = order.get(kind.split(":", 1)[1], phase)
            continue
        phases[phase][kind] += 1
        if len(examples[(phase, kind)]) < 3:
            examples[(phase, kind)].append(f"{m.group(1)} {m.group(2)} {m.group(3)}")
    return phases, {f"{p}/{k}": v for (p, k), v in examples.items()}


def run(num_objects, num_classes, image_size, batch_size, threads, timeout, log_path):
    proc, endpoint = start_moto(log_path)
    try:
        t0 = time.perf_counter()
        fill_bucket(endpoint, num_objects, num_classes, threads)
        upload_sec = time.perf_counter() - t0
        env = dict(os.environ, **s3_env(endpoint), PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
        child = subprocess.run(
            [sys.executable, "-c", CHILD, f"s3://{BUCKET}/{PREFIX}", str(image_size),
             str(batch_size)], capture_output=True, text=True, timeout=timeout, env=env)
        lines = [l for l in child.stdout.splitlines() if l.startswith("S3STARTUP ")]
        if not lines:
            raise RuntimeError(f"child failed (exit {child.returncode}):\n"
                               f"{child.stderr[-3000:]}")
        out = json.loads(lines[-1][len("S3STARTUP "):])
    finally:
        proc.terminate()
        proc.wait(10)
    with open(log_path) as f:
        phases, examples = count_requests(f.read())
    folders = num_classes + 1  # the class folders and the top folder
    before_first = phases["factory"] + phases["iterator"]
    out.update({
        "benchmark": "s3_startup", "num_objects": num_objects, "num_classes": num_classes,
        "image_size": image_size, "batch_size": batch_size, "upload_sec": upload_sec,
        "folders": folders,
        "requests": {p: dict(c) for p, c in phases.items() if p != "before"},
        "examples": examples,
        "requests_before_first_batch": sum(before_first.values()),
        "lists_before_first_batch": before_first["list"],
        "probes_before_first_batch": before_first["probe_list"] + before_first["head_folder"],
        "object_requests_before_first_batch": before_first["head_object"]
        + before_first["get_object"],
        "object_requests_in_first_batch": phases["first_batch"]["head_object"]
        + phases["first_batch"]["get_object"],
    })
    out["lists_per_folder"] = out["lists_before_first_batch"] / folders
    out["requests_per_folder"] = out["requests_before_first_batch"] / folders
    out["one_list_per_folder"] = out["lists_before_first_batch"] == folders
    out["no_object_requests_before_first_batch"] = (
        out["object_requests_before_first_batch"] == 0)
    return out


def main(argv):
    del argv
    log_path = FLAGS.log_out or tempfile.mkstemp(prefix="moto-", suffix=".log")[1]
    try:
        out = run(FLAGS.num_objects, FLAGS.num_classes, FLAGS.image_size, FLAGS.batch_size,
                  FLAGS.upload_threads, FLAGS.timeout, log_path)
    finally:
        if not FLAGS.log_out and os.path.exists(log_path):
            os.remove(log_path)
    from pipeline.tools.bench import harness as bench
    bench.write_json(FLAGS.json_out, out)
    print(f"{out['files']} objects in {out['classes']} folders (upload {out['upload_sec']:.1f} s)")
    print(f"factory {out['factory_sec']:.2f} s, iterator {out['iterator_sec']:.2f} s, "
          f"time to first batch {out['total_sec']:.2f} s")
    for phase, counts in out["requests"].items():
        print(f"  {phase:<12} " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    print(f"before the first batch: {out['requests_before_first_batch']} requests for "
          f"{out['folders']} folders: {out['lists_before_first_batch']} folder listings, "
          f"{out['probes_before_first_batch']} is-folder probes (HEAD + max-keys=1 LIST); "
          f"object HEAD/GET: "
          f"{out['object_requests_before_first_batch']}; during the first batch: "
          f"{out['object_requests_in_first_batch']}")
    print(f"wrote {FLAGS.json_out}")


if __name__ == "__main__":
    app.run(main)
