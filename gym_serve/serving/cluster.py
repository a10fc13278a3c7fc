"""Joining a Ray cluster, and saying which one: address, Ray version, nodes.

`ray.init(address=...)` on its own is a poor first contact. `auto` joins
whichever Ray instance it finds on the machine (another user's, another
test's) without saying which; an address nobody listens on costs 40 s of
retries; and a cluster with Ray's token authentication answers an address
given without `RAY_AUTH_MODE=token` with 20 s of warnings and a traceback.
`connect` checks first, in well under a second — is something listening,
does its GCS let us in — and turns each failure into one `ClusterError` line
that names the fix, then reports where it went (`Cluster`).
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psutil
import ray

from gym_serve.errors import ClusterError

if TYPE_CHECKING:
    from ray._private.node import Node

__all__ = ["Cluster", "connect", "start_local"]

_PROBE_TIMEOUT_S = 10.0
_LOCAL_STARTS = 2
"""How many times `start_local` tries to start a local Ray instance."""


@dataclass(frozen=True)
class Cluster:
    """Where `connect` went: printed by every command that runs on Ray."""

    address: str
    """The GCS address (`host:port`), or `local` for a Ray instance this process started."""
    ray_version: str
    nodes: int
    cpus: float
    gpus: float
    note: str = ""
    """How the address was found, e.g. by `auto`, and anything the user should know about that."""

    @property
    def is_local(self) -> bool:
        """A Ray instance this process started: it ends when the process does."""
        return self.address == "local"

    def __str__(self) -> str:
        where = "a new local Ray instance" if self.is_local else f"the Ray cluster at {self.address}"
        resources = f"{self.cpus:g} CPU" + (f", {self.gpus:g} GPU" if self.gpus else "")
        nodes = f"{self.nodes} node{'s' if self.nodes != 1 else ''}"
        return f"{where} (Ray {self.ray_version}, {nodes}, {resources})" + (f"; {self.note}" if self.note else "")


def connect(address: str | None = None, *, quiet: bool = True) -> Cluster:
    """Join the Ray cluster at `address` (or `$RAY_ADDRESS`; `auto` finds one on this machine), else start a local one.

    Raises `ClusterError` (one line, naming the fix) when the cluster cannot be
    reached or refuses us, before `ray.init` spends its retries on it.
    """
    if ray.is_initialized():
        return _describe(ray.get_runtime_context().gcs_address, "already connected")
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    if address == "local":
        start_local(include_dashboard=False, log_to_driver=not quiet)
        return _describe("local")
    if address.startswith("ray://"):  # Ray Client: its own protocol and errors; nothing to probe here
        ray.init(address=address, log_to_driver=not quiet)
        return _describe(address)
    target, note = _resolve(address)
    if target == "local":  # `auto` with RAY_ADDRESS=local: a new local instance, as `ray.init("auto")` starts
        return connect("local", quiet=quiet)
    _probe(target)
    ray.init(address=target, log_to_driver=not quiet)
    return _describe(target, note)


def start_local(**options: Any) -> None:
    """`ray.init(address="local", **options)`, started once more if the new node never comes up.

    On a loaded machine one of a new node's processes has been seen never to start (it wrote no log at all):
    the raylet never registering with its GCS ("The current node timed out during startup"), or the GCS never
    writing its port ("Timed out waiting for file .../gcs_server_port_..."), each after Ray's 30 s. Whatever
    fails while the node is being built, its processes are ended (so none runs on, and no `Popen` of theirs
    warns later) and, once, the start is tried again; an error before any node exists is raised at once.
    """
    for attempt in range(1, _LOCAL_STARTS + 1):
        before = _descendants()
        try:
            ray.init(address="local", **options)
            return
        except Exception as e:
            node = _failed_node(e)
            if node is None:
                raise
            state = _end_failed_start(node, _descendants() - before)
            if attempt == _LOCAL_STARTS:
                raise
            sys.stderr.write(f"gym-serve: the local Ray instance did not start ({e}; {state}); starting it again\n")


def _end_failed_start(node: Node, started: set[psutil.Process]) -> str:
    """End what a failed `ray.init` started, and say what state its node's processes were in.

    The half-built node's processes go through Ray's own `kill_all_processes`, which waits on their `Popen`s
    (ended any other way, each `Popen` would warn "subprocess is still running" when collected, an error under
    `-W error`); psutil then ends anything else the attempt started.
    """
    state = ", ".join(_state(kind, info.process.pid) for kind, infos in node.all_processes.items() for info in infos)
    node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
    _end({p for p in started if p.is_running()})
    return f"its processes then: {state or 'none'}"


def _state(kind: str, pid: int) -> str:
    """`gcs_server sleeping`, or `raylet before exec sleeping` while the process is still this interpreter's fork."""
    try:
        process = psutil.Process(pid)
        forked = process.cmdline() == psutil.Process().cmdline()
        return f"{kind} {'before exec ' if forked else ''}{process.status()}"
    except psutil.Error:
        return f"{kind} gone"


def _failed_node(error: BaseException) -> Node | None:
    """The `Node` whose constructor raised `error` (Ray keeps no other reference to a node that never started)."""
    from ray._private import node

    traceback = error.__traceback__
    while traceback is not None:
        candidate = traceback.tb_frame.f_locals.get("self")
        if isinstance(candidate, node.Node):
            return candidate
        traceback = traceback.tb_next
    return None


def _descendants() -> set[psutil.Process]:
    return set(psutil.Process().children(recursive=True))


def _end(processes: set[psutil.Process]) -> None:
    """Kill `processes` and wait for them (each SIGKILL takes effect at once; the wait reaps them)."""
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(processes), timeout=10)


def _resolve(address: str) -> tuple[str, str]:
    """`auto` → the address it picks (and how many instances it picked from); anything else as given."""
    if address != "auto":
        return address, ""
    if os.environ.get("RAY_ADDRESS", "auto") != "auto":  # as for `ray.init("auto")`: the variable names the cluster
        return os.environ["RAY_ADDRESS"], "from $RAY_ADDRESS"
    from ray._private import services  # Ray's own lookup, so `auto` means what it means to `ray.init`
    from ray._private.authentication.authentication_token_setup import (
        maybe_enable_token_auth_if_token_available,
    )

    running = services.find_gcs_addresses()
    latest = services.find_bootstrap_address(None)  # the last `ray start` on this machine, if it still runs
    found = latest if latest in running else next(iter(sorted(running)), None)
    if found is None:
        raise ClusterError(
            "`--address auto` found no running Ray cluster on this machine: start one with `ray start --head`, "
            "pass the address `ray start` printed, or leave `--address` out for a new local Ray instance"
        )
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)  # what `ray.init("auto")` does
    note = "found by `auto`"
    if len(running) > 1:
        others = ", ".join(sorted(a for a in running if a != found))
        note += f" among {len(running)} Ray instances on this machine (also {others}); pass `--address` to choose"
    return found, note


def _probe(address: str) -> None:
    """Is a Ray GCS listening at `address`, and does it let us in? Raises `ClusterError` naming the fix."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"`{address}` is not a Ray address: expected HOST:PORT (e.g. 10.0.0.5:6379) or `auto`")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise ClusterError(
            f"no Ray cluster at {address} ({e.strerror or e}): start one there with `ray start --head --port {port}`, "
            "or pass the address `ray start` printed"
        ) from None
    with _quiet_stderr() as said:  # Ray's C++ client logs its refusal too; our one line says it with the fix
        error = _gcs_error(address)
    if error is None:
        sys.stderr.write("".join(said))  # nothing went wrong: whatever it said is not ours to hide
        return
    if type(error).__name__ == "AuthenticationError":
        if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
            raise ClusterError(
                f"the Ray cluster at {address} uses Ray's token authentication: set RAY_AUTH_MODE=token, with the "
                "cluster's token in RAY_AUTH_TOKEN or ~/.ray/auth_token, and run again"
            )
        raise ClusterError(
            f"the Ray cluster at {address} refused this machine's Ray token: put the cluster's token in "
            "RAY_AUTH_TOKEN (or ~/.ray/auth_token) and run again"
        )
    raise ClusterError(f"{address} does not answer as a Ray cluster: {type(error).__name__}: {error}")


@contextmanager
def _quiet_stderr() -> Iterator[list[str]]:
    """File descriptor 2 (where Ray's C++ code writes) into a temporary file; the list gets what was written."""
    sys.stderr.flush()
    said: list[str] = []
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            said.append(sink.read().decode(errors="replace"))


def _gcs_error(address: str) -> BaseException | None:
    """What asking the GCS at `address` for its cluster id raised (None: it answered).

    Ray's own client, so its auth settings are the ones `ray.init` will use. It
    waits up to 40 s for a port that is open but not a GCS, hence the thread.
    """
    from ray._raylet import GcsClient  # type: ignore[attr-defined]  # compiled; no stubs

    outcome: list[BaseException | None] = []

    def ask() -> None:
        try:
            GcsClient(address=address).internal_kv_get(b"gym-serve-probe", None)
            outcome.append(None)
        except Exception as e:
            outcome.append(e)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(_PROBE_TIMEOUT_S)
    if not outcome:
        return TimeoutError(f"no reply from a Ray GCS within {_PROBE_TIMEOUT_S:g} s")
    return outcome[0]


def _describe(address: str, note: str = "") -> Cluster:
    alive = [node for node in ray.nodes() if node.get("Alive")]
    resources = ray.cluster_resources()
    return Cluster(
        address=address,
        ray_version=ray.__version__,
        nodes=len(alive),
        cpus=float(resources.get("CPU", 0)),
        gpus=float(resources.get("GPU", 0)),
        note=note,
    )
