"""tf.distribute: input-context sharding and MirroredStrategy, exactly once per epoch."""

import textwrap

import pytest
import tensorflow as tf

import pipeline
from tests._scale_helpers import last_json, make_images, run_py

N = 21


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return make_images(tmp_path_factory.mktemp("imgs"), N)


def _values(ds):
    return [int(v) for x, _ in ds for v in x[:, 0, 0, 0].numpy()]


@pytest.mark.parametrize("pipelines", [3])
def test_input_context_shards_are_disjoint_and_complete(root, pipelines):
    union = []
    for k in range(pipelines):
        ctx = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=k,
                                         num_replicas_in_sync=pipelines)
        ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=2 * pipelines,
                                     shuffle=True, input_context=ctx)
        assert ds.element_spec[0].shape[0] is None
        first = next(iter(ds))[0]
        assert first.shape[0] == 2  # per-replica batch
        got = _values(ds)
        assert len(got) == len(set(got))
        union += got
    assert sorted(union) == list(range(N))


def test_fewer_files_than_pipelines_is_element_sharded(tmp_path):
    root = make_images(tmp_path, 2, classes=2)
    union, sizes = [], []
    for k in range(3):
        ctx = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=k)
        ds = pipeline.from_directory(root, image_size=(8, 8), batch_size=None,
                                     input_context=ctx)
        got = [int(x[0, 0, 0]) for x, _ in ds]
        sizes.append(len(got))
        union += got
    assert sorted(union) == [0, 1] and sizes == [1, 1, 0]


def test_distribute_dataset_argument_errors(root):
    strategy = tf.distribute.get_strategy()
    with pytest.raises(ValueError, match="input_context"):
        pipeline.distribute_dataset(strategy, pipeline.from_directory, root, input_context=1)
    with pytest.raises(ValueError, match="factory"):
        pipeline.distribute_dataset(strategy, lambda root: None, root)


_MIRRORED = textwrap.dedent("""
    import json, os, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import pipeline
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    dist = pipeline.distribute_dataset(strategy, pipeline.from_directory, {root!r},
                                       image_size=(8, 8), batch_size=4, shuffle=True)
    epochs = []
    for _ in range(2):
        per_replica = [[], []]
        for x, y in dist:
            for r, t in enumerate(strategy.experimental_local_results(x)):
                per_replica[r] += [int(v) for v in t[:, 0, 0, 0].numpy()]
        epochs.append(per_replica)
    print(json.dumps({{"replicas": strategy.num_replicas_in_sync, "epochs": epochs}}))
    sys.stdout.flush(); os._exit(0)
""")


def test_mirrored_strategy_two_logical_cpus_exactly_once(root):
    r = run_py(_MIRRORED.format(root=root))
    assert r.returncode == 0, r.stderr[-3000:]
    got = last_json(r.stdout)
    assert got["replicas"] == 2
    for per_replica in got["epochs"]:
        assert per_replica[0] and per_replica[1]        # both replicas got data
        assert sorted(per_replica[0] + per_replica[1]) == list(range(N))
