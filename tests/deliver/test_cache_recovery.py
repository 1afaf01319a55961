"""A file cache whose writer was stopped mid-epoch (SIGTERM, SIGKILL) is rebuilt by the
next run, once; a writer that is still running keeps its lock.

Every writer and every rerun is a real separate process (``subprocess``): the lock that
TensorFlow leaves (``<prefix>_0.lockfile``) and the liveness of its writer are what is
tested, so nothing runs in the test process itself.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

# Tests marked `stack` below: Keras and TensorFlow APIs that change between versions, the
# result can differ by TensorFlow stack (setup.cfg); the other variants run on the current
# stack only.

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = 120  # files; enough that a writer paused after a few elements is mid-cache

# Runs one epoch over the cached dataset; with PAUSE_AFTER=k, stops after k elements,
# says "mid" and sleeps (a writer blocked mid-epoch). Prints one JSON line per element.
SCRIPT = r"""
import json, os, sys, time
import pipeline
root, cache = sys.argv[1], sys.argv[2]
pause = int(os.environ.get("PAUSE_AFTER", "0"))
ds = pipeline.from_directory(root, image_size=(6, 6), batch_size=None, shuffle=False,
                             cache=cache, include_paths=True, prefetch=0,
                             num_parallel_calls=1)
out = []
for k, (x, y, p) in enumerate(ds):
    out.append([os.path.basename(p.numpy().decode()), int(y), x.numpy()[0, 0].tolist(),
                int(x.numpy().min()), int(x.numpy().max())])
    if pause and k + 1 == pause:
        print("mid", flush=True)
        time.sleep(600)
print(json.dumps(out), flush=True)
"""


def colour(i):
    return (i * 7 % 256, (i * 13 + 50) % 256, (255 - i * 3) % 256)


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "data"
    for i in range(N):
        d = root / ("a" if i % 2 else "b")
        d.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (6, 6), colour(i)).save(d / f"{i:03d}.png")
    return str(root)


def run(args, pause=0, **kw):
    os.makedirs(os.path.dirname(args[1]), exist_ok=True)
    env = dict(os.environ, PYTHONPATH=REPO, PAUSE_AFTER=str(pause))
    return subprocess.Popen([sys.executable, "-c", SCRIPT] + args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, **kw)


def wait_mid(proc, timeout=240):
    start = time.monotonic()
    line = proc.stdout.readline()
    assert line.strip() == "mid", (line, proc.stderr.read()[-3000:] if proc.poll() else "")
    assert time.monotonic() - start < timeout


def check_epoch(stdout):
    got = json.loads(stdout.strip().splitlines()[-1])
    names = [g[0] for g in got]
    assert sorted(names) == sorted(f"{i:03d}.png" for i in range(N)), "not every file once"
    assert len(names) == len(set(names)) == N
    for name, label, px, lo, hi in got:
        i = int(name[:3])
        assert label == (0 if i % 2 else 1), (name, label)  # class "a" is 0, "b" is 1
        assert px == list(colour(i)) and lo == min(colour(i)) and hi == max(colour(i)), (
            name, px, colour(i))


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, id="TERM", marks=pytest.mark.slow),
                                 pytest.param(signal.SIGKILL, id="KILL", marks=pytest.mark.stack)])
def test_live_writer_keeps_its_lock_and_a_killed_ones_cache_is_rebuilt(tree, tmp_path, sig):
    cache = str(tmp_path / "cache[1]" / "c")
    look_alike = tmp_path / "cache1"  # what the unescaped glob "cache[1]/c-*.data-*" matches
    look_alike.mkdir()
    writer = run([tree, cache], pause=5)
    try:
        wait_mid(writer)
        # While the writer lives, its lock holds: a second run fails naming the lock and
        # removes nothing.
        lock = glob.glob(glob.escape(cache) + "-*_0.lockfile")
        assert len(lock) == 1
        before = sorted(os.listdir(os.path.dirname(cache)))
        second = run([tree, cache])
        out, err = second.communicate(timeout=300)
        assert second.returncode != 0
        assert "FileExistsError" in err and "concurrent caching iterator" in err, err[-3000:]
        assert "being written by another running process" in err and lock[0] in err, err[-3000:]
        assert "is gone" not in err
        assert sorted(os.listdir(os.path.dirname(cache))) == before  # nothing removed
        assert writer.poll() is None
        os.kill(writer.pid, sig)
        writer.wait(60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == -sig
    left = glob.glob(glob.escape(cache) + "-*_0.lockfile")
    assert len(left) == 1, os.listdir(os.path.dirname(cache))  # the fault's precondition
    assert glob.glob(glob.escape(cache) + "-*tempstate*")

    rerun = run([tree, cache])
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-3000:]
    check_epoch(out)
    assert err.count("is gone") == 1 and "removed its" in err, err[-3000:]
    files = sorted(os.listdir(os.path.dirname(cache)))
    assert not [f for f in files if "lockfile" in f or "tempstate" in f], files
    assert any(f.endswith(".index") for f in files), files
    index = glob.glob(glob.escape(cache) + "-*.index")
    mtime = os.stat(index[0]).st_mtime_ns

    # A third run reads the complete cache in its bracketed folder back: no rebuild, nothing
    # removed, nothing written beside it.
    third = run([tree, cache])
    out, err = third.communicate(timeout=300)
    assert third.returncode == 0, err[-3000:]
    check_epoch(out)
    assert "is gone" not in err and "removing the incomplete cache" not in err, err[-3000:]
    assert os.stat(index[0]).st_mtime_ns == mtime  # read back, not rewritten
    assert not os.listdir(look_alike)


# Slow tier (three processes): its cheap check is the last run of the killed-writer test
# above, which reads a complete cache in a bracketed folder back in another process.
@pytest.mark.slow
def test_complete_cache_in_a_bracketed_folder_is_reused_by_another_process(tree, tmp_path):
    cache = str(tmp_path / "cache[1]" / "c")
    look_alike = tmp_path / "cache1"  # what the unescaped glob "cache[1]/c-*.data-*" matches
    look_alike.mkdir()
    first = run([tree, cache])
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    check_epoch(out)
    index = glob.glob(glob.escape(cache) + "-*.index")
    assert len(index) == 1
    mtime = os.stat(index[0]).st_mtime_ns
    second = run([tree, cache])
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err[-3000:]
    check_epoch(out)
    assert "incomplete cache" not in err and "is gone" not in err, err[-3000:]
    assert os.stat(index[0]).st_mtime_ns == mtime  # read back, not rewritten
    assert not os.listdir(look_alike)
