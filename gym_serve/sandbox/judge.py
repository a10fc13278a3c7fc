"""Run tests against untrusted code: the one way, for every environment that decides a reward by running the
policy's code (the code verifier, swe_fix).

A trusted *harness* (`_judge_harness.py`) holds the tests and writes the verdict; the untrusted code runs in
separate *runner* processes (`_judge_runner.py`), confined (`_confine`), and what crosses back is plain data.
Both run in a fresh one-shot sandbox (`oneshot`). The threat model is in this folder's README.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import weakref
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from gym_serve.sandbox import host
from gym_serve.sandbox.errors import SandboxError
from gym_serve.sandbox.oneshot import (
    confine_source,
    isolation,
    kill_session,
    make_work_dir,
    namespace_command,
    remove_work_dir,
    signal_group,
)

__all__ = ["RunResult", "SandboxLimits", "SandboxTimeout", "judge"]


class SandboxTimeout(SandboxError):
    """Raised when the whole sandbox overran the sum of its per-run deadlines (a stalled machine, not the code)."""


@dataclass(frozen=True)
class SandboxLimits:
    """The walls of one sandbox. Defaults suit competitive-programming-sized programs.

    `wall_s` and `cpu_s` bound each run (each stdin case, each assert test: NeMo Gym's
    per-test `unit_test_timeout_secs`); `disk_mb` bounds everything written, in all files.
    """

    cpu_s: int = 5
    wall_s: float = 10.0
    memory_mb: int = 512
    file_size_mb: int = 8
    max_processes: int = 32
    output_bytes: int = 1 << 20
    disk_mb: int = 64
    max_files: int = 4096


@dataclass
class RunResult:
    """What happened to one run of a program on one input."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    output_exceeded: bool = False
    disk_exceeded: bool = False
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not (self.timed_out or self.output_exceeded or self.disk_exceeded)


_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _semaphore() -> asyncio.Semaphore:
    """At most one sandbox per CPU at a time per event loop; the rest wait their turn.

    One semaphore per loop: an asyncio primitive is bound to the loop that first waits on it.
    """
    loop = asyncio.get_running_loop()
    if loop not in _slots:
        _slots[loop] = asyncio.Semaphore(max(1, os.cpu_count() or 1))
    return _slots[loop]


async def judge(spec: dict[str, Any], runs: int, limits: SandboxLimits, mode: str | None) -> dict[str, Any]:
    """Run the harness on `spec` (its mode, the solution, the tests) in a fresh one-shot sandbox: its verdict."""
    async with _semaphore():
        chosen: str = mode if mode is not None else await asyncio.to_thread(isolation)  # probed once; off the loop
        return await _start(spec, runs, limits, chosen)


async def _start(spec: dict[str, Any], runs: int, limits: SandboxLimits, mode: str) -> dict[str, Any]:
    if mode not in ("namespaces", "fallback"):
        raise ValueError(f"isolation mode must be `namespaces` or `fallback`, got `{mode}`")
    fallback = mode == "fallback"
    work = make_work_dir() if fallback else "/tmp"
    spec = {
        **spec,
        "work_dir": work,
        "cpu_s": limits.cpu_s,
        "wall_s": limits.wall_s,
        "memory_bytes": limits.memory_mb << 20,
        "file_size_bytes": limits.file_size_mb << 20,
        "max_processes": limits.max_processes,
        "output_bytes": limits.output_bytes,
        "max_message_bytes": 64 << 20,
        "watch_disk_bytes": (limits.disk_mb << 20) if fallback else 0,
        "max_files": limits.max_files,
        "caller_pid": os.getpid() if fallback else 0,
        "report_groups": fallback,
        "runner_source": _source("_judge_runner.py"),
        "confine_source": confine_source(),
    }
    harness = [host.sandbox_python(), "-I", "-B", "-c", _source("_judge_harness.py")]
    if fallback:
        command = [*host.identity(), *harness]
    else:
        command = namespace_command(harness, disk_mb=limits.disk_mb, max_files=limits.max_files)
    deadline = (limits.wall_s + 1.0) * max(1, runs) + 15.0  # every run's own deadline, plus start-up
    try:
        result = await _execute(command, work, json.dumps(spec).encode() + b"\n", deadline, fallback)
        if "harness_error" in result:  # fail closed: whatever broke the harness, no verdict is no pass
            why = f"harness error: {result['harness_error']}"
            failed: dict[str, Any] = {"exit_code": None, "stdout": "", "stderr": why, "timed_out": False}
            failed |= {"output_exceeded": False, "disk_exceeded": False, "wall_s": 0.0}
            result |= {"tests": [["fail", why]] * runs, "runs": [failed] * runs}
        return result
    finally:
        if fallback:
            remove_work_dir(work)


async def _execute(command: list[str], work: str, spec: bytes, deadline: float, fallback: bool) -> dict[str, Any]:
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd="/",  # the harness's, never the work dir the solution writes
        env=host.minimal_env(work),
        start_new_session=True,  # its own process group, killed as a whole
        limit=1 << 30,
    )
    groups: list[int] = []
    assert proc.stdout is not None and proc.stderr is not None  # both are PIPEs

    async def stderr_lines() -> bytes:
        tail = b""
        assert proc.stderr is not None
        async for line in proc.stderr:
            if fallback and line.startswith(b"@@group "):
                groups.append(int(line.split()[1]))
            else:
                tail = (tail + line)[-4000:]
        return tail

    swept = False

    async def ended() -> None:
        nonlocal swept
        if not fallback:  # the harness is PID 1 of its namespace: everything in it ends with it
            await proc.wait()
            return
        while proc.returncode is None:  # not `wait()`, which also waits for the pipes that leftovers may hold open
            await asyncio.sleep(0.01)
        await asyncio.to_thread(kill_session, proc.pid)  # what it left in its session: the verdict is in
        swept = True

    try:
        out, err, _ = await asyncio.wait_for(
            asyncio.gather(_feed_and_read(proc, spec), stderr_lines(), ended()),
            timeout=deadline,
        )
    except TimeoutError as e:
        raise SandboxTimeout(
            f"the sandbox gave no verdict within {deadline:.0f} s (every run's deadline summed)"
        ) from e
    finally:
        await _stop(proc, groups, fallback, sweep=fallback and not swept)
    lines = out.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        raise SandboxError(
            f"the sandbox's harness gave no verdict (exit code {proc.returncode} after "
            f"{time.perf_counter() - started:.1f} s): {err.decode(errors='replace').strip()[-500:]}"
        )
    return result


async def _feed_and_read(proc: asyncio.subprocess.Process, spec: bytes) -> bytes:
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(spec)
        await proc.stdin.drain()
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass
    return await proc.stdout.read()


async def _stop(proc: asyncio.subprocess.Process, groups: list[int], fallback: bool, *, sweep: bool) -> None:
    """End the harness and, in the fallback, every runner group it reported and whatever else is in its session
    (whatever state it is in): seccomp keeps everything it starts in that session."""
    if proc.returncode is None:
        if fallback:  # the harness kills its runners on SIGTERM; SIGKILL if it does not go
            signal_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 2.0)
            except TimeoutError:
                pass
        signal_group(proc.pid, signal.SIGKILL)
        await proc.wait()
    for pgid in groups:
        signal_group(pgid, signal.SIGKILL)
    if sweep:
        await asyncio.to_thread(kill_session, proc.pid)


@lru_cache(maxsize=4)
def _source(name: str) -> str:
    return (Path(__file__).parent / name).read_text()
