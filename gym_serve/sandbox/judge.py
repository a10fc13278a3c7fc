"""Run tests against untrusted code: the one way, for every environment that decides a reward by running the
policy's code (the code verifier's `verify_*`, swe_fix's test suite).

A trusted *harness* (`_judge_harness.py`) holds the tests and writes the verdict; the untrusted code runs in
separate *runner* processes (`_judge_runner.py`), confined (`_confine`); what crosses back is plain data
(exact builtin types, decoded into fresh values by the harness), so no object of the code's ever decides a
comparison. Both run in a fresh one-shot sandbox (`oneshot`). The verdict travels on a pipe of its own (the
control fd), never on an output a test or the code can write. The threat model is in this folder's README.md.

Who a failure belongs to: the harness answers within the run's `budget_s` whatever the code does (a test whose
call outlives its `wall_s`, or the budget, fails; a reply past `reply_bytes` fails its test; the harness's own
memory limit ends the harness as `harness_error`, which fails every test): those are 0s. Only a sandbox that
gives no verdict by the budget plus a margin (`SandboxTimeout`), or none at all (`SandboxError`), is the
system's failure.

- `run` (modes `stdio`, `asserts`, `calls`): a program, assert snippets or call cases against one source.
- `run_pytest`: a task's pytest files against a package (`files`), the package living in the runners only.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
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
from gym_serve.sandbox._judge_harness import TEST_MODULES
from gym_serve.sandbox.cgroups import Cgroup
from gym_serve.sandbox.errors import SandboxError
from gym_serve.sandbox.oneshot import (
    HARNESS_PROCESSES,
    confine_source,
    in_cgroup,
    isolation,
    kill_session,
    make_work_dir,
    namespace_command,
    oneshot_cgroup,
    remove_work_dir,
    signal_group,
)

__all__ = ["PYTEST_PACKAGES", "TEST_MODULES", "RunResult", "SandboxLimits", "SandboxTimeout", "run", "run_pytest"]

TEST_LIB = "/opt/gs-judge/lib"
"""Where pytest and what it imports are, in a namespace sandbox (bound read-only from this host)."""
PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")
"""What a harness needs to run pytest files: pytest and its dependencies (those installed here)."""
_START_S = 15.0
"""The harness's start-up, and its answer's way back, beyond the budget it keeps itself."""


class SandboxTimeout(SandboxError):
    """The sandbox gave no verdict within its budget and a margin: a stalled machine, never the code (the harness
    answers within the budget whatever the code does)."""


@dataclass(frozen=True)
class SandboxLimits:
    """The walls of one judged run. Defaults suit competitive-programming-sized programs.

    `wall_s` and `cpu_s` bound each run (each stdin case, each assert test: NeMo Gym's per-test
    `unit_test_timeout_secs`); `budget_s` the whole (default: `wall_s` plus a second per run); `disk_mb`
    bounds everything written, in all files; `reply_bytes` one answer of the code's, which a test value fits.
    """

    cpu_s: int = 5
    wall_s: float = 10.0
    memory_mb: int = 512
    file_size_mb: int = 8
    max_processes: int = 32
    output_bytes: int = 1 << 20
    disk_mb: int = 64
    max_files: int = 4096
    reply_bytes: int = 8 << 20
    harness_memory_mb: int = 1024
    """The harness's own address space: its interpreter, pytest, the tests, the replies it decodes."""
    open_files: int = 64
    """Each runner's descriptors: what pipes and socket buffers it can pin."""
    budget_s: float | None = None

    def cgroup_bytes(self) -> int:
        """The whole sandbox, as root: a runner, the harness, and the tmpfs its files are charged to."""
        return (self.memory_mb + self.harness_memory_mb + self.disk_mb) << 20

    def budget(self, runs: int) -> float:
        return self.budget_s if self.budget_s is not None else (self.wall_s + 1.0) * max(1, runs)


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


async def run(spec: dict[str, Any], runs: int, limits: SandboxLimits, mode: str | None) -> dict[str, Any]:
    """Run the harness on `spec` (its mode, the solution, the tests) in a fresh one-shot sandbox: its verdict."""
    async with _semaphore():
        chosen: str = mode if mode is not None else await asyncio.to_thread(isolation)  # probed once; off the loop
        return await _start(spec, runs, limits, chosen, binds=())


async def run_pytest(
    package: str,
    files: dict[str, bytes],
    tests: dict[str, str],
    ids: list[str],
    *,
    config: str | None = None,
    limits: SandboxLimits = SandboxLimits(),
    mode: str | None = None,
) -> dict[str, Any]:
    """Run the pytest test `ids` of `tests` (path → text, relative to the rootdir; `config` the ini file among
    them) against `package`, made of `files` (path → bytes, e.g. `pkg/__init__.py`): the code as the policy left
    it, which only runners load. The verdict: `outcomes` (test id → `passed`, `failed`, `skipped`; an asked test
    pytest did not report is missing), `collection_errors`, `collected_untouched` (nothing of the package ran
    while the tests were collected), or `harness_error`."""
    spec = {
        "mode": "pytest",
        "package": package,
        "files": {path: base64.b64encode(data).decode() for path, data in files.items()},
        "tests": tests,
        "ids": ids,
        "config": config,
    }
    async with _semaphore():
        chosen: str = mode if mode is not None else await asyncio.to_thread(isolation)
        binds = tuple((source, f"{TEST_LIB}/{os.path.basename(source)}") for source in pytest_sources())
        return await _start(spec, len(ids), limits, chosen, binds=binds)


@lru_cache(maxsize=1)
def pytest_sources() -> tuple[str, ...]:
    """Where pytest and what it imports are installed here (a package's folder, or a module's file)."""
    found = []
    for name in PYTEST_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        locations = spec.submodule_search_locations
        found.append(list(locations)[0] if locations else spec.origin)
    return tuple(found)


async def _start(
    spec: dict[str, Any], runs: int, limits: SandboxLimits, mode: str, *, binds: tuple[tuple[str, str], ...]
) -> dict[str, Any]:
    if mode not in ("namespaces", "fallback"):
        raise ValueError(f"isolation mode must be `namespaces` or `fallback`, got `{mode}`")
    fallback = mode == "fallback"
    work = make_work_dir() if fallback else "/tmp"
    budget = limits.budget(runs)
    if fallback:  # no mounts: the host's own folders, read in place
        test_lib, read_dirs = "", sorted({os.path.dirname(source) for source, _ in binds})
        spec = {**spec, "test_lib": read_dirs[0] if read_dirs else ""}
    else:
        test_lib, read_dirs = TEST_LIB, [TEST_LIB] if binds else []
        spec = {**spec, "test_lib": test_lib}
    control_read, control_write = os.pipe()
    spec = {
        **spec,
        "work_dir": work,
        "control_fd": control_write,
        "read_dirs": read_dirs,
        "cpu_s": limits.cpu_s,
        "wall_s": limits.wall_s,
        "budget_s": budget,
        "memory_bytes": limits.memory_mb << 20,
        "harness_memory_bytes": limits.harness_memory_mb << 20,
        "file_size_bytes": limits.file_size_mb << 20,
        "open_files": limits.open_files,
        "max_processes": limits.max_processes,
        "output_bytes": limits.output_bytes,
        "max_message_bytes": limits.reply_bytes,
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
        command = namespace_command(harness, disk_mb=limits.disk_mb, max_files=limits.max_files, binds=binds)
    cgroup = await asyncio.to_thread(oneshot_cgroup, limits.cgroup_bytes(), limits.max_processes + HARNESS_PROCESSES)
    command = in_cgroup(cgroup, command)  # as root: the shell joins it before `setpriv`, so all is born in it
    try:
        try:
            result = await _execute(command, work, json.dumps(spec).encode() + b"\n", (control_read, control_write),
                                    budget + _START_S, fallback)  # fmt: skip
        except SandboxError:  # no verdict: the OOM killer may have taken the harness, for the code's memory
            if await _oom_kills(cgroup) == 0:
                raise
            result = {"solution_ran": True}
        if await _oom_kills(cgroup):  # the code filled the sandbox's memory: a 0, whatever the verdict said
            result["harness_error"] = f"out of memory: the sandbox's {limits.cgroup_bytes() >> 20} MB were used up"
        if "harness_error" in result:  # fail closed: whatever broke the harness, no verdict is no pass
            why = f"harness error: {result['harness_error']}"
            failed: dict[str, Any] = {"exit_code": None, "stdout": "", "stderr": why, "timed_out": False}
            failed |= {"output_exceeded": False, "disk_exceeded": False, "wall_s": 0.0}
            result |= {"tests": [["fail", why]] * runs, "runs": [failed] * runs}
        return result
    finally:
        if cgroup is not None:  # everything in it is the sandbox's: nothing is left, then neither is the cgroup
            await asyncio.to_thread(cgroup.kill)
            await asyncio.to_thread(cgroup.remove)
        if fallback:
            remove_work_dir(work)


async def _oom_kills(cgroup: Cgroup | None) -> int:
    return 0 if cgroup is None else await asyncio.to_thread(cgroup.oom_kills)


async def _execute(
    command: list[str], work: str, spec: bytes, control: tuple[int, int], deadline: float, fallback: bool
) -> dict[str, Any]:
    started = time.perf_counter()
    control_read, control_write = control
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,  # nothing the harness or a test prints is read: the verdict has a fd
            stderr=asyncio.subprocess.PIPE,
            cwd="/",  # the harness's, never the work dir the solution writes
            env=host.minimal_env(work),
            start_new_session=True,  # its own process group, killed as a whole
            pass_fds=(control_write,),
        )
    except BaseException:
        os.close(control_read)
        raise
    finally:
        os.close(control_write)  # the harness holds the only writing end: its end is the channel's end
    groups: list[int] = []
    verdict: list[bytes] = []
    assert proc.stderr is not None  # a PIPE

    async def control_lines() -> None:
        reader = asyncio.StreamReader(limit=1 << 30)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(control_read, "rb", 0)
        )
        try:
            async for line in reader:
                if fallback and line.startswith(b"group "):
                    groups.append(int(line.split()[1]))
                elif line.startswith(b"verdict "):
                    verdict.append(line[len(b"verdict ") :])
        finally:
            transport.close()

    async def stderr_tail() -> bytes:
        tail = b""
        assert proc.stderr is not None
        async for line in proc.stderr:
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

    reading = asyncio.ensure_future(control_lines())
    try:
        _, err, _ = await asyncio.wait_for(
            asyncio.gather(_feed(proc, spec), stderr_tail(), ended()),
            timeout=deadline,
        )
        await asyncio.wait_for(asyncio.shield(reading), timeout=5.0)  # the harness has ended: its pipe is closed
    except TimeoutError as e:
        raise SandboxTimeout(f"the sandbox gave no verdict within {deadline:.0f} s (its budget and start-up)") from e
    finally:
        reading.cancel()
        await _stop(proc, groups, fallback, sweep=fallback and not swept)
    try:
        result = json.loads(verdict[-1]) if verdict else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        raise SandboxError(
            f"the sandbox's harness gave no verdict (exit code {proc.returncode} after "
            f"{time.perf_counter() - started:.1f} s): {err.decode(errors='replace').strip()[-500:]}"
        )
    return result


async def _feed(proc: asyncio.subprocess.Process, spec: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(spec)
        await proc.stdin.drain()
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass


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
