"""A folder that cannot be listed is a bad input, never a silent loss of its images.

``on_error="raise"``: building the dataset raises, naming the folder. ``"skip"``: the
folder is left out and recorded in ``pipeline.errors(ds)``; ``scan`` lists it. This holds
for a class folder, a sub-folder at any depth and a flat folder's sub-folder; the root
itself always raises.

The folders are made unlistable with ``chmod 000``. Tests run as root here, and root
lists any folder (CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH), so as root each check runs in
a subprocess started by ``setpriv`` with those two capabilities dropped from its bounding
set: ``os.scandir`` then really fails with EACCES, as for an ordinary user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from PIL import Image

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r"""
import json, os, sys
import pipeline
root, labels = sys.argv[1], (None if sys.argv[2] == "none" else "inferred")
res = {}
try:
    pipeline.from_directory(root, labels=labels, image_size=(4, 4))
    res["raise"] = None
except OSError as e:
    res["raise"] = [type(e).__name__, str(e)]
try:
    ds = pipeline.from_directory(root, labels=labels, image_size=(4, 4), batch_size=None,
                                 shuffle=False, on_error="skip", include_paths=True)
    el = list(ds)
    res["paths"] = [e[-1].numpy().decode() for e in el]
    res["pixels"] = [e[0].numpy()[0, 0].tolist() for e in el]
    res["errors"] = [list(r) for r in pipeline.errors(ds)]
except OSError as e:
    res["skip"] = [type(e).__name__, str(e)]
try:
    r = pipeline.scan(root, progress=False)
    res["scan"] = r.to_dict()["unlistable_folders"]
    res["scan_files"] = r.num_files
    res["table"] = r.table()
except OSError as e:
    res["scan"] = [type(e).__name__, str(e)]
print(json.dumps(res))
"""


def runner():
    if os.geteuid() != 0:
        return [sys.executable]
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: chmod 000 does not stop root")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", sys.executable]


def run(root, labels="inferred"):
    proc = subprocess.run(runner() + ["-c", SCRIPT, root, "none" if labels is None else labels],
                          capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def colour(i):
    return [i * 30 % 256, 200 - i * 10, 17 * i % 256]


def png(path, i):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new("RGB", (4, 4), tuple(colour(i))).save(path)


@pytest.fixture
def locked():
    made = []

    def lock(path):
        os.chmod(path, 0)
        made.append(path)
        return path
    yield lock
    for p in made:
        os.chmod(p, 0o755)


def check_skip(res, root, readable, folder, scan_files=None):
    assert sorted(res["paths"]) == sorted(readable), res["paths"]
    for p, px in zip(res["paths"], res["pixels"]):
        assert px == colour(int(os.path.basename(p)[:-4])), (p, px)
    assert res["errors"] == [[folder, "cannot list folder (Permission denied)"]]
    assert res["scan"] == [{"path": folder, "reason": "cannot list folder (Permission denied)"}]
    assert f"folders that cannot be listed (1" in res["table"] and folder in res["table"]
    assert res["scan_files"] == (len(readable) if scan_files is None else scan_files)


@pytest.mark.parametrize("depth", [0, 1, 2], ids=["class-folder", "sub-folder", "deeper"])
def test_unlistable_folder_raises_or_is_recorded(tmp_path, locked, depth):
    root = str(tmp_path / "root")
    readable = []
    for i in range(3):
        png(os.path.join(root, "cats", f"{i}.png"), i)
        readable.append(os.path.join(root, "cats", f"{i}.png"))
    png(os.path.join(root, "dogs", "10.png"), 10)
    readable.append(os.path.join(root, "dogs", "10.png"))
    folder = os.path.join(root, "dogs", *["inner", "deep"][:depth])
    png(os.path.join(folder, "20.png"), 20)
    png(os.path.join(folder, "21.png"), 21)
    if depth == 0:
        readable.remove(os.path.join(root, "dogs", "10.png"))
    locked(folder)
    res, err = run(root)
    kind, msg = res["raise"]
    assert kind == "OSError" and repr(folder) in msg and "Permission denied" in msg, msg
    assert "on_error='skip'" in msg
    check_skip(res, root, readable, folder)


def test_flat_folder_with_an_unlistable_sub_folder(tmp_path, locked):
    root = str(tmp_path / "flat")
    png(os.path.join(root, "1.png"), 1)
    png(os.path.join(root, "x", "2.png"), 2)
    png(os.path.join(root, "y", "3.png"), 3)
    locked(os.path.join(root, "y"))
    res, _ = run(root, labels=None)
    assert res["raise"][0] == "OSError" and repr(os.path.join(root, "y")) in res["raise"][1]
    # scan reads a folder with sub-folders as class folders: 1.png is in no class there.
    check_skip(res, root, [os.path.join(root, "1.png"), os.path.join(root, "x", "2.png")],
               os.path.join(root, "y"), scan_files=1)


@pytest.mark.parametrize("labels", ["inferred", None])
def test_unlistable_root_always_raises(tmp_path, locked, labels):
    root = str(tmp_path / "root")
    png(os.path.join(root, "cats", "1.png"), 1)
    locked(root)
    res, _ = run(root, labels)
    for key in ("raise", "skip"):
        kind, msg = res[key]
        assert kind == "PermissionError" or kind == "OSError", (key, kind)
        assert root in msg and "Permission denied" in msg, msg


def test_listable_tree_is_unchanged_under_the_dropped_capabilities(tmp_path):
    """The control: the same runner on a readable tree gives every file, no error."""
    root = str(tmp_path / "root")
    png(os.path.join(root, "cats", "1.png"), 1)
    png(os.path.join(root, "dogs", "inner", "2.png"), 2)
    res, _ = run(root)
    assert res["raise"] is None and res["errors"] == [] and res["scan"] == []
    assert sorted(res["paths"]) == [os.path.join(root, "cats", "1.png"),
                                    os.path.join(root, "dogs", "inner", "2.png")]


MANIFEST_SCRIPT = r"""
import json, sys
import pipeline
man = sys.argv[1]
res = {}
try:
    pipeline.from_manifest(man, image_size=(4, 4))
    res["raise"] = None
except OSError as e:
    res["raise"] = [type(e).__name__, str(e)]
ds = pipeline.from_manifest(man, image_size=(4, 4), batch_size=None, shuffle=False,
                            on_error="skip", include_paths=True)
res["paths"] = [e[-1].numpy().decode() for e in ds]
res["errors"] = [list(r) for r in pipeline.errors(ds)]
print(json.dumps(res))
"""


def test_manifest_file_in_an_unsearchable_folder_is_named_not_missing(tmp_path, locked):
    png(str(tmp_path / "ok" / "1.png"), 1)
    png(str(tmp_path / "shut" / "2.png"), 2)
    man = tmp_path / "m.csv"
    man.write_text("path,label\nok/1.png,a\nshut/2.png,b\n")
    locked(str(tmp_path / "shut"))
    proc = subprocess.run(runner() + ["-c", MANIFEST_SCRIPT, str(man)], capture_output=True,
                          text=True, timeout=600, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    kind, msg = res["raise"]
    shut = str(tmp_path / "shut" / "2.png")
    assert kind == "PermissionError" and "line 3" in msg and shut in msg, msg
    assert "cannot access file (Permission denied)" in msg and "not found" not in msg
    assert res["paths"] == [str(tmp_path / "ok" / "1.png")]
    assert len(res["errors"]) == 1 and res["errors"][0][0] == shut
    assert res["errors"][0][1].startswith("cannot access file (Permission denied)")
