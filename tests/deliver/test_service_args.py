"""pipeline.deliver.service_args: the tf.data service servers' argument checks, without TensorFlow."""

import os
import socket
import subprocess
import sys

import pytest

from pipeline.deliver import service_args

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_importing_the_checks_loads_no_tensorflow():
    code = ("import sys; from pipeline import checks; from pipeline.deliver import service_args; "
            "from pipeline.tools.bench import bench; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


@pytest.mark.parametrize("kw, says", [
    (dict(port=70000), "`port` must be 0-65535. Received: port=70000"),
    (dict(port=-1), "`port` must be 0-65535. Received: port=-1"),
    (dict(port=True), "`port` must be 0-65535. Received: port=True"),
    (dict(worker_timeout_ms=0), "`worker_timeout_ms` must be > 0. Received: worker_timeout_ms=0"),
    (dict(fault_tolerant_mode=True),
     "`fault_tolerant_mode` needs `work_dir` (the folder where the dispatcher journals its "
     "state). Received: fault_tolerant_mode=True, work_dir=None"),
    (dict(worker_addresses=["localhost:5051", "nohost"]),
     "`worker_addresses` (each of them) must be HOST:PORT with a port 1-65535 (e.g. "
     "localhost:5050); 'nohost' is not. Received: worker_addresses=['localhost:5051', 'nohost']"),
])
def test_dispatcher_arguments_are_refused_by_name(kw, says):
    with pytest.raises(ValueError) as e:
        service_args.check_dispatcher(**kw)
    assert str(e.value) == says


@pytest.mark.parametrize("kw, says", [
    (dict(dispatcher_address="nohost"),
     "`dispatcher_address` must be HOST:PORT with a port 1-65535 (e.g. localhost:5050); "
     "'nohost' is not. Received: dispatcher_address=nohost"),
    (dict(dispatcher_address="localhost:0"),
     "`dispatcher_address` must be HOST:PORT with a port 1-65535 (e.g. localhost:5050); "
     "'localhost:0' is not. Received: dispatcher_address=localhost:0"),
    (dict(dispatcher_address="localhost:5050", worker_address="w"),
     "`worker_address` must be HOST:PORT with a port 1-65535 (e.g. localhost:5050); 'w' is "
     "not. Received: worker_address=w"),
    (dict(dispatcher_address="localhost:5050", heartbeat_interval_ms=-5),
     "`heartbeat_interval_ms` must be > 0. Received: heartbeat_interval_ms=-5"),
])
def test_worker_arguments_are_refused_by_name(kw, says):
    with pytest.raises(ValueError) as e:
        service_args.check_worker(**kw)
    assert str(e.value) == says


def test_good_addresses_pass(tmp_path):
    service_args.check_worker("grpc://[::1]:5050", port=0, worker_address="host-1:5051")
    service_args.check_dispatcher(port=0, worker_addresses=["a:1", "b.example:65535"],
                                  work_dir=str(tmp_path / "journal"), fault_tolerant_mode=True)
    assert not (tmp_path / "journal").exists()  # checked, not made


def test_a_held_port_is_refused_to_the_next_claim_and_freed_by_closing():
    held = service_args.hold_port("dispatcher", 0)
    assert held is None  # 0: any free port, nothing to hold
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    held = service_args.hold_port("worker", port)
    try:
        with pytest.raises(ValueError) as e:
            service_args.hold_port("worker", port)
        assert str(e.value) == (
            f"cannot start the worker on port={port}: the port is in use (Address already in "
            f"use); choose another `port` (0: any free port). Received: port={port}")
        with pytest.raises(OSError):
            service_args.claim_port(port).close()
    finally:
        held.close()
    service_args.claim_port(port).close()
