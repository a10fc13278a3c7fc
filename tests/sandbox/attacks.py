"""The red team's attacks on a workspace sandbox, run through any `SandboxProvider`, and what containment means.

`run_attacks` runs each attack inside a sandbox of its own while another sandbox answers a heartbeat
(the replica keeps serving), and observes from outside: the replica's pid still alive, its secret
nowhere in what the sandbox printed, host listeners (TCP, an abstract UNIX socket, a UNIX socket
file standing for the Ray raylet's) never connected to, another sandbox's file never read, no file
written on the host, nothing left running after the sandbox is destroyed. `contained` names every
observation that shows an attack got out. The caller runs it as root, as `nobody`, in-process and
through a Serve replica (`test_red_team.py`).
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gym_serve.sandbox import Base, BaseFile, Limits, SandboxProvider
from tests.verifiers.callers import processes_with

T = TypeVar("T")

BASE = Base(files=(BaseFile(dest="repo/README", text="the attacker's workspace\n"),), name="red-team")
LIMITS = Limits(cpu_s=5, memory_mb=256, max_processes=64, disk_mb=32, max_files=5000, output_bytes=1 << 16, wall_s=8)
SECRET_ENV = "GS_REPLICA_SECRET"


@dataclass
class Outside:
    """What the attacks reach for, set up outside the sandbox."""

    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    tcp: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))
    abstract: socket.socket = field(default_factory=lambda: socket.socket(socket.AF_UNIX))
    unix: socket.socket = field(default_factory=lambda: socket.socket(socket.AF_UNIX))
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gs-red-team-")))

    def __post_init__(self) -> None:
        self.abstract.bind(f"\0gs-red-team-{self.tag}")
        self.raylet = self.folder / "raylet"  # a UNIX socket file, as Ray's raylet has in its session folder
        self.unix.bind(str(self.raylet))
        for listener in (self.tcp, self.abstract, self.unix):
            listener.listen()
            listener.setblocking(False)
        self.host_file = Path(tempfile.gettempdir()) / f"gs-red-team-escape-{self.tag}"

    def reached(self) -> list[str]:
        """The listeners a connection reached (none, when contained)."""
        found = []
        for name, listener in (("tcp", self.tcp), ("abstract", self.abstract), ("raylet", self.unix)):
            try:
                listener.accept()[0].close()
                found.append(name)
            except BlockingIOError:
                pass
        return found

    def close(self) -> None:
        for listener in (self.tcp, self.abstract, self.unix):
            listener.close()
        self.raylet.unlink(missing_ok=True)
        self.folder.rmdir()
        self.host_file.unlink(missing_ok=True)


def attacks(outside: Outside, replica_pid: int, victim_secret: str) -> dict[str, str]:
    """Each attack: a shell command run in the attacker's sandbox (its stdout is checked for what it found)."""
    port = outside.tcp.getsockname()[1]
    py = "python3 -c"
    unix = "import socket; s = socket.socket(socket.AF_UNIX); s.connect"
    connect_tcp = f"import socket; socket.create_connection(('127.0.0.1', {port}), 2); print('CONNECTED')"
    connect_internet = "import socket; socket.create_connection(('1.1.1.1', 80), 3); print('CONNECTED')"
    connect_abstract = f"{unix}('\\0gs-red-team-{outside.tag}'); print('CONNECTED')"
    connect_raylet = f"{unix}('{outside.raylet}'); print('CONNECTED')"
    kill = f"{py} 'import os; os.kill({replica_pid}, 9)'; kill -9 {replica_pid}; kill -9 1; kill -9 -1"
    ptrace = (
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True)\n"
        f"for pid in ({replica_pid}, 1):\n"
        "    if libc.ptrace(16, pid, 0, 0) == 0: print('TRACED', pid)\n"
        "    else: print('refused', pid, os.strerror(ctypes.get_errno()))\n"
    )
    return {
        "fork_bomb": f": {outside.tag}; bomb() {{ bomb | bomb & }}; bomb",
        "memory_bomb": f"{py} 'blocks = [bytearray(64 << 20) for _ in range(64)]; print(\"ALLOCATED\")'",
        "disk_fill": "dd if=/dev/zero of=/workspace/fill bs=1M count=4096; "
        "dd if=/dev/zero of=/tmp/fill bs=1M count=4096; "
        "for i in $(seq 1 100000); do : > /workspace/f$i || break; done; echo files $i; "
        "echo bytes $(( $(stat -c %s /workspace/fill) + $(stat -c %s /tmp/fill) ))",
        "huge_output": "yes 'huge output' | head -c 50000000",
        "network_host_tcp": f'{py} "{connect_tcp}"',
        "network_internet": f'{py} "{connect_internet}"',
        "network_abstract_socket": f'{py} "{connect_abstract}"',
        "network_raylet_socket": f'{py} "{connect_raylet}"; ls -la {outside.folder} 2>&1',
        "network_interfaces": "cat /proc/net/dev | tail -n +3 | cut -d: -f1",
        "host_environment": f"env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; echo ${SECRET_ENV}",
        "other_sandbox_files": f"grep -rl '{victim_secret}' /workspace /tmp /run /.layers 2>/dev/null; "
        "r=root; ls /.layers /dev/shm /proc/*/$r/.layers 2>&1 | head -n 20",  # each process's root, /proc/PID/root
        "kill_the_replica": kill,
        "trace_the_replica": f'{py} "{ptrace}"',
        "sleep_forever": f"nohup sleep {outside.tag}7 >/dev/null 2>&1 & sleep infinity",
        "escape_through_proc": "r=root; cat /proc/1/environ; cat /proc/1/mem | head -c 1; ls /proc/1/$r; "
        "echo 3 > /proc/sys/vm/drop_caches; echo b > /proc/sysrq-trigger; "
        f"echo pwned > /proc/1/$r{outside.host_file}; echo pwned > {outside.host_file}; "
        "mount -t tmpfs none /mnt; unshare -U true && echo UNSHARED; "
        "ls /proc | grep -c '^[0-9]'",
    }


async def run_attacks(provider: SandboxProvider, replica_pid: int) -> dict[str, Any]:
    """Run every attack (see the module docstring); what was observed, for `contained`."""
    outside = Outside()
    victim_secret = f"victim-{uuid.uuid4().hex}"
    victim = await provider.create(BASE, limits=LIMITS)
    heartbeat = await provider.create(BASE, limits=LIMITS)
    await provider.write_file(victim, "secret.txt", victim_secret.encode())
    beats: list[float] = []
    failures: list[str] = []
    stop = asyncio.Event()

    async def beat() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                done = await provider.exec(heartbeat, "echo ok", timeout_s=30)
                if done.stdout != "ok\n":
                    failures.append(repr(done))
            except Exception as e:  # noqa: BLE001 - a heartbeat that fails is what is observed
                failures.append(f"{type(e).__name__}: {e}")
            beats.append(time.monotonic() - started)
            await asyncio.sleep(0.2)

    beating = asyncio.create_task(beat())
    results: dict[str, Any] = {}
    try:
        for name, command in attacks(outside, replica_pid, victim_secret).items():
            attacker = await provider.create(BASE, limits=LIMITS)
            started = time.monotonic()
            running = provider.exec(attacker, ["bash", "-c", command], timeout_s=LIMITS.wall_s)
            done, processes = await peak_during(running, outside.tag, 2.0 if name == "fork_bomb" else 0.0)
            results[name] = {
                "processes": processes,
                "stdout": done.stdout[-4000:],
                "stderr": done.stderr[-2000:],
                "exit_code": done.exit_code,
                "timed_out": done.timed_out,
                "truncated": done.stdout_truncated,
                "stdout_bytes": len(done.stdout),
                "wall_s": time.monotonic() - started,
                "replica_alive": _alive(replica_pid),
                "host_file": outside.host_file.exists(),
            }
            await provider.destroy(attacker)
    finally:
        stop.set()
        await beating
        for sandbox in (victim, heartbeat):
            await provider.destroy(sandbox)
    results["_outside"] = {
        "left_running": await asyncio.to_thread(_left_running, outside.tag),
        "reached": outside.reached(),
        "victim_secret": victim_secret,
        "replica_secret": os.environ.get(SECRET_ENV, ""),
        "replica_alive": _alive(replica_pid),
        "heartbeats": len(beats),
        "slowest_heartbeat_s": max(beats, default=0.0),
        "heartbeat_failures": failures,
        "tag": outside.tag,
    }
    outside.close()
    return results


def _left_running(tag: str) -> list[int]:
    """The attacks' processes still running once their sandboxes are destroyed (given a moment to end)."""
    deadline = time.monotonic() + 15
    while (found := processes_with(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def peak_during(work: Awaitable[T], tag: str, after_s: float) -> tuple[T, int]:
    """`work`'s result, and the most processes tagged `tag` seen while it ran and for `after_s` after: a fork bomb
    whose command outlives its deadline on a loaded machine is killed with everything it forked, so a look only
    after the command would see none."""
    task = asyncio.ensure_future(work)
    peak = 0
    while not task.done():
        peak = max(peak, len(await asyncio.to_thread(processes_with, tag)))
        await asyncio.wait({task}, timeout=0.05)
    return task.result(), max(peak, await peak_processes(tag, after_s))


async def peak_processes(tag: str, seconds: float) -> int:
    """The most processes tagged `tag` seen over `seconds` (one look when 0): a fork bomb goes on in the background
    after its command returns, grows to its limit, and may die out (each process ends when its forks fail), so one
    look after a fixed sleep can see none on a loaded machine."""
    peak, deadline = 0, time.monotonic() + seconds
    while True:
        peak = max(peak, len(await asyncio.to_thread(processes_with, tag)))
        if time.monotonic() >= deadline:
            return peak
        await asyncio.sleep(0.05)


def contained(results: dict[str, Any], replica_secret: str) -> list[str]:
    """Every observation that shows an attack got out (an empty list: all were contained)."""
    outside = results["_outside"]
    escapes = []
    if outside["reached"]:
        escapes.append(f"host listeners reached: {outside['reached']}")
    if outside["left_running"]:
        escapes.append(f"processes outlived their sandboxes: {outside['left_running']}")
    if not outside["replica_alive"] or outside["heartbeat_failures"]:
        escapes.append(f"the replica stopped serving: {outside['heartbeat_failures'][:3]}")
    for name, seen in results.items():
        if name.startswith("_"):
            continue
        text = seen["stdout"] + seen["stderr"]
        if not seen["replica_alive"]:
            escapes.append(f"{name}: the replica died")
        if seen["host_file"]:
            escapes.append(f"{name}: wrote a file on the host")
        if replica_secret and replica_secret in text:
            escapes.append(f"{name}: read the replica's secret")
        if outside["victim_secret"] in text or "secret.txt" in text:
            escapes.append(f"{name}: read another sandbox's file")
        if "CONNECTED" in text or "TRACED" in text or "UNSHARED" in text or "ALLOCATED" in text:
            escapes.append(f"{name}: {text[-300:]}")
    expect = {
        "fork_bomb": lambda s: 0 < s["processes"] <= LIMITS.max_processes and "Resource temporarily" in s["stderr"],
        "disk_fill": lambda s: (
            "No space left" in s["stderr"]
            and "files 100000" not in s["stdout"]
            and int(s["stdout"].split("bytes ")[-1]) <= LIMITS.disk_mb << 20
        ),
        "huge_output": lambda s: s["truncated"] and s["stdout_bytes"] <= 1 << 16,
        "network_interfaces": lambda s: s["stdout"].split() == ["lo"],
        "sleep_forever": lambda s: s["timed_out"],
        "escape_through_proc": lambda s: int((s["stdout"].split() or ["999"])[-1]) < 20,
    }
    for name, holds in expect.items():
        if not holds(results[name]):
            escapes.append(f"{name}: not stopped as expected: {results[name]}")
    return escapes
