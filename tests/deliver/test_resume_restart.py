"""A restored iterator continues exactly as an unbroken run, in every later epoch.

An iterator checkpoint (``tf.train.Checkpoint(iterator=it)`` over
``ds.repeat(E)``) is taken at a random step of a random epoch and restored in
a new process; every element after it (order, labels and pixels, with a
shuffle, random augmentation and a skipped bad file) must equal the unbroken
run's with the same seed. The per-epoch orders and augment seeds come from a
key per epoch held in the iterator's own state (``pipeline.deliver.plan.epoch_keys``).
"""

import hashlib
import json
import os
import textwrap

import numpy as np
import pytest
from PIL import Image

from tests._scale_helpers import last_json, run_py

# Keras and TensorFlow APIs that change between versions: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

EPOCHS = 4
N = 14


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("imgs")
    rng = np.random.default_rng(7)
    for i in range(N):
        d = os.path.join(root, f"c{i % 2}")
        os.makedirs(d, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).save(
            os.path.join(d, f"{i:03d}.png"))
    with open(os.path.join(root, "c1", "bad.png"), "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)  # a PNG signature, then garbage
    return str(root)


_SCRIPT = textwrap.dedent("""
    import hashlib, json, os, sys
    import tensorflow as tf
    import pipeline
    kw = dict(image_size=(8, 8), shuffle=True, seed=11, on_error="skip",
              augment=pipeline.Augment(random_resized_crop=True, horizontal_flip=True,
                                       brightness=0.2){extra})

    def make():
        return pipeline.from_directory({root!r}, **kw).repeat({epochs})

    def h(el):
        x, y = el
        return hashlib.md5(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest()[:10]

    out = {{}}
    if {stop} >= 0:
        out["unbroken"] = [h(el) for el in make()]
        it = iter(make())
        out["before"] = [h(next(it)) for _ in range({stop})]
        out["path"] = tf.train.Checkpoint(iterator=it).save({ck!r})
        out["after_same_process"] = [h(el) for el in it]
    else:
        it = iter(make())
        tf.train.Checkpoint(iterator=it).restore(tf.train.latest_checkpoint({ckdir!r}))
        out["after"] = [h(el) for el in it]
    print(json.dumps(out)); sys.stdout.flush(); os._exit(0)
""")

CASES = {
    # name: (extra factory arguments, elements per epoch: N good files)
    "batched": (", batch_size=3", -(-N // 3)),
    "unbatched": (", batch_size=None", N),
    "drop_remainder": (", batch_size=4, drop_remainder=True", N // 4),
}


# Every element structure here is a new process of some 30 CPU-s: the slow tier
# (.ci/run --all). The default tier's cheap check of a restore in a new process, on both
# stacks, is test_resume's test_keras_fit_callback_saves_and_restores.
_TIER = [pytest.mark.slow, pytest.mark.sweep]


@pytest.mark.parametrize("name", [pytest.param(n, marks=_TIER) for n in sorted(CASES)])
def test_restore_in_new_process_continues_as_unbroken_run(root, tmp_path, name):
    extra, per_epoch = CASES[name]
    rng = np.random.default_rng(int(hashlib.md5(name.encode()).hexdigest()[:8], 16))
    stop = int(rng.integers(1, EPOCHS)) * per_epoch + int(rng.integers(0, per_epoch))
    ckdir = str(tmp_path / "ck")
    fmt = dict(root=root, extra=extra, epochs=EPOCHS, ck=os.path.join(ckdir, "it"),
               ckdir=ckdir)
    a = run_py(_SCRIPT.format(stop=stop, **fmt), timeout=240)
    assert a.returncode == 0, a.stderr[-3000:]
    b = run_py(_SCRIPT.format(stop=-1, **fmt), timeout=240)
    assert b.returncode == 0, b.stderr[-3000:]
    first, rest = last_json(a.stdout), last_json(b.stdout)
    unbroken = first["unbroken"]
    assert len(unbroken) == EPOCHS * per_epoch
    # a new epoch order each epoch (the shuffle and augment are live)
    epochs = [unbroken[e * per_epoch:(e + 1) * per_epoch] for e in range(EPOCHS)]
    assert len({tuple(e) for e in epochs}) == EPOCHS
    assert first["before"] == unbroken[:stop]
    assert first["after_same_process"] == unbroken[stop:]
    assert rest["after"] == unbroken[stop:], (name, stop)
