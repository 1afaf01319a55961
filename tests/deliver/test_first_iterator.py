"""A built dataset asks tf.data for no graph rewrite at its first iterator, and each
parallel stage carries its own order guarantee.

tf.data rewrites a dataset's graph when its iterator is made if any optimization is on:
the static defaults, or ``make_sloppy``, which ``Options.deterministic = False`` turns on.
The rewrite serializes the whole graph (the decode functions included) and runs Grappler
over it: 0.5-0.7 CPU-s for each new dataset, measured, the whole first epoch of a small
folder. So the options leave ``deterministic`` unset and every parallel map and
interleave says ``deterministic`` itself.
"""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

import pipeline
from conftest import solid


def _parallel_orders(ds):
    """The ``deterministic`` attribute of every parallel dataset op in ``ds``'s graph,
    the functions' ops (the per-epoch pipeline inside ``flat_map``) included."""
    g = graph_pb2.GraphDef()
    g.ParseFromString(ds._as_serialized_graph(
        external_state_policy=tf.data.experimental.ExternalStatePolicy.IGNORE).numpy())
    nodes = list(g.node) + [n for f in g.library.function for n in f.node_def]
    return [(n.op, n.attr["deterministic"].s.decode()) for n in nodes
            if n.op.startswith("Parallel") and "deterministic" in n.attr]


def _no_rewrite(ds):
    o = ds.options()
    assert o.deterministic is None
    assert o.experimental_optimization.apply_default_optimizations is False
    assert o.experimental_slack is None


@pytest.mark.parametrize("kw", [dict(), dict(seed=3), dict(deterministic=False, seed=3),
                                dict(shuffle=False), dict(cache="memory")])
def test_folder_datasets_ask_for_no_rewrite_and_their_stages_say_their_order(tmp_path, kw):
    for c in ("x", "y"):
        for i in range(3):
            solid(str(tmp_path / "d" / c / f"{i}.png"), i)
    ds = pipeline.from_directory(str(tmp_path / "d"), image_size=(4, 4), batch_size=2, **kw)
    _no_rewrite(ds)
    orders = _parallel_orders(ds)
    assert orders, "the decode stage is a parallel map"
    assert all(v in ("true", "false") for _, v in orders), orders
    assert sum(len(y) for _, y in ds) == 6


@pytest.mark.parametrize("deterministic", [False, True])
def test_npy_shards_ask_for_no_rewrite_and_their_stages_say_their_order(tmp_path,
                                                                        deterministic):
    for k in range(2):
        np.save(tmp_path / f"x{k}.npy", np.arange(6, dtype=np.float32).reshape(3, 2) + 10 * k)
        np.save(tmp_path / f"y{k}.npy", np.arange(3, dtype=np.int64) + 3 * k)
    ds = pipeline.from_npy_shards(str(tmp_path / "x*.npy"), str(tmp_path / "y*.npy"),
                                  batch_size=2, seed=1, deterministic=deterministic,
                                  num_parallel_calls=2)
    _no_rewrite(ds)
    want = "true" if deterministic else "false"
    orders = _parallel_orders(ds)
    assert {op for op, _ in orders} == {"ParallelInterleaveDatasetV4", "ParallelMapDatasetV2"}
    assert all(v == want for _, v in orders), orders
    assert sorted(int(v) for _, y in ds for v in y) == list(range(6))
