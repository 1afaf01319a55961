"""Any Python generator as a ``tf.data.Dataset``: the slow, compatible path.

Elements are produced by Python (``tf.data.Dataset.from_generator``, i.e. a
``py_function`` under the hood), so throughput is bound by the GIL and the
dataset cannot run on tf.data service workers or be checkpointed mid-epoch.
Prefer ``from_directory`` / ``from_manifest`` / ``from_npy_shards`` /
``from_tfrecords`` when the data is files.
"""

from __future__ import annotations

import inspect
from typing import Optional

import numpy as np
import tensorflow as tf

from pipeline import checks
from pipeline import config
from pipeline.deliver import plan


def _arity(fn) -> int:
    """0 when ``fn`` takes no arguments, 2 when it takes (shard_index, num_shards)."""
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is p.empty]
        varargs = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature
        return 0
    if len(params) >= 2 or varargs:
        return 2
    if len(params) == 0:
        return 0
    raise ValueError("`fn` must take no arguments or (shard_index, num_shards). "
                     f"Received: fn={fn!r} with parameters {[p.name for p in params]}")


def _checker(output_signature):
    """Validates one element against the signature; the error names index and spec."""
    flat_specs = tf.nest.flatten(output_signature)

    def check(element, index, shard):
        where = f"pipeline.from_generator: element {index}" + (
            f" of shard {shard}" if shard is not None else "")
        try:
            tf.nest.assert_same_structure(output_signature, element, check_types=False)
        except (ValueError, TypeError):
            raise TypeError(f"{where} has structure {_describe(element)}, expected "
                            f"{output_signature}") from None
        out = []
        for value, spec in zip(tf.nest.flatten(element), flat_specs):
            want = spec.dtype.as_numpy_dtype
            arr = np.asarray(value)
            if spec.dtype == tf.string:
                ok = arr.dtype.kind in "SUO"
            elif arr.dtype.kind in "SUO":
                ok = False
            else:
                ok = arr.dtype == want or np.can_cast(arr.dtype, want, "same_kind")
            if not ok:
                raise TypeError(f"{where}: dtype {arr.dtype} cannot be {spec.dtype.name}; "
                                f"expected {spec}")
            if not spec.shape.is_compatible_with(arr.shape):
                raise ValueError(f"{where}: shape {arr.shape} does not match {spec.shape}; "
                                 f"expected {spec}")
            out.append(arr if spec.dtype == tf.string else arr.astype(want, copy=False))
        return tf.nest.pack_sequence_as(output_signature, out)
    return check


def _describe(element):
    if isinstance(element, (tuple, list)):
        return type(element).__name__ + "(" + ", ".join(_describe(e) for e in element) + ")"
    if isinstance(element, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in element.items()) + "}"
    a = np.asarray(element)
    return f"array{a.shape} {a.dtype}"


@checks.known_keywords()
def from_generator(fn, output_signature, num_parallel: int = 1,
                   batch_size: Optional[int] = None, shuffle_buffer_size: int = 0,
                   seed: Optional[int] = None, prefetch: int = 2,
                   check: bool = True, drop_remainder: bool = False) -> tf.data.Dataset:
    """Streams a Python generator (SLOW / compatibility path: runs in Python).

    Wraps ``tf.data.Dataset.from_generator``, which calls Python for every
    element (a ``py_function``): the GIL bounds throughput, and the dataset
    cannot be used with tf.data service or iterator checkpoints. Use it to move
    existing generator code (e.g. Keras ``fit_generator`` generators yielding
    ``(x_batch, y_batch)``) onto ``tf.data``; prefer the file factories.

    Parallelism: ``num_parallel`` instances of the generator run interleaved;
    instance ``k`` is made by ``fn(k, num_parallel)`` and should yield its
    ``k``-th share of the data, so every element comes exactly once.

    Args:
        fn: callable returning an iterable; either ``fn()`` or
            ``fn(shard_index, num_shards)`` (needed when ``num_parallel > 1``).
        output_signature: nested ``tf.TensorSpec`` of one element, e.g.
            ``(tf.TensorSpec([None, 28, 28], tf.float32), tf.TensorSpec([None], tf.int64))``
            for a generator of batches.
        num_parallel: int >= 1, generator instances interleaved.
        batch_size: None (default: elements as yielded, e.g. already batches)
            or an int to batch them.
        shuffle_buffer_size: int >= 0, elements held for shuffling (0: off).
        seed: int in [0, 2**63) or None, for the shuffle.
        prefetch: int >= 0, elements (batches) prefetched.
        check: bool; each element's structure, shape and dtype are checked
            against ``output_signature`` (Python ints/floats are cast, e.g.
            float64 -> float32, as ``same_kind`` casting allows).
        drop_remainder: bool, with ``batch_size``.

    Returns:
        ``tf.data.Dataset`` whose elements match ``output_signature``
        (batched when ``batch_size`` is set). A generator that never ends gives
        an infinite dataset: pass ``steps_per_epoch`` to Keras ``fit``.

    Raises:
        TypeError: an unknown keyword argument (the message names it and the
            closest valid name).
        ValueError: a bad argument (named, with the value received).
        tf.errors.InvalidArgumentError: while iterating, an element of the
            wrong structure, shape or dtype; the message names the element
            index (and shard) and the expected spec.
    """
    if not callable(fn):
        raise ValueError(f"`fn` must be callable. Received: fn={fn!r}")
    num_parallel = checks.check_int("num_parallel", num_parallel)
    batch_size = checks.check_int("batch_size", batch_size, allow_none=True)
    shuffle_buffer_size = checks.check_int("shuffle_buffer_size", shuffle_buffer_size,
                                                minimum=0)
    prefetch = checks.check_int("prefetch", prefetch, minimum=0)
    # the image factories' order group: its seed check and its determinism
    order = config.OrderOptions(shuffle=bool(shuffle_buffer_size), seed=seed)
    try:
        tf.nest.map_structure(lambda s: s if isinstance(s, tf.TensorSpec) else 1 / 0,
                              output_signature)
    except (ZeroDivisionError, TypeError):
        raise ValueError("`output_signature` must be a nested structure of tf.TensorSpec. "
                         f"Received: output_signature={output_signature!r}") from None
    arity = _arity(fn)
    if arity == 0 and num_parallel > 1:
        raise ValueError("`num_parallel` > 1 needs `fn(shard_index, num_shards)` so that each "
                         "instance yields its own share. "
                         f"Received: num_parallel={num_parallel}, fn={fn!r}")
    source = _Instances(fn, arity, output_signature, num_parallel,
                        _checker(output_signature) if check else None, order,
                        shuffle_buffer_size)
    return plan.order(source.elements, batch_size=batch_size, drop_remainder=drop_remainder,
                      prefetch=prefetch)


class _Instances:
    """``num_parallel`` instances of the generator, interleaved (one element of each in
    turn), then shuffled (``elements``)."""

    def __init__(self, fn, arity, output_signature, num_parallel, checker, order, buffer):
        self.fn, self.arity, self.output_signature = fn, arity, output_signature
        self.num_parallel, self.checker, self.order, self.buffer = (
            num_parallel, checker, order, buffer)

    def gen(self, shard, num_shards):
        shard, num_shards = int(shard), int(num_shards)
        it = self.fn(shard, num_shards) if self.arity == 2 else self.fn()
        checker, where = self.checker, shard if self.num_parallel > 1 else None
        for i, element in enumerate(it):
            yield checker(element, i, where) if checker else element

    def instance(self, k):
        return tf.data.Dataset.from_generator(self.gen, output_signature=self.output_signature,
                                              args=(k, self.num_parallel))

    def elements(self, _):
        """The instances interleaved (one element of each in turn), then shuffled."""
        n = self.num_parallel
        if n == 1:
            ds = self.instance(tf.constant(0, tf.int64))
        else:
            # ordered with a seed; without one, as the dataset's options say
            ds = tf.data.Dataset.range(n).interleave(
                self.instance, cycle_length=n, block_length=1, num_parallel_calls=n,
                deterministic=self.order.seed is not None or None)
        if self.buffer:
            ds = plan.shuffle(ds, self.buffer, self.order.seed)
        return ds, None
