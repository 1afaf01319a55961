"""The guard's two rare paths, the Python one (one py_function, the default) and the graph
one (tf.data service workers, which run no Python), follow one rule (``guard.Chunk``): its
decisions in numpy and in TensorFlow are the same as the loops they replaced, and both
paths, run here in process (the graph path as the service builds it), skip, raise and end
an empty epoch as they did, with the same words."""

import io
import os
import struct

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from pipeline.decode import guard
from pipeline.decode.guard import RAISE_HINT
from conftest import index_values, solid

TRUNCATED = "truncated PNG (no IEND end chunk)"
HELLO = "not an image (first bytes 68 65 6c 6c 6f 20 74 68 |hello th|)"


# --- the rule, written once: numpy and TensorFlow against the loops it replaced ---------

def _reference(last, delivered, pos, window, reason, expected):
    """The decisions as the Python path made them with loops, before the rule was shared."""
    K, S = guard.CHUNK, guard.SENTINEL.encode()
    prev = [last] + list(pos[:-1])
    sentinel = [r == S for r in reason]
    bad = [bool(r) and not s for r, s in zip(reason, sentinel)]
    keys, where = [], []
    for i in range(len(pos)):
        for q in range(prev[i] + 1, pos[i]):
            j = q - (pos[i] // K - 1) * K
            if j >= 0:
                keys.append(window[i][j])
                where.append(q)
    missing = [p - q - 1 for p, q in zip(pos, prev)]
    failures = sorted([(q, "lost", k) for q, k in zip(where, keys)]
                      + [(p, "refused", i) for i, (p, b) in enumerate(zip(pos, bad)) if b])
    delivered += sum(not b and not s for b, s in zip(bad, sentinel))
    epoch = max(p if s else -1 for p, s in zip(pos, sentinel))
    return {"keys": list(keys), "where": where,
            "count": sum(missing) if any(m > 0 for m in missing) else 0,
            "first": failures[0][1:] if failures else None,
            "failed": any(m > 0 for m in missing) or any(bad),
            "short": any(s and p != expected for p, s in zip(pos, sentinel)),
            "lost_upstream": max(expected - p if s else 0 for p, s in zip(pos, sentinel)),
            "delivered": delivered, "epoch": epoch, "empty": epoch > 0 and delivered == 0}


def _decisions(xp, columns, expected):
    c = guard.Chunk(xp, *columns)
    keys, lost_pos, count = c.lost_files()
    i = int(c.first_failure(lost_pos))
    keys, where, n = np.asarray(keys).tolist(), np.asarray(lost_pos).tolist(), len(keys)
    return {"keys": keys, "where": where, "count": int(count),
            "first": ("lost", keys[i]) if i < n else ("refused", i - n),
            "failed": bool(c.failed), "short": bool(c.short(expected)),
            "lost_upstream": int(c.lost_upstream(expected)), "delivered": int(c.delivered),
            "epoch": int(c.epoch_count()), "empty": bool(c.empty())}


def _epoch_chunks(rng, strings, all_bad):
    """The chunks the check sees in one random epoch: runs of lost files (some longer than
    the window), refused ones, elements lost upstream, batches of 1 to 80."""
    K, n = guard.CHUNK, int(rng.integers(1, 400))
    given = max(1, n - int(rng.integers(0, 3)) * int(rng.integers(0, 5)))  # the plan gave these
    fate = []
    while len(fate) < given:
        kind = rng.choice(["good", "lost", "refused"], p=[0, 0.6, 0.4] if all_bad else
                          [0.6, 0.25, 0.15])
        fate += [kind] * int(rng.integers(1, 3 * K if kind == "lost" else 4))
    fate = fate[:given] + ["sentinel"]

    def key(q):
        k = 1000 + q if 0 <= q < given else -1
        return (b"" if k < 0 else b"k%d" % k) if strings else k

    survivors = [q for q, f in enumerate(fate) if f != "lost"]
    b = int(rng.integers(1, 81))
    last, delivered = -1, 0
    for at in range(0, len(survivors), b):
        pos = survivors[at:at + b]
        window = [[key((q // K - 1) * K + j) for j in range(2 * K)] for q in pos]
        reason = [{"good": b"", "refused": b"why %d" % q, "sentinel": guard.SENTINEL.encode()}[
            fate[q]] for q in pos]
        yield (last, delivered, [key(q) for q in pos], pos, window, reason), n
        last, delivered = pos[-1], delivered + reason.count(b"")


@pytest.mark.parametrize("strings", [False, True], ids=["file rows", "record paths"])
def test_the_rule_decides_alike_in_numpy_and_tensorflow(strings):
    rng = np.random.default_rng(36)
    seen = {"unnamed": 0, "lost first": 0, "refused first": 0, "short": 0, "empty": 0}
    for e in range(40):
        for (last, delivered, key, pos, window, reason), expected in _epoch_chunks(
                rng, strings, all_bad=e % 5 == 0):
            want = _reference(last, delivered, pos, window, reason, expected)
            kt = tf.string if strings else tf.int64
            as_np = (np.int64(last), np.int64(delivered),
                     np.array(key, object if strings else np.int64), np.array(pos, np.int64),
                     np.array(window, object if strings else np.int64),
                     np.array(reason, object))
            as_tf = (tf.constant(last, tf.int64), tf.constant(delivered, tf.int64),
                     tf.constant(key, kt), tf.constant(pos, tf.int64), tf.constant(window, kt),
                     tf.constant(reason, tf.string))
            for xp, columns in ((guard.NP_OPS, as_np), (guard.TF_OPS, as_tf)):
                got = _decisions(xp, columns, expected)
                if want["first"] is None:  # nothing failed that the window names: no choice
                    got["first"] = None
                assert got == want, (xp is guard.NP_OPS, last, pos)
            seen["unnamed"] += want["count"] > len(want["keys"])
            seen["lost first"] += (want["first"] or ("",))[0] == "lost"
            seen["refused first"] += (want["first"] or ("",))[0] == "refused"
            seen["short"] += want["short"]
            seen["empty"] += want["empty"]
    assert min(seen.values()) > 0, seen  # every decision was met


# --- both paths, end to end ---------------------------------------------------------------

@pytest.fixture(params=["python", "graph"])
def rare_path(request, monkeypatch):
    """The guard's rare path the datasets of the test are built with: the graph one is what
    a tf.data service worker runs (it is chosen by ``service=``; here it runs in process)."""
    if request.param == "graph":
        monkeypatch.setattr(guard, "PythonRarePath", guard.GraphRarePath)
    return request.param


def _files(root, kinds):
    """One file per letter: g a PNG of value 10*i, l a cut PNG (its decoder raises: lost),
    b a text file (refused from its bytes)."""
    os.makedirs(root, exist_ok=True)
    whole = io.BytesIO()
    Image.new("RGB", (64, 64), (9, 9, 9)).save(whole, "PNG")
    paths = []
    for i, kind in enumerate(kinds):
        path = os.path.join(root, f"f{i:02d}.png")
        if kind == "g":
            solid(path, 10 * i)
        else:
            open(path, "wb").write(whole.getvalue()[:-30] if kind == "l" else b"hello there")
        paths.append(path)
    return paths


def _skipped(err):
    return [l for l in err.splitlines() if l.startswith("pipeline: skipped")]


def test_skip_records_or_prints_each_bad_file_and_counts_those_the_window_cannot_name(
        tmp_path, rare_path, monkeypatch, capfd):
    monkeypatch.setattr(guard, "CHUNK", 4)  # a window of 8 positions: 4 files fall out of it
    p = _files(str(tmp_path), "gblg" + "l" * 9 + "gbg")
    ds = pipeline.from_paths(p, on_error="skip", image_size=(4, 4), batch_size=None,
                             shuffle=False)
    assert index_values(np.stack(list(ds.as_numpy_iterator()))) == [0, 30, 130, 150]
    unnamed = ("<4 unnamed file(s)>",
               "decoder failed; more files in a row failed than the 4-file window can name")
    lost = [(p[i], TRUNCATED) for i in (2, 8, 9, 10, 11, 12)]
    lines = _skipped(capfd.readouterr().err)
    if rare_path == "python":
        # per chunk: its lost files, those unnamed, then its refused ones
        assert pipeline.errors(ds) == lost + [unnamed, (p[1], HELLO), (p[14], HELLO)]
        assert lines == []  # logged through absl's logger, not printed
    else:
        # per chunk, in epoch order, those unnamed last; pipeline.errors stays empty
        assert pipeline.errors(ds) == []
        assert lines == [f"pipeline: skipped {a}: {b}" for a, b in
                         [(p[1], HELLO)] + lost + [unnamed, (p[14], HELLO)]]


@pytest.mark.parametrize("kinds, first, why", [("gblg", 1, HELLO), ("glbg", 1, TRUNCATED),
                                               ("gglb", 2, TRUNCATED)])
def test_raise_names_the_first_bad_file_in_epoch_order(tmp_path, rare_path, kinds, first, why):
    p = _files(str(tmp_path), kinds)
    ds = pipeline.from_paths(p, image_size=(4, 4), batch_size=None, shuffle=False)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        list(ds)
    assert f"assertion failed: [pipeline: cannot load file {p[first]} ({why}){RAISE_HINT}]" \
        in e.value.message


def test_an_empty_epoch_fails_or_with_several_pipelines_warns(tmp_path, rare_path, capfd):
    p = _files(str(tmp_path), "lbgg")
    reasons = ("Reasons: 1 x truncated PNG (no IEND end chunk), 1 x " if rare_path == "python"
               else "The reasons are on the tf.data service workers")
    ds = pipeline.from_paths(p[:2], on_error="skip", image_size=(4, 4), batch_size=None)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        list(ds)
    assert ("assertion failed: [pipeline: every file of this epoch was bad (2 of 2), so it "
            f"delivered nothing: on_error=skip skipped them all. {reasons}") in e.value.message
    capfd.readouterr()
    got = []
    for i in range(2):  # pipeline 0 of 2 gets rows 0 and 2, pipeline 1 rows 1 and 3
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i)
        ds = pipeline.from_paths([p[0], p[2], p[1], p[3]], on_error="skip", image_size=(4, 4),
                                 batch_size=None, shuffle=False, input_context=ctx)
        got.append(list(ds.as_numpy_iterator()))
    assert got[0] == [] and index_values(np.stack(got[1])) == [20, 30]
    warned = [l for l in capfd.readouterr().err.splitlines() if "every file" in l]
    assert len(warned) == 1 and warned[0].startswith(
        "pipeline: every file of this epoch was bad (2 of 2), so it delivered nothing: "
        f"on_error=skip skipped them all. {reasons}")
    assert warned[0].endswith(" (input pipeline 0 of 2: a warning, the others may deliver)")


def test_elements_lost_upstream_on_the_graph_path(tmp_path, monkeypatch, capfd):
    """A TFRecord shard cut inside its record 6: the graph path (no Python to name the
    damaged shards one by one) prints, or raises, the count and what the reader saw."""
    monkeypatch.setattr(guard, "PythonRarePath", guard.GraphRarePath)
    src = str(tmp_path / "src")
    for k in range(20):
        solid(os.path.join(src, f"c{k % 2}", f"img{k:02d}.png"), k + 1)
    out = str(tmp_path / "rec")
    pipeline.write_tfrecords(src, out, num_shards=2, shuffle=False, progress=False)
    shard = os.path.join(out, sorted(f for f in os.listdir(out) if f.endswith(".tfrecord"))[1])
    data, at = open(shard, "rb").read(), 0
    for _ in range(6):
        at += 16 + struct.unpack("<Q", data[at:at + 8])[0]
    open(shard, "wb").write(data[:at + 19])
    said = ("pipeline: 4 element(s) of 20 were lost while reading the source before decoding; "
            f"damaged: {shard} (6 of 10 records readable)")
    ds = pipeline.from_tfrecords(out, image_size=(4, 4), batch_size=4, shuffle=False,
                                 on_error="skip")
    assert len([v for x, _ in ds for v in np.asarray(x)[:, 0, 0, 0]]) == 16
    assert said in capfd.readouterr().err.splitlines()
    assert pipeline.errors(ds) == []
    ds = pipeline.from_tfrecords(out, image_size=(4, 4), batch_size=4, shuffle=False)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        list(ds)
    assert f"assertion failed: [{said}]" in e.value.message
