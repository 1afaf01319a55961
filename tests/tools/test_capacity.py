"""The capacity plan: its arithmetic (exact, no timing) and the CLI on a tiny folder."""

import json
import math

import numpy as np
import pytest
from PIL import Image

from conftest import run_cli
from pipeline.tools import capacity
from pipeline.tools import sample


def test_worked_example_of_the_readme():
    """8 GPUs x 7,000 images/s at 400 images per CPU-second, 8-core workers."""
    p = capacity.capacity_plan(8 * 7000, 400, worker_cores=8, headroom=1.25)
    assert p.cores_exact == 175.0 and p.cores == 175
    assert p.workers == 22  # 175 / 8 = 21.875
    assert p.worker_images_per_sec == 3200.0
    assert p.fleet_images_per_sec == 22 * 3200.0 == 70400.0
    assert p.headroom == 1.25 and p.target_images_per_sec == 56000.0
    assert p.measurement is None
    text = p.table()
    assert "56,000 x 1.25 / 400 = 175.0 -> 175 cores" in text
    assert "22 workers (176 cores, 70,400 images/s flat out)" in text
    assert "400 images per CPU-second (given)" in text


@pytest.mark.parametrize("target, cost, worker_cores, headroom, cores, workers", [
    (3200, 400, 8, 1.0, 8, 1),      # exactly one worker: no rounding up to 2
    (3201, 400, 8, 1.0, 9, 2),      # one image/s more needs a ninth core
    (1000, 300, 4, 1.5, 5, 2),      # 1000 * 1.5 / 300 = 5.0 exactly
    (1001, 300, 4, 1.5, 6, 2),
    (10, 400, 1, 1.25, 1, 1),       # a tiny target still needs one core
    (56000, 444, 16, 1.25, 158, 10),
])
def test_cores_and_workers_are_the_ceilings(target, cost, worker_cores, headroom, cores,
                                            workers):
    p = capacity.capacity_plan(target, cost, worker_cores=worker_cores, headroom=headroom)
    assert (p.cores, p.workers) == (cores, workers)
    assert p.cores_exact == pytest.approx(target * headroom / cost)
    # enough, and one worker fewer would not be
    assert p.fleet_images_per_sec >= target * headroom - 1e-6
    assert (p.workers - 1) * worker_cores * cost < target * headroom
    assert p.cores * cost >= target * headroom - 1e-6 > (p.cores - 1) * cost


def test_more_headroom_or_cheaper_images_change_the_plan_the_right_way():
    base = capacity.capacity_plan(56000, 400)
    assert (base.worker_cores, base.headroom) == (8, 1.25)  # the documented defaults
    assert capacity.capacity_plan(56000, 400, headroom=1.5).cores == 210 > base.cores
    assert capacity.capacity_plan(56000, 800).cores == 88 < base.cores
    assert capacity.capacity_plan(56000, 400, worker_cores=16).workers == 11


def test_to_dict_keeps_the_measurement():
    m = {"images_per_cpu_sec": 400.0, "runs": 3}
    d = capacity.capacity_plan(1000, 400, measurement=m).to_dict()
    assert d["measurement"] == m and d["cores"] == 4 and d["workers"] == 1
    assert json.loads(json.dumps(d)) == d


@pytest.mark.parametrize("kwargs, name", [
    ({"target_images_per_sec": 0}, "target_images_per_sec"),
    ({"target_images_per_sec": -5}, "target_images_per_sec"),
    ({"target_images_per_sec": float("nan")}, "target_images_per_sec"),
    ({"target_images_per_sec": True}, "target_images_per_sec"),
    ({"images_per_cpu_sec": 0}, "images_per_cpu_sec"),
    ({"images_per_cpu_sec": float("inf")}, "images_per_cpu_sec"),
    ({"worker_cores": 0}, "worker_cores"),
    ({"worker_cores": 2.5}, "worker_cores"),
    ({"headroom": 0.9}, "headroom"),
    ({"headroom": 0}, "headroom"),
])
def test_bad_arguments_name_themselves(kwargs, name):
    args = dict({"target_images_per_sec": 1000, "images_per_cpu_sec": 400}, **kwargs)
    with pytest.raises(ValueError, match=rf"`{name}` must .*Received: {name}="):
        capacity.capacity_plan(**args)


@pytest.mark.parametrize("args, says", [
    (("--plan",), "--plan needs --target_images_per_sec"),
    (("--plan", "--target_images_per_sec=0"),
     "--target_images_per_sec must be a finite number > 0"),
    (("--plan", "--target_images_per_sec=100", "--worker_cores=0"),
     "--worker_cores must be an integer >= 1"),
    (("--plan", "--target_images_per_sec=100", "--headroom=0.5"), "--headroom must be >= 1"),
    (("--plan", "--profile", "--target_images_per_sec=100"), "separate reports"),
])
def test_plan_usage_errors_exit_2(args, says):
    code, out, err = run_cli("bench", *args)
    assert code == 2, (out, err)
    assert says in err and "usage: python -m pipeline bench" in err


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan_photos")
    rng = np.random.RandomState(0)
    for i in range(24):
        d = root / f"class_{i % 3}"
        d.mkdir(exist_ok=True)
        Image.fromarray(sample.make_image(rng, 60, 80)).save(d / f"img_{i:03d}.jpg")
    return str(root)


def test_plan_cli_measures_the_folder_and_plans(tiny_folder, tmp_path):
    out_json = tmp_path / "plan.json"
    code, out, err = run_cli("bench", "--plan", "--target_images_per_sec=1000",
                             "--worker_cores=2", "--headroom=1.5", f"--data_dir={tiny_folder}",
                             "--image_size=32", "--batch_size=4", "--epochs=1", "--repeats=1",
                             "--augment", "--noprogress", f"--json_out={out_json}")
    assert code == 0, (out, err)
    plan = json.loads(out_json.read_text())
    m = plan["measurement"]
    assert m["num_images"] == 24 and m["image_size"] == [32, 32] and m["augment"] is True
    assert m["candidate"] == "pipeline_train" and m["runs"] == 1
    cost = plan["images_per_cpu_sec"]
    assert cost == m["images_per_cpu_sec"] > 0
    assert plan["cores"] == math.ceil(round(1000 * 1.5 / cost, 9))
    assert plan["workers"] == math.ceil(round(1000 * 1.5 / cost / 2, 9))
    assert plan["worker_cores"] == 2 and plan["headroom"] == 1.5
    assert "train (random resized crop + flip) mode" in out
    c, n = plan["cores"], plan["workers"]  # plural only where more than one
    assert f"-> {c} core{'s' if c > 1 else ''}\n" in out
    assert f": {n} worker{'s' if n > 1 else ''} (" in out


def test_measure_cost_refuses_too_few_files(tiny_folder):
    with pytest.raises(ValueError, match="at least 2 timed batches per epoch.*at least 33 "
                       "files with batch_size=16. Received: 24 files"):
        capacity.measure_cost(tiny_folder, batch_size=16)


def test_library_does_not_import_the_benchmark_harness(tiny_folder):
    """`import pipeline`, a `from_directory` dataset, `measure_cost` and `capacity_plan`
    leave `pipeline.tools.bench` (the harness and its candidates) unimported."""
    import subprocess
    import sys
    code = (
        "import sys, pipeline\n"
        "from pipeline.tools import capacity\n"
        f"ds = pipeline.from_directory({str(tiny_folder)!r}, image_size=(8, 8), batch_size=4)\n"
        "next(iter(ds))\n"
        f"cost = capacity.measure_cost({str(tiny_folder)!r}, image_size=(8, 8), batch_size=4,"
        " epochs=1, repeats=1)\n"
        "capacity.capacity_plan(1000, cost['images_per_cpu_sec'], measurement=cost)\n"
        "print(sorted(m for m in sys.modules if m.startswith('pipeline.tools.bench')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
