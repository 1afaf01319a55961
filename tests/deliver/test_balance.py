"""Imbalanced classes: pipeline.class_weights and the factories' sampling= option."""

import collections
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import pipeline
from pipeline.sources import index as index_lib

COUNTS = {"a": 12, "b": 3, "c": 1}   # 16 files; pixel value = file number
N = sum(COUNTS.values())
# sklearn's "balanced" rule by hand: n / (n_classes * count)
BALANCED = {0: 16 / (3 * 12), 1: 16 / (3 * 3), 2: 16 / (3 * 1)}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("imbalanced")
    i = 0
    for name, count in COUNTS.items():
        os.makedirs(root / name)
        for _ in range(count):
            Image.new("RGB", (8, 8), (i, i, i)).save(root / name / f"{i:03d}.png")
            i += 1
    return str(root)


def _class_of(value):
    return 0 if value < 12 else 1 if value < 15 else 2


def _epochs(ds, k):
    out = []
    for _ in range(k):
        out.append([(int(x[0, 0, 0]), int(y)) for x, y in ds])
    return out


def _make(root, **kw):
    return pipeline.from_directory(root, image_size=(8, 8), batch_size=None, **kw)


# --- class_weights -------------------------------------------------------------------

def test_class_weights_balanced_rule_by_hand(root):
    ds = _make(root)
    weights = pipeline.class_weights(ds)
    assert list(weights) == [0, 1, 2]
    assert weights == pytest.approx(BALANCED)
    assert all(type(k) is int and type(v) is float for k, v in weights.items())
    # every class's weighted count is the same: n / n_classes
    assert [weights[c] * n for c, n in enumerate(COUNTS.values())] == pytest.approx([16 / 3] * 3)
    assert pipeline.class_weights(index_lib.index_directory(root)) == pytest.approx(BALANCED)
    labels = [0] * 12 + [1] * 3 + [2]
    assert pipeline.class_weights(labels) == pytest.approx(BALANCED)
    assert pipeline.class_weights(np.eye(3)[labels]) == pytest.approx(BALANCED)  # one-hot
    assert pipeline.class_weights(["x"] * 12 + ["y"] * 3 + ["z"]) == pytest.approx(BALANCED)


# scikit-learn 1.9.1's compute_class_weight("balanced", classes=np.unique(y), y=y) for
# this y (seen once, outside the test environment, which has no scikit-learn)
SKLEARN_Y = [0] * 7 + [1] * 2 + [3] * 5
SKLEARN_WEIGHTS = [0.6666666666666666, 2.3333333333333335, 0.9333333333333333]


def test_class_weights_match_sklearn_numbers():
    got = pipeline.class_weights(SKLEARN_Y)
    assert list(got) == [0, 1, 3]
    assert list(got.values()) == pytest.approx(SKLEARN_WEIGHTS, rel=1e-12)


def test_class_weights_match_installed_sklearn():
    sk = pytest.importorskip("sklearn.utils.class_weight")
    labels = np.array(SKLEARN_Y)
    want = sk.compute_class_weight("balanced", classes=np.unique(labels), y=labels)
    assert list(pipeline.class_weights(labels).values()) == pytest.approx(list(want))


def test_class_weights_feed_keras_fit(root):
    import keras
    ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=4)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ds, epochs=1, verbose=0, class_weight=pipeline.class_weights(ds))
    assert np.isfinite(history.history["loss"][0])


def test_class_weights_absent_class_gets_no_entry():
    # class 1 has no example: n_classes counts the 2 present, as sklearn's unique(y)
    assert pipeline.class_weights([0, 0, 0, 2]) == pytest.approx({0: 4 / 6, 2: 4 / 2})


def test_class_weights_of_a_subset_count_its_files(root):
    train, val = _make(root, validation_split=0.25, subset="both", seed=3)
    labels = [int(y) for _, y in train]
    counts = np.bincount(labels)
    present = np.flatnonzero(counts)
    assert pipeline.class_weights(train) == pytest.approx(
        {int(c): len(labels) / (len(present) * counts[c]) for c in present})


@pytest.mark.parametrize("labels, match", [
    ([[1, 1, 0], [0, 1, 0]], r"multi-label.*labels\[0\]=\[1, 1, 0\]"),
    ([0.5, 1.25, 3.0], r"float values \(regression.*labels\[0\]=0.5"),
    ([0.0, 1.0], r"float values.*cast them to int"),
    ([0, -1], r">= 0.*labels\[1\]=-1"),
    ([], "at least one label"),
    (["a", 1], r"all class indices or all class names.*labels\[1\]=1"),
    ("abc", "sequence of labels"),
])
def test_class_weights_refuses_what_has_no_balanced_rule(labels, match):
    with pytest.raises(ValueError, match=match):
        pipeline.class_weights(labels)


def test_class_weights_refuses_datasets_without_labels(root):
    with pytest.raises(ValueError, match="needs labels.*label_mode=None"):
        pipeline.class_weights(pipeline.from_directory(root, labels=None, image_size=(8, 8)))
    with pytest.raises(ValueError, match=r"after \.map"):
        pipeline.class_weights(_make(root).map(lambda x, y: (x, y)))


def test_class_weights_multi_label_manifest_is_refused(tmp_path, root):
    paths = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)[:3]
    manifest = tmp_path / "m.csv"
    manifest.write_text("path,cat,dog\n" + "".join(f"{p},1,{i % 2}\n" for i, p in
                                                     enumerate(paths)))
    ds = pipeline.from_manifest(str(manifest), label_columns=["cat", "dog"],
                                image_size=(8, 8), allow_outside_root=True)
    with pytest.raises(ValueError, match="multi-label"):
        pipeline.class_weights(ds)


# --- sampling= -----------------------------------------------------------------------

def test_balanced_epochs_have_n_elements_and_equal_classes(root):
    ds = _make(root, sampling="balanced", seed=11)
    epochs = _epochs(ds, 12)
    assert len(ds) == N and all(len(e) == N for e in epochs)
    counts = collections.Counter(_class_of(v) for e in epochs for v, _ in e)
    # 192 draws, each class 1/3: 64 expected, binomial sd 6.5
    assert all(40 <= counts[c] <= 88 for c in range(3)), counts
    assert all(_class_of(v) == y for e in epochs for v, y in e)   # labels stay with files
    # the 1-file class repeats; the big class never repeats a file within an epoch
    # (its stream runs through all 12 before any comes again)
    for e in epochs:
        big = [v for v, _ in e if v < 12]
        assert len(big) == len(set(big))
    assert any(sum(1 for v, _ in e if v == 15) > 1 for e in epochs)


def test_sampling_is_seeded_and_each_epoch_differs(root):
    a = _epochs(_make(root, sampling="balanced", seed=5), 3)
    b = _epochs(_make(root, sampling="balanced", seed=5), 3)
    assert a == b
    assert a[0] != a[1]
    assert _epochs(_make(root, sampling="balanced", seed=6), 1)[0] != a[0]


def test_sampling_shares_by_index_and_by_name(root):
    by_index = _epochs(_make(root, sampling={0: 1, 1: 3, 2: 0}, seed=2), 6)
    counts = collections.Counter(_class_of(v) for e in by_index for v, _ in e)
    assert counts[2] == 0 and counts[1] > counts[0] > 0, counts
    by_name = _epochs(_make(root, sampling={"a": 1, "b": 3, "c": 0}, seed=2), 6)
    assert by_name == by_index


def test_a_share_for_a_class_without_files_is_logged_and_left_out(caplog):
    from pipeline.deliver import balance
    labels = np.array([0, 0, 1])
    with caplog.at_level("WARNING"):
        shares = balance.sampling_shares({"a": 1, "b": 1, "c": 2}, labels, 3, ["a", "b", "c"])
    assert shares.tolist() == [0.5, 0.5, 0.0]
    assert "class(es) ['c'] have a share but no files here" in caplog.text
    assert balance.sampling_shares("balanced", labels, 3).tolist() == [0.5, 0.5, 0.0]


def test_validation_subset_is_never_resampled(root):
    train, val = _make(root, validation_split=0.25, subset="both", seed=4,
                       sampling="balanced")
    val_values = sorted(v for v, _ in _epochs(val, 1)[0])
    assert sorted(val_values) == sorted(set(val_values)) and len(val_values) == 4
    assert sorted(v for v, _ in _epochs(val, 1)[0]) == val_values
    train_values = {v for e in _epochs(train, 3) for v, _ in e}
    assert not train_values & set(val_values)          # resampled from training files only
    assert all(len(e) == N - 4 for e in _epochs(train, 2))


@pytest.mark.stack  # iterator checkpoints of sample_from_datasets: TensorFlow's, by version
def test_sampling_resumes_from_an_iterator_checkpoint(root, tmp_path):
    def make():
        return _make(root, sampling="balanced", seed=9).repeat(2)

    def key(el):
        return int(el[0][0, 0, 0]), int(el[1])

    unbroken = [key(el) for el in make()]
    pipeline.check_checkpointable(make())
    it = iter(make())
    before = [key(next(it)) for _ in range(N + 5)]       # into the second epoch
    path = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "ck" / "it"))
    restored = iter(make())
    tf.train.Checkpoint(iterator=restored).restore(path)
    assert before + [key(el) for el in restored] == unbroken


@pytest.mark.parametrize("kw, match", [
    (dict(sampling="balance"), "sampling.*balanced"),
    (dict(sampling={0: -1}), "finite numbers >= 0"),
    (dict(sampling={0: 1, 1: 1}), r"no share to class\(es\) \['c'\]"),
    (dict(sampling={"d": 1}), "does not exist: 'd'"),
    (dict(sampling={0: 0, 1: 0, 2: 0}), "sum to 0"),
    (dict(sampling=[1, 2]), "non-empty dict"),
    (dict(sampling="balanced", cache="memory"), "cannot be used with `cache`"),
    (dict(sampling="balanced", labels=None), "one int class per file.*no labels"),
])
def test_sampling_bad_values_are_named(root, kw, match):
    with pytest.raises(ValueError, match=match):
        _make(root, **kw)


def test_sampling_on_a_path_list_and_per_input_pipeline(root):
    paths = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)
    labels = [_class_of(int(os.path.basename(p)[:3])) for p in paths]
    ds = pipeline.from_paths(paths, labels=labels, image_size=(8, 8), batch_size=None,
                             sampling="balanced", seed=1)
    epoch = _epochs(ds, 1)[0]
    assert len(epoch) == N and all(_class_of(v) == y for v, y in epoch)
    for i in range(2):  # rows are files in class then path order: row r holds value r
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i)
        part = _make(root, sampling="balanced", seed=1, input_context=ctx)
        e = _epochs(part, 1)[0]
        assert len(e) == N // 2
        assert {v for v, _ in e} <= {v for v in range(N) if v % 2 == i}   # its share only


_RESUME = """
import json, os, sys
import pipeline
ds = pipeline.from_directory({root!r}, image_size=(8, 8), batch_size=4, sampling="balanced",
                             seed=21)
cb = pipeline.IteratorCheckpoint(ds, {ckdir!r})
if {stop}:
    seen = [int(v) for _ in range({stop}) for v in next(cb.iterator)[0][:, 0, 0, 0].numpy()]
    cb.save()
else:
    cb.restore()
    seen = [int(v) for x, _ in cb.iterator for v in x[:, 0, 0, 0].numpy()]
print(json.dumps(seen)); sys.stdout.flush(); os._exit(0)
"""


@pytest.mark.slow  # test_sampling_resumes_from_an_iterator_checkpoint is its cheap check
def test_sampling_resumes_in_a_new_process_with_iterator_checkpoint(root, tmp_path):
    """Process A draws 2 batches and saves; process B restores and finishes the epoch:
    together they are the unbroken epoch of the same seed."""
    import json
    from tests._scale_helpers import run_py
    unbroken = [int(v) for x, _ in pipeline.from_directory(
        root, image_size=(8, 8), batch_size=4, sampling="balanced", seed=21)
        for v in x[:, 0, 0, 0].numpy()]
    ckdir = str(tmp_path / "ck")
    parts = []
    for stop in (2, 0):
        proc = run_py(_RESUME.format(root=root, ckdir=ckdir, stop=stop), timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        parts.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert len(parts[0]) == 8 and parts[0] + parts[1] == unbroken
