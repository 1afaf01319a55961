"""The tf.data service servers' arguments, checked without TensorFlow.

``pipeline.deliver.distribute.run_dispatcher`` / ``run_worker`` check their arguments here
before they start a server; the command line (``python -m pipeline service``) calls
the same checks before TensorFlow loads. Also the port probe (``claim_port``) both use,
and the ``service`` command's flags (``FLAGS``) and role rules (``check_flags``: a flag
of the other role is an error; a fixed port is held while TensorFlow loads, until
``release_port``); ``pipeline.deliver.distribute.run_from_flags`` runs the server.
"""

from __future__ import annotations

import inspect
import numbers
import re
import socket
from typing import Any, Collection, List, Mapping, Optional, Sequence

from pipeline import checks

DISPATCHER_PORT = 5050  # run_dispatcher's default port
HOST_PORT = re.compile(r"^(?:grpc://)?(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(\d+)$")
# The command's flags (``python -m pipeline service --help``): (name, default, help[, kind]);
# kind: int, tuple (A,B) or a string flag's metavar; otherwise the default's type.
FLAGS = [
    ("port", None, "TCP port to listen on (0: any free port). [default: dispatcher "
     f"{DISPATCHER_PORT}, worker 0]", int),
    ("dispatcher_address", None, "worker: the dispatcher (required).", "HOST:PORT"),
    ("worker_address", None, "worker: its address (localhost:<port>).", "HOST:PORT"),
    ("heartbeat_interval_ms", None, "worker: heartbeat interval.", int),
    ("worker_addresses", None, "dispatcher: fixed worker HOST:PORTs.", tuple),
    ("work_dir", None, "dispatcher: journal folder (fault tolerance).", "DIR"),
    ("fault_tolerant_mode", False, "dispatcher: journal state to --work_dir."),
    ("worker_timeout_ms", None, "dispatcher: worker heartbeat timeout.", int),
]


def claim_port(port: int) -> socket.socket:
    """A TCP socket bound to ``port`` on every interface by a plain bind, not listening.

    Plain: no ``SO_REUSEADDR``, no ``SO_REUSEPORT``. gRPC (the tf.data service) binds its
    servers with ``SO_REUSEPORT``, so a second server on a taken port would start beside
    the first and share it; this bind fails instead while any socket holds the port, and
    while it is held no server can bind it.

    Args:
        port: int, 0-65535; 0 binds a free port chosen by the OS (read it with
            ``getsockname()[1]``).

    Returns:
        The bound socket; close it to free the port.

    Raises:
        OSError: the port is in use (``errno.EADDRINUSE``, "Address already in use") or
            cannot be bound (e.g. a port below 1024 without the right).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        sock.bind(("", port))
    except OSError:
        sock.close()
        raise
    return sock


def port_in_use_message(role: str, port: int, reason: str, default: bool = False) -> str:
    """Why the ``role`` ("dispatcher" or "worker") cannot start on ``port`` (``reason``:
    the operating system's words; ``default``: the port was not given)."""
    return (f"cannot start the {role} on port={port}"
            + (" (the dispatcher's default)" if default else "")
            + f": the port is in use ({reason}); choose another `port`"
            + (" (0: any free port)" if role == "worker" else "")
            + f". Received: port={port}")


def hold_port(role: str, port: int, default: bool = False) -> Optional[socket.socket]:
    """``claim_port(port)`` for a fixed port (None for 0): held, no server can take it.

    Raises:
        ValueError: the port is in use (``port_in_use_message``).
    """
    if port == 0:
        return None
    try:  # a plain bind: gRPC binds with SO_REUSEPORT, beside another dispatcher
        return claim_port(port)
    except OSError as e:
        raise ValueError(port_in_use_message(role, port, e.strerror or str(e), default)) \
            from None


def _check_port(port) -> None:
    if isinstance(port, bool) or not isinstance(port, numbers.Integral) \
            or not 0 <= port <= 65535:
        raise ValueError(f"`port` must be 0-65535. {checks.received('port', port)}")


def _check_positive(name: str, value) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"`{name}` must be > 0. Received: {name}={value}")


def _check_addresses(name: str, values: Sequence[str], shown) -> None:
    for value in values:
        m = HOST_PORT.match(str(value).strip())
        if not m or not 1 <= int(m.group(2)) <= 65535:
            raise ValueError(f"`{name}`{' (each of them)' if name.endswith('es') else ''} "
                             f"must be HOST:PORT with a port 1-65535 (e.g. localhost:"
                             f"{DISPATCHER_PORT}); {value!r} is not. Received: {name}={shown}")


def check_dispatcher(port: int = DISPATCHER_PORT,
                     worker_addresses: Optional[Sequence[str]] = None,
                     work_dir: Optional[str] = None, fault_tolerant_mode: bool = False,
                     worker_timeout_ms: Optional[int] = None) -> None:
    """``run_dispatcher``'s arguments: ``port`` 0-65535, ``worker_timeout_ms`` > 0,
    ``fault_tolerant_mode`` with a ``work_dir`` (a folder that can be written), each of
    ``worker_addresses`` "host:port" with a port 1-65535.

    Raises:
        ValueError: naming the argument and the value received.
    """
    _check_port(port)
    _check_positive("worker_timeout_ms", worker_timeout_ms)
    if fault_tolerant_mode and not work_dir:
        raise ValueError("`fault_tolerant_mode` needs `work_dir` (the folder where the "
                         "dispatcher journals its state). Received: fault_tolerant_mode=True, "
                         f"work_dir={work_dir!r}")
    if isinstance(worker_addresses, str):
        worker_addresses = [worker_addresses]
    _check_addresses("worker_addresses", worker_addresses or (), worker_addresses)
    if work_dir:
        checks.check_folder("work_dir", work_dir)


def check_worker(dispatcher_address: str, port: int = 0, worker_address: Optional[str] = None,
                 heartbeat_interval_ms: Optional[int] = None) -> None:
    """``run_worker``'s arguments: ``port`` 0-65535, ``heartbeat_interval_ms`` > 0,
    ``dispatcher_address`` (and ``worker_address`` when given) "host:port" (or
    "grpc://host:port") with a port 1-65535.

    Raises:
        ValueError: naming the argument and the value received.
    """
    _check_port(port)
    _check_positive("heartbeat_interval_ms", heartbeat_interval_ms)
    _check_addresses("dispatcher_address", [dispatcher_address], dispatcher_address)
    if worker_address is not None:
        _check_addresses("worker_address", [worker_address], worker_address)


# --- the command line's service command ------------------------------------------

# The service port checked free before TensorFlow loads, held bound (so that no other server
# takes it) until right before the server starts (``release_port``).
HELD_PORTS: List[socket.socket] = []


def release_port() -> None:
    """Closes the port that ``check_flags`` holds, if any (the server binds it next)."""
    while HELD_PORTS:
        HELD_PORTS.pop().close()


def role_arguments(role: str, flags: Mapping[str, Any]) -> dict:
    """``role``'s arguments out of the command line's flags.

    Args:
        role: "dispatcher" or "worker".
        flags: each flag's value by name, None where not given (e.g. ``vars(args)``).

    Returns:
        ``check_dispatcher`` / ``check_worker``'s arguments (which ``run_dispatcher`` /
        ``run_worker`` take); ``port`` its default when not given.
    """
    check = check_dispatcher if role == "dispatcher" else check_worker
    params = inspect.signature(check).parameters
    kw = {k: flags[k] for k in params}
    return dict(kw, port=params["port"].default if flags["port"] is None else flags["port"])


def check_flags(role: str, flags: Mapping[str, Any], given: Collection[str]) -> None:
    """``python -m pipeline service ROLE``'s flags, checked before TensorFlow loads.

    A fixed port that is free stays bound (``HELD_PORTS``) until ``release_port``, so
    that no other server takes it while TensorFlow loads.

    Args:
        role: "dispatcher" or "worker".
        flags: as ``role_arguments``.
        given: the flags the user typed, by name (``name`` or ``noname``).

    Raises:
        ValueError: a flag of the other role was given; a worker without
            ``--dispatcher_address``; ``check_dispatcher`` / ``check_worker``'s error;
            the port is in use (``hold_port``).
    """
    other = "worker" if role == "dispatcher" else "dispatcher"
    wrong = [f for f in role_arguments(other, flags) if f != "port" and {f, f"no{f}"} & given]
    if wrong:
        raise ValueError("; ".join(f"--{f} is a flag of the {other}, not the {role}"
                                   for f in wrong) + f". Received: service {role}")
    if role == "worker" and not flags["dispatcher_address"]:
        raise ValueError("service worker needs --dispatcher_address=HOST:PORT. "
                         "Received: service worker, no --dispatcher_address")
    kw = role_arguments(role, flags)
    (check_dispatcher if role == "dispatcher" else check_worker)(**kw)
    HELD_PORTS.extend(filter(None, [hold_port(role, kw["port"], flags["port"] is None)]))

