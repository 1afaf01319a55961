"""The distribution's name and version: ``pipeline.__version__``, ``python -m pipeline --version``."""

import configparser
import os
import subprocess
import sys
from importlib import metadata

import pipeline

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _setup_cfg():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"), encoding="utf-8")
    return cfg["metadata"]


def test_distribution_name_is_tf_image_pipeline():
    assert _setup_cfg()["name"] == pipeline.DISTRIBUTION == "tf-image-pipeline"


def test_version_is_the_installed_metadata_else_the_source_trees():
    try:
        installed = metadata.version("tf-image-pipeline")
    except metadata.PackageNotFoundError:
        installed = None
    # An install of this tree (editable or not) carries setup.cfg's version; a tree that is
    # not installed under this name reads it from setup.cfg.
    assert pipeline.__version__ == (installed or _setup_cfg()["version"])
    assert pipeline.__version__ == _setup_cfg()["version"]


def test_cli_version_answers_before_tensorflow_loads():
    code = ("import sys; sys.argv = ['pipeline', '--version']\n"
            "from pipeline import cli\n"
            "try:\n    cli.run()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            "print('tensorflow loaded:', 'tensorflow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == f"tf-image-pipeline {pipeline.__version__}\ntensorflow loaded: False\n"


def test_python_dash_m_pipeline_version():
    proc = subprocess.run([sys.executable, "-m", "pipeline", "--version"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == f"tf-image-pipeline {pipeline.__version__}\n"


def test_docs_say_how_to_tell_this_pipeline_from_the_other_one():
    """The import name is shared with another distribution named `pipeline`; the package
    is not on the index, so nothing tells users to pip install it from there."""
    install = open(os.path.join(ROOT, "docs", "install.md"), encoding="utf-8").read()
    assert "pipeline.__file__" in install and "--version" in install
    assert f"prints: {pipeline.DISTRIBUTION}" in install
    for name in ("README.md", os.path.join("docs", "install.md"),
                 os.path.join("docs", "object-storage.md")):
        text = open(os.path.join(ROOT, name), encoding="utf-8").read()
        assert "pip install tf-image-pipeline" not in text, name
        assert "pip install 'tf-image-pipeline" not in text, name
