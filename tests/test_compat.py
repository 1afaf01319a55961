"""pipeline.compat: queue-runner get_batch, fit_generator adapters, flow_from_directory."""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

import pipeline
from pipeline import compat
from tests._scale_helpers import REPO, make_images

# Tests marked `stack` below: Keras and TensorFlow APIs that change between versions, the
# result can differ by TensorFlow stack (setup.cfg); the other variants run on the current
# stack only.

N = 20


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_images(tmp_path_factory.mktemp("imgs"), N, fmt="jpg")


def _paths(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


@pytest.mark.stack
def test_get_batch_one_epoch_exactly_once_with_labels(root):
    paths = _paths(root)
    values = [int(os.path.basename(p)[:3]) for p in paths]
    ds = compat.get_batch(paths, values, img_w=12, img_h=10, channels=3, batch_size=6,
                          capacity=24, num_threads=2, num_epochs=1)
    got = []
    for x, y in ds:
        assert x.dtype == tf.uint8 and x.shape[1:] == (10, 12, 3)
        pix = np.round(x[:, 0, 0, 0].numpy().astype(float))
        got += list(zip(pix.astype(int), y.numpy()))
    # JPEG is lossy: a solid value v decodes within +-2 of v.
    assert sorted(v for _, v in got) == sorted(values)
    assert all(abs(int(p) - int(v)) <= 2 for p, v in got)
    assert ds.file_paths == paths


@pytest.mark.stack
def test_get_batch_repeats_and_standardizes(root):
    paths = _paths(root)
    ds = compat.get_batch(paths, [0] * N, 8, 8, 1, batch_size=5, capacity=10,
                          standardize=True)
    batches = list(ds.take(6))               # 4 batches per epoch: it repeats
    assert len(batches) == 6
    assert batches[0][0].dtype == tf.float32 and batches[0][0].shape == (5, 8, 8, 1)
    with pytest.raises(ValueError, match="capacity=0"):
        compat.get_batch(paths, [0] * N, 8, 8, 3, 5, capacity=0)


@pytest.mark.stack
def test_from_keras_generator_callable_iterator_and_sequence():
    def gen():
        for i in range(3):
            yield np.full((4, 2), i, np.float32), np.arange(4) + 4 * i

    ds = compat.from_keras_generator(gen)
    assert ds.element_spec[0] == tf.TensorSpec((None, 2), tf.float32)
    for _ in range(2):   # a callable restarts every epoch
        ys = [v for _, y in ds for v in y.numpy()]
        assert ys == list(range(12))
    once = compat.from_keras_generator(gen(), steps=2)
    assert [int(x[0, 0]) for x, _ in once] == [0, 1]     # peeked batch not lost

    class Seq:
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return np.ones((3, 1), np.uint8) * i, np.zeros((3,), np.int64)

    ds = compat.from_keras_generator(Seq())
    assert [int(x[0, 0]) for x, _ in ds] == [0, 1]
    with pytest.raises(pipeline.NotCheckpointableError):
        pipeline.check_checkpointable(ds)
    with pytest.raises(ValueError, match="generator"):
        compat.from_keras_generator(42)


@pytest.mark.stack
def test_flow_from_directory_mapping(root):
    ds = compat.flow_from_directory(root, target_size=(6, 7), color_mode="grayscale",
                                    class_mode="sparse", batch_size=4, shuffle=False,
                                    interpolation="bilinear", rescale=1 / 255)
    x, y = next(iter(ds))
    assert x.shape == (4, 6, 7, 1) and x.dtype == tf.float32 and y.dtype == tf.int32
    assert ds.class_names == ["c0", "c1", "c2"]
    cat = compat.flow_from_directory(root, target_size=(6, 6), batch_size=4,
                                     classes=["c1", "c2"])
    assert next(iter(cat))[1].shape == (4, 2)
    auto = compat.flow_from_directory(root, target_size=(6, 6), class_mode="input")
    x, x2 = next(iter(auto))
    assert np.array_equal(x.numpy(), x2.numpy())
    tr = compat.flow_from_directory(root, target_size=(6, 6), validation_split=0.25,
                                    subset="training", seed=1, batch_size=None)
    va = compat.flow_from_directory(root, target_size=(6, 6), validation_split=0.25,
                                    subset="validation", seed=1, batch_size=None)
    assert len(set(tr.file_paths) | set(va.file_paths)) == N
    assert not set(tr.file_paths) & set(va.file_paths)


@pytest.mark.stack
def test_get_batch_endless_batches_are_full_across_epochs(root):
    """num_epochs=None: repeat before batch, as tf.train.batch: no short batch at
    an epoch boundary, and the static batch dimension is batch_size."""
    paths = _paths(root)                       # 20 paths, batch 6: 20 % 6 != 0
    ds = compat.get_batch(paths, [0] * N, 8, 8, 3, batch_size=6, capacity=12)
    assert ds.element_spec[0].shape[0] == 6
    sizes = [int(x.shape[0]) for x, _ in ds.take(12)]   # 72 images: 3.6 epochs
    assert sizes == [6] * 12


@pytest.mark.stack
def test_get_batch_int_epochs_only_the_last_batch_short(root):
    paths = _paths(root)
    values = [int(os.path.basename(p)[:3]) for p in paths]
    ds = compat.get_batch(paths, values, 8, 8, 3, batch_size=6, capacity=12, num_epochs=2)
    batches = [y.numpy() for _, y in ds]
    assert [len(b) for b in batches] == [6] * 6 + [4]   # 40 = 6 * 6 + 4
    assert sorted(np.concatenate(batches).tolist()) == sorted(values * 2)


def _class_tree(root, counts):
    """Class folders c0, c1, ... with counts[k] PNGs each; returns root."""
    from PIL import Image
    for k, n in enumerate(counts):
        d = os.path.join(root, f"c{k}")
        os.makedirs(d, exist_ok=True)
        for j in range(n):
            Image.new("RGB", (4, 4), (j, k, 0)).save(os.path.join(d, f"{j:03d}.png"))
    return str(root)


def _keras_rule(root, split):
    """The rule of Keras' DirectoryIterator, written out: per class, sorted, the
    first int(split * n) files are validation, the rest training."""
    train, val = [], []
    for c in sorted(os.listdir(root)):
        files = sorted(os.path.join(root, c, f) for f in os.listdir(os.path.join(root, c)))
        k = int(split * len(files))
        val += files[:k]
        train += files[k:]
    return train, val


@pytest.mark.parametrize("counts, split", [
    pytest.param([1] * 10, 0.2, marks=pytest.mark.stack), ([5, 3, 7, 1], 0.25), ([10, 9], 0.5),
    ([4, 4], 0.0)])
def test_flow_from_directory_splits_per_class_like_keras(tmp_path, counts, split):
    root = _class_tree(tmp_path / "d", counts)
    want_train, want_val = _keras_rule(root, split)
    kw = dict(target_size=(4, 4), validation_split=split, shuffle=False, batch_size=None,
              class_mode="sparse")
    tr = compat.flow_from_directory(root, subset="training", **kw)
    va = compat.flow_from_directory(root, subset="validation", **kw)
    assert tr.file_paths == want_train and va.file_paths == want_val
    assert sum(1 for _ in tr) == len(want_train) and sum(1 for _ in va) == len(want_val)
    labels = [int(y) for _, y in tr]
    assert labels == [int(os.path.basename(os.path.dirname(p))[1:]) for p in want_train]
    both = compat.flow_from_directory(root, subset="both", **kw)
    assert [d.file_paths for d in both] == [want_train, want_val]


@pytest.mark.stack
def test_flow_from_directory_one_image_per_class_is_all_training(tmp_path):
    """10 classes x 1 image, validation_split=0.2: Keras gives 10 / 0 (int(0.2 * 1) = 0)."""
    root = _class_tree(tmp_path / "d", [1] * 10)
    tr = compat.flow_from_directory(root, target_size=(4, 4), validation_split=0.2,
                                    subset="training", batch_size=4)
    va = compat.flow_from_directory(root, target_size=(4, 4), validation_split=0.2,
                                    subset="validation", batch_size=4)
    assert len(tr.file_paths) == 10 and sum(int(x.shape[0]) for x, _ in tr) == 10
    assert va.file_paths == [] and list(va) == []
    assert va.element_spec == tr.element_spec and va.class_names == tr.class_names
    # without a subset, Keras ignores validation_split: every file
    everything = compat.flow_from_directory(root, target_size=(4, 4), validation_split=0.2)
    assert len(everything.file_paths) == 10


@pytest.mark.stack
def test_flow_from_directory_split_matches_keras_legacy_iterator(tmp_path):
    """Side by side with Keras' own legacy DirectoryIterator, where it imports
    (Keras 3 keeps it as keras.src.legacy.preprocessing.image; its random
    transforms need scipy, the listing does not)."""
    legacy = pytest.importorskip("keras.src.legacy.preprocessing.image")
    root = _class_tree(tmp_path / "d", [5, 3, 7, 1, 2])
    for split in (0.2, 0.34, 0.5):
        gen = legacy.ImageDataGenerator(validation_split=split)
        for subset in ("training", "validation"):
            it = gen.flow_from_directory(root, target_size=(4, 4), subset=subset,
                                         shuffle=False, class_mode="sparse")
            ds = compat.flow_from_directory(root, target_size=(4, 4), subset=subset,
                                            validation_split=split, shuffle=False,
                                            class_mode="sparse", batch_size=None)
            assert ds.file_paths == it.filepaths, (split, subset)
            assert [int(y) for _, y in ds] == it.classes.tolist()


@pytest.mark.stack
def test_flow_from_directory_augmentation_error_names_every_option(root):
    with pytest.raises(ValueError) as e:
        compat.flow_from_directory(root, rotation_range=20, zoom_range=0.1,
                                   horizontal_flip=True, save_to_dir="out", colour=1)
    msg = str(e.value)
    assert "pipeline.Augment.from_image_data_generator(" in msg
    assert "horizontal_flip=True, rotation_range=20, zoom_range=0.1" in msg
    for name in ("rotation_range", "zoom_range", "horizontal_flip", "save_to_dir", "colour"):
        assert name in msg
    # the call the message shows does map them
    aug = pipeline.Augment.from_image_data_generator(horizontal_flip=True, rotation_range=20,
                                                     zoom_range=0.1)
    assert isinstance(aug, pipeline.Augment)


@pytest.mark.parametrize("kw, match", [
    ({"rotation_range": 20}, "rotation_range"),
    ({"save_to_dir": "/tmp"}, "save_to_dir"),
    ({"interpolation": "hamming"}, "hamming"),
    ({"class_mode": "multi"}, "class_mode"),
    ({"rescale": 2.0}, "rescale"),
    ({"colour": 1}, "colour"),
])
@pytest.mark.stack
def test_flow_from_directory_refuses_options_without_equivalent(root, kw, match):
    with pytest.raises(ValueError, match=match):
        compat.flow_from_directory(root, **kw)


@pytest.mark.stack
@pytest.mark.slow  # benchmarks/queue_runners.py end to end
def test_queue_runner_benchmark_runs_side_by_side(root, tmp_path):
    out = tmp_path / "qr.json"
    r = subprocess.run(
        [sys.executable, os.path.join(REPO, "benchmarks", "queue_runners.py"),
         f"--data_dir={root}", "--num_images=16", "--batch_size=4", "--image_size=32",
         f"--json_out={out}"], capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(out.read_text())
    names = [x["name"] for x in got["results"]]
    assert names == ["tf1_queue_runners", "pipeline_from_paths"]
    assert all(x["images"] >= 12 and x["images_per_sec"] > 0 for x in got["results"])


# --- from_keras_generator against what Keras' own model.fit feeds ---------------------

class _Recorder:
    """A tiny model that records the first value of every batch it is fed
    (eager, so each training step's input is seen)."""

    def __init__(self):
        import keras
        seen = self.seen = []

        class Record(keras.layers.Layer):
            def call(self, x):
                if tf.executing_eagerly():
                    seen.append(int(np.asarray(x)[0, 0]))
                return x

        self.model = keras.Sequential([keras.Input((1,)), Record(), keras.layers.Dense(1)])
        self.model.compile(loss="mse", run_eagerly=True)

    def fit(self, data, **kw):
        self.seen.clear()
        self.model.fit(data, verbose=0, **kw)
        return list(self.seen)


@pytest.fixture(scope="module")
def recorder():
    return _Recorder()


def _batch(i):
    return np.full((2, 1), i, np.float32), np.zeros((2, 1), np.float32)


def _counting_generator(n=100):
    for i in range(n):
        yield _batch(i)


def _py_dataset(n):
    import keras

    class Counted(keras.utils.PyDataset):
        def __init__(self):
            super().__init__()
            self.begins = self.ends = 0
            self.log = []

        def __len__(self):
            return n

        def __getitem__(self, i):
            self.log.append(("get", i))
            return _batch(i)

        def on_epoch_begin(self):
            self.begins += 1

        def on_epoch_end(self):
            self.ends += 1
            self.log.append(("end", self.ends))

    return Counted()


@pytest.mark.stack
def test_from_keras_generator_object_feeds_what_keras_fit_feeds(recorder):
    keras_fed = recorder.fit(_counting_generator(), epochs=3, steps_per_epoch=3)
    assert keras_fed == list(range(9))
    ds = compat.from_keras_generator(_counting_generator(), steps=3)
    assert recorder.fit(ds, epochs=3, shuffle=False) == keras_fed
    ds = compat.from_keras_generator(_counting_generator(), steps=3)
    assert [[int(x[0, 0]) for x, _ in ds] for _ in range(3)] == [[0, 1, 2], [3, 4, 5],
                                                                 [6, 7, 8]]


@pytest.mark.stack
@pytest.mark.parametrize("n", [9, 10, 2])
def test_from_keras_generator_py_dataset_feeds_what_keras_fit_feeds(recorder, n):
    """steps < len continues through the indices epoch after epoch (len 9:
    0-8 then 0-2; len 10: the 4th epoch is [9] alone), steps > len gives the
    whole sequence each epoch; on_epoch_begin/end once per epoch."""
    theirs = _py_dataset(n)
    keras_fed = recorder.fit(theirs, epochs=4, steps_per_epoch=3, shuffle=False)
    ours = _py_dataset(n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fed = recorder.fit(compat.from_keras_generator(ours, steps=3), epochs=4,
                           shuffle=False)
    ran_out = [w for w in caught if "from_keras_generator: the sequence ran out" in str(
        w.message)]
    assert len(ran_out) == {9: 0, 10: 1, 2: 4}[n]
    assert fed == keras_fed
    assert keras_fed == {9: [0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2],
                         10: list(range(10)), 2: [0, 1] * 4}[n]
    assert ours.begins == 4 and theirs.begins == 4
    # Keras calls on_epoch_end once more, when fit starts; one per epoch here
    assert ours.ends == 4 and theirs.ends == 5


@pytest.mark.stack
def test_from_keras_generator_py_dataset_on_epoch_end_between_epochs():
    seq = _py_dataset(5)
    ds = compat.from_keras_generator(seq, steps=2)
    seq.log.clear()          # the signature read of seq[0]
    epochs = [[int(x[0, 0]) for x, _ in ds] for _ in range(4)]
    assert epochs == [[0, 1], [2, 3], [4], [0, 1]]
    assert seq.log == [("get", 0), ("get", 1), ("end", 1), ("get", 2), ("get", 3),
                       ("end", 2), ("get", 4), ("end", 3), ("get", 0), ("get", 1),
                       ("end", 4)]


@pytest.mark.stack
def test_from_keras_generator_py_dataset_without_steps_each_epoch_whole(recorder):
    theirs, ours = _py_dataset(4), _py_dataset(4)
    keras_fed = recorder.fit(theirs, epochs=2, shuffle=False)
    assert recorder.fit(compat.from_keras_generator(ours), epochs=2, shuffle=False) == keras_fed == [
        0, 1, 2, 3] * 2
    assert ours.ends == 2


@pytest.mark.stack
def test_from_keras_generator_shuffle_permutes_each_pass_seeded():
    seq = _py_dataset(6)
    ds = compat.from_keras_generator(seq, steps=3, shuffle=True, seed=1)
    epochs = [[int(x[0, 0]) for x, _ in ds] for _ in range(4)]
    assert sorted(epochs[0] + epochs[1]) == list(range(6))
    assert sorted(epochs[2] + epochs[3]) == list(range(6))
    again = compat.from_keras_generator(_py_dataset(6), steps=3, shuffle=True, seed=1)
    assert [[int(x[0, 0]) for x, _ in again] for _ in range(4)] == epochs
    with pytest.raises(ValueError, match="shuffle"):
        compat.from_keras_generator(_counting_generator(), steps=3, shuffle=True)


@pytest.mark.stack
def test_from_keras_generator_endless_py_dataset_needs_steps():
    import keras

    class Endless(keras.utils.PyDataset):
        @property
        def num_batches(self):
            return None

        def __getitem__(self, i):
            return _batch(i)

    ds = compat.from_keras_generator(Endless(), steps=2)
    assert [[int(x[0, 0]) for x, _ in ds] for _ in range(3)] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="steps"):
        compat.from_keras_generator(Endless())


@pytest.mark.stack
def test_from_keras_generator_short_generator_warns_like_keras():
    ds = compat.from_keras_generator(_counting_generator(4), steps=3)
    assert [int(x[0, 0]) for x, _ in ds] == [0, 1, 2]
    with pytest.warns(UserWarning, match="ran out of data after 1 of steps=3"):
        assert [int(x[0, 0]) for x, _ in ds] == [3]
    assert [int(x[0, 0]) for x, _ in ds] == []


@pytest.mark.stack
def test_from_keras_generator_plain_sequence_and_iterator_continue_across_epochs():
    class OldSequence:  # keras 2 style: no base class, on_epoch_end only
        ends = 0

        def __len__(self):
            return 5

        def __getitem__(self, i):
            return _batch(i)

        def on_epoch_end(self):
            OldSequence.ends += 1

    seq = OldSequence()
    ds = compat.from_keras_generator(seq, steps=2)
    assert [[int(x[0, 0]) for x, _ in ds] for _ in range(4)] == [[0, 1], [2, 3], [4], [0, 1]]
    assert OldSequence.ends == 4
    it = iter([_batch(i) for i in range(5)])
    ds = compat.from_keras_generator(it, steps=2)
    assert [[int(x[0, 0]) for x, _ in ds] for _ in range(2)] == [[0, 1], [2, 3]]
