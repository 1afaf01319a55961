"""tf.distribute: input-context sharding and MirroredStrategy, exactly once per epoch."""

import socket
import textwrap

import pytest
import tensorflow as tf

import pipeline
from tests._scale_helpers import last_json, make_images, run_py

# Keras and TensorFlow APIs that change between versions: the result can differ by TensorFlow stack (setup.cfg: stack).
pytestmark = pytest.mark.stack

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


# A child process with two logical CPUs and a MirroredStrategy over them.
_TWO_CPUS = textwrap.dedent("""
    import json, os, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import pipeline
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
""")

_MIRRORED = _TWO_CPUS + textwrap.dedent("""
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


def test_run_worker_and_run_dispatcher_check_their_arguments_before_a_server_starts():
    """The command line refused a bad address or port before TensorFlow loaded; a library
    user's `run_worker("nohost")` reached TensorFlow (or waited for the dispatcher)."""
    from pipeline.deliver import service_args
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    cases = [
        (lambda: pipeline.run_worker("nohost", port=port, load_tfio=False, block=False),
         "`dispatcher_address` must be HOST:PORT with a port 1-65535 (e.g. localhost:5050); "
         "'nohost' is not. Received: dispatcher_address=nohost"),
        (lambda: pipeline.run_worker("localhost:5050", port=port, heartbeat_interval_ms=0,
                                     load_tfio=False, block=False),
         "`heartbeat_interval_ms` must be > 0. Received: heartbeat_interval_ms=0"),
        (lambda: pipeline.run_dispatcher(port=port, worker_addresses=["nohost"],
                                         load_tfio=False, block=False),
         "`worker_addresses` (each of them) must be HOST:PORT with a port 1-65535 (e.g. "
         "localhost:5050); 'nohost' is not. Received: worker_addresses=['nohost']"),
        (lambda: pipeline.run_dispatcher(port=port, fault_tolerant_mode=True, load_tfio=False,
                                         block=False),
         "`fault_tolerant_mode` needs `work_dir` (the folder where the dispatcher journals its "
         "state). Received: fault_tolerant_mode=True, work_dir=None"),
        (lambda: pipeline.run_dispatcher(port=70000, load_tfio=False, block=False),
         "`port` must be 0-65535. Received: port=70000"),
    ]
    for start, says in cases:
        with pytest.raises(ValueError) as e:
            start()
        assert str(e.value) == says
        service_args.claim_port(port).close()  # no server took the port


@pytest.fixture(scope="module")
def root_with_bad(tmp_path_factory):
    """N good images and two bad files (a text file, a cut PNG)."""
    r = make_images(tmp_path_factory.mktemp("bad"), N)
    with open(f"{r}/c0/zz_text.png", "wb") as f:
        f.write(b"not an image")
    with open(f"{r}/c1/zz_cut.png", "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + b"\x00" * 30)
    return r


def test_errors_of_a_distributed_dataset_list_the_skipped_files(root_with_bad):
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    dist = pipeline.distribute_dataset(strategy, pipeline.from_directory, root_with_bad,
                                       image_size=(8, 8), batch_size=4, shuffle=False,
                                       on_error="skip")
    assert pipeline.errors(dist) == []
    got = sorted(int(v) for x, _ in dist for v in x[:, 0, 0, 0].numpy())
    assert got == list(range(N))
    recs = pipeline.errors(dist)
    assert sorted(r.path.rsplit("/", 1)[1] for r in recs) == ["zz_cut.png", "zz_text.png"]
    list(dist)  # a second epoch: each file once
    assert len(pipeline.errors(dist)) == 2


_MIRRORED_ERRORS = _TWO_CPUS + textwrap.dedent("""
    dist = pipeline.distribute_dataset(strategy, pipeline.from_directory, {root!r},
                                       image_size=(8, 8), batch_size=4, on_error="skip")
    n = 0
    for x, y in dist:
        n += sum(int(t.shape[0]) for t in strategy.experimental_local_results(x))
    print(json.dumps({{"n": n, "errors": sorted(r.path for r in pipeline.errors(dist))}}))
    sys.stdout.flush(); os._exit(0)
""")


# Slow tier (a process of some 20 s): the default tier's cheap check is the distributed
# dataset's errors above (OneDeviceStrategy, in process), on both stacks.
@pytest.mark.slow
@pytest.mark.sweep
def test_errors_of_a_mirrored_dataset_list_the_skipped_files(root_with_bad):
    r = run_py(_MIRRORED_ERRORS.format(root=root_with_bad))
    assert r.returncode == 0, r.stderr[-3000:]
    got = last_json(r.stdout)
    assert got["n"] == N
    assert sorted(p.rsplit("/", 1)[1] for p in got["errors"]) == ["zz_cut.png", "zz_text.png"]
