"""A separate Ray cluster started with `ray start --head`, as a user runs one: its own processes and temp dir.

Nothing started in the test process reaches it but over its address, so it
shows what a real cluster shows: replicas that never see the deployer's
environment, and Ray's token authentication (on here, with a token of its own).
Every port is a free one and the temp dir is private, so neither `ray.init()`
elsewhere on the machine nor another test's `ray start` can join it by mistake;
stopping it stops only its own processes (SIGTERM to its `ray start --block`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")


def plain_env() -> dict[str, str]:
    """This process's environment without Ray's or gym-serve's variables: a shell that set none of them."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "GYM_SERVE_"))}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RayStartCluster:
    address: str
    token: str
    dashboard_url: str
    temp_dir: Path
    log: Path

    def env(self, **extra: str) -> dict[str, str]:
        """An environment for a client of this cluster: Ray's token auth on with its token, nothing else of ours."""
        return {**plain_env(), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, **extra}


@contextmanager
def ray_start_cluster(
    temp_dir: Path, num_cpus: int = 4, node_env: dict[str, str] | None = None
) -> Iterator[RayStartCluster]:
    """A head node logging to `temp_dir`; Ray's own temp dir is a short one (its socket paths must fit 107 bytes).

    `node_env`: variables the node's processes (and so every replica) see, as set on a real cluster's nodes.
    """
    ray_dir = Path(tempfile.mkdtemp(prefix="gsray-"))
    token = secrets.token_hex(16)
    log = temp_dir / "ray-start.log"
    env = {**plain_env(), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"  # a test cluster stops at once, no 30 s of draining
    env.update(node_env or {})
    try:
        for attempt in range(1, STARTS + 1):
            port, dashboard = free_port(), free_port()
            command = [
                RAY, "start", "--head", "--block", "--disable-usage-stats",
                f"--port={port}", f"--num-cpus={num_cpus}", f"--temp-dir={ray_dir}",
                "--include-dashboard=true", f"--dashboard-port={dashboard}",
                f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
            ]  # fmt: skip
            proc = _started(command, env, log)
            if proc is not None:
                break
            if attempt == STARTS or not never_came_up(log.read_text()):
                raise RuntimeError(f"`ray start` did not come up:\n{log.read_text()[-3000:]}")
        assert proc is not None
        try:
            yield RayStartCluster(f"127.0.0.1:{port}", token, f"http://127.0.0.1:{dashboard}", ray_dir, log)
        finally:
            _stop(proc)
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)


STARTS = 2
"""How many times `ray_start_cluster` starts its head: once more when the first node never came up."""
NEVER_CAME_UP = ("The current node timed out during startup", "Timed out waiting for file")
"""Ray's words when a new node's raylet never registers, or its GCS never writes its port, each after 30 s: the
failures `start_local` tries again in `ray.init` (seen on a loaded machine: the process never started)."""


def never_came_up(output: str) -> bool:
    """Whether a Ray command's output shows its new node failing to come up (`NEVER_CAME_UP`)."""
    return any(words in output for words in NEVER_CAME_UP)


def _started(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes] | None:
    """`ray start --block` running once it says so, or None (stopped, its output appended to `log`) if it never did."""
    with log.open("ab") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while b"Ray runtime started" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            return None
        time.sleep(0.5)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM: `ray start --block` drains and stops the processes it started; what is left then is killed."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
