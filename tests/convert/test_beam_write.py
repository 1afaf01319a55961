"""write_tfrecords(beam_runner=...): the same shards and sidecar as the single-process writer.

The option checks and the missing-extra error run everywhere; the Beam runs (marked
``beam``) need apache-beam (the ``[beam]`` extra, constraints/*-beam.txt) and skip, saying
so, where it is not installed.
"""

import json
import os
import shutil
import sys

import numpy as np
import pytest
from PIL import Image

import pipeline
from pipeline.convert import beam_write
from pipeline.convert import shards

TWO_WORKERS = "direct_running_mode=multi_processing,direct_num_workers=2"
IN_PROCESS = "direct_running_mode=in_memory"
BAD = os.path.join("dog", "broken.jpg")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """36 small photos in 3 classes (JPEG, a third PNG; some JPEGs with an EXIF
    rotation) and one bad file (JPEG bytes cut after the header)."""
    root = str(tmp_path_factory.mktemp("beam") / "src")
    rng = np.random.RandomState(7)
    for c, name in enumerate(("cat", "dog", "eel")):
        os.makedirs(os.path.join(root, name))
        for k in range(12):
            img = Image.fromarray(rng.randint(0, 256, (24 + k, 40 - k, 3), np.uint8))
            path = os.path.join(root, name, f"{k:02d}.{'png' if k % 3 == 0 else 'jpg'}")
            if k % 3 == 1:
                exif = Image.Exif()
                exif[0x0112] = 6  # orientation: rotate 90
                img.save(path, exif=exif.tobytes())
            else:
                img.save(path)
    whole = open(os.path.join(root, "dog", "01.jpg"), "rb").read()
    open(os.path.join(root, BAD), "wb").write(whole[:200])
    return root


def _files(out):
    return {f: open(os.path.join(out, f), "rb").read() for f in sorted(os.listdir(out))}


@pytest.fixture(scope="module")
def single(folder, tmp_path_factory):
    """The single-process writer's output (on_error="skip", 4 shards): its folder."""
    out = str(tmp_path_factory.mktemp("single") / "out")
    shards.write_tfrecords(folder, out, 4, on_error="skip", seed=5, progress=False)
    return out


@pytest.fixture(scope="module")
def beam():
    return pytest.importorskip("apache_beam", reason="apache-beam is not installed "
                               "(pip install '.[beam]'; constraints/*-beam.txt)")


# --- the options, checked before anything is read (no Beam needed) --------------------

@pytest.mark.parametrize("runner", ["Direct", "directrunner", "", "Dataflow Runner", 3])
def test_unknown_runner_is_a_value_error_naming_it_and_the_accepted_forms(runner, folder,
                                                                          tmp_path):
    with pytest.raises(ValueError) as e:
        pipeline.write_tfrecords(folder, str(tmp_path / "o"), beam_runner=runner)
    text = str(e.value)
    assert f"Received: beam_runner={runner!r}" in text
    assert "DirectRunner" in text and "DataflowRunner" in text and "SparkRunner" in text
    assert "dotted path" in text
    assert not os.path.exists(tmp_path / "o")


@pytest.mark.parametrize("options, item", [
    ("direct_num_workers", "direct_num_workers"),            # no "="
    ("a=1,,b=2", ""),                                        # an empty item
    ("2x=1", "2x=1"),                                        # the key is no identifier
    ("=1", "=1"),
    (["direct_num_workers=2"], "direct_num_workers=2"),      # a list item without "--"
    (["--=2"], "--=2"),
])
def test_malformed_beam_options_are_a_value_error_naming_the_item_and_forms(options, item,
                                                                            folder, tmp_path):
    with pytest.raises(ValueError) as e:
        pipeline.write_tfrecords(folder, str(tmp_path / "o"), beam_runner="DirectRunner",
                                 beam_options=options)
    text = str(e.value)
    assert f"item {item!r}" in text
    assert "'key=value,key=value'" in text and "'--flag=value'" in text
    assert f"Received: beam_options={options!r}" in text


def test_beam_options_checks_runner_kind_and_company(folder, tmp_path):
    out = str(tmp_path / "o")
    with pytest.raises(ValueError, match=r"give it as `beam_runner`.*beam_options='runner=Spa"):
        pipeline.write_tfrecords(folder, out, beam_runner="DirectRunner",
                                 beam_options="runner=SparkRunner")
    with pytest.raises(ValueError, match=r"only used with `beam_runner`.*Received: "
                                         r"beam_options='direct_num_workers=2'"):
        pipeline.write_tfrecords(folder, out, beam_options="direct_num_workers=2")
    with pytest.raises(ValueError, match=r"must be a comma-separated.*Received: beam_options=7"):
        pipeline.write_tfrecords(folder, out, beam_runner="DirectRunner", beam_options=7)
    with pytest.raises(ValueError, match=r"the runner decides the workers.*num_workers=3"):
        pipeline.write_tfrecords(folder, out, beam_runner="DirectRunner", num_workers=3)
    assert pipeline.checks.check_beam("DataflowRunner", "project=p, region=us-central1") == (
        "DataflowRunner", ["--project=p", "--region=us-central1"])
    assert pipeline.checks.check_beam("my.runners.FastRunner", ["--experiments=a,b", "--x"]) == (
        "my.runners.FastRunner", ["--experiments=a,b", "--x"])
    assert not os.path.exists(out)


def test_missing_apache_beam_says_which_extra_to_install(folder, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # as where it is not installed
    with pytest.raises(ImportError, match=r"needs apache-beam.*pip install -e '\.\[beam\]' "
                       r"in pipeline's checkout"):
        pipeline.write_tfrecords(folder, str(tmp_path / "o"), beam_runner="DirectRunner")
    assert not os.path.exists(tmp_path / "o")


# --- on Beam's DirectRunner ------------------------------------------------------------

@pytest.fixture(scope="module")
def two_workers(beam, folder, single, tmp_path_factory):
    """The DirectRunner's output, 2 worker processes, the single writer's arguments."""
    out = str(tmp_path_factory.mktemp("beam2") / "out")
    meta = shards.write_tfrecords(folder, out, 4, on_error="skip", seed=5, progress=False,
                                  beam_runner="DirectRunner", beam_options=TWO_WORKERS)
    return out, meta


@pytest.mark.beam
def test_two_workers_write_the_single_process_writers_shards_byte_for_byte(two_workers,
                                                                            single, folder):
    out, meta = two_workers
    want, got = _files(single), _files(out)
    assert sorted(got) == sorted(want) == ["data-0000%d-of-00004.tfrecord" % k
                                           for k in range(4)] + ["dataset.json"]
    for name in want:
        assert got[name] == want[name], name  # the sidecar's text too
    assert meta == json.loads(want["dataset.json"])
    assert meta["num_examples"] == 36 and [s["num_examples"] for s in meta["shards"]] == [9] * 4
    assert [s["path"] for s in meta["skipped"]] == [os.path.join(folder, BAD)]
    assert meta["skipped"][0]["reason"]  # the single writer's reason (the sidecars are equal)


@pytest.mark.beam
def test_shards_read_back_every_good_file_exactly_once(two_workers, folder):
    out, _ = two_workers
    from io_helpers import stored_paths  # the records' paths, shard by shard
    stored = stored_paths(out)
    good = sorted(os.path.join(folder, c, f) for c in ("cat", "dog", "eel")
                  for f in os.listdir(os.path.join(folder, c)) if f != "broken.jpg")
    assert sorted(stored) == good and len(set(stored)) == 36
    ds = pipeline.from_tfrecords(out, image_size=(8, 8), batch_size=5, shuffle=False)
    labels = np.concatenate([y.numpy() for _, y in ds])
    assert len(labels) == 36 and np.bincount(labels).tolist() == [12, 12, 12]
    assert pipeline.errors(ds) == []


@pytest.mark.beam
def test_raise_fails_the_job_naming_the_bad_file_and_writes_no_shard(beam, folder, tmp_path):
    out = str(tmp_path / "o")
    with pytest.raises(shards.BadFilesError) as e:
        shards.write_tfrecords(folder, out, 4, on_error="raise", progress=False,
                               beam_runner="DirectRunner", beam_options=IN_PROCESS)
    assert BAD in str(e.value) and "1 bad files of 37" in str(e.value)
    assert [r.path for r in e.value.records] == [os.path.join(folder, BAD)]
    assert not os.path.exists(out)  # nothing written, as the single-process writer


@pytest.mark.beam
def test_resized_and_unchecked_rows_match_the_single_process_writer(beam, folder, tmp_path):
    kw = dict(num_shards=3, max_resolution=16, jpeg_quality=80, seed=2, progress=False)
    a = shards.write_tfrecords(folder, str(tmp_path / "a"), **kw)
    b = shards.write_tfrecords(folder, str(tmp_path / "b"), beam_runner="DirectRunner",
                               beam_options=IN_PROCESS, **kw)
    assert a == b and a["reencoded"] > 20 and "skipped" not in a
    assert _files(str(tmp_path / "a")) == _files(str(tmp_path / "b"))


@pytest.mark.beam
def test_rerun_keeps_complete_shards_and_writes_the_missing_and_damaged(two_workers, single,
                                                                       folder, tmp_path):
    out = str(tmp_path / "o")
    shutil.copytree(two_workers[0], out)
    os.remove(os.path.join(out, "data-00001-of-00004.tfrecord"))
    damaged = os.path.join(out, "data-00002-of-00004.tfrecord")
    data = open(damaged, "rb").read()
    open(damaged, "wb").write(data[:len(data) // 2])
    untouched = {f: os.stat(os.path.join(out, f)).st_mtime_ns
                 for f in ("data-00000-of-00004.tfrecord", "data-00003-of-00004.tfrecord")}
    meta = shards.write_tfrecords(folder, out, 4, on_error="skip", seed=5, progress=False,
                                  beam_runner="DirectRunner", beam_options=IN_PROCESS)
    assert _files(out) == _files(single)
    assert meta == json.loads(_files(single)["dataset.json"])
    for f, mtime in untouched.items():
        assert os.stat(os.path.join(out, f)).st_mtime_ns == mtime, f"{f} was written again"


@pytest.mark.beam
def test_rerun_of_an_interrupted_job_keeps_its_finished_shards(beam, folder, single, tmp_path):
    out = str(tmp_path / "o")
    # Shard 3's entry cannot be stored (a folder stands at its path): the job fails after
    # some shards are complete, as a job that dies midway.
    blocker = os.path.join(out, beam_write.PARTS, "data-00003-of-00004.tfrecord.json")
    os.makedirs(blocker)
    kw = dict(num_shards=4, on_error="skip", seed=5, progress=False,
              beam_runner="DirectRunner", beam_options=IN_PROCESS)
    with pytest.raises(Exception):
        shards.write_tfrecords(folder, out, **kw)
    assert not os.path.exists(os.path.join(out, "dataset.json"))
    os.rmdir(blocker)
    parts = os.path.join(out, beam_write.PARTS)
    done = {f[:-len(".json")] for f in os.listdir(parts) if f.endswith(".tfrecord.json")}
    kept = {f: os.stat(os.path.join(out, f)).st_mtime_ns for f in done}
    # The in-process runner writes the shards in key order: those before shard 3 are done.
    assert done and "data-00003-of-00004.tfrecord" not in done, done
    meta = shards.write_tfrecords(folder, out, **kw)
    assert _files(out) == _files(single)
    assert meta == json.loads(_files(single)["dataset.json"])
    for f, mtime in kept.items():
        assert os.stat(os.path.join(out, f)).st_mtime_ns == mtime, f"{f} was written again"


@pytest.mark.beam
def test_rerun_with_other_options_or_into_other_shards_is_refused(two_workers, folder,
                                                                  tmp_path):
    out = str(tmp_path / "o")
    shutil.copytree(two_workers[0], out)
    with pytest.raises(ValueError, match=r"another conversion .*Received: output_dir="):
        shards.write_tfrecords(folder, out, 4, on_error="skip", seed=6, progress=False,
                               beam_runner="DirectRunner", beam_options=IN_PROCESS)
    plain = str(tmp_path / "plain")
    os.makedirs(plain)
    open(os.path.join(plain, "data-00000-of-00001.tfrecord"), "wb").write(b"")
    with pytest.raises(ValueError, match=r"shards that no resumable run describes"):
        shards.write_tfrecords(folder, plain, 1, progress=False,
                               beam_runner="DirectRunner", beam_options=IN_PROCESS)


@pytest.mark.beam
def test_an_option_beam_does_not_know_is_a_value_error_with_the_closest(beam, folder,
                                                                        tmp_path):
    with pytest.raises(ValueError, match=r"no option 'direct_num_worker' \(did you mean "
                                         r"'direct_num_workers'\?\)"):
        shards.write_tfrecords(folder, str(tmp_path / "o"), beam_runner="DirectRunner",
                               beam_options="direct_num_worker=2")


@pytest.mark.beam
def test_direct_runner_runs_on_the_fn_api_runner_without_trying_prism(beam):
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    options = beam_write.pipeline_options("DirectRunner", [])
    runner = beam_write.make_runner("DirectRunner", options)
    assert type(runner) is fn_runner.FnApiRunner  # not the SwitchingDirectRunner (Prism first)
    assert beam_write.make_runner("DataflowRunner", options) == "DataflowRunner"


@pytest.mark.beam
@pytest.mark.parametrize("options", ["direct_running_mode=multi_threading,direct_num_workers=2",
                                     "direct_num_workers=2",
                                     "direct_running_mode=multi_threading,direct_num_workers=0"])
def test_worker_threads_are_refused_naming_both_options(beam, options, folder, tmp_path):
    out = str(tmp_path / "o")
    with pytest.raises(ValueError) as e:
        shards.write_tfrecords(folder, out, beam_runner="DirectRunner", beam_options=options)
    text = str(e.value)
    mode = "multi_threading" if "multi_threading" in options else "in_memory"
    workers = options.rpartition("=")[2]
    assert f"direct_running_mode={mode} with direct_num_workers={workers}" in text
    assert "lost records" in text and "multi_processing" in text
    assert f"Received: beam_options with direct_running_mode={mode}" in text
    assert not os.path.exists(out)


@pytest.mark.beam
def test_encode_threads_are_the_cores_in_process_and_one_elsewhere(beam):
    from pipeline import checks
    opts = beam_write.pipeline_options
    assert beam_write.encode_threads("DirectRunner", opts("DirectRunner", [])) == (
        checks.cpu_count())
    assert beam_write.encode_threads("DirectRunner", opts("DirectRunner", [
        "--direct_running_mode=multi_processing", "--direct_num_workers=2"])) == 1
    assert beam_write.encode_threads("DataflowRunner", opts("DataflowRunner", [])) == 1


def test_shared_reencoder_is_built_once_per_process_and_options():
    a = beam_write.shared_reencoder(16, 80, None)
    assert beam_write.shared_reencoder(16, 80, None) is a
    assert beam_write.shared_reencoder(16, 81, None) is not a


@pytest.mark.beam
def test_the_beam_options_of_converts_help_and_the_docs_are_options_beam_knows(beam):
    import re
    from pipeline import checks, cli
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = cli.command_help("convert") + open(os.path.join(here, "..", "docs",
                                                           "scale-out.md")).read()
    found = [(r, o) for r, o in re.findall(r"--beam_runner=(\w+) \\?\s*--beam_options=(\S+)",
                                           text) if "..." not in o]  # "flink_master=h:8081,..."
    assert {r for r, _ in found} >= {"DirectRunner", "DataflowRunner", "SparkRunner"}, found
    for runner, options in found:
        beam_write.pipeline_options(*checks.check_beam(runner, options))  # no ValueError


@pytest.mark.beam
@pytest.mark.slow  # a benchmark script end to end
def test_beam_convert_benchmark_runs_both_writers_and_finds_the_same_shards(beam, folder,
                                                                           tmp_path):
    import subprocess
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = tmp_path / "b.json"
    r = subprocess.run([sys.executable, os.path.join(repo, "benchmarks", "beam_convert.py"),
                        f"--data_dir={folder}", "--num_shards=2", "--max_resolution=16",
                        "--on_error=skip", "--start_images=4", "--paper_workers=10",
                        f"--json_out={out}"], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=repo))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["same_shards"] is True
    assert [x["num_examples"] for x in res["runs"]["single"] + res["runs"]["beam"]] == [36, 36]
    assert res["start"]["num_examples"] == 4 and res["paper"][0]["workers"] == 10
    assert "beam / single images/s" in r.stdout and "paper: 10,000,000 images" in r.stdout


@pytest.mark.beam
def test_segmentation_pairs_write_the_single_process_writers_shards(beam, tmp_path):
    rng = np.random.RandomState(3)
    images, masks = tmp_path / "images", tmp_path / "masks"
    for c in ("a", "b"):
        os.makedirs(images / c)
        os.makedirs(masks / c)
        for k in range(4):
            Image.fromarray(rng.randint(0, 256, (12, 10, 3), np.uint8)).save(
                images / c / f"im{k}.jpg")
            Image.fromarray(rng.randint(0, 3, (12, 10), np.uint8), "L").save(
                masks / c / f"im{k}.{'bmp' if k == 3 else 'png'}")
    src = pipeline.from_directory(str(images), masks_dir=str(masks), shuffle=False,
                                  image_size=(8, 8), batch_size=None)
    a = shards.write_tfrecords(src, str(tmp_path / "one"), 3, progress=False)
    b = shards.write_tfrecords(src, str(tmp_path / "beam"), 3, progress=False,
                               beam_runner="DirectRunner")  # the default: in process
    assert a == b and a["has_masks"] and a["mask_formats"] == {"png": 6, "bmp": 2}
    assert _files(str(tmp_path / "one")) == _files(str(tmp_path / "beam"))


def test_importing_beam_write_leaves_apache_beam_unimported():
    import subprocess
    code = ("import sys; from pipeline.convert import beam_write; import pipeline; "
            "pipeline.write_tfrecords; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] == 'apache_beam'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_dofn_classes_need_apache_beam_and_say_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # as where it is not installed
    monkeypatch.delitem(vars(beam_write), "WriteShard", raising=False)  # not built yet
    with pytest.raises(ImportError, match=r"needs apache-beam.*pip install -e '\.\[beam\]' "
                       r"in pipeline's checkout"):
        beam_write.WriteShard
    with pytest.raises(AttributeError, match="has no attribute 'Shard'"):
        beam_write.Shard


@pytest.mark.beam
def test_dofn_classes_are_built_once_and_unpickled_by_name_in_a_fresh_process(beam):
    import subprocess
    from apache_beam.internal import pickler
    cls = beam_write.WriteShard
    assert issubclass(cls, beam.DoFn) and cls is beam_write.dofn_class("WriteShard")
    assert (cls.__module__, cls.__qualname__) == ("pipeline.convert.beam_write", "WriteShard")
    data = pickler.dumps(cls("idx.pickle", "out", True, 16, 80, None, False, threads=3))
    assert len(data) < 1000  # by reference (module and name), not the class's code
    code = ("import sys; from apache_beam.internal import pickler; "
            "from pipeline.convert import beam_write; "
            "fn = pickler.loads(sys.stdin.buffer.read()); "
            "print(type(fn) is beam_write.WriteShard, fn.index_path, fn.threads, fn.max_resolution)")
    r = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.decode().split() == ["True", "idx.pickle", "3", "16"]


# --- the remaining bullets: sources and options, remote output, resume, the CLI --

@pytest.mark.beam
def test_a_manifest_unshuffled_with_the_shard_count_from_sizes_matches_the_single_writer(
        beam, folder, tmp_path):
    """A manifest source (labels of its own, the bad file listed), shuffle=False and
    num_shards=None (the count from the good files' sizes, which Check stats)."""
    names = sorted(os.path.join(c, f) for c in ("cat", "dog", "eel")
                   for f in os.listdir(os.path.join(folder, c)))
    manifest = tmp_path / "m.csv"
    manifest.write_text("path,label\n" + "".join(
        f"{n},{'odd' if k % 2 else 'even'}\n" for k, n in enumerate(names[::-1])))
    kw = dict(num_shards=None, shuffle=False, on_error="skip", max_resolution=20,
              progress=False, root=folder)
    a = shards.write_tfrecords(str(manifest), str(tmp_path / "a"), **kw)
    b = shards.write_tfrecords(str(manifest), str(tmp_path / "b"), beam_runner="DirectRunner",
                               **kw)
    assert a == b and a["class_names"] == ["even", "odd"] and a["num_examples"] == 36
    assert [s["path"] for s in a["skipped"]] == [os.path.join(folder, BAD)]
    assert _files(str(tmp_path / "a")) == _files(str(tmp_path / "b"))
    from io_helpers import stored_paths
    assert stored_paths(str(tmp_path / "b")) == [os.path.join(folder, n) for n in names[::-1]
                                                 if n != BAD]  # unshuffled: the manifest's order


@pytest.mark.beam
def test_remote_output_goes_through_tensorflows_file_systems_and_resumes_there(
        beam, folder, single):
    """``ram://`` (TensorFlow's in-memory file system) stands for gs:// / s3://: every path
    of the job goes through tf.io.gfile, as the readers'; the in-process run shares it."""
    import uuid
    import tensorflow as tf
    out = f"ram://beam-{uuid.uuid4().hex}/out"
    kw = dict(num_shards=4, on_error="skip", seed=5, progress=False, beam_runner="DirectRunner")

    def files():
        return {f: tf.io.gfile.GFile(f"{out}/{f}", "rb").read()
                for f in sorted(tf.io.gfile.listdir(out))}

    meta = shards.write_tfrecords(folder, out, **kw)
    assert files() == _files(single) and meta == json.loads(_files(single)["dataset.json"])
    tf.io.gfile.remove(f"{out}/data-00001-of-00004.tfrecord")
    assert shards.write_tfrecords(folder, out, **kw) == meta
    assert files() == _files(single)  # the missing shard written again, nothing else left
    ds = pipeline.from_tfrecords(out, image_size=(8, 8), batch_size=9, shuffle=False)
    assert sum(int(y.shape[0]) for _, y in ds) == 36


@pytest.mark.beam
def test_a_partial_shard_under_its_temporary_name_is_never_taken_for_complete(
        two_workers, single, folder, tmp_path):
    """A job that died while writing shard 1: its records half written under the temporary
    name, and (worse) an entry for shard 1 among the finished ones. The rerun keeps 0, 2,
    3, writes 1 and removes the partial file."""
    out = str(tmp_path / "o")
    shutil.copytree(two_workers[0], out)
    meta = json.loads(_files(out)["dataset.json"])
    os.remove(os.path.join(out, "dataset.json"))
    parts = os.path.join(out, beam_write.PARTS)
    os.makedirs(parts)
    open(os.path.join(parts, "plan.json"), "w").write(json.dumps(
        {"plan_sha256": meta["plan_sha256"], "seed": 5}))
    for entry in meta["shards"]:
        open(os.path.join(parts, entry["file"] + ".json"), "w").write(json.dumps(entry))
    shard1 = os.path.join(out, "data-00001-of-00004.tfrecord")
    data = open(shard1, "rb").read()
    os.remove(shard1)
    partial = shard1 + ".tmp-123-abc"
    open(partial, "wb").write(data[:len(data) // 2])
    kept = {f: os.stat(os.path.join(out, f)).st_mtime_ns for f in
            ("data-00000-of-00004.tfrecord", "data-00002-of-00004.tfrecord",
             "data-00003-of-00004.tfrecord")}
    assert shards.write_tfrecords(folder, out, 4, on_error="skip", seed=5, progress=False,
                                  beam_runner="DirectRunner") == meta
    assert _files(out) == _files(single)  # shard 1 whole, the partial file and parts gone
    for f, mtime in kept.items():
        assert os.stat(os.path.join(out, f)).st_mtime_ns == mtime, f"{f} was written again"


@pytest.mark.beam
def test_an_unseeded_interrupted_job_resumes_with_the_seed_it_drew(beam, folder, tmp_path):
    out = str(tmp_path / "o")
    blocker = os.path.join(out, beam_write.PARTS, "data-00003-of-00004.tfrecord.json")
    os.makedirs(blocker)
    kw = dict(num_shards=4, on_error="skip", seed=None, progress=False,
              beam_runner="DirectRunner")
    with pytest.raises(Exception):
        shards.write_tfrecords(folder, out, **kw)
    os.rmdir(blocker)
    parts = os.path.join(out, beam_write.PARTS)
    drawn = json.load(open(os.path.join(parts, "plan.json")))["seed"]
    assert isinstance(drawn, int) and 0 <= drawn < 2 ** 63
    done = {f[:-len(".json")] for f in os.listdir(parts) if f.endswith(".tfrecord.json")}
    kept = {f: os.stat(os.path.join(out, f)).st_mtime_ns for f in done}
    assert done
    meta = shards.write_tfrecords(folder, out, **kw)
    for f, mtime in kept.items():
        assert os.stat(os.path.join(out, f)).st_mtime_ns == mtime, f"{f} was written again"
    # the shards are those of the order the first attempt drew
    seeded = str(tmp_path / "seeded")
    want = shards.write_tfrecords(folder, seeded, 4, on_error="skip", seed=drawn,
                                  progress=False)
    got, ref = _files(out), _files(seeded)
    assert [s["records_sha256"] for s in meta["shards"]] == [
        s["records_sha256"] for s in want["shards"]]
    assert {f: v for f, v in got.items() if f != "dataset.json"} == {
        f: v for f, v in ref.items() if f != "dataset.json"}


def _convert(*args, timeout=600):
    import subprocess
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run([sys.executable, "-m", "pipeline", "convert", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=repo,
                          env=dict(os.environ, PYTHONPATH=repo))


@pytest.mark.beam
def test_the_convert_command_on_beam_writes_the_shards_and_shows_the_jobs_counters(
        beam, folder, single, tmp_path):
    out = str(tmp_path / "o")
    r = _convert(folder, out, "--num_shards=4", "--on_error=skip", "--seed=5",
                 "--beam_runner=DirectRunner", "--beam_options=direct_running_mode=in_memory")
    assert r.returncode == 0, r.stderr[-3000:]
    assert _files(out) == _files(single)
    assert ("write_tfrecords on Beam: bad_files 1, files_checked 37, records_encoded 36, "
            "shards_written 4") in r.stderr
    assert "wrote 36 records in 4 shards" in r.stdout and "1 bad file" in r.stdout
    # a rerun keeps every shard (the counters say so); --noprogress: no counters
    r = _convert(folder, out, "--num_shards=4", "--on_error=skip", "--seed=5",
                 "--beam_runner=DirectRunner")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "shards_kept 4" in r.stderr and "records_encoded" not in r.stderr
    r = _convert(folder, str(tmp_path / "q"), "--num_shards=4", "--on_error=skip",
                 "--beam_runner=DirectRunner", "--noprogress")
    assert r.returncode == 0 and "write_tfrecords on Beam:" not in r.stderr


@pytest.mark.beam
def test_the_convert_command_on_beam_exits_1_naming_the_bad_file(beam, folder, tmp_path):
    r = _convert(folder, str(tmp_path / "o"), "--num_shards=4", "--beam_runner=DirectRunner")
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-3000:])
    assert os.path.join(folder, BAD) in r.stderr and "1 bad files of 37" in r.stderr
    assert not os.path.exists(tmp_path / "o")


def test_max_pixels_none_and_the_default_limit_are_one_plan(folder, tmp_path):
    """The command line gives max_pixels=178,956,970 explicitly, Python None: one
    conversion, so that a Beam job started by either resumes from the other."""
    from pipeline import checks
    kw = dict(num_shards=1, on_error="skip", progress=False)
    a = shards.write_tfrecords(folder, str(tmp_path / "a"), **kw)
    b = shards.write_tfrecords(folder, str(tmp_path / "b"), max_pixels=checks.DEFAULT_MAX_PIXELS,
                               **kw)
    c = shards.write_tfrecords(folder, str(tmp_path / "c"), max_pixels=10 ** 6, **kw)
    assert a["plan_sha256"] == b["plan_sha256"] != c["plan_sha256"]
