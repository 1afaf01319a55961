"""Shared helpers for the scale-out tests: tiny images whose pixels encode their index."""

import os
import subprocess
import sys

from PIL import Image

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_images(root, n, classes=3, size=8, fmt="png"):
    """n solid images; pixel value == index (0..n-1, n <= 256); returns root."""
    assert n <= 256
    for i in range(n):
        d = os.path.join(root, f"c{i % classes}")
        os.makedirs(d, exist_ok=True)
        Image.new("RGB", (size, size), (i, i, i)).save(os.path.join(d, f"{i:03d}.{fmt}"))
    return str(root)


def run_py(code, timeout=60, env=None):
    """Runs code in a fresh Python with this worktree first on sys.path."""
    e = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=e)


def last_json(stdout):
    import json
    lines = [l for l in stdout.splitlines() if l.startswith("{")]
    assert lines, stdout
    return json.loads(lines[-1])
