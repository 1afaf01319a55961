"""What a new user meets first: a folder without class sub-folders, a mistyped folder,
a bad file raised inside fit."""

import os

import pytest
from PIL import Image

import pipeline
from pipeline import checks


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("first_hour")
    flat = root / "flat"
    flat.mkdir()
    for i in range(3):
        Image.new("RGB", (8, 8), (i, i, i)).save(flat / f"{i}.png")
    photos = root / "photos" / "train"
    for c in ("cat", "dog"):
        (photos / c).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(photos / c / "0.png")
    (photos / "dog" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    return root


def test_a_folder_without_class_sub_folders_says_pass_labels_none(tree):
    flat = str(tree / "flat")
    with pytest.raises(ValueError) as e:
        pipeline.from_directory(flat)
    assert str(e.value) == (
        "`directory` needs class sub-folders (a file's class is the name of its sub-folder), "
        "but it has none (3 image file(s) lie directly in it). To read its images without "
        f"labels, pass `labels=None`. Received: directory={flat!r}")
    ds = pipeline.from_directory(flat, labels=None, image_size=(8, 8), batch_size=None)
    assert len(list(ds)) == 3


def test_a_missing_folder_shows_the_working_directory_and_a_near_match(tree, monkeypatch):
    monkeypatch.chdir(tree)
    with pytest.raises(FileNotFoundError) as e:
        pipeline.from_directory("photo/train")
    assert str(e.value) == ("`directory` does not exist: 'photo/train' (looked up in the "
                            f"working directory {str(tree)!r}; did you mean 'photos/train'?)")
    with pytest.raises(FileNotFoundError) as e:
        pipeline.from_directory("photos/trian")
    assert "did you mean 'photos/train'?" in str(e.value)
    with pytest.raises(FileNotFoundError) as e:
        pipeline.from_directory("Photos")          # case only
    assert "did you mean 'photos'?" in str(e.value)
    absolute = str(tree / "zzz")
    with pytest.raises(FileNotFoundError) as e:
        pipeline.from_directory(absolute)
    assert str(e.value) == f"`directory` does not exist: {absolute!r}"   # nothing near


def test_not_found_hint_walks_to_the_first_missing_part(tmp_path):
    (tmp_path / "data" / "images").mkdir(parents=True)
    assert checks.not_found_hint(str(tmp_path / "data" / "imags" / "x")) == (
        f" (did you mean {str(tmp_path / 'data' / 'images' / 'x')!r}?)")
    assert checks.not_found_hint("s3://bucket/x") == ""


def test_a_bad_file_raised_inside_fit_says_how_to_skip_and_how_to_list(tree):
    import keras
    import tensorflow as tf
    root = str(tree / "photos" / "train")
    ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=2)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        model.fit(ds, epochs=1, verbose=0)
    bad = os.path.join(root, "dog", "bad.png")
    said = str(e.value)
    assert f"pipeline: cannot load file {bad} (" in said
    assert said.split("cannot load file ", 1)[1].split("]")[0].endswith(
        "To skip bad files instead (each is recorded in pipeline.errors(ds)), pass "
        "on_error=skip; to list every bad file before training, run pipeline.scan(SOURCE) "
        "or python -m pipeline scan SOURCE")
    assert "\\'" not in said and '\\"' not in said
