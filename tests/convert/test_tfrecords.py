"""write_tfrecords / from_tfrecords / convert: encoded bytes in, same elements out."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

import pipeline
from io_helpers import stored_paths
from pipeline.convert import shards
from io_helpers import collect, make_class_folders, values, write_image

OPTS = dict(image_size=(4, 4), batch_size=4)


@pytest.fixture
def folder(tmp_path):
    make_class_folders(str(tmp_path / "src"))  # 9 images, values 1..9, 3 classes
    return str(tmp_path / "src")


@pytest.mark.stack  # the decoders' or Keras' behaviour, by stack
def test_roundtrip_same_elements_as_source(folder, tmp_path):
    out = str(tmp_path / "rec")
    meta = pipeline.write_tfrecords(folder, out, num_shards=3, shuffle=False, progress=False)
    assert meta["num_examples"] == 9 and [s["num_examples"] for s in meta["shards"]] == [3, 3, 3]
    side = json.load(open(os.path.join(out, "dataset.json")))
    assert side["class_names"] == ["cat", "dog", "eel"] and side["formats"] == {"png": 9}
    # encoded bytes are stored unchanged, not pixels
    rec = next(iter(tf.data.TFRecordDataset(os.path.join(out, side["shards"][0]["file"]))))
    ex = tf.train.Example.FromString(rec.numpy()).features.feature
    first = os.path.join(folder, "cat", "img00.png")
    assert ex["image"].bytes_list.value[0] == open(first, "rb").read()
    assert ex["path"].bytes_list.value[0].decode() == first

    src = pipeline.from_directory(folder, shuffle=False, **OPTS)
    rec = pipeline.from_tfrecords(out, shuffle=False, **OPTS)
    assert rec.class_names == src.class_names
    assert rec.element_spec == src.element_spec
    (xs, ys), (xr, yr) = collect(src), collect(rec)
    assert np.array_equal(np.stack(xs), np.stack(xr)) and list(ys) == list(yr)

    # shuffled: exactly once per epoch, labels paired, seeded order repeats
    shuf = pipeline.from_tfrecords(os.path.join(out, "*.tfrecord"), seed=3,
                                   shuffle_buffer_size=4, **OPTS)
    x, y = collect(shuf)
    got = values(x)
    assert sorted(got) == list(range(1, 10)) and got != list(range(1, 10))
    assert [int(l) for l in y] == [0 if v <= 3 else 1 if v <= 5 else 2 for v in got]
    again = values(collect(pipeline.from_tfrecords(out, seed=3, shuffle_buffer_size=4,
                                                   **OPTS))[0])
    assert again == got
    cat = pipeline.from_tfrecords(out, label_mode="categorical", shuffle=False, **OPTS)
    assert collect(cat)[1][0].tolist() == [1.0, 0.0, 0.0]


def test_rows_are_written_in_a_seeded_random_order(folder, tmp_path):
    """A folder is stored class by class; shards written in that order would keep
    classes together whatever the reader's bounded shuffle buffer does (found by the
    option-space test: 3 x 600 files gave 167 / 141 / 12 in the first 10 batches)."""
    a = pipeline.write_tfrecords(folder, str(tmp_path / "a"), num_shards=1, progress=False)
    b = pipeline.write_tfrecords(folder, str(tmp_path / "b"), num_shards=1, progress=False)
    read = lambda d: [tf.train.Example.FromString(r.numpy()).features.feature["path"]
                      .bytes_list.value[0].decode() for r in tf.data.TFRecordDataset(
                          os.path.join(d, a["shards"][0]["file"]))]
    order, again = read(str(tmp_path / "a")), read(str(tmp_path / "b"))
    assert order == again                      # the same seed gives the same order
    assert order != sorted(order)              # not the index (class) order
    c = pipeline.write_tfrecords(folder, str(tmp_path / "c"), num_shards=1, seed=1,
                                 progress=False)
    assert read(str(tmp_path / "c")) != order  # another seed, another order
    assert set(order) == set(pipeline.from_directory(folder).file_paths)


def test_manifest_source_multi_hot_and_weights(tmp_path):
    lines = []
    for k in range(5):
        write_image(str(tmp_path / f"i{k}.png"), 10 + k)
        lines.append(json.dumps({"path": f"i{k}.png", "tags": ["a", "b"][: 1 + k % 2],
                                 "w": 0.5 * k}))
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    m = str(tmp_path / "m.jsonl")
    meta = pipeline.write_tfrecords(m, str(tmp_path / "rec"), num_shards=2, shuffle=False, progress=False,
                                    label_columns="tags", weight_column="w")
    assert meta["label_kind"] == "vector" and meta["has_weights"]
    src = pipeline.from_manifest(m, label_columns="tags", weight_column="w", shuffle=False,
                                 **OPTS)
    rec = pipeline.from_tfrecords(str(tmp_path / "rec"), shuffle=False, **OPTS)
    for a, b in zip(collect(src), collect(rec)):
        assert np.array_equal(np.stack(a), np.stack(b))


def test_list_of_paths_and_pipeline_dataset_source(folder, tmp_path):
    ds = pipeline.from_directory(folder, **OPTS)
    meta = pipeline.write_tfrecords(ds, str(tmp_path / "a"), num_shards=2, shuffle=False, progress=False)
    assert meta["num_examples"] == 9 and meta["class_names"] == ["cat", "dog", "eel"]
    meta = pipeline.write_tfrecords(ds.file_paths[:4], str(tmp_path / "b"), num_shards=2,
                                    shuffle=False, progress=False)
    assert meta["label_kind"] is None
    x = collect(pipeline.from_tfrecords(str(tmp_path / "b"), shuffle=False, **OPTS))[0]
    assert values(x) == [1, 2, 3, 4]


def test_bad_files_keep_their_reasons(folder, tmp_path):
    open(os.path.join(folder, "dog", "zz_bad.png"), "wb").write(b"not an image at all")
    with open(os.path.join(folder, "dog", "zz_trunc.png"), "wb") as f:
        f.write(open(os.path.join(folder, "dog", "img00.png"), "rb").read()[:40])
    out = str(tmp_path / "rec")
    pipeline.write_tfrecords(folder, out, num_shards=2, shuffle=False, progress=False)
    ds = pipeline.from_tfrecords(out, on_error="skip", shuffle=False, **OPTS)
    assert sorted(values(collect(ds)[0])) == list(range(1, 10))
    reasons = {os.path.basename(r.path): r.reason for r in pipeline.errors(ds)}
    assert reasons["zz_bad.png"].startswith("not an image")
    assert "PNG" in reasons["zz_trunc.png"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="cannot load file .*zz_"):
        collect(pipeline.from_tfrecords(out, shuffle=False, **OPTS))


def test_errors(folder, tmp_path):
    with pytest.raises(ValueError, match="Received: num_shards=0"):
        pipeline.write_tfrecords(folder, str(tmp_path / "r"), num_shards=0)
    with pytest.raises(ValueError, match="No TFRecord files found"):
        pipeline.from_tfrecords(str(tmp_path / "nothing-*.tfrecord"))
    os.makedirs(tmp_path / "lone")
    with tf.io.TFRecordWriter(str(tmp_path / "lone" / "x.tfrecord")) as w:
        w.write(b"")
    with pytest.raises(FileNotFoundError, match="No dataset.json"):
        pipeline.from_tfrecords(str(tmp_path / "lone"))
    pipeline.write_tfrecords(folder, str(tmp_path / "r"), num_shards=2, shuffle=False, progress=False)
    with pytest.raises(ValueError, match="validation_split"):
        pipeline.from_tfrecords(str(tmp_path / "r"), validation_split=0.5, subset="training")
    with pytest.raises(ValueError, match="label_mode 'float'"):
        pipeline.from_tfrecords(str(tmp_path / "r"), label_mode="float")


def test_convert_cli(folder, tmp_path):
    """In process (``python -m pipeline`` itself is run by test_cli's
    test_python_dash_m_pipeline_help_exits_0)."""
    from conftest import run_cli
    out = str(tmp_path / "cli")
    code, stdout, err = run_cli("convert", folder, out, "--num_shards=2", "--noprogress",
                                "--json")
    assert code == 0, err[-2000:]
    printed = json.loads(stdout.strip().splitlines()[-1])
    assert printed["num_examples"] == 9 and len(printed["shards"]) == 2
    assert sorted(os.listdir(out)) == ["data-00000-of-00002.tfrecord",
                                       "data-00001-of-00002.tfrecord", "dataset.json"]


def test_write_refuses_a_folder_with_shards(folder, tmp_path):
    out = str(tmp_path / "twice")
    pipeline.write_tfrecords(folder, out, num_shards=2, shuffle=False, progress=False)
    with pytest.raises(ValueError, match="already holds shards"):
        pipeline.write_tfrecords(folder, out, num_shards=3, shuffle=False, progress=False)


def test_zero_byte_source_file_keeps_every_good_record(tmp_path):
    # Regression (fresh-eyes test): a 0-byte file made from_tfrecords lose most good
    # images silently (a position-out-of-range error upstream of the decode stage).
    root = str(tmp_path / "z")
    make_class_folders(root)
    open(os.path.join(root, "dog", "zero.jpg"), "wb").close()
    out = str(tmp_path / "zs")
    pipeline.write_tfrecords(root, out, num_shards=2, shuffle=False, progress=False)
    ds = pipeline.from_tfrecords(out, image_size=(4, 4), batch_size=4, shuffle=False,
                                 on_error="skip")
    assert sorted(values(collect(ds)[0])) == list(range(1, 10))
    assert [os.path.basename(r.path) for r in pipeline.errors(ds)] == ["zero.jpg"]
    with pytest.raises(tf.errors.OpError, match="zero.jpg"):
        list(pipeline.from_tfrecords(out, image_size=(4, 4), shuffle=False))


@pytest.mark.stack  # the decoders' or Keras' behaviour, by stack
def test_corrupt_shard_is_loud(folder, tmp_path):
    out = str(tmp_path / "cs")
    pipeline.write_tfrecords(folder, out, num_shards=2, shuffle=False, progress=False)
    shard = os.path.join(out, sorted(f for f in os.listdir(out) if f.endswith(".tfrecord"))[0])
    b = bytearray(open(shard, "rb").read())
    b[len(b) // 2:len(b) // 2 + 16] = b"\x00" * 16
    open(shard, "wb").write(bytes(b))
    name = os.path.basename(shard)
    # the damaged shard is named, with the record, the cause and the records lost
    with pytest.raises(tf.errors.OpError,
                       match=r"cannot read TFRecord shard .*" + re.escape(name)
                             + r" \(CRC mismatch: record \d+ .* \d+ of its 5 records lost"):
        list(pipeline.from_tfrecords(out, image_size=(4, 4), shuffle=False))
    ds = pipeline.from_tfrecords(out, image_size=(4, 4), shuffle=False, on_error="skip")
    n = sum(int(x.shape[0]) for x, _ in ds)
    recs = pipeline.errors(ds)
    assert len(recs) == 1 and recs[0].path == shard
    lost = int(re.search(r"(\d+) of its 5 records lost", recs[0].reason).group(1))
    assert 0 < lost <= 5 and n == 9 - lost  # the other shard whole, this one up to the damage
    other = sorted(f for f in os.listdir(out) if f.endswith(".tfrecord"))[1]
    assert other not in recs[0].reason


def test_missing_shard_is_refused(folder, tmp_path):
    """Found by a fresh-eyes user: a deleted shard silently halved the dataset."""
    out = str(tmp_path / "ms")
    pipeline.write_tfrecords(folder, out, num_shards=2, shuffle=False, progress=False)
    gone = sorted(f for f in os.listdir(out) if f.endswith(".tfrecord"))[1]
    os.remove(os.path.join(out, gone))
    with pytest.raises(ValueError, match=re.escape(f"missing from the folder: ['{gone}']")):
        pipeline.from_tfrecords(out, image_size=(4, 4))
    kept = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".tfrecord")]
    assert sum(1 for _ in pipeline.from_tfrecords(kept, image_size=(4, 4)).unbatch()) < 9


def test_missing_folder_is_named(tmp_path):
    """Found by a fresh-eyes user: a folder that does not exist was reported as a missing
    dataset.json in its parent folder."""
    missing = str(tmp_path / "nonexistent")
    with pytest.raises(FileNotFoundError, match="does not exist.*nonexistent"):
        pipeline.from_tfrecords(missing)


# --- issue 15: convert applies on_error -------------------------------------------------

def _with_bad_files(folder):
    """The 9 good PNGs plus a truncated JPEG, a text file named .jpg and a zero-byte .png."""
    good = sorted(os.path.join(r, f) for r, _, fs in os.walk(folder) for f in fs)
    write_image(os.path.join(folder, "cat", "photo.jpg"), 120, size=(40, 30), fmt="JPEG")
    data = open(os.path.join(folder, "cat", "photo.jpg"), "rb").read()
    open(os.path.join(folder, "cat", "photo.jpg"), "wb").write(data[:len(data) // 2])
    open(os.path.join(folder, "dog", "notes.jpg"), "w").write("not an image\n")
    open(os.path.join(folder, "eel", "zero.png"), "wb").close()
    bad = {os.path.join(folder, "cat", "photo.jpg"): "truncated JPEG (no end-of-image marker)",
           os.path.join(folder, "dog", "notes.jpg"):
               "not an image (first bytes 6e 6f 74 20 61 6e 20 69 |not an i|)",
           os.path.join(folder, "eel", "zero.png"): "empty file (0 bytes)"}
    return good, bad


def test_write_tfrecords_on_error(folder, tmp_path):
    good, bad = _with_bad_files(folder)
    out = str(tmp_path / "raise")
    with pytest.raises(shards.BadFilesError) as e:
        pipeline.write_tfrecords(folder, out, num_shards=2, progress=False, on_error="raise")
    assert [tuple(r) for r in e.value.records] == sorted(bad.items())
    assert e.value.num_files == 12 and not os.path.exists(out)      # nothing written
    assert str(e.value).startswith(f"pipeline: cannot write file {sorted(bad)[0]} "
                                   "(truncated JPEG (no end-of-image marker)); 3 bad files of 12")
    out = str(tmp_path / "skip")
    meta = pipeline.write_tfrecords(folder, out, num_shards=2, progress=False, on_error="skip")
    written = stored_paths(out)
    assert sorted(written) == good and len(written) == len(set(written)) == 9
    assert meta["num_examples"] == 9 and meta["class_names"] == ["cat", "dog", "eel"]
    assert meta["skipped"] == [{"path": p, "reason": r} for p, r in sorted(bad.items())]
    assert json.load(open(os.path.join(out, "dataset.json")))["skipped"] == meta["skipped"]
    x, y = collect(pipeline.from_tfrecords(out, shuffle=False, **OPTS))
    assert sorted(zip(values(x), map(int, y))) == [(1, 0), (2, 0), (3, 0), (4, 1), (5, 1),
                                                   (6, 2), (7, 2), (8, 2), (9, 2)]
    # no on_error: every file written, the bad ones with their reason, as before
    meta = pipeline.write_tfrecords(folder, str(tmp_path / "all"), progress=False)
    assert meta["num_examples"] == 12 and "skipped" not in meta
    with pytest.raises(ValueError, match=r"`on_error` must be one of \['raise', 'skip'\]. "
                                         r"Received: on_error='ignore'"):
        pipeline.write_tfrecords(folder, str(tmp_path / "x"), on_error="ignore")


def test_convert_cli_on_error(folder, tmp_path):
    """convert wrote the truncated JPEG, the text file and the empty PNG into the shards,
    exit 0, without a word."""
    from conftest import run_cli
    good, bad = _with_bad_files(folder)
    out = tmp_path / "out"
    code, stdout, err = run_cli("convert", folder, str(out), "--noprogress")
    assert code == 1, err
    assert err.splitlines() == (
        ["pipeline convert: 3 bad files of 12; nothing written (--on_error=raise; "
         "--on_error=skip leaves them out):"] + [f"  {p}: {r}" for p, r in sorted(bad.items())])
    assert not out.exists() and stdout == ""
    code, stdout, err = run_cli("convert", folder, str(out), "--noprogress", "--on_error=skip",
                                "--num_shards=3")
    assert code == 0, err
    lines = stdout.splitlines()
    assert lines[:4] == ["skipped 3 bad files of 12 (--on_error=skip):"] + [
        f"  {p}: {r}" for p, r in sorted(bad.items())]
    # the result: one line in words (second fresh-eyes test: it was one long JSON line)
    assert len(lines) == 5 and re.fullmatch(
        rf"wrote 9 records in 3 shards to {re.escape(str(out))} in \d+\.\d s \(3 classes\); "
        rf"3 bad files skipped \(listed above and in {re.escape(str(out / 'dataset.json'))}\)",
        lines[4]), lines[4]
    # --json: the same result as one JSON line instead
    code, stdout, err = run_cli("convert", folder, str(tmp_path / "j"), "--noprogress",
                                "--on_error=skip", "--num_shards=3", "--json")
    assert code == 0, err
    lines = stdout.splitlines()
    assert len(lines) == 5 and lines[:4] == ["skipped 3 bad files of 12 (--on_error=skip):"] + [
        f"  {p}: {r}" for p, r in sorted(bad.items())]
    printed = json.loads(lines[-1])
    assert printed["num_examples"] == 9 and len(printed["skipped"]) == 3
    assert [r["path"] for r in printed["skipped"]] == sorted(bad)
    written = stored_paths(str(out))
    assert sorted(written) == good and len(set(written)) == 9
    # --max_pixels applies to the check: 6x5 PNGs over 29 pixels are all bad
    code, _, err = run_cli("convert", folder, str(tmp_path / "tiny"), "--noprogress",
                           "--on_error=skip", "--max_pixels=29")
    assert code == 1 and err.startswith("pipeline convert: all 12 files are bad: nothing to "
                                        "write:\n")
    assert "header claims 6x5 pixels > max_pixels=29" in err
    code, _, err = run_cli("convert", folder, str(tmp_path / "y"), "--on_error=ignore")
    assert code == 2 and ("--on_error must be one of ['raise', 'skip']. "
                          "Received: --on_error=ignore") in err


class _Records:
    """Collects the messages logged through absl's logger while in a ``with`` block."""

    def __enter__(self):
        import logging as std_logging
        from absl import logging
        self.messages = []
        self.handler = std_logging.Handler()
        self.handler.emit = lambda record: self.messages.append(
            (record.levelname, record.getMessage()))
        logging.get_absl_logger().addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        from absl import logging
        logging.get_absl_logger().removeHandler(self.handler)


def test_more_shards_than_files_warns_and_writes_one_per_file(folder, tmp_path):
    """num_shards above the file count wrote one shard per file, silently (issue #15)."""
    with _Records() as logged:
        meta = pipeline.write_tfrecords(folder, str(tmp_path / "r"), num_shards=20,
                                        progress=False)
    assert len(meta["shards"]) == 9 and meta["num_examples"] == 9
    assert [s["num_examples"] for s in meta["shards"]] == [1] * 9
    assert logged.messages == [(
        "WARNING", "write_tfrecords: wrote fewer shards than asked: 9 instead of "
        "num_shards=20, since there are only 9 files to write and a shard holds at least "
        "one record (one file per shard).")]
    with _Records() as logged:  # as many shards as files, or fewer: nothing to say
        pipeline.write_tfrecords(folder, str(tmp_path / "s"), num_shards=9, progress=False)
    assert logged.messages == []


def test_convert_says_it_wrote_fewer_shards_than_asked(folder, tmp_path):
    from conftest import run_cli
    with _Records() as logged:
        code, out, err = run_cli("convert", folder, str(tmp_path / "r"), "--num_shards=20",
                                 "--noprogress")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[-2] == ("wrote 9 shards, not --num_shards=20: there are only 9 files to "
                         "write and a shard holds at least one record (one file per shard)")
    assert re.fullmatch(r"wrote 9 records in 9 shards to .+/r in \d+\.\d s \(3 classes\); no "
                        r"bad files", lines[-1]), lines[-1]
    assert logged.messages == []  # the line above says it, once
    code, out, err = run_cli("convert", folder, str(tmp_path / "s"), "--num_shards=9",
                             "--noprogress")
    assert code == 0 and "fewer" not in out and "not --num_shards" not in out


def test_write_tfrecords_seed_takes_the_factories_range(tmp_path):
    """write_tfrecords refused seeds past 2**32 - 1 (numpy's RandomState takes 32-bit int
    seeds), where the factories take [0, 2**63): the range is now the factories' one
    (``pipeline.config.check_seed``), a larger seed given to RandomState as its two 32-bit
    words; a seed below 2**32 gives the order it gave before."""
    paths = sorted(write_image(str(tmp_path / "src" / "a" / f"{k}.png"), k) for k in range(7))
    for seed, state in ((5, 5), (2 ** 32 - 1, 2 ** 32 - 1), (2 ** 32, [0, 1]),
                        (2 ** 63 - 1, [2 ** 32 - 1, 2 ** 31 - 1])):
        out = str(tmp_path / f"out{seed}")
        pipeline.write_tfrecords(paths, out, 1, seed=seed, progress=False)
        want = [paths[i] for i in np.random.RandomState(state).permutation(len(paths))]
        assert stored_paths(out) == want, seed
    assert stored_paths(str(tmp_path / "out5")) != stored_paths(str(tmp_path / f"out{2**32}"))
    for bad in (-1, 2 ** 63, 1.5, True):
        with pytest.raises(ValueError, match=re.escape(
                f"`seed` must be an int in [0, 2**63) or None. Received: seed={bad!r}")):
            pipeline.write_tfrecords(paths, str(tmp_path / "bad"), seed=bad)


def test_write_tfrecords_refuses_an_output_inside_its_source_and_writes_nothing(folder):
    """A library user could write the shards among the class folders (`out` then becomes a
    class of the folder); the command line refused it, the library did not."""
    before = sorted(os.walk(folder))
    for out in (folder, os.path.join(folder, "shards"), os.path.join(folder, "a", "x")):
        with pytest.raises(ValueError) as e:
            pipeline.write_tfrecords(folder, out, progress=False)
        assert str(e.value) == (
            "`output_dir` must not be `source` or a folder inside it: the shards and "
            "dataset.json would be written among `source`'s images. "
            f"Received: output_dir={out!r}, source={folder!r}")
    assert sorted(os.walk(folder)) == before  # nothing written, no folder made


def test_write_tfrecords_refuses_an_output_that_is_a_file(folder, tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("keep")
    with pytest.raises(ValueError) as e:
        pipeline.write_tfrecords(folder, str(out), progress=False)
    assert str(e.value) == (f"`output_dir` must be a folder (new or existing); {str(out)!r} "
                            f"is a file. Received: output_dir={str(out)!r}")
    assert out.read_text() == "keep"
