"""pipeline.benchmarking.bench: bench's checks, in the library's names, before any work."""

import os

import pytest

from pipeline.benchmarking import bench, harness


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
    from pipeline import sample
    folder = sample.ensure_sample(5, 2, root=str(tmp_path))
    files, size = sample.folder_bytes(folder)
    assert files == 5 and size == sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
    note = sample.sample_note(folder)
    assert note == (f"built-in sample: 5 generated JPEGs, {size / 1e6:.1f} MB, in {folder} "
                    "(written once, reused; set $PIPELINE_CACHE to put it elsewhere, delete "
                    "the folder to free the space)")
