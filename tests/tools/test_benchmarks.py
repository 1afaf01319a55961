"""Every benchmark CLI in benchmarks/ runs on tiny data and writes sane JSON (and PNG).

Already run elsewhere: npy_memory.py (tests/sources/test_npy.py) and queue_runners.py
(tests/test_compat.py). Each CLI runs in a subprocess, as a user would run it;
the figures are checked for presence, sign and consistency (each ratio is the
quotient of the figures it names), not for speed: tiny data on a shared
2-core machine says nothing about speed.

Running each script end to end is the slow tier's (``.ci/run --all``); the default tier runs
one script end to end (``tfrecord_vs_files.py``) and the harness's own checks, cheaply.
"""

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from pipeline.tools import sample


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = 32
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """N JPEGs (120x90, smooth colour fields + noise) in 4 class folders."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.RandomState(0)
    for i in range(N):
        d = root / f"class_{i % 4}"
        d.mkdir(exist_ok=True)
        Image.fromarray(sample.make_image(rng, 90, 120)).save(d / f"img_{i:03d}.jpg",
                                                               quality=90)
    return str(root)


def _run(script, *args, timeout=240):
    r = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", script), *args],
                       capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join(
                           [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                     if p])))
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    return r.stdout


def _load(tmp_path, name):
    out = json.loads((tmp_path / f"{name}.json").read_text())
    png = tmp_path / f"{name}.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 2000
    return out


def _figures_ok(r, images):
    for k in ("images_per_sec", "images_per_cpu_sec", "cpu_cores_used", "first_batch_sec",
              "peak_rss_mb", "epoch_images_per_sec", "total_sec", "steady_images_per_cpu_sec",
              "steady_cpu_cores_used", "epoch_start_cpu_sec"):
        assert isinstance(r[k], (int, float)) and r[k] > 0 and math.isfinite(r[k]), (k, r)
    assert r["peak_rss_mb"] >= r["rss_after_import_mb"] > 100
    assert r["images_delivered"] == images, r


@pytest.mark.slow  # a benchmark script end to end (the default tier runs tfrecord_vs_files.py)
def test_peers(photos, tmp_path):
    stdout = _run("peers.py", f"--data_dir={photos}", "--image_size=48", "--batch_size=8",
                  "--epochs=1", f"--json_out={tmp_path / 'peers.json'}")
    out = _load(tmp_path, "peers")
    res = out["candidates"]
    assert list(res) == ["pipeline", "pipeline_train", "pipeline_train_nofast", "keras",
                         "keras_aug", "plain", "tf1_queue", "pydataset", "in_memory", "torch",
                         "grain", "dali", "dali_train", "decode_limit"]
    assert out["num_images"] == N and out["cores"] >= 1
    for name in ("pipeline", "pipeline_train", "pipeline_train_nofast", "keras", "keras_aug",
                 "plain", "pydataset", "in_memory", "decode_limit"):
        _figures_ok(res[name], N)
    _figures_ok(res["tf1_queue"], N // 8 * 8)  # full batches only
    train = res["pipeline_train"]
    assert out["ratios"]["train_vs_keras_aug"] == pytest.approx(
        train["images_per_sec"] / res["keras_aug"]["images_per_sec"])
    try:
        import torch  # noqa: F401
        _figures_ok(res["torch"], N)
    except ImportError:
        assert "torch" in res["torch"]["skipped"] and "torch" in out["skipped"]
        assert "skipped torch" in stdout
    if _grain_installed():
        _figures_ok(res["grain"], N)
        assert res["grain"]["num_workers"] == out["cores"]
    else:
        assert "pip install grain" in res["grain"]["skipped"] and "grain" in out["skipped"]
    if _dali_installed():
        _figures_ok(res["dali"], N // 8 * 8)  # full batches only
        assert out["ratios"]["train_vs_dali_cpu"] == pytest.approx(
            train["steady_images_per_cpu_sec"] / res["dali_train"]["steady_images_per_cpu_sec"])
    else:
        assert "nvidia-dali-cuda120" in res["dali"]["skipped"] and "dali" in out["skipped"]
        assert out["ratios"]["eval_vs_dali_cpu"] is None
        assert out["meets_targets"]["train_vs_dali_cpu"] is None
    # ratios are the quotients of the figures they name
    ev, lim = res["pipeline"], res["decode_limit"]
    assert lim["cores"] == out["cores"]
    assert out["ratios"]["eval_vs_keras"] == pytest.approx(
        ev["images_per_sec"] / res["keras"]["images_per_sec"])
    assert out["decode_limit_images_per_sec"] == pytest.approx(
        lim["images_per_sec"] * lim["cores"])
    assert out["ratios"]["eval_vs_decode_limit"] == pytest.approx(
        ev["images_per_sec"] / out["decode_limit_images_per_sec"])
    assert out["ratios"]["eval_vs_keras_cpu"] == pytest.approx(
        ev["steady_images_per_cpu_sec"] / res["keras"]["steady_images_per_cpu_sec"])
    assert out["meets_targets"]["eval_vs_keras"] == (out["ratios"]["eval_vs_keras"] >= 1.6)
    # the load-everything baseline reports its loading apart, inside its first batch
    mem = res["in_memory"]
    assert 0 < mem["load_sec"] <= mem["first_batch_sec"] <= mem["total_sec"]
    assert mem["load_cpu_sec"] > 0
    assert res["pydataset"]["workers"] == 2
    assert "eval_vs_keras" in stdout and "decode_limit" in stdout


def _grain_installed():
    import importlib.util
    return importlib.util.find_spec("grain") is not None


def _dali_installed():
    import importlib.util
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ImportError:
        return False


@pytest.fixture()
def peers_module():
    """benchmarks/peer_candidates.py, imported as the benchmarks import it."""
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        import peer_candidates
        yield peer_candidates
    finally:
        sys.path.remove(os.path.join(REPO, "benchmarks"))


def test_dali_peer_runs_or_says_why_not(photos, peers_module, monkeypatch):
    """DALI's CPU pipeline where nvidia-dali-cuda120 is installed; elsewhere the
    harness skips it, before starting a subprocess, with the install hint."""
    from pipeline.tools.bench import harness as bench
    spec = {"data_dir": photos, "image_size": [48, 40], "batch_size": 8, "epochs": 1,
            "seed": 0, "num_images": N}
    if _dali_installed():
        for mode in ("eval", "train"):
            batches = peers_module.DaliBatches(photos, (48, 40), 8, 2, mode=mode, seed=0)
            got = list(batches)
            assert len(got) == N // 8
            assert {x.shape for x, _ in got} == {(8, 48, 40, 3)}
            assert {x.dtype.name for x, _ in got} == {"uint8"}
            labels = np.concatenate([y for _, y in got])
            # one epoch of 32 files, 8 in each of the 4 class folders
            assert np.bincount(labels).tolist() == [8, 8, 8, 8]
            assert 0 < np.mean(np.concatenate([x for x, _ in got])) < 255
        res = bench.run_candidates(["dali_train"], spec, progress=False)
        _figures_ok(res["dali_train"], N)
        assert res["dali_train"]["mode"] == "train" and res["dali_train"]["dali_version"]
    # Not installed (or hidden here): skipped with the reason, no subprocess started.
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "nvidia.dali" else real(name, *a))
    monkeypatch.setattr(bench, "run_candidate", lambda *a, **k: pytest.fail("subprocess started"))
    res = bench.run_candidates(["dali", "dali_train"], spec, progress=False)
    for name in ("dali", "dali_train"):
        assert res[name]["skipped"] == peers_module.DALI_MISSING
    assert "pip install nvidia-dali-cuda120" in peers_module.DALI_MISSING


@pytest.mark.slow  # a benchmark script end to end (the default tier runs tfrecord_vs_files.py)
def test_memory_scaling(photos, tmp_path):
    stdout = _run("memory_scaling.py", f"--data_dir={photos}", "--sizes=16,40",
                  "--image_size=48", "--batch_size=8", "--num_classes=4",
                  f"--json_out={tmp_path / 'mem.json'}")
    out = _load(tmp_path, "mem")
    assert out["sizes"] == [16, 40]
    assert [s["files"] for s in out["per_size"]] == [16, 40]
    for c in ("pipeline", "in_memory"):
        peaks = out["peak_rss_mb"][c]
        assert len(peaks) == 2 and all(p > 100 for p in peaks)
        assert out["change"][c] == pytest.approx(peaks[1] / peaks[0] - 1)
        assert out["growth_mb"][c] == pytest.approx(peaks[1] - peaks[0])
        assert [s["results"][c]["images_delivered"] for s in out["per_size"]] == [16, 40]
    assert out["pipeline_flat"] == (abs(out["change"]["pipeline"]) < 0.10)
    assert all(s["results"]["in_memory"]["load_sec"] > 0 for s in out["per_size"])
    assert "pipeline change" in stdout


@pytest.mark.slow  # a benchmark script end to end (the default tier runs tfrecord_vs_files.py)
def test_guard_cost(photos, tmp_path):
    stdout = _run("guard_cost.py", f"--data_dir={photos}", "--image_size=48",
                  "--batch_size=8", "--epochs=1", "--repeats=1",
                  f"--json_out={tmp_path / 'guard.json'}")
    out = _load(tmp_path, "guard")
    res = out["candidates"]
    for name in ("pipeline", "plain"):
        _figures_ok(res[name], N)
        assert [r["images_per_sec"] for r in res[name]["runs"]] == [res[name]["images_per_sec"]]
    assert out["ratio"] == pytest.approx(
        res["pipeline"]["images_per_sec"] / res["plain"]["images_per_sec"])
    assert out["cost"] == pytest.approx(1 - out["ratio"])
    p, q = res["pipeline"], res["plain"]
    assert out["cost_cpu"] == pytest.approx(
        1 - p["steady_images_per_cpu_sec"] / q["steady_images_per_cpu_sec"])
    assert out["cost_cpu_whole_epochs"] == pytest.approx(
        1 - p["images_per_cpu_sec"] / q["images_per_cpu_sec"])
    assert out["epoch_start_cpu_sec_extra"] == pytest.approx(
        p["epoch_start_cpu_sec"] - q["epoch_start_cpu_sec"])
    assert out["meets_target"] == (out["cost"] <= 0.05)
    assert "pipeline / plain" in stdout and "per epoch start" in stdout


@pytest.mark.slow  # a benchmark script end to end (the default tier runs tfrecord_vs_files.py)
def test_gpu_saturation_small_model(photos, tmp_path):
    _run("gpu_saturation.py", f"--data_dir={photos}", "--image_size=48", "--batch_size=8",
         "--steps=4", "--warmup=2", "--repeats=1", f"--json_out={tmp_path / 'gpu.json'}")
    out = _load(tmp_path, "gpu")
    import tensorflow as tf
    if not tf.config.list_physical_devices("GPU"):
        assert out["model"] == "small" and out["device"] == "CPU"
        assert out["mixed_precision"] is False
    assert out["num_files"] == N and out["num_classes"] == 4
    assert out["synthetic_images_per_sec"] > 0 and out["pipeline_images_per_sec"] > 0
    assert out["ratio"] == pytest.approx(
        out["pipeline_images_per_sec"] / out["synthetic_images_per_sec"])


@pytest.mark.slow  # a benchmark script end to end (the default tier runs tfrecord_vs_files.py)
def test_gpu_saturation_smoke_flag(photos, tmp_path):
    """``--smoke`` (small model, 32x32, batch 8, 3 timed steps) over ``--num_images``
    photos symlinked into a temporary tree (10 class folders)."""
    _run("gpu_saturation.py", "--smoke", f"--data_dir={photos}", "--num_images=16",
         f"--json_out={tmp_path / 'smoke.json'}")
    out = _load(tmp_path, "smoke")
    assert out["smoke"] is True and out["model"] == "small"
    assert (out["image_size"], out["batch_size"], out["steps"], out["warmup"],
            out["repeats"]) == (32, 8, 3, 1, 1)
    assert out["num_files"] == 16 and out["num_classes"] == 10
    assert [len(v) for v in out["runs_images_per_sec"].values()] == [1, 1]
    assert out["ratio"] == pytest.approx(
        out["pipeline_images_per_sec"] / out["synthetic_images_per_sec"])


def test_tfrecord_vs_files(photos, tmp_path):
    out_path = tmp_path / "rec.json"
    _run("tfrecord_vs_files.py", f"--data_dir={photos}", f"--num_images={N}", "--num_shards=2",
         "--epochs=1", "--batch_size=8", "--image_size=48", f"--json_out={out_path}")
    out = json.loads(out_path.read_text())
    assert out["num_images"] == N and out["shards_mib"] > 0 and out["write_sec"] > 0
    for side in ("files", "tfrecords"):
        assert out[side]["images"] == N
        assert out[side]["images_per_sec"] > 0 and out[side]["first_batch_sec"] > 0


@pytest.mark.slow  # a benchmark script end to end (the default tier runs tfrecord_vs_files.py)
def test_service_scaling_one_worker(photos, tmp_path):
    out_path = tmp_path / "svc.json"
    _run("service_scaling.py", f"--data_dir={photos}", f"--num_images={N}", "--epochs=1",
         "--batch_size=8", "--image_size=48", "--workers=1", f"--json_out={out_path}",
         timeout=180)
    out = json.loads(out_path.read_text())
    assert out["num_images"] == N and len(out["results"]) == 1
    r = out["results"][0]
    assert r["workers"] == 1 and r["worker_cpu_sec"] > 0
    assert [e["images"] for e in r["epochs"]] == [N]
    assert r["images_per_sec_median"] > 0


def test_single_batch_epochs_have_no_steady_state():
    """One batch per epoch leaves nothing after the first batch: NaN, never 0 images/s."""
    import numpy as np
    from pipeline.tools.bench import harness as bench
    one = bench.measure(lambda spec: [np.zeros((4, 2))], {"name": "x", "epochs": 2},
                        progress=False)
    assert math.isnan(one["images_per_sec"]) and math.isnan(one["steady_images_per_cpu_sec"])
    assert one["images_delivered"] == 8
    two = bench.measure(lambda spec: [np.zeros((4, 2)), np.zeros((3, 2))],
                        {"name": "x", "epochs": 2}, progress=False)
    assert two["images_per_sec"] > 0 and two["images_delivered"] == 14


def test_bench_cli_refuses_unknown_candidate():
    proc = subprocess.run([sys.executable, "-m", "pipeline", "bench", "--compare=keras,nope"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "--compare: unknown candidate(s) nope; known: " in proc.stderr
    assert "Received: --compare=keras,nope" in proc.stderr


@pytest.mark.slow  # a benchmark script end to end (the default tier runs tfrecord_vs_files.py)
def test_startup(photos, tmp_path):
    """benchmarks/startup.py at its two smallest sizes (tiny: 200 and 1,000 links)."""
    trees = tmp_path / "trees"
    stdout = _run("startup.py", f"--data_dir={photos}", "--sizes=200,1000",
                  "--num_classes=10", "--image_size=32", "--batch_size=16",
                  "--scan_sizes=200", f"--tmp_dir={trees}",
                  f"--json_out={tmp_path / 'startup.json'}",
                  f"--plot={tmp_path / 'startup.png'}", timeout=400)
    out = _load(tmp_path, "startup")
    assert out["sizes"] == [200, 1000] and out["candidates"] == ["pipeline", "keras"]
    assert out["repeats"] == 1 and out["cores"] >= 1
    # the trees are kept (reused by the next run), hard links in class folders
    tree = trees / "pipeline-startup-v1" / out["per_size"][0]["tree"]
    links = [p for d in tree.iterdir() for p in d.iterdir()]
    assert len(links) == 200 and len(list(tree.iterdir())) == 10
    assert all(p.stat().st_nlink > 1 for p in links)
    for s, n in zip(out["per_size"], (200, 1000)):
        assert s["files"] == n and s["classes"] == 10
        for c in ("pipeline", "keras"):
            r = s[c]
            for k in ("factory_sec", "first_batch_sec", "total_sec", "index_sec",
                      "peak_rss_mb", "rss_after_import_mb", "index_bytes_per_file",
                      "path_list_bytes_per_file"):
                assert isinstance(r[k], (int, float)) and r[k] > 0 and math.isfinite(r[k]), \
                    (c, k, r)
            assert r["index_sec"] <= r["factory_sec"] <= r["total_sec"]
            assert r["total_sec"] == pytest.approx(r["factory_sec"] + r["first_batch_sec"])
            assert r["peak_rss_mb"] >= r["rss_after_import_mb"] > 100
            assert r["rss_growth_mb"] == pytest.approx(r["peak_rss_mb"]
                                                       - r["rss_after_import_mb"])
            assert r["indexed_files"] == n and r["batch_images"] == 16
            # a path string costs at least 49 bytes (empty str) plus a list slot
            assert 57 < r["path_list_bytes_per_file"] <= r["index_bytes_per_file"] < 2000
        assert r["load_avg_before"] and len(r["runs"]) == 1
        assert s["ratio_total"] == pytest.approx(s["pipeline"]["total_sec"]
                                                 / s["keras"]["total_sec"])
        assert s["pipeline"]["pipeline_module"] == "pipeline"  # this checkout's package
    scan = out["per_size"][0]["scan"]
    assert scan["files_scanned"] == scan["files_ok"] == 200 and scan["bad_files"] == 0
    assert scan["files_per_sec"] == pytest.approx(200 / scan["scan_sec"])
    assert 0 < scan["cores_used"] == pytest.approx(scan["cpu_sec"] / scan["scan_sec"])
    assert "scan" not in out["per_size"][1] and [s["files"] for s in out["scan"]] == [200]
    for c in ("pipeline", "keras"):
        per_file = out["index_sec_per_file"][c]
        assert per_file == [s[c]["index_sec"] / s["files"] for s in out["per_size"]]
        (sl,) = out["index_time_slope"][c]
        assert (sl["from"], sl["to"]) == (200, 1000)
        assert sl["slope"] == pytest.approx(math.log(per_file[1] / per_file[0]) / math.log(5))
        assert out["index_time_slope_fit"][c] == pytest.approx(sl["slope"])
    b = out["index_bytes_per_file"]
    assert b["files"] == 1000 and b["ratio"] == pytest.approx(b["pipeline"]
                                                              / b["keras_paths_only"])
    la = out["load_average"]
    assert 0 <= la["min"] <= la["median"] <= la["max"]
    assert [row["files"] for row in out["table"]] == [200, 1000]
    assert set(out["table"][0]) >= {"pipeline_factory_sec", "pipeline_total_sec",
                                    "keras_total_sec", "ratio", "pipeline_peak_rss_mb",
                                    "keras_peak_rss_mb"}
    assert out["targets"] == {}  # no target sizes in a tiny run
    assert "| files | pipeline factory |" in stdout and "index bytes per file" in stdout


@pytest.mark.slow  # a benchmark script end to end (the default tier runs tfrecord_vs_files.py)
def test_decode_cost(photos, tmp_path):
    stdout = _run("decode_cost.py", f"--data_dir={photos}", "--repeats=1", "--epochs=1",
                  "--image_size=32", f"--json_out={tmp_path / 'd.json'}")
    out = json.loads((tmp_path / "d.json").read_text())
    c = out["candidates"]
    assert set(c) == {"identity", "decode_jpeg", "decoder", "decoder_no_exif", "decoder_all_formats",
                      "decode_jpeg+resize", "decoder+resize", "decode_jpeg_ratio2+resize"}
    assert out["images"] > 0 and all(v["min"] > 0 and v["runs"] == [v["min"]] for v in c.values())
    # one line per candidate, each as a ratio of the bare decode (no timing is asserted:
    # on a loaded machine a one-epoch smoke run of tiny images orders them at random)
    for name in c:
        assert re.search(rf"^  {re.escape(name)}\s.*\dx decode_jpeg$", stdout, re.M), name


def _define_calls(name):
    """The ``common_flags.define(...)`` calls of benchmarks/NAME (ast nodes)."""
    import ast
    tree = ast.parse(open(os.path.join(REPO, "benchmarks", name)).read())
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and n.func.attr == "define"
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "common_flags"]


def test_data_dir_help_says_each_thing_once():
    """Each script's --data_dir help is its own lead-in + common_flags.DATA_DIR_HELP; the
    shared text once said "Class-folder photo root" too, so the help read it twice."""
    import ast
    import re
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        from common_flags import DATA_DIR_HELP  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    found = 0
    for name in sorted(os.listdir(os.path.join(REPO, "benchmarks"))):
        if not name.endswith(".py"):
            continue
        for call in _define_calls(name):
            for kw in call.keywords:
                if kw.arg == "data_dir":
                    found += 1
                    assert isinstance(kw.value, ast.Constant), name
                    text = f"{kw.value.value} {DATA_DIR_HELP}".lower()
                    sentences = [s.strip() for s in re.split(r"[.;]", text) if s.strip()]
                    assert len(sentences) == len(set(sentences)), (name, text)
    assert found >= 12


def test_every_script_takes_its_shared_flags_from_common_flags():
    """The flags that many scripts repeat (--data_dir, --image_size, --json_out, ...) are
    defined once, in benchmarks/common_flags.py: no script defines one itself, each that
    defines flags imports common_flags, and the two candidate modules have distinct names."""
    import re
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        import common_flags  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    shared = set(common_flags.SHARED) | {"data_dir"}
    scripts = 0
    for name in sorted(os.listdir(os.path.join(REPO, "benchmarks"))):
        if not name.endswith(".py") or name == "common_flags.py":
            continue
        text = open(os.path.join(REPO, "benchmarks", name)).read()
        own = set(re.findall(r"flags\.DEFINE_\w+\(\s*\"(\w+)\"", text))
        assert not own & shared, (name, own & shared)
        if own or _define_calls(name):
            scripts += 1
            assert "import common_flags" in text, name
    assert scripts >= 16
    assert not os.path.exists(os.path.join(REPO, "benchmarks", "candidates.py"))
    assert os.path.exists(os.path.join(REPO, "pipeline", "tools", "bench", "candidates.py"))


def test_grain_peer_runs_or_says_why_not(photos, peers_module, monkeypatch):
    """Grain (MapDataset + Pillow in mp_prefetch worker processes) where it is installed:
    every image once per epoch, across two epochs of one iterator; elsewhere skipped,
    before a subprocess starts, with the install hint."""
    from pipeline.tools.bench import harness as bench
    spec = {"data_dir": photos, "image_size": [48, 40], "batch_size": 8, "epochs": 2,
            "seed": 0, "num_images": N}
    if _grain_installed():
        res = bench.run_candidates(["grain"], spec, progress=False, quality_images=8)
        r = res["grain"]
        _figures_ok(r, 2 * N)
        assert r["num_workers"] >= 1 and r["grain_version"]
        assert r["psnr_images"] == 8 and r["psnr_db_median"] > 30  # Pillow's reducing bilinear
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "grain" else real(name, *a))
    monkeypatch.setattr(bench, "run_candidate", lambda *a, **k: pytest.fail("subprocess started"))
    res = bench.run_candidates(["grain"], spec, progress=False)
    assert res["grain"]["skipped"] == peers_module.GRAIN_MISSING
    assert "pip install grain" in peers_module.GRAIN_MISSING


def test_cpu_seconds_counts_worker_processes():
    """A loader's worker processes burn CPU outside this process: cpu_seconds counts a
    live child's CPU (process_time does not)."""
    from pipeline.tools.bench import harness as bench
    import time
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 1.0: pass\nimport sys\n"
                              "sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        c0, p0 = bench.cpu_seconds(), time.process_time()
        deadline = time.time() + 60
        while bench._proc_cpu(child.pid) < 1.0 and time.time() < deadline:
            time.sleep(0.1)
        c1, p1 = bench.cpu_seconds(), time.process_time()
        assert bench._proc_cpu(child.pid) >= 1.0
        assert child.pid in bench._descendants(os.getpid())
        assert (c1 - c0) - (p1 - p0) > 0.5  # the child's second, less what it had at c0
    finally:
        child.communicate(b"", timeout=30)


@pytest.mark.slow  # a benchmark script end to end (the default tier runs tfrecord_vs_files.py)
def test_hires_set_makes_mosaics_of_the_photos(photos, tmp_path):
    """benchmarks/hires_set.py at tiny sizes: the files, their sizes, their tiles (each
    tile is a source photo fitted to it), the sample links, the JSON; a second run
    keeps the files."""
    out = tmp_path / "hires"
    stdout = _run("hires_set.py", f"--data_dir={photos}", f"--out_dir={out}",
                  "--sizes=96x64,40x30", "--num_mosaics=6", "--num_classes=2", "--quality=95")
    meta = json.loads((out / "hires_set.json").read_text())
    assert meta["quality"] == 95 and meta["source_photos"] == N
    assert sorted(meta["sets"]) == ["40x30", "96x64", "sample"]
    assert meta["sets"]["sample"]["images"] == N
    links = [p for d in (out / "sample").iterdir() for p in d.iterdir()]
    assert len(links) == N and all(p.is_symlink() for p in links)
    for name, (w, h) in (("96x64", (96, 64)), ("40x30", (40, 30))):
        files = sorted((out / name).glob("class_*/mosaic_*.jpg"))
        assert len(files) == 6 and meta["sets"][name]["images"] == 6
        assert sorted({f.parent.name for f in files}) == ["class_000", "class_001"]
        for f in files:
            with Image.open(f) as im:
                assert im.size == (w, h) and im.format == "JPEG"
    assert meta["sets"]["96x64"]["photos_per_image"] == 16  # 4x4 tiles of 24x16
    # mosaic 1's first tile is source photo 16 (sorted), fitted to 24x16
    # (in a child: importing hires_set defines its absl flags, which clash with
    # pipeline.cli's in a test process that imported the CLI first)
    code = (
        "import json, sys\n"
        "import numpy as np\n"
        "from PIL import Image\n"
        f"sys.path.insert(0, {os.path.join(REPO, 'benchmarks')!r})\n"
        "import hires_set\n"
        "from pipeline import quality\n"
        f"src = hires_set.photo_paths({str(photos)!r})\n"
        "tile = np.asarray(hires_set.fit_tile(src[16], 24, 16), np.float64)\n"
        f"with Image.open({str(out / '96x64' / 'class_001' / 'mosaic_00001.jpg')!r}) as im:\n"
        "    got = np.asarray(im.convert('RGB'), np.float64)[:16, :24]\n"
        "own = quality.psnr(got, tile)\n"
        "others = [quality.psnr(got, np.asarray(hires_set.fit_tile(p, 24, 16), np.float64))\n"
        "          for k, p in enumerate(src) if k != 16]\n"
        "print(json.dumps([float(own), float(max(others))]))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    own, best_other = json.loads(res.stdout.strip().splitlines()[-1])
    others = [best_other]
    assert own > 18 and own > max(others) + 6, (own, max(others))
    before = {f: f.stat().st_mtime_ns for f in (out / "96x64").glob("*/*.jpg")}
    _run("hires_set.py", f"--data_dir={photos}", f"--out_dir={out}", "--sizes=96x64",
         "--num_mosaics=6", "--num_classes=2", "--quality=95")
    assert {f: f.stat().st_mtime_ns for f in (out / "96x64").glob("*/*.jpg")} == before
    assert "96x64: 6 images" in stdout


def test_plot_benchmarks_draws_every_size(tmp_path):
    """benchmarks/plot_benchmarks.py on two peers.py-shaped results, one with the
    in-memory ceiling far off the scale and a skipped candidate."""
    def res(scale):
        c = {n: {"images_per_sec": v * scale, "steady_images_per_cpu_sec": v / 2,
                 "psnr_db_median": 33.0, "psnr_db_p5": 28.0}
             for n, v in (("pipeline", 900), ("keras", 800), ("plain", 950))}
        c["in_memory"] = {"images_per_sec": 90000, "steady_images_per_cpu_sec": 50000}
        c["dali"] = {"name": "dali", "skipped": "not installed"}
        return {"candidates": c, "num_images": 1000, "image_size": 224, "batch_size": 64,
                "epochs": 2, "repeats": 2, "cores": 2, "data_dir": "sample"}
    files = []
    for k, scale in enumerate((1, 0.05)):
        f = tmp_path / f"r{k}.json"
        f.write_text(json.dumps(res(scale)))
        files.append(str(f))
    _run("plot_benchmarks.py", *files, f"--png_out={tmp_path / 'p.png'}")
    png = tmp_path / "p.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 20000
    # --omit=ROW:NAME leaves one candidate of one row out of the bars, the table keeps it
    stdout = _run("plot_benchmarks.py", *files, "--omit=2:plain",
                  f"--png_out={tmp_path / 'o.png'}")
    assert (tmp_path / "o.png").read_bytes()[:8] == PNG_MAGIC
    assert stdout.count("| plain |") == 2
    bad = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "plot_benchmarks.py"),
                          *files, "--omit=3:plain", f"--png_out={tmp_path / 'b.png'}"],
                         capture_output=True, text=True, timeout=240)
    assert bad.returncode != 0
    assert "--omit takes ROW:NAME with ROW from 1 to 2. Received: --omit=3:plain" in bad.stderr


@pytest.mark.slow  # a benchmark script end to end (the default tier runs tfrecord_vs_files.py)
def test_segmentation_pairs_every_candidate(photos, tmp_path):
    """benchmarks/segmentation.py at tiny sizes, pairs checked: every candidate delivers
    each pair once per epoch, each mask with its own image (the class read back from the
    image's luminance equals the mask on most pixels: near 1 for a right pair)."""
    out_path = tmp_path / "seg.json"
    stdout = _run("segmentation.py", f"--data_dir={photos}", f"--limit={N - 8}",
                  "--image_size=48", "--batch_size=8", "--epochs=2", "--rounds=1",
                  "--check_pairs", f"--json_out={out_path}", timeout=600)
    out = json.loads(out_path.read_text())
    res = out["candidates"]
    assert list(res) == ["seg_pipeline", "seg_pipeline_train", "seg_plain", "seg_keras"]
    assert out["num_pairs"] == N - 8 and out["failed"] == {}
    for name, r in res.items():
        _figures_ok(r, 2 * (N - 8))
        assert r["pairs_per_epoch"] == [N - 8, N - 8], (name, r["pairs_per_epoch"])
        assert r["pair_agreement_median"] > 0.8 and r["pair_agreement_min"] > 0.5, (name, r)
        assert name in stdout
    assert out["ratios"]["pipeline_vs_keras_cpu"] == pytest.approx(
        res["seg_pipeline"]["steady_images_per_cpu_sec"]
        / res["seg_keras"]["steady_images_per_cpu_sec"])
