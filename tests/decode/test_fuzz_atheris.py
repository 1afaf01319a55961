"""The atheris harness over the byte readers (tests/decode/fuzz_readers.py, beside this file),
run for a bounded number of executions from a seed corpus: the repository's unusual files
(../shared/cases*, when there) and files generated here of every kind the readers parse.
Slow tier; skipped where atheris is not installed. Each crash or disagreement it found is a
regular test below."""

import io
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import REPO, SHARED

pytest.importorskip("atheris")
pytestmark = pytest.mark.slow

RUNS = int(os.environ.get("PIPELINE_FUZZ_RUNS", "3000"))
HARNESS = os.path.join(REPO, "tests", "decode", "fuzz_readers.py")


def _seeds():
    out = {}
    for folder in ("cases", "cases2"):
        d = os.path.join(SHARED, folder)
        if os.path.isdir(d):
            for n in sorted(os.listdir(d)):
                p = os.path.join(d, n)
                if os.path.isfile(p) and os.path.getsize(p) < 200_000 and not n.endswith(
                        (".json", ".md", ".npz")):
                    with open(p, "rb") as f:
                        out[f"{folder}_{len(out)}"] = f.read()
    arr = (np.indices((9, 7)).sum(0)[..., None] * [20, 30, 40] % 256).astype(np.uint8)
    im = Image.fromarray(arr)
    for mode in ("RGB", "L", "P", "1"):
        for fmt, kw in (("BMP", {}), ("PNG", {}), ("PNG", {"transparency": 0}),
                        ("JPEG", {"quality": 80})):
            if fmt == "JPEG" and mode in ("P", "1"):
                continue
            if "transparency" in kw and mode == "RGB":
                kw = {"transparency": (20, 30, 40)}
            buf = io.BytesIO()
            im.convert(mode).save(buf, fmt, **kw)
            out[f"{fmt}_{mode}_{len(out)}"] = buf.getvalue()
    ex = Image.Exif()
    ex[0x0112] = 6
    buf = io.BytesIO()
    im.save(buf, "JPEG", exif=ex.tobytes())
    out["jpeg_exif"] = buf.getvalue()
    tiff = b"MM\x00*" + struct.pack(">I", 8) + struct.pack(">H", 1) + struct.pack(
        ">HHI", 0x0112, 3, 1) + struct.pack(">HH", 8, 0) + b"\0\0\0\0"
    out["exif_payload"] = tiff
    return out


def test_atheris_finds_no_crash_or_disagreement(tmp_path):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for name, data in _seeds().items():
        (seeds / name).write_bytes(data)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    run = subprocess.run(
        [sys.executable, HARNESS, f"-runs={RUNS}", "-max_len=4096", "-timeout=60",
         f"-artifact_prefix={tmp_path}/", str(corpus), str(seeds)],
        capture_output=True, text=True, timeout=3600, cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")})
    tail = (run.stdout + run.stderr)[-3000:]
    assert run.returncode == 0, tail
    assert f"Done {RUNS} runs" in tail, tail
    assert not list(tmp_path.glob("crash-*")), tail
