"""The notebooks run top to bottom as-is (small), show pictures, and are committed with
readable outputs (executed top to bottom, no start-up noise, each under 300 KB).

Each notebook is executed with nbclient in a kernel of *this* interpreter: a
kernelspec written to a temporary JUPYTER_PATH (searched first) whose argv is
``sys.executable -m ipykernel_launcher``, so a user-level ``python3`` spec that
points at another Python cannot be picked up. Only ``pip install -e .[test]``
(ipykernel, nbclient, nbformat, matplotlib) is needed.

They run as a user on a fresh clone runs them: from a temporary copy of the
repository (``pipeline/``, ``benchmarks/``, ``notebooks/``), so that there is
no ``../shared`` beside it, with no ``PIPELINE_DATA_DIR`` (nor the older
``PIPELINE_NB_*`` variables): the data is the built-in generated sample. The
only setting is ``PIPELINE_NB_SMALL=1``, which the "parameters" cells read
(tiny sizes); ``TF_CPP_MIN_LOG_LEVEL`` is unset, as a user's usually is, so
what TensorFlow writes shows as it would for them. The optional peers (torch) are not needed: a peer that is not
installed is skipped and said so.
"""

import importlib.util
import json
import os
import shutil
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
                     "04_scaling_out.ipynb", "05_segmentation.ipynb"]


# What a reader should not have to scroll past in a saved output: TensorFlow 2.16's CUDA
# plugin lines, TF1 deprecation notices, progress bars (tqdm redraws with carriage returns).
NOISE = ("Unable to register cuFFT", "Unable to register cuDNN", "Unable to register cuBLAS",
         "deprecat", "Deprecat", "\r", "Traceback")
MAX_BYTES = 300_000
PICTURES = ("image/png", "image/jpeg")  # grids of photos are saved as JPEG (smaller)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_with_readable_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert path.stat().st_size < MAX_BYTES, f"{path.name}: {path.stat().st_size:,} bytes"
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), \
        f"{path.name}: not executed top to bottom in one run (execution counts {counts})"
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"], path.name
    assert any(o.output_type == "display_data" and set(PICTURES) & set(o.get("data", {}))
               for o in outputs), f"{path.name}: no pictures saved"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    for noise in NOISE:
        assert noise not in text, f"{path.name}: {noise!r} in a saved output"
    for machine in ("/work/", "/root/", "/home/"):
        assert machine not in text, f"{path.name}: a machine path ({machine}) in an output"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: exactly one cell tagged 'parameters'"
    assert "PIPELINE_NB_SMALL" in tagged[0].source and "DATA_DIR = None" in tagged[0].source
    source = "".join(c.source for c in nb.cells)
    assert "/work/" not in source and "PIPELINE_NB_DATA" not in source


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    """A copy of the repository's code and notebooks with no ``../shared`` beside it,
    and a kernelspec for this interpreter."""
    root = tmp_path_factory.mktemp("clone")
    repo = root / "repo"
    for part in ("pipeline", "benchmarks", "notebooks"):
        shutil.copytree(REPO / part, repo / part,
                        ignore=shutil.ignore_patterns("__pycache__", "results", "*.pyc"))
    assert not (repo.parent / "shared").exists()
    spec_dir = root / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "pipeline tests", "language": "python"}))
    return repo, root / "jupyter"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_cells_compile_and_import_only_what_exists(path):
    """The default tier's cheap check of each notebook (executing them is the slow tier's):
    every code cell is valid Python (IPython's ``%``/``!`` lines aside), and every
    ``pipeline`` module and public name the notebook imports or calls exists."""
    import ast
    import importlib
    import pipeline
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        src = "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line
                        for line in cell.source.splitlines())
        tree = ast.parse(src, f"{path.name} cell {i + 1}")
        compile(tree, f"{path.name} cell {i + 1}", "exec")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeline"):
                mod = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(mod, alias.name) or importlib.util.find_spec(
                        f"{node.module}.{alias.name}"), (path.name, node.module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("pipeline"):
                        importlib.import_module(alias.name)
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id == "pipeline"):
                assert hasattr(pipeline, node.attr), (path.name, f"pipeline.{node.attr}")


@pytest.mark.slow  # each notebook executed top to bottom: minutes; the check above is cheap
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_as_is(path, fresh_clone, tmp_path, monkeypatch):
    repo, jupyter = fresh_clone
    for k in list(os.environ):
        if k == "PIPELINE_DATA_DIR" or k.startswith("PIPELINE_NB_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("PIPELINE_NB_SMALL", "1")
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    # The copy first: `import pipeline` (and `python -m pipeline` subprocesses) use it.
    monkeypatch.setenv("PYTHONPATH", str(repo))
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)  # as a user's: pipeline sets it
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend draws PNGs
    nb = nbformat.read(repo / "notebooks" / path.name, as_version=4)
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
                and set(PICTURES) & set(o.get("data", {}))]
    assert pictures, f"{path.name} drew no pictures"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "Traceback" not in text
    if path.name == "05_segmentation.ipynb":  # makes its own pairs (shapes) in a temp folder
        assert "data: <generated shapes: 32 training pairs, 8 validation pairs>" in text
    else:
        assert "data: <built-in sample sample-v1-n32-c4-s0>" in text  # not ../shared
    # pipeline is imported before TensorFlow, so its C++ log level (errors only) applies:
    # no info lines or warnings of TensorFlow's, and no note that it came too late
    assert "imported before pipeline" not in text
    for quiet in ("cpu_feature_guard", "Local rendezvous is aborting", "TF-TRT Warning"):
        assert quiet not in text, quiet
    if path.name == "01_quickstart.ipynb":
        # only pipeline is imported: TensorFlow loads through it, its start-up lines once
        # (TensorFlow 2.21 writes them twice); a truncated JPEG is decoded once per pass
        # (libjpeg's line once per cell), not again to diagnose it
        from pipeline import native_stderr
        lines = [native_stderr.LOG_PREFIX.sub(b"", line.encode()) for line in text.splitlines()
                 if native_stderr.LOG_PREFIX.match(line.encode()) or "InitializeLog" in line]
        assert len(lines) == len(set(lines)), text
        for cell in nb.cells:
            err = "".join(o.get("text", "") for o in cell.get("outputs", [])
                          if o.output_type == "stream" and o.name == "stderr")
            assert err.count("Improper call to JPEG library") + err.count(
                "Premature end of JPEG data") <= 1, err
    if path.name == "03_benchmarks.ipynb":
        import importlib.util
        if importlib.util.find_spec("torch") is None:
            assert "torch: not measured (torch is not installed here" in text
