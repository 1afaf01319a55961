"""The notebooks run top to bottom (small), show pictures, and are committed without outputs.

Each notebook is executed with nbclient in a kernel of *this* interpreter: a
kernelspec written to a temporary JUPYTER_PATH (searched first) whose argv is
``sys.executable -m ipykernel_launcher``, so a user-level ``python3`` spec that
points at another Python cannot be picked up. Only ``pip install -e .[test]``
(ipykernel, nbclient, nbformat, matplotlib) is needed. The kernel gets
``PIPELINE_NB_SMALL=1`` and ``PIPELINE_NB_DATA`` (32 generated JPEGs in 4 class
folders), which the notebooks' "parameters" cells read, and this checkout first
on ``PYTHONPATH`` (the notebooks also start ``python -m pipeline`` subprocesses).
"""

import json
import os
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
KERNEL = "pipeline-test-python"
CELL_TIMEOUT_S = 240


def test_notebooks_exist():
    names = [p.name for p in NOTEBOOKS]
    assert names == ["01_quickstart.ipynb", "02_migrating.ipynb", "03_benchmarks.ipynb",
                     "04_scaling_out.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name} cell {i} has outputs: strip them"
            assert cell.execution_count is None, f"{path.name} cell {i} has an execution count"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: exactly one cell tagged 'parameters'"
    assert "PIPELINE_NB_SMALL" in tagged[0].source and "PIPELINE_NB_DATA" in tagged[0].source


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """A kernelspec for this interpreter, and the data the notebooks run on."""
    from pipeline import sample

    root = tmp_path_factory.mktemp("nbkernel")
    spec_dir = root / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "pipeline tests", "language": "python"}))
    data = sample.ensure_sample(num_images=32, num_classes=4,
                                root=str(tmp_path_factory.mktemp("nbdata")))
    return {"JUPYTER_PATH": str(root), "PIPELINE_NB_SMALL": "1", "PIPELINE_NB_DATA": data}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, kernel_env, tmp_path, monkeypatch):
    for k, v in kernel_env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend draws PNGs
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT_S, allow_errors=False,
        resources={"metadata": {"path": str(tmp_path)}})
    t0 = time.perf_counter()
    client.execute()
    secs = time.perf_counter() - t0
    print(f"{path.name}: {secs:.1f} s")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pictures = [o for o in outputs if o.output_type == "display_data"
                and "image/png" in o.get("data", {})]
    assert pictures, f"{path.name} drew no pictures"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "Traceback" not in text
