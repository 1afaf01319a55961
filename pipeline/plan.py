"""Plan: the only place that orders elements, for every source.

The order of operations is always: shard (``input_context``, or the tf.data
service's file sharding), then shuffle, then (in ``pipeline.assemble``) cache
and repeat. So every element is delivered exactly once per epoch across all
input pipelines, whatever ``seed`` is, and a cache holds a shuffled epoch.

* Rows of a path table (folders, path lists, manifests): the rows of this
  pipeline's shard are permuted anew each epoch: up to ``EXACT_SHUFFLE_ROWS``
  rows (and always under the tf.data service) by a shuffle buffer holding
  every row, an exact uniform permutation; beyond, by
  ``tf.random.experimental.index_shuffle``, a keyed pseudorandom permutation
  with no buffer to fill, so the first element comes at once even for
  millions of files. Its key is drawn per epoch from ``Dataset.random(seed,
  rerandomize_each_iteration=True)``. The same seed gives the same orders,
  epoch after epoch.
* Records of TFRecord shards: with at least as many shards as input
  pipelines, each pipeline reads whole shards (shard order reshuffled each
  epoch); with fewer shards, every pipeline reads all shards in the same
  fixed, deterministic order and keeps every k-th record (shuffling the shard
  order per pipeline before an element shard would lose and duplicate
  records when ``seed`` is None). Records are then shuffled in a buffer.
* After a cache (``after_cache``): cached elements are reshuffled each epoch
  in a buffer of up to 1,024 elements; the cache itself holds a shuffled
  first epoch, so classes stored in order do not cluster.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

AFTER_CACHE_BUFFER = 1024
# Up to this many rows, a shuffle buffer holds every row (an exact uniform
# permutation, filled in ~30 ms); beyond, the keyed permutation avoids filling
# a buffer of millions before the first element. index_shuffle's permutations
# are far from uniform on small domains (a 10-row table came back unshuffled
# for 1 key in 200), which is why it is not used there.
EXACT_SHUFFLE_ROWS = 100_000
graph_fn = tf.autograph.experimental.do_not_convert


def epoch_keys(seed: Optional[int]) -> tf.data.Dataset:
    """One int64 [2] key per epoch (per iterator), drawn from ``seed``."""
    return tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(
        2, drop_remainder=True).take(1)


def keyed(build: Callable[[tf.Tensor], tf.data.Dataset]) -> Callable[[tf.Tensor], tf.data.Dataset]:
    """``build(key)`` for ``epoch_keys().flat_map``, with the op seeds it draws
    from the key used as they are.

    ``shuffle`` and ``Dataset.random`` pair an op seed with the graph-level
    seed (``tf.random.set_seed``); with a global seed of 0 (what
    ``keras.utils.set_random_seed(0)`` sets) that pairing compares a tensor op
    seed to 0 in Python and raises ``OperatorNotAllowedInGraphError``. The
    epoch's function graph is given no graph-level seed while it is built, so
    its orders are a function of the key alone (the key stream itself still
    follows ``tf.random.set_seed``).
    """
    def fn(key):
        graph = tf.compat.v1.get_default_graph()
        saved, graph.seed = graph.seed, None
        try:
            return build(key)
        finally:
            graph.seed = saved
    return fn


def _shuffle(ds, buffer_size, opts, key, which: int):
    """``ds.shuffle``: reshuffled each iteration from ``opts.seed``, or, given an
    epoch key (int64 [2]), in the one order that key and ``which`` (0 or 1)
    give, whatever process or iterator runs it."""
    if key is None:
        return ds.shuffle(buffer_size, seed=opts.seed, reshuffle_each_iteration=True)
    return ds.shuffle(buffer_size, seed=key[which], reshuffle_each_iteration=False)


def rows(n: int, opts, key=None) -> Tuple[tf.data.Dataset, Optional[int]]:
    """This input pipeline's rows of an n-row table, sharded then shuffled.

    Args:
        n: rows in the table.
        opts: the ``ImageOptions``.
        key: None (each iteration reshuffles from ``opts.seed``), or the
            epoch's int64 [2] key (``epoch_keys``): the order is a function
            of the key alone (what makes a restored iterator continue as an
            unbroken run).

    Returns:
        (dataset of int64 scalar rows, the number of rows per epoch, or None
        when the tf.data service decides the share).
    """
    k, i = opts.num_pipelines, opts.pipeline_id
    m = len(range(i, n, k))
    if k > 1 and n < k:
        logging.warning("pipeline: %d files < %d input pipelines: input pipeline %d gets %s",
                        n, k, i, "no elements" if m == 0 else "1 element")
    ds = tf.data.Dataset.range(i, n, k)
    expected = m
    if opts.service and opts.processing_mode == "file":
        # tf.data service "file" mode = ShardingPolicy.HINT: the dispatcher fills in
        # (num_workers, worker_index); sharded before the shuffle, as every shard.
        ds = ds.shard(tf.data.experimental.SHARD_HINT, tf.data.experimental.SHARD_HINT)
    if opts.shuffle and m > 1:
        if m <= EXACT_SHUFFLE_ROWS or opts.service:
            # A uniform shuffle of all the rows (8 bytes each); its source stays
            # splittable for the tf.data service's dynamic sharding.
            ds = _shuffle(ds, m, opts, key, 0)
        else:
            def permuted(key):
                return tf.data.Dataset.range(m).map(graph_fn(
                    lambda j: i + k * tf.random.experimental.index_shuffle(j, key, m - 1)))
            if key is None:
                ds = epoch_keys(opts.seed).flat_map(graph_fn(permuted))
            else:
                ds = permuted(key)
    if opts.service and opts.processing_mode != "off":
        expected = None  # the service splits the plan between its workers
    return ds, expected


def records(files: Sequence[str], counts: Sequence[int], opts, reader: Callable,
            buffer_size: int, key=None) -> Tuple[tf.data.Dataset, Optional[int]]:
    """This input pipeline's records of TFRecord shards, sharded then shuffled.

    Args:
        files: shard files, in their sorted order.
        counts: records per shard.
        reader: ``f(file) -> Dataset`` of serialized records.
        buffer_size: encoded records held for shuffling.
        key: None or the epoch's key, as for ``rows``.

    Returns:
        (dataset of serialized records, records per epoch or None when the
        tf.data service decides the share).
    """
    k, i = opts.num_pipelines, opts.pipeline_id
    n = sum(counts)
    by_file = k == 1 or len(files) >= k
    ds = tf.data.Dataset.from_tensor_slices(list(files))
    if by_file:
        mine = list(range(i, len(files), k))
        expected = sum(counts[j] for j in mine)
        if k > 1:
            ds = ds.shard(k, i)
        if opts.shuffle and len(mine) > 1:
            ds = _shuffle(ds, len(mine), opts, key, 0)
    else:
        expected = len(range(i, n, k))
        logging.info("pipeline: %d shards < %d input pipelines: every pipeline reads all "
                     "shards in the same order and keeps every %d-th record", len(files), k, k)
    if opts.service and opts.processing_mode == "file":
        ds = ds.shard(tf.data.experimental.SHARD_HINT, tf.data.experimental.SHARD_HINT)
    cycle = len(files) if len(files) <= 64 else 16
    # Element sharding needs the same record order in every pipeline.
    det = True if not by_file else opts.is_deterministic
    ds = ds.interleave(reader, cycle_length=cycle, block_length=1,
                       num_parallel_calls=min(cycle, opts.parallelism), deterministic=det)
    if not by_file:
        ds = ds.shard(k, i)
    if opts.shuffle:
        ds = _shuffle(ds, max(1, min(expected, buffer_size)), opts, key, 1)
    if opts.service and opts.processing_mode != "off":
        expected = None
    return ds, expected


def after_cache(ds: tf.data.Dataset, n: int, opts) -> tf.data.Dataset:
    """Cached elements reshuffled each epoch (in a buffer of up to 1,024)."""
    if not opts.shuffle:
        return ds
    return ds.shuffle(max(1, min(n, AFTER_CACHE_BUFFER)), seed=opts.seed,
                      reshuffle_each_iteration=True)
