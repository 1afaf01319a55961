"""Resumable iteration: iterator checkpoints mid-epoch, across processes."""

import os
import textwrap

import pytest
import tensorflow as tf

import pipeline
from pipeline.deliver import resume
from tests._scale_helpers import last_json, make_images, run_py

# Tests marked `stack` below: Keras and TensorFlow APIs that change between versions, the
# result can differ by TensorFlow stack (setup.cfg); the other variants run on the current
# stack only.

N = 30


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_images(tmp_path_factory.mktemp("imgs"), N)


def values(x):
    return [int(v) for v in x[:, 0, 0, 0].numpy()]


@pytest.mark.stack
def test_checkpoint_mid_epoch_same_process(root, tmp_path):
    ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=4, shuffle=True)
    it = iter(ds)
    seen = []
    for _ in range(3):
        seen += values(next(it)[0])
    path = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "it"))
    it2 = iter(ds)
    tf.train.Checkpoint(iterator=it2).restore(path)
    rest = [v for x, _ in it2 for v in values(x)]
    assert sorted(seen + rest) == list(range(N))


# Process A: k steps then save; process B: restore, finish the epoch.
_STOP = textwrap.dedent("""
    import json, os, sys
    import pipeline
    ds = pipeline.from_directory({root!r}, image_size=(8, 8), batch_size=4, shuffle=True{extra})
    cb = pipeline.IteratorCheckpoint(ds, {ckdir!r})
    seen = []
    for _ in range({k}):
        x, y = next(cb.iterator)
        seen += [[int(a), int(b)] for a, b in zip(x[:, 0, 0, 0].numpy(), y.numpy())]
    cb.save()
    print(json.dumps({{"seen": seen}})); sys.stdout.flush(); os._exit(0)
""")
_FINISH = textwrap.dedent("""
    import json, os, sys
    import pipeline
    ds = pipeline.from_directory({root!r}, image_size=(8, 8), batch_size=4, shuffle=True{extra})
    cb = pipeline.IteratorCheckpoint(ds, {ckdir!r})
    epoch = cb.restore()
    seen = [[int(a), int(b)] for x, y in cb.iterator
            for a, b in zip(x[:, 0, 0, 0].numpy(), y.numpy())]
    print(json.dumps({{"seen": seen, "epoch": epoch}})); sys.stdout.flush(); os._exit(0)
""")


# Solid images: a random resized crop and a flip keep each image's value.
AUGMENT = (", seed=5, augment=pipeline.Augment(random_resized_crop=True, "
           "horizontal_flip=True)")


# Slow tier (two processes each, some 25 s). The default tier's cheap checks: a restore in a
# new process by test_keras_fit_callback_saves_and_restores below (every file once, labels
# paired, shuffled), on both stacks; augmentation's restore in one process by test_properties.
@pytest.mark.parametrize("extra", [pytest.param("", id="shuffle",
                                                marks=[pytest.mark.stack, pytest.mark.slow]),
                                   pytest.param(AUGMENT, id="shuffle+augment",
                                                marks=pytest.mark.slow)])
def test_restore_in_new_process_finishes_epoch_exactly_once(root, tmp_path, extra):
    ckdir = str(tmp_path / "ck")
    a = run_py(_STOP.format(root=root, ckdir=ckdir, k=3, extra=extra))
    assert a.returncode == 0, a.stderr[-2000:]
    b = run_py(_FINISH.format(root=root, ckdir=ckdir, extra=extra))
    assert b.returncode == 0, b.stderr[-2000:]
    first, rest = last_json(a.stdout)["seen"], last_json(b.stdout)["seen"]
    assert len(first) == 12
    union = first + rest
    assert sorted(v for v, _ in union) == list(range(N))          # every file, once
    assert all(label == v % 3 for v, label in union)              # labels still paired
    # shuffle was on: the first 12 are not simply files 0..11 in index order
    assert [v for v, _ in first] != sorted(v for v, _ in first) or set(
        v for v, _ in first) != set(range(12))


_FIT = textwrap.dedent("""
    import json, os, sys
    import keras, tensorflow as tf
    import pipeline
    ds = pipeline.from_directory({root!r}, image_size=(8, 8), batch_size=3, shuffle=True)
    cb = pipeline.IteratorCheckpoint(ds, {ckdir!r})
    handed = []
    def stream():
        for x, y in cb.batches():
            handed.append([[int(a), int(b)] for a, b in zip(x[:, 0, 0, 0].numpy(), y.numpy())])
            yield x, y
    model = keras.Sequential([keras.layers.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(stream(), steps_per_epoch={steps}, epochs=1, verbose=0, callbacks=[cb])
    trained = handed[:{steps}]
    print(json.dumps({{"trained": trained, "pulled": len(handed),
                       "ckpts": len(cb.manager.checkpoints)}}))
    sys.stdout.flush(); os._exit(0)
""")


@pytest.mark.stack
def test_keras_fit_callback_saves_and_restores(root, tmp_path):
    ckdir = str(tmp_path / "ck")
    a = run_py(_FIT.format(root=root, ckdir=ckdir, steps=4))
    assert a.returncode == 0, a.stderr[-3000:]
    got = last_json(a.stdout)
    assert got["ckpts"] >= 1
    trained = [v for batch in got["trained"] for v in batch]
    # Keras prefetches from generators: more batches were pulled than trained;
    # those must come back after the restore, not be lost.
    b = run_py(textwrap.dedent(f"""
        import json, os, sys, itertools
        import pipeline
        ds = pipeline.from_directory({root!r}, image_size=(8, 8), batch_size=3, shuffle=True)
        cb = pipeline.IteratorCheckpoint(ds, {ckdir!r})
        epoch = cb.restore()
        rest = [[int(a), int(b)] for x, y in cb.batches()
                for a, b in zip(x[:, 0, 0, 0].numpy(), y.numpy())]
        print(json.dumps({{"rest": rest, "epoch": epoch}})); sys.stdout.flush(); os._exit(0)
    """))
    assert b.returncode == 0, b.stderr[-3000:]
    got_b = last_json(b.stdout)
    assert got_b["epoch"] == 1
    assert len(trained) == 12
    union = trained + got_b["rest"]
    assert sorted(v for v, _ in union) == list(range(N))          # every file, once
    assert all(label == v % 3 for v, label in union)              # labels still paired
    # shuffle was on: the first 12 are not simply files 0..11 in index order
    first = [v for v, _ in trained]
    assert first != sorted(first) or set(first) != set(range(12))


@pytest.mark.stack
def test_generator_source_is_refused():
    gen = tf.data.Dataset.from_generator(
        lambda: iter(range(5)), output_signature=tf.TensorSpec([], tf.int64))
    with pytest.raises(resume.NotCheckpointableError, match="generator"):
        pipeline.check_checkpointable(gen)
    with pytest.raises(ValueError, match="tf.data service"):
        pipeline.IteratorCheckpoint(gen, "/tmp/unused-ckpt")


@pytest.mark.stack
def test_py_function_map_is_refused(root):
    ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=4)
    ds = ds.map(lambda x, y: (tf.py_function(lambda a: a, [x], tf.uint8), y))
    with pytest.raises(resume.NotCheckpointableError, match="tf.py_function"):
        pipeline.check_checkpointable(ds)


@pytest.mark.stack
def test_skip_mode_recorder_is_allowed(root, tmp_path):
    ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=4, on_error="skip")
    pipeline.check_checkpointable(ds)
    cb = pipeline.IteratorCheckpoint(ds, str(tmp_path / "ck"), max_to_keep=2)
    next(cb.iterator)
    for _ in range(4):
        assert cb.save()
    # older checkpoints and their pending batches are removed together
    assert sorted(os.listdir(tmp_path / "ck")) == [
        "checkpoint", "iterator-3.data-00000-of-00001", "iterator-3.index",
        "iterator-3.pending.npz", "iterator-4.data-00000-of-00001", "iterator-4.index",
        "iterator-4.pending.npz"]


@pytest.mark.stack
def test_bad_save_freq():
    ds = tf.data.Dataset.range(3)
    with pytest.raises(ValueError, match="save_freq=0"):
        pipeline.IteratorCheckpoint(ds, "/tmp/unused-ckpt", save_freq=0)


@pytest.mark.parametrize("shuffle,cache", [
    (True, "memory"), (False, "memory"),
    pytest.param(True, "file", marks=pytest.mark.stack), (True, None)])
def test_restore_at_an_epoch_boundary_continues_the_unbroken_run(root, tmp_path, shuffle, cache):
    """A checkpoint taken after the last element of an epoch, restored into a new dataset
    (as a new process builds it), gives the next epochs' elements in the unbroken run's
    order and pixels. With a cache the reshuffle and the augmentation above it used to
    restart from the first epoch's draw (a different order and crops)."""
    def make():
        return pipeline.from_directory(
            root, image_size=(6, 6), batch_size=None, shuffle=shuffle, seed=370,
            cache=(str(tmp_path / "cache") if cache == "file" else cache),
            augment=pipeline.Augment(random_resized_crop=True, horizontal_flip=True,
                                     brightness=0.3)).repeat(3)

    def key(el):
        return tuple(t.numpy().tobytes() for t in el)

    unbroken = [key(el) for el in make()]
    assert len(unbroken) == 3 * N
    for stop in (N,):  # the first element of the second epoch
        it = iter(make())
        before = [key(next(it)) for _ in range(stop)]
        path = tf.train.Checkpoint(iterator=it).save(str(tmp_path / f"ck{stop}" / "it"))
        restored = iter(make())
        tf.train.Checkpoint(iterator=restored).restore(path)
        assert before == unbroken[:stop]
        assert [key(el) for el in restored] == unbroken[stop:]
