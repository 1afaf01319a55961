"""from_npy_shards: streamed rows, pairing, shuffling, refusals naming the file; memory benchmark."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import pipeline

# Keras and TensorFlow APIs that change between versions: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def shards(tmp_path):
    """3 shards of 5, 6, 7 rows; row value r encodes (shard, row); label = r."""
    xs, ys, r = [], [], 0
    for k, n in enumerate((5, 6, 7)):
        x = np.zeros((n, 2, 3), np.float32)
        y = np.zeros((n,), np.int64)
        for i in range(n):
            x[i] = r
            y[i] = r
            r += 1
        xs.append(str(tmp_path / f"inputs_{k}.npy"))
        ys.append(str(tmp_path / f"labels_{k}.npy"))
        np.save(xs[-1], x)
        np.save(ys[-1], y)
    return tmp_path, xs, ys


def rows(ds):
    xs, ys = [], []
    for x, y in ds:
        xs.extend(x.numpy()[:, 0, 0].tolist())
        ys.extend(y.numpy().tolist())
    return xs, ys


def test_exactly_once_paired_and_seeded(shards):
    d, xs, ys = shards
    ds = pipeline.from_npy_shards(str(d / "inputs_*.npy"), str(d / "labels_*.npy"),
                                  batch_size=4, seed=7, shuffle_buffer_size=4)
    assert ds.element_spec == (tf.TensorSpec([None, 2, 3], tf.float32),
                               tf.TensorSpec([None], tf.int64))
    assert ds.num_rows == 18
    e1 = rows(ds)
    assert sorted(e1[0]) == list(range(18)) and e1[0] == e1[1]   # exactly once, paired
    assert e1[0] != list(range(18))
    e2 = rows(ds)
    assert sorted(e2[0]) == list(range(18)) and e2[0] != e1[0]   # reshuffled per epoch
    again = pipeline.from_npy_shards(xs[::-1], ys, batch_size=4, seed=7, shuffle_buffer_size=4)
    assert rows(again)[0] == e1[0]                               # lists sorted; same seed


def test_unshuffled_unbatched_and_unlabelled(shards):
    d, xs, _ = shards
    ds = pipeline.from_npy_shards(xs, shuffle=False, batch_size=None, cycle_length=1)
    assert ds.element_spec == tf.TensorSpec([2, 3], tf.float32)
    assert [float(x[0, 0]) for x in ds] == list(range(18))


def test_dtypes_and_byte_order(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(12, dtype=">i4").reshape(4, 3))
    np.save(tmp_path / "b.npy", np.array([True, False, True, True]))
    ds = pipeline.from_npy_shards([str(tmp_path / "a.npy")], [str(tmp_path / "b.npy")],
                                  shuffle=False, batch_size=None)
    got = [(x.numpy().tolist(), bool(y)) for x, y in ds]
    assert got == [([0, 1, 2], True), ([3, 4, 5], False), ([6, 7, 8], True), ([9, 10, 11], True)]
    assert ds.element_spec[0].dtype == tf.int32 and ds.element_spec[1].dtype == tf.bool


def test_refusals_name_the_file(tmp_path, shards):
    d, xs, ys = shards
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"obj.npy: object dtype .* pickle"):
        pipeline.from_npy_shards([str(tmp_path / "obj.npy")])
    np.save(tmp_path / "fort.npy", np.asfortranarray(np.ones((4, 3), np.float32)))
    with pytest.raises(ValueError, match=r"fort.npy: Fortran-order"):
        pipeline.from_npy_shards([str(tmp_path / "fort.npy")])
    np.save(tmp_path / "other.npy", np.ones((4, 3, 2), np.float32))
    with pytest.raises(ValueError, match=r"other.npy: rows of shape \(3, 2\) float32 disagree"):
        pipeline.from_npy_shards([xs[0], str(tmp_path / "other.npy")])
    np.save(tmp_path / "z64.npy", np.ones((4, 2, 3), np.float64))
    with pytest.raises(ValueError, match=r"z64.npy: rows of shape \(2, 3\) float64 disagree"):
        pipeline.from_npy_shards([xs[0], str(tmp_path / "z64.npy")])
    with pytest.raises(ValueError, match=r"labels_1.npy has 6 rows but its input file "
                                         r".*inputs_0.npy has 5"):
        pipeline.from_npy_shards([xs[0]], [ys[1]])
    with pytest.raises(ValueError, match=r"3 input file\(s\) but 2 label file\(s\)"):
        pipeline.from_npy_shards(xs, ys[:2])
    (tmp_path / "junk.npy").write_bytes(b"hello world, not numpy")
    with pytest.raises(ValueError, match=r"junk.npy: not a .npy file"):
        pipeline.from_npy_shards([str(tmp_path / "junk.npy")])
    data = open(xs[2], "rb").read()
    (tmp_path / "trunc.npy").write_bytes(data[:-10])
    with pytest.raises(ValueError, match=r"trunc.npy: truncated"):
        pipeline.from_npy_shards([str(tmp_path / "trunc.npy")])
    with pytest.raises(ValueError, match=r"Received: seed=-1"):  # as the image factories
        pipeline.from_npy_shards(xs, seed=-1)
    with pytest.raises(ValueError, match=r"matches no files. Received: inputs="):
        pipeline.from_npy_shards(str(tmp_path / "none_*.npy"))
    with pytest.raises(ValueError, match=r"Received: batch_size=0"):
        pipeline.from_npy_shards(xs, batch_size=0)


@pytest.mark.slow  # benchmarks/npy_memory.py end to end
def test_memory_benchmark_small(tmp_path):
    out = tmp_path / "npy.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "npy_memory.py"),
                    "--shard_mb=4", "--num_shards=3", f"--json_out={out}"],
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": ROOT})
    res = {(r["mode"], r["shards"]): r for r in json.loads(out.read_text())["results"]}
    one, three, load = res[("stream", 1)], res[("stream", 3)], res[("load_all", 3)]
    assert three["rows"] == load["rows"] == 3 * one["rows"]
    # streaming: peak growth does not follow the data (3x the data, < +4 MiB growth) ...
    assert three["peak_growth_mib"] < one["peak_growth_mib"] + 4
    assert three["peak_growth_mib"] < 0.75 * three["data_mib"]
    # ... while loading whole shards grows at least with the data.
    assert load["peak_growth_mib"] > three["data_mib"] > 2 * three["peak_growth_mib"] - 4
