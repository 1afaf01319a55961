"""from_manifest: CSV and JSON Lines manifests, labels, weights, errors by line number."""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import pipeline
from io_helpers import collect, values, write_image

OPTS = dict(image_size=(4, 4), batch_size=3)


@pytest.fixture
def data(tmp_path):
    rows = []
    for k in range(7):
        rel = f"imgs/{'ab'[k % 2]}/f{k}.png"
        write_image(str(tmp_path / rel), k + 1)
        rows.append({"path": rel, "cls": ["cat", "dog", "eel"][k % 3], "n": k % 3,
                     "tags": ["cat", "dog"][: 1 + k % 2], "y": k / 2.0, "w": k + 1})
    return tmp_path, rows


def write_csv(path, rows, fields):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("|".join(r[k]) if isinstance(r[k], list) else r[k]) for k in fields})
    return str(path)


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return str(path)


def test_csv_string_classes_exactly_once_shuffled(data):
    root, rows = data
    m = write_csv(root / "m.csv", rows, ["path", "cls"])
    ds = pipeline.from_manifest(m, label_columns="cls", seed=1, **OPTS)
    assert ds.class_names == ["cat", "dog", "eel"]
    x, y = collect(ds)
    got = values(x)
    assert sorted(got) == list(range(1, 8))  # exactly once
    assert got != list(range(1, 8))           # shuffled (seed 1)
    for v, label in zip(got, y):               # label pairing survives shuffle + batch
        assert label == (v - 1) % 3
    x2, _ = collect(pipeline.from_manifest(m, label_columns="cls", seed=1, **OPTS))
    assert values(x2) == got                  # same seed, same order
    epochs = [values(collect(ds)[0]) for _ in range(3)]
    assert all(sorted(e) == list(range(1, 8)) for e in epochs)
    assert len({tuple(e) for e in epochs + [got]}) > 1  # reshuffled each epoch


def test_jsonl_int_labels_default_label_column_and_weights(data):
    root, rows = data
    m = write_jsonl(root / "m.jsonl", [{"path": r["path"], "label": r["n"], "w": r["w"]}
                                       for r in rows])
    ds = pipeline.from_manifest(m, weight_column="w", shuffle=False, **OPTS)
    x, y, w = collect(ds)
    assert values(x) == list(range(1, 8))
    assert [int(v) for v in y] == [k % 3 for k in range(7)]
    assert np.asarray(w).dtype == np.float32 and list(w) == [k + 1.0 for k in range(7)]
    assert ds.element_spec[1].dtype == tf.int32


def test_multi_label_json_list_and_csv_pipes(data):
    root, rows = data
    m1 = write_jsonl(root / "m.jsonl", [{"path": r["path"], "tags": r["tags"]} for r in rows])
    m2 = write_csv(root / "m.csv", rows, ["path", "tags"])
    for m in (m1, m2):
        ds = pipeline.from_manifest(m, label_columns="tags", shuffle=False, **OPTS)
        assert ds.class_names == ["cat", "dog"]
        x, y = collect(ds)
        assert np.asarray(y).dtype == np.float32
        assert [list(v) for v in y] == [[1.0, float(k % 2)] for k in range(7)]


def test_float_regression_targets(data):
    root, rows = data
    m = write_csv(root / "m.csv", rows, ["path", "y"])
    ds = pipeline.from_manifest(m, label_columns="y", label_mode="float", shuffle=False, **OPTS)
    x, y = collect(ds)
    assert np.allclose(y, [k / 2.0 for k in range(7)])
    assert ds.element_spec[1].dtype == tf.float32


def test_root_and_outside_root(data, tmp_path):
    root, rows = data
    sub = root / "sub"
    sub.mkdir()
    m = write_csv(sub / "m.csv", [{"path": "../" + rows[0]["path"]}], ["path"])
    with pytest.raises(ValueError, match=r"line 2: path '\.\./imgs/a/f0.png' escapes root"):
        pipeline.from_manifest(m, **OPTS)
    ds = pipeline.from_manifest(m, allow_outside_root=True, **OPTS)
    assert values(collect(ds)[0]) == [1]
    ds = pipeline.from_manifest(m, root=str(sub / "deeper" / ".."), allow_outside_root=True,
                                **OPTS)
    assert len(ds.file_paths) == 1
    # an explicit root makes the relative path fine
    m2 = write_csv(sub / "m2.csv", [{"path": rows[0]["path"]}], ["path"])
    assert values(collect(pipeline.from_manifest(m2, root=str(root), **OPTS))[0]) == [1]
    absolute = write_csv(sub / "abs.csv", [{"path": str(root / rows[0]["path"])}], ["path"])
    with pytest.raises(ValueError, match="line 2: path .* is absolute"):
        pipeline.from_manifest(absolute, **OPTS)


@pytest.mark.parametrize("content,kwargs,exc,pattern", [
    ("path,label\nimgs/a/f0.png,1\nimgs/b/f1.png\n", {}, ValueError,
     r"m.csv, line 3: no value in column\(s\) 'label' \(a short row"),
    ("file,label\nimgs/a/f0.png,1\n", {}, ValueError,
     r"m.csv, line 1 \(the header\): missing column\(s\) 'path'; the header has 'file', "
     r"'label'\. Received: path_column='path'$"),
    ("path,label\nimgs/a/f0.png,1\n ,2\n", {}, ValueError, "line 3: empty path"),
    ("path,label\nimgs/a/f0.png,1\nimgs/b/f1.png,abc\n", {"label_mode": "float"}, ValueError,
     r"line 3: cannot parse value 'abc' in column 'label' as a number"),
    ("path,label\nimgs/a/f0.png,1\nimgs/b/f1.png,\n", {}, ValueError,
     "line 3: empty label in column 'label'"),
    ("path,label\nimgs/a/f0.png,1\nimgs/a/nope.png,0\n", {}, FileNotFoundError,
     r"line 3: file not found: .*nope.png"),
    ("path,label,w\nimgs/a/f0.png,1,x\n", {"weight_column": "w"}, ValueError,
     "line 2: cannot parse value 'x' in column 'w'"),
])
def test_errors_name_the_line(data, content, kwargs, exc, pattern):
    root, _ = data
    (root / "m.csv").write_text(content)
    with pytest.raises(exc, match=pattern):
        pipeline.from_manifest(str(root / "m.csv"), **kwargs, **OPTS)


def test_every_error_names_its_physical_line(data):
    """A CSV whose header is wrong was blamed on line 2, its first data row (issue #15): the
    header is line 1, the first data row line 2, and a row is numbered by the line it starts
    on, blank lines and quoted line breaks counted."""
    root, _ = data
    m = str(root / "m.csv")
    cases = [
        # the header's faults: line 1
        ("file,label\nimgs/a/f0.png,1\n", {},
         f"{m}, line 1 (the header): missing column(s) 'path'; the header has 'file', 'label'. "
         "Received: path_column='path'"),
        ("path,cls\nimgs/a/f0.png,1\n", {"label_columns": ["cls", "kind"]},
         f"{m}, line 1 (the header): missing column(s) 'kind'; the header has 'path', 'cls'. "
         "Received: label_columns=['cls', 'kind']"),
        ("path,w\nimgs/a/f0.png,1\n", {"label_columns": "w", "weight_column": "wt"},
         f"{m}, line 1 (the header): missing column(s) 'wt'; the header has 'path', 'w'. "
         "Received: weight_column='wt'"),
        ("path,label,path\nimgs/a/f0.png,1,x\n", {},
         f"{m}, line 1 (the header): column(s) 'path' named more than once"),
        ("\npath,label\n", {}, f"{m}, line 1: no header row (the first line is empty)"),
        ("", {}, f"{m}, line 1: no header row (the file is empty)"),
        # a row's faults: the line it starts on
        ("path,label\nimgs/a/f0.png,1,9\n", {},
         f"{m}, line 2: 1 more field(s) than the header has ('9')"),
        ("path,label\nimgs/a/f0.png,1\n\n\nimgs/b/f1.png\n", {},
         f"{m}, line 5: no value in column(s) 'label' (a short row, or null)"),
        ('path,label\n"imgs/a/f0.png",1\n"imgs/b/\nf1.png",0\n ,2\n', {},
         f"{m}, line 5: empty path in column 'path'"),
        ('path,label\nimgs/a/f0.png,"1\n"\nimgs/b/f1.png,abc\n', {"label_mode": "float"},
         f"{m}, line 4: cannot parse value 'abc' in column 'label' as a number"),
    ]
    for content, kwargs, says in cases:
        (root / "m.csv").write_text(content)
        with pytest.raises(ValueError) as e:
            pipeline.from_manifest(m, **kwargs, **OPTS)
        assert str(e.value) == says, (content, str(e.value))
    # JSON Lines has no header: a missing key is the row's fault, on its own line
    (root / "m.jsonl").write_text('{"path": "imgs/a/f0.png", "label": 1}\n\n{"label": 0}\n')
    with pytest.raises(ValueError) as e:
        pipeline.from_manifest(str(root / "m.jsonl"), **OPTS)
    assert str(e.value) == (f"{root / 'm.jsonl'}, line 3: missing column(s) 'path'; the row has "
                            "'label'. Received: path_column='path'")


def test_jsonl_errors(data):
    root, _ = data
    (root / "m.jsonl").write_text('{"path": "imgs/a/f0.png", "label": [1]}\n{"path": "x", \n')
    with pytest.raises(ValueError, match=r"m.jsonl, line 2: not valid JSON"):
        pipeline.from_manifest(str(root / "m.jsonl"), **OPTS)
    (root / "m.jsonl").write_text('{"path": "imgs/a/f0.png", "label": {"a": 1}}\n')
    with pytest.raises(ValueError, match=r"line 1: cannot parse label \{'a': 1\}"):
        pipeline.from_manifest(str(root / "m.jsonl"), label_mode="multi_hot", **OPTS)
    with pytest.raises(ValueError, match=r"Received: label_mode='bogus'"):
        pipeline.from_manifest(str(root / "m.jsonl"), label_mode="bogus", **OPTS)


def test_missing_file_skipped_under_on_error_skip(data):
    root, rows = data
    m = write_csv(root / "m.csv", rows[:2] + [{"path": "imgs/gone.png", "n": 0}], ["path", "n"])
    ds = pipeline.from_manifest(m, label_columns="n", on_error="skip", shuffle=False, **OPTS)
    assert values(collect(ds)[0]) == [1, 2]
    assert [r.path.endswith("gone.png") for r in pipeline.errors(ds)] == [True]
