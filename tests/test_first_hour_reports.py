"""Messages a new user met in their first hour, each checked for what it names: the
budget line's reasons add up to its files, Pillow's reasons carry no object address,
a folder given as a manifest, a mask folder that is the images' own, a misspelt peer."""

import os

import pytest

import pipeline
from pipeline.decode import guard
from pipeline.tools.bench import bench


def test_budget_summary_counts_the_files_of_reasons_it_leaves_out():
    records = [guard.ErrorRecord(f"f{i}.jpg", r) for i, r in enumerate(
        ["truncated", "truncated", "bomb", "corrupt AVIF", "not an image"])]
    line = guard.summarize(records, limit=3)
    assert line.startswith("Reasons: 2 x truncated, ")
    # 3 reasons shown for 4 of the files; the fifth file's reason is counted, not lost
    assert "1 x 1 other reason(s)" in line
    shown = [int(part.split(" x ")[0]) for part in line[len("Reasons: "):].split(". First")[0]
             .split(", ")]
    assert sum(shown) == len(records)
    assert line.endswith("; ... and 2 more.")


def test_budget_summary_adds_nothing_when_every_reason_is_shown():
    records = [guard.ErrorRecord("a.jpg", "truncated"), guard.ErrorRecord("b.png", "bomb")]
    assert guard.summarize(records, limit=3) == (
        "Reasons: 1 x truncated, 1 x bomb. First files: a.jpg: truncated; b.png: bomb.")


def test_pillow_reason_carries_no_object_address():
    text = ("cannot identify image file <_io.BytesIO object at 0x7f597428e5c0> "
            "[Op:EagerPyFunc] name: pipeline_pillow_fallback")
    assert guard.clean_message(text) == "cannot identify image file"


def test_a_folder_given_as_manifest_is_named_a_folder(tmp_path):
    with pytest.raises(IsADirectoryError, match=r"must be a file .* not a folder; for class "
                       r"folders use pipeline.from_directory\. Received: manifest="):
        pipeline.from_manifest(str(tmp_path), label_columns="label")


def test_masks_dir_that_is_the_images_folder_with_one_suffix_is_refused(tmp_path):
    from PIL import Image
    Image.new("RGB", (4, 4)).save(tmp_path / "a.png")
    with pytest.raises(ValueError, match=r"every image would be its own mask.*Received: "
                       r"directory=.*masks_dir=.*mask_suffix=''"):
        pipeline.from_directory(str(tmp_path), masks_dir=str(tmp_path) + os.sep,
                                image_size=(4, 4))


def test_a_misspelt_peer_gets_did_you_mean():
    with pytest.raises(ValueError, match=r"unknown candidate\(s\) kears \(did you mean keras\?\)"):
        bench.check(compare=("kears",))
