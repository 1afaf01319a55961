"""pipeline.tools.bench.bench: bench's checks, in the library's names, before any work."""

import os

import numpy as np

import pytest

from pipeline.tools.bench import bench, harness


def test_too_few_images_to_time_names_what_works(monkeypatch):
    monkeypatch.delenv("PIPELINE_DATA_DIR", raising=False)
    bench.check_timed(batch_size=4, num_images=9)  # 3 batches: 2 timed
    with pytest.raises(ValueError) as e:
        bench.check_timed(batch_size=64, num_images=100, sample_images=100)
    assert str(e.value) == (
        "batch_size=64 with 100 images is 2 batches per epoch, and bench times only what comes "
        "after each epoch's first batch (images/s, images per CPU-second): 1 batch (36 images) "
        "per epoch would be timed, and a figure needs at least 2 timed batches per epoch. What "
        "works: sample_images=129 (the smallest that works with batch_size=64), or "
        "batch_size=49 or smaller. Received: batch_size=64, sample_images=100")
    assert harness.min_images(64) == 129 and harness.max_batch_size(100) == 49
    with pytest.raises(ValueError, match=r"What works: a `data_dir` with at least 9 images "
                                         r"\(the fewest for batch_size=4\)\. Received: "
                                         r"batch_size=4, data_dir='d'$"):
        bench.check_timed(batch_size=4, num_images=1, data_dir="d")
    monkeypatch.setenv("PIPELINE_DATA_DIR", "/data")
    with pytest.raises(ValueError, match=r"Received: batch_size=4, \$PIPELINE_DATA_DIR='/data'$"):
        bench.check_timed(batch_size=4, num_images=1)


def test_check_refuses_an_option_the_report_does_not_read(monkeypatch):
    monkeypatch.delenv("PIPELINE_DATA_DIR", raising=False)
    with pytest.raises(ValueError) as e:
        bench.check(profile=True, compare=["plain"], epochs=3)
    assert str(e.value) == (
        "`compare` applies to the peer comparison only; `epochs` applies to the peer comparison "
        "or `plan` only (`profile` profiles pipeline's stages alone; the peer comparison is "
        "bench without `plan` or `profile`). Received: compare=['plain'], epochs=3")
    with pytest.raises(ValueError, match="^`plan` and `profile` are separate reports"):
        bench.check(plan=True, profile=True)
    with pytest.raises(ValueError, match=r"^`plan` needs `target_images_per_sec`"):
        bench.check(plan=True)
    with pytest.raises(ValueError, match=r"^`compare`: unknown candidate\(s\) nope; known: "):
        bench.check(compare=["keras", "nope"])
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'epoch' "
                                        r"\(did you mean 'epochs'\?\)"):
        bench.check(epoch=3)
    # what is not given takes the defaults; a given option the report reads passes
    got = bench.check(plan=True, target_images_per_sec=1000.0, headroom=1.5)
    assert got == dict(bench.DEFAULTS, target_images_per_sec=1000.0, headroom=1.5)


def test_check_runs_the_capacity_plans_and_the_paths_checks_first(tmp_path, monkeypatch):
    monkeypatch.delenv("PIPELINE_DATA_DIR", raising=False)
    with pytest.raises(ValueError, match=r"^`headroom` must be >= 1"):
        bench.check(plan=True, target_images_per_sec=100.0, headroom=0.5)
    with pytest.raises(ValueError, match=r"^`data_dir` does not exist: "):
        bench.check(str(tmp_path / "nope"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match=r"^`profile_dir`: cannot create folder "):
        bench.check(profile=True, profile_dir=str(tmp_path / "f" / "trace"))
    with pytest.raises(ValueError, match=r"^batch_size=64 with 3 images is one batch"):
        bench.check(sample_images=3)  # the generated sample, before it is generated


def test_bench_says_where_the_built_in_sample_is_and_how_big(tmp_path):
    from pipeline.tools import sample
    folder = sample.ensure_sample(5, 2, root=str(tmp_path))
    files, size = sample.folder_bytes(folder)
    assert files == 5 and size == sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
    note = sample.sample_note(folder)
    assert note == (f"built-in sample: 5 generated JPEGs, {size / 1e6:.1f} MB, in {folder} "
                    "(written once, reused; set $PIPELINE_CACHE to put it elsewhere, delete "
                    "the folder to free the space)")


def test_image_sizes_line_gives_the_sizes_and_pipelines_dct_scale(tmp_path):
    """bench's line on the images (issue #37): their sizes (median, range, megapixels), what
    they are, and the scale pipeline decodes the JPEGs at for the output size (its planner,
    ``decode.Decoder.dct_ratio_index``: 1/2 from 2.4x, the largest that keeps the size)."""
    from PIL import Image
    from pipeline.tools import sample
    rng = np.random.RandomState(0)
    paths = []
    for k, (h, w) in enumerate([(300, 400), (600, 800), (600, 800), (1280, 1920)]):
        paths.append(str(tmp_path / f"{k}.jpg"))
        Image.fromarray(sample.make_image(rng, h, w)).save(paths[-1], quality=90)
    Image.fromarray(np.zeros((10, 20, 3), np.uint8)).save(tmp_path / "p.png")
    (tmp_path / "bad.jpg").write_bytes(b"not a JPEG")
    paths += [str(tmp_path / "p.png"), str(tmp_path / "bad.jpg")]
    got = bench.image_sizes(paths, (224, 224))
    assert got == {"files": 6, "read": 6, "jpeg": 4, "other": 1, "unreadable": 1,
                   "median": [800, 600], "min": [20, 10], "max": [1920, 1280],
                   "median_megapixels": 0.48, "dct_ratios": {"4": 1, "2": 2, "1": 1}}
    assert bench.image_sizes_line(got, (224, 224)) == (
        "images (WxH): median 800x600, 20-1920 x 10-1280, 0.5 MP; 4 JPEGs, 1 in other formats, "
        "1 unreadable; pipeline decodes the JPEGs for 224x224 at: 1/4 scale for 1, 1/2 scale "
        "for 2, full scale for 1")
    # at most SIZE_FILES headers, evenly spaced; a single size says "each"
    one = bench.image_sizes(paths[1:3] * 3, (224, 224))
    assert one["read"] == 6 and bench.image_sizes_line(one, (224, 224)) == (
        "images (WxH): 800x600 each, 0.5 MP; 6 JPEGs; pipeline decodes the JPEGs for 224x224 "
        "at: 1/2 scale for all 6")
    few = bench.image_sizes(paths[:4] * (bench.SIZE_FILES // 2), (224, 224))
    assert few["files"] == 2 * bench.SIZE_FILES and few["read"] == bench.SIZE_FILES
    assert bench.image_sizes_line(few, (224, 224)).split("; ")[1] == (
        "1,000 JPEGs (1,000 of the 2,000 files read, evenly spaced)")


def test_the_large_built_in_sample_is_12_mp_and_decoded_at_one_eighth(tmp_path):
    """``--sample=large``: 4000x3000 JPEGs (a 12 MP camera's), written once under a name of
    their own, the same bytes every time; pipeline decodes them for 224x224 at 1/8 scale."""
    from pipeline.tools import sample
    assert sample.sample_size("large") == (3000, 4000) and sample.sample_size("small") is None
    with pytest.raises(ValueError, match=r"^`sample` must be one of 'small', 'large'\. "
                                         r"Received: sample='huge'$"):
        sample.sample_size("huge")
    folder = sample.ensure_sample(2, 1, root=str(tmp_path / "a"), size=(3000, 4000))
    assert os.path.basename(folder) == "sample-v1-n2-c1-s0-4000x3000"
    assert folder == sample.sample_dir(2, 1, root=str(tmp_path / "a"), size=(3000, 4000))
    again = sample.ensure_sample(2, 1, root=str(tmp_path / "b"), size=(3000, 4000))
    paths = sorted(os.path.join(folder, "class_0", f) for f in os.listdir(
        os.path.join(folder, "class_0")))
    assert [open(p, "rb").read() for p in paths] == [
        open(p.replace(folder, again), "rb").read() for p in paths]
    assert all(1.5e6 < os.path.getsize(p) < 5e6 for p in paths)  # a camera JPEG's bytes
    got = bench.image_sizes(paths, (224, 224))
    assert got["median"] == got["min"] == got["max"] == [4000, 3000]
    assert got["dct_ratios"] == {"8": 2}
    assert bench.image_sizes_line(got, (224, 224)) == (
        "images (WxH): 4000x3000 each, 12.0 MP; 2 JPEGs; pipeline decodes the JPEGs for "
        "224x224 at: 1/8 scale for all 2")


def test_check_refuses_an_unknown_sample_and_sizes_the_large_one(monkeypatch):
    monkeypatch.delenv("PIPELINE_DATA_DIR", raising=False)
    with pytest.raises(ValueError, match=r"^`sample` must be one of 'small', 'large'"):
        bench.check(sample="huge")
    assert bench.SAMPLE_IMAGES == {"small": 512, "large": 160}
    assert bench._sample_images("large", None) == 160  # pylint: disable=protected-access
    assert bench._sample_images("small", 7) == 7  # pylint: disable=protected-access
    # 160 large images at batch 64: 3 batches, 2 timed; the default batch size works
    bench.check(sample="large")
    with pytest.raises(ValueError, match=r"^batch_size=80 with 160 images is 2 batches"):
        bench.check(sample="large", batch_size=80)
