"""Plan: the order of the stages, and of the elements, for every source.

``order`` is the one function that orders the stages of every dataset the
package builds (folders, path lists, manifests, TFRecords, ``.npy`` shards,
generators, the compat helpers): shard, then shuffle (the source's elements),
map, cache, guard, output structure, reshuffle and augment above a cache,
repeat, batch, dtype, prefetch; then cardinality, options, the tf.data
service and the device. So every element is delivered exactly once per epoch
across all input pipelines, whatever ``seed`` is, and a cache holds a
shuffled epoch. Every random stream drawn from ``seed`` (the epoch keys, the
per-element seeds) is drawn here (``_pairs``), and every op seed of a random
stage (the shuffles, the per-element seeds, sampling's streams) is derived
from ``seed`` or the epoch key by one function, ``op_seed``.

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
* After a cache (``order``'s ``shuffle_cached``): cached elements are
  reshuffled each epoch in a buffer of up to 1,024 elements; the cache
  itself holds a shuffled first epoch, so classes stored in order do not
  cluster.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, List, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

from pipeline import stack

AFTER_CACHE_BUFFER = 1024
# Up to this many rows, a shuffle buffer holds every row (an exact uniform
# permutation, filled in ~30 ms); beyond, the keyed permutation avoids filling
# a buffer of millions before the first element. index_shuffle's permutations
# are far from uniform on small domains (a 10-row table came back unshuffled
# for 1 key in 200), which is why it is not used there.
EXACT_SHUFFLE_ROWS = 100_000
graph_fn = tf.autograph.experimental.do_not_convert


def _pairs(seed, rerandomize: bool = True) -> tf.data.Dataset:
    """int64 [2] pairs drawn from ``seed``; a fresh stream each iteration (rerandomize)."""
    return tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=rerandomize).batch(
        2, drop_remainder=True)


# The streams of ``op_seed``: ORDER (the rows, the shard files, the reshuffle above a
# cache), RECORDS (the record buffer, sampling's draw between classes), ELEMENTS (the
# per-element seeds), and CLASS_STREAMS + c (sampling's stream of class c).
ORDER, RECORDS, ELEMENTS, CLASS_STREAMS = 0, 1, -1, 2
_GOLDEN = 0x9E3779B97F4A7C15  # 2**64 / the golden ratio: distinct odd multiples per class


def op_seed(seed: Optional[int], key=None, stream: int = ORDER):
    """The op seed of one random stream: the one derivation of every seed from ``seed``.

    Args:
        seed: the user's seed (int or None).
        key: None, or the epoch's int64 [2] key (``epoch_keys``).
        stream: ``ORDER``, ``RECORDS``, ``ELEMENTS`` or ``CLASS_STREAMS + c``.

    Returns:
        Without a key, ``seed`` itself (the op then draws anew from it each
        iteration). With the key: ``key[0]`` (ORDER), ``key[1]`` (RECORDS),
        ``key[0] XOR key[1]`` (ELEMENTS), ``key[0] XOR (0x9E3779B97F4A7C15 *
        (c + 1) mod 2**63)`` (class ``c``): int64 scalars, a function of the key
        alone.
    """
    if key is None:
        return seed
    if stream in (ORDER, RECORDS):
        return key[stream]
    if stream == ELEMENTS:
        return tf.bitwise.bitwise_xor(key[0], key[1])
    salt = _GOLDEN * (stream - CLASS_STREAMS + 1) % 2 ** 63
    return tf.bitwise.bitwise_xor(key[0], tf.constant(salt, tf.int64))


def epoch_keys(seed: Optional[int]) -> tf.data.Dataset:
    """One int64 [2] key per epoch (per iterator), drawn from ``seed``."""
    return _pairs(seed).take(1)


def element_seeds(seed: Optional[int], epoch_key=None) -> tf.data.Dataset:
    """Per-element stateless seeds [2] int64: a fresh, seeded stream each epoch.

    Zipped to the elements in epoch order, so an element's seed depends on
    (seed, epoch, position), never on thread timing. Given the epoch's int64
    [2] key (``epoch_keys``), the stream is a function of that key alone.
    """
    if epoch_key is not None:
        return _pairs(op_seed(seed, epoch_key, ELEMENTS), rerandomize=False)
    return _pairs(seed)


def augments_in_map(opts) -> bool:
    """Whether ``opts.augment`` runs in the parallel map (no cache), or above the cache."""
    return opts.augment is not None and opts.cache is None


def keyed_epoch(build: Callable[[tf.Tensor], tf.data.Dataset]) -> Callable[[tf.Tensor], tf.data.Dataset]:
    """``build(key)`` for ``epoch_keys().flat_map``, with the op seeds it draws
    from the key used as they are.

    ``shuffle`` and ``Dataset.random`` pair an op seed with the graph-level
    seed (``tf.random.set_seed``); with a global seed of 0 (what
    ``keras.utils.set_random_seed(0)`` sets) that pairing compares a tensor op
    seed to 0 in Python and raises ``OperatorNotAllowedInGraphError``. The
    epoch's function graph is given no graph-level seed while it is built, so
    its orders are a function of the key alone (the key stream itself still
    follows ``tf.random.set_seed``). Scoped: only the graph ``flat_map`` traces
    this function in (``tf.compat.v1.get_default_graph()`` there), its seed
    restored on the way out; nothing public scopes a seed more narrowly
    (``tf.random.set_seed`` is process-wide and resets the op-seed counter).
    """
    def fn(key):
        graph = tf.compat.v1.get_default_graph()
        saved, graph.seed = graph.seed, None
        try:
            return build(key)
        finally:
            graph.seed = saved
    return fn


def shuffle(ds, buffer_size: int, seed: Optional[int], key=None, stream: int = ORDER):
    """``ds.shuffle``: reshuffled each iteration from ``seed``, or, given an epoch key
    (int64 [2]), in the one order that key and ``stream`` give (``op_seed``),
    whatever process or iterator runs it."""
    return ds.shuffle(buffer_size, seed=op_seed(seed, key, stream),
                      reshuffle_each_iteration=key is None)


def rows(n: int, opts, key=None, labels=None,
         shares=None) -> Tuple[tf.data.Dataset, Optional[int]]:
    """This input pipeline's rows of an n-row table, sharded then shuffled
    (or, with ``shares``, resampled by class: ``sampled_rows``).

    Args:
        n: rows in the table.
        opts: the ``ImageOptions``.
        key: None (each iteration reshuffles from ``opts.seed``), or the
            epoch's int64 [2] key (``epoch_keys``): the order is a function
            of the key alone (what makes a restored iterator continue as an
            unbroken run).
        labels: int class index per row (with ``shares``).
        shares: None, or float [num_classes] class probabilities
            (``balance.sampling_shares``) for ``opts.sampling``.

    Returns:
        (dataset of int64 scalar rows, the number of rows per epoch, or None
        when the tf.data service decides the share).
    """
    k, i = opts.num_pipelines, opts.pipeline_id
    m = len(range(i, n, k))
    if k > 1 and n < k:
        logging.warning("pipeline: %d files < %d input pipelines: input pipeline %d gets %s",
                        n, k, i, "no elements" if m == 0 else "1 element")
    if shares is not None:
        if key is None:
            return epoch_keys(opts.seed).flat_map(graph_fn(
                lambda key: sampled_rows(n, opts, key, labels, shares))), m
        return sampled_rows(n, opts, key, labels, shares), m
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
            ds = shuffle(ds, m, opts.seed, key, ORDER)
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


def sampled_rows(n: int, opts, key, labels, shares) -> tf.data.Dataset:
    """One resampled epoch of this input pipeline's rows (``opts.sampling``).

    As many rows as the pipeline's share of the table, each drawn from class
    ``c`` with probability ``shares[c]`` (renormalized over the classes this
    share holds), out of per-class streams of that class's rows, each
    shuffled and repeated (every row of a class once before any repeats):
    ``tf.data.Dataset.sample_from_datasets``. Every seed comes from the
    epoch's int64 [2] ``key``, so an epoch is a function of the key alone.
    """
    import numpy as np  # pylint: disable=import-outside-toplevel
    k, i = opts.num_pipelines, opts.pipeline_id
    mine = np.arange(i, n, k, dtype=np.int64)
    lab = np.asarray(labels)[mine]
    streams, weights = [], []
    for c, share in enumerate(shares):
        rows_c = mine[lab == c]
        if share <= 0 or not len(rows_c):
            continue
        # Distinct stateless-style op seeds per class, all drawn from the epoch key.
        seed = op_seed(opts.seed, key, CLASS_STREAMS + c)
        streams.append(tf.data.Dataset.from_tensor_slices(rows_c).shuffle(
            len(rows_c), seed=seed, reshuffle_each_iteration=True).repeat())
        weights.append(float(share))
    if not streams:  # this pipeline's share holds no row of a drawn class
        return tf.data.Dataset.range(0)
    total = sum(weights)
    return tf.data.Dataset.sample_from_datasets(
        streams, weights=[w / total for w in weights], seed=op_seed(opts.seed, key, RECORDS),
        stop_on_empty_dataset=False).take(len(mine))


def record_files(files: Sequence[str], opts) -> Tuple[List[str], bool]:
    """The shards this input pipeline reads (``records``' sharding), and whether it
    reads them whole (by file) rather than every k-th record of all of them."""
    k, i = opts.num_pipelines, opts.pipeline_id
    if k == 1 or len(files) >= k:
        return list(files)[i::k], True
    return list(files), False


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
            ds = shuffle(ds, len(mine), opts.seed, key, ORDER)
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
        ds = shuffle(ds, max(1, min(expected, buffer_size)), opts.seed, key, RECORDS)
    if opts.service and opts.processing_mode != "off":
        expected = None
    return ds, expected


@dataclasses.dataclass(frozen=True)
class Map:
    """A map step of ``order``: ``fn`` on each element (or batch), ``parallelism``
    calls at once (None: one), ``deterministic`` as ``Dataset.map`` takes it."""
    fn: Callable
    parallelism: Optional[int] = None
    deterministic: Optional[bool] = None


def order(elements: Callable, *, seed: Optional[int] = None, keyed: bool = False,
          map: Optional[Map] = None, cache: Optional[str] = None,
          guard: Optional[Callable] = None, finish: Optional[Callable] = None,
          shuffle_cached: int = 0, augment: Optional[Map] = None, repeat: Optional[int] = 1,
          batch_size: Optional[int] = None, drop_remainder: bool = False,
          fixed_shape: bool = True, on_batches: Optional[Map] = None, prefetch: int = 0,
          known_length: bool = False, options: Optional[tf.data.Options] = None,
          service: Optional[Callable] = None, device: Optional[str] = None,
          ) -> tf.data.Dataset:
    """The one order of the stages, for every source: shard -> shuffle -> map ->
    cache -> guard -> finish -> reshuffle and augment (above a cache) -> repeat ->
    batch -> on_batches (dtype) -> prefetch; then cardinality -> options ->
    tf.data service -> device.

    Each source passes what differs (its elements, its maps, what it can
    cache); where each goes, and which steps merge, is decided here only.

    Args:
        elements: ``f(key) -> (dataset, n)``: one epoch's elements of this
            input pipeline, sharded then shuffled (``rows``, ``records``, or
            the source's own plan), and their number (None when unknown). The
            key is None, or with ``keyed`` the epoch's int64 [2] key.
        seed: int or None: the epoch keys, the after-cache reshuffle and
            augment seeds are drawn from it.
        keyed: the source draws every order and seed from one key per epoch
            (``epoch_keys``); the epoch is then built inside a ``flat_map``
            over the keys, so an iterator checkpoint holds the key stream.
            With a cache, the cache is built once and only what is above it
            (reshuffle, augment) is built per key, whatever ``keyed`` says; the
            tf.data service keeps the direct form.
        map: the per-element work (read, decode, resize, augment).
        cache: None, "" (memory) or a file prefix: decoded elements cached
            after ``map``, before ``guard``.
        guard: ``f(dataset, batch_size, n) -> dataset``: the on_error policy;
            a failed ``map`` element is a gap it names. ``batch_size`` is the
            user's batch size when the guard checks the user's batches, else
            None (it checks chunks and unbatches them).
        finish: ``f(dataset, with_dtype) -> dataset``: the output structure;
            with ``with_dtype`` it applies ``on_batches`` itself (one map fewer).
        shuffle_cached: elements per epoch reshuffled above a cache (0: none).
        augment: random ops run above a cache, fresh each epoch: ``fn(element,
            seed)`` (without a cache they run in ``map``: ``augments_in_map``).
        repeat: epochs (None: forever), before batching.
        batch_size, drop_remainder: as ``Dataset.batch`` (None: unbatched).
        fixed_shape: elements have one shape (can be batched by the guard).
        on_batches: the map on batches (dtype conversion, or decoding whole
            batches).
        prefetch: batches prefetched (0: none); also ``device``'s buffer.
        known_length: every element arrives or the epoch raises: the length
            is asserted (``len(ds)`` works).
        options: ``tf.data.Options`` for the whole dataset.
        service: ``f(dataset) -> dataset``: hands it to the tf.data service.
        device: a device to prefetch to (last stage), or None.

    Returns:
        The ``tf.data.Dataset``.
    """
    steps = _Steps(elements, seed, map, cache, guard, finish, shuffle_cached, augment, repeat,
                   batch_size, drop_remainder, fixed_shape, on_batches, prefetch)
    random_above_cache = cache is not None and bool(shuffle_cached or augment)
    if service is not None or not (keyed or random_above_cache):
        ds = steps.above(*steps.below(None), None)
    elif cache is None:  # the whole epoch built from its key
        ds = stack.flat_map_on_its_device(epoch_keys(seed), graph_fn(keyed_epoch(steps.epoch)))
    else:  # the cache built once; what is above it from each epoch's key
        above_cached = functools.partial(steps.above, *steps.below(None))
        ds = stack.flat_map_on_its_device(epoch_keys(seed), graph_fn(keyed_epoch(above_cached)))
    if known_length and service is None:
        ds = _assert_length(ds, steps.lengths[0], batch_size, drop_remainder)
    ds = ds.with_options(options) if options is not None else ds
    ds = service(ds) if service is not None else ds
    if device:  # must be the last stage; one device, no strategy
        ds = ds.apply(tf.data.experimental.prefetch_to_device(device, max(prefetch, 1)))
    return ds


@dataclasses.dataclass
class _Steps:
    """``order``'s steps below the cache (``below``) and above it (``above``), in order."""
    elements: Callable
    seed: Optional[int]
    map: Optional[Map]
    cache: Optional[str]
    guard: Optional[Callable]
    finish: Optional[Callable]
    shuffle_cached: int
    augment: Optional[Map]
    repeat: Optional[int]
    batch_size: Optional[int]
    drop_remainder: bool
    fixed_shape: bool
    on_batches: Optional[Map]
    prefetch: int
    lengths: List[Optional[int]] = dataclasses.field(default_factory=list)

    @property
    def at_guard(self) -> bool:
        """The guard checks the user's batches (it batches them itself)."""
        return (self.guard is not None and self.batch_size is not None and self.fixed_shape
                and self.cache is None and not self.drop_remainder)

    @property
    def dtype_in_finish(self) -> bool:
        """``finish`` applies ``on_batches`` itself (one map fewer)."""
        return (self.on_batches is not None and self.finish is not None and self.cache is None
                and (self.batch_size is None or self.at_guard))

    def below(self, key):
        ds, n = self.elements(key)                                 # shard, then shuffle
        ds = _map(ds, self.map)                                    # read, decode, augment
        ds = ds.ignore_errors() if self.guard is not None else ds  # a failure: a gap
        ds = _cache(ds, self.cache)                                # decoded, before the guard
        if self.guard:
            ds = self.guard(ds, self.batch_size if self.at_guard else None, n)
        ds = self.finish(ds, self.dtype_in_finish) if self.finish else ds  # output structure
        self.lengths.append(n)
        return ds, n

    def above(self, ds, n, key):
        ds = _above_cache(ds, self.cache, self.shuffle_cached, self.augment, self.seed, key)
        ds = ds.repeat(self.repeat) if self.repeat != 1 else ds
        ds = _batch(ds, None if self.at_guard else self.batch_size, self.drop_remainder, n)
        ds = ds if self.dtype_in_finish else _map(ds, self.on_batches)  # dtype
        return ds.prefetch(self.prefetch) if self.prefetch else ds

    def epoch(self, key):
        """The whole epoch built from its key."""
        return self.above(*self.below(key), key)


def _map(ds, step: Optional[Map]):
    if step is None:
        return ds
    return stack.map_on_its_device(ds, graph_fn(step.fn), step.parallelism, step.deterministic)


def _cache(ds, cache):
    """The cache sits between the map and the guard: it holds decoded elements with
    their positions and reasons (a file whose decoder raised is a gap), so its input
    never errors and it always completes (TensorFlow completes a memory cache with
    what it has when its input raises), and the guard runs after it every epoch: a
    bad file is raised, or skipped and recorded, in every epoch."""
    return ds if cache is None else ds.cache(cache)


def _above_cache(ds, cache, n: int, augment: Optional[Map], seed, key=None):
    """Above a cache: reshuffled each epoch in a buffer of up to 1,024 (the cache
    holds a shuffled first epoch), then augmented with fresh seeds each epoch;
    given the epoch's key (int64 [2]), both are a function of that key alone, so
    an iterator restored at any step, an epoch's first included, continues as
    the unbroken run."""
    if cache is None:
        return ds
    if n:
        ds = shuffle(ds, max(1, min(n, AFTER_CACHE_BUFFER)), seed, key, ORDER)
    if augment is not None:
        ds = _map(tf.data.Dataset.zip(ds, element_seeds(seed, key)), augment)
    return ds


def _batch(ds, batch_size, drop_remainder, n):
    if batch_size is None:
        return ds
    if drop_remainder and n is not None and 0 < n < batch_size:
        logging.warning(
            "pipeline: drop_remainder=True with batch_size=%d and %d element(s) per epoch "
            "here: every epoch is empty (the one short batch is dropped). Use a smaller "
            "batch_size or drop_remainder=False.", batch_size, n)
    return ds.batch(batch_size, drop_remainder=drop_remainder)


def _assert_length(ds, n, batch_size, drop_remainder):
    """Every element arrives or the epoch raises: the length is known, so len(ds)
    works and Keras knows the steps per epoch."""
    if n is None:
        return ds
    count = n
    if batch_size is not None:
        count = n // batch_size if drop_remainder else -(-n // batch_size)
    return ds.apply(tf.data.experimental.assert_cardinality(count))
