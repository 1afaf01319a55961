"""Resumable iteration: save and restore a ``tf.data`` iterator mid-epoch.

Standard TensorFlow only: the iterator's state (shuffle buffer of paths and its
random state, elements in flight in the parallel map and prefetch buffers) is
saved by ``tf.train.Checkpoint(iterator=it)``. Datasets from
``pipeline.from_directory`` / ``from_paths`` can be checkpointed directly::

    it = iter(ds)
    ckpt = tf.train.Checkpoint(iterator=it)
    ...; ckpt.save("ckpt/it")               # mid-epoch
    # later, in a new process, build the same dataset (same arguments), then:
    it = iter(ds); tf.train.Checkpoint(iterator=it).restore(path)
    # next(it) continues the epoch: nothing lost, nothing repeated.

``IteratorCheckpoint`` wraps that as a Keras callback, and ``check_checkpointable``
refuses, with a clear error, datasets whose state lives in Python (a generator
cannot be saved: restoring it would silently restart it).
"""

from __future__ import annotations

import collections
import glob
import os
import threading
from typing import Iterator, Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from pipeline.decode import image as decode
from pipeline.decode import guard
from pipeline.sources import read

# Ops whose state lives in the Python process: an iterator over a dataset that
# contains them cannot be restored in another process.
_PYTHON_STATE_OPS = {
    "PyFunc": "a Python generator (tf.data.Dataset.from_generator) or tf.numpy_function",
    "PyFuncStateless": "tf.numpy_function",
    "EagerPyFunc": "tf.py_function",
}
# The package's own rare-path Python ops hold no state across elements: the
# skip recorder, the failure diagnosis, the Pillow fallback decoder, the
# other-formats decoder of a JPEG-only graph, the JPEG cut check, the remote-file fetch
# (fsspec) and the note on the first EXIF-oriented segmentation pair.
_SAFE_PY_OPS = (guard.RECORDER_OP_NAME, guard.DIAGNOSE_OP_NAME, decode.FALLBACK_OP_NAME,
                decode.OTHERS_OP_NAME, decode.JPEG_CUT_OP_NAME, read.FETCH_OP_NAME,
                "pipeline_oriented_pair_note")  # assemble.ORIENTED_PAIR_OP_NAME (no import cycle)
_SERVICE_OPS = ("DataServiceDataset", "DataServiceDatasetV2", "DataServiceDatasetV3",
                "DataServiceDatasetV4")

_NOT_CHECKPOINTABLE_HELP = (
    "Sources that cannot be checkpointed: Python generators "
    "(tf.data.Dataset.from_generator, pipeline.from_generator, "
    "pipeline.compat.from_keras_generator, keras PyDataset / fit_generator-style "
    "generators), tf.py_function / tf.numpy_function in a map or filter, and "
    "tf.data service datasets (service=...). Use a file-based factory "
    "(pipeline.from_directory, from_paths, from_tfrecords) or, for a generator, "
    "make it start from an explicit position (e.g. skip the batches already seen) "
    "instead of restoring an iterator.")


class NotCheckpointableError(ValueError):
    """The dataset's iterator state cannot be saved and restored exactly."""


def _ops(dataset: tf.data.Dataset):
    """(op type, node name) of every node in the dataset graph, functions included."""
    policy = tf.data.experimental.ExternalStatePolicy.IGNORE
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(
        dataset._as_serialized_graph(external_state_policy=policy).numpy())  # pylint: disable=protected-access
    nodes = list(graph_def.node)
    for fn in graph_def.library.function:
        nodes.extend(fn.node_def)
    return [(n.op, n.name) for n in nodes]


def check_checkpointable(dataset: tf.data.Dataset) -> None:
    """Raises unless ``tf.train.Checkpoint(iterator=iter(dataset))`` restores exactly.

    Walks the dataset's graph (its functions included) for ops whose state is
    Python-side (generators, ``tf.py_function``, ``tf.numpy_function``) or on
    remote workers (tf.data service). The ``pipeline`` factories' own
    rare-path Python ops are allowed (``_SAFE_PY_OPS``): they only record or
    explain skipped files (records made before a restore stay in the old
    process's ``pipeline.errors``) or decode one file.

    Args:
        dataset: a ``tf.data.Dataset``.

    Raises:
        NotCheckpointableError (a ``ValueError``): naming what was found and the
            sources that cannot be checkpointed.
    """
    found = []
    for op, name in _ops(dataset):
        if op in _PYTHON_STATE_OPS and not any(safe in name for safe in _SAFE_PY_OPS):
            found.append(_PYTHON_STATE_OPS[op])
        elif op in _SERVICE_OPS:
            found.append("a tf.data service dataset")
    if found:
        raise NotCheckpointableError(
            "This dataset cannot be checkpointed mid-epoch: it contains "
            f"{', '.join(sorted(set(found)))}, whose state lives outside the "
            "tf.data graph, so a restored iterator would silently restart or "
            f"fail. {_NOT_CHECKPOINTABLE_HELP}")


def _flat_np(element):
    return [t.numpy() if hasattr(t, "numpy") else np.asarray(t)
            for t in tf.nest.flatten(element)]


class IteratorCheckpoint(keras.callbacks.Callback):
    """Keras callback: saves a ``tf.data`` iterator beside the model checkpoints.

    It owns one iterator over ``dataset`` and saves it with
    ``tf.train.CheckpointManager`` (files ``<directory>/iterator-<n>.*``), at
    the end of every epoch and/or every ``save_freq`` batches. Keras prefetches
    from Python generators, so batches pulled from the iterator but not yet
    trained on are saved alongside (``.pending.npz``) and delivered first after
    a restore: nothing is lost or repeated at the batch level.

    Feed Keras through ``batches()`` (one infinite stream: set
    ``steps_per_epoch``)::

        ds = pipeline.from_directory(root, batch_size=32, seed=None)
        ckpt_cb = pipeline.IteratorCheckpoint(ds.repeat(), "run/iterator",
                                              save_freq=100)
        initial_epoch = ckpt_cb.restore()   # 0 on a fresh start
        model.fit(ckpt_cb.batches(), steps_per_epoch=steps, epochs=10,
                  initial_epoch=initial_epoch,
                  callbacks=[ckpt_cb, keras.callbacks.BackupAndRestore("run/model")])

    In a custom loop: ``it = ckpt_cb.iterator``; ``next(it)``; ``ckpt_cb.save()``.
    Restore in a new process by building the same dataset (same arguments) and
    calling ``restore()`` before the first batch. ``batches()`` yields through
    Python (``from_generator`` inside Keras): it costs one copy per *batch*,
    never per element.

    Args:
        dataset: a ``tf.data.Dataset`` (``.repeat()`` it for ``model.fit``).
        directory: str, folder for the iterator checkpoints (created).
        save_freq: "epoch" (default) or an int: also save every that many
            batches.
        max_to_keep: int, checkpoints kept (default 2).

    Raises:
        NotCheckpointableError: the dataset's state cannot be checkpointed (see
            ``check_checkpointable``; Python generators, py_function, service).
        ValueError: ``save_freq`` is neither "epoch" nor a positive int.
    """

    def __init__(self, dataset: tf.data.Dataset, directory: str, save_freq="epoch",
                 max_to_keep: int = 2):
        super().__init__()
        if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(
                save_freq, int) or save_freq < 1):
            raise ValueError(
                f"`save_freq` must be 'epoch' or a positive int. Received: save_freq={save_freq!r}")
        check_checkpointable(dataset)
        self.dataset = dataset
        self.directory = str(directory)
        self.save_freq = save_freq
        self.iterator = iter(dataset)
        self._epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._ckpt = tf.train.Checkpoint(iterator=self.iterator, epoch=self._epoch)
        self.manager = tf.train.CheckpointManager(
            self._ckpt, self.directory, max_to_keep=max_to_keep, checkpoint_name="iterator")
        self._lock = threading.Lock()
        self._pending = collections.deque()   # pulled by Keras, not yet trained on
        self._batches_since_save = 0

    # --- iteration -------------------------------------------------------------
    def batches(self) -> Iterator:
        """Infinite generator of batches for ``model.fit`` (pending ones first)."""
        handed = 0
        while True:
            with self._lock:
                if handed < len(self._pending):
                    element = self._pending[handed]
                else:
                    try:
                        element = next(self.iterator)
                    except StopIteration:
                        return
                    self._pending.append(element)
                handed += 1
            yield element

    def _acknowledge(self, n=1):
        with self._lock:
            for _ in range(min(n, len(self._pending))):
                self._pending.popleft()

    # --- save / restore ----------------------------------------------------------
    def save(self) -> str:
        """Saves the iterator now; returns the checkpoint path prefix."""
        with self._lock:
            pending = list(self._pending)
            path = self.manager.save()
            arrays = {}
            for i, element in enumerate(pending):
                for j, a in enumerate(_flat_np(element)):
                    arrays[f"b{i}_{j}"] = a
            np.savez(path + ".pending.npz", count=np.int64(len(pending)), **arrays)
            # The manager deletes checkpoints past max_to_keep; their
            # .pending.npz files go with them.
            kept = {os.path.abspath(c) for c in self.manager.checkpoints}
            for old in glob.glob(os.path.join(glob.escape(self.directory),
                                                 "iterator-*.pending.npz")):
                if os.path.abspath(old[:-len(".pending.npz")]) not in kept:
                    os.remove(old)
        self._batches_since_save = 0
        logging.info("pipeline: saved iterator to %s (%d batch(es) pending)", path, len(pending))
        return path

    def restore(self, path: Optional[str] = None) -> int:
        """Restores ``path`` (default: the latest in ``directory``), if any.

        Call it before the first batch, on a fresh callback over the same
        dataset (same factory arguments).

        Returns:
            int, the epoch to resume from (pass as ``initial_epoch``); 0 when
            there was nothing to restore.
        """
        path = path or self.manager.latest_checkpoint
        if not path:
            return 0
        self._ckpt.restore(path).assert_consumed()
        pending_file = path + ".pending.npz"
        with self._lock:
            self._pending.clear()
            if os.path.exists(pending_file):
                with np.load(pending_file, allow_pickle=False) as z:
                    n_leaves = len(tf.nest.flatten(self.dataset.element_spec))
                    for i in range(int(z["count"])):
                        leaves = [tf.constant(z[f"b{i}_{j}"]) for j in range(n_leaves)]
                        self._pending.append(
                            tf.nest.pack_sequence_as(self.dataset.element_spec, leaves))
        logging.info("pipeline: restored iterator from %s (epoch %d, %d batch(es) pending)",
                     path, int(self._epoch.numpy()), len(self._pending))
        return int(self._epoch.numpy())

    # --- Keras hooks -------------------------------------------------------------
    def on_epoch_begin(self, epoch, logs=None):
        self._last_batch = -1

    def on_train_batch_end(self, batch, logs=None):
        # With steps_per_execution > 1 Keras calls this once per execution,
        # with `batch` = the last step index of it.
        last = getattr(self, "_last_batch", -1)
        self._acknowledge(max(1, batch - last))
        self._last_batch = batch
        if self.save_freq != "epoch":
            self._batches_since_save += 1
            if self._batches_since_save >= self.save_freq:
                self.save()

    def on_epoch_end(self, epoch, logs=None):
        self._epoch.assign(epoch + 1)
        self.save()
