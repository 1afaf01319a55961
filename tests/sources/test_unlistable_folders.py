"""A folder that cannot be listed is a bad input, never a silent loss of its images.

``on_error="raise"``: building the dataset raises, naming the folder. ``"skip"``: the
folder is left out and recorded in ``pipeline.errors(ds)``; ``scan`` lists it. This holds
for a class folder, a sub-folder at any depth and a flat folder's sub-folder; the root
itself always raises.

The folders are made unlistable with ``chmod 000``. Tests run as root here, and root
lists any folder (CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH), so as root the checks run in
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

DIRECTORY = r"""
def directory(root, labels):
    labels = None if labels == "none" else "inferred"
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
    return res
"""

MANIFEST = r"""
def manifest(man):
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
    return res
"""

# One process under the dropped capabilities serves every check of a test process (TensorFlow
# is imported once, not once a check): a request is a line of JSON [function, *arguments] on
# its standard input, the answer a line of JSON on its standard output.
SERVER = "import json, sys\nimport pipeline\n" + DIRECTORY + MANIFEST + r"""
print("ready", flush=True)
for line in sys.stdin:
    name, *args = json.loads(line)
    print("answer " + json.dumps(globals()[name](*args)), flush=True)
"""


def runner():
    if os.geteuid() != 0:
        return [sys.executable]
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: chmod 000 does not stop root")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", sys.executable]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = open(tmp_path_factory.mktemp("server") / "stderr", "w+")
    proc = subprocess.Popen(runner() + ["-c", SERVER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log, text=True,
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))

    def answer(prefix):
        for line in proc.stdout:
            if line.startswith(prefix):
                return line[len(prefix):]
        log.seek(0)
        raise AssertionError(f"the checking process ended (exit {proc.wait()}): "
                             f"{log.read()[-3000:]}")

    def ask(*request):
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        return json.loads(answer("answer "))
    answer("ready")
    yield ask
    proc.stdin.close()
    proc.wait(timeout=60)
    log.close()


@pytest.fixture
def run(server):
    def run_directory(root, labels="inferred"):
        return server("directory", root, "none" if labels is None else labels)
    return run_directory


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
def test_unlistable_folder_raises_or_is_recorded(tmp_path, locked, run, depth):
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
    res = run(root)
    kind, msg = res["raise"]
    assert kind == "OSError" and repr(folder) in msg and "Permission denied" in msg, msg
    assert "on_error='skip'" in msg
    check_skip(res, root, readable, folder)


def test_flat_folder_with_an_unlistable_sub_folder(tmp_path, locked, run):
    root = str(tmp_path / "flat")
    png(os.path.join(root, "1.png"), 1)
    png(os.path.join(root, "x", "2.png"), 2)
    png(os.path.join(root, "y", "3.png"), 3)
    locked(os.path.join(root, "y"))
    res = run(root, labels=None)
    assert res["raise"][0] == "OSError" and repr(os.path.join(root, "y")) in res["raise"][1]
    # scan reads a folder with sub-folders as class folders: 1.png is in no class there.
    check_skip(res, root, [os.path.join(root, "1.png"), os.path.join(root, "x", "2.png")],
               os.path.join(root, "y"), scan_files=1)


@pytest.mark.parametrize("labels", ["inferred", None])
def test_unlistable_root_always_raises(tmp_path, locked, run, labels):
    root = str(tmp_path / "root")
    png(os.path.join(root, "cats", "1.png"), 1)
    locked(root)
    res = run(root, labels)
    for key in ("raise", "skip"):
        kind, msg = res[key]
        assert kind == "PermissionError" or kind == "OSError", (key, kind)
        assert root in msg and "Permission denied" in msg, msg


def test_listable_tree_is_unchanged_under_the_dropped_capabilities(tmp_path, run):
    """The control: the same runner on a readable tree gives every file, no error."""
    root = str(tmp_path / "root")
    png(os.path.join(root, "cats", "1.png"), 1)
    png(os.path.join(root, "dogs", "inner", "2.png"), 2)
    res = run(root)
    assert res["raise"] is None and res["errors"] == [] and res["scan"] == []
    assert sorted(res["paths"]) == [os.path.join(root, "cats", "1.png"),
                                    os.path.join(root, "dogs", "inner", "2.png")]


def test_manifest_file_in_an_unsearchable_folder_is_named_not_missing(tmp_path, locked, server):
    png(str(tmp_path / "ok" / "1.png"), 1)
    png(str(tmp_path / "shut" / "2.png"), 2)
    man = tmp_path / "m.csv"
    man.write_text("path,label\nok/1.png,a\nshut/2.png,b\n")
    locked(str(tmp_path / "shut"))
    res = server("manifest", str(man))
    kind, msg = res["raise"]
    shut = str(tmp_path / "shut" / "2.png")
    assert kind == "PermissionError" and "line 3" in msg and shut in msg, msg
    assert "cannot access file (Permission denied)" in msg and "not found" not in msg
    assert res["paths"] == [str(tmp_path / "ok" / "1.png")]
    assert len(res["errors"]) == 1 and res["errors"][0][0] == shut
    assert res["errors"][0][1].startswith("cannot access file (Permission denied)")
