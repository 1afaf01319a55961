"""pipeline.checks' path checks: the source, the output folder, the output file, an output
inside the source; each a ValueError naming the argument, nothing created."""

import os

import pytest

from pipeline import checks


def test_check_source_names_what_the_path_is(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "list.csv").write_text("path\n")
    (tmp_path / "notes.txt").write_text("x")
    checks.check_source("source", str(tmp_path / "d"))
    checks.check_source("source", str(tmp_path / "list.csv"))
    checks.check_source("source", "s3://bucket/folder")  # its file system's to say
    nope, notes = str(tmp_path / "nope"), str(tmp_path / "notes.txt")
    with pytest.raises(ValueError) as e:
        checks.check_source("source", nope)
    assert str(e.value) == f"`source` does not exist: {nope!r}"
    with pytest.raises(ValueError) as e:
        checks.check_source("source", notes)
    assert str(e.value) == (f"`source` must be a folder or a manifest (.csv / .jsonl; .tsv / "
                            f".json too); {notes!r} is a file that is neither. "
                            f"Received: source={notes!r}")
    with pytest.raises(ValueError) as e:
        checks.check_source("data_dir", str(tmp_path / "list.csv"), manifest_ok=False)
    assert str(e.value).startswith("`data_dir` must be a folder; ")


def test_check_folder_and_check_writable_create_nothing(tmp_path):
    (tmp_path / "f").write_text("x")
    checks.check_folder("output_dir", str(tmp_path / "new" / "deeper"))
    with pytest.raises(ValueError, match=r"^`output_dir` must be a folder \(new or existing\)"):
        checks.check_folder("output_dir", str(tmp_path / "f"))
    with pytest.raises(ValueError, match=r"^`work_dir`: cannot create folder .*: .* is a file"):
        checks.check_folder("work_dir", str(tmp_path / "f" / "j"))
    with pytest.raises(ValueError, match=r"^`json_out` is a folder, not a file\."):
        checks.check_writable("json_out", str(tmp_path))
    with pytest.raises(ValueError, match=r"^`json_out`: folder .* does not exist\."):
        checks.check_writable("json_out", str(tmp_path / "no" / "x.json"))
    assert sorted(os.listdir(tmp_path)) == ["f"]


def test_check_output_outside(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    manifest = tmp_path / "m.csv"
    manifest.write_text("path\n")
    checks.check_output_outside(str(tmp_path / "out"), str(src))
    checks.check_output_outside(str(tmp_path / "srcx"), str(src))  # a name's prefix is not in
    checks.check_output_outside("gs://b/out", str(src))
    for out in (src, src / "a", src / "new"):
        with pytest.raises(ValueError, match=r"^`output_dir` must not be `source` or a folder "
                                             r"inside it"):
            checks.check_output_outside(str(out), str(src))
    # beside a manifest: the library writes there; convert (manifest_root) refuses it
    checks.check_output_outside(str(tmp_path / "out"), str(manifest))
    with pytest.raises(ValueError) as e:
        checks.check_output_outside(str(tmp_path / "out"), str(manifest), manifest_root=True)
    assert str(e.value) == (
        "`output_dir` must not be the manifest's root (the manifest's folder) or a folder "
        "inside it: the shards and dataset.json would be written among its images. "
        f"Received: output_dir={str(tmp_path / 'out')!r}, source={str(manifest)!r}")
    with pytest.raises(ValueError, match=r"root \(root='/'\)"):
        checks.check_output_outside(str(tmp_path / "out"), str(manifest), root="/",
                                    manifest_root=True)


def test_check_manifest_options():
    checks.check_manifest_options("list.jsonl", {"path_column": "file"})
    checks.check_manifest_options("folder", {})
    with pytest.raises(ValueError) as e:
        checks.check_manifest_options("folder", {"path_column": "f", "root": "r"})
    assert str(e.value) == ("`path_column`, `root` apply to a manifest `source` (.csv / "
                            ".jsonl) only; `source` is not one. Received: source='folder'")
    with pytest.raises(ValueError, match=r"Received: source=a list of 2 paths$"):
        checks.check_manifest_options(["a.jpg", "b.jpg"], {"label_columns": ["y"]})
